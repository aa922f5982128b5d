//! The client benchmark's Rust side (bench/mcp-client.sh): `tools/call`s of
//! server-everything's `echo` over stdio, after the handshake and a warm-up, timed one
//! by one. Two modes, same server, same arguments:
//!
//! - `client`: through toolshed's MCP client (`McpServer::call`), unsandboxed (the
//!   developer opt-in: the benchmark measures the client, not the sandbox);
//! - `raw`: the same JSON-RPC line written to the child's stdin and the answer line
//!   read back, nothing else: the floor our client's overhead is measured against.
//!
//! Usage: `mcp_bench_client client|raw N NODE SERVER_JS`; prints one JSON line with
//! the p50, p99 and mean in microseconds.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use toolshed_core::{EnvProvider, ToolContext};
use toolshed_mcp::{ClientConfig, Launch, McpHub, McpServerSpec, StdioLaunch};

const WARMUP: usize = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, n, node, server] = args.as_slice() else {
        return Err("usage: mcp_bench_client client|raw N NODE SERVER_JS".into());
    };
    let n: usize = n.parse()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let times = rt.block_on(async {
        match mode.as_str() {
            "client" => client(n, node, server).await,
            "raw" => raw(n, node, server).await,
            other => Err(format!("unknown mode `{other}`").into()),
        }
    })?;
    println!("{}", summary(mode, times));
    Ok(())
}

fn summary(mode: &str, mut times: Vec<Duration>) -> Value {
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| us(times[((times.len() as f64 - 1.0) * q).round() as usize]);
    let mean = times.iter().map(|d| us(*d)).sum::<f64>() / times.len() as f64;
    json!({"mode": mode, "n": times.len(), "p50_us": at(0.5), "p99_us": at(0.99), "mean_us": mean})
}

async fn client(
    n: usize,
    node: &str,
    server: &str,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let cache = std::env::temp_dir().join("toolshed-mcp-bench");
    let mut config = ClientConfig::new(cache);
    config.unsandboxed = true;
    let hub = McpHub::new(config);
    let spec = McpServerSpec {
        name: "everything".into(),
        launch: Launch::Stdio(StdioLaunch {
            command: node.to_owned(),
            args: vec![server.to_owned(), "stdio".into()],
            env: Default::default(),
            network: None,
        }),
        timeout: Duration::from_secs(30),
        credentials: Vec::new(),
    };
    let s = hub.server("bench", &spec, Arc::new(EnvProvider), None);
    s.connect().await?;
    let ctx = ToolContext::detached("everything__echo");
    let mut times = Vec::with_capacity(n);
    for i in 0..WARMUP + n {
        let args = json!({"message": "hello"});
        let t = Instant::now();
        let reply = s.call("echo", args, &ctx).await;
        let took = t.elapsed();
        if let Err(e) = reply.output {
            return Err(e.to_string().into());
        }
        if i >= WARMUP {
            times.push(took);
        }
    }
    hub.shutdown().await;
    Ok(times)
}

async fn raw(
    n: usize,
    node: &str,
    server: &str,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let mut child = tokio::process::Command::new(node)
        .args([server, "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    stdin.write_all(format!("{init}\n").as_bytes()).await?;
    loop {
        line.clear();
        stdout.read_line(&mut line).await?;
        if line.contains("\"id\":0") {
            break;
        }
    }
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await?;
    let mut times = Vec::with_capacity(n);
    for i in 0..WARMUP + n {
        let id = i + 1;
        let request = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"message\":\"hello\"}},\"_meta\":{{\"progressToken\":{id}}}}}}}\n"
        );
        let want = format!("\"id\":{id}");
        let t = Instant::now();
        stdin.write_all(request.as_bytes()).await?;
        loop {
            line.clear();
            if stdout.read_line(&mut line).await? == 0 {
                return Err("the server closed its stdout".into());
            }
            if line.contains(&want) {
                break;
            }
        }
        let took = t.elapsed();
        if i >= WARMUP {
            times.push(took);
        }
    }
    Ok(times)
}
