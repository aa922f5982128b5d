//! Approval predicates that would build huge values from a call's arguments: the
//! evaluation ends with a clear error before it builds them, the gate fails closed,
//! and the process's peak memory stays bounded. One test per process: peak RSS
//! (`VmHWM`) is the process's, so nothing else may run beside it.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use toolshed_core::{
    Approval, CelPredicate, ErrorCode, Pipeline, RunContext, Tool, ToolCall, ToolSet,
};

/// The process's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Reset the peak to the current resident set (Linux `clear_refs`, value 5).
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// `args.s` added to itself 64 times, as a balanced tree of `+` (6 levels of
/// doubling), compared so the predicate yields a boolean.
fn doubling_predicate() -> String {
    let mut e = "args.s".to_owned();
    for _ in 0..6 {
        e = format!("({e} + {e})");
    }
    format!("size({e}) > 0")
}

/// The same 64 copies as a list literal, and as a chain of 16 additions inside one
/// of 4 list elements (each list element is a copy too).
fn other_forms() -> Vec<String> {
    let copies = vec!["args.s"; 64].join(", ");
    let chain = vec!["args.s"; 16].join(" + ");
    vec![
        format!("size([{copies}]) > 0"),
        format!("[{chain}, {chain}, {chain}, {chain}].exists(x, size(x) > 0)"),
    ]
}

fn gated_tool(predicate: &str, runs: Arc<AtomicU32>) -> Tool {
    Tool::builder("pay")
        .description("Pay.")
        .input_schema(json!({"type": "object", "properties": {"s": {"type": "string"}}}))
        .approval(Approval::Cel(CelPredicate::compile(predicate).unwrap()))
        .handler(move |args, _ctx| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(args) }
        })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_predicate_that_multiplies_a_big_argument_fails_closed_in_bounded_memory() {
    let doubling = doubling_predicate();
    let mut predicates = vec![doubling.clone()];
    predicates.extend(other_forms());
    // 1.9 MB, as in the report.
    let big = json!({"s": "x".repeat(1_900_000)});

    // Every form passes registration: the budget depends on the arguments.
    for p in &predicates {
        CelPredicate::compile(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    }

    reset_peak_rss();
    let before = peak_rss_kib();
    // One call through the pipeline, then eight at once, per form.
    let mut outcomes = Vec::new();
    for p in &predicates {
        let runs = Arc::new(AtomicU32::new(0));
        let pipeline =
            Pipeline::builder(ToolSet::from_tools(vec![gated_tool(p, runs.clone())]).unwrap())
                .build();
        let run = RunContext::ephemeral();
        let one = pipeline.call(&run, ToolCall::new("pay", big.clone())).await;
        let eight = pipeline
            .call_many(
                &run,
                (0..8).map(|_| ToolCall::new("pay", big.clone())).collect(),
            )
            .await;
        outcomes.push((p, one, eight, runs.load(Ordering::SeqCst)));
    }
    let after = peak_rss_kib();
    let grown_mib = after.saturating_sub(before) / 1024;
    println!(
        "peak RSS (VmHWM) before {} MiB, after {} MiB: +{grown_mib} MiB over {} calls \
         with a {} byte argument",
        before / 1024,
        after / 1024,
        outcomes.len() * 9,
        1_900_000
    );
    let mut errors = Vec::new();
    for (p, one, eight, runs) in &outcomes {
        for outcome in std::iter::once(one).chain(eight) {
            let err = outcome
                .result
                .as_ref()
                .expect_err("the gate must fail closed");
            assert_eq!(err.code, ErrorCode::ApprovalPredicateError, "{p}: {err}");
            errors.push(err.message.clone());
        }
        assert_eq!(*runs, 0, "{p}: the tool must not run");
    }
    for message in &errors {
        // The error names the predicate and what it would have built.
        assert!(message.contains("approval predicate `"), "{message}");
        assert!(message.contains("bytes"), "{message}");
    }
    assert!(
        errors[0].contains(&format!("`{doubling}`")),
        "{}",
        errors[0]
    );
    println!(
        "the error: {}",
        errors[0].replace(&doubling, "<the predicate>")
    );
    // 64 copies of 1.9 MB are 122 MB, nine calls at once over a gigabyte; a few
    // copies of the argument per call is all the gate may cost.
    assert!(grown_mib < 64, "peak RSS grew by {grown_mib} MiB");

    // Over small arguments the same predicates run, and open the gate as they say.
    let small = json!({"s": "ab"});
    for p in &predicates {
        let gate = Approval::Cel(CelPredicate::compile(p).unwrap());
        let run = RunContext::ephemeral();
        assert!(gate.decide(&small, &run, "c").await.unwrap(), "{p}");
    }
    let gate = Approval::Cel(CelPredicate::compile(&doubling).unwrap());
    let empty: Value = json!({"s": ""});
    assert!(
        !gate
            .decide(&empty, &RunContext::ephemeral(), "c")
            .await
            .unwrap()
    );
}
