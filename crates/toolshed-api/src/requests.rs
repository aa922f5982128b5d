//! The request bodies the API takes. Unknown fields are refused, so a misspelt field is a
//! 422 naming it rather than silently ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    /// The user name.
    #[schema(min_length = 1)]
    pub username: String,
    /// The password.
    #[schema(min_length = 1)]
    pub password: String,
}

/// A new user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
