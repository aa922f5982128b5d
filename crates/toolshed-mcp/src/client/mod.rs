//! The MCP client: connections to MCP servers and their tools as pipeline tools.
//!
//! [`McpHub`] owns every connection, keyed by `(scope, server name)`: a scope is a
//! tenant id or an agent id, so two tenants naming the same server never share a
//! process or a credential. [`McpHub::server`] hands out an [`McpServer`], which connects
//! on first use (stdio in the sandbox, or Streamable HTTP through the SSRF guard), lists
//! its tools ([`McpTool`], sanitised by [`crate::sanitize`]) and calls them, mapping each
//! `tools/call` onto a pipeline [`Reply`].
//!
//! Everything a server sends is untrusted: names, schemas, descriptions and results are
//! checked and capped before anything else sees them (see `docs/design/mcp.md`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//!
//! use toolshed_core::{EnvProvider, ToolContext};
//! use toolshed_mcp::{ClientConfig, Launch, McpHub, McpServerSpec, StdioLaunch};
//!
//! let mut config = ClientConfig::new("/var/cache/toolshed/mcp");
//! config.sandbox = Some(toolshed_sandbox::Sandbox::new(Default::default())?);
//! let hub = McpHub::new(config);
//! let spec = McpServerSpec {
//!     name: "everything".into(),
//!     launch: Launch::Stdio(StdioLaunch {
//!         command: "npx".into(),
//!         args: vec!["-y".into(), "@modelcontextprotocol/server-everything".into()],
//!         env: Default::default(),
//!         network: None, // a package runner: on, with a persistent package cache
//!     }),
//!     timeout: std::time::Duration::from_secs(60),
//!     credentials: vec![],
//! };
//! let server = hub.server("tenant-a", &spec, Arc::new(EnvProvider), None);
//! for tool in server.tools().await? {
//!     println!("{} ({})", tool.qualified_name, tool.endpoint());
//! }
//! let reply = server
//!     .call("echo", serde_json::json!({"message": "hi"}), &ToolContext::detached("everything__echo"))
//!     .await;
//! println!("{:?}", reply.output);
//! hub.shutdown().await;
//! # Ok(()) }
//! ```

mod call;
mod conn;
mod handler;
mod http;
mod profile;
mod stdio;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshed_core::spec::{Approval, Effects, Idempotency, ToolMeta, ToolSpec};
use toolshed_core::tool::Reply;
use toolshed_core::{CredentialProvider, Principal, SpecError, Tool, ToolContext};

use crate::error::McpError;
use crate::spec::{Launch, McpServerSpec};

pub use profile::SandboxProfile;

/// How the hub starts and reaches servers.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Where stdio servers run. `None`: stdio servers are refused with a clear error
    /// (never run unsandboxed), unless [`ClientConfig::unsandboxed`] is set.
    pub sandbox: Option<toolshed_sandbox::Sandbox>,
    /// A developer's opt-in to run stdio servers as plain child processes (tests on a
    /// host without the sandbox, the client benchmark). Never the default.
    pub unsandboxed: bool,
    /// Per-server package caches persist under `<cache_root>/<scope>/<server>` (the npm
    /// and uv caches of `npx -y` and `uvx`).
    pub cache_root: PathBuf,
    /// The SSRF guard for Streamable HTTP servers.
    pub http_policy: toolshed_dispatch::HttpPolicy,
    /// Caps on what a server may send.
    pub limits: ClientLimits,
    /// Read-only binds every stdio server gets besides the sandbox's root (e.g. a
    /// folder of locally installed servers and their `node_modules`); executable.
    pub binds: Vec<toolshed_sandbox::Bind>,
}

impl ClientConfig {
    /// A config with `cache_root` and everything else at its default: no sandbox (stdio
    /// refused until one is set), public HTTP addresses only, the default limits.
    pub fn new(cache_root: impl Into<PathBuf>) -> ClientConfig {
        ClientConfig {
            sandbox: None,
            unsandboxed: false,
            cache_root: cache_root.into(),
            http_policy: toolshed_dispatch::HttpPolicy::default(),
            limits: ClientLimits::default(),
            binds: Vec::new(),
        }
    }
}

