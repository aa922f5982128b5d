//! The crash test: a run of 200 keyed calls, its driver killed with SIGKILL and restarted
//! until the run completes, on SQLite and on PostgreSQL. Every other kill waits until a
//! handler is between its `start` and `end` ledger lines (so inside its call's
//! Started → Completed window); the others come at a random moment (start-up, replay,
//! a journal write, between calls).
//!
//! Afterwards: at least `MIN_KILLS` kills happened, `MIN_IN_HANDLER` of them inside a
//! handler, each one a real SIGKILL; every call has exactly one recorded outcome; each
//! recorded result is the one its args and key give; every execution the ledger shows
//! has a recorded attempt; no call executed more often than its `max_attempts`.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolshed_journal::{CallStatus, Journal, RunStatus};
use toolshed_testkit::MAX_ATTEMPTS;

const CALLS: u32 = 200;
/// Kills wanted before the run may complete.
const MIN_KILLS: u32 = 12;
/// Of those, kills that landed while a handler was running.
const MIN_IN_HANDLER: u32 = 6;
const SIGKILL: i32 = 9;

/// A small deterministic generator for kill moments, seeded from the clock (the seed is
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

/// What the kill loop did.
#[derive(Debug, Default, Clone, Copy)]
struct Kills {
    /// SIGKILLs that ended a running driver.
    total: u32,
    /// Of those, the ones after a handler's `start` line and before its `end` line.
    in_handler: u32,
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Start { i: u32, key: String },
    End { i: u32, key: String },
}

/// The ledger's complete lines (a line cut by a kill in the middle of its write would
/// have no newline yet; it is not a record).
fn ledger(path: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete
        .lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let (Some(kind), Some(i), Some(key), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                panic!("a ledger line that is not `start|end I KEY`: {line:?}");
            };
            let i: u32 = i.parse().unwrap();
            let key = key.to_owned();
            match kind {
                "start" => Entry::Start { i, key },
                "end" => Entry::End { i, key },
                other => panic!("a ledger line of unknown kind {other:?}: {line:?}"),
            }
        })
        .collect()
}

fn starts(entries: &[Entry]) -> usize {
    entries
        .iter()
        .filter(|e| matches!(e, Entry::Start { .. }))
        .count()
}

/// When to kill the driver in one round.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// Once the driver has begun `nth` handlers since it started and one is running.
    InHandler { nth: usize },
    /// This long after the driver started.
    After(Duration),
}

fn crash_until_done(url: &str, schema: &str, run_id: &str, ledger_path: &Path) -> Kills {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = Rng(seed);
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut kills = Kills::default();
    for round in 0u64.. {
        assert!(
            Instant::now() < deadline,
            "the run did not complete within 4 minutes ({kills:?})"
        );
        let enough = kills.total >= MIN_KILLS && kills.in_handler >= MIN_IN_HANDLER;
        let before = ledger(ledger_path);
        let (lines_before, starts_before) = (before.len(), starts(&before));
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed-crash-driver"))
            .args([
                url,
                schema,
                run_id,
                ledger_path.to_str().unwrap(),
                &CALLS.to_string(),
            ])
            .spawn()
            .unwrap();
        let moment = if enough {
            None
        } else if round % 2 == 0 {
            Some(Moment::InHandler {
                nth: 1 + (rng.next() % 4) as usize,
            })
        } else {
            Some(Moment::After(Duration::from_millis(2 + rng.next() % 60)))
        };
        // Wait for the moment (polling with the deadline), or for the driver to end.
        let spawned = Instant::now();
        let exited = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            assert!(
                Instant::now() < deadline,
                "the run did not complete within 4 minutes ({kills:?})"
            );
            let due = match moment {
                None => false,
                Some(Moment::After(delay)) => spawned.elapsed() >= delay,
                Some(Moment::InHandler { nth }) => {
                    let entries = ledger(ledger_path);
                    starts(&entries) >= starts_before + nth
                        && matches!(entries.last(), Some(Entry::Start { .. }))
                }
            };
            if due {
                break None;
            }
            std::thread::sleep(Duration::from_micros(500));
        };
        if let Some(status) = exited {
            assert!(status.success(), "the driver failed on its own: {status}");
            return kills;
        }
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        if status.signal() != Some(SIGKILL) {
            // It finished by itself just before the kill.
            assert!(status.success(), "the driver failed on its own: {status}");
            return kills;
        }
        kills.total += 1;
        // Inside a handler: the last line is a start this driver wrote (not one left by
        // an earlier kill).
        let after = ledger(ledger_path);
        if after.len() > lines_before && matches!(after.last(), Some(Entry::Start { .. })) {
            kills.in_handler += 1;
        }
    }
    unreachable!("the rounds never end by themselves")
}

