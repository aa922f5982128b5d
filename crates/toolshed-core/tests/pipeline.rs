//! Behaviour of the in-memory call pipeline: validation, hooks, retries, timeouts,
//! panics, streaming, crumbs, credentials, concurrency and toolsets.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use toolshed_core::hooks::HookLevel;
use toolshed_core::{
    AfterRun, Approval, BeforeRun, CallOutcome, Chunk, CredentialError, CredentialProvider,
    CrumbKind, Diagnostics, ErrorCode, ExecuteOptions, FieldError, HandlerFuture, HookFns,
    MemorySink, OnError, Pipeline, PipelineConfig, Plugin, PluginError, Principal, Reply,
    RetryPolicy, RunContext, Secret, Skill, Tool, ToolCall, ToolContext, ToolError, ToolOutput,
    ToolSet, ToolSource,
};

fn schema_q() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "maximum": 10, "default": 5}
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

/// A tool that echoes its args and counts its executions.
fn echo(counter: Arc<AtomicU32>) -> Tool {
    Tool::builder("echo")
        .description("Echo the args back.")
        .input_schema(schema_q())
        .handler(move |args, _ctx| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(args) }
        })
        .build()
        .unwrap()
}

fn pipeline(tools: Vec<Tool>) -> (Pipeline, MemorySink) {
    let p = Pipeline::builder(ToolSet::from_tools(tools).unwrap()).build();
    let sink = MemorySink::new();
    p.crumbs().add_sink(Arc::new(sink.clone()));
    (p, sink)
}

async fn call(p: &Pipeline, name: &str, args: Value) -> CallOutcome {
    p.call(&RunContext::ephemeral(), ToolCall::new(name, args))
        .await
}

fn err(o: &CallOutcome) -> &ToolError {
    o.result.as_ref().expect_err("expected an error result")
}

#[tokio::test]
async fn valid_args_get_defaults_and_reach_the_handler() {
    let n = Arc::new(AtomicU32::new(0));
    let (p, sink) = pipeline(vec![echo(n.clone())]);
    let out = call(&p, "echo", json!({"query": "rust"})).await;
    assert_eq!(out.result, Ok(json!({"query": "rust", "limit": 5})));
    assert_eq!(out.attempts, 1);
    assert_eq!(n.load(Ordering::SeqCst), 1);
    assert_eq!(sink.kinds(), vec![CrumbKind::Call, CrumbKind::Result]);
    let result = &sink.crumbs()[1];
    // The result crumb carries the call's own duration.
    assert_eq!(
        result.duration_ms,
        Some(out.duration.as_secs_f64() * 1000.0)
    );
    assert_eq!(&*result.tool_name, "echo");
}

#[tokio::test]
async fn invalid_args_list_every_violation_and_never_run_the_handler() {
    let n = Arc::new(AtomicU32::new(0));
    let (p, sink) = pipeline(vec![echo(n.clone())]);
    let out = call(&p, "echo", json!({"limit": "ten", "extra": 1})).await;
    let e = err(&out);
    assert_eq!(e.code, ErrorCode::InvalidArgs);
    assert!(e.message.contains("3 problems"), "{}", e.message);
    assert!(e.message.contains("at /limit"), "{}", e.message);
    assert!(e.message.contains("\"ten\""), "{}", e.message);
    assert!(e.message.contains("query"), "{}", e.message);
    assert!(e.message.contains("extra"), "{}", e.message);
    let violations = e.details.as_ref().unwrap()["violations"]
        .as_array()
        .unwrap();
    assert_eq!(violations.len(), 3);
    assert_eq!(n.load(Ordering::SeqCst), 0);
    assert_eq!(sink.kinds(), vec![CrumbKind::Call, CrumbKind::Error]);
    // Not an object at all.
    let out = call(&p, "echo", json!("just a string")).await;
    assert_eq!(err(&out).code, ErrorCode::InvalidArgs);
    let out = call(&p, "echo", json!({"query": "x", "limit": 11})).await;
    assert!(
        err(&out).message.contains("maximum"),
        "{}",
        err(&out).message
    );
}

#[tokio::test]
async fn unknown_tools_suggest_the_nearest_names() {
    let (p, _) = pipeline(vec![echo(Arc::default())]);
    let out = call(&p, "ecoh", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::UnknownTool);
    assert!(
        err(&out).message.contains("did you mean `echo`"),
        "{}",
        err(&out).message
    );
    let out = call(&p, "zzzzzzzzzzzz", json!({})).await;
    assert!(
        err(&out).message.contains("available tools: echo"),
        "{}",
        err(&out).message
    );
}

#[tokio::test]
async fn output_is_validated() {
    let bad = Tool::builder("bad_output")
        .description("Returns the wrong shape.")
        .output_schema(
            json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}),
        )
        .handler(|_a, _c| async { Ok::<_, String>(json!({"n": "one"})) })
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![bad]);
    let out = call(&p, "bad_output", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::InvalidOutput);
    assert!(err(&out).message.contains("/n"), "{}", err(&out).message);
}