/// Caps on what one server may send. Anything over a cap is refused or cut, with a
/// message naming the server and the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientLimits {
    /// The most tools one server may list (all pages together).
    pub max_tools: usize,
    /// The most `tools/list` pages read.
    pub max_pages: usize,
    /// The largest input or output schema, serialized, in bytes.
    pub max_schema_bytes: usize,
    /// The longest tool description, in bytes (longer ones are cut on a char boundary).
    pub max_description_bytes: usize,
    /// The largest `tools/call` result, serialized, in bytes (the call's output budget
    /// lowers it further: see `toolshed_core::budget`).
    pub max_result_bytes: usize,
    /// How much of a stdio server's stderr is kept (its end).
    pub max_stderr_bytes: usize,
    /// The longest line a stdio server may write on stdout: a message over it is not
    /// read further (a `tools/call` answer is the largest message a call reads; a
    /// `tools/list` page must fit too).
    pub max_line_bytes: usize,
    /// The first wait before restarting a server that died; doubled on every further
    /// failure up to [`ClientLimits::max_backoff`].
    pub initial_backoff: Duration,
    /// The longest wait between restarts.
    pub max_backoff: Duration,
    /// How long shutdown waits after closing stdin, and again after SIGTERM.
    pub shutdown_grace: Duration,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_tools: 512,
            max_pages: 64,
            max_schema_bytes: 64 * 1024,
            max_description_bytes: 8 * 1024,
            max_result_bytes: 1024 * 1024,
            max_stderr_bytes: 64 * 1024,
            max_line_bytes: 2 * 1024 * 1024,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

/// Every MCP connection of a process. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct McpHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    config: Arc<ClientConfig>,
    servers: Mutex<HashMap<(String, String), Arc<McpServer>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl McpHub {
    /// A hub with no connections yet.
    pub fn new(config: ClientConfig) -> McpHub {
        McpHub {
            inner: Arc::new(HubInner {
                config: Arc::new(config),
                servers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The connection to `spec` under `scope` (a tenant id or an agent id): started on
    /// first use and reused; restarted with backoff on the next call after it died; a
    /// changed spec for the same `(scope, name)` replaces it (the old one is shut down).
    ///
    /// The credentials and principal are those of the first caller of a `(scope,
    /// spec)`: a scope is one tenant or agent, whose credentials are the same for all.
    pub fn server(
        &self,
        scope: &str,
        spec: &McpServerSpec,
        credentials: Arc<dyn CredentialProvider>,
        principal: Option<Principal>,
    ) -> Arc<McpServer> {
        let key = (scope.to_owned(), spec.name.clone());
        let mut servers = lock(&self.inner.servers);
        if let Some(s) = servers.get(&key)
            && s.spec() == spec
        {
            return s.clone();
        }
        let config = self.inner.config.clone();
        let profile = match &spec.launch {
            Launch::Stdio(l) => {
                let mut p = SandboxProfile::of(l, &config.cache_root, scope, &spec.name);
                p.binds = config
                    .binds
                    .iter()
                    .map(|b| (b.source.clone(), b.target.clone()))
                    .collect();
                Some(p)
            }
            Launch::Http(_) => None,
        };
        let server = Arc::new(McpServer {
            state: Arc::new(ServerState {
                conn: conn::Connection::new(&config),
                spec: spec.clone(),
                scope: scope.to_owned(),
                profile,
                credentials,
                principal,
                config,
            }),
        });
        if let Some(old) = servers.insert(key, server.clone())
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move { old.shutdown().await });
        }
        server
    }

    /// Shuts every server down: close stdin, wait, SIGTERM, wait, SIGKILL.
    pub async fn shutdown(&self) {
        let servers: Vec<Arc<McpServer>> =
            lock(&self.inner.servers).drain().map(|(_, s)| s).collect();
        futures_util::future::join_all(servers.iter().map(|s| s.shutdown())).await;
    }
}

/// One MCP server under one scope: its connection (when started), its tools and how to
/// call them.
pub struct McpServer {
    state: Arc<ServerState>,
}

/// What a server's calls share (a call in flight holds it, not the `McpServer`).
pub(crate) struct ServerState {
    pub(crate) spec: McpServerSpec,
    pub(crate) scope: String,
    pub(crate) profile: Option<SandboxProfile>,
    pub(crate) credentials: Arc<dyn CredentialProvider>,
    pub(crate) principal: Option<Principal>,
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) conn: conn::Connection,
}

impl ServerState {
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    pub(crate) fn ctx(&self) -> conn::Ctx<'_> {
        conn::Ctx {
            config: &self.config,
            spec: &self.spec,
            profile: self.profile.as_ref(),
            credentials: &self.credentials,
            principal: self.principal.as_ref(),
        }
    }
}

