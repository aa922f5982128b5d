//! The request bodies the API takes. Unknown fields are refused, so a misspelt field is a
//! 422 naming it rather than silently ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A login: the user name (as `username`, or as `email`, the name AgentBreeder's CLI
/// sends) and the password. `Debug` prints the password as `***`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    /// The user name. Required unless `email` is given.
    #[serde(default)]
    pub username: Option<String>,
    /// Another name for `username` (AgentBreeder's CLI sends `email`); give one of the
    /// two.
    #[serde(default)]
    pub email: Option<String>,
    /// The password.
    #[schema(min_length = 1)]
    pub password: String,
}

impl std::fmt::Debug for LoginBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginBody")
            .field("username", &self.username)
            .field("email", &self.email)
            .field("password", &"***")
            .finish()
    }
}

/// A refresh: the refresh token a login gave, for a new access token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefreshBody {
    /// The `refresh_token` of a login (or of an earlier refresh).
    pub refresh_token: String,
}

/// A password change by the user itself: the current password and the new one.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordBody {
    /// The current password. Required unless `old_password` is given.
    #[serde(default)]
    pub current_password: Option<String>,
    /// Another name for `current_password` (AgentBreeder's CLI sends `old_password`);
    /// give one of the two.
    #[serde(default)]
    pub old_password: Option<String>,
    /// The new password, at least 8 characters.
    pub new_password: String,
}

/// An admin's change to a user: any of role, tenant and password (left out: kept).
/// Every change ends the user's tokens.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserChangeBody {
    /// `viewer`, `deployer` or `admin`.
    #[serde(default)]
    pub role: Option<String>,
    /// The tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// A new password, at least 8 characters.
    #[serde(default)]
    pub password: Option<String>,
}

/// A new user. `Debug` prints the password as `***`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUserBody {
    /// The user name: 1-64 letters, digits, `.`, `_`, `-` or `@`.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._@-]{1,64}$")]
    pub username: String,
    /// At least 8 characters.
    #[schema(min_length = 8)]
    pub password: String,
    /// `viewer`, `deployer`, `admin` or `owner` (an owner is added only by an owner).
    pub role: String,
    /// The tenant (default: the caller's). An admin adds users to its own tenant only;
    /// an owner to any.
    #[serde(default)]
    pub tenant: Option<String>,
}

impl std::fmt::Debug for NewUserBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewUserBody")
            .field("username", &self.username)
            .field("password", &"***")
            .field("role", &self.role)
            .field("tenant", &self.tenant)
            .finish()
    }
}

/// A tool registration: the seed's fields plus any `tool.yaml` field (`output_schema`,
/// `version`, `team`, `owner`, `tags`, `timeout_seconds`, `timeout_ms`, `effects`,
/// `idempotency`, `approval`, `max_attempts`, `retry`, `credentials`, …). Unknown
/// fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolRegistration {
    /// `^[A-Za-z0-9_-]{1,64}$`, e.g. `order-lookup`.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    /// Shown in the registry and to models; must not be empty or only blanks.
    #[schema(min_length = 1, pattern = "\\S")]
    pub description: String,
    /// `function` (default), `mcp` or `api`.
    pub tool_type: Option<String>,
    /// The input JSON Schema (inferred from the code for `python:`/`node:` endpoints
    /// when left out).
    #[schema(value_type = Option<Object>)]
    pub schema_definition: Option<Value>,
    /// `builtin:<name>`, `python:<abs_path>[:fn]`, `node:<abs_path>[:export]`,
    /// `exec:<path>` or `http(s)://…`.
    pub endpoint: Option<String>,
    /// Where it came from (default `manual`).
    pub source: Option<String>,
    /// Updates only: the revision you last saw; a different current revision is 409.
    pub expected_revision: Option<u32>,
    /// The tool's code, uploaded: the endpoint then names a file inside it
    /// (`python:order_lookup.py:order_lookup`, `node:src/index.mjs`, `exec:bin/tool`).
    pub code: Option<CodeUpload>,
}

