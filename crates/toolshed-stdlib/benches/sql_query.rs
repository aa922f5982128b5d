//! `sql_query` of a 1-row SELECT (by primary key, three columns) beside the same query
//! through the raw driver, in the same run, on SQLite, PostgreSQL and MariaDB.
//! Target: sql_query ≤ 1.5× the raw driver on each database.
//!
//! - `sqlite/raw`: rusqlite on an open connection, `prepare_cached` + `query_row`.
//! - `postgres/raw`: tokio-postgres `query_one` on a statement prepared once (one round
//!   trip: the strictest baseline), and `postgres/raw_text` with the SQL text (what a
//!   plain `client.query(sql, …)` costs: prepare + execute).
//! - `mysql/raw`: mysql_async `exec_first` (its statement cache makes it one round trip).
//! - `*/sql_query`: `toolshed_stdlib::sql_query::query`, everything the tool does after
//!   reading its env: the checks, a pooled connection, the read-only transaction, the
//!   caps, the JSON rows. `*/tool`: the same through `Pipeline::call` (schema
//!   validation, crumbs, the result's checks).
//!
//! Run: `cargo bench -p toolshed-stdlib --bench sql_query` (PostgreSQL at
//! `TOOLSHED_TEST_POSTGRES_URL`, MariaDB at `TOOLSHED_TEST_MYSQL_URL`, the local
//! defaults otherwise; a database that does not answer is skipped).
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mysql_async::prelude::Queryable;
use serde_json::json;
use toolshed_core::{Pipeline, RunContext, ToolCall, ToolSet};
use toolshed_stdlib::sql_query::{SqlQueryArgs, query};

