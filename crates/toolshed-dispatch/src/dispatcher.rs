//! The [`Dispatcher`]: runs a call at any endpoint, as a pipeline [`Handler`] whose
//! [`Reply`] carries the call's diagnostics, or directly ([`Dispatcher::execute`]).
//! Both take the same conversation loop ([`Conversation::events`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::stream::{self, BoxStream, StreamExt};
use serde_json::Value;
use toolshed_core::credentials::{scrub_error, scrub_value};
use toolshed_core::{
    Asker, Chunk, Diagnostics, DiagnosticsSink, ErrorCode, Handler, HandlerFuture, Reply, Secret,
    Tool, ToolContext, ToolError, ToolOutput,
};

use crate::config::{DispatcherConfig, Mode, SandboxPolicy};
use crate::conversation::{Conversation, Deadline, Event, Opening, Worker};
use crate::endpoint::Endpoint;
use crate::error::DispatchError;
use crate::http;
use crate::infer::{self, InferredTool};
use crate::launcher::Launcher;
use crate::pool::{PoolKey, PoolStats, Pools};
use crate::protocol::{CallContext, Op, encode_request_with};
use toolshed_sandbox::Network;

/// What an answer may carry around its result: the bytes read past the call's output
/// budget (`ToolContext::output_budget`) before a reader stops.
const FRAMING_BYTES: usize = 64 * 1024;

/// Runs tools at any endpoint: built-in Rust tools, Python and Node functions (one-shot
/// or from warm worker pools), TypeScript, any executable speaking the wire protocol,
/// and HTTP services. Cheap to clone; clones share pools, caches and the sandbox.
/// Dropping the last clone kills every pooled worker.
///
/// Every `python:`, `node:` and `exec:` process runs in the sandbox
/// ([`crate::Isolation::Sandbox`], the default) with its tool's [`SandboxPolicy`]; warm
/// workers are kept per endpoint, tenant and policy (the rules are in
/// [`crate::PoolConfig`]).
#[derive(Clone)]
pub struct Dispatcher {
    launcher: Arc<Launcher>,
    pools: Arc<Pools>,
    builtins: Arc<HashMap<String, Tool>>,
    http: http::Http,
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

/// One call for [`Dispatcher::execute`] (a subprocess or HTTP endpoint).
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
    /// The tool's sandbox policy (network, limits, extra binds).
    pub policy: SandboxPolicy,
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
            policy: SandboxPolicy::default(),
        }
    }

    /// Set the sandbox policy.
    pub fn policy(mut self, policy: SandboxPolicy) -> Self {
        self.policy = policy;
        self
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
    /// What the process left: stdout (its protocol lines), stderr (the tail, when
    /// longer than the cap), the exit code of a one-shot process (`None` for pooled
    /// workers, killed processes and HTTP), the signal that killed it, whether the
    /// timeout stopped it.
    pub diagnostics: Diagnostics,
    /// Wall time of the call in milliseconds.
    pub duration_ms: f64,
    /// Partial results, in order.
    pub partials: Vec<Value>,
}

impl Dispatcher {
    /// A dispatcher with these settings. Nothing starts until the first call.
    pub fn new(config: DispatcherConfig) -> Self {
        let http = http::client(&config.http);
        Dispatcher {
            pools: Pools::new(config.pool.clone()),
            launcher: Arc::new(Launcher::new(config)),
            builtins: Arc::new(HashMap::new()),
            http,
        }
    }

    /// The same dispatcher running its sandboxed tools in `sandbox`, a supervisor its
    /// caller already built (the server shares its own), instead of building one from
    /// [`crate::Isolation::Sandbox`]'s settings on the first subprocess call. Ignored
    /// when the isolation is [`crate::Isolation::Unsandboxed`] or a sandbox was already
    /// built.
    pub fn with_sandbox(self, sandbox: toolshed_sandbox::Sandbox) -> Self {
        self.launcher.share_sandbox(sandbox);
        self
    }

    /// The same dispatcher with `builtin:` endpoints resolving to these tools (by name).
    pub fn with_builtins(mut self, tools: Vec<Tool>) -> Self {
        let map = tools
            .into_iter()
            .map(|tool| (tool.name().to_owned(), tool))
            .collect();
        self.builtins = Arc::new(map);
        self
    }