/// Uploaded code: an uncompressed tar of regular files and folders (relative paths; no
/// links, devices, `..` or duplicates), base64-encoded. `requirements.txt` and
/// `package.json` at its root are installed by the server, once per content hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeUpload {
    /// The tar archive, base64 (standard alphabet, padded).
    pub archive_base64: String,
    /// The SHA-256 of the decoded archive (hex); when given, the server checks it.
    #[serde(default)]
    pub sha256: Option<String>,
}

/// What to execute with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteBody {
    /// The arguments (a JSON object; `{}` when left out).
    #[schema(value_type = Option<Object>)]
    #[serde(default)]
    pub args: Option<Value>,
}

/// Why a call is decided or a run cancelled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    /// Why (recorded with the decision).
    pub reason: Option<String>,
}

/// A human tool's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// The answer, checked against the tool's answer schema.
    #[schema(value_type = Value)]
    pub answer: Value,
}

/// The seed's Sandbox Test body (`code`, `input_json`, `timeout_seconds`,
/// `network_enabled`, `tool_id`), plus `language` and `memory_mb`. Give `code`, or a
/// `tool_id` alone to run that registered tool's own code. Unknown fields are refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxExecuteBody {
    /// The code: Python defining `run(input)`, a Node module exporting `run`, or a shell
    /// script reading its input on stdin (see `language`).
    #[serde(default)]
    pub code: Option<String>,
    /// The input passed to `run` (any JSON; `{}` when left out).
    #[schema(value_type = Option<Value>)]
    #[serde(default)]
    pub input_json: Option<Value>,
    /// Wall-clock limit in seconds (default 30); above the server's ceiling it is
    /// lowered to it and listed in `clamped`.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Outbound network access (default false); lowered to false, and listed in
    /// `clamped`, where the server allows none.
    #[serde(default)]
    pub network_enabled: Option<bool>,
    /// With `code`: the registered tool this is a test of, recorded with the execution.
    /// Alone: the registered tool (id or name) whose own code runs on `input_json`.
    #[serde(default)]
    pub tool_id: Option<String>,
    /// `python` (default), `node` or `bash`.
    #[serde(default)]
    pub language: Option<crate::views::SandboxLanguage>,
    /// Memory limit in MB, swap included (default 256); above the server's ceiling it is
    /// lowered to it and listed in `clamped`.
    #[serde(default)]
    pub memory_mb: Option<u64>,
}

impl std::fmt::Debug for ChangePasswordBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masked = |p: &Option<String>| p.as_ref().map(|_| "***");
        f.debug_struct("ChangePasswordBody")
            .field("current_password", &masked(&self.current_password))
            .field("old_password", &masked(&self.old_password))
            .field("new_password", &"***")
            .finish()
    }
}

impl std::fmt::Debug for UserChangeBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserChangeBody")
            .field("role", &self.role)
            .field("tenant", &self.tenant)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_a_password() {
        let login = LoginBody {
            username: Some("ann".into()),
            email: None,
            password: "hunter2-secret".into(),
        };
        let user = NewUserBody {
            username: "ann".into(),
            password: "hunter2-secret".into(),
            role: "admin".into(),
            tenant: None,
        };
        let token: crate::views::TokenView = serde_json::from_value(serde_json::json!(
            {"token": "eyJ.hunter2-token.sig", "access_token": "eyJ.hunter2-token.sig",
             "token_type": "bearer", "expires_in": 60, "refresh_token": "eyJ.hunter2-refresh.sig",
             "refresh_expires_in": 3600, "role": "admin"}
        ))
        .unwrap_or_else(|e| panic!("a token view: {e}"));
        let change = ChangePasswordBody {
            current_password: Some("hunter2-old".into()),
            old_password: Some("hunter2-old".into()),
            new_password: "hunter2-new".into(),
        };
        let patch = UserChangeBody {
            password: Some("hunter2-new".into()),
            ..UserChangeBody::default()
        };
        for text in [
            format!("{change:?}"),
            format!("{patch:?}"),
            format!("{login:?}"),
            format!("{user:?}"),
            format!("{login:#?}"),
            format!("{token:?}"),
        ] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("***"), "{text}");
        }
    }
}

