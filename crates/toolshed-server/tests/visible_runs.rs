//! A call that may change something outside (`effects: sandbox` or `external`, the
//! default of registry Python tools) is a run in the journal before it executes: it is
//! listed as `running` while it runs, and a caller that goes away leaves it `cancelled`
//! rather than leaving no trace. A call with `effects: none` keeps the one-write path.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{Value, json};

/// Poll the runs list (as `token`) until `pick` finds a run, for at most 60 s.
async fn wait_for_run(
    s: &TestServer,
    token: &str,
    what: &str,
    pick: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, page) = s.call("GET", "/api/v1/runs", Some(token), None).await;
        assert_eq!(status, 200, "{page}");
        if let Some(run) = page["data"].as_array().unwrap().iter().find(|r| pick(r)) {
            return run.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {what} run within 60 s: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_running_call_is_listed_and_a_dropped_caller_leaves_it_cancelled() {
    let s = TestServer::start().await;
    let path = s.write(
        "forever.py",
        "import time\n\ndef forever():\n    \"\"\"Runs until it is stopped.\"\"\"\n    while True:\n        time.sleep(0.05)\n",
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            Some(json!({"name": "forever", "description": "Never ends.", "endpoint": format!("python:{path}"), "effects": "sandbox"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");

    // The caller: an execute whose connection is dropped while the tool runs.
    let url = format!("{}/api/v1/registry/tools/forever/execute", s.base);
    let token = s.deployer.clone();
    let caller = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .json(&json!({"args": {}}))
            .send()
            .await
    });
    let running = wait_for_run(&s, &s.deployer, "running", |r| r["status"] == "running").await;
    let id = running["id"].as_str().unwrap().to_owned();
    caller.abort();
    let _ = caller.await;
    let cancelled = wait_for_run(&s, &s.deployer, "cancelled", |r| {
        r["id"] == id.as_str() && r["status"] == "cancelled"
    })
    .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    s.stop().await;
}

#[tokio::test]
async fn a_call_without_effects_is_recorded_once_it_ends() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(&s.deployer),
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let run_id = answer["data"]["run_id"].as_str().unwrap().to_owned();
    let (status, run) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run_id}"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["data"]["status"], "completed", "{run}");
    s.stop().await;
}
