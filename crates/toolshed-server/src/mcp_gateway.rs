//! `/mcp`: the registry as an MCP server over Streamable HTTP (both eras: 2025-11-25
//! `initialize` with sessions, 2026-07-28 `server/discover` without), for MCP clients
//! such as Claude Code, Cursor or VS Code.
//!
//! - Auth: the REST API's bearer tokens, checked the same way (the `Auth` extractor); no token is a
//!   401 with `WWW-Authenticate: Bearer`. Listing and calling need the role that
//!   executes (`deployer`).
//! - DNS rebinding: a `Host` or `Origin` outside the allowlist is a 403. The list is
//!   the loopback names and the listen address, plus what `--mcp-allowed-origins`
//!   adds (each origin's host is allowed as a `Host` too).
//! - Tools: every registry tool the caller may run (as over REST, organisation-wide:
//!   a tenant owns what it registers, and every tenant may run it). Every `tools/call` is the execute
//!   route's path ([`execute`]): rate limit, validation, credentials policy, a durable
//!   run with the caller's principal, approvals.
//! - Prompts and resources: the operator's catalog (`--mcp-catalog FILE`).

use std::sync::Arc;

use crate::mcp_polling::PollingSessions;
use async_trait::async_trait;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value, json};
use toolshed_api::ApiCode;
use toolshed_auth::{Claims, Role};
use toolshed_core::{Crumb, CrumbKind};
use toolshed_journal::Gate;
use toolshed_mcp::server::direct;
use toolshed_mcp::server::sessions::Sessions;
use toolshed_mcp::server::{
    CallEvent, CallOptions, CallOutcome, Catalog, ExposedTool, Gateway, GatewayError, LogLevel,
    McpHandler,
};
use toolshed_registry::ToolFilter;
use toolshed_runtime::CallStep;

use crate::error::ApiError;
use crate::execute::{ExecuteRequest, RunChoice, execute};
use crate::extract::Auth;
use crate::state::AppState;

/// The agent id recorded on runs started over MCP.
pub const MCP_AGENT: &str = "mcp";

/// `/mcp`'s settings.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// Origins allowed besides the loopback ones (`--mcp-allowed-origins`), e.g.
    /// `https://tools.example.com`; each one's host is also an allowed `Host`.
    pub allowed_origins: Vec<String>,
    /// The prompts and resources offered (`--mcp-catalog FILE`).
    pub catalog: Catalog,
    /// Close a session's POST stream that has not ended after this long; the client
    /// resumes it with `Last-Event-ID` (`--mcp-sse-close-after`, SEP-1699 polling).
    /// `None` (the default): a stream lasts as long as its call.
    pub sse_close_after: Option<std::time::Duration>,
    /// Answer a plain `tools/call` directly instead of through rmcp's per-request
    /// service (session-less) or session worker (in a session, unless SSE polling is
    /// on): the same answer, a quarter to a third less work per call
    /// ([`toolshed_mcp::server::direct`]). On by default; off only to compare the two.
    pub direct_calls: bool,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            allowed_origins: Vec::new(),
            catalog: Catalog::default(),
            sse_close_after: None,
            direct_calls: true,
        }
    }
}

/// The authenticated caller of one MCP request.
#[derive(Debug, Clone)]
pub struct McpCaller(pub Arc<Claims>);

/// The registry as a [`Gateway`].
pub struct RegistryGateway {
    state: AppState,
    catalog: Catalog,
}

impl RegistryGateway {
    /// The gateway over this server's state.
    pub fn new(state: AppState) -> Self {
        let catalog = state.config().mcp_gateway.catalog.clone();
        RegistryGateway { state, catalog }
    }
}

fn gateway_error(e: ApiError) -> GatewayError {
    let message = e.message().to_owned();
    match e.code() {
        ApiCode::Unauthenticated => GatewayError::Unauthenticated(message),
        ApiCode::Forbidden | ApiCode::NotOwner => GatewayError::Forbidden(message),
        ApiCode::NotFound => GatewayError::NotFound(message),
        ApiCode::RateLimited => GatewayError::RateLimited(message),
        ApiCode::Internal => GatewayError::Internal(message),
        _ => GatewayError::Invalid(message),
    }
}

