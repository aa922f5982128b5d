//! [`SqlRegistry`]: the one implementation of [`RegistryStore`], on SQLite or PostgreSQL
//! through `toolshed-store`. Each method says whether its rule reads or writes; the rule
//! itself is in `rules.rs`, the same for both databases.

use async_trait::async_trait;
use toolshed_store::{Db, DbOptions, Location, Migration, Migrations};

use crate::{
    AgentRecord, NewAgent, NewSandboxExecution, NewTool, NewUser, Page, RefreshSpent,
    RegistryStore, Result, RevokedSession, SandboxExecutionRecord, SessionRefresh, SpendRefresh,
    TenantRecord, TenantScope, ToolFilter, ToolRecord, ToolUsage, UserChange, UserRecord,
};
use crate::{
    McpPending, McpPing, McpServerRecord, McpSync, McpTools, NewMcpServer, mcp_rules, rules,
};

/// The registry's migrations: its tables beside the journal's, its version under
/// `registry_schema_version` in the shared `toolshed_meta`.
static MIGRATIONS: Migrations = Migrations {
    store: "registry",
    noun: "database",
    version_key: "registry_schema_version",
    format: None,
    steps: &[
        Migration {
            version: 1,
            sqlite: include_str!("../migrations/sqlite/0001_registry.sql"),
            postgres: include_str!("../migrations/postgres/0001_registry.sql"),
        },
        Migration {
            version: 2,
            sqlite: include_str!("../migrations/sqlite/0002_sandbox_executions.sql"),
            postgres: include_str!("../migrations/postgres/0002_sandbox_executions.sql"),
        },
        Migration {
            version: 3,
            sqlite: include_str!("../migrations/sqlite/0003_tenants.sql"),
            postgres: include_str!("../migrations/postgres/0003_tenants.sql"),
        },
        Migration {
            version: 4,
            sqlite: include_str!("../migrations/sqlite/0004_code.sql"),
            postgres: include_str!("../migrations/postgres/0004_code.sql"),
        },
        Migration {
            version: 5,
            sqlite: include_str!("../migrations/sqlite/0005_token_generation.sql"),
            postgres: include_str!("../migrations/postgres/0005_token_generation.sql"),
        },
        Migration {
            version: 6,
            sqlite: include_str!("../migrations/sqlite/0006_mcp_servers.sql"),
            postgres: include_str!("../migrations/postgres/0006_mcp_servers.sql"),
        },
        Migration {
            version: 7,
            sqlite: include_str!("../migrations/sqlite/0007_revoked_sessions.sql"),
            postgres: include_str!("../migrations/postgres/0007_revoked_sessions.sql"),
        },
        Migration {
            version: 8,
            sqlite: include_str!("../migrations/sqlite/0008_sessions.sql"),
            postgres: include_str!("../migrations/postgres/0008_sessions.sql"),
        },
        Migration {
            version: 9,
            sqlite: include_str!("../migrations/sqlite/0009_mcp_trust.sql"),
            postgres: include_str!("../migrations/postgres/0009_mcp_trust.sql"),
        },
    ],
};

/// Reads are hot (the server reads tools by id per request) and never wait for a
/// writer: eight SQLite read connections (more than a 2-core VM keeps busy, few enough to
/// keep every one open), two pipelined PostgreSQL ones. Writes are rare (registrations)
/// and run one transaction at a time on the write connection.
const OPTIONS: DbOptions = DbOptions {
    application_name: "toolshed-registry",
    sqlite_readers: 8,
    postgres_readers: 2,
    statement_cache: 64,
};

/// The registry in a SQLite file or a PostgreSQL database (usually the journal's).
///
/// Writes run in one transaction each (`BEGIN IMMEDIATE` on SQLite, so what a rule
/// checks still holds at commit, also against other processes; on PostgreSQL the rows a
/// rule checks are locked and names guarded by unique indexes). Reads use other
/// connections and never wait for a write.
#[derive(Debug)]
pub struct SqlRegistry {
    db: Db,
}

impl SqlRegistry {
    /// Open (creating and migrating) the registry at `location`. A file that is not a
    /// SQLite database, or a SQLite database with tables but no `toolshed_meta`
    /// (someone else's), is `Unavailable` and is left unchanged; so is a registry written
    /// by a newer toolshed.
    pub async fn open(location: &Location) -> Result<SqlRegistry> {
        let db = Db::open(location, &MIGRATIONS, OPTIONS).await?;
        if !db.applied_migrations().is_empty() {
            tracing::info!(database = %db.describe(), applied = ?db.applied_migrations(), "applied registry migrations");
        }
        Ok(SqlRegistry { db })
    }

    /// The schema versions this open applied: empty when the database was up to date.
    pub fn applied_migrations(&self) -> &[u32] {
        self.db.applied_migrations()
    }
}

#[async_trait]
impl RegistryStore for SqlRegistry {
    async fn create_tool(&self, new: NewTool) -> Result<ToolRecord> {
        self.db
            .write(move |db| Box::pin(rules::create_tool(db, new)))
            .await
    }