#[tokio::test]
async fn a_panicking_handler_is_an_error_result() {
    let t = Tool::builder("boom")
        .description("Panics.")
        .handler(|_a, _c| async {
            if true {
                panic!("kaboom");
            }
            Ok::<_, String>(1)
        })
        .build()
        .unwrap();
    let (p, sink) = pipeline(vec![t]);
    let out = call(&p, "boom", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::HandlerPanic);
    assert!(err(&out).message.contains("kaboom"));
    assert_eq!(sink.kinds(), vec![CrumbKind::Call, CrumbKind::Error]);
    // The pipeline still works afterwards.
    let out = call(&p, "boom", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::HandlerPanic);
}

#[tokio::test(start_paused = true)]
async fn timeouts_complete_the_call_and_fire_the_cancellation_token() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let t = Tool::builder("slow")
        .description("Never finishes.")
        .timeout(Duration::from_millis(50))
        .handler(move |_a, ctx| {
            let tx = tx.clone();
            async move {
                let token = ctx.cancellation().clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    if let Some(tx) = tx.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                });
                std::future::pending::<()>().await;
                Ok::<_, String>(0)
            }
        })
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![t]);
    let out = call(&p, "slow", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::Timeout);
    assert_eq!(err(&out).message, "tool slow timed out after 50ms");
    // The token fired: the spawned watcher reports it.
    tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn cancelling_the_run_cancels_the_call() {
    let t = Tool::builder("wait")
        .description("Waits forever.")
        .handler(|_a, _c| async {
            std::future::pending::<()>().await;
            Ok::<_, String>(0)
        })
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![t]);
    let run = RunContext::ephemeral();
    let token = run.cancellation().clone();
    let fut = p.call(&run, ToolCall::new("wait", json!({})));
    token.cancel();
    let out = fut.await;
    assert_eq!(err(&out).code, ErrorCode::Cancelled);
}

