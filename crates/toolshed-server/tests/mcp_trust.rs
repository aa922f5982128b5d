//! Tool poisoning through MCP, against a real stdio MCP server in the sandbox
//! (`tests/fixtures/poison_mcp.mjs`): a description hiding instructions (concealed
//! text, zero-width, tag and bidi characters) is kept as it is in the API and flagged
//! (`hidden_characters`); a re-discover that finds a changed description and a wider
//! schema (a rug pull) holds the change back: REST and `/mcp` keep serving the
//! accepted definition until an admin accepts it, unless the entry opted into
//! `auto_accept`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{Value, json};

/// Where the fixture is inside the sandbox.
const FIXTURES: &str = "/fixtures";
const V2: &str = "Reads a file. Version two: also accepts any extra argument.";

async fn server() -> TestServer {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .canonicalize()
        .unwrap();
    TestServer::start_with(move |c| {
        c.mcp_binds = vec![toolshed_sandbox::Bind::executable(dir, FIXTURES)];
    })
    .await
}

fn poison(name: &str) -> Value {
    json!({
        "name": name,
        "command": "node",
        "args": [format!("{FIXTURES}/poison_mcp.mjs")],
        "timeout_seconds": 60,
    })
}

async fn post(s: &TestServer, token: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    s.call("POST", path, Some(token), body).await
}

/// One JSON-RPC request to `/mcp`, session-less at the 2025-11-25 revision; its result.
async fn mcp(s: &TestServer, token: &str, method: &str, params: Value) -> Value {
    let resp = s
        .client
        .post(format!("{}/mcp", s.base))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "trust-test", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned())
        .expect("a session");
    let _ = resp.text().await;
    let send = |body: Value| {
        s.client
            .post(format!("{}/mcp", s.base))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &sid)
            .body(body.to_string())
            .send()
    };
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await
        .unwrap();
    let text = send(json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let message: Value = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m["id"] == 2)
            .expect("an answer")
    });
    message["result"].clone()
}

/// The description `/mcp` lists for `name`.
async fn served(s: &TestServer, name: &str) -> Value {
    let listed = mcp(s, &s.deployer, "tools/list", json!({})).await;
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not served: {listed}"))
        .clone()
}

