//! Subprocess tools run in the sandbox by default: the two attacks as regression
//! tests (`exec:/bin/sh` runs unprivileged and sees no project file; a tool cannot read
//! the runtime's secrets from its environment), no process of a sandbox outliving its
//! call (checked in the host's process table by the sandbox's host uids), the per-tool
//! policy (a project folder bound read-only), and the pool rules: never shared across
//! tenants, recycled after N calls, grown to a cap under concurrent calls and shrunk
//! when idle, and at the global cap taking another pool's idle worker.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use futures_util::future::join_all;
use serde_json::{Value, json};
use toolshed_core::{Principal, RunContext, ToolCall};
use toolshed_dispatch::{
    Dispatcher, DispatcherConfig, Endpoint, Isolation, Mode, PoolStats, Request, SandboxPolicy,
};
use toolshed_sandbox::{SandboxConfig, UidPool};

/// The workspace's own `Cargo.toml`, a project file no tool may see.
fn workspace_manifest() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml")).unwrap()
}

/// A sandboxed config whose sandboxes take host uids from a range of their own, so the
/// host's process table tells which processes are this test's.
fn own_uids(mode: Mode, first: u32) -> DispatcherConfig {
    let sandbox = SandboxConfig {
        uid_pool: UidPool { first, count: 8 },
        ..SandboxConfig::default()
    };
    DispatcherConfig {
        isolation: Isolation::Sandbox(Box::new(sandbox)),
        ..config(mode)
    }
}

/// The processes running (zombies aside) as a host uid in `first..first + 8`.
fn running_as(first: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        let uid: u32 = field("Uid:")
            .split_whitespace()
            .next()
            .and_then(|u| u.parse().ok())
            .unwrap_or(0);
        let zombie = field("State:").starts_with('Z');
        if (first..first + 8).contains(&uid) && !zombie {
            found.push(pid);
        }
    }
    found
}

/// `exec:/bin/sh` fed one request line, as the attack: the shell runs the line,
/// so `$(…)` in an argument runs whatever it holds. The call fails (no protocol answer);
/// what the shell printed is in the error's stderr tail.
async fn shell_attack(d: &Dispatcher, script: &str) -> String {
    let ep = Endpoint::parse("exec:/bin/sh").unwrap();
    let run = d
        .execute(
            &ep,
            Request::new("sh", json!({"x": format!("$({script})")})).mode(Mode::OneShot),
        )
        .await;
    let err = run.result.unwrap_err();
    assert_eq!(dispatch_code(&err), "TOOL_EXITED", "{err}");
    run.diagnostics.stderr
}

#[tokio::test]
async fn exec_bin_sh_runs_as_an_unprivileged_uid() {
    let d = dispatcher(Mode::OneShot);
    let stderr = shell_attack(&d, "echo uid=$(id -u) >&2").await;
    let uid = stderr
        .lines()
        .find_map(|l| l.strip_prefix("uid="))
        .unwrap_or_else(|| panic!("the shell printed no uid: {stderr:?}"));
    let uid: u32 = uid.trim().parse().unwrap();
    assert_ne!(uid, 0, "the tool ran as root: {stderr:?}");
}

#[tokio::test]
async fn exec_bin_sh_sees_no_project_files() {
    let d = dispatcher(Mode::OneShot);
    let manifest = workspace_manifest();
    let project = manifest.parent().unwrap();
    let script = format!(
        "test -e {m} && echo SEEN-MANIFEST >&2; ls -A {p} >&2 && echo SEEN-PROJECT >&2; ls -A /work | wc -l | sed 's/^/work-entries=/' >&2",
        m = manifest.display(),
        p = project.display(),
    );
    let stderr = shell_attack(&d, &script).await;
    assert!(!stderr.contains("SEEN-MANIFEST"), "{stderr:?}");
    assert!(!stderr.contains("SEEN-PROJECT"), "{stderr:?}");
    assert!(
        stderr.contains("work-entries=0"),
        "/work is the tool's own empty scratch folder: {stderr:?}"
    );
    // Unsandboxed (the operator's choice), the same call sees the file: the test can fail.
    let host = Dispatcher::new(unsandboxed(Mode::OneShot));
    let stderr = shell_attack(&host, &script).await;
    assert!(stderr.contains("SEEN-MANIFEST"), "{stderr:?}");
}

