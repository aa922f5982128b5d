//! # toolshed-server
//!
//! The registry server: one organisation-wide catalogue of tools and agents over HTTP,
//! on top of the durable runtime. Every execution is a run in the journal; every route
//! is behind a bearer token (roles viewer < deployer < admin < owner); every answer is
//! `{"data": …}` and every error `{"error": {"code", "message", "details"}}`, never a
//! bare 500 for a bad request.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolshed_server::ServerError> {
//! let config = toolshed_server::ServerConfig::new("sqlite://toolshed.db");
//! let server = toolshed_server::Server::open(config).await?;
//! println!("listening on {}", server.local_addr());
//! server.run(async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```
//!
//! Routes are listed in the OpenAPI document (`GET /api/v1/openapi.json`, committed as
//! `docs/openapi.json`).

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use toolshed_api::ApiCode;
use toolshed_auth::{Role, Tokens};
use toolshed_dispatch::{Dispatcher, DispatcherConfig};
use toolshed_registry::{NewTool, NewUser};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

pub use axum::Json;

mod access_log;
pub mod client_addr;
pub mod code;
pub mod console;
pub mod credentials;
mod error;
pub mod execute;
mod extract;
pub mod limits;
mod listen;
pub mod login_limits;
pub mod mcp;
pub mod mcp_gateway;
mod mcp_polling;
pub mod public_url;
mod retention;
pub mod routes;
pub mod sandbox;
mod state;
pub mod storage;
mod tenancy;
mod tools;
mod views;

pub use error::ApiError;
pub use retention::Retention;
pub use routes::ApiDoc;
pub use state::{AppState, Prepared};
pub use toolshed_api::{ErrorBody, ErrorEnvelope};

/// The tenant of users added without one.
pub const DEFAULT_TENANT: &str = "default";

