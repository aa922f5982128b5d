//! The durability contract, on both journal backends: replay, keyed restarts, approvals,
//! human answers, parallel parking, result caps, budgets, journaled crumbs, and the
//! hooks an approved call runs on resume.
//!
//! PostgreSQL tests use `TOOLSHED_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), each in a fresh schema.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use toolshed_core::{
    Approval, ErrorCode, Idempotency, Pipeline, RetryPolicy, Tool, ToolCall, ToolSet, human_tool,
};
use toolshed_journal::{Budgets, CallStatus, Gate, Journal, RunFilter, RunStatus};
use toolshed_runtime::{CallStep, NewRunBuilder, Runtime, RuntimeConfig, RuntimeError};

/// A journal on one backend, with what keeps it alive.
struct Db {
    journal: Arc<dyn Journal>,
    _dir: Option<tempfile::TempDir>,
    sqlite_path: Option<std::path::PathBuf>,
}

fn postgres_url() -> String {
    std::env::var("TOOLSHED_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Run a test on a fresh PostgreSQL schema and drop the schema afterwards, even when
/// the test fails.
async fn on_postgres<F, Fut>(test: F)
where
    F: FnOnce(Db) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let schema = format!("rt_{}", uuid_like());
    let db = postgres(&schema).await;
    let outcome = tokio::spawn(test(db)).await;
    if let Ok((client, conn)) =
        tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls).await
    {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn sqlite() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let journal = toolshed_journal::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    Db {
        journal,
        _dir: Some(dir),
        sqlite_path: Some(path),
    }
}

async fn postgres(schema: &str) -> Db {
    let url = postgres_url();
    let journal = toolshed_journal::open_in_schema(&url, schema)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is needed for this test ({e}); start it with \
                 `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` or set \
                 TOOLSHED_TEST_POSTGRES_URL"
            )
        });
    Db {
        journal,
        _dir: None,
        sqlite_path: None,
    }
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static N: AtomicU32 = AtomicU32::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{:x}_{}_{}",
        t,
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Tools whose executions are counted.
#[derive(Clone, Default)]
struct Counters {
    echo: Arc<AtomicU32>,
    pay: Arc<AtomicU32>,
    keyed: Arc<AtomicU32>,
}

fn tools(c: &Counters) -> Vec<Tool> {
    let echo_n = c.echo.clone();
    let pay_n = c.pay.clone();
    let keyed_n = c.keyed.clone();
    vec![
        Tool::builder("echo")
            .description("Echo.")
            .input_schema(json!({"type": "object", "properties": {"v": {}}}))
            .handler(move |args, _| {
                echo_n.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, String>(args["v"].clone()) }
            })
            .build()
            .unwrap(),
        Tool::builder("pay")
            .description("Pay an amount; needs approval above 100.")
            .input_schema(json!({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}))
            .effects(toolshed_core::Effects::External)
            .idempotency(Idempotency::Keyed)
            .approval(Approval::when(|a| a["amount"].as_f64().unwrap_or(0.0) > 100.0))
            .handler(move |args, ctx| {
                pay_n.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, String>(json!({"paid": args["amount"], "key": ctx.idempotency_key()})) }
            })
            .build()
            .unwrap(),
        Tool::builder("keyed")
            .description("A keyed call that reports its key and attempt.")
            .idempotency(Idempotency::Keyed)
            .max_attempts(2)
            .retry(RetryPolicy::retries(3))
            .handler(move |_args, ctx| {
                keyed_n.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, String>(json!({"key": ctx.idempotency_key()})) }
            })
            .build()
            .unwrap(),
        Tool::builder("big")
            .description("Returns a large string.")
            .input_schema(json!({"type": "object", "properties": {"bytes": {"type": "integer"}}}))
            .retry(RetryPolicy::retries(3))
            .handler(|args, _| async move { Ok::<_, String>("x".repeat(args["bytes"].as_u64().unwrap_or(0) as usize)) })
            .build()
            .unwrap(),
        human_tool("ask_publish", json!({"type": "object", "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}}, "required": ["approved"]})).unwrap(),
    ]
}

fn runtime(db: &Db, c: &Counters) -> Runtime {
    let pipeline = Pipeline::builder(ToolSet::from_tools(tools(c)).unwrap()).build();
    Runtime::new(pipeline, db.journal.clone(), RuntimeConfig::default()).unwrap()
}

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall::new(name, args)
}

fn done(step: CallStep) -> toolshed_core::CallOutcome {
    match step {
        CallStep::Done(o) => o,
        CallStep::Parked(g) => panic!("expected a result, the call parked: {g:?}"),
    }
}

fn parked(step: CallStep) -> toolshed_runtime::PendingGate {
    match step {
        CallStep::Parked(g) => g,
        CallStep::Done(o) => panic!("expected the call to park, got {o:?}"),
    }
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite_backend { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(super::sqlite().await).await } )* }
        mod postgres_backend { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::on_postgres(super::$name).await } )* }
    };
}

