//! PostgreSQL: connecting with a bounded wait and the search path set, migrating under
//! an advisory lock, pipelined read connections with prepared-statement caches, the
//! [`Executor`] over a connection, and the driver's errors as readable text.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::future::BoxFuture;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::error::{DbError, OpenError};
use crate::location::mask_password;
use crate::migrate::{META_POSTGRES, Migrations, parse_version, step_failed};
use crate::sql::{Dialect, Executor, Param, Row, Value, to_postgres_placeholders};

/// How long one connection attempt may take when the URL sets no `connect_timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Statements cached per connection at most (a listing has a variant per filter).
const STATEMENT_CACHE: usize = 256;

/// Where to connect, for the first connection and every reconnection.
pub struct Target {
    config: Config,
    schema: Option<String>,
    described: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.described)
    }
}

impl Target {
    /// Parse `url`; [`CONNECT_TIMEOUT`] and `application_name` are filled in where the
    /// URL sets none. With `schema`, every connection sets `search_path` to it.
    pub fn new(
        url: &str,
        schema: Option<&str>,
        application_name: &str,
    ) -> Result<Target, OpenError> {
        let mut config: Config = url.parse().map_err(|e| OpenError::InvalidUrl {
            url: mask_password(url),
            reason: format!("{e}"),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name(application_name);
        }
        let described = match schema {
            Some(s) => format!("{} (schema `{s}`)", mask_password(url)),
            None => mask_password(url),
        };
        Ok(Target {
            config,
            schema: schema.map(str::to_owned),
            described,
        })
    }

    /// The masked URL (and schema), for messages.
    pub fn describe(&self) -> &str {
        &self.described
    }

    /// The schema every connection uses, if one was given.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// `Unavailable` for this target.
    pub fn unavailable(&self, message: impl Into<String>) -> OpenError {
        OpenError::Unavailable {
            target: self.described.clone(),
            message: message.into(),
        }
    }

    /// Open a connection, spawn its driver task (its end is logged) and set
    /// `search_path`. The error names the server and asks whether it runs.
    pub async fn connect(&self) -> Result<Client, OpenError> {
        // The connect timeout applies per address; this bounds the whole attempt.
        let deadline = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(CONNECT_TIMEOUT)
            * 2;
        let (client, connection) =
            match tokio::time::timeout(deadline, self.config.connect(NoTls)).await {
                Ok(Ok(connected)) => connected,
                Ok(Err(e)) => {
                    return Err(self.unavailable(format!(
                        "{} (is PostgreSQL running at {}?)",
                        message(&e),
                        endpoint(&self.config)
                    )));
                }
                Err(_) => {
                    return Err(self.unavailable(format!(
                        "no answer within {} s (is PostgreSQL running at {}?)",
                        deadline.as_secs(),
                        endpoint(&self.config)
                    )));
                }
            };
        let described = self.described.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(database = %described, error = %message(&e), "a PostgreSQL connection ended");
            }
        });
        if let Some(schema) = &self.schema {
            client
                .batch_execute(&format!("SET search_path TO {}", quote_ident(schema)))
                .await
                .map_err(|e| {
                    self.unavailable(format!("cannot set the search path: {}", message(&e)))
                })?;
        }
        Ok(client)
    }

    /// Connect, create the schema if one was given and is missing, and migrate.
    /// Returns the connection and the versions applied.
    pub async fn open(&self, migrations: &Migrations) -> Result<(Client, Vec<u32>), OpenError> {
        let mut client = self.connect().await?;
        if let Some(schema) = &self.schema {
            create_schema(&client, schema)
                .await
                .map_err(|m| self.unavailable(m))?;
        }
        let applied = migrate(&mut client, self, migrations).await?;
        Ok((client, applied))
    }
}

/// Create `schema` if it is missing (two processes doing so at once is fine).
async fn create_schema(client: &Client, schema: &str) -> Result<(), String> {
    let create = format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema));
    match client.batch_execute(&create).await {
        // Another connection may have created it at the same moment.
        Err(e) if e.code() != Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            Err(format!("cannot create schema `{schema}`: {}", message(&e)))
        }
        _ => Ok(()),
    }
}

