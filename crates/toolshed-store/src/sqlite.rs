//! SQLite: opening a file as a toolshed database, migrating it, the pool of read
//! connections, and the [`Executor`] over a connection.
//!
//! No SQLite call runs on a tokio worker thread: reads run on the blocking pool, writes
//! on the thread of whoever owns the write connection. Rules written as `async fn` over
//! an executor are run there by polling them once ([`run_now`]): every SQLite executor
//! future is complete when polled, so a rule finishes in that one poll.

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::future::{BoxFuture, ready};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};
use tokio::sync::Semaphore;

use crate::error::{DbError, DbErrorKind, OpenError};
use crate::migrate::{META_SQLITE, Migrations, parse_version, step_failed};
use crate::sql::{Dialect, Executor, Param, Row, Value};

/// How long a connection waits for another connection's (or process's) lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Open the write connection of a store's file: create the folder (0700 when new) and
/// the file (0600 when new: [`create_private`]), refuse a file that
/// is not a toolshed database (before changing anything), switch to WAL with
/// `synchronous = FULL`, foreign keys on, temporary storage in memory, then migrate.
/// Returns the connection and the versions this open applied.
///
/// `temp_store = MEMORY`: a store that runs operations in savepoints keeps the original
/// of each page a savepoint changes in a sub-journal, which on disk (the default) is a
/// `pwrite` per page; in memory it is a copy, needed only until the savepoint ends.
pub fn open_writer(
    path: &Path,
    migrations: &Migrations,
) -> Result<(Connection, Vec<u32>), OpenError> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| {
                unavailable(
                    path,
                    format!("cannot create the folder `{}`: {e}", parent.display()),
                )
            })?;
    }
    create_private(path)?;
    let noun = migrations.noun;
    let conn = Connection::open(path).map_err(|e| open_error(path, noun, &e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| open_error(path, noun, &e))?;
    check_is_toolshed(&conn, path, noun)?;
    // Before anything writes the file: a new database returns the pages pruning frees
    // with `PRAGMA incremental_vacuum` (see [`space`]). SQLite takes the mode only while
    // the file is empty; on an older file it is a no-op until one `VACUUM`
    // ([`vacuum_incremental`]).
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")
        .map_err(|e| open_error(path, noun, &e))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| open_error(path, noun, &e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(unavailable(
            path,
            format!("cannot switch to WAL mode (the journal mode is `{mode}`)"),
        ));
    }
    conn.execute_batch(
        "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;",
    )
    .map_err(|e| open_error(path, noun, &e))?;
    let applied = migrate(&conn, path, migrations)?;
    Ok((conn, applied))
}

/// Create the database file readable and writable by its owner only (0600), whatever
/// the umask, unless it exists. SQLite gives the `-wal` and `-shm` files it creates the
/// database file's permissions, so they are 0600 too. The file holds tool definitions,
/// run arguments and results, password hashes and the token signing secret. An existing
/// file keeps its mode (the operator may have chosen it); one that others can read is
/// named in a warning.
pub fn create_private(path: &Path) -> Result<(), OpenError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if path.as_os_str() == ":memory:" {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if let Ok(meta) = std::fs::metadata(path)
                && meta.permissions().mode() & 0o077 != 0
            {
                tracing::warn!(
                    path = %path.display(),
                    mode = format!("{:o}", meta.permissions().mode() & 0o777),
                    "the database file is readable by other users; `chmod 600` it (and its -wal and -shm files)"
                );
            }
            Ok(())
        }
        Err(e) => Err(unavailable(
            path,
            format!("cannot create the database file: {e}"),
        )),
    }
}

/// How a SQLite file gives back the pages deletions free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoVacuum {
    /// `auto_vacuum = INCREMENTAL`: free pages go back to the file system with
    /// [`incremental_vacuum`]; every database toolshed creates is so.
    Incremental,
    /// `auto_vacuum = FULL`: SQLite truncates the file at every commit by itself.
    Full,
    /// `auto_vacuum = NONE` (a file created before toolshed set the mode): free pages are
    /// reused but the file never shrinks until one [`vacuum_incremental`].
    None,
}