/// The args of call `i`, as the driver sends them.
fn args_of(i: u32) -> Value {
    json!({"i": i, "text": format!("call number {i}")})
}

/// What the handler of call `i` returns, recomputed here from its args and key.
fn expected_result(run_id: &str, i: u32) -> Value {
    json!({
        "i": i,
        "square": u64::from(i) * u64::from(i),
        "shout": format!("CALL NUMBER {i}"),
        "key": format!("{run_id}:{i}"),
    })
}

async fn verify(journal: Arc<dyn Journal>, run_id: &str, ledger_path: &Path, kills: Kills) {
    eprintln!("{kills:?}");
    assert!(
        kills.total >= MIN_KILLS,
        "only {} kills before the run completed; the test wants {MIN_KILLS}",
        kills.total
    );
    assert!(
        kills.in_handler >= MIN_IN_HANDLER,
        "only {} kills landed inside a handler; the test wants {MIN_IN_HANDLER}",
        kills.in_handler
    );

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
        let i = c.ordinal;
        assert_eq!(c.tool, "work", "call {i}");
        assert_eq!(c.args, args_of(i), "call {i} recorded other args");
        match c.status {
            CallStatus::Completed => {
                assert!(c.error.is_none(), "call {i}: {c:?}");
                assert_eq!(
                    c.result.as_ref(),
                    Some(&expected_result(run_id, i)),
                    "call {i} recorded a result that is not its own"
                );
            }
            CallStatus::Failed => {
                assert!(c.result.is_none(), "call {i}: {c:?}");
                let e = c.error.as_ref().unwrap();
                assert_eq!(
                    e.code,
                    toolshed_core::ErrorCode::AttemptsExhausted,
                    "call {i}: {e:?}"
                );
                assert_eq!(c.attempts, MAX_ATTEMPTS, "call {i} failed closed early");
            }
            other => panic!("call {i} is {other:?}"),
        }
    }

    // The ledger: every execution has a start; an execution cut by a kill has no end.
    let entries = ledger(ledger_path);
    let mut executions: HashMap<u32, u32> = HashMap::new();
    let mut finished: HashMap<u32, u32> = HashMap::new();
    let mut cut = 0;
    for (n, entry) in entries.iter().enumerate() {
        match entry {
            Entry::Start { i, key } => {
                assert_eq!(
                    key,
                    &format!("{run_id}:{i}"),
                    "the handler got the call's key"
                );
                *executions.entry(*i).or_default() += 1;
                if !matches!(entries.get(n + 1), Some(Entry::End { i: j, .. }) if j == i) {
                    cut += 1;
                }
            }
            Entry::End { i, key } => {
                assert_eq!(
                    key,
                    &format!("{run_id}:{i}"),
                    "the handler got the call's key"
                );
                assert!(
                    n > 0
                        && entries[n - 1]
                            == Entry::Start {
                                i: *i,
                                key: key.clone()
                            },
                    "line {n}: the end of call {i} does not follow its start"
                );
                *finished.entry(*i).or_default() += 1;
            }
        }
    }
    assert_eq!(
        cut, kills.in_handler,
        "each kill inside a handler left exactly one execution without its end"
    );
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
    let completed: Vec<_> = calls
        .iter()
        .filter(|c| c.status == CallStatus::Completed)
        .collect();
    for c in &completed {
        assert!(
            finished.get(&c.ordinal).copied().unwrap_or(0) >= 1,
            "completed call {} never finished an execution",
            c.ordinal
        );
    }
    eprintln!(
        "{} kills ({} inside a handler); {} calls completed, {} failed closed; {} executions for {CALLS} calls",
        kills.total,
        kills.in_handler,
        completed.len(),
        CALLS as usize - completed.len(),
        starts(&entries)
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
    let outcome = tokio::spawn({
        let (url, schema, ledger) = (url.clone(), schema.clone(), ledger.clone());
        async move {
            let kills = tokio::task::spawn_blocking({
                let ledger = ledger.clone();
                move || crash_until_done(&url, &schema, "crash-run", &ledger)
            })
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            verify(journal, "crash-run", &ledger, kills).await
        }
    })
    .await;
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
