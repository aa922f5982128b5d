//! The role is checked before the body is read: on every route that needs a role and
//! takes a body, a caller below the role gets 403 `FORBIDDEN` (the same message as
//! before) whatever it sends, never the 400 or 422 that would tell it the body's
//! contract; a caller with the role still gets the body's 400 or 422.
//!
//! The routes are a table here, and the table is checked against the OpenAPI document:
//! a new route with a body behind the bearer scheme fails this test until it is listed
//! (or named as open to every role).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::TestServer;
use serde_json::Value;
use utoipa::OpenApi;

/// Not JSON at all: a 400 `INVALID_JSON` for a caller allowed to send it.
const NOT_JSON: &str = "not json";
/// JSON, with a field no body has: a 422 `INVALID_BODY` for a caller allowed to send it.
const UNKNOWN_FIELD: &str = r#"{"no_such_field": 1}"#;

/// A route that needs a role and takes a body.
struct Route {
    method: &'static str,
    /// A path to call it at (ids that exist where the handler looks the object up
    /// before it reads the body's fields).
    path: &'static str,
    /// The role it needs.
    role: &'static str,
    /// What a caller with the role gets for each bad body: (body, status, code).
    with_role: &'static [(&'static str, u16, &'static str)],
}

const INVALID_JSON: (&str, u16, &str) = (NOT_JSON, 400, "INVALID_JSON");
const INVALID_BODY: (&str, u16, &str) = (UNKNOWN_FIELD, 422, "INVALID_BODY");

/// Every route with a role requirement and a body.
const ROUTES: &[Route] = &[
    Route {
        method: "POST",
        path: "/api/v1/registry/tools",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "PUT",
        path: "/api/v1/registry/tools/get_current_time",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/registry/tools/get_current_time/execute",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/registry/agents",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/tools/sandbox/execute",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/runs/no-such-run/cancel",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/approvals/no-such-call/approve",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/approvals/no-such-call/deny",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/answers/no-such-call",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/mcp-servers",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "PUT",
        path: "/api/v1/mcp-servers/no-such-entry",
        role: "deployer",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    // The body is the tool's arguments, checked against a discovered tool's schema
    // after the entry is found: only its JSON is checked before.
    Route {
        method: "POST",
        path: "/api/v1/mcp-servers/no-such-entry/execute?tool_name=t",
        role: "deployer",
        with_role: &[INVALID_JSON],
    },
    Route {
        method: "POST",
        path: "/api/v1/mcp-servers/no-such-entry/accept",
        role: "admin",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "POST",
        path: "/api/v1/users",
        role: "admin",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    Route {
        method: "PATCH",
        path: "/api/v1/users/vic",
        role: "admin",
        with_role: &[INVALID_JSON, INVALID_BODY],
    },
    // The body is any file; its query names it, and is checked before the file is read
    // (no `filename` is a 400).
    Route {
        method: "POST",
        path: "/api/v1/attachments",
        role: "deployer",
        with_role: &[(NOT_JSON, 400, "INVALID_QUERY")],
    },
];

/// Routes with a body behind the bearer scheme that every signed-in role may use.
const ANY_ROLE: &[(&str, &str)] = &[("POST", "/api/v1/auth/change-password")];

/// The document's template for a table path: `{param}` where the table has an id.
fn same_route(template: &str, path: &str) -> bool {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}')))
}

#[test]
fn the_table_lists_every_route_with_a_body_behind_a_role() {
    let doc = serde_json::to_value(toolshed_server::ApiDoc::openapi()).unwrap();
    let mut in_doc = BTreeSet::new();
    for (template, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
            if op.get("requestBody").is_some() && secured {
                in_doc.insert((method.to_ascii_uppercase(), template.clone()));
            }
        }
    }
    let listed: BTreeSet<(String, String)> = in_doc
        .iter()
        .filter(|(method, template)| {
            ROUTES
                .iter()
                .any(|r| r.method == method && same_route(template, r.path))
                || ANY_ROLE.contains(&(method.as_str(), template.as_str()))
        })
        .cloned()
        .collect();
    let missing: Vec<_> = in_doc.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "routes with a body behind the bearer scheme missing from the table: {missing:?}"
    );
    assert_eq!(
        ROUTES.len() + ANY_ROLE.len(),
        in_doc.len(),
        "the table lists a route the document does not have, or one twice"
    );
}

/// Send `body` as the holder of `token` and return the answer.
async fn send(s: &TestServer, route: &Route, token: &str, body: &str) -> (u16, Value) {
    s.raw(
        route.method,
        route.path,
        Some(token),
        Some(body.as_bytes().to_vec()),
    )
    .await
}

#[tokio::test]
async fn a_caller_below_the_role_is_refused_before_its_body_is_read() {
    let s = TestServer::start().await;
    let mut wrong = Vec::new();
    for route in ROUTES {
        let below: &[(&str, &str)] = match route.role {
            "deployer" => &[("viewer", &s.viewer)],
            "admin" => &[("viewer", &s.viewer), ("deployer", &s.deployer)],
            other => panic!("no caller below {other}"),
        };
        for (role, token) in below {
            for body in [NOT_JSON, UNKNOWN_FIELD, "{}", ""] {
                let (status, answer) = send(&s, route, token, body).await;
                let expected = format!("this needs the {} role; you are {role}", route.role);
                if status != 403
                    || answer["error"]["code"] != "FORBIDDEN"
                    || answer["error"]["message"] != expected.as_str()
                {
                    wrong.push(format!(
                        "{} {} as {role} with {body:?}: {status} {answer}",
                        route.method, route.path
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "not refused with 403 FORBIDDEN first:\n{}",
        wrong.join("\n")
    );
    s.stop().await;
}

#[tokio::test]
async fn a_caller_with_the_role_still_has_its_body_checked() {
    let s = TestServer::start().await;
    let mut wrong = Vec::new();
    for route in ROUTES {
        let token = match route.role {
            "deployer" => &s.deployer,
            "admin" => &s.admin,
            other => panic!("no caller for {other}"),
        };
        for (body, expected_status, expected_code) in route.with_role {
            let (status, answer) = send(&s, route, token, body).await;
            if status != *expected_status || answer["error"]["code"] != *expected_code {
                wrong.push(format!(
                    "{} {} as {} with {body:?}: {status} {answer} (expected {expected_status} {expected_code})",
                    route.method, route.path, route.role
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the body is not checked as before:\n{}",
        wrong.join("\n")
    );
    s.stop().await;
}
