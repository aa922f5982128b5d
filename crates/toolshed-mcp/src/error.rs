//! The MCP layer's typed errors and their stable codes.

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// Stable, machine-readable codes of [`McpError`]. Every code is listed, with what
    /// to do about it, in `docs/errors.md`.
    #[non_exhaustive]
    pub enum McpCode {
        /// A server spec is invalid (the message names the field).
        InvalidMcpSpec,
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
#[derive(Debug, thiserror::Error)]
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
}

impl McpError {
    /// The stable code.
    pub fn code(&self) -> McpCode {
        match self {
            McpError::InvalidSpec { .. } => McpCode::InvalidMcpSpec,
        }
    }

    pub(crate) fn spec(server: &str, field: &str, reason: impl Into<String>) -> McpError {
        McpError::InvalidSpec {
            server: server.to_owned(),
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}
