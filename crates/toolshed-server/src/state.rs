//! What every request handler shares: the stores, the token signer, the dispatcher and
//! the cache of registry tools ready to execute.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolshed_auth::{Claims, Tokens};
use toolshed_dispatch::Dispatcher;
use toolshed_journal::Journal;
use toolshed_registry::{RegistryStore, ToolRecord};
use toolshed_runtime::Runtime;

use crate::ServerConfig;
use crate::error::ApiError;
use crate::tools::build_runtime;

/// How long a prepared tool is trusted before the store is asked again. Changes made
/// through this server invalidate at once; this bounds how long another server sharing
/// the database can go on executing a revision it replaced.
const PREPARED_TTL: Duration = Duration::from_secs(2);

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
    prepared: Mutex<HashMap<String, Arc<Prepared>>>,
    verified: Mutex<HashMap<String, Claims>>,
}

/// Verified tokens remembered, at most (the map is cleared when it is full).
const VERIFIED_TOKENS: usize = 4096;

/// A registry tool ready to execute: its record, and a runtime whose toolset is that
/// one tool.
pub struct Prepared {
    /// The record it was built from.
    pub record: ToolRecord,
    /// The runtime executing it.
    pub runtime: Runtime,
    loaded_at: Instant,
}

impl AppState {
    /// Assemble the state.
    pub fn new(
        config: ServerConfig,
        journal: Arc<dyn Journal>,
        registry: Arc<dyn RegistryStore>,
        tokens: Tokens,
        dispatcher: Dispatcher,
    ) -> Self {
        AppState {
            inner: Arc::new(Inner {
                config,
                journal,
                registry,
                tokens,
                dispatcher,
                prepared: Mutex::new(HashMap::new()),
                verified: Mutex::new(HashMap::new()),
            }),
        }
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
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if let Ok(map) = self.inner.verified.lock()
            && let Some(claims) = map.get(token)
        {
            if claims.exp <= now {
                return Err(toolshed_auth::AuthError::Expired);
            }
            return Ok(claims.clone());
        }
        let claims = self.inner.tokens.verify(token)?;
        if let Ok(mut map) = self.inner.verified.lock() {
            if map.len() >= VERIFIED_TOKENS {
                map.clear();
            }
            map.insert(token.to_owned(), claims.clone());
        }
        Ok(claims)
    }

    /// The dispatcher (with the stdlib as built-ins).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.inner.dispatcher
    }

    /// The tool with this id (or name) ready to execute, built once per revision.
    pub async fn prepared(&self, id_or_name: &str) -> Result<Arc<Prepared>, ApiError> {
        if let Some(p) = self.cached(id_or_name) {
            return Ok(p);
        }
        let record = crate::tools::find_tool(self, id_or_name).await?;
        let runtime = build_runtime(self, &record)?;
        let prepared = Arc::new(Prepared {
            record,
            runtime,
            loaded_at: Instant::now(),
        });
        if let Ok(mut map) = self.inner.prepared.lock() {
            map.insert(prepared.record.id.clone(), prepared.clone());
            map.insert(prepared.record.name.clone(), prepared.clone());
        }
        Ok(prepared)
    }

    fn cached(&self, key: &str) -> Option<Arc<Prepared>> {
        let map = self.inner.prepared.lock().ok()?;
        map.get(key)
            .filter(|p| p.loaded_at.elapsed() < PREPARED_TTL)
            .cloned()
    }

    /// Forget a prepared tool (after an update or a delete through this server).
    pub fn forget(&self, record: &ToolRecord) {
        if let Ok(mut map) = self.inner.prepared.lock() {
            map.remove(&record.id);
            map.remove(&record.name);
        }
    }
}
