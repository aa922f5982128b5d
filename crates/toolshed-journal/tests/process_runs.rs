//! The background runs' store (`process_runs`, migration 5), one behavioural suite on
//! SQLite and on PostgreSQL: a start recorded once, the transitions the table allows,
//! a final status never changed, and a run read only by its own tenant and agent.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use toolshed_journal::process_runs::{
    Inserted, NewProcessRun, ProcessEnd, ProcessRuns, ProcessStatus,
};
use toolshed_store::testing::{Scratch, on_postgres, on_sqlite};

fn new(id: &str, tenant: &str, agent: &str) -> NewProcessRun {
    NewProcessRun {
        id: id.into(),
        tenant: tenant.into(),
        agent: agent.into(),
        run_id: "run-1".into(),
        session_id: "session-1".into(),
        process: "train".into(),
        args: json!({"epochs": 3, "name": "$(id)"}),
        state_dir: format!("/var/lib/toolshed/processes/{id}"),
        host: "worker-1".into(),
        boot_id: "boot-1".into(),
    }
}

fn end(status: ProcessStatus, exit_code: Option<i32>) -> ProcessEnd {
    ProcessEnd {
        status,
        exit_code,
        signal: None,
        message: Some("why".into()),
        ended_at: 2_000,
    }
}

/// The ids of `run-1`'s background runs that are not final.
async fn unfinished(store: &ProcessRuns) -> Vec<String> {
    store
        .unfinished_of_run("run-1")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect()
}

async fn a_run_is_recorded_once_and_moves_only_forward(scratch: Scratch) {
    let store = ProcessRuns::open_at(&scratch.location()).await.unwrap();
    let Inserted::New(first) = store.insert(new("p1", "default", "a")).await.unwrap() else {
        panic!("the first insert must record the run");
    };
    assert_eq!(first.status, ProcessStatus::Starting);
    assert_eq!(
        (first.host.as_deref(), first.boot_id.as_deref()),
        (Some("worker-1"), Some("boot-1"))
    );
    assert_eq!(first.args, json!({"epochs": 3, "name": "$(id)"}));
    // A resumed call starting the same run finds it instead of starting another.
    let Inserted::Existing(again) = store.insert(new("p1", "default", "a")).await.unwrap() else {
        panic!("a second insert of the id must find the first");
    };
    assert_eq!(again, first);
    assert_eq!(unfinished(&store).await, ["p1"]);
    assert!(store.unfinished_of_run("run-2").await.unwrap().is_empty());

    let running = store
        .mark_running("p1", 4242, 987_654, 1_500)
        .await
        .unwrap();
    assert_eq!(running.status, ProcessStatus::Running);
    assert_eq!(running.supervisor_pid, Some(4242));
    assert_eq!(running.supervisor_start, Some(987_654));
    assert_eq!(running.started_at, Some(1_500));

    let exited = store
        .finish("p1", end(ProcessStatus::Exited, Some(3)))
        .await
        .unwrap();
    assert_eq!(exited.status, ProcessStatus::Exited);
    assert_eq!(exited.exit_code, Some(3));
    assert_eq!(exited.ended_at, Some(2_000));

    // Final is final: a late `lost` from another checker and a late `running` change nothing.
    let late = store
        .finish("p1", end(ProcessStatus::Lost, None))
        .await
        .unwrap();
    assert_eq!(late, exited);
    let late = store.mark_running("p1", 1, 1, 3_000).await.unwrap();
    assert_eq!(late, exited);

    // A run that never reached running may be lost or failed straight from starting.
    store.insert(new("p2", "default", "a")).await.unwrap();
    let failed = store
        .finish("p2", end(ProcessStatus::Failed, None))
        .await
        .unwrap();
    assert_eq!(failed.status, ProcessStatus::Failed);
    assert_eq!(failed.message.as_deref(), Some("why"));
    assert!(unfinished(&store).await.is_empty(), "both ended");

    // A running run stopped (`stop_run`) is final as well: the exit its supervisor
    // reports afterwards changes nothing.
    store.insert(new("p3", "default", "a")).await.unwrap();
    store.mark_running("p3", 4243, 1, 1_600).await.unwrap();
    let stopped = store
        .finish("p3", end(ProcessStatus::Stopped, None))
        .await
        .unwrap();
    assert_eq!(stopped.status, ProcessStatus::Stopped);
    assert_eq!(stopped.status.as_str(), "stopped");
    let late = store
        .finish("p3", end(ProcessStatus::Exited, Some(0)))
        .await
        .unwrap();
    assert_eq!(late, stopped);

    // `running` is not an end.
    assert!(
        store
            .finish("p2", end(ProcessStatus::Running, None))
            .await
            .is_err()
    );
    // An unknown id is NOT_FOUND.
    let e = store.mark_running("nope", 1, 1, 1).await.unwrap_err();
    assert_eq!(e.code().as_str(), "NOT_FOUND");
}

async fn a_run_is_read_only_by_its_own_tenant_and_agent(scratch: Scratch) {
    let store = ProcessRuns::open_at(&scratch.location()).await.unwrap();
    store.insert(new("mine", "t1", "agent-a")).await.unwrap();
    store.insert(new("theirs", "t2", "agent-a")).await.unwrap();
    store.insert(new("sibling", "t1", "agent-b")).await.unwrap();
    assert_eq!(
        store
            .get("t1", "agent-a", "mine")
            .await
            .unwrap()
            .unwrap()
            .id,
        "mine"
    );
    assert_eq!(store.get("t1", "agent-a", "theirs").await.unwrap(), None);
    assert_eq!(store.get("t1", "agent-a", "sibling").await.unwrap(), None);
    assert_eq!(store.get("t1", "agent-a", "unknown").await.unwrap(), None);
    let listed: Vec<String> = store
        .list("t1", "agent-a", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(listed, ["mine"]);
}

#[test]
fn the_transition_table_allows_only_forward_moves() {
    use ProcessStatus::*;
    for s in [Starting, Running, Exited, Failed, Lost, Stopped] {
        for from in s.allowed_from() {
            assert!(!from.is_final(), "{s} may not follow the final {from}");
        }
    }
    assert!(Starting.allowed_from().is_empty());
}

mod sqlite {
    use super::*;

    #[tokio::test]
    async fn a_run_is_recorded_once_and_moves_only_forward() {
        on_sqlite(super::a_run_is_recorded_once_and_moves_only_forward).await;
    }

    #[tokio::test]
    async fn a_run_is_read_only_by_its_own_tenant_and_agent() {
        on_sqlite(super::a_run_is_read_only_by_its_own_tenant_and_agent).await;
    }

    #[tokio::test]
    async fn the_journal_and_the_process_runs_share_one_file() {
        on_sqlite(|scratch| async move {
            let Scratch::Sqlite { path, .. } = &scratch else {
                unreachable!()
            };
            let url = format!("sqlite://{}", path.display());
            let journal = toolshed_journal::open(&url).await.unwrap();
            let store = ProcessRuns::open(&url).await.unwrap();
            store.insert(new("p", "default", "a")).await.unwrap();
            drop(journal);
            let reopened = ProcessRuns::open(&url).await.unwrap();
            assert!(reopened.get("default", "a", "p").await.unwrap().is_some());
        })
        .await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test]
    async fn a_run_is_recorded_once_and_moves_only_forward() {
        on_postgres(super::a_run_is_recorded_once_and_moves_only_forward).await;
    }

    #[tokio::test]
    async fn a_run_is_read_only_by_its_own_tenant_and_agent() {
        on_postgres(super::a_run_is_read_only_by_its_own_tenant_and_agent).await;
    }
}
