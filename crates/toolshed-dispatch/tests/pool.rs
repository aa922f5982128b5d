//! Warm worker pools (sandboxed): reuse, a crashed worker replaced, a changed file picked
//! up, several calls at once on a pool of two. Workers are told apart by the identity
//! the tool draws once per process (`worker`): in the sandbox every worker is pid 1.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use futures_util::future::join_all;
use serde_json::{Value, json};
use toolshed_core::{RunContext, ToolCall};
use toolshed_dispatch::{Endpoint, Mode, Request};

async fn pid_of(d: &toolshed_dispatch::Dispatcher, ep: &Endpoint) -> u64 {
    let run = d.execute(ep, Request::new("pid", json!({}))).await;
    run.result.unwrap()["worker"].as_u64().unwrap()
}

#[tokio::test]
async fn a_pool_survives_a_worker_crash() {
    for (pid_ep, crash_ep) in [
        (
            endpoint("python", "tools.py:pid"),
            endpoint("python", "tools.py:crash"),
        ),
        (
            endpoint("node", "node_tools.mjs:pid"),
            endpoint("node", "node_tools.mjs:crash"),
        ),
    ] {
        let d = dispatcher(Mode::Pool);
        let first = pid_of(&d, &pid_ep).await;
        assert_eq!(pid_of(&d, &pid_ep).await, first, "the worker is reused");

        // Each call to the crashing tool kills its worker; the next call gets a new one.
        for _ in 0..3 {
            let crashed = d.execute(&crash_ep, Request::new("crash", json!({}))).await;
            let err = crashed.result.unwrap_err();
            assert_eq!(dispatch_code(&err), "TOOL_EXITED", "{err}");
            assert!(err.message.contains("exited with code"), "{err}");
        }
        // The other endpoint's pool is untouched.
        assert_eq!(pid_of(&d, &pid_ep).await, first);
    }
}

#[tokio::test]
async fn a_timed_out_worker_is_killed_and_replaced() {
    let d = dispatcher(Mode::Pool);
    let ep = endpoint("python", "tools.py:pid");
    let first = pid_of(&d, &ep).await;
    let timed_out = d
        .execute(
            &ep,
            Request::new("pid", json!({"hold_ms": 60_000})).timeout(Duration::from_millis(500)),
        )
        .await;
    assert_eq!(
        timed_out.result.unwrap_err().message,
        "tool pid timed out after 500ms"
    );
    let stats = d.pool_stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert!(stats[0].retired >= 1, "the worker was retired: {stats:?}");
    let after = pid_of(&d, &ep).await;
    assert_ne!(after, first);
    assert_eq!(pid_of(&d, &ep).await, after, "the replacement is reused");
}

#[tokio::test]
async fn several_calls_at_once_share_two_workers() {
    let mut config = config(Mode::Pool);
    config.pool.max_per_tool = 2;
    let d = toolshed_dispatch::Dispatcher::new(config);
    let ep = endpoint("python", "tools.py:pid");
    assert_eq!(d.warm(&ep).await.unwrap(), 2);
    let pipeline = pipeline(vec![tool(&d, "pid", ep, Duration::from_secs(30))]);
    let run = RunContext::ephemeral();
    let calls = (0..6).map(|_| pipeline.call(&run, ToolCall::new("pid", json!({"hold_ms": 150}))));
    let results: Vec<Value> = join_all(calls)
        .await
        .into_iter()
        .map(|o| o.result.unwrap())
        .collect();
    let mut pids: Vec<u64> = results
        .iter()
        .map(|r| r["worker"].as_u64().unwrap())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 2, "two workers served six calls: {results:?}");
    let span = |r: &Value| (r["start"].as_f64().unwrap(), r["end"].as_f64().unwrap());
    for (i, a) in results.iter().enumerate() {
        for b in &results[i + 1..] {
            let ((s1, e1), (s2, e2)) = (span(a), span(b));
            let overlap = s1 < e2 && s2 < e1;
            if a["worker"] == b["worker"] {
                assert!(!overlap, "one request at a time per worker: {a} {b}");
            }
        }
    }
    let parallel = results.iter().enumerate().any(|(i, a)| {
        results[i + 1..].iter().any(|b| {
            let ((s1, e1), (s2, e2)) = (span(a), span(b));
            a["worker"] != b["worker"] && s1 < e2 && s2 < e1
        })
    });
    assert!(
        parallel,
        "the two workers ran at the same time: {results:?}"
    );
}

#[tokio::test]
async fn a_changed_tool_file_retires_warm_workers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("version.py");
    std::fs::write(&path, "def version():\n    return 1\n").unwrap();
    let ep = Endpoint::parse(&format!("python:{}", path.display())).unwrap();
    let d = dispatcher(Mode::Pool);
    let call = || d.execute(&ep, Request::new("version", json!({})));
    assert_eq!(call().await.result.unwrap(), json!(1));
    // A different length changes the file's stamp even within one mtime tick.
    std::fs::write(&path, "def version():\n    return 22\n").unwrap();
    assert_eq!(call().await.result.unwrap(), json!(22));
}