    /// The settings.
    pub fn config(&self) -> &DispatcherConfig {
        &self.launcher.config
    }

    /// A pipeline handler running `endpoint` in the config's mode. Build the tool with
    /// it: `Tool::builder(name)...raw_handler(dispatcher.handler(ep, name))`. Its reply
    /// carries the call's diagnostics (stdout, stderr, exit code). The pipeline owns the
    /// timeout: when it drops the call, the process is killed (its whole process group)
    /// and reaped, and what it had written so far is left in the call's
    /// [`ToolContext::diagnostics`] sink.
    pub fn handler(&self, endpoint: Endpoint, tool_name: &str) -> Arc<dyn Handler> {
        self.handler_inner(endpoint, tool_name, None, SandboxPolicy::default())
    }

    /// [`Dispatcher::handler`] with an explicit mode.
    pub fn handler_with_mode(
        &self,
        endpoint: Endpoint,
        tool_name: &str,
        mode: Mode,
    ) -> Arc<dyn Handler> {
        self.handler_inner(endpoint, tool_name, Some(mode), SandboxPolicy::default())
    }

    /// [`Dispatcher::handler`] with the tool's own sandbox policy: its network, its
    /// limits (clamped to the server's ceilings) and extra read-only binds, e.g. an
    /// agent project's folder:
    ///
    /// ```no_run
    /// use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint, SandboxPolicy};
    /// use toolshed_sandbox::{Bind, LimitsRequest, Network};
    ///
    /// let dispatcher = Dispatcher::new(DispatcherConfig::default());
    /// let policy = SandboxPolicy {
    ///     network: Network::On,
    ///     limits: LimitsRequest { memory_bytes: Some(512 << 20), ..LimitsRequest::default() },
    ///     binds: vec![Bind::read_only("/srv/project", "/project")],
    ///     libraries: Vec::new(),
    /// };
    /// let endpoint = Endpoint::parse("python:/srv/project/tools.py:lookup").unwrap();
    /// let handler = dispatcher.handler_with(endpoint, "lookup", policy);
    /// ```
    pub fn handler_with(
        &self,
        endpoint: Endpoint,
        tool_name: &str,
        policy: SandboxPolicy,
    ) -> Arc<dyn Handler> {
        self.handler_inner(endpoint, tool_name, None, policy)
    }

    fn handler_inner(
        &self,
        endpoint: Endpoint,
        tool_name: &str,
        mode: Option<Mode>,
        policy: SandboxPolicy,
    ) -> Arc<dyn Handler> {
        Arc::new(DispatchHandler {
            dispatcher: self.clone(),
            endpoint: Arc::new(endpoint),
            tool: Arc::from(tool_name),
            mode,
            policy: Arc::new(policy),
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
                .spawn_spec(
                    endpoint,
                    &endpoint.to_string(),
                    self.default_mode(endpoint),
                    self.launcher.config.isolation.is_sandboxed(),
                    &SandboxPolicy::default(),
                )
                .await
                .map(|_| ()),
        }
    }

    /// Start pooled workers for `endpoint` (calls without a tenant, the default
    /// policy) until [`crate::PoolConfig::warm`] are idle; returns how many were
    /// started. Such calls then find warm workers from the first one.
    pub async fn warm(&self, endpoint: &Endpoint) -> Result<usize, DispatchError> {
        if !endpoint.is_subprocess() {
            return Ok(0);
        }
        self.pool(endpoint, None, &SandboxPolicy::default())
            .warm(&endpoint.to_string())
            .await
    }

    /// The counts of every warm pool (idle and busy workers, started and retired).
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        self.pools.stats()
    }

    /// Drop the warm pools of `endpoint`, every tenant's: idle workers are killed now,
    /// busy ones when their call ends (a deleted or changed tool's workers must not
    /// linger until their idle timeout). Returns how many pools there were.
    pub fn drop_pools(&self, endpoint: &Endpoint) -> usize {
        self.pools.drop_endpoint(endpoint)
    }

    /// Stop every pooled worker (idle ones now, busy ones when their call ends).
    pub fn shutdown(&self) {
        self.pools.clear();
    }

