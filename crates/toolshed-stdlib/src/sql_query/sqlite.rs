//! `sql_query` on SQLite: a read-only open, `query_only`, no attached databases, and an
//! authorizer that lets only reads through.
//!
//! rusqlite is synchronous. A statement first runs on the caller's task with a budget
//! of [`INLINE_BUDGET`] of VM work (most lookups take microseconds, and a thread hop
//! would cost more than the query); one that needs longer is interrupted and run
//! again, from the start, on a blocking thread under the full statement timeout.
//! Running it twice is harmless: it only reads.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use super::{Collector, Fail, Slots, SqlColumn, SqlQueryArgs, SqlResult, base64, float};

/// How long a statement may run on the caller's task before it moves to a thread.
pub(super) const INLINE_BUDGET: Duration = Duration::from_micros(500);

/// Pragmas that only read the schema or settings; any other pragma is refused.
const READ_PRAGMAS: &[&str] = &[
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "collation_list",
    "function_list",
    "pragma_list",
    "module_list",
    "database_list",
];
/// Pragmas that read a setting when given no value (and would change it with one).
const SETTING_PRAGMAS: &[&str] = &[
    "user_version",
    "schema_version",
    "application_id",
    "page_count",
    "page_size",
    "encoding",
    "foreign_keys",
    "journal_mode",
    "freelist_count",
];

pub(super) struct Pool {
    path: PathBuf,
    slots: Slots<Lite>,
}

/// An open connection and the instant its progress handler stops the VM at, in
/// nanoseconds since [`start`]: set per statement without re-registering the handler.
struct Lite {
    conn: Connection,
    stop: Arc<AtomicU64>,
}

/// The clock the progress handlers read.
fn start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn nanos_at(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(start()).as_nanos()).unwrap_or(u64::MAX)
}

enum Ran {
    Done(Result<SqlResult, Fail>),
    /// The inline budget ran out before the statement finished.
    OverBudget,
}

impl Pool {
    pub(super) fn new(path: PathBuf) -> Self {
        Pool {
            path,
            slots: Slots::new(),
        }
    }

    pub(super) async fn run(&self, args: &SqlQueryArgs) -> Result<SqlResult, Fail> {
        super::denied::check(&args.query, super::denied::Dialect::Sqlite)?;
        let _permit = self.slots.permit().await?;
        let idle = self.slots.take_idle();
        let reused = idle.is_some();
        let mut conn = match idle {
            Some(c) => c,
            None => {
                let path = self.path.clone();
                tokio::task::spawn_blocking(move || open(&path))
                    .await
                    .map_err(|e| {
                        Fail::new("unavailable", format!("the open was interrupted: {e}"))
                    })??
            }
        };
        let hard = super::deadline();
        let budget = Instant::now() + INLINE_BUDGET;
        let (conn, result) = match run(&mut conn, args, budget, hard) {
            Ran::Done(r) => (conn, r),
            Ran::OverBudget => {
                let args = args.clone();
                tokio::task::spawn_blocking(move || {
                    let r = match run(&mut conn, &args, hard, hard) {
                        Ran::Done(r) => r,
                        Ran::OverBudget => Err(Fail::timeout()),
                    };
                    (conn, r)
                })
                .await
                .map_err(|e| {
                    Fail::new("unavailable", format!("the statement was interrupted: {e}"))
                })?
            }
        };
        match result {
            Err(mut f) if f.broken => {
                f.reused = reused;
                Err(f)
            }
            other => {
                self.slots.put_back(conn);
                other
            }
        }
    }
}

fn open(path: &std::path::Path) -> Result<Lite, Fail> {
    let cannot = |e: rusqlite::Error| {
        Fail::new(
            "unavailable",
            format!(
                "cannot open the SQLite database {} read-only: {e}; check SQL_DATABASE_URL names an existing file this process may read",
                path.display()
            ),
        )
    };
    // No SQLITE_OPEN_URI: a file name cannot smuggle in `?mode=rw`.
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(cannot)?;
    conn.pragma_update(None, "query_only", true)
        .map_err(cannot)?;
    conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_ATTACHED, 0)
        .map_err(cannot)?;
    conn.busy_timeout(Duration::from_secs(2)).map_err(cannot)?;
    conn.set_prepared_statement_cache_capacity(super::STATEMENT_CACHE);
    conn.authorizer(Some(authorize)).map_err(cannot)?;
    // The VM checks the clock every 1000 instructions: cheap, and fine-grained enough.
    let stop = Arc::new(AtomicU64::new(0));
    let seen = stop.clone();
    conn.progress_handler(
        1000,
        Some(move || nanos_at(Instant::now()) >= seen.load(Ordering::Relaxed)),
    )
    .map_err(cannot)?;
    Ok(Lite { conn, stop })
}

/// What a statement may do: read tables, call functions, recurse, and read the schema
/// through a few pragmas. Everything else (writes, DDL, ATTACH, transactions,
/// savepoints, setting pragmas) is denied while the statement is prepared.
fn authorize(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => {
            Authorization::Allow
        }
        AuthAction::Function { function_name } => {
            if function_name.eq_ignore_ascii_case("load_extension") {
                Authorization::Deny
            } else {
                Authorization::Allow
            }
        }
        AuthAction::Pragma {
            pragma_name,
            pragma_value,
        } => {
            let name = pragma_name.to_ascii_lowercase();
            if READ_PRAGMAS.contains(&name.as_str())
                || (pragma_value.is_none() && SETTING_PRAGMAS.contains(&name.as_str()))
            {
                Authorization::Allow
            } else {
                Authorization::Deny
            }
        }
        _ => Authorization::Deny,
    }
}

