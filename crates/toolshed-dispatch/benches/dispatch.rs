//! Start-up cost of dispatched tools, side by side with the bare interpreter: a bare
//! `python3 -c pass` vs a cold one-shot Python call vs a warm-pool call, and the same
//! for Node with an `.mjs` tool (plus a cached `.ts` one).
//!
//! Targets on 2 cores: Python cold ≤ 40 ms, warm ≤ 1 ms; Node `.mjs` cold ≤ 100 ms,
//! warm ≤ 1 ms. Tools run sandboxed (the default isolation). Run:
//! `cargo bench -p toolshed-dispatch --bench dispatch`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolshed_core::{Pipeline, RunContext, Tool, ToolCall, ToolSet};
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint, Mode, Request};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

async fn bare(program: &Path, args: &[&str]) {
    let status = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let config = |mode| DispatcherConfig {
        cache_dir: cache.path().to_path_buf(),
        mode,
        ..DispatcherConfig::default()
    };
    let cold = Dispatcher::new(config(Mode::OneShot));
    let warm = Dispatcher::new(config(Mode::Pool));

    let py = Endpoint::parse(&format!(
        "python:{}:order_lookup",
        fixture("order_lookup.py").display()
    ))
    .unwrap();
    let mjs = Endpoint::parse(&format!("node:{}", fixture("greet.mjs").display())).unwrap();
    let ts = Endpoint::parse(&format!("node:{}", fixture("shout.ts").display())).unwrap();
    let python = rt.block_on(cold.python_executable()).unwrap();
    let node = PathBuf::from("node");
    let order = json!({"order_id": "ORD-123456", "include_tracking": true});

    // Warm up: runners written, interpreter resolved, TypeScript transpiled, pools full.
    rt.block_on(async {
        for (ep, args) in [
            (&py, order.clone()),
            (&mjs, json!({"name": "Ada"})),
            (&ts, json!({"text": "hi"})),
        ] {
            let run = cold.execute(ep, Request::new("bench", args.clone())).await;
            assert!(run.result.is_ok(), "{ep}: {:?}", run.result);
            warm.warm(ep).await.unwrap();
            assert!(
                warm.execute(ep, Request::new("bench", args))
                    .await
                    .result
                    .is_ok()
            );
        }
    });

    let tool = Tool::builder("order-lookup")
        .description("Look up an order by ID.")
        .input_schema(json!({"type": "object"}))
        .raw_handler(warm.handler(py.clone(), "order-lookup"))
        .build()
        .unwrap();
    let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).unwrap()).build();
    let run = RunContext::ephemeral();

    let mut g = c.benchmark_group("python");
    g.sample_size(30).measurement_time(Duration::from_secs(6));
    g.bench_function("bare `python3 -c pass`", |b| {
        b.to_async(&rt).iter(|| bare(&python, &["-c", "pass"]))
    });
    g.bench_function("bare `python3 -S -E -c pass`", |b| {
        b.to_async(&rt)
            .iter(|| bare(&python, &["-S", "-E", "-c", "pass"]))
    });
    g.bench_function("cold one-shot call", |b| {
        b.to_async(&rt).iter(|| async {
            let r = cold
                .execute(&py, Request::new("order_lookup", order.clone()))
                .await;
            assert!(r.result.is_ok());
        })
    });
    g.sample_size(100).measurement_time(Duration::from_secs(3));
    g.bench_function("warm pool call", |b| {
        b.to_async(&rt).iter(|| async {
            let r = warm
                .execute(&py, Request::new("order_lookup", order.clone()))
                .await;
            assert!(r.result.is_ok());
        })
    });
    g.bench_function("warm pool call through the pipeline", |b| {
        b.to_async(&rt).iter(|| async {
            let o = pipeline
                .call(&run, ToolCall::new("order-lookup", order.clone()))
                .await;
            assert!(o.result.is_ok());
        })
    });
    g.finish();

    let mut g = c.benchmark_group("node");
    g.sample_size(20).measurement_time(Duration::from_secs(8));
    g.bench_function("bare `node -e 0`", |b| {
        b.to_async(&rt).iter(|| bare(&node, &["-e", "0"]))
    });
    g.bench_function("cold one-shot .mjs call", |b| {
        b.to_async(&rt).iter(|| async {
            let r = cold
                .execute(&mjs, Request::new("greet", json!({"name": "Ada"})))
                .await;
            assert!(r.result.is_ok());
        })
    });
    g.bench_function("cold one-shot .ts call (transpiled once, cached)", |b| {
        b.to_async(&rt).iter(|| async {
            let r = cold
                .execute(&ts, Request::new("shout", json!({"text": "hi"})))
                .await;
            assert!(r.result.is_ok());
        })
    });
    g.sample_size(100).measurement_time(Duration::from_secs(3));
    g.bench_function("warm pool .mjs call", |b| {
        b.to_async(&rt).iter(|| async {
            let r = warm
                .execute(&mjs, Request::new("greet", json!({"name": "Ada"})))
                .await;
            assert!(r.result.is_ok());
        })
    });
    g.finish();
    warm.shutdown();
}

criterion_group!(dispatch, benches);
criterion_main!(dispatch);
