//! What a prune removes beside runs (migration 7), on SQLite and on PostgreSQL: the
//! attachments of the runs it removes (their pages with them), the attachments of
//! sessions that have no run left, and ended background runs whose run is gone; the
//! blobs no attachment names any more are reported, and nothing a kept run or session
//! still uses goes. A dry run counts the same.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use toolshed_core::{AttachmentScope, PageRequest};
use toolshed_journal::process_runs::{
    Inserted, NewProcessRun, ProcessEnd, ProcessRuns, ProcessStatus,
};
use toolshed_journal::{
    Attachments, Budgets, CallResult, Journal, NewAttachment, NewCall, NewPage, NewPageContent,
    NewRun, PrunableStatus, PruneOptions, PruneRule, Pruned, RunStatus, SqlJournal,
};
use toolshed_store::testing::{Scratch, on_postgres, on_sqlite};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    on_sqlite(a_prune_takes_what_the_runs_it_removes_leave_behind).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    on_postgres(a_prune_takes_what_the_runs_it_removes_leave_behind).await;
}

fn blob(n: u8) -> String {
    format!("blob:sha256:{}", format!("{n:02x}").repeat(32))
}

fn attachment(id: &str, run: Option<&str>, session: Option<&str>, blob_n: u8) -> NewAttachment {
    NewAttachment {
        id: id.into(),
        tenant: Some("acme".into()),
        run_id: run.map(Into::into),
        session_id: session.map(Into::into),
        filename: format!("{id}.txt"),
        kind: "text".into(),
        unit: "chars".into(),
        media_type: "text/plain".into(),
        size_bytes: 5,
        sha256: format!("{blob_n:02x}").repeat(32),
        blob_uri: blob(blob_n),
        uploaded_by: None,
    }
}

fn page(text: &str) -> Vec<NewPage> {
    vec![NewPage {
        content: NewPageContent::Text(text.into()),
        sheet: None,
    }]
}

/// A completed one-call run `id` of session `session`.
async fn run(j: &dyn Journal, id: &str, session: &str, status: RunStatus) {
    j.record_run(
        NewRun {
            id: id.into(),
            agent_id: "agent-a".into(),
            session_id: session.into(),
            principal: None,
            budgets: Budgets::default(),
            driver: json!({"kind": "direct", "tool": "echo"}),
        },
        vec![(
            NewCall {
                call_id: format!("{id}-call-0"),
                run_id: id.into(),
                ordinal: 0,
                tool_call_id: "toolu_0".into(),
                tool: "echo".into(),
                args_hash: "h".into(),
                args: json!({}),
            },
            CallResult {
                result: Ok(json!({"ok": true})),
                duration_ms: 1.0,
                diagnostics: Default::default(),
            },
        )],
        vec![],
        status,
    )
    .await
    .unwrap();
}

async fn process(store: &ProcessRuns, id: &str, run_id: &str, ended: bool) {
    let Inserted::New(_) = store
        .insert(NewProcessRun {
            id: id.into(),
            tenant: "acme".into(),
            agent: "agent-a".into(),
            run_id: run_id.into(),
            session_id: "s".into(),
            process: "train".into(),
            args: json!({}),
            state_dir: format!("/nowhere/{id}"),
            host: "worker-1".into(),
            boot_id: "boot-1".into(),
        })
        .await
        .unwrap()
    else {
        panic!("{id} is new");
    };
    store.mark_running(id, 1, 1, 1).await.unwrap();
    if ended {
        store
            .finish(
                id,
                ProcessEnd {
                    status: ProcessStatus::Exited,
                    exit_code: Some(0),
                    signal: None,
                    message: None,
                    ended_at: 2,
                },
            )
            .await
            .unwrap();
    }
}

async fn exists(a: &Attachments, id: &str) -> bool {
    a.get(Some("acme"), id).await.is_ok()
}

