//! `sql_query` on the three real databases: SQLite (a temp file), the local PostgreSQL
//! (`TOOLSHED_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`)
//! and the local MariaDB (`TOOLSHED_TEST_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`). Every test makes its own schema, database or
//! file, so they run in parallel. Every write attempt is checked from a second
//! connection: the data is as it was.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use mysql_async::prelude::Queryable;
use serde_json::{Value, json};
use toolshed_core::{ErrorCode, Pipeline, RunContext, ToolCall, ToolError, ToolSet};

fn pg_url() -> String {
    std::env::var("TOOLSHED_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn my_url() -> String {
    std::env::var("TOOLSHED_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// A name no other test (or run) uses.
fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn call(url: &str, args: Value) -> Result<Value, ToolError> {
    let pipeline =
        Pipeline::builder(ToolSet::from_tools([toolshed_stdlib::sql_query_tool()]).unwrap())
            .build();
    let ctx = RunContext::builder()
        .env(BTreeMap::from([(
            "SQL_DATABASE_URL".to_owned(),
            url.to_owned(),
        )]))
        .build();
    pipeline
        .call(&ctx, ToolCall::new("sql_query", args))
        .await
        .result
}

fn kind(e: &ToolError) -> String {
    e.details
        .as_ref()
        .and_then(|d| d["kind"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// A write attempt: refused, saying sql_query is read-only (or, for a statement the
/// database cannot even read as one, that one statement runs per call).
fn assert_refused(r: Result<Value, ToolError>, sql: &str) {
    let e = match r {
        Ok(v) => panic!("`{sql}` was not refused: {v}"),
        Err(e) => e,
    };
    assert_eq!(e.code, ErrorCode::HandlerError, "{sql}: {e}");
    let k = kind(&e);
    assert!(
        [
            "write_refused",
            "not_a_query",
            "multiple_statements",
            "refused"
        ]
        .contains(&k.as_str()),
        "{sql}: kind {k}: {e}"
    );
    if k != "refused" {
        assert!(
            e.message.contains("read-only") || e.message.contains("one statement per call"),
            "{sql}: {}",
            e.message
        );
    }
    assert_eq!(e.details.as_ref().unwrap()["retryable"], false, "{sql}");
}

// ---------------------------------------------------------------- SQLite

struct Lite {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    url: String,
}

fn lite() -> Lite {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shop.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, data BLOB);
         INSERT INTO items VALUES (1, 'apple', 0.5, x'0102'), (2, 'pear', 0.75, NULL), (3, 'plum', NULL, NULL);",
    )
    .unwrap();
    let url = format!("sqlite://{}", path.display());
    Lite {
        _dir: dir,
        path,
        url,
    }
}

fn lite_snapshot(path: &std::path::Path) -> (Vec<(i64, String)>, Vec<String>) {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut s = c.prepare("SELECT id, name FROM items ORDER BY id").unwrap();
    let rows = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut s = c
        .prepare("SELECT name FROM sqlite_master ORDER BY name")
        .unwrap();
    let names = s
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (rows, names)
}

#[tokio::test]
async fn sqlite_returns_columns_types_and_rows_with_params_bound() {
    let db = lite();
    let out = call(
        &db.url,
        json!({"query": "SELECT id, name, price, data, 1 + 1 AS two FROM items WHERE price > ? ORDER BY id", "params": [0.1]}),
    )
    .await
    .unwrap();
    assert_eq!(out["database"], "sqlite");
    assert_eq!(
        out["columns"],
        json!([
            {"name": "id", "type": "integer"},
            {"name": "name", "type": "text"},
            {"name": "price", "type": "real"},
            {"name": "data", "type": "blob"},
            {"name": "two", "type": "integer"}
        ])
    );
    assert_eq!(
        out["rows"],
        json!([[1, "apple", 0.5, "AQI=", 2], [2, "pear", 0.75, null, 2]])
    );
    assert_eq!(out["row_count"], 2);
    assert_eq!(out["truncated"], false);

    // A param is a value, never SQL.
    let out = call(
        &db.url,
        json!({"query": "SELECT id FROM items WHERE name = ?", "params": ["x' OR '1'='1"]}),
    )
    .await
    .unwrap();
    assert_eq!(out["rows"], json!([]));

    // Schema-reading pragmas are reads.
    let out = call(&db.url, json!({"query": "PRAGMA table_info(items)"}))
        .await
        .unwrap();
    assert_eq!(out["row_count"], 4);
}

#[tokio::test]
async fn sqlite_caps_rows_and_bytes() {
    let db = lite();
    let out = call(
        &db.url,
        json!({"query": "SELECT id FROM items ORDER BY id", "max_rows": 2}),
    )
    .await
    .unwrap();
    assert_eq!(out["rows"], json!([[1], [2]]));
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncated_by"], "max_rows");
    let out = call(
        &db.url,
        json!({"query": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) SELECT i, printf('%.*c', 10000, 'x') FROM n", "max_rows": 1000}),
    )
    .await
    .unwrap();
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncated_by"], "bytes");
    assert!(
        out["row_count"].as_u64().unwrap() < 30,
        "{}",
        out["row_count"]
    );
}

#[tokio::test]
async fn sqlite_refuses_every_write_and_leaves_the_data_unchanged() {
    let db = lite();
    let before = lite_snapshot(&db.path);
    let other = db.path.with_file_name("other.db");
    let copy = db.path.with_file_name("copy.db");
    for sql in [
        "INSERT INTO items VALUES (9, 'fig', 1.0, NULL)".to_owned(),
        "INSERT INTO items VALUES (9, 'fig', 1.0, NULL) RETURNING id".to_owned(),
        "UPDATE items SET name = 'x'".to_owned(),
        "UPDATE items SET name = 'x' RETURNING id".to_owned(),
        "DELETE FROM items".to_owned(),
        "DELETE FROM items RETURNING *".to_owned(),
        "DROP TABLE items".to_owned(),
        "CREATE TABLE evil (id INTEGER)".to_owned(),
        "ALTER TABLE items ADD COLUMN z INTEGER".to_owned(),
        "CREATE TEMP TABLE t AS SELECT * FROM items".to_owned(),
        "SELECT * FROM items; DROP TABLE items".to_owned(),
        "SELECT 1; DELETE FROM items".to_owned(),
        "WITH d AS (DELETE FROM items RETURNING *) SELECT * FROM d".to_owned(),
        "COMMIT; DELETE FROM items".to_owned(),
        "BEGIN IMMEDIATE".to_owned(),
        "SET TRANSACTION READ WRITE".to_owned(),
        "PRAGMA query_only = 0".to_owned(),
        "PRAGMA journal_mode = DELETE".to_owned(),
        "PRAGMA user_version = 7".to_owned(),
        format!("ATTACH DATABASE '{}' AS o", other.display()),
        format!("VACUUM INTO '{}'", copy.display()),
        "SELECT load_extension('/tmp/evil.so')".to_owned(),
        "REINDEX items".to_owned(),
        "ANALYZE".to_owned(),
    ] {
        let r = call(&db.url, json!({ "query": sql })).await;
        assert_refused(r, &sql);
        assert_eq!(lite_snapshot(&db.path), before, "after {sql}");
    }
    assert!(!other.exists(), "ATTACH created a file");
    assert!(!copy.exists(), "VACUUM INTO wrote a file");
}

#[tokio::test]
async fn sqlite_times_out_a_runaway_statement() {
    let db = lite();
    let e = call(
        &db.url,
        json!({"query": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"}),
    )
    .await
    .unwrap_err();
    assert_eq!(kind(&e), "timeout", "{e}");
    // The pool is still usable afterwards.
    assert!(call(&db.url, json!({"query": "SELECT 1"})).await.is_ok());
}

#[tokio::test]
async fn sqlite_bad_inputs_are_clear_errors() {
    let db = lite();
    for (args, code) in [
        (json!({}), ErrorCode::InvalidArgs),
        (json!({"query": ""}), ErrorCode::InvalidArgs),
        (
            json!({"query": "SELECT 1", "max_rows": 0}),
            ErrorCode::InvalidArgs,
        ),
        (
            json!({"query": "SELECT 1", "max_rows": 1001}),
            ErrorCode::InvalidArgs,
        ),
        (
            json!({"query": "SELECT ?", "params": [[1]]}),
            ErrorCode::InvalidArgs,
        ),
        (
            json!({"query": "SELECT ?", "params": [{"a": 1}]}),
            ErrorCode::InvalidArgs,
        ),
        (
            json!({"query": "SELECT 1", "limit": 3}),
            ErrorCode::InvalidArgs,
        ),
        (json!({"query": "SELECT 1\u{0}"}), ErrorCode::InvalidArgs),
    ] {
        let e = call(&db.url, args.clone()).await.unwrap_err();
        assert_eq!(e.code, code, "{args}: {e}");
    }
    let e = call(&db.url, json!({"query": "SELECT ?, ?", "params": [1]}))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "invalid_params", "{e}");
    let e = call(&db.url, json!({"query": "SELEKT 1"}))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "refused", "{e}");
    assert!(e.message.contains("syntax error"), "{e}");
    let e = call(&db.url, json!({"query": "SELECT * FROM nope"}))
        .await
        .unwrap_err();
    assert!(e.message.contains("no such table"), "{e}");
    // A file that does not exist is never created.
    let missing = db.path.with_file_name("missing.db");
    let e = call(
        &format!("sqlite://{}", missing.display()),
        json!({"query": "SELECT 1"}),
    )
    .await
    .unwrap_err();
    assert_eq!(kind(&e), "unavailable", "{e}");
    assert!(!missing.exists());
    for bad in ["sqlite://", "oracle://x", "sqlite://x.db?mode=rwc"] {
        let e = call(bad, json!({"query": "SELECT 1"})).await.unwrap_err();
        assert_eq!(kind(&e), "not_configured", "{bad}: {e}");
    }
}

// ---------------------------------------------------------------- PostgreSQL

async fn pg_admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL at TOOLSHED_TEST_POSTGRES_URL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A schema of its own with a table and a sequence.
async fn pg_schema() -> (tokio_postgres::Client, String) {
    let admin = pg_admin().await;
    let schema = unique("sq");
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.items (id int PRIMARY KEY, name text NOT NULL, price numeric(10,2), tags text[], meta jsonb, at timestamptz, day date, raw bytea, ok bool, f float8);
             INSERT INTO {schema}.items VALUES
               (1, 'apple', 0.50, '{{red,green}}', '{{\"k\": 1}}', '2026-01-31 12:00:00+00', '2026-01-31', '\\x0102', true, 1.5),
               (2, 'pear', 12345678.75, NULL, NULL, NULL, NULL, NULL, false, NULL),
               (3, 'plum', NULL, '{{}}', '[]', NULL, NULL, NULL, NULL, NULL);
             CREATE SEQUENCE {schema}.seq;"
        ))
        .await
        .unwrap();
    (admin, schema)
}

async fn pg_snapshot(admin: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    let mut out = Vec::new();
    for r in admin
        .query(
            &format!("SELECT id::text || ':' || name FROM {schema}.items ORDER BY id"),
            &[],
        )
        .await
        .unwrap()
    {
        out.push(r.get::<_, String>(0));
    }
    for r in admin
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap()
    {
        out.push(format!("table {}", r.get::<_, String>(0)));
    }
    let seq: i64 = admin
        .query_one(&format!("SELECT last_value FROM {schema}.seq"), &[])
        .await
        .unwrap()
        .get(0);
    let called: bool = admin
        .query_one(&format!("SELECT is_called FROM {schema}.seq"), &[])
        .await
        .unwrap()
        .get(0);
    out.push(format!("seq {seq} {called}"));
    out
}

#[tokio::test]
async fn postgres_returns_columns_types_and_rows_with_params_bound() {
    let (admin, s) = pg_schema().await;
    let url = pg_url();
    let out = call(
        &url,
        json!({"query": format!("SELECT id, name, price, tags, meta, at, day, raw, ok, f FROM {s}.items WHERE id = $1"), "params": [1]}),
    )
    .await
    .unwrap();
    assert_eq!(out["database"], "postgres");
    let types: Vec<&str> = out["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "int4",
            "text",
            "numeric",
            "_text",
            "jsonb",
            "timestamptz",
            "date",
            "bytea",
            "bool",
            "float8"
        ]
    );
    assert_eq!(
        out["rows"],
        json!([[1, "apple", "0.50", ["red", "green"], {"k": 1}, "2026-01-31T12:00:00Z", "2026-01-31", "AQI=", true, 1.5]])
    );
    // Numeric, text and jsonb params; an injection attempt is only a value.
    let out = call(
        &url,
        json!({"query": format!("SELECT name FROM {s}.items WHERE price > $1 AND name <> $2 ORDER BY id"), "params": ["1.5", "x' OR '1'='1"]}),
    )
    .await
    .unwrap();
    assert_eq!(out["rows"], json!([["pear"]]));
    assert_eq!(
        call(
            &url,
            json!({"query": format!("SELECT price FROM {s}.items WHERE id = 2")})
        )
        .await
        .unwrap()["rows"],
        json!([["12345678.75"]])
    );
    let out = call(
        &url,
        json!({"query": format!("SELECT id FROM {s}.items ORDER BY id"), "max_rows": 2}),
    )
    .await
    .unwrap();
    assert_eq!(out["rows"], json!([[1], [2]]));
    assert_eq!(out["truncated_by"], "max_rows");
    // A type sql_query does not read is refused before running, with the cast to write.
    let e = call(&url, json!({"query": "SELECT '127.0.0.1'::inet AS addr"}))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "unsupported_type", "{e}");
    assert!(e.message.contains("addr::text"), "{e}");
    let e = call(
        &url,
        json!({"query": "SELECT $1::int", "params": ["seven"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(kind(&e), "invalid_params", "{e}");
    admin
        .batch_execute(&format!("DROP SCHEMA {s} CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_refuses_every_write_and_leaves_the_data_unchanged() {
    let (admin, s) = pg_schema().await;
    let url = pg_url();
    let before = pg_snapshot(&admin, &s).await;
    let objects: i64 = admin
        .query_one("SELECT count(*) FROM pg_largeobject_metadata", &[])
        .await
        .unwrap()
        .get(0);
    let lock_key: i64 = 7_000_000 + i64::from(std::process::id() % 1_000_000);
    let copy = std::env::temp_dir().join(format!("{s}.copy"));
    for sql in [
        format!("INSERT INTO {s}.items (id, name) VALUES (9, 'fig')"),
        format!("INSERT INTO {s}.items (id, name) VALUES (9, 'fig') RETURNING id"),
        format!("UPDATE {s}.items SET name = 'x'"),
        format!("UPDATE {s}.items SET name = 'x' RETURNING id"),
        format!("DELETE FROM {s}.items"),
        format!("DELETE FROM {s}.items RETURNING *"),
        format!("DROP TABLE {s}.items"),
        format!("CREATE TABLE {s}.evil (id int)"),
        format!("ALTER TABLE {s}.items ADD COLUMN z int"),
        format!("TRUNCATE {s}.items"),
        format!("SELECT * FROM {s}.items; DROP TABLE {s}.items"),
        format!("WITH d AS (DELETE FROM {s}.items RETURNING *) SELECT * FROM d"),
        format!("WITH u AS (UPDATE {s}.items SET name = 'x' RETURNING id) SELECT count(*) FROM u"),
        format!("COMMIT; DELETE FROM {s}.items"),
        "COMMIT".to_owned(),
        "SET TRANSACTION READ WRITE".to_owned(),
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE".to_owned(),
        "SELECT set_config('default_transaction_read_only', 'off', false)".to_owned(),
        format!("SELECT nextval('{s}.seq')"),
        format!("SELECT setval('{s}.seq', 100)"),
        "SELECT lo_import('/etc/hostname')".to_owned(),
        "SELECT pg_catalog.lo_export(1, '/tmp/x')".to_owned(),
        format!("SELECT pg_advisory_lock({lock_key})"),
        format!("SELECT pg_try_advisory_lock({lock_key})"),
        "SELECT pg_read_file('/etc/hostname')".to_owned(),
        format!("COPY {s}.items TO '{}'", copy.display()),
        format!("COPY (SELECT * FROM {s}.items) TO STDOUT"),
        format!("EXPLAIN ANALYZE DELETE FROM {s}.items"),
        format!("SELECT * FROM {s}.items FOR UPDATE"),
        format!("CREATE TEMP TABLE t AS SELECT * FROM {s}.items"),
    ] {
        let r = call(&url, json!({ "query": sql })).await;
        // set_config answers a row, and is undone with the transaction.
        if sql.starts_with("SELECT set_config") {
            assert!(r.is_ok(), "{sql}: {r:?}");
        } else {
            assert_refused(r, &sql);
        }
        assert_eq!(pg_snapshot(&admin, &s).await, before, "after {sql}");
        // Still read-only after every attempt: the next write is refused too.
        let r = call(
            &url,
            json!({"query": format!("INSERT INTO {s}.items (id, name) VALUES (10, 'x') RETURNING id")}),
        )
        .await;
        assert_refused(r, "the insert after it");
    }
    let after: i64 = admin
        .query_one("SELECT count(*) FROM pg_largeobject_metadata", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, objects, "lo_import left a large object");
    assert!(!copy.exists(), "COPY TO wrote a file");

    let held: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1::bigint::oid",
            &[&lock_key],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 0, "the advisory lock is still held");
    admin
        .batch_execute(&format!("DROP SCHEMA {s} CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_times_out_and_cancels_a_runaway_statement() {
    let url = pg_url();
    let e = call(&url, json!({"query": "SELECT pg_sleep(60)"}))
        .await
        .unwrap_err();
    assert_eq!(kind(&e), "timeout", "{e}");
    assert!(call(&url, json!({"query": "SELECT 1"})).await.is_ok());
}

#[tokio::test]
async fn postgres_errors_never_show_the_password() {
    // A role that does not exist, with a password in the URL.
    let url = pg_url().replacen("postgres://postgres@", "postgres://nobody_x:s3cr3t-pw@", 1);
    let e = call(&url, json!({"query": "SELECT 1"})).await.unwrap_err();
    assert_eq!(kind(&e), "unavailable", "{e}");
    assert!(!e.message.contains("s3cr3t-pw"), "{e}");
    assert!(!e.to_model_text().contains("s3cr3t-pw"));
}

// ---------------------------------------------------------------- MariaDB

async fn my_admin() -> mysql_async::Conn {
    mysql_async::Conn::new(mysql_async::Opts::from_url(&my_url()).unwrap())
        .await
        .expect("MariaDB at TOOLSHED_TEST_MYSQL_URL")
}

/// A database of its own with a table and a sequence; its URL.
async fn my_database() -> (mysql_async::Conn, String, String) {
    let mut admin = my_admin().await;
    let db = unique("sq");
    admin
        .query_drop(format!(
            "CREATE DATABASE {db}; USE {db};
             CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, price DECIMAL(10,2), raw VARBINARY(8), at DATETIME, day DATE, n BIGINT UNSIGNED, f DOUBLE);
             INSERT INTO items VALUES (1, 'apple', 0.50, x'0102', '2026-01-31 12:00:00', '2026-01-31', 18446744073709551615, 1.5),
                                      (2, 'pear', 12345678.75, NULL, NULL, NULL, NULL, NULL),
                                      (3, 'plum', NULL, NULL, NULL, NULL, NULL, NULL);
             CREATE SEQUENCE seq;"
        ))
        .await
        .unwrap();
    let base = my_url();
    let url = match base.rfind('/') {
        Some(i) => format!("{}/{db}", &base[..i]),
        None => base,
    };
    (admin, db, url)
}

async fn my_snapshot(admin: &mut mysql_async::Conn, db: &str) -> Vec<String> {
    let mut out: Vec<String> = admin
        .query(format!(
            "SELECT CONCAT(id, ':', name) FROM {db}.items ORDER BY id"
        ))
        .await
        .unwrap();
    let tables: Vec<String> = admin
        .exec(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ? ORDER BY 1",
            (db,),
        )
        .await
        .unwrap();
    out.extend(tables.into_iter().map(|t| format!("table {t}")));
    let seq: Option<i64> = admin
        .query_first(format!("SELECT next_not_cached_value FROM {db}.seq"))
        .await
        .unwrap();
    out.push(format!("seq {seq:?}"));
    out
}

#[tokio::test]
async fn mariadb_returns_columns_types_and_rows_with_params_bound() {
    let (mut admin, db, url) = my_database().await;
    let out = call(
        &url,
        json!({"query": "SELECT id, name, price, raw, at, day, n, f FROM items WHERE id = ?", "params": [1]}),
    )
    .await
    .unwrap();
    assert_eq!(out["database"], "mysql");
    let types: Vec<&str> = out["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "int",
            "varchar",
            "decimal",
            "varbinary",
            "datetime",
            "date",
            "bigint unsigned",
            "double"
        ]
    );
    assert_eq!(
        out["rows"],
        json!([[
            1,
            "apple",
            "0.50",
            "AQI=",
            "2026-01-31T12:00:00",
            "2026-01-31",
            18446744073709551615u64,
            1.5
        ]])
    );
    let out = call(
        &url,
        json!({"query": "SELECT name FROM items WHERE price > ? AND name <> ? ORDER BY id", "params": [1.5, "x' OR '1'='1"]}),
    )
    .await
    .unwrap();
    assert_eq!(out["rows"], json!([["pear"]]));
    let out = call(
        &url,
        json!({"query": "SELECT id FROM items ORDER BY id", "max_rows": 1}),
    )
    .await
    .unwrap();
    assert_eq!(out["rows"], json!([[1]]));
    assert_eq!(out["truncated_by"], "max_rows");
    // The connection is still good after a cut-short result.
    let out = call(&url, json!({"query": "SELECT COUNT(*) FROM items"}))
        .await
        .unwrap();
    assert_eq!(out["rows"], json!([[3]]));
    admin
        .query_drop(format!("DROP DATABASE {db}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn mariadb_refuses_every_write_and_leaves_the_data_unchanged() {
    let (mut admin, db, url) = my_database().await;
    let before = my_snapshot(&mut admin, &db).await;
    let outfile = std::env::temp_dir().join(format!("{db}.out"));
    let lock = unique("lk");
    for sql in [
        "INSERT INTO items (id, name) VALUES (9, 'fig')".to_owned(),
        "UPDATE items SET name = 'x'".to_owned(),
        "DELETE FROM items".to_owned(),
        "REPLACE INTO items (id, name) VALUES (1, 'x')".to_owned(),
        "DROP TABLE items".to_owned(),
        "CREATE TABLE evil (id INT)".to_owned(),
        "ALTER TABLE items ADD COLUMN z INT".to_owned(),
        "TRUNCATE items".to_owned(),
        "SELECT * FROM items; DROP TABLE items".to_owned(),
        "WITH x AS (SELECT id FROM items) DELETE FROM items WHERE id IN (SELECT id FROM x)"
            .to_owned(),
        "DELETE FROM items RETURNING id".to_owned(),
        "COMMIT; DELETE FROM items".to_owned(),
        "COMMIT".to_owned(),
        "SET TRANSACTION READ WRITE".to_owned(),
        "SET SESSION TRANSACTION READ WRITE".to_owned(),
        "SELECT NEXTVAL(seq)".to_owned(),
        "SELECT SETVAL(seq, 100)".to_owned(),
        format!("SELECT GET_LOCK('{lock}', 0)"),
        "SELECT LOAD_FILE('/etc/hostname')".to_owned(),
        format!("SELECT * FROM items INTO OUTFILE '{}'", outfile.display()),
        format!(
            "SELECT id FROM items LIMIT 1 INTO DUMPFILE '{}'",
            outfile.display()
        ),
        "SELECT * FROM items FOR UPDATE".to_owned(),
        "CREATE TEMPORARY TABLE t AS SELECT * FROM items".to_owned(),
        "LOCK TABLES items WRITE".to_owned(),
    ] {
        let r = call(&url, json!({ "query": sql })).await;
        if sql.ends_with("FOR UPDATE") {
            // A locking read in a read-only transaction: it reads, locks nothing
            // for long (rolled back), and changes nothing.
            let _ = r;
        } else {
            assert_refused(r, &sql);
        }
        assert_eq!(my_snapshot(&mut admin, &db).await, before, "after {sql}");
        let r = call(&url, json!({"query": "DELETE FROM items RETURNING id"})).await;
        assert_refused(r, "the delete after it");
    }
    assert!(!outfile.exists(), "INTO OUTFILE wrote a file");

    let holder: Option<Option<i64>> = admin
        .exec_first("SELECT IS_USED_LOCK(?)", (lock.as_str(),))
        .await
        .unwrap();
    assert_eq!(holder.flatten(), None, "the user lock is held");
    admin
        .query_drop(format!("DROP DATABASE {db}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn mariadb_times_out_a_runaway_statement() {
    let url = my_url();
    let e = call(&url, json!({"query": "SELECT SLEEP(60)"})).await;
    // MariaDB ends SLEEP at max_statement_time with the value 1 rather than an error.
    match e {
        Err(e) => assert_eq!(kind(&e), "timeout", "{e}"),
        Ok(v) => assert_eq!(v["rows"], json!([[1]]), "{v}"),
    }
    let e = call(
        &url,
        json!({"query": "SELECT COUNT(*) FROM information_schema.columns a, information_schema.columns b, information_schema.columns c"}),
    )
    .await
    .unwrap_err();
    assert_eq!(kind(&e), "timeout", "{e}");
    assert!(call(&url, json!({"query": "SELECT 1"})).await.is_ok());
}

// ------------------------------------------- the denylist, as each database reads SQL

/// A statement the denylist must refuse before it runs: `write_refused` naming the
/// function, or `unreadable_query` for one the tokenizer cannot read. What went
/// otherwise, if anything, so a test reports every statement that got through.
fn denied_problem(
    r: Result<Value, ToolError>,
    sql: &str,
    kind_wanted: &str,
    says: &str,
) -> Option<String> {
    let e = match r {
        Ok(v) => return Some(format!("`{sql}` ran: {}", clip(&v.to_string()))),
        Err(e) => e,
    };
    let ok = kind(&e) == kind_wanted
        && e.message.contains(says)
        && e.message.contains("without running");
    (!ok).then(|| format!("`{sql}`: not the refusal wanted ({kind_wanted}, {says}): {e}"))
}

fn clip(s: &str) -> String {
    s.chars().take(300).collect()
}

/// A look-alike of a denied statement: it runs and answers these rows.
async fn assert_rows(url: &str, sql: &str, rows: Value) {
    let out = call(url, json!({ "query": sql }))
        .await
        .unwrap_or_else(|e| panic!("`{sql}` was refused: {e}"));
    assert_eq!(out["rows"], rows, "`{sql}`");
}

#[tokio::test]
async fn postgres_denylist_reads_statements_as_postgres_does() {
    let url = pg_url();
    let mut problems = Vec::new();
    for (sql, name) in [
        // The two statements of the report: `#` is XOR and `'\'` a whole string, so
        // what follows them is code (it listed the data folder, and notified).
        ("SELECT 1 # 1 AS x, pg_ls_dir('.') AS y", "pg_ls_dir"),
        ("SELECT '\\' AS a, pg_notify('c', 'x')", "pg_notify"),
        // Dollar quoting ends at its own tag only.
        ("SELECT $$x$$ AS a, pg_ls_dir('.') AS y", "pg_ls_dir"),
        ("SELECT $t$ $$ $t$ AS a, pg_ls_dir('.') AS y", "pg_ls_dir"),
        // Comments nest: this one ends after the second `*/`.
        ("SELECT /* /* */ */ pg_ls_dir('.') AS y", "pg_ls_dir"),
        // In E'' a backslash escapes the quote.
        ("SELECT E'\\'' AS a, pg_ls_dir('.') AS y", "pg_ls_dir"),
        // Quoted identifiers name the function all the same.
        ("SELECT \"pg_ls_dir\"('.') AS y", "pg_ls_dir"),
        ("SELECT pg_catalog.\"pg_notify\"('c', 'x')", "pg_notify"),
        // SQL given as text runs where no denylist can read it.
        (
            "SELECT query_to_xml('SELECT pg_ls_dir(''.'')', true, false, '')::text AS y",
            "query_to_xml",
        ),
        ("SELECT pg_ls_waldir()", "pg_ls_waldir"),
    ] {
        let r = call(&url, json!({ "query": sql })).await;
        problems.extend(denied_problem(
            r,
            sql,
            "write_refused",
            &format!("`{name}`"),
        ));
    }
    for (sql, says) in [
        // `U&"\0070g_ls_dir"` is `pg_ls_dir` to PostgreSQL: refused, not decoded.
        ("SELECT U&\"\\0070g_ls_dir\"('.') AS y", "Unicode-escaped"),
        ("SELECT $$ never closed", "PostgreSQL"),
    ] {
        let r = call(&url, json!({ "query": sql })).await;
        problems.extend(denied_problem(r, sql, "unreadable_query", says));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The harmless look-alikes run.
    assert_rows(&url, "SELECT 1 # 1 AS x", json!([[0]])).await;
    assert_rows(&url, "SELECT '\\' AS a", json!([["\\"]])).await;
    assert_rows(
        &url,
        "SELECT $$pg_ls_dir('.')$$ AS a",
        json!([["pg_ls_dir('.')"]]),
    )
    .await;
    assert_rows(
        &url,
        "SELECT $t$ $$ pg_notify('c', 'x') $$ $t$ AS a",
        json!([[" $$ pg_notify('c', 'x') $$ "]]),
    )
    .await;
    assert_rows(
        &url,
        "SELECT /* /* */ pg_ls_dir('.') */ 1 AS a",
        json!([[1]]),
    )
    .await;
    assert_rows(
        &url,
        "SELECT E'it\\'s pg_ls_dir' AS a",
        json!([["it's pg_ls_dir"]]),
    )
    .await;
    let out = call(
        &url,
        json!({"query": "SELECT 1 AS \"pg_ls_dir is denied\""}),
    )
    .await
    .unwrap();
    assert_eq!(out["columns"][0]["name"], "pg_ls_dir is denied");
    // A session default of `standard_conforming_strings = off` would make `'\'` an
    // escape again; the tool's sessions keep it on.
    assert_rows(
        &url,
        "SELECT current_setting('standard_conforming_strings') AS s",
        json!([["on"]]),
    )
    .await;
}

#[tokio::test]
async fn mariadb_denylist_reads_statements_as_mariadb_does() {
    let (mut admin, db, url) = my_database().await;
    let lock = unique("lk");
    let mut problems = Vec::new();
    for sql in [
        // `#` ends at the line's end; a backslash escapes in a string.
        format!("SELECT 1 # x\n, GET_LOCK('{lock}', 0) AS b"),
        format!("SELECT '\\'' AS a, GET_LOCK('{lock}', 0) AS b"),
        // `--` is a comment only before a space: this is `1 - -GET_LOCK(…)`.
        format!("SELECT 1 --GET_LOCK('{lock}', 0)"),
        // Executable comments are code, MySQL's and MariaDB's.
        format!("SELECT /*! GET_LOCK('{lock}', 0) */ AS b"),
        format!("SELECT /*!50000 GET_LOCK('{lock}', 0) */ AS b"),
        format!("SELECT /*M! GET_LOCK('{lock}', 0) */ AS b"),
        // Comments do not nest.
        format!("SELECT /* /* */ GET_LOCK('{lock}', 0) AS b"),
        // Backtick-quoted, and double-quoted as a call (an identifier under
        // ANSI_QUOTES).
        format!("SELECT `GET_LOCK`('{lock}', 0) AS b"),
        format!("SELECT \"get_lock\"('{lock}', 0) AS b"),
    ] {
        let r = call(&url, json!({ "query": sql })).await;
        problems.extend(denied_problem(r, &sql, "write_refused", "`get_lock`"));
    }
    let sql = "SELECT '\\' AS a";
    let r = call(&url, json!({ "query": sql })).await;
    problems.extend(denied_problem(r, sql, "unreadable_query", "MySQL"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let holder: Option<Option<i64>> = admin
        .exec_first("SELECT IS_USED_LOCK(?)", (lock.as_str(),))
        .await
        .unwrap();
    assert_eq!(holder.flatten(), None, "the user lock is held");

    // The harmless look-alikes run.
    assert_rows(&url, "SELECT 1 # GET_LOCK('a', 0)", json!([[1]])).await;
    assert_rows(&url, "SELECT 1 -- GET_LOCK('a', 0)", json!([[1]])).await;
    assert_rows(&url, "SELECT /* GET_LOCK('a', 0) */ 1 AS a", json!([[1]])).await;
    assert_rows(
        &url,
        "SELECT 'it\\'s GET_LOCK(1)' AS a",
        json!([["it's GET_LOCK(1)"]]),
    )
    .await;
    assert_rows(&url, "SELECT \"get_lock\" AS a", json!([["get_lock"]])).await;
    admin
        .query_drop(format!("DROP DATABASE {db}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_denylist_reads_statements_as_sqlite_does() {
    let db = lite();
    let mut problems = Vec::new();
    // A backslash is a character in SQLite: `'\'` is a whole string.
    for sql in [
        "SELECT '\\' AS a, load_extension('/tmp/evil.so')",
        "SELECT \"load_extension\"('/tmp/evil.so')",
        "SELECT [load_extension]('/tmp/evil.so')",
    ] {
        let r = call(&db.url, json!({ "query": sql })).await;
        problems.extend(denied_problem(r, sql, "write_refused", "`load_extension`"));
    }
    let sql = "SELECT \"never closed";
    let r = call(&db.url, json!({ "query": sql })).await;
    problems.extend(denied_problem(r, sql, "unreadable_query", "SQLite"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_rows(&db.url, "SELECT '\\' AS a", json!([["\\"]])).await;
    assert_rows(
        &db.url,
        "SELECT 'load_extension' AS a",
        json!([["load_extension"]]),
    )
    .await;
    assert_rows(&db.url, "SELECT 1 -- load_extension('x')", json!([[1]])).await;
}
