//! The SQLite backend: the registry's `registry_*` tables in the journal's file (WAL),
//! one write connection behind a mutex, a small pool of read-only connections, every
//! SQLite call on the blocking pool.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::Value as SqlValue;
use rusqlite::{
    Connection, ErrorCode, OptionalExtension, Row, Transaction, TransactionBehavior, params,
};

use crate::common::{
    Paging, SCHEMA_VERSION_KEY, agent_not_found, check_version, name_taken, new_id,
    normalized_tool_ids, now_ms, prefix_upper_bound, stale_revision, tool_not_found,
    user_not_found, user_taken,
};
use crate::{
    AgentRecord, NewAgent, NewTool, NewUser, Page, RegistryError, RegistryStore, Result,
    ToolFilter, ToolRecord, ToolStatus, ToolUsage, UserRecord,
};

/// How long a connection waits for another connection's (or process's) lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Read connections per registry: more than a 2-core VM can keep busy, few enough to
/// keep every one open (opening a connection costs more than a read).
const READERS: usize = 8;
/// Prepared statements cached per connection (the listing has a variant per filter).
const STATEMENT_CACHE: usize = 64;

/// The schema, one migration per version, each applied in the opening transaction.
/// Definitions are JSON text, exactly what serde_json wrote. Every partial index
/// repeats `status = 'active'` so that the queries, which say the same, can use it.
const MIGRATIONS: &[(u32, &str)] = &[(
    1,
    "
    CREATE TABLE registry_tools (
        id            TEXT    NOT NULL PRIMARY KEY,
        name          TEXT    NOT NULL,
        description   TEXT    NOT NULL,
        tool_type     TEXT    NOT NULL,
        source        TEXT    NOT NULL,
        status        TEXT    NOT NULL CHECK (status = 'active' OR status = 'deleted'),
        endpoint      TEXT,
        version       TEXT,
        revision      INTEGER NOT NULL CHECK (revision >= 1),
        definition    TEXT    NOT NULL,
        created_by    TEXT    NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) STRICT;
    CREATE UNIQUE INDEX registry_tools_active_name ON registry_tools (name)
        WHERE status = 'active';
    CREATE INDEX registry_tools_active_type ON registry_tools (tool_type, name)
        WHERE status = 'active';
    CREATE INDEX registry_tools_active_source ON registry_tools (source, name)
        WHERE status = 'active';

    CREATE TABLE registry_tool_versions (
        tool_id       TEXT    NOT NULL REFERENCES registry_tools (id),
        revision      INTEGER NOT NULL CHECK (revision >= 1),
        name          TEXT    NOT NULL,
        description   TEXT    NOT NULL,
        tool_type     TEXT    NOT NULL,
        source        TEXT    NOT NULL,
        status        TEXT    NOT NULL CHECK (status = 'active' OR status = 'deleted'),
        endpoint      TEXT,
        version       TEXT,
        definition    TEXT    NOT NULL,
        created_by    TEXT    NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        PRIMARY KEY (tool_id, revision)
    ) STRICT;

    CREATE TABLE registry_agents (
        id            TEXT    NOT NULL PRIMARY KEY,
        name          TEXT    NOT NULL UNIQUE,
        framework     TEXT    NOT NULL,
        status        TEXT    NOT NULL,
        definition    TEXT    NOT NULL,
        created_by    TEXT    NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE registry_agent_tools (
        agent_id TEXT NOT NULL REFERENCES registry_agents (id),
        tool_id  TEXT NOT NULL REFERENCES registry_tools (id),
        PRIMARY KEY (agent_id, tool_id)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX registry_agent_tools_by_tool ON registry_agent_tools (tool_id, agent_id);

    CREATE TABLE registry_users (
        username      TEXT    NOT NULL PRIMARY KEY,
        password_hash TEXT    NOT NULL,
        role          TEXT    NOT NULL,
        tenant        TEXT    NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE registry_settings (
        key   TEXT NOT NULL PRIMARY KEY,
        value TEXT NOT NULL
    ) STRICT;
    ",
)];

/// The newest schema version this build knows.
fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |(v, _)| *v)
}

/// A tool row's columns after its id, in the order `raw_tool` reads them; the same
/// names in `registry_tools` and `registry_tool_versions`.
const TOOL_FIELDS: &str = "name, description, tool_type, source, status, endpoint, version, \
                           revision, definition, created_by, created_at_ms, updated_at_ms";

const AGENT_COLUMNS: &str =
    "id, name, framework, status, definition, created_by, created_at_ms, updated_at_ms";

const USER_COLUMNS: &str = "username, password_hash, role, tenant, created_at_ms";

/// The registry in one SQLite file (usually the journal's).
///
/// Writes are rare (registrations) and go through the one write connection, each in a
/// `BEGIN IMMEDIATE` transaction: the file's write lock is taken up front, so checks
/// made inside it (is the name taken? is the revision current?) still hold at commit,
/// also against other processes, which the busy timeout makes wait rather than fail.
/// Reads are hot (the server reads tools by id per request) and never wait for the
/// writer's mutex: they use up to `READERS` read-only connections, which WAL lets run
/// beside a writer. No SQLite call runs on a tokio worker thread.
pub struct SqliteRegistry {
    path: PathBuf,
    writer: Arc<Mutex<Connection>>,
    readers: Arc<toolshed_journal::sqlite_reads::Readers>,
    applied: Vec<u32>,
}

impl fmt::Debug for SqliteRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteRegistry")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteRegistry {
    /// Open (creating and migrating) the registry in the SQLite file at `path`, creating
    /// its parent folder if needed.
    ///
    /// A file that is not a SQLite database, or a SQLite database with tables but no
    /// `toolshed_meta` (someone else's), is `Unavailable` and is left unchanged; so is a
    /// registry written by a newer toolshed.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteRegistry> {
        let path = path.as_ref().to_path_buf();
        let open_path = path.clone();
        let (writer, applied) = tokio::task::spawn_blocking(move || open_writer(&open_path))
            .await
            .map_err(|e| unavailable(&path, format!("opening failed: {e}")))??;
        if !applied.is_empty() {
            tracing::info!(path = %path.display(), ?applied, "applied registry migrations");
        }
        Ok(SqliteRegistry {
            readers: Arc::new(toolshed_journal::sqlite_reads::Readers::new(
                &path,
                READERS,
                BUSY_TIMEOUT,
                STATEMENT_CACHE,
            )),
            path,
            writer: Arc::new(Mutex::new(writer)),
            applied,
        })
    }

    /// The schema versions this open applied: empty when the file was up to date.
    pub fn applied_migrations(&self) -> &[u32] {
        &self.applied
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction on the write connection; commit when
    /// it succeeds, roll back when it fails.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let writer = Arc::clone(&self.writer);
        tokio::task::spawn_blocking(move || {
            let mut conn = writer.lock().unwrap_or_else(PoisonError::into_inner);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db)?;
            let value = f(&tx)?;
            tx.commit().map_err(db)?;
            Ok(value)
        })
        .await
        .map_err(|e| RegistryError::Backend(format!("a registry write failed: {e}")))?
    }

    /// Run `f` on a read connection.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.readers.read(f).await
    }
}

