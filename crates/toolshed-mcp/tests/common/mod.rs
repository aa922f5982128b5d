//! Shared helpers of the client tests: the real servers from npm (tests/mcp), the
//! fixture server, a hub whose stdio servers run in the real sandbox.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;
use toolshed_core::tool::{Chunk, Reply, ToolOutput};
use toolshed_core::{Diagnostics, EnvProvider, ToolContext, ToolError};
use toolshed_mcp::{
    ClientConfig, ClientLimits, HttpLaunch, Launch, McpHub, McpServer, McpServerSpec, StdioLaunch,
};
use toolshed_sandbox::{Bind, Sandbox, SandboxConfig};

/// Where the npm peers are inside the sandbox.
pub const MODULES: &str = "/mcp/node_modules";
/// Where this crate's fixtures are inside the sandbox.
pub const FIXTURES: &str = "/mcp/fixtures";

/// tests/mcp/node_modules, failing clearly when it is not installed.
pub fn node_modules() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/node_modules");
    assert!(
        p.join("@modelcontextprotocol/server-everything").is_dir(),
        "the MCP test peers are not installed: run `npm ci --prefix tests/mcp` (scripts/test does)"
    );
    p.canonicalize().unwrap()
}

/// This crate's tests/fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .canonicalize()
        .unwrap()
}

/// The real sandbox; a host that cannot run it fails the test, saying why.
pub fn sandbox() -> Sandbox {
    Sandbox::new(SandboxConfig::default())
        .unwrap_or_else(|e| panic!(
            "these tests run MCP servers in the sandbox, which cannot start on this host: {e} [{}] (run them as root on Linux with cgroup v2, user namespaces and slirp4netns, as scripts/test does)",
            e.code()
        ))
}

/// Limits with a short backoff, so a restart test does not wait long.
pub fn limits() -> ClientLimits {
    ClientLimits {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        shutdown_grace: Duration::from_millis(500),
        ..ClientLimits::default()
    }
}

/// A hub whose stdio servers run in the sandbox, with the npm peers and the fixtures
/// bound read-only, and `extra` binds.
pub fn sandboxed_hub(cache: &Path, extra: Vec<Bind>) -> McpHub {
    let mut config = ClientConfig::new(cache);
    config.sandbox = Some(sandbox());
    config.limits = limits();
    config.binds = vec![
        Bind::executable(node_modules(), MODULES),
        Bind::executable(fixtures(), FIXTURES),
    ];
    config.binds.extend(extra);
    McpHub::new(config)
}

/// A stdio spec.
pub fn stdio(name: &str, command: &str, args: &[&str]) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        launch: Launch::Stdio(StdioLaunch {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::new(),
            network: None,
        }),
        timeout: Duration::from_secs(30),
        credentials: Vec::new(),
    }
}

/// An HTTP spec.
pub fn http(name: &str, url: &str) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        launch: Launch::Http(HttpLaunch {
            url: url.into(),
            headers: BTreeMap::new(),
        }),
        timeout: Duration::from_secs(30),
        credentials: Vec::new(),
    }
}

/// server-everything over stdio, inside the sandbox.
pub fn everything() -> McpServerSpec {
    stdio(
        "everything",
        "node",
        &[
            &format!("{MODULES}/@modelcontextprotocol/server-everything/dist/index.js"),
            "stdio",
        ],
    )
}

/// The fixture server in `mode`, inside the sandbox.
pub fn fixture(name: &str, mode: &str) -> McpServerSpec {
    stdio(
        name,
        "node",
        &[&format!("{FIXTURES}/fixture_server.mjs"), mode],
    )
}

/// The server of `spec` in `hub`, with env credentials.
pub fn server(hub: &McpHub, spec: &McpServerSpec) -> Arc<McpServer> {
    hub.server("tenant-a", spec, Arc::new(EnvProvider), None)
}

/// A call's outcome, streams drained: the partial values, the result, diagnostics.
pub struct Called {
    pub partials: Vec<Value>,
    pub result: Result<Value, ToolError>,
    pub diagnostics: Diagnostics,
}

pub async fn drain(reply: Reply) -> Called {
    let mut diagnostics = reply.diagnostics;
    match reply.output {
        Err(e) => Called {
            partials: Vec::new(),
            result: Err(e),
            diagnostics,
        },
        Ok(ToolOutput::Value(v)) => Called {
            partials: Vec::new(),
            result: Ok(v),
            diagnostics,
        },
        Ok(ToolOutput::Stream(mut s)) => {
            let mut values = Vec::new();
            let mut error = None;
            while let Some(item) = s.next().await {
                match item {
                    Ok(Chunk::Value(v)) => values.push(v),
                    Ok(Chunk::Diagnostics(d)) => diagnostics = d,
                    Err(e) => error = Some(e),
                }
            }
            let result = match error {
                Some(e) => Err(e),
                None => values
                    .pop()
                    .ok_or_else(|| ToolError::handler("empty stream")),
            };
            Called {
                partials: values,
                result,
                diagnostics,
            }
        }
    }
}

/// Calls `tool` with `args` and drains the reply.
pub async fn call(server: &McpServer, tool: &str, args: Value) -> Called {
    drain(server.call(tool, args, &ToolContext::detached(tool)).await).await
}

/// Polls `cond` every 20 ms until it holds or `within` passes.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}
