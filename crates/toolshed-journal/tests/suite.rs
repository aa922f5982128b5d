//! The journal's behavioural suite: every test is written once against
//! `Arc<dyn Journal>` and runs on both backends, SQLite on a temporary file and
//! PostgreSQL on the local server (each test in a fresh schema, dropped at the end).
//! Backend-specific tests (opening foreign files, URLs, migrations) follow.
//!
//! PostgreSQL comes from `TOOLSHED_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); when it is not reachable the PostgreSQL
//! tests fail and say how to start it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolshed_core::{Diagnostics, ErrorCode, Principal, ToolError};
use toolshed_journal::{
    Answer, Budgets, CallResult, CallStatus, Decision, Gate, GateFilter, Journal, JournalError,
    NewCall, NewRun, PrunableStatus, PruneOptions, PruneRule, Pruned, RunFilter, RunRecord,
    RunStatus, SpaceMode, SqlJournal,
};

// ---- harness ----

use toolshed_store::Location;
use toolshed_store::testing::{
    Scratch as Store, on_postgres, on_sqlite, postgres_url, with_schema,
};

/// Opening a test's journal, as often as the test likes.
trait OpenJournal {
    fn open(&self) -> impl Future<Output = Arc<dyn Journal>> + Send;
}

impl OpenJournal for Store {
    async fn open(&self) -> Arc<dyn Journal> {
        Arc::new(
            SqlJournal::open(&self.location())
                .await
                .expect("open the journal"),
        )
    }
}

/// Crumbs as the journal takes them: each already serialized.
fn raw(values: Vec<Value>) -> Vec<Box<serde_json::value::RawValue>> {
    values
        .iter()
        .map(|v| serde_json::value::to_raw_value(v).unwrap())
        .collect()
}

/// The journal in the SQLite file at `path`.
async fn sqlite_at(path: &std::path::Path) -> Result<SqlJournal, JournalError> {
    SqlJournal::open(&Location::Sqlite {
        path: path.to_path_buf(),
    })
    .await
}

/// The journal in `schema` of the PostgreSQL server at `url`.
async fn postgres_in(url: &str, schema: &str) -> Result<SqlJournal, JournalError> {
    SqlJournal::open(&Location::parse(url)?.in_schema(schema)?).await
}

/// Declare each behavioural test once; it runs on both backends.
macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::on_sqlite(crate::$test).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::on_postgres(crate::$test).await;
                }
            )*
        }
    };
}

suite!(
    runs_round_trip,
    create_run_twice_is_a_conflict,
    unknown_ids_are_not_found,
    list_runs_newest_first_with_filters_and_limit,
    set_run_status_refuses_leaving_a_final_status,
    set_run_driver_replaces_it_on_unfinished_runs_only,
    begin_drive_counts_only_starts_from_running,
    open_call_is_idempotent_on_run_and_ordinal,
    call_id_used_at_another_key_is_a_conflict,
    record_started_only_from_open_started_or_approved,
    record_finished_only_on_non_final_calls,
    record_gate_only_on_open_calls,
    decide_approves_once,
    regate_asks_an_approved_call_again_and_nothing_else,
    deny_fails_the_call_with_approval_denied,
    answer_completes_a_human_tool_once,
    pending_gates_filter_by_run_and_tenant,
    crumbs_get_consecutive_seqs_from_zero,
    open_and_start_records_a_start_in_one_write,
    json_values_round_trip_exactly,
    concurrent_decides_exactly_one_wins,
    concurrent_decides_from_two_handles_exactly_one_wins,
    concurrent_keyed_calls_from_64_tasks_all_succeed,
    concurrent_crumb_appends_get_unique_consecutive_seqs,
    a_failing_operation_does_not_undo_its_batch,
    reads_never_wait_for_writes,
    gates_of_finished_runs_wait_for_nobody,
    diagnostics_are_kept_with_the_call,
    data_survives_reopening,
    record_run_stores_a_finished_run_at_once,
);

// ---- fixtures and assertions ----

fn new_run(id: &str) -> NewRun {
    NewRun {
        id: id.to_owned(),
        agent_id: "agent-a".to_owned(),
        session_id: format!("session-{id}"),
        principal: None,
        budgets: Budgets::default(),
        driver: json!({"kind": "direct", "tool": "echo", "args": {"text": id}}),
    }
}

fn tenant_run(id: &str, agent: &str, tenant: &str) -> NewRun {
    NewRun {
        agent_id: agent.to_owned(),
        principal: Some(Principal {
            iss: "https://issuer.example".to_owned(),
            sub: format!("user-of-{tenant}"),
            tenant: Some(tenant.to_owned()),
        }),
        ..new_run(id)
    }
}

fn new_call(run_id: &str, ordinal: u32) -> NewCall {
    NewCall {
        call_id: format!("{run_id}-call-{ordinal}"),
        run_id: run_id.to_owned(),
        ordinal,
        tool_call_id: format!("toolu_{ordinal}"),
        tool: "search".to_owned(),
        args_hash: format!("hash-{ordinal}"),
        args: json!({"query": "rust", "ordinal": ordinal}),
    }
}

fn ok(value: Value) -> CallResult {
    CallResult {
        result: Ok(value),
        duration_ms: 12.5,
        diagnostics: Default::default(),
    }
}

fn approval() -> Gate {
    Gate::approval("always")
}

/// An approval gate bound to a tool revision, with its policy and requester.
fn approval_at(revision: &str, superseded: Vec<Decision>) -> Gate {
    Gate::Approval {
        reason: "always".to_owned(),
        revision: Some(revision.to_owned()),
        four_eyes: true,
        requested_by: Some("alice".to_owned()),
        requested_at_ms: Some(1_700_000_000_000),
        superseded,
    }
}

fn answer_gate() -> Gate {
    Gate::Answer {
        schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
    }
}

fn decision(approved: bool, by: &str, reason: Option<&str>) -> Decision {
    Decision {
        approved,
        by: by.to_owned(),
        reason: reason.map(str::to_owned),
        at_ms: 1_700_000_000_000,
        revision: None,
    }
}

fn human_answer(value: Value, by: &str) -> Answer {
    Answer {
        value,
        by: by.to_owned(),
        at_ms: 1_700_000_000_000,
    }
}

