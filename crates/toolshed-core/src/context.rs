//! What a handler is handed: the run's identity, the principal, declared env values,
//! credentials, the blob store, cancellation and the idempotency key.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::ask::{Ask, AskError, Asker};
use crate::attachment::AttachmentReader;
use crate::credentials::{CredentialProvider, Credentials, Secret};
use crate::diagnostics::DiagnosticsSink;
use crate::error::{ErrorCode, ToolError};

/// Who a run acts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// The token issuer.
    pub iss: String,
    /// The subject (user or service).
    pub sub: String,
    /// The tenant, when the deployment has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// A stored blob: its content-addressed URI, size and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// The URI to hand back in a result, e.g. `blob:sha256:<hex>`.
    pub uri: String,
    /// Size in bytes.
    pub size: u64,
    /// Hex SHA-256 of the content.
    pub sha256: String,
    /// The media type given when storing, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

/// A failure of a blob store.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct BlobError {
    /// What went wrong.
    pub message: String,
}

impl From<BlobError> for ToolError {
    fn from(e: BlobError) -> Self {
        ToolError::new(ErrorCode::BlobError, e.message)
    }
}

/// Stores generated files so a tool can return a URI instead of the bytes.
pub trait BlobStore: Send + Sync + fmt::Debug {
    /// Store bytes; the same bytes always yield the same URI.
    fn put<'a>(
        &'a self,
        bytes: &'a [u8],
        media_type: Option<&'a str>,
    ) -> BoxFuture<'a, Result<BlobRef, BlobError>>;

    /// Read back the bytes behind a URI this store returned.
    fn get<'a>(&'a self, uri: &'a str) -> BoxFuture<'a, Result<Vec<u8>, BlobError>>;
}

/// The run-wide part of every call's context. Cheap to clone.
#[derive(Clone)]
pub struct RunContext {
    inner: Arc<RunInner>,
}

struct RunInner {
    agent_id: Arc<str>,
    run_id: Arc<str>,
    session_id: Arc<str>,
    principal: Option<Principal>,
    env: BTreeMap<String, String>,
    secrets: Arc<[Secret]>,
    credentials: Option<Arc<dyn CredentialProvider>>,
    blob_store: Option<Arc<dyn BlobStore>>,
    attachments: Option<Arc<dyn AttachmentReader>>,
    asker: Option<Arc<dyn Asker>>,
    cancel: CancellationToken,
}

impl fmt::Debug for RunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("agent_id", &self.inner.agent_id)
            .field("run_id", &self.inner.run_id)
            .field("session_id", &self.inner.session_id)
            .field("principal", &self.inner.principal)
            .field("env", &self.inner.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl RunContext {
    /// Start building a run context; ids default to fresh UUIDs.
    pub fn builder() -> RunContextBuilder {
        RunContextBuilder::default()
    }

    /// A context with fresh ids and nothing else: handy for tests and one-off calls.
    pub fn ephemeral() -> Self {
        Self::builder().build()
    }

    /// The agent id.
    pub fn agent_id(&self) -> &str {
        &self.inner.agent_id
    }
    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }
    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }
    /// The principal, if the run has one.
    pub fn principal(&self) -> Option<&Principal> {
        self.inner.principal.as_ref()
    }
    /// A declared env value.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.inner.env.get(name).map(String::as_str)
    }
    /// Every declared env value (what a subprocess tool receives as `ctx.env`).
    pub fn env_vars(&self) -> &BTreeMap<String, String> {
        &self.inner.env
    }
    /// Values no call of the run may show (e.g. the secret parts of env values):
    /// the pipeline scrubs them from every result, error, partial result and
    /// diagnostics, as it does the credentials a call read.
    pub fn secrets(&self) -> &[Secret] {
        &self.inner.secrets
    }
    /// The same run with other declared env values: what a handler that narrows or
    /// fills the env of the handler it wraps hands on (ids, principal, stores and
    /// cancellation are shared).
    pub fn with_env(&self, env: BTreeMap<String, String>) -> RunContext {
        let inner = &self.inner;
        RunContext {
            inner: Arc::new(RunInner {
                agent_id: inner.agent_id.clone(),
                run_id: inner.run_id.clone(),
                session_id: inner.session_id.clone(),
                principal: inner.principal.clone(),
                env,
                secrets: inner.secrets.clone(),
                credentials: inner.credentials.clone(),
                blob_store: inner.blob_store.clone(),
                attachments: inner.attachments.clone(),
                asker: inner.asker.clone(),
                cancel: inner.cancel.clone(),
            }),
        }
    }
    /// The run-wide default credential provider.
    pub fn credential_provider(&self) -> Option<&Arc<dyn CredentialProvider>> {
        self.inner.credentials.as_ref()
    }
    /// The blob store, if configured.
    pub fn blob_store(&self) -> Option<&Arc<dyn BlobStore>> {
        self.inner.blob_store.as_ref()
    }
    /// The attachment store, if configured.
    pub fn attachments(&self) -> Option<&Arc<dyn AttachmentReader>> {
        self.inner.attachments.as_ref()
    }
    /// The run's cancellation token; cancelling it cancels every call of the run.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }
    /// Who answers the questions its tools ask (see [`crate::ask`]), when the run was
    /// started by a client that can.
    pub fn asker(&self) -> Option<&Arc<dyn Asker>> {
        self.inner.asker.as_ref()
    }
    pub(crate) fn agent_id_arc(&self) -> &Arc<str> {
        &self.inner.agent_id
    }
    pub(crate) fn run_id_arc(&self) -> &Arc<str> {
        &self.inner.run_id
    }
    pub(crate) fn session_id_arc(&self) -> &Arc<str> {
        &self.inner.session_id
    }
}