/// Settings of the server. `Debug` prints `***` for the signing secret and the admin
/// password, and the database URL with its password masked.
#[derive(Clone)]
pub struct ServerConfig {
    /// Where to listen (default `127.0.0.1:8000`; port 0 picks a free one).
    pub addr: SocketAddr,
    /// The database of the journal and the registry: `sqlite://PATH` or `postgres://…`.
    pub database_url: String,
    /// The largest request body, in bytes (default 2 MiB); larger is a 413.
    pub max_body_bytes: usize,
    /// How long one request may take (default 10 minutes); longer is a 503.
    pub request_timeout: Duration,
    /// How long an access token is valid (default 15 minutes). A withdrawn token is
    /// refused within seconds whatever this says; this bounds a stolen one.
    pub token_ttl: Duration,
    /// How long a refresh token is valid (default 12 hours).
    pub refresh_ttl: Duration,
    /// Login limits: hashing slots, failed attempts per user name from one address, per
    /// user name and per address, wrong current passwords per session.
    pub login: login_limits::LoginLimits,
    /// Proxies whose forwarding headers (`Forwarded`, `X-Forwarded-For`) name the
    /// client, and whose connections the per-address cap leaves alone (`toolshed serve
    /// --trusted-proxy CIDR`). Empty by default: the client is the socket's peer and the
    /// headers are ignored.
    pub trusted_proxies: Vec<client_addr::TrustedProxy>,
    /// The token issuer, also the principal's `iss` (default `toolshed`).
    pub issuer: String,
    /// The token signing secret. `None`: one is generated on first start and kept in
    /// the database, so every server sharing it accepts the same tokens.
    pub jwt_secret: Option<String>,
    /// The first admin's password, used only when the database has no users. `None`:
    /// a random one is generated and reported in [`Seeded`].
    pub admin_password: Option<String>,
    /// How subprocess and HTTP tools run. Its `isolation` is the sandbox by default;
    /// [`toolshed_dispatch::Isolation::Unsandboxed`] is the operator's explicit choice
    /// (`toolshed serve --unsandboxed`), warned about at start-up.
    pub dispatcher: DispatcherConfig,
    /// The sandbox of `POST /api/v1/tools/sandbox/execute`: its defaults (the seed's:
    /// 256 MB, network off, 30 s) and the ceilings a request is lowered to.
    pub sandbox: sandbox::SandboxSettings,
    /// Uploaded code (the cache folder, the upload caps) and the operator's tool roots
    /// for host-path endpoints.
    pub code: code::CodeSettings,
    /// Limits on clients: the connection cap and timeouts, the execute rate.
    pub limits: limits::Limits,
    /// Which credentials each tenant's tools may declare and where their values come
    /// from (`toolshed serve --credentials-policy FILE`). Empty by default: no tool gets
    /// a credential until the operator lists it; `TOOLSHED_*` names never.
    pub credentials: credentials::CredentialsPolicy,
    /// Prune finished runs continuously (`toolshed serve --retain-runs 30d`); `None`
    /// (the default) keeps every run.
    pub retain_runs: Option<Retention>,
    /// The free-disk guard: new runs are refused with 503 `STORAGE_FULL` while the
    /// journal's or the blobs' filesystem has less free space than its floor (default
    /// 1 GiB; `toolshed serve --min-free-disk-mb`).
    pub storage: storage::StorageSettings,
    /// Four-eyes for every gated call (`toolshed serve --four-eyes`): whoever asked for a
    /// call may not approve it, whatever the tool declares (default off: only tools
    /// with `approval.four_eyes` ask for it).
    pub four_eyes: bool,
    /// `/mcp`: the extra allowed origins and the prompts and resources offered.
    pub mcp_gateway: mcp_gateway::McpSettings,
    /// The URL people reach the server at (`toolshed serve --public-url`), when a proxy
    /// stands in front of it: an `https://` one makes the console's cookies `Secure`,
    /// and its origin passes the console's same-origin check. `None` (the default): the
    /// request's own `Host` is the console's origin.
    pub public_url: Option<public_url::PublicUrl>,
    /// Host folders bound into the sandbox of every MCP stdio server the registry
    /// starts (read-only), e.g. a shared `node_modules` of pinned servers. Empty by
    /// default: `npx -y` and `uvx` servers download into their per-server cache.
    pub mcp_binds: Vec<toolshed_sandbox::Bind>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masked = |s: &Option<String>| s.as_ref().map(|_| "***");
        f.debug_struct("ServerConfig")
            .field("addr", &self.addr)
            .field(
                "database_url",
                &toolshed_store::mask_password(&self.database_url),
            )
            .field("max_body_bytes", &self.max_body_bytes)
            .field("request_timeout", &self.request_timeout)
            .field("token_ttl", &self.token_ttl)
            .field("issuer", &self.issuer)
            .field("jwt_secret", &masked(&self.jwt_secret))
            .field("admin_password", &masked(&self.admin_password))
            .field("dispatcher", &self.dispatcher)
            .field("sandbox", &self.sandbox)
            .field("credentials", &self.credentials)
            .field("public_url", &self.public_url)
            .field("trusted_proxies", &self.trusted_proxies)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// Defaults, with this database.
    pub fn new(database_url: impl Into<String>) -> Self {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8000)),
            database_url: database_url.into(),
            max_body_bytes: 2 * 1024 * 1024,
            request_timeout: Duration::from_secs(600),
            token_ttl: Duration::from_secs(15 * 60),
            refresh_ttl: Duration::from_secs(12 * 3600),
            login: login_limits::LoginLimits::default(),
            trusted_proxies: Vec::new(),
            issuer: "toolshed".into(),
            jwt_secret: None,
            admin_password: None,
            dispatcher: DispatcherConfig::default(),
            sandbox: sandbox::SandboxSettings::default(),
            code: code::CodeSettings::default(),
            limits: limits::Limits::default(),
            credentials: credentials::CredentialsPolicy::default(),
            // Finished runs are kept 30 days by default (`toolshed serve --retain-runs`).
            retain_runs: Some(Retention::new(Duration::from_secs(30 * 86_400))),
            storage: storage::StorageSettings::default(),
            four_eyes: false,
            mcp_gateway: mcp_gateway::McpSettings::default(),
            public_url: None,
            mcp_binds: Vec::new(),
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The journal could not be opened.
    #[error("cannot open the journal")]
    Journal(#[source] toolshed_journal::JournalError),
    /// The registry could not be opened or seeded.
    #[error("cannot open the registry")]
    Registry(#[source] toolshed_registry::RegistryError),
    /// The signing secret or the admin password was refused.
    #[error("invalid auth settings")]
    Auth(#[source] toolshed_auth::AuthError),
    /// The address could not be bound or serving failed.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Seeding the database failed.
    #[error("cannot seed the registry: {0}")]
    Seed(String),
    /// The sandbox settings are invalid (a default above its ceiling, a limit too
    /// small). A host that cannot sandbox is not this: the server starts and the
    /// sandbox's routes answer 503.
    #[error("invalid sandbox settings")]
    SandboxSettings(#[source] toolshed_sandbox::SandboxError),
    /// The code cache folder or a tool root cannot be used (the message says which and
    /// why).
    #[error("invalid code settings: {0}")]
    CodeSettings(String),
    /// The credentials policy names Vault and Vault is not configured (or is
    /// misconfigured).
    #[error("invalid credentials policy")]
    Credentials(#[source] toolshed_core::CredentialError),
}

impl ServerError {
    /// The stable code: `JOURNAL_UNAVAILABLE`, `REGISTRY_UNAVAILABLE`, `AUTH_SETTINGS`,
    /// `LISTEN_FAILED`, `SEED_FAILED` or `SANDBOX_SETTINGS`.
    pub fn code(&self) -> ServerCode {
        match self {
            ServerError::Journal(_) => ServerCode::JournalUnavailable,
            ServerError::Registry(_) => ServerCode::RegistryUnavailable,
            ServerError::Auth(_) => ServerCode::AuthSettings,
            ServerError::Listen { .. } => ServerCode::ListenFailed,
            ServerError::Seed(_) => ServerCode::SeedFailed,
            ServerError::SandboxSettings(_) => ServerCode::SandboxSettings,
            ServerError::CodeSettings(_) => ServerCode::CodeSettings,
            ServerError::Credentials(_) => ServerCode::CredentialsPolicy,
        }
    }
}

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of [`ServerError`]: why a server could not start or stopped (the
    /// codes of its HTTP answers are [`ApiCode`]s). Listed in `docs/errors.md`.
    #[non_exhaustive]
    pub enum ServerCode {
        /// The journal could not be opened.
        JournalUnavailable,
        /// The registry could not be opened or seeded.
        RegistryUnavailable,
        /// The signing secret or the admin password was refused.
        AuthSettings,
        /// The address could not be bound, or serving failed.
        ListenFailed,
        /// Seeding the database failed.
        SeedFailed,
        /// The sandbox settings are invalid.
        SandboxSettings,
        /// The code cache folder or a tool root cannot be used.
        CodeSettings,
        /// The credentials policy is invalid, or names Vault without a usable Vault.
        CredentialsPolicy,
    }
}

/// What the first start of an empty database created. Its `Debug` leaves the
/// password out.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Seeded {
    /// The admin account and its password, when one was created.
    pub admin: Option<(String, String)>,
    /// How many stdlib tools were registered.
    pub tools: usize,
}

impl std::fmt::Debug for Seeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seeded")
            .field("admin", &self.admin.as_ref().map(|(user, _)| (user, "***")))
            .field("tools", &self.tools)
            .finish()
    }
}

/// A bound server, ready to run.
pub struct Server {
    state: AppState,
    listener: tokio::net::TcpListener,
    seeded: Seeded,
    literals: Vec<mcp::StoredLiteral>,
}

impl Server {
    /// Open the journal and the registry, seed an empty database (an `admin` account and
    /// the stdlib tools), and bind the address.
    pub async fn open(mut config: ServerConfig) -> Result<Server, ServerError> {
        check_sandbox_settings(&mut config)?;
        // One set of sandbox settings per server: unless the caller gave the dispatcher
        // its own, the tools it runs get the execute route's defaults, ceilings and
        // operator opt-ins, so `--sandbox-max-memory-mb` bounds every tool too.
        let mut shares_settings = false;
        if let toolshed_dispatch::Isolation::Sandbox(c) = &mut config.dispatcher.isolation
            && **c == toolshed_sandbox::SandboxConfig::default()
        {
            **c = config.sandbox.config.clone();
            shares_settings = true;
        }
        // Checked now, so a policy naming a Vault that is not configured refuses the
        // start (the state builds its own provider from the same policy).
        credentials::PolicyProvider::open(&config.credentials).map_err(ServerError::Credentials)?;
        let journal = toolshed_journal::open(&config.database_url)
            .await
            .map_err(ServerError::Journal)?;
        let registry = toolshed_registry::open(&config.database_url)
            .await
            .map_err(ServerError::Registry)?;
        let secret = match &config.jwt_secret {
            Some(s) => s.clone(),
            None => registry
                .get_or_init_setting("jwt_secret", random_hex(64))
                .await
                .map_err(ServerError::Registry)?,
        };
        let tokens = Tokens::new(secret.as_bytes(), &config.issuer, config.token_ttl)
            .map_err(ServerError::Auth)?
            .with_refresh_ttl(config.refresh_ttl);
        match &config.dispatcher.isolation {
            toolshed_dispatch::Isolation::Unsandboxed => tracing::warn!(
                isolation = "unsandboxed",
                "subprocess tools (python:, node:, exec:) run UNSANDBOXED on this host, as the server's own user: the operator chose it (--unsandboxed / TOOLSHED_UNSANDBOXED=1)"
            ),
            toolshed_dispatch::Isolation::Sandbox(_) => tracing::info!(
                isolation = "sandbox",
                "subprocess tools (python:, node:, exec:) run in the sandbox"
            ),
        }
        let sandbox = sandbox::SandboxHandle::open(&config.sandbox);
        let mut dispatcher =
            Dispatcher::new(config.dispatcher.clone()).with_builtins(toolshed_stdlib::tools());
        if shares_settings && let sandbox::SandboxHandle::Ready(s) = &sandbox {
            // One supervisor for the route and the tools: one set of host checks,
            // cgroup folders and network namespaces made ahead, not two.
            dispatcher = dispatcher.with_sandbox(s.clone());
        }
        let listener = listen::bind(config.addr).map_err(|source| ServerError::Listen {
            addr: config.addr,
            source,
        })?;
        let code = code::CodeCache::open(&config.code, &config.dispatcher.cache_dir)
            .map_err(ServerError::CodeSettings)?;
        let attachments = toolshed_journal::Attachments::open(&config.database_url)
            .await
            .map_err(ServerError::Journal)?;
        let blobs = toolshed_providers::LocalBlobStore::new(routes::attachments::blob_dir(
            &config.database_url,
        ))
        .map_err(|e| ServerError::Seed(format!("the attachments' blob folder: {}", e.message)))?;
        let storage = storage_guard(&config);
        let state = AppState::new(config, journal, registry, tokens, dispatcher, sandbox)
            .with_code(code)
            .with_attachments((Arc::new(attachments), Arc::new(blobs)))
            .with_storage(storage);
        let seeded = seed(&state).await?;
        let literals = warn_of_stored_literals(&state).await?;
        Ok(Server {
            state,
            listener,
            seeded,
            literals,
        })
    }

    /// The address it listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or(self.state.config().addr)
    }

    /// What was seeded on this start.
    pub fn seeded(&self) -> &Seeded {
        &self.seeded
    }

    /// The MCP server entries found holding literal `env`/`headers` values on this
    /// start (each logged as a warning, by id, name and key, never the value).
    pub fn stored_literals(&self) -> &[mcp::StoredLiteral] {
        &self.literals
    }

    /// The shared state (tests use it to issue tokens).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serve until `shutdown` completes, then stop accepting, let requests in flight
    /// finish, and stop the tool workers. Connections are capped and timed out as
    /// [`limits::ConnectionLimits`] says.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let app = router_at(self.state.clone(), self.local_addr());
        let pruning = self.state.config().retain_runs.map(|r| {
            tokio::spawn(retention::run(
                Arc::clone(self.state.journal()),
                self.state.attachments().ok(),
                r,
            ))
        });
        // Folders of code no tool runs any more (tools deleted while the server was down).
        let sweeping = self.state.code_cache().map(|cache| {
            let (cache, registry) = (cache.clone(), self.state.registry().clone());
            tokio::spawn(async move {
                if let Err(e) = cache.sweep_unused(registry.as_ref()).await {
                    tracing::warn!(error = ?e, "the code cache was not swept");
                }
            })
        });
        let watching = self
            .state
            .storage()
            .map(|guard| tokio::spawn(guard.clone().watch()));
        let limits = self.state.config().limits.connections;
        let trusted = self.state.config().trusted_proxies.clone().into();
        listen::serve(self.listener, app, limits, trusted, shutdown).await;
        if let Some(task) = watching {
            task.abort();
        }
        if let Some(task) = sweeping {
            task.abort();
        }
        // A batch in flight is its own transaction: stopping here commits or rolls
        // back whole.
        if let Some(task) = pruning {
            task.abort();
        }
        self.state.dispatcher().shutdown();
        self.state.mcp().shutdown().await;
        Ok(())
    }
}

