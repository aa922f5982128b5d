//! The registry API against a real server on loopback: every route's success, bad
//! JSON, schema-invalid bodies, unknown ids, oversized bodies, missing/wrong/expired
//! tokens and roles, never a 500; tools in Python and Node pushed with inferred schemas
//! and executed, including ones that hang, crash, print garbage or flood stdout.

#![allow(clippy::unwrap_used)]

mod common;

use common::{TestServer, expired_token, tampered};
use serde_json::{Value, json};

/// Every route with a token requirement: (method, path, a valid body when it takes one).
fn protected_routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/api/v1/users", None),
        (
            "POST",
            "/api/v1/users",
            Some(json!({"username": "x1", "password": "password-123", "role": "viewer"})),
        ),
        ("DELETE", "/api/v1/users/vic", None),
        ("GET", "/api/v1/registry/tools", None),
        (
            "POST",
            "/api/v1/registry/tools",
            Some(json!({"name": "t1", "description": "d", "endpoint": "builtin:get_current_time"})),
        ),
        ("GET", "/api/v1/registry/tools/get_current_time", None),
        (
            "PUT",
            "/api/v1/registry/tools/get_current_time",
            Some(
                json!({"name": "get_current_time", "description": "d", "endpoint": "builtin:get_current_time"}),
            ),
        ),
        ("DELETE", "/api/v1/registry/tools/markdown_writer", None),
        (
            "GET",
            "/api/v1/registry/tools/get_current_time/versions",
            None,
        ),
        ("GET", "/api/v1/registry/tools/get_current_time/usage", None),
        (
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(json!({"args": {}})),
        ),
        ("GET", "/api/v1/registry/agents", None),
        (
            "POST",
            "/api/v1/registry/agents",
            Some(json!({"name": "a1", "framework": "langgraph"})),
        ),
        ("GET", "/api/v1/registry/agents/a1", None),
        ("GET", "/api/v1/runs", None),
        ("GET", "/api/v1/runs/r1", None),
        ("POST", "/api/v1/runs/r1/resume", None),
        ("POST", "/api/v1/runs/r1/cancel", Some(json!({}))),
        ("GET", "/api/v1/approvals", None),
        ("POST", "/api/v1/approvals/c1/approve", Some(json!({}))),
        ("POST", "/api/v1/approvals/c1/deny", Some(json!({}))),
        ("POST", "/api/v1/answers/c1", Some(json!({"answer": {}}))),
        (
            "POST",
            "/api/v1/tools/sandbox/execute",
            Some(json!({"code": "def run(input):\n    return 1\n"})),
        ),
        ("GET", "/api/v1/tools/sandbox/executions", None),
        ("GET", "/api/v1/tools/sandbox/executions/e1", None),
    ]
}

#[tokio::test]
async fn every_route_refuses_missing_malformed_tampered_and_expired_tokens() {
    let s = TestServer::start().await;
    let expired = expired_token();
    let tampered = tampered(&s.admin);
    for (method, path, body) in protected_routes() {
        for (token, what) in [
            (None, "no token"),
            (Some("not-a-jwt"), "garbage"),
            (Some(tampered.as_str()), "tampered"),
            (Some(expired.as_str()), "expired"),
        ] {
            let (status, answer) = s.call(method, path, token, body.clone()).await;
            assert_eq!(status, 401, "{method} {path} with {what}: {answer}");
            assert_eq!(answer["error"]["code"], "UNAUTHENTICATED");
        }
    }
    let (_, answer) = s.call("GET", "/api/v1/runs", Some(&expired), None).await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    // A token from another signer.
    let other = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"iss": "toolshed", "sub": "admin", "role": "admin", "iat": 1, "exp": 4_000_000_000u64}),
        &jsonwebtoken::EncodingKey::from_secret(b"another-secret-another-secret-another"),
    )
    .unwrap();
    let (status, _) = s
        .call("GET", "/api/v1/registry/tools", Some(&other), None)
        .await;
    assert_eq!(status, 401);
    s.stop().await;
}

