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
        // console.log is the tool's stdout, relayed by the runner apart from the
        // protocol (and from stderr).
        assert_eq!(
            run.diagnostics.stdout, "this log line must not break the protocol\n",
            "{mode:?}"
        );
        assert!(
            !run.diagnostics.stderr.contains("this log line"),
            "{mode:?}: {}",
            run.diagnostics.stderr
        );

        let run = d
            .execute(
                &endpoint("node", "count.mjs:count"),
                Request::new("count", json!({"to": 3})),
            )
            .await;
        assert_eq!(run.result.unwrap(), json!({"n": 3}));
        assert_eq!(
            run.partials,
            vec![json!({"n": 1}), json!({"n": 2}), json!({"n": 3})]
        );

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

/// A bread or Toren tool file while toolshed's Node helper package is missing is
/// refused, saying what to install and where; nothing is taken from the tool's folder.
#[tokio::test]
async fn a_compat_tool_needs_the_helper_package_and_says_what_to_install() {
    let empty = tempfile::tempdir().unwrap();
    // The tool's own folder has a zod: it is not used.
    let dir = folder(&[
        (
            "tool.ts",
            "import { defineTool } from '@breadai/core';
import { z } from 'zod';
             export default defineTool({ name: 't', description: 'd', schema: z.object({ q: z.string() }), async execute() { return 1 } });
",
        ),
        ("node_modules/zod/package.json", r#"{"name": "zod", "main": "index.js"}"#),
        ("node_modules/zod/index.js", "module.exports = { z: {} };\n"),
    ]);
    let d = with_helpers(empty.path());
    let err = d
        .infer_node_schema(&dir.path().join("tool.ts"), None)
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "NODE_DEPS_NOT_INSTALLED", "{err}");
    assert!(
        err.to_string().contains(&format!(
            "npm install --prefix {} zod@4.6.7",
            empty.path().display()
        )),
        "{err}"
    );
    // A call says the same, as the tool's error.
    let ep = toolshed_dispatch::Endpoint::parse(&format!(
        "node:{}",
        dir.path().join("tool.ts").display()
    ))
    .unwrap();
    let err = d
        .execute(&ep, Request::new("t", json!({"q": "x"})))
        .await
        .result
        .unwrap_err();
    assert!(err.message.contains("npm install --prefix"), "{err}");
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

/// toolshed-dispatch's own Node helper folder, installed by scripts/test (`npm ci`).
fn helpers() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    assert!(
        dir.join("node_modules/zod/package.json").is_file(),
        "run `npm ci --prefix crates/toolshed-dispatch/node` first"
    );
    dir
}

/// A dispatcher with a fresh cache and `deps` as its Node helper folder.
fn with_helpers(deps: &std::path::Path) -> Dispatcher {
    Dispatcher::new(DispatcherConfig {
        cache_dir: tempfile::tempdir().unwrap().keep(),
        node_deps: Some(deps.to_path_buf()),
        ..config(Mode::OneShot)
    })
}

/// A folder holding these files.
fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

const HELLO_TS: &str = "interface Args { name: string }\n\
export const description = 'Say hello.';\n\
export const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };\n\
export default function hello({ name }: Args): string {\n  const greeting: string = `hello ${name}`;\n  return greeting;\n}\n";

