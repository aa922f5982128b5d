//! Sandboxes starting while the same process spawns plain subprocesses.
//!
//! A sandbox's first process is a clone of the supervisor, fd table and all. std's
//! `Command::spawn` waits for EOF on a close-on-exec error pipe, so a clone made while
//! another thread is inside a spawn holds a copy of that pipe's write end. A clone that
//! kept it while waiting for "go" from the thread blocked in that spawn would wait for
//! ever, and so would the spawn: on a current-thread runtime, the whole supervisor. The
//! clone now closes every fd it does not use as its first step.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{out, sandbox, sh, show};
use toolshed_sandbox::{Exit, LimitsRequest};

/// How long the whole test may take before it is called a deadlock (it takes about a
/// second when nothing hangs).
const HANG: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "current_thread")]
async fn plain_spawns_on_the_runtime_thread_never_wait_for_a_starting_sandbox() {
    // A deadlock blocks this thread for good: a watchdog ends the test binary with a
    // message instead of letting it hang.
    let (finished, watch) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if watch.recv_timeout(HANG) == Err(mpsc::RecvTimeoutError::Timeout) {
            eprintln!(
                "deadlock: a plain spawn on the runtime thread and a starting sandbox waited \
                 for each other for {HANG:?}"
            );
            std::process::exit(101);
        }
    });

    let sb = sandbox();
    for round in 0..25 {
        // Four sandboxes start on this thread's runtime: each hands its clone to the
        // spawner thread and waits for it ...
        let runs: Vec<_> = (0..4)
            .map(|i| {
                let sb = sb.clone();
                tokio::spawn(async move {
                    sb.run(
                        sh(&format!("echo {round}-{i}"), LimitsRequest::default()),
                        Vec::new(),
                    )
                    .await
                })
            })
            .collect();
        // ... while this thread spawns plain processes, blocking inside each spawn, with
        // a yield in between so the sandboxes' tasks get to send their clones.
        for _ in 0..8 {
            // A program found through a PATH the command sets makes std fork and exec
            // with its close-on-exec error pipe (as a `pre_exec` hook does, which the
            // dispatch layer's launcher uses), rather than `posix_spawn`, which has no
            // such pipe.
            let status = std::process::Command::new("true")
                .env("PATH", "/usr/bin:/bin")
                .status()
                .unwrap();
            assert!(status.success());
            tokio::task::yield_now().await;
        }
        for (i, run) in runs.into_iter().enumerate() {
            let o = run.await.unwrap().unwrap();
            assert_eq!(o.exit, Exit::Code(0), "{}", show(&o));
            assert_eq!(out(&o), format!("{round}-{i}\n"));
        }
    }
    let _ = finished.send(());
}
