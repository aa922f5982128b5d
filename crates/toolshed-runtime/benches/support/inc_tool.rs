//! The keyed tool the durable-run benches call (`inc`: add one), shared by
//! `benches/durable.rs`, `benches/keyed_ratio.rs` and `examples/keyed_count.rs` so that
//! their figures are of the same call.

use serde_json::json;
use toolshed_core::{Idempotency, Pipeline, Tool, ToolSet};

/// `inc`, keyed: `{"n": 1}` → `2`.
pub fn keyed_tool() -> Tool {
    Tool::builder("inc")
        .description("Add one.")
        .input_schema(
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        )
        .idempotency(Idempotency::Keyed)
        .handler(|args, _| async move { Ok::<_, String>(args["n"].as_i64().unwrap_or(0) + 1) })
        .build()
        .expect("tool")
}

/// A pipeline of [`keyed_tool`] alone.
pub fn pipeline() -> Pipeline {
    Pipeline::builder(ToolSet::from_tools([keyed_tool()]).expect("toolset")).build()
}
