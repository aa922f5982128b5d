//! A toolset exposed over MCP: an rmcp [`ServerHandler`] over a [`Gateway`], the
//! toolshed side that lists what a caller may run and runs each `tools/call` as a
//! durable run. The same handler serves Streamable HTTP (`/mcp` on `toolshed serve`)
//! and stdio (`toolshed mcp serve`); it knows nothing of the registry, the journal or
//! HTTP auth: the gateway does.
//!
//! - `tools/list`: the gateway's tools, their schemas kept as they are (JSON Schema
//!   2020-12 keywords included).
//! - `tools/call`: the gateway's outcome mapped by [`content`]: a result becomes
//!   content blocks (and `structuredContent`), an error result or invalid arguments an
//!   `isError` result naming the fields, a call waiting for approval either an
//!   elicitation (when the client can answer one and the approver may be the asker)
//!   or an `isError` result naming the pending approval and how to decide it.
//! - The idempotency key of a call is `_meta["toolshed/idempotency_key"]`; a later
//!   call with the same key continues the same run (after a decision, it gets the
//!   result).
//! - Partial results become `notifications/progress` (when the request carried a
//!   progress token) and the run's events `notifications/message` at or above the
//!   level set with `logging/setLevel` (none until a client sets one: a call nobody
//!   watches does not subscribe to its run's events).
//! - Prompts and resources come from a [`Catalog`].

// Logging (`logging/setLevel`, `notifications/message`) is deprecated by SEP-2577 for the
// 2026-07-28 era, but 2025-11-25 clients use it and the issue asks for it.
#![expect(
    deprecated,
    reason = "MCP logging is deprecated in 2026-07-28 but in use by 2025-11-25 clients"
)]

mod approve;
mod ask;
pub mod catalog;
pub mod content;
pub mod direct;
pub mod sessions;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequestParams,
    ElicitationAction, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResultType, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use toolshed_core::ToolError;

pub use catalog::{Catalog, CatalogError};

/// The `_meta` key of a `tools/call` carrying its idempotency key.
pub const IDEMPOTENCY_META: &str = "toolshed/idempotency_key";

/// The longest idempotency key accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 200;

/// What toolshed offers an MCP client: the caller's tools and how to run them.
#[async_trait]
pub trait Gateway: Send + Sync + 'static {
    /// Who is calling: found in the HTTP request's extensions (put there by the auth
    /// layer), or the handler's fixed caller (stdio).
    type Caller: Clone + Send + Sync + 'static;

    /// Every tool `caller` may run.
    async fn list_tools(&self, caller: &Self::Caller) -> Result<Vec<ExposedTool>, GatewayError>;

    /// Run one call as a durable run. Partial results and the run's events go to
    /// `options.events` while it runs.
    async fn call_tool(
        &self,
        caller: &Self::Caller,
        name: &str,
        args: Map<String, Value>,
        options: CallOptions,
    ) -> Result<CallOutcome, GatewayError>;

    /// Record `caller`'s decision on a pending approval (through the registry's own
    /// approval path, four-eyes rules included).
    async fn decide(
        &self,
        caller: &Self::Caller,
        call_id: &str,
        approve: bool,
        reason: String,
    ) -> Result<(), GatewayError>;

    /// The prompts and resources offered beside the tools.
    fn catalog(&self) -> &Catalog;
}

/// A tool as MCP lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExposedTool {
    /// The name `tools/call` uses.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON Schema of its arguments (an object schema), as registered.
    pub input_schema: Value,
    /// The JSON Schema of its result, when it declares an object one.
    pub output_schema: Option<Value>,
    /// MCP's annotations, from the tool's declared effects and idempotency.
    pub read_only: bool,
    /// The tool changes something outside and is gated by an approval.
    pub destructive: bool,
    /// Calling twice with the same arguments does no more than once.
    pub idempotent: bool,
}

