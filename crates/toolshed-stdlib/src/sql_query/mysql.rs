//! `sql_query` on MySQL and MariaDB: a `TRANSACTION READ ONLY` session, and each
//! statement inside a `START TRANSACTION READ ONLY` that is rolled back after it.
//!
//! The driver does not pipeline, so the transaction of the next call is begun in the
//! round trip that ends this one (`ROLLBACK; DO RELEASE_ALL_LOCKS(); START TRANSACTION
//! READ ONLY`), run after the answer is handed back and before the connection returns
//! to the pool. A pooled connection is always inside a fresh read-only transaction
//! that has read nothing yet (InnoDB takes its snapshot at the first read, so it is the
//! statement's own). Statements go through the binary protocol (prepared, cached by the
//! driver), which takes one statement at a time.

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Params, Value as My};
use serde_json::Value;

use super::{
    Collector, Fail, STATEMENT_TIMEOUT, Slots, SqlColumn, SqlQueryArgs, SqlResult, base64, float,
};

/// Ends a call's transaction and begins the next one's.
const RESET: &str = "ROLLBACK; DO RELEASE_ALL_LOCKS(); START TRANSACTION READ ONLY";

pub(super) struct Pool {
    opts: Opts,
    slots: std::sync::Arc<Slots<Conn>>,
}

impl Pool {
    pub(super) fn new(opts: Opts) -> Self {
        let opts = OptsBuilder::from_opts(opts)
            .stmt_cache_size(super::STATEMENT_CACHE)
            .into();
        Pool {
            opts,
            slots: std::sync::Arc::new(Slots::new()),
        }
    }

    async fn connect(&self) -> Result<Conn, Fail> {
        let unavailable = |e: mysql_async::Error| {
            Fail::new(
                "unavailable",
                format!("cannot connect to MySQL: {}", my_text(&e)),
            )
            .retryable()
        };
        let mut conn = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            Conn::new(self.opts.clone()),
        )
        .await
        .map_err(|_| Fail::new("unavailable", "cannot connect to MySQL: timed out").retryable())?
        .map_err(unavailable)?;
        let (version, sql_mode): (String, String) = conn
            .query_first("SELECT VERSION(), @@SESSION.sql_mode")
            .await
            .map_err(unavailable)?
            .unwrap_or_default();
        let timeout = if version.contains("MariaDB") {
            format!(
                "SET SESSION max_statement_time = {}",
                STATEMENT_TIMEOUT.as_secs()
            )
        } else {
            format!(
                "SET SESSION max_execution_time = {}",
                STATEMENT_TIMEOUT.as_millis()
            )
        };
        conn.query_drop(format!(
            "SET SESSION TRANSACTION READ ONLY; {timeout}; SET SESSION sql_mode = '{}'; \
             START TRANSACTION READ ONLY",
            tokenizer_sql_mode(&sql_mode)
        ))
        .await
        .map_err(unavailable)?;
        Ok(conn)
    }

    pub(super) async fn run(&self, args: &SqlQueryArgs) -> Result<SqlResult, Fail> {
        let permit = self.slots.permit().await?;
        let idle = self.slots.take_idle();
        let reused = idle.is_some();
        let mut conn = match idle {
            Some(c) => c,
            None => self.connect().await?,
        };
        let timed = tokio::time::timeout(
            STATEMENT_TIMEOUT + std::time::Duration::from_secs(2),
            run(&mut conn, args),
        )
        .await;
        let outcome = match timed {
            Ok(r) => r,
            Err(_) => {
                // The server did not end it in time: kill it from another connection,
                // and never reuse this one.
                let id = conn.id();
                let opts = self.opts.clone();
                tokio::spawn(async move {
                    if let Ok(mut killer) = Conn::new(opts).await {
                        let _ = killer.query_drop(format!("KILL QUERY {id}")).await;
                        let _ = killer.disconnect().await;
                    }
                });
                return Err(Fail::timeout());
            }
        };
        if let Err(f) = &outcome
            && f.broken
        {
            let mut f = Fail::new(f.kind, f.message.clone()).broken();
            f.reused = reused;
            return Err(f);
        }
        // End this transaction and begin the next off the caller's path; the permit
        // goes with it, so the pool never holds more than its connections.
        let slots = self.slots.clone();
        tokio::spawn(async move {
            if conn.query_drop(RESET).await.is_ok() {
                slots.put_back(conn);
            }
            drop(permit);
        });
        outcome
    }
}

