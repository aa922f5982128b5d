//! Roles and tenants on a real server on loopback, with exact statuses: a viewer reads
//! (200) and is refused every change (403, nothing changes); a deployer succeeds on
//! every registry and run route and is refused the user routes; an admin manages users.
//! A user of another tenant who approves, denies or answers a parked call gets a 404
//! and the call stays parked.

#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use serde_json::{Value, json};
use toolshed_core::{Pipeline, Principal, ToolCall, ToolSet, human_tool};
use toolshed_runtime::{CallStep, NewRunBuilder, Runtime, RuntimeConfig};

/// A parked call: its run and its call id.
struct Parked {
    run: String,
    call: String,
}

/// Execute the approval-gated tool `guarded` as the deployer: the run parks.
async fn park(s: &TestServer) -> Parked {
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/guarded/execute",
            Some(&s.deployer),
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    Parked {
        run: answer["data"]["run_id"].as_str().unwrap().to_owned(),
        call: answer["data"]["call_id"].as_str().unwrap().to_owned(),
    }
}

/// A call of the human tool `confirm`, parked for an answer in a run of `tenant`, made
/// by a program sharing the server's database (the registry cannot hold human tools).
async fn park_for_an_answer(s: &TestServer, tenant: &str) -> Parked {
    let url = format!("sqlite://{}", s.dir.path().join("toolshed.db").display());
    let journal = toolshed_journal::open(&url).await.unwrap();
    let confirm = human_tool(
        "confirm",
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
    )
    .unwrap();
    let pipeline = Pipeline::builder(ToolSet::from_tools([confirm]).unwrap()).build();
    let runtime = Runtime::new(pipeline, journal, RuntimeConfig::default()).unwrap();
    let principal = Principal {
        iss: "toolshed".into(),
        sub: "dee".into(),
        tenant: Some(tenant.into()),
    };
    let run = runtime
        .start(NewRunBuilder::new("release").principal(principal).build())
        .await
        .unwrap();
    let step = run
        .call(ToolCall::new("confirm", json!({"release": "1.2.0"})))
        .await
        .unwrap();
    let CallStep::Parked(gate) = step else {
        panic!("the human call did not park: {step:?}");
    };
    run.finish().await.unwrap();
    Parked {
        run: run.id().to_owned(),
        call: gate.call_id,
    }
}

