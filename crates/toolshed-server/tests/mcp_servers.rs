//! MCP server entries on a real server on loopback, at AgentBreeder's routes: the
//! AgentBreeder body and ours, every bad body a 422 naming its field, tenants that see
//! only their own entries, the roles, and a real `@modelcontextprotocol/server-everything`
//! (tests/mcp, `npm ci --prefix tests/mcp`) started in the server's sandbox: tested,
//! discovered into registry tools, executed through `…/execute` and through the
//! registry's own execute route as durable runs whose calls name the server, the tool and
//! the era. Every answer is checked against the OpenAPI document (tests/common/contract.rs).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::TestServer;
use serde_json::{Value, json};

const PASSWORD: &str = "password-123";

/// Where the npm peers are inside the sandbox.
const MODULES: &str = "/mcp/node_modules";

/// tests/mcp/node_modules, failing clearly when it is not installed.
fn node_modules() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/node_modules");
    assert!(
        p.join("@modelcontextprotocol/server-everything").is_dir(),
        "the MCP test peers are not installed: run `npm ci --prefix tests/mcp`"
    );
    p.canonicalize().unwrap()
}

/// A server whose MCP stdio servers see the npm peers at [`MODULES`].
async fn server_with_peers() -> TestServer {
    let modules = node_modules();
    TestServer::start_with(move |c| {
        c.mcp_binds = vec![toolshed_sandbox::Bind::executable(modules, MODULES)];
    })
    .await
}

