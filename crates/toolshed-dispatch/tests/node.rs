//! Node tools through the real interpreter: ES modules, CommonJS, async generators,
//! thrown errors, TypeScript transpiled once and cached, and declared schemas.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::*;
use serde_json::json;
use toolshed_core::{ErrorCode, RunContext, ToolCall};
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Mode, Request};

#[tokio::test]
async fn node_tools_return_stream_and_throw() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = dispatcher(mode);
        let run = d
            .execute(
                &endpoint("node", "greet.mjs"),
                Request::new("greet", json!({"name": "Ada"})),
            )
            .await;
        let v = run.result.unwrap();
        assert_eq!(v["greeting"], "hello Ada", "{mode:?}");
        assert_eq!(v["tool"], "greet");
        assert!(
            run.diagnostics
                .stderr
                .contains("this log line must not break the protocol")
        );

        let run = d
            .execute(
                &endpoint("node", "count.mjs:count"),
                Request::new("count", json!({"to": 3})),
            )
            .await;
        assert_eq!(run.result.unwrap(), json!({"n": 3}));
        assert_eq!(run.partials, vec![json!({"n": 1}), json!({"n": 2})]);

        let run = d
            .execute(
                &endpoint("node", "fail.mjs"),
                Request::new("fail", json!({"why": "x"})),
            )
            .await;
        let err = run.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::HandlerError);
        assert_eq!(err.message, "RangeError: cannot do that: x");
        assert_eq!(err.details.unwrap()["tool_code"], "OUT_OF_RANGE");

        let run = d
            .execute(
                &endpoint("node", "legacy.cjs"),
                Request::new("legacy", json!({"a": 1, "b": 2})),
            )
            .await;
        assert_eq!(run.result.unwrap(), json!({"sum": 3, "style": "commonjs"}));

        let err = d
            .execute(
                &endpoint("node", "count.mjs:missing"),
                Request::new("missing", json!({})),
            )
            .await
            .result
            .unwrap_err();
        assert!(
            err.message.contains("has no exported function `missing`"),
            "{err}"
        );
        assert!(err.message.contains("`count`"), "{err}");
    }
}

#[tokio::test]
async fn node_tools_run_through_the_pipeline_with_their_context() {
    let d = dispatcher(Mode::Pool);
    let pipeline = pipeline(vec![tool(
        &d,
        "greet",
        endpoint("node", "greet.mjs"),
        Duration::from_secs(30),
    )]);
    let run = RunContext::builder().run_id("run-node").build();
    let outcome = pipeline
        .call(&run, ToolCall::new("greet", json!({"name": "Grace"})))
        .await;
    let v = outcome.result.unwrap();
    assert_eq!(v["greeting"], "hello Grace");
    assert_eq!(v["run_id"], "run-node");
}

#[tokio::test]
async fn typescript_is_transpiled_once_then_cached() {
    let cache = tempfile::tempdir().unwrap();
    let config = || toolshed_dispatch::DispatcherConfig {
        cache_dir: cache.path().to_path_buf(),
        mode: Mode::OneShot,
        ..toolshed_dispatch::DispatcherConfig::default()
    };
    let ep = endpoint("node", "shout.ts");
    let run = Dispatcher::new(config())
        .execute(
            &ep,
            Request::new("shout", json!({"text": "hi", "times": 2})),
        )
        .await;
    let v = run.result.unwrap();
    // The sibling `./punctuation.js` import resolved to punctuation.ts, transpiled too;
    // import.meta.url still names the source's folder.
    assert_eq!(v["text"], "HI!!");
    assert_eq!(v["mode"], "LOUD");
    assert_eq!(
        v["here"],
        format!(
            "{}/",
            fixture("").display().to_string().trim_end_matches('/')
        )
    );

    let manifests: Vec<_> = std::fs::read_dir(cache.path().join("typescript"))
        .unwrap()
        .map(|e| e.unwrap().path().join("manifest.json"))
        .collect();
    assert_eq!(manifests.len(), 1);
    // The manifest is written to a temporary file and renamed into place, so a rewrite
    // gives it a new inode (whatever the clock's resolution).
    let written = std::fs::metadata(&manifests[0]).unwrap().ino();

    // A new dispatcher (a new process, say) finds the cache and transpiles nothing.
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = Dispatcher::new(toolshed_dispatch::DispatcherConfig { mode, ..config() });
        let run = d
            .execute(&ep, Request::new("shout", json!({"text": "ok"})))
            .await;
        assert_eq!(run.result.unwrap()["text"], "OK!");
    }
    assert_eq!(
        std::fs::metadata(&manifests[0]).unwrap().ino(),
        written,
        "the cached transpilation was written again"
    );
}

