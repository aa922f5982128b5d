//! # toolshed-registry
//!
//! The registry's store: tools (every revision kept), agents and the agent → tool usage
//! graph, users (and their revoked sessions) and the tenants they make up, behind one trait ([`RegistryStore`]) with two backends that pass
//! the same behavioural test suite: SQLite and PostgreSQL.
//!
//! The registry lives in the same database as the journal (one `sqlite://` file or one
//! PostgreSQL database/schema); its tables are prefixed `registry_` and its schema
//! version is the `registry_schema_version` key of the shared `toolshed_meta` table, so
//! opening the journal and the registry in either order works.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), toolshed_registry::RegistryError> {
//! use toolshed_registry::{NewTool, ToolFilter};
//!
//! let dir = tempfile::tempdir().map_err(|e| toolshed_registry::RegistryError::Backend(e.to_string()))?;
//! let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
//! let store = toolshed_registry::open(&url).await?;
//! let tool = store
//!     .create_tool(NewTool {
//!         name: "order-lookup".into(),
//!         description: "Look up an order".into(),
//!         tool_type: "function".into(),
//!         source: "manual".into(),
//!         endpoint: Some("python:/srv/tools/order_lookup.py".into()),
//!         version: None,
//!         definition: serde_json::json!({"spec_version": "v1", "name": "order-lookup", "description": "Look up an order"}),
//!         created_by: "admin".into(),
//!         tenant: "default".into(),
//!         code: None,
//!     })
//!     .await?;
//! assert_eq!(tool.revision, 1);
//! let page = store.list_tools(&ToolFilter::default()).await?;
//! assert_eq!(page.total, 1);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use toolshed_store::{DbError, DbErrorKind, Location, OpenError};

mod mcp_records;
mod mcp_rules;
mod records;
mod rules;
mod sql;
mod store;

pub use mcp_records::*;
pub use records::*;
pub use store::SqlRegistry;

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of [`RegistryError`], the same for both databases.
    #[non_exhaustive]
    pub enum RegistryCode {
        /// The database URL is not `sqlite://PATH` or `postgres://…`.
        InvalidDatabaseUrl,
        /// The database cannot be reached or opened, or is not a toolshed database.
        RegistryUnavailable,
        /// No such tool, agent or user.
        NotFound,
        /// The change conflicts with what is stored (a name taken, a stale revision).
        Conflict,
        /// Any other failure of the database.
        RegistryError,
        /// The tool, agent or user is another tenant's (or an organisation owner), out
        /// of the caller's scope.
        NotOwner,
    }
}

/// What can go wrong in the registry store. Each kind maps to one stable code, the
/// same for both backends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The URL is not `sqlite://PATH` or `postgres://…`.
    #[error("invalid database URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given (passwords masked).
        url: String,
        /// Why.
        reason: String,
    },
    /// The database cannot be reached or opened (passwords masked).
    #[error("registry database {target} is unavailable: {message}")]
    Unavailable {
        /// The file or masked URL.
        target: String,
        /// Why.
        message: String,
    },
    /// No such tool, agent, user, sandbox execution or MCP server (deleted tools count
    /// as missing; another tenant's MCP server too).
    #[error("{what} `{id}` not found")]
    NotFound {
        /// `tool`, `agent`, `user`, `sandbox execution` or `MCP server`.
        what: &'static str,
        /// The id or name asked for.
        id: String,
    },
    /// The change conflicts with what is stored (a name taken, a stale revision).
    #[error("{0}")]
    Conflict(String),
    /// Anything else the backend reported.
    #[error("registry error: {0}")]
    Backend(String),
    /// A change to a tool or agent another tenant owns, by a caller whose scope is one
    /// tenant ([`TenantScope`]).
    #[error(
        "{what} `{name}` belongs to tenant `{owner}`: only its users or an organisation owner can change it; register your own under another name"
    )]
    NotOwner {
        /// `tool` or `agent`.
        what: &'static str,
        /// Its name.
        name: String,
        /// The tenant that owns it.
        owner: String,
    },
    /// Removing an organisation owner by a caller whose scope is one tenant.
    #[error("user `{0}` is an organisation owner: only an owner can remove it")]
    OwnerOnly(String),
}