/// server-everything over stdio, as our body.
fn everything(name: &str) -> Value {
    json!({
        "name": name,
        "description": "The reference server",
        "transport": "stdio",
        "command": "node",
        "args": [format!("{MODULES}/@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
        "timeout_seconds": 60,
        "tags": ["reference"],
    })
}

/// Add a user (as the owner) and log in as it.
async fn user_of(s: &TestServer, name: &str, role: &str, tenant: &str) -> String {
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": name, "password": PASSWORD, "role": role, "tenant": tenant})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    s.login(name, PASSWORD).await
}

async fn create(s: &TestServer, token: &str, body: Value) -> Value {
    let (status, answer) = s
        .call("POST", "/api/v1/mcp-servers", Some(token), Some(body))
        .await;
    assert_eq!(status, 201, "{answer}");
    answer["data"].clone()
}

/// Assert a 422 naming `field` (its message containing `needle`).
#[track_caller]
fn assert_field(status: u16, answer: &Value, field: &str, needle: &str) {
    assert_eq!(status, 422, "{answer}");
    let fields = answer["error"]["details"]["fields"].as_array();
    let named = fields.is_some_and(|f| f.iter().any(|p| p["field"] == field));
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        named || message.contains(&format!("`{field}`")),
        "{field} is named: {answer}"
    );
    assert!(message.contains(needle), "{needle:?} in {message}");
}

#[tokio::test]
async fn agentbreeders_body_registers_and_its_command_string_is_split_never_shelled() {
    let s = TestServer::start().await;
    // What `agentbreeder quickstart` posts (cli/commands/quickstart.py).
    let body = json!({
        "name": "mcp-filesystem",
        "description": "MCP server exposing read/write access to /workspace",
        "transport": "stdio",
        "command": "npx @modelcontextprotocol/server-filesystem /workspace",
        "tags": ["filesystem", "mcp", "quickstart"],
        "team": "quickstart",
    });
    let created = create(&s, &s.deployer, body).await;
    assert_eq!(created["command"], "npx");
    assert_eq!(
        created["args"],
        json!(["@modelcontextprotocol/server-filesystem", "/workspace"])
    );
    assert_eq!(
        created["endpoint"],
        "npx @modelcontextprotocol/server-filesystem /workspace"
    );
    assert_eq!(
        (
            &created["transport"],
            &created["status"],
            &created["tool_count"]
        ),
        (&json!("stdio"), &json!("registered"), &json!(0))
    );
    assert_eq!(created["team"], "quickstart");
    assert_eq!(created["tags"], json!(["filesystem", "mcp", "quickstart"]));
    assert_eq!(
        (&created["enabled"], &created["source"]),
        (&json!(true), &json!("api"))
    );
    assert_eq!(created["timeout_seconds"], 30);
    assert_eq!(created["last_ping_at"], Value::Null);

    // AgentBreeder's `endpoint` as the command line; shell metacharacters are arguments.
    let odd = create(
        &s,
        &s.deployer,
        json!({"name": "odd", "endpoint": "node 'my server.js' ; rm -rf / | cat $(id)", "timeout_seconds": 5}),
    )
    .await;
    assert_eq!(odd["command"], "node");
    assert_eq!(
        odd["args"],
        json!(["my server.js", ";", "rm", "-rf", "/", "|", "cat", "$(id)"])
    );
    assert_eq!(odd["timeout_seconds"], 5);

    // An HTTP server by AgentBreeder's endpoint: the transport follows.
    let remote = create(
        &s,
        &s.deployer,
        json!({"name": "remote", "endpoint": "https://mcp.example.com/mcp", "transport": "streamable_http"}),
    )
    .await;
    assert_eq!(
        (&remote["url"], &remote["command"]),
        (&json!("https://mcp.example.com/mcp"), &Value::Null)
    );

    // Listed at both paths, by name, AgentBreeder's envelope.
    for path in ["/api/v1/mcp-servers", "/api/v1/mcp_servers"] {
        let (status, page) = s.call("GET", path, Some(&s.viewer), None).await;
        assert_eq!(status, 200, "{page}");
        let names: Vec<&str> = page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["mcp-filesystem", "odd", "remote"], "{path}");
        assert_eq!(page["meta"]["total"], 3);
    }
    let id = created["id"].as_str().unwrap();
    let (status, got) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!((status, &got["data"]), (200, &created));

    // An update keeps what it does not name; a stale revision is a 409.
    let (status, updated) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            Some(json!({"description": "changed", "expected_revision": 1, "status": "active"})),
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    let u = &updated["data"];
    assert_eq!(
        (&u["revision"], &u["description"]),
        (&json!(2), &json!("changed"))
    );
    assert_eq!(u["args"], created["args"]);
    assert_eq!(
        u["status"], "registered",
        "AgentBreeder's `status` is not the client's to set"
    );
    let (status, stale) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            Some(json!({"description": "again", "expected_revision": 1})),
        )
        .await;
    assert_eq!((status, &stale["error"]["code"]), (409, &json!("CONFLICT")));

    // A taken name is a 409; deleting needs an admin (as AgentBreeder has it).
    let (status, taken) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(json!({"name": "odd", "command": "node x.js"})),
        )
        .await;
    assert_eq!(
        (status, &taken["error"]["code"]),
        (409, &json!("CONFLICT")),
        "{taken}"
    );
    let (status, _) = s
        .call(
            "DELETE",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 403);
    let (status, deleted) = s
        .call(
            "DELETE",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.admin),
            None,
        )
        .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["data"]["deleted"], true);
    let (status, _) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn bad_bodies_are_422s_naming_the_field() {
    let s = TestServer::start_with(|c| {
        c.credentials = toolshed_server::credentials::CredentialsPolicy::parse(
            "default: {GITHUB_TOKEN: {provider: env}}",
            "test",
        )
        .unwrap();
    })
    .await;
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"command": "npx x"}), "name", "required"),
        (
            json!({"name": "a b", "command": "npx x"}),
            "name",
            "letters, digits",
        ),
        (json!({"name": "a__b", "command": "npx x"}), "name", "__"),
        (
            json!({"name": "x", "command": "npx x", "transport": "websocket"}),
            "transport",
            "not a transport",
        ),
        (
            json!({"name": "x", "transport": "stdio"}),
            "command",
            "required",
        ),
        (
            json!({"name": "x", "command": "npx 'x"}),
            "command",
            "unclosed",
        ),
        (json!({"name": "x", "command": "   "}), "command", "empty"),
        (
            json!({"name": "x", "transport": "stdio", "command": "npx x", "url": "https://a.example/mcp"}),
            "url",
            "stdio server",
        ),
        (
            json!({"name": "x", "transport": "http", "command": "npx"}),
            "command",
            "HTTP server",
        ),
        (
            json!({"name": "x", "command": "npx x", "timeout_seconds": 0}),
            "timeout_seconds",
            "1 to 3600",
        ),
        (
            json!({"name": "x", "command": "npx x", "env": {"TOKEN": "${SECRET}"}}),
            "env.TOKEN",
            "not in `credentials`",
        ),
        (
            json!({"name": "x", "url": "https://a.example/mcp", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}),
            "headers.Authorization",
            "not in `credentials`",
        ),
        (
            json!({"name": "x", "url": "http://127.0.0.1:9/mcp"}),
            "url",
            "SSRF",
        ),
        (
            json!({"name": "x", "url": "http://169.254.169.254/latest/meta-data/"}),
            "url",
            "SSRF",
        ),
        (
            json!({"name": "x", "endpoint": "http://localhost:8080/mcp", "transport": "sse"}),
            "endpoint",
            "SSRF",
        ),
        (
            json!({"name": "x", "url": "ftp://a.example/"}),
            "url",
            "http",
        ),
        (
            json!({"name": "x", "command": "npx x", "overrides": {"echo": {"effects": "lots"}}}),
            "overrides.echo.effects",
            "not one of",
        ),
        (
            json!({"name": "x", "command": "npx x", "overrides": {"echo": {"approval": {"when": "args.("}}}}),
            "overrides.echo.approval",
            "",
        ),
        (
            json!({"name": "x", "command": "npx x", "source": "stdlib"}),
            "source",
            "not a source",
        ),
        (
            json!({"name": "x", "command": "npx x", "colour": "red"}),
            "colour",
            "unknown field",
        ),
    ];
    for (body, field, needle) in cases {
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/mcp-servers",
                Some(&s.deployer),
                Some(body.clone()),
            )
            .await;
        assert_field(status, &answer, field, needle);
    }
    // A credential outside the policy.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(json!({"name": "x", "command": "npx x", "credentials": ["STRIPE_KEY"], "env": {"K": "${STRIPE_KEY}"}})),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (422, &json!("CREDENTIAL_NOT_ALLOWED")),
        "{answer}"
    );
    // A credential in the policy, named where it is used: registered, the value never stored.
    let ok = create(
        &s,
        &s.deployer,
        json!({"name": "gh", "url": "https://api.example.com/mcp", "credentials": ["GITHUB_TOKEN"], "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}),
    )
    .await;
    assert_eq!(ok["headers"]["Authorization"], "Bearer ${GITHUB_TOKEN}");
    // Not JSON, and an array.
    let (status, _) = s
        .raw(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(b"{".to_vec()),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(json!([1])),
        )
        .await;
    assert_eq!(status, 422);
    // Nothing of the refused bodies was stored.
    let (_, page) = s
        .call("GET", "/api/v1/mcp-servers", Some(&s.viewer), None)
        .await;
    assert_eq!(page["meta"]["total"], 1, "{page}");
}

#[tokio::test]
async fn tenants_see_and_change_only_their_own_entries() {
    let s = TestServer::start().await;
    let acme = user_of(&s, "ada", "deployer", "acme").await;
    let acme_admin = user_of(&s, "abe", "admin", "acme").await;
    let ours = create(&s, &s.deployer, json!({"name": "fs", "command": "npx x"})).await;
    // The same name in another tenant is another entry.
    let theirs = create(&s, &acme, json!({"name": "fs", "command": "npx y"})).await;
    assert_eq!(
        (&ours["tenant"], &theirs["tenant"]),
        (&json!("default"), &json!("acme"))
    );
    assert_ne!(ours["id"], theirs["id"]);

    let (_, page) = s
        .call("GET", "/api/v1/mcp-servers", Some(&acme), None)
        .await;
    assert_eq!(page["meta"]["total"], 1);
    assert_eq!(page["data"][0]["id"], theirs["id"]);
    let id = ours["id"].as_str().unwrap();
    for (method, path, body, token) in [
        ("GET", format!("/api/v1/mcp-servers/{id}"), None, &acme),
        (
            "PUT",
            format!("/api/v1/mcp-servers/{id}"),
            Some(json!({"description": "mine now"})),
            &acme,
        ),
        (
            "DELETE",
            format!("/api/v1/mcp-servers/{id}"),
            None,
            &acme_admin,
        ),
        (
            "POST",
            format!("/api/v1/mcp-servers/{id}/test"),
            None,
            &acme,
        ),
        (
            "POST",
            format!("/api/v1/mcp-servers/{id}/discover"),
            None,
            &acme,
        ),
        (
            "POST",
            format!("/api/v1/mcp-servers/{id}/execute?tool_name=echo"),
            Some(json!({})),
            &acme,
        ),
    ] {
        let (status, answer) = s.call(method, &path, Some(token), body).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (404, &json!("NOT_FOUND")),
            "{method} {path}: {answer}"
        );
    }
    let (_, after) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(after["data"]["revision"], 1, "unchanged: {after}");
    // The organisation's owner sees both.
    let (_, all) = s
        .call("GET", "/api/v1/mcp-servers", Some(&s.admin), None)
        .await;
    assert_eq!(all["meta"]["total"], 2);
}