/// The size of a SQLite file in pages, and how many of them are free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// The file's auto-vacuum mode.
    pub auto_vacuum: AutoVacuum,
    /// Bytes per page.
    pub page_size: u64,
    /// Pages in the database (free ones included).
    pub pages: u64,
    /// Pages on the free list: reused by later writes, or returned by a vacuum.
    pub free_pages: u64,
}

/// The space `conn`'s database uses.
pub fn space(conn: &Connection) -> Result<Space, DbError> {
    let pragma = |name: &str| -> Result<i64, DbError> {
        Ok(conn.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))?)
    };
    let auto_vacuum = match pragma("auto_vacuum")? {
        1 => AutoVacuum::Full,
        2 => AutoVacuum::Incremental,
        _ => AutoVacuum::None,
    };
    let count = |name: &str| -> Result<u64, DbError> {
        u64::try_from(pragma(name)?)
            .map_err(|_| DbError::decode(format!("PRAGMA {name} is negative")))
    };
    Ok(Space {
        auto_vacuum,
        page_size: count("page_size")?,
        pages: count("page_count")?,
        free_pages: count("freelist_count")?,
    })
}

/// Return up to `pages` free pages to the file system (`PRAGMA incremental_vacuum`),
/// as one write transaction on `conn`; a no-op unless the file is
/// [`AutoVacuum::Incremental`]. In WAL mode the file shrinks when the WAL is next
/// checkpointed in full.
pub fn incremental_vacuum(conn: &Connection, pages: u32) -> Result<(), DbError> {
    // The pragma frees one page per step: step it to its end (`execute_batch` would
    // step it once).
    let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    Ok(())
}

/// Switch an older file to [`AutoVacuum::Incremental`] and rewrite it (`VACUUM`): the
/// one-time step after which pruning returns space. It holds the file's write lock
/// for the whole rewrite and needs free disk space about the size of the file.
pub fn vacuum_incremental(conn: &Connection) -> Result<(), DbError> {
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
    Ok(())
}

/// Refuse a database that has tables but no `toolshed_meta` (someone else's).
fn check_is_toolshed(conn: &Connection, path: &Path, noun: &'static str) -> Result<(), OpenError> {
    let tables = user_tables(conn).map_err(|e| open_error(path, noun, &e))?;
    if !tables.is_empty() && !tables.iter().any(|t| t == "toolshed_meta") {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(OpenError::Foreign {
            path: path.display().to_string(),
            noun,
            message: format!(
                "it has tables ({}) but no toolshed_meta: not a toolshed {noun}",
                shown.join(", ")
            ),
        });
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
/// transaction.
fn migrate(conn: &Connection, path: &Path, m: &Migrations) -> Result<Vec<u32>, OpenError> {
    let noun = m.noun;
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_error(path, noun, &e))?;
    let result = migrate_locked(conn, path, m);
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = conn
        .execute_batch(end)
        .map_err(|e| open_error(path, noun, &e));
    let applied = result?;
    ended?;
    Ok(applied)
}

fn migrate_locked(conn: &Connection, path: &Path, m: &Migrations) -> Result<Vec<u32>, OpenError> {
    let err = |e: rusqlite::Error| open_error(path, m.noun, &e);
    // Again under the write lock: another process may have created tables meanwhile.
    check_is_toolshed(conn, path, m.noun)?;
    conn.execute_batch(META_SQLITE).map_err(err)?;
    let meta = |key: &str| -> Result<Option<u32>, OpenError> {
        let value: Option<String> = conn
            .query_row(
                "SELECT value FROM toolshed_meta WHERE key = ?1",
                [key],
                |row| row.get(0),
            )
            .optional()
            .map_err(err)?;
        value
            .map(|v| parse_version(m, key, &v).map_err(|msg| unavailable(path, msg)))
            .transpose()
    };
    let version = meta(m.version_key)?.unwrap_or(0);
    let format = match m.format {
        Some((key, _)) => meta(key)?,
        None => None,
    };
    m.check(version, format)
        .map_err(|msg| unavailable(path, msg))?;
    let mut applied = Vec::new();
    for step in m.pending(version) {
        conn.execute_batch(step.sqlite).map_err(|e| {
            step_failed(&path.display().to_string(), m, step.version, &e.to_string())
        })?;
        applied.push(step.version);
    }
    if !applied.is_empty() {
        for (key, value) in m.meta_rows() {
            conn.execute(
                "INSERT INTO toolshed_meta (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, value.as_str()],
            )
            .map_err(err)?;
        }
    }
    Ok(applied)
}

/// A driver failure while opening `path`: a file that is not a database is `Foreign`.
pub fn open_error(path: &Path, noun: &'static str, e: &rusqlite::Error) -> OpenError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => OpenError::Foreign {
            path: path.display().to_string(),
            noun,
            message: "the file is not a SQLite database".into(),
        },
        _ => unavailable(path, e.to_string()),
    }
}