on_both!(
    replay_executes_each_handler_once,
    non_determinism_is_a_runtime_error,
    approvals_park_and_resume,
    denials_become_error_results,
    gate_mistakes_are_clear_errors,
    human_tools_wait_for_a_valid_answer,
    parallel_calls_park_only_the_gated_ones,
    keyed_restarts_reuse_the_key_and_fail_closed,
    oversized_results_are_recorded_as_errors,
    max_attempts_per_task_fails_a_run_that_keeps_crashing,
    crumbs_are_journaled_in_order,
    finished_runs_cannot_be_resumed,
    one_call_runs_record_everything_at_once_or_take_the_ordinary_path,
    approved_calls_on_resume_run_exactly_the_hooks_of_a_live_call,
    a_resumed_run_reports_the_recorded_diagnostics,
    an_approval_runs_only_against_the_revision_it_was_given_for,
    a_crashed_run_holding_a_stale_approval_parks_instead_of_running,
    four_eyes_refuses_approving_ones_own_call,
    every_decision_is_in_the_audit_trail,
);

async fn replay_executes_each_handler_once(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    for i in 0..3 {
        assert_eq!(
            done(run.call(call("echo", json!({"v": i}))).await.unwrap())
                .result
                .unwrap(),
            json!(i)
        );
    }
    drop(run); // stopped without finishing, as a crash would

    let rt = runtime(&db, &c); // a new process would build a new runtime
    let run = rt.resume(&id).await.unwrap();
    for i in 0..5 {
        assert_eq!(
            done(run.call(call("echo", json!({"v": i}))).await.unwrap())
                .result
                .unwrap(),
            json!(i)
        );
    }
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Completed);
    assert_eq!(c.echo.load(Ordering::SeqCst), 5, "3 replayed, 2 new");
    let calls = db.journal.calls_of_run(&id).await.unwrap();
    assert_eq!(calls.len(), 5);
    assert!(calls.iter().all(|c| c.status == CallStatus::Completed));
}

/// A tool whose handler reports what a subprocess would (stdout, stderr, exit code),
/// counting its executions.
fn printing_tool(runs: Arc<AtomicU32>) -> Tool {
    struct Printing(Arc<AtomicU32>);
    impl toolshed_core::Handler for Printing {
        fn call(
            &self,
            args: Value,
            _ctx: toolshed_core::ToolContext,
        ) -> toolshed_core::HandlerFuture {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move {
                toolshed_core::Reply::new(Ok(toolshed_core::ToolOutput::Value(args["v"].clone())))
                    .with_diagnostics(toolshed_core::Diagnostics {
                        stdout: format!("{{\"result\": {}}}\n", args["v"]),
                        stderr: format!("execution {n}\n"),
                        exit_code: Some(0),
                        ..toolshed_core::Diagnostics::default()
                    })
            })
        }
    }
    Tool::builder("print")
        .description("Prints while it works.")
        .input_schema(json!({"type": "object", "properties": {"v": {}}}))
        .raw_handler(Arc::new(Printing(runs)))
        .build()
        .unwrap()
}

async fn a_resumed_run_reports_the_recorded_diagnostics(db: Db) {
    let runs = Arc::new(AtomicU32::new(0));
    let c = Counters::default();
    let make = || {
        let mut set = tools(&c);
        set.push(printing_tool(Arc::clone(&runs)));
        let pipeline = Pipeline::builder(ToolSet::from_tools(set).unwrap()).build();
        Runtime::new(pipeline, db.journal.clone(), RuntimeConfig::default()).unwrap()
    };
    let rt = make();
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    let live = done(run.call(call("print", json!({"v": 7}))).await.unwrap());
    assert_eq!(live.diagnostics.stdout, "{\"result\": 7}\n");
    parked(run.call(call("pay", json!({"amount": 500}))).await.unwrap());
    run.finish().await.unwrap();

    // A new process resumes the run: the first call is replayed, not executed again,
    // and reports what it printed when it ran.
    let rt = make();
    let run = rt.resume(&id).await.unwrap();
    let replayed = done(run.call(call("print", json!({"v": 7}))).await.unwrap());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(replayed.result.unwrap(), json!(7));
    assert_eq!(replayed.diagnostics, live.diagnostics);
    assert_eq!(replayed.diagnostics.stderr, "execution 1\n");
    assert_eq!(replayed.diagnostics.exit_code, Some(0));
}

async fn non_determinism_is_a_runtime_error(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    done(run.call(call("echo", json!({"v": 1}))).await.unwrap());
    let id = run.id().to_owned();
    drop(run);
    let run = rt.resume(&id).await.unwrap();
    let err = run.call(call("echo", json!({"v": 2}))).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::NonDeterminism { ordinal: 0, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("must issue the same calls in the same order"),
        "{err}"
    );
    assert_eq!(err.code(), "NON_DETERMINISM");
}

async fn approvals_park_and_resume(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    assert!(
        done(run.call(call("pay", json!({"amount": 5}))).await.unwrap())
            .result
            .is_ok()
    );
    let gate = parked(run.call(call("pay", json!({"amount": 500}))).await.unwrap());
    let rec = run.finish().await.unwrap();
    assert_eq!(rec.status, RunStatus::Parked);
    assert_eq!(c.pay.load(Ordering::SeqCst), 1);

    let pending = db.journal.pending_gates(&Default::default()).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call_id, gate.call_id);

    // Resuming before a decision: still parked, nothing runs.
    let run = rt.resume(&id).await.unwrap();
    done(run.call(call("pay", json!({"amount": 5}))).await.unwrap());
    parked(run.call(call("pay", json!({"amount": 500}))).await.unwrap());
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Parked);
    assert_eq!(c.pay.load(Ordering::SeqCst), 1);

    let decided =
        toolshed_runtime::approve(&*db.journal, &gate.call_id, "alice", Some("ok".into()))
            .await
            .unwrap();
    assert_eq!(decided.decision.as_ref().unwrap().by, "alice");

    let run = rt.resume(&id).await.unwrap();
    done(run.call(call("pay", json!({"amount": 5}))).await.unwrap());
    let out = done(run.call(call("pay", json!({"amount": 500}))).await.unwrap());
    let result = out.result.unwrap();
    assert_eq!(result["paid"], json!(500));
    assert_eq!(result["key"], json!(format!("{id}:1")));
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Completed);
    assert_eq!(c.pay.load(Ordering::SeqCst), 2);
}