#[tokio::test]
async fn roles_and_a_disabled_entry_only_an_admin_enables() {
    let s = TestServer::start().await;
    for (method, path, body) in [(
        "POST",
        "/api/v1/mcp-servers".to_owned(),
        Some(json!({"name": "x", "command": "npx x"})),
    )] {
        let (status, answer) = s.call(method, &path, Some(&s.viewer), body).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (403, &json!("FORBIDDEN"))
        );
    }
    // What `toolshed scan --register` sends for a project-scoped file.
    let entry = create(
        &s,
        &s.deployer,
        json!({"name": "cloned", "command": "node /nonexistent/server.js", "enabled": false, "source": "scan:./.mcp.json"}),
    )
    .await;
    assert_eq!(
        (&entry["enabled"], &entry["source"]),
        (&json!(false), &json!("scan:./.mcp.json"))
    );
    let id = entry["id"].as_str().unwrap();
    for (method, path, token) in [
        ("POST", format!("/api/v1/mcp-servers/{id}/test"), &s.viewer),
        (
            "POST",
            format!("/api/v1/mcp-servers/{id}/discover"),
            &s.viewer,
        ),
        (
            "POST",
            format!("/api/v1/mcp-servers/{id}/execute?tool_name=x"),
            &s.viewer,
        ),
        ("PUT", format!("/api/v1/mcp-servers/{id}"), &s.viewer),
    ] {
        let (status, _) = s.call(method, &path, Some(token), Some(json!({}))).await;
        assert_eq!(status, 403, "{method} {path}");
    }
    // Nothing of a disabled entry runs.
    for path in [
        format!("/api/v1/mcp-servers/{id}/test"),
        format!("/api/v1/mcp-servers/{id}/discover"),
        format!("/api/v1/mcp-servers/{id}/execute?tool_name=x"),
    ] {
        let (status, answer) = s
            .call("POST", &path, Some(&s.deployer), Some(json!({})))
            .await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (409, &json!("MCP_SERVER_DISABLED")),
            "{path}: {answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("admin"),
            "{answer}"
        );
    }
    let enable = json!({"enabled": true});
    let (status, answer) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            Some(enable.clone()),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (403, &json!("FORBIDDEN")),
        "{answer}"
    );
    // A deployer may change other fields of it (it stays disabled).
    let (status, answer) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            Some(json!({"description": "reviewed"})),
        )
        .await;
    assert_eq!(
        (status, &answer["data"]["enabled"]),
        (200, &json!(false)),
        "{answer}"
    );
    let (status, answer) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.admin),
            Some(enable),
        )
        .await;
    assert_eq!(
        (status, &answer["data"]["enabled"]),
        (200, &json!(true)),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_502_and_its_entry_says_why() {
    let s = server_with_peers().await;
    let entry = create(
        &s,
        &s.deployer,
        json!({"name": "broken", "command": "node", "args": ["/nonexistent/server.js"], "timeout_seconds": 20}),
    )
    .await;
    let id = entry["id"].as_str().unwrap();
    for route in ["test", "discover"] {
        let (status, answer) = s
            .call(
                "POST",
                &format!("/api/v1/mcp-servers/{id}/{route}"),
                Some(&s.deployer),
                None,
            )
            .await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (502, &json!("MCP_SERVER_UNREACHABLE")),
            "{route}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("`broken`"), "{message}");
    }
    let (_, got) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(got["data"]["status"], "error", "{got}");
    assert!(got["data"]["last_error"].is_string(), "{got}");
}

/// Poll `GET /api/v1/runs/{id}` until it is finished.
async fn finished_run(s: &TestServer, id: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, run) = s
            .call(
                "GET",
                &format!("/api/v1/runs/{id}"),
                Some(&s.deployer),
                None,
            )
            .await;
        assert_eq!(status, 200, "{run}");
        if run["data"]["status"] == "completed" || std::time::Instant::now() > deadline {
            return run["data"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_is_tested_discovered_and_executed_as_durable_runs() {
    let s = server_with_peers().await;
    let entry = create(&s, &s.deployer, everything("everything")).await;
    let id = entry["id"].as_str().unwrap().to_owned();

    let (status, tested) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/test"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{tested}");
    let t = &tested["data"];
    assert_eq!(
        (&t["success"], &t["era"], &t["protocol_version"]),
        (&json!(true), &json!("legacy"), &json!("2025-11-25"))
    );
    assert!(t["latency_ms"].is_u64(), "{t}");
    let (_, got) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(got["data"]["status"], "active");
    assert!(got["data"]["last_ping_at"].is_string());

    let (status, found) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/discover"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{found}");
    let d = &found["data"];
    let tools = d["tools"].as_array().unwrap();
    assert_eq!(d["total"], tools.len());
    let echo = tools
        .iter()
        .find(|t| t["name"] == "echo")
        .expect("echo is listed");
    assert_eq!(echo["registry_name"], "everything__echo");
    assert_eq!(echo["endpoint"], "mcp:everything/echo");
    assert_eq!(
        (&echo["effects"], &echo["approval"]),
        (&json!("none"), &json!("never")),
        "echo is read-only: {echo}"
    );
    assert!(
        echo["schema_definition"]["properties"]["message"].is_object(),
        "{echo}"
    );
    assert_eq!(d["added"].as_array().unwrap().len(), tools.len());
    let (_, registered) = s
        .call(
            "GET",
            "/api/v1/registry/tools/everything__echo",
            Some(&s.viewer),
            None,
        )
        .await;
    let r = &registered["data"];
    assert_eq!(
        (&r["tool_type"], &r["source"], &r["endpoint"]),
        (&json!("mcp"), &json!("mcp"), &json!("mcp:everything/echo")),
        "{r}"
    );
    let (_, listed) = s
        .call(
            "GET",
            "/api/v1/registry/tools?tool_type=mcp&per_page=100",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(listed["meta"]["total"], tools.len());
    let (_, got) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(got["data"]["tool_count"], tools.len());

    // Executed through AgentBreeder's route (args as the body) and through the
    // registry's: the same durable path.
    let (status, done) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/execute?tool_name=echo"),
            Some(&s.deployer),
            Some(json!({"message": "hello"})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["data"]["output"], "Echo: hello", "{done}");
    let first_run = done["data"]["run_id"].as_str().unwrap().to_owned();
    let tool_id = r["id"].as_str().unwrap();
    let (status, done) = s
        .call(
            "POST",
            &format!("/api/v1/registry/tools/{tool_id}/execute"),
            Some(&s.deployer),
            Some(json!({"args": {"message": "again"}})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["data"]["output"], "Echo: again");
    // Bad args are the schema's 422, before anything runs.
    let (status, bad) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/execute?tool_name=everything__echo"),
            Some(&s.deployer),
            Some(json!({"message": 7})),
        )
        .await;
    assert_eq!(
        (status, &bad["error"]["code"]),
        (422, &json!("INVALID_ARGS")),
        "{bad}"
    );
    let (status, _) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/execute?tool_name=nope"),
            Some(&s.deployer),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 404);

    // The run records the call's MCP side.
    let run = finished_run(&s, &first_run).await;
    let calls = run["calls"].as_array().unwrap();
    let mcp = &calls[0]["diagnostics"]["mcp"];
    assert_eq!(
        (
            &mcp["server"],
            &mcp["tool"],
            &mcp["era"],
            &mcp["protocol_version"]
        ),
        (
            &json!("everything"),
            &json!("echo"),
            &json!("legacy"),
            &json!("2025-11-25")
        ),
        "{run}"
    );

    // The owner's override: echo needs an approval; the next discover applies it and
    // the execute parks.
    let (status, _) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            Some(json!({"overrides": {"echo": {"approval": "always", "effects": "external", "idempotency": "keyed"}}})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, again) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/discover"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        again["data"]["changed"],
        json!(["everything__echo"]),
        "{again}"
    );
    assert!(again["data"]["added"].as_array().unwrap().is_empty());
    let (status, parked) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/execute?tool_name=echo"),
            Some(&s.deployer),
            Some(json!({"message": "gated"})),
        )
        .await;
    assert_eq!(
        (status, &parked["data"]["status"]),
        (202, &json!("parked")),
        "{parked}"
    );

    // A manual tool holding a name a second server's tool wants: discover names both.
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({"name": "twin__echo", "description": "Mine.", "endpoint": "builtin:get_current_time"})),
        )
        .await;
    assert_eq!(status, 201);
    let twin = create(&s, &s.deployer, everything("twin")).await;
    let twin_id = twin["id"].as_str().unwrap();
    let (status, clash) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{twin_id}/discover"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(
        (status, &clash["error"]["code"]),
        (409, &json!("CONFLICT")),
        "{clash}"
    );
    let message = clash["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("mcp:twin/echo") && message.contains("source `manual`"),
        "{message}"
    );
    let (_, twin_tools) = s
        .call(
            "GET",
            "/api/v1/registry/tools?q=twin__",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(
        twin_tools["meta"]["total"], 1,
        "nothing of the failed discover was written: {twin_tools}"
    );

    // Deleting the entry deletes its tools.
    let (status, deleted) = s
        .call(
            "DELETE",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.admin),
            None,
        )
        .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["data"]["tools_removed"], tools.len());
    let (status, _) = s
        .call(
            "GET",
            "/api/v1/registry/tools/everything__echo",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_the_operator_allows_is_tested_discovered_and_executed() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new("node")
        .arg(node_modules().join("@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "server-everything did not listen on {port}"
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!("server-everything exited: {status}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _child = Kill(child);
    let url = format!("http://127.0.0.1:{port}/mcp");

    // The default guard refuses a loopback URL at registration.
    let strict = TestServer::start().await;
    let (status, answer) = strict
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&strict.deployer),
            Some(json!({"name": "web", "url": url})),
        )
        .await;
    assert_field(status, &answer, "url", "SSRF");

    // The operator allows loopback: AgentBreeder's body registers it.
    let s = TestServer::start_with(|c| {
        c.dispatcher.http = toolshed_dispatch::HttpPolicy::default().with_loopback();
    })
    .await;
    let entry = create(
        &s,
        &s.deployer,
        json!({"name": "web", "endpoint": url, "transport": "streamable_http", "timeout_seconds": 30}),
    )
    .await;
    assert_eq!(
        (&entry["url"], &entry["transport"]),
        (&json!(url), &json!("streamable_http"))
    );
    let id = entry["id"].as_str().unwrap();
    let (status, tested) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/test"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{tested}");
    let (status, found) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/discover"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{found}");
    let (status, done) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/execute?tool_name=echo"),
            Some(&s.deployer),
            Some(json!({"message": "over http"})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["data"]["output"], "Echo: over http");
}

