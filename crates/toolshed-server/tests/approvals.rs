//! Approvals that mean something, over real HTTP: an approval runs only against the tool
//! revision it was given for (a PUT in between is refused on resume, the run stays
//! parked and the call can be decided again), four-eyes refuses approving one's own
//! call (per tool and server-wide), and every decision is in the audit trail.
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use serde_json::{Value, json};

/// Register `name` (a built-in, so it runs anywhere) gated by `approval`.
async fn register(s: &TestServer, name: &str, description: &str, approval: Value) -> String {
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.deployer),
            Some(json!({"name": name, "description": description,
                "endpoint": "builtin:get_current_time", "approval": approval})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    answer["data"]["id"].as_str().unwrap().to_owned()
}

/// Execute `name` as the deployer (`dee`): the run parks. Its run id, call id and gate.
async fn park(s: &TestServer, name: &str) -> (String, String, Value) {
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/registry/tools/{name}/execute"),
            Some(&s.deployer),
            Some(json!({"args": {"utc_offset": "+02:00"}})),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let d = &answer["data"];
    (
        d["run_id"].as_str().unwrap().to_owned(),
        d["call_id"].as_str().unwrap().to_owned(),
        d["gate"].clone(),
    )
}

async fn decide(s: &TestServer, token: &str, call: &str, verb: &str, reason: &str) -> (u16, Value) {
    s.call(
        "POST",
        &format!("/api/v1/approvals/{call}/{verb}"),
        Some(token),
        Some(json!({"reason": reason})),
    )
    .await
}

async fn resume(s: &TestServer, run: &str) -> (u16, Value) {
    s.call(
        "POST",
        &format!("/api/v1/runs/{run}/resume"),
        Some(&s.deployer),
        Some(json!({})),
    )
    .await
}

/// The run's view (with its crumbs).
async fn run_view(s: &TestServer, run: &str) -> Value {
    let (status, answer) = s
        .call(
            "GET",
            &format!("/api/v1/runs/{run}?crumbs=true"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["data"].clone()
}

/// `GET /api/v1/approvals`, as the viewer.
async fn approvals(s: &TestServer) -> Vec<Value> {
    let (status, answer) = s
        .call("GET", "/api/v1/approvals", Some(&s.viewer), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["data"].as_array().unwrap().clone()
}

fn revision(gate: &Value) -> String {
    gate["revision"]
        .as_str()
        .unwrap_or_else(|| panic!("no revision in {gate}"))
        .to_owned()
}

#[tokio::test]
async fn an_approved_call_whose_tool_changed_is_refused_on_resume_and_stays_parked() {
    let s = TestServer::start().await;
    let id = register(&s, "refund", "Refund an order.", json!("always")).await;
    let (run, call, gate) = park(&s, "refund").await;
    let approved_for = revision(&gate);
    assert!(approved_for.starts_with("1@sha256:"), "{gate}");
    assert_eq!(gate["requested_by"], "dee", "{gate}");
    let (status, answer) = decide(&s, &s.admin, &call, "approve", "refund checked").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["decision"]["revision"], json!(approved_for));

    // The tool gets a new revision between the approval and the resume.
    let (status, answer) = s
        .call(
            "PUT",
            &format!("/api/v1/registry/tools/{id}"),
            Some(&s.deployer),
            Some(
                json!({"name": "refund", "description": "Refund an order, and another.",
                "endpoint": "builtin:get_current_time", "approval": "always"}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["revision"], 2, "{answer}");

    let (status, answer) = resume(&s, &run).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "REVISION_CHANGED");
    let message = answer["error"]["message"].as_str().unwrap();
    let changes = answer["error"]["details"]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{answer}");
    let now_at = changes[0]["current_revision"].as_str().unwrap().to_owned();
    assert!(now_at.starts_with("2@sha256:"), "{answer}");
    assert_eq!(changes[0]["approved_revision"], json!(approved_for));
    assert_eq!(changes[0]["call_id"], json!(call));
    assert_eq!(changes[0]["approved_by"], "admin");
    assert!(
        message.contains(&approved_for) && message.contains(&now_at),
        "{message}"
    );

    // Nothing ran: the run is parked and the call waits for a decision on revision 2,
    // the approval for revision 1 kept beside it.
    let view = run_view(&s, &run).await;
    assert_eq!(view["status"], "parked", "{view}");
    let c = &view["calls"][0];
    assert_eq!(c["status"], "awaiting_approval", "{view}");
    assert_eq!(c["decision"], Value::Null, "{view}");
    assert_eq!(c["result"], Value::Null, "{view}");
    assert_eq!(c["gate"]["revision"], json!(now_at));
    assert_eq!(c["gate"]["superseded"][0]["by"], "admin");
    assert_eq!(c["gate"]["superseded"][0]["reason"], "refund checked");
    assert_eq!(c["gate"]["superseded"][0]["revision"], json!(approved_for));
    let listed = approvals(&s).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["call_id"], json!(call));
    assert_eq!(listed[0]["gate"]["revision"], json!(now_at));

    // Resumed without a new decision, it stays parked.
    let (status, answer) = resume(&s, &run).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["run"]["status"], "parked", "{answer}");
    assert_eq!(answer["data"]["parked"][0]["call_id"], json!(call));

    // Approved again, for the revision it runs: it runs.
    let (status, answer) = decide(&s, &s.admin, &call, "approve", "v2 checked too").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["decision"]["revision"], json!(now_at));
    let (status, answer) = resume(&s, &run).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["run"]["status"], "completed", "{answer}");
    assert_eq!(
        answer["data"]["outcomes"][0]["error"],
        Value::Null,
        "{answer}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_four_eyes_tool_refuses_its_caller_approving_and_lets_another_user() {
    let s = TestServer::start().await;
    register(
        &s,
        "payout",
        "Pay a supplier.",
        json!({"always": true, "four_eyes": true}),
    )
    .await;
    let (run, call, gate) = park(&s, "payout").await;
    assert_eq!(gate["four_eyes"], true, "{gate}");

    let (status, answer) = decide(&s, &s.deployer, &call, "approve", "mine, fine").await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "SELF_APPROVAL");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`dee` asked for it") && message.contains("another user"),
        "{message}"
    );
    // Still waiting, undecided.
    let listed = approvals(&s).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["status"], "awaiting_approval");
    assert_eq!(listed[0]["decision"], Value::Null);

    // Another user approves it, and it runs.
    let (status, answer) = decide(&s, &s.admin, &call, "approve", "second pair of eyes").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["decision"]["by"], "admin");
    let (status, answer) = resume(&s, &run).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["run"]["status"], "completed", "{answer}");

    // Denying one's own call is allowed.
    let (_, own, _) = park(&s, "payout").await;
    let (status, answer) = decide(&s, &s.deployer, &own, "deny", "wrong supplier").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["decision"]["approved"], false);
    s.stop().await;
}