/// Builds a [`RunContext`].
#[derive(Default)]
pub struct RunContextBuilder {
    agent_id: Option<String>,
    run_id: Option<String>,
    session_id: Option<String>,
    principal: Option<Principal>,
    env: BTreeMap<String, String>,
    secrets: Vec<Secret>,
    credentials: Option<Arc<dyn CredentialProvider>>,
    blob_store: Option<Arc<dyn BlobStore>>,
    attachments: Option<Arc<dyn AttachmentReader>>,
    asker: Option<Arc<dyn Asker>>,
    cancel: Option<CancellationToken>,
}

impl RunContextBuilder {
    /// Set the agent id.
    pub fn agent_id(mut self, id: impl Into<String>) -> Self {
        self.agent_id = Some(id.into());
        self
    }
    /// Set the run id.
    pub fn run_id(mut self, id: impl Into<String>) -> Self {
        self.run_id = Some(id.into());
        self
    }
    /// Set the session id.
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }
    /// Set the principal.
    pub fn principal(mut self, principal: Principal) -> Self {
        self.principal = Some(principal);
        self
    }
    /// Set the declared env values (see [`crate::env::resolve_declared_env`]).
    pub fn env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }
    /// Set the values no call of the run may show (see [`RunContext::secrets`]).
    pub fn secrets(mut self, secrets: Vec<Secret>) -> Self {
        self.secrets = secrets;
        self
    }
    /// Set the run-wide default credential provider.
    pub fn credentials(mut self, provider: Arc<dyn CredentialProvider>) -> Self {
        self.credentials = Some(provider);
        self
    }
    /// Set the blob store.
    pub fn blob_store(mut self, store: Arc<dyn BlobStore>) -> Self {
        self.blob_store = Some(store);
        self
    }
    /// Set the attachment store `read_attachment` reads from.
    pub fn attachments(mut self, store: Arc<dyn AttachmentReader>) -> Self {
        self.attachments = Some(store);
        self
    }
    /// Set who answers the questions the run's tools ask (see [`crate::ask`]).
    pub fn asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = Some(asker);
        self
    }
    /// Use an existing cancellation token (e.g. one tied to a shutdown signal).
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
    /// Finish.
    pub fn build(self) -> RunContext {
        let fresh = || uuid::Uuid::now_v7().to_string();
        RunContext {
            inner: Arc::new(RunInner {
                agent_id: self.agent_id.unwrap_or_else(|| "default".into()).into(),
                run_id: self.run_id.unwrap_or_else(fresh).into(),
                session_id: self.session_id.unwrap_or_else(fresh).into(),
                principal: self.principal,
                env: self.env,
                secrets: self.secrets.into(),
                credentials: self.credentials,
                blob_store: self.blob_store,
                attachments: self.attachments,
                asker: self.asker,
                cancel: self.cancel.unwrap_or_default(),
            }),
        }
    }
}

/// Everything one call's handler receives besides its args.
#[derive(Clone, Debug)]
pub struct ToolContext {
    run: RunContext,
    tool_call_id: Arc<str>,
    tool_name: Arc<str>,
    attempt: u32,
    idempotency_key: Option<Arc<str>>,
    credentials: Credentials,
    cancel: CancellationToken,
    diagnostics: DiagnosticsSink,
    output_budget: usize,
}