#[async_trait]
impl RegistryStore for SqliteRegistry {
    async fn create_tool(&self, new: NewTool) -> Result<ToolRecord> {
        let definition = json_text(&new.definition)?;
        self.write(move |tx| {
            if let Some(holder) = active_tool_id(tx, &new.name)? {
                return Err(name_taken(&new.name, Some(&holder)));
            }
            let now = now_ms();
            let id = new_id();
            tx.prepare_cached(&format!(
                "INSERT INTO registry_tools (id, {TOOL_FIELDS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, 1, ?8, ?9, ?10, ?10)"
            ))
            .map_err(db)?
            .execute(params![
                id,
                new.name,
                new.description,
                new.tool_type,
                new.source,
                new.endpoint,
                new.version,
                definition,
                new.created_by,
                now
            ])
            .map_err(|e| unique_or(e, || name_taken(&new.name, None)))?;
            snapshot_version(tx, &id)?;
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
        })
        .await
    }

    async fn get_tool(&self, id: &str) -> Result<ToolRecord> {
        let id = id.to_owned();
        self.read(move |conn| load_active_tool(conn, &id)?.ok_or_else(|| tool_not_found(&id)))
            .await
    }

    async fn find_tool_by_name(&self, name: &str) -> Result<Option<ToolRecord>> {
        let name = name.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT id, {TOOL_FIELDS} FROM registry_tools \
                     WHERE name = ?1 AND status = 'active'"
                ))
                .map_err(db)?;
            stmt.query_row([&name], raw_tool)
                .optional()
                .map_err(db)?
                .map(RawTool::into_record)
                .transpose()
        })
        .await
    }

    async fn list_tools(&self, filter: &ToolFilter) -> Result<Page<ToolRecord>> {
        let filter = filter.clone();
        self.read(move |conn| list_tools(conn, &filter)).await
    }

    async fn update_tool(
        &self,
        id: &str,
        update: NewTool,
        expected_revision: Option<u32>,
    ) -> Result<ToolRecord> {
        let id = id.to_owned();
        let definition = json_text(&update.definition)?;
        self.write(move |tx| {
            let current = load_active_tool(tx, &id)?.ok_or_else(|| tool_not_found(&id))?;
            if let Some(expected) = expected_revision
                && expected != current.revision
            {
                return Err(stale_revision(&current.name, current.revision, expected));
            }
            if let Some(holder) = active_tool_id(tx, &update.name)?
                && holder != id
            {
                return Err(name_taken(&update.name, Some(&holder)));
            }
            let revision = current.revision.saturating_add(1);
            let now = now_ms();
            tx.prepare_cached(
                "UPDATE registry_tools SET name = ?2, description = ?3, tool_type = ?4, \
                 source = ?5, endpoint = ?6, version = ?7, revision = ?8, definition = ?9, \
                 created_by = ?10, updated_at_ms = ?11 WHERE id = ?1",
            )
            .map_err(db)?
            .execute(params![
                id,
                update.name,
                update.description,
                update.tool_type,
                update.source,
                update.endpoint,
                update.version,
                revision,
                definition,
                update.created_by,
                now
            ])
            .map_err(|e| unique_or(e, || name_taken(&update.name, None)))?;
            snapshot_version(tx, &id)?;
            Ok(ToolRecord {
                id,
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
        })
        .await
    }

    async fn tool_versions(&self, id: &str) -> Result<Vec<ToolRecord>> {
        let id = id.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT tool_id, {TOOL_FIELDS} FROM registry_tool_versions \
                     WHERE tool_id = ?1 ORDER BY revision"
                ))
                .map_err(db)?;
            let rows = stmt.query_map([&id], raw_tool).map_err(db)?;
            let mut versions = Vec::new();
            for row in rows {
                versions.push(row.map_err(db)?.into_record()?);
            }
            if versions.is_empty() {
                return Err(tool_not_found(&id));
            }
            Ok(versions)
        })
        .await
    }

    async fn delete_tool(&self, id: &str) -> Result<ToolRecord> {
        let id = id.to_owned();
        self.write(move |tx| {
            let mut tool = load_active_tool(tx, &id)?.ok_or_else(|| tool_not_found(&id))?;
            let now = now_ms();
            tx.prepare_cached(
                "UPDATE registry_tools SET status = 'deleted', updated_at_ms = ?2 WHERE id = ?1",
            )
            .map_err(db)?
            .execute(params![id, now])
            .map_err(db)?;
            // The current revision's copy says deleted too, so the history ends as the
            // tool did.
            tx.prepare_cached(
                "UPDATE registry_tool_versions SET status = 'deleted', updated_at_ms = ?3 \
                 WHERE tool_id = ?1 AND revision = ?2",
            )
            .map_err(db)?
            .execute(params![id, tool.revision, now])
            .map_err(db)?;
            tool.status = ToolStatus::Deleted;
            tool.updated_at_ms = now;
            Ok(tool)
        })
        .await
    }

    async fn tool_usage(&self, id: &str) -> Result<Vec<ToolUsage>> {
        let id = id.to_owned();
        self.read(move |conn| {
            let tx = conn.unchecked_transaction().map_err(db)?;
            if !tool_is_active(&tx, &id)? {
                return Err(tool_not_found(&id));
            }
            let mut stmt = tx
                .prepare_cached(
                    "SELECT a.id, a.name, a.status FROM registry_agent_tools e \
                     JOIN registry_agents a ON a.id = e.agent_id \
                     WHERE e.tool_id = ?1 ORDER BY a.name",
                )
                .map_err(db)?;
            let rows = stmt
                .query_map([&id], |row| {
                    Ok(ToolUsage {
                        agent_id: row.get(0)?,
                        agent_name: row.get(1)?,
                        agent_status: row.get(2)?,
                    })
                })
                .map_err(db)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db)
        })
        .await
    }

    async fn upsert_agent(&self, new: NewAgent) -> Result<AgentRecord> {
        let definition = json_text(&new.definition)?;
        self.write(move |tx| {
            let tool_ids = normalized_tool_ids(&new.tool_ids);
            for tool_id in &tool_ids {
                if !tool_is_active(tx, tool_id)? {
                    return Err(tool_not_found(tool_id));
                }
            }
            let now = now_ms();
            let existing: Option<(String, i64)> = tx
                .prepare_cached("SELECT id, created_at_ms FROM registry_agents WHERE name = ?1")
                .map_err(db)?
                .query_row([&new.name], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
                .map_err(db)?;
            let (id, created_at_ms) = match existing {
                Some((id, created_at_ms)) => {
                    tx.prepare_cached(
                        "UPDATE registry_agents SET framework = ?2, status = 'registered', \
                         definition = ?3, created_by = ?4, updated_at_ms = ?5 WHERE id = ?1",
                    )
                    .map_err(db)?
                    .execute(params![id, new.framework, definition, new.created_by, now])
                    .map_err(db)?;
                    tx.prepare_cached("DELETE FROM registry_agent_tools WHERE agent_id = ?1")
                        .map_err(db)?
                        .execute([&id])
                        .map_err(db)?;
                    (id, created_at_ms)
                }
                None => {
                    let id = new_id();
                    tx.prepare_cached(&format!(
                        "INSERT INTO registry_agents ({AGENT_COLUMNS}) \
                         VALUES (?1, ?2, ?3, 'registered', ?4, ?5, ?6, ?6)"
                    ))
                    .map_err(db)?
                    .execute(params![
                        id,
                        new.name,
                        new.framework,
                        definition,
                        new.created_by,
                        now
                    ])
                    .map_err(db)?;
                    (id, now)
                }
            };
            let mut edge = tx
                .prepare_cached(
                    "INSERT INTO registry_agent_tools (agent_id, tool_id) VALUES (?1, ?2)",
                )
                .map_err(db)?;
            for tool_id in &tool_ids {
                edge.execute(params![id, tool_id]).map_err(db)?;
            }
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
        })
        .await
    }

    async fn get_agent(&self, id_or_name: &str) -> Result<AgentRecord> {
        let key = id_or_name.to_owned();
        self.read(move |conn| {
            let tx = conn.unchecked_transaction().map_err(db)?;
            let by = |column: &str| -> Result<Option<RawAgent>> {
                tx.prepare_cached(&format!(
                    "SELECT {AGENT_COLUMNS} FROM registry_agents WHERE {column} = ?1"
                ))
                .map_err(db)?
                .query_row([&key], raw_agent)
                .optional()
                .map_err(db)
            };
            // An id wins over a name (a name could look like another agent's id).
            let raw = match by("id")? {
                Some(raw) => raw,
                None => by("name")?.ok_or_else(|| agent_not_found(&key))?,
            };
            let tool_ids = agent_tool_ids(&tx, &raw.id)?;
            raw.into_record(tool_ids)
        })
        .await
    }

    async fn list_agents(&self, page: u32, per_page: u32) -> Result<Page<AgentRecord>> {
        let paging = Paging::new(page, per_page);
        self.read(move |conn| {
            let tx = conn.unchecked_transaction().map_err(db)?;
            let total: i64 = tx
                .prepare_cached("SELECT COUNT(*) FROM registry_agents")
                .map_err(db)?
                .query_row([], |row| row.get(0))
                .map_err(db)?;
            let raws = tx
                .prepare_cached(&format!(
                    "SELECT {AGENT_COLUMNS} FROM registry_agents ORDER BY name LIMIT ?1 OFFSET ?2"
                ))
                .map_err(db)?
                .query_map(params![paging.limit(), paging.offset()], raw_agent)
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            let mut items = Vec::with_capacity(raws.len());
            for raw in raws {
                let tool_ids = agent_tool_ids(&tx, &raw.id)?;
                items.push(raw.into_record(tool_ids)?);
            }
            Ok(Page {
                items,
                page: paging.page,
                per_page: paging.per_page,
                total: count(total),
            })
        })
        .await
    }

    async fn create_user(&self, new: NewUser) -> Result<UserRecord> {
        self.write(move |tx| {
            let now = now_ms();
            let inserted = tx
                .prepare_cached(&format!(
                    "INSERT INTO registry_users ({USER_COLUMNS}, updated_at_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT (username) DO NOTHING"
                ))
                .map_err(db)?
                .execute(params![
                    new.username,
                    new.password_hash,
                    new.role,
                    new.tenant,
                    now
                ])
                .map_err(db)?;
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
        })
        .await
    }

    async fn get_user(&self, username: &str) -> Result<Option<UserRecord>> {
        let username = username.to_owned();
        self.read(move |conn| load_user(conn, &username)).await
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {USER_COLUMNS} FROM registry_users ORDER BY username"
            ))
            .map_err(db)?
            .query_map([], raw_user)
            .map_err(db)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(db)
        })
        .await
    }

    async fn update_user(
        &self,
        username: &str,
        password_hash: Option<String>,
        role: Option<String>,
    ) -> Result<UserRecord> {
        let username = username.to_owned();
        self.write(move |tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE registry_users SET password_hash = COALESCE(?2, password_hash), \
                     role = COALESCE(?3, role), updated_at_ms = ?4 WHERE username = ?1",
                )
                .map_err(db)?
                .execute(params![username, password_hash, role, now_ms()])
                .map_err(db)?;
            if changed == 0 {
                return Err(user_not_found(&username));
            }
            load_user(tx, &username)?.ok_or_else(|| user_not_found(&username))
        })
        .await
    }

    async fn delete_user(&self, username: &str) -> Result<()> {
        let username = username.to_owned();
        self.write(move |tx| {
            let deleted = tx
                .prepare_cached("DELETE FROM registry_users WHERE username = ?1")
                .map_err(db)?
                .execute([&username])
                .map_err(db)?;
            if deleted == 0 {
                return Err(user_not_found(&username));
            }
            Ok(())
        })
        .await
    }

    async fn count_users(&self) -> Result<u64> {
        self.read(|conn| {
            let n: i64 = conn
                .prepare_cached("SELECT COUNT(*) FROM registry_users")
                .map_err(db)?
                .query_row([], |row| row.get(0))
                .map_err(db)?;
            Ok(count(n))
        })
        .await
    }

    async fn get_or_init_setting(&self, key: &str, value: String) -> Result<String> {
        let key = key.to_owned();
        let read_key = key.clone();
        if let Some(stored) = self.read(move |conn| load_setting(conn, &read_key)).await? {
            return Ok(stored);
        }
        // Under the write lock: of two first callers (in any process) the first inserts,
        // the second finds its value.
        self.write(move |tx| {
            tx.prepare_cached(
                "INSERT INTO registry_settings (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO NOTHING",
            )
            .map_err(db)?
            .execute(params![key, value])
            .map_err(db)?;
            load_setting(tx, &key)?.ok_or_else(|| {
                RegistryError::Backend(format!("the setting `{key}` vanished while being set"))
            })
        })
        .await
    }
}

