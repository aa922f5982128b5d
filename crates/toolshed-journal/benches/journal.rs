//! Journal throughput: one raw fsync'd SQLite commit as the yardstick, the journal cost
//! of one keyed call, keyed calls per second from 64 concurrent runs on SQLite and
//! PostgreSQL, and one-call runs per second on SQLite.
//!
//! Run with `cargo bench -p toolshed-journal --bench journal`. PostgreSQL comes from
//! `TOOLSHED_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! in a fresh schema dropped at the end.
//!
//! Targets: a keyed call costs at most 2.5 raw commits; 64 concurrent runs reach
//! 10,000 keyed calls/s on SQLite and 5,000/s on PostgreSQL (2 cores).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use tokio::runtime::Runtime;
use toolshed_journal::{Budgets, CallResult, Journal, NewCall, NewRun};

/// Concurrent runs in the throughput benchmarks.
const TASKS: u32 = 64;
/// Keyed calls each task makes per iteration.
const CALLS_PER_TASK: u32 = 20;

/// Ordinals (and call ids) are unique across the whole benchmark.
static NEXT_ORDINAL: AtomicU32 = AtomicU32::new(0);

/// How a keyed call is journaled.
#[derive(Clone, Copy)]
enum Keyed {
    /// `open_call`, `record_started`, `record_finished`: three durable writes.
    ThreeWrites,
    /// `open_and_start`, `record_finished`: two durable writes.
    OpenAndStart,
}

impl Keyed {
    fn name(self) -> &'static str {
        match self {
            Keyed::ThreeWrites => "open+start+finish",
            Keyed::OpenAndStart => "open_and_start+finish",
        }
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn new_run(id: String) -> NewRun {
    NewRun {
        id,
        agent_id: "bench".into(),
        session_id: "bench".into(),
        principal: None,
        budgets: Budgets::default(),
        driver: json!({"kind": "direct"}),
    }
}

async fn keyed_call(journal: &dyn Journal, run_id: &str, how: Keyed) {
    let ordinal = NEXT_ORDINAL.fetch_add(1, Ordering::Relaxed);
    let call = NewCall {
        call_id: format!("call-{ordinal}"),
        run_id: run_id.to_owned(),
        ordinal,
        tool_call_id: format!("toolu_{ordinal}"),
        tool: "send_email".into(),
        args_hash: "3f5a0c1e9b7d2a4c6e8f0a1b3c5d7e9f1a2b3c4d5e6f708192a3b4c5d6e7f809".into(),
        args: json!({"to": "ann@example.com", "subject": "hello", "body": "a short message"}),
    };
    let call_id = match how {
        Keyed::ThreeWrites => {
            let call = journal.open_call(call).await.unwrap();
            journal.record_started(&call.call_id).await.unwrap();
            call.call_id
        }
        Keyed::OpenAndStart => {
            let opened = journal.open_and_start(call).await.unwrap();
            assert!(opened.started);
            opened.call.call_id
        }
    };
    let outcome = CallResult {
        result: Ok(json!({"message_id": "m-1", "status": "sent"})),
        duration_ms: 1.0,
        diagnostics: Default::default(),
    };
    journal.record_finished(&call_id, outcome).await.unwrap();
}

/// (a) One INSERT per transaction on a plain connection: WAL, `synchronous=FULL`.
fn raw_commit(c: &mut Criterion, dir: &std::path::Path) {
    let conn = rusqlite::Connection::open(dir.join("raw.db")).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch(
        "PRAGMA synchronous = FULL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL);",
    )
    .unwrap();
    let mut insert = conn.prepare("INSERT INTO t (v) VALUES (?1)").unwrap();
    let mut group = c.benchmark_group("sqlite");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("raw_commit", |b| {
        b.iter(|| {
            conn.execute_batch("BEGIN").unwrap();
            insert
                .execute(["a row of about the size of a journal record"])
                .unwrap();
            conn.execute_batch("COMMIT").unwrap();
        })
    });
    group.finish();
}

/// (b) One keyed call's journal cost, sequentially from one task.
fn keyed_call_cost(c: &mut Criterion, rt: &Runtime, journal: &Arc<dyn Journal>, backend: &str) {
    rt.block_on(journal.create_run(new_run(format!("sequential-{backend}"))))
        .unwrap();
    let mut group = c.benchmark_group(backend);
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(8));
    for how in [Keyed::ThreeWrites, Keyed::OpenAndStart] {
        group.bench_function(format!("keyed_call/{}", how.name()), |b| {
            b.to_async(rt).iter_custom(|iters| {
                let journal = Arc::clone(journal);
                let run_id = format!("sequential-{backend}");
                async move {
                    let started = Instant::now();
                    for _ in 0..iters {
                        keyed_call(journal.as_ref(), &run_id, how).await;
                    }
                    started.elapsed()
                }
            })
        });
    }
    group.finish();
}

