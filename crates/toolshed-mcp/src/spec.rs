//! How to reach one MCP server.
//!
//! [`McpServerSpec`] is the one shape every source of servers turns into: the
//! registry's entries (`/api/v1/mcp-servers`), agent.yaml's `mcp-servers/NAME` refs and
//! `plugins.mcp_client`, and the clients' config files that `toolshed scan` reads.
//!
//! A spec never holds a secret value. `env` values and `headers` values may name
//! credentials as `${NAME}`; the client resolves them through the call's credential
//! provider (under the server's credentials policy) when it connects, and only names in
//! [`McpServerSpec::credentials`] may be named.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::McpError;

/// The longest server name: with `__` and a 32-character tool name it still fits the
/// 64-character tool-name rule.
pub const MAX_SERVER_NAME: usize = 30;

/// The default time one MCP request may take (AgentBreeder's `timeout_seconds` default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// One MCP server: its name and how to start or reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// The server's name: `^[A-Za-z0-9_-]{1,30}$`. Its tools are named
    /// `<name>__<tool>` by default.
    pub name: String,
    /// How to start or reach it.
    pub launch: Launch,
    /// How long one request may take.
    #[serde(default = "default_timeout", with = "seconds")]
    pub timeout: Duration,
    /// The credentials `env` and `headers` may name as `${NAME}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
}

/// How a server is started or reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum Launch {
    /// A child process speaking newline-delimited JSON-RPC on stdin and stdout.
    Stdio(StdioLaunch),
    /// A Streamable HTTP endpoint.
    #[serde(rename = "streamable_http")]
    Http(HttpLaunch),
}

/// A stdio server: the command, run in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdioLaunch {
    /// The program: a name looked up in the sandbox's `/usr/local/bin`, `/usr/bin` and
    /// `/bin` (`npx`, `uvx`, `node`), or an absolute path.
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its whole environment (values may name credentials as `${NAME}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Whether it may reach the network. `None` means the default of its kind: on for
    /// package runners (`npx`, `uvx`, …, which download on first start), off for a
    /// server pinned to a local path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
}

/// A Streamable HTTP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpLaunch {
    /// Its endpoint, `http://` or `https://`.
    pub url: String,
    /// Headers sent with every request (values may name credentials as `${NAME}`, e.g.
    /// `Authorization: Bearer ${GITHUB_TOKEN}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

impl McpServerSpec {
    /// Checks the name, the launch and the credential names; errors name the field.
    pub fn validate(&self) -> Result<(), McpError> {
        check_server_name(&self.name)?;
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(3600) {
            return Err(McpError::spec(
                &self.name,
                "timeout_seconds",
                "must be between 1 and 3600",
            ));
        }
        for c in &self.credentials {
            toolshed_core::credentials::check_credential_name(c)
                .map_err(|e| McpError::spec(&self.name, "credentials", e.message))?;
        }
        match &self.launch {
            Launch::Stdio(s) => {
                if s.command.trim().is_empty() {
                    return Err(McpError::spec(
                        &self.name,
                        "command",
                        "must not be empty; e.g. `npx` with args `[\"-y\", \"@modelcontextprotocol/server-everything\"]`",
                    ));
                }
                for key in s.env.keys() {
                    if key.is_empty() || key.contains('=') || key.contains('\0') {
                        return Err(McpError::spec(
                            &self.name,
                            "env",
                            format!("`{key}` is not an environment variable name"),
                        ));
                    }
                }
            }
            Launch::Http(h) => {
                let url = url_scheme(&h.url);
                if url != Some("http") && url != Some("https") {
                    return Err(McpError::spec(
                        &self.name,
                        "url",
                        format!("`{}` is not an http:// or https:// URL", h.url),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn url_scheme(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    (!rest.is_empty()).then_some(scheme)
}

/// Checks an MCP server name: `^[A-Za-z0-9_-]{1,30}$`, with no `__` (which separates a
/// server's name from its tools' names).
pub fn check_server_name(name: &str) -> Result<(), McpError> {
    let bad = |reason: String| {
        Err(McpError::spec(
            if name.is_empty() { "?" } else { name },
            "name",
            reason,
        ))
    };
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return bad(format!("must be 1 to {MAX_SERVER_NAME} characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return bad(format!(
            "contains {c:?}; use only letters, digits, `_` and `-`"
        ));
    }
    if name.contains("__") {
        return bad(
            "must not contain `__`, which separates a server's name from its tools' names".into(),
        );
    }
    Ok(())
}
