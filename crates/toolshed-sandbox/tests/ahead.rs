//! Sandboxes started ahead of their command (`SandboxConfig::started_ahead`): a run
//! served by one is contained exactly like a run in a sandbox of its own, each serves one
//! run only, a run of another shape starts its own, and a waiting sandbox never blocks,
//! outlives or leaks into anything.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{out, processes_of_uid, require, sandbox, sh, show};
use toolshed_sandbox::{Bind, LimitsRequest, RunSpec, Sandbox, SandboxConfig, UidPool};

/// Waits (without blocking the runtime, whose task starts them) until `n` sandboxes
/// started ahead wait.
async fn until_waiting(sb: &Sandbox, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while sb.ready_sandboxes() != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sandbox was started ahead within 20 s ({} wait)",
            sb.ready_sandboxes()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn run(sb: &Sandbox, spec: RunSpec, stdin: &[u8]) -> toolshed_sandbox::Outcome {
    sb.run(spec, stdin.to_vec())
        .await
        .unwrap_or_else(|e| panic!("the sandbox failed: {e} [{}]", e.code()))
}

/// Two runs (the first of a sandbox asks for nothing ahead), then one waits.
async fn warmed(sb: &Sandbox) {
    for _ in 0..2 {
        let o = run(sb, sh("true", LimitsRequest::default()), b"").await;
        assert!(o.success(), "{}", show(&o));
    }
    until_waiting(sb, 1).await;
}

/// A sandbox of the default configuration but its own small uid pool, so a test can
/// find its waiting sandbox in the host's process table.
fn with_pool(first: u32, count: u32) -> Sandbox {
    Sandbox::new(SandboxConfig {
        uid_pool: UidPool { first, count },
        ..SandboxConfig::default()
    })
    .unwrap_or_else(|e| panic!("the sandbox cannot start on this host: {e} [{}]", e.code()))
}

/// Host pids running as a uid of the pool.
fn pool_processes(first: u32, count: u32) -> Vec<u32> {
    (first..first + count).flat_map(processes_of_uid).collect()
}

const PROBE: &str = r#"
import json, os, sys
fds = []
for fd in range(3, 4096):
    try:
        os.fstat(fd)
        fds.append(fd)
    except OSError:
        pass
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(), "fds": fds,
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "env": {k: v for k, v in os.environ.items() if k != "LC_CTYPE"},
    "given": open("/work/given.txt").read(), "stdin": sys.stdin.read(),
    "caps": [status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")],
    "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
    "tmp": sorted(os.listdir("/tmp")), "work": sorted(os.listdir("/work")),
    "etc": sorted(os.listdir("/etc")) if os.path.isdir("/etc") else [],
}))
open("/tmp/left-by-a-run", "w").write("x")
open("/work/left-by-a-run", "w").write("x")
sys.exit(3)
"#;

