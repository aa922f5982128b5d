//! The [`Dispatcher`]: runs a call at any endpoint, as a pipeline [`Handler`] or
//! directly with its stdout, stderr and exit code ([`Dispatcher::execute`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use toolshed_core::{
    CredentialError, CredentialProvider, ErrorCode, ExecuteOptions, Handler, HandlerFuture,
    Pipeline, PipelineConfig, RunContext, Secret, Tool, ToolCall, ToolContext, ToolError,
    ToolOutput, ToolSet,
};

use crate::config::{DispatcherConfig, Mode};
use crate::endpoint::Endpoint;
use crate::error::DispatchError;
use crate::http;
use crate::infer::{self, InferredTool};
use crate::launcher::Launcher;
use crate::pool::Pool;
use crate::process::{Conversation, Leftovers, Worker};
use crate::protocol::{CallContext, Message, encode_request};

/// Runs tools at any endpoint: built-in Rust tools, Python and Node functions (one-shot
/// or from warm worker pools), TypeScript, any executable speaking the wire protocol,
/// and HTTP services. Cheap to clone; clones share pools and caches. Dropping the last
/// clone kills every pooled worker.
#[derive(Clone)]
pub struct Dispatcher {
    launcher: Arc<Launcher>,
    pools: Arc<Mutex<HashMap<Endpoint, Arc<Pool>>>>,
    builtins: Arc<HashMap<String, Builtin>>,
    http: reqwest::Client,
}

#[derive(Clone)]
struct Builtin {
    tool: Tool,
    pipeline: Pipeline,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut builtins: Vec<&String> = self.builtins.keys().collect();
        builtins.sort();
        f.debug_struct("Dispatcher")
            .field("config", &self.launcher.config)
            .field("builtins", &builtins)
            .finish_non_exhaustive()
    }
}

/// One call for [`Dispatcher::execute`].
#[derive(Debug, Clone)]
pub struct Request {
    /// The tool's name (sent to the tool as `tool`).
    pub tool: String,
    /// The arguments, already validated by whoever built the request.
    pub args: Value,
    /// The call's identity.
    pub context: CallContext,
    /// The credentials to hand over: only the tool's declared ones.
    pub credentials: BTreeMap<String, Secret>,
    /// The timeout; `None` means the config's `default_timeout`.
    pub timeout: Option<Duration>,
    /// One-shot or pooled; `None` means the config's choice for the endpoint's kind.
    pub mode: Option<Mode>,
}

impl Request {
    /// A request with fresh ids and no credentials.
    pub fn new(tool: impl Into<String>, args: Value) -> Self {
        Request {
            tool: tool.into(),
            args,
            context: CallContext::ephemeral(),
            credentials: BTreeMap::new(),
            timeout: None,
            mode: None,
        }
    }

    /// Set the timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Set the mode.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Add a credential.
    pub fn credential(mut self, name: impl Into<String>, value: Secret) -> Self {
        self.credentials.insert(name.into(), value);
        self
    }
}

/// What [`Dispatcher::execute`] observed. Credential values are scrubbed
/// (`[REDACTED]`) from every field.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The result, or the error result.
    pub result: Result<Value, ToolError>,
    /// What the process wrote to stdout during the call (protocol lines).
    pub stdout: String,
    /// What it wrote to stderr (the tail, when longer than the cap).
    pub stderr: String,
    /// The exit code of a one-shot process; `None` for pooled workers, killed
    /// processes, built-ins and HTTP.
    pub exit_code: Option<i32>,
    /// Wall time of the call in milliseconds.
    pub duration_ms: f64,
    /// Partial results, in order.
    pub partials: Vec<Value>,
}

impl Execution {
    /// The registry's execute answer: `{"output", "stdout", "stderr", "exit_code",
    /// "duration_ms", "error"}`, with `error` as `{"code", "message", "details"?}`.
    pub fn to_api_json(&self) -> Value {
        let (output, error) = match &self.result {
            Ok(v) => (v.clone(), Value::Null),
            Err(e) => (Value::Null, serde_json::to_value(e).unwrap_or(Value::Null)),
        };
        json!({
            "output": output,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
            "error": error,
        })
    }
}