/// The secret the runtime holds in its environment in [`secrets_in_the_environment`]'s
/// child.
const SECRET: &str = "s3cret-admin-password-do-not-leak";

#[test]
fn a_tool_cannot_read_the_servers_secrets_from_its_environment() {
    // Setting a variable of this process would need `unsafe`: the test runs itself again
    // with the server's secrets in its environment.
    let (passed, text) = toolshed_testkit::rerun_alone(
        "secrets_in_the_environment",
        [
            ("TOOLSHED_SECRETS_CHILD", "1".to_owned()),
            ("TOOLSHED_ADMIN_PASSWORD", SECRET.to_owned()),
            ("TOOLSHED_JWT_SECRET", SECRET.to_owned()),
            (
                "TOOLSHED_DATABASE_URL",
                format!("postgres://u:{SECRET}@db/toolshed"),
            ),
        ],
    );
    assert!(passed, "{text}");
    assert!(text.contains("1 passed"), "the child test ran: {text}");
}

/// Run by [`a_tool_cannot_read_the_servers_secrets_from_its_environment`] with secrets
/// in the environment; alone, it checks that the variable is absent and passes.
#[tokio::test]
async fn secrets_in_the_environment() {
    if std::env::var("TOOLSHED_SECRETS_CHILD").is_err() {
        return;
    }
    assert_eq!(std::env::var("TOOLSHED_ADMIN_PASSWORD").unwrap(), SECRET);
    let d = dispatcher(Mode::OneShot);
    let stderr = shell_attack(
        &d,
        "env >&2; echo; cat /proc/1/environ >&2; echo ENV-END >&2",
    )
    .await;
    assert!(stderr.contains("ENV-END"), "{stderr:?}");
    assert!(
        stderr.contains("HOME=/work"),
        "the sandbox's env: {stderr:?}"
    );
    assert!(
        !stderr.contains(SECRET),
        "a secret reached the tool: {stderr:?}"
    );
    assert!(!stderr.contains("TOOLSHED_"), "{stderr:?}");
}

#[tokio::test]
async fn nothing_of_a_timed_out_sandbox_is_left_running() {
    const FIRST: u32 = 2_099_000_000;
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = Dispatcher::new(own_uids(mode, FIRST));
        let run = d
            .execute(
                &endpoint("exec", "sleeper.sh"),
                Request::new("sleeper", json!({})).timeout(Duration::from_millis(800)),
            )
            .await;
        let err = run.result.unwrap_err();
        assert_eq!(dispatch_code(&err), "TIMEOUT", "{mode:?}: {err}");
        // The tool and its background `sleep`s (one a daemon of its own session) are
        // gone; a pool may have started a replacement (one shell, waiting for a request).
        eventually("nothing of the timed-out sandbox runs", || {
            running_as(FIRST).len() <= 1
        })
        .await;
        drop(d);
        eventually("nothing runs as the sandbox's uids", || {
            running_as(FIRST).is_empty()
        })
        .await;
    }
}

#[tokio::test]
async fn nothing_of_a_dropped_call_is_left_running() {
    const FIRST: u32 = 2_099_000_100;
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = Dispatcher::new(own_uids(mode, FIRST));
        let tool = tool(
            &d,
            "sleeper",
            endpoint("exec", "sleeper.sh"),
            Duration::from_secs(600),
        );
        let pipeline = pipeline(vec![tool]);
        let run = RunContext::ephemeral();
        let mut call = Box::pin(pipeline.call(&run, ToolCall::new("sleeper", json!({}))));
        tokio::select! {
            outcome = &mut call => panic!("{mode:?}: the call ended: {outcome:?}"),
            () = eventually("the tool runs", || running_as(FIRST).len() >= 2) => {}
        }
        drop(call);
        eventually("nothing runs as the sandbox's uids", || {
            running_as(FIRST).is_empty()
        })
        .await;
    }
}