#[tokio::test]
async fn roles_are_enforced_on_every_route_that_changes_something() {
    let s = TestServer::start().await;
    for (method, path, body) in protected_routes() {
        let needs = if path.starts_with("/api/v1/users") {
            "admin"
        } else if method == "GET" {
            "viewer"
        } else {
            "deployer"
        };
        let (status, answer) = s.call(method, path, Some(&s.viewer), body.clone()).await;
        if needs == "viewer" {
            assert_ne!(status, 403, "{method} {path}: {answer}");
        } else {
            assert_eq!(status, 403, "viewer on {method} {path}: {answer}");
            assert_eq!(answer["error"]["code"], "FORBIDDEN");
            assert!(answer["error"]["message"].as_str().unwrap().contains(needs));
        }
        if needs == "admin" {
            let (status, _) = s.call(method, path, Some(&s.deployer), body.clone()).await;
            assert_eq!(status, 403, "deployer on {method} {path}");
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn bad_json_field_errors_and_oversized_bodies_are_clear_4xx() {
    let s = TestServer::start_with(|c| c.max_body_bytes = 64 * 1024).await;
    let big = vec![b' '; 100 * 1024];
    for (method, path, _) in
        protected_routes()
            .into_iter()
            .chain([("POST", "/api/v1/auth/login", None)])
    {
        if method == "GET" || method == "DELETE" || path.ends_with("/resume") {
            continue;
        }
        let (status, answer) = s
            .raw(method, path, Some(&s.admin), Some(b"{\"name\": ".to_vec()))
            .await;
        assert_eq!(status, 400, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_JSON");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("line 1"),
            "{answer}"
        );
        let (status, answer) = s.raw(method, path, Some(&s.admin), Some(big.clone())).await;
        assert_eq!(status, 413, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "PAYLOAD_TOO_LARGE");
        let (status, answer) = s
            .call(method, path, Some(&s.admin), Some(json!([1, 2])))
            .await;
        // The body is read before anything is looked up, so unknown ids do not matter.
        assert_eq!(status, 422, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_BODY", "{method} {path}");
    }
    // Field errors name the field.
    let cases = [
        (
            "POST",
            "/api/v1/auth/login",
            json!({"username": "admin"}),
            "password",
        ),
        (
            "POST",
            "/api/v1/auth/login",
            json!({"username": 3, "password": "x"}),
            "username",
        ),
        (
            "POST",
            "/api/v1/users",
            json!({"username": "u", "password": "password-1", "role": "boss"}),
            "boss",
        ),
        (
            "POST",
            "/api/v1/users",
            json!({"username": "u", "password": "short", "role": "viewer"}),
            "at least 8",
        ),
        (
            "POST",
            "/api/v1/users",
            json!({"username": "no spaces", "password": "password-1", "role": "viewer"}),
            "username",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"description": "d"}),
            "name",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "bad name!", "description": "d"}),
            "name",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "idempotancy": "keyed"}),
            "idempotancy",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "tool_type": "magic"}),
            "tool_type",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "schema_definition": {"type": "objekt"}}),
            "schema_definition",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "endpoint": "ftp://x"}),
            "endpoint",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "endpoint": "builtin:nope"}),
            "get_current_time",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "endpoint": "python:no/such/file.py"}),
            "send the code in `code`",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "source": "Not Valid"}),
            "source",
        ),
        (
            "POST",
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "effects": "external", "endpoint": "builtin:get_current_time"}),
            "keyed",
        ),
        (
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            json!({"args": [1]}),
            "args",
        ),
        (
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            json!({"argz": {}}),
            "argz",
        ),
        (
            "POST",
            "/api/v1/registry/agents",
            json!({"framework": "x"}),
            "name",
        ),
        (
            "POST",
            "/api/v1/registry/agents",
            json!({"name": "a", "toolz": []}),
            "toolz",
        ),
        ("POST", "/api/v1/answers/c1", json!({}), "answer"),
    ];
    for (method, path, body, needle) in cases {
        let (status, answer) = s
            .call(method, path, Some(&s.admin), Some(body.clone()))
            .await;
        assert_eq!(status, 422, "{path} {body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{path} {body}: `{needle}` not in {message}"
        );
    }
    // Bad query strings.
    for path in [
        "/api/v1/registry/tools?page=minus",
        "/api/v1/registry/tools?colour=red",
        "/api/v1/runs?status=sleepy",
        "/api/v1/registry/agents?per_page=-1",
    ] {
        let (status, answer) = s.call("GET", path, Some(&s.viewer), None).await;
        assert_eq!(status, 400, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_QUERY");
    }
    s.stop().await;
}