#[tokio::test]
async fn typescript_needs_its_transpiler() {
    let d = Dispatcher::new(toolshed_dispatch::DispatcherConfig {
        cache_dir: tempfile::tempdir().unwrap().keep(),
        typescript_deps: "/nonexistent/toolshed-typescript".into(),
        ..config(Mode::OneShot)
    });
    let err = d
        .execute(
            &endpoint("node", "shout.ts"),
            Request::new("shout", json!({"text": "x"})),
        )
        .await
        .result
        .unwrap_err();
    // The fixture folder has no node_modules either, so sucrase is nowhere.
    assert_eq!(dispatch_code(&err), "TRANSPILER_NOT_INSTALLED", "{err}");
    assert!(
        err.message
            .contains("npm ci --prefix /nonexistent/toolshed-typescript"),
        "{err}"
    );
}

#[tokio::test]
async fn node_schemas_are_read_from_the_module() {
    let d = dispatcher(Mode::OneShot);
    let greet = d
        .infer_node_schema(&fixture("greet.mjs"), None)
        .await
        .unwrap();
    assert_eq!(greet.name, "greet");
    assert_eq!(greet.description, "Greet someone by name.");
    assert_eq!(
        greet.input_schema,
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Who to greet"}},
            "required": ["name"]
        })
    );
    assert_eq!(greet.output_schema, None);

    let shout = d
        .infer_node_schema(&fixture("shout.ts"), None)
        .await
        .unwrap();
    assert_eq!(shout.input_schema["required"], json!(["text"]));

    let err = d
        .infer_node_schema(&fixture("count.mjs"), Some("count"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SCHEMA_NOT_FOUND");
    assert!(err.to_string().contains("declares no schema"), "{err}");
    assert!(err.to_string().contains("count.schema = {...}"), "{err}");
}

/// A module's inferred schema is kept while its folder's scripts are unchanged: the
/// second inference starts no Node, and a change to a file beside it (where a schema
/// may come from) infers again.
#[tokio::test]
async fn a_node_schema_is_inferred_again_only_when_its_folder_changed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let imports = dir.path().join("imports.log");
    // Unsandboxed, so the module's top-level code can count its imports in a host file.
    let d = Dispatcher::new(DispatcherConfig {
        cache_dir: cache.path().to_path_buf(),
        ..unsandboxed(Mode::OneShot)
    });
    std::fs::write(
        dir.path().join("shared.mjs"),
        "export const text = { type: 'string', description: 'What to say' };\n",
    )
    .unwrap();
    let tool = dir.path().join("say.mjs");
    std::fs::write(
        &tool,
        format!(
            "import {{ appendFileSync }} from 'node:fs';\nimport {{ text }} from './shared.mjs';\n\
             appendFileSync({:?}, 'imported\\n');\n\
             export default function say({{ text }}) {{ return text; }}\n\
             say.description = 'Say something.';\n\
             say.schema = {{ type: 'object', properties: {{ text }}, required: ['text'] }};\n",
            imports.display().to_string()
        ),
    )
    .unwrap();
    let count = || {
        std::fs::read_to_string(&imports)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let first = d.infer_node_schema(&tool, None).await.unwrap();
    assert_eq!(
        first.input_schema["properties"]["text"]["description"],
        "What to say"
    );
    assert_eq!(count(), 1);
    // A second dispatcher (a second CLI command) over the same cache: no import.
    let again = Dispatcher::new(DispatcherConfig {
        cache_dir: cache.path().to_path_buf(),
        ..unsandboxed(Mode::OneShot)
    });
    assert_eq!(again.infer_node_schema(&tool, None).await.unwrap(), first);
    assert_eq!(count(), 1, "the kept schema was used");
    // The schema's own file changes: inferred again, and the change is seen.
    std::fs::write(
        dir.path().join("shared.mjs"),
        "export const text = { type: 'string', description: 'What to shout' };\n",
    )
    .unwrap();
    let changed = again.infer_node_schema(&tool, None).await.unwrap();
    assert_eq!(count(), 2);
    assert_eq!(
        changed.input_schema["properties"]["text"]["description"],
        "What to shout"
    );
}
