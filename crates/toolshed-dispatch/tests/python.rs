//! Python tools through the real interpreter: the seed's `order_lookup` pushed (schema
//! inferred) and run cold and warm through the pipeline; values, async, generators,
//! exceptions, print protection, context and credentials, timeouts and crashes.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use toolshed_core::{
    CredentialError, CredentialProvider, CrumbBus, CrumbKind, ErrorCode, MemorySink, Pipeline,
    RunContext, Secret, Tool, ToolCall, ToolSet,
};
use toolshed_dispatch::{Dispatcher, Mode, Request, infer_python_schema};

/// The seed's JSON schema for `order_lookup`, with the descriptions its docstring gives.
fn seed_schema() -> Value {
    json!({
      "type": "object",
      "properties": {
        "order_id": {
          "type": "string",
          "description": "The order ID (format: ORD-XXXXXX)"
        },
        "include_tracking": {
          "type": "boolean",
          "description": "Whether to include shipping tracking info",
          "default": false
        }
      },
      "required": ["order_id"]
    })
}

#[tokio::test]
async fn order_lookup_schema_is_inferred_from_the_plain_function() {
    let path = fixture("order_lookup.py");
    let inferred = infer_python_schema(&path, "order_lookup").await.unwrap();
    assert_eq!(inferred.name, "order_lookup");
    assert_eq!(inferred.description, "Look up an order by ID.");
    assert_eq!(inferred.input_schema, seed_schema());
    assert_eq!(
        inferred.output_schema,
        Some(json!({
            "type": "object",
            "description": "dict with order status, items, and optionally tracking"
        }))
    );
    assert!(inferred.warnings.is_empty(), "{:?}", inferred.warnings);

    let err = infer_python_schema(&path, "lookup").await.unwrap_err();
    assert_eq!(err.code(), "SCHEMA_INFERENCE_FAILED");
    assert!(err.to_string().contains("defines `order_lookup`"), "{err}");
}

#[tokio::test]
async fn richer_signatures_infer_to_json_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("search.py");
    std::fs::write(
        &path,
        r#"
from typing import List, Literal, Optional

def search(query: str, limit: int = 10, ratio: float = 0.5, tags: list[str] | None = None,
           mode: Literal["fast", "deep"] = "fast", ids: Optional[List[int]] = None, ctx=None):
    """Search the catalogue.

    Args:
        query: What to look for,
            on two lines.
        limit (int): At most this many hits.
    """
"#,
    )
    .unwrap();
    let inferred = dispatcher(Mode::OneShot)
        .infer_python_schema(&path, "search")
        .await
        .unwrap();
    assert_eq!(inferred.description, "Search the catalogue.");
    assert_eq!(inferred.output_schema, None);
    assert_eq!(
        inferred.input_schema,
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for, on two lines."},
                "limit": {"type": "integer", "description": "At most this many hits.", "default": 10},
                "ratio": {"type": "number", "default": 0.5},
                "tags": {"type": ["array", "null"], "items": {"type": "string"}, "default": null},
                "mode": {"type": "string", "enum": ["fast", "deep"], "default": "fast"},
                "ids": {"type": ["array", "null"], "items": {"type": "integer"}, "default": null}
            },
            "required": ["query"]
        })
    );
}

async fn order_lookup_tool(dispatcher: &Dispatcher) -> Tool {
    let path = fixture("order_lookup.py");
    let inferred = dispatcher
        .infer_python_schema(&path, "order_lookup")
        .await
        .unwrap();
    let mut builder = Tool::builder("order-lookup")
        .description(inferred.description)
        .input_schema(inferred.input_schema)
        .timeout(Duration::from_secs(20))
        .raw_handler(dispatcher.handler(endpoint("python", "order_lookup.py"), "order-lookup"));
    if let Some(out) = inferred.output_schema {
        builder = builder.output_schema(out);
    }
    builder.build().unwrap()
}