#[tokio::test]
async fn unknown_ids_routes_and_methods_are_404_and_405_envelopes() {
    let s = TestServer::start().await;
    let t = Some(s.admin.as_str());
    for (method, path, body) in [
        ("GET", "/api/v1/registry/tools/nope", None),
        (
            "PUT",
            "/api/v1/registry/tools/nope",
            Some(json!({"name": "nope", "description": "d"})),
        ),
        ("DELETE", "/api/v1/registry/tools/nope", None),
        ("GET", "/api/v1/registry/tools/nope/usage", None),
        ("GET", "/api/v1/registry/tools/nope/versions", None),
        (
            "POST",
            "/api/v1/registry/tools/nope/execute",
            Some(json!({})),
        ),
        ("GET", "/api/v1/registry/agents/nope", None),
        ("GET", "/api/v1/runs/nope", None),
        ("POST", "/api/v1/runs/nope/resume", None),
        ("POST", "/api/v1/runs/nope/cancel", None),
        ("POST", "/api/v1/approvals/nope/approve", None),
        ("POST", "/api/v1/approvals/nope/deny", None),
        ("POST", "/api/v1/answers/nope", Some(json!({"answer": {}}))),
        ("DELETE", "/api/v1/users/nope", None),
        ("GET", "/api/v1/nothing-here", None),
    ] {
        let (status, answer) = s.call(method, path, t, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "NOT_FOUND");
    }
    let (status, answer) = s.call("PATCH", "/api/v1/registry/tools", t, None).await;
    assert_eq!(status, 405, "{answer}");
    assert_eq!(answer["error"]["code"], "METHOD_NOT_ALLOWED");
    s.stop().await;
}