// ---- opening and migrating ----

/// Open the write connection: check the file is a toolshed database (before changing
/// anything), set WAL and the pragmas, migrate.
fn open_writer(path: &Path) -> Result<(Connection, Vec<u32>)> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|e| {
            unavailable(
                path,
                format!("cannot create the folder `{}`: {e}", parent.display()),
            )
        })?;
    }
    let mut conn = Connection::open(path).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| open_error(path, e))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    check_is_toolshed(&conn, path)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(unavailable(
            path,
            format!("cannot switch to WAL mode (the journal mode is `{mode}`)"),
        ));
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
        .map_err(|e| open_error(path, e))?;
    let applied = migrate(&mut conn, path)?;
    Ok((conn, applied))
}

/// Refuse a database that has tables but no `toolshed_meta` (someone else's).
fn check_is_toolshed(conn: &Connection, path: &Path) -> Result<()> {
    let tables = user_tables(conn).map_err(|e| open_error(path, e))?;
    if !tables.is_empty() && !tables.iter().any(|t| t == "toolshed_meta") {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(unavailable(
            path,
            format!(
                "it has tables ({}) but no toolshed_meta: not a toolshed database",
                shown.join(", ")
            ),
        ));
    }
    Ok(())
}

fn user_tables(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
    )?;
    let names = stmt.query_map([], |row| row.get::<_, String>(0))?;
    names.collect()
}

