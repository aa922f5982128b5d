//! The client under test of the official conformance suite
//! (`@modelcontextprotocol/conformance client --command <this> --scenario …`): the suite
//! passes the server's URL as the last argument and the scenario's name in
//! `MCP_CONFORMANCE_SCENARIO`. It connects with toolshed's client, lists the tools and,
//! for `tools_call`, calls `add_numbers`.
//!
//! A `[[bin]]` (not an example) so the crate's tests find it as
//! `CARGO_BIN_EXE_toolshed-mcp-conformance-client`, built by `cargo test`.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use toolshed_core::tool::ToolOutput;
use toolshed_core::{EnvProvider, ToolContext};
use toolshed_mcp::{ClientConfig, HttpLaunch, Launch, McpHub, McpServerSpec};

fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1).filter(|a| a.starts_with("http")) else {
        eprintln!("usage: toolshed-mcp-conformance-client <server-url>");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&url, &scenario)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str, scenario: &str) -> Result<(), String> {
    let cache = std::env::temp_dir().join("toolshed-mcp-conformance");
    let mut config = ClientConfig::new(cache);
    // The suite's servers listen on localhost.
    config.http_policy = toolshed_dispatch::HttpPolicy::default().with_loopback();
    let hub = McpHub::new(config);
    let spec = McpServerSpec {
        name: "conformance".into(),
        launch: Launch::Http(HttpLaunch {
            url: url.to_owned(),
            headers: Default::default(),
        }),
        timeout: std::time::Duration::from_secs(20),
        credentials: Vec::new(),
    };
    let server = hub.server("conformance", &spec, Arc::new(EnvProvider), None);
    let info = server.connect().await.map_err(|e| e.to_string())?;
    eprintln!(
        "connected: {} {} ({}, {})",
        info.server_name,
        info.server_version,
        info.era.as_str(),
        info.protocol_version
    );
    let tools = server.tools().await.map_err(|e| e.to_string())?;
    eprintln!("{} tool(s)", tools.len());
    if scenario == "tools_call" {
        let tool = tools
            .iter()
            .find(|t| t.name == "add_numbers")
            .ok_or("the server lists no `add_numbers`")?;
        let reply = server
            .call(
                &tool.name,
                json!({"a": 2, "b": 3}),
                &ToolContext::detached(&tool.qualified_name),
            )
            .await;
        match reply.output {
            Ok(ToolOutput::Value(v)) => println!("{v}"),
            Ok(ToolOutput::Stream(_)) => println!("(streamed)"),
            Err(e) => return Err(e.to_string()),
        }
    }
    hub.shutdown().await;
    Ok(())
}
