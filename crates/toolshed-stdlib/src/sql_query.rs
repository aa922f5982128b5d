//! `sql_query`: one read-only SQL statement against `SQL_DATABASE_URL`
//! (`sqlite://PATH`, `postgres://…`, `mysql://…` / `mariadb://…`).
//!
//! Read-only by construction, in layers, each enough on its own for plain writes:
//! - **every database:** the statement is prepared first, and one that returns no
//!   columns (INSERT/UPDATE/DELETE without RETURNING, DDL, `COPY … TO`, `SET`,
//!   `COMMIT`, `ATTACH`, `SELECT … INTO OUTFILE`) is refused without running; one
//!   statement per call (a second one after `;` is refused); `params` are bound as
//!   parameters, never put into the text.
//! - **SQLite:** opened read-only (`SQLITE_OPEN_READ_ONLY`, no URI names), `PRAGMA
//!   query_only`, no database may be attached, and an authorizer that allows only
//!   reads, functions and schema-reading pragmas; a statement SQLite does not call
//!   read-only (`sqlite3_stmt_readonly`) is refused too.
//! - **PostgreSQL:** the session's default is `READ ONLY`, and each statement runs in
//!   its own `START TRANSACTION READ ONLY` that is rolled back, followed by
//!   `pg_advisory_unlock_all()` (an advisory lock outlives a rollback). The three go
//!   in one pipelined round trip.
//! - **MySQL / MariaDB:** the session is `TRANSACTION READ ONLY`, and each statement
//!   runs inside a `START TRANSACTION READ ONLY` that is rolled back after it, followed
//!   by `RELEASE_ALL_LOCKS()`; the next transaction is begun in that same round trip,
//!   off the caller's path, before the connection is reused.
//!
//! Functions whose effects a read-only transaction does not stop or undo (server
//! files, advisory locks, other sessions, notifications) are refused by name before
//! the statement is prepared, over its tokens as its own database reads them
//! (`denied.rs`); a statement that cannot be tokenized is refused too. That denylist
//! is a backstop: what a read-only transaction does not stop (reading server files
//! with a superuser, a `SECURITY DEFINER` function) is stopped by the database role:
//! see `docs/builtins.md`, which shows how to create a read-only role on each
//! database.
//!
//! Limits: a statement timeout ([`STATEMENT_TIMEOUT`], on the server and on the
//! client, which cancels the statement), a row cap (`max_rows`, default
//! [`DEFAULT_MAX_ROWS`], at most [`MAX_ROWS`]) and a byte cap ([`MAX_RESULT_BYTES`]),
//! both reported by `truncated`. Connections are pooled per URL (at most
//! [`MAX_CONNECTIONS`] each), and prepared statements are cached per connection.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolshed_core::{
    Effects, ErrorCode, Idempotency, Reply, Tool, ToolContext, ToolError, ToolMeta, ToolOutput,
};

use crate::common::{clip, failure, output, schema_of};

mod denied;
mod mysql;
mod pg;
mod sqlite;

/// The tool's name.
pub const SQL_QUERY: &str = "sql_query";
/// The env var naming the database (required).
pub const SQL_DATABASE_URL_ENV: &str = "SQL_DATABASE_URL";
/// Rows returned when `max_rows` is not given.
pub const DEFAULT_MAX_ROWS: u32 = 100;
/// The most rows one call returns, whatever `max_rows` says.
pub const MAX_ROWS: u32 = 1000;
/// The most bytes of row data (as JSON) one call returns; rows past it are left out and
/// `truncated` is set.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
/// How long one statement may run, on the server and on the client.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most parameters one statement may bind.
pub const MAX_PARAMS: usize = 100;
/// The longest statement accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 100_000;
/// The most connections kept open per database URL.
pub const MAX_CONNECTIONS: usize = 4;

/// The arguments of `sql_query`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqlQueryArgs {
    /// One read-only SQL statement (SELECT, WITH … SELECT, VALUES, SHOW, EXPLAIN), with
    /// placeholders for values: `?` on SQLite and MySQL, `$1`, `$2`, … on PostgreSQL.
    #[schemars(length(min = 1, max = 100000))]
    pub query: String,
    /// Values for the placeholders, in order: strings, numbers, booleans or null. Always
    /// pass values here instead of writing them into the query.
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub params: Vec<Value>,
    /// The most rows to return (default 100, at most 1000).
    #[serde(default = "default_max_rows")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_rows: u32,
}

fn default_max_rows() -> u32 {
    DEFAULT_MAX_ROWS
}

