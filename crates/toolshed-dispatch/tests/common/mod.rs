//! Helpers shared by the integration tests: fixtures, a dispatcher with a private
//! cache, tools wired through the pipeline, and process checks.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolshed_core::{Pipeline, Tool, ToolSet};
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint, Isolation, Mode};

/// The absolute path of a fixture.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(name)
}

/// Parse an endpoint for a fixture, e.g. `endpoint("python", "tools.py:add")`.
pub fn endpoint(prefix: &str, target: &str) -> Endpoint {
    Endpoint::parse(&format!("{prefix}:{}", fixture(target).display())).unwrap()
}

/// A cache folder private to this test binary.
pub fn cache_dir() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
        .path()
        .to_path_buf()
}

/// The test configuration: a private cache and the given mode, toolshed's Node helper
/// package from this crate's `node/` folder, tools sandboxed (the default), and loopback allowlisted for HTTP endpoints explicitly (the tests' HTTP
/// servers listen on 127.0.0.1, which the default policy refuses).
pub fn config(mode: Mode) -> DispatcherConfig {
    DispatcherConfig {
        cache_dir: cache_dir(),
        // The helper package scripts/test installs (`npm ci --prefix …/node`).
        node_deps: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node")),
        mode,
        exec_mode: mode,
        http: toolshed_dispatch::HttpPolicy::default().with_loopback(),
        ..DispatcherConfig::default()
    }
}

/// [`config`] with tools run on the host, as an operator may choose: for the tests of
/// the host-process path (process groups, pids written to host files).
pub fn unsandboxed(mode: Mode) -> DispatcherConfig {
    DispatcherConfig {
        isolation: Isolation::Unsandboxed,
        ..config(mode)
    }
}

pub fn dispatcher(mode: Mode) -> Dispatcher {
    Dispatcher::new(config(mode))
}

/// Sets a dispatcher up by one quick call (`tools.py:add`): its first call also probes
/// the interpreter and, sandboxed, builds the sandbox, which on a loaded machine can
/// take longer than a test's short timeout. Tests of what a timeout does warm their
/// dispatcher first, so the timeout measures the call alone.
pub async fn warm(dispatcher: &Dispatcher) {
    let run = dispatcher
        .execute(
            &endpoint("python", "tools.py:add"),
            toolshed_dispatch::Request::new("add", json!({"a": 1}))
                .timeout(Duration::from_secs(120)),
        )
        .await;
    assert!(run.result.is_ok(), "the warm-up call failed: {run:?}");
}

/// A tool whose implementation is `endpoint`, accepting any object.
pub fn tool(dispatcher: &Dispatcher, name: &str, endpoint: Endpoint, timeout: Duration) -> Tool {
    Tool::builder(name)
        .description("a dispatched test tool")
        .input_schema(json!({"type": "object"}))
        .timeout(timeout)
        .raw_handler(dispatcher.handler(endpoint, name))
        .build()
        .unwrap()
}

pub fn pipeline(tools: Vec<Tool>) -> Pipeline {
    Pipeline::builder(ToolSet::from_tools(tools).unwrap()).build()
}

/// Whether a process exists at all (a zombie still exists).
pub fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether a process is running (not gone, not a zombie).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            !matches!(state, Some('Z' | 'X') | None)
        }
    }
}

/// The processes still running (zombies aside) that belong to the tool process `pid`:
/// those in its process group, or whose parent it is, read from `/proc`.
pub fn left_behind(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(other) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{other}/stat")) else {
            continue;
        };
        // After the parenthesised command name: state, ppid, pgrp.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (state, ppid, pgrp) = (fields[0], fields[1], fields[2]);
        if matches!(state, "Z" | "X") {
            continue;
        }
        if ppid == pid.to_string() || pgrp == pid.to_string() {
            found.push(other);
        }
    }
    found
}

/// Wait (up to 10 s) until the tool process `pid` is reaped and nothing it started is
/// left running.
pub async fn all_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = left_behind(pid);
        if !exists(pid) && left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "tool process {pid} (exists: {}) left these running: {left:?}",
            exists(pid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait (up to 10 s) until `check` holds.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Read the two pids a `sleepy` call wrote: the tool process and its grandchild.
pub async fn read_pids(path: &std::path::Path) -> (u32, u32) {
    let mut text = String::new();
    eventually("the tool wrote its pids", || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.split_whitespace().count() == 2
    })
    .await;
    let mut it = text.split_whitespace().map(|s| s.parse::<u32>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// The error code the dispatcher put in an error result's details.
pub fn dispatch_code(err: &toolshed_core::ToolError) -> String {
    err.details
        .as_ref()
        .and_then(|d| d.get("dispatch_code"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