/// Apply the migrations newer than the stored version, in one transaction, under an
/// advisory lock on the schema that every toolshed store takes, so concurrent opens
/// (of any store) migrate one at a time.
async fn migrate(
    client: &mut Client,
    target: &Target,
    m: &Migrations,
) -> Result<Vec<u32>, OpenError> {
    let err = |e: tokio_postgres::Error| {
        target.unavailable(format!("cannot migrate the {}: {}", m.store, message(&e)))
    };
    let tx = client.transaction().await.map_err(err)?;
    let schema: Option<String> = tx
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(err)?
        .try_get(0)
        .map_err(err)?;
    let Some(schema) = schema else {
        return Err(target.unavailable(format!(
            "the search_path names no existing schema to create the {} in: create it, or open \
             the store with a schema",
            m.store
        )));
    };
    tx.query(
        "SELECT pg_advisory_xact_lock(hashtext($1)::bigint)",
        &[&format!("toolshed:{schema}")],
    )
    .await
    .map_err(err)?;
    tx.batch_execute(META_POSTGRES).await.map_err(err)?;
    let mut keys = vec![m.version_key];
    if let Some((key, _)) = m.format {
        keys.push(key);
    }
    let mut version = 0;
    let mut format = None;
    for row in tx
        .query(
            "SELECT key, value FROM toolshed_meta WHERE key = ANY($1)",
            &[&keys],
        )
        .await
        .map_err(err)?
    {
        let key: String = row.try_get(0).map_err(err)?;
        let value: String = row.try_get(1).map_err(err)?;
        let parsed = parse_version(m, &key, &value).map_err(|msg| target.unavailable(msg))?;
        if key == m.version_key {
            version = parsed;
        } else {
            format = Some(parsed);
        }
    }
    m.check(version, format)
        .map_err(|msg| target.unavailable(msg))?;
    let mut applied = Vec::new();
    for step in m.pending(version) {
        tx.batch_execute(step.postgres)
            .await
            .map_err(|e| step_failed(target.describe(), m, step.version, &message(&e)))?;
        applied.push(step.version);
    }
    if !applied.is_empty() {
        for (key, value) in m.meta_rows() {
            tx.execute(
                "INSERT INTO toolshed_meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&key, &value],
            )
            .await
            .map_err(err)?;
        }
    }
    tx.commit().await.map_err(err)?;
    Ok(applied)
}

/// The servers of a config as `host:port` text, for messages.
pub fn endpoint(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(dir) => {
                    format!("{} (port {port})", dir.display())
                }
            }
        })
        .collect();
    if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(", ")
    }
}

/// The driver's message with its causes (a server error's own text and code, not just
/// "db error").
pub fn message(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut message = format!("{} ({})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            message.push_str(": ");
            message.push_str(detail);
        }
        return message;
    }
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// `"name"`, with inner quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

// ---- values and rows ----

impl ToSql for Param {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Null => Ok(IsNull::Yes),
            Param::Int(n) => match *ty {
                Type::INT2 => i16::try_from(*n)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*n)?.to_sql(ty, out),
                _ => n.to_sql(ty, out),
            },
            // A REAL column takes the nearest f32.
            Param::Real(x) => match *ty {
                Type::FLOAT4 => (*x as f32).to_sql(ty, out),
                _ => x.to_sql(ty, out),
            },
            Param::Text(s) => s.as_str().to_sql(ty, out),
            Param::Json(v) => match *ty {
                Type::JSON | Type::JSONB => v.to_sql(ty, out),
                _ => v.to_string().to_sql(ty, out),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        // Checked per value in `to_sql`, which converts where it can.
        true
    }

    to_sql_checked!();
}

/// A PostgreSQL row as plain values.
pub fn row_values(row: &tokio_postgres::Row) -> Result<Row, DbError> {
    let mut values = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let value = match *ty {
            Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)?
                .map(|n| Value::Int(i64::from(n))),
            Type::INT2 => row
                .try_get::<_, Option<i16>>(i)?
                .map(|n| Value::Int(i64::from(n))),
            Type::BOOL => row
                .try_get::<_, Option<bool>>(i)?
                .map(|b| Value::Int(i64::from(b))),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
            Type::FLOAT4 => row
                .try_get::<_, Option<f32>>(i)?
                .map(|x| Value::Real(f64::from(x))),
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
                row.try_get::<_, Option<String>>(i)?.map(Value::Text)
            }
            Type::JSON | Type::JSONB => row
                .try_get::<_, Option<serde_json::Value>>(i)?
                .map(Value::Json),
            _ => {
                return Err(DbError::decode(format!(
                    "column {i} (`{}`) has type {ty}, which toolshed does not read",
                    column.name()
                )));
            }
        };
        values.push(value.unwrap_or(Value::Null));
    }
    Ok(Row::new(values))
}

/// One connection with its prepared statements. Shared behind an `Arc`: concurrent
/// queries on it are pipelined by the driver.
pub struct Conn {
    client: Client,
    statements: Mutex<HashMap<Box<str>, Statement>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").finish_non_exhaustive()
    }
}

impl Conn {
    /// Wrap a connected client.
    pub fn new(client: Client) -> Self {
        Conn {
            client,
            statements: Mutex::new(HashMap::new()),
        }
    }

    /// The client, for what is not a cached statement (`BEGIN`, `COMMIT`).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The prepared form of `sql` (`?N` placeholders), prepared once per connection.
    pub async fn statement(&self, sql: &str) -> Result<Statement, DbError> {
        let cached = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sql)
            .cloned();
        if let Some(stmt) = cached {
            return Ok(stmt);
        }
        let stmt = self.client.prepare(&to_postgres_placeholders(sql)).await?;
        let mut statements = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if statements.len() < STATEMENT_CACHE {
            statements.insert(sql.into(), stmt.clone());
        }
        Ok(stmt)
    }

    /// Run a statement; every row.
    pub async fn query(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
        let stmt = self.statement(sql).await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        let rows = self.client.query(&stmt, &refs).await?;
        rows.iter().map(row_values).collect()
    }

    /// Run a statement; how many rows it changed.
    pub async fn execute(&self, sql: &str, params: &[Param]) -> Result<u64, DbError> {
        let stmt = self.statement(sql).await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        Ok(self.client.execute(&stmt, &refs).await?)
    }
}