/// The variable the child process has the credential in (the policy serves `MCP_KEY`
/// from it).
const LEAKY: &str = "LEAKY_MCP_TEST_KEY";
/// Its value.
const MCP_SECRET: &str = "sk-mcp-5e1f0a9b7c3d2468";
const SECRET_TEST: &str = "a_credential_named_in_env_reaches_the_server_and_no_answer_or_run";

#[test]
fn a_credential_named_in_env_reaches_the_server_and_no_answer_or_run() {
    if std::env::var(LEAKY).is_ok() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(secret_in_the_child());
        return;
    }
    let (passed, text) = toolshed_testkit::rerun_alone(SECRET_TEST, [(LEAKY, MCP_SECRET)]);
    let shown = text.replace(MCP_SECRET, "<THE SECRET>");
    assert!(passed, "the child failed:\n{shown}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{shown}");
    assert!(
        !text.contains(MCP_SECRET),
        "the secret is in the output:\n{shown}"
    );
}

async fn secret_in_the_child() {
    let modules = node_modules();
    let s = TestServer::start_with(move |c| {
        c.mcp_binds = vec![toolshed_sandbox::Bind::executable(modules, MODULES)];
        c.credentials = toolshed_server::credentials::CredentialsPolicy::parse(
            &format!("default: {{MCP_KEY: {{provider: env, key: {LEAKY}}}}}"),
            "test",
        )
        .unwrap();
    })
    .await;
    let mut body = everything("keyed");
    body["credentials"] = json!(["MCP_KEY"]);
    body["env"] = json!({"API_KEY": "${MCP_KEY}"});
    let entry = create(&s, &s.deployer, body).await;
    assert_eq!(
        entry["env"]["API_KEY"], "${MCP_KEY}",
        "stored by name: {entry}"
    );
    let id = entry["id"].as_str().unwrap();
    let (status, found) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/discover"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{found}");
    let (status, done) = s
        .call(
            "POST",
            &format!("/api/v1/mcp-servers/{id}/execute?tool_name=get-env"),
            Some(&s.deployer),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    let text = done.to_string();
    let output = done["data"]["output"].as_str().unwrap_or_default();
    assert!(
        output.contains(r#""API_KEY": "[REDACTED]""#),
        "the server got the resolved value, scrubbed from the answer: {output}"
    );
    assert!(!text.contains(MCP_SECRET), "the answer carries the secret");
    let run_id = done["data"]["run_id"].as_str().unwrap();
    let (_, run) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run_id}"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert!(
        !run.to_string().contains(MCP_SECRET),
        "the run carries the secret"
    );
    let (_, entry) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert!(!entry.to_string().contains(MCP_SECRET));
}