#[tokio::test]
async fn a_four_eyes_server_refuses_self_approval_of_every_tool() {
    let s = TestServer::start_with(|c| c.four_eyes = true).await;
    register(&s, "guarded", "The time, after approval.", json!("always")).await;
    let (run, call, gate) = park(&s, "guarded").await;
    assert_eq!(
        gate["four_eyes"], false,
        "the tool itself does not ask: {gate}"
    );
    let (status, answer) = decide(&s, &s.deployer, &call, "approve", "").await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "SELF_APPROVAL");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--four-eyes"),
        "{answer}"
    );
    let (status, answer) = decide(&s, &s.admin, &call, "approve", "ok").await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = resume(&s, &run).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["run"]["status"], "completed", "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn every_decision_is_in_the_audit_trail_and_the_listing() {
    let s = TestServer::start().await;
    register(&s, "refund", "Refund an order.", json!("always")).await;
    let (run, call, gate) = park(&s, "refund").await;
    let rev = revision(&gate);

    // The listing: the args, the tool revision, who asked and when.
    let listed = approvals(&s).await;
    assert_eq!(listed.len(), 1);
    let g = &listed[0];
    assert_eq!(g["call_id"], json!(call));
    assert_eq!(g["tool"], "refund");
    assert_eq!(g["args"], json!({"utc_offset": "+02:00"}));
    assert_eq!(g["gate"]["kind"], "approval");
    assert_eq!(g["gate"]["revision"], json!(rev));
    assert_eq!(g["gate"]["requested_by"], "dee");
    assert!(g["gate"]["requested_at_ms"].as_i64().unwrap() > 0, "{g}");

    let (status, answer) = decide(&s, &s.admin, &call, "deny", "not this one").await;
    assert_eq!(status, 200, "{answer}");
    // The run view: who, when, why, which revision, on the call and in a crumb.
    let view = run_view(&s, &run).await;
    let d = &view["calls"][0]["decision"];
    assert_eq!(d["approved"], false, "{view}");
    assert_eq!(d["by"], "admin");
    assert_eq!(d["reason"], "not this one");
    assert_eq!(d["revision"], json!(rev));
    let at_ms = d["at_ms"].as_i64().unwrap();
    assert!(
        at_ms >= g["gate"]["requested_at_ms"].as_i64().unwrap(),
        "{view}"
    );
    let crumbs = view["crumbs"].as_array().unwrap();
    let decided: Vec<&Value> = crumbs
        .iter()
        .filter(|c| c["type"] == "tool:approval:decided")
        .collect();
    assert_eq!(decided.len(), 1, "{view}");
    assert_eq!(
        decided[0]["payload"],
        json!({"call_id": call, "approved": false, "by": "admin", "reason": "not this one",
            "revision": rev, "at_ms": at_ms})
    );
    s.stop().await;
}
