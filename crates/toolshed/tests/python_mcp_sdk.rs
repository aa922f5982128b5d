//! The official Python MCP SDK (`mcp` from PyPI, the newest release) as a user runs it:
//! `Client(...)` in its default mode, which probes `server/discover` and speaks
//! `2026-07-28`, against `toolshed mcp serve --agent DIR` (stdio) and `toolshed serve`'s
//! `/mcp` (Streamable HTTP). Each lists the tools, calls a streaming tool with a progress
//! callback, calls with bad arguments, and calls a gated tool that the client approves
//! by elicitation. The client is `tests/fixtures/python_sdk_client.py`; it fails on any
//! result the SDK refuses (a result without `resultType` was one).
//!
//! The SDK is found at `TOOLSHED_TEST_MCP_PYTHON` (a Python with `mcp` installed), or in
//! the virtual environment `scripts/test` makes.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Served, serve_with};
use serde_json::{Value, json};

const CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/python_sdk_client.py"
);

fn python() -> PathBuf {
    let python = std::env::var_os("TOOLSHED_TEST_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("toolshed-ci-mcp-python/bin/python"));
    let has_sdk = Command::new(&python)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_sdk,
        "{} has no `mcp` package: run scripts/test, or `python3 -m venv DIR && DIR/bin/pip install 'mcp==2.3.0'` and set TOOLSHED_TEST_MCP_PYTHON=DIR/bin/python",
        python.display()
    );
    python
}

/// The Python tools: (file, function, source).
const TOOLS: [(&str, &str, &str); 3] = [
    ("count_up.py", "count_up", COUNT_UP),
    ("slow_steps.py", "slow_steps", SLOW_STEPS),
    ("fails_after_one.py", "fails_after_one", FAILS_AFTER_ONE),
];

const SLOW_STEPS: &str = "import time\n\ndef slow_steps():\n    \"\"\"Three steps, two seconds apart.\"\"\"\n    yield {\"step\": 1}\n    time.sleep(2)\n    yield {\"step\": 2}\n    time.sleep(2)\n    yield {\"done\": True}\n";

const FAILS_AFTER_ONE: &str = "def fails_after_one():\n    \"\"\"One step, then a failure.\"\"\"\n    yield {\"step\": 1}\n    raise ValueError(\"broke after one step\")\n";

const COUNT_UP: &str = "def count_up(n: int = 3):\n    \"\"\"Count to n, one partial result per step.\"\"\"\n    for i in range(n):\n        yield {\"progress\": i + 1, \"total\": n}\n    yield {\"counted\": n}\n";