/// An [`Executor`] over a shared connection.
pub struct PgExec<'c> {
    conn: &'c Conn,
}

impl<'c> PgExec<'c> {
    /// Statements run on `conn`.
    pub fn new(conn: &'c Conn) -> Self {
        PgExec { conn }
    }
}

impl Executor for PgExec<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn query<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<Vec<Row>, DbError>> {
        Box::pin(self.conn.query(sql, params))
    }

    fn execute<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(self.conn.execute(sql, params))
    }
}

/// Read connections, used round-robin; each pipelines the queries of every task using
/// it. A lost connection is reopened on its next use.
#[derive(Debug)]
pub struct Readers {
    target: Arc<Target>,
    slots: Vec<tokio::sync::Mutex<Option<Arc<Conn>>>>,
    next: AtomicUsize,
}

impl Readers {
    /// Open `count` read connections to `target`.
    pub async fn connect(target: Arc<Target>, count: usize) -> Result<Readers, OpenError> {
        let mut slots = Vec::with_capacity(count.max(1));
        for _ in 0..count.max(1) {
            let conn = Conn::new(target.connect().await?);
            slots.push(tokio::sync::Mutex::new(Some(Arc::new(conn))));
        }
        Ok(Readers {
            target,
            slots,
            next: AtomicUsize::new(0),
        })
    }

    /// A live read connection (reconnecting a lost one).
    pub async fn conn(&self) -> Result<Arc<Conn>, OpenError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let Some(slot) = self.slots.get(i) else {
            return Err(self.target.unavailable("no read connection"));
        };
        let mut slot = slot.lock().await;
        if let Some(conn) = slot.as_ref()
            && !conn.is_closed()
        {
            return Ok(Arc::clone(conn));
        }
        let conn = Arc::new(Conn::new(self.target.connect().await?));
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Run a rule on a read connection.
    pub async fn read<T, E, F>(&self, rule: F) -> Result<T, E>
    where
        E: From<DbError> + From<OpenError>,
        F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>>,
    {
        let conn = self.conn().await.map_err(E::from)?;
        rule(&mut PgExec::new(&conn)).await
    }
}

/// The write connection of a store whose writes are rare: one transaction at a time.
/// Rows a rule checks should be locked (`FOR UPDATE`) and names guarded by unique
/// indexes, so the rules hold across processes.
#[derive(Debug)]
pub struct Writer {
    target: Arc<Target>,
    slot: tokio::sync::Mutex<WriterSlot>,
    in_transaction: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct WriterSlot {
    conn: Option<Conn>,
    /// A transaction was begun and not ended: the rule's future was dropped mid-way
    /// (its caller went away). It is rolled back before the next one begins.
    open: bool,
}

impl Writer {
    /// The writer over an open connection to `target`.
    pub fn new(target: Arc<Target>, client: Client) -> Self {
        Writer {
            target,
            slot: tokio::sync::Mutex::new(WriterSlot {
                conn: Some(Conn::new(client)),
                open: false,
            }),
            in_transaction: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many write transactions are open or about to begin (0 or 1): the write
    /// connection is held from here until the commit.
    pub fn in_transaction(&self) -> u64 {
        self.in_transaction.load(Ordering::Acquire)
    }

    /// Run a rule in one transaction: committed when it returns `Ok`, rolled back when
    /// it returns `Err`.
    pub async fn write<T, E, F>(&self, rule: F) -> Result<T, E>
    where
        E: From<DbError> + From<OpenError>,
        F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>>,
    {
        let mut slot = self.slot.lock().await;
        self.in_transaction.fetch_add(1, Ordering::AcqRel);
        let _done = InTransaction(&self.in_transaction);
        if slot.conn.as_ref().is_none_or(Conn::is_closed) {
            slot.conn = None;
            slot.open = false;
            slot.conn = Some(Conn::new(self.target.connect().await.map_err(E::from)?));
        }
        let WriterSlot { conn, open } = &mut *slot;
        let Some(conn) = conn.as_ref() else {
            return Err(E::from(self.target.unavailable("no write connection")));
        };
        if *open {
            conn.client()
                .batch_execute("ROLLBACK")
                .await
                .map_err(DbError::from)?;
            *open = false;
        }
        conn.client()
            .batch_execute("BEGIN")
            .await
            .map_err(DbError::from)?;
        *open = true;
        let result = rule(&mut PgExec::new(conn)).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let ended = conn.client().batch_execute(end).await;
        *open = false;
        match (ended, result) {
            (Ok(()), result) => result,
            (Err(e), Ok(_)) => Err(E::from(DbError::from(e))),
            (Err(_), Err(own)) => Err(own),
        }
    }
}

/// Counts a write transaction for as long as it lives (also when its future is dropped).
struct InTransaction<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for InTransaction<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