/// Apply the migrations newer than the stored version, in one `BEGIN IMMEDIATE`
/// transaction (the journal migrates the same way, so the two never interleave).
fn migrate(conn: &mut Connection, path: &Path) -> Result<Vec<u32>> {
    let err = |e: rusqlite::Error| open_error(path, e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    // Again under the write lock: another process may have created tables meanwhile.
    check_is_toolshed(&tx, path)?;
    // The journal's DDL, word for word: whichever opens the file first creates it.
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS toolshed_meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL) STRICT",
    )
    .map_err(err)?;
    let stored: Option<String> = tx
        .query_row(
            "SELECT value FROM toolshed_meta WHERE key = ?1",
            [SCHEMA_VERSION_KEY],
            |row| row.get(0),
        )
        .optional()
        .map_err(err)?;
    let version = match stored {
        None => 0,
        Some(v) => v.parse::<u32>().map_err(|_| {
            unavailable(
                path,
                format!("toolshed_meta has an invalid {SCHEMA_VERSION_KEY} `{v}`"),
            )
        })?,
    };
    check_version(version, latest_version()).map_err(|m| unavailable(path, m))?;
    let mut applied = Vec::new();
    for (v, sql) in MIGRATIONS {
        if *v > version {
            tx.execute_batch(sql)
                .map_err(|e| unavailable(path, format!("registry migration {v} failed: {e}")))?;
            applied.push(*v);
        }
    }
    if !applied.is_empty() {
        tx.execute(
            "INSERT INTO toolshed_meta (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![SCHEMA_VERSION_KEY, latest_version().to_string()],
        )
        .map_err(err)?;
    }
    tx.commit().map_err(err)?;
    Ok(applied)
}