/// `Unavailable` for `path`.
pub fn unavailable(path: &Path, message: String) -> OpenError {
    OpenError::Unavailable {
        target: format!("sqlite://{}", path.display()),
        message,
    }
}

// ---- rows and values ----

impl rusqlite::ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Param::Null => ToSqlOutput::Owned(rusqlite::types::Value::Null),
            Param::Int(n) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(*n)),
            Param::Real(x) => ToSqlOutput::Owned(rusqlite::types::Value::Real(*x)),
            Param::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Param::Json(v) => ToSqlOutput::Owned(rusqlite::types::Value::Text(v.to_string())),
        })
    }
}

/// A rusqlite row as plain values (`columns` of them).
pub fn row_values(row: &rusqlite::Row<'_>, columns: usize) -> Result<Row, DbError> {
    let mut values = Vec::with_capacity(columns);
    for i in 0..columns {
        values.push(match row.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::Int(n),
            ValueRef::Real(x) => Value::Real(x),
            ValueRef::Text(bytes) => Value::Text(
                std::str::from_utf8(bytes)
                    .map_err(|_| DbError::decode(format!("column {i} is not valid UTF-8")))?
                    .to_owned(),
            ),
            ValueRef::Blob(_) => {
                return Err(DbError::decode(format!(
                    "column {i} is a blob; toolshed stores none"
                )));
            }
        });
    }
    Ok(Row::new(values))
}

/// An [`Executor`] over one SQLite connection, with its cache of prepared statements.
/// Holding `&mut` keeps it `Send` (a `Connection` may move between threads, not be
/// shared).
pub struct SqliteExec<'c> {
    conn: &'c mut Connection,
}

impl<'c> SqliteExec<'c> {
    /// Statements run on `conn`.
    pub fn new(conn: &'c mut Connection) -> Self {
        SqliteExec { conn }
    }

    fn query_now(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let columns = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(row_values(row, columns)?);
        }
        Ok(out)
    }

    fn execute_now(&self, sql: &str, params: &[Param]) -> Result<u64, DbError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let changed = stmt.execute(rusqlite::params_from_iter(params.iter()))?;
        Ok(changed as u64)
    }
}

impl Executor for SqliteExec<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn query<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<Vec<Row>, DbError>> {
        Box::pin(ready(self.query_now(sql, params)))
    }

    fn execute<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(ready(self.execute_now(sql, params)))
    }
}

/// Run a rule written as a future over a SQLite executor: poll it once. A rule that is
/// still pending awaited something other than its executor, which would block a
/// connection on the blocking pool indefinitely: that is a bug, reported as an error.
pub fn run_now<T, E: From<DbError>>(rule: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let mut rule = pin!(rule);
    match rule.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => result,
        Poll::Pending => Err(E::from(DbError::new(
            DbErrorKind::Other,
            "a SQLite rule awaited something other than the database (a bug)",
        ))),
    }
}

// ---- reads ----

/// The read side of one SQLite file: at most `max` reads at once, each on a pooled
/// connection (`PRAGMA query_only`) with its statement cache, on tokio's blocking
/// threads. More concurrent reads than connections would only open and close
/// connections and blocking threads that the cores cannot run anyway. Cheap to share
/// behind an `Arc`.
#[derive(Debug)]
pub struct Readers {
    path: PathBuf,
    noun: &'static str,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    statement_cache: usize,
}