async fn denials_become_error_results(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    let gate = parked(run.call(call("pay", json!({"amount": 900}))).await.unwrap());
    run.finish().await.unwrap();
    toolshed_runtime::deny(
        &*db.journal,
        &gate.call_id,
        "bob",
        Some("too expensive".into()),
    )
    .await
    .unwrap();
    let run = rt.resume(&id).await.unwrap();
    let out = done(run.call(call("pay", json!({"amount": 900}))).await.unwrap());
    let err = out.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalDenied);
    assert!(
        err.message.contains("bob") && err.message.contains("too expensive"),
        "{}",
        err.message
    );
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Completed);
    assert_eq!(c.pay.load(Ordering::SeqCst), 0);
}

async fn gate_mistakes_are_clear_errors(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let gate = parked(run.call(call("pay", json!({"amount": 900}))).await.unwrap());
    let plain = done(run.call(call("echo", json!({"v": 1}))).await.unwrap());
    assert_eq!(plain.result, Ok(json!(1)), "a call that needs no gate runs");
    run.finish().await.unwrap();
    toolshed_runtime::approve(&*db.journal, &gate.call_id, "a", None)
        .await
        .unwrap();
    let twice = toolshed_runtime::approve(&*db.journal, &gate.call_id, "b", None)
        .await
        .unwrap_err();
    assert_eq!(twice.code(), "CONFLICT", "{twice}");
    assert!(twice.to_string().contains("already"), "{twice}");
    let unknown = toolshed_runtime::approve(&*db.journal, "no-such-call", "a", None)
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), "NOT_FOUND", "{unknown}");
    let not_human =
        toolshed_runtime::answer(&*db.journal, &gate.call_id, json!({"approved": true}), "a")
            .await
            .unwrap_err();
    assert_eq!(not_human.code(), "CONFLICT", "{not_human}");
}

async fn human_tools_wait_for_a_valid_answer(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    let gate = parked(
        run.call(call(
            "ask_publish",
            json!({"url": "https://example.com/post"}),
        ))
        .await
        .unwrap(),
    );
    run.finish().await.unwrap();
    let bad = toolshed_runtime::answer(
        &*db.journal,
        &gate.call_id,
        json!({"approved": "yes"}),
        "carol",
    )
    .await
    .unwrap_err();
    assert_eq!(bad.code(), "INVALID_ANSWER");
    assert!(bad.to_string().contains("/approved"), "{bad}");
    assert_eq!(
        db.journal.get_run(&id).await.unwrap().status,
        RunStatus::Parked
    );
    toolshed_runtime::answer(
        &*db.journal,
        &gate.call_id,
        json!({"approved": true, "note": "ship it"}),
        "carol",
    )
    .await
    .unwrap();
    let again = toolshed_runtime::answer(
        &*db.journal,
        &gate.call_id,
        json!({"approved": false}),
        "dave",
    )
    .await
    .unwrap_err();
    assert_eq!(again.code(), "CONFLICT");
    let run = rt.resume(&id).await.unwrap();
    let out = done(
        run.call(call(
            "ask_publish",
            json!({"url": "https://example.com/post"}),
        ))
        .await
        .unwrap(),
    );
    assert_eq!(
        out.result.unwrap(),
        json!({"approved": true, "note": "ship it"})
    );
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Completed);
}

async fn parallel_calls_park_only_the_gated_ones(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    let turn = || {
        vec![
            call("echo", json!({"v": "a"})),
            call("pay", json!({"amount": 1000})),
            call("echo", json!({"v": "b"})),
        ]
    };
    let steps = run.call_many(turn()).await.unwrap();
    assert!(matches!(steps[0], CallStep::Done(_)));
    let gate = match &steps[1] {
        CallStep::Parked(g) => g.clone(),
        other => panic!("{other:?}"),
    };
    assert!(matches!(steps[2], CallStep::Done(_)));
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Parked);
    // The decision is recorded before the run resumes, and used.
    toolshed_runtime::approve(&*db.journal, &gate.call_id, "erin", None)
        .await
        .unwrap();
    let run = rt.resume(&id).await.unwrap();
    let steps = run.call_many(turn()).await.unwrap();
    let results: Vec<Value> = steps.into_iter().map(|s| done(s).result.unwrap()).collect();
    assert_eq!(results[0], json!("a"));
    assert_eq!(results[1]["paid"], json!(1000));
    assert_eq!(results[2], json!("b"));
    assert_eq!(
        c.echo.load(Ordering::SeqCst),
        2,
        "the ungated calls ran once"
    );
    assert_eq!(c.pay.load(Ordering::SeqCst), 1);
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Completed);
}

