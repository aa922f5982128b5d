//! MCP servers' tools in an agent: how agent.yaml and the project name servers
//! (`config`), and how they become the agent's tools (`load`).
//!
//! A server is named three ways: bread's `plugins.mcp_client.servers.NAME` (or
//! `mcpServers`), AgentBreeder's top-level `mcp_servers: [{ref: mcp/NAME, url}]`, and
//! `tools: [{ref: mcp-servers/NAME}]`, which resolves NAME from the agent's own servers,
//! then `mcp-servers/NAME.(yaml|yml|json)` in the project, then the registry. Every
//! server the agent names joins: its tools are `<server>__<tool>` unless its options
//! say otherwise (`prefix`, `include`, `exclude`, `overrides`).

mod config;
mod load;

pub use config::{McpServerEntry, McpServerRef, McpToolOptions, ToolOverride};
pub(crate) use config::{parse_mcp_client, parse_mcp_servers, parse_options};
pub use load::{AgentMcp, LoadedMcpServer};
pub(crate) use load::{load, resolve};