#[tokio::test]
async fn runs_served_ahead_are_contained_like_any_other_and_each_gets_a_fresh_sandbox() {
    require("python3", "python3");
    let sb = sandbox();
    warmed(&sb).await;
    for turn in 0..2 {
        let served = sb.runs_started_ahead();
        let mut spec = RunSpec::new("/usr/bin/python3", ["-c", PROBE]).env("ONLY", "this");
        spec.files = vec![("given.txt".into(), format!("file {turn}").into_bytes())];
        spec.collect = vec!["left-by-a-run".into()];
        let o = run(&sb, spec, format!("stdin {turn}").as_bytes()).await;
        assert_eq!(
            sb.runs_started_ahead(),
            served + 1,
            "run {turn} was not served ahead"
        );
        assert_eq!(o.exit_code(), Some(3), "{}", show(&o));
        let v: serde_json::Value =
            serde_json::from_str(out(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
        assert_eq!(
            (v["uid"].as_u64(), v["gid"].as_u64()),
            (Some(1000), Some(1000))
        );
        assert_eq!(v["pid"], 1, "the tool is pid 1 of its own pid namespace");
        assert_eq!(v["fds"], serde_json::json!([]), "only 0, 1 and 2 are open");
        let pids = v["pids"].as_array().unwrap();
        assert!(
            pids.len() <= 4 && pids.iter().all(|p| p.as_u64() < Some(16)),
            "{v}"
        );
        assert_eq!(
            v["env"],
            serde_json::json!({"ONLY": "this"}),
            "the whole environment"
        );
        assert_eq!(v["given"], format!("file {turn}"));
        assert_eq!(v["stdin"], format!("stdin {turn}"));
        for cap in v["caps"].as_array().unwrap() {
            assert_eq!(cap, "0000000000000000", "{v}");
        }
        assert_eq!(
            (v["no_new_privs"].as_str(), v["seccomp"].as_str()),
            (Some("1"), Some("2"))
        );
        assert!(!v["etc"].to_string().contains("shadow"), "{v}");
        // Nothing of the earlier run: a fresh /tmp and scratch folder.
        assert_eq!(v["tmp"], serde_json::json!([]), "{v}");
        assert_eq!(v["work"], serde_json::json!(["given.txt"]), "{v}");
        assert_eq!(o.files[0].contents.as_deref(), Ok(&b"x"[..]));
        assert_ne!(o.host_uid, 0);
        assert!(
            processes_of_uid(o.host_uid).is_empty(),
            "a process survived"
        );
        until_waiting(&sb, 1).await;
    }
}

#[tokio::test]
async fn a_run_of_other_limits_or_with_a_bind_starts_its_own_and_the_next_one_is_made_for_it() {
    let sb = sandbox();
    warmed(&sb).await;
    let served = sb.runs_started_ahead();
    let other = LimitsRequest {
        memory_bytes: Some(128 * 1024 * 1024),
        ..LimitsRequest::default()
    };
    let o = run(&sb, sh("cat /proc/self/cgroup >/dev/null", other), b"").await;
    assert!(o.success(), "{}", show(&o));
    assert_eq!(
        sb.runs_started_ahead(),
        served,
        "made for other limits, not taken"
    );
    // The timeout and output caps are the supervisor's own: they do not matter.
    until_waiting(&sb, 1).await;
    let same_start = LimitsRequest {
        timeout_ms: Some(7_000),
        stdout_bytes: Some(1024),
        ..other
    };
    let o = run(&sb, sh("true", same_start), b"").await;
    assert!(o.success(), "{}", show(&o));
    assert_eq!(
        sb.runs_started_ahead(),
        served + 1,
        "made for the 128 MB runs now"
    );
    assert_eq!(o.limits.memory_bytes, 128 * 1024 * 1024);

    until_waiting(&sb, 1).await;
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("f"), "bound").unwrap();
    let spec =
        sh("cat /data/f", LimitsRequest::default()).bind(Bind::read_only(folder.path(), "/data"));
    let o = run(&sb, spec, b"").await;
    assert_eq!(out(&o), "bound", "{}", show(&o));
    assert_eq!(
        sb.runs_started_ahead(),
        served + 1,
        "a run with a bind starts its own"
    );
}

#[tokio::test]
async fn a_run_served_ahead_is_killed_at_its_deadline_with_everything_it_started() {
    let sb = sandbox();
    warmed(&sb).await;
    let served = sb.runs_started_ahead();
    let o = run(
        &sb,
        sh(
            "sleep 1000 & setsid sleep 1000 & sleep 1000",
            LimitsRequest {
                timeout_ms: Some(500),
                ..LimitsRequest::default()
            },
        ),
        b"",
    )
    .await;
    assert_eq!(sb.runs_started_ahead(), served + 1);
    assert!(o.timed_out, "{}", show(&o));
    assert!(
        o.duration >= Duration::from_millis(500),
        "the deadline counts from the command's exec: {:?}",
        o.duration
    );
    assert!(
        processes_of_uid(o.host_uid).is_empty(),
        "a process survived"
    );
}

#[tokio::test]
async fn a_waiting_sandbox_killed_from_outside_is_replaced_by_a_start_of_the_runs_own() {
    let (first, count) = (1_990_000_100, 2);
    let sb = with_pool(first, count);
    warmed(&sb).await;
    let waiting = pool_processes(first, count);
    assert_eq!(waiting.len(), 1, "one sandbox waits: {waiting:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(waiting[0] as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let served = sb.runs_started_ahead();
    let o = run(&sb, sh("echo ran", LimitsRequest::default()), b"").await;
    assert_eq!(out(&o), "ran\n", "{}", show(&o));
    assert_eq!(
        sb.runs_started_ahead(),
        served,
        "the dead one served nothing"
    );
}

#[tokio::test]
async fn waiting_sandboxes_give_their_uids_back_when_a_start_finds_the_pool_empty() {
    // One uid: the waiting sandbox holds it, and a run with a bind (which a sandbox
    // started ahead cannot serve) needs it.
    let (first, count) = (1_990_000_200, 1);
    let sb = with_pool(first, count);
    warmed(&sb).await;
    let folder = tempfile::tempdir().unwrap();
    let spec =
        sh("ls /data", LimitsRequest::default()).bind(Bind::read_only(folder.path(), "/data"));
    let o = run(&sb, spec, b"").await;
    assert!(o.success(), "{}", show(&o));
    assert_eq!(o.host_uid, first);
    assert_eq!(sb.ready_sandboxes(), 0, "given up for the run");
    // A run of the shape asks for one again; a warm worker's start gets the uid back
    // from it too.
    let o = run(&sb, sh("true", LimitsRequest::default()), b"").await;
    assert!(o.success(), "{}", show(&o));
    until_waiting(&sb, 1).await;
    let child = sb
        .spawn(sh("exec cat", LimitsRequest::default()))
        .await
        .unwrap_or_else(|e| panic!("{e} [{}]", e.code()));
    assert_eq!(child.host_uid(), first);
}

#[tokio::test]
async fn dropping_the_sandbox_ends_its_waiting_sandboxes() {
    let (first, count) = (1_990_000_300, 2);
    let sb = with_pool(first, count);
    warmed(&sb).await;
    let waiting = pool_processes(first, count);
    assert_eq!(waiting.len(), 1, "one sandbox waits: {waiting:?}");
    drop(sb);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{}", waiting[0])).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiting sandbox {} outlived its supervisor's handle",
            waiting[0]
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