/// How a call is made.
#[derive(Clone, Default)]
pub struct CallOptions {
    /// The client's idempotency key (`_meta["toolshed/idempotency_key"]`).
    pub idempotency_key: Option<String>,
    /// Where partial results and run events go while the call runs.
    pub events: Option<mpsc::UnboundedSender<CallEvent>>,
    /// Continue this run (set by the handler, never from a request: the retry of a call
    /// just decided at the client, when the client sent no idempotency key).
    pub continue_run: Option<String>,
    /// Who asked, over what: recorded with the run so that `runs show` tells an MCP
    /// call from a REST one, and which client and protocol era made it.
    pub via: Option<Inbound>,
    /// Who answers the questions the tool asks (elicitation, sampling): the client of
    /// the call.
    pub asker: Option<Arc<dyn toolshed_core::Asker>>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("idempotency_key", &self.idempotency_key)
            .field("events", &self.events.is_some())
            .field("continue_run", &self.continue_run)
            .field("via", &self.via)
            .field("asker", &self.asker.is_some())
            .finish()
    }
}

/// The MCP side of an inbound call: the client and the protocol it spoke.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inbound {
    /// `legacy` (`initialize`, a session) or `discover` (`2026-07-28`, no session).
    pub era: String,
    /// The protocol version of the request, e.g. `2025-11-25`; empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_version: String,
    /// The client's name and version as it gave them (`clientInfo`), untrusted text
    /// capped at 200 characters; empty when it gave none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client: String,
}

impl Inbound {
    /// The key of a run's driver JSON under which an MCP call's run records its
    /// [`Inbound`] (beside the driver's own fields).
    pub const DRIVER_KEY: &'static str = "mcp";

    /// Record `self` in a run's driver JSON (an object; anything else is left as is).
    pub fn record_in(&self, driver: &mut Value) {
        if let (Value::Object(map), Ok(me)) = (driver, serde_json::to_value(self)) {
            map.insert(Self::DRIVER_KEY.to_owned(), me);
        }
    }

    /// The inbound MCP call a run's driver records, if it was started by one.
    pub fn recorded(driver: &Value) -> Option<Inbound> {
        serde_json::from_value(driver.get(Self::DRIVER_KEY)?.clone()).ok()
    }

    /// One line for people: `MCP client NAME VERSION (legacy 2025-11-25)`.
    pub fn label(&self) -> String {
        let client = if self.client.is_empty() {
            "an unnamed client"
        } else {
            &self.client
        };
        let era = if self.protocol_version.is_empty() {
            self.era.clone()
        } else {
            format!("{} {}", self.era, self.protocol_version)
        };
        format!("MCP client {client} ({era})")
    }

    /// What the request's context says about its client and protocol.
    fn of(ctx: &RequestContext<RoleServer>) -> Inbound {
        let version = ctx.protocol_version();
        let era = match &version {
            Some(v) if !v.has_initialize() => "discover",
            _ => "legacy",
        };
        let client = ctx
            .client_info()
            .map(|i| client_label(&i.name, &i.version))
            .unwrap_or_default();
        Inbound {
            era: era.to_owned(),
            protocol_version: version.map(|v| v.as_str().to_owned()).unwrap_or_default(),
            client,
        }
    }
}

/// The client's `clientInfo` as recorded: it names itself, so the text is kept
/// printable (control characters dropped) and short (200 characters at most).
fn client_label(name: &str, version: &str) -> String {
    format!("{name} {version}")
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}

/// Something that happened during a call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// A partial result (`tool:result:partial`).
    Partial(Value),
    /// An event of the run, as a log line.
    Log {
        /// Its level.
        level: LogLevel,
        /// Its data (a JSON object naming the run, the tool and what happened).
        data: Value,
    },
}

/// The level of a run event forwarded as a log message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Detail.
    Debug,
    /// A step of the call (started, completed).
    Info,
    /// Something to look at.
    Warning,
    /// The call failed.
    Error,
}