fn pg_url() -> String {
    std::env::var("TOOLSHED_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn my_url() -> String {
    std::env::var("TOOLSHED_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

fn pipeline_and_ctx(url: &str) -> (Pipeline, RunContext) {
    let pipeline =
        Pipeline::builder(ToolSet::from_tools([toolshed_stdlib::sql_query_tool()]).unwrap())
            .build();
    let ctx = RunContext::builder()
        .env(BTreeMap::from([(
            "SQL_DATABASE_URL".to_owned(),
            url.to_owned(),
        )]))
        .build();
    (pipeline, ctx)
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // SQLite: a file of 1000 rows.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
             INSERT INTO items SELECT i, 'item ' || i, i * 0.25 FROM n;",
        )
        .unwrap();
    }
    let lite_url = format!("sqlite://{}", path.display());
    let lite_sql = "SELECT id, name, price FROM items WHERE id = ?";
    let raw =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut g = c.benchmark_group("sqlite");
    g.bench_function("raw", |b| {
        b.iter(|| {
            let mut s = raw.prepare_cached(lite_sql).unwrap();
            let row: (i64, String, f64) = s
                .query_row([500], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap();
            assert_eq!(row.0, 500);
        })
    });
    let args = SqlQueryArgs::new(lite_sql).with_params(vec![json!(500)]);
    g.bench_function("sql_query", |b| {
        b.to_async(&rt).iter(|| async {
            let r = query(&lite_url, &args).await.unwrap();
            assert_eq!(r.row_count, 1);
        })
    });
    let (pipeline, ctx) = pipeline_and_ctx(&lite_url);
    g.bench_function("tool", |b| {
        b.to_async(&rt).iter(|| async {
            let out = pipeline
                .call(
                    &ctx,
                    ToolCall::new("sql_query", json!({"query": lite_sql, "params": [500]})),
                )
                .await;
            assert!(out.result.is_ok());
        })
    });
    g.finish();

    // PostgreSQL: a schema of its own.
    let pg = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
            .await
            .ok()?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
            .batch_execute(
                "DROP SCHEMA IF EXISTS sq_bench CASCADE; CREATE SCHEMA sq_bench;
                 CREATE TABLE sq_bench.items (id int PRIMARY KEY, name text NOT NULL, price float8);
                 INSERT INTO sq_bench.items SELECT i, 'item ' || i, i * 0.25 FROM generate_series(1, 1000) i;",
            )
            .await
            .unwrap();
        Some(client)
    });
    match pg {
        None => eprintln!("PostgreSQL does not answer at {}: skipped", pg_url()),
        Some(client) => {
            let sql = "SELECT id, name, price FROM sq_bench.items WHERE id = $1";
            let stmt = rt.block_on(client.prepare(sql)).unwrap();
            let url = pg_url();
            let mut g = c.benchmark_group("postgres");
            g.bench_function("raw", |b| {
                b.to_async(&rt).iter(|| async {
                    let row = client.query_one(&stmt, &[&500i32]).await.unwrap();
                    let (id, _name, _price): (i32, String, f64) =
                        (row.get(0), row.get(1), row.get(2));
                    assert_eq!(id, 500);
                })
            });
            g.bench_function("raw_text", |b| {
                b.to_async(&rt).iter(|| async {
                    let row = client.query_one(sql, &[&500i32]).await.unwrap();
                    let id: i32 = row.get(0);
                    assert_eq!(id, 500);
                })
            });
            let args = SqlQueryArgs::new(sql).with_params(vec![json!(500)]);
            g.bench_function("sql_query", |b| {
                b.to_async(&rt).iter(|| async {
                    let r = query(&url, &args).await.unwrap();
                    assert_eq!(r.row_count, 1);
                })
            });
            let (pipeline, ctx) = pipeline_and_ctx(&url);
            g.bench_function("tool", |b| {
                b.to_async(&rt).iter(|| async {
                    let out = pipeline
                        .call(
                            &ctx,
                            ToolCall::new("sql_query", json!({"query": sql, "params": [500]})),
                        )
                        .await;
                    assert!(out.result.is_ok());
                })
            });
            g.finish();
            rt.block_on(client.batch_execute("DROP SCHEMA sq_bench CASCADE"))
                .unwrap();
        }
    }

    // MariaDB: a database of its own.
    let base = my_url();
    let my_bench_url = match base.rfind('/') {
        Some(i) => format!("{}/sq_bench", &base[..i]),
        None => base.clone(),
    };
    let my = rt.block_on(async {
        let mut admin = mysql_async::Conn::new(mysql_async::Opts::from_url(&base).ok()?)
            .await
            .ok()?;
        admin
            .query_drop(
                "DROP DATABASE IF EXISTS sq_bench; CREATE DATABASE sq_bench; USE sq_bench;
                 CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, price DOUBLE);
                 INSERT INTO items SELECT seq, CONCAT('item ', seq), seq * 0.25 FROM seq_1_to_1000;",
            )
            .await
            .unwrap();
        Some(admin)
    });
    match my {
        None => eprintln!("MariaDB does not answer at {base}: skipped"),
        Some(admin) => {
            let sql = "SELECT id, name, price FROM items WHERE id = ?";
            let conn = tokio::sync::Mutex::new(
                rt.block_on(mysql_async::Conn::new(
                    mysql_async::Opts::from_url(&my_bench_url).unwrap(),
                ))
                .unwrap(),
            );
            let mut g = c.benchmark_group("mysql");
            g.bench_function("raw", |b| {
                b.to_async(&rt).iter(|| async {
                    let row: Option<(i32, String, f64)> =
                        conn.lock().await.exec_first(sql, (500,)).await.unwrap();
                    assert_eq!(row.unwrap().0, 500);
                })
            });
            let args = SqlQueryArgs::new(sql).with_params(vec![json!(500)]);
            g.bench_function("sql_query", |b| {
                b.to_async(&rt).iter(|| async {
                    let r = query(&my_bench_url, &args).await.unwrap();
                    assert_eq!(r.row_count, 1);
                })
            });
            let (pipeline, ctx) = pipeline_and_ctx(&my_bench_url);
            g.bench_function("tool", |b| {
                b.to_async(&rt).iter(|| async {
                    let out = pipeline
                        .call(
                            &ctx,
                            ToolCall::new("sql_query", json!({"query": sql, "params": [500]})),
                        )
                        .await;
                    assert!(out.result.is_ok());
                })
            });
            g.finish();
            let mut admin = admin;
            rt.block_on(admin.query_drop("DROP DATABASE sq_bench"))
                .unwrap();
        }
    }
}

criterion_group! {
    name = sql;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = benches
}
criterion_main!(sql);