/// Run the client; what it saw, as JSON.
fn client(args: &[&str], env: &[(&str, &Path)]) -> Value {
    let mut command = Command::new(python());
    command
        .arg(CLIENT)
        .args(args)
        .env_remove("TOOLSHED_URL")
        .env_remove("TOOLSHED_API_TOKEN");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "the Python SDK's client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the client prints one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// What every transport must show.
fn check(seen: &Value, version: &str) {
    assert_eq!(seen["protocol_version"], version, "{seen}");
    let tools = seen["tools"].as_array().unwrap();
    for name in ["count_up", "gated_time"] {
        assert!(tools.iter().any(|t| t == name), "{name} listed: {seen}");
    }
    let counted = &seen["count_up"];
    assert_eq!(counted["is_error"], false, "{seen}");
    assert_eq!(counted["structured"], json!({"counted": 3}), "{seen}");
    let progress = counted["progress"].as_array().unwrap();
    assert_eq!(progress.len(), 4, "one progress step per yield: {seen}");
    // Each partial arrives as it is yielded: the first two seconds before the second,
    // and four before the result (held back a yield, all three came with the result).
    let slow = &seen["slow_steps"];
    assert_eq!(slow["structured"], json!({"done": true}), "{seen}");
    let steps = slow["progress"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{seen}");
    let at = |i: usize| steps[i]["at"].as_f64().unwrap();
    let done = slow["done_at"].as_f64().unwrap();
    assert!(
        at(1) - at(0) > 1.5,
        "the first partial came with the second: {seen}"
    );
    assert!(done - at(0) > 3.5, "the first partial came late: {seen}");
    // The partial before a failure is delivered, and the error is the call's.
    let failed = &seen["fails_after_one"];
    assert_eq!(failed["is_error"], true, "{seen}");
    assert!(
        failed["text"]
            .as_str()
            .unwrap()
            .contains("broke after one step"),
        "{seen}"
    );
    assert_eq!(failed["progress"].as_array().unwrap().len(), 1, "{seen}");
    let bad = &seen["bad_args"];
    assert_eq!(bad["is_error"], true, "{seen}");
    assert!(
        bad["text"].as_str().unwrap().contains("n"),
        "the error names the argument: {seen}"
    );
    let gated = &seen["gated"];
    assert_eq!(gated["asked"].as_array().unwrap().len(), 1, "{seen}");
    assert!(
        gated["asked"][0]["message"]
            .as_str()
            .unwrap()
            .contains("gated_time"),
        "the question names the tool: {seen}"
    );
    assert_eq!(
        gated["is_error"], false,
        "approved at the client, the call runs: {seen}"
    );
    assert!(
        gated["structured"]["utc_offset"].is_string() || gated["text"].as_str().unwrap() != "",
        "{seen}"
    );
}

#[test]
fn the_python_sdk_in_its_default_mode_uses_an_agent_project_over_stdio() {
    stdio(&[], "2026-07-28");
}

/// The initialize era: the approval is asked with `elicitation/create` in the session,
/// and the call approved there continues its run (it used to be made again as a new
/// run of the same id, and refused: "run … already exists").
#[test]
fn the_python_sdk_in_legacy_mode_approves_by_elicitation_over_stdio() {
    stdio(&["--legacy"], "2025-11-25");
}

fn stdio(mode: &[&str], version: &str) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("tools")).unwrap();
    std::fs::write(
        p.join("agent.yaml"),
        "name: python-sdk\ntools:\n  - ref: tools/count-up\n  - ref: tools/slow-steps\n  - ref: tools/fails-after-one\n  - name: gated_time\n    description: The time, after an approval\n    endpoint: builtin:get_current_time\n    approval: always\n    schema: {type: object, properties: {utc_offset: {type: string}}}\n",
    )
    .unwrap();
    for (file, _, source) in TOOLS {
        std::fs::write(p.join("tools").join(file), source).unwrap();
    }
    let db = p.join("journal.db");
    let db_url = PathBuf::from(format!("sqlite://{}", db.display()));
    let mut args = vec!["stdio", p.to_str().unwrap(), env!("CARGO_BIN_EXE_toolshed")];
    args.extend_from_slice(mode);
    let seen = client(
        &args,
        &[
            ("TOOLSHED_DATABASE_URL", &db_url),
            ("TOOLSHED_CACHE_DIR", &p.join(".cache")),
            ("TOOLSHED_CONFIG_DIR", &p.join(".config")),
        ],
    );
    check(&seen, version);
}

fn cli(server: &Served, config: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(args)
        .env("TOOLSHED_URL", &server.url)
        .env("TOOLSHED_CONFIG_DIR", config)
        .env_remove("TOOLSHED_API_TOKEN")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "toolshed {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_python_sdk_in_its_default_mode_uses_the_registrys_mcp_endpoint() {
    let server = serve_with(&[]);
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let config = h.join("config");
    cli(
        &server,
        &config,
        &[
            "login",
            "--username",
            "admin",
            "--password",
            common::ADMIN_PASSWORD,
        ],
    );
    for (file, name, source) in TOOLS {
        let path = h.join(file);
        std::fs::write(&path, source).unwrap();
        cli(
            &server,
            &config,
            &[
                "registry",
                "tool",
                "push",
                path.to_str().unwrap(),
                "--name",
                name,
            ],
        );
    }
    std::fs::create_dir_all(h.join("gated")).unwrap();
    std::fs::write(
        h.join("gated/tool.yaml"),
        "spec_version: v1\nname: gated_time\ndescription: The time, after an approval\nimplementation: {language: builtin, entrypoint: get_current_time}\napproval: always\n",
    )
    .unwrap();
    let gated = h.join("gated/tool.yaml");
    cli(
        &server,
        &config,
        &["registry", "tool", "push", gated.to_str().unwrap()],
    );
    let seen = client(&["http", &server.url, "admin", common::ADMIN_PASSWORD], &[]);
    check(&seen, "2026-07-28");
}