#[tokio::test]
async fn order_lookup_runs_cold_and_warm_through_the_pipeline() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let dispatcher = dispatcher(mode);
        let pipeline = pipeline(vec![order_lookup_tool(&dispatcher).await]);
        let run = RunContext::ephemeral();
        for _ in 0..2 {
            let outcome = pipeline
                .call(
                    &run,
                    ToolCall::new(
                        "order-lookup",
                        json!({"order_id": "ORD-123456", "include_tracking": true}),
                    ),
                )
                .await;
            assert_eq!(
                outcome.result.unwrap(),
                json!({
                    "order_id": "ORD-123456",
                    "status": "shipped",
                    "items": ["Widget A", "Widget B"],
                    "tracking": "1Z999AA10123456784"
                }),
                "{mode:?}"
            );
        }
        // The default from the inferred schema is applied by the pipeline.
        let outcome = pipeline
            .call(
                &run,
                ToolCall::new("order-lookup", json!({"order_id": "ORD-1"})),
            )
            .await;
        assert_eq!(outcome.result.unwrap()["tracking"], Value::Null, "{mode:?}");
        // Bad args never reach the process.
        let outcome = pipeline
            .call(&run, ToolCall::new("order-lookup", json!({"order_id": 7})))
            .await;
        assert_eq!(outcome.result.unwrap_err().code, ErrorCode::InvalidArgs);
    }
}

#[tokio::test]
async fn values_async_functions_and_exceptions() {
    let d = dispatcher(Mode::Pool);
    let ok = d
        .execute(
            &endpoint("python", "tools.py:add"),
            Request::new("add", json!({"a": 2})),
        )
        .await;
    assert_eq!(ok.result.unwrap(), json!(3));
    assert_eq!(
        ok.diagnostics.exit_code, None,
        "a pooled worker keeps running"
    );

    let ok = d
        .execute(
            &endpoint("python", "tools.py:slow_echo"),
            Request::new("slow_echo", json!({"text": "hé"})),
        )
        .await;
    assert_eq!(ok.result.unwrap(), json!({"text": "hé"}));

    let err = d
        .execute(
            &endpoint("python", "tools.py:explode"),
            Request::new("explode", json!({"why": "no fuel"})),
        )
        .await;
    let e = err.result.unwrap_err();
    assert_eq!(e.code, ErrorCode::HandlerError);
    assert_eq!(e.message, "ValueError: cannot continue: no fuel");
    assert_eq!(dispatch_code(&e), "TOOL_ERROR");
    assert_eq!(e.details.unwrap()["tool_code"], "ValueError");
    assert!(
        err.diagnostics.stderr.contains("Traceback"),
        "{}",
        err.diagnostics.stderr
    );

    let e = d
        .execute(
            &endpoint("python", "tools.py:not_found"),
            Request::new("not_found", json!({"order_id": "ORD-9"})),
        )
        .await
        .result
        .unwrap_err();
    assert_eq!(e.message, "OrderNotFound: no order ORD-9");
    assert_eq!(e.details.unwrap()["tool_code"], "ORDER_NOT_FOUND");

    let e = d
        .execute(
            &endpoint("python", "tools.py:add"),
            Request::new("add", json!({"a": 1, "c": 2})),
        )
        .await
        .result
        .unwrap_err();
    assert!(e.message.contains("unexpected keyword argument 'c'"), "{e}");

    let e = d
        .execute(
            &endpoint("python", "broken.py"),
            Request::new("broken", json!({})),
        )
        .await
        .result
        .unwrap_err();
    assert!(e.message.contains("cannot load"), "{e}");
    assert!(e.message.contains("a_module_that_does_not_exist"), "{e}");

    let e = d
        .execute(
            &endpoint("python", "tools.py:nope"),
            Request::new("nope", json!({})),
        )
        .await
        .result
        .unwrap_err();
    assert!(e.message.contains("has no function `nope`"), "{e}");
    assert!(e.message.contains("`add`"), "{e}");

    let e = d
        .execute(
            &endpoint("python", "tools.py:not_json"),
            Request::new("not_json", json!({})),
        )
        .await
        .result
        .unwrap_err();
    assert!(e.message.contains("not JSON-serializable"), "{e}");

    let e = d
        .execute(
            &endpoint("python", "tools.py:empty_stream"),
            Request::new("empty_stream", json!({})),
        )
        .await
        .result
        .unwrap_err();
    assert!(e.message.contains("yielded nothing"), "{e}");
}

