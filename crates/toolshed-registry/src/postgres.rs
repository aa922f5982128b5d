//! The PostgreSQL backend: the registry's `registry_*` tables beside the journal's, one
//! write connection for transactions and a couple of pipelined read connections with
//! the hot lookups prepared.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, Row, Statement, Transaction};

use crate::common::{
    Paging, SCHEMA_VERSION_KEY, agent_not_found, check_version, name_taken, new_id,
    normalized_tool_ids, now_ms, prefix_upper_bound, stale_revision, tool_not_found,
    user_not_found, user_taken,
};
use crate::{
    AgentRecord, NewAgent, NewTool, NewUser, Page, RegistryError, RegistryStore, Result,
    ToolFilter, ToolRecord, ToolStatus, ToolUsage, UserRecord,
};

/// The connect timeout used when the URL sets none.
/// Read connections per registry. Each pipelines the queries of every task using it.
const READERS: usize = 2;

/// The schema, one migration per version, each applied in the connecting transaction
/// under the advisory lock the journal takes too. Definitions are JSONB. Names and ids
/// use the `"C"` collation, so that they sort by code point as in SQLite and a name
/// prefix is an index range.
const MIGRATIONS: &[(u32, &str)] = &[(
    1,
    r#"
    CREATE TABLE registry_tools (
        id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        name          TEXT COLLATE "C" NOT NULL,
        description   TEXT   NOT NULL,
        tool_type     TEXT COLLATE "C" NOT NULL,
        source        TEXT COLLATE "C" NOT NULL,
        status        TEXT   NOT NULL CHECK (status = 'active' OR status = 'deleted'),
        endpoint      TEXT,
        version       TEXT,
        revision      BIGINT NOT NULL CHECK (revision >= 1),
        definition    JSONB  NOT NULL,
        created_by    TEXT   NOT NULL,
        created_at_ms BIGINT NOT NULL,
        updated_at_ms BIGINT NOT NULL
    );
    CREATE UNIQUE INDEX registry_tools_active_name ON registry_tools (name)
        WHERE status = 'active';
    CREATE INDEX registry_tools_active_type ON registry_tools (tool_type, name)
        WHERE status = 'active';
    CREATE INDEX registry_tools_active_source ON registry_tools (source, name)
        WHERE status = 'active';

    CREATE TABLE registry_tool_versions (
        tool_id       TEXT COLLATE "C" NOT NULL REFERENCES registry_tools (id),
        revision      BIGINT NOT NULL CHECK (revision >= 1),
        name          TEXT COLLATE "C" NOT NULL,
        description   TEXT   NOT NULL,
        tool_type     TEXT COLLATE "C" NOT NULL,
        source        TEXT COLLATE "C" NOT NULL,
        status        TEXT   NOT NULL CHECK (status = 'active' OR status = 'deleted'),
        endpoint      TEXT,
        version       TEXT,
        definition    JSONB  NOT NULL,
        created_by    TEXT   NOT NULL,
        created_at_ms BIGINT NOT NULL,
        updated_at_ms BIGINT NOT NULL,
        PRIMARY KEY (tool_id, revision)
    );

    CREATE TABLE registry_agents (
        id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        name          TEXT COLLATE "C" NOT NULL UNIQUE,
        framework     TEXT   NOT NULL,
        status        TEXT   NOT NULL,
        definition    JSONB  NOT NULL,
        created_by    TEXT   NOT NULL,
        created_at_ms BIGINT NOT NULL,
        updated_at_ms BIGINT NOT NULL
    );

    CREATE TABLE registry_agent_tools (
        agent_id TEXT COLLATE "C" NOT NULL REFERENCES registry_agents (id),
        tool_id  TEXT COLLATE "C" NOT NULL REFERENCES registry_tools (id),
        PRIMARY KEY (agent_id, tool_id)
    );
    CREATE INDEX registry_agent_tools_by_tool ON registry_agent_tools (tool_id, agent_id);

    CREATE TABLE registry_users (
        username      TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        password_hash TEXT   NOT NULL,
        role          TEXT   NOT NULL,
        tenant        TEXT   NOT NULL,
        created_at_ms BIGINT NOT NULL,
        updated_at_ms BIGINT NOT NULL
    );

    CREATE TABLE registry_settings (
        key   TEXT NOT NULL PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
)];

/// The newest schema version this build knows.
fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |(v, _)| *v)
}

/// A tool row's columns after its id, in the order `tool_row` reads them; the same
/// names in `registry_tools` and `registry_tool_versions`.
const TOOL_FIELDS: &str = "name, description, tool_type, source, status, endpoint, version, \
                           revision, definition, created_by, created_at_ms, updated_at_ms";

