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
//!
//! A value in `env` or `headers` that is not in that reference form
//! ([`is_reference_form`]) is a *literal*: registries refuse to store one
//! ([`McpServerSpec::literal_values`], [`LiteralValue::fix`]) and show one stored before
//! that rule only masked ([`McpServerSpec::masked`]).

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

/// What a masked value reads: a value that is not a reference is never shown.
pub const MASK: &str = "***";

/// The longest scheme word a reference may follow (`Bearer `, `Basic `, `Token `).
const MAX_SCHEME_PREFIX: usize = 16;

/// Whether an `env` or `headers` value names its secret instead of holding it: one or
/// more `${NAME}` references with nothing between or after them, after at most a short
/// scheme word of letters and spaces (`${GITHUB_TOKEN}`, `Bearer ${GITHUB_TOKEN}`,
/// `${USER}${PASS}`). An empty value holds nothing and counts as a reference. We cannot
/// tell a secret from other text, so anything else is a literal, e.g. `sk-live-…`,
/// `production`, or `Bearer sk-… ${X}`.
pub fn is_reference_form(value: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    let Some(start) = value.find("${") else {
        return false;
    };
    let prefix = &value[..start];
    if prefix.len() > MAX_SCHEME_PREFIX
        || !prefix.chars().all(|c| c.is_ascii_alphabetic() || c == ' ')
    {
        return false;
    }
    let mut rest = &value[start..];
    while !rest.is_empty() {
        let Some(after) = rest.strip_prefix("${") else {
            return false;
        };
        let Some(end) = after.find('}') else {
            return false;
        };
        let name = &after[..end];
        if name.is_empty() || name.contains("${") {
            return false;
        }
        rest = &after[end + 1..];
    }
    true
}

/// An `env` or `headers` entry whose value is a literal (not [`is_reference_form`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteralValue {
    /// `env` or `headers`.
    pub field: &'static str,
    /// The variable or header name (never the value).
    pub key: String,
    /// The scheme word the value starts with (`Bearer`, `Basic`, `Token`), kept in the
    /// suggested fix; never any other part of the value.
    scheme: Option<&'static str>,
}

impl LiteralValue {
    /// `env.KEY` or `headers.KEY`.
    pub fn path(&self) -> String {
        format!("{}.{}", self.field, self.key)
    }

    /// The credential name the fix suggests: the key in upper case, every character
    /// outside `[A-Z0-9_]` made `_`, starting with a letter.
    pub fn credential(&self) -> String {
        let mut name: String = self
            .key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            name.insert_str(0, "MCP_");
        }
        name
    }

    /// The value to write instead: `${NAME}`, or `Bearer ${NAME}` for a bearer header.
    pub fn reference(&self) -> String {
        match self.scheme {
            Some(scheme) => format!("{scheme} ${{{}}}", self.credential()),
            None => format!("${{{}}}", self.credential()),
        }
    }

    /// Why it is refused and what to write instead (names the key, never the value).
    pub fn fix(&self) -> String {
        format!(
            "holds a literal value, which would be stored in clear and shown to everyone who can read the entry; write `{}: \"{}\"`, add `{}` to `credentials`, and have the operator's credentials policy serve it (`{}: {{provider: env}}` or `{{provider: vault}}`)",
            self.key,
            self.reference(),
            self.credential(),
            self.credential(),
        )
    }
}

impl std::fmt::Display for LiteralValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.field, self.key)
    }
}

/// The scheme word a literal header value starts with, if it is one of the usual ones.
fn scheme_of(value: &str) -> Option<&'static str> {
    let word = value.split(' ').next().unwrap_or_default();
    ["Bearer", "Basic", "Token"]
        .into_iter()
        .find(|s| s.eq_ignore_ascii_case(word) && value.len() > word.len())
}

impl McpServerSpec {
    /// The `env` and `headers` entries holding literal values, by key.
    pub fn literal_values(&self) -> Vec<LiteralValue> {
        let (field, map) = match &self.launch {
            Launch::Stdio(l) => ("env", &l.env),
            Launch::Http(h) => ("headers", &h.headers),
        };
        map.iter()
            .filter(|(_, v)| !is_reference_form(v))
            .map(|(k, v)| LiteralValue {
                field,
                key: k.clone(),
                scheme: if field == "headers" {
                    scheme_of(v)
                } else {
                    None
                },
            })
            .collect()
    }

    /// The spec with every literal `env` and `headers` value replaced by [`MASK`]: the
    /// only form in which a spec is shown.
    pub fn masked(&self) -> McpServerSpec {
        let mut out = self.clone();
        let map = match &mut out.launch {
            Launch::Stdio(l) => &mut l.env,
            Launch::Http(h) => &mut h.headers,
        };
        for v in map.values_mut() {
            if !is_reference_form(v) {
                MASK.clone_into(v);
            }
        }
        out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_references_are_reference_form() {
        for ok in ["${TOKEN}", "Bearer ${TOKEN}", "Basic ${USER}${PASS}", ""] {
            assert!(is_reference_form(ok), "{ok}");
        }
        for literal in [
            "sk-live-123",
            "production",
            "Bearer sk-live-123",
            "sk-live-123${TOKEN}",
            "${TOKEN}sk-live-123",
            "${A}:${B}",
            "Bearer sk-1 ${TOKEN}",
            "${}",
            "${unclosed",
            "$${ESCAPED}",
            "averyveryverylongprefix ${T}",
        ] {
            assert!(!is_reference_form(literal), "{literal}");
        }
    }

    fn stdio(env: &[(&str, &str)]) -> McpServerSpec {
        McpServerSpec {
            name: "s".into(),
            launch: Launch::Stdio(StdioLaunch {
                command: "npx".into(),
                args: vec![],
                env: env
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                network: None,
            }),
            timeout: DEFAULT_TIMEOUT,
            credentials: vec![],
        }
    }

    #[test]
    fn literal_values_are_named_and_masked_never_quoted() {
        let spec = stdio(&[
            ("OPENAI_API_KEY", "sk-proj-abc123"),
            ("SLACK_BOT_TOKEN", "xoxb-1-2-3"),
            ("GITHUB", "${GITHUB_TOKEN}"),
        ]);
        let literals = spec.literal_values();
        let paths: Vec<String> = literals.iter().map(LiteralValue::path).collect();
        assert_eq!(paths, ["env.OPENAI_API_KEY", "env.SLACK_BOT_TOKEN"]);
        let fix = literals[0].fix();
        assert!(
            fix.contains("${OPENAI_API_KEY}") && !fix.contains("sk-proj"),
            "{fix}"
        );
        let masked = serde_json::to_string(&spec.masked()).unwrap_or_default();
        assert!(
            !masked.contains("sk-proj") && !masked.contains("xoxb"),
            "{masked}"
        );
        assert!(masked.contains("${GITHUB_TOKEN}"), "{masked}");

        let http = McpServerSpec {
            launch: Launch::Http(HttpLaunch {
                url: "https://a.example/mcp".into(),
                headers: [("Authorization".to_owned(), "Bearer ghp_x".to_owned())].into(),
            }),
            ..stdio(&[])
        };
        let fix = http.literal_values()[0].fix();
        assert!(
            fix.contains("Bearer ${AUTHORIZATION}") && !fix.contains("ghp_"),
            "{fix}"
        );
    }
}
