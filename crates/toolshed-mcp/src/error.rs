//! The MCP layer's typed errors and their stable codes.

use std::time::Duration;

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// Stable, machine-readable codes of [`McpError`]. Every code is listed, with what
    /// to do about it, in `docs/errors.md`.
    #[non_exhaustive]
    pub enum McpCode {
        /// A server spec is invalid (the message names the field).
        InvalidMcpSpec,
        /// A stdio server was asked for but no sandbox is configured (and the developer
        /// opt-in `unsandboxed` is off).
        McpSandboxRequired,
        /// The server could not be started or reached (spawn failed, connection refused).
        McpStartFailed,
        /// The handshake (`initialize`, or `server/discover`) failed or timed out.
        McpHandshakeFailed,
        /// The server broke the protocol: non-JSON on stdout, an oversized message, a
        /// malformed answer.
        McpProtocolViolation,
        /// The connection was lost (the process exited, the stream closed).
        McpServerDied,
        /// The server failed recently and is not restarted until its backoff ends.
        McpBackingOff,
        /// The server answered a request with a JSON-RPC error.
        McpRequestFailed,
        /// The server did not answer a request within the spec's timeout.
        McpTimeout,
        /// The server's tool list broke a cap (tools, pages) or looped on a cursor.
        McpToolListRejected,
        /// Two tools of one listing sanitise to the same name.
        McpToolNameCollision,
        /// The HTTP server's address is one the SSRF guard refuses.
        McpAddressRefused,
        /// A `${NAME}` in `env` or `headers` could not be resolved.
        McpCredentialFailed,
        /// An endpoint string is not `mcp:<server>/<tool>`.
        McpInvalidEndpoint,
        /// A client's MCP config file (`.mcp.json`, `~/.claude.json`, …) exists but
        /// cannot be read.
        McpConfigUnreadable,
        /// A client's MCP config file, or one server's entry in it, is not valid (the
        /// message names the file, line, column and field).
        McpConfigInvalid,
        /// A server's config uses a variable that is not set and has no default.
        McpConfigVariable,
    }
}

/// Why an MCP operation failed. Messages name the server and the field, never a
/// credential value.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A server spec is invalid.
    #[error("MCP server `{server}`: {field}: {reason}")]
    InvalidSpec {
        /// The server's name (or `?` when the name itself is wrong).
        server: String,
        /// The field, e.g. `command` or `url`.
        field: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A stdio server without a sandbox.
    #[error(
        "MCP server `{server}`: stdio servers run only in the sandbox, and none is configured; configure the sandbox (`toolshed sandbox check` says what the host lacks)"
    )]
    SandboxRequired {
        /// The server.
        server: String,
    },
    /// Starting or reaching the server failed.
    #[error("MCP server `{server}`: cannot start: {reason}")]
    Start {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// The handshake failed.
    #[error("MCP server `{server}`: handshake failed: {reason}")]
    Handshake {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// The server broke the protocol.
    #[error("MCP server `{server}`: {reason}")]
    Protocol {
        /// The server.
        server: String,
        /// What it did.
        reason: String,
    },
    /// The connection was lost.
    #[error("MCP server `{server}`: the connection was lost: {reason}")]
    Died {
        /// The server.
        server: String,
        /// What is known (exit status, the end of stderr).
        reason: String,
    },
    /// The server is backing off after failures.
    #[error(
        "MCP server `{server}`: not restarted for another {} ms after {failures} failure(s) in a row; the last: {last}",
        retry_in.as_millis()
    )]
    BackingOff {
        /// The server.
        server: String,
        /// How long until the next start is tried.
        retry_in: Duration,
        /// Failures in a row.
        failures: u32,
        /// The last failure's message.
        last: String,
    },
    /// A JSON-RPC error answer.
    #[error("MCP server `{server}`: `{method}` failed: {reason}")]
    Request {
        /// The server.
        server: String,
        /// The method, e.g. `tools/list`.
        method: String,
        /// The server's error (code and message).
        reason: String,
    },
    /// A request timed out.
    #[error("MCP server `{server}`: `{method}` got no answer within {} s", timeout.as_secs())]
    Timeout {
        /// The server.
        server: String,
        /// The method.
        method: String,
        /// The limit.
        timeout: Duration,
    },
    /// The tool list broke a cap.
    #[error("MCP server `{server}`: tools/list: {reason}")]
    ToolList {
        /// The server.
        server: String,
        /// Which cap, and its value.
        reason: String,
    },
    /// Two tools sanitise to the same name.
    #[error(
        "MCP server `{server}`: tools `{first}` and `{second}` both become `{name}`; rename one on the server"
    )]
    NameCollision {
        /// The server.
        server: String,
        /// The first tool, as the server names it.
        first: String,
        /// The second.
        second: String,
        /// The sanitised name they share.
        name: String,
    },
    /// The SSRF guard refused the address.
    #[error(
        "MCP server `{server}`: `{url}` is refused: {reason}; an operator may allowlist the host or range"
    )]
    AddressRefused {
        /// The server.
        server: String,
        /// The URL.
        url: String,
        /// The address and its kind.
        reason: String,
    },
    /// A credential could not be resolved.
    #[error("MCP server `{server}`: {field}: credential `{name}`: {reason}")]
    Credential {
        /// The server.
        server: String,
        /// Where it was named, e.g. `env.GITHUB_TOKEN` or `headers.Authorization`.
        field: String,
        /// The credential's name (never its value).
        name: String,
        /// Why.
        reason: String,
    },
    /// A malformed endpoint string.
    #[error("`{endpoint}` is not an MCP endpoint: {reason}; write `mcp:<server>/<tool>`")]
    InvalidEndpoint {
        /// What was given.
        endpoint: String,
        /// What is wrong.
        reason: String,
    },
}

