//! What every request handler shares: the stores, the token signer, the dispatcher, the
//! sandbox, the login limiter, and the caches of registry tools ready to execute, of
//! verified tokens and of users' token generations and revoked sessions.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use toolshed_api::ApiCode;
use toolshed_auth::{Claims, Role, Tokens};
use toolshed_dispatch::Dispatcher;
use toolshed_journal::Journal;
use toolshed_registry::{RegistryStore, ToolRecord};
use toolshed_runtime::Runtime;

use crate::ServerConfig;
use crate::code::CodeCache;
use crate::credentials::PolicyProvider;
use crate::error::ApiError;
use crate::login_limits::LoginLimiter;
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

/// How long a user's token generation (and role, tenant and revoked sessions) is
/// trusted before the store is asked again. Changes and logouts made through this
/// server invalidate at once; this bounds how long a token withdrawn or logged out on
/// another server sharing the database (or by `toolshed user` writing to it directly)
/// stays usable.
const USER_STAMP_TTL: Duration = Duration::from_secs(2);

/// Users whose stamp is remembered at most. A miss costs one read of the user's row.
const USER_STAMPS: u64 = 65_536;

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
    /// Per user name: what its current tokens must say, or `None` for no such user.
    users: Cache<String, Option<Arc<UserStamp>>>,
    logins: LoginLimiter,
    sandbox: SandboxHandle,
    code: Option<Arc<CodeCache>>,
    execute_rate: Option<crate::limits::RateLimiter>,
    run_quota: Option<crate::limits::RateLimiter>,
    storage: Option<Arc<crate::storage::StorageGuard>>,
    credentials: Arc<PolicyProvider>,
    mcp: toolshed_mcp::McpHub,
    attachments: Option<crate::routes::attachments::AttachmentStores>,
}

/// What a user's current tokens carry: a token saying anything else was withdrawn; and
/// the user's sessions ended by a logout (sorted), whose tokens are refused.
#[derive(Debug, PartialEq, Eq)]
struct UserStamp {
    generation: i64,
    role: Role,
    tenant: String,
    revoked: Vec<String>,
}

/// How much longer than its tokens' lifetime a revoked session is remembered: a
/// refresh that read the user's stamp just before the logout (on another server, within
/// `USER_STAMP_TTL`) can still issue tokens of the session a moment after it.
const REVOCATION_MARGIN: Duration = Duration::from_secs(60);

