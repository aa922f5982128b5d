//! Durable-run costs, side by side in one run:
//! - one raw fsync'd SQLite commit (WAL, synchronous=FULL) on the same disk: the floor;
//! - a keyed call through the durable runtime vs the same call through the plain
//!   pipeline: the added latency, to report as a ratio to the raw commit;
//! - 64 concurrent runs making keyed calls, on SQLite and PostgreSQL: calls per second;
//! - replaying a 1,000-call run.
//!
//! Run: `cargo bench -p toolshed-runtime --bench durable`; see BENCHMARKS.md.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
#[path = "support/inc_tool.rs"]
mod inc_tool;

use inc_tool::pipeline;
use toolshed_core::{RunContext, ToolCall};
use toolshed_journal::Journal;
use toolshed_runtime::{CallStep, NewRunBuilder, Runtime, RuntimeConfig};

fn runtime_on(journal: Arc<dyn Journal>) -> Runtime {
    Runtime::new(pipeline(), journal, RuntimeConfig::default()).expect("runtime")
}

/// The tokio runtime every group uses: two workers, like the machine.
fn runtime_threads() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt")
}

/// A SQLite journal in `dir`.
fn sqlite_journal(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    name: &str,
) -> Arc<dyn Journal> {
    rt.block_on(toolshed_journal::open(&format!(
        "sqlite://{}",
        dir.join(format!("{name}.db")).display()
    )))
    .expect("sqlite journal")
}

fn postgres_url() -> String {
    std::env::var("TOOLSHED_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn bench_latency(c: &mut Criterion) {
    let rt = runtime_threads();
    let dir = tempfile::tempdir().expect("tempdir");

    // The floor: one fsync'd commit of one small row.
    let raw = rusqlite::Connection::open(dir.path().join("raw.db")).expect("raw db");
    raw.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);")
        .expect("raw schema");
    let mut group = c.benchmark_group("keyed_call");
    group.bench_function("raw_sqlite_commit", |b| {
        b.iter(|| {
            raw.execute("INSERT INTO t (v) VALUES ('x')", [])
                .expect("insert");
        })
    });

    let plain = pipeline();
    let ctx = RunContext::ephemeral();
    group.bench_function("pipeline_without_journal", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                plain
                    .call(&ctx, ToolCall::new("inc", json!({"n": 1})))
                    .await
                    .result
                    .expect("ok"),
            )
        })
    });

    let journal = sqlite_journal(&rt, dir.path(), "j");
    let runtime = rt.block_on(async { runtime_on(journal) });
    let run = rt
        .block_on(runtime.start(NewRunBuilder::new("bench").build()))
        .expect("run");
    group.bench_function("durable_keyed_call_sqlite", |b| {
        b.to_async(&rt).iter(|| async {
            match run
                .call(ToolCall::new("inc", json!({"n": 1})))
                .await
                .expect("call")
            {
                CallStep::Done(o) => black_box(o.result.expect("ok")),
                CallStep::Parked(_) => unreachable!("never gated"),
            }
        })
    });
    group.finish();
}

/// 64 runs, each making `per_run` keyed calls one after another, all at once.
async fn concurrent_runs(runtime: &Runtime, per_run: u32) -> Duration {
    let runs = futures_runs(runtime, 64).await;
    let start = Instant::now();
    let tasks: Vec<_> = runs
        .into_iter()
        .map(|run| {
            tokio::spawn(async move {
                for n in 0..per_run {
                    run.call(ToolCall::new("inc", json!({"n": n})))
                        .await
                        .expect("call");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    start.elapsed()
}

async fn futures_runs(runtime: &Runtime, n: usize) -> Vec<toolshed_runtime::RunHandle> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(
            runtime
                .start(NewRunBuilder::new("bench").build())
                .await
                .expect("run"),
        );
    }
    out
}

fn bench_throughput(c: &mut Criterion) {
    let rt = runtime_threads();
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = sqlite_journal(&rt, dir.path(), "t");
    let schema = format!("bench_{}", std::process::id());
    let pg: Arc<dyn Journal> = rt
        .block_on(toolshed_journal::open_in_schema(&postgres_url(), &schema))
        .expect("PostgreSQL at TOOLSHED_TEST_POSTGRES_URL (default 127.0.0.1:5432)");
    const PER_RUN: u32 = 20;
    let mut group = c.benchmark_group("64_concurrent_runs");
    group.sample_size(10);
    group.throughput(Throughput::Elements(64 * u64::from(PER_RUN)));
    for (name, journal) in [("sqlite", sqlite), ("postgres", pg)] {
        let runtime = rt.block_on(async { runtime_on(journal) });
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let runtime = runtime.clone();
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += concurrent_runs(&runtime, PER_RUN).await;
                    }
                    total
                }
            })
        });
    }
    group.finish();
    // Leave the database as we found it.
    rt.block_on(async {
        if let Ok((client, conn)) =
            tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls).await
        {
            tokio::spawn(conn);
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await;
        }
    });
}

fn bench_replay(c: &mut Criterion) {
    let rt = runtime_threads();
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = sqlite_journal(&rt, dir.path(), "r");
    let runtime = rt.block_on(async { runtime_on(journal) });
    // A run of 1,000 recorded calls, stopped before finishing (as after a crash).
    let id = rt.block_on(async {
        let run = runtime
            .start(NewRunBuilder::new("bench").build())
            .await
            .expect("run");
        for n in 0..1000 {
            run.call(ToolCall::new("inc", json!({"n": n})))
                .await
                .expect("call");
        }
        run.id().to_owned()
    });
    let mut group = c.benchmark_group("replay");
    group.sample_size(20);
    group.bench_function("resume_and_replay_1000_calls", |b| {
        b.to_async(&rt).iter(|| async {
            let run = runtime.resume(&id).await.expect("resume");
            for n in 0..1000 {
                match run
                    .call(ToolCall::new("inc", json!({"n": n})))
                    .await
                    .expect("replay")
                {
                    CallStep::Done(o) => {
                        black_box(o);
                    }
                    CallStep::Parked(_) => unreachable!(),
                }
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench_latency, bench_throughput, bench_replay);
criterion_main!(benches);