const AGENT_COLUMNS: &str =
    "id, name, framework, status, definition, created_by, created_at_ms, updated_at_ms";

const USER_COLUMNS: &str = "username, password_hash, role, tenant, created_at_ms";

/// The registry in a PostgreSQL database (one schema of it, usually the journal's).
///
/// Writes are rare and run one at a time on the write connection, each in one
/// transaction; rows they check are locked (`FOR UPDATE`) and names are guarded by
/// unique indexes, so the rules hold across processes. Reads go to `READERS` other
/// connections, which pipeline concurrent queries; the by-id and by-name lookups are
/// prepared once per connection. Lost connections are reopened on next use.
pub struct PostgresRegistry {
    target: Arc<Target>,
    writer: Mutex<Option<Client>>,
    readers: Readers,
    applied: Vec<u32>,
}

impl fmt::Debug for PostgresRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresRegistry")
            .field("url", &self.target.masked_url)
            .field("schema", &self.target.schema)
            .finish_non_exhaustive()
    }
}

impl PostgresRegistry {
    /// Connect to the database a `postgres://` URL names and apply pending migrations.
    ///
    /// The tables go into the first schema of the connection's `search_path`, which the
    /// URL may set: `?options=-csearch_path%3Dmy_schema` (the schema must exist; see
    /// [`connect_with_schema`](Self::connect_with_schema) otherwise). Without
    /// `connect_timeout` in the URL, connecting gives up after 5 seconds. A server that
    /// does not answer is `Unavailable`, with the password masked.
    pub async fn connect(url: &str) -> Result<PostgresRegistry> {
        Self::connect_inner(url, None).await
    }

    /// Like [`connect`](Self::connect), with the tables in `schema`: the schema is
    /// created if missing and every connection sets `search_path` to it.
    pub async fn connect_with_schema(url: &str, schema: &str) -> Result<PostgresRegistry> {
        if schema.is_empty() {
            return Err(RegistryError::InvalidUrl {
                url: toolshed_journal::mask_password(url),
                reason: "the schema name is empty".into(),
            });
        }
        Self::connect_inner(url, Some(schema.to_owned())).await
    }

    /// The schema versions this connect applied: empty when the database was up to date.
    pub fn applied_migrations(&self) -> &[u32] {
        &self.applied
    }

    async fn connect_inner(url: &str, schema: Option<String>) -> Result<PostgresRegistry> {
        let masked_url = toolshed_journal::mask_password(url);
        let config = toolshed_journal::pg::config(url, "toolshed-registry").map_err(|reason| {
            RegistryError::InvalidUrl {
                url: masked_url.clone(),
                reason,
            }
        })?;
        let target = Arc::new(Target {
            config,
            schema,
            masked_url,
        });

        let mut client = target.connect().await?;
        if let Some(schema) = &target.schema {
            toolshed_journal::pg::create_schema(&client, schema)
                .await
                .map_err(|m| target.unavailable(m))?;
        }
        let applied = migrate(&mut client, &target).await?;
        if !applied.is_empty() {
            tracing::info!(url = %target.masked_url, schema = ?target.schema, ?applied, "applied registry migrations");
        }
        let readers = Readers::connect(Arc::clone(&target)).await?;
        Ok(PostgresRegistry {
            target,
            writer: Mutex::new(Some(client)),
            readers,
            applied,
        })
    }

    /// The write connection, reopened if it was lost. Holding the guard is holding the
    /// right to write.
    async fn writer(&self) -> Result<WriterGuard<'_>> {
        let mut guard = self.writer.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = None;
            *guard = Some(self.target.connect().await?);
        }
        Ok(WriterGuard(guard))
    }

    fn error(&self, e: &tokio_postgres::Error) -> RegistryError {
        self.target.error(e)
    }

    /// The id of the active tool named `name`, if any, read outside any transaction.
    async fn holder_of(&self, name: &str) -> Option<String> {
        let reader = self.readers.get().await.ok()?;
        let row = reader
            .client
            .query_opt(&reader.find_tool, &[&name])
            .await
            .ok()??;
        row.try_get(0).ok()
    }
}

struct WriterGuard<'a>(MutexGuard<'a, Option<Client>>);

impl WriterGuard<'_> {
    async fn begin(&mut self, target: &Target) -> Result<Transaction<'_>> {
        let client = self
            .0
            .as_mut()
            .ok_or_else(|| RegistryError::Backend("no write connection".into()))?;
        client.transaction().await.map_err(|e| target.error(&e))
    }
}

