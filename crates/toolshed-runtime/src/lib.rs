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

use toolshed_core::{AttachmentReader, BlobStore, CredentialProvider, Pipeline, Principal, Secret};
use toolshed_journal::{Budgets, Journal, NewRun};

pub use driver::{Driver, PlanStep, RunOutcome, drive};
pub use error::{RevisionChange, RuntimeCode, RuntimeError};
pub use gates::{ApprovalPolicy, answer, approve, approve_under, deny};
pub use run::{Attended, CallStep, PendingGate, RunHandle};

/// Settings of a [`Runtime`].
#[derive(Clone, Default)]
pub struct RuntimeConfig {
    /// Declared env values handed to handlers (`ctx.env`).
    pub env: BTreeMap<String, String>,
    /// Values no call may show (the secret parts of `env`, e.g. a built-in's API key):
    /// scrubbed from every result, error, crumb and diagnostics before they are
    /// recorded (`RunContext::secrets`).
    pub secrets: Vec<Secret>,
    /// The run-wide default credential provider.
    pub credentials: Option<Arc<dyn CredentialProvider>>,
    /// The blob store handed to handlers.
    pub blob_store: Option<Arc<dyn BlobStore>>,
    /// The attachment store handed to handlers (`ctx.attachments()`, `read_attachment`).
    pub attachments: Option<Arc<dyn AttachmentReader>>,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
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
        // What the journal records of a call is within the pipeline's output budget
        // (`toolshed_core::budget`); a crumb's payload is held to the same.
        let crumbs =
            crumbs::JournalCrumbs::start(journal.clone(), pipeline.config().max_output_bytes);
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
        self.start_attended(new, &Attended::default()).await
    }

    /// [`Runtime::start`] with what the surface driving the run gives it.
    pub async fn start_attended(
        &self,
        new: NewRun,
        attended: &Attended,
    ) -> Result<RunHandle, RuntimeError> {
        let record = self.inner.journal.create_run(new).await?;
        RunHandle::begin(self.clone(), record.id, attended).await
    }

    /// Continue a run: its recorded calls replay, decided gates take effect, and new
    /// calls execute. Library users call this with the same run id and issue the same
    /// calls again.
    pub async fn resume(&self, run_id: &str) -> Result<RunHandle, RuntimeError> {
        self.resume_attended(run_id, &Attended::default()).await
    }

    /// [`Runtime::resume`] with what the surface driving the run gives it.
    pub async fn resume_attended(
        &self,
        run_id: &str,
        attended: &Attended,
    ) -> Result<RunHandle, RuntimeError> {
        RunHandle::begin(self.clone(), run_id.to_owned(), attended).await
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
        let ctx = run::context_for(&run, &self.inner.config, &Attended::default());
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

/// Hex SHA-256 of the JSON Canonicalization Scheme (RFC 8785) form of `value`: the
/// args hash checked on replay. Object keys are sorted at every level and numbers are
/// written as ECMAScript does, so `1` and `1.0` (one number, parsed as an integer or as
/// a float) hash alike, as do objects that differ only in key order.
pub fn args_hash(value: &serde_json::Value) -> String {
    use canon_json::CanonJsonSerialize;
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    if let Err(e) = value.to_canon_json_writer(&mut hasher) {
        // A `Value` holds only string keys and finite numbers, and the hasher never
        // fails to write, so this does not happen; hash the plain text rather than stop.
        tracing::error!(error = %e, "cannot canonicalize call args; hashing them as written");
        hasher = Sha256::new();
        hasher.update(value.to_string().as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// The revision of a tool an approval is bound to: `sha256:` and the first 16 hex
/// digits of the SHA-256 of the RFC 8785 form of the tool's file form
/// (`ToolFile::from_spec`: description, schemas, effects, idempotency, approval and its
/// four-eyes policy, endpoint, implementation, timeout, attempts, retry, credentials),
/// prefixed by the registry's revision number when the tool comes from a registry
/// (`ToolMeta::revision`), e.g. `4@sha256:9f2c1a7b4e0d5c3a`.
///
/// Why both: a registry tool's number changes on every update (even one that changes
/// nothing) and says which revision to look at, while the hash tells a deleted and
/// re-registered tool (numbered from 1 again) apart, and is the only revision a tool
/// built in a program or read from a local `tool.yaml` has. What the file form cannot
/// show (a Rust handler's or closure's code, the bytes behind a host path) is not
/// covered: those change with the program, or with the registry revision that points at
/// them. Sixteen hex digits (64 bits) only need to tell a tool's own revisions apart.
pub fn tool_revision(spec: &toolshed_core::ToolSpec) -> String {
    let file = toolshed_core::file::ToolFile::from_spec(spec);
    let value = serde_json::to_value(&file).unwrap_or(serde_json::Value::Null);
    let hash = args_hash(&value);
    let short = hash.get(..16).unwrap_or(&hash);
    match &spec.meta.revision {
        Some(n) => format!("{n}@sha256:{short}"),
        None => format!("sha256:{short}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use sha2::{Digest, Sha256};

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_tool_revision_changes_with_the_definition_and_the_registry_number() {
        use toolshed_core::{Approval, ToolSpec};
        let spec = ToolSpec::new("refund", "Refund an order").unwrap();
        let base = super::tool_revision(&spec);
        assert!(base.starts_with("sha256:") && base.len() == 23, "{base}");
        assert_eq!(super::tool_revision(&spec.clone()), base);
        let mut described = spec.clone();
        described.description = "Refund an order, twice".into();
        let mut gated = spec.clone();
        gated.approval = Approval::Always;
        let mut four_eyes = gated.clone();
        four_eyes.four_eyes = true;
        let mut moved = spec.clone();
        moved.meta.endpoint = Some("python:/srv/tools/refund.py:run".into());
        let revisions: std::collections::BTreeSet<String> =
            [&spec, &described, &gated, &four_eyes, &moved]
                .iter()
                .map(|s| super::tool_revision(s))
                .collect();
        assert_eq!(revisions.len(), 5, "{revisions:?}");
        let mut numbered = spec.clone();
        numbered.meta.revision = Some("3".into());
        assert_eq!(
            super::tool_revision(&numbered),
            format!("3@{base}"),
            "the number is a prefix, the hash of the same definition the rest"
        );
    }

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

    #[test]
    fn args_hash_treats_one_number_written_two_ways_alike() {
        // serde_json keeps `1` as an integer and `1.0` as a float: one number to JSON.
        let int = parsed(r#"{"a": 1}"#);
        let float = parsed(r#"{"a": 1.0}"#);
        assert_ne!(int, float, "serde_json tells them apart, the hash must not");
        assert_eq!(super::args_hash(&int), super::args_hash(&float));
        assert_eq!(
            super::args_hash(&parsed(r#"{"n": [0, 25, -3]}"#)),
            super::args_hash(&parsed(r#"{"n": [-0.0, 2.5e1, -3.00]}"#))
        );
        assert_ne!(
            super::args_hash(&parsed(r#"{"a": 1}"#)),
            super::args_hash(&parsed(r#"{"a": 1.5}"#))
        );
        assert_ne!(
            super::args_hash(&parsed(r#"{"a": 1}"#)),
            super::args_hash(&parsed(r#"{"a": "1"}"#))
        );
        // Integers past 2^53 stay exact: two ids one apart never share a hash.
        assert_ne!(
            super::args_hash(&parsed(r#"{"id": 9007199254740993}"#)),
            super::args_hash(&parsed(r#"{"id": 9007199254740992}"#))
        );
    }

    #[test]
    fn args_hash_is_sha256_of_the_rfc8785_text() {
        let value = parsed(r#"{"b": [1.0, "x\u00e9"], "a": {"z": null, "y": true}, "c": 1e-7}"#);
        let canonical = r#"{"a":{"y":true,"z":null},"b":[1,"xé"],"c":1e-7}"#;
        assert_eq!(
            super::args_hash(&value),
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
    }
}