impl McpServer {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.state.spec.name
    }

    /// The spec it was started from.
    pub fn spec(&self) -> &McpServerSpec {
        &self.state.spec
    }

    /// The scope (tenant or agent id) it belongs to.
    pub fn scope(&self) -> &str {
        &self.state.scope
    }

    /// How a stdio server runs in the sandbox (network, package cache, binds); `None`
    /// for a Streamable HTTP server.
    pub fn profile(&self) -> Option<&SandboxProfile> {
        self.state.profile.as_ref()
    }

    /// Start (or reuse) the connection, handshake done.
    pub async fn connect(&self) -> Result<ServerInfo, McpError> {
        self.state.conn.live(&self.state.ctx()).await?;
        self.state.conn.info().ok_or_else(|| McpError::Died {
            server: self.name().to_owned(),
            reason: "the connection ended right after the handshake".into(),
        })
    }

    /// Every tool, all pages of `tools/list`, sanitised; cached until the server sends
    /// `notifications/tools/list_changed`.
    pub async fn tools(&self) -> Result<Vec<McpTool>, McpError> {
        self.state.conn.tools(&self.state.ctx()).await
    }

    /// One `tools/call`, mapped to a pipeline reply: content blocks and
    /// `structuredContent` become the result and its diagnostics, `isError` an error
    /// result, progress partial results; the context's cancellation or timeout sends
    /// `notifications/cancelled`. `tool` is the name as the server names it.
    pub async fn call(&self, tool: &str, args: Value, ctx: &ToolContext) -> Reply {
        call::call(&self.state, tool, args, ctx).await
    }

    /// Bumps on every `notifications/tools/list_changed`.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.state.conn.shared.changes()
    }

    /// What the last handshake said, once connected.
    pub fn info(&self) -> Option<ServerInfo> {
        self.state.conn.info()
    }

    /// The end of what the server wrote on stderr (stdio servers; secrets scrubbed).
    pub fn stderr(&self) -> String {
        self.state.conn.stderr_text()
    }

    /// Ends the connection, if any: close stdin, wait, SIGTERM, wait, SIGKILL. The
    /// next call starts it again.
    pub async fn shutdown(&self) {
        self.state.conn.shutdown(&self.state.config).await;
    }
}

/// What a handshake established.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Which protocol era the connection speaks.
    pub era: Era,
    /// The negotiated protocol version, e.g. `2025-11-25`.
    pub protocol_version: String,
    /// The server's own name (`serverInfo.name`).
    pub server_name: String,
    /// The server's own version.
    pub server_version: String,
    /// How long starting and the handshake took.
    #[serde(with = "millis")]
    pub latency: Duration,
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// The protocol era of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Era {
    /// `initialize` handshake: `2025-11-25` and older.
    Legacy,
    /// `server/discover`, no session: `2026-07-28`.
    Discover,
}

impl Era {
    /// `legacy` or `discover`.
    pub fn as_str(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Discover => "discover",
        }
    }
}

/// The behaviour hints a server gives for a tool (MCP's `annotations`). Untrusted:
/// they only fill defaults that the registry owner may override.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolHints {
    /// A display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `readOnlyHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// `idempotentHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// `openWorldHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

/// One tool of a server, sanitised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpTool {
    /// The server's name.
    pub server: String,
    /// The tool's name as the server names it (what `tools/call` sends).
    pub name: String,
    /// `<server>__<tool>`, sanitised to `^[A-Za-z0-9_-]{1,64}$`.
    pub qualified_name: String,
    /// The description, capped.
    pub description: String,
    /// The input schema: local `$ref`s only, capped.
    pub input_schema: Value,
    /// The output schema, when the server declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The server's hints.
    #[serde(default)]
    pub hints: ToolHints,
}

impl McpTool {
    /// The default spec: name = `qualified_name`; effects, idempotency and approval
    /// from the hints, with MCP's own defaults when a hint is absent (`readOnlyHint`
    /// false, `destructiveHint` true, `idempotentHint` false):
    /// - read-only: effects `none`, approval `never`;
    /// - else destructive: effects `external`, approval `always`;
    /// - else: effects `external`, approval `never`;
    /// - idempotent: idempotency `keyed`.
    ///
    /// A non-idempotent external tool is `idempotency: none` with
    /// `allow_unkeyed_external` (the server said a repeat is not the same call). The
    /// registry owner may override any of it per tool.
    pub fn spec(&self) -> Result<ToolSpec, SpecError> {
        let mut spec =
            ToolSpec::new(&self.qualified_name, self.description.clone()).map_err(|e| {
                SpecError::Fields {
                    origin: Some(self.endpoint()),
                    errors: vec![e],
                }
            })?;
        spec.input_schema = self.input_schema.clone();
        spec.output_schema = self.output_schema.clone();
        let read_only = self.hints.read_only.unwrap_or(false);
        let destructive = self.hints.destructive.unwrap_or(true);
        let idempotent = self.hints.idempotent.unwrap_or(false);
        (spec.effects, spec.approval) = if read_only {
            (Effects::None, Approval::Never)
        } else if destructive {
            (Effects::External, Approval::Always)
        } else {
            (Effects::External, Approval::Never)
        };
        if idempotent {
            spec.idempotency = Idempotency::Keyed;
        } else if spec.effects == Effects::External {
            spec.allow_unkeyed_external = true;
        }
        spec.meta = ToolMeta {
            tool_type: Some("mcp".into()),
            endpoint: Some(self.endpoint()),
            ..ToolMeta::default()
        };
        Ok(spec)
    }

