//! `POST /api/v1/tools/sandbox/execute` on a real server: the seed's example exactly as
//! written, each language, a registered tool's own code, the limits (timeout, memory,
//! network), what the code cannot see (the server's uid, its secrets, its database),
//! the record of every execution per tenant, roles, and every bad input a clear 4xx.
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use serde_json::{Value, json};

const EXECUTE: &str = "/api/v1/tools/sandbox/execute";

/// The seed's body, character for character ("Step 3 — Sandbox Test").
const SEED_BODY: &str = r#"{
    "code": "def run(input):\n    return {\"order_id\": input[\"order_id\"], \"status\": \"shipped\"}",
    "input_json": { "order_id": "ORD-123456" },
    "timeout_seconds": 15,
    "network_enabled": false,
    "tool_id": "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  }"#;

async fn execute(s: &TestServer, body: Value) -> (u16, Value) {
    s.call("POST", EXECUTE, Some(&s.deployer), Some(body)).await
}

/// Run code that must succeed; its answer's `data`.
async fn ok(s: &TestServer, body: Value) -> Value {
    let (status, answer) = execute(s, body).await;
    assert_eq!(status, 200, "{answer}");
    answer["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_example_works_as_written_and_is_recorded() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .raw(
            "POST",
            EXECUTE,
            Some(&s.deployer),
            Some(SEED_BODY.as_bytes().to_vec()),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let d = &answer["data"];
    // The seed's fields, with the seed's values.
    assert_eq!(
        d["output"],
        "{\"order_id\": \"ORD-123456\", \"status\": \"shipped\"}"
    );
    assert_eq!(
        d["stdout"],
        "{\"order_id\": \"ORD-123456\", \"status\": \"shipped\"}\n"
    );
    assert_eq!(d["stderr"], "");
    assert_eq!(d["exit_code"], 0);
    assert!(d["duration_ms"].is_u64(), "{d}");
    assert_eq!(d["timed_out"], false);
    assert!(d["error"].is_null(), "{d}");
    let id = d["execution_id"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    // Ours beside them.
    assert_eq!(
        d["output_value"],
        json!({"order_id": "ORD-123456", "status": "shipped"})
    );
    assert_eq!(d["language"], "python");
    assert_eq!(d["network_enabled"], false);
    assert_eq!(d["limits"]["timeout_ms"], 15_000);
    assert_eq!(d["limits"]["memory_bytes"], 256 * 1024 * 1024);
    assert_eq!(d["oom_killed"], false);
    assert_eq!(d["clamped"], json!([]));
    assert_ne!(d["host_uid"], 0);
    assert_eq!(d["tool_id"], "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
    assert_eq!(d["created_by"], "dee");
    assert_eq!(d["code_sha256"].as_str().unwrap().len(), 64);

    // Looked up by its id: the same answer, with when it was recorded.
    let path = format!("/api/v1/tools/sandbox/executions/{id}");
    let (status, got) = s.call("GET", &path, Some(&s.deployer), None).await;
    assert_eq!(status, 200, "{got}");
    for key in [
        "execution_id",
        "output",
        "stdout",
        "stderr",
        "exit_code",
        "duration_ms",
        "timed_out",
        "error",
        "tool_id",
        "code_sha256",
        "host_uid",
    ] {
        assert_eq!(got["data"][key], d[key], "{key}");
    }
    assert!(got["data"]["created_at_ms"].as_i64().unwrap() > 0);
    let (status, list) = s
        .call(
            "GET",
            "/api/v1/tools/sandbox/executions",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["meta"]["total"], 1);
    assert_eq!(list["data"][0]["execution_id"], id.as_str());

    // The row holds the code's hash, never the code.
    let db = rusqlite::Connection::open(s.dir.path().join("toolshed.db")).unwrap();
    let (hash, input, tenant): (String, String, String) = db
        .query_row(
            "SELECT code_sha256, input, tenant FROM registry_sandbox_executions WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(hash, d["code_sha256"].as_str().unwrap());
    assert_eq!(tenant, "default");
    assert!(input.contains("ORD-123456"), "{input}");
    let all: String = db
        .query_row(
            "SELECT result FROM registry_sandbox_executions WHERE id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!all.contains("def run"), "the code was stored: {all}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_and_node_code_run_too() {
    let s = TestServer::start().await;
    let d = ok(
        &s,
        json!({"language": "bash", "code": "read input\necho \"{\\\"got\\\": $input}\"\n", "input_json": {"n": 1}}),
    )
    .await;
    assert_eq!(d["output"], r#"{"got":{"n":1}}"#, "{d}");
    assert_eq!(d["language"], "bash");
    let d = ok(
        &s,
        json!({"language": "bash", "code": "echo plain words", "input_json": {}}),
    )
    .await;
    assert_eq!(d["output"], r#""plain words\n""#, "{d}");

    for code in [
        "export function run(input) { return { doubled: input.n * 2 }; }",
        "module.exports.run = (input) => ({ doubled: input.n * 2 });",
        "export default async function run(input) { return { doubled: input.n * 2 }; }",
    ] {
        let d = ok(
            &s,
            json!({"language": "node", "code": code, "input_json": {"n": 21}}),
        )
        .await;
        assert_eq!(d["output"], r#"{"doubled":42}"#, "{code}: {d}");
        assert_eq!(d["output_value"]["doubled"], 42);
        assert_eq!(d["language"], "node");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_run_is_a_200_with_its_error() {
    let s = TestServer::start().await;
    let d = ok(&s, json!({"code": "def run(input):\n    return 1 / 0\n"})).await;
    assert!(d["output"].is_null(), "{d}");
    assert_eq!(d["exit_code"], 1);
    assert!(
        d["error"]
            .as_str()
            .unwrap()
            .contains("ZeroDivisionError: division by zero"),
        "{d}"
    );
    let d = ok(&s, json!({"code": "x = 1\n"})).await;
    assert!(
        d["error"]
            .as_str()
            .unwrap()
            .contains("defines no run(input)"),
        "{d}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_run_may_be_async_or_a_generator_and_a_syntax_error_is_named() {
    let s = TestServer::start().await;
    let d = ok(
        &s,
        json!({"code": "import asyncio\nasync def run(input):\n    await asyncio.sleep(0)\n    return input['n'] + 1\n", "input_json": {"n": 1}}),
    )
    .await;
    assert_eq!(d["output"], "2", "{d}");
    let d = ok(
        &s,
        json!({"code": "def run(input):\n    yield 1\n    yield {'last': True}\n"}),
    )
    .await;
    assert_eq!(d["output_value"], json!({"last": true}), "{d}");
    let d = ok(&s, json!({"code": "def run(input)\n    return 1\n"})).await;
    assert!(d["error"].as_str().unwrap().contains("SyntaxError"), "{d}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_past_its_timeout_is_killed_and_timed_out() {
    let s = TestServer::start().await;
    let d = ok(
        &s,
        json!({"code": "import time\ndef run(input):\n    time.sleep(600)\n", "timeout_seconds": 1}),
    )
    .await;
    assert_eq!(d["timed_out"], true, "{d}");
    assert_eq!(d["killed"], "timeout");
    assert!(d["output"].is_null());
    assert!(
        d["error"].as_str().unwrap().contains("timeout of 1 s"),
        "{d}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_is_oom_killed() {
    let s = TestServer::start().await;
    let d = ok(
        &s,
        json!({"code": "def run(input):\n    return len(bytearray(512 << 20))\n", "memory_mb": 32}),
    )
    .await;
    assert_eq!(d["oom_killed"], true, "{d}");
    assert_eq!(d["limits"]["memory_bytes"], 32 * 1024 * 1024);
    assert!(
        d["error"]
            .as_str()
            .unwrap()
            .contains("out of memory (limit 32 MB)"),
        "{d}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_above_the_servers_ceilings_are_lowered_and_reported() {
    let s = TestServer::start_with(|c| {
        c.sandbox.config.ceilings.timeout_ms = 5_000;
        c.sandbox.config.ceilings.cpu_time_ms = 5_000;
        c.sandbox.config.defaults.timeout_ms = 5_000;
        c.sandbox.config.defaults.cpu_time_ms = 5_000;
        c.sandbox.config.network_allowed = false;
    })
    .await;
    let d = ok(
        &s,
        json!({"code": "def run(input):\n    return 1\n", "timeout_seconds": 3600, "network_enabled": true}),
    )
    .await;
    assert_eq!(d["output"], "1", "{d}");
    assert_eq!(d["limits"]["timeout_ms"], 5_000);
    assert_eq!(d["network_enabled"], false);
    let clamped = d["clamped"].as_array().unwrap();
    let limits: Vec<&str> = clamped
        .iter()
        .map(|c| c["limit"].as_str().unwrap())
        .collect();
    assert!(limits.contains(&"timeout_ms"), "{d}");
    assert!(limits.contains(&"network"), "{d}");
    let timeout = clamped.iter().find(|c| c["limit"] == "timeout_ms").unwrap();
    assert_eq!(timeout["requested"], 3_600_000);
    assert_eq!(timeout["granted"], 5_000);
    assert!(
        timeout["message"].as_str().unwrap().contains("ceiling"),
        "{timeout}"
    );
    s.stop().await;
}

/// Python that tries to connect to `host:port` and returns what happened.
fn connect_code(hosts: &[&str], port: u16) -> String {
    format!(
        "import socket\n\
         def run(input):\n    \
             out = {{}}\n    \
             for host in {hosts:?}:\n        \
                 try:\n            \
                     socket.create_connection((host, {port}), timeout=3).close()\n            \
                     out[host] = 'connected'\n        \
                 except OSError as e:\n            \
                     out[host] = 'refused: ' + str(e)\n    \
             return out\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_loopback_listener_is_unreachable_with_the_network_off_or_on() {
    let s = TestServer::start().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let d = ok(
        &s,
        json!({"code": connect_code(&["127.0.0.1"], port), "network_enabled": false}),
    )
    .await;
    assert_eq!(d["network_enabled"], false);
    let r = d["output_value"]["127.0.0.1"].as_str().unwrap();
    assert!(r.starts_with("refused"), "{d}");
    // With the network on, the host's loopback (directly or through the user-mode
    // stack's gateway) stays unreachable.
    let d = ok(
        &s,
        json!({"code": connect_code(&["127.0.0.1", "10.0.2.2"], port), "network_enabled": true}),
    )
    .await;
    assert_eq!(d["network_enabled"], true, "{d}");
    for host in ["127.0.0.1", "10.0.2.2"] {
        let r = d["output_value"][host].as_str().unwrap();
        assert!(r.starts_with("refused"), "{host}: {d}");
    }
    // Nothing ever reached the listener.
    assert!(listener.accept().is_err(), "a connection reached the host");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_runs_as_an_unprivileged_uid_and_sees_no_server_file() {
    let s = TestServer::start().await;
    let d = ok(
        &s,
        json!({"language": "bash", "code": "echo \"$(id)\" >&2; id -u"}),
    )
    .await;
    assert_eq!(d["exit_code"], 0, "{d}");
    assert!(!d["stderr"].as_str().unwrap().contains("uid=0("), "{d}");
    assert_ne!(d["output_value"], 0, "{d}");
    assert_ne!(d["host_uid"], 0);

    // The server's database file, by its host path, is not there.
    let db = s.dir.path().join("toolshed.db");
    assert!(db.is_file());
    let d = ok(
        &s,
        json!({"code": "def run(input):\n    return open(input['path'], 'rb').read(64).hex()\n", "input_json": {"path": db.display().to_string()}}),
    )
    .await;
    assert!(d["output"].is_null(), "{d}");
    assert!(
        d["error"]
            .as_str()
            .unwrap()
            .contains("No such file or directory"),
        "{d}"
    );
    s.stop().await;
}

/// The admin password the child's environment holds.
const PASSWORD_VAR: &str = "TOOLSHED_ADMIN_PASSWORD";
const PASSWORD: &str = "hunter2-sandbox-secret-9f1c";
const SECRETS_TEST: &str = "code_cannot_read_the_servers_environment";

/// The server reads its admin password from its environment and a test cannot change
/// its own, so this test runs itself again with the password in the child's.
#[test]
fn code_cannot_read_the_servers_environment() {
    if std::env::var(PASSWORD_VAR).is_ok() {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(environment_in_the_child());
        return;
    }
    let (passed, text) = toolshed_testkit::rerun_alone(SECRETS_TEST, [(PASSWORD_VAR, PASSWORD)]);
    assert!(passed, "the child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

async fn environment_in_the_child() {
    let password = std::env::var(PASSWORD_VAR).unwrap();
    let s = TestServer::start().await;
    let code = "import os, glob\n\
                def run(input):\n    \
                    seen = {'environ': dict(os.environ)}\n    \
                    for p in glob.glob('/proc/*/environ'):\n        \
                        try:\n            \
                            seen[p] = open(p, 'rb').read().decode('utf-8', 'replace')\n        \
                        except OSError as e:\n            \
                            seen[p] = str(e)\n    \
                    return seen\n";
    let (status, answer) = execute(&s, json!({"code": code})).await;
    assert_eq!(status, 200, "{answer}");
    let d = &answer["data"];
    assert_eq!(d["exit_code"], 0, "{d}");
    assert!(d["output_value"]["environ"].is_object(), "{d}");
    let text = answer.to_string();
    assert!(
        !text.contains(&password),
        "the password reached the code: {}",
        text.replace(&password, "<THE PASSWORD>")
    );
    assert!(!text.contains(PASSWORD_VAR), "{text}");
    // The same from a shell, as an `exec:`-style probe would try.
    let d = ok(
        &s,
        json!({"language": "bash", "code": "env; cat /proc/1/environ; cat /proc/self/environ"}),
    )
    .await;
    assert!(!d.to_string().contains(&password), "{d}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_tools_own_code_runs_in_the_sandbox() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let py = s.write(
        "order_lookup.py",
        include_str!("../../toolshed-dispatch/tests/fixtures/order_lookup.py"),
    );
    let mjs = s.write(
        "greet.mjs",
        include_str!("../../toolshed-dispatch/tests/fixtures/greet.mjs"),
    );
    let sh = s.write(
        "echo_tool.sh",
        include_str!("../../toolshed-dispatch/tests/fixtures/echo_tool.sh"),
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for (name, endpoint, extra) in [
        ("order-lookup", format!("python:{py}"), json!({})),
        (
            "greet",
            format!("node:{mjs}"),
            json!({"network_access": true, "timeout_seconds": 7}),
        ),
        ("echo-tool", format!("exec:{sh}"), json!({})),
    ] {
        let mut body =
            json!({"name": name, "description": format!("the {name} tool"), "endpoint": endpoint});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, answer) = s
            .call("POST", "/api/v1/registry/tools", Some(&s.admin), Some(body))
            .await;
        assert_eq!(status, 201, "{answer}");
    }
    let (_, tool) = s
        .call("GET", "/api/v1/registry/tools/order-lookup", d, None)
        .await;
    let tool_id = tool["data"]["id"].as_str().unwrap().to_owned();

    // By id: the function, with the input's fields as its arguments.
    let a = ok(
        &s,
        json!({"tool_id": tool_id, "input_json": {"order_id": "ORD-1", "include_tracking": true}}),
    )
    .await;
    assert!(a["error"].is_null(), "{a}");
    assert_eq!(a["output_value"]["order_id"], "ORD-1");
    assert_eq!(a["output_value"]["tracking"], "1Z999AA10123456784");
    assert_eq!(a["language"], "python");
    assert_eq!(a["tool_id"], tool_id.as_str());
    assert_ne!(a["host_uid"], 0);
    let expected = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(&py).unwrap()))
    };
    assert_eq!(a["code_sha256"], expected.as_str());

    // By name: a Node default export, called with (input, ctx).
    let a = ok(
        &s,
        json!({"tool_id": "greet", "input_json": {"name": "ada"}}),
    )
    .await;
    assert_eq!(a["output_value"]["greeting"], "hello ada", "{a}");
    assert_eq!(a["language"], "node");
    // Its own limits apply (`network_access`, `timeout_seconds`) unless the request
    // sets them.
    assert_eq!(a["network_enabled"], true, "{a}");
    assert_eq!(a["limits"]["timeout_ms"], 7_000);
    let a = ok(
        &s,
        json!({"tool_id": "greet", "input_json": {"name": "ada"}, "network_enabled": false, "timeout_seconds": 3}),
    )
    .await;
    assert_eq!(a["network_enabled"], false, "{a}");
    assert_eq!(a["limits"]["timeout_ms"], 3_000);
    // The python tool declared nothing: the server's defaults.
    let a = ok(
        &s,
        json!({"tool_id": "order-lookup", "input_json": {"order_id": "A"}}),
    )
    .await;
    assert_eq!(a["network_enabled"], false, "{a}");
    assert_eq!(a["limits"]["timeout_ms"], 30_000);

    // An executable speaking the wire protocol.
    let a = ok(&s, json!({"tool_id": "echo-tool", "input_json": {"x": 1}})).await;
    assert!(a["error"].is_null(), "{a}");
    assert_eq!(a["output_value"]["shell"], true, "{a}");
    assert_eq!(a["language"], "exec");

    // A built-in is not code the sandbox can run.
    let (status, answer) = execute(&s, json!({"tool_id": "get_current_time"})).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "NOT_SANDBOXABLE");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("builtin:get_current_time"),
        "{answer}"
    );
    // The language, if given, must be the tool's.
    let (status, answer) = execute(&s, json!({"tool_id": "greet", "language": "python"})).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["details"]["fields"][0]["field"], "language");
    // An unknown tool is not found.
    let (status, answer) = execute(&s, json!({"tool_id": "no-such-tool"})).await;
    assert_eq!(status, 404, "{answer}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_are_per_tenant_and_running_code_needs_the_deployer_role() {
    let s = TestServer::start().await;
    let d = ok(&s, json!({"code": "def run(input):\n    return 'mine'\n"})).await;
    let id = d["execution_id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/tools/sandbox/executions/{id}");
    let list = "/api/v1/tools/sandbox/executions";

    // Another tenant's deployer: not found, and an empty list.
    let (status, _) = s
        .call("POST", "/api/v1/users", Some(&s.admin), Some(json!({"username": "ada", "password": "password-123", "role": "deployer", "tenant": "acme"})))
        .await;
    assert_eq!(status, 201);
    let acme = s.login("ada", "password-123").await;
    let (status, answer) = s.call("GET", &path, Some(&acme), None).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["code"], "NOT_FOUND");
    let (status, answer) = s.call("GET", list, Some(&acme), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"], json!([]));
    assert_eq!(answer["meta"]["total"], 0);
    // Their own is theirs.
    let (status, theirs) = s
        .call(
            "POST",
            EXECUTE,
            Some(&acme),
            Some(json!({"code": "def run(input):\n    return 'theirs'\n"})),
        )
        .await;
    assert_eq!(status, 200, "{theirs}");
    let (_, answer) = s.call("GET", list, Some(&acme), None).await;
    assert_eq!(answer["meta"]["total"], 1);
    let (_, answer) = s.call("GET", list, Some(&s.deployer), None).await;
    assert_eq!(answer["meta"]["total"], 1);
    assert_eq!(answer["data"][0]["execution_id"], id.as_str());
    let theirs_path = format!(
        "/api/v1/tools/sandbox/executions/{}",
        theirs["data"]["execution_id"].as_str().unwrap()
    );
    let (status, _) = s.call("GET", &theirs_path, Some(&s.deployer), None).await;
    assert_eq!(status, 404);

    // A viewer may not run code, but reads what its tenant ran (as it reads runs); no
    // token is a 401, whatever the body.
    let body = json!({"code": "def run(input):\n    return 1\n"});
    let (status, answer) = s
        .call("POST", EXECUTE, Some(&s.viewer), Some(body.clone()))
        .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "FORBIDDEN");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deployer"),
        "{answer}"
    );
    let (status, answer) = s.call("GET", &path, Some(&s.viewer), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["output"], "\"mine\"");
    let (status, _) = s.call("GET", list, Some(&s.viewer), None).await;
    assert_eq!(status, 200);
    for (method, route, b) in [
        ("POST", EXECUTE, Some(body.clone())),
        ("GET", path.as_str(), None),
        ("GET", list, None),
    ] {
        let (status, answer) = s.call(method, route, None, b).await;
        assert_eq!(status, 401, "{route}: {answer}");
        assert_eq!(answer["error"]["code"], "UNAUTHENTICATED");
    }
    let (status, _) = s
        .raw("POST", EXECUTE, None, Some(b"{not json".to_vec()))
        .await;
    assert_eq!(status, 401);
    // Nothing the viewer asked for ran.
    let (_, answer) = s.call("GET", list, Some(&s.deployer), None).await;
    assert_eq!(answer["meta"]["total"], 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_a_clear_4xx_naming_the_field() {
    let s = TestServer::start().await;
    let code = "def run(input):\n    return 1\n";
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({}), 422, "code"),
        (json!({"code": ""}), 422, "code"),
        (json!({"code": "  \n"}), 422, "code"),
        (json!({"code": 5}), 422, "code"),
        (
            json!({"code": code, "timeout_seconds": 0}),
            422,
            "timeout_seconds",
        ),
        (
            json!({"code": code, "timeout_seconds": -1}),
            422,
            "timeout_seconds",
        ),
        (
            json!({"code": code, "timeout_seconds": 1.5}),
            422,
            "timeout_seconds",
        ),
        (
            json!({"code": code, "timeout_seconds": "15"}),
            422,
            "timeout_seconds",
        ),
        (
            json!({"code": code, "network_enabled": "yes"}),
            422,
            "network_enabled",
        ),
        (json!({"code": code, "language": "ruby"}), 422, "language"),
        (json!({"code": code, "memory_mb": 1}), 422, "memory_mb"),
        (json!({"code": code, "tool_id": ""}), 422, "tool_id"),
        (
            json!({"code": code, "tool_id": "x".repeat(300)}),
            422,
            "tool_id",
        ),
        (json!({"code": code, "tool_id": 7}), 422, "tool_id"),
        (json!({"code": code, "command": "ls"}), 422, "command"),
        (json!({"code": "x".repeat(300 * 1024)}), 413, "code"),
    ];
    for (body, want, field) in cases {
        let shown = body.to_string().chars().take(80).collect::<String>();
        let (status, answer) = execute(&s, body).await;
        assert_eq!(status, want, "{shown}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{shown}: {message}");
        if want == 422 {
            assert_eq!(answer["error"]["code"], "INVALID_BODY", "{shown}");
            assert_eq!(
                answer["error"]["details"]["fields"][0]["field"], field,
                "{shown}: {answer}"
            );
        } else {
            assert_eq!(answer["error"]["code"], "PAYLOAD_TOO_LARGE");
        }
    }
    let (status, answer) = s
        .raw(
            "POST",
            EXECUTE,
            Some(&s.deployer),
            Some(b"{\"code\": ".to_vec()),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "INVALID_JSON");
    // None of it ran.
    let (_, list) = s
        .call(
            "GET",
            "/api/v1/tools/sandbox/executions",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(list["meta"]["total"], 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_sandbox_answers_503_with_the_fix_and_the_server_still_serves() {
    let s = TestServer::start_with(|c| c.sandbox.config.landlock_min_abi = 99).await;
    let (status, answer) = s.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = execute(&s, json!({"code": "def run(input):\n    return 1\n"})).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "SANDBOX_UNAVAILABLE");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("landlock"), "{message}");
    assert!(message.contains("MECHANISM_UNAVAILABLE"), "{message}");
    // Bad input is still named first.
    let (status, _) = execute(&s, json!({"code": ""})).await;
    assert_eq!(status, 422);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_sandbox_settings_refuse_to_start_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    let mut config = toolshed_server::ServerConfig::new(url);
    config.addr = "127.0.0.1:0".parse().unwrap();
    config.sandbox.config.defaults.memory_bytes = config.sandbox.config.ceilings.memory_bytes + 1;
    let e = match toolshed_server::Server::open(config).await {
        Ok(_) => panic!("a default above its ceiling was accepted"),
        Err(e) => e,
    };
    assert_eq!(e.code().as_str(), "SANDBOX_SETTINGS");
    let source = std::error::Error::source(&e).unwrap().to_string();
    assert!(source.contains("defaults.memory_bytes"), "{source}");
}

/// A registered subprocess tool gets the network only when it declares
/// `network_access: true`: its sandbox then has the user-mode stack's interface beside
/// its own loopback; without it, only loopback. (Loopback of the host stays unreachable
/// either way: `a_host_loopback_listener_is_unreachable_with_the_network_off_or_on`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_tool_gets_the_network_only_when_it_declares_it() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let py = s.write(
        "interfaces.py",
        "def interfaces() -> dict:\n    \"\"\"The network interfaces this process sees.\"\"\"\n    with open('/proc/net/dev') as f:\n        lines = f.read().splitlines()[2:]\n    return {'interfaces': sorted(l.split(':')[0].strip() for l in lines)}\n",
    );
    for (name, network_access) in [("net-on", true), ("net-off", false)] {
        let body = json!({
            "name": name,
            "description": "list interfaces",
            "endpoint": format!("python:{py}:interfaces"),
            "network_access": network_access,
        });
        let (status, answer) = s
            .call("POST", "/api/v1/registry/tools", Some(&s.admin), Some(body))
            .await;
        assert_eq!(status, 201, "{answer}");
    }
    let interfaces = |answer: &Value| -> Vec<String> {
        answer["data"]["output"]["interfaces"]
            .as_array()
            .unwrap_or_else(|| panic!("no interfaces in {answer}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let (status, on) = s
        .call("POST", "/api/v1/registry/tools/net-on/execute", d, None)
        .await;
    assert_eq!(status, 200, "{on}");
    let on = interfaces(&on);
    assert!(on.iter().any(|i| i == "lo"), "{on:?}");
    assert!(
        on.len() > 1,
        "network_access: true gives an outbound interface: {on:?}"
    );
    let (status, off) = s
        .call("POST", "/api/v1/registry/tools/net-off/execute", d, None)
        .await;
    assert_eq!(status, 200, "{off}");
    assert_eq!(interfaces(&off), vec!["lo".to_owned()]);
    s.stop().await;
}