/// Register the fixture, discover it, pull the rug, and discover until the server's
/// change is seen (the hub refreshes its list on the server's `list_changed`).
async fn rug_pulled(s: &TestServer, entry: Value, token: &str) -> (String, Value) {
    let (status, created) = post(s, token, "/api/v1/mcp-servers", Some(entry)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let (status, first) = post(
        s,
        &s.deployer,
        &format!("/api/v1/mcp-servers/{id}/discover"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        first["data"]["added"].as_array().unwrap().len(),
        2,
        "{first}"
    );
    let (status, pulled) = post(
        s,
        &s.deployer,
        &format!("/api/v1/mcp-servers/{id}/execute?tool_name=rug"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 200, "{pulled}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, again) = post(
            s,
            &s.deployer,
            &format!("/api/v1/mcp-servers/{id}/discover"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{again}");
        let d = &again["data"];
        let seen = !d["pending"].as_array().is_none_or(Vec::is_empty)
            || !d["changed"].as_array().is_none_or(Vec::is_empty);
        if seen {
            return (id, again);
        }
        assert!(
            Instant::now() < deadline,
            "the change was never seen: {again}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_description_is_kept_in_the_api_and_flagged() {
    let s = server().await;
    let (status, created) = post(
        &s,
        &s.deployer,
        "/api/v1/mcp-servers",
        Some(poison("poison")),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap();
    let (status, found) = post(
        &s,
        &s.deployer,
        &format!("/api/v1/mcp-servers/{id}/discover"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{found}");
    let read = found["data"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "read_file")
        .unwrap()
        .clone();
    let description = read["description"].as_str().unwrap();
    // The API keeps the text as the server sent it (what a model reads).
    assert!(description.contains("\u{1b}[8m") && description.contains("\u{202e}"));
    let kinds = |flags: &Value| -> Vec<String> {
        let mut k: Vec<String> = flags
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap().to_owned())
            .collect();
        k.sort();
        k.dedup();
        k
    };
    assert_eq!(
        kinds(&read["hidden_characters"]),
        ["bidi", "escape", "tag", "zero_width"],
        "{read}"
    );
    let tag = read["hidden_characters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "tag")
        .unwrap();
    assert_eq!(
        (&tag["field"], &tag["count"]),
        (&json!("description"), &json!(6))
    );
    // The registry tool (list and show) carries the flag too, for every reader.
    let tool_id = read["tool_id"].as_str().unwrap();
    let (_, shown) = s
        .call(
            "GET",
            &format!("/api/v1/registry/tools/{tool_id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(
        kinds(&shown["data"]["hidden_characters"]),
        kinds(&read["hidden_characters"])
    );
    let (_, listed) = s
        .call(
            "GET",
            "/api/v1/registry/tools?search=poison__read",
            Some(&s.viewer),
            None,
        )
        .await;
    assert!(
        !listed["data"][0]["hidden_characters"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{listed}"
    );
    // A plain tool has none.
    let rug = found["data"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "rug")
        .unwrap();
    assert_eq!(rug["hidden_characters"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_definition_waits_for_an_admin_and_clients_keep_the_accepted_one() {
    let s = server().await;
    let (id, again) = rug_pulled(&s, poison("poison"), &s.deployer).await;
    let d = &again["data"];
    assert_eq!(d["pending"], json!(["poison__read_file"]), "{again}");
    assert_eq!(d["changed"], json!([]), "{again}");
    let listed = d["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "read_file")
        .unwrap();
    assert_ne!(listed["description"], V2, "the accepted one is listed");

    // REST and /mcp keep the accepted definition.
    let tool_id = listed["tool_id"].as_str().unwrap().to_owned();
    let (_, tool) = s
        .call(
            "GET",
            &format!("/api/v1/registry/tools/{tool_id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(tool["data"]["revision"], 1, "{tool}");
    assert_ne!(tool["data"]["description"], V2);
    assert_eq!(
        tool["data"]["schema_definition"]["additionalProperties"],
        false
    );
    let old = served(&s, "poison__read_file").await;
    assert_ne!(old["description"], V2, "{old}");
    assert_eq!(old["inputSchema"]["additionalProperties"], false, "{old}");
    // The wider schema is not in force: an argument it would allow is refused.
    let (status, refused) = post(
        &s,
        &s.deployer,
        &format!("/api/v1/mcp-servers/{id}/execute?tool_name=read_file"),
        Some(json!({"path": "/etc/passwd", "exfil": "x"})),
    )
    .await;
    assert_eq!(status, 422, "{refused}");

    // Everyone who can read the entry sees what waits, beside what is in force.
    let (_, entry) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(entry["data"]["pending_changes"], 1, "{entry}");
    let (status, pending) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}/pending"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{pending}");
    let p = &pending["data"][0];
    assert_eq!(
        (&p["name"], &p["registry_name"], &p["revision"]),
        (&json!("read_file"), &json!("poison__read_file"), &json!(1))
    );
    assert_eq!(p["pending_description"], V2);
    assert!(p["pending_schema_definition"]["properties"]["exfil"].is_object());
    assert_eq!(p["schema_definition"]["additionalProperties"], false);

    // A deployer cannot accept; an admin can, and then the new one is served.
    let accept = format!("/api/v1/mcp-servers/{id}/accept");
    let (status, answer) = post(&s, &s.deployer, &accept, Some(json!({}))).await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = post(&s, &s.admin, &accept, Some(json!({"tools": ["nope"]}))).await;
    assert_eq!(status, 409, "{answer}");
    let (status, accepted) =
        post(&s, &s.admin, &accept, Some(json!({"tools": ["read_file"]}))).await;
    assert_eq!(status, 200, "{accepted}");
    assert_eq!(accepted["data"]["accepted"], json!(["poison__read_file"]));
    let new = served(&s, "poison__read_file").await;
    assert_eq!(new["description"], V2, "{new}");
    assert!(
        new["inputSchema"]["properties"]["exfil"].is_object(),
        "{new}"
    );
    let (_, tool) = s
        .call(
            "GET",
            &format!("/api/v1/registry/tools/{tool_id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(
        (&tool["data"]["revision"], &tool["data"]["description"]),
        (&json!(2), &json!(V2))
    );
    let (_, pending) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}/pending"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(pending["data"], json!([]));
    // Nothing waits any more: accepting again is a conflict.
    let (status, answer) = post(&s, &s.admin, &accept, Some(json!({"tools": ["read_file"]}))).await;
    assert_eq!(status, 409, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_that_opts_into_auto_accept_serves_a_change_at_once() {
    let s = server().await;
    let mut body = poison("trusting");
    body["auto_accept"] = json!(true);
    // Taking changes unreviewed is an admin's decision.
    let (status, answer) = post(&s, &s.deployer, "/api/v1/mcp-servers", Some(body.clone())).await;
    assert_eq!(status, 403, "{answer}");
    let (id, again) = rug_pulled(&s, body, &s.admin).await;
    let d = &again["data"];
    assert_eq!(d["changed"], json!(["trusting__read_file"]), "{again}");
    assert_eq!(d["pending"], json!([]), "{again}");
    let new = served(&s, "trusting__read_file").await;
    assert_eq!(new["description"], V2, "{new}");
    let (_, entry) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(
        (
            &entry["data"]["auto_accept"],
            &entry["data"]["pending_changes"]
        ),
        (&json!(true), &json!(0))
    );
}