    async fn get_tool(&self, id: &str) -> Result<ToolRecord> {
        let id = id.to_owned();
        self.db
            .read(move |db| {
                Box::pin(async move {
                    let tool = rules::active_tool(db, &id)
                        .await?
                        .ok_or_else(|| rules::tool_not_found(&id))?;
                    rules::with_code(db, tool).await
                })
            })
            .await
    }

    async fn find_tool_by_name(&self, name: &str) -> Result<Option<ToolRecord>> {
        let name = name.to_owned();
        self.db
            .read(move |db| {
                Box::pin(async move {
                    match rules::active_tool_by_name(db, &name).await? {
                        Some(t) => Ok(Some(rules::with_code(db, t).await?)),
                        None => Ok(None),
                    }
                })
            })
            .await
    }

    async fn list_tools(&self, filter: &ToolFilter) -> Result<Page<ToolRecord>> {
        let filter = filter.clone();
        self.db
            .read(move |db| {
                Box::pin(async move {
                    let mut page = rules::list_tools(db, &filter).await?;
                    page.items = rules::all_with_code(db, page.items).await?;
                    Ok(page)
                })
            })
            .await
    }

    async fn update_tool(
        &self,
        id: &str,
        update: NewTool,
        expected_revision: Option<u32>,
        scope: &TenantScope,
    ) -> Result<ToolRecord> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .write(move |db| {
                Box::pin(async move {
                    rules::update_tool(db, &id, update, expected_revision, &scope).await
                })
            })
            .await
    }

    async fn tool_versions(&self, id: &str) -> Result<Vec<ToolRecord>> {
        let id = id.to_owned();
        self.db
            .read(move |db| {
                Box::pin(async move {
                    let versions = rules::tool_versions(db, &id).await?;
                    rules::all_with_code(db, versions).await
                })
            })
            .await
    }

    async fn delete_tool(&self, id: &str, scope: &TenantScope) -> Result<ToolRecord> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .write(move |db| {
                Box::pin(async move {
                    let tool = rules::delete_tool(db, &id, &scope).await?;
                    rules::with_code(db, tool).await
                })
            })
            .await
    }

    async fn tool_usage(&self, id: &str) -> Result<Vec<ToolUsage>> {
        let id = id.to_owned();
        self.db
            .read(move |db| Box::pin(async move { rules::tool_usage(db, &id).await }))
            .await
    }

    async fn upsert_agent(&self, new: NewAgent, scope: &TenantScope) -> Result<AgentRecord> {
        let scope = scope.clone();
        self.db
            .write(move |db| Box::pin(async move { rules::upsert_agent(db, new, &scope).await }))
            .await
    }

    async fn get_agent(&self, id_or_name: &str) -> Result<AgentRecord> {
        let key = id_or_name.to_owned();
        self.db
            .read(move |db| Box::pin(async move { rules::agent(db, &key).await }))
            .await
    }

    async fn list_agents(&self, page: u32, per_page: u32) -> Result<Page<AgentRecord>> {
        self.db
            .read(move |db| Box::pin(rules::list_agents(db, page, per_page)))
            .await
    }

    async fn create_user(&self, new: NewUser) -> Result<UserRecord> {
        self.db
            .write(move |db| Box::pin(rules::create_user(db, new)))
            .await
    }

    async fn get_user(&self, username: &str) -> Result<Option<UserRecord>> {
        let username = username.to_owned();
        self.db
            .read(move |db| Box::pin(async move { rules::user(db, &username).await }))
            .await
    }

    async fn list_users(&self, scope: &TenantScope) -> Result<Vec<UserRecord>> {
        let scope = scope.clone();
        self.db
            .read(move |db| Box::pin(async move { rules::users(db, &scope).await }))
            .await
    }

    async fn update_user(
        &self,
        username: &str,
        change: UserChange,
        scope: &TenantScope,
    ) -> Result<UserRecord> {
        let scope = scope.clone();
        let username = username.to_owned();
        self.db
            .write(move |db| {
                Box::pin(async move { rules::update_user(db, &username, change, &scope).await })
            })
            .await
    }

    async fn delete_user(&self, username: &str, scope: &TenantScope) -> Result<()> {
        let (username, scope) = (username.to_owned(), scope.clone());
        self.db
            .write(move |db| {
                Box::pin(async move { rules::delete_user(db, &username, &scope).await })
            })
            .await
    }

    async fn count_users(&self) -> Result<u64> {
        self.db
            .read(move |db| Box::pin(rules::count_users(db)))
            .await
    }

    async fn revoke_session(&self, session: RevokedSession) -> Result<()> {
        self.db
            .write(move |db| Box::pin(rules::revoke_session(db, session)))
            .await
    }

    async fn revoked_sessions(&self, username: &str) -> Result<Vec<String>> {
        let username = username.to_owned();
        self.db
            .read(move |db| Box::pin(async move { rules::revoked_sessions(db, &username).await }))
            .await
    }

    async fn record_refresh(&self, refresh: SessionRefresh) -> Result<()> {
        self.db
            .write(move |db| Box::pin(rules::record_refresh(db, refresh)))
            .await
    }

    async fn spend_refresh(&self, spend: SpendRefresh) -> Result<RefreshSpent> {
        self.db
            .write(move |db| Box::pin(rules::spend_refresh(db, spend)))
            .await
    }

    async fn list_tenants(&self, scope: &TenantScope) -> Result<Vec<TenantRecord>> {
        let scope = scope.clone();
        self.db
            .read(move |db| Box::pin(async move { rules::tenants(db, &scope).await }))
            .await
    }

    async fn get_or_init_setting(&self, key: &str, value: String) -> Result<String> {
        let read_key = key.to_owned();
        if let Some(stored) = self
            .db
            .read(move |db| Box::pin(async move { rules::setting(db, &read_key).await }))
            .await?
        {
            return Ok(stored);
        }
        let key = key.to_owned();
        self.db
            .write(move |db| Box::pin(async move { rules::init_setting(db, &key, value).await }))
            .await
    }

    async fn record_sandbox_execution(
        &self,
        new: NewSandboxExecution,
    ) -> Result<SandboxExecutionRecord> {
        self.db
            .write(move |db| Box::pin(rules::record_execution(db, new)))
            .await
    }

    async fn sandbox_execution(&self, id: &str, tenant: &str) -> Result<SandboxExecutionRecord> {
        let (id, tenant) = (id.to_owned(), tenant.to_owned());
        self.db
            .read(move |db| Box::pin(async move { rules::execution(db, &id, &tenant).await }))
            .await
    }

    async fn code_archive(&self, sha256: &str) -> Result<Vec<u8>> {
        let sha256 = sha256.to_owned();
        self.db
            .read(move |db| Box::pin(async move { rules::code_archive(db, &sha256).await }))
            .await
    }

    async fn list_sandbox_executions(
        &self,
        tenant: &str,
        page: u32,
        per_page: u32,
    ) -> Result<Page<SandboxExecutionRecord>> {
        let tenant = tenant.to_owned();
        self.db
            .read(move |db| {
                Box::pin(async move { rules::list_executions(db, &tenant, page, per_page).await })
            })
            .await
    }

    async fn create_mcp_server(&self, new: NewMcpServer) -> Result<McpServerRecord> {
        self.db
            .write(move |db| Box::pin(mcp_rules::create(db, new)))
            .await
    }

    async fn get_mcp_server(&self, id: &str, scope: &TenantScope) -> Result<McpServerRecord> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .read(move |db| Box::pin(async move { mcp_rules::get(db, &id, &scope).await }))
            .await
    }

    async fn find_mcp_server(&self, tenant: &str, name: &str) -> Result<Option<McpServerRecord>> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        self.db
            .read(move |db| Box::pin(async move { mcp_rules::by_name(db, &tenant, &name).await }))
            .await
    }

    async fn list_mcp_servers(
        &self,
        scope: &TenantScope,
        page: u32,
        per_page: u32,
    ) -> Result<Page<McpServerRecord>> {
        let scope = scope.clone();
        self.db
            .read(move |db| {
                Box::pin(async move { mcp_rules::list(db, &scope, page, per_page).await })
            })
            .await
    }

    async fn update_mcp_server(
        &self,
        id: &str,
        new: NewMcpServer,
        expected_revision: Option<u32>,
        scope: &TenantScope,
    ) -> Result<McpServerRecord> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .write(move |db| {
                Box::pin(
                    async move { mcp_rules::update(db, &id, new, expected_revision, &scope).await },
                )
            })
            .await
    }

    async fn record_mcp_status(
        &self,
        id: &str,
        scope: &TenantScope,
        ping: McpPing,
    ) -> Result<McpServerRecord> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .write(move |db| {
                Box::pin(async move { mcp_rules::record_status(db, &id, &scope, ping).await })
            })
            .await
    }

    async fn delete_mcp_server(&self, id: &str, scope: &TenantScope) -> Result<McpServerRecord> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .write(move |db| Box::pin(async move { mcp_rules::delete(db, &id, &scope).await }))
            .await
    }

    async fn sync_mcp_tools(
        &self,
        id: &str,
        scope: &TenantScope,
        tools: McpTools,
    ) -> Result<McpSync> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .write(move |db| {
                Box::pin(async move { mcp_rules::sync_tools(db, &id, &scope, tools).await })
            })
            .await
    }

    async fn mcp_pending(&self, id: &str, scope: &TenantScope) -> Result<Vec<McpPending>> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .read(move |db| Box::pin(async move { mcp_rules::pending(db, &id, &scope).await }))
            .await
    }

    async fn accept_mcp_tools(
        &self,
        id: &str,
        scope: &TenantScope,
        tools: McpTools,
    ) -> Result<Vec<ToolRecord>> {
        let (id, scope) = (id.to_owned(), scope.clone());
        self.db
            .write(move |db| {
                Box::pin(async move { mcp_rules::accept_tools(db, &id, &scope, tools).await })
            })
            .await
    }
}