#[tokio::test]
async fn generators_stream_partials() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = dispatcher(mode);
        let run = d
            .execute(
                &endpoint("python", "tools.py:countdown"),
                Request::new("countdown", json!({"n": 3})),
            )
            .await;
        assert_eq!(run.result.unwrap(), json!({"left": 0}));
        assert_eq!(
            run.partials,
            vec![
                json!({"left": 3}),
                json!({"left": 2}),
                json!({"left": 1}),
                json!({"left": 0})
            ],
            "every yield is a partial, sent as it is yielded; the last is the result too"
        );
        if mode == Mode::OneShot {
            assert_eq!(run.diagnostics.exit_code, Some(0));
        }

        let run = d
            .execute(
                &endpoint("python", "tools.py:ticker"),
                Request::new("ticker", json!({"n": 3})),
            )
            .await;
        assert_eq!(run.result.unwrap(), json!({"tick": 2}));
        assert_eq!(run.partials.len(), 3);
    }

    // Through the pipeline, partials become `tool:result:partial` crumbs.
    let d = dispatcher(Mode::Pool);
    let bus = CrumbBus::default();
    let sink = Arc::new(MemorySink::new());
    bus.add_sink(sink.clone());
    let pipeline = Pipeline::builder(
        ToolSet::from_tools([tool(
            &d,
            "countdown",
            endpoint("python", "tools.py:countdown"),
            Duration::from_secs(20),
        )])
        .unwrap(),
    )
    .crumbs(bus)
    .build();
    let outcome = pipeline
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("countdown", json!({"n": 2})),
        )
        .await;
    assert_eq!(outcome.result.unwrap(), json!({"left": 0}));
    let partials: Vec<Value> = sink
        .crumbs()
        .iter()
        .filter(|c| c.kind == CrumbKind::Partial)
        .filter_map(|c| c.payload.clone())
        .collect();
    assert_eq!(
        partials,
        vec![json!({"left": 2}), json!({"left": 1}), json!({"left": 0})]
    );
}

#[tokio::test]
async fn print_is_the_tools_stdout_never_the_protocol() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let run = dispatcher(mode)
            .execute(
                &endpoint("python", "tools.py:noisy"),
                Request::new("noisy", json!({})),
            )
            .await;
        assert_eq!(run.result.unwrap(), json!({"printed": 3}), "{mode:?}");
        // What the tool printed is its stdout, and only that: not the runner's
        // protocol lines, not its stderr.
        assert_eq!(
            run.diagnostics.stdout, "log line 0\nlog line 1\nlog line 2\nwritten to sys.stdout\n",
            "{mode:?}"
        );
        // Below Python (a child process's fd 1) it is stderr, as the protocol needs.
        assert!(
            run.diagnostics.stderr.contains("from a child process"),
            "{mode:?}: {:?}",
            run.diagnostics.stderr
        );
        assert!(
            !run.diagnostics.stderr.contains("log line"),
            "{mode:?}: {:?}",
            run.diagnostics.stderr
        );
    }
}

#[tokio::test]
async fn a_tool_reading_stdin_cannot_swallow_requests() {
    let d = dispatcher(Mode::Pool);
    let ep = endpoint("python", "tools.py:read_stdin");
    for _ in 0..2 {
        let run = d.execute(&ep, Request::new("read_stdin", json!({}))).await;
        assert_eq!(run.result.unwrap(), json!({"stdin": ""}));
    }
}