/// The modes that change how a statement is tokenized: `NO_BACKSLASH_ESCAPES` (`\` no
/// longer escapes in a string), `ANSI_QUOTES` (`"…"` is an identifier), and the
/// combinations that include it.
const TOKENIZING_MODES: &[&str] = &[
    "NO_BACKSLASH_ESCAPES",
    "ANSI_QUOTES",
    "ANSI",
    "DB2",
    "MAXDB",
    "MSSQL",
    "ORACLE",
    "POSTGRESQL",
];

/// The session's `sql_mode` without [`TOKENIZING_MODES`], so the server reads strings
/// as the denylist's tokenizer does. A mode name is letters, digits and `_`; anything
/// else is left out, so the result can be written into the statement.
fn tokenizer_sql_mode(mode: &str) -> String {
    mode.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .filter(|m| !TOKENIZING_MODES.iter().any(|t| m.eq_ignore_ascii_case(t)))
        .collect::<Vec<_>>()
        .join(",")
}

async fn run(conn: &mut Conn, args: &SqlQueryArgs) -> Result<SqlResult, Fail> {
    let sql = args.query.as_str();
    super::denied::check(sql, super::denied::Dialect::Mysql)?;
    let stmt = conn.prep(sql).await.map_err(|e| failed(&e, sql))?;
    let columns = stmt.columns();
    if columns.is_empty() {
        return Err(Fail::not_a_query(sql));
    }
    if usize::from(stmt.num_params()) != args.params.len() {
        return Err(Fail::params(
            usize::from(stmt.num_params()),
            args.params.len(),
        ));
    }
    let params: Vec<My> = args.params.iter().map(param).collect();
    let params = if params.is_empty() {
        Params::Empty
    } else {
        Params::Positional(params)
    };
    let mut result = conn
        .exec_iter(&stmt, params)
        .await
        .map_err(|e| failed(&e, sql))?;
    let out_columns: Vec<SqlColumn> = columns
        .iter()
        .map(|c| SqlColumn {
            name: c.name_str().into_owned(),
            type_name: type_name(c.column_type(), c.character_set(), c.flags()),
        })
        .collect();
    let mut collector = Collector::new(args.max_rows);
    while let Some(row) = result.next().await.map_err(|e| failed(&e, sql))? {
        let mut values = Vec::with_capacity(columns.len());
        for (i, c) in columns.iter().enumerate() {
            values.push(match row.as_ref(i) {
                None => Value::Null,
                Some(v) => value(v, c.column_type(), c.character_set()),
            });
        }
        if !collector.push(values) {
            break;
        }
    }
    // The rest of a cut-short result must be read before the connection is used again.
    result.drop_result().await.map_err(|e| failed(&e, sql))?;
    Ok(collector.finish("mysql", out_columns))
}

fn param(v: &Value) -> My {
    match v {
        Value::Null => My::NULL,
        Value::Bool(b) => My::Int(i64::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => My::Int(i),
            (None, Some(u), _) => My::UInt(u),
            (None, None, Some(f)) => My::Double(f),
            _ => My::Bytes(n.to_string().into_bytes()),
        },
        Value::String(s) => My::Bytes(s.clone().into_bytes()),
        // Refused by the argument check before any database work.
        other => My::Bytes(other.to_string().into_bytes()),
    }
}

/// The collation id of binary strings (`BINARY`, `VARBINARY`, `BLOB`).
const BINARY: u16 = 63;