async fn keyed_restarts_reuse_the_key_and_fail_closed(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    drop(run);
    // A crash between Started and Completed: the journal has a start and no result.
    let hash = toolshed_runtime::args_hash(&json!({}));
    let opened = db
        .journal
        .open_and_start(toolshed_journal::NewCall {
            call_id: "crashed-call".into(),
            run_id: id.clone(),
            ordinal: 0,
            tool_call_id: "c0".into(),
            tool: "keyed".into(),
            args_hash: hash,
            args: json!({}),
        })
        .await
        .unwrap();
    assert_eq!(opened.call.attempts, 1);
    let run = rt.resume(&id).await.unwrap();
    let out = done(run.call(call("keyed", json!({}))).await.unwrap());
    assert_eq!(
        out.result.unwrap()["key"],
        json!(format!("{id}:0")),
        "same key on re-run"
    );
    assert_eq!(
        db.journal.get_call("crashed-call").await.unwrap().attempts,
        2
    );

    // Two starts without completion with max_attempts = 2: the third fails closed.
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id2 = run.id().to_owned();
    drop(run);
    let new = |call_id: &str| toolshed_journal::NewCall {
        call_id: call_id.into(),
        run_id: id2.clone(),
        ordinal: 0,
        tool_call_id: "c0".into(),
        tool: "keyed".into(),
        args_hash: toolshed_runtime::args_hash(&json!({})),
        args: json!({}),
    };
    db.journal.open_and_start(new("twice")).await.unwrap();
    db.journal.record_started("twice").await.unwrap();
    let before = c.keyed.load(Ordering::SeqCst);
    let run = rt.resume(&id2).await.unwrap();
    let out = done(run.call(call("keyed", json!({}))).await.unwrap());
    let err = out.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::AttemptsExhausted);
    assert!(err.message.contains("max_attempts = 2"), "{}", err.message);
    assert_eq!(c.keyed.load(Ordering::SeqCst), before, "never ran again");
    assert_eq!(
        db.journal.get_call("twice").await.unwrap().status,
        CallStatus::Failed
    );
}

async fn oversized_results_are_recorded_as_errors(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let out = done(
        run.call(call("big", json!({"bytes": 2 * 1024 * 1024})))
            .await
            .unwrap(),
    );
    let err = out.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::ResultTooLarge);
    assert!(!err.is_retryable());
    let small = done(run.call(call("big", json!({"bytes": 10}))).await.unwrap());
    assert!(small.result.is_ok());
    run.finish().await.unwrap();
    let calls = db.journal.calls_of_run(run.id()).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Failed);
    // The crumb of the oversized result was not journaled whole either.
    let crumbs = db.journal.crumbs_of_run(run.id()).await.unwrap();
    let total: usize = crumbs.iter().map(|c| c.crumb.to_string().len()).sum();
    assert!(total < 1024 * 1024, "journaled crumbs are {total} bytes");
}

