//! Crumbs: the observable events of every call (`tool:call`, `tool:result`,
//! `tool:result:partial`, `tool:error`).
//!
//! Delivery never blocks a call: sinks must return at once (they hand the crumb to
//! their own queue), and broadcast subscribers that fall behind lose the oldest crumbs
//! and are told how many (`RecvError::Lagged`). Every crumb is also a `tracing` event.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::error::ToolError;

/// The kind of a crumb, written as `tool:call` etc. on the wire.
///
/// The first four are emitted by every call; the others by the durable runtime (they
/// are journaled with the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CrumbKind {
    /// A call started (args validated or not).
    #[serde(rename = "tool:call")]
    Call,
    /// A call finished with a result.
    #[serde(rename = "tool:result")]
    Result,
    /// A streaming call yielded an intermediate value.
    #[serde(rename = "tool:result:partial")]
    Partial,
    /// A call finished with an error result.
    #[serde(rename = "tool:error")]
    Error,
    /// A resumed run got a call's recorded result back without executing it.
    #[serde(rename = "tool:replayed")]
    Replayed,
    /// A call waits for an approval.
    #[serde(rename = "tool:approval:requested")]
    ApprovalRequested,
    /// Someone approved or denied a call.
    #[serde(rename = "tool:approval:decided")]
    ApprovalDecided,
    /// A human tool waits for an answer.
    #[serde(rename = "tool:answer:requested")]
    AnswerRequested,
    /// Someone answered a human tool.
    #[serde(rename = "tool:answered")]
    Answered,
    /// A driver started or resumed the run.
    #[serde(rename = "run:resumed")]
    RunResumed,
    /// The run parked, waiting for people.
    #[serde(rename = "run:parked")]
    RunParked,
    /// The run completed.
    #[serde(rename = "run:completed")]
    RunCompleted,
    /// The run failed.
    #[serde(rename = "run:failed")]
    RunFailed,
    /// The run was cancelled.
    #[serde(rename = "run:cancelled")]
    RunCancelled,
}

impl CrumbKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CrumbKind::Call => "tool:call",
            CrumbKind::Result => "tool:result",
            CrumbKind::Partial => "tool:result:partial",
            CrumbKind::Error => "tool:error",
            CrumbKind::Replayed => "tool:replayed",
            CrumbKind::ApprovalRequested => "tool:approval:requested",
            CrumbKind::ApprovalDecided => "tool:approval:decided",
            CrumbKind::AnswerRequested => "tool:answer:requested",
            CrumbKind::Answered => "tool:answered",
            CrumbKind::RunResumed => "run:resumed",
            CrumbKind::RunParked => "run:parked",
            CrumbKind::RunCompleted => "run:completed",
            CrumbKind::RunFailed => "run:failed",
            CrumbKind::RunCancelled => "run:cancelled",
        }
    }
}

/// One observable event.
#[derive(Debug, Clone, Serialize)]
pub struct Crumb {
    /// The kind.
    #[serde(rename = "type")]
    pub kind: CrumbKind,
    /// When it happened.
    #[serde(serialize_with = "ser_time")]
    pub at: SystemTime,
    /// The agent id.
    pub agent_id: Arc<str>,
    /// The run id.
    pub run_id: Arc<str>,
    /// The session id.
    pub session_id: Arc<str>,
    /// The tool call id (empty on `run:*` crumbs).
    #[serde(skip_serializing_if = "str_is_empty")]
    pub tool_call_id: Arc<str>,
    /// The tool name (empty on `run:*` crumbs).
    #[serde(skip_serializing_if = "str_is_empty")]
    pub tool_name: Arc<str>,
    /// The args (`tool:call`), the result (`tool:result`, `tool:result:partial`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// The error (`tool:error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// Total duration, on final crumbs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
}

impl Crumb {
    /// A crumb of `kind` for a run (and a call, when `tool_call_id` is not empty), with
    /// no payload yet.
    pub fn new(
        kind: CrumbKind,
        run: &crate::RunContext,
        tool_call_id: &str,
        tool_name: &str,
    ) -> Self {
        Crumb::for_call(kind, run, &Arc::from(tool_call_id), &Arc::from(tool_name))
    }

    /// Like [`Crumb::new`], sharing the call's id and name instead of copying them.
    pub(crate) fn for_call(
        kind: CrumbKind,
        run: &crate::RunContext,
        tool_call_id: &Arc<str>,
        tool_name: &Arc<str>,
    ) -> Self {
        Crumb {
            kind,
            at: SystemTime::now(),
            agent_id: run.agent_id_arc().clone(),
            run_id: run.run_id_arc().clone(),
            session_id: run.session_id_arc().clone(),
            tool_call_id: tool_call_id.clone(),
            tool_name: tool_name.clone(),
            payload: None,
            error: None,
            duration_ms: None,
        }
    }