impl SqlQueryArgs {
    /// A statement without params, returning at most [`DEFAULT_MAX_ROWS`] rows.
    pub fn new(query: impl Into<String>) -> Self {
        SqlQueryArgs {
            query: query.into(),
            params: Vec::new(),
            max_rows: DEFAULT_MAX_ROWS,
        }
    }

    /// The same, with these params.
    pub fn with_params(mut self, params: Vec<Value>) -> Self {
        self.params = params;
        self
    }
}

/// One column of the result.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SqlColumn {
    /// The column's name as the statement gives it.
    pub name: String,
    /// The database's type name (`integer`, `text`, `numeric`, `varchar`, …).
    #[serde(rename = "type")]
    pub type_name: String,
}

/// The answer of `sql_query`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SqlResult {
    /// `sqlite`, `postgres` or `mysql`.
    pub database: String,
    /// The columns, in order.
    pub columns: Vec<SqlColumn>,
    /// The rows, each an array in column order. Numbers are JSON numbers except exact
    /// decimals (strings); binary values are base64 strings; dates and times ISO 8601.
    pub rows: Vec<Vec<Value>>,
    /// How many rows are in `rows`.
    pub row_count: usize,
    /// Whether the statement had more rows than were returned.
    pub truncated: bool,
    /// What cut the rows short: `max_rows` or `bytes` (the byte cap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_by: Option<String>,
}

/// The `sql_query` tool.
pub fn sql_query_tool() -> Tool {
    static TOOL: OnceLock<Tool> = OnceLock::new();
    TOOL.get_or_init(|| {
        let mut input = schema_of::<SqlQueryArgs>();
        // Params are scalars only: say so in the schema the model reads.
        input["properties"]["params"]["items"] =
            json!({"type": ["string", "number", "integer", "boolean", "null"]});
        Tool::builder(SQL_QUERY)
            .description(
                "Run one read-only SQL statement (SELECT, WITH … SELECT, VALUES, SHOW, EXPLAIN) \
                 against the configured database and return its columns (name and type) and \
                 rows. Writes are refused. Pass values as params (`?` on SQLite and MySQL, \
                 `$1` on PostgreSQL), never inside the query. At most max_rows rows (default \
                 100, at most 1000) and 256 KiB come back; `truncated` says when more existed.",
            )
            .input_schema(input)
            .output_schema(schema_of::<SqlResult>())
            .effects(Effects::None)
            .idempotency(Idempotency::None)
            .timeout(STATEMENT_TIMEOUT + Duration::from_secs(20))
            .meta(ToolMeta {
                version: Some("1.0.0".into()),
                tags: vec!["stdlib".into(), "sql".into(), "read-only".into()],
                tool_type: Some("function".into()),
                network_access: true,
                ..ToolMeta::default()
            })
            .raw_handler(Arc::new(|args: Value, ctx: ToolContext| {
                Box::pin(async move { Reply::new(handle(args, &ctx).await) })
                    as toolshed_core::HandlerFuture
            }))
            .build()
            // The spec above is fixed and checked by this crate's tests.
            .unwrap_or_else(|e| panic!("the sql_query spec is invalid: {e}"))
    })
    .clone()
}

async fn handle(args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let args: SqlQueryArgs = serde_json::from_value(args)
        .map_err(|e| ToolError::new(ErrorCode::InvalidArgs, format!("sql_query arguments: {e}")))?;
    let Some(url) = ctx
        .env(SQL_DATABASE_URL_ENV)
        .filter(|u| !u.trim().is_empty())
    else {
        return Err(failure(
            "not_configured",
            format!(
                "sql_query needs {SQL_DATABASE_URL_ENV}: declare it in the agent's env (listing \
                 sql_query in builtin_tools does) and set it to sqlite://PATH, postgres://… or mysql://…"
            ),
            false,
            None,
            &[],
        ));
    };
    output(&query(url, &args).await?)
}

/// Run one statement against the database at `url`: what the tool's handler does once
/// it has read `SQL_DATABASE_URL`. Connections are pooled per URL across calls.
pub async fn query(url: &str, args: &SqlQueryArgs) -> Result<SqlResult, ToolError> {
    let secrets = secrets_of(url);
    let secret_refs: Vec<&str> = secrets.iter().map(String::as_str).collect();
    check_args(args)?;
    let pool = pool_for(url).map_err(|f| f.into_error(&secret_refs))?;
    let mut outcome = pool.run(args).await;
    // A pooled connection may have died while idle (a server restart, a network drop):
    // the statement only reads, so running it once more on a fresh connection is safe.
    if matches!(&outcome, Err(f) if f.broken && f.reused) {
        outcome = pool.run(args).await;
    }
    outcome.map_err(|f| f.into_error(&secret_refs))
}