#[tokio::test]
async fn stderr_is_capped_to_its_tail() {
    let run = dispatcher(Mode::OneShot)
        .execute(
            &endpoint("python", "tools.py:shout_to_stderr"),
            Request::new("shout_to_stderr", json!({"kib": 200})),
        )
        .await;
    assert_eq!(run.result.unwrap(), json!({"kib": 200}));
    assert!(
        run.diagnostics.stderr.len() <= 64 * 1024 + 100,
        "{}",
        run.diagnostics.stderr.len()
    );
    assert!(run.diagnostics.stderr.contains("bytes of stderr dropped"));
    assert!(run.diagnostics.stderr.trim_end().ends_with("THE END"));
}

#[derive(Debug)]
struct Vault(BTreeMap<&'static str, &'static str>);

impl CredentialProvider for Vault {
    fn describe(&self) -> String {
        "test".into()
    }
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        let r = self.0.get(name).map(|v| Secret::new(*v)).ok_or_else(|| {
            CredentialError::new(ErrorCode::CredentialNotFound, format!("no {name}"))
        });
        Box::pin(std::future::ready(r))
    }
}

#[tokio::test]
async fn the_tool_gets_its_context_and_only_its_declared_credentials() {
    let d = dispatcher(Mode::Pool);
    let tool = Tool::builder("whoami")
        .description("Tell who is calling.")
        .input_schema(json!({"type": "object"}))
        .credentials(["API_TOKEN", "NOT_IN_THE_VAULT"])
        .raw_handler(d.handler(endpoint("python", "tools.py:whoami"), "whoami"))
        .build()
        .unwrap();
    let run = RunContext::builder()
        .run_id("run-42")
        .credentials(Arc::new(Vault(BTreeMap::from([
            ("API_TOKEN", "tok-very-secret"),
            ("UNDECLARED", "must-never-leave"),
        ]))))
        .build();
    let outcome = pipeline(vec![tool])
        .call(&run, ToolCall::new("whoami", json!({})))
        .await;
    let v = outcome.result.unwrap();
    assert_eq!(v["tool"], "whoami");
    assert_eq!(v["run_id"], "run-42");
    assert_eq!(v["tool_call_id"], json!(&*outcome.tool_call_id));
    assert_eq!(v["credentials"], json!(["API_TOKEN"]));
    // The tool returned the secret; the pipeline scrubbed it.
    assert_eq!(v["token"], "[REDACTED]");
    // The runtime's environment stays out of tools (only the allowlist passes).
    assert_eq!(v["env_has_path"], true);
    assert_eq!(v["env_cargo"], Value::Null);
    assert!(std::env::var("CARGO_PKG_NAME").is_ok());

    // execute() scrubs the values it was handed, everywhere.
    let run = d
        .execute(
            &endpoint("python", "tools.py:whoami"),
            Request::new("whoami", json!({})).credential("API_TOKEN", Secret::new("tok-given")),
        )
        .await;
    assert_eq!(run.result.unwrap()["token"], "[REDACTED]");
    assert!(!run.diagnostics.stdout.contains("tok-given"));
}

#[tokio::test]
async fn a_tool_past_its_timeout_is_killed_with_its_children() {
    for mode in [Mode::OneShot, Mode::Pool] {
        // Unsandboxed: the tool writes its host pids to a host file.
        let d = Dispatcher::new(unsandboxed(mode));
        warm(&d).await;
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pids");
        let slow = tool(
            &d,
            "sleepy",
            endpoint("python", "tools.py:sleepy"),
            Duration::from_millis(1500),
        );
        let outcome = pipeline(vec![slow])
            .call(
                &RunContext::ephemeral(),
                ToolCall::new(
                    "sleepy",
                    json!({"seconds": 600, "pid_file": pid_file.to_str().unwrap()}),
                ),
            )
            .await;
        let err = outcome.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::Timeout, "{mode:?}");
        assert_eq!(err.message, "tool sleepy timed out after 1500ms");
        let (pid, grandchild) = read_pids(&pid_file).await;
        eventually("the tool process is killed and reaped", || !exists(pid)).await;
        eventually("the tool's own child is killed", || !running(grandchild)).await;
    }
}