#[async_trait]
impl RegistryStore for PostgresRegistry {
    async fn create_tool(&self, new: NewTool) -> Result<ToolRecord> {
        let mut writer = self.writer().await?;
        let tx = writer.begin(&self.target).await?;
        let err = |e: tokio_postgres::Error| self.error(&e);
        if let Some(row) = tx
            .query_opt(
                "SELECT id FROM registry_tools WHERE name = $1 AND status = 'active'",
                &[&new.name],
            )
            .await
            .map_err(err)?
        {
            let holder: String = get(&row, 0)?;
            return Err(name_taken(&new.name, Some(&holder)));
        }
        let now = now_ms();
        let id = new_id();
        let inserted = tx
            .execute(
                &format!(
                    "INSERT INTO registry_tools (id, {TOOL_FIELDS}) \
                     VALUES ($1, $2, $3, $4, $5, 'active', $6, $7, 1, $8, $9, $10, $10)"
                ),
                &[
                    &id,
                    &new.name,
                    &new.description,
                    &new.tool_type,
                    &new.source,
                    &new.endpoint,
                    &new.version,
                    &new.definition,
                    &new.created_by,
                    &now,
                ],
            )
            .await;
        if let Err(e) = inserted {
            drop(tx);
            drop(writer);
            return Err(self.unique_or_error(&e, &new.name).await);
        }
        snapshot_version(&tx, &id).await.map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(ToolRecord {
            id,
            name: new.name,
            description: new.description,
            tool_type: new.tool_type,
            source: new.source,
            status: ToolStatus::Active,
            endpoint: new.endpoint,
            version: new.version,
            revision: 1,
            definition: new.definition,
            created_by: new.created_by,
            created_at_ms: now,
            updated_at_ms: now,
        })
    }