fn check_args(args: &SqlQueryArgs) -> Result<(), ToolError> {
    let invalid = |field: &str, what: String| {
        ToolError::new(ErrorCode::InvalidArgs, format!("{field} {what}"))
            .with_details(json!({"kind": "invalid_args", "field": field, "retryable": false}))
    };
    if args.query.trim().is_empty() {
        return Err(invalid(
            "query",
            "must not be empty; write one SELECT statement".into(),
        ));
    }
    if args.query.len() > MAX_QUERY_BYTES {
        return Err(invalid(
            "query",
            format!("must be at most {MAX_QUERY_BYTES} bytes"),
        ));
    }
    if args.query.contains('\0') {
        return Err(invalid("query", "must not contain a NUL character".into()));
    }
    if args.params.len() > MAX_PARAMS {
        return Err(invalid(
            "params",
            format!("may hold at most {MAX_PARAMS} values"),
        ));
    }
    if let Some(i) = args
        .params
        .iter()
        .position(|p| p.is_array() || p.is_object())
    {
        return Err(invalid(
            "params",
            format!("[{i}] is an array or object; params are strings, numbers, booleans or null"),
        ));
    }
    if let Some(i) = args
        .params
        .iter()
        .position(|p| p.as_str().is_some_and(|s| s.contains('\0')))
    {
        return Err(invalid("params", format!("[{i}] contains a NUL character")));
    }
    if !(1..=MAX_ROWS).contains(&args.max_rows) {
        return Err(invalid(
            "max_rows",
            format!("must be between 1 and {MAX_ROWS}"),
        ));
    }
    Ok(())
}

/// Why a statement failed, before it becomes an error result.
#[derive(Debug)]
struct Fail {
    kind: &'static str,
    message: String,
    retryable: bool,
    /// The connection is unusable: drop it instead of pooling it.
    broken: bool,
    /// The connection came from the pool (not opened for this call).
    reused: bool,
}

impl Fail {
    fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Fail {
            kind,
            message: message.into(),
            retryable: false,
            broken: false,
            reused: false,
        }
    }

    fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    fn broken(mut self) -> Self {
        self.broken = true;
        self.retryable = true;
        self
    }

    fn into_error(self, secrets: &[&str]) -> ToolError {
        failure(self.kind, self.message, self.retryable, None, secrets)
    }

    fn write_refused(what: &str) -> Self {
        Fail::new(
            "write_refused",
            format!("sql_query is read-only: {what}; nothing was changed"),
        )
    }

    fn not_a_query(sql: &str) -> Self {
        Fail::new(
            "not_a_query",
            format!(
                "sql_query is read-only and runs only statements that return rows (SELECT, WITH … \
                 SELECT, VALUES, SHOW, EXPLAIN); `{}` returns none, so it was refused without running",
                first_words(sql)
            ),
        )
    }

    fn timeout() -> Self {
        Fail::new(
            "timeout",
            format!(
                "the statement ran longer than {} s and was cancelled; narrow it (a WHERE clause, \
                 an index, a LIMIT) and try again",
                STATEMENT_TIMEOUT.as_secs()
            ),
        )
    }

    fn params(expected: usize, given: usize) -> Self {
        Fail::new(
            "invalid_params",
            format!(
                "the statement has {expected} placeholder{} and params has {given} value{}; pass one value per placeholder",
                if expected == 1 { "" } else { "s" },
                if given == 1 { "" } else { "s" }
            ),
        )
    }
}

/// The start of a statement, for messages.
fn first_words(sql: &str) -> String {
    let one_line: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    clip(&one_line, 60)
}

/// Rows as they are gathered, with the caps applied.
struct Collector {
    max_rows: usize,
    rows: Vec<Vec<Value>>,
    bytes: usize,
    truncated_by: Option<&'static str>,
}

impl Collector {
    fn new(max_rows: u32) -> Self {
        Collector {
            max_rows: max_rows as usize,
            rows: Vec::new(),
            bytes: 0,
            truncated_by: None,
        }
    }

    /// Add a row; `false` once no more rows are wanted (a cap was reached).
    fn push(&mut self, row: Vec<Value>) -> bool {
        if self.rows.len() >= self.max_rows {
            self.truncated_by = Some("max_rows");
            return false;
        }
        let size = row_size(&row);
        if self.bytes + size > MAX_RESULT_BYTES {
            self.truncated_by = Some("bytes");
            return false;
        }
        self.bytes += size;
        self.rows.push(row);
        true
    }