async fn max_attempts_per_task_fails_a_run_that_keeps_crashing(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let budgets = Budgets {
        max_attempts_per_task: Some(2),
        max_wall_clock_min: None,
    };
    let run = rt
        .start(NewRunBuilder::new("agent").budgets(budgets).build())
        .await
        .unwrap();
    let id = run.id().to_owned();
    // A parked run resumed does not spend the budget.
    parked(run.call(call("pay", json!({"amount": 500}))).await.unwrap());
    run.finish().await.unwrap();
    let run = rt.resume(&id).await.unwrap();
    drop(run); // crashed while running
    let run = rt.resume(&id).await.unwrap(); // second start from `running`
    drop(run);
    let err = rt.resume(&id).await.unwrap_err();
    assert_eq!(err.code(), "BUDGET_EXHAUSTED");
    assert!(
        err.to_string().contains("max_attempts_per_task is 2"),
        "{err}"
    );
    let rec = db.journal.get_run(&id).await.unwrap();
    assert_eq!(rec.status, RunStatus::Failed);
    assert!(rec.error.unwrap().contains("budget exhausted"));
    let failed = db
        .journal
        .list_runs(&RunFilter {
            status: Some(RunStatus::Failed),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(failed.iter().any(|r| r.id == id));
}

async fn crumbs_are_journaled_in_order(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    done(run.call(call("echo", json!({"v": 1}))).await.unwrap());
    parked(run.call(call("pay", json!({"amount": 500}))).await.unwrap());
    run.finish().await.unwrap();
    let kinds: Vec<String> = db
        .journal
        .crumbs_of_run(&id)
        .await
        .unwrap()
        .iter()
        .map(|c| c.crumb["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        vec![
            "run:resumed",
            "tool:call",
            "tool:result",
            "tool:call",
            "tool:approval:requested",
            "run:parked"
        ]
    );
    let run = rt.resume(&id).await.unwrap();
    done(run.call(call("echo", json!({"v": 1}))).await.unwrap());
    run.finish().await.ok();
    let crumbs = db.journal.crumbs_of_run(&id).await.unwrap();
    let seqs: Vec<u64> = crumbs.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (0..crumbs.len() as u64).collect::<Vec<_>>());
    assert!(crumbs.iter().any(|c| c.crumb["type"] == "tool:replayed"));
}

async fn finished_runs_cannot_be_resumed(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    run.finish().await.unwrap();
    let err = rt.resume(&id).await.unwrap_err();
    assert_eq!(err.code(), "RUN_FINISHED", "{err}");
    let err = rt.resume("no-such-run").await.unwrap_err();
    assert_eq!(err.code(), "NOT_FOUND", "{err}");
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    drop(run);
    rt.cancel(&id, Some("not needed".into())).await.unwrap();
    assert_eq!(rt.resume(&id).await.unwrap_err().code(), "RUN_FINISHED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_budget_fails_the_run() {
    let db = sqlite().await;
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let budgets = Budgets {
        max_attempts_per_task: None,
        max_wall_clock_min: Some(1),
    };
    let run = rt
        .start(NewRunBuilder::new("agent").budgets(budgets).build())
        .await
        .unwrap();
    let id = run.id().to_owned();
    parked(run.call(call("pay", json!({"amount": 500}))).await.unwrap());
    run.finish().await.unwrap();
    // Parked time counts: move the run's creation two minutes into the past, as if the
    // approval had taken that long.
    let conn = rusqlite::Connection::open(db.sqlite_path.as_ref().unwrap()).unwrap();
    conn.execute(
        "UPDATE runs SET created_at_ms = created_at_ms - 120000 WHERE id = ?1",
        [&id],
    )
    .unwrap();
    drop(conn);
    let err = rt.resume(&id).await.unwrap_err();
    assert_eq!(err.code(), "BUDGET_EXHAUSTED");
    assert!(err.to_string().contains("max_wall_clock_min is 1"), "{err}");
    assert_eq!(
        db.journal.get_run(&id).await.unwrap().status,
        RunStatus::Failed
    );
}

async fn one_call_runs_record_everything_at_once_or_take_the_ordinary_path(db: Db) {
    let c = Counters::default();
    let rt = runtime(&db, &c);
    let principal = toolshed_core::Principal {
        iss: "toolshed".into(),
        sub: "dee".into(),
        tenant: Some("acme".into()),
    };
    // idempotency none, no gate: executed first, recorded in one go.
    let new = NewRunBuilder::new("registry")
        .principal(principal.clone())
        .build();
    let id = new.id.clone();
    let (run, step) = rt
        .run_once(new, call("echo", json!({"v": 7})))
        .await
        .unwrap();
    assert_eq!(done(step).result.unwrap(), json!(7));
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.tenant.as_deref(), Some("acme"));
    assert_eq!(c.echo.load(Ordering::SeqCst), 1);
    let calls = db.journal.calls_of_run(&id).await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[0].result, Some(json!(7)));
    let kinds: Vec<String> = db
        .journal
        .crumbs_of_run(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.crumb["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kinds, ["tool:call", "tool:result", "run:completed"]);
    // Bad args: an error result, recorded the same way.
    let new = NewRunBuilder::new("registry").build();
    let id = new.id.clone();
    let (_, step) = rt
        .run_once(new, call("big", json!({"bytes": "many"})))
        .await
        .unwrap();
    assert_eq!(done(step).result.unwrap_err().code, ErrorCode::InvalidArgs);
    assert_eq!(
        db.journal.calls_of_run(&id).await.unwrap()[0].status,
        CallStatus::Failed
    );
    // Results over the cap are refused here too.
    let (_, step) = rt
        .run_once(
            NewRunBuilder::new("registry").build(),
            call("big", json!({"bytes": 2_000_000})),
        )
        .await
        .unwrap();
    assert_eq!(
        done(step).result.unwrap_err().code,
        ErrorCode::ResultTooLarge
    );
    // A gated call parks through the ordinary path, with its run parked.
    let (run, step) = rt
        .run_once(
            NewRunBuilder::new("registry").build(),
            call("pay", json!({"amount": 500})),
        )
        .await
        .unwrap();
    parked(step);
    assert_eq!(run.status, RunStatus::Parked);
    assert_eq!(c.pay.load(Ordering::SeqCst), 0);
    // A keyed call is durably started first (the ordinary path).
    let new = NewRunBuilder::new("registry").build();
    let id = new.id.clone();
    let (run, step) = rt.run_once(new, call("keyed", json!({}))).await.unwrap();
    assert!(done(step).result.is_ok());
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(db.journal.calls_of_run(&id).await.unwrap()[0].attempts, 1);
    // Crumbs of ordinary runs still reach the journal (nothing stays held).
    let kinds = db.journal.crumbs_of_run(&id).await.unwrap();
    assert!(!kinds.is_empty());
}

/// One hook invocation as a hook saw it: level, method, attempt and the value it was
/// shown (the args for `before_run`, the result for `after_run`, the error code for
/// `on_error`).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    level: &'static str,
    method: &'static str,
    attempt: u32,
    value: Value,
}

type Record = Arc<std::sync::Mutex<Vec<Seen>>>;

/// A hook at `level` that records every invocation and changes nothing.
fn recording_hook(level: &'static str, record: &Record) -> Arc<dyn toolshed_core::Hook> {
    use toolshed_core::{AfterRun, BeforeRun, HookFns, OnError};
    let push = move |record: &Record, method, attempt, value| {
        record.lock().unwrap().push(Seen {
            level,
            method,
            attempt,
            value,
        });
    };
    let (b, a, e) = (record.clone(), record.clone(), record.clone());
    HookFns::new(level)
        .before_run(move |call, args| {
            push(&b, "before_run", call.attempt, args.clone());
            BeforeRun::Continue
        })
        .after_run(move |call, result| {
            push(&a, "after_run", call.attempt, result.clone());
            AfterRun::Keep
        })
        .on_error(move |call, error| {
            push(&e, "on_error", call.attempt, json!(error.code));
            OnError::Propagate
        })
        .into_hook()
}

/// A plugin whose only contribution is a hook.
struct HookPlugin(Arc<dyn toolshed_core::Hook>);

impl toolshed_core::Plugin for HookPlugin {
    fn name(&self) -> &str {
        "recorder"
    }
    fn hooks(&self) -> Vec<Arc<dyn toolshed_core::Hook>> {
        vec![self.0.clone()]
    }
}

/// A runtime (as one process would build it) whose `transfer` tool needs approval above
/// 100, fails its first attempt and succeeds on the retry, with a recording hook at the
/// tool, plugin and global levels.
fn hooked_runtime(db: &Db, record: &Record) -> Runtime {
    let transfer = Tool::builder("transfer")
        .description("Transfer an amount; needs approval above 100; the first attempt fails.")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "currency": {"type": "string", "default": "EUR"}
            },
            "required": ["amount"]
        }))
        .effects(toolshed_core::Effects::External)
        .idempotency(Idempotency::Keyed)
        .approval(Approval::when(|a| {
            a["amount"].as_f64().unwrap_or(0.0) > 100.0
        }))
        .retry(RetryPolicy {
            attempts: 1,
            backoff_ms: 0,
            multiplier: 1.0,
            max_backoff_ms: 0,
        })
        .hook(recording_hook("tool", record))
        .handler(|args, ctx| async move {
            if ctx.attempt() == 1 {
                return Err("the bank did not answer".to_owned());
            }
            Ok(json!({"sent": args["amount"], "currency": args["currency"]}))
        })
        .build()
        .unwrap();
    let plugin: Arc<dyn toolshed_core::Plugin> =
        Arc::new(HookPlugin(recording_hook("plugin", record)));
    let pipeline = Pipeline::builder(ToolSet::from_tools([transfer]).unwrap())
        .plugins(&[plugin])
        .global_hook(recording_hook("global", record))
        .build();
    Runtime::new(pipeline, db.journal.clone(), RuntimeConfig::default()).unwrap()
}

