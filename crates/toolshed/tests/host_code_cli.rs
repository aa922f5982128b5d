//! Nothing of an untrusted agent project runs on the host when the CLI loads it: `toolshed
//! tools list` (each command its own process of the real binary) in a project whose
//! TypeScript tool sits beside a package named like a transpiler (`node_modules/sucrase`)
//! or a `package.json` naming the project so (Node's package self-reference), with
//! toolshed's Node helper package absent and present. Each payload writes a marker file
//! to a host path if it ever runs on the host; the marker never appears, and the tool is
//! listed and runs (in the sandbox). A TypeScript tool whose relative import is a symlink
//! to a file outside its folder is refused naming the import, and the file's text never
//! reaches the cache the sandbox reads.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const HELLO_TS: &str = "interface Args { name: string }\n\
export const description = 'Say hello.';\n\
export const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };\n\
export default function hello({ name }: Args): string {\n  const greeting: string = `hello ${name}`;\n  return greeting;\n}\n";

/// toolshed-dispatch's own Node helper folder, installed by scripts/test (`npm ci`).
fn helpers() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-dispatch/node");
    assert!(
        dir.join("node_modules/zod/package.json").is_file(),
        "run `npm ci --prefix crates/toolshed-dispatch/node` first"
    );
    dir
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

/// An agent project with these files (and an agent.yaml naming no tool: the tools
/// folder's files are its tools).
fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agent.yaml"), "name: untrusted\n").unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

/// `toolshed ARGS` in `dir`, with its own journal and cache, and `deps` as the Node
/// helper folder.
fn toolshed(dir: &Path, deps: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(args)
        .current_dir(dir)
        .env(
            "TOOLSHED_DATABASE_URL",
            format!("sqlite://{}/journal.db", dir.display()),
        )
        .env("TOOLSHED_CONFIG_DIR", dir.join("config"))
        .env("TOOLSHED_OUTPUT_DIR", dir.join("output"))
        .env("TOOLSHED_CACHE_DIR", dir.join("cache"))
        .env("TOOLSHED_NODE_DEPS", deps)
        .env_remove("TOOLSHED_URL")
        .env_remove("TOOLSHED_API_TOKEN")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn list_and_run(files: &[(&str, &str)], deps: &Path, marker: &Path) {
    let p = project(files);
    let o = toolshed(p.path(), deps, &["tools", "list", "--json"]);
    assert!(
        !marker.exists(),
        "the project's code ran on the host: {}",
        std::fs::read_to_string(marker).unwrap_or_default()
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let listed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "hello"),
        "hello is not listed: {listed}"
    );
    let o = toolshed(
        p.path(),
        deps,
        &["tools", "show", "hello", "--format", "anthropic"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["input_schema"]["required"][0], "name", "{shown}");
    let o = toolshed(
        p.path(),
        deps,
        &["tools", "run", "hello", "--args", r#"{"name": "ada"}"#],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("hello ada"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(!marker.exists(), "the project's code ran on the host");
}

fn both_attacks(deps: &Path) {
    let m = marker();
    let p = payload(&m);
    list_and_run(
        &[
            ("tools/hello.ts", HELLO_TS),
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
        deps,
        &m,
    );
    let m = marker();
    let p = payload(&m);
    list_and_run(
        &[
            ("tools/hello.ts", HELLO_TS),
            (
                "package.json",
                r#"{"name": "sucrase", "exports": {".": "./lib.js"}}"#,
            ),
            ("lib.js", &p),
        ],
        deps,
        &m,
    );
}

#[test]
fn tools_list_runs_nothing_of_the_project_on_the_host_without_the_helper_package() {
    let empty = tempfile::tempdir().unwrap();
    both_attacks(empty.path());
}

#[test]
fn tools_list_runs_nothing_of_the_project_on_the_host_with_the_helper_package() {
    both_attacks(&helpers());
}

#[test]
fn a_relative_import_through_a_symlink_out_of_the_tools_folder_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.ts");
    std::fs::write(&secret, "export const secret = 'the host secret 7f3a';\n").unwrap();
    let p = project(&[(
        "tools/leak.ts",
        "import { secret } from './_secret.ts';\n\
         export const description = 'Leak.';\n\
         export const schema = { type: 'object', properties: {} };\n\
         export default function leak(): string { return secret; }\n",
    )]);
    std::os::unix::fs::symlink(&secret, p.path().join("tools/_secret.ts")).unwrap();
    let o = toolshed(p.path(), &helpers(), &["tools", "list", "--json"]);
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("./_secret.ts"), "{out}");
    assert!(out.contains("outside"), "{out}");
    assert!(!out.contains("7f3a"), "{out}");
    // Nothing of the file was written where the sandbox reads transpiled modules.
    let mut stack = vec![p.path().join("cache")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                let text = std::fs::read(&path).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&text).contains("7f3a"),
                    "{} holds the host file's text",
                    path.display()
                );
            }
        }
    }
}
