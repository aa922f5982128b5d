//! The server's retention (`toolshed serve --retain-runs`), over real HTTP: finished
//! runs disappear on their own, a parked run stays until it has finished too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::json;
use toolshed_server::Retention;

/// Poll `GET /api/v1/runs/{id}` until it answers `want`; fail after 30 s.
async fn wait_for_status(s: &TestServer, run_id: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = s
            .call(
                "GET",
                &format!("/api/v1/runs/{run_id}"),
                Some(&s.viewer),
                None,
            )
            .await;
        if status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} still answers {status} after 30 s: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server that prunes every finished run every 20 ms.
async fn pruning_server() -> TestServer {
    TestServer::start_with(|c| {
        c.retain_runs = Some(Retention {
            interval: Duration::from_millis(20),
            ..Retention::new(Duration::ZERO)
        });
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_are_pruned_and_parked_runs_stay_until_they_finish() {
    let s = pruning_server().await;
    let d = Some(s.deployer.as_str());
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            d,
            Some(json!({
                "name": "guarded-time", "description": "the time, after approval",
                "endpoint": "builtin:get_current_time", "approval": "always"
            })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/guarded-time/execute",
            d,
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let parked = answer["data"]["run_id"].as_str().unwrap().to_owned();
    let call = answer["data"]["call_id"].as_str().unwrap().to_owned();

    // A finished run, recorded after the parked one: once it is gone, a pass that saw
    // the (older) parked run has run too.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            d,
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let done = answer["data"]["run_id"].as_str().unwrap().to_owned();
    wait_for_status(&s, &done, 404).await;

    let (status, run) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{parked}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["data"]["status"], "parked", "{run}");
    let (_, gates) = s
        .call("GET", "/api/v1/approvals", Some(&s.viewer), None)
        .await;
    assert_eq!(gates["data"][0]["call_id"], call, "{gates}");

    // Approved and resumed, it finishes, and then it is pruned as well.
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{call}/approve"),
            d,
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = s
        .call("POST", &format!("/api/v1/runs/{parked}/resume"), d, None)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["run"]["status"], "completed");
    wait_for_status(&s, &parked, 404).await;
    s.stop().await;
}

/// The blob files beside the test server's journal (`blobs/sha256/xx/…`).
fn blob_files(s: &TestServer) -> usize {
    let Ok(folders) = std::fs::read_dir(s.dir.path().join("blobs").join("sha256")) else {
        return 0;
    };
    folders
        .map(|f| std::fs::read_dir(f.unwrap().path()).unwrap().count())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_runs_attachments_go_with_their_files() {
    let s = pruning_server().await;
    let d = Some(s.deployer.as_str());
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            d,
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let done = answer["data"]["run_id"].as_str().unwrap().to_owned();
    let (status, answer) = s
        .raw(
            "POST",
            &format!("/api/v1/attachments?filename=notes.txt&run_id={done}"),
            d,
            Some(b"what the run was given\n".to_vec()),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let id = answer["data"]["id"].as_str().unwrap().to_owned();
    // The next pass removes the run, its attachment, and the file no other names.
    wait_for_status(&s, &done, 404).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while blob_files(&s) > 0 {
        assert!(
            Instant::now() < deadline,
            "the file is still there after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, got) = s
        .call(
            "GET",
            &format!("/api/v1/attachments/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 404, "{got}");
    s.stop().await;
}