impl Dispatcher {
    /// A dispatcher with these settings. Nothing starts until the first call.
    pub fn new(config: DispatcherConfig) -> Self {
        let http = reqwest::Client::builder()
            .user_agent(concat!("toolshed-dispatch/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Dispatcher {
            launcher: Arc::new(Launcher::new(config)),
            pools: Arc::new(Mutex::new(HashMap::new())),
            builtins: Arc::new(HashMap::new()),
            http,
        }
    }

    /// The same dispatcher with `builtin:` endpoints resolving to these tools (by name).
    pub fn with_builtins(mut self, tools: Vec<Tool>) -> Self {
        let config = PipelineConfig {
            default_timeout: Some(self.launcher.config.default_timeout),
            ..PipelineConfig::default()
        };
        let map = tools
            .into_iter()
            .filter_map(|tool| {
                let toolset = ToolSet::from_tools([tool.clone()]).ok()?;
                let pipeline = Pipeline::builder(toolset).config(config.clone()).build();
                Some((tool.name().to_owned(), Builtin { tool, pipeline }))
            })
            .collect();
        self.builtins = Arc::new(map);
        self
    }

    /// The settings.
    pub fn config(&self) -> &DispatcherConfig {
        &self.launcher.config
    }

    /// A pipeline handler running `endpoint` in the config's mode. Build the tool with
    /// it: `Tool::builder(name)...raw_handler(dispatcher.handler(ep, name))`. The
    /// pipeline owns the timeout: when it drops the call, the process is killed (its
    /// whole process group) and reaped.
    pub fn handler(&self, endpoint: Endpoint, tool_name: &str) -> Arc<dyn Handler> {
        self.handler_inner(endpoint, tool_name, None)
    }

    /// [`Dispatcher::handler`] with an explicit mode.
    pub fn handler_with_mode(
        &self,
        endpoint: Endpoint,
        tool_name: &str,
        mode: Mode,
    ) -> Arc<dyn Handler> {
        self.handler_inner(endpoint, tool_name, Some(mode))
    }

    fn handler_inner(
        &self,
        endpoint: Endpoint,
        tool_name: &str,
        mode: Option<Mode>,
    ) -> Arc<dyn Handler> {
        Arc::new(DispatchHandler {
            dispatcher: self.clone(),
            endpoint: Arc::new(endpoint),
            tool: Arc::from(tool_name),
            mode,
        })
    }

    /// Check that `endpoint` can run: a built-in exists, the interpreter starts, a
    /// TypeScript source transpiles. Call it when registering a tool.
    pub async fn check(&self, endpoint: &Endpoint) -> Result<(), DispatchError> {
        match endpoint {
            Endpoint::Builtin { name } => self.builtin(name).map(|_| ()),
            Endpoint::Http { .. } => Ok(()),
            _ => self
                .launcher
                .spawn_spec(endpoint, &endpoint.to_string(), self.default_mode(endpoint))
                .await
                .map(|_| ()),
        }
    }

    /// Start pooled workers for `endpoint` until its pool is full; returns how many
    /// were started. Calls then find warm workers from the first one.
    pub async fn warm(&self, endpoint: &Endpoint) -> Result<usize, DispatchError> {
        if !endpoint.is_subprocess() {
            return Ok(0);
        }
        self.pool(endpoint).warm(&endpoint.to_string()).await
    }

    /// Stop every pooled worker (idle ones now, busy ones when their call ends).
    pub fn shutdown(&self) {
        let pools = match self.pools.lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => HashMap::new(),
        };
        drop(pools);
    }

    /// The Python executable tools run with (the configured name resolved once).
    pub async fn python_executable(&self) -> Result<PathBuf, DispatchError> {
        self.launcher.python_executable("python").await
    }

    /// [`infer::infer_python_schema`] with this dispatcher's settings.
    pub async fn infer_python_schema(
        &self,
        path: &Path,
        function: &str,
    ) -> Result<InferredTool, DispatchError> {
        infer::python(&self.launcher, path, function).await
    }