fn flaky(failures: u32, retries: u32, counter: Arc<AtomicU32>) -> Tool {
    Tool::builder("flaky")
        .description("Fails a few times.")
        .retry(RetryPolicy {
            attempts: retries,
            backoff_ms: 10,
            multiplier: 2.0,
            max_backoff_ms: 100,
        })
        .handler(move |_a, _c| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n <= failures {
                    Err(format!("failure {n}"))
                } else {
                    Ok(json!({"ok": n}))
                }
            }
        })
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn retries_follow_the_policy() {
    let n = Arc::new(AtomicU32::new(0));
    let (p, _) = pipeline(vec![flaky(2, 2, n.clone())]);
    let out = call(&p, "flaky", json!({})).await;
    assert_eq!(out.result.unwrap(), json!({"ok": 3}));
    assert_eq!(out.attempts, 3);

    let n = Arc::new(AtomicU32::new(0));
    let (p, _) = pipeline(vec![flaky(5, 2, n.clone())]);
    let out = call(&p, "flaky", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::HandlerError);
    assert_eq!(err(&out).message, "failure 3");
    assert_eq!(n.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn an_on_error_hook_that_always_retries_is_bounded() {
    let n = Arc::new(AtomicU32::new(0));
    let tool = flaky(u32::MAX, 3, n.clone()).with_hook(
        HookFns::new("loop")
            .on_error(|_, _| OnError::Retry)
            .into_hook(),
    );
    let (p, _) = pipeline(vec![tool]);
    let out = call(&p, "flaky", json!({})).await;
    assert_eq!(n.load(Ordering::SeqCst), 4);
    assert!(
        err(&out).message.contains("gave up after 4 attempts"),
        "{}",
        err(&out).message
    );
}

#[tokio::test]
async fn on_error_can_recover_or_replace_the_error() {
    let n = Arc::new(AtomicU32::new(0));
    let tool = flaky(u32::MAX, 0, n.clone()).with_hook(
        HookFns::new("recover")
            .on_error(|_, _| OnError::Recover(json!([])))
            .into_hook(),
    );
    let (p, sink) = pipeline(vec![tool]);
    assert_eq!(
        call(&p, "flaky", json!({})).await.result.unwrap(),
        json!([])
    );
    assert_eq!(sink.kinds(), vec![CrumbKind::Call, CrumbKind::Result]);

    let tool = flaky(u32::MAX, 5, Arc::default()).with_hook(
        HookFns::new("fail")
            .on_error(|_, _| OnError::Fail(ToolError::new(ErrorCode::HookError, "replaced")))
            .into_hook(),
    );
    let (p, _) = pipeline(vec![tool]);
    let out = call(&p, "flaky", json!({})).await;
    assert_eq!(err(&out).message, "replaced");
    assert_eq!(out.attempts, 1, "Fail stops retries");
}

#[tokio::test]
async fn before_run_can_replace_args_which_are_validated_again() {
    let n = Arc::new(AtomicU32::new(0));
    let tool = echo(n.clone()).with_hook(
        HookFns::new("rewrite")
            .before_run(|_, args| {
                let mut a = args.clone();
                a["query"] = json!(format!("{} lang:rust", a["query"].as_str().unwrap_or("")));
                BeforeRun::ReplaceArgs(a)
            })
            .into_hook(),
    );
    let (p, _) = pipeline(vec![tool]);
    let out = call(&p, "echo", json!({"query": "tokio"})).await;
    assert_eq!(out.result.unwrap()["query"], "tokio lang:rust");

    let tool = echo(n.clone()).with_hook(
        HookFns::new("breaker")
            .before_run(|_, _| BeforeRun::ReplaceArgs(json!({"query": 42})))
            .into_hook(),
    );
    let (p, _) = pipeline(vec![tool]);
    let before = n.load(Ordering::SeqCst);
    let out = call(&p, "echo", json!({"query": "x"})).await;
    assert_eq!(err(&out).code, ErrorCode::InvalidArgs);
    assert!(
        err(&out)
            .message
            .contains("tool hook `breaker` replaced the arguments"),
        "{}",
        err(&out).message
    );
    assert_eq!(n.load(Ordering::SeqCst), before);
}

/// What a hook saw: which hook, the attempt, the args.
type Seen = Arc<Mutex<Vec<(&'static str, u32, Value)>>>;

#[tokio::test(start_paused = true)]
async fn after_run_and_on_error_see_the_args_the_handler_got() {
    let seen: Seen = Arc::default();
    let (after, errors) = (seen.clone(), seen.clone());
    let tool = echo(Arc::default()).with_hook(
        HookFns::new("observe")
            .before_run(|_, args| {
                let mut a = args.clone();
                a["query"] = json!("rewritten");
                BeforeRun::ReplaceArgs(a)
            })
            .after_run(move |call, _| {
                after
                    .lock()
                    .unwrap()
                    .push(("after", call.attempt, call.args.clone()));
                AfterRun::Keep
            })
            .into_hook(),
    );
    let (p, _) = pipeline(vec![tool]);
    call(&p, "echo", json!({"query": "tokio"}))
        .await
        .result
        .unwrap();
    // The replaced args, with the schema's default filled in.
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [("after", 1, json!({"query": "rewritten", "limit": 5}))]
    );

    seen.lock().unwrap().clear();
    let tool = flaky(u32::MAX, 1, Arc::default()).with_hook(
        HookFns::new("observe")
            .on_error(move |call, _| {
                errors
                    .lock()
                    .unwrap()
                    .push(("error", call.attempt, call.args.clone()));
                OnError::Propagate
            })
            .into_hook(),
    );
    let (p, _) = pipeline(vec![tool]);
    call(&p, "flaky", json!({"n": 1})).await.result.unwrap_err();
    // Every failed attempt, the last one (which gets no copy without hooks) included.
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [("error", 1, json!({"n": 1})), ("error", 2, json!({"n": 1}))]
    );
}

#[tokio::test]
async fn before_run_can_short_circuit_like_a_cache() {
    let n = Arc::new(AtomicU32::new(0));
    let tool = echo(n.clone()).with_hook(
        HookFns::new("cache")
            .before_run(|_, _| BeforeRun::ShortCircuit(json!("cached")))
            .into_hook(),
    );
    let (p, _) = pipeline(vec![tool]);
    let out = call(&p, "echo", json!({"query": "x"})).await;
    assert_eq!(out.result.unwrap(), json!("cached"));
    assert_eq!(n.load(Ordering::SeqCst), 0);
    assert_eq!(out.attempts, 0);
}

#[tokio::test]
async fn hooks_chain_tool_then_plugins_then_global() {
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let mk = |label: &'static str| {
        let o1 = order.clone();
        let o2 = order.clone();
        HookFns::new(label)
            .before_run(move |_, _| {
                o1.lock().unwrap().push(format!("before:{label}"));
                BeforeRun::Continue
            })
            .after_run(move |_, v| {
                o2.lock().unwrap().push(format!("after:{label}"));
                AfterRun::Replace(json!(format!("{}+{label}", v.as_str().unwrap_or(""))))
            })
            .into_hook()
    };
    let tool = Tool::builder("t")
        .description("d")
        .handler(|_a, _c| async { Ok::<_, String>("r") })
        .hook(mk("tool"))
        .build()
        .unwrap();
    let p = Pipeline::builder(ToolSet::from_tools([tool]).unwrap())
        .plugin_hook(mk("plugin"))
        .global_hook(mk("global"))
        .build();
    let out = call(&p, "t", json!({})).await;
    assert_eq!(out.result.unwrap(), json!("r+tool+plugin+global"));
    assert_eq!(
        *order.lock().unwrap(),
        vec![
            "before:tool",
            "before:plugin",
            "before:global",
            "after:tool",
            "after:plugin",
            "after:global"
        ]
    );
}

#[tokio::test]
async fn after_run_replacements_are_validated_against_the_output_schema() {
    let tool = Tool::builder("t")
        .description("d")
        .output_schema(json!({"type": "string"}))
        .handler(|_a, _c| async { Ok::<_, String>("fine") })
        .hook(
            HookFns::new("bad")
                .after_run(|_, _| AfterRun::Replace(json!(1)))
                .into_hook(),
        )
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![tool]);
    let out = call(&p, "t", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::InvalidOutput);
    assert!(
        err(&out).message.contains("after_run"),
        "{}",
        err(&out).message
    );
}

struct PanickingHook;
impl toolshed_core::Hook for PanickingHook {
    fn name(&self) -> &str {
        "panicky"
    }
    fn before_run<'a>(
        &'a self,
        _c: toolshed_core::HookCall<'a>,
        _a: &'a Value,
    ) -> BoxFuture<'a, BeforeRun> {
        Box::pin(async { panic!("hook exploded") })
    }
}