    fn finish(self, database: &str, columns: Vec<SqlColumn>) -> SqlResult {
        SqlResult {
            database: database.to_owned(),
            columns,
            row_count: self.rows.len(),
            rows: self.rows,
            truncated: self.truncated_by.is_some(),
            truncated_by: self.truncated_by.map(str::to_owned),
        }
    }
}

/// The size of a row as JSON, without serializing it: strings count their bytes plus
/// quotes (escapes are rare enough to leave out), numbers a fixed width.
fn row_size(row: &[Value]) -> usize {
    fn size(v: &Value) -> usize {
        match v {
            Value::Null => 4,
            Value::Bool(_) => 5,
            Value::Number(_) => 12,
            Value::String(s) => s.len() + 2,
            Value::Array(a) => 2 + a.iter().map(|v| size(v) + 1).sum::<usize>(),
            Value::Object(o) => 2 + o.iter().map(|(k, v)| k.len() + 4 + size(v)).sum::<usize>(),
        }
    }
    2 + row.iter().map(|v| size(v) + 1).sum::<usize>()
}

fn base64(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn float(f: f64) -> Value {
    serde_json::Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(f.to_string()))
}

/// The strings of a URL that must never be shown: the whole URL and its secret parts
/// ([`url_secrets`]).
fn secrets_of(url: &str) -> Vec<String> {
    let mut out = vec![url.to_owned()];
    out.extend(url_secrets(url));
    out
}

/// The secret parts of a database URL: its password, and the value of a `password`
/// (or `pass`, `sslpassword`) query parameter, each as written and percent-decoded.
/// Empty for a URL without any (a SQLite path, a PostgreSQL URL with trust auth).
pub(crate) fn url_secrets(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(u) = url::Url::parse(url.trim()) else {
        return out;
    };
    let mut add = |raw: &str| {
        if raw.is_empty() {
            return;
        }
        out.push(raw.to_owned());
        if let Ok(decoded) = urlencoding_decode(raw)
            && decoded != raw
        {
            out.push(decoded);
        }
    };
    if let Some(p) = u.password() {
        add(p);
    }
    if let Some(query) = u.query() {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && ["password", "pass", "sslpassword"]
                    .iter()
                    .any(|k| key.eq_ignore_ascii_case(k))
            {
                add(value);
            }
        }
    }
    out
}

fn urlencoding_decode(s: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (
                (bytes[i + 1] as char).to_digit(16),
                (bytes[i + 2] as char).to_digit(16),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out)
}

/// Which database a URL names.
enum Target {
    Sqlite(PathBuf),
    Postgres(Box<tokio_postgres::Config>),
    Mysql(Box<mysql_async::Opts>),
}

fn parse_url(url: &str) -> Result<Target, Fail> {
    let url = url.trim();
    let bad = |why: String| {
        Fail::new(
            "not_configured",
            format!(
                "{SQL_DATABASE_URL_ENV} {why}; set it to sqlite://PATH, postgres://USER@HOST/DB or mysql://USER@HOST/DB"
            ),
        )
    };
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() || path.contains('?') || path.starts_with(':') {
            return Err(bad(
                "names no SQLite file (no `?` options, no `:memory:`)".into()
            ));
        }
        return Ok(Target::Sqlite(PathBuf::from(path)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return url
            .parse::<tokio_postgres::Config>()
            .map(|c| Target::Postgres(Box::new(c)))
            .map_err(|e| bad(format!("is not a valid PostgreSQL URL ({e})")));
    }
    if let Some(rest) = url
        .strip_prefix("mysql://")
        .or_else(|| url.strip_prefix("mariadb://"))
    {
        return mysql_async::Opts::from_url(&format!("mysql://{rest}"))
            .map(|o| Target::Mysql(Box::new(o)))
            .map_err(|e| bad(format!("is not a valid MySQL URL ({e})")));
    }
    Err(bad(
        "does not start with sqlite://, postgres:// or mysql://".into(),
    ))
}

/// The connections of one database URL.
enum Pool {
    Sqlite(sqlite::Pool),
    Postgres(Box<pg::Pool>),
    Mysql(mysql::Pool),
}

impl Pool {
    async fn run(&self, args: &SqlQueryArgs) -> Result<SqlResult, Fail> {
        match self {
            Pool::Sqlite(p) => p.run(args).await,
            Pool::Postgres(p) => p.run(args).await,
            Pool::Mysql(p) => p.run(args).await,
        }
    }
}

/// The most database URLs with pools at once; past it the oldest pool is let go.
const MAX_POOLS: usize = 16;

fn pool_for(url: &str) -> Result<Arc<Pool>, Fail> {
    /// Each URL's pool, oldest first.
    type Pools = Mutex<VecDeque<(String, Arc<Pool>)>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(VecDeque::new()));
    let mut pools = pools.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = pools.iter().find(|(u, _)| u == url) {
        return Ok(p.clone());
    }
    let pool = Arc::new(match parse_url(url)? {
        Target::Sqlite(path) => Pool::Sqlite(sqlite::Pool::new(path)),
        Target::Postgres(config) => Pool::Postgres(Box::new(pg::Pool::new(*config))),
        Target::Mysql(opts) => Pool::Mysql(mysql::Pool::new(*opts)),
    });
    if pools.len() >= MAX_POOLS {
        pools.pop_front();
    }
    pools.push_back((url.to_owned(), pool.clone()));
    Ok(pool)
}

