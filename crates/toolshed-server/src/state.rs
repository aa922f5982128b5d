//! What every request handler shares: the stores, the token signer, the dispatcher, the
//! sandbox and the caches of registry tools ready to execute and of verified tokens.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use toolshed_auth::{Claims, Tokens};
use toolshed_dispatch::Dispatcher;
use toolshed_journal::Journal;
use toolshed_registry::{RegistryStore, ToolRecord};
use toolshed_runtime::Runtime;

use crate::ServerConfig;
use crate::credentials::PolicyProvider;
use crate::error::ApiError;
use crate::sandbox::SandboxHandle;
use crate::tools::{build_runtime, find_tool};

/// How long a prepared tool is trusted before the store is asked again. Changes made
/// through this server invalidate at once; this bounds how long another server sharing
/// the database can go on executing a revision it replaced.
const PREPARED_TTL: Duration = Duration::from_secs(2);

/// Prepared tools kept at most (each under its id and its name).
const PREPARED_TOOLS: u64 = 4096;

/// Verified tokens remembered at most; the least used go first.
const VERIFIED_TOKENS: u64 = 4096;

/// How long a verification is remembered. The token's own expiry is checked on every
/// hit; this only bounds how long an unused entry stays.
const VERIFIED_TTL: Duration = Duration::from_secs(600);

/// Shared state of the server. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    config: ServerConfig,
    journal: Arc<dyn Journal>,
    registry: Arc<dyn RegistryStore>,
    tokens: Tokens,
    dispatcher: Dispatcher,
    prepared: Cache<String, Arc<Prepared>>,
    verified: Cache<String, Claims>,
    sandbox: SandboxHandle,
    credentials: Arc<PolicyProvider>,
}

/// A registry tool ready to execute: its record, and a runtime whose toolset is that
/// one tool.
pub struct Prepared {
    /// The record it was built from.
    pub record: ToolRecord,
    /// The runtime executing it.
    pub runtime: Runtime,
}

impl AppState {
    /// Assemble the state.
    pub fn new(
        config: ServerConfig,
        journal: Arc<dyn Journal>,
        registry: Arc<dyn RegistryStore>,
        tokens: Tokens,
        dispatcher: Dispatcher,
        sandbox: SandboxHandle,
    ) -> Self {
        let credentials = Arc::new(
            PolicyProvider::open(&config.credentials)
                .unwrap_or_else(|_| PolicyProvider::without_vault(&config.credentials)),
        );
        AppState {
            inner: Arc::new(Inner {
                credentials,
                config,
                journal,
                registry,
                tokens,
                dispatcher,
                prepared: Cache::builder()
                    .max_capacity(PREPARED_TOOLS)
                    .time_to_live(PREPARED_TTL)
                    .build(),
                verified: Cache::builder()
                    .max_capacity(VERIFIED_TOKENS)
                    .time_to_live(VERIFIED_TTL)
                    .build(),
                sandbox,
            }),
        }
    }

    /// The sandbox of the execute route, or the 503 saying why this host has none.
    pub(crate) fn sandbox(&self) -> Result<&toolshed_sandbox::Sandbox, ApiError> {
        self.inner.sandbox.get()
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.inner.journal
    }

    /// The registry store.
    pub fn registry(&self) -> &Arc<dyn RegistryStore> {
        &self.inner.registry
    }

    /// The token signer.
    pub fn tokens(&self) -> &Tokens {
        &self.inner.tokens
    }

    /// Verify a bearer token. A token seen before is looked up instead of verified again
    /// (a signature check and a JSON parse per request otherwise): the key is the whole
    /// token, so a changed token is a miss, and the expiry is checked on every hit.
    pub fn verify_token(&self, token: &str) -> Result<Claims, toolshed_auth::AuthError> {
        if let Some(claims) = self.inner.verified.get(token) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            if claims.exp <= now {
                self.inner.verified.invalidate(token);
                return Err(toolshed_auth::AuthError::Expired);
            }
            return Ok(claims);
        }
        let claims = self.inner.tokens.verify(token)?;
        self.inner.verified.insert(token.to_owned(), claims.clone());
        Ok(claims)
    }

    /// The credential provider of registry tools: the operator's policy, per tenant.
    pub fn credentials(&self) -> &Arc<PolicyProvider> {
        &self.inner.credentials
    }

    /// The dispatcher (with the stdlib as built-ins).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.inner.dispatcher
    }

    /// The tool with this id (or name) ready to execute, built once per revision and
    /// trusted for `PREPARED_TTL`.
    pub async fn prepared(&self, id_or_name: &str) -> Result<Arc<Prepared>, ApiError> {
        if let Some(p) = self.inner.prepared.get(id_or_name) {
            return Ok(p);
        }
        let record = find_tool(self.registry().as_ref(), id_or_name).await?;
        let runtime = build_runtime(self, &record)?;
        let prepared = Arc::new(Prepared { record, runtime });
        let cache = &self.inner.prepared;
        cache.insert(prepared.record.id.clone(), prepared.clone());
        cache.insert(prepared.record.name.clone(), prepared.clone());
        Ok(prepared)
    }

    /// Forget a prepared tool (after an update or a delete through this server).
    pub fn forget(&self, record: &ToolRecord) {
        self.inner.prepared.invalidate(&record.id);
        self.inner.prepared.invalidate(&record.name);
    }
}
