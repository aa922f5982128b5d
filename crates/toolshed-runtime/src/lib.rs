//! # toolshed-runtime
//!
//! The durable runtime: the call pipeline with the journal in it. A run's every call is
//! recorded under a deterministic key (run id + ordinal); a resumed run that issues the
//! same calls gets the recorded results back without executing; keyed calls are durably
//! `Started` before their handler runs; approval-gated and human calls park the run,
//! which then holds no process; budgets fail a run that overspends.
//!
//! The loop is described in `docs/design/durable-runs.md`.
//!
//! ```no_run
//! # async fn demo(pipeline: toolshed_core::Pipeline) -> Result<(), toolshed_runtime::RuntimeError> {
//! use toolshed_runtime::{Runtime, RuntimeConfig, NewRunBuilder, CallStep};
//! let journal = toolshed_journal::open("sqlite://toolshed.db").await?;
//! let runtime = Runtime::new(pipeline, journal, RuntimeConfig::default())?;
//! let run = runtime.start(NewRunBuilder::new("my-agent").build()).await?;
//! match run.call(toolshed_core::ToolCall::new("get_current_time", serde_json::json!({}))).await? {
//!     CallStep::Done(outcome) => println!("{}", outcome.to_model_text()),
//!     CallStep::Parked(gate) => println!("waiting for a person on call {}", gate.call_id),
//! }
//! let record = run.finish().await?;
//! # Ok(()) }
//! ```

mod crumbs;
mod driver;
mod error;
mod gates;
mod once;
mod run;

use std::collections::BTreeMap;
use std::sync::Arc;

use toolshed_core::{BlobStore, CredentialProvider, Pipeline, Principal};
use toolshed_journal::{Budgets, Journal, NewRun};

pub use driver::{Driver, PlanStep, RunOutcome, drive};
pub use error::RuntimeError;
pub use gates::{answer, approve, deny};
pub use run::{CallStep, PendingGate, RunHandle};

/// Settings of a [`Runtime`].
#[derive(Clone)]
pub struct RuntimeConfig {
    /// The largest result (serialized JSON bytes) that is recorded; a larger one becomes
    /// a non-retryable `RESULT_TOO_LARGE` error result. 1 MiB by default.
    pub max_result_bytes: usize,
    /// Declared env values handed to handlers (`ctx.env`).
    pub env: BTreeMap<String, String>,
    /// The run-wide default credential provider.
    pub credentials: Option<Arc<dyn CredentialProvider>>,
    /// The blob store handed to handlers.
    pub blob_store: Option<Arc<dyn BlobStore>>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_result_bytes: 1024 * 1024,
            env: BTreeMap::new(),
            credentials: None,
            blob_store: None,
        }
    }
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("max_result_bytes", &self.max_result_bytes)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The durable runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pipeline: Pipeline,
    journal: Arc<dyn Journal>,
    config: RuntimeConfig,
    crumbs: crumbs::JournalCrumbs,
}

impl Runtime {
    /// A runtime over a pipeline and a journal.
    ///
    /// No tool of the pipeline can repeat a side effect on resume: a tool with
    /// `effects: external` and `idempotency: none` that did not opt out explicitly is
    /// refused when it is built (`ToolSpec::check`), so none reaches a toolset.
    pub fn new(
        pipeline: Pipeline,
        journal: Arc<dyn Journal>,
        config: RuntimeConfig,
    ) -> Result<Self, RuntimeError> {
        let crumbs = crumbs::JournalCrumbs::start(journal.clone(), config.max_result_bytes);
        pipeline.crumbs().add_sink(Arc::new(crumbs.clone()));
        Ok(Runtime {
            inner: Arc::new(Inner {
                pipeline,
                journal,
                config,
                crumbs,
            }),
        })
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.inner.journal
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.inner.pipeline
    }

    /// Create a run and start driving it.
    pub async fn start(&self, new: NewRun) -> Result<RunHandle, RuntimeError> {
        let record = self.inner.journal.create_run(new).await?;
        RunHandle::begin(self.clone(), record.id).await
    }