struct HangingHook;
impl toolshed_core::Hook for HangingHook {
    fn after_run<'a>(
        &'a self,
        _c: toolshed_core::HookCall<'a>,
        _r: &'a Value,
    ) -> BoxFuture<'a, AfterRun> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn panicking_and_hanging_hooks_are_contained() {
    let n = Arc::new(AtomicU32::new(0));
    let p = Pipeline::builder(ToolSet::from_tools([echo(n.clone())]).unwrap())
        .global_hook(Arc::new(PanickingHook))
        .build();
    let out = call(&p, "echo", json!({"query": "x"})).await;
    assert_eq!(err(&out).code, ErrorCode::HookPanic);
    assert!(
        err(&out)
            .message
            .contains("global hook `panicky` panicked: hook exploded"),
        "{}",
        err(&out).message
    );
    assert_eq!(n.load(Ordering::SeqCst), 0);

    let p = Pipeline::builder(ToolSet::from_tools([echo(n.clone())]).unwrap())
        .plugin_hook(Arc::new(HangingHook))
        .config(PipelineConfig {
            hook_timeout: Duration::from_millis(20),
            ..Default::default()
        })
        .build();
    let out = call(&p, "echo", json!({"query": "x"})).await;
    assert_eq!(err(&out).code, ErrorCode::HookTimeout);
    assert!(err(&out).message.contains(&HookLevel::Plugin.to_string()));
}

fn streaming_tool(items: Vec<Result<Value, ToolError>>, counter: Arc<AtomicU32>) -> Tool {
    Tool::builder("stream")
        .description("Streams progress.")
        .retry(RetryPolicy::retries(3))
        .stream_handler(move |_a, _c| {
            counter.fetch_add(1, Ordering::SeqCst);
            futures_util::stream::iter(items.clone())
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn streaming_results_emit_partials_and_end_with_the_last_item() {
    let items = vec![
        Ok(json!({"status": "started"})),
        Ok(json!({"status": "downloaded"})),
        Ok(json!({"status": "done", "body": "x"})),
    ];
    let (p, sink) = pipeline(vec![streaming_tool(items, Arc::default())]);
    let mut sub = p.crumbs().subscribe();
    let out = call(&p, "stream", json!({})).await;
    assert_eq!(out.result.unwrap(), json!({"status": "done", "body": "x"}));
    // bread's rule: every yield is a partial, published as it comes; the last is
    // also the result.
    assert_eq!(
        sink.kinds(),
        vec![
            CrumbKind::Call,
            CrumbKind::Partial,
            CrumbKind::Partial,
            CrumbKind::Partial,
            CrumbKind::Result
        ]
    );
    let partials: Vec<_> = sink
        .crumbs()
        .iter()
        .filter(|c| c.kind == CrumbKind::Partial)
        .map(|c| c.payload.clone().unwrap())
        .collect();
    assert_eq!(
        partials,
        vec![
            json!({"status": "started"}),
            json!({"status": "downloaded"}),
            json!({"status": "done", "body": "x"})
        ]
    );
    assert!(
        sink.crumbs()[1].duration_ms.is_none(),
        "partials carry no duration"
    );
    // The broadcast subscriber saw the same crumbs.
    let mut seen = Vec::new();
    while let Ok(c) = sub.try_recv() {
        seen.push(c.kind);
    }
    assert_eq!(seen, sink.kinds());
}

#[tokio::test]
async fn a_streaming_error_surfaces_at_once_without_retry() {
    let n = Arc::new(AtomicU32::new(0));
    let items = vec![Ok(json!(1)), Err(ToolError::handler("stream broke"))];
    let (p, sink) = pipeline(vec![streaming_tool(items, n.clone())]);
    let out = call(&p, "stream", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::HandlerError);
    assert_eq!(
        n.load(Ordering::SeqCst),
        1,
        "never retried despite retry policy"
    );
    // The value sent before the failure was a partial result.
    assert_eq!(
        sink.kinds(),
        vec![CrumbKind::Call, CrumbKind::Partial, CrumbKind::Error]
    );

    let (p, _) = pipeline(vec![streaming_tool(vec![], Arc::default())]);
    let out = call(&p, "stream", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::EmptyStream);
}

#[tokio::test]
async fn each_partial_is_published_before_the_next_value_exists() {
    // The stream's second value is made only once the first one's partial crumb has
    // been seen: a pipeline that held a value back to learn whether it is the last
    // would wait forever.
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel::<()>();
    let seen_rx = Arc::new(Mutex::new(Some(seen_rx)));
    let tool = Tool::builder("stream")
        .description("Streams two values, the second after the first is seen.")
        .stream_handler(move |_a, _c| {
            let seen_rx = seen_rx.lock().unwrap().take();
            futures_util::stream::once(async { Ok(json!({"step": 1})) }).chain(
                futures_util::stream::once(async move {
                    if let Some(rx) = seen_rx {
                        let _ = rx.await;
                    }
                    Ok(json!({"step": 2}))
                }),
            )
        })
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![tool]);
    let mut sub = p.crumbs().subscribe();
    let watcher = tokio::spawn(async move {
        loop {
            let c = sub.recv().await.unwrap();
            if c.kind == CrumbKind::Partial {
                let _ = seen_tx.send(());
                return c.payload.clone();
            }
        }
    });
    let out = tokio::time::timeout(Duration::from_secs(30), call(&p, "stream", json!({})))
        .await
        .expect("the first partial was held back until a second value came");
    assert_eq!(out.result.unwrap(), json!({"step": 2}));
    assert_eq!(watcher.await.unwrap(), Some(json!({"step": 1})));
}

#[tokio::test]
async fn an_on_error_hook_does_not_recover_a_stream() {
    let n = Arc::new(AtomicU32::new(0));
    let items = vec![Ok(json!(1)), Err(ToolError::handler("stream broke"))];
    let tool = streaming_tool(items, n.clone()).with_hook(
        HookFns::new("recover")
            .on_error(|_, _| OnError::Recover(json!("recovered")))
            .into_hook(),
    );
    let (p, sink) = pipeline(vec![tool]);
    let out = call(&p, "stream", json!({})).await;
    assert_eq!(err(&out).message, "stream broke", "bread: no recovery");
    assert_eq!(n.load(Ordering::SeqCst), 1, "and no retry");
    assert_eq!(
        sink.kinds(),
        vec![CrumbKind::Call, CrumbKind::Partial, CrumbKind::Error]
    );
}

#[tokio::test]
async fn calls_of_one_turn_run_concurrently_and_come_back_in_order() {
    // Each call waits until all three have started: only concurrent execution finishes.
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let t = Tool::builder("meet")
        .description("Waits for the others.")
        .input_schema(json!({"type": "object", "properties": {"i": {"type": "integer"}}}))
        .handler(move |args, _c| {
            let b = barrier.clone();
            async move {
                b.wait().await;
                Ok::<_, String>(args["i"].clone())
            }
        })
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![t]);
    let calls = (0..3)
        .map(|i| ToolCall::new("meet", json!({"i": i})))
        .collect();
    let outs = tokio::time::timeout(
        Duration::from_secs(10),
        p.call_many(&RunContext::ephemeral(), calls),
    )
    .await
    .expect("calls did not run concurrently");
    let results: Vec<Value> = outs.into_iter().map(|o| o.result.unwrap()).collect();
    assert_eq!(results, vec![json!(0), json!(1), json!(2)]);
}

#[tokio::test]
async fn approval_gated_calls_are_refused_by_the_in_memory_pipeline() {
    let t = Tool::builder("pay")
        .description("Pays.")
        .input_schema(json!({"type": "object", "properties": {"amount": {"type": "number"}}}))
        .approval(Approval::when(|a| {
            a["amount"].as_f64().unwrap_or(0.0) > 100.0
        }))
        .handler(|_a, _c| async { Ok::<_, String>("paid") })
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![t]);
    assert_eq!(
        call(&p, "pay", json!({"amount": 5})).await.result.unwrap(),
        json!("paid")
    );
    let out = call(&p, "pay", json!({"amount": 500})).await;
    assert_eq!(err(&out).code, ErrorCode::ApprovalRequired);
}

