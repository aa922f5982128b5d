//! The long-lived sandboxed child (a warm worker): piped stdio speaking
//! newline-delimited JSON, killed with `kill` (everything of the sandbox dies), dropped
//! (the same), or exiting by itself, with the same accounting as a one-shot run.
#![allow(clippy::unwrap_used)]

mod common;

use common::{py, require, sandbox, sleeping, unique, wait_for};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use toolshed_sandbox::{Exit, KillReason, LimitsRequest, RunSpec};

const WORKER: &str = r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    print(json.dumps({"id": req["id"], "double": req["n"] * 2}), flush=True)
"#;

#[tokio::test]
async fn a_worker_answers_ndjson_and_kill_ends_its_whole_sandbox() {
    require("python3", "python3");
    let sb = sandbox();
    let mut child = sb
        .spawn(py(WORKER, LimitsRequest::default()))
        .await
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    for n in 1..=3 {
        stdin
            .write_all(format!("{{\"id\": {n}, \"n\": {}}}\n", n * 10).as_bytes())
            .await
            .unwrap();
        let line = stdout.next_line().await.unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], n);
        assert_eq!(v["double"], n * 20);
    }
    assert!(child.try_exit().is_none(), "the worker exited early");
    let uid = child.host_uid();
    assert!(!common::processes_of_uid(uid).is_empty());
    let used = child.accounting();
    assert!(used.memory_peak_bytes.is_some_and(|b| b > 0), "{used:?}");

    let report = child.kill().await;
    assert_eq!(report.killed, Some(KillReason::Requested));
    assert_eq!(report.exit, Exit::Signal(9));
    assert!(report.accounting.cpu_time.is_some(), "{report:?}");
    assert!(common::processes_of_uid(uid).is_empty());
    // The pipe sees the end too.
    assert!(stdout.next_line().await.unwrap().is_none());
}

#[tokio::test]
async fn dropping_a_child_kills_everything_it_started() {
    let sb = sandbox();
    let marker = unique();
    let mut child = sb
        .spawn(RunSpec::new(
            "/bin/sh",
            [
                "-c".to_owned(),
                format!("sleep {marker} & setsid sleep {marker} & wait"),
            ],
        ))
        .await
        .unwrap();
    wait_for(10, "the sleeps to start", || sleeping(marker).len() == 2);
    let _ = child.stdin.take();
    drop(child);
    wait_for(10, "the dropped child's sandbox to die", || {
        sleeping(marker).is_empty()
    });
}

#[tokio::test]
async fn a_child_that_exits_by_itself_reports_its_code() {
    let sb = sandbox();
    let mut child = sb
        .spawn(RunSpec::new("/bin/sh", ["-c", "read x; exit $x"]))
        .await
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"7\n").await.unwrap();
    let report = child.wait().await;
    assert_eq!(report.exit, Exit::Code(7));
    assert_eq!(report.killed, None);
    // Waiting again gives the same report.
    assert_eq!(child.wait().await.exit, Exit::Code(7));
    assert_eq!(
        child.kill().await.killed,
        None,
        "it was not killed: it had exited"
    );
}