/// The free-disk guard over the folders runs are written to: the SQLite journal's and
/// the attachments' blob folder. `None` when the operator turned it off.
fn storage_guard(config: &ServerConfig) -> Option<Arc<storage::StorageGuard>> {
    if config.storage.min_free_bytes == 0 {
        tracing::warn!(
            "the free-disk guard is off (--min-free-disk-mb 0): a full disk fails runs mid-write"
        );
        return None;
    }
    let mut folders = Vec::new();
    match toolshed_store::Location::parse(&config.database_url) {
        Ok(toolshed_store::Location::Sqlite { path }) => {
            folders.push(path.parent().map_or_else(|| ".".into(), Path::to_path_buf));
        }
        _ => tracing::info!(
            "the free-disk guard watches the blob folder only: the journal's disk is the database server's; watch it there"
        ),
    }
    folders.push(routes::attachments::blob_dir(&config.database_url));
    let guard = storage::StorageGuard::new(folders, &config.storage);
    tracing::info!(
        folders = ?guard.folders(),
        min_free_mb = config.storage.min_free_bytes / (1024 * 1024),
        "new runs are refused with 503 STORAGE_FULL below this much free space"
    );
    Some(guard)
}

/// Warn of every MCP server entry holding a literal `env`/`headers` value (stored
/// before they were refused): one warning per key naming the entry's id, name and
/// tenant and the key, never the value, which every view masks.
async fn warn_of_stored_literals(state: &AppState) -> Result<Vec<mcp::StoredLiteral>, ServerError> {
    let literals = mcp::stored_literals(state.registry().as_ref())
        .await
        .map_err(ServerError::Registry)?;
    for l in &literals {
        tracing::warn!(
            mcp_server_id = %l.id,
            mcp_server = %l.name,
            tenant = %l.tenant,
            key = %l.key,
            "MCP server `{}` (id {}) holds a literal value in `{}`, stored in clear before literals were refused; it is masked in every view: replace it with a ${{NAME}} credential reference (PUT /api/v1/mcp-servers/{})",
            l.name, l.id, l.key, l.id
        );
    }
    Ok(literals)
}

