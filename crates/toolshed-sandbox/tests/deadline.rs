//! Escaping the deadline: sleeping past it, daemons, double forks and `setsid`
//! escapees all die with the call (the host's process table shows none of them), and
//! when the supervisor itself is SIGKILLed, its sandbox dies too.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{out, run, sandbox, sh, show, sleeping, unique, wait_for};
use toolshed_sandbox::{Exit, KillReason, LimitsRequest};

#[tokio::test]
async fn sleeping_past_the_deadline_is_killed() {
    let sb = sandbox();
    let marker = unique();
    let o = run(
        &sb,
        sh(
            &format!("echo started; exec sleep {marker}"),
            LimitsRequest {
                timeout_ms: Some(500),
                ..Default::default()
            },
        ),
    )
    .await;
    assert!(o.timed_out, "{}", show(&o));
    assert_eq!(o.killed, Some(KillReason::Timeout));
    assert_eq!(o.exit, Exit::Signal(9), "{}", show(&o));
    assert_eq!(out(&o), "started\n");
    assert!(sleeping(marker).is_empty());
}

/// The tool starts an escapee that signals it is running (a file in /work), waits for
/// that, prints `ok` and exits at once; the call must leave nothing behind.
async fn escapee_dies_with_the_call(start: &str) {
    let sb = sandbox();
    let marker = unique();
    let escapee = format!("sh -c 'touch /work/up; exec sleep {marker}'");
    let script = format!(
        "{}\nwhile [ ! -e /work/up ]; do :; done\necho ok",
        start.replace("ESCAPEE", &escapee)
    );
    let o = run(
        &sb,
        sh(
            &script,
            LimitsRequest {
                timeout_ms: Some(20_000),
                ..Default::default()
            },
        ),
    )
    .await;
    assert_eq!(out(&o), "ok\n", "{}", show(&o));
    assert_eq!(o.exit, Exit::Code(0), "{}", show(&o));
    let left = sleeping(marker);
    assert!(left.is_empty(), "escapees left on the host: {left:?}");
    assert!(common::processes_of_uid(o.host_uid).is_empty());
}

#[tokio::test]
async fn a_daemon_dies_with_the_call() {
    // The classic daemon: background, detached from stdio, parent exits.
    escapee_dies_with_the_call("ESCAPEE </dev/null >/dev/null 2>&1 &").await;
}

#[tokio::test]
async fn a_double_fork_dies_with_the_call() {
    // The middle process exits at once: the escapee is orphaned (reparented to pid 1).
    escapee_dies_with_the_call("( ESCAPEE & )").await;
}

#[tokio::test]
async fn a_setsid_escapee_dies_with_the_call() {
    escapee_dies_with_the_call("setsid ESCAPEE &").await;
}

/// Kills the supervisor if the test fails before it does.
struct Supervisor(std::process::Child);

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_sandbox_dies_with_its_supervisor_when_the_supervisor_is_sigkilled() {
    let marker = unique();
    let script = format!("sh -c 'exec sleep {marker}' & setsid sh -c 'exec sleep {marker}' & wait");
    let mut supervisor = Supervisor(
        Command::new(env!("CARGO_BIN_EXE_toolshed-sandbox-exec"))
            .args(["--hold", "--", "/bin/sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(supervisor.0.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let pid: u32 = first
        .strip_prefix("sandbox-pid ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the supervisor said {first:?}"));
    wait_for(10, "both sandboxed sleeps to run", || {
        sleeping(marker).len() == 2
    });
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    supervisor.0.kill().unwrap(); // SIGKILL: no cleanup code of the supervisor runs.
    supervisor.0.wait().unwrap();

    wait_for(10, "the sandbox to die with its supervisor", || {
        sleeping(marker).is_empty()
            && !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
    });
}
