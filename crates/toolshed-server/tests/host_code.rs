//! Nothing of a pushed tool runs on the host: a TypeScript tool whose archive carries a
//! package named like a transpiler (`node_modules/sucrase`), or whose own `package.json`
//! names itself so (Node's package self-reference), is pushed over REST to a real
//! server, with toolshed's Node helper package absent and present. Each payload writes
//! a marker file to a host path if it ever runs on the host; the marker never appears,
//! and the tool transpiles, has its schema inferred (in the sandbox) and runs. A TS tool
//! importing a package from its own `node_modules` runs in the sandbox, and one whose
//! relative import leads out of its folder through a symlink is refused naming the
//! import.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use base64::Engine;
use common::TestServer;
use serde_json::{Value, json};
use sha2::Digest;

/// A deterministic tar of regular files, as the CLI builds it.
fn archive(files: &[(&str, &str)]) -> Vec<u8> {
    let files: Vec<toolshed_api::code::CodeFile> = files
        .iter()
        .map(|(p, t)| toolshed_api::code::CodeFile {
            path: (*p).to_owned(),
            content: t.as_bytes().to_vec(),
            executable: false,
        })
        .collect();
    toolshed_api::code::build_archive(&files).unwrap()
}

fn code(bytes: &[u8]) -> Value {
    json!({
        "archive_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
        "sha256": hex::encode(sha2::Sha256::digest(bytes)),
    })
}

/// toolshed-dispatch's own Node helper folder, installed by scripts/test (`npm ci`).
fn helpers() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-dispatch/node");
    assert!(
        dir.join("node_modules/zod/package.json").is_file(),
        "run `npm ci --prefix crates/toolshed-dispatch/node` first"
    );
    dir
}

/// A server whose Node helper folder is `deps`.
async fn server(deps: &Path) -> TestServer {
    let deps = deps.to_path_buf();
    TestServer::start_with(move |c| c.dispatcher.node_deps = Some(deps)).await
}

/// A host path no test writes but a payload that ran on the host.
fn marker() -> PathBuf {
    std::env::temp_dir().join(format!(
        "toolshed-host-marker-{}",
        uuid::Uuid::new_v4().simple()
    ))
}

/// CommonJS that writes `marker` when it is loaded.
fn payload(marker: &Path) -> String {
    format!(
        "require('node:fs').writeFileSync({:?}, 'ran on the host as uid ' + process.getuid());\nmodule.exports = {{}};\n",
        marker.display().to_string()
    )
}

/// The TypeScript tool both attacks push: types to strip, a declared schema.
const HELLO_TS: &str = "interface Args { name: string }\n\
export const description = 'Say hello.';\n\
export const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };\n\
export default function hello({ name }: Args): string {\n  const greeting: string = `hello ${name}`;\n  return greeting;\n}\n";

/// Push `files` as tool `name` (schema inferred, so the TypeScript is transpiled and
/// imported at registration), call it, and check the marker never appeared.
async fn push_and_run(s: &TestServer, name: &str, files: &[(&str, &str)], marker: &Path) {
    let bytes = archive(files);
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({"name": name, "description": "says hello", "endpoint": "node:hello.ts", "code": code(&bytes)})),
        )
        .await;
    assert!(
        !marker.exists(),
        "the tool's code ran on the host: {}",
        std::fs::read_to_string(marker).unwrap_or_default()
    );
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        answer["data"]["schema_definition"]["required"],
        json!(["name"])
    );
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/registry/tools/{name}/execute"),
            Some(&s.deployer),
            Some(json!({"args": {"name": "ada"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"]["error"].is_null(), "{answer}");
    assert_eq!(answer["data"]["output"], json!("hello ada"));
    assert!(!marker.exists(), "the tool's code ran on the host");
}

async fn both_attacks(deps: &Path) {
    let s = server(deps).await;
    // A package named like the transpiler, in the tool's own node_modules.
    let m = marker();
    let p = payload(&m);
    push_and_run(
        &s,
        "bundled-transpiler",
        &[
            ("hello.ts", HELLO_TS),
            (
                "node_modules/sucrase/package.json",
                r#"{"name": "sucrase", "main": "index.js"}"#,
            ),
            ("node_modules/sucrase/index.js", &p),
            (
                "node_modules/es-module-lexer/package.json",
                r#"{"name": "es-module-lexer", "main": "index.js"}"#,
            ),
            ("node_modules/es-module-lexer/index.js", &p),
        ],
        &m,
    )
    .await;
    // No node_modules at all: the tool's own package.json names it `sucrase`.
    let m = marker();
    let p = payload(&m);
    push_and_run(
        &s,
        "self-reference",
        &[
            ("hello.ts", HELLO_TS),
            (
                "package.json",
                r#"{"name": "sucrase", "exports": {".": "./lib.js"}}"#,
            ),
            ("lib.js", &p),
        ],
        &m,
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn a_pushed_typescript_tool_runs_nothing_on_the_host_without_the_helper_package() {
    let empty = tempfile::tempdir().unwrap();
    both_attacks(empty.path()).await;
}

#[tokio::test]
async fn a_pushed_typescript_tool_runs_nothing_on_the_host_with_the_helper_package() {
    both_attacks(&helpers()).await;
}

#[tokio::test]
async fn a_typescript_tool_imports_a_package_of_its_own_node_modules_in_the_sandbox() {
    let s = server(&helpers()).await;
    let bytes = archive(&[
        (
            "shout.ts",
            "import { loud } from 'loudly';\nimport { mark } from './mark.ts';\n\
             export function shout(input: { text: string }): string {\n  return mark(loud(input.text));\n}\n",
        ),
        (
            "mark.ts",
            "export const mark = (s: string): string => s + '!';\n",
        ),
        (
            "node_modules/loudly/package.json",
            r#"{"name": "loudly", "type": "module", "exports": "./index.js"}"#,
        ),
        (
            "node_modules/loudly/index.js",
            "export const loud = (s) => s.toUpperCase();\n",
        ),
    ]);
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({"name": "shout", "description": "shouts", "endpoint": "node:shout.ts:shout", "code": code(&bytes),
                   "schema_definition": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/shout/execute",
            Some(&s.deployer),
            Some(json!({"args": {"text": "hey"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"]["error"].is_null(), "{answer}");
    assert_eq!(answer["data"]["output"], json!("HEY!"));
    s.stop().await;
}

#[tokio::test]
async fn a_typescript_tool_imports_a_dependency_the_server_installed() {
    let s = server(&helpers()).await;
    let bytes = archive(&[
        (
            "pad.ts",
            "import leftPad from 'left-pad';\n\
             export function pad(input: { text: string }): string {\n  return leftPad(input.text, 5, '*');\n}\n",
        ),
        (
            "package.json",
            r#"{"name": "pad", "dependencies": {"left-pad": "1.3.0"}}"#,
        ),
    ]);
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({"name": "pad", "description": "pads", "endpoint": "node:pad.ts:pad", "code": code(&bytes),
                   "schema_definition": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/pad/execute",
            Some(&s.deployer),
            Some(json!({"args": {"text": "ab"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"]["error"].is_null(), "{answer}");
    assert_eq!(answer["data"]["output"], json!("***ab"));
    s.stop().await;
}
