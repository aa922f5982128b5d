//! The call pipeline: the one path every call takes (DESIGN.md, "The one path every
//! call takes"), without the journal. Steps, in order:
//!
//! 1. resolve the name (unknown → error listing the nearest names);
//! 2. validate the args, applying defaults;
//! 3. (journal lookup: the durable runtime's job);
//! 4. approval gate (here: an approval-gated call is refused, as only the durable
//!    runtime can park a run);
//! 5. `before_run` hooks (replace args → validated again; or short-circuit);
//! 6. (record Started: the durable runtime's job);
//! 7. execute, raced against the timeout and the run's cancellation, panics caught;
//!    partial results become crumbs;
//! 8. `on_error` hooks, bounded by the retry policy (never for a streaming call);
//! 9. validate the output;
//! 10. `after_run` hooks;
//! 11. emit `tool:result` / `tool:error`.
//!
//! [`Pipeline::prepare`] and [`Pipeline::execute`] expose steps 1–2 and 5–11 so the
//! durable runtime can put its journal and approval steps between them without a
//! second code path: an approved call on resume runs exactly the hooks a live one does.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::StreamExt;
use futures_util::future::Either;
use futures_util::stream::BoxStream;
use serde_json::Value;
use tokio::time::error::Elapsed;

use crate::budget::PartialBudget;
use crate::context::{RunContext, ToolContext};
use crate::credentials::{Credentials, EnvProvider, Secret, scrub_error, scrub_value};
use crate::crumbs::{Crumb, CrumbBus, CrumbKind};
use crate::diagnostics::{Diagnostics, DiagnosticsSink};
use crate::error::{ErrorCode, ToolError};
use crate::hooks::{AfterRun, BeforeRun, Hook, HookCall, HookLevel, OnError};
use crate::schema::describe_violations;
use crate::spec::ToolSpec;
use crate::tool::{Chunk, Reply, Tool, ToolOutput};
use crate::toolset::{Plugin, ToolSet};

/// One call as a model asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call id the model gave (or one made up for it).
    pub id: String,
    /// The tool name as asked.
    pub name: String,
    /// The raw arguments.
    pub args: Value,
}

impl ToolCall {
    /// A call with a fresh id.
    pub fn new(name: impl Into<String>, args: Value) -> Self {
        ToolCall {
            id: format!("call_{}", uuid::Uuid::now_v7().simple()),
            name: name.into(),
            args,
        }
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The call id.
    pub tool_call_id: Arc<str>,
    /// The tool name as asked.
    pub tool_name: Arc<str>,
    /// The result, or the error result the model sees.
    pub result: Result<Value, ToolError>,
    /// Wall time from the start of the call to its end.
    pub duration: Duration,
    /// Executions of the handler (0 when it never ran).
    pub attempts: u32,
    /// What the last execution left besides its result (stdout, stderr, exit code, …),
    /// scrubbed of secrets and capped at [`PipelineConfig::max_diagnostic_bytes`] per
    /// field. Empty when the handler never ran or runs in-process.
    pub diagnostics: Diagnostics,
}

impl CallOutcome {
    /// The text to hand a model as this call's result.
    pub fn to_model_text(&self) -> String {
        match &self.result {
            Ok(Value::String(s)) => s.clone(),
            Ok(v) => v.to_string(),
            Err(e) => e.to_model_text(),
        }
    }
}

/// Settings of a [`Pipeline`].
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// The timeout of a tool that declares none. `None` means no timeout.
    pub default_timeout: Option<Duration>,
    /// How long one hook invocation may take.
    pub hook_timeout: Duration,
    /// The most bytes of a call's stdout, and of its stderr, kept in its diagnostics
    /// (the end is kept and the field flagged as truncated). 64 KiB by default.
    pub max_diagnostic_bytes: usize,
    /// The call's output budget: the most bytes of its result, error, content blocks
    /// and partial results that reach memory past its reader, an answer or the journal
    /// (see [`crate::budget`]). Handlers read it from
    /// [`crate::ToolContext::output_budget`]. 1 MiB by default.
    pub max_output_bytes: usize,
    /// Host paths callers see by another name, longest first (e.g. a server's cache
    /// folder as `<cache>`): replaced in every call's stdout, stderr and error before
    /// anyone sees them, so a stack trace does not show where the server keeps its
    /// files. Empty by default (the CLI's user sees their own paths).
    pub path_aliases: Vec<(String, String)>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            default_timeout: Some(Duration::from_secs(300)),
            hook_timeout: Duration::from_secs(30),
            max_diagnostic_bytes: 64 * 1024,
            max_output_bytes: crate::budget::DEFAULT_OUTPUT_BYTES,
            path_aliases: Vec::new(),
        }
    }
}

