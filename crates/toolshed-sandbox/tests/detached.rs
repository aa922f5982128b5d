//! Detached background runs: the `toolshed-sandbox-exec --supervise` supervisor runs a
//! command in the sandbox, keeps its output and status in the state folder, and its
//! death (SIGKILL) ends the sandbox and leaves a `running` status whose supervisor is
//! gone. Arguments reach the command as the argv elements they were.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::wait_for;
use toolshed_sandbox::detached::{
    DetachedSpec, DetachedState, FORMAT, Supervisor, process_start_time, read_status, read_tail,
    supervisor_alive,
};
use toolshed_sandbox::{Bind, LimitsRequest, Network, SandboxConfig};

fn supervisor() -> Supervisor {
    Supervisor::new(env!("CARGO_BIN_EXE_toolshed-sandbox-exec"), ["--supervise"])
}

fn spec(program: &str, args: &[&str], binds: Vec<Bind>) -> DetachedSpec {
    DetachedSpec {
        format: FORMAT,
        program: program.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        binds,
        limits: LimitsRequest::default(),
        network: Network::Off,
        max_duration_ms: None,
        output_cap_bytes: 1024 * 1024,
        sandbox: SandboxConfig::default(),
    }
}

fn state_dir(root: &Path) -> std::path::PathBuf {
    let d = root.join("run");
    std::fs::create_dir(&d).unwrap();
    d
}

/// A host folder the command waits on: it runs until `go` appears there.
fn control() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let mut perms = std::fs::metadata(d.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(d.path(), perms).unwrap();
    d
}

const WAIT_FOR_GO: &str =
    "echo hello; echo oops >&2; while [ ! -e /ctl/go ]; do sleep 0.05; done; echo bye; exit 3";

#[tokio::test]
async fn a_detached_run_reports_running_then_its_exit_code_and_output() {
    let root = tempfile::tempdir().unwrap();
    let ctl = control();
    let dir = state_dir(root.path());
    let started = supervisor()
        .start(
            &dir,
            &spec(
                "/bin/sh",
                &["-c", WAIT_FOR_GO],
                vec![Bind::read_only(ctl.path(), "/ctl")],
            ),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert!(supervisor_alive(
        started.supervisor_pid,
        started.supervisor_start
    ));
    let status = read_status(&dir).unwrap().unwrap();
    assert_eq!(status.state, DetachedState::Running);
    assert_eq!(status.sandbox_pid, Some(started.sandbox_pid));
    wait_for(10, "the first output", || {
        let (tail, _) = read_tail(&dir, 1024).unwrap();
        String::from_utf8_lossy(&tail).contains("oops")
    });

    std::fs::write(ctl.path().join("go"), "").unwrap();
    wait_for(20, "the run to end", || {
        read_status(&dir).unwrap().unwrap().state == DetachedState::Exited
    });
    let status = read_status(&dir).unwrap().unwrap();
    assert_eq!(status.exit_code, Some(3), "{status:?}");
    assert_eq!(status.signal, None);
    assert!(status.ended_at_ms.is_some());
    let (tail, _) = read_tail(&dir, 1024).unwrap();
    let text = String::from_utf8_lossy(&tail);
    for line in ["hello", "oops", "bye"] {
        assert!(text.contains(line), "{text:?}");
    }
    assert_eq!(status.output_bytes, tail.len() as u64);
    wait_for(10, "the supervisor to exit", || {
        !supervisor_alive(started.supervisor_pid, started.supervisor_start)
    });
}

#[tokio::test]
async fn a_sigkilled_supervisor_takes_its_sandbox_and_leaves_a_running_status() {
    let root = tempfile::tempdir().unwrap();
    let ctl = control();
    let dir = state_dir(root.path());
    let started = supervisor()
        .start(
            &dir,
            &spec(
                "/bin/sh",
                &["-c", WAIT_FOR_GO],
                vec![Bind::read_only(ctl.path(), "/ctl")],
            ),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let sandbox_pid = u32::try_from(started.sandbox_pid).unwrap();
    assert!(process_start_time(sandbox_pid).is_some());
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(started.supervisor_pid).unwrap()).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_for(10, "the supervisor and its sandbox to die", || {
        !supervisor_alive(started.supervisor_pid, started.supervisor_start)
            && process_start_time(sandbox_pid).is_none()
    });
    // Nothing recorded how it ended: a reader must call it lost.
    assert_eq!(
        read_status(&dir).unwrap().unwrap().state,
        DetachedState::Running
    );
}

#[tokio::test]
async fn arguments_stay_single_literal_argv_elements() {
    let root = tempfile::tempdir().unwrap();
    let dir = state_dir(root.path());
    let hostile = [
        "$(id)",
        "; rm -rf /",
        "`touch /tmp/pwned`",
        "a b\nc",
        "--",
        "*",
    ];
    let mut args = vec!["%s|\\n"];
    args.extend(hostile);
    supervisor()
        .start(
            &dir,
            &spec("/usr/bin/printf", &args, Vec::new()),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    wait_for(20, "the run to end", || {
        read_status(&dir).unwrap().unwrap().state == DetachedState::Exited
    });
    let status = read_status(&dir).unwrap().unwrap();
    assert_eq!(status.exit_code, Some(0), "{status:?}");
    let (tail, _) = read_tail(&dir, 4096).unwrap();
    let expected: String = hostile.iter().map(|h| format!("{h}|\n")).collect();
    assert_eq!(String::from_utf8_lossy(&tail), expected);
}

#[tokio::test]
async fn a_command_that_cannot_start_is_a_failed_status_and_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = state_dir(root.path());
    let err = supervisor()
        .start(
            &dir,
            &spec("/usr/bin/no-such-program", &[], Vec::new()),
            Duration::from_secs(30),
        )
        .await
        .unwrap_err();
    assert!(err.message.contains("no-such-program"), "{err}");
    let status = read_status(&dir).unwrap().unwrap();
    assert_eq!(status.state, DetachedState::Failed);
    assert_eq!(status.code, Some(err.code));
}

#[tokio::test]
async fn a_run_past_its_maximum_duration_is_killed_and_says_so() {
    let root = tempfile::tempdir().unwrap();
    let dir = state_dir(root.path());
    let mut s = spec("/bin/sh", &["-c", "echo up; exec sleep 1000"], Vec::new());
    s.max_duration_ms = Some(300);
    supervisor()
        .start(&dir, &s, Duration::from_secs(30))
        .await
        .unwrap();
    wait_for(20, "the run to be stopped", || {
        read_status(&dir).unwrap().unwrap().state == DetachedState::Exited
    });
    let status = read_status(&dir).unwrap().unwrap();
    assert_eq!(status.killed.as_deref(), Some("timeout"), "{status:?}");
    assert_eq!(status.signal, Some(9));
}
