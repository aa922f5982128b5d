//! The server's limits against a real server on loopback: the per-tenant execute rate,
//! the connection timeouts, and hostile approval predicates and schema patterns at
//! registration.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::TestServer;
use serde_json::json;
use toolshed_server::limits::{Rate, RunQuota};

const EXECUTE: &str = "/api/v1/registry/tools/get_current_time/execute";

#[tokio::test]
async fn a_tenant_over_its_execute_rate_gets_429_with_retry_after_and_others_do_not() {
    let s = TestServer::start_with(|c| {
        // A burst of 3, then one every 1000 s: the fourth call is over the rate.
        c.limits.execute_rate = Some(Rate {
            per_second: 0.001,
            burst: 3,
        });
    })
    .await;
    for _ in 0..3 {
        let (status, answer) = s
            .call(
                "POST",
                EXECUTE,
                Some(&s.deployer),
                Some(json!({"args": {}})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    let resp = s
        .client
        .post(format!("{}{EXECUTE}", s.base))
        .bearer_auth(&s.deployer)
        .json(&json!({"args": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((900..=1000).contains(&retry), "Retry-After {retry}");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "RATE_LIMITED", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant `default`"),
        "{body}"
    );
    // The admin is of the same tenant: the same bucket.
    let (status, answer) = s
        .call("POST", EXECUTE, Some(&s.admin), Some(json!({"args": {}})))
        .await;
    assert_eq!(status, 429, "{answer}");

    // Another tenant has a bucket of its own.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": "ota", "password": "password-123", "role": "deployer", "tenant": "other"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let other = s.login("ota", "password-123").await;
    let (status, answer) = s
        .call("POST", EXECUTE, Some(&other), Some(json!({"args": {}})))
        .await;
    assert_eq!(status, 200, "{answer}");
    // Reads are not rate limited.
    let (status, answer) = s
        .call("GET", "/api/v1/registry/tools", Some(&s.deployer), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn without_a_rate_executes_are_not_limited() {
    let s = TestServer::start().await;
    for _ in 0..20 {
        let (status, answer) = s
            .call(
                "POST",
                EXECUTE,
                Some(&s.deployer),
                Some(json!({"args": {}})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    s.stop().await;
}

/// Read until the server closes the connection (or `deadline` passes, a failure).
fn closed_by_server(stream: &mut std::net::TcpStream, deadline: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(deadline)).unwrap();
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => got,
        // A reset is a close too.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => got,
        Err(e) => panic!("the server did not close the connection: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_slow_connections_are_closed_and_kept_alive_ones_time_out() {
    let s = TestServer::start_with(|c| {
        c.limits.connections.header_timeout = Duration::from_secs(1);
        c.limits.connections.idle_timeout = Duration::from_secs(1);
    })
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let generous = Duration::from_secs(60);
    let (silent, partial, kept) = tokio::task::spawn_blocking(move || {
        // Sends nothing.
        let mut silent = std::net::TcpStream::connect(&addr).unwrap();
        let silent = closed_by_server(&mut silent, generous);
        // Sends half a head, then stalls.
        let mut partial = std::net::TcpStream::connect(&addr).unwrap();
        partial
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        let partial = closed_by_server(&mut partial, generous);
        // A whole request is answered; the connection, kept alive, then times out.
        let mut kept = std::net::TcpStream::connect(&addr).unwrap();
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let kept = closed_by_server(&mut kept, generous);
        (silent, partial, kept)
    })
    .await
    .unwrap();
    assert!(silent.is_empty(), "{}", String::from_utf8_lossy(&silent));
    // hyper answers a head cut short by the timeout with nothing, or a 408.
    let partial = String::from_utf8_lossy(&partial);
    assert!(
        partial.is_empty() || partial.starts_with("HTTP/1.1 408"),
        "{partial}"
    );
    let kept = String::from_utf8_lossy(&kept);
    assert!(kept.starts_with("HTTP/1.1 200"), "{kept}");
    // And the server still answers.
    let (status, _) = s.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);
    s.stop().await;
}

/// Whether a process is gone: no `/proc` entry, or exited and waiting to be reaped.
fn exited(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
    }
}

/// Wait for `pid` to exit; false when it is still running after `deadline`.
async fn waits_for_exit(pid: u64, deadline: Duration) -> bool {
    let end = tokio::time::Instant::now() + deadline;
    while tokio::time::Instant::now() < end {
        if exited(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    exited(pid)
}

const PID_TOOL: &str = "import os\n\ndef pid() -> dict:\n    \"\"\"The worker's process id.\"\"\"\n    return {\"pid\": os.getpid()}\n";

/// A server whose workers run on the host (their pids are the host's), pooled, with
/// this idle timeout; a `pid` tool registered.
async fn pid_server(idle_timeout: Duration) -> TestServer {
    let s = TestServer::start_with(|c| {
        c.dispatcher.isolation = toolshed_dispatch::Isolation::Unsandboxed;
        c.dispatcher.mode = toolshed_dispatch::Mode::Pool;
        c.dispatcher.pool.idle_timeout = idle_timeout;
    })
    .await;
    let py = s.write("pid.py", PID_TOOL);
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            Some(json!({"name": "pid", "description": "its pid", "endpoint": format!("python:{py}")})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    s
}

async fn worker_pid(s: &TestServer) -> u64 {
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/pid/execute",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let pid = answer["data"]["output"]["pid"].as_u64().unwrap();
    assert!(!exited(pid), "the pooled worker {pid} stays after its call");
    pid
}

#[tokio::test]
async fn a_deleted_tools_warm_worker_exits() {
    // An idle timeout far past the test: only the delete can end the worker.
    let s = pid_server(Duration::from_secs(3600)).await;
    let pid = worker_pid(&s).await;
    // The same worker serves the next call (it is warm).
    assert_eq!(worker_pid(&s).await, pid);
    let (status, answer) = s
        .call(
            "DELETE",
            "/api/v1/registry/tools/pid",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        waits_for_exit(pid, Duration::from_secs(60)).await,
        "worker {pid} still runs after its tool was deleted"
    );
    s.stop().await;
}

#[tokio::test]
async fn an_updated_tools_old_worker_exits() {
    let s = pid_server(Duration::from_secs(3600)).await;
    let pid = worker_pid(&s).await;
    let py = s.write("pid2.py", PID_TOOL);
    let (status, answer) = s
        .call(
            "PUT",
            "/api/v1/registry/tools/pid",
            Some(&s.admin),
            Some(json!({"name": "pid", "description": "its pid, v2", "endpoint": format!("python:{py}:pid")})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        waits_for_exit(pid, Duration::from_secs(60)).await,
        "worker {pid} of the old revision still runs"
    );
    // The new revision runs in a new worker.
    let new = worker_pid(&s).await;
    assert_ne!(new, pid);
    s.stop().await;
}

#[tokio::test]
async fn an_idle_pool_is_evicted_with_its_worker() {
    let s = pid_server(Duration::from_millis(500)).await;
    let pid = worker_pid(&s).await;
    assert!(
        waits_for_exit(pid, Duration::from_secs(60)).await,
        "idle worker {pid} was not evicted"
    );
    // The tool still runs: a new pool, a new worker.
    assert_ne!(worker_pid(&s).await, pid);
    s.stop().await;
}

#[tokio::test]
async fn hostile_predicates_and_patterns_are_refused_at_registration() {
    let s = TestServer::start().await;
    let nested = "args.l.all(a, args.l.all(b, args.l.all(c, a == b && b == c)))";
    let chain = (0..150)
        .map(|i| format!("args.a=={i}"))
        .collect::<Vec<_>>()
        .join("||");
    let cases = [
        (
            json!({"approval": {"when": nested}}),
            "approval.when",
            "more than 2 deep",
        ),
        // A chain of operators that overflowed the CEL parser's stack (an abort of the
        // whole server) before parsing moved to a deep-stack thread.
        (
            json!({"approval": {"when": chain}}),
            "approval.when",
            "nodes",
        ),
        (
            json!({"approval": {"when": "args.l.map(x, args.l + args.l).exists(y, true)"}}),
            "approval.when",
            "builds itself",
        ),
        (
            json!({"schema_definition": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?!admin)"}}}}),
            "schema_definition.properties.code.pattern",
            "look-around",
        ),
        (
            json!({"schema_definition": {"type": "object", "properties": {"code": {"type": "string", "pattern": "(a)\\1"}}}}),
            "schema_definition.properties.code.pattern",
            "backreferences",
        ),
    ];
    for (extra, field, needle) in cases {
        let mut body =
            json!({"name": "hostile", "description": "d", "endpoint": "builtin:get_current_time"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/registry/tools",
                Some(&s.deployer),
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, 422, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{field} not in {message}");
        assert!(message.contains(needle), "{needle} not in {message}");
    }
    let (status, _) = s.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);
    s.stop().await;
}

#[tokio::test]
async fn a_catastrophic_pattern_answers_a_long_hostile_input() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({
                "name": "matcher", "description": "d", "endpoint": "builtin:get_current_time",
                "schema_definition": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
            })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    // `aaaa…!` backtracks exponentially in a backtracking engine; here it just answers.
    let hostile = format!("{}!", "a".repeat(50_000));
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/matcher/execute",
            Some(&s.deployer),
            Some(json!({"args": {"s": hostile}})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "INVALID_ARGS");
    s.stop().await;
}

#[tokio::test]
async fn a_tenant_past_its_run_quota_gets_429_run_quota_exceeded_and_others_do_not() {
    // The journal-filling attack: a deployer starting runs as fast as the server takes
    // them. A quota of 3 runs per 3000 s: the fourth is refused, executes and sandboxed
    // executions alike, and nothing of it is recorded.
    let s = TestServer::start_with(|c| {
        c.limits.run_quota = Some(RunQuota {
            runs: 3,
            per: Duration::from_secs(3000),
        });
    })
    .await;
    for _ in 0..3 {
        let (status, answer) = s
            .call(
                "POST",
                EXECUTE,
                Some(&s.deployer),
                Some(json!({"args": {}})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    let (_, runs_before) = s.call("GET", "/api/v1/runs", Some(&s.deployer), None).await;
    for (path, body) in [
        (EXECUTE, json!({"args": {}})),
        (
            "/api/v1/tools/sandbox/execute",
            json!({"code": "def run(input):\n    return 1\n"}),
        ),
    ] {
        let resp = s
            .client
            .post(format!("{}{path}", s.base))
            .bearer_auth(&s.deployer)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 429, "{path}");
        let retry: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((900..=1000).contains(&retry), "{path}: Retry-After {retry}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "RUN_QUOTA_EXCEEDED", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("tenant `default`") && message.contains("3 runs per 3000 s"),
            "{body}"
        );
        assert!(message.contains("--run-quota"), "{body}");
    }
    let (_, runs_after) = s.call("GET", "/api/v1/runs", Some(&s.deployer), None).await;
    assert_eq!(runs_before, runs_after, "a refused run was recorded");
    // Another tenant has a quota of its own.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": "otq", "password": "password-123", "role": "deployer", "tenant": "other"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let other = s.login("otq", "password-123").await;
    let (status, answer) = s
        .call("POST", EXECUTE, Some(&other), Some(json!({"args": {}})))
        .await;
    assert_eq!(status, 200, "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn below_the_free_disk_floor_new_runs_get_503_storage_full_and_reads_still_work() {
    // A floor no disk meets: the guard refuses before any write could fail halfway.
    let s = TestServer::start_with(|c| {
        c.storage.min_free_bytes = u64::MAX / 2;
    })
    .await;
    for (path, body) in [
        (EXECUTE, json!({"args": {}})),
        (
            "/api/v1/tools/sandbox/execute",
            json!({"code": "def run(input):\n    return 1\n"}),
        ),
    ] {
        let (status, answer) = s.call("POST", path, Some(&s.deployer), Some(body)).await;
        assert_eq!(status, 503, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "STORAGE_FULL", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("MB free, below the"), "{answer}");
        assert!(message.contains("toolshed runs prune"), "{answer}");
    }
    let (status, answer) = s
        .call("GET", "/api/v1/registry/tools", Some(&s.deployer), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, _) = s.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);
    let (_, runs) = s.call("GET", "/api/v1/runs", Some(&s.admin), None).await;
    assert_eq!(runs["data"].as_array().map(Vec::len), Some(0), "{runs}");
    s.stop().await;
}

#[test]
fn a_server_keeps_runs_30_days_quotas_tenants_and_guards_its_disk_by_default() {
    let c = toolshed_server::ServerConfig::new("sqlite://x.db");
    assert_eq!(
        c.retain_runs.map(|r| r.older_than),
        Some(Duration::from_secs(30 * 86_400))
    );
    assert_eq!(c.limits.run_quota, Some(RunQuota::DEFAULT));
    assert_eq!(RunQuota::DEFAULT.runs, 100_000);
    assert_eq!(c.storage.min_free_bytes, 1024 * 1024 * 1024);
}
