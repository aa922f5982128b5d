//! One server's connection: started on first use, restarted with backoff after it
//! died, its tool list cached until the server says it changed.
//!
//! Era negotiation is legacy first: an `initialize` (asking for the newest version
//! that has one, `2025-11-25`); a server that answers it with a JSON-RPC error is
//! asked again, on a fresh connection, with `server/discover` (`2026-07-28`). Legacy
//! first because nearly every server today is legacy, and a legacy server that ignores
//! an unknown `server/discover` would cost a probe timeout on every start.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ClientServiceExt;
use rmcp::model::{ClientRequest, ListToolsRequest, PaginatedRequestParams, ProtocolVersion};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, Peer, PeerRequestOptions, RoleClient,
    RunningService, ServiceError,
};
use serde_json::Value;
use toolshed_core::{CredentialProvider, Principal, Secret};

use super::handler::{Handler, Shared, Tap};
use super::profile::SandboxProfile;
use super::stdio::{Child, Fault, StderrLog};
use super::{ClientConfig, Era, McpTool, ServerInfo, ToolHints, http, stdio};
use crate::error::McpError;
use crate::sanitize::{RawTool, sanitize_tools};
use crate::spec::{Launch, McpServerSpec};

/// How many characters of a server's stderr an error quotes.
const STDERR_TAIL: usize = 600;

/// What a connection needs to start: the server's spec and where it runs.
pub(crate) struct Ctx<'a> {
    pub(crate) config: &'a ClientConfig,
    pub(crate) spec: &'a McpServerSpec,
    pub(crate) profile: Option<&'a SandboxProfile>,
    pub(crate) credentials: &'a Arc<dyn CredentialProvider>,
    pub(crate) principal: Option<&'a Principal>,
}

/// A live session.
pub(crate) struct Live {
    pub(crate) peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    child: tokio::sync::Mutex<Option<Child>>,
    fault: Fault,
    epoch: u64,
    /// Set by the first request answered: a session that served something and then
    /// died is restarted at once; one that never did counts toward the backoff.
    healthy: AtomicBool,
}

impl Live {
    pub(crate) fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }
}

#[derive(Default)]
struct Backoff {
    failures: u32,
    until: Option<Instant>,
    last: String,
}

struct CachedTools {
    epoch: u64,
    changes: u64,
    tools: Vec<McpTool>,
}