    /// [`infer::infer_node_schema`] with this dispatcher's settings.
    pub async fn infer_node_schema(
        &self,
        path: &Path,
        export: Option<&str>,
    ) -> Result<InferredTool, DispatchError> {
        infer::node(&self.launcher, path, export).await
    }

    /// Infer the schema of a `python:` or `node:` endpoint.
    pub async fn infer_schema(&self, endpoint: &Endpoint) -> Result<InferredTool, DispatchError> {
        match endpoint {
            Endpoint::Python { path, function } => self.infer_python_schema(path, function).await,
            Endpoint::Node { path, export } => {
                self.infer_node_schema(path, export.as_deref()).await
            }
            other => Err(DispatchError::InvalidEndpoint {
                endpoint: other.to_string(),
                reason: "schemas can be inferred only from python: and node: endpoints".into(),
            }),
        }
    }

    /// Run one call and report everything seen: result, partials, stdout, stderr, exit
    /// code and duration. Never panics and never hangs past the timeout.
    pub async fn execute(&self, endpoint: &Endpoint, request: Request) -> Execution {
        let started = Instant::now();
        let timeout = request
            .timeout
            .unwrap_or(self.launcher.config.default_timeout);
        let secrets: Vec<Secret> = request.credentials.values().cloned().collect();
        let mut execution = match endpoint {
            Endpoint::Builtin { name } => self.execute_builtin(name, &request, timeout).await,
            Endpoint::Http { url } => {
                let result = http::post(
                    &self.http,
                    url,
                    &request.tool,
                    &request.args,
                    &request.context,
                    Some(timeout),
                    self.launcher.config.http_response_cap,
                )
                .await
                .map_err(|e| e.to_tool_error());
                Execution {
                    result,
                    stdout: String::new(),
                    stderr: String::new(),
                    exit_code: None,
                    duration_ms: 0.0,
                    partials: Vec::new(),
                }
            }
            _ => self.execute_process(endpoint, &request, timeout).await,
        };
        execution.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        scrub_execution(&mut execution, &secrets);
        execution
    }

    /// [`Dispatcher::execute`] for a call the pipeline is making: the call's identity and
    /// its declared credentials come from `ctx` (a credential that cannot be read is the
    /// error result). The registry's execute route uses this to report stdout, stderr and
    /// the exit code of a call that goes through the whole pipeline.
    pub async fn execute_for(
        &self,
        endpoint: &Endpoint,
        tool: &str,
        args: Value,
        ctx: &ToolContext,
        timeout: Option<Duration>,
    ) -> Execution {
        let credentials = match read_credentials(ctx).await {
            Ok(c) => c,
            Err(e) => {
                return Execution {
                    result: Err(e),
                    stdout: String::new(),
                    stderr: String::new(),
                    exit_code: None,
                    duration_ms: 0.0,
                    partials: Vec::new(),
                };
            }
        };
        let request = Request {
            tool: tool.to_owned(),
            args,
            context: CallContext::from_tool_context(ctx),
            credentials,
            timeout,
            mode: None,
        };
        self.execute(endpoint, request).await
    }

    async fn execute_process(
        &self,
        endpoint: &Endpoint,
        request: &Request,
        timeout: Duration,
    ) -> Execution {
        let tool: Arc<str> = Arc::from(request.tool.as_str());
        let mode = request.mode.unwrap_or_else(|| self.default_mode(endpoint));
        let deadline = Instant::now() + timeout;
        let timed_out = || DispatchError::Timeout {
            tool: tool.to_string(),
            ms: timeout.as_millis(),
        };
        let failed = |e: DispatchError| Execution {
            result: Err(e.to_tool_error()),
            stdout: String::new(),
            stderr: String::new(),
            exit_code: None,
            duration_ms: 0.0,
            partials: Vec::new(),
        };
        let opened = tokio::time::timeout(
            timeout,
            self.open(
                endpoint,
                mode,
                &tool,
                &request.args,
                &request.context,
                &request.credentials,
            ),
        )
        .await;
        let mut conv = match opened {
            Err(_) => return failed(timed_out()),
            Ok(Err(e)) => return failed(e),
            Ok(Ok(c)) => c,
        };
        let mut partials = Vec::new();
        let remaining = deadline.saturating_duration_since(Instant::now());
        let outcome = tokio::time::timeout(remaining, async {
            loop {
                match conv.next().await {
                    Ok(Message::Partial(v)) => partials.push(v),
                    Ok(Message::Result(v)) => break Ok(v),
                    Ok(Message::Error { message, code }) => {
                        break Err(DispatchError::ToolFailed {
                            tool: tool.to_string(),
                            message,
                            code,
                        });
                    }
                    Err(e) => break Err(e),
                }
            }
        })
        .await;
        let (result, leftovers) = match outcome {
            Ok(result) => (result, conv.finish().await),
            Err(_) => (Err(timed_out()), conv.abort().await),
        };
        Execution {
            result: result.map_err(|e| e.to_tool_error()),
            stdout: leftovers.stdout,
            stderr: leftovers.stderr,
            exit_code: leftovers.exit_code,
            duration_ms: 0.0,
            partials,
        }
    }