impl RegistryError {
    /// The stable code.
    pub fn code(&self) -> RegistryCode {
        match self {
            RegistryError::InvalidUrl { .. } => RegistryCode::InvalidDatabaseUrl,
            RegistryError::Unavailable { .. } => RegistryCode::RegistryUnavailable,
            RegistryError::NotFound { .. } => RegistryCode::NotFound,
            RegistryError::Conflict(_) => RegistryCode::Conflict,
            RegistryError::Backend(_) => RegistryCode::RegistryError,
            RegistryError::NotOwner { .. } | RegistryError::OwnerOnly(_) => RegistryCode::NotOwner,
        }
    }
}

impl From<OpenError> for RegistryError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::InvalidUrl { url, reason } => RegistryError::InvalidUrl { url, reason },
            OpenError::Unavailable { target, message } => {
                RegistryError::Unavailable { target, message }
            }
            // Someone else's file is "unavailable" to the registry, as it always was.
            OpenError::Foreign { path, message, .. } => RegistryError::Unavailable {
                target: path,
                message,
            },
            other => RegistryError::Backend(other.to_string()),
        }
    }
}

impl From<DbError> for RegistryError {
    fn from(e: DbError) -> Self {
        match e.kind {
            DbErrorKind::ConnectionLost => RegistryError::Unavailable {
                target: "the registry database".into(),
                message: e.message,
            },
            _ => RegistryError::Backend(e.message),
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// The registry store. Every write is committed before it returns.
#[async_trait]
pub trait RegistryStore: Send + Sync + fmt::Debug {
    /// Register a tool (revision 1, status active). `Conflict` when an active tool
    /// already has the name.
    async fn create_tool(&self, new: NewTool) -> Result<ToolRecord>;

    /// The current revision of an active tool by id. Deleted or unknown: `NotFound`.
    async fn get_tool(&self, id: &str) -> Result<ToolRecord>;

    /// The active tool with this exact name, if any.
    async fn find_tool_by_name(&self, name: &str) -> Result<Option<ToolRecord>>;

    /// Active tools matching the filter, ordered by name, one page.
    async fn list_tools(&self, filter: &ToolFilter) -> Result<Page<ToolRecord>>;

    /// Replace an active tool's definition: a new revision (+1) becomes current, the
    /// previous one is kept, and so is the owner (`update.tenant` is not written). A
    /// tool whose owner `scope` does not hold is `NotOwner`, checked in the writing
    /// transaction. With `expected_revision`, a different current revision is
    /// `Conflict` (someone else updated it). Renaming onto another active tool's name is
    /// `Conflict`.
    async fn update_tool(
        &self,
        id: &str,
        update: NewTool,
        expected_revision: Option<u32>,
        scope: &TenantScope,
    ) -> Result<ToolRecord>;

    /// Every revision of a tool (active or deleted), oldest first. Unknown: `NotFound`.
    async fn tool_versions(&self, id: &str) -> Result<Vec<ToolRecord>>;

    /// Mark an active tool deleted (its revisions are kept, its name is free again).
    /// Returns the record as deleted. Unknown or already deleted: `NotFound`; owned by
    /// a tenant `scope` does not hold: `NotOwner`.
    async fn delete_tool(&self, id: &str, scope: &TenantScope) -> Result<ToolRecord>;

    /// The agents using a tool, ordered by agent name. Unknown or deleted tool:
    /// `NotFound`.
    async fn tool_usage(&self, id: &str) -> Result<Vec<ToolUsage>>;

    /// Register an agent (owned by `new.tenant`), or replace the one with the same name
    /// (same id and owner, new definition, its usage edges replaced). Replacing an
    /// agent whose owner `scope` does not hold is `NotOwner`, checked by the writing
    /// statement. Unknown tool ids: `NotFound`.
    async fn upsert_agent(&self, new: NewAgent, scope: &TenantScope) -> Result<AgentRecord>;

    /// An agent by id or by name. Unknown: `NotFound`.
    async fn get_agent(&self, id_or_name: &str) -> Result<AgentRecord>;

    /// Agents ordered by name, one page (`page`/`per_page` as in [`ToolFilter`]).
    async fn list_agents(&self, page: u32, per_page: u32) -> Result<Page<AgentRecord>>;

    /// Add a user. `Conflict` when the name is taken.
    async fn create_user(&self, new: NewUser) -> Result<UserRecord>;

    /// A user by name, if any.
    async fn get_user(&self, username: &str) -> Result<Option<UserRecord>>;

    /// The users in `scope` (one tenant's, or everyone), ordered by name.
    async fn list_users(&self, scope: &TenantScope) -> Result<Vec<UserRecord>>;

    /// Change a user's password hash, role and/or tenant; any change bumps its token
    /// generation, which ends its tokens. Unknown: `NotFound`.
    async fn update_user(
        &self,
        username: &str,
        change: UserChange,
        scope: &TenantScope,
    ) -> Result<UserRecord>;

    /// Remove a user in `scope`. Unknown, or another tenant's: `NotFound` (names of
    /// other tenants' users are not confirmed). An organisation owner, unless `scope`
    /// is every tenant: `OwnerOnly`.
    async fn delete_user(&self, username: &str, scope: &TenantScope) -> Result<()>;

    /// How many users exist (the server seeds an admin when there are none).
    async fn count_users(&self) -> Result<u64>;

    /// End a session (a logout): its tokens are refused until `expires_at_ms`. Revoking
    /// it again keeps the later expiry. Sessions whose tokens have all expired are
    /// pruned in the same transaction.
    async fn revoke_session(&self, session: RevokedSession) -> Result<()>;

    /// The ids of a user's revoked sessions whose tokens may still be alive (not yet
    /// expired), ordered.
    async fn revoked_sessions(&self, username: &str) -> Result<Vec<String>>;

    /// Make `refresh` its session's live refresh token (a login, or a change that gives
    /// the session new tokens), replacing the one it had. Sessions whose refresh tokens
    /// have all expired are pruned in the same transaction.
    async fn record_refresh(&self, refresh: SessionRefresh) -> Result<()>;

    /// Spend a refresh token. When `spend.presented` is its session's live refresh token,
    /// `spend.next` becomes the live one: [`RefreshSpent::Rotated`]. Otherwise the token
    /// was spent already (or its session is not known: ended, or older than rotation),
    /// and the whole session ends, as a logout would end it (revoked until
    /// `spend.revoked_until_ms`), its live refresh token with it:
    /// [`RefreshSpent::SessionEnded`]. One transaction: of two refreshes racing with the
    /// same token, one rotates and the other ends the session.
    async fn spend_refresh(&self, spend: SpendRefresh) -> Result<RefreshSpent>;

    /// The tenants in `scope` (one, or every tenant), by name: each name a user, an
    /// active tool, an agent or an MCP server entry belongs to, with its counts and its
    /// admins. A tenant has no row of its own; it exists while something belongs to it.
    async fn list_tenants(&self, scope: &TenantScope) -> Result<Vec<TenantRecord>>;

    /// A server setting shared by every process using this database (e.g. the token
    /// signing secret): the stored value of `key`, or `value` stored and returned when
    /// there is none yet. Concurrent first calls agree on one value. Kept in a
    /// `registry_settings` table.
    async fn get_or_init_setting(&self, key: &str, value: String) -> Result<String>;

    /// Record a sandbox execution (`registry_sandbox_executions`).
    async fn record_sandbox_execution(
        &self,
        new: NewSandboxExecution,
    ) -> Result<SandboxExecutionRecord>;

    /// A sandbox execution of `tenant` by id. Unknown, or another tenant's: `NotFound`.
    async fn sandbox_execution(&self, id: &str, tenant: &str) -> Result<SandboxExecutionRecord>;

    /// The archive stored under `sha256` (uploaded code of some revision); `NotFound`
    /// when none is.
    async fn code_archive(&self, sha256: &str) -> Result<Vec<u8>>;

    /// A tenant's sandbox executions, newest first, one page (`page`/`per_page` as in
    /// [`ToolFilter`]).
    async fn list_sandbox_executions(
        &self,
        tenant: &str,
        page: u32,
        per_page: u32,
    ) -> Result<Page<SandboxExecutionRecord>>;

    /// Register an MCP server entry (revision 1, status registered). `Conflict` when its
    /// tenant has one of the name.
    async fn create_mcp_server(&self, new: NewMcpServer) -> Result<McpServerRecord>;

    /// An MCP server entry in `scope` by id. Unknown, or another tenant's: `NotFound`.
    async fn get_mcp_server(&self, id: &str, scope: &TenantScope) -> Result<McpServerRecord>;

    /// A tenant's MCP server entry by name, if any.
    async fn find_mcp_server(&self, tenant: &str, name: &str) -> Result<Option<McpServerRecord>>;

    /// The MCP server entries in `scope`, by name, one page (`page`/`per_page` as in
    /// [`ToolFilter`]).
    async fn list_mcp_servers(
        &self,
        scope: &TenantScope,
        page: u32,
        per_page: u32,
    ) -> Result<Page<McpServerRecord>>;

    /// Replace an entry's registration: revision n+1, owner kept. Unknown or another
    /// tenant's: `NotFound`; a stale `expected_revision` or a name taken in the tenant:
    /// `Conflict`. A rename deletes the entry's tools (discover registers them again
    /// under the new name).
    async fn update_mcp_server(
        &self,
        id: &str,
        new: NewMcpServer,
        expected_revision: Option<u32>,
        scope: &TenantScope,
    ) -> Result<McpServerRecord>;

    /// Record what a test or discover saw of an entry (status, last ping, last error).
    async fn record_mcp_status(
        &self,
        id: &str,
        scope: &TenantScope,
        ping: McpPing,
    ) -> Result<McpServerRecord>;

    /// Remove an entry and delete its registry tools (their revisions are kept).
    /// Returns the entry as it was.
    async fn delete_mcp_server(&self, id: &str, scope: &TenantScope) -> Result<McpServerRecord>;

    /// Make an entry's registry tools what its discover found, in one transaction: new
    /// names registered, names no longer listed deleted, and a tool whose definition
    /// changed given a new revision when its server sent what was accepted before (the
    /// owner's overrides changed) or the entry takes changes at once (`auto_accept`);
    /// otherwise the change is held back as pending and the accepted revision stays
    /// active. A name another tool holds is a `Conflict` naming both sources, and then
    /// nothing changes.
    async fn sync_mcp_tools(
        &self,
        id: &str,
        scope: &TenantScope,
        tools: McpTools,
    ) -> Result<McpSync>;

    /// The entry's tools whose changed definitions wait for an admin, by name.
    async fn mcp_pending(&self, id: &str, scope: &TenantScope) -> Result<Vec<McpPending>>;

    /// Accept held-back changes, in one transaction: each tool's definition becomes its
    /// active revision and what its server sent the accepted one. Each `sent` must be
    /// the change waiting for that tool (a tool with none, or whose server changed it
    /// again since it was read, is a `Conflict`, and then nothing changes). Returns the
    /// tools as they are after.
    async fn accept_mcp_tools(
        &self,
        id: &str,
        scope: &TenantScope,
        tools: McpTools,
    ) -> Result<Vec<ToolRecord>>;
}

/// Open the registry named by a database URL, creating and migrating its tables:
/// `sqlite://PATH` or `postgres://…` / `postgresql://…`. Same rules and errors as
/// `toolshed_journal::open` (a file that is someone else's database is refused).
pub async fn open(url: &str) -> Result<Arc<dyn RegistryStore>> {
    Ok(Arc::new(SqlRegistry::open(&Location::parse(url)?).await?))
}
