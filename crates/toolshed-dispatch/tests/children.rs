//! Child processes on every path out of a call: after a result, an error, a crash, a
//! stdout flood, a protocol violation and a dropped call, the tool process is reaped
//! and nothing it started is left running (checked in the process table: its process
//! group, and the processes whose parent it was). Each tool starts a background
//! `sleep 600` first, so a missed kill shows.
//!
//! These run unsandboxed, as an operator may choose: they check the host-process path
//! (process groups, pids written beside the tool). The sandboxed path is checked by host
//! uid in `sandboxed.rs`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::json;
use toolshed_core::{CallOutcome, ErrorCode, RunContext, ToolCall};
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint, Mode};

/// An `exec:` tool in its own folder: it reads the request, starts `sleep 600` in the
/// background, writes its own pid and the sleeper's to `pids` (in its folder, its
/// working directory), then does `then`.
struct Script {
    dir: tempfile::TempDir,
    endpoint: Endpoint,
}

impl Script {
    fn new(then: &str) -> Script {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tool.sh");
        let body = format!(
            "#!/bin/sh\n\
             read -r line\n\
             id=$(printf '%s' \"$line\" | sed -E 's/^\\{{\"id\":\"([^\"]*)\".*/\\1/')\n\
             sleep 600 </dev/null >/dev/null 2>&1 &\n\
             echo \"$$ $!\" > pids\n\
             {then}\n"
        );
        std::fs::write(&path, body).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
        let endpoint = Endpoint::parse(&format!("exec:{}", path.display())).unwrap();
        Script { dir, endpoint }
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.path().join("pids")
    }

    /// Call it through the pipeline in `mode`, with a stdout cap of 64 KiB.
    async fn call(&self, mode: Mode) -> CallOutcome {
        let d = flood_capped(mode);
        let tool = tool(&d, "child", self.endpoint.clone(), Duration::from_secs(30));
        pipeline(vec![tool])
            .call(&RunContext::ephemeral(), ToolCall::new("child", json!({})))
            .await
    }

    /// The tool's pid and its sleeper's, once written; the sleeper was running then.
    async fn pids(&self) -> (u32, u32) {
        read_pids(&self.pid_file()).await
    }
}

fn flood_capped(mode: Mode) -> Dispatcher {
    Dispatcher::new(DispatcherConfig {
        stdout_cap: 64 * 1024,
        ..unsandboxed(mode)
    })
}

#[tokio::test]
async fn after_a_result_nothing_of_the_tool_is_left() {
    // One-shot: a pooled worker that answered cleanly stays, by design, for the next call.
    let script = Script::new(r#"printf '{"id":"%s","result":{"ok":true}}\n' "$id""#);
    let outcome = script.call(Mode::OneShot).await;
    assert_eq!(outcome.result.unwrap(), json!({"ok": true}));
    // The tool exited on its own: its exit code is kept although its group was killed.
    assert_eq!(outcome.diagnostics.exit_code, Some(0));
    let (pid, sleeper) = script.pids().await;
    all_gone(pid).await;
    assert!(!running(sleeper));
}

#[tokio::test]
async fn after_an_error_line_nothing_of_the_tool_is_left() {
    let script = Script::new(r#"printf '{"id":"%s","error":{"message":"no luck"}}\n' "$id""#);
    let outcome = script.call(Mode::OneShot).await;
    let err = outcome.result.unwrap_err();
    assert_eq!(dispatch_code(&err), "TOOL_ERROR", "{err}");
    let (pid, _) = script.pids().await;
    all_gone(pid).await;
}

#[tokio::test]
async fn after_a_crash_nothing_of_the_tool_is_left() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let script = Script::new("echo 'giving up' >&2; exit 3");
        let outcome = script.call(mode).await;
        let err = outcome.result.unwrap_err();
        assert_eq!(dispatch_code(&err), "TOOL_EXITED", "{mode:?}: {err}");
        assert_eq!(outcome.diagnostics.exit_code, Some(3), "{mode:?}");
        assert!(outcome.diagnostics.stderr.contains("giving up"), "{mode:?}");
        let (pid, _) = script.pids().await;
        all_gone(pid).await;
    }
}

#[tokio::test]
async fn after_a_stdout_flood_nothing_of_the_tool_is_left() {
    for mode in [Mode::OneShot, Mode::Pool] {
        // `yes | tr`: the shell, `yes` and `tr` are three processes of one group.
        let script = Script::new("yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | tr -d '\\n'");
        let outcome = script.call(mode).await;
        let err = outcome.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::ResultTooLarge, "{mode:?}: {err}");
        assert_eq!(dispatch_code(&err), "STDOUT_TOO_LARGE");
        assert!(outcome.diagnostics.stdout_truncated, "{mode:?}");
        assert_eq!(outcome.diagnostics.signal, Some(9), "{mode:?}: killed");
        let (pid, _) = script.pids().await;
        all_gone(pid).await;
    }
}

#[tokio::test]
async fn after_a_protocol_violation_nothing_of_the_tool_is_left() {
    for mode in [Mode::OneShot, Mode::Pool] {
        // The tool would go on running after its bad line.
        let script = Script::new("echo 'hello, I am not JSON'; sleep 600");
        let outcome = script.call(mode).await;
        let err = outcome.result.unwrap_err();
        assert_eq!(dispatch_code(&err), "PROTOCOL_VIOLATION", "{mode:?}: {err}");
        assert!(outcome.diagnostics.stdout.contains("not JSON"), "{mode:?}");
        let (pid, _) = script.pids().await;
        all_gone(pid).await;
    }
}

#[tokio::test]
async fn after_a_dropped_call_nothing_of_the_tool_is_left() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let script = Script::new("sleep 600");
        let d = flood_capped(mode);
        let tool = tool(
            &d,
            "child",
            script.endpoint.clone(),
            Duration::from_secs(600),
        );
        let pipeline = pipeline(vec![tool]);
        let run = RunContext::ephemeral();
        let mut call = Box::pin(pipeline.call(&run, ToolCall::new("child", json!({}))));
        // Drive the call until the tool is running, then drop it mid-call.
        let (pid, sleeper) = tokio::select! {
            outcome = &mut call => panic!("{mode:?}: the call ended: {outcome:?}"),
            pids = script.pids() => pids,
        };
        assert!(
            running(sleeper),
            "{mode:?}: the sleeper runs while the call does"
        );
        drop(call);
        all_gone(pid).await;
    }
}