    async fn get_tool(&self, id: &str) -> Result<ToolRecord> {
        let reader = self.readers.get().await?;
        let row = reader
            .client
            .query_opt(&reader.get_tool, &[&id])
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|row| tool_row(&row))
            .transpose()?
            .ok_or_else(|| tool_not_found(id))
    }

    async fn find_tool_by_name(&self, name: &str) -> Result<Option<ToolRecord>> {
        let reader = self.readers.get().await?;
        let row = reader
            .client
            .query_opt(&reader.find_tool, &[&name])
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|row| tool_row(&row)).transpose()
    }

    async fn list_tools(&self, filter: &ToolFilter) -> Result<Page<ToolRecord>> {
        let paging = Paging::new(filter.page, filter.per_page);
        let mut condition = String::from("status = 'active'");
        let mut texts: Vec<String> = Vec::new();
        let mut push = |condition: &mut String, sql: &str, value: String| {
            texts.push(value);
            condition.push_str(&format!(" AND {sql} ${}", texts.len()));
        };
        if let Some(tool_type) = &filter.tool_type {
            push(&mut condition, "tool_type =", tool_type.clone());
        }
        if let Some(source) = &filter.source {
            push(&mut condition, "source =", source.clone());
        }
        if let Some(prefix) = filter.name_prefix.as_deref().filter(|p| !p.is_empty()) {
            push(&mut condition, "name >=", prefix.to_owned());
            if let Some(upper) = prefix_upper_bound(prefix) {
                push(&mut condition, "name <", upper);
            }
        }
        let n = texts.len();
        // One statement, so the page and the total come from one snapshot; the page
        // side is empty (one row of NULLs) past the end.
        let sql = format!(
            "SELECT p.id, p.name, p.description, p.tool_type, p.source, p.status, p.endpoint, \
                    p.version, p.revision, p.definition, p.created_by, p.created_at_ms, \
                    p.updated_at_ms, t.total \
             FROM (SELECT COUNT(*) AS total FROM registry_tools WHERE {condition}) t \
             LEFT JOIN LATERAL (SELECT id, {TOOL_FIELDS} FROM registry_tools WHERE {condition} \
                                ORDER BY name LIMIT ${} OFFSET ${}) p ON true",
            n + 1,
            n + 2
        );
        let (limit, offset) = (paging.limit(), paging.offset());
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> = texts
            .iter()
            .map(|t| (t as &(dyn ToSql + Sync), Type::TEXT))
            .collect();
        params.push((&limit, Type::INT8));
        params.push((&offset, Type::INT8));
        let reader = self.readers.get().await?;
        let rows = reader
            .client
            .query_typed(&sql, &params)
            .await
            .map_err(|e| self.error(&e))?;
        let mut total = 0;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            total = count(get(row, 13)?);
            let id: Option<String> = get(row, 0)?;
            if id.is_some() {
                items.push(tool_row(row)?);
            }
        }
        Ok(Page {
            items,
            page: paging.page,
            per_page: paging.per_page,
            total,
        })
    }

    async fn update_tool(
        &self,
        id: &str,
        update: NewTool,
        expected_revision: Option<u32>,
    ) -> Result<ToolRecord> {
        let mut writer = self.writer().await?;
        let tx = writer.begin(&self.target).await?;
        let err = |e: tokio_postgres::Error| self.error(&e);
        let current = tx
            .query_opt(
                &format!(
                    "SELECT id, {TOOL_FIELDS} FROM registry_tools \
                     WHERE id = $1 AND status = 'active' FOR UPDATE"
                ),
                &[&id],
            )
            .await
            .map_err(err)?
            .map(|row| tool_row(&row))
            .transpose()?
            .ok_or_else(|| tool_not_found(id))?;
        if let Some(expected) = expected_revision
            && expected != current.revision
        {
            return Err(stale_revision(&current.name, current.revision, expected));
        }
        if let Some(row) = tx
            .query_opt(
                "SELECT id FROM registry_tools WHERE name = $1 AND status = 'active' AND id <> $2",
                &[&update.name, &id],
            )
            .await
            .map_err(err)?
        {
            let holder: String = get(&row, 0)?;
            return Err(name_taken(&update.name, Some(&holder)));
        }
        let revision = current.revision.saturating_add(1);
        let now = now_ms();
        let updated = tx
            .execute(
                "UPDATE registry_tools SET name = $2, description = $3, tool_type = $4, \
                 source = $5, endpoint = $6, version = $7, revision = $8, definition = $9, \
                 created_by = $10, updated_at_ms = $11 WHERE id = $1",
                &[
                    &id,
                    &update.name,
                    &update.description,
                    &update.tool_type,
                    &update.source,
                    &update.endpoint,
                    &update.version,
                    &i64::from(revision),
                    &update.definition,
                    &update.created_by,
                    &now,
                ],
            )
            .await;
        if let Err(e) = updated {
            drop(tx);
            drop(writer);
            return Err(self.unique_or_error(&e, &update.name).await);
        }
        snapshot_version(&tx, id).await.map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(ToolRecord {
            id: current.id,
            name: update.name,
            description: update.description,
            tool_type: update.tool_type,
            source: update.source,
            status: ToolStatus::Active,
            endpoint: update.endpoint,
            version: update.version,
            revision,
            definition: update.definition,
            created_by: update.created_by,
            created_at_ms: current.created_at_ms,
            updated_at_ms: now,
        })
    }

    async fn tool_versions(&self, id: &str) -> Result<Vec<ToolRecord>> {
        let reader = self.readers.get().await?;
        let rows = reader
            .client
            .query_typed(
                &format!(
                    "SELECT tool_id, {TOOL_FIELDS} FROM registry_tool_versions \
                     WHERE tool_id = $1 ORDER BY revision"
                ),
                &[(&id, Type::TEXT)],
            )
            .await
            .map_err(|e| self.error(&e))?;
        if rows.is_empty() {
            return Err(tool_not_found(id));
        }
        rows.iter().map(tool_row).collect()
    }

    async fn delete_tool(&self, id: &str) -> Result<ToolRecord> {
        let mut writer = self.writer().await?;
        let tx = writer.begin(&self.target).await?;
        let err = |e: tokio_postgres::Error| self.error(&e);
        let now = now_ms();
        let mut tool = tx
            .query_opt(
                &format!(
                    "UPDATE registry_tools SET status = 'deleted', updated_at_ms = $2 \
                     WHERE id = $1 AND status = 'active' RETURNING id, {TOOL_FIELDS}"
                ),
                &[&id, &now],
            )
            .await
            .map_err(err)?
            .map(|row| tool_row(&row))
            .transpose()?
            .ok_or_else(|| tool_not_found(id))?;
        // The current revision's copy says deleted too, so the history ends as the tool
        // did.
        tx.execute(
            "UPDATE registry_tool_versions SET status = 'deleted', updated_at_ms = $3 \
             WHERE tool_id = $1 AND revision = $2",
            &[&id, &i64::from(tool.revision), &now],
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        tool.status = ToolStatus::Deleted;
        Ok(tool)
    }

    async fn tool_usage(&self, id: &str) -> Result<Vec<ToolUsage>> {
        let reader = self.readers.get().await?;
        // One statement: the tool's row (NULL agent columns when nobody uses it) and its
        // users, from one snapshot.
        let rows = reader
            .client
            .query_typed(
                "SELECT a.id, a.name, a.status FROM registry_tools t \
                 LEFT JOIN registry_agent_tools e ON e.tool_id = t.id \
                 LEFT JOIN registry_agents a ON a.id = e.agent_id \
                 WHERE t.id = $1 AND t.status = 'active' ORDER BY a.name",
                &[(&id, Type::TEXT)],
            )
            .await
            .map_err(|e| self.error(&e))?;
        if rows.is_empty() {
            return Err(tool_not_found(id));
        }
        let mut usage = Vec::with_capacity(rows.len());
        for row in &rows {
            let agent_id: Option<String> = get(row, 0)?;
            if let Some(agent_id) = agent_id {
                usage.push(ToolUsage {
                    agent_id,
                    agent_name: get(row, 1)?,
                    agent_status: get(row, 2)?,
                });
            }
        }
        Ok(usage)
    }

    async fn upsert_agent(&self, new: NewAgent) -> Result<AgentRecord> {
        let tool_ids = normalized_tool_ids(&new.tool_ids);
        let mut writer = self.writer().await?;
        let tx = writer.begin(&self.target).await?;
        let err = |e: tokio_postgres::Error| self.error(&e);
        // Lock the tools so that none is deleted before the edges are committed.
        let found: BTreeSet<String> = tx
            .query(
                "SELECT id FROM registry_tools WHERE id = ANY($1) AND status = 'active' \
                 FOR SHARE",
                &[&tool_ids],
            )
            .await
            .map_err(err)?
            .iter()
            .map(|row| get(row, 0))
            .collect::<Result<_>>()?;
        if let Some(missing) = tool_ids.iter().find(|id| !found.contains(*id)) {
            return Err(tool_not_found(missing));
        }
        let now = now_ms();
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO registry_agents ({AGENT_COLUMNS}) \
                     VALUES ($1, $2, $3, 'registered', $4, $5, $6, $6) \
                     ON CONFLICT (name) DO UPDATE SET framework = EXCLUDED.framework, \
                         status = EXCLUDED.status, definition = EXCLUDED.definition, \
                         created_by = EXCLUDED.created_by, updated_at_ms = EXCLUDED.updated_at_ms \
                     RETURNING id, created_at_ms"
                ),
                &[
                    &new_id(),
                    &new.name,
                    &new.framework,
                    &new.definition,
                    &new.created_by,
                    &now,
                ],
            )
            .await
            .map_err(err)?;
        let id: String = get(&row, 0)?;
        let created_at_ms: i64 = get(&row, 1)?;
        tx.execute(
            "DELETE FROM registry_agent_tools WHERE agent_id = $1",
            &[&id],
        )
        .await
        .map_err(err)?;
        tx.execute(
            "INSERT INTO registry_agent_tools (agent_id, tool_id) SELECT $1, unnest($2::text[])",
            &[&id, &tool_ids],
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(AgentRecord {
            id,
            name: new.name,
            framework: new.framework,
            status: "registered".into(),
            definition: new.definition,
            tool_ids,
            created_by: new.created_by,
            created_at_ms,
            updated_at_ms: now,
        })
    }

    async fn get_agent(&self, id_or_name: &str) -> Result<AgentRecord> {
        let reader = self.readers.get().await?;
        // An id wins over a name (a name could look like another agent's id); the
        // edges come with the row, from one snapshot.
        let rows = reader
            .client
            .query_typed(
                &format!(
                    "SELECT {AGENT_COLUMNS}, e.tool_id FROM \
                     (SELECT {AGENT_COLUMNS} FROM registry_agents WHERE id = $1 OR name = $1 \
                      ORDER BY id = $1 DESC LIMIT 1) a \
                     LEFT JOIN registry_agent_tools e ON e.agent_id = a.id"
                ),
                &[(&id_or_name, Type::TEXT)],
            )
            .await
            .map_err(|e| self.error(&e))?;
        agents_from_rows(&rows)?
            .pop()
            .ok_or_else(|| agent_not_found(id_or_name))
    }

    async fn list_agents(&self, page: u32, per_page: u32) -> Result<Page<AgentRecord>> {
        let paging = Paging::new(page, per_page);
        let (limit, offset) = (paging.limit(), paging.offset());
        let reader = self.readers.get().await?;
        let rows = reader
            .client
            .query_typed(
                &format!(
                    "SELECT {AGENT_COLUMNS}, e.tool_id, t.total FROM \
                     (SELECT COUNT(*) AS total FROM registry_agents) t \
                     LEFT JOIN LATERAL (SELECT {AGENT_COLUMNS} FROM registry_agents \
                                        ORDER BY name LIMIT $1 OFFSET $2) a ON true \
                     LEFT JOIN registry_agent_tools e ON e.agent_id = a.id"
                ),
                &[(&limit, Type::INT8), (&offset, Type::INT8)],
            )
            .await
            .map_err(|e| self.error(&e))?;
        let mut total = 0;
        for row in &rows {
            total = count(get(row, 9)?);
        }
        let items = agents_from_rows(&rows)?;
        Ok(Page {
            items,
            page: paging.page,
            per_page: paging.per_page,
            total,
        })
    }

    async fn create_user(&self, new: NewUser) -> Result<UserRecord> {
        let now = now_ms();
        let writer = self.writer().await?;
        let client = writer.client()?;
        let inserted = client
            .execute(
                &format!(
                    "INSERT INTO registry_users ({USER_COLUMNS}, updated_at_ms) \
                     VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (username) DO NOTHING"
                ),
                &[
                    &new.username,
                    &new.password_hash,
                    &new.role,
                    &new.tenant,
                    &now,
                ],
            )
            .await
            .map_err(|e| self.error(&e))?;
        if inserted == 0 {
            return Err(user_taken(&new.username));
        }
        Ok(UserRecord {
            username: new.username,
            password_hash: new.password_hash,
            role: new.role,
            tenant: new.tenant,
            created_at_ms: now,
        })
    }

    async fn get_user(&self, username: &str) -> Result<Option<UserRecord>> {
        let reader = self.readers.get().await?;
        let row = reader
            .client
            .query_typed_opt(
                &format!("SELECT {USER_COLUMNS} FROM registry_users WHERE username = $1"),
                &[(&username, Type::TEXT)],
            )
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|row| user_row(&row)).transpose()
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>> {
        let reader = self.readers.get().await?;
        let rows = reader
            .client
            .query_typed(
                &format!("SELECT {USER_COLUMNS} FROM registry_users ORDER BY username"),
                &[],
            )
            .await
            .map_err(|e| self.error(&e))?;
        rows.iter().map(user_row).collect()
    }

    async fn update_user(
        &self,
        username: &str,
        password_hash: Option<String>,
        role: Option<String>,
    ) -> Result<UserRecord> {
        let writer = self.writer().await?;
        let client = writer.client()?;
        let row = client
            .query_opt(
                &format!(
                    "UPDATE registry_users SET password_hash = COALESCE($2, password_hash), \
                     role = COALESCE($3, role), updated_at_ms = $4 WHERE username = $1 \
                     RETURNING {USER_COLUMNS}"
                ),
                &[&username, &password_hash, &role, &now_ms()],
            )
            .await
            .map_err(|e| self.error(&e))?;
        row.map(|row| user_row(&row))
            .transpose()?
            .ok_or_else(|| user_not_found(username))
    }

    async fn delete_user(&self, username: &str) -> Result<()> {
        let writer = self.writer().await?;
        let client = writer.client()?;
        let deleted = client
            .execute(
                "DELETE FROM registry_users WHERE username = $1",
                &[&username],
            )
            .await
            .map_err(|e| self.error(&e))?;
        if deleted == 0 {
            return Err(user_not_found(username));
        }
        Ok(())
    }

    async fn count_users(&self) -> Result<u64> {
        let reader = self.readers.get().await?;
        let row = reader
            .client
            .query_typed_one("SELECT COUNT(*) FROM registry_users", &[])
            .await
            .map_err(|e| self.error(&e))?;
        Ok(count(get(&row, 0)?))
    }

    async fn get_or_init_setting(&self, key: &str, value: String) -> Result<String> {
        let select = "SELECT value FROM registry_settings WHERE key = $1";
        let reader = self.readers.get().await?;
        if let Some(row) = reader
            .client
            .query_typed_opt(select, &[(&key, Type::TEXT)])
            .await
            .map_err(|e| self.error(&e))?
        {
            return get(&row, 0);
        }
        // A first caller inserts; a concurrent one waits for its commit on the key and
        // then does nothing, and the select (a new snapshot) sees the winner's value.
        let writer = self.writer().await?;
        let client = writer.client()?;
        let rows = client
            .query(
                "WITH inserted AS (INSERT INTO registry_settings (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO NOTHING RETURNING value) \
                 SELECT value FROM inserted",
                &[&key, &value],
            )
            .await
            .map_err(|e| self.error(&e))?;
        if let Some(row) = rows.first() {
            return get(row, 0);
        }
        let row = client
            .query_opt(select, &[&key])
            .await
            .map_err(|e| self.error(&e))?
            .ok_or_else(|| {
                RegistryError::Backend(format!("the setting `{key}` vanished while being set"))
            })?;
        get(&row, 0)
    }
}