#[tokio::test]
async fn the_context_carries_ids_principal_env_and_key() {
    let t = Tool::builder("ctx")
        .description("Reports its context.")
        .handler(|_a, ctx| async move {
            Ok::<_, String>(json!({
                "agent": ctx.agent_id(), "run": ctx.run_id(), "session": ctx.session_id(),
                "call": ctx.tool_call_id(), "tenant": ctx.principal().and_then(|p| p.tenant.clone()),
                "region": ctx.env("REGION"), "key": ctx.idempotency_key(), "attempt": ctx.attempt(),
            }))
        })
        .build()
        .unwrap();
    let (p, sink) = pipeline(vec![t]);
    let run = RunContext::builder()
        .agent_id("support")
        .run_id("run-1")
        .session_id("sess-1")
        .principal(Principal {
            iss: "toolshed".into(),
            sub: "ana".into(),
            tenant: Some("acme".into()),
        })
        .env(BTreeMap::from([("REGION".to_string(), "eu".to_string())]))
        .build();
    let call = ToolCall {
        id: "call-7".into(),
        name: "ctx".into(),
        args: json!({}),
    };
    let prepared = p.prepare(&run, call).unwrap();
    let out = p
        .execute(
            &run,
            prepared,
            ExecuteOptions {
                idempotency_key: Some("run-1:0".into()),
            },
        )
        .await;
    assert_eq!(
        out.result.unwrap(),
        json!({"agent": "support", "run": "run-1", "session": "sess-1", "call": "call-7",
               "tenant": "acme", "region": "eu", "key": "run-1:0", "attempt": 1})
    );
    for c in sink.crumbs() {
        assert_eq!(
            (&*c.run_id, &*c.agent_id, &*c.session_id, &*c.tool_call_id),
            ("run-1", "support", "sess-1", "call-7")
        );
    }
}

/// An in-process provider for precedence tests (the Vault provider is tested against a
/// real OpenBao in `toolshed-providers`).
#[derive(Debug)]
struct Fixed(&'static str);
impl CredentialProvider for Fixed {
    fn describe(&self) -> String {
        format!("fixed({})", self.0)
    }
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        Box::pin(async move { Ok(Secret::new(format!("{}-secret-for-{name}", self.0))) })
    }
}

