//! Instruction counting for the pipeline's overhead (run under callgrind): N calls of a
//! trivial tool through the whole pipeline (validation, one hook per level, crumbs to
//! one sink, output validation). Usage: pipeline_count N
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use toolshed_core::{
    AfterRun, BeforeRun, Crumb, CrumbSink, HookFns, Pipeline, RunContext, ToolCall, ToolSet,
};

/// Add two integers.
#[toolshed_macros::tool]
async fn add(a: i64, b: i64) -> i64 {
    a + b
}

struct Counter(AtomicU64);
impl CrumbSink for Counter {
    fn emit(&self, _crumb: &Arc<Crumb>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn noop_hook(name: &str) -> Arc<dyn toolshed_core::Hook> {
    HookFns::new(name)
        .before_run(|_, _| BeforeRun::Continue)
        .after_run(|_, _| AfterRun::Keep)
        .into_hook()
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let tool = add_tool().with_hook(noop_hook("tool"));
    let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).expect("toolset"))
        .plugin_hook(noop_hook("plugin"))
        .global_hook(noop_hook("global"))
        .build();
    let counter = Arc::new(Counter(AtomicU64::new(0)));
    pipeline.crumbs().add_sink(counter.clone());
    let run = RunContext::ephemeral();
    let args = json!({"a": 1, "b": 2});
    rt.block_on(async {
        for _ in 0..n {
            let call = ToolCall {
                id: "call_1".to_owned(),
                name: "add".to_owned(),
                args: args.clone(),
            };
            let out = pipeline.call(&run, call).await;
            assert_eq!(out.result.expect("the call succeeds"), json!(3));
        }
    });
    assert_eq!(counter.0.load(Ordering::Relaxed), 2 * n);
}