/// Check the sandbox settings, and keep a sandboxed run inside its request: a timeout
/// ceiling at or past the request timeout is lowered below it (logged), or the run's
/// answer would be the request timeout's 503.
fn check_sandbox_settings(config: &mut ServerConfig) -> Result<(), ServerError> {
    let request_ms = u64::try_from(config.request_timeout.as_millis()).unwrap_or(u64::MAX);
    let sandbox = &mut config.sandbox.config;
    if sandbox.ceilings.timeout_ms >= request_ms {
        let lowered = request_ms.saturating_sub(1000).max(1000).min(request_ms);
        tracing::warn!(
            ceiling_ms = sandbox.ceilings.timeout_ms,
            request_timeout_ms = request_ms,
            lowered_to_ms = lowered,
            "the sandbox's timeout ceiling is not below the request timeout; lowered"
        );
        sandbox.ceilings.timeout_ms = lowered;
        sandbox.defaults.timeout_ms = sandbox.defaults.timeout_ms.min(lowered);
    }
    sandbox.validate().map_err(ServerError::SandboxSettings)
}

/// Create the first account and register the stdlib tools when the database has no
/// users yet. The first account, `admin`, is the organisation's `owner` (it manages
/// every tenant; the admins it adds manage their own tenant's users only).
async fn seed(state: &AppState) -> Result<Seeded, ServerError> {
    let registry = state.registry();
    let mut seeded = Seeded::default();
    // The stdlib tools are registered once per database (whoever stores the marker
    // first does it), not on every start: an operator may delete one on purpose.
    let marker = random_hex(16);
    let stored = registry
        .get_or_init_setting("stdlib_seeded", marker.clone())
        .await
        .map_err(ServerError::Registry)?;
    if stored == marker {
        seeded.tools = seed_stdlib(registry.as_ref()).await?;
    }
    if registry
        .count_users()
        .await
        .map_err(ServerError::Registry)?
        > 0
    {
        return Ok(seeded);
    }
    let password = state
        .config()
        .admin_password
        .clone()
        .unwrap_or_else(|| random_hex(24));
    let hash = {
        let password = password.clone();
        tokio::task::spawn_blocking(move || toolshed_auth::hash_password(&password))
            .await
            .map_err(|e| ServerError::Seed(e.to_string()))?
            .map_err(ServerError::Auth)?
    };
    match registry
        .create_user(NewUser {
            username: "admin".into(),
            password_hash: hash,
            role: Role::Owner,
            tenant: DEFAULT_TENANT.into(),
        })
        .await
    {
        Ok(_) => seeded.admin = Some(("admin".into(), password)),
        // Another server sharing the database seeded it first.
        Err(toolshed_registry::RegistryError::Conflict(_)) => {}
        Err(e) => return Err(ServerError::Registry(e)),
    }
    Ok(seeded)
}