    /// The Python executable tools run with (the configured name resolved once).
    pub async fn python_executable(&self) -> Result<PathBuf, DispatchError> {
        self.launcher.python_executable("python").await
    }

    /// The JavaScript module this dispatcher runs for a TypeScript file: transpiled
    /// once, in this process, cached by content under the cache folder.
    pub async fn typescript_output(&self, source: &Path) -> Result<PathBuf, DispatchError> {
        self.launcher.typescript(source).await
    }

    /// [`infer::infer_python_schema`] with this dispatcher's settings.
    pub async fn infer_python_schema(
        &self,
        path: &Path,
        function: &str,
    ) -> Result<InferredTool, DispatchError> {
        infer::python(&self.launcher, path, Some(function)).await
    }

    /// [`infer::infer_python_file`] with this dispatcher's settings: `None` lets the
    /// file say which function is its tool.
    pub async fn infer_python_file(
        &self,
        path: &Path,
        function: Option<&str>,
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

    /// Run one call outside the pipeline and report everything seen: result, partials,
    /// diagnostics and duration. Never panics and never hangs past the timeout: at the
    /// deadline the process is killed and reaped before this returns. Only subprocess
    /// and HTTP endpoints run here; a built-in runs through the pipeline (build a tool
    /// with [`Dispatcher::handler`]).
    pub async fn execute(&self, endpoint: &Endpoint, request: Request) -> Execution {
        let started = Instant::now();
        let timeout = request
            .timeout
            .unwrap_or(self.launcher.config.default_timeout);
        let secrets: Arc<[Secret]> = request.credentials.values().cloned().collect();
        let mut execution = match endpoint {
            Endpoint::Builtin { .. } => Execution {
                result: Err(DispatchError::InvalidEndpoint {
                    endpoint: endpoint.to_string(),
                    reason: "a built-in runs through the pipeline, not `execute`: build a tool \
                             with `Dispatcher::handler`"
                        .into(),
                }
                .to_tool_error()),
                diagnostics: Diagnostics::default(),
                duration_ms: 0.0,
                partials: Vec::new(),
            },
            Endpoint::Http { url } => Execution {
                result: http::post(
                    &self.http,
                    url,
                    &request.tool,
                    &request.args,
                    &request.context,
                    Some(timeout),
                    self.launcher.config.http_response_cap,
                )
                .await
                .map_err(|e| e.to_tool_error()),
                diagnostics: Diagnostics::default(),
                duration_ms: 0.0,
                partials: Vec::new(),
            },
            _ => {
                self.execute_process(endpoint, &request, timeout, secrets.clone())
                    .await
            }
        };
        execution.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        scrub_execution(&mut execution, &secrets);
        execution
    }

    /// [`Dispatcher::execute`] for a subprocess: the conversation loop, under a deadline.
    async fn execute_process(
        &self,
        endpoint: &Endpoint,
        request: &Request,
        timeout: Duration,
        secrets: Arc<[Secret]>,
    ) -> Execution {
        let tool: Arc<str> = Arc::from(request.tool.as_str());
        let mode = request.mode.unwrap_or_else(|| self.default_mode(endpoint));
        let deadline = Deadline {
            at: tokio::time::Instant::now() + timeout,
            after: timeout,
        };
        let failed = |e: DispatchError, diagnostics: Diagnostics| Execution {
            result: Err(e.to_tool_error()),
            diagnostics,
            duration_ms: 0.0,
            partials: Vec::new(),
        };
        let opened = tokio::time::timeout_at(
            deadline.at,
            self.open(
                endpoint,
                mode,
                &tool,
                &request.args,
                &request.context,
                &request.credentials,
                &request.policy,
                None,
            ),
        )
        .await;
        let conv = match opened {
            Err(_) => {
                let timed_out = Diagnostics {
                    timed_out: true,
                    ..Diagnostics::default()
                };
                let err = DispatchError::Timeout {
                    tool: tool.to_string(),
                    ms: timeout.as_millis(),
                };
                return failed(err, timed_out);
            }
            Ok(Err(e)) => return failed(e, Diagnostics::default()),
            Ok(Ok(c)) => c,
        };
        let mut partials = Vec::new();
        let mut events = std::pin::pin!(conv.events(Some(deadline), secrets));
        while let Some(event) = events.next().await {
            match event {
                Event::Partial(v) => partials.push(v),
                Event::StreamEnd(diagnostics) => {
                    // The stream's last partial is its result (one came, or there
                    // would be no `StreamEnd`).
                    let result = partials
                        .last()
                        .cloned()
                        .ok_or_else(|| ended_without_answer(&tool).to_tool_error());
                    return Execution {
                        result,
                        diagnostics: *diagnostics,
                        duration_ms: 0.0,
                        partials,
                    };
                }
                Event::End(result, diagnostics) => {
                    return Execution {
                        result: result.map_err(|e| e.to_tool_error()),
                        diagnostics: *diagnostics,
                        duration_ms: 0.0,
                        partials,
                    };
                }
            }
        }
        failed(ended_without_answer(&tool), Diagnostics::default())
    }

    fn builtin(&self, name: &str) -> Result<&Tool, DispatchError> {
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

    fn pool(
        &self,
        endpoint: &Endpoint,
        tenant: Option<&str>,
        policy: &SandboxPolicy,
    ) -> Arc<crate::pool::Pool> {
        let key = PoolKey {
            endpoint: endpoint.clone(),
            tenant: tenant.map(str::to_owned),
            policy: policy.fingerprint(),
        };
        self.pools.get(key, policy, &self.launcher)
    }

    /// Start a call: a fresh process or a pooled worker, with the request written.
    #[allow(clippy::too_many_arguments)]
    async fn open(
        &self,
        endpoint: &Endpoint,
        mode: Mode,
        tool: &Arc<str>,
        args: &Value,
        context: &CallContext,
        credentials: &BTreeMap<String, Secret>,
        policy: &SandboxPolicy,
        sink: Option<DiagnosticsSink>,
    ) -> Result<Conversation, DispatchError> {
        self.open_with(
            endpoint,
            mode,
            tool,
            None,
            args,
            context,
            credentials,
            &BTreeMap::new(),
            policy,
            sink,
            None,
        )
        .await
    }

    /// [`Dispatcher::open`] for a call with the run's env, or for an [`Op`].
    #[allow(clippy::too_many_arguments)]
    async fn open_with(
        &self,
        endpoint: &Endpoint,
        mode: Mode,
        tool: &Arc<str>,
        op: Option<&Op>,
        args: &Value,
        context: &CallContext,
        credentials: &BTreeMap<String, Secret>,
        env: &BTreeMap<String, String>,
        policy: &SandboxPolicy,
        sink: Option<DiagnosticsSink>,
        asker: Option<Arc<dyn Asker>>,
    ) -> Result<Conversation, DispatchError> {
        let id = next_request_id();
        let once = matches!(mode, Mode::OneShot);
        let request = encode_request_with(&id, tool, op, args, context, credentials, env, once);
        let config = &self.launcher.config;
        let opening = || Opening {
            tool: tool.clone(),
            id: id.clone(),
            request: request.clone(),
            cap: config.stdout_cap,
            grace: config.exit_grace,
            sink: sink.clone(),
            asker: asker.clone(),
            // The Python runner reads requests line by line, so a one-shot one can be
            // answered too; the Node runner's one-shot mode reads stdin to its end.
            keep_stdin: matches!(endpoint, Endpoint::Python { .. }),
            // Our runners speak the protocol for the tool: what it prints arrives as
            // `stdout` lines, and that is the stdout a person is shown.
            runner: matches!(endpoint, Endpoint::Python { .. } | Endpoint::Node { .. }),
        };
        match mode {
            Mode::OneShot => {
                let proc = self
                    .launcher
                    .spawn(endpoint, tool, Mode::OneShot, policy)
                    .await?;
                let (conv, _) = Conversation::start(Worker::Solo(proc), opening()).await;
                Ok(conv)
            }
            Mode::Pool => {
                let tenant = context.principal.as_ref().and_then(|p| p.tenant.as_deref());
                let pool = self.pool(endpoint, tenant, policy);
                let lease = self.pools.acquire(&pool, tool).await?;
                let fresh = lease.fresh;
                let (conv, write_failed) =
                    Conversation::start(Worker::Pooled(lease), opening()).await;
                if !write_failed || fresh {
                    return Ok(conv);
                }
                // The idle worker was gone before the request reached it, so the tool
                // never saw it: one more try on a new worker is safe.
                if let Some(Worker::Pooled(lease)) = conv.into_worker() {
                    lease.discard();
                }
                let lease = self.pools.acquire(&pool, tool).await?;
                let (conv, _) = Conversation::start(Worker::Pooled(lease), opening()).await;
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
        policy: &SandboxPolicy,
        args: Value,
        ctx: ToolContext,
    ) -> Reply {
        match endpoint {
            Endpoint::Builtin { name } => match self.builtin(name) {
                Ok(builtin) => builtin.handler().call(args, ctx).await,
                Err(e) => Reply::new(Err(e.to_tool_error())),
            },
            Endpoint::Http { url } => {
                let context = CallContext::from_tool_context(&ctx);
                let result = http::post(
                    &self.http,
                    url,
                    &tool,
                    &args,
                    &context,
                    None,
                    // No more than the call's output budget, plus its framing.
                    self.launcher
                        .config
                        .http_response_cap
                        .min(ctx.output_budget().saturating_add(FRAMING_BYTES)),
                )
                .await;
                Reply::new(result.map(ToolOutput::Value).map_err(|e| e.to_tool_error()))
            }
            _ => {
                let credentials = match read_credentials(&ctx).await {
                    Ok(c) => c,
                    Err(e) => return Reply::new(Err(e)),
                };
                // The credentials it reads, and the run's own secrets (parts of its env
                // values), are scrubbed from the tool's stderr where it is logged.
                let secrets: Arc<[Secret]> = credentials
                    .values()
                    .chain(ctx.run().secrets())
                    .cloned()
                    .collect();
                // The declared env reaches the tool as `ctx.env` (the request's `env`),
                // never as its process env.
                let context = CallContext::from_tool_context(&ctx);
                let mode = mode.unwrap_or_else(|| self.default_mode(endpoint));
                let sink = Some(ctx.diagnostics().clone());
                let conv = match self
                    .open_with(
                        endpoint,
                        mode,
                        &tool,
                        None,
                        &args,
                        &context,
                        &credentials,
                        ctx.run().env_vars(),
                        policy,
                        sink,
                        ctx.run().asker().cloned(),
                    )
                    .await
                {
                    Ok(c) => c,
                    Err(e) => return Reply::new(Err(e.to_tool_error())),
                };
                let mut events = conv.events(None, secrets).boxed();
                // A sandbox without the network: an error that looks like a refused
                // connection says why, and how to grant it.
                let offline =
                    self.launcher.config.isolation.is_sandboxed() && policy.network == Network::Off;
                match events.next().await {
                    // A streaming tool: the pipeline reads the rest (and never retries it).
                    Some(Event::Partial(first)) => {
                        Reply::new(Ok(ToolOutput::Stream(chunks(first, events, offline))))
                    }
                    Some(Event::End(result, diagnostics)) => Reply {
                        output: result
                            .map(ToolOutput::Value)
                            .map_err(|e| network_hint(e.to_tool_error(), offline, &diagnostics)),
                        diagnostics: *diagnostics,
                    },
                    // Never first: a conversation ends a stream only after a partial.
                    Some(Event::StreamEnd(_)) | None => {
                        Reply::new(Err(ended_without_answer(&tool).to_tool_error()))
                    }
                }
            }
        }
    }
}

impl Dispatcher {
    /// Ask a subprocess tool's worker (from its own pool, in pool mode) something other
    /// than a call: an [`Op`] of the compatibility layer. The answer is its one result
    /// line; a partial result, an error line or a broken worker is an error.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn ask(
        &self,
        endpoint: &Endpoint,
        tool: &Arc<str>,
        policy: &SandboxPolicy,
        op: &Op,
        args: &Value,
        context: &CallContext,
        env: &BTreeMap<String, String>,
        secrets: &[Secret],
    ) -> Result<Value, DispatchError> {
        let mode = self.default_mode(endpoint);
        let conv = self
            .open_with(
                endpoint,
                mode,
                tool,
                Some(op),
                args,
                context,
                &BTreeMap::new(),
                env,
                policy,
                None,
                None,
            )
            .await?;
        let mut events = std::pin::pin!(conv.events(None, Arc::from(secrets)));
        match events.next().await {
            Some(Event::End(result, _)) => result,
            Some(Event::Partial(_) | Event::StreamEnd(_)) => Err(DispatchError::Protocol {
                tool: tool.to_string(),
                problem: "a worker answered a compatibility request with a partial result".into(),
                excerpt: String::new(),
            }),
            None => Err(ended_without_answer(tool)),
        }
    }
}

/// The handler [`Dispatcher::handler`] returns.
struct DispatchHandler {
    dispatcher: Dispatcher,
    endpoint: Arc<Endpoint>,
    tool: Arc<str>,
    mode: Option<Mode>,
    policy: Arc<SandboxPolicy>,
}

impl Handler for DispatchHandler {
    fn call(&self, args: Value, ctx: ToolContext) -> HandlerFuture {
        let dispatcher = self.dispatcher.clone();
        let endpoint = self.endpoint.clone();
        let tool = self.tool.clone();
        let mode = self.mode;
        let policy = self.policy.clone();
        Box::pin(async move {
            dispatcher
                .run_handler(&endpoint, tool, mode, &policy, args, ctx)
                .await
        })
    }
}

/// The output of a call that sent a partial: the first partial, then each event of the
/// conversation, its diagnostics just before its result or error. Dropping it (a
/// pipeline timeout) kills the process.
fn chunks(
    first: Value,
    rest: BoxStream<'static, Event>,
    offline: bool,
) -> BoxStream<'static, Result<Chunk, ToolError>> {
    let rest = rest.flat_map(move |event| {
        let items = match event {
            Event::Partial(v) => vec![Ok(Chunk::Value(v))],
            Event::End(result, diagnostics) => {
                let result = result
                    .map(Chunk::Value)
                    .map_err(|e| network_hint(e.to_tool_error(), offline, &diagnostics));
                vec![Ok(Chunk::Diagnostics(*diagnostics)), result]
            }
            // The last value sent is the result: nothing more to add.
            Event::StreamEnd(diagnostics) => vec![Ok(Chunk::Diagnostics(*diagnostics))],
        };
        stream::iter(items)
    });
    stream::once(std::future::ready(Ok(Chunk::Value(first))))
        .chain(rest)
        .boxed()
}

/// What a failed connection says in the languages' own words: Node's `fetch` and
/// `dns`, Python's `socket` and `urllib`, curl. With the network off, a sandbox has only
/// its loopback: a name does not resolve and any other address is unreachable.
const OFFLINE_SIGNS: &[&str] = &[
    "fetch failed",
    "ENETUNREACH",
    "EAI_AGAIN",
    "getaddrinfo",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Could not resolve host",
];

/// An error of a tool whose sandbox has no network, when it reads like a refused
/// connection: the message says so, and names the settings that grant it (a bare
/// `TypeError: fetch failed` leaves the user guessing).
fn network_hint(mut e: ToolError, offline: bool, diagnostics: &Diagnostics) -> ToolError {
    let looks_offline = |text: &str| OFFLINE_SIGNS.iter().any(|sign| text.contains(sign));
    if offline && (looks_offline(&e.message) || looks_offline(&diagnostics.stderr)) {
        e.message.push_str(
            " (this tool's sandbox has no network: grant it with `network: true` on the tool's `ref` entry in agent.yaml, or `network_access: true` in its definition)",
        );
    }
    e
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

fn next_request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("r{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A conversation that yielded nothing at all (it always ends with an event).
fn ended_without_answer(tool: &str) -> DispatchError {
    DispatchError::Io {
        what: format!("the conversation with tool {tool} ended without an answer"),
        source: std::io::Error::other("no final event"),
    }
}

fn scrub_execution(e: &mut Execution, secrets: &[Secret]) {
    if secrets.is_empty() {
        return;
    }
    e.diagnostics.scrub(secrets);
    e.partials.iter_mut().for_each(|v| scrub_value(v, secrets));
    match &mut e.result {
        Ok(v) => scrub_value(v, secrets),
        Err(err) => scrub_error(err, secrets),
    }
}
