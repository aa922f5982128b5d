//! The built-in tools through the real pipeline.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::json;
use toolshed_core::{ErrorCode, Pipeline, RunContext, ToolCall, ToolSet};

fn pipeline() -> Pipeline {
    Pipeline::builder(ToolSet::from_tools(toolshed_stdlib::tools()).unwrap()).build()
}

fn run_in(dir: &std::path::Path) -> RunContext {
    RunContext::builder()
        .env(BTreeMap::from([(
            toolshed_stdlib::OUTPUT_DIR_ENV.to_string(),
            dir.display().to_string(),
        )]))
        .build()
}

#[tokio::test]
async fn markdown_writer_writes_inside_the_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline();
    let run = run_in(dir.path());
    let out = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "title": "Hello", "content": "body"}),
            ),
        )
        .await;
    let result = out.result.unwrap();
    let written = std::fs::read_to_string(dir.path().join("notes/a.md")).unwrap();
    assert_eq!(written, "# Hello\n\nbody\n");
    assert_eq!(result["bytes"], json!(written.len()));
    assert_eq!(
        result["sha256"],
        json!(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            written.as_bytes()
        )))
    );

    // Same content again (a keyed re-run) is fine; different content needs overwrite.
    let again = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "title": "Hello", "content": "body"}),
            ),
        )
        .await;
    assert!(again.result.is_ok());
    let clash = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "content": "other"}),
            ),
        )
        .await;
    let e = clash.result.unwrap_err();
    assert!(e.message.contains("overwrite"), "{}", e.message);
    let forced = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "content": "other", "overwrite": true}),
            ),
        )
        .await;
    assert!(forced.result.is_ok());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes/a.md")).unwrap(),
        "other\n"
    );
}

#[tokio::test]
async fn markdown_writer_refuses_escapes_and_bad_args() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline();
    let run = run_in(dir.path());
    let out = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "../escape.md", "content": "x"}),
            ),
        )
        .await;
    assert_eq!(out.result.unwrap_err().code, ErrorCode::HandlerError);
    assert!(!dir.path().parent().unwrap().join("escape.md").exists());
    let out = p
        .call(
            &run,
            ToolCall::new("markdown_writer", json!({"filename": 3})),
        )
        .await;
    let e = out.result.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgs);
    assert!(e.message.contains("content"), "{}", e.message);
    assert!(e.message.contains("/filename"), "{}", e.message);
}

#[tokio::test]
async fn get_current_time_answers_in_utc() {
    let p = pipeline();
    let out = p
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("get_current_time", json!({})),
        )
        .await;
    let v = out.result.unwrap();
    assert!(v["iso8601"].as_str().unwrap().ends_with('Z'));
    assert!(v["unix"].as_i64().unwrap() > 1_700_000_000);
    let out = p
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("get_current_time", json!({"utc_offset": "EST"})),
        )
        .await;
    assert_eq!(out.result.unwrap_err().code, ErrorCode::HandlerError);
}

#[test]
fn specs_are_complete() {
    for t in toolshed_stdlib::tools() {
        assert!(!t.spec().description.is_empty());
        assert!(
            t.output_schema().is_some(),
            "{} declares its output",
            t.name()
        );
    }
    let mw = toolshed_stdlib::get("markdown_writer").unwrap();
    assert_eq!(mw.spec().idempotency, toolshed_core::Idempotency::Keyed);
}