#[track_caller]
fn conflict<T: std::fmt::Debug>(result: Result<T, JournalError>) -> String {
    match result {
        Err(e @ JournalError::Conflict(_)) => {
            assert_eq!(e.code().as_str(), "CONFLICT");
            e.to_string()
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[track_caller]
fn not_found<T: std::fmt::Debug>(result: Result<T, JournalError>, what: &str, id: &str) {
    match result {
        Err(JournalError::NotFound { what: w, id: i }) if w == what && i == id => {}
        other => panic!("expected {what} `{id}` not found, got {other:?}"),
    }
}

// ---- behaviour: runs ----

async fn runs_round_trip(store: Store) {
    let j = store.open().await;
    let run = j
        .create_run(tenant_run("r1", "agent-a", "acme"))
        .await
        .unwrap();
    assert_eq!(run.id, "r1");
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.resumes, 0);
    assert_eq!(run.tenant.as_deref(), Some("acme"));
    assert_eq!(run.error, None);
    assert_eq!(run.created_at_ms, run.updated_at_ms);
    assert_eq!(j.get_run("r1").await.unwrap(), run);

    let plain = j
        .create_run(NewRun {
            budgets: Budgets {
                max_attempts_per_task: Some(3),
                max_wall_clock_min: Some(60),
            },
            ..new_run("r2")
        })
        .await
        .unwrap();
    assert_eq!(plain.tenant, None);
    assert_eq!(j.get_run("r2").await.unwrap(), plain);
}

async fn create_run_twice_is_a_conflict(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let message = conflict(j.create_run(new_run("r1")).await);
    assert!(message.contains("run `r1` already exists"), "{message}");
}

async fn unknown_ids_are_not_found(store: Store) {
    let j = store.open().await;
    not_found(j.get_run("nope").await, "run", "nope");
    not_found(
        j.set_run_status("nope", RunStatus::Parked, None).await,
        "run",
        "nope",
    );
    not_found(j.begin_drive("nope").await, "run", "nope");
    not_found(j.calls_of_run("nope").await, "run", "nope");
    not_found(j.crumbs_of_run("nope").await, "run", "nope");
    not_found(
        j.append_crumbs("nope", raw(vec![json!(1)])).await,
        "run",
        "nope",
    );
    not_found(j.append_crumbs("nope", vec![]).await, "run", "nope");
    not_found(j.open_call(new_call("nope", 0)).await, "run", "nope");
    not_found(j.open_and_start(new_call("nope", 0)).await, "run", "nope");
    not_found(j.get_call("ghost").await, "call", "ghost");
    not_found(j.record_started("ghost").await, "call", "ghost");
    not_found(
        j.record_finished("ghost", ok(json!(1))).await,
        "call",
        "ghost",
    );
    not_found(j.record_gate("ghost", approval()).await, "call", "ghost");
    not_found(
        j.decide("ghost", decision(true, "alice", None)).await,
        "call",
        "ghost",
    );
    not_found(
        j.answer("ghost", human_answer(json!({}), "alice")).await,
        "call",
        "ghost",
    );
    let e = j.get_call("ghost").await.unwrap_err();
    assert_eq!(e.code().as_str(), "NOT_FOUND");
    assert_eq!(e.to_string(), "call `ghost` not found");
    // An existing run with no calls or crumbs is not an error.
    j.create_run(new_run("r1")).await.unwrap();
    assert!(j.calls_of_run("r1").await.unwrap().is_empty());
    assert!(j.crumbs_of_run("r1").await.unwrap().is_empty());
}

async fn list_runs_newest_first_with_filters_and_limit(store: Store) {
    let j = store.open().await;
    j.create_run(tenant_run("r1", "agent-a", "t1"))
        .await
        .unwrap();
    j.create_run(tenant_run("r2", "agent-b", "t2"))
        .await
        .unwrap();
    j.create_run(new_run("r3")).await.unwrap();
    j.set_run_status("r2", RunStatus::Parked, None)
        .await
        .unwrap();

    let ids =
        |runs: Vec<toolshed_journal::RunRecord>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(j.list_runs(&RunFilter::default()).await.unwrap()),
        ["r3", "r2", "r1"]
    );
    let parked = RunFilter {
        status: Some(RunStatus::Parked),
        ..RunFilter::default()
    };
    assert_eq!(ids(j.list_runs(&parked).await.unwrap()), ["r2"]);
    let agent_a = RunFilter {
        agent_id: Some("agent-a".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(j.list_runs(&agent_a).await.unwrap()), ["r3", "r1"]);
    let tenant = RunFilter {
        tenant: Some("t1".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(j.list_runs(&tenant).await.unwrap()), ["r1"]);
    let running_a = RunFilter {
        status: Some(RunStatus::Running),
        agent_id: Some("agent-a".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(j.list_runs(&running_a).await.unwrap()), ["r3", "r1"]);
    let limited = RunFilter {
        limit: 2,
        ..RunFilter::default()
    };
    assert_eq!(ids(j.list_runs(&limited).await.unwrap()), ["r3", "r2"]);
    let nobody = RunFilter {
        tenant: Some("nobody".into()),
        ..RunFilter::default()
    };
    assert!(j.list_runs(&nobody).await.unwrap().is_empty());
}

async fn set_run_status_refuses_leaving_a_final_status(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let parked = j
        .set_run_status("r1", RunStatus::Parked, None)
        .await
        .unwrap();
    assert_eq!(parked.status, RunStatus::Parked);
    let running = j
        .set_run_status("r1", RunStatus::Running, None)
        .await
        .unwrap();
    assert_eq!(running.status, RunStatus::Running);
    let failed = j
        .set_run_status("r1", RunStatus::Failed, Some("budget spent".into()))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("budget spent"));
    assert!(failed.updated_at_ms >= failed.created_at_ms);
    assert_eq!(j.get_run("r1").await.unwrap(), failed);

    for status in [
        RunStatus::Running,
        RunStatus::Parked,
        RunStatus::Completed,
        RunStatus::Failed,
    ] {
        let message = conflict(j.set_run_status("r1", status, None).await);
        assert!(
            message.contains("run `r1` is already `failed`"),
            "{message}"
        );
    }
    assert_eq!(j.get_run("r1").await.unwrap(), failed);

    j.create_run(new_run("r2")).await.unwrap();
    let cancelled = j
        .set_run_status(
            "r2",
            RunStatus::Cancelled,
            Some("cancelled by alice".into()),
        )
        .await
        .unwrap();
    assert_eq!(cancelled.error.as_deref(), Some("cancelled by alice"));
    conflict(j.set_run_status("r2", RunStatus::Completed, None).await);
}

async fn set_run_driver_replaces_it_on_unfinished_runs_only(store: Store) {
    let j = store.open().await;
    let created = j.create_run(new_run("r1")).await.unwrap();
    // A running run: the driver is replaced whole, the rest of the run kept.
    let accepted = json!({
        "kind": "direct", "tool": "echo", "args": {"text": "r1"},
        "agent_project": {"dir": "/p", "tools": {"echo": {"hash": "sha256:2", "files": {"tools/echo.py": "sha256:b"}}}}
    });
    let updated = j.set_run_driver("r1", accepted.clone()).await.unwrap();
    assert_eq!(updated.driver, accepted);
    assert_eq!(
        (
            &updated.status,
            updated.resumes,
            &updated.session_id,
            created.created_at_ms
        ),
        (
            &RunStatus::Running,
            0,
            &created.session_id,
            updated.created_at_ms
        )
    );
    assert!(updated.updated_at_ms >= created.updated_at_ms);
    assert_eq!(j.get_run("r1").await.unwrap(), updated);
    // A parked run too (what a resume with --accept-changes records before it drives).
    j.set_run_status("r1", RunStatus::Parked, None)
        .await
        .unwrap();
    let again = json!({"kind": "plan", "steps": []});
    let parked = j.set_run_driver("r1", again.clone()).await.unwrap();
    assert_eq!(
        (parked.driver, parked.status),
        (again.clone(), RunStatus::Parked)
    );
    // A finished run's driver never changes; an unknown run is not found.
    for (id, status) in [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("gone", RunStatus::Cancelled),
    ] {
        j.create_run(new_run(id)).await.unwrap();
        let finished = j.set_run_status(id, status, None).await.unwrap();
        let message = conflict(j.set_run_driver(id, again.clone()).await);
        assert!(
            message.contains(&format!(
                "run `{id}` is already `{}`; a finished run's driver cannot change",
                status.as_str()
            )),
            "{message}"
        );
        assert_eq!(j.get_run(id).await.unwrap(), finished);
    }
    not_found(j.set_run_driver("nope", again).await, "run", "nope");
}

async fn begin_drive_counts_only_starts_from_running(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let first = j.begin_drive("r1").await.unwrap();
    assert_eq!((first.status, first.resumes), (RunStatus::Running, 1));
    // A crash and a restart: the run was still `running`.
    let second = j.begin_drive("r1").await.unwrap();
    assert_eq!((second.status, second.resumes), (RunStatus::Running, 2));
    // Resuming a parked run does not count.
    j.set_run_status("r1", RunStatus::Parked, None)
        .await
        .unwrap();
    let resumed = j.begin_drive("r1").await.unwrap();
    assert_eq!((resumed.status, resumed.resumes), (RunStatus::Running, 2));
    assert_eq!(j.get_run("r1").await.unwrap(), resumed);

    j.set_run_status("r1", RunStatus::Completed, None)
        .await
        .unwrap();
    let message = conflict(j.begin_drive("r1").await);
    assert!(message.contains("`completed`"), "{message}");
    assert_eq!(j.get_run("r1").await.unwrap().resumes, 2);
}

// ---- behaviour: calls ----

async fn open_call_is_idempotent_on_run_and_ordinal(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let opened = j.open_call(new_call("r1", 0)).await.unwrap();
    assert_eq!(opened.status, CallStatus::Open);
    assert_eq!(opened.attempts, 0);
    assert_eq!(opened.call_id, "r1-call-0");
    assert_eq!(opened.args, json!({"query": "rust", "ordinal": 0}));
    assert_eq!(
        (
            opened.result.clone(),
            opened.error.clone(),
            opened.gate.clone()
        ),
        (None, None, None)
    );

    // The same key with another id, tool and args: the recorded call, unchanged.
    let again = j
        .open_call(NewCall {
            call_id: "other-id".into(),
            tool: "delete_everything".into(),
            args_hash: "different".into(),
            ..new_call("r1", 0)
        })
        .await
        .unwrap();
    assert_eq!(again, opened);
    not_found(j.get_call("other-id").await, "call", "other-id");

    j.open_call(new_call("r1", 2)).await.unwrap();
    j.open_call(new_call("r1", 1)).await.unwrap();
    let ordinals: Vec<u32> = j
        .calls_of_run("r1")
        .await
        .unwrap()
        .iter()
        .map(|c| c.ordinal)
        .collect();
    assert_eq!(ordinals, [0, 1, 2]);
    assert_eq!(j.get_call("r1-call-0").await.unwrap(), opened);
}

async fn call_id_used_at_another_key_is_a_conflict(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    j.open_call(new_call("r1", 0)).await.unwrap();
    let reused = NewCall {
        call_id: "r1-call-0".into(),
        ..new_call("r1", 1)
    };
    let message = conflict(j.open_call(reused.clone()).await);
    assert!(
        message.contains("call id `r1-call-0` is already used"),
        "{message}"
    );
    let message = conflict(j.open_and_start(reused).await);
    assert!(
        message.contains("call id `r1-call-0` is already used"),
        "{message}"
    );
    assert_eq!(j.calls_of_run("r1").await.unwrap().len(), 1);
}

async fn record_started_only_from_open_started_or_approved(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let call = j.open_call(new_call("r1", 0)).await.unwrap();
    assert_eq!(j.record_started(&call.call_id).await.unwrap(), 1);
    // A restart after a crash counts another attempt.
    assert_eq!(j.record_started(&call.call_id).await.unwrap(), 2);
    let stored = j.get_call(&call.call_id).await.unwrap();
    assert_eq!((stored.status, stored.attempts), (CallStatus::Started, 2));

    // Waiting for a human: no start.
    let gated = j.open_call(new_call("r1", 1)).await.unwrap();
    j.record_gate(&gated.call_id, approval()).await.unwrap();
    let message = conflict(j.record_started(&gated.call_id).await);
    assert!(message.contains("awaits an approval"), "{message}");
    // Approved: starts.
    j.decide(&gated.call_id, decision(true, "alice", None))
        .await
        .unwrap();
    assert_eq!(j.record_started(&gated.call_id).await.unwrap(), 1);

    let human = j.open_call(new_call("r1", 2)).await.unwrap();
    j.record_gate(&human.call_id, answer_gate()).await.unwrap();
    let message = conflict(j.record_started(&human.call_id).await);
    assert!(message.contains("human tool"), "{message}");

    // Final: no start.
    j.record_finished(&call.call_id, ok(json!("done")))
        .await
        .unwrap();
    let message = conflict(j.record_started(&call.call_id).await);
    assert!(
        message.contains("already finished (`completed`)"),
        "{message}"
    );
    assert_eq!(j.get_call(&call.call_id).await.unwrap().attempts, 2);
}

async fn record_finished_only_on_non_final_calls(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let call = j.open_call(new_call("r1", 0)).await.unwrap();
    j.record_started(&call.call_id).await.unwrap();
    j.record_finished(&call.call_id, ok(json!({"hits": [1, 2, 3]})))
        .await
        .unwrap();
    let done = j.get_call(&call.call_id).await.unwrap();
    assert_eq!(done.status, CallStatus::Completed);
    assert_eq!(done.result, Some(json!({"hits": [1, 2, 3]})));
    assert_eq!(done.error, None);
    assert_eq!(done.duration_ms, Some(12.5));
    assert_eq!(done.attempts, 1);
    assert_eq!(j.get_call(&call.call_id).await.unwrap(), done);

    let message = conflict(j.record_finished(&call.call_id, ok(json!("again"))).await);
    assert!(
        message.contains("already finished (`completed`)"),
        "{message}"
    );
    assert_eq!(j.get_call(&call.call_id).await.unwrap(), done);

    // An unkeyed call goes from open straight to failed.
    let other = j.open_call(new_call("r1", 1)).await.unwrap();
    let error = ToolError::new(ErrorCode::Timeout, "no answer within 30 s");
    j.record_finished(
        &other.call_id,
        CallResult {
            result: Err(error.clone()),
            duration_ms: 30_000.0,
            diagnostics: Default::default(),
        },
    )
    .await
    .unwrap();
    let failed = j.get_call(&other.call_id).await.unwrap();
    assert_eq!(failed.status, CallStatus::Failed);
    assert_eq!(failed.error, Some(error));
    assert_eq!(failed.result, None);
    conflict(j.record_finished(&other.call_id, ok(json!(1))).await);

    // A gated call can be finished (e.g. its run was cancelled).
    let gated = j.open_call(new_call("r1", 2)).await.unwrap();
    j.record_gate(&gated.call_id, approval()).await.unwrap();
    j.record_finished(
        &gated.call_id,
        CallResult {
            result: Err(ToolError::new(ErrorCode::Cancelled, "run cancelled")),
            duration_ms: 0.0,
            diagnostics: Default::default(),
        },
    )
    .await
    .unwrap();
    let cancelled = j.get_call(&gated.call_id).await.unwrap();
    assert_eq!(cancelled.status, CallStatus::Failed);
}

async fn record_gate_only_on_open_calls(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let a = j.open_call(new_call("r1", 0)).await.unwrap();
    let gated = j.record_gate(&a.call_id, approval()).await.unwrap();
    assert_eq!(gated.status, CallStatus::AwaitingApproval);
    assert_eq!(gated.gate, Some(approval()));
    assert_eq!(j.get_call(&a.call_id).await.unwrap(), gated);
    let message = conflict(j.record_gate(&a.call_id, approval()).await);
    assert!(message.contains("only a new (`open`) call"), "{message}");

    let b = j.open_call(new_call("r1", 1)).await.unwrap();
    let human = j.record_gate(&b.call_id, answer_gate()).await.unwrap();
    assert_eq!(human.status, CallStatus::AwaitingAnswer);
    assert_eq!(human.gate, Some(answer_gate()));

    let c = j.open_call(new_call("r1", 2)).await.unwrap();
    j.record_started(&c.call_id).await.unwrap();
    let message = conflict(j.record_gate(&c.call_id, approval()).await);
    assert!(message.contains("is `started`"), "{message}");
}

async fn decide_approves_once(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let call = j.open_call(new_call("r1", 0)).await.unwrap();
    j.record_gate(&call.call_id, approval()).await.unwrap();
    let approved = j
        .decide(&call.call_id, decision(true, "alice", Some("looks fine")))
        .await
        .unwrap();
    assert_eq!(approved.status, CallStatus::Approved);
    assert_eq!(
        approved.decision,
        Some(decision(true, "alice", Some("looks fine")))
    );
    assert_eq!(approved.error, None);
    assert_eq!(j.get_call(&call.call_id).await.unwrap(), approved);

    let message = conflict(j.decide(&call.call_id, decision(false, "bob", None)).await);
    assert!(
        message.contains(
            "call `r1-call-0` was already approved by `alice` at 2023-11-14T22:13:20.000Z"
        ),
        "{message}"
    );
    assert_eq!(j.get_call(&call.call_id).await.unwrap(), approved);

    // Still already-approved after it ran.
    j.record_started(&call.call_id).await.unwrap();
    j.record_finished(&call.call_id, ok(json!(1)))
        .await
        .unwrap();
    let message = conflict(j.decide(&call.call_id, decision(true, "bob", None)).await);
    assert!(message.contains("already approved by `alice`"), "{message}");

    // Nothing to decide.
    let plain = j.open_call(new_call("r1", 1)).await.unwrap();
    let message = conflict(
        j.decide(&plain.call_id, decision(true, "alice", None))
            .await,
    );
    assert!(
        message.contains("awaits no approval: it is `open`"),
        "{message}"
    );
    let human = j.open_call(new_call("r1", 2)).await.unwrap();
    j.record_gate(&human.call_id, answer_gate()).await.unwrap();
    let message = conflict(
        j.decide(&human.call_id, decision(true, "alice", None))
            .await,
    );
    assert!(message.contains("awaits an answer"), "{message}");
}

async fn regate_asks_an_approved_call_again_and_nothing_else(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let call = j.open_call(new_call("r1", 0)).await.unwrap();
    let gated = j
        .record_gate(&call.call_id, approval_at("1@sha256:aa", vec![]))
        .await
        .unwrap();
    assert_eq!(gated.gate, Some(approval_at("1@sha256:aa", vec![])));
    // Only an approved call can be asked again.
    let message = conflict(
        j.regate(&call.call_id, approval_at("2@sha256:bb", vec![]))
            .await,
    );
    assert!(
        message.contains("is `awaiting_approval`; only an approved call can be asked again"),
        "{message}"
    );
    let first = Decision {
        revision: Some("1@sha256:aa".to_owned()),
        ..decision(true, "bob", Some("fine"))
    };
    let approved = j.decide(&call.call_id, first.clone()).await.unwrap();
    assert_eq!(approved.decision, Some(first.clone()));

    // Asked again: waiting for an approval, the decision cleared and kept in the gate.
    let again = approval_at("2@sha256:bb", vec![first.clone()]);
    let regated = j.regate(&call.call_id, again.clone()).await.unwrap();
    assert_eq!(regated.status, CallStatus::AwaitingApproval);
    assert_eq!(regated.decision, None);
    assert_eq!(regated.gate, Some(again.clone()));
    assert_eq!(j.get_call(&call.call_id).await.unwrap(), regated);
    let pending = j.pending_gates(&GateFilter::default()).await.unwrap();
    assert_eq!(pending, vec![regated.clone()]);

    // It can be decided again, and a second regate of a waiting call is refused.
    let message = conflict(j.regate(&call.call_id, again.clone()).await);
    assert!(message.contains("only an approved call"), "{message}");
    let second = Decision {
        revision: Some("2@sha256:bb".to_owned()),
        ..decision(false, "carol", Some("changed"))
    };
    let denied = j.decide(&call.call_id, second.clone()).await.unwrap();
    assert_eq!(denied.status, CallStatus::Failed);
    assert_eq!(denied.decision, Some(second));
    let message = conflict(j.regate(&call.call_id, again.clone()).await);
    assert!(message.contains("is `failed`"), "{message}");

    // A human tool's answer is never asked again, whatever its state.
    let human = j.open_call(new_call("r1", 1)).await.unwrap();
    let message = conflict(j.regate(&human.call_id, answer_gate()).await);
    assert!(
        message.contains("only be asked again for an approval"),
        "{message}"
    );
    // An unknown call is not found.
    assert!(matches!(
        j.regate("ghost", approval()).await,
        Err(JournalError::NotFound { .. })
    ));
}

async fn deny_fails_the_call_with_approval_denied(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let call = j.open_call(new_call("r1", 0)).await.unwrap();
    j.record_gate(&call.call_id, approval()).await.unwrap();
    let denied = j
        .decide(&call.call_id, decision(false, "bob", Some("too risky")))
        .await
        .unwrap();
    assert_eq!(denied.status, CallStatus::Failed);
    assert_eq!(
        denied.error,
        Some(ToolError::new(
            ErrorCode::ApprovalDenied,
            "denied by bob: too risky"
        ))
    );
    assert_eq!(
        serde_json::to_value(denied.error.as_ref().unwrap()).unwrap(),
        json!({"code": "APPROVAL_DENIED", "message": "denied by bob: too risky"})
    );
    assert_eq!(j.get_call(&call.call_id).await.unwrap(), denied);
    let message = conflict(j.decide(&call.call_id, decision(true, "alice", None)).await);
    assert!(message.contains("already denied by `bob`"), "{message}");

    let other = j.open_call(new_call("r1", 1)).await.unwrap();
    j.record_gate(&other.call_id, approval()).await.unwrap();
    let denied = j
        .decide(&other.call_id, decision(false, "carol", None))
        .await
        .unwrap();
    assert_eq!(denied.error.unwrap().message, "denied by carol");
}

async fn answer_completes_a_human_tool_once(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let call = j.open_call(new_call("r1", 0)).await.unwrap();
    j.record_gate(&call.call_id, answer_gate()).await.unwrap();
    let answered = j
        .answer(&call.call_id, human_answer(json!({"ok": true}), "alice"))
        .await
        .unwrap();
    assert_eq!(answered.status, CallStatus::Completed);
    assert_eq!(answered.result, Some(json!({"ok": true})));
    assert_eq!(
        answered.answer,
        Some(human_answer(json!({"ok": true}), "alice"))
    );
    assert_eq!(j.get_call(&call.call_id).await.unwrap(), answered);
    let message = conflict(
        j.answer(&call.call_id, human_answer(json!({"ok": false}), "bob"))
            .await,
    );
    assert!(message.contains("already answered by `alice`"), "{message}");

    // Not human tools.
    let approval_call = j.open_call(new_call("r1", 1)).await.unwrap();
    j.record_gate(&approval_call.call_id, approval())
        .await
        .unwrap();
    let message = conflict(
        j.answer(&approval_call.call_id, human_answer(json!({}), "alice"))
            .await,
    );
    assert!(message.contains("is not a human tool"), "{message}");
    assert!(message.contains("awaiting an approval"), "{message}");
    let plain = j.open_call(new_call("r1", 2)).await.unwrap();
    let message = conflict(
        j.answer(&plain.call_id, human_answer(json!({}), "alice"))
            .await,
    );
    assert!(message.contains("is not a human tool"), "{message}");
    assert!(message.contains("tool `search`"), "{message}");
    assert_eq!(j.get_call(&plain.call_id).await.unwrap(), plain);
}

async fn pending_gates_filter_by_run_and_tenant(store: Store) {
    let j = store.open().await;
    j.create_run(tenant_run("r1", "agent-a", "t1"))
        .await
        .unwrap();
    j.create_run(tenant_run("r2", "agent-a", "t2"))
        .await
        .unwrap();
    for (run, ordinal, gate) in [
        ("r1", 0, Some(approval())),
        ("r1", 1, Some(answer_gate())),
        ("r1", 2, None),
        ("r1", 3, Some(approval())),
        ("r2", 0, Some(approval())),
    ] {
        let call = j.open_call(new_call(run, ordinal)).await.unwrap();
        if let Some(gate) = gate {
            j.record_gate(&call.call_id, gate).await.unwrap();
        }
    }
    // Decided: no longer pending.
    j.decide("r1-call-3", decision(true, "alice", None))
        .await
        .unwrap();

    let ids = |calls: Vec<toolshed_journal::CallRecord>| {
        calls
            .into_iter()
            .map(|c| c.call_id)
            .collect::<BTreeSet<_>>()
    };
    let all = j.pending_gates(&GateFilter::default()).await.unwrap();
    assert!(all.iter().all(|c| matches!(
        c.status,
        CallStatus::AwaitingApproval | CallStatus::AwaitingAnswer
    )));
    assert_eq!(
        ids(all),
        BTreeSet::from(["r1-call-0".into(), "r1-call-1".into(), "r2-call-0".into()])
    );
    let run1 = GateFilter {
        run_id: Some("r1".into()),
        ..GateFilter::default()
    };
    assert_eq!(
        ids(j.pending_gates(&run1).await.unwrap()),
        BTreeSet::from(["r1-call-0".into(), "r1-call-1".into()])
    );
    let tenant2 = GateFilter {
        tenant: Some("t2".into()),
        ..GateFilter::default()
    };
    assert_eq!(
        ids(j.pending_gates(&tenant2).await.unwrap()),
        BTreeSet::from(["r2-call-0".into()])
    );
    let mismatch = GateFilter {
        run_id: Some("r1".into()),
        tenant: Some("t2".into()),
    };
    assert!(j.pending_gates(&mismatch).await.unwrap().is_empty());
}

async fn crumbs_get_consecutive_seqs_from_zero(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    j.create_run(new_run("r2")).await.unwrap();
    j.append_crumbs(
        "r1",
        raw(vec![
            json!({"kind": "tool:call"}),
            json!({"kind": "tool:result"}),
            json!(3),
        ]),
    )
    .await
    .unwrap();
    j.append_crumbs("r2", raw(vec![json!("other run")]))
        .await
        .unwrap();
    j.append_crumbs("r1", vec![]).await.unwrap();
    j.append_crumbs("r1", raw(vec![json!(4), json!(5)]))
        .await
        .unwrap();
    let crumbs = j.crumbs_of_run("r1").await.unwrap();
    let seqs: Vec<u64> = crumbs.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4]);
    assert!(crumbs.iter().all(|c| c.run_id == "r1"));
    let values: Vec<Value> = crumbs.into_iter().map(|c| c.crumb).collect();
    assert_eq!(
        values,
        [
            json!({"kind": "tool:call"}),
            json!({"kind": "tool:result"}),
            json!(3),
            json!(4),
            json!(5)
        ]
    );
    let other = j.crumbs_of_run("r2").await.unwrap();
    assert_eq!((other.len(), other[0].seq), (1, 0));
}

async fn open_and_start_records_a_start_in_one_write(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let first = j.open_and_start(new_call("r1", 0)).await.unwrap();
    assert!(first.started);
    assert_eq!(
        (first.call.status, first.call.attempts),
        (CallStatus::Started, 1)
    );
    assert_eq!(j.get_call("r1-call-0").await.unwrap(), first.call);
    // A restart after a crash: same tool and args.
    let again = j
        .open_and_start(NewCall {
            call_id: "fresh-uuid".into(),
            ..new_call("r1", 0)
        })
        .await
        .unwrap();
    assert!(again.started);
    assert_eq!(
        (again.call.call_id.as_str(), again.call.attempts),
        ("r1-call-0", 2)
    );

    // Different args at the same key: returned unchanged for the caller to report.
    let mismatch = j
        .open_and_start(NewCall {
            args_hash: "other".into(),
            ..new_call("r1", 0)
        })
        .await
        .unwrap();
    assert!(!mismatch.started);
    assert_eq!(mismatch.call, again.call);

    // Finished: a replay, not a start.
    j.record_finished("r1-call-0", ok(json!("result")))
        .await
        .unwrap();
    let replay = j.open_and_start(new_call("r1", 0)).await.unwrap();
    assert!(!replay.started);
    assert_eq!(
        (replay.call.status, replay.call.attempts),
        (CallStatus::Completed, 2)
    );

    // Gated: not started until approved.
    let gated = j.open_call(new_call("r1", 1)).await.unwrap();
    j.record_gate(&gated.call_id, approval()).await.unwrap();
    let waiting = j.open_and_start(new_call("r1", 1)).await.unwrap();
    assert!(!waiting.started);
    assert_eq!(waiting.call.status, CallStatus::AwaitingApproval);
    j.decide(&gated.call_id, decision(true, "alice", None))
        .await
        .unwrap();
    let approved = j.open_and_start(new_call("r1", 1)).await.unwrap();
    assert!(approved.started);
    assert_eq!(
        (approved.call.status, approved.call.attempts),
        (CallStatus::Started, 1)
    );
    assert!(approved.call.decision.is_some());
}

async fn json_values_round_trip_exactly(store: Store) {
    let j = store.open().await;
    let awkward = json!({
        "nul": "a\u{0}b",
        "unicode": "héllo 🌍 \u{2028}",
        "quote": "it's \"quoted\" \\ ",
        "big": u64::MAX,
        "negative": i64::MIN,
        "float": 0.1,
        "nested": {"z": [1, {"y": null}], "a": true},
        "empty": {},
    });
    j.create_run(NewRun {
        driver: awkward.clone(),
        ..new_run("r1")
    })
    .await
    .unwrap();
    assert_eq!(j.get_run("r1").await.unwrap().driver, awkward);
    let call = j
        .open_call(NewCall {
            args: awkward.clone(),
            ..new_call("r1", 0)
        })
        .await
        .unwrap();
    assert_eq!(call.args, awkward);
    j.record_finished(&call.call_id, ok(awkward.clone()))
        .await
        .unwrap();
    let done = j.get_call(&call.call_id).await.unwrap();
    assert_eq!(done.result, Some(awkward.clone()));
    assert_eq!(
        j.get_call(&call.call_id).await.unwrap().result,
        Some(awkward.clone())
    );
    j.append_crumbs("r1", raw(vec![awkward.clone()]))
        .await
        .unwrap();
    assert_eq!(j.crumbs_of_run("r1").await.unwrap()[0].crumb, awkward);
}

// ---- behaviour: concurrency ----

/// Two approvers at once: exactly one wins, the other is told who did.
async fn race_decides(first: Arc<dyn Journal>, second: Arc<dyn Journal>) {
    first.create_run(new_run("r1")).await.unwrap();
    for ordinal in 0..10 {
        let call = first.open_call(new_call("r1", ordinal)).await.unwrap();
        first.record_gate(&call.call_id, approval()).await.unwrap();
        let (a, b) = (call.call_id.clone(), call.call_id.clone());
        let (j1, j2) = (Arc::clone(&first), Arc::clone(&second));
        let alice = tokio::spawn(async move { j1.decide(&a, decision(true, "alice", None)).await });
        let bob =
            tokio::spawn(async move { j2.decide(&b, decision(false, "bob", Some("no"))).await });
        let results = [alice.await.unwrap(), bob.await.unwrap()];
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "{results:?}");
        let loser = results.into_iter().find(Result::is_err).unwrap();
        let message = conflict(loser);
        assert!(message.contains("was already"), "{message}");
        let stored = first.get_call(&call.call_id).await.unwrap();
        assert!(matches!(
            stored.status,
            CallStatus::Approved | CallStatus::Failed
        ));
    }
}

