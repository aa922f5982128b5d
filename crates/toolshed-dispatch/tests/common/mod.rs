//! Helpers shared by the integration tests: fixtures, a dispatcher with a private
//! cache, tools wired through the pipeline, and process checks.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolshed_core::{Pipeline, Tool, ToolSet};
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint, Mode};

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

/// The test configuration: a private cache and the given mode.
pub fn config(mode: Mode) -> DispatcherConfig {
    DispatcherConfig {
        cache_dir: cache_dir(),
        mode,
        exec_mode: mode,
        ..DispatcherConfig::default()
    }
}

pub fn dispatcher(mode: Mode) -> Dispatcher {
    Dispatcher::new(config(mode))
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