/// Transpiling a tool reads its `.ts` files and nothing else of its folder runs: a
/// package named like a transpiler in its `node_modules`, or its own `package.json`
/// naming it so (Node's package self-reference), with the helper package absent and
/// present. Each payload writes a host marker file if it ever runs on the host.
#[tokio::test]
async fn transpiling_runs_nothing_of_the_tools_folder_on_the_host() {
    let empty = tempfile::tempdir().unwrap();
    for deps in [empty.path().to_path_buf(), helpers()] {
        let marker = std::env::temp_dir().join(format!(
            "toolshed-host-marker-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let payload = format!(
            "require('node:fs').writeFileSync({:?}, 'ran on the host as uid ' + process.getuid());\nmodule.exports = {{}};\n",
            marker.display().to_string()
        );
        let bundled = folder(&[
            ("hello.ts", HELLO_TS),
            (
                "node_modules/sucrase/package.json",
                r#"{"name": "sucrase", "main": "index.js"}"#,
            ),
            ("node_modules/sucrase/index.js", &payload),
            (
                "node_modules/es-module-lexer/package.json",
                r#"{"name": "es-module-lexer", "main": "index.js"}"#,
            ),
            ("node_modules/es-module-lexer/index.js", &payload),
        ]);
        let self_reference = folder(&[
            ("hello.ts", HELLO_TS),
            (
                "package.json",
                r#"{"name": "sucrase", "exports": {".": "./lib.js"}}"#,
            ),
            ("lib.js", &payload),
        ]);
        for dir in [&bundled, &self_reference] {
            let d = with_helpers(&deps);
            let path = dir.path().join("hello.ts");
            let inferred = d.infer_node_schema(&path, None).await;
            assert!(!marker.exists(), "ran on the host ({})", deps.display());
            assert_eq!(inferred.unwrap().input_schema["required"], json!(["name"]));
            let ep =
                toolshed_dispatch::Endpoint::parse(&format!("node:{}", path.display())).unwrap();
            let run = d
                .execute(&ep, Request::new("hello", json!({"name": "ada"})))
                .await;
            assert_eq!(run.result.unwrap(), json!("hello ada"));
            assert!(!marker.exists(), "ran on the host ({})", deps.display());
        }
    }
}

/// A relative import of a TypeScript tool reaches only regular files inside the tool's
/// folder: one leading out through a symlink (to a file or a folder) or `..` is refused
/// naming the import, and nothing of the file outside reaches the cache.
#[tokio::test]
async fn a_typescript_import_leading_out_of_the_tools_folder_is_refused() {
    let parent = tempfile::tempdir().unwrap();
    let outside = parent.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(
        outside.join("secret.ts"),
        "export const secret = 'host secret 7f3a';\n",
    )
    .unwrap();
    std::fs::write(
        outside.join("index.ts"),
        "export const secret = 'host secret 7f3a';\n",
    )
    .unwrap();
    let tool = parent.path().join("tool");
    std::fs::create_dir(&tool).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.ts"), tool.join("linked.ts")).unwrap();
    std::os::unix::fs::symlink(&outside, tool.join("linked_dir")).unwrap();
    let cases = [
        ("file_link.ts", "./linked.ts"),
        ("file_link_js.ts", "./linked.js"),
        ("dir_link.ts", "./linked_dir"),
        ("dir_link_file.ts", "./linked_dir/secret.ts"),
        ("dot_dot.ts", "../outside/secret.ts"),
    ];
    let cache = tempfile::tempdir().unwrap();
    let d = Dispatcher::new(DispatcherConfig {
        cache_dir: cache.path().to_path_buf(),
        ..config(Mode::OneShot)
    });
    for (file, spec) in cases {
        std::fs::write(
            tool.join(file),
            format!("import {{ secret }} from '{spec}';\nexport default function leak(): string {{ return secret; }}\n"),
        )
        .unwrap();
        let ep = toolshed_dispatch::Endpoint::parse(&format!("node:{}", tool.join(file).display()))
            .unwrap();
        let run = d.execute(&ep, Request::new("leak", json!({}))).await;
        let err = match run.result {
            Ok(v) => panic!("{spec}: the tool ran and answered {v}"),
            Err(e) => e,
        };
        assert_eq!(dispatch_code(&err), "TRANSPILE_FAILED", "{spec}: {err}");
        assert!(err.message.contains(spec), "{spec}: {err}");
        assert!(err.message.contains("outside"), "{spec}: {err}");
        assert!(!err.message.contains("7f3a"), "{spec}: {err}");
    }
    let mut stack = vec![cache.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                let text = std::fs::read(entry.path()).unwrap();
                assert!(
                    !String::from_utf8_lossy(&text).contains("7f3a"),
                    "{} holds the outside file's text",
                    entry.path().display()
                );
            }
        }
    }
}

/// Bare imports of a transpiled module are resolved in the sandbox as if imported from
/// its source: a package of the tool's own `node_modules` (ES module and CommonJS), and
/// plain `.js` / `.json` files beside it, in a folder the sandbox shows elsewhere
/// (`/tmp/x` as `/host/tmp/x`).
#[tokio::test]
async fn a_typescript_tool_imports_its_own_packages_and_files_in_the_sandbox() {
    let dir = folder(&[
        (
            "shout.ts",
            "import { loud } from 'loudly';\nimport pad from 'padder';\nimport { mark } from './mark';\n\
             import { twice } from './twice.js';\nimport words from './words.json' with { type: 'json' };\n\
             export default async function shout({ text }: { text: string }): Promise<string> {\n\
               const { lazy } = await import('./lazy.ts');\n\
               return pad(twice(mark(loud(text))) + ' ' + words.join(',') + ' ' + lazy, 1);\n}\n",
        ),
        (
            "mark.ts",
            "export const mark = (s: string): string => s + '!';\n",
        ),
        ("lazy.ts", "export const lazy: string = 'lazy';\n"),
        ("twice.js", "export const twice = (s) => s + s;\n"),
        ("words.json", r#"["a", "b"]"#),
        (
            "node_modules/loudly/package.json",
            r#"{"name": "loudly", "type": "module", "exports": "./index.js"}"#,
        ),
        (
            "node_modules/loudly/index.js",
            "export const loud = (s) => s.toUpperCase();\n",
        ),
        (
            "node_modules/padder/package.json",
            r#"{"name": "padder", "main": "pad.js"}"#,
        ),
        (
            "node_modules/padder/pad.js",
            "module.exports = (s, n) => '*'.repeat(n) + s;\n",
        ),
    ]);
    let d = dispatcher(Mode::OneShot);
    let ep = toolshed_dispatch::Endpoint::parse(&format!(
        "node:{}",
        dir.path().join("shout.ts").display()
    ))
    .unwrap();
    let run = d
        .execute(&ep, Request::new("shout", json!({"text": "hey"})))
        .await;
    assert_eq!(run.result.unwrap(), json!("*HEY!HEY! a,b lazy"));
}