impl PostgresRegistry {
    /// A failed write of `name`: a unique violation is a name conflict naming the
    /// holder (looked up after the rollback), anything else as the driver said.
    async fn unique_or_error(&self, e: &tokio_postgres::Error, name: &str) -> RegistryError {
        if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
            let holder = self.holder_of(name).await;
            name_taken(name, holder.as_deref())
        } else {
            self.error(e)
        }
    }
}

impl WriterGuard<'_> {
    /// The write connection for a single statement (its own implicit transaction).
    fn client(&self) -> Result<&Client> {
        self.0
            .as_ref()
            .ok_or_else(|| RegistryError::Backend("no write connection".into()))
    }
}

/// Copy the tool's current row into its history.
async fn snapshot_version(
    tx: &Transaction<'_>,
    id: &str,
) -> std::result::Result<u64, tokio_postgres::Error> {
    tx.execute(
        &format!(
            "INSERT INTO registry_tool_versions (tool_id, {TOOL_FIELDS}) \
             SELECT id, {TOOL_FIELDS} FROM registry_tools WHERE id = $1"
        ),
        &[&id],
    )
    .await
}

/// Agents from rows of agent columns plus one edge's tool id (NULL for none); rows of
/// NULLs (an empty page) are skipped. The order of first appearance is kept.
fn agents_from_rows(rows: &[Row]) -> Result<Vec<AgentRecord>> {
    let mut order: Vec<String> = Vec::new();
    let mut agents: BTreeMap<String, AgentRecord> = BTreeMap::new();
    for row in rows {
        let Some(id) = get::<Option<String>>(row, 0)? else {
            continue;
        };
        if !agents.contains_key(&id) {
            order.push(id.clone());
            agents.insert(
                id.clone(),
                AgentRecord {
                    id: id.clone(),
                    name: get(row, 1)?,
                    framework: get(row, 2)?,
                    status: get(row, 3)?,
                    definition: get::<Value>(row, 4)?,
                    tool_ids: Vec::new(),
                    created_by: get(row, 5)?,
                    created_at_ms: get(row, 6)?,
                    updated_at_ms: get(row, 7)?,
                },
            );
        }
        if let Some(tool_id) = get::<Option<String>>(row, 8)?
            && let Some(agent) = agents.get_mut(&id)
        {
            agent.tool_ids.push(tool_id);
        }
    }
    let mut items = Vec::with_capacity(order.len());
    for id in order {
        if let Some(mut agent) = agents.remove(&id) {
            agent.tool_ids.sort();
            items.push(agent);
        }
    }
    // The page's order: the join may have shuffled the agents.
    items.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(items)
}