fn value(v: &My, ty: ColumnType, charset: u16) -> Value {
    match v {
        My::NULL => Value::Null,
        My::Int(i) => Value::from(*i),
        My::UInt(u) => Value::from(*u),
        My::Float(f) => float(f64::from(*f)),
        My::Double(f) => float(*f),
        My::Bytes(b) => match ty {
            ColumnType::MYSQL_TYPE_NEWDECIMAL | ColumnType::MYSQL_TYPE_DECIMAL => {
                Value::String(String::from_utf8_lossy(b).into_owned())
            }
            ColumnType::MYSQL_TYPE_JSON => serde_json::from_slice(b)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned())),
            ColumnType::MYSQL_TYPE_BIT => {
                Value::from(b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
            }
            _ if charset == BINARY => base64(b),
            _ => match std::str::from_utf8(b) {
                Ok(s) => Value::String(s.to_owned()),
                Err(_) => base64(b),
            },
        },
        My::Date(y, mo, d, h, mi, s, us) => {
            if matches!(
                ty,
                ColumnType::MYSQL_TYPE_DATE | ColumnType::MYSQL_TYPE_NEWDATE
            ) {
                Value::String(format!("{y:04}-{mo:02}-{d:02}"))
            } else if *us > 0 {
                Value::String(format!(
                    "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}"
                ))
            } else {
                Value::String(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}"))
            }
        }
        My::Time(neg, days, h, mi, s, us) => {
            let hours = u64::from(*days) * 24 + u64::from(*h);
            let sign = if *neg { "-" } else { "" };
            if *us > 0 {
                Value::String(format!("{sign}{hours:02}:{mi:02}:{s:02}.{us:06}"))
            } else {
                Value::String(format!("{sign}{hours:02}:{mi:02}:{s:02}"))
            }
        }
    }
}

fn type_name(ty: ColumnType, charset: u16, flags: ColumnFlags) -> String {
    let name = format!("{ty:?}");
    let mut name = name
        .trim_start_matches("MYSQL_TYPE_")
        .to_ascii_lowercase()
        .replace("var_string", "varchar")
        .replace("newdecimal", "decimal")
        .replace("long", "int")
        .replace("intint", "bigint");
    if charset == BINARY {
        name = match name.as_str() {
            "varchar" => "varbinary".into(),
            "string" => "binary".into(),
            other => other.to_owned(),
        };
    } else if name == "string" {
        name = "char".into();
    }
    if flags.contains(ColumnFlags::UNSIGNED_FLAG) {
        name.push_str(" unsigned");
    }
    name
}

/// A driver error's text, never the connection's options.
fn my_text(e: &mysql_async::Error) -> String {
    match e {
        mysql_async::Error::Server(s) => s.message.clone(),
        mysql_async::Error::Url(_) => "the URL is not valid".into(),
        other => other.to_string(),
    }
}

fn failed(e: &mysql_async::Error, sql: &str) -> Fail {
    let text = my_text(e);
    match e {
        mysql_async::Error::Server(s) => match s.code {
            // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
            1792 => Fail::write_refused(&format!("the database refused a write ({text})")),
            // MariaDB's ER_STATEMENT_TIMEOUT, MySQL's ER_QUERY_TIMEOUT, a killed query.
            1969 | 3024 | 1317 => Fail::timeout(),
            // Access denied for the table, the database or a command.
            1044 | 1142 | 1143 | 1227 | 1370 => Fail::new(
                "not_allowed",
                format!("the database role may not do this: {text}"),
            ),
            1064 if sql.trim().trim_end_matches(';').contains(';') => Fail::new(
                "multiple_statements",
                format!(
                    "sql_query runs one statement per call; the database could not read the query as one statement ({text}), so none was run"
                ),
            ),
            _ => Fail::new(
                "refused",
                format!("the database refused the statement: {text}"),
            ),
        },
        _ => Fail::new(
            "unavailable",
            format!("the MySQL connection failed: {text}"),
        )
        .broken(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_mode_drops_what_changes_tokenizing() {
        assert_eq!(
            tokenizer_sql_mode(
                "REAL_AS_FLOAT,PIPES_AS_CONCAT,ANSI_QUOTES,IGNORE_SPACE,ONLY_FULL_GROUP_BY,ANSI,\
                 NO_BACKSLASH_ESCAPES,STRICT_TRANS_TABLES"
            ),
            "REAL_AS_FLOAT,PIPES_AS_CONCAT,IGNORE_SPACE,ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES"
        );
        assert_eq!(tokenizer_sql_mode(""), "");
        assert_eq!(
            tokenizer_sql_mode("STRICT_ALL_TABLES,x'y"),
            "STRICT_ALL_TABLES"
        );
    }
}