// ---- reads ----

/// The id of the active tool named `name`, if any.
fn active_tool_id(conn: &Connection, name: &str) -> Result<Option<String>> {
    conn.prepare_cached("SELECT id FROM registry_tools WHERE name = ?1 AND status = 'active'")
        .map_err(db)?
        .query_row([name], |row| row.get(0))
        .optional()
        .map_err(db)
}

fn tool_is_active(conn: &Connection, id: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM registry_tools WHERE id = ?1 AND status = 'active'")
        .map_err(db)?
        .query_row([id], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .map_err(db)
}

fn load_active_tool(conn: &Connection, id: &str) -> Result<Option<ToolRecord>> {
    conn.prepare_cached(&format!(
        "SELECT id, {TOOL_FIELDS} FROM registry_tools WHERE id = ?1 AND status = 'active'"
    ))
    .map_err(db)?
    .query_row([id], raw_tool)
    .optional()
    .map_err(db)?
    .map(RawTool::into_record)
    .transpose()
}

/// Copy the tool's current row into its history.
fn snapshot_version(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.prepare_cached(&format!(
        "INSERT INTO registry_tool_versions (tool_id, {TOOL_FIELDS}) \
         SELECT id, {TOOL_FIELDS} FROM registry_tools WHERE id = ?1"
    ))
    .map_err(db)?
    .execute([id])
    .map_err(db)?;
    Ok(())
}

/// One page of active tools and their total, read in one transaction so they agree.
/// Every variant filters on `status = 'active'` and orders by name, so it walks one of
/// the partial indexes (by name, or by type or source then name) and stops after the
/// page; the count walks the same index.
fn list_tools(conn: &Connection, filter: &ToolFilter) -> Result<Page<ToolRecord>> {
    let paging = Paging::new(filter.page, filter.per_page);
    let mut condition = String::from("status = 'active'");
    let mut args: Vec<SqlValue> = Vec::new();
    let mut push = |condition: &mut String, sql: &str, value: String| {
        args.push(SqlValue::Text(value));
        condition.push_str(&format!(" AND {sql} ?{}", args.len()));
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
    let tx = conn.unchecked_transaction().map_err(db)?;
    let total: i64 = tx
        .prepare_cached(&format!(
            "SELECT COUNT(*) FROM registry_tools WHERE {condition}"
        ))
        .map_err(db)?
        .query_row(rusqlite::params_from_iter(args.iter()), |row| row.get(0))
        .map_err(db)?;
    let mut items = Vec::new();
    if paging.offset() < total {
        let n = args.len();
        args.push(SqlValue::Integer(paging.limit()));
        args.push(SqlValue::Integer(paging.offset()));
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT id, {TOOL_FIELDS} FROM registry_tools WHERE {condition} \
                 ORDER BY name LIMIT ?{} OFFSET ?{}",
                n + 1,
                n + 2
            ))
            .map_err(db)?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args.iter()), raw_tool)
            .map_err(db)?;
        for row in rows {
            items.push(row.map_err(db)?.into_record()?);
        }
    }
    Ok(Page {
        items,
        page: paging.page,
        per_page: paging.per_page,
        total: count(total),
    })
}