fn key_reader(name: &str, declared: &[&str]) -> toolshed_core::ToolBuilder {
    Tool::builder(name)
        .description("Reads a key.")
        .input_schema(json!({"type": "object", "properties": {"name": {"type": "string"}}}))
        .credentials(declared.iter().copied())
        .handler(|args, ctx| async move {
            let name = args["name"].as_str().unwrap_or("API_KEY").to_owned();
            let key = ctx
                .credentials()
                .get(&name)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(key.expose().to_owned())
        })
}

#[tokio::test]
async fn credentials_precedence_tool_then_run_default_then_env() {
    let per_tool = key_reader("per_tool", &["API_KEY"])
        .credential_provider(Arc::new(Fixed("tool")))
        .build()
        .unwrap();
    let default = key_reader("default", &["API_KEY"]).build().unwrap();
    let p = Pipeline::builder(ToolSet::from_tools([per_tool, default]).unwrap()).build();
    let run = RunContext::builder()
        .credentials(Arc::new(Fixed("run")))
        .build();
    let a = p.call(&run, ToolCall::new("per_tool", json!({}))).await;
    let b = p.call(&run, ToolCall::new("default", json!({}))).await;
    // Secrets returned as results are redacted: the pipeline scrubs every value it
    // handed out. The error message below proves which provider answered.
    assert_eq!(a.result.unwrap(), json!("[REDACTED]"));
    assert_eq!(b.result.unwrap(), json!("[REDACTED]"));

    let reveal = |tag: &'static str| {
        Tool::builder(tag)
            .description("Says which provider answered.")
            .credentials(["API_KEY"])
            .handler(|_a, ctx| async move {
                let key = ctx
                    .credentials()
                    .get("API_KEY")
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(key.expose().split('-').next().unwrap_or("").to_owned())
            })
    };
    let p = Pipeline::builder(
        ToolSet::from_tools([
            reveal("t1")
                .credential_provider(Arc::new(Fixed("tool")))
                .build()
                .unwrap(),
            reveal("t2").build().unwrap(),
        ])
        .unwrap(),
    )
    .build();
    assert_eq!(
        p.call(&run, ToolCall::new("t1", json!({})))
            .await
            .result
            .unwrap(),
        json!("tool")
    );
    assert_eq!(
        p.call(&run, ToolCall::new("t2", json!({})))
            .await
            .result
            .unwrap(),
        json!("run")
    );
    // No provider anywhere: the process environment.
    let out = p
        .call(&RunContext::ephemeral(), ToolCall::new("t2", json!({})))
        .await;
    assert_eq!(err(&out).code, ErrorCode::HandlerError);
    assert!(
        err(&out).message.contains("not set in the environment"),
        "{}",
        err(&out).message
    );
}

#[tokio::test]
async fn undeclared_credentials_are_refused_even_when_the_provider_has_them() {
    let t = key_reader("reader", &["API_KEY"]).build().unwrap();
    let none = key_reader("none", &[]).build().unwrap();
    let p = Pipeline::builder(ToolSet::from_tools([t, none]).unwrap()).build();
    let run = RunContext::builder()
        .credentials(Arc::new(Fixed("run")))
        .build();
    let out = p
        .call(&run, ToolCall::new("reader", json!({"name": "OTHER"})))
        .await;
    assert!(
        err(&out).message.contains("CREDENTIAL_NOT_DECLARED"),
        "{}",
        err(&out).message
    );
    let out = p
        .call(&run, ToolCall::new("none", json!({"name": "API_KEY"})))
        .await;
    assert!(
        err(&out).message.contains("declares no credentials"),
        "{}",
        err(&out).message
    );
    for bad in ["a/b", "a.b", "a?b", "a#b", "a b"] {
        let out = p
            .call(&run, ToolCall::new("reader", json!({"name": bad})))
            .await;
        assert!(
            err(&out).message.contains("INVALID_CREDENTIAL_NAME"),
            "{bad}: {}",
            err(&out).message
        );
    }
}