// ---- opening and migrating ----

/// Where to connect, for the first connection and every reconnection.
struct Target {
    config: Config,
    schema: Option<String>,
    masked_url: String,
}

impl Target {
    /// Open a connection, spawn its task, set the search path.
    async fn connect(&self) -> Result<Client> {
        toolshed_journal::pg::connect(&self.config, self.schema.as_deref(), "registry")
            .await
            .map_err(|m| self.unavailable(m))
    }

    fn unavailable(&self, message: String) -> RegistryError {
        RegistryError::Unavailable {
            target: self.masked_url.clone(),
            message,
        }
    }

    /// A driver failure after connecting.
    fn error(&self, e: &tokio_postgres::Error) -> RegistryError {
        if e.is_closed() {
            self.unavailable(format!(
                "the connection was lost: {}",
                toolshed_journal::pg::message(e)
            ))
        } else {
            RegistryError::Backend(toolshed_journal::pg::message(e))
        }
    }
}

/// Apply the migrations newer than the stored version, in one transaction, under the
/// journal's advisory lock for this schema: the two create `toolshed_meta` and migrate
/// one after the other, never at once.
async fn migrate(client: &mut Client, target: &Target) -> Result<Vec<u32>> {
    let err = |e: tokio_postgres::Error| {
        target.unavailable(format!(
            "cannot migrate the registry: {}",
            toolshed_journal::pg::message(&e)
        ))
    };
    let tx = client.transaction().await.map_err(err)?;
    let schema: Option<String> = tx
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(err)?
        .try_get(0)
        .map_err(err)?;
    let Some(schema) = schema else {
        return Err(target.unavailable(
            "the search_path names no existing schema to create the registry in: create it, or \
             use PostgresRegistry::connect_with_schema"
                .into(),
        ));
    };
    let lock_key = format!("toolshed-journal:{schema}");
    tx.query(
        "SELECT pg_advisory_xact_lock(hashtext($1)::bigint)",
        &[&lock_key],
    )
    .await
    .map_err(err)?;
    // The journal's DDL, word for word: whichever connects first creates it.
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS toolshed_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    )
    .await
    .map_err(err)?;
    let stored: Option<String> = tx
        .query_opt(
            "SELECT value FROM toolshed_meta WHERE key = $1",
            &[&SCHEMA_VERSION_KEY],
        )
        .await
        .map_err(err)?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(err)?;
    let version = match stored {
        None => 0,
        Some(v) => v.parse::<u32>().map_err(|_| {
            target.unavailable(format!(
                "toolshed_meta has an invalid {SCHEMA_VERSION_KEY} `{v}`"
            ))
        })?,
    };
    check_version(version, latest_version()).map_err(|m| target.unavailable(m))?;
    let mut applied = Vec::new();
    for (v, sql) in MIGRATIONS {
        if *v > version {
            tx.batch_execute(sql).await.map_err(|e| {
                target.unavailable(format!(
                    "registry migration {v} failed: {}",
                    toolshed_journal::pg::message(&e)
                ))
            })?;
            applied.push(*v);
        }
    }
    if !applied.is_empty() {
        tx.execute(
            "INSERT INTO toolshed_meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&SCHEMA_VERSION_KEY, &latest_version().to_string()],
        )
        .await
        .map_err(err)?;
    }
    tx.commit().await.map_err(err)?;
    Ok(applied)
}