fn agent_tool_ids(conn: &Connection, agent_id: &str) -> Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT tool_id FROM registry_agent_tools WHERE agent_id = ?1 ORDER BY tool_id",
    )
    .map_err(db)?
    .query_map([agent_id], |row| row.get(0))
    .map_err(db)?
    .collect::<rusqlite::Result<Vec<String>>>()
    .map_err(db)
}

fn load_user(conn: &Connection, username: &str) -> Result<Option<UserRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {USER_COLUMNS} FROM registry_users WHERE username = ?1"
    ))
    .map_err(db)?
    .query_row([username], raw_user)
    .optional()
    .map_err(db)
}

fn load_setting(conn: &Connection, key: &str) -> Result<Option<String>> {
    conn.prepare_cached("SELECT value FROM registry_settings WHERE key = ?1")
        .map_err(db)?
        .query_row([key], |row| row.get(0))
        .optional()
        .map_err(db)
}

// ---- rows ----

/// A tool row as read, before its text is checked.
struct RawTool {
    id: String,
    name: String,
    description: String,
    tool_type: String,
    source: String,
    status: String,
    endpoint: Option<String>,
    version: Option<String>,
    revision: i64,
    definition: String,
    created_by: String,
    created_at_ms: i64,
    updated_at_ms: i64,
}