#[tokio::test]
async fn secrets_never_reach_errors_or_crumbs() {
    const SECRET: &str = "run-secret-for-API_KEY";
    // Leaks its key into an error's message and details.
    let leaky = Tool::builder("leaky")
        .description("Leaks its key into an error.")
        .credentials(["API_KEY"])
        .raw_handler(Arc::new(|_a: Value, ctx: ToolContext| -> HandlerFuture {
            Box::pin(async move {
                let key = match ctx.credentials().get("API_KEY").await {
                    Ok(k) => k,
                    Err(e) => return Reply::new(Err(e.into())),
                };
                let err = ToolError::handler(format!("upstream rejected key {}", key.expose()))
                    .with_details(json!({"key": key.expose(), "keys": [key.expose()]}));
                Reply::new(Err(err)).with_diagnostics(Diagnostics {
                    stderr: format!("401 for {}\n", key.expose()),
                    ..Diagnostics::default()
                })
            })
        }))
        .build()
        .unwrap();
    // Streams its key in partials and in the result.
    let streamer = Tool::builder("streamer")
        .description("Streams its key.")
        .credentials(["API_KEY"])
        .stream_handler(|_a, ctx| {
            futures_util::stream::once(async move {
                ctx.credentials()
                    .get("API_KEY")
                    .await
                    .map_err(ToolError::from)
            })
            .flat_map(|key| {
                let items = match key {
                    Ok(k) => vec![
                        Ok(json!({"progress": format!("using {}", k.expose())})),
                        Ok(json!({k.expose(): "as a key"})),
                        Ok(json!({"done": k.expose()})),
                    ],
                    Err(e) => vec![Err(e)],
                };
                futures_util::stream::iter(items)
            })
        })
        .build()
        .unwrap();
    let (p, sink) = pipeline(vec![leaky, streamer]);
    let run = RunContext::builder()
        .credentials(Arc::new(Fixed("run")))
        .build();
    let out = p.call(&run, ToolCall::new("leaky", json!({}))).await;
    assert_eq!(err(&out).message, "upstream rejected key [REDACTED]");
    assert_eq!(
        err(&out).details,
        Some(json!({"key": "[REDACTED]", "keys": ["[REDACTED]"]}))
    );
    assert_eq!(out.diagnostics.stderr, "401 for [REDACTED]\n");
    let out = p.call(&run, ToolCall::new("streamer", json!({}))).await;
    assert_eq!(out.result.unwrap(), json!({"done": "[REDACTED]"}));
    let partials: Vec<Value> = sink
        .crumbs()
        .iter()
        .filter(|c| c.kind == CrumbKind::Partial)
        .filter_map(|c| c.payload.clone())
        .collect();
    assert_eq!(
        partials,
        vec![
            json!({"progress": "using [REDACTED]"}),
            json!({"[REDACTED]": "as a key"}),
            json!({"done": "[REDACTED]"})
        ]
    );
    assert!(sink.crumbs().len() >= 6, "{:?}", sink.kinds());
    for c in sink.crumbs() {
        let text = serde_json::to_string(&*c).unwrap();
        assert!(!text.contains(SECRET), "{text}");
    }
}

/// A tool whose handler reports diagnostics the way a subprocess tool does.
fn diagnosed(name: &str, reply: impl Fn() -> Reply + Send + Sync + 'static) -> Tool {
    Tool::builder(name)
        .description("Reports diagnostics.")
        .raw_handler(Arc::new(
            move |_a: Value, _c: ToolContext| -> HandlerFuture {
                Box::pin(std::future::ready(reply()))
            },
        ))
        .build()
        .unwrap()
}

#[tokio::test]
async fn diagnostics_reach_the_outcome_on_success_and_on_failure_capped_per_field() {
    let ok = diagnosed("ok", || {
        Reply::new(Ok(ToolOutput::Value(json!(1)))).with_diagnostics(Diagnostics {
            stdout: "{\"id\":\"r1\",\"result\":1}\n".into(),
            exit_code: Some(0),
            ..Diagnostics::default()
        })
    });
    let failed = diagnosed("failed", || {
        Reply::new(Err(ToolError::handler("exited with code 3"))).with_diagnostics(Diagnostics {
            stderr: format!("{}the end\n", "x".repeat(100)),
            exit_code: Some(3),
            ..Diagnostics::default()
        })
    });
    let streamed = diagnosed("streamed", || {
        let chunks = vec![
            Ok(Chunk::Value(json!("partial"))),
            Ok(Chunk::Diagnostics(Diagnostics {
                stderr: "at the end".into(),
                ..Diagnostics::default()
            })),
            Ok(Chunk::Value(json!("result"))),
        ];
        Reply::new(Ok(ToolOutput::Stream(
            futures_util::stream::iter(chunks).boxed(),
        )))
    });
    let p = Pipeline::builder(ToolSet::from_tools([ok, failed, streamed]).unwrap())
        .config(PipelineConfig {
            max_diagnostic_bytes: 20,
            ..Default::default()
        })
        .build();
    let out = call(&p, "ok", json!({})).await;
    assert_eq!(out.result.unwrap(), json!(1));
    assert_eq!(out.diagnostics.exit_code, Some(0));
    // Capped to the last 20 bytes, and flagged.
    assert_eq!(out.diagnostics.stdout, "d\":\"r1\",\"result\":1}\n");
    assert!(out.diagnostics.stdout_truncated);
    let out = call(&p, "failed", json!({})).await;
    assert_eq!(err(&out).message, "exited with code 3");
    assert_eq!(out.diagnostics.exit_code, Some(3));
    assert_eq!(out.diagnostics.stderr, "xxxxxxxxxxxxthe end\n");
    assert!(out.diagnostics.stderr_truncated && !out.diagnostics.stdout_truncated);
    let out = call(&p, "streamed", json!({})).await;
    assert_eq!(out.result.unwrap(), json!("result"));
    assert_eq!(out.diagnostics.stderr, "at the end");
    // An in-process tool reports none.
    let (p, _) = pipeline(vec![echo(Arc::default())]);
    assert!(
        call(&p, "echo", json!({"query": "x"}))
            .await
            .diagnostics
            .is_empty()
    );
}

/// Leaves what it "printed" in the sink when dropped, as the dispatcher's guard does.
struct LeaveOnDrop(toolshed_core::DiagnosticsSink);
impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        self.0.record(Diagnostics {
            stderr: "working on it\n".into(),
            ..Diagnostics::default()
        });
    }
}