    async fn execute_builtin(&self, name: &str, request: &Request, timeout: Duration) -> Execution {
        let done = |result| Execution {
            result,
            stdout: String::new(),
            stderr: String::new(),
            exit_code: None,
            duration_ms: 0.0,
            partials: Vec::new(),
        };
        let builtin = match self.builtin(name) {
            Ok(b) => b,
            Err(e) => return done(Err(e.to_tool_error())),
        };
        let mut run = RunContext::builder()
            .agent_id(request.context.agent_id.clone())
            .run_id(request.context.run_id.clone())
            .session_id(request.context.session_id.clone());
        if let Some(p) = &request.context.principal {
            run = run.principal(p.clone());
        }
        if !request.credentials.is_empty() {
            run = run.credentials(Arc::new(GivenCredentials(request.credentials.clone())));
        }
        let run = run.build();
        let call = ToolCall {
            id: request.context.tool_call_id.clone(),
            name: builtin.tool.name().to_owned(),
            args: request.args.clone(),
        };
        let pipeline = &builtin.pipeline;
        let prepared = match pipeline.prepare(&run, call) {
            Ok(p) => p,
            Err(outcome) => return done(outcome.result),
        };
        match prepared.needs_approval() {
            Ok(false) => {}
            Ok(true) => {
                return done(Err(ToolError::new(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "tool `{name}` needs a human approval before it runs; run it through \
                         the durable runtime"
                    ),
                )));
            }
            Err(e) => return done(Err(e)),
        }
        let options = ExecuteOptions {
            idempotency_key: request.context.idempotency_key.clone(),
        };
        match tokio::time::timeout(timeout, pipeline.execute(&run, prepared, options)).await {
            Ok(outcome) => done(outcome.result),
            Err(_) => done(Err(DispatchError::Timeout {
                tool: request.tool.clone(),
                ms: timeout.as_millis(),
            }
            .to_tool_error())),
        }
    }

    fn builtin(&self, name: &str) -> Result<&Builtin, DispatchError> {
        self.builtins.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.builtins.keys().map(String::as_str).collect();
            known.sort_unstable();
            DispatchError::UnknownBuiltin {
                name: name.to_owned(),
                known: if known.is_empty() {
                    "none (none were given to this dispatcher)".into()
                } else {
                    known.join(", ")
                },
            }
        })
    }

    fn default_mode(&self, endpoint: &Endpoint) -> Mode {
        match endpoint {
            Endpoint::Exec { .. } => self.launcher.config.exec_mode,
            _ => self.launcher.config.mode,
        }
    }

    fn pool(&self, endpoint: &Endpoint) -> Arc<Pool> {
        let make = || {
            Pool::new(
                endpoint.clone(),
                self.launcher.clone(),
                self.launcher.config.pool_size,
            )
        };
        match self.pools.lock() {
            Ok(mut pools) => pools.entry(endpoint.clone()).or_insert_with(make).clone(),
            // A poisoned map still works as a private pool for this call.
            Err(_) => make(),
        }
    }

    /// Start a call: a fresh process or a pooled worker, with the request written.
    async fn open(
        &self,
        endpoint: &Endpoint,
        mode: Mode,
        tool: &Arc<str>,
        args: &Value,
        context: &CallContext,
        credentials: &BTreeMap<String, Secret>,
    ) -> Result<Conversation, DispatchError> {
        let id = next_request_id();
        let line = encode_request(&id, tool, args, context, credentials);
        let config = &self.launcher.config;
        let (cap, grace) = (config.stdout_cap, config.exit_grace);
        match mode {
            Mode::OneShot => {
                let proc = self.launcher.spawn(endpoint, tool, Mode::OneShot).await?;
                let (conv, _) =
                    Conversation::start(Worker::Solo(proc), tool.clone(), id, line, cap, grace)
                        .await;
                Ok(conv)
            }
            Mode::Pool => {
                let pool = self.pool(endpoint);
                let lease = pool.acquire(tool).await?;
                let fresh = lease.fresh;
                let (conv, write_failed) = Conversation::start(
                    Worker::Pooled(lease),
                    tool.clone(),
                    id.clone(),
                    line.clone(),
                    cap,
                    grace,
                )
                .await;
                if !write_failed || fresh {
                    return Ok(conv);
                }
                // The idle worker was gone before the request reached it, so the tool
                // never saw it: one more try on a new worker is safe.
                if let Worker::Pooled(lease) = conv.into_worker() {
                    lease.discard();
                }
                let lease = pool.acquire(tool).await?;
                let (conv, _) =
                    Conversation::start(Worker::Pooled(lease), tool.clone(), id, line, cap, grace)
                        .await;
                Ok(conv)
            }
        }
    }

    /// A call from the pipeline.
    async fn run_handler(
        &self,
        endpoint: &Endpoint,
        tool: Arc<str>,
        mode: Option<Mode>,
        args: Value,
        ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        match endpoint {
            Endpoint::Builtin { name } => {
                let builtin = self.builtin(name).map_err(|e| e.to_tool_error())?;
                builtin.tool.handler().call(args, ctx).await
            }
            Endpoint::Http { url } => {
                let context = CallContext::from_tool_context(&ctx);
                http::post(
                    &self.http,
                    url,
                    &tool,
                    &args,
                    &context,
                    None,
                    self.launcher.config.http_response_cap,
                )
                .await
                .map(ToolOutput::Value)
                .map_err(|e| e.to_tool_error())
            }
            _ => {
                let credentials = read_credentials(&ctx).await?;
                let secrets: Vec<Secret> = credentials.values().cloned().collect();
                let context = CallContext::from_tool_context(&ctx);
                let mode = mode.unwrap_or_else(|| self.default_mode(endpoint));
                let mut conv = self
                    .open(endpoint, mode, &tool, &args, &context, &credentials)
                    .await
                    .map_err(|e| e.to_tool_error())?;
                match conv.next().await {
                    Ok(Message::Partial(first)) => {
                        Ok(ToolOutput::Stream(stream_rest(first, conv, tool, secrets)))
                    }
                    Ok(Message::Result(v)) => {
                        settle(conv, tool, secrets).await;
                        Ok(ToolOutput::Value(v))
                    }
                    Ok(Message::Error { message, code }) => {
                        let err = DispatchError::ToolFailed {
                            tool: tool.to_string(),
                            message,
                            code,
                        };
                        settle(conv, tool, secrets).await;
                        Err(err.to_tool_error())
                    }
                    Err(e) => {
                        settle(conv, tool, secrets).await;
                        Err(e.to_tool_error())
                    }
                }
            }
        }
    }
}