/// Milliseconds since the Unix epoch, `from_now` from now.
pub(crate) fn epoch_ms_in(from_now: Duration) -> i64 {
    (std::time::SystemTime::now() + from_now)
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A registry tool ready to execute: its record, and a runtime whose toolset is that
/// one tool.
pub struct Prepared {
    /// The record it was built from.
    pub record: ToolRecord,
    /// The runtime executing it.
    pub runtime: Runtime,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("tool", &self.record.id)
            .finish_non_exhaustive()
    }
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
        let logins = LoginLimiter::new(config.login.clone());
        let execute_rate = config
            .limits
            .execute_rate
            .map(crate::limits::RateLimiter::new);
        let run_quota = config
            .limits
            .run_quota
            .map(|q| crate::limits::RateLimiter::new(q.rate()));
        let credentials = Arc::new(
            PolicyProvider::open(&config.credentials)
                .unwrap_or_else(|_| PolicyProvider::without_vault(&config.credentials)),
        );
        let mcp = mcp_hub(&config, &sandbox);
        AppState {
            inner: Arc::new(Inner {
                attachments: None,
                mcp,
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
                users: Cache::builder()
                    .max_capacity(USER_STAMPS)
                    .time_to_live(USER_STAMP_TTL)
                    .build(),
                logins,
                execute_rate,
                run_quota,
                storage: None,
                sandbox,
                code: None,
            }),
        }
    }

    /// The same state with this code cache (set once, by `Server::open`).
    /// The state with its attachment store and the blob store of attached files.
    pub(crate) fn with_attachments(
        mut self,
        stores: crate::routes::attachments::AttachmentStores,
    ) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.attachments = Some(stores);
        }
        self
    }

    /// The attachment store and the blob store of attached files.
    pub(crate) fn attachments(
        &self,
    ) -> Result<crate::routes::attachments::AttachmentStores, ApiError> {
        self.inner.attachments.clone().ok_or_else(|| {
            ApiError::internal(
                "no attachment store",
                std::io::Error::other("the state was built without one"),
            )
        })
    }

    /// The same state with this free-disk guard (set once, by `Server::open`).
    pub(crate) fn with_storage(mut self, guard: Option<Arc<crate::storage::StorageGuard>>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.storage = guard;
        }
        self
    }

    /// The free-disk guard, when on.
    pub(crate) fn storage(&self) -> Option<&Arc<crate::storage::StorageGuard>> {
        self.inner.storage.as_ref()
    }

    pub(crate) fn with_code(mut self, code: CodeCache) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.code = Some(Arc::new(code));
        }
        self
    }

    /// The code cache, shared (for [`CodeCache::sweep_unused`]).
    pub(crate) fn code_cache(&self) -> Option<&Arc<CodeCache>> {
        self.inner.code.as_ref()
    }

    /// The code cache: uploaded code, dependency installs, tool roots.
    pub(crate) fn code(&self) -> Result<&CodeCache, ApiError> {
        self.inner.code.as_deref().ok_or_else(|| {
            ApiError::internal(
                "no code cache",
                std::io::Error::other("the state was built without one"),
            )
        })
    }

    /// A stored tool as the runtime executes it: uploaded code written to the cache
    /// and its dependencies installed (each once per hash), a host path checked
    /// against the tool roots again.
    pub async fn runnable(&self, record: &ToolRecord) -> Result<toolshed_core::Tool, ApiError> {
        if let Some(endpoint) = record.endpoint.as_deref().filter(|e| e.starts_with("mcp:")) {
            return crate::mcp::runnable(self, record, endpoint).await;
        }
        let env = crate::tools::run_env(
            self.dispatcher(),
            self.code()?,
            self.registry().as_ref(),
            record,
        )
        .await?;
        let policy: Arc<dyn toolshed_core::CredentialProvider> = self.credentials().clone();
        crate::tools::build_tool(self.dispatcher(), record, &env, policy)
    }

    /// The connections to the registry's MCP servers (scope: the entry's tenant).
    pub fn mcp(&self) -> &toolshed_mcp::McpHub {
        &self.inner.mcp
    }

    /// Whether `tenant` may start a run now (an execute, a sandboxed execution): the
    /// disk has room (503 `STORAGE_FULL`), the tenant is within its run quota (429
    /// `RUN_QUOTA_EXCEEDED`) and its execute rate (429 `RATE_LIMITED`). The two 429s say
    /// when to retry in `Retry-After`.
    pub(crate) fn admit_run(&self, tenant: &str) -> Result<(), ApiError> {
        if let Some(guard) = &self.inner.storage
            && let Err((free, floor)) = guard.admit()
        {
            const MB: u64 = 1024 * 1024;
            return Err(ApiError::new(
                toolshed_api::ApiCode::StorageFull,
                format!(
                    "the server's disk has {} MB free, below the {} MB it keeps free: new runs are refused until space is freed (`toolshed runs prune --older-than AGE`, a shorter `--retain-runs`, or a larger disk); reads and decisions still work",
                    free / MB,
                    floor / MB
                ),
            ));
        }
        if let Some(quota) = &self.inner.run_quota {
            quota.check(tenant).map_err(|wait| {
                let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                let q = self.config().limits.run_quota.unwrap_or_default();
                ApiError::new(
                    toolshed_api::ApiCode::RunQuotaExceeded,
                    format!(
                        "tenant `{tenant}` started its quota of {} runs per {} s on this server; retry in {seconds} s, or ask the operator for a larger quota (`toolshed serve --run-quota RUNS/AGE`)",
                        q.runs,
                        q.per.as_secs()
                    ),
                )
                .with_retry_after(seconds)
            })?;
        }
        self.check_execute_rate(tenant)
    }

    /// Take one execute from `tenant`'s bucket, or the 429 `RATE_LIMITED` saying how
    /// long to wait. Always allowed without `--execute-rate`.
    fn check_execute_rate(&self, tenant: &str) -> Result<(), ApiError> {
        let Some(limiter) = &self.inner.execute_rate else {
            return Ok(());
        };
        limiter.check(tenant).map_err(|wait| {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let rate = limiter.rate();
            ApiError::new(
                toolshed_api::ApiCode::RateLimited,
                format!(
                    "tenant `{tenant}` is executing faster than this server allows ({} per second, bursts of {}); retry in {seconds} s",
                    rate.per_second, rate.burst
                ),
            )
            .with_retry_after(seconds)
        })
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

    /// Refuse a token that was withdrawn: its user is gone, or its generation, role or
    /// tenant is no longer the user's (a password, role or tenant change bumps the
    /// generation); or that was logged out: its session was revoked (or it has none,
    /// being older than sessions). Role and tenant are compared too, so a change that
    /// forgot the generation still ends the token. The user's row and revoked sessions
    /// are read at most once per `USER_STAMP_TTL` per server; on a hit this is one
    /// cache lookup and a binary search.
    pub async fn check_current(&self, claims: &Claims) -> Result<(), ApiError> {
        let stamp = match self.inner.users.get(&claims.sub) {
            Some(stamp) => stamp,
            None => {
                let stamp = match self.registry().get_user(&claims.sub).await? {
                    Some(u) => {
                        let mut revoked = self.registry().revoked_sessions(&u.username).await?;
                        revoked.sort_unstable();
                        Some(Arc::new(UserStamp {
                            generation: u.token_generation,
                            role: u.role,
                            tenant: u.tenant,
                            revoked,
                        }))
                    }
                    None => None,
                };
                self.inner.users.insert(claims.sub.clone(), stamp.clone());
                stamp
            }
        };
        let Some(stamp) = stamp.filter(|s| {
            u64::try_from(s.generation).ok() == Some(claims.generation)
                && s.role == claims.role
                && claims.tenant.as_deref() == Some(s.tenant.as_str())
        }) else {
            return Err(ApiError::new(
                ApiCode::Unauthenticated,
                "the token was withdrawn (its user was removed, or its password, role or tenant changed); log in again (POST /api/v1/auth/login)",
            ));
        };
        let live = claims.sid.as_deref().is_some_and(|sid| {
            stamp
                .revoked
                .binary_search_by(|r| r.as_str().cmp(sid))
                .is_err()
        });
        if live {
            Ok(())
        } else {
            Err(ApiError::new(
                ApiCode::Unauthenticated,
                "the token's session was ended (logged out); log in again (POST /api/v1/auth/login)",
            ))
        }
    }

    /// End the session `claims` belongs to (a logout): every token carrying its id,
    /// access and refresh, of the login and of every refresh after it, is refused from
    /// the next request on here, and on every server sharing the database within
    /// `USER_STAMP_TTL`. The user's other sessions go on. The revocation is kept until
    /// the last of the session's tokens has expired. `false` for a token without a
    /// session (nothing to end: the server refuses it anyway).
    pub async fn revoke_session(&self, claims: &Claims) -> Result<bool, ApiError> {
        let Some(sid) = claims.sid.clone() else {
            return Ok(false);
        };
        self.registry()
            .revoke_session(toolshed_registry::RevokedSession {
                session_id: sid,
                username: claims.sub.clone(),
                expires_at_ms: self.revoked_until_ms(claims),
            })
            .await?;
        self.forget_user(&claims.sub);
        Ok(true)
    }

    /// Until when a revocation of `claims`' session is kept: past the lifetime of the
    /// longest token this server issues, and never shorter than the token in hand (a
    /// server with longer lifetimes than ours may have issued it). Milliseconds since
    /// the Unix epoch.
    pub(crate) fn revoked_until_ms(&self, claims: &Claims) -> i64 {
        let tokens = self.tokens();
        let lifetime = tokens.ttl().max(tokens.refresh_ttl()) + REVOCATION_MARGIN;
        let own = i64::try_from(claims.exp)
            .unwrap_or(i64::MAX / 1000)
            .saturating_mul(1000);
        epoch_ms_in(lifetime).max(own)
    }

    /// Forget what is known of a user's tokens (after this server changed or removed
    /// it), so its old tokens are refused from the next request on.
    pub fn forget_user(&self, username: &str) {
        self.inner.users.invalidate(username);
    }

    /// The login limiter.
    pub(crate) fn logins(&self) -> &LoginLimiter {
        &self.inner.logins
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
        let tool = self.runnable(&record).await?;
        let runtime = build_runtime(self, tool)?;
        let prepared = Arc::new(Prepared { record, runtime });
        let cache = &self.inner.prepared;
        cache.insert(prepared.record.id.clone(), prepared.clone());
        cache.insert(prepared.record.name.clone(), prepared.clone());
        Ok(prepared)
    }

    /// Forget a prepared tool (after an update or a delete through this server), and
    /// drop the warm pools of its endpoint so its workers exit now.
    pub fn forget(&self, record: &ToolRecord) {
        self.inner.prepared.invalidate(&record.id);
        self.inner.prepared.invalidate(&record.name);
        let column = record.endpoint.as_deref();
        let defined = record.definition.get("endpoint").and_then(|v| v.as_str());
        for text in column
            .into_iter()
            .chain(defined.filter(|d| Some(*d) != column))
        {
            if let Ok(endpoint) = toolshed_dispatch::Endpoint::parse(text)
                && endpoint.is_subprocess()
            {
                self.inner.dispatcher.drop_pools(&endpoint);
            }
        }
    }
}

/// The hub of the registry's MCP servers: stdio servers in the server's sandbox (as
/// plain children only where the operator chose `--unsandboxed` for every tool), their
/// package caches under the dispatcher's cache folder, HTTP servers through the same
/// SSRF guard as HTTP tools.
fn mcp_hub(config: &ServerConfig, sandbox: &SandboxHandle) -> toolshed_mcp::McpHub {
    let mut client = toolshed_mcp::ClientConfig::new(config.dispatcher.cache_dir.join("mcp"));
    client.unsandboxed = matches!(
        config.dispatcher.isolation,
        toolshed_dispatch::Isolation::Unsandboxed
    );
    if let SandboxHandle::Ready(s) = sandbox
        && !client.unsandboxed
    {
        client.sandbox = Some(s.clone());
    }
    client.http_policy = config.dispatcher.http.clone();
    client.binds = config.mcp_binds.clone();
    toolshed_mcp::McpHub::new(client)
}