async fn a_prune_takes_what_the_runs_it_removes_leave_behind(scratch: Scratch) {
    let location = scratch.location();
    let j = SqlJournal::open(&location).await.unwrap();
    let a = Attachments::open_at(&location).await.unwrap();
    let p = ProcessRuns::open_at(&location).await.unwrap();

    // `old` (to be pruned) and `kept` (running) share session `shared`; `lone` is
    // pruned and alone in `solo`.
    run(&j, "old", "shared", RunStatus::Completed).await;
    run(&j, "lone", "solo", RunStatus::Failed).await;
    j.create_run(NewRun {
        id: "kept".into(),
        agent_id: "agent-a".into(),
        session_id: "shared".into(),
        principal: None,
        budgets: Budgets::default(),
        driver: json!({"kind": "direct"}),
    })
    .await
    .unwrap();
    // Attachments: of `old` (blob 1, also named by `kept`'s: it stays), of `old` alone
    // (blob 2: released), of `kept` (blob 1), of session `shared` (a run is left: kept),
    // of session `solo` (its one run goes: removed, blob 3 released), of session
    // `never` (no run ever: removed, but blob 2 is reported once), of a run that does
    // not exist (removed, blob 5 released).
    for (id, run_id, session, blob_n) in [
        ("att_old_shared_blob", Some("old"), None, 1),
        ("att_old", Some("old"), None, 2),
        ("att_kept", Some("kept"), None, 1),
        ("att_session_shared", None, Some("shared"), 4),
        ("att_session_solo", None, Some("solo"), 3),
        ("att_session_never", None, Some("never"), 2),
        ("att_no_such_run", Some("no-such-run"), None, 5),
    ] {
        a.insert(attachment(id, run_id, session, blob_n), page(id))
            .await
            .unwrap();
    }
    // Background runs: `old`'s ended one goes, `old`'s running one stays until it ends;
    // `kept`'s ended one stays with its run.
    process(&p, "proc_old_ended", "old", true).await;
    process(&p, "proc_old_running", "old", false).await;
    process(&p, "proc_kept_ended", "kept", true).await;

    let cutoff = toolshed_store::time::now_ms() + 1;
    while toolshed_store::time::now_ms() < cutoff {
        tokio::task::yield_now().await;
    }
    let rule = PruneRule {
        ended_before_ms: cutoff,
        statuses: PrunableStatus::ALL.to_vec(),
    };
    let expected = Pruned {
        runs: 2,
        calls: 2,
        attachments: 5,
        process_runs: 1,
    };
    // A rule naming no status removes nothing, leftovers included.
    let none = PruneRule {
        ended_before_ms: cutoff,
        statuses: vec![],
    };
    assert_eq!(j.count_prunable(&none).await.unwrap(), Pruned::default());
    let nothing = j.prune_batch(&none, 100).await.unwrap();
    assert_eq!(nothing.pruned, Pruned::default());
    assert!(nothing.released_blobs.is_empty());
    assert!(exists(&a, "att_session_never").await);
    assert_eq!(j.count_prunable(&rule).await.unwrap(), expected);
    let report = toolshed_journal::prune(&j, &rule, PruneOptions::default())
        .await
        .unwrap();
    assert_eq!(report.pruned, expected);
    let mut released = report.released_blobs.clone();
    released.sort();
    assert_eq!(
        released,
        [blob(2), blob(3), blob(5)],
        "blob 1 is still named by att_kept"
    );

    for gone in [
        "att_old_shared_blob",
        "att_old",
        "att_session_solo",
        "att_session_never",
        "att_no_such_run",
    ] {
        assert!(!exists(&a, gone).await, "{gone} must be removed");
    }
    for stays in ["att_kept", "att_session_shared"] {
        assert!(exists(&a, stays).await, "{stays} must stay");
    }
    // A removed attachment's pages are gone too: reading one finds nothing.
    let scope = AttachmentScope {
        tenant: Some("acme".into()),
        run_id: "old".into(),
        session_id: "shared".into(),
    };
    assert!(
        a.read_page(&scope, "att_old", PageRequest::Page(1))
            .await
            .is_err()
    );
    let kept_page = a
        .read_page(
            &AttachmentScope {
                run_id: "kept".into(),
                ..scope.clone()
            },
            "att_kept",
            PageRequest::Page(1),
        )
        .await
        .unwrap();
    assert_eq!(kept_page.text.as_deref(), Some("att_kept"));

    let owned = |id: &'static str| p.get("acme", "agent-a", id);
    assert!(owned("proc_old_ended").await.unwrap().is_none());
    assert!(owned("proc_old_running").await.unwrap().is_some());
    assert!(owned("proc_kept_ended").await.unwrap().is_some());

    // The background run that outlived its run ends; the next prune removes it.
    p.finish(
        "proc_old_running",
        ProcessEnd {
            status: ProcessStatus::Exited,
            exit_code: Some(0),
            signal: None,
            message: None,
            ended_at: 3,
        },
    )
    .await
    .unwrap();
    let orphan = Pruned {
        process_runs: 1,
        ..Pruned::default()
    };
    assert_eq!(j.count_prunable(&rule).await.unwrap(), orphan);
    let again = toolshed_journal::prune(&j, &rule, PruneOptions::default())
        .await
        .unwrap();
    assert_eq!(again.pruned, orphan);
    assert!(again.released_blobs.is_empty());
    assert!(owned("proc_old_running").await.unwrap().is_none());
    assert!(owned("proc_kept_ended").await.unwrap().is_some());
    assert!(exists(&a, "att_session_shared").await);
}