    /// Continue a run: its recorded calls replay, decided gates take effect, and new
    /// calls execute. Library users call this with the same run id and issue the same
    /// calls again.
    pub async fn resume(&self, run_id: &str) -> Result<RunHandle, RuntimeError> {
        RunHandle::begin(self.clone(), run_id.to_owned()).await
    }

    /// Cancel a run (it will not be resumed).
    pub async fn cancel(&self, run_id: &str, reason: Option<String>) -> Result<(), RuntimeError> {
        let run = self
            .inner
            .journal
            .set_run_status(
                run_id,
                toolshed_journal::RunStatus::Cancelled,
                reason.clone(),
            )
            .await?;
        let ctx = run::context_for(&run, &self.inner.config);
        self.inner.pipeline.crumbs().emit(
            toolshed_core::Crumb::new(toolshed_core::CrumbKind::RunCancelled, &ctx, "", "")
                .with_payload(serde_json::json!({ "reason": reason })),
        );
        self.inner.crumbs.flush().await;
        Ok(())
    }

    pub(crate) fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    pub(crate) fn journal_crumbs(&self) -> &crumbs::JournalCrumbs {
        &self.inner.crumbs
    }
}

/// Builds a [`NewRun`] with fresh ids.
#[derive(Debug, Clone)]
pub struct NewRunBuilder {
    run: NewRun,
}

impl NewRunBuilder {
    /// A run of `agent_id` with a fresh run id and session id.
    pub fn new(agent_id: &str) -> Self {
        NewRunBuilder {
            run: NewRun {
                id: uuid::Uuid::now_v7().to_string(),
                agent_id: agent_id.to_owned(),
                session_id: uuid::Uuid::now_v7().to_string(),
                principal: None,
                budgets: Budgets::default(),
                driver: serde_json::json!({"kind": "library"}),
            },
        }
    }
    /// Choose the run id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.run.id = id.into();
        self
    }
    /// Set the session id.
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.run.session_id = id.into();
        self
    }
    /// Set the principal.
    pub fn principal(mut self, p: Principal) -> Self {
        self.run.principal = Some(p);
        self
    }
    /// Set the budgets.
    pub fn budgets(mut self, b: Budgets) -> Self {
        self.run.budgets = b;
        self
    }
    /// Record what drives the run (see [`Driver`]).
    pub fn driver(mut self, driver: serde_json::Value) -> Self {
        self.run.driver = driver;
        self
    }
    /// Finish.
    pub fn build(self) -> NewRun {
        self.run
    }
}

/// Hex SHA-256 of the canonical JSON of `value` (object keys sorted at every level):
/// the args hash checked on replay.
pub fn args_hash(value: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    canonical(value, &mut hasher);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(digest.len() * 2);
    for b in digest {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    hex
}

fn canonical(value: &serde_json::Value, out: &mut sha2::Sha256) {
    use serde_json::Value;
    use sha2::Digest;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.update(b"{");
            for k in keys {
                out.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                out.update(b":");
                canonical(&map[k], out);
                out.update(b",");
            }
            out.update(b"}");
        }
        Value::Array(items) => {
            out.update(b"[");
            for v in items {
                canonical(v, out);
                out.update(b",");
            }
            out.update(b"]");
        }
        other => out.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn args_hash_ignores_key_order() {
        let a = super::args_hash(&json!({"a": 1, "b": {"x": [1, 2], "y": null}}));
        let b = super::args_hash(&json!({"b": {"y": null, "x": [1, 2]}, "a": 1}));
        assert_eq!(a, b);
        assert_ne!(
            a,
            super::args_hash(&json!({"a": 2, "b": {"x": [1, 2], "y": null}}))
        );
        assert_ne!(
            super::args_hash(&json!([1, 2])),
            super::args_hash(&json!([2, 1]))
        );
    }
}