impl LogLevel {
    fn mcp(self) -> LoggingLevel {
        match self {
            LogLevel::Debug => LoggingLevel::Debug,
            LogLevel::Info => LoggingLevel::Info,
            LogLevel::Warning => LoggingLevel::Warning,
            LogLevel::Error => LoggingLevel::Error,
        }
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The call has its result.
    Done {
        /// The run.
        run_id: String,
        /// The result or the error result.
        result: Result<Value, ToolError>,
        /// Content blocks the tool sent beside its result (an MCP-backed tool's).
        content: Vec<Value>,
    },
    /// The arguments do not match the tool's schema.
    InvalidArgs {
        /// Every violation, named by field.
        message: String,
    },
    /// The call waits for an approval.
    PendingApproval {
        /// The run.
        run_id: String,
        /// The call id to approve or deny.
        call_id: String,
        /// Whoever asked may not approve it.
        four_eyes: bool,
        /// Why it is gated.
        reason: String,
        /// The idempotency key to call again with after the decision.
        idempotency_key: Option<String>,
    },
    /// The call waits for an answer from a person (a human tool).
    PendingAnswer {
        /// The run.
        run_id: String,
        /// The call id to answer.
        call_id: String,
        /// The idempotency key to call again with after the answer.
        idempotency_key: Option<String>,
    },
}

/// Why the gateway could not list or call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The caller is not authenticated.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller's role does not allow it.
    #[error("{0}")]
    Forbidden(String),
    /// No such tool (for this caller).
    #[error("{0}")]
    NotFound(String),
    /// A request field is wrong (the message names it).
    #[error("{0}")]
    Invalid(String),
    /// The caller's execute rate is used up.
    #[error("{0}")]
    RateLimited(String),
    /// Something on toolshed's side failed (the message is safe to show).
    #[error("{0}")]
    Internal(String),
}

impl GatewayError {
    fn into_mcp(self) -> ErrorData {
        match self {
            // JSON-RPC has no auth codes; -32001 is what MCP servers commonly use.
            GatewayError::Unauthenticated(m) | GatewayError::Forbidden(m) => {
                ErrorData::new(rmcp::model::ErrorCode(-32001), m, None)
            }
            GatewayError::NotFound(m) | GatewayError::Invalid(m) => {
                ErrorData::invalid_params(m, None)
            }
            GatewayError::RateLimited(m) => ErrorData::new(rmcp::model::ErrorCode(-32002), m, None),
            GatewayError::Internal(m) => ErrorData::internal_error(m, None),
        }
    }
}

/// The MCP server: one per session (HTTP) or per process (stdio). Cheap to clone.
pub struct McpHandler<G: Gateway> {
    gateway: Arc<G>,
    fixed_caller: Option<G::Caller>,
    /// What `initialize` and `server/discover` answer: built once from the gateway's
    /// catalog (which does not change while it serves), since rmcp asks for it on every
    /// session-less request.
    info: Arc<ServerConfig>,
    level: Arc<Mutex<Option<LoggingLevel>>>,
}

impl<G: Gateway> Clone for McpHandler<G> {
    fn clone(&self) -> Self {
        McpHandler {
            gateway: self.gateway.clone(),
            fixed_caller: self.fixed_caller.clone(),
            info: self.info.clone(),
            level: self.level.clone(),
        }
    }
}

impl<G: Gateway> McpHandler<G> {
    /// A handler whose caller comes from each HTTP request's extensions.
    pub fn new(gateway: Arc<G>) -> Self {
        let info = Arc::new(server_info(gateway.catalog(), "toolshed"));
        McpHandler {
            gateway,
            fixed_caller: None,
            info,
            level: Arc::new(Mutex::new(None)),
        }
    }

    /// A handler whose caller is always `caller` (stdio: the process's user).
    pub fn with_caller(gateway: Arc<G>, caller: G::Caller) -> Self {
        McpHandler {
            fixed_caller: Some(caller),
            ..McpHandler::new(gateway)
        }
    }