#[tokio::test]
async fn a_stream_that_hangs_is_killed_when_the_pipeline_gives_up() {
    for mode in [Mode::OneShot, Mode::Pool] {
        // Unsandboxed: the tool writes its host pids to a host file.
        let d = Dispatcher::new(unsandboxed(mode));
        warm(&d).await;
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pids");
        let pipeline = pipeline(vec![tool(
            &d,
            "drip",
            endpoint("python", "tools.py:drip"),
            Duration::from_millis(1500),
        )]);
        let outcome = pipeline
            .call(
                &RunContext::ephemeral(),
                ToolCall::new("drip", json!({"pid_file": pid_file.to_str().unwrap()})),
            )
            .await;
        assert_eq!(outcome.result.unwrap_err().code, ErrorCode::Timeout);
        let (pid, _) = read_pids(&pid_file).await;
        eventually("the streaming tool is killed and reaped", || !exists(pid)).await;
    }
}

#[tokio::test]
async fn execute_enforces_its_timeout() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pids");
        // Unsandboxed: the tool writes its host pids to a host file.
        let d = Dispatcher::new(unsandboxed(mode));
        warm(&d).await;
        let run = d
            .execute(
                &endpoint("python", "tools.py:sleepy"),
                Request::new(
                    "sleepy",
                    json!({"seconds": 600, "pid_file": pid_file.to_str().unwrap()}),
                )
                .timeout(Duration::from_millis(1500)),
            )
            .await;
        let err = run.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::Timeout);
        assert_eq!(err.message, "tool sleepy timed out after 1500ms");
        assert_eq!(run.diagnostics.exit_code, None);
        assert!(run.diagnostics.timed_out, "{mode:?}");
        assert!(run.duration_ms < 10_000.0, "{}", run.duration_ms);
        let (pid, grandchild) = read_pids(&pid_file).await;
        // execute() reaps before it returns.
        assert!(!exists(pid), "{mode:?}: pid {pid} still exists");
        eventually("the tool's own child is killed", || !running(grandchild)).await;
        // The pool still works afterwards.
        let ok = d
            .execute(
                &endpoint("python", "tools.py:add"),
                Request::new("add", json!({"a": 1})),
            )
            .await;
        assert_eq!(ok.result.unwrap(), json!(2));
    }
}

#[tokio::test]
async fn a_crash_reports_the_exit_code_and_stderr_tail() {
    let run = dispatcher(Mode::OneShot)
        .execute(
            &endpoint("python", "tools.py:crash"),
            Request::new("crash", json!({"code": 3})),
        )
        .await;
    let err = run.result.unwrap_err();
    assert_eq!(dispatch_code(&err), "TOOL_EXITED");
    assert!(
        err.message
            .contains("tool crash exited with code 3 without sending a result"),
        "{err}"
    );
    assert!(
        err.message.contains("fatal: the database is on fire"),
        "{err}"
    );
    assert_eq!(err.details.unwrap()["exit_code"], 3);
    assert_eq!(run.diagnostics.exit_code, Some(3));
    assert!(run.diagnostics.stderr.contains("the database is on fire"));
}

#[tokio::test]
async fn a_tool_printing_past_the_limit_still_answers() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let run = dispatcher(mode)
            .execute(
                &endpoint("python", "tools.py:chatty"),
                Request::new("chatty", json!({"kib": 2048})),
            )
            .await;
        assert_eq!(run.result.unwrap(), json!({"kib": 2048}), "{mode:?}");
        let out = &run.diagnostics.stdout;
        assert!(out.starts_with("ppp"), "{mode:?}");
        assert!(
            out.trim_end().ends_with("characters printed were dropped]"),
            "{mode:?}: {}",
            &out[out.len().saturating_sub(200)..]
        );
    }
}