    /// The endpoint string the registry stores: `mcp:<server>/<tool>`.
    pub fn endpoint(&self) -> String {
        format!("mcp:{}/{}", self.server, self.name)
    }
}

/// A pipeline tool whose handler calls `tool` on `server`, under `spec` (usually
/// [`McpTool::spec`], possibly overridden by the registry owner).
pub fn tool(server: Arc<McpServer>, tool: &McpTool, spec: ToolSpec) -> Result<Tool, SpecError> {
    let name: Arc<str> = Arc::from(tool.name.as_str());
    let handler = move |args: Value, ctx: ToolContext| -> toolshed_core::tool::HandlerFuture {
        let server = server.clone();
        let name = name.clone();
        Box::pin(async move { server.call(&name, args, &ctx).await })
    };
    Tool::from_spec(spec, Arc::new(handler))
}

/// Parses `mcp:<server>/<tool>` into the server's name and the tool's name (as the
/// server names it: anything but empty, up to 128 bytes, no control characters).
pub fn parse_endpoint(endpoint: &str) -> Result<(String, String), McpError> {
    let bad = |reason: &str| McpError::InvalidEndpoint {
        endpoint: endpoint.chars().take(200).collect(),
        reason: reason.to_owned(),
    };
    let rest = endpoint
        .strip_prefix("mcp:")
        .ok_or_else(|| bad("it does not start with `mcp:`"))?;
    let (server, tool) = rest
        .split_once('/')
        .ok_or_else(|| bad("there is no `/` between the server and the tool"))?;
    crate::spec::check_server_name(server).map_err(|e| bad(&e.to_string()))?;
    if tool.is_empty() {
        return Err(bad("the tool name is empty"));
    }
    if tool.len() > crate::sanitize::MAX_TOOL_NAME_BYTES || tool.chars().any(char::is_control) {
        return Err(bad("the tool name is too long or has control characters"));
    }
    Ok((server.to_owned(), tool.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_endpoint("mcp:everything/echo").ok(),
            Some(("everything".into(), "echo".into()))
        );
        assert_eq!(
            parse_endpoint("mcp:fs/read/file").ok(),
            Some(("fs".into(), "read/file".into()))
        );
        for bad in [
            "everything/echo",
            "mcp:everything",
            "mcp:/echo",
            "mcp:a__b/x",
            "mcp:s/",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }

    fn t(read_only: Option<bool>, destructive: Option<bool>, idempotent: Option<bool>) -> McpTool {
        McpTool {
            server: "s".into(),
            name: "t".into(),
            qualified_name: "s__t".into(),
            description: "d".into(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            hints: ToolHints {
                read_only,
                destructive,
                idempotent,
                ..ToolHints::default()
            },
        }
    }

    #[test]
    fn hints_fill_the_default_spec() {
        let s = t(None, None, None).spec().expect("spec");
        assert_eq!(s.effects, Effects::External);
        assert!(matches!(s.approval, Approval::Always));
        assert_eq!(s.idempotency, Idempotency::None);
        let s = t(Some(true), None, None).spec().expect("spec");
        assert_eq!(s.effects, Effects::None);
        assert!(matches!(s.approval, Approval::Never));
        let s = t(Some(false), Some(false), Some(true))
            .spec()
            .expect("spec");
        assert_eq!(s.effects, Effects::External);
        assert!(matches!(s.approval, Approval::Never));
        assert_eq!(s.idempotency, Idempotency::Keyed);
        assert_eq!(s.meta.endpoint.as_deref(), Some("mcp:s/t"));
        assert_eq!(s.meta.tool_type.as_deref(), Some("mcp"));
    }
}
