//! A server's tool definitions are untrusted: names are made to fit our name rule,
//! schemas may only hold local `$ref`s, and schemas and descriptions are capped.

use serde_json::Value;

use crate::client::{ClientLimits, McpTool, ToolHints};
use crate::error::McpError;

/// One tool as the server listed it, before sanitising.
#[derive(Debug, Clone)]
pub struct RawTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Its input schema.
    pub input_schema: Value,
    /// Its output schema.
    pub output_schema: Option<Value>,
    /// Its hints.
    pub hints: ToolHints,
}

/// What sanitising a listing gave: the tools, and one warning per tool skipped.
#[derive(Debug, Clone, Default)]
pub struct Sanitized {
    /// The tools kept.
    pub tools: Vec<McpTool>,
    /// Why tools were skipped (each names the server and the tool).
    pub warnings: Vec<String>,
}

/// Sanitises a server's listing.
pub fn sanitize_tools(
    server: &str,
    raw: Vec<RawTool>,
    limits: &ClientLimits,
) -> Result<Sanitized, McpError> {
    let _ = (server, raw, limits);
    todo!()
}