impl ToolContext {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        run: RunContext,
        tool_call_id: Arc<str>,
        tool_name: Arc<str>,
        attempt: u32,
        idempotency_key: Option<Arc<str>>,
        credentials: Credentials,
        cancel: CancellationToken,
        diagnostics: DiagnosticsSink,
        output_budget: usize,
    ) -> Self {
        ToolContext {
            run,
            tool_call_id,
            tool_name,
            attempt,
            idempotency_key,
            credentials,
            cancel,
            diagnostics,
            output_budget,
        }
    }

    /// A context for calling a handler directly, outside any pipeline (tests, benches).
    pub fn detached(tool_name: &str) -> Self {
        let run = RunContext::ephemeral();
        let cancel = run.cancellation().child_token();
        ToolContext::new(
            run,
            Arc::from("detached"),
            Arc::from(tool_name),
            1,
            None,
            Credentials::new(Arc::from(Vec::new()), Arc::new(crate::EnvProvider)),
            cancel,
            DiagnosticsSink::default(),
            crate::budget::DEFAULT_OUTPUT_BYTES,
        )
    }

    /// The call's output budget in bytes: a handler reads no more than this of what it
    /// returns (a process's answer, a file, an MCP server's result, an HTTP body), beyond
    /// its own framing. Whatever is larger ends as `RESULT_TOO_LARGE` anyway (see
    /// [`crate::budget`]).
    pub fn output_budget(&self) -> usize {
        self.output_budget
    }

    /// The agent id.
    pub fn agent_id(&self) -> &str {
        self.run.agent_id()
    }
    /// The run id.
    pub fn run_id(&self) -> &str {
        self.run.run_id()
    }
    /// The session id.
    pub fn session_id(&self) -> &str {
        self.run.session_id()
    }
    /// The id of this tool call (as the model gave it, or generated).
    pub fn tool_call_id(&self) -> &str {
        &self.tool_call_id
    }
    /// The tool's name.
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }
    /// Which attempt this is, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// The principal the run acts for.
    pub fn principal(&self) -> Option<&Principal> {
        self.run.principal()
    }
    /// The credentials this tool declared.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }
    /// A value the agent declared under `env:`.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.run.env(name)
    }
    /// The blob store, when one is configured.
    pub fn blob_store(&self) -> Option<&Arc<dyn BlobStore>> {
        self.run.blob_store()
    }
    /// The attachment store, when one is configured.
    pub fn attachments(&self) -> Option<&Arc<dyn AttachmentReader>> {
        self.run.attachments()
    }
    /// Fires when the call times out or the run is cancelled. Pass it to long work.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }
    /// The idempotency key, for keyed calls: pass it to external APIs so a re-run after
    /// a crash is recognised as the same request.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }
    /// Where to leave this execution's diagnostics if the call is dropped before the
    /// handler returns (a timeout, a cancelled run); see [`DiagnosticsSink`]. A handler
    /// that returns reports them in its [`crate::Reply`].
    pub fn diagnostics(&self) -> &DiagnosticsSink {
        &self.diagnostics
    }
    /// The run context.
    pub fn run(&self) -> &RunContext {
        &self.run
    }
    /// Ask the client of the call (see [`crate::ask`]): input from the person there,
    /// or a completion from its model. Fails with [`AskError::NoClient`] when the call
    /// did not come from a client that can answer, and with [`AskError::Failed`] when
    /// the call is cancelled or times out meanwhile.
    pub async fn ask(&self, ask: Ask) -> Result<serde_json::Value, AskError> {
        let kind = ask.kind;
        let Some(asker) = self.run.asker() else {
            return Err(AskError::NoClient { kind });
        };
        tokio::select! {
            answer = asker.ask(&self.tool_name, ask) => answer,
            () = self.cancel.cancelled() => Err(AskError::Failed {
                kind,
                message: "the call was cancelled or timed out while it waited for the answer".into(),
            }),
        }
    }

    /// The same call with other declared env values (see [`RunContext::with_env`]):
    /// how a wrapping handler hands its inner handler exactly the env it should see.
    pub fn with_env(&self, env: BTreeMap<String, String>) -> ToolContext {
        ToolContext {
            run: self.run.with_env(env),
            ..self.clone()
        }
    }
}