/// The handler [`Dispatcher::handler`] returns.
struct DispatchHandler {
    dispatcher: Dispatcher,
    endpoint: Arc<Endpoint>,
    tool: Arc<str>,
    mode: Option<Mode>,
}

impl Handler for DispatchHandler {
    fn call(&self, args: Value, ctx: ToolContext) -> HandlerFuture {
        let dispatcher = self.dispatcher.clone();
        let endpoint = self.endpoint.clone();
        let tool = self.tool.clone();
        let mode = self.mode;
        Box::pin(async move {
            dispatcher
                .run_handler(&endpoint, tool, mode, args, ctx)
                .await
        })
    }
}

/// The stream of a call that sent a partial: the first partial, then each line until
/// the final one. Dropping it (a pipeline timeout) kills the process.
fn stream_rest(
    first: Value,
    conv: Conversation,
    tool: Arc<str>,
    secrets: Vec<Secret>,
) -> futures_util::stream::BoxStream<'static, Result<Value, ToolError>> {
    let rest = stream::unfold(Some(conv), move |state| {
        let tool = tool.clone();
        let secrets = secrets.clone();
        async move {
            let mut conv = state?;
            let item = match conv.next().await {
                Ok(Message::Partial(v)) => return Some((Ok(v), Some(conv))),
                Ok(Message::Result(v)) => Ok(v),
                Ok(Message::Error { message, code }) => Err(DispatchError::ToolFailed {
                    tool: tool.to_string(),
                    message,
                    code,
                }
                .to_tool_error()),
                Err(e) => Err(e.to_tool_error()),
            };
            settle(conv, tool, secrets).await;
            Some((item, None))
        }
    });
    stream::once(std::future::ready(Ok(first)))
        .chain(rest)
        .boxed()
}