// ---- reads ----

/// A read connection with the hot lookups prepared.
struct ReadConn {
    client: Client,
    get_tool: Statement,
    find_tool: Statement,
}

impl ReadConn {
    async fn open(target: &Target) -> Result<ReadConn> {
        let client = target.connect().await?;
        let prepare = |sql: String| {
            let client = &client;
            async move {
                client.prepare(&sql).await.map_err(|e| {
                    target.unavailable(format!(
                        "cannot prepare statements: {}",
                        toolshed_journal::pg::message(&e)
                    ))
                })
            }
        };
        let get_tool = prepare(format!(
            "SELECT id, {TOOL_FIELDS} FROM registry_tools WHERE id = $1 AND status = 'active'"
        ))
        .await?;
        let find_tool = prepare(format!(
            "SELECT id, {TOOL_FIELDS} FROM registry_tools WHERE name = $1 AND status = 'active'"
        ))
        .await?;
        Ok(ReadConn {
            client,
            get_tool,
            find_tool,
        })
    }
}

struct Readers {
    target: Arc<Target>,
    slots: Vec<Mutex<Option<Arc<ReadConn>>>>,
    next: AtomicUsize,
}

impl Readers {
    async fn connect(target: Arc<Target>) -> Result<Readers> {
        let mut slots = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            slots.push(Mutex::new(Some(Arc::new(ReadConn::open(&target).await?))));
        }
        Ok(Readers {
            target,
            slots,
            next: AtomicUsize::new(0),
        })
    }

    /// A live read connection (reconnecting a lost one).
    async fn get(&self) -> Result<Arc<ReadConn>> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % READERS;
        let Some(slot) = self.slots.get(i) else {
            return Err(RegistryError::Backend("no read connection".into()));
        };
        let mut slot = slot.lock().await;
        if let Some(conn) = slot.as_ref()
            && !conn.client.is_closed()
        {
            return Ok(Arc::clone(conn));
        }
        let conn = Arc::new(ReadConn::open(&self.target).await?);
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }
}

