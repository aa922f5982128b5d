//! The registry's MCP server entries: what is stored and what callers pass in.
//!
//! The store does not know MCP: the spec (a `toolshed_mcp::McpServerSpec`), the
//! per-tool overrides and what a server sent for each tool are JSON the server checked;
//! the store keeps them per tenant, links the entry to the registry tools its discover
//! wrote, synchronises those in one transaction, and holds a tool's changed definition
//! back until an admin accepts it (unless the entry takes changes at once).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{NewTool, ToolRecord};

toolshed_core::wire_enum! {
    case = "snake_case";
    /// What the registry last saw of an MCP server (AgentBreeder's `status`).
    pub enum McpServerStatus {
        /// Registered, never tested or discovered.
        Registered,
        /// The last test or discover reached it.
        Active,
        /// The last test or discover failed (`last_error` says why).
        Error,
    }
}

/// What registering (or replacing) an MCP server entry stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewMcpServer {
    /// The server's name, unique in its tenant.
    pub name: String,
    /// The tenant that owns it (an update keeps the stored owner).
    pub tenant: String,
    /// How to reach it: a `toolshed_mcp::McpServerSpec` as JSON (no secret values).
    pub spec: Value,
    /// The transport as the caller named it: `stdio`, `streamable_http`, `http` or `sse`.
    pub transport: String,
    /// AgentBreeder's `endpoint`: the URL, or the command line of a stdio server.
    pub endpoint: String,
    /// What it is for.
    pub description: String,
    /// Free-form labels.
    pub tags: Vec<String>,
    /// The team that owns it, if any.
    pub team: Option<String>,
    /// Whether its tools may run. Entries from project-scoped config files are
    /// registered disabled until an admin enables them.
    pub enabled: bool,
    /// Where it came from: `api`, `cli`, `scan:<file>`.
    pub source: String,
    /// The registry owner's per-tool overrides: a JSON object, tool name (as the server
    /// names it) → `{effects, idempotency, approval}`.
    pub overrides: Value,
    /// Who registered (or last changed) it.
    pub created_by: String,
    /// Whether a discover that finds a tool's definition changed makes it the active
    /// revision at once. Off by default: the change waits until an admin accepts it.
    #[serde(default)]
    pub auto_accept: bool,
}

/// An MCP server entry as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServerRecord {
    /// Its id (a UUID).
    pub id: String,
    /// What was registered (or last written by an update).
    #[serde(flatten)]
    pub server: NewMcpServer,
    /// What the last test or discover saw.
    pub status: McpServerStatus,
    /// How many registry tools its last discover wrote.
    pub tool_count: u32,
    /// When a test or discover last reached it (milliseconds since the Unix epoch).
    pub last_ping_at_ms: Option<i64>,
    /// Why the last test or discover failed, if it did.
    pub last_error: Option<String>,
    /// 1 when registered, +1 on every update.
    pub revision: u32,
    /// How many of its tools have a changed definition waiting for an admin.
    pub pending_changes: u32,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
}

/// What a test or discover saw of a server, for [`crate::RegistryStore::record_mcp_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpPing {
    /// It answered: `status` active, `last_ping_at` now, `last_error` cleared.
    Reached,
    /// It did not: `status` error and the reason (never a secret; the caller scrubs it).
    Failed(String),
}

/// What a discover synchronised: the tools as stored after it, and which names it
/// added, changed and removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpSync {
    /// The server's registry tools after the sync, by name.
    pub tools: Vec<ToolRecord>,
    /// Names of tools registered by this sync.
    pub added: Vec<String>,
    /// Names of tools given a new revision (their definition changed).
    pub changed: Vec<String>,
    /// Names of tools deleted (the server no longer lists them).
    pub removed: Vec<String>,
    /// Names of tools whose server changed their definition: the change waits for an
    /// admin ([`crate::RegistryStore::accept_mcp_tools`]); the accepted revision stays
    /// active.
    pub pending: Vec<String>,
}

/// One tool a discover found (or an admin accepts): the registry tool to write and what
/// its server sent for it, which is compared with what was last accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpFound {
    /// The registry tool: its `name` is the qualified `<server>__<tool>`, its `tenant`
    /// the server's.
    pub tool: NewTool,
    /// What the server sent for it (a `toolshed_mcp::McpTool` as JSON).
    pub sent: Value,
}

/// The tools a discover found.
pub type McpTools = Vec<McpFound>;

/// A tool whose server changed its definition, waiting for an admin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpPending {
    /// The registry tool as accepted (its active revision, what every client gets).
    pub tool: ToolRecord,
    /// What the server sent when it was last accepted (`None` for a tool linked before
    /// changes were held back).
    pub accepted: Option<Value>,
    /// What the server sends now.
    pub sent: Value,
    /// When a discover first found this change (milliseconds since the Unix epoch).
    pub since_ms: i64,
}