/// Idle connections and the permits that cap how many exist.
struct Slots<C> {
    idle: Mutex<Vec<C>>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl<C> Slots<C> {
    fn new() -> Self {
        Slots {
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
        }
    }

    async fn permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Fail> {
        self.permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Fail::new("unavailable", "the connection pool is closed").retryable())
    }

    fn take_idle(&self) -> Option<C> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn put_back(&self, conn: C) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_CONNECTIONS {
            idle.push(conn);
        }
    }
}

/// A small cache of prepared statements of one connection, by text, oldest out first.
struct StatementCache<S> {
    entries: HashMap<String, S>,
    order: VecDeque<String>,
}

const STATEMENT_CACHE: usize = 64;

impl<S: Clone> StatementCache<S> {
    fn new() -> Self {
        StatementCache {
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get(&self, sql: &str) -> Option<S> {
        self.entries.get(sql).cloned()
    }

    fn insert(&mut self, sql: &str, s: S) {
        if self.entries.len() >= STATEMENT_CACHE
            && let Some(old) = self.order.pop_front()
        {
            self.entries.remove(&old);
        }
        if self.entries.insert(sql.to_owned(), s).is_none() {
            self.order.push_back(sql.to_owned());
        }
    }

    fn remove(&mut self, sql: &str) {
        if self.entries.remove(sql).is_some() {
            self.order.retain(|s| s != sql);
        }
    }
}

impl Fail {
    fn denied_function(name: &str) -> Self {
        Fail::write_refused(&format!(
            "`{name}` has effects that a read-only transaction does not stop or undo (server files, \
             locks, other sessions), so the statement was refused without running"
        ))
    }
}

/// The deadline of a statement started now.
fn deadline() -> Instant {
    Instant::now() + STATEMENT_TIMEOUT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_and_bad_ones_say_what_to_write() {
        assert!(matches!(
            parse_url("sqlite:///tmp/x.db"),
            Ok(Target::Sqlite(_))
        ));
        assert!(matches!(
            parse_url("postgres://u:pw@127.0.0.1:5432/db"),
            Ok(Target::Postgres(_))
        ));
        assert!(matches!(
            parse_url("mysql://root@127.0.0.1:3306/test"),
            Ok(Target::Mysql(_))
        ));
        for bad in [
            "sqlite://",
            "sqlite://:memory:",
            "sqlite:///x.db?mode=rwc",
            "oracle://x",
            "",
        ] {
            let Err(f) = parse_url(bad) else {
                panic!("{bad} was accepted")
            };
            assert!(f.message.contains(SQL_DATABASE_URL_ENV), "{}", f.message);
        }
    }

    #[test]
    fn secrets_cover_the_password_as_written_and_decoded() {
        let s = secrets_of("postgres://u:p%40ss@h/db");
        assert!(s.contains(&"p%40ss".to_owned()), "{s:?}");
        assert!(s.contains(&"p@ss".to_owned()), "{s:?}");
    }

    #[test]
    fn the_collector_caps_rows_and_bytes() {
        let mut c = Collector::new(2);
        assert!(c.push(vec![json!(1)]));
        assert!(c.push(vec![json!(2)]));
        assert!(!c.push(vec![json!(3)]));
        assert_eq!(c.truncated_by, Some("max_rows"));
        let mut c = Collector::new(1000);
        let big = "x".repeat(100 * 1024);
        assert!(c.push(vec![json!(big)]));
        assert!(c.push(vec![json!(big)]));
        assert!(!c.push(vec![json!(big)]));
        assert_eq!(c.truncated_by, Some("bytes"));
    }
}