/// An MCP server entry, registered (`POST /api/v1/mcp-servers`) or changed (`PUT …/{id}`,
/// where every field left out keeps its value). AgentBreeder's fields (`name`,
/// `endpoint`, `transport`, `timeout_seconds`, `description`, `tags`, `team`, and
/// `command` as one string) plus ours: `command` + `args` + `env` for a stdio server, or
/// `url` + `headers` for a Streamable HTTP one; `credentials` (the names `${NAME}` in
/// `env` and `headers` may use), `network`, `enabled`, per-tool `overrides`.
///
/// A stdio command given as one string (`endpoint`, or `command` without `args`) is
/// split as a shell splits words (quotes and backslashes), and never run by a shell:
/// `;`, `|` or `$(…)` are just characters of an argument.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerBody {
    /// The server's name, unique in the tenant: `^[A-Za-z0-9_-]{1,30}$`, no `__`. Its
    /// tools are registered as `<name>__<tool>`. Required to register.
    #[serde(default)]
    pub name: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// `stdio` (the default without `url`), `streamable_http` or `http` (the same), or
    /// `sse` (served over Streamable HTTP).
    #[serde(default)]
    pub transport: Option<String>,
    /// AgentBreeder's endpoint: the URL of an HTTP server, or a stdio server's command
    /// line.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// A stdio server's program; with no `args`, a whole command line.
    #[serde(default)]
    pub command: Option<String>,
    /// The program's arguments, each as is.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// A stdio server's whole environment. Values name credentials as `${NAME}`
    /// (`"OPENAI_API_KEY": "${OPENAI_API_KEY}"`, the name in `credentials`); a literal
    /// value is refused (422 naming the key), so no secret is stored in clear.
    #[serde(default)]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// A Streamable HTTP server's URL (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent to a Streamable HTTP server. Values name credentials as `${NAME}`
    /// (`Authorization: Bearer ${GITHUB_TOKEN}`); a literal value is refused.
    #[serde(default)]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// The credentials `env` and `headers` name; each must be in the server's
    /// credentials policy for the tenant.
    #[serde(default)]
    pub credentials: Option<Vec<String>>,
    /// Whether a stdio server may reach the network (default: on for package runners
    /// such as `npx` and `uvx`, which download on first start; off otherwise).
    #[serde(default)]
    pub network: Option<bool>,
    /// Whether a discover that finds a tool's definition changed makes it active at
    /// once (default false: the change waits until an admin accepts it). Turning it on
    /// needs the admin role.
    #[serde(default)]
    pub auto_accept: Option<bool>,
    /// How long one MCP request may take, 1 to 3600 seconds (default 30).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 3600)]
    pub timeout_seconds: Option<u64>,
    /// Free-form labels.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// The owning team.
    #[serde(default)]
    pub team: Option<String>,
    /// Whether its tools may run (default true through the API). Enabling an entry
    /// that is disabled needs the admin role.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Per tool (as the server names it): `effects` (`none`, `sandbox`, `external`),
    /// `idempotency` (`keyed`, `none`) and `approval` (`never`, `always`, `{when: CEL}`),
    /// replacing the defaults its hints give. Applied by the next discover.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub overrides: Option<std::collections::BTreeMap<String, McpToolOverride>>,
    /// Where it came from: `api` (the default), `cli`, or `scan:<file>` (what
    /// `toolshed scan --register` sends).
    #[serde(default)]
    pub source: Option<String>,
    /// For updates: the revision last seen (a different current one is a 409).
    #[serde(default)]
    pub expected_revision: Option<u32>,
    /// AgentBreeder's `status`: accepted and ignored (the registry sets it from tests
    /// and discovers).
    #[serde(default)]
    pub status: Option<String>,
}

/// Which held-back MCP tool changes to accept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpAcceptBody {
    /// The tools, as the server names them or by registry name; every tool with a
    /// change waiting when left out.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// The registry owner's choice for one MCP tool; a field left out keeps the default its
/// hints give.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpToolOverride {
    /// `none`, `sandbox` or `external`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects: Option<String>,
    /// `keyed` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<String>,
    /// `never`, `always`, or `{"when": "<CEL>"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
}
