//! `exec:` tools (shell scripts) and the failure modes of any subprocess tool: output
//! that is not JSON, a wrong id, a non-zero exit, a stdout flood.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::json;
use toolshed_core::ErrorCode;
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Mode, Request};

#[tokio::test]
async fn a_shell_script_speaks_the_protocol() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = dispatcher(mode);
        let ep = endpoint("exec", "echo_tool.sh");
        let mut pids = Vec::new();
        for _ in 0..2 {
            let run = d.execute(&ep, Request::new("echo", json!({"x": 1}))).await;
            let result = run.result.unwrap();
            assert_eq!(result["shell"], true, "{mode:?}");
            assert!(result["request_bytes"].as_u64().unwrap() > 50);
            pids.push(result["worker"].as_u64().unwrap());
            assert_eq!(run.partials, vec![json!({"step": 1})]);
            assert!(
                run.diagnostics.stderr.contains("shell tool got request r"),
                "{:?}",
                run.diagnostics.stderr
            );
            assert_eq!(
                run.diagnostics.stdout.lines().count(),
                2,
                "{}",
                run.diagnostics.stdout
            );
            match mode {
                Mode::OneShot => assert_eq!(run.diagnostics.exit_code, Some(0)),
                Mode::Pool => assert_eq!(run.diagnostics.exit_code, None),
            }
        }
        match mode {
            Mode::OneShot => assert_ne!(pids[0], pids[1], "one process per call"),
            Mode::Pool => assert_eq!(pids[0], pids[1], "the warm worker is reused"),
        }
    }
}

#[tokio::test]
async fn exec_tools_default_to_one_shot() {
    let d = Dispatcher::new(DispatcherConfig {
        cache_dir: cache_dir(),
        ..DispatcherConfig::default()
    });
    let run = d
        .execute(
            &endpoint("exec", "echo_tool.sh"),
            Request::new("echo", json!({})),
        )
        .await;
    assert_eq!(run.diagnostics.exit_code, Some(0));
}

#[tokio::test]
async fn output_that_is_not_json_is_quoted() {
    let run = dispatcher(Mode::OneShot)
        .execute(
            &endpoint("exec", "not_json.sh"),
            Request::new("chatty", json!({})),
        )
        .await;
    let err = run.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::HandlerError);
    assert_eq!(dispatch_code(&err), "PROTOCOL_VIOLATION");
    assert!(
        err.message.starts_with(
            "tool chatty broke the wire protocol: a line is not JSON: `hello, I am not JSON`"
        ),
        "{err}"
    );
    assert!(err.message.contains("write logs to stderr"), "{err}");
}

#[tokio::test]
async fn an_end_with_no_partial_before_it_is_refused() {
    let err = dispatcher(Mode::OneShot)
        .execute(
            &endpoint("exec", "end_first.sh"),
            Request::new("ender", json!({})),
        )
        .await
        .result
        .unwrap_err();
    assert_eq!(dispatch_code(&err), "PROTOCOL_VIOLATION");
    assert!(
        err.message
            .contains("an `end` line came before any partial result"),
        "{err}"
    );
}

#[tokio::test]
async fn an_answer_to_another_request_is_refused() {
    let err = dispatcher(Mode::OneShot)
        .execute(
            &endpoint("exec", "wrong_id.sh"),
            Request::new("liar", json!({})),
        )
        .await
        .result
        .unwrap_err();
    assert_eq!(dispatch_code(&err), "PROTOCOL_VIOLATION");
    assert!(
        err.message.contains("answers request id \"somebody-else\""),
        "{err}"
    );
    assert!(
        err.message
            .contains(r#"`{"id":"somebody-else","result":1}`"#),
        "{err}"
    );
}

#[tokio::test]
async fn a_non_zero_exit_reports_the_code_and_stderr() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let run = dispatcher(mode)
            .execute(
                &endpoint("exec", "exit3.sh"),
                Request::new("strict", json!({})),
            )
            .await;
        let err = run.result.unwrap_err();
        assert_eq!(dispatch_code(&err), "TOOL_EXITED");
        assert!(
            err.message.contains("tool strict exited with code 3"),
            "{err}"
        );
        assert!(
            err.message
                .contains("config file /etc/tool.conf is missing"),
            "{err}"
        );
        assert_eq!(run.diagnostics.exit_code, Some(3), "{mode:?}");
    }
}

#[tokio::test]
async fn a_stdout_flood_is_killed() {
    let d = Dispatcher::new(DispatcherConfig {
        stdout_cap: 256 * 1024,
        ..config(Mode::OneShot)
    });
    let run = d
        .execute(
            &endpoint("exec", "flood.sh"),
            Request::new("flood", json!({})),
        )
        .await;
    let err = run.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::ResultTooLarge);
    assert_eq!(dispatch_code(&err), "STDOUT_TOO_LARGE");
    assert!(
        err.message
            .contains("tool flood wrote more than 262144 bytes to stdout and was killed"),
        "{err}"
    );
    assert!(run.diagnostics.stdout.len() <= 256 * 1024);
    assert_eq!(run.diagnostics.exit_code, None, "killed, not exited");
}