#[tokio::test]
async fn a_policy_shows_a_project_folder_read_only() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "project notes").unwrap();
    let d = dispatcher(Mode::OneShot);
    let ep = endpoint("python", "tools.py:read_text");
    // A folder under /tmp (one of the sandbox's own) is shown under /host.
    let notes = project.path().join("notes.txt");
    assert!(notes.starts_with("/tmp"), "{}", notes.display());
    let seen = Path::new("/host").join(notes.strip_prefix("/").unwrap());
    let args = json!({"path": seen, "write": true});
    // Without the policy, the folder is not there.
    let run = d
        .execute(&ep, Request::new("read_text", args.clone()))
        .await;
    assert!(run.result.is_err(), "{:?}", run.result);
    // With it, the tool reads it and cannot write there.
    let policy = SandboxPolicy::default().project(project.path());
    let run = d
        .execute(&ep, Request::new("read_text", args).policy(policy))
        .await;
    let got = run.result.unwrap();
    assert_eq!(got["text"], "project notes", "{got}");
    assert_eq!(got["write"], "refused", "{got}");
}

/// A call context acting for `tenant`.
fn for_tenant(tenant: &str) -> Request {
    let mut r = Request::new("pid", json!({}));
    r.context.principal = Some(Principal {
        iss: "toolshed".into(),
        sub: format!("user-of-{tenant}"),
        tenant: Some(tenant.into()),
    });
    r
}

async fn worker(d: &Dispatcher, ep: &Endpoint, request: Request) -> u64 {
    let run = d.execute(ep, request).await;
    run.result.unwrap()["worker"].as_u64().unwrap()
}

#[tokio::test]
async fn a_pool_worker_is_never_shared_across_tenants() {
    let d = dispatcher(Mode::Pool);
    let ep = endpoint("python", "tools.py:pid");
    let a = worker(&d, &ep, for_tenant("acme")).await;
    let b = worker(&d, &ep, for_tenant("globex")).await;
    assert_ne!(a, b, "two tenants got one worker");
    assert_eq!(
        worker(&d, &ep, for_tenant("acme")).await,
        a,
        "acme's worker is kept for acme"
    );
    assert_eq!(worker(&d, &ep, for_tenant("globex")).await, b);
    let mut tenants: Vec<Option<String>> = d.pool_stats().into_iter().map(|s| s.tenant).collect();
    tenants.sort();
    assert_eq!(
        tenants,
        [Some("acme".to_owned()), Some("globex".to_owned())]
    );
}

#[tokio::test]
async fn a_pool_worker_is_recycled_after_n_calls() {
    let mut config = config(Mode::Pool);
    config.pool.max_calls = 3;
    let d = Dispatcher::new(config);
    let ep = endpoint("python", "tools.py:pid");
    let call = || worker(&d, &ep, Request::new("pid", json!({})));
    let first = call().await;
    assert_eq!(call().await, first);
    assert_eq!(call().await, first);
    let fourth = call().await;
    assert_ne!(
        fourth, first,
        "the worker served its 3 calls and was retired"
    );
    assert_eq!(call().await, fourth);
    let stats = only_pool(&d);
    assert!(stats.retired >= 1, "{stats:?}");
}