// ---- rows and errors ----

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i).map_err(|e| {
        RegistryError::Backend(format!(
            "cannot read column {i}: {}",
            toolshed_journal::pg::message(&e)
        ))
    })
}

/// A tool from the first 13 columns (`id, TOOL_FIELDS`).
fn tool_row(row: &Row) -> Result<ToolRecord> {
    let id: String = get(row, 0)?;
    let status: String = get(row, 5)?;
    let status = ToolStatus::parse(&status).ok_or_else(|| {
        RegistryError::Backend(format!("tool `{id}` has an unknown status `{status}`"))
    })?;
    let revision: i64 = get(row, 8)?;
    let revision = u32::try_from(revision).map_err(|_| {
        RegistryError::Backend(format!("tool `{id}` has an invalid revision {revision}"))
    })?;
    Ok(ToolRecord {
        name: get(row, 1)?,
        description: get(row, 2)?,
        tool_type: get(row, 3)?,
        source: get(row, 4)?,
        status,
        endpoint: get(row, 6)?,
        version: get(row, 7)?,
        revision,
        definition: get(row, 9)?,
        created_by: get(row, 10)?,
        created_at_ms: get(row, 11)?,
        updated_at_ms: get(row, 12)?,
        id,
    })
}

fn user_row(row: &Row) -> Result<UserRecord> {
    Ok(UserRecord {
        username: get(row, 0)?,
        password_hash: get(row, 1)?,
        role: get(row, 2)?,
        tenant: get(row, 3)?,
        created_at_ms: get(row, 4)?,
    })
}

/// `COUNT(*)` is never negative.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
