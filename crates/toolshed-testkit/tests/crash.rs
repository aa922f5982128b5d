//! The crash test: a run of 200 keyed calls, its driver killed with SIGKILL at random
//! moments and restarted until the run completes, on SQLite and on PostgreSQL.
//!
//! Afterwards: every call has exactly one recorded result; every line the handler
//! wrote (one per execution, fsync'd) has a recorded attempt; no call executed more
//! often than its `max_attempts`.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use toolshed_journal::{CallStatus, Journal, RunStatus};
use toolshed_testkit::MAX_ATTEMPTS;

const CALLS: u32 = 200;

/// A small deterministic generator for kill delays, seeded from the clock (the seed is
/// printed so a failing schedule can be replayed by hand).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn crash_until_done(url: &str, schema: &str, run_id: &str, ledger: &std::path::Path) -> u32 {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = Rng(seed);
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut kills = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "the run did not complete within 4 minutes ({kills} kills)"
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed-crash-driver"))
            .args([
                url,
                schema,
                run_id,
                ledger.to_str().unwrap(),
                &CALLS.to_string(),
            ])
            .spawn()
            .unwrap();
        // Kill at a random moment; a start that finishes the run before its moment ends
        // the loop. The window widens with every kill (up to 2 s), so the run completes
        // even on a loaded machine where one start takes longer than the first windows.
        let window = (60 + 5 * u64::from(kills)).min(2_000);
        let delay = Duration::from_millis(2 + rng.next() % window);
        let waited = Instant::now();
        while waited.elapsed() < delay {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        match child.try_wait().unwrap() {
            Some(status) => {
                assert!(status.success(), "the driver failed on its own: {status}");
                return kills;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
            }
        }
    }
}

async fn verify(journal: Arc<dyn Journal>, run_id: &str, ledger: &std::path::Path, kills: u32) {
    let run = journal.get_run(run_id).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let calls = journal.calls_of_run(run_id).await.unwrap();
    assert_eq!(
        calls.len(),
        CALLS as usize,
        "every call has exactly one record"
    );
    let mut ordinals: Vec<u32> = calls.iter().map(|c| c.ordinal).collect();
    ordinals.sort_unstable();
    assert_eq!(ordinals, (0..CALLS).collect::<Vec<_>>());
    for c in &calls {
        assert!(
            matches!(c.status, CallStatus::Completed | CallStatus::Failed),
            "call {} is {:?}",
            c.ordinal,
            c.status
        );
        assert!(
            c.result.is_some() != c.error.is_some(),
            "call {} has exactly one of result and error",
            c.ordinal
        );
        if let Some(e) = &c.error {
            assert_eq!(
                e.code,
                toolshed_core::ErrorCode::AttemptsExhausted,
                "call {}: {e:?}",
                c.ordinal
            );
        }
    }
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let mut executions: HashMap<u32, u32> = HashMap::new();
    for line in text.lines() {
        let (i, key) = line.split_once(' ').unwrap();
        let i: u32 = i.parse().unwrap();
        assert_eq!(
            key,
            format!("{run_id}:{i}"),
            "the handler got the call's key"
        );
        *executions.entry(i).or_default() += 1;
    }
    let by_ordinal: HashMap<u32, _> = calls.iter().map(|c| (c.ordinal, c)).collect();
    for (i, n) in &executions {
        let c = by_ordinal[i];
        assert!(
            *n <= c.attempts,
            "call {i} executed {n} times but {} attempts are recorded",
            c.attempts
        );
        assert!(
            *n <= MAX_ATTEMPTS,
            "call {i} executed {n} times, over max_attempts {MAX_ATTEMPTS}"
        );
    }
    let completed = calls
        .iter()
        .filter(|c| c.status == CallStatus::Completed)
        .count();
    for c in calls.iter().filter(|c| c.status == CallStatus::Completed) {
        assert!(
            executions.get(&c.ordinal).copied().unwrap_or(0) >= 1,
            "completed call {} never executed",
            c.ordinal
        );
    }
    eprintln!(
        "{kills} kills; {completed} calls completed, {} failed closed; {} executions for {CALLS} calls",
        CALLS as usize - completed,
        text.lines().count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/journal.db", dir.path().display());
    let ledger = dir.path().join("ledger.txt");
    let kills = tokio::task::spawn_blocking({
        let (url, ledger) = (url.clone(), ledger.clone());
        move || crash_until_done(&url, "-", "crash-run", &ledger)
    })
    .await
    .unwrap();
    let journal = toolshed_journal::open(&url).await.unwrap();
    verify(journal, "crash-run", &ledger, kills).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_sigkill() {
    let url = std::env::var("TOOLSHED_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!(
        "crash_{}_{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let journal = toolshed_journal::open_in_schema(&url, &schema).await.unwrap_or_else(|e| {
        panic!("PostgreSQL is needed ({e}); start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`")
    });
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let kills = tokio::task::spawn_blocking({
        let (url, schema, ledger) = (url.clone(), schema.clone(), ledger.clone());
        move || crash_until_done(&url, &schema, "crash-run", &ledger)
    })
    .await
    .unwrap();
    let outcome =
        tokio::spawn(async move { verify(journal, "crash-run", &ledger, kills).await }).await;
    if let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