fn run(lite: &mut Lite, args: &SqlQueryArgs, budget: Instant, hard: Instant) -> Ran {
    lite.stop
        .store(nanos_at(budget.min(hard)), Ordering::Relaxed);
    let result = execute(&lite.conn, args);
    match result {
        Err(e) if is_interrupt(&e) => {
            if Instant::now() >= hard {
                Ran::Done(Err(Fail::timeout()))
            } else {
                Ran::OverBudget
            }
        }
        Err(e) => Ran::Done(Err(failed(e, &args.query))),
        Ok(Err(f)) => Ran::Done(Err(f)),
        Ok(Ok(r)) => Ran::Done(Ok(r)),
    }
}

fn is_interrupt(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::OperationInterrupted)
}

/// Prepare, check, bind and read. The outer error is SQLite's, the inner one ours.
fn execute(
    conn: &Connection,
    args: &SqlQueryArgs,
) -> Result<Result<SqlResult, Fail>, rusqlite::Error> {
    let mut stmt = conn.prepare_cached(&args.query)?;
    if stmt.column_count() == 0 {
        return Ok(Err(Fail::not_a_query(&args.query)));
    }
    if !stmt.readonly() {
        return Ok(Err(Fail::write_refused(&format!(
            "`{}` would write to the database, so it was refused without running",
            super::first_words(&args.query)
        ))));
    }
    if stmt.parameter_count() != args.params.len() {
        return Ok(Err(Fail::params(stmt.parameter_count(), args.params.len())));
    }
    let mut columns: Vec<SqlColumn> = stmt
        .columns()
        .map(|c| SqlColumn {
            name: c.name().to_owned(),
            type_name: c.decl_type().unwrap_or("").to_ascii_lowercase(),
        })
        .collect();
    for (i, p) in args.params.iter().enumerate() {
        match p {
            Value::Null => stmt.raw_bind_parameter(i + 1, rusqlite::types::Null)?,
            Value::Bool(b) => stmt.raw_bind_parameter(i + 1, i64::from(*b))?,
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(v), _) => stmt.raw_bind_parameter(i + 1, v)?,
                (None, Some(v)) => stmt.raw_bind_parameter(i + 1, v)?,
                (None, None) => stmt.raw_bind_parameter(i + 1, n.to_string())?,
            },
            Value::String(s) => stmt.raw_bind_parameter(i + 1, s.as_str())?,
            // Refused by the argument check before any database work.
            Value::Array(_) | Value::Object(_) => {
                return Ok(Err(Fail::new(
                    "invalid_params",
                    format!("params[{i}] is not a scalar"),
                )));
            }
        }
    }
    let n = columns.len();
    let mut collector = Collector::new(args.max_rows);
    let mut rows = stmt.raw_query();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(n);
        for (i, column) in columns.iter_mut().enumerate() {
            let v = row.get_ref(i)?;
            if column.type_name.is_empty() && !matches!(v, ValueRef::Null) {
                // An expression has no declared type: name the type of its first value.
                column.type_name = match v {
                    ValueRef::Integer(_) => "integer",
                    ValueRef::Real(_) => "real",
                    ValueRef::Text(_) => "text",
                    ValueRef::Blob(_) => "blob",
                    ValueRef::Null => "",
                }
                .to_owned();
            }
            values.push(match v {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(i) => Value::from(i),
                ValueRef::Real(f) => float(f),
                ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => base64(b),
            });
        }
        if !collector.push(values) {
            break;
        }
    }
    Ok(Ok(collector.finish("sqlite", columns)))
}

fn failed(e: rusqlite::Error, sql: &str) -> Fail {
    use rusqlite::ErrorCode as C;
    match &e {
        rusqlite::Error::MultipleStatement => Fail::new(
            "multiple_statements",
            "sql_query runs one statement per call; the query has more than one (after a `;`), so none was run",
        ),
        rusqlite::Error::SqliteFailure(f, msg) => {
            let msg = msg.clone().unwrap_or_else(|| f.to_string());
            match f.code {
                C::AuthorizationForStatementDenied => Fail::write_refused(&format!(
                    "`{}` is not a read (SQLite: {msg}); only SELECT, WITH … SELECT, VALUES and schema-reading PRAGMAs run",
                    super::first_words(sql)
                )),
                C::ReadOnly => Fail::write_refused(&format!("SQLite refused a write ({msg})")),
                C::DatabaseBusy | C::DatabaseLocked => {
                    Fail::new("busy", format!("the database is busy ({msg}); try again"))
                        .retryable()
                }
                C::CannotOpen | C::NotADatabase | C::DatabaseCorrupt | C::SystemIoFailure => {
                    Fail::new("unavailable", format!("SQLite failed: {msg}")).broken()
                }
                _ => Fail::new("refused", format!("SQLite refused the statement: {msg}")),
            }
        }
        _ => Fail::new("refused", format!("SQLite refused the statement: {e}")),
    }
}