#[tokio::test]
async fn a_pool_grows_to_its_cap_under_concurrent_calls_and_shrinks_when_idle() {
    let mut config = config(Mode::Pool);
    config.pool.max_per_tool = 3;
    config.pool.idle_timeout = Duration::from_millis(300);
    let d = Dispatcher::new(config);
    let ep = endpoint("python", "tools.py:pid");
    let calls = (0..9).map(|_| d.execute(&ep, Request::new("pid", json!({"hold_ms": 300}))));
    let results: Vec<Value> = join_all(calls)
        .await
        .into_iter()
        .map(|r| r.result.unwrap())
        .collect();
    let mut workers: Vec<u64> = results
        .iter()
        .map(|r| r["worker"].as_u64().unwrap())
        .collect();
    workers.sort_unstable();
    workers.dedup();
    assert_eq!(
        workers.len(),
        3,
        "nine calls at once grew the pool to its cap of 3: {results:?}"
    );
    assert_eq!(only_pool(&d).started, 3);
    // Idle past its timeout, every worker is retired.
    eventually("the idle pool shrank to nothing", || {
        d.pool_stats().iter().all(|s| s.idle == 0 && s.busy == 0)
    })
    .await;
    // And it grows again on demand.
    assert!(worker(&d, &ep, Request::new("pid", json!({}))).await > 0);
}

#[tokio::test]
async fn at_the_global_cap_a_pool_takes_another_pools_idle_worker() {
    let mut config = config(Mode::Pool);
    config.pool.max_per_tool = 2;
    config.pool.max_total = 2;
    let d = Dispatcher::new(config);
    let pid = endpoint("python", "tools.py:pid");
    let add = endpoint("python", "tools.py:add");
    let held = (0..2).map(|_| d.execute(&pid, Request::new("pid", json!({"hold_ms": 200}))));
    for r in join_all(held).await {
        r.result.unwrap();
    }
    let idle = |ep: &Endpoint| {
        d.pool_stats()
            .into_iter()
            .find(|s| s.endpoint == ep.to_string())
            .map(|s| s.idle + s.busy)
            .unwrap_or(0)
    };
    assert_eq!(idle(&pid), 2);
    let run = d.execute(&add, Request::new("add", json!({"a": 1}))).await;
    assert_eq!(run.result.unwrap(), json!(2));
    assert_eq!(idle(&add), 1);
    assert_eq!(
        idle(&pid),
        1,
        "one of the other pool's idle workers made room"
    );
}

fn only_pool(d: &Dispatcher) -> PoolStats {
    let stats = d.pool_stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    stats.into_iter().next().unwrap()
}

#[tokio::test]
async fn reading_a_node_schema_runs_the_module_in_the_sandbox() {
    let path = fixture("peek.mjs");
    let inferred = dispatcher(Mode::Pool)
        .infer_node_schema(&path, Some("peek"))
        .await
        .unwrap();
    assert_eq!(inferred.description, "saw no project file");
    // Unsandboxed (the operator's choice), the same import sees the workspace.
    let inferred = Dispatcher::new(unsandboxed(Mode::Pool))
        .infer_node_schema(&path, Some("peek"))
        .await
        .unwrap();
    assert_eq!(inferred.description, "saw the project");
}

#[tokio::test]
async fn a_worker_whose_sandbox_hit_its_memory_limit_is_replaced() {
    let d = dispatcher(Mode::Pool);
    let ep = endpoint("python", "tools.py:oom_child");
    let policy = SandboxPolicy {
        limits: toolshed_sandbox::LimitsRequest {
            memory_bytes: Some(96 << 20),
            ..toolshed_sandbox::LimitsRequest::default()
        },
        ..SandboxPolicy::default()
    };
    let call = |mb: u64| {
        d.execute(
            &ep,
            Request::new("oom_child", json!({"mb": mb})).policy(policy.clone()),
        )
    };
    let small = call(1).await.result.unwrap();
    assert_eq!(small["returncode"], 0, "{small}");
    assert_eq!(
        call(1).await.result.unwrap()["worker"],
        small["worker"],
        "reused"
    );
    // The child is killed by the OOM killer (SIGKILL); the worker itself answers.
    let big = call(512).await.result.unwrap();
    assert_eq!(big["returncode"], -9, "{big}");
    let after = call(1).await.result.unwrap();
    assert_ne!(
        after["worker"], big["worker"],
        "the worker that hit its limit was retired"
    );
}
