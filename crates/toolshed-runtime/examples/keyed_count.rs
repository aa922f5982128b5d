//! N keyed calls through the durable runtime on a SQLite journal, for counting
//! instructions per call with callgrind (`bench/keyed-instructions.sh`): the
//! difference between two counts of calls, start-up excluded.
//!
//! Run: `cargo run --release -p toolshed-runtime --example keyed_count -- 1000`.

use serde_json::json;
#[path = "../benches/support/inc_tool.rs"]
mod inc_tool;

use toolshed_core::ToolCall;
use toolshed_runtime::{NewRunBuilder, Runtime, RuntimeConfig};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let pipeline = inc_tool::pipeline();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    rt.block_on(async {
        let journal = toolshed_journal::open(&url).await.expect("journal");
        let runtime = Runtime::new(pipeline, journal, RuntimeConfig::default()).expect("runtime");
        let run = runtime
            .start(NewRunBuilder::new("bench").build())
            .await
            .expect("run");
        for _ in 0..n {
            run.call(ToolCall::new("inc", json!({"n": 1})))
                .await
                .expect("call");
        }
    });
}