/// Read every declared credential through the context (so the pipeline scrubs them).
/// One the provider does not have is left out: the tool sees no such key. A provider
/// failure fails the call.
async fn read_credentials(ctx: &ToolContext) -> Result<BTreeMap<String, Secret>, ToolError> {
    let mut out = BTreeMap::new();
    let creds = ctx.credentials();
    for name in creds.declared() {
        match creds.get(name).await {
            Ok(secret) => {
                out.insert(name.clone(), secret);
            }
            Err(e) if e.code == ErrorCode::CredentialNotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// End a pipeline call's conversation. A pooled worker goes back at once (the next call
/// should find it); a one-shot process is waited for in the background, so the caller
/// does not wait for it to exit.
async fn settle(conv: Conversation, tool: Arc<str>, secrets: Vec<Secret>) {
    if conv.is_pooled() {
        log_leftovers(&tool, conv.finish().await, &secrets);
    } else {
        tokio::spawn(async move { log_leftovers(&tool, conv.finish().await, &secrets) });
    }
}

/// Tool stderr is the tool's log: it goes to `tracing` under `toolshed::dispatch`.
fn log_leftovers(tool: &str, leftovers: Leftovers, secrets: &[Secret]) {
    let stderr = leftovers.stderr.trim_end();
    if !stderr.is_empty() {
        let stderr = scrub(stderr, secrets);
        tracing::info!(target: "toolshed::dispatch", tool, exit_code = leftovers.exit_code, "stderr: {stderr}");
    }
}

fn next_request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("r{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn scrub(text: &str, secrets: &[Secret]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        // As in the pipeline: values shorter than 4 characters are not worth the name.
        if s.expose().len() >= 4 && out.contains(s.expose()) {
            out = out.replace(s.expose(), "[REDACTED]");
        }
    }
    out
}

fn scrub_value(value: &mut Value, secrets: &[Secret]) {
    match value {
        Value::String(s) => *s = scrub(s, secrets),
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_value(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| scrub_value(v, secrets)),
        _ => {}
    }
}

fn scrub_execution(e: &mut Execution, secrets: &[Secret]) {
    if secrets.is_empty() {
        return;
    }
    e.stdout = scrub(&e.stdout, secrets);
    e.stderr = scrub(&e.stderr, secrets);
    e.partials.iter_mut().for_each(|v| scrub_value(v, secrets));
    match &mut e.result {
        Ok(v) => scrub_value(v, secrets),
        Err(err) => {
            err.message = scrub(&err.message, secrets);
            if let Some(d) = &mut err.details {
                scrub_value(d, secrets);
            }
        }
    }
}

/// Credentials handed to [`Dispatcher::execute`], served to a built-in tool.
#[derive(Debug)]
struct GivenCredentials(BTreeMap<String, Secret>);

impl CredentialProvider for GivenCredentials {
    fn describe(&self) -> String {
        "request".into()
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        let result = self.0.get(name).cloned().ok_or_else(|| {
            CredentialError::new(
                ErrorCode::CredentialNotFound,
                format!("credential `{name}` was not given with the request"),
            )
        });
        Box::pin(std::future::ready(result))
    }
}