async fn concurrent_decides_exactly_one_wins(store: Store) {
    let j = store.open().await;
    race_decides(Arc::clone(&j), j).await;
}

async fn concurrent_decides_from_two_handles_exactly_one_wins(store: Store) {
    // Two journals on one database: as two processes would be.
    let first = store.open().await;
    let second = store.open().await;
    race_decides(first, second).await;
}

async fn concurrent_keyed_calls_from_64_tasks_all_succeed(store: Store) {
    let j = store.open().await;
    for run in 0..8 {
        j.create_run(new_run(&format!("r{run}"))).await.unwrap();
    }
    let tasks: Vec<_> = (0..64u32)
        .map(|i| {
            let j = Arc::clone(&j);
            tokio::spawn(async move {
                let call = j.open_call(new_call(&format!("r{}", i % 8), i / 8)).await?;
                let attempts = j.record_started(&call.call_id).await?;
                j.record_finished(&call.call_id, ok(json!({"task": i})))
                    .await?;
                let done = j.get_call(&call.call_id).await?;
                Ok::<_, JournalError>((attempts, done))
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let (attempts, done) = task.await.unwrap().unwrap();
        assert_eq!(attempts, 1);
        assert_eq!(done.status, CallStatus::Completed);
        assert_eq!(done.result, Some(json!({"task": i})));
    }
    for run in 0..8 {
        let calls = j.calls_of_run(&format!("r{run}")).await.unwrap();
        assert_eq!(calls.len(), 8);
        assert!(
            calls
                .iter()
                .all(|c| c.status == CallStatus::Completed && c.attempts == 1)
        );
    }
}

async fn concurrent_crumb_appends_get_unique_consecutive_seqs(store: Store) {
    let first = store.open().await;
    let second = store.open().await;
    first.create_run(new_run("r1")).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let j = if task % 2 == 0 {
                Arc::clone(&first)
            } else {
                Arc::clone(&second)
            };
            tokio::spawn(async move {
                for append in 0..5 {
                    let crumbs = raw((0..3).map(|i| json!([task, append, i])).collect());
                    j.append_crumbs("r1", crumbs).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let crumbs = first.crumbs_of_run("r1").await.unwrap();
    assert_eq!(crumbs.len(), 16 * 5 * 3);
    let seqs: Vec<u64> = crumbs.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (0..240).collect::<Vec<u64>>());
    // Each append's crumbs are contiguous and in order.
    for chunk in crumbs.chunks(3) {
        let (task, append) = (&chunk[0].crumb[0], &chunk[0].crumb[1]);
        for (i, crumb) in chunk.iter().enumerate() {
            assert_eq!(crumb.crumb, json!([task, append, i]), "{chunk:?}");
        }
    }
    let distinct: BTreeSet<String> = crumbs.iter().map(|c| c.crumb.to_string()).collect();
    assert_eq!(distinct.len(), 240);
}

/// Holds the write lock a write of run `run_id` needs, from another connection, until
/// released: SQLite's database write lock (`BEGIN IMMEDIATE`), PostgreSQL's row lock on
/// the run (`SELECT … FOR UPDATE`).
enum WriteLock {
    Sqlite(rusqlite::Connection),
    Postgres(tokio_postgres::Client),
}

impl WriteLock {
    async fn hold(store: &Store, run_id: &str) -> WriteLock {
        match store {
            Store::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                WriteLock::Sqlite(conn)
            }
            Store::Postgres { url, schema } => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("SET search_path TO \"{schema}\"; BEGIN"))
                    .await
                    .unwrap();
                let locked = client
                    .query("SELECT id FROM runs WHERE id = $1 FOR UPDATE", &[&run_id])
                    .await
                    .unwrap();
                assert_eq!(locked.len(), 1, "run `{run_id}` to lock");
                WriteLock::Postgres(client)
            }
        }
    }

    async fn release(self) {
        match self {
            WriteLock::Sqlite(conn) => conn.execute_batch("ROLLBACK").unwrap(),
            WriteLock::Postgres(client) => client.batch_execute("ROLLBACK").await.unwrap(),
        }
    }
}

/// Poll `condition` until it holds; fail the test after 10 s.
async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A write that finds the journal's write lock held waits for it: the writer has taken
/// its batch and the write is pending.
async fn block_the_writer(
    store: &Store,
    j: &Arc<dyn Journal>,
) -> (
    WriteLock,
    tokio::task::JoinHandle<Result<RunRecord, JournalError>>,
) {
    j.create_run(new_run("blocker")).await.unwrap();
    let lock = WriteLock::hold(store, "blocker").await;
    let before = j.write_stats();
    let blocked = tokio::spawn({
        let j = Arc::clone(j);
        async move { j.set_run_status("blocker", RunStatus::Parked, None).await }
    });
    wait_until("the writer takes the blocked write", || {
        let now = j.write_stats();
        now.batches == before.batches + 1 && now.pending == 1
    })
    .await;
    (lock, blocked)
}

async fn a_failing_operation_does_not_undo_its_batch(store: Store) {
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let finished = j.open_call(new_call("r1", 0)).await.unwrap();
    j.record_finished(&finished.call_id, ok(json!(0)))
        .await
        .unwrap();
    // Hold the writer on one write, queue 48 behind it, then let it go: the 48 are one
    // batch, one commit. Good ones, conflicts, and statements that fail in the
    // database (a reused call id).
    let (lock, blocked) = block_the_writer(&store, &j).await;
    let before = j.write_stats();
    let tasks: Vec<_> = (0..48u32)
        .map(|i| {
            let j = Arc::clone(&j);
            let finished = finished.call_id.clone();
            tokio::spawn(async move {
                match i % 3 {
                    0 => j
                        .open_and_start(new_call("r1", 100 + i))
                        .await
                        .map(|_| true),
                    1 => j
                        .record_finished(&finished, ok(json!(i)))
                        .await
                        .map(|_| true),
                    _ => j
                        .open_and_start(NewCall {
                            call_id: finished.clone(),
                            ..new_call("r1", 1000 + i)
                        })
                        .await
                        .map(|_| true),
                }
            })
        })
        .collect();
    wait_until("every write is queued", || j.write_stats().pending == 49).await;
    lock.release().await;
    assert_eq!(blocked.await.unwrap().unwrap().status, RunStatus::Parked);
    for (i, task) in tasks.into_iter().enumerate() {
        let result = task.await.unwrap();
        if i % 3 == 0 {
            assert!(result.is_ok(), "{i}: {result:?}");
        } else {
            conflict(result);
        }
    }
    let after = j.write_stats();
    assert_eq!(
        (
            after.commits - before.commits,
            after.operations - before.operations
        ),
        (2, 49),
        "the blocked write's commit, then one commit for all 48: {before:?} → {after:?}"
    );
    assert_eq!(after.pending, 0);
    let calls = j.calls_of_run("r1").await.unwrap();
    assert_eq!(calls.len(), 1 + 16);
    assert!(
        calls
            .iter()
            .filter(|c| c.ordinal >= 100)
            .all(|c| c.status == CallStatus::Started)
    );
    assert_eq!(
        j.get_call(&finished.call_id).await.unwrap().result,
        Some(json!(0))
    );
}

async fn reads_never_wait_for_writes(store: Store) {
    let j = store.open().await;
    j.create_run(tenant_run("r1", "agent-a", "acme"))
        .await
        .unwrap();
    let gated = j.open_call(new_call("r1", 0)).await.unwrap();
    j.record_gate(&gated.call_id, approval()).await.unwrap();
    j.append_crumbs("r1", raw(vec![json!("a")])).await.unwrap();
    // The writer waits for a lock another connection holds, inside its transaction.
    let (lock, blocked) = block_the_writer(&store, &j).await;
    let reads = async {
        assert_eq!(j.get_run("r1").await.unwrap().id, "r1");
        assert_eq!(j.list_runs(&RunFilter::default()).await.unwrap().len(), 2);
        assert_eq!(j.calls_of_run("r1").await.unwrap().len(), 1);
        assert_eq!(j.get_call(&gated.call_id).await.unwrap().tool, "search");
        assert_eq!(
            j.pending_gates(&GateFilter::default()).await.unwrap().len(),
            1
        );
        assert_eq!(j.crumbs_of_run("r1").await.unwrap().len(), 1);
    };
    tokio::time::timeout(Duration::from_secs(10), reads)
        .await
        .expect("reads answer while a write waits for its lock");
    assert!(
        !blocked.is_finished(),
        "the write was still waiting for the lock while the reads answered"
    );
    lock.release().await;
    assert_eq!(blocked.await.unwrap().unwrap().status, RunStatus::Parked);
}

async fn gates_of_finished_runs_wait_for_nobody(store: Store) {
    let j = store.open().await;
    for id in ["live", "cancelled"] {
        j.create_run(new_run(id)).await.unwrap();
        let call = j.open_call(new_call(id, 0)).await.unwrap();
        j.record_gate(&call.call_id, approval()).await.unwrap();
        j.set_run_status(id, RunStatus::Parked, None).await.unwrap();
    }
    j.set_run_status("cancelled", RunStatus::Cancelled, Some("by ann".into()))
        .await
        .unwrap();
    let pending = j.pending_gates(&GateFilter::default()).await.unwrap();
    let runs: Vec<&str> = pending.iter().map(|c| c.run_id.as_str()).collect();
    assert_eq!(runs, ["live"]);
    let of_cancelled = j
        .pending_gates(&GateFilter {
            run_id: Some("cancelled".into()),
            tenant: None,
        })
        .await
        .unwrap();
    assert!(of_cancelled.is_empty(), "{of_cancelled:?}");
}

async fn diagnostics_are_kept_with_the_call(store: Store) {
    let diagnostics = Diagnostics {
        stdout: "{\"id\": \"r1\", \"result\": 1}\n".into(),
        stderr: "looked up ORD-1\n\u{0}binary\u{1b}[0m".into(),
        exit_code: Some(3),
        timed_out: true,
        stderr_truncated: true,
        peak_memory_bytes: Some(1 << 20),
        ..Diagnostics::default()
    };
    let with = |result| CallResult {
        diagnostics: diagnostics.clone(),
        ..result
    };
    let j = store.open().await;
    j.create_run(new_run("r1")).await.unwrap();
    let call = j.open_call(new_call("r1", 0)).await.unwrap();
    j.record_finished(&call.call_id, with(ok(json!(1))))
        .await
        .unwrap();
    let finished = j.get_call(&call.call_id).await.unwrap();
    assert_eq!(finished.diagnostics, diagnostics);
    // A one-call run recorded whole keeps them too; a call without any stores none.
    let mut quiet = new_call("r2", 1);
    quiet.call_id = "r2-quiet".into();
    j.record_run(
        new_run("r2"),
        vec![
            (new_call("r2", 0), with(ok(json!(2)))),
            (quiet, ok(json!(3))),
        ],
        vec![],
        RunStatus::Completed,
    )
    .await
    .unwrap();
    drop(j);
    let j = store.open().await;
    assert_eq!(
        j.get_call(&call.call_id).await.unwrap().diagnostics,
        diagnostics
    );
    let calls = j.calls_of_run("r2").await.unwrap();
    assert_eq!(calls[0].diagnostics, diagnostics);
    assert!(calls[1].diagnostics.is_empty());
}

async fn data_survives_reopening(store: Store) {
    let j = store.open().await;
    j.create_run(tenant_run("r1", "agent-a", "acme"))
        .await
        .unwrap();
    j.begin_drive("r1").await.unwrap();
    let call = j.open_and_start(new_call("r1", 0)).await.unwrap().call;
    j.record_finished(&call.call_id, ok(json!({"answer": 42})))
        .await
        .unwrap();
    let gated = j.open_call(new_call("r1", 1)).await.unwrap();
    j.record_gate(&gated.call_id, approval()).await.unwrap();
    j.set_run_status("r1", RunStatus::Parked, None)
        .await
        .unwrap();
    j.append_crumbs("r1", raw(vec![json!("a"), json!("b")]))
        .await
        .unwrap();
    let run = j.get_run("r1").await.unwrap();
    let calls = j.calls_of_run("r1").await.unwrap();
    let crumbs = j.crumbs_of_run("r1").await.unwrap();
    drop(j);

    let reopened = store.open().await;
    assert_eq!(reopened.get_run("r1").await.unwrap(), run);
    assert_eq!(reopened.calls_of_run("r1").await.unwrap(), calls);
    assert_eq!(reopened.crumbs_of_run("r1").await.unwrap(), crumbs);
    assert_eq!(
        reopened
            .pending_gates(&GateFilter::default())
            .await
            .unwrap()
            .len(),
        1
    );
    // And it goes on where it stopped.
    reopened
        .append_crumbs("r1", raw(vec![json!("c")]))
        .await
        .unwrap();
    assert_eq!(reopened.crumbs_of_run("r1").await.unwrap()[2].seq, 2);
    let approved = reopened
        .decide(&gated.call_id, decision(true, "alice", None))
        .await
        .unwrap();
    assert_eq!(approved.status, CallStatus::Approved);
}

// ---- SQLite only ----

mod sqlite_only {
    use super::*;

    /// A write alone in flight commits on its caller's thread, but never waits there:
    /// while another process holds the file's write lock it goes to the writer thread,
    /// and the caller's runtime (one thread here) keeps running other tasks. Were the
    /// write to wait on the caller's thread, this test's task could not run again until
    /// SQLite's busy timeout (5 s) gave up: the check below allows 4 s for a task to be
    /// scheduled again, so it fails only on such a stall, never on a slow machine.
    #[tokio::test(flavor = "current_thread")]
    async fn a_lone_write_never_waits_for_a_lock_on_the_callers_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolshed.db");
        let j: Arc<dyn Journal> = Arc::new(sqlite_at(&path).await.unwrap());
        j.create_run(new_run("r1")).await.unwrap();
        let other_process = rusqlite::Connection::open(&path).unwrap();
        other_process.execute_batch("BEGIN IMMEDIATE").unwrap();
        let write = tokio::spawn({
            let j = Arc::clone(&j);
            async move { j.set_run_status("r1", RunStatus::Parked, None).await }
        });
        // Let the write start; it must not hold this thread.
        let started = Instant::now();
        while j.write_stats().pending == 0 {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the write held the caller's thread while waiting for the lock ({:?})",
            started.elapsed()
        );
        assert!(!write.is_finished(), "the write waits for the lock");
        other_process.execute_batch("ROLLBACK").unwrap();
        let run = write
            .await
            .unwrap()
            .expect("the write succeeds once the lock is free");
        assert_eq!(run.status, RunStatus::Parked);
        // With nothing else in flight and the lock free, the next write commits on this
        // thread, in one commit of its own.
        let before = j.write_stats();
        j.set_run_status("r1", RunStatus::Running, None)
            .await
            .unwrap();
        let after = j.write_stats();
        assert_eq!(
            (
                after.commits - before.commits,
                after.batches - before.batches
            ),
            (1, 1)
        );
    }

    #[tokio::test]
    async fn a_text_file_is_not_a_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        let text = "these are my notes, not a database\n".repeat(200);
        std::fs::write(&path, &text).unwrap();
        match sqlite_at(&path).await {
            Err(e @ JournalError::NotAJournal { .. }) => {
                assert_eq!(e.code().as_str(), "NOT_A_JOURNAL");
                let message = e.to_string();
                assert!(message.contains(&path.display().to_string()), "{message}");
                assert!(message.contains("not a SQLite database"), "{message}");
            }
            other => panic!("expected NotAJournal, got {other:?}"),
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[tokio::test]
    async fn a_foreign_sqlite_database_is_not_a_journal_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ann');")
                .unwrap();
        }
        match sqlite_at(&path).await {
            Err(JournalError::NotAJournal { path: p, message }) => {
                assert_eq!(p, path.display().to_string());
                assert!(
                    message.contains(
                        "has tables (users) but no toolshed_meta: not a toolshed journal"
                    ),
                    "{message}"
                );
            }
            other => panic!("expected NotAJournal, got {other:?}"),
        }
        let conn = rusqlite::Connection::open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 1);
    }

    #[tokio::test]
    async fn missing_parent_folders_are_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a").join("b").join("toolshed.db");
        let j = sqlite_at(&path).await.unwrap();
        j.create_run(new_run("r1")).await.unwrap();
        assert!(path.exists());
        assert_eq!(j.describe(), format!("sqlite://{}", path.display()));
    }

    #[tokio::test]
    async fn the_schema_is_migrated_once_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolshed.db");
        let j = sqlite_at(&path).await.unwrap();
        assert_eq!(j.applied_migrations(), [1, 2, 3, 4, 5, 6, 7]);
        j.create_run(new_run("r1")).await.unwrap();
        drop(j);
        let j = sqlite_at(&path).await.unwrap();
        assert!(j.applied_migrations().is_empty());
        assert_eq!(j.get_run("r1").await.unwrap().id, "r1");

        let conn = rusqlite::Connection::open(&path).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let meta: Vec<(String, String)> = conn
            .prepare("SELECT key, value FROM toolshed_meta ORDER BY key")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            meta,
            [
                (
                    "format_version".to_owned(),
                    toolshed_journal::FORMAT_VERSION.to_string()
                ),
                ("schema_version".to_owned(), "7".to_owned())
            ]
        );
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            tables,
            [
                "attachment_pages",
                "attachments",
                "calls",
                "crumbs",
                "process_runs",
                "runs",
                "toolshed_meta"
            ]
        );
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolshed.db");
        drop(sqlite_at(&path).await.unwrap());
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE toolshed_meta SET value = '99' WHERE key = 'schema_version'",
                [],
            )
            .unwrap();
        match sqlite_at(&path).await {
            Err(e @ JournalError::Unavailable { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains("schema version 99 is newer than this toolshed supports (7)"),
                    "{message}"
                );
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_folder_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        match sqlite_at(dir.path()).await {
            Err(e @ JournalError::Unavailable { .. }) => {
                assert_eq!(e.code().as_str(), "JOURNAL_UNAVAILABLE")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}

// ---- URLs ----

mod urls {
    use super::*;

    #[tokio::test]
    async fn open_dispatches_on_the_scheme() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolshed.db");
        let url = format!("sqlite://{}", path.display());
        let j = toolshed_journal::open(&url).await.unwrap();
        assert_eq!(j.describe(), url);
        j.create_run(new_run("r1")).await.unwrap();

        for bad in [
            "sqlite://",
            "sqlite:toolshed.db",
            "mysql://x",
            "toolshed.db",
            "",
        ] {
            match toolshed_journal::open(bad).await {
                Err(e @ JournalError::InvalidUrl { .. }) => {
                    assert_eq!(e.code().as_str(), "INVALID_DATABASE_URL")
                }
                other => panic!("`{bad}`: expected InvalidUrl, got {other:?}"),
            }
        }
        match toolshed_journal::open("postgres://u:s3cret@127.0.0.1:5432/db?sslmode=bogus").await {
            Err(e @ JournalError::InvalidUrl { .. }) => {
                assert!(!e.to_string().contains("s3cret"), "{e}")
            }
            other => panic!("expected InvalidUrl, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn unreachable_postgres_is_unavailable_quickly_without_the_password() {
        let started = Instant::now();
        let result = toolshed_journal::open("postgres://postgres:s3cret@127.0.0.1:1/test").await;
        // Generous: the bound that matters is "not hanging", the connect timeout is 5 s.
        assert!(
            started.elapsed() < Duration::from_secs(11),
            "{:?}",
            started.elapsed()
        );
        match result {
            Err(e @ JournalError::Unavailable { .. }) => {
                assert_eq!(e.code().as_str(), "JOURNAL_UNAVAILABLE");
                let message = e.to_string();
                assert!(
                    message.contains("is PostgreSQL running at 127.0.0.1:1?"),
                    "{message}"
                );
                assert!(
                    message.contains("postgres://postgres:***@127.0.0.1:1/test"),
                    "{message}"
                );
                assert!(!message.contains("s3cret"), "{message}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}

// ---- PostgreSQL only ----

mod postgres_only {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_schema_is_migrated_once() {
        with_schema(|admin, schema| async move {
            let url = postgres_url();
            // Two connects at once: one migrates, the other waits and finds it done.
            let (a, b) = tokio::join!(
                postgres_in(&url, &schema),
                postgres_in(&url, &schema)
            );
            let (a, b) = (a.unwrap(), b.unwrap());
            let mut applied = [a.applied_migrations().to_vec(), b.applied_migrations().to_vec()];
            applied.sort();
            assert_eq!(applied, [vec![], vec![1, 2, 3, 4, 5, 6, 7]]);
            a.create_run(new_run("r1")).await.unwrap();
            drop((a, b));
            let again = postgres_in(&url, &schema).await.unwrap();
            assert!(again.applied_migrations().is_empty());
            assert_eq!(again.get_run("r1").await.unwrap().id, "r1");
            assert!(again.describe().contains(&schema));

            let tables: Vec<String> = admin
                .query(
                    "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
                    &[&schema],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert_eq!(
            tables,
            [
                "attachment_pages",
                "attachments",
                "calls",
                "crumbs",
                "process_runs",
                "runs",
                "toolshed_meta"
            ]
        );
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_url_can_choose_the_schema() {
        with_schema(|admin, schema| async move {
            let url = format!("{}?options=-csearch_path%3D{schema}", postgres_url());
            // The schema must exist for a URL-chosen search path.
            match SqlJournal::open(&Location::parse(&url).unwrap()).await {
                Err(e @ JournalError::Unavailable { .. }) => {
                    assert!(e.to_string().contains("names no existing schema"), "{e}");
                }
                other => panic!("expected Unavailable, got {other:?}"),
            }
            admin
                .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
                .await
                .unwrap();
            let j = toolshed_journal::open(&url).await.unwrap();
            j.create_run(new_run("r1")).await.unwrap();
            let count: i64 = admin
                .query_one(&format!("SELECT count(*) FROM \"{schema}\".runs"), &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(count, 1);
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_newer_schema_is_refused() {
        with_schema(|admin, schema| async move {
            let url = postgres_url();
            drop(postgres_in(&url, &schema).await.unwrap());
            admin
                .batch_execute(&format!(
                    "UPDATE \"{schema}\".toolshed_meta SET value = '99' WHERE key = 'schema_version'"
                ))
                .await
                .unwrap();
            match postgres_in(&url, &schema).await {
                Err(e @ JournalError::Unavailable { .. }) => {
                    assert!(e.to_string().contains("schema version 99 is newer"), "{e}");
                }
                other => panic!("expected Unavailable, got {other:?}"),
            }
        })
        .await;
    }
}

async fn record_run_stores_a_finished_run_at_once(store: Store) {
    let j = store.open().await;
    let crumbs = vec![json!({"type": "tool:call"}), json!({"type": "tool:result"})];
    let run = j
        .record_run(
            tenant_run("once", "registry", "acme"),
            vec![(new_call("once", 0), ok(json!({"answer": 42})))],
            raw(crumbs.clone()),
            RunStatus::Completed,
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.resumes, 1);
    assert_eq!(run.tenant.as_deref(), Some("acme"));
    assert_eq!(j.get_run("once").await.unwrap(), run);
    let calls = j.calls_of_run("once").await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, CallStatus::Completed);
    assert_eq!(calls[0].result, Some(json!({"answer": 42})));
    let stored: Vec<Value> = j
        .crumbs_of_run("once")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.crumb)
        .collect();
    assert_eq!(stored, crumbs);
    // The same id again: a conflict, and nothing of the second attempt is stored.
    conflict(
        j.record_run(
            new_run("once"),
            vec![(new_call("once", 1), ok(json!(1)))],
            vec![],
            RunStatus::Completed,
        )
        .await,
    );
    assert_eq!(j.calls_of_run("once").await.unwrap().len(), 1);
    // A call id already used elsewhere: an error, and the run is never `completed`
    // (SQLite stores nothing; PostgreSQL leaves it `failed` with the reason).
    let mut reused = new_call("twice", 0);
    reused.call_id = "once-call-0".into();
    assert!(
        j.record_run(
            new_run("twice"),
            vec![(reused, ok(json!(1)))],
            vec![],
            RunStatus::Completed
        )
        .await
        .is_err()
    );
    match j.get_run("twice").await {
        Err(JournalError::NotFound { .. }) => {}
        Ok(run) => {
            assert_eq!(run.status, RunStatus::Failed);
            assert!(run.error.unwrap().contains("part-way"));
        }
        Err(other) => panic!("{other:?}"),
    }
}

// ---- retention: pruning finished runs, on both backends ----

mod retention {
    suite!(
        prune_removes_only_finished_runs_that_ended_before_the_cutoff,
        prune_never_removes_running_or_parked_runs,
        prune_works_in_bounded_batches_and_a_dry_run_counts_the_same,
        writes_during_a_prune_are_kept,
    );
}

/// A millisecond after `ms` has passed on the journal's clock.
async fn after(ms: i64) {
    wait_until("the clock to move past a run's end", || {
        toolshed_store::time::now_ms() > ms
    })
    .await;
}

/// A finished one-call run with two crumbs.
async fn finished_run(j: &dyn Journal, id: &str, status: RunStatus) -> RunRecord {
    let result = match status {
        RunStatus::Completed => ok(json!({"id": id})),
        _ => CallResult {
            result: Err(ToolError::new(ErrorCode::HandlerError, "boom")),
            duration_ms: 1.0,
            diagnostics: Diagnostics::default(),
        },
    };
    j.record_run(
        new_run(id),
        vec![(new_call(id, 0), result)],
        raw(vec![
            json!({"type": "tool:call"}),
            json!({"type": "tool:result"}),
        ]),
        status,
    )
    .await
    .unwrap()
}

/// `count` completed one-call runs `{prefix}00000`…, written by 16 tasks (so that they
/// share commits).
async fn finished_runs(j: &Arc<dyn Journal>, prefix: &str, count: u64) {
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let (j, prefix) = (Arc::clone(j), prefix.to_owned());
            tokio::spawn(async move {
                for i in (task..count).step_by(16) {
                    finished_run(j.as_ref(), &format!("{prefix}{i:05}"), RunStatus::Completed)
                        .await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

fn every_final_status_before(ms: i64) -> PruneRule {
    PruneRule {
        ended_before_ms: ms,
        statuses: PrunableStatus::ALL.to_vec(),
    }
}

#[track_caller]
fn assert_gone(result: Result<RunRecord, JournalError>, id: &str) {
    not_found(result, "run", id);
}

async fn prune_removes_only_finished_runs_that_ended_before_the_cutoff(store: Store) {
    let j = store.open().await;
    let done = finished_run(j.as_ref(), "done", RunStatus::Completed).await;
    let failed = finished_run(j.as_ref(), "failed", RunStatus::Failed).await;
    j.create_run(new_run("cancelled")).await.unwrap();
    j.open_call(new_call("cancelled", 0)).await.unwrap();
    let cancelled = j
        .set_run_status("cancelled", RunStatus::Cancelled, Some("by ops".into()))
        .await
        .unwrap();
    let cutoff = [&done, &failed, &cancelled]
        .iter()
        .map(|r| r.updated_at_ms)
        .max()
        .unwrap()
        + 1;
    after(cutoff).await;
    let late = finished_run(j.as_ref(), "late", RunStatus::Completed).await;
    assert!(late.updated_at_ms >= cutoff);

    // Only `failed` asked for: the other final runs stay.
    let only_failed = PruneRule {
        ended_before_ms: cutoff,
        statuses: vec![PrunableStatus::Failed],
    };
    assert_eq!(
        j.prune_batch(&only_failed, 100).await.unwrap().pruned,
        Pruned {
            runs: 1,
            calls: 1,
            ..Pruned::default()
        }
    );
    assert_gone(j.get_run("failed").await, "failed");
    not_found(j.calls_of_run("failed").await, "run", "failed");
    not_found(j.crumbs_of_run("failed").await, "run", "failed");
    assert!(j.get_run("done").await.is_ok());

    // Every final status: the two left before the cutoff go, the late one stays whole.
    let pruned = j
        .prune_batch(&every_final_status_before(cutoff), 100)
        .await
        .unwrap()
        .pruned;
    assert_eq!(
        pruned,
        Pruned {
            runs: 2,
            calls: 2,
            ..Pruned::default()
        }
    );
    assert_gone(j.get_run("done").await, "done");
    assert_gone(j.get_run("cancelled").await, "cancelled");
    not_found(j.get_call("done-call-0").await, "call", "done-call-0");
    assert_eq!(j.get_run("late").await.unwrap(), late);
    assert_eq!(j.calls_of_run("late").await.unwrap().len(), 1);
    assert_eq!(j.crumbs_of_run("late").await.unwrap().len(), 2);
    // Nothing left to prune before the cutoff; no status asked for removes nothing.
    assert_eq!(
        j.prune_batch(&every_final_status_before(cutoff), 100)
            .await
            .unwrap()
            .pruned,
        Pruned::default()
    );
    let none = PruneRule {
        ended_before_ms: i64::MAX,
        statuses: vec![],
    };
    assert_eq!(
        j.prune_batch(&none, 100).await.unwrap().pruned,
        Pruned::default()
    );
    assert!(j.get_run("late").await.is_ok());
}

async fn prune_never_removes_running_or_parked_runs(store: Store) {
    let j = store.open().await;
    // Running, with a started call; parked on an approval; parked on a human answer.
    j.create_run(new_run("running")).await.unwrap();
    j.open_and_start(new_call("running", 0)).await.unwrap();
    for (id, gate) in [("approval", approval()), ("answer", answer_gate())] {
        j.create_run(tenant_run(id, "agent-a", "acme"))
            .await
            .unwrap();
        j.open_call(new_call(id, 0)).await.unwrap();
        j.record_gate(&format!("{id}-call-0"), gate).await.unwrap();
        j.set_run_status(id, RunStatus::Parked, None).await.unwrap();
    }
    finished_run(j.as_ref(), "done", RunStatus::Completed).await;
    // A cutoff far in the future and every status a prune can name.
    let all = every_final_status_before(i64::MAX);
    assert_eq!(j.count_prunable(&all).await.unwrap().runs, 1);
    let report = toolshed_journal::prune(j.as_ref(), &all, PruneOptions::default())
        .await
        .unwrap();
    assert_eq!(
        report.pruned,
        Pruned {
            runs: 1,
            calls: 1,
            ..Pruned::default()
        }
    );
    assert_gone(j.get_run("done").await, "done");
    assert_eq!(
        j.get_run("running").await.unwrap().status,
        RunStatus::Running
    );
    assert_eq!(
        j.calls_of_run("running").await.unwrap()[0].status,
        CallStatus::Started
    );
    for id in ["approval", "answer"] {
        assert_eq!(j.get_run(id).await.unwrap().status, RunStatus::Parked);
    }
    let pending = j.pending_gates(&GateFilter::default()).await.unwrap();
    assert_eq!(
        pending.len(),
        2,
        "both parked calls still wait: {pending:?}"
    );
    // The parked call can still be decided and the run finished afterwards.
    j.decide("approval-call-0", decision(true, "alice", None))
        .await
        .unwrap();
    // The statuses a caller may name are only the final ones: no way to ask for more.
    for s in ["running", "parked", "RUNNING", ""] {
        assert_eq!(PrunableStatus::parse(s), None, "{s}");
    }
    assert_eq!(
        PrunableStatus::ALL.map(|s| s.run_status()),
        [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled
        ]
    );
}

async fn prune_works_in_bounded_batches_and_a_dry_run_counts_the_same(store: Store) {
    let j = store.open().await;
    let runs = 1_100_u64;
    finished_runs(&j, "r", runs).await;
    let rule = every_final_status_before(toolshed_store::time::now_ms() + 1);
    assert_eq!(
        j.count_prunable(&rule).await.unwrap(),
        Pruned {
            runs,
            calls: runs,
            ..Pruned::default()
        }
    );
    // One batch takes at most its limit.
    assert_eq!(j.prune_batch(&rule, 100).await.unwrap().pruned.runs, 100);
    // A budget no batch exceeds: batches grow from the first (50) to the most (500).
    let options = PruneOptions {
        batch_runs: 500,
        batch_budget: Duration::from_secs(3600),
        ..PruneOptions::default()
    };
    let report = toolshed_journal::prune(j.as_ref(), &rule, options)
        .await
        .unwrap();
    assert_eq!(
        report.pruned,
        Pruned {
            runs: runs - 100,
            calls: runs - 100,
            ..Pruned::default()
        }
    );
    // 1,000 runs: 50, then at most 500 a batch (500 and the last 450).
    assert_eq!(report.batches, 3);
    assert_eq!(j.count_prunable(&rule).await.unwrap(), Pruned::default());
    let listed = j
        .list_runs(&RunFilter {
            limit: 10,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    let space = report.space.expect("reclaimed");
    if store.is_sqlite() {
        assert_eq!(space.mode, SpaceMode::Incremental);
        assert_eq!(space.free_bytes, 0, "every free page returned: {space:?}");
    } else {
        assert_eq!(space.mode, SpaceMode::Managed);
    }
}

async fn writes_during_a_prune_are_kept(store: Store) {
    let j = store.open().await;
    finished_runs(&j, "old", 300).await;
    let cutoff = toolshed_store::time::now_ms() + 1;
    after(cutoff).await;
    let rule = every_final_status_before(cutoff);
    let options = PruneOptions {
        batch_runs: 50,
        ..PruneOptions::default()
    };
    let pruning = {
        let j = Arc::clone(&j);
        tokio::spawn(async move { toolshed_journal::prune(j.as_ref(), &rule, options).await })
    };
    // New runs of every kind while it prunes: finished, running, parked.
    for i in 0..60 {
        finished_run(j.as_ref(), &format!("new{i:03}"), RunStatus::Completed).await;
        let id = format!("live{i:03}");
        j.create_run(new_run(&id)).await.unwrap();
        j.open_and_start(new_call(&id, 0)).await.unwrap();
    }
    let report = pruning.await.unwrap().unwrap();
    assert_eq!(report.pruned.runs, 300);
    for i in 0..60 {
        assert_eq!(
            j.calls_of_run(&format!("new{i:03}")).await.unwrap().len(),
            1
        );
        assert_eq!(
            j.get_run(&format!("live{i:03}")).await.unwrap().status,
            RunStatus::Running
        );
    }
    assert_gone(j.get_run("old00000").await, "old00000");
}

/// SQLite returns the space of pruned runs to the file system.
mod sqlite_retention {
    use super::*;

    /// The size of the database file once its WAL is copied back in full.
    /// The file's size once the whole WAL is copied back into it. A checkpoint that a
    /// reader of the journal holds back reports itself busy: it is asked again until it
    /// completes (a busy one left part of the data in the WAL, and the file short).
    fn file_bytes(path: &std::path::Path) -> u64 {
        let conn = rusqlite::Connection::open(path).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (busy, log, done): (i64, i64, i64) = conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .unwrap();
            if busy == 0 && log == done {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the WAL of {} could not be checkpointed in 30 s",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::metadata(path).unwrap().len()
    }

    /// `runs` completed runs, each with a result and a crumb of 8 KiB, written by 16
    /// tasks (so that they share commits).
    async fn fill(j: &Arc<dyn Journal>, runs: usize) {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let tasks: Vec<_> = (0..16)
            .map(|task| {
                let (j, tag) = (Arc::clone(j), tag.clone());
                tokio::spawn(async move {
                    let payload = "x".repeat(8192);
                    for i in (task..runs).step_by(16) {
                        let id = format!("big-{tag}-{i:05}");
                        j.record_run(
                            new_run(&id),
                            vec![(new_call(&id, 0), ok(json!({"payload": payload})))],
                            raw(vec![json!({"type": "tool:result", "payload": payload})]),
                            RunStatus::Completed,
                        )
                        .await
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prune_of_many_runs_shrinks_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolshed.db");
        let j: Arc<dyn Journal> = Arc::new(sqlite_at(&path).await.unwrap());
        fill(&j, 1_000).await;
        j.create_run(new_run("still-running")).await.unwrap();
        let full = file_bytes(&path);
        assert!(full > 16 * 1024 * 1024, "{full} bytes");

        let rule = every_final_status_before(toolshed_store::time::now_ms() + 1);
        let report = toolshed_journal::prune(j.as_ref(), &rule, PruneOptions::default())
            .await
            .unwrap();
        assert_eq!(report.pruned.runs, 1_000);
        let space = report.space.unwrap();
        assert_eq!(space.mode, SpaceMode::Incremental);
        assert_eq!(space.free_bytes, 0);
        assert!(report.reclaimed_bytes > full / 2, "{report:?}");
        // The file itself shrank: to a small fraction of what it was.
        let pruned = file_bytes(&path);
        assert!(pruned < full / 8, "{full} bytes before, {pruned} after");
        assert_eq!(
            j.get_run("still-running").await.unwrap().status,
            RunStatus::Running
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_older_file_needs_one_vacuum_then_prunes_shrink_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toolshed.db");
        {
            // A file made before toolshed set `auto_vacuum`: a table exists already.
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE toolshed_meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL) STRICT",
            )
            .unwrap();
        }
        let j: Arc<dyn Journal> = Arc::new(sqlite_at(&path).await.unwrap());
        fill(&j, 600).await;
        let full = file_bytes(&path);
        let rule = every_final_status_before(toolshed_store::time::now_ms() + 1);
        let report = toolshed_journal::prune(j.as_ref(), &rule, PruneOptions::default())
            .await
            .unwrap();
        assert_eq!(report.pruned.runs, 600);
        let space = report.space.unwrap();
        assert_eq!(space.mode, SpaceMode::VacuumNeeded);
        assert_eq!(report.reclaimed_bytes, 0);
        assert!(space.free_bytes > full / 2, "{space:?}");
        assert!(
            file_bytes(&path) >= full,
            "nothing returned without the vacuum"
        );

        let space = j.vacuum().await.unwrap();
        assert_eq!(space.mode, SpaceMode::Incremental);
        assert_eq!(space.free_bytes, 0);
        assert!(file_bytes(&path) < full / 4);
        // From now on a prune returns space by itself.
        fill(&j, 300).await;
        let grown = file_bytes(&path);
        let rule = every_final_status_before(toolshed_store::time::now_ms() + 1);
        let report = toolshed_journal::prune(j.as_ref(), &rule, PruneOptions::default())
            .await
            .unwrap();
        assert_eq!(report.space.unwrap().mode, SpaceMode::Incremental);
        assert!(file_bytes(&path) < grown / 4);
    }
}