#[tokio::test]
async fn a_timed_out_call_reports_what_its_handler_left_and_timed_out() {
    let slow = Tool::builder("slow")
        .description("Hangs after printing.")
        .timeout(Duration::from_millis(50))
        .raw_handler(Arc::new(|_a: Value, ctx: ToolContext| -> HandlerFuture {
            let guard = LeaveOnDrop(ctx.diagnostics().clone());
            Box::pin(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Reply::new(Ok(ToolOutput::Value(Value::Null)))
            })
        }))
        .build()
        .unwrap();
    let (p, _) = pipeline(vec![slow]);
    let out = call(&p, "slow", json!({})).await;
    assert_eq!(err(&out).code, ErrorCode::Timeout);
    assert!(out.diagnostics.timed_out);
    assert_eq!(out.diagnostics.stderr, "working on it\n");
}

#[tokio::test]
async fn a_panicking_crumb_sink_does_not_break_calls() {
    struct Bad;
    impl toolshed_core::CrumbSink for Bad {
        fn emit(&self, _c: &Arc<toolshed_core::Crumb>) {
            panic!("sink bug");
        }
    }
    let (p, sink) = pipeline(vec![echo(Arc::default())]);
    p.crumbs().add_sink(Arc::new(Bad));
    let out = call(&p, "echo", json!({"query": "x"})).await;
    assert!(out.result.is_ok());
    assert_eq!(sink.kinds().len(), 2);
}

struct Mcpish;
impl Plugin for Mcpish {
    fn name(&self) -> &str {
        "mcp_client"
    }
    fn global_tools(&self) -> Vec<Tool> {
        vec![
            Tool::builder("ping")
                .description("Ping.")
                .handler(|_a, _c| async { Ok::<_, String>("pong") })
                .build()
                .unwrap(),
        ]
    }
    fn resolve_agent_tools(&self, config: &Value) -> Result<Vec<Tool>, PluginError> {
        let servers = config["servers"].as_array().ok_or_else(|| {
            PluginError::Config(vec![FieldError::new("servers", "must be a list")])
        })?;
        Ok(servers
            .iter()
            .filter_map(|s| s.as_str())
            .map(|s| {
                Tool::builder(&format!("{s}_search"))
                    .description("Search.")
                    .handler(|_a, _c| async { Ok::<_, String>(1) })
                    .build()
                    .unwrap()
            })
            .collect())
    }
}

#[test]
fn toolsets_merge_sources_and_refuse_collisions() {
    let own = vec![echo(Arc::default())];
    let skill = Skill {
        name: "research".into(),
        tools: vec![
            Tool::builder("cite")
                .description("Cite.")
                .handler(|_a, _c| async { Ok::<_, String>(1) })
                .build()
                .unwrap(),
        ],
    };
    let plugins: Vec<Arc<dyn Plugin>> = vec![Arc::new(Mcpish)];
    let cfg = json!({"mcp_client": {"servers": ["zendesk", "slack"]}});
    let set =
        ToolSet::assemble(own, vec![skill], &plugins, cfg.as_object().unwrap(), vec![]).unwrap();
    let names: Vec<&str> = set.iter().map(Tool::name).collect();
    assert_eq!(
        names,
        vec!["echo", "cite", "ping", "zendesk_search", "slack_search"]
    );
    assert_eq!(
        set.source_of("zendesk_search"),
        Some(&ToolSource::AgentPlugin("mcp_client".into()))
    );
    assert_eq!(
        set.source_of("ping"),
        Some(&ToolSource::GlobalPlugin("mcp_client".into()))
    );

    // The agent's own `ping` collides with the plugin's global one.
    let own = vec![
        Tool::builder("ping")
            .description("Mine.")
            .handler(|_a, _c| async { Ok::<_, String>(1) })
            .build()
            .unwrap(),
    ];
    let e = ToolSet::assemble(own, vec![], &plugins, &serde_json::Map::new(), vec![]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("tool `ping` is defined twice: by the agent's own tools and by plugin `mcp_client` (global tools)"), "{msg}");

    let bad_cfg = json!({"mcp_client": {"servers": "zendesk"}});
    let e = ToolSet::assemble(
        vec![],
        vec![],
        &plugins,
        bad_cfg.as_object().unwrap(),
        vec![],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("plugin `mcp_client` could not resolve this agent's tools: field `servers`: must be a list"),
        "{e}"
    );
}

#[test]
fn builder_reports_every_problem() {
    let e = Tool::builder("bad name")
        .input_schema(json!({"type": "strng"}))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("field `name`"), "{e}");
    let e = Tool::builder("ok")
        .input_schema(json!({"type": "strng"}))
        .build()
        .unwrap_err();
    let fields: Vec<&str> = e.field_errors().iter().map(|f| f.field.as_str()).collect();
    assert_eq!(fields, vec!["description", "input_schema.type", "handler"]);
    let e = Tool::builder("ok")
        .description("d")
        .input_schema(json!({"type": "strng"}))
        .handler(|_a, _c| async { Ok::<_, String>(1) })
        .build()
        .unwrap_err();
    assert_eq!(e.field_errors()[0].field, "input_schema.type");
}
