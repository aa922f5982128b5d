//! A dispatched call's diagnostics through the pipeline: stdout, stderr and the exit
//! code in the outcome, on success, on failure, for a stream, and when the pipeline
//! times the call out (what the tool wrote so far, `timed_out`).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use toolshed_core::{CallOutcome, ErrorCode, RunContext, ToolCall};
use toolshed_dispatch::{Dispatcher, Endpoint, Mode};

async fn call(mode: Mode, target: &str, args: serde_json::Value, timeout: Duration) -> CallOutcome {
    let d = dispatcher(mode);
    let tool = tool(&d, "t", endpoint("python", target), timeout);
    pipeline(vec![tool])
        .call(&RunContext::ephemeral(), ToolCall::new("t", args))
        .await
}

#[tokio::test]
async fn a_reply_carries_stdout_stderr_and_the_exit_code() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let out = call(mode, "tools.py:noisy", json!({}), Duration::from_secs(20)).await;
        assert_eq!(out.result.unwrap(), json!({"printed": 3}));
        let d = &out.diagnostics;
        // print() is the tool's stdout; a child process writing to fd 1 is its stderr;
        // the runner's protocol lines are neither.
        assert!(d.stdout.contains("log line 2"), "{mode:?}: {d:?}");
        assert!(d.stderr.contains("from a child process"), "{mode:?}: {d:?}");
        assert!(!d.stdout.contains(r#""result""#), "{mode:?}: {d:?}");
        assert!(!d.timed_out && !d.stdout_truncated && !d.stderr_truncated);
        match mode {
            Mode::OneShot => assert_eq!(d.exit_code, Some(0)),
            Mode::Pool => assert_eq!(d.exit_code, None, "a pooled worker keeps running"),
        }
    }
}

#[tokio::test]
async fn a_failed_call_keeps_its_stderr_and_exit_code() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let out = call(
            mode,
            "tools.py:crash",
            json!({"code": 3}),
            Duration::from_secs(20),
        )
        .await;
        let err = out.result.unwrap_err();
        assert_eq!(dispatch_code(&err), "TOOL_EXITED", "{mode:?}: {err}");
        assert_eq!(out.diagnostics.exit_code, Some(3), "{mode:?}");
        assert!(out.diagnostics.stderr.contains("the database is on fire"));

        let out = call(
            mode,
            "tools.py:explode",
            json!({"why": "x"}),
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(dispatch_code(&out.result.unwrap_err()), "TOOL_ERROR");
        assert!(out.diagnostics.stderr.contains("Traceback"), "{mode:?}");
    }
}

#[tokio::test]
async fn a_stream_reports_its_diagnostics_at_its_end() {
    let out = call(
        Mode::OneShot,
        "tools.py:countdown",
        json!({"n": 2}),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.result.unwrap(), json!({"left": 0}));
    // Three partials (2, 1, 0), then `end`: the runner's protocol, not the tool's
    // stdout, which printed nothing.
    assert_eq!(
        out.diagnostics.stdout.lines().count(),
        0,
        "{:?}",
        out.diagnostics
    );
    assert_eq!(out.diagnostics.exit_code, Some(0));
}

#[tokio::test]
async fn a_pipeline_timeout_keeps_what_the_tool_wrote_so_far() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = dispatcher(mode);
        warm(&d).await;
        let sleeper = tool(
            &d,
            "t",
            endpoint("python", "tools.py:chatty_sleeper"),
            Duration::from_secs(2),
        );
        let out = pipeline(vec![sleeper])
            .call(&RunContext::ephemeral(), ToolCall::new("t", json!({})))
            .await;
        let err = out.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::Timeout, "{mode:?}");
        assert_eq!(err.message, "tool t timed out after 2000ms");
        assert!(out.diagnostics.timed_out, "{mode:?}");
        assert!(
            out.diagnostics.stderr.contains("started the slow part"),
            "{mode:?}: {:?}",
            out.diagnostics
        );

        // A stream cut short keeps the lines it sent (a shell tool: the Python runner
        // holds a yielded value back until it knows whether it is the last).
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("drip.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\nread -r line\n\
             id=$(printf '%s' \"$line\" | sed -E 's/^\\{\"id\":\"([^\"]*)\".*/\\1/')\n\
             printf '{\"id\":\"%s\",\"partial\":{\"started\":true}}\\n' \"$id\"\n\
             echo \"$$ $$\" > pids\nsleep 600\n",
        )
        .unwrap();
        let mut perms = std::fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&script, perms).unwrap();
        // Unsandboxed: the script writes its pids beside itself.
        let d = Dispatcher::new(unsandboxed(mode));
        warm(&d).await;
        let ep = Endpoint::parse(&format!("exec:{}", script.display())).unwrap();
        let out = pipeline(vec![tool(&d, "drip", ep, Duration::from_secs(2))])
            .call(&RunContext::ephemeral(), ToolCall::new("drip", json!({})))
            .await;
        assert_eq!(out.result.unwrap_err().code, ErrorCode::Timeout);
        assert!(out.diagnostics.timed_out);
        assert!(
            out.diagnostics
                .stdout
                .contains(r#""partial":{"started":true}"#),
            "{mode:?}: {:?}",
            out.diagnostics
        );
        let (pid, _) = read_pids(&dir.path().join("pids")).await;
        all_gone(pid).await;
    }
}

#[tokio::test]
async fn execute_reports_its_own_timeout_in_the_diagnostics() {
    let d = dispatcher(Mode::Pool);
    warm(&d).await;
    let run = d
        .execute(
            &endpoint("python", "tools.py:chatty_sleeper"),
            toolshed_dispatch::Request::new("t", json!({})).timeout(Duration::from_secs(2)),
        )
        .await;
    assert_eq!(run.result.unwrap_err().code, ErrorCode::Timeout);
    assert!(run.diagnostics.timed_out);
    assert_eq!(run.diagnostics.signal, Some(9));
    assert!(run.diagnostics.stderr.contains("started the slow part"));
    let builtin = d
        .execute(
            &Endpoint::parse("builtin:anything").unwrap(),
            toolshed_dispatch::Request::new("t", json!({})),
        )
        .await;
    assert!(
        builtin
            .result
            .unwrap_err()
            .message
            .contains("Dispatcher::handler"),
        "a built-in runs through the pipeline"
    );
}