    /// Another handler over the same gateway, with a log level of its own (none set):
    /// what a Streamable HTTP service makes for each session or session-less request.
    /// Unlike [`Clone`], which shares the level, and cheaper than [`McpHandler::new`].
    pub fn fresh(&self) -> Self {
        McpHandler {
            gateway: self.gateway.clone(),
            fixed_caller: self.fixed_caller.clone(),
            info: self.info.clone(),
            level: Arc::new(Mutex::new(None)),
        }
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<G::Caller, ErrorData> {
        self.caller_in(ctx.extensions.get::<http::request::Parts>())
    }

    /// The caller of the HTTP request whose head is `parts` (put in its extensions by
    /// the auth layer), or the fixed caller.
    fn caller_in(&self, parts: Option<&http::request::Parts>) -> Result<G::Caller, ErrorData> {
        if let Some(parts) = parts
            && let Some(caller) = parts.extensions.get::<G::Caller>()
        {
            return Ok(caller.clone());
        }
        self.fixed_caller.clone().ok_or_else(|| {
            GatewayError::Unauthenticated(
                "no caller: send `Authorization: Bearer TOKEN` with a toolshed token".into(),
            )
            .into_mcp()
        })
    }

    fn min_level(&self) -> Option<LoggingLevel> {
        self.level.lock().ok().and_then(|l| *l)
    }

    /// One call, with its events forwarded while it runs.
    async fn run_call(
        &self,
        caller: &G::Caller,
        name: &str,
        args: Map<String, Value>,
        key: Option<String>,
        continue_run: Option<String>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallOutcome, ErrorData> {
        let token = ctx.meta.get_progress_token();
        let min = self.min_level();
        let watched = token.is_some() || min.is_some();
        let inbound = Inbound::of(ctx);
        let sessionless = inbound.era == "discover";
        let via = Some(inbound);
        let asker = Some(ask::asker_for(&ctx.peer, sessionless));
        if !watched {
            // Nobody watches: no channel and no forwarding task (most calls).
            let options = CallOptions {
                idempotency_key: key,
                events: None,
                continue_run,
                via,
                asker,
            };
            return self.call_gateway(caller, name, args, options, ctx).await;
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        let peer = ctx.peer.clone();
        let forward = tokio::spawn(async move {
            let mut step = 0.0_f64;
            while let Some(event) = rx.recv().await {
                match event {
                    CallEvent::Partial(value) => {
                        let Some(token) = &token else { continue };
                        step += 1.0;
                        let (progress, total, message) = content::progress_of(&value, step);
                        let mut param = json!({"progressToken": token, "progress": progress});
                        if let Some(t) = total {
                            param["total"] = json!(t);
                        }
                        if let Some(m) = message {
                            param["message"] = json!(m);
                        }
                        if let Ok(p) = serde_json::from_value::<ProgressNotificationParam>(param) {
                            // A client that went away only loses its notifications.
                            let _ = peer.notify_progress(p).await;
                        }
                    }
                    CallEvent::Log { level, data } => {
                        let level = level.mcp();
                        let Some(min) = min else { continue };
                        if level_rank(level) < level_rank(min) {
                            continue;
                        }
                        let param = json!({"level": level, "logger": "toolshed", "data": data});
                        if let Ok(p) =
                            serde_json::from_value::<LoggingMessageNotificationParam>(param)
                        {
                            let _ = peer.notify_logging_message(p).await;
                        }
                    }
                }
            }
        });
        let options = CallOptions {
            idempotency_key: key,
            events: Some(tx),
            continue_run,
            via,
            asker,
        };
        let outcome = self.call_gateway(caller, name, args, options, ctx).await;
        // The sender is gone with `options`: the forwarder drains what is left and
        // ends, so every notification goes out before the answer.
        let _ = forward.await;
        outcome
    }

    /// The gateway's call, given up when the client cancels.
    async fn call_gateway(
        &self,
        caller: &G::Caller,
        name: &str,
        args: Map<String, Value>,
        options: CallOptions,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallOutcome, ErrorData> {
        let outcome = tokio::select! {
            outcome = self.gateway.call_tool(caller, name, args, options) => outcome,
            // The client cancelled: dropping the call stops its tool, and the runtime
            // ends its run `cancelled` (a call with effects; one without has none).
            () = ctx.ct.cancelled() => Err(GatewayError::Invalid(format!("the call of `{name}` was cancelled by the client"))),
        };
        outcome.map_err(GatewayError::into_mcp)
    }

    /// A `2026-07-28` call: a pending approval is asked of the client with an
    /// `InputRequiredResult` when it can answer elicitations, and its answer, sent with
    /// the call made again, decides the call before it continues ([`approve`]).
    async fn call_sessionless(
        &self,
        caller: &G::Caller,
        request: CallToolRequestParams,
        name: String,
        args: Map<String, Value>,
        key: Option<String>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let resumed = request
            .request_state
            .as_deref()
            .map(approve::run_of)
            .transpose()?;
        let mut outcome = self
            .run_call(
                caller,
                &name,
                args.clone(),
                key.clone(),
                resumed.clone(),
                ctx,
            )
            .await?;
        let answer = approve::decision(request.input_responses.as_ref());
        if let (Some(resumed), Some((approved, why))) = (&resumed, answer.clone())
            && let CallOutcome::PendingApproval {
                run_id,
                call_id,
                four_eyes: false,
                ..
            } = &outcome
            && run_id == resumed
        {
            self.gateway
                .decide(caller, call_id, approved, why)
                .await
                .map_err(GatewayError::into_mcp)?;
            outcome = self
                .run_call(caller, &name, args.clone(), key, Some(resumed.clone()), ctx)
                .await?;
        }
        let can_answer = ctx
            .meta
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        if let CallOutcome::PendingApproval {
            run_id,
            four_eyes: false,
            reason,
            ..
        } = &outcome
            && can_answer
            // Asked once: a dismissed form leaves the call pending, not asked again.
            && !request
                .input_responses
                .as_ref()
                .is_some_and(|r| r.contains_key(approve::KEY))
        {
            return Ok(CallToolResponse::InputRequired(approve::input_required(
                &name, reason, &args, run_id,
            )?));
        }
        let result = content::call_tool_result(&name, outcome).map_err(answer_error)?;
        Ok(result.into())
    }

    /// Ask the person at the client to approve a pending call; `true` when the call
    /// was decided (approved or denied) and should be made again.
    async fn elicit_approval(
        &self,
        caller: &G::Caller,
        name: &str,
        call_id: &str,
        reason: &str,
        args: &Map<String, Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> bool {
        let params = approve::form(name, reason, args);
        let Ok(params) = serde_json::from_value::<ElicitRequestParams>(params) else {
            return false;
        };
        let Ok(answer) = ctx.peer.create_elicitation(params).await else {
            return false;
        };
        let action = match answer.action {
            ElicitationAction::Accept => "accept",
            ElicitationAction::Decline => "decline",
            _ => "cancel",
        };
        // Dismissed: nobody decided; the call stays pending.
        let Some((approve, why)) = approve::decision_of(action, answer.content.as_ref()) else {
            return false;
        };
        self.gateway
            .decide(caller, call_id, approve, why)
            .await
            .is_ok()
    }
}

/// MCP's levels in order of severity.
fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The idempotency key in a request's `_meta`, checked.
///
/// rmcp may hand `_meta` over in the request's params or lift it into the context;
/// both are read.
fn idempotency_key(
    params: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Result<Option<String>, ErrorData> {
    // Both are plain JSON objects (serialized transparently): read, not re-serialized.
    let value = params
        .meta
        .as_ref()
        .and_then(|m| m.get(IDEMPOTENCY_META))
        .or_else(|| ctx.meta.get(IDEMPOTENCY_META));
    check_idempotency_key(value)
}

/// An idempotency key as `_meta` gave it (`None`: none given), checked.
fn check_idempotency_key(value: Option<&Value>) -> Result<Option<String>, ErrorData> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(k))
            if !k.is_empty()
                && k.len() <= MAX_IDEMPOTENCY_KEY
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) =>
        {
            Ok(Some(k.clone()))
        }
        Some(_) => Err(ErrorData::invalid_params(
            format!(
                "_meta.{IDEMPOTENCY_META}: must be a string of 1 to {MAX_IDEMPOTENCY_KEY} letters, digits, `-`, `_`, `.` or `:`"
            ),
            None,
        )),
    }
}

/// A result read from its JSON, marked `resultType: "complete"`: a `2026-07-28` server
/// MUST put it on every result (a strict client, such as the Python SDK, refuses a
/// result without it). rmcp takes it off again for a peer of an older version, whose
/// results never had it.
fn from_json<T: serde::de::DeserializeOwned>(mut value: Value) -> Result<T, ErrorData> {
    if let Value::Object(fields) = &mut value {
        fields
            .entry("resultType")
            .or_insert_with(|| Value::String(ResultType::COMPLETE.as_str().to_owned()));
    }
    serde_json::from_value(value).map_err(answer_error)
}

/// An answer that could not be built, as the JSON-RPC error the client gets.
fn answer_error(e: serde_json::Error) -> ErrorData {
    ErrorData::internal_error(format!("cannot build an MCP answer: {e}"), None)
}

/// What the server says about itself (`initialize`, `server/discover`): its tools and
/// logging, and the catalog's prompts and resources when it has any.
fn server_info(catalog: &Catalog, name: &str) -> ServerConfig {
    let mut caps = json!({"tools": {"listChanged": false}, "logging": {}});
    if !catalog.prompts.is_empty() {
        caps["prompts"] = json!({"listChanged": false});
        // Argument completion is declared and answers no suggestions: catalog
        // prompts have free-text arguments.
        caps["completions"] = json!({});
    }
    if !catalog.resources.is_empty() || !catalog.templates.is_empty() {
        caps["resources"] = json!({"listChanged": false, "subscribe": true});
    }
    let info = json!({
        "protocolVersion": "2025-11-25",
        "capabilities": caps,
        "serverInfo": {"name": name, "version": env!("CARGO_PKG_VERSION")},
        "instructions": "toolshed: every tools/call is a durable run (validated, journaled, approvals and rate limits applied). Pass `_meta.toolshed/idempotency_key` to make a call repeatable: after an approval is decided, call again with the same key to get the result."
    });
    serde_json::from_value(info).unwrap_or_default()
}

impl<G: Gateway> ServerHandler for McpHandler<G> {
    fn get_info(&self) -> ServerConfig {
        (*self.info).clone()
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Ok(mut level) = self.level.lock() {
            *level = Some(request.level);
        }
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&ctx)?;
        let tools = self
            .gateway
            .list_tools(&caller)
            .await
            .map_err(GatewayError::into_mcp)?;
        let tools: Vec<Value> = tools.iter().map(content::tool_json).collect();
        from_json(json!({"tools": tools}))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&ctx)?;
        let key = idempotency_key(&request, &ctx)?;
        let name = request.name.to_string();
        let args = request.arguments.clone().unwrap_or_default();
        if Inbound::of(&ctx).era == "discover" {
            return Box::pin(self.call_sessionless(&caller, request, name, args, key, &ctx)).await;
        }
        let mut outcome = self
            .run_call(&caller, &name, args.clone(), key.clone(), None, &ctx)
            .await?;
        if let CallOutcome::PendingApproval {
            run_id,
            call_id,
            four_eyes: false,
            reason,
            ..
        } = &outcome
            && ctx
                .peer
                .peer_info()
                .is_some_and(|p| p.capabilities.elicitation.is_some())
            // Boxed: the rare path's futures stay out of every call's future, which
            // rmcp moves into a task of its own.
            && Box::pin(self.elicit_approval(&caller, &name, call_id, reason, &args, &ctx))
                .await
        {
            let run_id = run_id.clone();
            outcome =
                Box::pin(self.run_call(&caller, &name, args, key, Some(run_id), &ctx)).await?;
        }
        let result: CallToolResult =
            content::call_tool_result(&name, outcome).map_err(answer_error)?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.caller(&ctx)?;
        from_json(json!({"prompts": self.gateway.catalog().prompt_list()}))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.caller(&ctx)?;
        let args = request.arguments.clone().unwrap_or_default();
        let value = self
            .gateway
            .catalog()
            .get_prompt(&request.name, &args)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let result: GetPromptResult = from_json(value)?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.caller(&ctx)?;
        from_json(json!({"resources": self.gateway.catalog().resource_list()}))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.caller(&ctx)?;
        from_json(json!({"resourceTemplates": self.gateway.catalog().template_list()}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.caller(&ctx)?;
        let value = self
            .gateway
            .catalog()
            .read(&request.uri)
            .map_err(|e| ErrorData::resource_not_found(e.to_string(), None))?;
        let result: ReadResourceResult = from_json(value)?;
        Ok(result.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.caller(&ctx)?;
        // Catalog resources never change while the server runs: a subscription is
        // accepted and never notified.
        self.gateway
            .catalog()
            .read(&request.uri)
            .map(drop)
            .map_err(|e| ErrorData::resource_not_found(e.to_string(), None))
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.caller(&ctx)?;
        Ok(())
    }
}

/// Serve `handler` over this process's stdin and stdout until the client closes stdin
/// (`toolshed mcp serve`). Nothing else may write to stdout meanwhile.
pub async fn serve_stdio<G: Gateway>(handler: McpHandler<G>) -> Result<(), std::io::Error> {
    use rmcp::ServiceExt;
    let running = handler
        .serve(rmcp::transport::io::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("the MCP handshake on stdio failed: {e}")))?;
    running
        .waiting()
        .await
        .map(drop)
        .map_err(|e| std::io::Error::other(format!("the MCP stdio session failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_client_name_is_recorded_printable_and_short() {
        // A terminal escape and a forged second line of `runs show`.
        let label = client_label("evil\u{1b}[2J\nstatus   completed", "1\r\0");
        assert_eq!(label, "evil[2Jstatus   completed 1");
        let long = client_label(&"x".repeat(10_000), "1");
        assert_eq!(long.chars().count(), 200);
        assert_eq!(client_label("", ""), "");
    }
}