/// The status of the run and of its only call, as `token` sees them.
async fn run_and_call_status(s: &TestServer, token: &str, run: &str) -> (Value, Value) {
    let (status, answer) = s
        .call("GET", &format!("/api/v1/runs/{run}"), Some(token), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    let calls = answer["data"]["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{answer}");
    (answer["data"]["status"].clone(), calls[0]["status"].clone())
}

/// The call ids pending for `token`'s tenant.
async fn pending(s: &TestServer, token: &str) -> Vec<String> {
    let (status, answer) = s.call("GET", "/api/v1/approvals", Some(token), None).await;
    assert_eq!(status, 200, "{answer}");
    let mut ids: Vec<String> = answer["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["call_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn viewers_read_deployers_change_and_admins_manage_users() {
    let s = TestServer::start().await;
    let d = Some(s.deployer.as_str());
    // What the routes act on: an agent, a gated tool, a finished run and parked calls.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/agents",
            d,
            Some(json!({"name": "a1", "framework": "langgraph", "tools": [{"ref": "tools/get_current_time"}]})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            d,
            Some(
                json!({"name": "guarded", "description": "The time, after approval.",
                "endpoint": "builtin:get_current_time", "approval": "always"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            d,
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let finished = answer["data"]["run_id"].as_str().unwrap().to_owned();
    let to_approve = park(&s).await;
    let to_deny = park(&s).await;
    let to_cancel = park(&s).await;
    let to_answer = park_for_an_answer(&s, "default").await;

    let reads = [
        "/api/v1/registry/tools".to_owned(),
        "/api/v1/registry/tools/get_current_time".to_owned(),
        "/api/v1/registry/tools/get_current_time/versions".to_owned(),
        "/api/v1/registry/tools/get_current_time/usage".to_owned(),
        "/api/v1/registry/agents".to_owned(),
        "/api/v1/registry/agents/a1".to_owned(),
        "/api/v1/runs".to_owned(),
        format!("/api/v1/runs/{finished}"),
        format!("/api/v1/runs/{}", to_approve.run),
        "/api/v1/approvals".to_owned(),
    ];
    let time_tool =
        json!({"name": "t1", "description": "The time.", "endpoint": "builtin:get_current_time"});
    // (method, path, body): every route a deployer may use to change something.
    let changes: Vec<(&str, String, Option<Value>)> = vec![
        (
            "POST",
            "/api/v1/registry/tools".into(),
            Some(time_tool.clone()),
        ),
        (
            "PUT",
            "/api/v1/registry/tools/t1".into(),
            Some(
                json!({"name": "t1", "description": "The time (v2).", "endpoint": "builtin:get_current_time"}),
            ),
        ),
        (
            "POST",
            "/api/v1/registry/tools/t1/execute".into(),
            Some(json!({"args": {}})),
        ),
        ("DELETE", "/api/v1/registry/tools/t1".into(), None),
        (
            "POST",
            "/api/v1/registry/agents".into(),
            Some(json!({"name": "a2", "framework": "langgraph"})),
        ),
        (
            "POST",
            format!("/api/v1/approvals/{}/approve", to_approve.call),
            Some(json!({"reason": "checked"})),
        ),
        (
            "POST",
            format!("/api/v1/runs/{}/resume", to_approve.run),
            None,
        ),
        (
            "POST",
            format!("/api/v1/approvals/{}/deny", to_deny.call),
            Some(json!({"reason": "not today"})),
        ),
        (
            "POST",
            format!("/api/v1/runs/{}/cancel", to_cancel.run),
            Some(json!({"reason": "not needed"})),
        ),
        (
            "POST",
            format!("/api/v1/answers/{}", to_answer.call),
            Some(json!({"answer": {"ok": true}})),
        ),
    ];
    let user_routes: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "/api/v1/users", None),
        (
            "POST",
            "/api/v1/users",
            Some(json!({"username": "newbie", "password": "password-123", "role": "viewer"})),
        ),
        ("DELETE", "/api/v1/users/newbie", None),
    ];

    // A viewer reads everything and changes nothing.
    for path in &reads {
        let (status, answer) = s.call("GET", path, Some(&s.viewer), None).await;
        assert_eq!(status, 200, "viewer on GET {path}: {answer}");
    }
    let gates_before = pending(&s, &s.viewer).await;
    assert_eq!(gates_before.len(), 4, "{gates_before:?}");
    for (method, path, body) in &changes {
        let (status, answer) = s.call(method, path, Some(&s.viewer), body.clone()).await;
        assert_eq!(status, 403, "viewer on {method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "FORBIDDEN");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("deployer"),
            "{answer}"
        );
    }
    for (method, path, body) in &user_routes {
        for (who, token) in [("viewer", &s.viewer), ("deployer", &s.deployer)] {
            let (status, answer) = s.call(method, path, Some(token), body.clone()).await;
            assert_eq!(status, 403, "{who} on {method} {path}: {answer}");
            assert_eq!(answer["error"]["code"], "FORBIDDEN");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("admin"),
                "{answer}"
            );
        }
    }
    // Nothing the viewer tried happened.
    assert_eq!(pending(&s, &s.viewer).await, gates_before);
    let (status, _) = s
        .call("GET", "/api/v1/registry/tools/t1", Some(&s.viewer), None)
        .await;
    assert_eq!(status, 404, "the viewer registered nothing");
    let (status, _) = s
        .call("GET", "/api/v1/registry/agents/a2", Some(&s.viewer), None)
        .await;
    assert_eq!(status, 404, "the viewer registered no agent");

    // A deployer succeeds on every one of those routes, in order.
    let expected = [201, 200, 200, 200, 201, 200, 200, 200, 200, 200];
    for ((method, path, body), want) in changes.iter().zip(expected) {
        let (status, answer) = s.call(method, path, d, body.clone()).await;
        assert_eq!(status, want, "deployer on {method} {path}: {answer}");
        if path.ends_with("/resume") {
            assert_eq!(answer["data"]["run"]["status"], "completed", "{answer}");
        }
    }
    let still_pending = pending(&s, &s.viewer).await;
    for decided in [&to_approve, &to_deny, &to_answer] {
        assert!(
            !still_pending.contains(&decided.call),
            "call {} was decided: {still_pending:?}",
            decided.call
        );
    }
    assert_eq!(
        run_and_call_status(&s, &s.viewer, &to_cancel.run).await.0,
        "cancelled"
    );

    // An admin manages users.
    let a = Some(s.admin.as_str());
    let expected = [200, 201, 200];
    for ((method, path, body), want) in user_routes.iter().zip(expected) {
        let (status, answer) = s.call(method, path, a, body.clone()).await;
        assert_eq!(status, want, "admin on {method} {path}: {answer}");
    }
    s.stop().await;
}

#[tokio::test]
async fn another_tenants_user_cannot_approve_deny_or_answer_a_parked_call() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(
                json!({"name": "guarded", "description": "The time, after approval.",
                "endpoint": "builtin:get_current_time", "approval": "always"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let gated = park(&s).await;
    let human = park_for_an_answer(&s, "default").await;
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
    let mut ours = vec![gated.call.clone(), human.call.clone()];
    ours.sort();
    assert_eq!(pending(&s, &s.viewer).await, ours);
    assert_eq!(pending(&s, &acme).await, Vec::<String>::new());

    for (method, path, body) in [
        (
            "POST",
            format!("/api/v1/approvals/{}/approve", gated.call),
            json!({"reason": "looks fine"}),
        ),
        (
            "POST",
            format!("/api/v1/approvals/{}/deny", gated.call),
            json!({"reason": "no"}),
        ),
        (
            "POST",
            format!("/api/v1/answers/{}", human.call),
            json!({"answer": {"ok": true}}),
        ),
        // The wrong kind of decision is a 404 too, not the 409 a user of the call's
        // tenant gets: nothing about another tenant's call is confirmed.
        (
            "POST",
            format!("/api/v1/answers/{}", gated.call),
            json!({"answer": {"ok": true}}),
        ),
        (
            "POST",
            format!("/api/v1/approvals/{}/approve", human.call),
            json!({}),
        ),
    ] {
        let (status, answer) = s.call(method, &path, Some(&acme), Some(body)).await;
        assert_eq!(status, 404, "acme on {method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "NOT_FOUND");
    }

    // Both calls are still parked, undecided, and their runs too.
    assert_eq!(pending(&s, &s.viewer).await, ours);
    assert_eq!(
        run_and_call_status(&s, &s.viewer, &gated.run).await,
        (json!("parked"), json!("awaiting_approval"))
    );
    assert_eq!(
        run_and_call_status(&s, &s.viewer, &human.run).await,
        (json!("parked"), json!("awaiting_answer"))
    );
    let (_, answer) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{}", gated.run),
            Some(&s.viewer),
            None,
        )
        .await;
    assert!(answer["data"]["calls"][0]["decision"].is_null(), "{answer}");

    // Their own tenant can decide them.
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{}/approve", gated.call),
            Some(&s.deployer),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/answers/{}", human.call),
            Some(&s.deployer),
            Some(json!({"answer": {"ok": true}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(pending(&s, &s.viewer).await, Vec::<String>::new());
    s.stop().await;
}