/// (c) 64 runs, each a task making keyed calls one after another.
fn concurrent_keyed_calls(
    c: &mut Criterion,
    rt: &Runtime,
    journal: &Arc<dyn Journal>,
    backend: &str,
) {
    for task in 0..TASKS {
        rt.block_on(journal.create_run(new_run(format!("concurrent-{backend}-{task}"))))
            .unwrap();
    }
    let mut group = c.benchmark_group(backend);
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15))
        .throughput(Throughput::Elements(u64::from(TASKS * CALLS_PER_TASK)));
    for how in [Keyed::ThreeWrites, Keyed::OpenAndStart] {
        group.bench_function(
            format!("64_runs_x_{CALLS_PER_TASK}_keyed_calls/{}", how.name()),
            |b| {
                b.to_async(rt).iter_custom(|iters| {
                    let journal = Arc::clone(journal);
                    let backend = backend.to_owned();
                    async move {
                        let started = Instant::now();
                        for _ in 0..iters {
                            let tasks: Vec<_> = (0..TASKS)
                                .map(|task| {
                                    let journal = Arc::clone(&journal);
                                    let run_id = format!("concurrent-{backend}-{task}");
                                    tokio::spawn(async move {
                                        for _ in 0..CALLS_PER_TASK {
                                            keyed_call(journal.as_ref(), &run_id, how).await;
                                        }
                                    })
                                })
                                .collect();
                            for task in tasks {
                                task.await.unwrap();
                            }
                        }
                        started.elapsed()
                    }
                })
            },
        );
    }
    group.finish();
}

/// Run ids are unique across the whole benchmark.
static NEXT_RUN: AtomicU32 = AtomicU32::new(0);

/// (d) One-call runs (`record_run`: the run, its call and two crumbs in one write, the
/// registry's execute path), 64 tasks at once.
fn one_call_runs(c: &mut Criterion, rt: &Runtime, dir: &std::path::Path) {
    let url = format!("sqlite://{}", dir.join("one-call-runs.db").display());
    let journal: Arc<dyn Journal> = rt.block_on(toolshed_journal::open(&url)).unwrap();
    let mut group = c.benchmark_group("sqlite");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(u64::from(TASKS * CALLS_PER_TASK)));
    group.bench_function("64_tasks_one_call_runs", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let journal = Arc::clone(&journal);
            async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|_| {
                            let journal = Arc::clone(&journal);
                            tokio::spawn(async move {
                                for _ in 0..CALLS_PER_TASK {
                                    one_call_run(journal.as_ref()).await;
                                }
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.unwrap();
                    }
                }
                started.elapsed()
            }
        })
    });
    group.finish();
}

async fn one_call_run(journal: &dyn Journal) {
    let n = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
    let id = format!("one-call-{n}");
    let mut run = new_run(id.clone());
    run.session_id = format!("session-{n}");
    let call = NewCall {
        call_id: format!("{id}-call"),
        run_id: id,
        ordinal: 0,
        tool_call_id: "toolu_0".into(),
        tool: "get_current_time".into(),
        args_hash: "3f5a0c1e9b7d2a4c".into(),
        args: json!({}),
    };
    let result = CallResult {
        result: Ok(json!({"utc": "2026-12-02T12:00:00Z"})),
        duration_ms: 0.1,
        diagnostics: Default::default(),
    };
    journal
        .record_run(
            run,
            vec![(call, result)],
            [json!({"type": "tool:call"}), json!({"type": "tool:result"})]
                .iter()
                .map(|c| serde_json::value::to_raw_value(c).expect("crumb"))
                .collect(),
            toolshed_journal::RunStatus::Completed,
        )
        .await
        .unwrap();
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    raw_commit(c, dir.path());

    let rt = runtime();
    let sqlite: Arc<dyn Journal> = rt
        .block_on(toolshed_journal::open(&format!(
            "sqlite://{}",
            dir.path().join("journal.db").display()
        )))
        .unwrap();
    keyed_call_cost(c, &rt, &sqlite, "sqlite");
    concurrent_keyed_calls(c, &rt, &sqlite, "sqlite");
    drop(sqlite);
    one_call_runs(c, &rt, dir.path());

    let url = std::env::var("TOOLSHED_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = format!("toolshed_bench_{}", uuid::Uuid::new_v4().simple());
    let postgres: Arc<dyn Journal> = rt
        .block_on(toolshed_journal::open_in_schema(&url, &schema))
        .expect("PostgreSQL must be running: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start");
    keyed_call_cost(c, &rt, &postgres, "postgres");
    concurrent_keyed_calls(c, &rt, &postgres, "postgres");
    drop(postgres);
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
    });
}

criterion_group!(journal, benches);
criterion_main!(journal);