/// What the hooks of a `transfer` of `amount` see when it runs: every level in chain
/// order before the handler, every level's `on_error` for the failed first attempt,
/// every level's `after_run` for the second.
fn hooks_of_a_transfer(amount: u32) -> Vec<Seen> {
    let args = json!({"amount": amount, "currency": "EUR"});
    let result = json!({"sent": amount, "currency": "EUR"});
    let mut expected = Vec::new();
    for (method, attempt, value) in [
        ("before_run", 1, args),
        ("on_error", 1, json!("HANDLER_ERROR")),
        ("after_run", 2, result),
    ] {
        for level in ["tool", "plugin", "global"] {
            expected.push(Seen {
                level,
                method,
                attempt,
                value: value.clone(),
            });
        }
    }
    expected
}

async fn approved_calls_on_resume_run_exactly_the_hooks_of_a_live_call(db: Db) {
    // First drive: a live call runs its hooks; the gated one parks and runs none.
    let first: Record = Arc::default();
    let rt = hooked_runtime(&db, &first);
    let run = rt.start(NewRunBuilder::new("agent").build()).await.unwrap();
    let id = run.id().to_owned();
    let live = done(
        run.call(call("transfer", json!({"amount": 50})))
            .await
            .unwrap(),
    );
    assert_eq!(live.attempts, 2, "{live:?}");
    let live_hooks = first.lock().unwrap().clone();
    assert_eq!(live_hooks, hooks_of_a_transfer(50));
    let gate = parked(
        run.call(call("transfer", json!({"amount": 500})))
            .await
            .unwrap(),
    );
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Parked);
    assert_eq!(
        first.lock().unwrap().len(),
        live_hooks.len(),
        "a call that parks runs no hook"
    );
    toolshed_runtime::approve(&*db.journal, &gate.call_id, "alice", None)
        .await
        .unwrap();

    // Resumed in a new runtime (as another process would): the replayed call runs no
    // hook, the approved call runs exactly the hooks the live call ran.
    let resumed: Record = Arc::default();
    let rt = hooked_runtime(&db, &resumed);
    let run = rt.resume(&id).await.unwrap();
    let replayed = done(
        run.call(call("transfer", json!({"amount": 50})))
            .await
            .unwrap(),
    );
    assert_eq!(replayed.result, live.result);
    assert!(
        resumed.lock().unwrap().is_empty(),
        "a replayed call runs no hook: {:?}",
        resumed.lock().unwrap()
    );
    let approved = done(
        run.call(call("transfer", json!({"amount": 500})))
            .await
            .unwrap(),
    );
    assert_eq!(
        approved.result.unwrap(),
        json!({"sent": 500, "currency": "EUR"})
    );
    assert_eq!(approved.attempts, live.attempts);
    let resumed_hooks = resumed.lock().unwrap().clone();
    assert_eq!(resumed_hooks, hooks_of_a_transfer(500));
    // The same hooks, in the same order, with the same attempts, as the live call.
    let shape = |seen: &[Seen]| -> Vec<(&'static str, &'static str, u32)> {
        seen.iter()
            .map(|s| (s.level, s.method, s.attempt))
            .collect()
    };
    assert_eq!(shape(&resumed_hooks), shape(&live_hooks));
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Completed);
}

// ---- approvals bound to revisions, four-eyes, the audit trail ----

/// A `refund` tool at a version (its description changes with it, so its revision
/// does), counting its executions.
fn refund_tool(version: u32, four_eyes: bool, runs: &Arc<AtomicU32>) -> Tool {
    let runs = runs.clone();
    Tool::builder("refund")
        .description(format!("Refund an order (v{version})."))
        .input_schema(json!({"type": "object", "properties": {"order": {"type": "string"}}}))
        .effects(toolshed_core::Effects::External)
        .idempotency(Idempotency::Keyed)
        .approval(Approval::Always)
        .four_eyes(four_eyes)
        .handler(move |args, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(json!({"refunded": args["order"]})) }
        })
        .build()
        .unwrap()
}

