//! Output abuse: floods on stdout, stderr and both are cut at their caps (the flood
//! is killed), and bytes that are not UTF-8 come back exactly as written.
#![allow(clippy::unwrap_used)]

mod common;

use common::{run, sandbox, sh, show};
use toolshed_sandbox::{KillReason, LimitsRequest};

fn caps(bytes: u64) -> LimitsRequest {
    LimitsRequest {
        stdout_bytes: Some(bytes),
        stderr_bytes: Some(bytes),
        timeout_ms: Some(30_000),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_stdout_flood_is_cut_at_its_cap_and_killed() {
    let sb = sandbox();
    let o = run(&sb, sh("yes flood", caps(64 * 1024))).await;
    assert_eq!(o.stdout.len(), 64 * 1024, "{}", show(&o));
    assert!(o.stdout_truncated, "{}", show(&o));
    assert!(!o.stderr_truncated);
    assert_eq!(o.killed, Some(KillReason::OutputCap), "{}", show(&o));
    assert!(!o.timed_out);
    assert!(o.stdout.starts_with(b"flood\nflood\n"));
}

#[tokio::test]
async fn a_stderr_flood_is_cut_at_its_cap_and_killed() {
    let sb = sandbox();
    let o = run(&sb, sh("echo before; yes flood >&2", caps(32 * 1024))).await;
    assert_eq!(o.stderr.len(), 32 * 1024, "{}", show(&o));
    assert!(o.stderr_truncated);
    assert!(!o.stdout_truncated);
    assert_eq!(o.stdout, b"before\n", "{}", show(&o));
    assert_eq!(o.killed, Some(KillReason::OutputCap), "{}", show(&o));
}

#[tokio::test]
async fn floods_on_both_streams_at_once_stay_within_their_caps() {
    let sb = sandbox();
    // Each stream alone passes its cap; whichever does first kills the sandbox, so both
    // streams are fed until then by two writers.
    let o = run(
        &sb,
        sh(
            "yes out & yes err >&2 & wait",
            LimitsRequest {
                stdout_bytes: Some(16 * 1024),
                stderr_bytes: Some(16 * 1024),
                ..Default::default()
            },
        ),
    )
    .await;
    assert!(
        o.stdout.len() <= 16 * 1024 && o.stderr.len() <= 16 * 1024,
        "{}",
        show(&o)
    );
    assert!(o.stdout_truncated || o.stderr_truncated, "{}", show(&o));
    assert_eq!(o.killed, Some(KillReason::OutputCap), "{}", show(&o));
    assert!(common::processes_of_uid(o.host_uid).is_empty());
}

#[tokio::test]
async fn output_that_is_not_utf8_comes_back_byte_for_byte() {
    let sb = sandbox();
    let o = run(
        &sb,
        sh(
            r"printf '\377\376ok\300'; printf '\355\240\200' >&2",
            caps(1024),
        ),
    )
    .await;
    assert_eq!(o.stdout, b"\xff\xfeok\xc0", "{}", show(&o));
    assert_eq!(o.stderr, b"\xed\xa0\x80", "{}", show(&o));
    assert!(o.success(), "{}", show(&o));
}