#[tokio::test]
async fn tools_register_list_show_update_with_versions_and_delete() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let seed_body = json!({
        "name": "order-lookup",
        "description": "Look up an order by ID, with optional tracking info",
        "tool_type": "function",
        "schema_definition": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "Order ID (ORD-XXXXXX)"},
                "include_tracking": {"type": "boolean", "default": false}
            },
            "required": ["order_id"]
        },
        "source": "manual"
    });
    let (status, answer) = s
        .call("POST", "/api/v1/registry/tools", d, Some(seed_body.clone()))
        .await;
    assert_eq!(status, 201, "{answer}");
    let tool = &answer["data"];
    let id = tool["id"].as_str().unwrap().to_owned();
    assert_eq!(tool["name"], "order-lookup");
    assert_eq!(tool["status"], "active");
    assert_eq!(tool["source"], "manual");
    assert_eq!(tool["tool_type"], "function");
    assert_eq!(tool["revision"], 1);
    assert!(tool["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(tool["schema_definition"]["required"], json!(["order_id"]));

    let (status, answer) = s
        .call("POST", "/api/v1/registry/tools", d, Some(seed_body.clone()))
        .await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("order-lookup")
    );

    // Listing: filters and pages (five stdlib tools are seeded).
    let (_, all) = s
        .call("GET", "/api/v1/registry/tools", Some(&s.viewer), None)
        .await;
    assert_eq!(all["meta"]["total"], 6, "{all}");
    let (_, manual) = s
        .call(
            "GET",
            "/api/v1/registry/tools?source=manual",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(manual["data"].as_array().unwrap().len(), 1);
    assert_eq!(manual["data"][0]["name"], "order-lookup");
    let (_, stdlib) = s
        .call(
            "GET",
            "/api/v1/registry/tools?source=stdlib&tool_type=function",
            Some(&s.viewer),
            None,
        )
        .await;
    let names: Vec<&str> = stdlib["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "get_current_time",
            "markdown_writer",
            "read_attachment",
            "sql_query",
            "web_search"
        ]
    );
    let (_, mcp) = s
        .call(
            "GET",
            "/api/v1/registry/tools?tool_type=mcp",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(mcp["meta"]["total"], 0);
    let (_, p2) = s
        .call(
            "GET",
            "/api/v1/registry/tools?per_page=2&page=2",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(p2["meta"], json!({"page": 2, "per_page": 2, "total": 6}));
    assert_eq!(p2["data"].as_array().unwrap().len(), 2);

    // Show by id and by name (either spelling).
    for key in [id.as_str(), "order-lookup", "order_lookup"] {
        let (status, answer) = s
            .call(
                "GET",
                &format!("/api/v1/registry/tools/{key}"),
                Some(&s.viewer),
                None,
            )
            .await;
        assert_eq!(status, 200, "{key}: {answer}");
        assert_eq!(answer["data"]["id"], id.as_str());
    }

    // Update: a new revision; the old one is kept; a stale revision is refused.
    let mut v2 = seed_body.clone();
    v2["description"] = json!("Look up an order (v2)");
    v2["expected_revision"] = json!(1);
    let (status, answer) = s
        .call(
            "PUT",
            &format!("/api/v1/registry/tools/{id}"),
            d,
            Some(v2.clone()),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["revision"], 2);
    let (status, answer) = s
        .call("PUT", &format!("/api/v1/registry/tools/{id}"), d, Some(v2))
        .await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revision 2"),
        "{answer}"
    );
    let (_, versions) = s
        .call(
            "GET",
            &format!("/api/v1/registry/tools/{id}/versions"),
            Some(&s.viewer),
            None,
        )
        .await;
    let descriptions: Vec<&str> = versions["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["description"].as_str().unwrap())
        .collect();
    assert_eq!(
        descriptions,
        [
            "Look up an order by ID, with optional tracking info",
            "Look up an order (v2)"
        ]
    );

    // Delete: gone from listings and lookups, history kept, the name free again.
    let (status, answer) = s
        .call("DELETE", &format!("/api/v1/registry/tools/{id}"), d, None)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["status"], "deleted");
    let (status, _) = s
        .call(
            "GET",
            &format!("/api/v1/registry/tools/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = s
        .call(
            "POST",
            &format!("/api/v1/registry/tools/{id}/execute"),
            d,
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 404);
    let (_, versions) = s
        .call(
            "GET",
            &format!("/api/v1/registry/tools/{id}/versions"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(versions["data"].as_array().unwrap().len(), 2);
    let (status, answer) = s
        .call("POST", "/api/v1/registry/tools", d, Some(seed_body))
        .await;
    assert_eq!(status, 201, "{answer}");
    assert_ne!(answer["data"]["id"], id.as_str());
    s.stop().await;
}

#[tokio::test]
async fn stdlib_tools_execute_as_runs_carrying_the_principal_per_tenant() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(&s.deployer),
            Some(json!({"args": {"utc_offset": "+02:00"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let data = &answer["data"];
    assert_eq!(data["status"], "completed");
    assert!(data["error"].is_null(), "{data}");
    assert!(data["output"].is_object(), "{data}");
    assert_eq!(data["stdout"], "");
    let duration_ms = data["duration_ms"].as_f64().unwrap();
    let run_id = data["run_id"].as_str().unwrap().to_owned();

    // Bad args: 422 with every violation, and no run recorded for them.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(&s.deployer),
            Some(json!({"args": {"utc_offset": 3, "extra": true}})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "INVALID_ARGS");
    assert!(
        answer["error"]["details"]["violations"]
            .as_array()
            .unwrap()
            .len()
            == 2
    );

    // The run is in the journal with its call and the deployer's principal.
    let (status, run) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run_id}?crumbs=true"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["data"]["status"], "completed");
    assert_eq!(run["data"]["principal"]["sub"], "dee");
    assert_eq!(run["data"]["principal"]["iss"], "toolshed");
    assert_eq!(run["data"]["tenant"], "default");
    assert_eq!(run["data"]["calls"][0]["tool"], "get_current_time");
    assert_eq!(
        run["data"]["calls"][0]["duration_ms"].as_f64(),
        Some(duration_ms),
        "the answer reports the recorded duration"
    );
    let kinds: Vec<&str> = run["data"]["crumbs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert!(
        kinds.contains(&"tool:call") && kinds.contains(&"tool:result"),
        "{kinds:?}"
    );
    let (_, runs) = s
        .call(
            "GET",
            "/api/v1/runs?agent_id=registry",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(runs["data"].as_array().unwrap().len(), 1);

    // Another tenant sees none of it.
    let (status, _) = s
        .call("POST", "/api/v1/users", Some(&s.admin), Some(json!({"username": "ada", "password": "password-123", "role": "deployer", "tenant": "acme"})))
        .await;
    assert_eq!(status, 201);
    let acme = s.login("ada", "password-123").await;
    let (_, runs) = s.call("GET", "/api/v1/runs", Some(&acme), None).await;
    assert_eq!(runs["data"], json!([]));
    for (method, path) in [
        ("GET", format!("/api/v1/runs/{run_id}")),
        ("POST", format!("/api/v1/runs/{run_id}/resume")),
        ("POST", format!("/api/v1/runs/{run_id}/cancel")),
    ] {
        let (status, answer) = s.call(method, &path, Some(&acme), None).await;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    s.stop().await;
}

#[tokio::test]
async fn python_and_node_tools_get_inferred_schemas_and_execute() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let a = Some(s.admin.as_str());
    let py = s.write(
        "order_lookup.py",
        include_str!("../../toolshed-dispatch/tests/fixtures/order_lookup.py"),
    );
    let (status, answer) = s
        .call("POST", "/api/v1/registry/tools", a, Some(json!({"name": "order-lookup", "description": "", "endpoint": format!("python:{py}")})))
        .await;
    assert_eq!(status, 201, "{answer}");
    let schema = &answer["data"]["schema_definition"];
    assert_eq!(schema["required"], json!(["order_id"]), "{schema}");
    assert_eq!(schema["properties"]["include_tracking"]["default"], false);
    assert!(
        schema["properties"]["order_id"]["description"]
            .as_str()
            .unwrap()
            .contains("ORD-")
    );
    assert_eq!(answer["data"]["description"], "Look up an order by ID.");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/order-lookup/execute",
            d,
            Some(json!({"args": {"order_id": "ORD-123456", "include_tracking": true}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["output"]["status"], "shipped");
    assert_eq!(answer["data"]["output"]["tracking"], "1Z999AA10123456784");
    assert!(answer["data"]["error"].is_null());
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/order-lookup/execute",
            d,
            Some(json!({"args": {"include_tracking": "yes"}})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("order_id") && message.contains("include_tracking"),
        "{message}"
    );

    let node = s.write(
        "greet.mjs",
        include_str!("../../toolshed-dispatch/tests/fixtures/greet.mjs"),
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            a,
            Some(json!({"name": "greet", "description": "", "endpoint": format!("node:{node}")})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        answer["data"]["schema_definition"]["required"],
        json!(["name"])
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/greet/execute",
            d,
            Some(json!({"args": {"name": "Ada"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["output"]["greeting"], "hello Ada");
    assert_eq!(answer["data"]["output"]["run_id"], answer["data"]["run_id"]);

    // The token's principal reaches the tool's context.
    let who = s.write(
        "who.py",
        "def who(ctx) -> dict:\n    \"\"\"Say who the run acts for.\"\"\"\n    return {\"principal\": ctx.principal, \"run_id\": ctx.run_id}\n",
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            a,
            Some(json!({"name": "who", "endpoint": format!("python:{who}")})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call("POST", "/api/v1/registry/tools/who/execute", d, None)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"]["output"]["principal"],
        json!({"iss": "toolshed", "sub": "dee", "tenant": "default"})
    );
    assert_eq!(answer["data"]["output"]["run_id"], answer["data"]["run_id"]);
    s.stop().await;
}

#[tokio::test]
async fn hanging_crashing_garbage_and_flooding_tools_are_error_results() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let a = Some(s.admin.as_str());
    let py = s.write(
        "bad_tools.py",
        r#"
import os, sys, time

def sleeper(seconds: float = 30.0) -> dict:
    """Sleep far past the timeout."""
    time.sleep(seconds)
    return {"slept": seconds}

def quitter(code: int = 3) -> dict:
    """Exit the process with a non-zero code."""
    print("about to exit", file=sys.stderr, flush=True)
    os._exit(code)

def chatty() -> dict:
    """Print text that is not the protocol: the runner keeps it off the protocol channel."""
    print("this is not json")
    return {"ok": True}

def shouter() -> dict:
    """Flood stderr far past its cap."""
    chunk = "y" * 65536
    for _ in range(200):
        sys.stderr.write(chunk)
    return {"ok": True}
"#,
    );
    // exec: tools own their stdout, so they can break the protocol for real.
    let script = |name: &str, body: &str| {
        let path = s.write(name, body);
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
        path
    };
    let garbage = script(
        "garbage.sh",
        include_str!("../../toolshed-dispatch/tests/fixtures/not_json.sh"),
    );
    let flood = script(
        "flood.sh",
        include_str!("../../toolshed-dispatch/tests/fixtures/flood.sh"),
    );
    let exit3 = script(
        "exit3.sh",
        include_str!("../../toolshed-dispatch/tests/fixtures/exit3.sh"),
    );
    for (name, endpoint, extra) in [
        (
            "sleeper",
            format!("python:{py}:sleeper"),
            json!({"timeout_ms": 500}),
        ),
        ("quitter", format!("python:{py}:quitter"), json!({})),
        ("chatty", format!("python:{py}:chatty"), json!({})),
        ("shouter", format!("python:{py}:shouter"), json!({})),
        ("garbage", format!("exec:{garbage}"), json!({})),
        (
            "flood",
            format!("exec:{flood}"),
            json!({"timeout_ms": 10000}),
        ),
        ("exit3", format!("exec:{exit3}"), json!({})),
    ] {
        let mut body = json!({"name": name, "description": name, "endpoint": endpoint});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        let (status, answer) = s
            .call("POST", "/api/v1/registry/tools", a, Some(body))
            .await;
        assert_eq!(status, 201, "{name}: {answer}");
    }
    // (tool, expected error text or None for success, text expected in stderr)
    for (name, error_word, stderr_word) in [
        ("sleeper", Some("timed out after 500ms"), None),
        ("quitter", Some("exit"), Some("about to exit")),
        // chatty's print() is its stdout (checked below), never the protocol.
        ("chatty", None, None),
        ("shouter", None, Some("yyyy")),
        ("garbage", Some("hello, i am not json"), None),
        ("flood", Some("stdout"), None),
        (
            "exit3",
            Some("3"),
            Some("config file /etc/tool.conf is missing"),
        ),
    ] {
        let started = std::time::Instant::now();
        let (status, answer) = s
            .call(
                "POST",
                &format!("/api/v1/registry/tools/{name}/execute"),
                d,
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 200, "{name}: {answer}");
        let data = &answer["data"];
        match error_word {
            Some(word) => {
                assert!(data["output"].is_null(), "{name}: {data}");
                let message = data["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_lowercase();
                assert!(message.contains(word), "{name}: `{word}` not in {data}");
            }
            None => {
                assert!(data["error"].is_null(), "{name}: {data}");
                assert_eq!(data["output"], json!({"ok": true}), "{name}");
            }
        }
        if let Some(word) = stderr_word {
            assert!(
                data["stderr"].as_str().unwrap().contains(word),
                "{name}: `{word}` not in stderr: {data}"
            );
        }
        // The diagnostics of each way out.
        match name {
            "chatty" => assert!(
                data["stdout"]
                    .as_str()
                    .unwrap()
                    .contains("this is not json"),
                "{data}"
            ),
            "sleeper" => assert_eq!(data["timed_out"], true, "{data}"),
            "quitter" | "exit3" => assert_eq!(data["exit_code"], 3, "{name}: {data}"),
            "flood" => {
                assert_eq!(data["stdout_truncated"], true, "{data}");
                assert_eq!(data["signal"], 9, "killed: {data}");
            }
            _ => assert_eq!(data["timed_out"], false, "{name}: {data}"),
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{name} took {:?}",
            started.elapsed()
        );
        // The result is recorded in the run, and the server still answers.
        let (_, run) = s
            .call(
                "GET",
                &format!("/api/v1/runs/{}", data["run_id"].as_str().unwrap()),
                d,
                None,
            )
            .await;
        assert_eq!(
            run["data"]["calls"][0]["error"].is_object(),
            error_word.is_some(),
            "{name}: {run}"
        );
        let (status, _) = s.call("GET", "/healthz", None, None).await;
        assert_eq!(status, 200);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_dispatched_stream_records_its_partials_in_the_run() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let a = Some(s.admin.as_str());
    let py = s.write(
        "counter.py",
        "def counter(n: int = 3):\n    \"\"\"Count; each value is a partial, the last the result.\"\"\"\n    for i in range(n):\n        yield {\"i\": i}\n",
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            a,
            Some(json!({"name": "counter", "endpoint": format!("python:{py}")})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/counter/execute",
            d,
            Some(json!({"args": {"n": 3}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["output"], json!({"i": 2}));
    // The tool printed nothing: its stdout is empty (the runner's protocol lines,
    // partials included, are not the tool's output).
    assert_eq!(answer["data"]["stdout"], "", "{answer}");
    let run_id = answer["data"]["run_id"].as_str().unwrap();
    let (_, run) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run_id}?crumbs=true"),
            d,
            None,
        )
        .await;
    let partials: Vec<&Value> = run["data"]["crumbs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "tool:result:partial")
        .collect();
    // Every yield is a partial, the last one the result too (bread's rule).
    assert_eq!(partials.len(), 3, "{run}");
    assert_eq!(partials[0]["payload"], json!({"i": 0}), "{run}");
    s.stop().await;
}

#[tokio::test]
async fn agents_keep_the_usage_graph_current() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let (status, answer) = s
        .call("POST", "/api/v1/registry/agents", d, Some(json!({
            "name": "support-agent",
            "framework": "langgraph",
            "tools": [
                {"ref": "tools/markdown-writer"},
                {"ref": "tools/get_current_time"},
                {"ref": "tools/not-registered"},
                {"name": "inline_tool", "type": "function", "description": "inline", "schema": {"type": "object", "properties": {}}}
            ]
        })))
        .await;
    assert_eq!(status, 201, "{answer}");
    let agent_id = answer["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        answer["data"]["tool_ids"].as_array().unwrap().len(),
        2,
        "{answer}"
    );
    let (_, usage) = s
        .call(
            "GET",
            "/api/v1/registry/tools/markdown_writer/usage",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(
        usage["data"],
        json!([{"agent_id": agent_id, "agent_name": "support-agent", "agent_status": "registered"}])
    );
    // Re-registering without the ref removes the edge; the id stays.
    let (status, answer) = s
        .call("POST", "/api/v1/registry/agents", d, Some(json!({"name": "support-agent", "framework": "langgraph", "tools": [{"ref": "tools/get_current_time"}]})))
        .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["data"]["id"], agent_id.as_str());
    let (_, usage) = s
        .call(
            "GET",
            "/api/v1/registry/tools/markdown_writer/usage",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(usage["data"], json!([]));
    let (_, usage) = s
        .call(
            "GET",
            "/api/v1/registry/tools/get_current_time/usage",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(usage["data"].as_array().unwrap().len(), 1);
    let (_, agents) = s
        .call("GET", "/api/v1/registry/agents", Some(&s.viewer), None)
        .await;
    assert_eq!(agents["meta"]["total"], 1);
    let (status, agent) = s
        .call(
            "GET",
            "/api/v1/registry/agents/support-agent",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(agent["data"]["framework"], "langgraph");
    s.stop().await;
}

#[tokio::test]
async fn gated_calls_park_and_are_approved_denied_and_resumed_over_http() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            d,
            Some(json!({
                "name": "guarded-time", "description": "the time, after approval",
                "endpoint": "builtin:get_current_time", "approval": "always"
            })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let mut parked = Vec::new();
    for _ in 0..2 {
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/registry/tools/guarded-time/execute",
                d,
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 202, "{answer}");
        assert_eq!(answer["data"]["status"], "parked");
        parked.push((
            answer["data"]["run_id"].as_str().unwrap().to_owned(),
            answer["data"]["call_id"].as_str().unwrap().to_owned(),
        ));
    }
    let (_, gates) = s
        .call("GET", "/api/v1/approvals", Some(&s.viewer), None)
        .await;
    assert_eq!(gates["data"].as_array().unwrap().len(), 2, "{gates}");

    let (run_a, call_a) = &parked[0];
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{call_a}/approve"),
            d,
            Some(json!({"reason": "checked"})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["decision"]["by"], "dee");
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{call_a}/approve"),
            d,
            None,
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/answers/{call_a}"),
            d,
            Some(json!({"answer": {"ok": true}})),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    let (status, answer) = s
        .call("POST", &format!("/api/v1/runs/{run_a}/resume"), d, None)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["run"]["status"], "completed");
    assert!(
        answer["data"]["outcomes"][0]["output"].is_object(),
        "{answer}"
    );
    let (status, answer) = s
        .call("POST", &format!("/api/v1/runs/{run_a}/resume"), d, None)
        .await;
    assert_eq!(status, 409, "{answer}");

    let (run_b, call_b) = &parked[1];
    let (status, _) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{call_b}/deny"),
            d,
            Some(json!({"reason": "not today"})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, answer) = s
        .call("POST", &format!("/api/v1/runs/{run_b}/resume"), d, None)
        .await;
    assert_eq!(status, 200, "{answer}");
    let error = answer["data"]["outcomes"][0]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(
        error.contains("not today") && error.contains("dee"),
        "{error}"
    );
    let (_, gates) = s
        .call("GET", "/api/v1/approvals", Some(&s.viewer), None)
        .await;
    assert_eq!(gates["data"], json!([]));
    s.stop().await;
}

#[tokio::test]
async fn login_users_health_and_the_openapi_document() {
    let s = TestServer::start().await;
    for body in [
        json!({"username": "admin", "password": "wrong-password"}),
        json!({"username": "ghost", "password": "whatever-123"}),
    ] {
        let (status, answer) = s.call("POST", "/api/v1/auth/login", None, Some(body)).await;
        assert_eq!(status, 401);
        assert_eq!(answer["error"]["message"], "wrong user name or password");
    }
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": "dee", "password": "password-123", "role": "viewer"})),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    let (_, users) = s.call("GET", "/api/v1/users", Some(&s.admin), None).await;
    let names: Vec<&str> = users["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "dee", "vic"]);
    assert!(
        !users.to_string().contains("argon2"),
        "hashes never leave the server"
    );
    let (status, _) = s
        .call("DELETE", "/api/v1/users/admin", Some(&s.admin), None)
        .await;
    assert_eq!(status, 409);
    let (status, _) = s
        .call("DELETE", "/api/v1/users/vic", Some(&s.admin), None)
        .await;
    assert_eq!(status, 200);
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/auth/login",
            None,
            Some(json!({"username": "vic", "password": "password-123"})),
        )
        .await;
    assert_eq!(status, 401);

    let (status, health) = s.call("GET", "/healthz", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");

    let (status, doc) = s.call("GET", "/api/v1/openapi.json", None, None).await;
    assert_eq!(status, 200);
    let paths = doc["paths"].as_object().unwrap();
    for (method, path, _) in protected_routes() {
        let templated = path
            .replace("/get_current_time", "/{id}")
            .replace("/markdown_writer", "/{id}")
            .replace("/agents/a1", "/agents/{id}")
            .replace("/runs/r1", "/runs/{id}")
            .replace("/c1", "/{call_id}")
            .replace("/users/vic", "/users/{username}")
            .replace("/executions/e1", "/executions/{execution_id}");
        let op = &paths
            .get(&templated)
            .unwrap_or_else(|| panic!("{templated} missing"))[method.to_lowercase()];
        assert!(
            op.is_object(),
            "{method} {templated} missing from the document"
        );
    }
    s.stop().await;
}

/// The committed document (docs/openapi.json) is what the code generates. Regenerate
/// with `UPDATE_OPENAPI=1 cargo test -p toolshed-server --test api`.
#[test]
fn the_committed_openapi_document_is_current() {
    use utoipa::OpenApi;
    let generated = toolshed_server::ApiDoc::openapi().to_pretty_json().unwrap() + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is out of date: run `UPDATE_OPENAPI=1 cargo test -p toolshed-server --test api`"
    );
}
