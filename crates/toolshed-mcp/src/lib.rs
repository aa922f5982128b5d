//! MCP for toolshed.
//!
//! - [`spec`]: how to reach one MCP server ([`McpServerSpec`]): the shape the
//!   registry stores, agent.yaml names and discovery reads from the clients' config
//!   files.
//! - [`client`]: connections to MCP servers (stdio in the sandbox, Streamable HTTP), their
//!   tools as pipeline tools.
//! - `server`: a toolset exposed over MCP, every `tools/call` a durable run.
//! - [`discovery`]: the MCP servers configured on this machine (`toolshed scan`).
//!
//! Everything an MCP peer sends is untrusted: its messages, schemas, descriptions and
//! names are checked and capped before anything else sees them.

pub mod client;
pub mod discovery;
pub mod error;
pub mod sanitize;
pub mod server;
pub mod spec;

pub use client::{
    ClientConfig, ClientLimits, Era, McpHub, McpServer, McpTool, SandboxProfile, ServerInfo,
    ToolHints, parse_endpoint, tool,
};
pub use error::{McpCode, McpError};
pub use spec::{HttpLaunch, Launch, McpServerSpec, StdioLaunch};
