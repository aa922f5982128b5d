//! Hooks: `before_run`, `after_run` and `on_error`, chained tool → plugins → global
//! config (bread's documented chain order).
//!
//! A hook is a trait object so it can hold state (a cache, a metrics handle);
//! [`HookFns`] builds one from closures.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::error::ToolError;
use crate::spec::ToolSpec;

/// What a hook is told about the call it is looking at.
#[derive(Debug, Clone, Copy)]
pub struct HookCall<'a> {
    /// The tool's spec.
    pub spec: &'a ToolSpec,
    /// The tool call id.
    pub tool_call_id: &'a str,
    /// The run id.
    pub run_id: &'a str,
    /// The run (its agent, session and principal).
    pub run: &'a crate::context::RunContext,
    /// The attempt, from 1 (for `on_error`, the attempt that failed).
    pub attempt: u32,
    /// The call's args: as validated for `before_run` (which also gets them as its own
    /// parameter), and as the handler got them (after any replacement) for `after_run`
    /// and `on_error`.
    pub args: &'a serde_json::Value,
}

/// What `before_run` decides.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeRun {
    /// Go on with the args as they are.
    Continue,
    /// Go on with these args instead; they are validated again.
    ReplaceArgs(Value),
    /// Skip the handler and use this result (e.g. a cache hit).
    ShortCircuit(Value),
    /// End the call with this error, without running the handler (a hook that could
    /// not decide, e.g. one in a tool's worker that threw).
    Fail(ToolError),
}

/// What `after_run` decides.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterRun {
    /// Keep the result.
    Keep,
    /// Use this result instead (validated against the output schema, if any).
    Replace(Value),
    /// End the call with this error instead of the result.
    Fail(ToolError),
}

/// What `on_error` decides.
#[derive(Debug, Clone, PartialEq)]
pub enum OnError {
    /// No opinion: the next hook decides, and if none does, the retry policy does.
    Propagate,
    /// Use this result instead of the error.
    Recover(Value),
    /// Try again, if the tool's retry policy has attempts left.
    Retry,
    /// Fail with this error instead, without retrying.
    Fail(ToolError),
}

/// A hook. Every method has a default that changes nothing, so implement only what you need.
pub trait Hook: Send + Sync {
    /// A name for error messages and traces.
    fn name(&self) -> &str {
        "hook"
    }

    /// Called before the handler, with the validated args.
    fn before_run<'a>(&'a self, call: HookCall<'a>, args: &'a Value) -> BoxFuture<'a, BeforeRun> {
        let _ = (call, args);
        Box::pin(std::future::ready(BeforeRun::Continue))
    }

    /// Called after a successful (and validated) result.
    fn after_run<'a>(&'a self, call: HookCall<'a>, result: &'a Value) -> BoxFuture<'a, AfterRun> {
        let _ = (call, result);
        Box::pin(std::future::ready(AfterRun::Keep))
    }

    /// Called when an attempt fails.
    fn on_error<'a>(&'a self, call: HookCall<'a>, error: &'a ToolError) -> BoxFuture<'a, OnError> {
        let _ = (call, error);
        Box::pin(std::future::ready(OnError::Propagate))
    }
}

type BeforeFn = dyn Fn(HookCall<'_>, &Value) -> BeforeRun + Send + Sync;
type AfterFn = dyn Fn(HookCall<'_>, &Value) -> AfterRun + Send + Sync;
type ErrorFn = dyn Fn(HookCall<'_>, &ToolError) -> OnError + Send + Sync;

/// A hook made of synchronous closures, for the common case.
///
/// ```
/// use toolshed_core::hooks::{HookFns, OnError};
/// let hook = HookFns::new("recover-empty").on_error(|_, _| OnError::Recover(serde_json::json!([])));
/// ```
#[derive(Clone, Default)]
pub struct HookFns {
    name: String,
    before: Option<Arc<BeforeFn>>,
    after: Option<Arc<AfterFn>>,
    error: Option<Arc<ErrorFn>>,
}

impl fmt::Debug for HookFns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookFns").field("name", &self.name).finish()
    }
}

impl HookFns {
    /// An empty hook with a name.
    pub fn new(name: impl Into<String>) -> Self {
        HookFns {
            name: name.into(),
            ..Default::default()
        }
    }
    /// Set `before_run`.
    pub fn before_run(
        mut self,
        f: impl Fn(HookCall<'_>, &Value) -> BeforeRun + Send + Sync + 'static,
    ) -> Self {
        self.before = Some(Arc::new(f));
        self
    }
    /// Set `after_run`.
    pub fn after_run(
        mut self,
        f: impl Fn(HookCall<'_>, &Value) -> AfterRun + Send + Sync + 'static,
    ) -> Self {
        self.after = Some(Arc::new(f));
        self
    }
    /// Set `on_error`.
    pub fn on_error(
        mut self,
        f: impl Fn(HookCall<'_>, &ToolError) -> OnError + Send + Sync + 'static,
    ) -> Self {
        self.error = Some(Arc::new(f));
        self
    }
    /// Wrap as a shareable hook.
    pub fn into_hook(self) -> Arc<dyn Hook> {
        Arc::new(self)
    }
}

impl Hook for HookFns {
    fn name(&self) -> &str {
        &self.name
    }
    fn before_run<'a>(&'a self, call: HookCall<'a>, args: &'a Value) -> BoxFuture<'a, BeforeRun> {
        let out = match &self.before {
            Some(f) => f(call, args),
            None => BeforeRun::Continue,
        };
        Box::pin(std::future::ready(out))
    }
    fn after_run<'a>(&'a self, call: HookCall<'a>, result: &'a Value) -> BoxFuture<'a, AfterRun> {
        let out = match &self.after {
            Some(f) => f(call, result),
            None => AfterRun::Keep,
        };
        Box::pin(std::future::ready(out))
    }
    fn on_error<'a>(&'a self, call: HookCall<'a>, error: &'a ToolError) -> BoxFuture<'a, OnError> {
        let out = match &self.error {
            Some(f) => f(call, error),
            None => OnError::Propagate,
        };
        Box::pin(std::future::ready(out))
    }
}

/// Where a hook in the chain came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookLevel {
    /// The tool's own hooks.
    Tool,
    /// A plugin's hooks.
    Plugin,
    /// The global configuration's hooks.
    Global,
}

impl fmt::Display for HookLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HookLevel::Tool => "tool",
            HookLevel::Plugin => "plugin",
            HookLevel::Global => "global",
        })
    }
}