impl Readers {
    /// At most `max` reads of `path` at once, each connection caching up to
    /// `statement_cache` prepared statements.
    pub fn new(path: &Path, noun: &'static str, max: usize, statement_cache: usize) -> Self {
        Readers {
            path: path.to_path_buf(),
            noun,
            idle: Mutex::new(Vec::with_capacity(max)),
            permits: Arc::new(Semaphore::new(max.max(1))),
            statement_cache,
        }
    }

    /// Run a rule on a read connection.
    pub async fn read<T, E, F>(self: &Arc<Self>, rule: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<DbError> + From<OpenError> + Send + 'static,
        F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| E::from(DbError::new(DbErrorKind::Other, "the read pool is closed")))?;
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.take().map_err(E::from)?;
            let result = run_now(rule(&mut SqliteExec::new(&mut conn)));
            pool.put(conn);
            drop(permit);
            result
        })
        .await
        .map_err(|e| {
            E::from(DbError::new(
                DbErrorKind::Other,
                format!("a read failed: {e}"),
            ))
        })?
    }

    fn take(&self) -> Result<Connection, OpenError> {
        if let Some(conn) = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Ok(conn);
        }
        let open = || -> rusqlite::Result<Connection> {
            let conn = Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            conn.set_prepared_statement_cache_capacity(self.statement_cache);
            conn.execute_batch("PRAGMA query_only = ON")?;
            Ok(conn)
        };
        open().map_err(|e| open_error(&self.path, self.noun, &e))
    }

    fn put(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // The permits bound the connections in use, so the idle list never outgrows them.
        idle.push(conn);
    }
}

/// The write connection of a store whose writes are rare: one transaction at a time,
/// `BEGIN IMMEDIATE` (the file's write lock is taken up front, so what a rule checks
/// still holds at commit, also against other processes, which the busy timeout makes
/// wait rather than fail).
#[derive(Debug)]
pub struct Writer {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
    in_transaction: Arc<AtomicU64>,
}

impl Writer {
    /// The writer over an open connection of `path`.
    pub fn new(path: &Path, conn: Connection) -> Self {
        Writer {
            path: path.to_path_buf(),
            conn: Arc::new(Mutex::new(conn)),
            in_transaction: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many write transactions are open or waiting to begin on the connection (0
    /// or 1): the write connection is held from here until the commit.
    pub fn in_transaction(&self) -> u64 {
        self.in_transaction.load(Ordering::Acquire)
    }

    /// Run a rule in one transaction on the blocking pool: committed when it returns
    /// `Ok`, rolled back when it returns `Err`.
    pub async fn write<T, E, F>(&self, rule: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<DbError> + Send + 'static,
        F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        let path = self.path.clone();
        let in_transaction = Arc::clone(&self.in_transaction);
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            in_transaction.fetch_add(1, Ordering::AcqRel);
            let _done = scopeguard(|| {
                in_transaction.fetch_sub(1, Ordering::AcqRel);
            });
            transact(&mut conn, rule)
        })
        .await
        .map_err(|e| {
            E::from(DbError::new(
                DbErrorKind::Other,
                format!("a write to {} failed: {e}", path.display()),
            ))
        })?
    }
}

/// Run a rule in one `BEGIN IMMEDIATE` transaction on `conn`, on the calling thread:
/// committed when it returns `Ok`, rolled back when it returns `Err`. For a store that
/// owns its write connection and needs one transaction of its own on it (the journal's
/// pruning, beside its group commits).
pub fn transact<T, E, F>(conn: &mut Connection, rule: F) -> Result<T, E>
where
    E: From<DbError>,
    F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>>,
{
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(DbError::from)?;
    let result = run_now(rule(&mut SqliteExec::new(conn)));
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    match conn.execute_batch(end) {
        Ok(()) => result,
        // A failed COMMIT leaves the transaction open: roll it back so the next write
        // starts clean, and report the commit's failure.
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            match result {
                Ok(_) => Err(E::from(DbError::from(e))),
                Err(own) => Err(own),
            }
        }
    }
}

/// Runs `f` when dropped (on every path out of a scope).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