impl McpError {
    /// The stable code.
    pub fn code(&self) -> McpCode {
        match self {
            McpError::InvalidSpec { .. } => McpCode::InvalidMcpSpec,
            McpError::SandboxRequired { .. } => McpCode::McpSandboxRequired,
            McpError::Start { .. } => McpCode::McpStartFailed,
            McpError::Handshake { .. } => McpCode::McpHandshakeFailed,
            McpError::Protocol { .. } => McpCode::McpProtocolViolation,
            McpError::Died { .. } => McpCode::McpServerDied,
            McpError::BackingOff { .. } => McpCode::McpBackingOff,
            McpError::Request { .. } => McpCode::McpRequestFailed,
            McpError::Timeout { .. } => McpCode::McpTimeout,
            McpError::ToolList { .. } => McpCode::McpToolListRejected,
            McpError::NameCollision { .. } => McpCode::McpToolNameCollision,
            McpError::AddressRefused { .. } => McpCode::McpAddressRefused,
            McpError::Credential { .. } => McpCode::McpCredentialFailed,
            McpError::InvalidEndpoint { .. } => McpCode::McpInvalidEndpoint,
        }
    }

    /// Whether trying again later may succeed (the server died, timed out, is backing
    /// off or could not be started), as opposed to a spec or a server that is wrong.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            McpError::Start { .. }
                | McpError::Died { .. }
                | McpError::BackingOff { .. }
                | McpError::Timeout { .. }
        )
    }

    pub(crate) fn spec(server: &str, field: &str, reason: impl Into<String>) -> McpError {
        McpError::InvalidSpec {
            server: server.to_owned(),
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

impl From<McpError> for toolshed_core::ToolError {
    /// An MCP failure as the error result a model sees: `HANDLER_ERROR` (retryable
    /// where the failure is), `TIMEOUT` for a timeout, with the MCP code in `details`.
    fn from(e: McpError) -> Self {
        use toolshed_core::ErrorCode;
        let code = match &e {
            McpError::Timeout { .. } => ErrorCode::Timeout,
            _ => ErrorCode::HandlerError,
        };
        toolshed_core::ToolError::new(code, e.to_string())
            .with_details(serde_json::json!({ "mcp_code": e.code().as_str() }))
    }
}
