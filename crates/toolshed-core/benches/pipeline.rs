//! Pipeline overhead: a trivial tool through the whole pipeline (validation, one hook
//! per chain level, crumbs to one subscriber, output validation) side by side with the
//! same async fn called directly; and exporting a 1,000-tool toolset to OpenAI format.
//!
//! Run: `cargo bench -p toolshed-core --bench pipeline`; see BENCHMARKS.md.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolshed_core::formats::openai::openai_tools;
use toolshed_core::formats::{Vendor, export_json};
use toolshed_core::{
    AfterRun, BeforeRun, Crumb, CrumbSink, HookFns, Pipeline, RunContext, Tool, ToolCall, ToolSet,
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

fn bench_overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let tool = add_tool().with_hook(noop_hook("tool"));
    assert!(
        tool.output_schema().is_some(),
        "the bench must validate output"
    );
    let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).expect("toolset"))
        .plugin_hook(noop_hook("plugin"))
        .global_hook(noop_hook("global"))
        .build();
    let counter = Arc::new(Counter(AtomicU64::new(0)));
    pipeline.crumbs().add_sink(counter.clone());
    let run = RunContext::ephemeral();
    let args = json!({"a": 1, "b": 2});

    // Check once that the measured path really validates, hooks and emits crumbs.
    let check = rt.block_on(pipeline.call(&run, ToolCall::new("add", args.clone())));
    assert_eq!(check.result.expect("ok"), json!(3));
    assert_eq!(
        counter.0.load(Ordering::Relaxed),
        2,
        "tool:call and tool:result delivered"
    );

    let mut group = c.benchmark_group("overhead");
    group.bench_function("direct_async_fn", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(add(black_box(1), black_box(2)).await) })
    });
    group.bench_function("full_pipeline", |b| {
        b.to_async(&rt).iter(|| async {
            let call = ToolCall {
                id: "call_1".to_owned(),
                name: "add".to_owned(),
                args: args.clone(),
            };
            let out = pipeline.call(&run, call).await;
            black_box(out.result.expect("ok"))
        })
    });
    group.finish();
    assert!(
        counter.0.load(Ordering::Relaxed) > 0,
        "crumbs were delivered"
    );
}

fn bench_export(c: &mut Criterion) {
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Free-text query."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            "filters": {"anyOf": [{"$ref": "#/$defs/Filters"}, {"type": "null"}]}
        },
        "required": ["query"],
        "$defs": {"Filters": {"type": "object", "properties": {
            "status": {"type": "string", "enum": ["open", "closed"]},
            "tags": {"type": "array", "items": {"type": "string"}}
        }}}
    });
    let tools: Vec<Tool> = (0..1000)
        .map(|i| {
            Tool::builder(&format!("tool_{i}"))
                .description("Search the ticket index by free text and filters.")
                .input_schema(schema.clone())
                .handler(|_a, _c| async { Ok::<_, String>(0) })
                .build()
                .expect("tool")
        })
        .collect();
    let set = ToolSet::from_tools(tools).expect("toolset");
    let mut group = c.benchmark_group("export_1000_tools");
    // The request body: what an agent sends on every turn.
    group.bench_function("openai_json", |b| {
        b.iter(|| black_box(export_json(Vendor::OpenAi, set.iter())))
    });
    group.bench_function("openai_strict_json", |b| {
        b.iter(|| black_box(export_json(Vendor::OpenAiStrict, set.iter())))
    });
    // The first strict export of a fresh toolset pays for the rewrite of every schema.
    group.bench_function("openai_strict_json_first_time", |b| {
        b.iter_batched(
            || {
                ToolSet::from_tools(set.iter().map(|t| t.with_hook(noop_hook("fresh"))))
                    .expect("toolset")
            },
            |fresh| black_box(export_json(Vendor::OpenAiStrict, fresh.iter())),
            criterion::BatchSize::LargeInput,
        )
    });
    // A `serde_json::Value` to edit before sending: every schema is cloned.
    group.bench_function("openai_value", |b| {
        b.iter(|| black_box(openai_tools(set.iter(), false)))
    });
    group.bench_function("openai_strict_value", |b| {
        b.iter(|| black_box(openai_tools(set.iter(), true)))
    });
    group.finish();
}

criterion_group!(benches, bench_overhead, bench_export);
criterion_main!(benches);