/// The run id an idempotency key names: one per tenant, caller, tool and key, so two
/// callers' keys never meet.
fn keyed_run_id(claims: &Claims, tool: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [
        claims.tenant.as_deref().unwrap_or(crate::DEFAULT_TENANT),
        &claims.sub,
        tool,
        key,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    format!("mcp-{}", hex::encode(&h.finalize()[..16]))
}

fn log_of(crumb: &Crumb) -> Option<CallEvent> {
    let (level, what) = match crumb.kind {
        CrumbKind::Call => (LogLevel::Info, "started"),
        CrumbKind::Partial => {
            return Some(CallEvent::Partial(
                crumb.payload.clone().unwrap_or(Value::Null),
            ));
        }
        CrumbKind::Result => (LogLevel::Info, "completed"),
        CrumbKind::Error => (LogLevel::Error, "failed"),
        _ => (LogLevel::Debug, crumb.kind.as_str()),
    };
    let mut data = json!({
        "event": crumb.kind.as_str(),
        "message": format!("tool `{}` {what}", crumb.tool_name),
        "run_id": &*crumb.run_id,
    });
    if let Some(ms) = crumb.duration_ms {
        data["duration_ms"] = json!(ms);
    }
    if let Some(e) = &crumb.error {
        data["error"] = json!(e.message);
    }
    Some(CallEvent::Log { level, data })
}

#[async_trait]
impl Gateway for RegistryGateway {
    type Caller = McpCaller;

    async fn list_tools(&self, caller: &McpCaller) -> Result<Vec<ExposedTool>, GatewayError> {
        let claims = &caller.0;
        claims
            .require(Role::Deployer)
            .map_err(|e| gateway_error(e.into()))?;
        // Exactly what execute lets this caller run: registry reads and executions are
        // organisation-wide (a tenant owns what it registers, every tenant may run it).
        let mut out = Vec::new();
        let per_page = toolshed_registry::MAX_PER_PAGE;
        for page in 1..=u32::MAX {
            let listed = self
                .state
                .registry()
                .list_tools(&ToolFilter {
                    tool_type: None,
                    source: None,
                    name_prefix: None,
                    page,
                    per_page,
                    ..ToolFilter::default()
                })
                .await
                .map_err(|e| gateway_error(e.into()))?;
            let n = listed.items.len();
            out.extend(listed.items.iter().map(exposed));
            if n < per_page as usize {
                break;
            }
        }
        Ok(out)
    }

    async fn call_tool(
        &self,
        caller: &McpCaller,
        name: &str,
        args: Map<String, Value>,
        mut options: CallOptions,
    ) -> Result<CallOutcome, GatewayError> {
        let claims = &caller.0;
        claims
            .require(Role::Deployer)
            .map_err(|e| gateway_error(e.into()))?;
        let prepared = self.state.prepared(name).await.map_err(gateway_error)?;
        let run = match (&options.continue_run, &options.idempotency_key) {
            (Some(id), _) => RunChoice::Continue(id.clone()),
            (None, Some(k)) => RunChoice::Continue(keyed_run_id(claims, &prepared.record.name, k)),
            (None, None) => RunChoice::Named(uuid::Uuid::now_v7().to_string()),
        };
        let run_id = match &run {
            RunChoice::Continue(id) | RunChoice::Named(id) => id.clone(),
            RunChoice::New => String::new(),
        };
        let mut crumbs = options
            .events
            .as_ref()
            .map(|_| prepared.runtime.pipeline().crumbs().subscribe());
        let req = ExecuteRequest {
            tool: prepared.record.id.clone(),
            args: Some(Value::Object(args)),
            run: run.clone(),
            agent_id: MCP_AGENT,
            via: options.via.take(),
            prepared: Some(prepared.clone()),
            attended: toolshed_runtime::Attended {
                asker: options.asker.take(),
            },
        };
        // Boxed: the execution's future is several kilobytes, and this one (which rmcp's
        // handler moves about, and `async_trait` boxes) would otherwise hold it inline
        // and be copied whole each time; measured, three copies of about 5,000
        // instructions each per call (BENCHMARKS.md, "MCP").
        let mut fut = Box::pin(execute(&self.state, claims, req));
        let forward = |crumb: &Crumb| {
            if *crumb.run_id == *run_id
                && let (Some(tx), Some(event)) = (&options.events, log_of(crumb))
            {
                let _ = tx.send(event);
            }
        };
        let result = loop {
            let Some(rx) = crumbs.as_mut() else {
                break (&mut fut).await;
            };
            tokio::select! {
                biased;
                crumb = rx.recv() => match crumb {
                    Ok(c) => forward(&c),
                    // Lagged or closed: keep running the call; events are best effort.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => crumbs = None,
                },
                r = &mut fut => break r,
            }
        };
        if let Some(rx) = crumbs.as_mut() {
            while let Ok(c) = rx.try_recv() {
                forward(&c);
            }
        }
        let executed = match result {
            Ok(e) => e,
            Err(e) if e.code() == ApiCode::InvalidArgs => {
                return Ok(CallOutcome::InvalidArgs {
                    message: e.message().to_owned(),
                });
            }
            Err(e) => return Err(gateway_error(e)),
        };
        Ok(match executed.step {
            CallStep::Done(outcome) => CallOutcome::Done {
                run_id: executed.run_id,
                result: outcome.result,
                content: outcome.diagnostics.content,
            },
            CallStep::Parked(gate) => match gate.gate {
                Gate::Approval {
                    reason, four_eyes, ..
                } => CallOutcome::PendingApproval {
                    run_id: executed.run_id,
                    call_id: gate.call_id,
                    four_eyes: four_eyes || self.state.config().four_eyes,
                    reason,
                    idempotency_key: options.idempotency_key,
                },
                _ => CallOutcome::PendingAnswer {
                    run_id: executed.run_id,
                    call_id: gate.call_id,
                    idempotency_key: options.idempotency_key,
                },
            },
        })
    }

    async fn decide(
        &self,
        caller: &McpCaller,
        call_id: &str,
        approve: bool,
        reason: String,
    ) -> Result<(), GatewayError> {
        crate::routes::runs::decide_as(&self.state, &caller.0, call_id, Some(reason), approve)
            .await
            .map(drop)
            .map_err(gateway_error)
    }

    fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}

/// A registry tool as MCP lists it: its schema as registered, its hints from its
/// declared effects, approval and idempotency.
fn exposed(t: &toolshed_registry::ToolRecord) -> ExposedTool {
    let field = |k: &str| t.definition.get(k).cloned().unwrap_or(Value::Null);
    let mut input_schema = field("input_schema");
    if !input_schema.is_object() {
        input_schema = toolshed_core::schema::empty_object_schema();
    }
    let output_schema = Some(field("output_schema"))
        .filter(|s| s.get("type").and_then(Value::as_str) == Some("object"));
    let text = |k: &str| field(k).as_str().map(str::to_owned);
    let read_only = text("effects").as_deref() == Some("none");
    // A bread or Toren file's own approval (`always`, or a predicate in its worker)
    // gates it as a definition's does.
    let compat_gated = t
        .definition
        .get("compat")
        .and_then(|c| c.get("approval"))
        .and_then(Value::as_str)
        .is_some_and(|a| a != "never");
    let gated = compat_gated
        || match field("approval") {
            Value::Null => false,
            Value::String(s) => s != "never",
            _ => true,
        };
    let idempotent = text("idempotency").is_some_and(|i| i != "none");
    ExposedTool {
        name: t.name.clone(),
        description: t.description.clone(),
        input_schema,
        output_schema,
        read_only,
        destructive: !read_only && gated,
        idempotent,
    }
}

/// The `/mcp` service: Streamable HTTP with the allowlists of `state`'s settings, behind
/// the bearer check.
pub fn service(state: &AppState, local: std::net::SocketAddr) -> axum::Router<AppState> {
    let settings = &state.config().mcp_gateway;
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    let ip = local.ip();
    if !ip.is_unspecified() {
        hosts.push(ip.to_string());
    }
    let mut origins: Vec<String> = vec![
        "http://localhost:*".into(),
        "http://127.0.0.1:*".into(),
        "http://[::1]:*".into(),
    ];
    // The server's public URL (`--public-url`) is where people's clients reach it too.
    let public = state
        .config()
        .public_url
        .as_ref()
        .map(|p| p.origin().to_owned());
    for o in settings.allowed_origins.iter().chain(public.iter()) {
        origins.push(o.clone());
        if let Ok(u) = url::Url::parse(o)
            && let Some(h) = u.host_str()
        {
            hosts.push(h.to_owned());
        }
    }
    let config = StreamableHttpServerConfig::default()
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        // A 2026-07-28 request whose first message is its answer gets it as one JSON
        // body rather than an SSE stream of one event (a call that sends progress or
        // logs first still streams): less to frame and parse per call.
        .with_json_response(true)
        .with_max_request_body_bytes(state.config().max_body_bytes);
    let handler = McpHandler::new(Arc::new(RegistryGateway::new(state.clone())));
    // A session's calls are answered directly only when SSE polling is off: the
    // operator who turned it on wants every call's stream resumable.
    let sessions = (settings.direct_calls && settings.sse_close_after.is_none())
        .then(|| Arc::new(Sessions::default()));
    let direct = settings.direct_calls.then(|| {
        Arc::new(Direct {
            handler: handler.fresh(),
            hosts: hosts.clone(),
            max_body: state.config().max_body_bytes,
            sessions: sessions.clone(),
        })
    });
    let config = config.with_allowed_hosts(hosts);
    let svc = StreamableHttpService::new(
        move || Ok(handler.fresh()),
        Arc::new(PollingSessions::new(settings.sse_close_after, sessions)),
        config,
    );
    axum::Router::new()
        .route_service(
            "/mcp",
            Shared {
                rmcp: Arc::new(svc),
                direct,
            },
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
}

type McpService = StreamableHttpService<McpHandler<RegistryGateway>, PollingSessions>;

/// rmcp's service behind an `Arc`, and the direct path beside it. The router clones a
/// route's service for every request, once per layer around it, and rmcp's own `call`
/// clones it again: each clone of the bare service copies its whole config (the
/// allowed hosts and origins, one `String` each), about a hundred allocations per
/// request. Cloning this one bumps reference counts.
#[derive(Clone)]
struct Shared {
    rmcp: Arc<McpService>,
    /// `None` when `McpSettings::direct_calls` is off.
    direct: Option<Arc<Direct>>,
}

/// What the direct path of a plain `tools/call` needs
/// ([`toolshed_mcp::server::direct`]).
struct Direct {
    handler: McpHandler<RegistryGateway>,
    /// The allowed `Host` names (rmcp's allowlist, which the direct path checks too).
    hosts: Vec<String>,
    max_body: usize,
    /// The sessions whose calls may be answered directly, fed by the session manager;
    /// `None` when a session's calls all go to rmcp (SSE polling is on).
    sessions: Option<Arc<Sessions>>,
}

impl tower::Service<Request> for Shared {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // What rmcp's `call` does, without cloning the service first.
        let svc = self.rmcp.clone();
        let direct = self.direct.as_ref().and_then(|d| {
            let route = direct::wants(req.method(), req.headers(), &d.hosts, d.max_body)?;
            // A session's rules need only its headers: a request for rmcp goes there
            // before its body is read.
            let session = match &route {
                direct::Route::Sessionless => None,
                direct::Route::Session { id, version } => {
                    Some(d.sessions.as_ref()?.servable(id, version)?)
                }
            };
            Some((d.clone(), route, session))
        });
        let Some((direct, route, session)) = direct else {
            return Box::pin(async move { Ok(svc.handle(req).await.map(axum::body::Body::new)) });
        };
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let Ok(bytes) = axum::body::to_bytes(body, direct.max_body).await else {
                return Ok((
                    axum::http::StatusCode::BAD_REQUEST,
                    "Bad Request: the body could not be read in full",
                )
                    .into_response());
            };
            let taken =
                direct::parse(&parts.headers, &bytes, &route).and_then(|call| match session {
                    None => Some((call, None)),
                    Some(session) => session.start(&call).map(|s| (call, Some(s))),
                });
            let Some((call, in_session)) = taken else {
                let req = Request::from_parts(parts, axum::body::Body::from(bytes));
                return Ok(svc.handle(req).await.map(axum::body::Body::new));
            };
            let answer = direct.handler.answer_direct(&parts, call, in_session).await;
            Ok((
                answer.status,
                [(header::CONTENT_TYPE, answer.content_type)],
                answer.body,
            )
                .into_response())
        })
    }
}

/// Check the bearer token as the REST API does; the claims ride in the request's
/// extensions to the handler.
async fn authenticate(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    match Auth::from_request_parts(&mut parts, &state).await {
        Ok(Auth(claims)) => {
            parts.extensions.insert(McpCaller(Arc::new(claims)));
            next.run(Request::from_parts(parts, body)).await
        }
        Err(e) => {
            let unauthenticated = e.code() == ApiCode::Unauthenticated;
            let mut response = e.into_response();
            if unauthenticated {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"toolshed\""),
                );
            }
            response
        }
    }
}