fn refund_runtime(db: &Db, version: u32, four_eyes: bool, runs: &Arc<AtomicU32>) -> Runtime {
    let set = ToolSet::from_tools([refund_tool(version, four_eyes, runs)]).unwrap();
    Runtime::new(
        Pipeline::builder(set).build(),
        db.journal.clone(),
        RuntimeConfig::default(),
    )
    .unwrap()
}

fn revision_of(rt: &Runtime) -> String {
    toolshed_runtime::tool_revision(rt.pipeline().toolset().get("refund").unwrap().spec())
}

fn user(sub: &str) -> toolshed_core::Principal {
    toolshed_core::Principal {
        iss: "toolshed".into(),
        sub: sub.into(),
        tenant: Some("acme".into()),
    }
}

/// A run of `alice` (or of nobody) whose one `refund` call parks; its id and call id.
async fn parked_refund(rt: &Runtime, by: Option<&str>) -> (String, String) {
    let mut new = NewRunBuilder::new("agent");
    if let Some(by) = by {
        new = new.principal(user(by));
    }
    let run = rt.start(new.build()).await.unwrap();
    let gate = parked(
        run.call(call("refund", json!({"order": "A-1"})))
            .await
            .unwrap(),
    );
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Parked);
    (run.id().to_owned(), gate.call_id)
}