/// Register the stdlib tools missing from the registry; returns how many.
async fn seed_stdlib(
    registry: &dyn toolshed_registry::RegistryStore,
) -> Result<usize, ServerError> {
    let mut count = 0;
    for tool in toolshed_stdlib::tools() {
        if registry
            .find_tool_by_name(tool.name())
            .await
            .map_err(ServerError::Registry)?
            .is_some()
        {
            continue;
        }
        let mut file = toolshed_core::file::ToolFile::from_spec(tool.spec());
        file.endpoint = Some(format!("builtin:{}", tool.name()));
        let definition =
            serde_json::to_value(&file).map_err(|e| ServerError::Seed(e.to_string()))?;
        match registry
            .create_tool(NewTool {
                name: tool.name().to_owned(),
                description: tool.spec().description.clone(),
                tool_type: "function".into(),
                source: crate::tools::STDLIB_SOURCE.into(),
                endpoint: file.endpoint.clone(),
                version: file.version.clone(),
                definition,
                created_by: "toolshed".into(),
                tenant: DEFAULT_TENANT.into(),
                code: None,
            })
            .await
        {
            Ok(_) => count += 1,
            // Registered meanwhile by someone else: theirs stays.
            Err(toolshed_registry::RegistryError::Conflict(_)) => {}
            Err(e) => return Err(ServerError::Registry(e)),
        }
    }
    Ok(count)
}