    /// Set the payload.
    pub fn with_payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }
}

fn str_is_empty(s: &Arc<str>) -> bool {
    s.is_empty()
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let ms = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    s.serialize_u64(ms)
}

/// Something that receives every crumb. `emit` must not block or await anything.
pub trait CrumbSink: Send + Sync {
    /// Take one crumb.
    fn emit(&self, crumb: &Arc<Crumb>);
}

/// Fans crumbs out to sinks and broadcast subscribers. Cheap to clone.
#[derive(Clone)]
pub struct CrumbBus {
    inner: Arc<BusInner>,
}

struct BusInner {
    sinks: std::sync::RwLock<Vec<Arc<dyn CrumbSink>>>,
    broadcast: broadcast::Sender<Arc<Crumb>>,
}

impl fmt::Debug for CrumbBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrumbBus")
            .field("subscribers", &self.inner.broadcast.receiver_count())
            .finish_non_exhaustive()
    }
}

impl Default for CrumbBus {
    fn default() -> Self {
        CrumbBus::new(1024)
    }
}

impl CrumbBus {
    /// A bus whose broadcast subscribers may fall `capacity` crumbs behind.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        CrumbBus {
            inner: Arc::new(BusInner {
                sinks: std::sync::RwLock::new(Vec::new()),
                broadcast: tx,
            }),
        }
    }

    /// Add a sink that sees every crumb, in order.
    pub fn add_sink(&self, sink: Arc<dyn CrumbSink>) {
        if let Ok(mut sinks) = self.inner.sinks.write() {
            sinks.push(sink);
        }
    }

    /// Subscribe to crumbs from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Crumb>> {
        self.inner.broadcast.subscribe()
    }

    /// Whether any sink or subscriber would see a crumb; lets callers skip building one.
    pub fn is_observed(&self) -> bool {
        self.inner.broadcast.receiver_count() > 0
            || self
                .inner
                .sinks
                .read()
                .map(|s| !s.is_empty())
                .unwrap_or(false)
    }

    /// Deliver a crumb. Never blocks; a panicking sink is contained and logged.
    pub fn emit(&self, crumb: Crumb) {
        trace_crumb(&crumb);
        let crumb = Arc::new(crumb);
        if let Ok(sinks) = self.inner.sinks.read() {
            for sink in sinks.iter() {
                let delivered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    sink.emit(&crumb);
                }));
                if delivered.is_err() {
                    tracing::error!(kind = crumb.kind.as_str(), "a crumb sink panicked");
                }
            }
        }
        // An error here only means nobody is subscribed.
        let _ = self.inner.broadcast.send(crumb);
    }
}

fn trace_crumb(crumb: &Crumb) {
    match crumb.kind {
        CrumbKind::Error => tracing::warn!(
            target: "toolshed::crumbs",
            kind = crumb.kind.as_str(),
            tool = &*crumb.tool_name,
            tool_call_id = &*crumb.tool_call_id,
            run_id = &*crumb.run_id,
            code = crumb.error.as_ref().map(|e| e.code.as_str()),
            duration_ms = crumb.duration_ms,
            "tool call failed"
        ),
        _ => tracing::debug!(
            target: "toolshed::crumbs",
            kind = crumb.kind.as_str(),
            tool = &*crumb.tool_name,
            tool_call_id = &*crumb.tool_call_id,
            run_id = &*crumb.run_id,
            duration_ms = crumb.duration_ms,
        ),
    }
}

/// A sink that keeps every crumb in memory; for tests and small tools.
#[derive(Default, Clone)]
pub struct MemorySink {
    crumbs: Arc<std::sync::Mutex<Vec<Arc<Crumb>>>>,
}

impl MemorySink {
    /// A new, empty sink.
    pub fn new() -> Self {
        Self::default()
    }
    /// Everything received so far.
    pub fn crumbs(&self) -> Vec<Arc<Crumb>> {
        self.crumbs.lock().map(|c| c.clone()).unwrap_or_default()
    }
    /// The kinds received so far, in order.
    pub fn kinds(&self) -> Vec<CrumbKind> {
        self.crumbs().iter().map(|c| c.kind).collect()
    }
}

impl CrumbSink for MemorySink {
    fn emit(&self, crumb: &Arc<Crumb>) {
        if let Ok(mut c) = self.crumbs.lock() {
            c.push(crumb.clone());
        }
    }
}