/// The connection state of one server.
pub(crate) struct Connection {
    pub(crate) shared: Arc<Shared>,
    pub(crate) stderr: Arc<StderrLog>,
    live: Mutex<Option<Arc<Live>>>,
    starting: tokio::sync::Mutex<()>,
    backoff: Mutex<Backoff>,
    info: Mutex<Option<ServerInfo>>,
    tools: tokio::sync::Mutex<Option<CachedTools>>,
    secrets: Mutex<Vec<Secret>>,
    epoch: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connection {
    pub(crate) fn new(config: &ClientConfig) -> Connection {
        Connection {
            shared: Shared::new(),
            stderr: StderrLog::new(config.limits.max_stderr_bytes),
            live: Mutex::new(None),
            starting: tokio::sync::Mutex::new(()),
            backoff: Mutex::new(Backoff::default()),
            info: Mutex::new(None),
            tools: tokio::sync::Mutex::new(None),
            secrets: Mutex::new(Vec::new()),
            epoch: AtomicU64::new(0),
        }
    }

    pub(crate) fn info(&self) -> Option<ServerInfo> {
        lock(&self.info).clone()
    }

    /// The credential values in use, to scrub from everything the server sends.
    pub(crate) fn secrets(&self) -> Vec<Secret> {
        lock(&self.secrets).clone()
    }

    /// The stderr log, scrubbed.
    pub(crate) fn stderr_text(&self) -> String {
        let text = self.stderr.text();
        toolshed_core::credentials::scrub(&text, &self.secrets()).unwrap_or(text)
    }

    fn stderr_tail(&self) -> String {
        let tail = self.stderr.tail(STDERR_TAIL);
        let tail = toolshed_core::credentials::scrub(&tail, &self.secrets()).unwrap_or(tail);
        let tail = tail.trim();
        if tail.is_empty() {
            String::new()
        } else {
            format!("; the end of its stderr: {tail}")
        }
    }

    /// The live session, started (or restarted) if need be.
    pub(crate) async fn live(&self, ctx: &Ctx<'_>) -> Result<Arc<Live>, McpError> {
        if let Some(l) = lock(&self.live).clone()
            && !l.is_closed()
        {
            return Ok(l);
        }
        let _starting = self.starting.lock().await;
        let current = lock(&self.live).clone();
        if let Some(l) = current {
            if !l.is_closed() {
                return Ok(l);
            }
            let why = self.death_reason(&l).await;
            self.retire(&l, ctx.config).await;
            lock(&self.live).take();
            let mut b = lock(&self.backoff);
            if l.healthy.load(Ordering::Relaxed) {
                b.failures = 1;
                b.until = None;
            } else {
                b.failures += 1;
                b.until = Some(Instant::now() + delay(ctx.config, b.failures));
            }
            b.last = format!("the connection was lost: {why}");
        }
        {
            let b = lock(&self.backoff);
            if let Some(until) = b.until
                && let Some(left) = until.checked_duration_since(Instant::now())
                && !left.is_zero()
            {
                return Err(McpError::BackingOff {
                    server: ctx.spec.name.clone(),
                    retry_in: left,
                    failures: b.failures,
                    last: b.last.clone(),
                });
            }
        }
        match self.open(ctx).await {
            Ok((live, info)) => {
                let live = Arc::new(live);
                *lock(&self.live) = Some(live.clone());
                *lock(&self.info) = Some(info);
                Ok(live)
            }
            Err(e) => {
                let mut b = lock(&self.backoff);
                b.failures += 1;
                b.until = Some(Instant::now() + delay(ctx.config, b.failures));
                b.last = e.to_string();
                Err(e)
            }
        }
    }

    /// A request was answered: the session works, the backoff starts over.
    pub(crate) fn succeeded(&self, live: &Live) {
        if !live.healthy.swap(true, Ordering::Relaxed) {
            let mut b = lock(&self.backoff);
            b.failures = 0;
            b.until = None;
        }
    }

    /// Why a session ended: what it wrote that broke the protocol, or how the process
    /// ended, and the end of its stderr.
    pub(crate) async fn death_reason(&self, live: &Live) -> String {
        if let Some(f) = lock(&live.fault).clone() {
            return format!("it {f}");
        }
        let mut why = "the stream closed".to_owned();
        if let Some(child) = live.child.lock().await.as_mut() {
            // The pipe closes a moment before the process is reaped.
            let deadline = Instant::now() + Duration::from_millis(500);
            loop {
                if let Some(status) = child.exited() {
                    why = format!("the process exited ({status})");
                    // Its last words may still be in the pipe: quoted below.
                    self.stderr.drained(Duration::from_millis(500)).await;
                    break;
                }
                if Instant::now() >= deadline {
                    why = "it closed its stdout".into();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        format!("{why}{}", self.stderr_tail())
    }

    /// Ends a session: close the stream (stdin), then SIGTERM, then SIGKILL.
    async fn retire(&self, live: &Live, config: &ClientConfig) {
        if let Some(service) = live.service.lock().await.take() {
            let _ = tokio::time::timeout(config.limits.shutdown_grace, service.cancel()).await;
        }
        if let Some(mut child) = live.child.lock().await.take() {
            child.stop(config.limits.shutdown_grace).await;
        }
    }

    /// Shuts the session down, if any.
    pub(crate) async fn shutdown(&self, config: &ClientConfig) {
        let _starting = self.starting.lock().await;
        let live = lock(&self.live).take();
        if let Some(l) = live {
            self.retire(&l, config).await;
        }
    }

    async fn open(&self, ctx: &Ctx<'_>) -> Result<(Live, ServerInfo), McpError> {
        let started = Instant::now();
        let timeout = ctx.spec.timeout;
        let server = &ctx.spec.name;
        let attempt = async {
            match self.handshake(ctx, ClientLifecycleMode::Initialize).await {
                Err(Handshake::Rejected(legacy)) => {
                    let discover = ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    };
                    match self.handshake(ctx, discover).await {
                        Ok(live) => Ok(live),
                        Err(Handshake::Rejected(modern)) => Err(McpError::Handshake {
                            server: server.clone(),
                            reason: format!(
                                "`initialize` was refused ({legacy}) and so was `server/discover` ({modern})"
                            ),
                        }),
                        Err(Handshake::Failed(e)) => Err(e),
                    }
                }
                Err(Handshake::Failed(e)) => Err(e),
                Ok(live) => Ok(live),
            }
        };
        let live = match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(McpError::Handshake {
                    server: server.clone(),
                    reason: format!(
                        "no answer to `initialize` within {} s (the spec's timeout){}",
                        timeout.as_secs(),
                        self.stderr_tail()
                    ),
                });
            }
        };
        let peer_info = live.peer.peer_info();
        let (version, name, version_of_server) = match &peer_info {
            Some(p) => (
                p.protocol_version.clone(),
                p.server_info
                    .as_ref()
                    .map(|i| i.name.clone())
                    .unwrap_or_default(),
                p.server_info
                    .as_ref()
                    .map(|i| i.version.clone())
                    .unwrap_or_default(),
            ),
            None => (
                ProtocolVersion::LATEST_WITH_INITIALIZE,
                String::new(),
                String::new(),
            ),
        };
        let info = ServerInfo {
            era: if version.has_initialize() {
                Era::Legacy
            } else {
                Era::Discover
            },
            protocol_version: version.as_str().to_owned(),
            server_name: name,
            server_version: version_of_server,
            latency: started.elapsed(),
        };
        Ok((live, info))
    }

    async fn handshake(&self, ctx: &Ctx<'_>, mode: ClientLifecycleMode) -> Result<Live, Handshake> {
        let server = &ctx.spec.name;
        let fault: Fault = Arc::default();
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let handler = Handler::new(self.shared.clone());
        let mut secrets = Vec::new();
        let (result, child) = match &ctx.spec.launch {
            Launch::Stdio(launch) => {
                let mut env = Vec::new();
                for (k, v) in &launch.env {
                    let v = expand(ctx, &format!("env.{k}"), v, &mut secrets).await?;
                    env.push((k.clone(), v));
                }
                *lock(&self.secrets) = secrets;
                let Some(profile) = ctx.profile else {
                    return Err(Handshake::Failed(McpError::Start {
                        server: server.clone(),
                        reason: "no sandbox profile".into(),
                    }));
                };
                let spawned = stdio::spawn(
                    ctx.config,
                    server,
                    launch,
                    env,
                    profile,
                    &self.stderr,
                    fault.clone(),
                )
                .await?;
                (
                    handler
                        .serve_with_lifecycle(
                            Tap {
                                inner: spawned.transport,
                                shared: self.shared.clone(),
                            },
                            mode,
                        )
                        .await,
                    Some(spawned.child),
                )
            }
            Launch::Http(launch) => {
                let mut headers = Vec::new();
                for (k, v) in &launch.headers {
                    let v = expand(ctx, &format!("headers.{k}"), v, &mut secrets).await?;
                    headers.push((k.clone(), v));
                }
                *lock(&self.secrets) = secrets;
                let transport = http::transport(ctx.config, server, &launch.url, headers).await?;
                let tap = Tap {
                    inner: transport,
                    shared: self.shared.clone(),
                };
                (handler.serve_with_lifecycle(tap, mode).await, None)
            }
        };
        match result {
            Ok(service) => Ok(Live {
                peer: service.peer().clone(),
                service: tokio::sync::Mutex::new(Some(service)),
                child: tokio::sync::Mutex::new(child),
                fault,
                epoch,
                healthy: AtomicBool::new(false),
            }),
            Err(e) => {
                let mut child = child;
                let why = self.init_error(ctx, &e, &fault, child.as_mut()).await;
                if let Some(mut c) = child {
                    c.stop(Duration::ZERO).await;
                }
                match e {
                    ClientInitializeError::JsonRpcError(data) => Err(Handshake::Rejected(format!(
                        "{}: {}",
                        data.code.0, data.message
                    ))),
                    _ => Err(Handshake::Failed(why)),
                }
            }
        }
    }

    async fn init_error(
        &self,
        ctx: &Ctx<'_>,
        e: &ClientInitializeError,
        fault: &Fault,
        child: Option<&mut Child>,
    ) -> McpError {
        let server = ctx.spec.name.clone();
        if let Some(f) = lock(fault).clone() {
            return McpError::Protocol {
                server,
                reason: format!("it {f}"),
            };
        }
        if let Some(r) = http::refusal(e)
            && let Launch::Http(h) = &ctx.spec.launch
        {
            return McpError::AddressRefused {
                server,
                url: h.url.clone(),
                reason: r,
            };
        }
        let mut reason = e.to_string();
        if let Some(c) = child {
            let deadline = Instant::now() + Duration::from_millis(300);
            while Instant::now() < deadline {
                if let Some(status) = c.exited() {
                    reason = format!("the process exited ({status}) before answering `initialize`");
                    self.stderr.drained(Duration::from_millis(500)).await;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let secrets = self.secrets();
        let reason = toolshed_core::credentials::scrub(&reason, &secrets).unwrap_or(reason);
        McpError::Handshake {
            server,
            reason: format!("{reason}{}", self.stderr_tail()),
        }
    }

    /// Every tool, from the cache while it is fresh.
    pub(crate) async fn tools(&self, ctx: &Ctx<'_>) -> Result<Vec<McpTool>, McpError> {
        let live = self.live(ctx).await?;
        let changes = self.shared.changed_count();
        let mut cache = self.tools.lock().await;
        if let Some(c) = cache.as_ref()
            && c.epoch == live.epoch
            && c.changes == changes
        {
            return Ok(c.tools.clone());
        }
        let raw = self.list(ctx, &live).await?;
        let sanitized = sanitize_tools(&ctx.spec.name, raw, &ctx.config.limits)?;
        for w in &sanitized.warnings {
            tracing::warn!(server = %ctx.spec.name, "{w}");
        }
        *cache = Some(CachedTools {
            epoch: live.epoch,
            changes,
            tools: sanitized.tools.clone(),
        });
        Ok(sanitized.tools)
    }

    /// All pages of `tools/list`, within the caps; a cursor seen twice is a loop.
    async fn list(&self, ctx: &Ctx<'_>, live: &Live) -> Result<Vec<RawTool>, McpError> {
        let server = &ctx.spec.name;
        let limits = &ctx.config.limits;
        let bad = |reason: String| McpError::ToolList {
            server: server.clone(),
            reason,
        };
        let mut seen = std::collections::HashSet::new();
        let mut cursor: Option<String> = None;
        let mut out = Vec::new();
        for _page in 0..limits.max_pages {
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
            let answer = self
                .request(ctx, live, "tools/list", request, ctx.spec.timeout)
                .await?;
            let tools = match answer.get("tools") {
                Some(Value::Array(t)) => t.clone(),
                _ => return Err(bad("the answer has no `tools` array".into())),
            };
            for t in tools {
                out.push(raw_tool(t).map_err(&bad)?);
                if out.len() > limits.max_tools {
                    return Err(bad(format!(
                        "lists more than {} tools (the cap `max_tools`)",
                        limits.max_tools
                    )));
                }
            }
            match answer.get("nextCursor") {
                Some(Value::String(c)) if !c.is_empty() => {
                    if !seen.insert(c.clone()) {
                        return Err(bad(format!(
                            "the cursor `{}` came back twice: the listing loops",
                            c.chars().take(64).collect::<String>()
                        )));
                    }
                    cursor = Some(c.clone());
                }
                _ => return Ok(out),
            }
        }
        Err(bad(format!(
            "has more than {} pages (the cap `max_pages`)",
            limits.max_pages
        )))
    }

    /// One request and its answer as JSON, errors mapped.
    pub(crate) async fn request(
        &self,
        ctx: &Ctx<'_>,
        live: &Live,
        method: &str,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let answer = live
            .peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await;
        let answer = match answer {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(result) => {
                self.succeeded(live);
                serde_json::to_value(&result).map_err(|e| McpError::Protocol {
                    server: ctx.spec.name.clone(),
                    reason: format!("its `{method}` answer cannot be read: {e}"),
                })
            }
            Err(e) => Err(self.service_error(ctx, live, method, e).await),
        }
    }

    /// A request's failure as an [`McpError`].
    pub(crate) async fn service_error(
        &self,
        ctx: &Ctx<'_>,
        live: &Live,
        method: &str,
        e: ServiceError,
    ) -> McpError {
        let server = ctx.spec.name.clone();
        let secrets = self.secrets();
        let scrub = |s: String| toolshed_core::credentials::scrub(&s, &secrets).unwrap_or(s);
        match e {
            ServiceError::McpError(data) => McpError::Request {
                server,
                method: method.to_owned(),
                reason: scrub(format!("{} {}", data.code.0, data.message)),
            },
            ServiceError::Timeout { timeout } => McpError::Timeout {
                server,
                method: method.to_owned(),
                timeout,
            },
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => McpError::Died {
                server,
                reason: self.death_reason(live).await,
            },
            other => McpError::Protocol {
                server,
                reason: scrub(format!("`{method}`: {other}")),
            },
        }
    }
}

enum Handshake {
    /// The server answered the handshake with a JSON-RPC error: try the other era.
    Rejected(String),
    Failed(McpError),
}

impl From<McpError> for Handshake {
    fn from(e: McpError) -> Self {
        Handshake::Failed(e)
    }
}

fn delay(config: &ClientConfig, failures: u32) -> Duration {
    let l = &config.limits;
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    l.initial_backoff.saturating_mul(factor).min(l.max_backoff)
}

/// One listed tool, read from its JSON (wire names), before sanitising.
fn raw_tool(t: Value) -> Result<RawTool, String> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a tool has no `name`")?
        .to_owned();
    let ann = t.get("annotations");
    let flag = |k: &str| ann.and_then(|a| a.get(k)).and_then(Value::as_bool);
    let title = ann
        .and_then(|a| a.get("title"))
        .or_else(|| t.get("title"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(RawTool {
        description: t
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        input_schema: t
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object"})),
        output_schema: t.get("outputSchema").cloned(),
        hints: ToolHints {
            title,
            read_only: flag("readOnlyHint"),
            destructive: flag("destructiveHint"),
            idempotent: flag("idempotentHint"),
            open_world: flag("openWorldHint"),
        },
        name,
    })
}

/// Expands `${NAME}` in `value`: only names the spec declares in `credentials`,
/// resolved through the provider for the principal; every value is kept in `secrets`
/// for scrubbing. `$${` is a literal `${`.
async fn expand(
    ctx: &Ctx<'_>,
    field: &str,
    value: &str,
    secrets: &mut Vec<Secret>,
) -> Result<String, McpError> {
    let server = &ctx.spec.name;
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        if rest[..i].ends_with('$') {
            out.push_str(&rest[..i - 1]);
            out.push_str("${");
            rest = &rest[i + 2..];
            continue;
        }
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err(McpError::spec(
                server,
                field,
                "has `${` without a closing `}`; write `${NAME}`",
            ));
        };
        let name = &after[..end];
        if !ctx.spec.credentials.iter().any(|c| c == name) {
            return Err(McpError::Credential {
                server: server.clone(),
                field: field.to_owned(),
                name: name.to_owned(),
                reason: "is not declared in the server's `credentials`; add it there".into(),
            });
        }
        let secret = ctx
            .credentials
            .get_for(ctx.principal, name)
            .await
            .map_err(|e| McpError::Credential {
                server: server.clone(),
                field: field.to_owned(),
                name: name.to_owned(),
                reason: e.message,
            })?;
        out.push_str(secret.expose());
        secrets.push(secret);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