/// Random hex text of `len` characters (UUID v4 randomness, from the OS).
fn random_hex(len: usize) -> String {
    let mut out = String::with_capacity(len + 32);
    while out.len() < len {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out.truncate(len);
    out
}

/// An argon2 hash to verify against when a login names an unknown user, so both
/// answers take as long.
pub(crate) fn dummy_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| toolshed_auth::hash_password(&random_hex(32)).unwrap_or_default())
}

/// The application: every route, the body limit, the timeout, the panic guard, and
/// error envelopes for whatever a layer answers bare. The routes are listed once, in
/// [`routes::api`], which also makes the OpenAPI document.
pub fn router(state: AppState) -> Router {
    let addr = state.config().addr;
    router_at(state, addr)
}

/// [`router`] for a server listening on `local` (its address is an allowed `Host` of
/// `/mcp`).
pub fn router_at(state: AppState, local: SocketAddr) -> Router {
    let mcp = mcp_gateway::service(&state, local);
    router_with(state, mcp)
}

/// [`router`] with the routes of an application that embeds the server added (a probe
/// or a page of its own). They are served under the same layers as the API's routes:
/// the body limit, the error envelopes, the request timeout, the panic guard (a panic
/// is a 500 envelope that leaks nothing) and the access log.
///
/// # Panics
///
/// When a route of `extra` is also one of the API's (axum refuses overlapping routes).
pub fn router_with(state: AppState, extra: Router<AppState>) -> Router {
    let config = state.config().clone();
    let (routes, _) = routes::api().split_for_parts();
    routes
        .merge(extra)
        .merge(console::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            config.request_timeout,
        ))
        // Outside the timeout, so the timeout's bare 503 gets the envelope too.
        .layer(middleware::from_fn(envelope_bare_errors))
        .layer(CatchPanicLayer::custom(panicked))
        // One span and one event per request at DEBUG (method, path with its query
        // redacted, status, latency): `TOOLSHED_LOG=info,tower_http=debug` turns the
        // access log on.
        .layer(tower_http::trace::TraceLayer::new_for_http().make_span_with(access_log::make_span))
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route {} {}; the routes are listed at GET /api/v1/openapi.json",
        req.method(),
        req.uri().path()
    ))
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        ApiCode::MethodNotAllowed,
        format!(
            "{} is not allowed on {}; see GET /api/v1/openapi.json",
            req.method(),
            req.uri().path()
        ),
    )
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::new(
        ApiCode::Internal,
        "the server hit a bug handling this request; the server log has the details",
    )
    .into_response()
}

/// Give an error answer without a JSON body (a timeout, a layer's rejection) the
/// envelope.
async fn envelope_bare_errors(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == HeaderValue::from_static("application/json"));
    if status.as_u16() < 400 || is_json {
        return response;
    }
    let error = match status {
        // The only bare 503 is the timeout layer's.
        StatusCode::SERVICE_UNAVAILABLE => ApiError::new(
            ApiCode::RequestTimeout,
            "the request took longer than the server allows",
        ),
        // Bodies are read by `extract::Body`, which names the limit; this is the rest.
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            ApiCode::PayloadTooLarge,
            "the body is larger than the server's limit",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            ApiCode::UnsupportedMediaType,
            "send JSON (Content-Type: application/json)",
        ),
        _ => ApiError::rejected(
            status,
            status.canonical_reason().unwrap_or("request failed"),
        ),
    };
    error.into_response()
}