impl RawTool {
    fn into_record(self) -> Result<ToolRecord> {
        let status = ToolStatus::parse(&self.status).ok_or_else(|| {
            RegistryError::Backend(format!(
                "tool `{}` has an unknown status `{}`",
                self.id, self.status
            ))
        })?;
        let revision = u32::try_from(self.revision).map_err(|_| {
            RegistryError::Backend(format!(
                "tool `{}` has an invalid revision {}",
                self.id, self.revision
            ))
        })?;
        let definition = parse_json(&self.definition, "tool", &self.id)?;
        Ok(ToolRecord {
            id: self.id,
            name: self.name,
            description: self.description,
            tool_type: self.tool_type,
            source: self.source,
            status,
            endpoint: self.endpoint,
            version: self.version,
            revision,
            definition,
            created_by: self.created_by,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

fn raw_tool(row: &Row<'_>) -> rusqlite::Result<RawTool> {
    Ok(RawTool {
        id: row.get(0)?,
        name: row.get(1)?,
        description: row.get(2)?,
        tool_type: row.get(3)?,
        source: row.get(4)?,
        status: row.get(5)?,
        endpoint: row.get(6)?,
        version: row.get(7)?,
        revision: row.get(8)?,
        definition: row.get(9)?,
        created_by: row.get(10)?,
        created_at_ms: row.get(11)?,
        updated_at_ms: row.get(12)?,
    })
}

struct RawAgent {
    id: String,
    name: String,
    framework: String,
    status: String,
    definition: String,
    created_by: String,
    created_at_ms: i64,
    updated_at_ms: i64,
}

impl RawAgent {
    fn into_record(self, tool_ids: Vec<String>) -> Result<AgentRecord> {
        let definition = parse_json(&self.definition, "agent", &self.id)?;
        Ok(AgentRecord {
            id: self.id,
            name: self.name,
            framework: self.framework,
            status: self.status,
            definition,
            tool_ids,
            created_by: self.created_by,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

fn raw_agent(row: &Row<'_>) -> rusqlite::Result<RawAgent> {
    Ok(RawAgent {
        id: row.get(0)?,
        name: row.get(1)?,
        framework: row.get(2)?,
        status: row.get(3)?,
        definition: row.get(4)?,
        created_by: row.get(5)?,
        created_at_ms: row.get(6)?,
        updated_at_ms: row.get(7)?,
    })
}

fn raw_user(row: &Row<'_>) -> rusqlite::Result<UserRecord> {
    Ok(UserRecord {
        username: row.get(0)?,
        password_hash: row.get(1)?,
        role: row.get(2)?,
        tenant: row.get(3)?,
        created_at_ms: row.get(4)?,
    })
}

fn json_text(value: &serde_json::Value) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|e| RegistryError::Backend(format!("cannot serialize a definition: {e}")))
}

fn parse_json(text: &str, what: &str, id: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text)
        .map_err(|e| RegistryError::Backend(format!("{what} `{id}` has a corrupt definition: {e}")))
}

/// `COUNT(*)` is never negative.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

// ---- errors ----

/// A driver failure after the registry is open.
fn db(e: rusqlite::Error) -> RegistryError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => RegistryError::Backend(
            format!("the registry database is locked by another process: {e}"),
        ),
        _ => RegistryError::Backend(e.to_string()),
    }
}

/// A unique violation is `conflict()`; anything else as [`db`].
fn unique_or(e: rusqlite::Error, conflict: impl FnOnce() -> RegistryError) -> RegistryError {
    match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
        {
            conflict()
        }
        _ => db(e),
    }
}

/// A driver failure while opening `path`.
fn open_error(path: &Path, e: rusqlite::Error) -> RegistryError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => unavailable(
            path,
            "the file is not a SQLite database (it is not a toolshed database)".into(),
        ),
        _ => unavailable(path, e.to_string()),
    }
}

fn unavailable(path: &Path, message: String) -> RegistryError {
    RegistryError::Unavailable {
        target: path.display().to_string(),
        message,
    }
}

impl From<toolshed_journal::sqlite_reads::ReadFailure> for RegistryError {
    fn from(f: toolshed_journal::sqlite_reads::ReadFailure) -> Self {
        use toolshed_journal::sqlite_reads::ReadFailure;
        match f {
            ReadFailure::Open { path, source } => open_error(&path, source),
            ReadFailure::Closed => RegistryError::Backend("the read pool is closed".into()),
            ReadFailure::Crashed(m) => {
                RegistryError::Backend(format!("a registry read failed: {m}"))
            }
        }
    }
}