async fn an_approval_runs_only_against_the_revision_it_was_given_for(db: Db) {
    let runs = Arc::new(AtomicU32::new(0));
    let v1 = refund_runtime(&db, 1, false, &runs);
    let v1_rev = revision_of(&v1);
    let (id, call_id) = parked_refund(&v1, Some("alice")).await;
    let gated = db.journal.get_call(&call_id).await.unwrap();
    let Some(Gate::Approval {
        revision,
        requested_by,
        requested_at_ms,
        ..
    }) = &gated.gate
    else {
        panic!("not an approval gate: {:?}", gated.gate)
    };
    assert_eq!(revision.as_deref(), Some(v1_rev.as_str()));
    assert_eq!(requested_by.as_deref(), Some("alice"));
    assert!(requested_at_ms.is_some());
    toolshed_runtime::approve(&*db.journal, &call_id, "bob", Some("refund ok".into()))
        .await
        .unwrap();

    // The tool changes before the resume: refused, nothing runs, the run stays parked.
    let v2 = refund_runtime(&db, 2, false, &runs);
    let v2_rev = revision_of(&v2);
    assert_ne!(v1_rev, v2_rev);
    let err = v2.resume(&id).await.unwrap_err();
    assert_eq!(err.code(), "REVISION_CHANGED");
    let RuntimeError::RevisionChanged { run_id, changes } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(run_id, &id);
    assert_eq!(
        changes,
        &vec![toolshed_runtime::RevisionChange {
            call_id: call_id.clone(),
            tool: "refund".into(),
            approved_revision: v1_rev.clone(),
            current_revision: v2_rev.clone(),
            approved_by: "bob".into(),
        }]
    );
    let message = err.to_string();
    assert!(
        message.contains(&v1_rev) && message.contains(&v2_rev) && message.contains("stays parked"),
        "{message}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        db.journal.get_run(&id).await.unwrap().status,
        RunStatus::Parked
    );

    // The call waits for a new decision on the current revision; the old one is kept.
    let asked = db.journal.get_call(&call_id).await.unwrap();
    assert_eq!(asked.status, CallStatus::AwaitingApproval);
    assert_eq!(asked.decision, None);
    let Some(Gate::Approval {
        revision,
        requested_by,
        superseded,
        ..
    }) = &asked.gate
    else {
        panic!("{:?}", asked.gate)
    };
    assert_eq!(revision.as_deref(), Some(v2_rev.as_str()));
    assert_eq!(requested_by.as_deref(), Some("alice"));
    assert_eq!(superseded.len(), 1);
    assert_eq!(superseded[0].by, "bob");
    assert_eq!(superseded[0].revision.as_deref(), Some(v1_rev.as_str()));
    let pending = db.journal.pending_gates(&Default::default()).await.unwrap();
    assert_eq!(
        pending.iter().map(|c| &c.call_id).collect::<Vec<_>>(),
        vec![&call_id]
    );

    // Resuming before the new decision parks as any undecided call does.
    let run = v2.resume(&id).await.unwrap();
    parked(
        run.call(call("refund", json!({"order": "A-1"})))
            .await
            .unwrap(),
    );
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Parked);
    // Approved again, for the revision it runs now: it runs, once.
    let again = toolshed_runtime::approve(&*db.journal, &call_id, "carol", None)
        .await
        .unwrap();
    assert_eq!(
        again.decision.as_ref().unwrap().revision.as_deref(),
        Some(v2_rev.as_str())
    );
    let run = v2.resume(&id).await.unwrap();
    let out = done(
        run.call(call("refund", json!({"order": "A-1"})))
            .await
            .unwrap(),
    );
    assert_eq!(out.result.unwrap(), json!({"refunded": "A-1"}));
    assert_eq!(run.finish().await.unwrap().status, RunStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn a_crashed_run_holding_a_stale_approval_parks_instead_of_running(db: Db) {
    let runs = Arc::new(AtomicU32::new(0));
    let v1 = refund_runtime(&db, 1, false, &runs);
    let (id, call_id) = parked_refund(&v1, Some("alice")).await;
    toolshed_runtime::approve(&*db.journal, &call_id, "bob", None)
        .await
        .unwrap();
    // A driver begins and dies before issuing the call: the run is left `running`.
    drop(v1.resume(&id).await.unwrap());
    assert_eq!(
        db.journal.get_run(&id).await.unwrap().status,
        RunStatus::Running
    );

    let v2 = refund_runtime(&db, 2, false, &runs);
    let err = v2.resume(&id).await.unwrap_err();
    assert_eq!(err.code(), "REVISION_CHANGED");
    assert_eq!(
        db.journal.get_run(&id).await.unwrap().status,
        RunStatus::Parked
    );
    assert_eq!(
        db.journal.get_call(&call_id).await.unwrap().status,
        CallStatus::AwaitingApproval
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

async fn four_eyes_refuses_approving_ones_own_call(db: Db) {
    let runs = Arc::new(AtomicU32::new(0));
    let guarded = refund_runtime(&db, 1, true, &runs);
    let (id, call_id) = parked_refund(&guarded, Some("alice")).await;
    let err = toolshed_runtime::approve(&*db.journal, &call_id, "alice", None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SELF_APPROVAL");
    let message = err.to_string();
    assert!(
        message.contains("`alice` asked for it") && message.contains("another user"),
        "{message}"
    );
    let still = db.journal.get_call(&call_id).await.unwrap();
    assert_eq!(still.status, CallStatus::AwaitingApproval);
    assert_eq!(still.decision, None);
    // Another user may approve it, and it runs.
    toolshed_runtime::approve(&*db.journal, &call_id, "bob", None)
        .await
        .unwrap();
    let run = guarded.resume(&id).await.unwrap();
    done(
        run.call(call("refund", json!({"order": "A-1"})))
            .await
            .unwrap(),
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Denying one's own call is allowed: it runs nothing.
    let (_, own) = parked_refund(&guarded, Some("alice")).await;
    let denied =
        toolshed_runtime::deny(&*db.journal, &own, "alice", Some("changed my mind".into()))
            .await
            .unwrap();
    assert_eq!(denied.status, CallStatus::Failed);

    // A run that records no requester cannot be told apart from its approver.
    let (_, anonymous) = parked_refund(&guarded, None).await;
    let err = toolshed_runtime::approve(&*db.journal, &anonymous, "bob", None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SELF_APPROVAL");
    assert!(err.to_string().contains("records no requester"), "{err}");

    // Server-wide: a tool without four-eyes, under a policy that asks for it.
    let plain = refund_runtime(&db, 1, false, &runs);
    let (_, call_id) = parked_refund(&plain, Some("alice")).await;
    let policy = toolshed_runtime::ApprovalPolicy { four_eyes: true };
    let err = toolshed_runtime::approve_under(&*db.journal, &call_id, "alice", None, policy)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SELF_APPROVAL");
    assert!(err.to_string().contains("--four-eyes"), "{err}");
    toolshed_runtime::approve_under(&*db.journal, &call_id, "bob", None, policy)
        .await
        .unwrap();
    // Without the policy the tool's own rule (none) applies.
    let (_, call_id) = parked_refund(&plain, Some("alice")).await;
    toolshed_runtime::approve(&*db.journal, &call_id, "alice", None)
        .await
        .unwrap();
}

async fn every_decision_is_in_the_audit_trail(db: Db) {
    let runs = Arc::new(AtomicU32::new(0));
    let rt = refund_runtime(&db, 1, false, &runs);
    let rev = revision_of(&rt);
    let (id, call_id) = parked_refund(&rt, Some("alice")).await;
    let before = toolshed_store_time_now();
    let rec = toolshed_runtime::approve(
        &*db.journal,
        &call_id,
        "bob",
        Some("checked the order".into()),
    )
    .await
    .unwrap();
    let d = rec.decision.unwrap();
    assert_eq!(
        (
            d.approved,
            d.by.as_str(),
            d.reason.as_deref(),
            d.revision.as_deref()
        ),
        (true, "bob", Some("checked the order"), Some(rev.as_str()))
    );
    assert!(d.at_ms >= before, "{} < {before}", d.at_ms);
    let crumbs = db.journal.crumbs_of_run(&id).await.unwrap();
    let decided: Vec<&Value> = crumbs
        .iter()
        .map(|c| &c.crumb)
        .filter(|c| c["type"] == "tool:approval:decided")
        .collect();
    assert_eq!(decided.len(), 1, "{crumbs:?}");
    let payload = &decided[0]["payload"];
    assert_eq!(payload["call_id"], json!(call_id));
    assert_eq!(payload["approved"], json!(true));
    assert_eq!(payload["by"], json!("bob"));
    assert_eq!(payload["reason"], json!("checked the order"));
    assert_eq!(payload["revision"], json!(rev));
    assert_eq!(payload["at_ms"], json!(d.at_ms));
    let requested: Vec<&Value> = crumbs
        .iter()
        .map(|c| &c.crumb)
        .filter(|c| c["type"] == "tool:approval:requested")
        .collect();
    assert_eq!(requested[0]["payload"]["gate"]["revision"], json!(rev));
    assert_eq!(
        requested[0]["payload"]["gate"]["requested_by"],
        json!("alice")
    );
}

fn toolshed_store_time_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
