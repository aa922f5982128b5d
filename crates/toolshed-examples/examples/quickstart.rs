//! Define tools three ways, run a model turn of several calls through the pipeline,
//! watch the crumbs, and print the OpenAI export.
//!
//! Run: `cargo run -p toolshed-examples --example quickstart`

use std::sync::Arc;

use serde_json::json;
use toolshed_core::formats::openai::openai_tools;
use toolshed_core::{HookFns, MemorySink, OnError, Pipeline, RunContext, ToolCall, ToolSet};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let toolset = ToolSet::from_tools(toolshed_examples::tools())?;
    let pipeline = Pipeline::builder(toolset)
        // A global hook: it sees every failed attempt of every tool (here it only logs).
        .global_hook(
            HookFns::new("soft-fail")
                .on_error(|call, err| {
                    eprintln!("  on_error({}) saw {}", call.spec.name, err.code);
                    OnError::Propagate
                })
                .into_hook(),
        )
        .build();
    let crumbs = MemorySink::new();
    pipeline.crumbs().add_sink(Arc::new(crumbs.clone()));

    // One model turn asking for four calls at once: they run concurrently and come
    // back in the order asked.
    let run = RunContext::builder().agent_id("quickstart").build();
    let calls = vec![
        ToolCall::new(
            "convert_temperature",
            json!({"value": 100, "from": "celsius", "to": "fahrenheit"}),
        ),
        ToolCall::new("roll_dice", json!({"count": 3, "seed": 42})),
        ToolCall::new("countdown", json!({"from": 3})),
        ToolCall::new(
            "convert_temperature",
            json!({"value": "hot", "from": "celsius"}),
        ),
    ];
    for outcome in pipeline.call_many(&run, calls).await {
        println!("{:<20} -> {}", outcome.tool_name, outcome.to_model_text());
    }

    println!("\ncrumbs:");
    for c in crumbs.crumbs() {
        println!(
            "  {:<20} {:<20} {}",
            c.kind.as_str(),
            c.tool_name,
            c.payload
                .as_ref()
                .map(|p| p.to_string())
                .unwrap_or_default()
        );
    }

    println!("\nOpenAI tools (strict):");
    println!(
        "{}",
        serde_json::to_string_pretty(&openai_tools(pipeline.toolset().iter(), true))?
    );
    Ok(())
}