/// A call that passed resolution and validation, ready to execute.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    tool: Tool,
    id: Arc<str>,
    args: Value,
    started: Instant,
}

impl PreparedCall {
    /// The resolved tool.
    pub fn tool(&self) -> &Tool {
        &self.tool
    }
    /// The validated args, defaults applied.
    pub fn args(&self) -> &Value {
        &self.args
    }
    /// The call id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Whether the tool's approval gate applies to these args (an asynchronous
    /// predicate, e.g. one in the tool's worker, is evaluated for `run`).
    pub async fn needs_approval(&self, run: &RunContext) -> Result<bool, ToolError> {
        self.tool
            .spec()
            .approval
            .decide(&self.args, run, &self.id)
            .await
    }
}

/// Per-execution options the durable runtime sets.
#[derive(Debug, Clone, Default)]
pub struct ExecuteOptions {
    /// The idempotency key handed to a keyed call's handler.
    pub idempotency_key: Option<String>,
}

/// The in-memory call pipeline. Cheap to clone; calls share no lock.
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<PipelineInner>,
}

struct PipelineInner {
    toolset: ToolSet,
    plugin_hooks: Vec<Arc<dyn Hook>>,
    global_hooks: Vec<Arc<dyn Hook>>,
    crumbs: CrumbBus,
    config: PipelineConfig,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("toolset", &self.inner.toolset)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Pipeline`].
#[derive(Default)]
pub struct PipelineBuilder {
    toolset: ToolSet,
    plugin_hooks: Vec<Arc<dyn Hook>>,
    global_hooks: Vec<Arc<dyn Hook>>,
    crumbs: Option<CrumbBus>,
    config: PipelineConfig,
}

impl PipelineBuilder {
    /// Take the hooks of these plugins (second in the chain).
    pub fn plugins(mut self, plugins: &[Arc<dyn Plugin>]) -> Self {
        for p in plugins {
            self.plugin_hooks.extend(p.hooks());
        }
        self
    }
    /// Add a plugin-level hook directly.
    pub fn plugin_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.plugin_hooks.push(hook);
        self
    }
    /// Add a global-config hook (last in the chain).
    pub fn global_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.global_hooks.push(hook);
        self
    }
    /// Use this crumb bus (to share it with other components).
    pub fn crumbs(mut self, bus: CrumbBus) -> Self {
        self.crumbs = Some(bus);
        self
    }
    /// Settings.
    pub fn config(mut self, config: PipelineConfig) -> Self {
        self.config = config;
        self
    }
    /// Finish.
    pub fn build(self) -> Pipeline {
        Pipeline {
            inner: Arc::new(PipelineInner {
                toolset: self.toolset,
                plugin_hooks: self.plugin_hooks,
                global_hooks: self.global_hooks,
                crumbs: self.crumbs.unwrap_or_default(),
                config: self.config,
            }),
        }
    }
}

type StepResult<T> = Result<T, ToolError>;

impl Pipeline {
    /// Start building a pipeline over a toolset.
    pub fn builder(toolset: ToolSet) -> PipelineBuilder {
        PipelineBuilder {
            toolset,
            ..PipelineBuilder::default()
        }
    }

    /// The settings.
    pub fn config(&self) -> &PipelineConfig {
        &self.inner.config
    }

    /// The toolset.
    pub fn toolset(&self) -> &ToolSet {
        &self.inner.toolset
    }

    /// The crumb bus: subscribe to it or add sinks.
    pub fn crumbs(&self) -> &CrumbBus {
        &self.inner.crumbs
    }

    /// Run one call through the whole pipeline. Never panics and never fails: every
    /// failure is an error result in the outcome.
    pub async fn call(&self, run: &RunContext, call: ToolCall) -> CallOutcome {
        let prepared = match self.prepare(run, call) {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        match prepared.needs_approval(run).await {
            Ok(false) => self.execute(run, prepared, ExecuteOptions::default()).await,
            Ok(true) => {
                let err = ToolError::new(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "tool `{}` needs a human approval before it runs; run it through the \
                         durable runtime, which parks the run until someone approves",
                        prepared.tool.name()
                    ),
                );
                self.finish_prepared(run, &prepared, Err(err), 0, &[])
            }
            Err(err) => self.finish_prepared(run, &prepared, Err(err), 0, &[]),
        }
    }

    /// Run the calls of one model turn concurrently; results come back in the order asked.
    pub async fn call_many(&self, run: &RunContext, mut calls: Vec<ToolCall>) -> Vec<CallOutcome> {
        if calls.len() == 1
            && let Some(call) = calls.pop()
        {
            return vec![self.call(run, call).await];
        }
        let handles: Vec<_> = calls
            .into_iter()
            .map(|call| {
                let this = self.clone();
                let run = run.clone();
                let (id, name) = (
                    Arc::<str>::from(call.id.as_str()),
                    Arc::<str>::from(call.name.as_str()),
                );
                (
                    id,
                    name,
                    tokio::spawn(async move { this.call(&run, call).await }),
                )
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len());
        for (id, name, handle) in handles {
            out.push(match handle.await {
                Ok(outcome) => outcome,
                // Panics are caught inside `call`; this is a runtime shutting down.
                Err(e) => CallOutcome {
                    tool_call_id: id,
                    tool_name: name,
                    result: Err(ToolError::new(
                        ErrorCode::Cancelled,
                        format!("the call was cancelled before it finished: {e}"),
                    )),
                    duration: Duration::ZERO,
                    attempts: 0,
                    diagnostics: Diagnostics::default(),
                },
            });
        }
        out
    }

    /// Steps 1–2: emit `tool:call`, resolve the name, validate the args (defaults applied).
    /// On failure the call is already finished: the outcome (with `tool:error` emitted)
    /// is returned as the error.
    // The large Err is deliberate: it is the finished outcome, returned once per call.
    #[allow(clippy::result_large_err)]
    pub fn prepare(&self, run: &RunContext, call: ToolCall) -> Result<PreparedCall, CallOutcome> {
        let started = Instant::now();
        let id: Arc<str> = Arc::from(call.id);
        let bus = &self.inner.crumbs;
        let observed = bus.is_observed();
        let Some(tool) = self.inner.toolset.get(&call.name) else {
            let name: Arc<str> = Arc::from(call.name.as_str());
            if observed {
                bus.emit(crumb(
                    run,
                    &id,
                    &name,
                    CrumbKind::Call,
                    Some(call.args),
                    None,
                    None,
                ));
            }
            let hint = self
                .inner
                .toolset
                .did_you_mean(&call.name)
                .unwrap_or_else(|| {
                    let mut names: Vec<&str> = self.inner.toolset.iter().map(Tool::name).collect();
                    names.truncate(20);
                    format!("available tools: {}", names.join(", "))
                });
            let err = ToolError::new(
                ErrorCode::UnknownTool,
                format!("unknown tool `{}`; {hint}", call.name),
            );
            return Err(self.finish_unrun(run, &id, &name, started, err));
        };
        let name = tool.spec().name.as_arc();
        if observed {
            bus.emit(crumb(
                run,
                &id,
                name,
                CrumbKind::Call,
                Some(call.args.clone()),
                None,
                None,
            ));
        }
        let mut args = call.args;
        if let Err(err) = validate_args(tool, &mut args, None) {
            return Err(self.finish_unrun(run, &id, name, started, err));
        }
        Ok(PreparedCall {
            tool: tool.clone(),
            id,
            args,
            started,
        })
    }

    /// Finish a prepared call without executing it (a denied approval, a replayed
    /// result): emits the final crumb and builds the outcome.
    pub fn finish_prepared(
        &self,
        run: &RunContext,
        prepared: &PreparedCall,
        result: Result<Value, ToolError>,
        attempts: u32,
        secrets: &[Secret],
    ) -> CallOutcome {
        self.finish(
            run,
            &prepared.id,
            prepared.tool.spec().name.as_arc(),
            prepared.started,
            result,
            attempts,
            secrets,
            None,
        )
    }

    /// Steps 5–11: hooks, execution with timeout, retries, output validation, crumbs.
    pub async fn execute(
        &self,
        run: &RunContext,
        prepared: PreparedCall,
        options: ExecuteOptions,
    ) -> CallOutcome {
        let PreparedCall {
            tool,
            id,
            mut args,
            started,
        } = prepared;
        let spec = tool.spec();
        let name = spec.name.as_arc();
        let provider = tool
            .credential_provider()
            .or_else(|| run.credential_provider())
            .cloned()
            .unwrap_or_else(|| Arc::new(EnvProvider));
        let credentials =
            Credentials::new(tool.declared_credentials().clone(), provider).for_run(run);
        let key: Option<Arc<str>> = options.idempotency_key.map(Arc::from);
        // A macro, not a closure: each use borrows `args` only for that hook's call.
        macro_rules! hook_call {
            ($attempt:expr, $args:expr) => {
                HookCall {
                    spec,
                    tool_call_id: &id,
                    run_id: run.run_id(),
                    run,
                    attempt: $attempt,
                    args: $args,
                }
            };
        }
        // Hooks read the args after the handler ran (`HookCall::args`): a tool with
        // none gives the handler the args themselves on its last attempt, no copy.
        let hooked = self.chain(&tool).next().is_some();

        // Step 5: before_run.
        let mut short_circuit = None;
        for (level, hook) in self.chain(&tool) {
            match self
                .run_hook(
                    level,
                    hook.name(),
                    hook.before_run(hook_call!(1, &args), &args),
                )
                .await
            {
                Ok(BeforeRun::Continue) => {}
                Ok(BeforeRun::ReplaceArgs(new)) => {
                    args = new;
                    if let Err(err) = validate_args(&tool, &mut args, Some((level, hook.name()))) {
                        return self.finish_unrun(run, &id, name, started, err);
                    }
                }
                Ok(BeforeRun::ShortCircuit(v)) => {
                    short_circuit = Some(v);
                    break;
                }
                Ok(BeforeRun::Fail(err)) => {
                    return self.finish_unrun(run, &id, name, started, err);
                }
                Err(err) => {
                    return self.finish_unrun(run, &id, name, started, err);
                }
            }
        }

        // Steps 7–9: execute with retries. The outcome carries the last attempt's
        // diagnostics.
        let mut attempts = 0;
        let mut diagnostics = None;
        let result = match short_circuit {
            Some(v) => validate_output(&tool, v, "a before_run hook's short-circuit result"),
            None => loop {
                attempts += 1;
                let may_retry = !spec.streaming && attempts <= spec.retry.max_retries();
                let call_args = if may_retry || hooked {
                    args.clone()
                } else {
                    std::mem::take(&mut args)
                };
                let Attempt {
                    result,
                    streamed: was_stream,
                    diagnostics: seen,
                } = self
                    .attempt(
                        run,
                        &tool,
                        &id,
                        call_args,
                        attempts,
                        key.clone(),
                        &credentials,
                    )
                    .await;
                diagnostics = seen;
                let err = match result {
                    Ok(v) => break Ok(v),
                    Err(e) => e,
                };
                if was_stream || spec.streaming {
                    // bread's rule: a stream's error is the call's, at once; no on_error
                    // hook recovers it and nothing retries it (a partly streamed
                    // operation cannot be taken back).
                    break Err(err);
                }
                match self
                    .decide_on_error(&tool, hook_call!(attempts, &args), &err)
                    .await
                {
                    OnError::Recover(v) => {
                        break validate_output(&tool, v, "an on_error hook's recovery result");
                    }
                    OnError::Fail(e) => break Err(e),
                    OnError::Retry if may_retry => {}
                    OnError::Retry => {
                        break Err(gave_up(err, attempts));
                    }
                    OnError::Propagate if may_retry && err.is_retryable() => {}
                    OnError::Propagate => break Err(err),
                }
                tokio::time::sleep(spec.retry.backoff(attempts)).await;
            },
        };

        // Step 10: after_run.
        let result = match result {
            Ok(mut value) => {
                let mut failed = None;
                for (level, hook) in self.chain(&tool) {
                    match self
                        .run_hook(
                            level,
                            hook.name(),
                            hook.after_run(hook_call!(attempts.max(1), &args), &value),
                        )
                        .await
                    {
                        Ok(AfterRun::Keep) => {}
                        Ok(AfterRun::Fail(e)) => {
                            failed = Some(e);
                            break;
                        }
                        Ok(AfterRun::Replace(v)) => {
                            match validate_output(&tool, v, "an after_run hook's replacement") {
                                Ok(v) => value = v,
                                Err(e) => {
                                    failed = Some(e);
                                    break;
                                }
                            }
                        }
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                match failed {
                    Some(e) => Err(e),
                    None => Ok(value),
                }
            }
            Err(e) => Err(e),
        };

        // Step 11.
        let secrets = credentials.handed_out();
        self.finish(
            run,
            &id,
            name,
            started,
            result,
            attempts,
            &secrets,
            diagnostics,
        )
    }

    fn chain<'a>(
        &'a self,
        tool: &'a Tool,
    ) -> impl Iterator<Item = (HookLevel, &'a Arc<dyn Hook>)> + 'a {
        tool.hooks()
            .iter()
            .map(|h| (HookLevel::Tool, h))
            .chain(
                self.inner
                    .plugin_hooks
                    .iter()
                    .map(|h| (HookLevel::Plugin, h)),
            )
            .chain(
                self.inner
                    .global_hooks
                    .iter()
                    .map(|h| (HookLevel::Global, h)),
            )
    }

    async fn decide_on_error(&self, tool: &Tool, call: HookCall<'_>, err: &ToolError) -> OnError {
        for (level, hook) in self.chain(tool) {
            match self
                .run_hook(level, hook.name(), hook.on_error(call, err))
                .await
            {
                Ok(OnError::Propagate) => {}
                Ok(decision) => return decision,
                Err(hook_err) => return OnError::Fail(hook_err),
            }
        }
        OnError::Propagate
    }

    /// Run one hook invocation with panics and hangs contained.
    async fn run_hook<T>(
        &self,
        level: HookLevel,
        name: &str,
        fut: futures_util::future::BoxFuture<'_, T>,
    ) -> StepResult<T> {
        let limit = self.inner.config.hook_timeout;
        // Most hooks are ready at once (a `HookFns` is synchronous), so a hook is polled
        // once before its timer is armed: one that is ready then costs no timer (making,
        // polling and dropping one is a good part of a call's cost,
        // bench/pipeline-instructions.sh). The deadline is taken before that first poll,
        // as `tokio::time::timeout` takes it.
        let deadline = tokio::time::Instant::now().checked_add(limit);
        let mut fut = AssertUnwindSafe(fut).catch_unwind();
        let ended = match poll_once(&mut fut).await {
            Poll::Ready(r) => Ok(r),
            Poll::Pending => within(deadline, fut).await,
        };
        match ended {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(panic)) => Err(ToolError::new(
                ErrorCode::HookPanic,
                format!("{level} hook `{name}` panicked: {}", panic_message(&*panic)),
            )),
            Err(_) => Err(ToolError::new(
                ErrorCode::HookTimeout,
                format!(
                    "{level} hook `{name}` did not finish within {}ms",
                    limit.as_millis()
                ),
            )),
        }
    }

    /// One execution of the handler: its result, whether it streamed (a streamed call is
    /// never retried) and its diagnostics.
    //
    // Cost (bench/pipeline-instructions.sh): this future is raced against the timeout
    // and the run's cancellation and moved several times on its way into `execute`'s
    // state, so what it holds is kept small: the handler's context is built inside the
    // race (not captured), the diagnostics are boxed and only when there are any, and a
    // stream is drained in a boxed future of its own (`drain`), allocated only for
    // streaming tools.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        run: &RunContext,
        tool: &Tool,
        id: &Arc<str>,
        args: Value,
        attempt: u32,
        key: Option<Arc<str>>,
        credentials: &Credentials,
    ) -> Attempt {
        let spec = tool.spec();
        let cancel = run.cancellation().child_token();
        let sink = DiagnosticsSink::default();
        let mut streamed = false;
        let mut diagnostics: Option<Box<Diagnostics>> = None;
        let work = async {
            let ctx = ToolContext::new(
                run.clone(),
                id.clone(),
                spec.name.as_arc().clone(),
                attempt,
                key,
                credentials.clone(),
                cancel.clone(),
                sink.clone(),
                self.inner.config.max_output_bytes,
            );
            let Reply {
                output,
                diagnostics: seen,
            } = tool.handler().call(args, ctx).await;
            diagnostics = boxed_unless_empty(seen);
            // The stream is taken out of the match before the await, so the output
            // does not stay in this future's state while the stream is drained.
            let stream = match output? {
                ToolOutput::Value(v) => return Ok(v),
                ToolOutput::Stream(stream) => stream,
            };
            streamed = true;
            Box::pin(self.drain(run, id, spec, stream, credentials, &mut diagnostics)).await
        };
        let timeout = spec.timeout.or(self.inner.config.default_timeout);
        // The handler is polled once before its timer and the run's cancellation are
        // armed: one that is ready at once (an in-process tool without I/O) costs
        // neither. As in the `select!`, which polls the handler first, the first poll
        // waits for the task's budget, and the deadline is taken before it.
        let ended = {
            let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
            let mut work = pin!(AssertUnwindSafe(work).catch_unwind());
            let first = if tokio::task::coop::has_budget_remaining() {
                poll_once(&mut work.as_mut()).await
            } else {
                Poll::Pending
            };
            match first {
                Poll::Ready(Ok(r)) => Ended::Returned(r),
                Poll::Ready(Err(panic)) => Ended::Panicked(panic_message(&*panic)),
                Poll::Pending => {
                    let run_cancel = run.cancellation();
                    tokio::select! {
                        biased;
                        r = within(deadline, work) => match r {
                            Ok(Ok(r)) => Ended::Returned(r),
                            Ok(Err(panic)) => Ended::Panicked(panic_message(&*panic)),
                            Err(_) => Ended::TimedOut,
                        },
                        _ = run_cancel.cancelled() => Ended::Cancelled,
                    }
                }
            }
            // The handler's future is dropped here, before its sink is read.
        };
        // The handler's future is dropped by now: one cut short left what it had seen in
        // the sink.
        let mut cut_short = || {
            if let Some(left) = sink.take() {
                diagnostics = Some(Box::new(left));
            }
        };
        let result = match ended {
            Ended::Returned(r) => r,
            Ended::Panicked(message) => {
                cut_short();
                Err(ToolError::new(
                    ErrorCode::HandlerPanic,
                    format!("tool `{}` panicked: {message}", spec.name),
                ))
            }
            Ended::TimedOut => {
                cancel.cancel();
                cut_short();
                diagnostics.get_or_insert_default().timed_out = true;
                let ms = timeout.map(|t| t.as_millis()).unwrap_or_default();
                Err(ToolError::new(
                    ErrorCode::Timeout,
                    format!("tool {} timed out after {ms}ms", spec.name),
                ))
            }
            Ended::Cancelled => {
                cancel.cancel();
                cut_short();
                Err(ToolError::new(
                    ErrorCode::Cancelled,
                    format!("tool `{}` was cancelled with its run", spec.name),
                ))
            }
        };
        Attempt {
            result: result.and_then(|v| validate_output(tool, v, "the handler's result")),
            streamed,
            diagnostics,
        }
    }

    /// Read a streamed output to its end: every value is a partial result, published
    /// (as a crumb) the moment it arrives, and the last is also the result (bread's
    /// rule: each yield is a `tool:result:partial`, the final one the `tool:result`
    /// too). Nothing is held back to learn which value is last. A diagnostics chunk
    /// replaces the diagnostics so far.
    async fn drain(
        &self,
        run: &RunContext,
        id: &Arc<str>,
        spec: &ToolSpec,
        mut stream: BoxStream<'static, Result<Chunk, ToolError>>,
        credentials: &Credentials,
        diagnostics: &mut Option<Box<Diagnostics>>,
    ) -> Result<Value, ToolError> {
        let mut last = None;
        let name = spec.name.as_arc();
        let mut partials = PartialBudget::new(self.inner.config.max_output_bytes);
        let mut ended = Ok(());
        while let Some(item) = stream.next().await {
            match item {
                Ok(Chunk::Value(v)) => {
                    if self.inner.crumbs.is_observed() {
                        self.emit_partial(run, id, name, v.clone(), credentials, &mut partials);
                    }
                    last = Some(v);
                }
                Ok(Chunk::Diagnostics(d)) => *diagnostics = Some(Box::new(d)),
                Err(e) => {
                    ended = Err(e);
                    break;
                }
            }
        }
        if partials.dropped > 0 {
            diagnostics.get_or_insert_default().partials_dropped = partials.dropped;
        }
        ended?;
        last.ok_or_else(|| {
            ToolError::new(
                ErrorCode::EmptyStream,
                format!("tool `{}` streamed no result", spec.name),
            )
        })
    }

    /// Publish a partial result, scrubbed of every secret the handler has read so far.
    fn emit_partial(
        &self,
        run: &RunContext,
        id: &Arc<str>,
        name: &Arc<str>,
        mut value: Value,
        credentials: &Credentials,
        partials: &mut PartialBudget,
    ) {
        if self.inner.crumbs.is_observed() && partials.admit(&value) {
            if !credentials.declared().is_empty() || !run.secrets().is_empty() {
                let mut secrets = credentials.handed_out();
                secrets.extend_from_slice(run.secrets());
                scrub_value(&mut value, &secrets);
            }
            self.inner.crumbs.emit(crumb(
                run,
                id,
                name,
                CrumbKind::Partial,
                Some(value),
                None,
                None,
            ));
        }
    }

    /// [`Pipeline::finish`] for a call whose handler never ran.
    fn finish_unrun(
        &self,
        run: &RunContext,
        id: &Arc<str>,
        name: &Arc<str>,
        started: Instant,
        err: ToolError,
    ) -> CallOutcome {
        self.finish(run, id, name, started, Err(err), 0, &[], None)
    }

    /// Scrub secrets, cap the diagnostics, emit the final crumb, build the outcome.
    /// `diagnostics` is `None` when the handler reported none (or never ran).
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        run: &RunContext,
        id: &Arc<str>,
        name: &Arc<str>,
        started: Instant,
        mut result: Result<Value, ToolError>,
        attempts: u32,
        secrets: &[Secret],
        mut diagnostics: Option<Box<Diagnostics>>,
    ) -> CallOutcome {
        // The run's own secrets too: a value a handler got from the env (a built-in's
        // API key) is scrubbed like a credential it read.
        let with_run: Vec<Secret>;
        let secrets = if run.secrets().is_empty() {
            secrets
        } else {
            with_run = secrets.iter().chain(run.secrets()).cloned().collect();
            &with_run
        };
        if !secrets.is_empty() {
            match &mut result {
                Ok(v) => scrub_value(v, secrets),
                Err(e) => scrub_error(e, secrets),
            }
            if let Some(d) = &mut diagnostics {
                d.scrub(secrets);
            }
        }
        let aliases = &self.inner.config.path_aliases;
        if !aliases.is_empty() {
            if let Some(d) = &mut diagnostics {
                for text in [&mut d.stdout, &mut d.stderr] {
                    crate::credentials::alias_paths(text, aliases);
                }
            }
            if let Err(e) = &mut result {
                crate::credentials::alias_paths(&mut e.message, aliases);
                if let Some(details) = &mut e.details {
                    crate::credentials::alias_paths_in(details, aliases);
                }
            }
        }
        // Scrubbed before it is cut, so a cut cannot leave half a secret unrecognised.
        if let Some(d) = &mut diagnostics {
            d.cap(self.inner.config.max_diagnostic_bytes);
        }
        // Within the output budget before the final crumb, the journal or an answer
        // sees it.
        crate::budget::fit(
            name,
            self.inner.config.max_output_bytes,
            &mut result,
            diagnostics.as_deref_mut(),
        );
        let duration = started.elapsed();
        let bus = &self.inner.crumbs;
        if bus.is_observed() {
            let ms = Some(duration.as_secs_f64() * 1000.0);
            let c = match &result {
                Ok(v) => crumb(run, id, name, CrumbKind::Result, Some(v.clone()), None, ms),
                Err(e) => crumb(run, id, name, CrumbKind::Error, None, Some(e.clone()), ms),
            };
            bus.emit(c);
        } else if let Err(e) = &result {
            tracing::warn!(target: "toolshed::crumbs", tool = &**name, code = e.code.as_str(), "tool call failed");
        }
        CallOutcome {
            tool_call_id: id.clone(),
            tool_name: name.clone(),
            result,
            duration,
            attempts,
            diagnostics: diagnostics.map(|d| *d).unwrap_or_default(),
        }
    }
}

/// What one execution of the handler ended with.
struct Attempt {
    result: Result<Value, ToolError>,
    streamed: bool,
    /// Boxed, and `None` when empty (every in-process tool): an `Attempt` is moved out
    /// of the attempt's future and through `execute`'s state, and a `Diagnostics` by
    /// value is 136 bytes copied at each move.
    diagnostics: Option<Box<Diagnostics>>,
}

/// A handler's diagnostics on the heap, or `None` when it reported none.
fn boxed_unless_empty(diagnostics: Diagnostics) -> Option<Box<Diagnostics>> {
    if diagnostics.is_empty() {
        None
    } else {
        Some(Box::new(diagnostics))
    }
}

/// How the race of a handler against its timeout and its run's cancellation ended.
enum Ended {
    Returned(Result<Value, ToolError>),
    Panicked(String),
    TimedOut,
    Cancelled,
}

/// `f` bounded by `deadline` when there is one (`Err` when it passed).
//
// Not an `async fn`: its future would hold `f` twice (the argument, and the `Timeout`
// it is moved into), and this future is moved with every attempt.
fn within<F: Future>(
    deadline: Option<tokio::time::Instant>,
    f: F,
) -> impl Future<Output = Result<F::Output, Elapsed>> {
    match deadline {
        Some(deadline) => Either::Left(tokio::time::timeout_at(deadline, f)),
        None => Either::Right(f.map(Ok)),
    }
}

/// Poll `f` once: its output, or `Pending` (its waker registered, as by any poll).
fn poll_once<F: Future + Unpin>(f: &mut F) -> impl Future<Output = Poll<F::Output>> + '_ {
    std::future::poll_fn(move |cx| Poll::Ready(Pin::new(&mut *f).poll(cx)))
}

fn validate_args(
    tool: &Tool,
    args: &mut Value,
    replaced_by: Option<(HookLevel, &str)>,
) -> StepResult<()> {
    tool.input_schema()
        .validate_with_defaults(args)
        .map_err(|violations| {
            let what = match replaced_by {
                None => format!("invalid arguments for tool `{}`", tool.name()),
                Some((level, hook)) => format!(
                    "{level} hook `{hook}` replaced the arguments of tool `{}` with invalid ones",
                    tool.name()
                ),
            };
            ToolError::new(
                ErrorCode::InvalidArgs,
                describe_violations(&what, &violations),
            )
            .with_details(serde_json::json!({ "violations": violations }))
        })
}

fn validate_output(tool: &Tool, value: Value, what: &str) -> StepResult<Value> {
    let Some(schema) = tool.output_schema() else {
        return Ok(value);
    };
    match schema.validate(&value) {
        Ok(()) => Ok(value),
        Err(violations) => Err(ToolError::new(
            ErrorCode::InvalidOutput,
            describe_violations(
                &format!(
                    "{what} does not match the output schema of tool `{}`",
                    tool.name()
                ),
                &violations,
            ),
        )
        .with_details(serde_json::json!({ "violations": violations }))),
    }
}

fn gave_up(err: ToolError, attempts: u32) -> ToolError {
    let why = format!(
        "gave up after {attempts} attempt{}",
        if attempts == 1 { "" } else { "s" }
    );
    ToolError {
        message: format!("{} ({why})", err.message),
        ..err
    }
}

fn crumb(
    run: &RunContext,
    id: &Arc<str>,
    name: &Arc<str>,
    kind: CrumbKind,
    payload: Option<Value>,
    error: Option<ToolError>,
    duration_ms: Option<f64>,
) -> Crumb {
    Crumb {
        payload,
        error,
        duration_ms,
        ..Crumb::for_call(kind, run, id, name)
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}
