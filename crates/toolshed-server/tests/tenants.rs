//! Tenants own what they register, on a real server on loopback. The harness's `dee`
//! (deployer) and `vic` (viewer) are users of the default tenant, `admin` is the
//! organisation's owner; each test adds users of a second tenant, `acme`. Every attack
//! is its own test: a cross-tenant PUT, a cross-tenant DELETE, a cross-tenant agent
//! overwrite, an admin adding a user to another tenant (refused; an owner may), a client
//! claiming `source: stdlib`; and two tenants executing one tool never share a warm
//! worker.

#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use serde_json::{Value, json};

const PASSWORD: &str = "password-123";

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
    assert_eq!(answer["data"]["tenant"], tenant, "{answer}");
    s.login(name, PASSWORD).await
}

/// Register the stdlib's clock under another name, as `token`; its detail.
async fn register(s: &TestServer, token: &str, name: &str) -> Value {
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(token),
            Some(json!({"name": name, "description": "The time.", "endpoint": "builtin:get_current_time"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    answer["data"].clone()
}

/// A tool as `token` reads it.
async fn tool(s: &TestServer, token: &str, name: &str) -> Value {
    let (status, answer) = s
        .call(
            "GET",
            &format!("/api/v1/registry/tools/{name}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["data"].clone()
}

/// Assert a 403 `NOT_OWNER` naming the owning tenant and the fix.
#[track_caller]
fn assert_not_owner(status: u16, answer: &Value, what: &str, owner: &str) {
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "NOT_OWNER", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{what} belongs to tenant `{owner}`")),
        "the message names the owner: {message}"
    );
    assert!(
        message.contains("register your own under another name"),
        "the message names the fix: {message}"
    );
}

#[tokio::test]
async fn a_cross_tenant_put_is_refused_and_changes_nothing() {
    let s = TestServer::start().await;
    let acme = user_of(&s, "ada", "deployer", "acme").await;
    let registered = register(&s, &s.deployer, "clock").await;
    assert_eq!(registered["tenant"], "default", "{registered}");

    // Reads are organisation-wide: acme sees the tool and its owner, and may run it.
    assert_eq!(tool(&s, &acme, "clock").await["tenant"], "default");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/clock/execute",
            Some(&acme),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");

    // A new revision from acme, by name and by id, with and without a revision: refused.
    let body = json!({"name": "clock", "description": "Hijacked.", "endpoint": "builtin:get_current_time"});
    let id = registered["id"].as_str().unwrap();
    for (path, body) in [
        ("/api/v1/registry/tools/clock".to_owned(), body.clone()),
        (format!("/api/v1/registry/tools/{id}"), body.clone()),
        (
            "/api/v1/registry/tools/clock".to_owned(),
            json!({"name": "clock", "description": "Hijacked.", "expected_revision": 1}),
        ),
    ] {
        let (status, answer) = s.call("PUT", &path, Some(&acme), Some(body)).await;
        assert_not_owner(status, &answer, "tool `clock`", "default");
    }
    let after = tool(&s, &s.deployer, "clock").await;
    assert_eq!(
        (&after["revision"], &after["description"], &after["tenant"]),
        (&json!(1), &json!("The time."), &json!("default"))
    );
    let (_, versions) = s
        .call(
            "GET",
            "/api/v1/registry/tools/clock/versions",
            Some(&acme),
            None,
        )
        .await;
    assert_eq!(versions["data"].as_array().unwrap().len(), 1, "{versions}");

    // Its own tenant, and the organisation's owner, may; the owner stays.
    for token in [&s.deployer, &s.admin] {
        let (status, answer) = s
            .call(
                "PUT",
                "/api/v1/registry/tools/clock",
                Some(token),
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["data"]["tenant"], "default", "{answer}");
    }
    assert_eq!(tool(&s, &acme, "clock").await["revision"], 3);
    s.stop().await;
}

#[tokio::test]
async fn a_cross_tenant_delete_is_refused_and_the_tool_stays() {
    let s = TestServer::start().await;
    let acme = user_of(&s, "ada", "deployer", "acme").await;
    register(&s, &s.deployer, "clock").await;

    let (status, answer) = s
        .call("DELETE", "/api/v1/registry/tools/clock", Some(&acme), None)
        .await;
    assert_not_owner(status, &answer, "tool `clock`", "default");
    let after = tool(&s, &s.deployer, "clock").await;
    assert_eq!(after["status"], "active", "{after}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/clock/execute",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "the tool still runs: {answer}");

    // acme's own tool is acme's to delete, and not the default tenant's.
    register(&s, &acme, "acme-clock").await;
    let (status, answer) = s
        .call(
            "DELETE",
            "/api/v1/registry/tools/acme-clock",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_not_owner(status, &answer, "tool `acme-clock`", "acme");
    let (status, answer) = s
        .call(
            "DELETE",
            "/api/v1/registry/tools/acme-clock",
            Some(&acme),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = s
        .call(
            "DELETE",
            "/api/v1/registry/tools/clock",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn a_cross_tenant_agent_overwrite_is_refused_and_the_agent_stays() {
    let s = TestServer::start().await;
    let acme = user_of(&s, "ada", "deployer", "acme").await;
    let agent = json!({"name": "support-bot", "framework": "langgraph",
        "tools": [{"ref": "tools/get_current_time"}]});
    let (status, mine) = s
        .call(
            "POST",
            "/api/v1/registry/agents",
            Some(&s.deployer),
            Some(agent.clone()),
        )
        .await;
    assert_eq!(status, 201, "{mine}");
    assert_eq!(mine["data"]["tenant"], "default", "{mine}");

    // acme registering the same name (another framework, no tools) is refused.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/agents",
            Some(&acme),
            Some(json!({"name": "support-bot", "framework": "crewai", "tools": []})),
        )
        .await;
    assert_not_owner(status, &answer, "agent `support-bot`", "default");
    let (status, after) = s
        .call(
            "GET",
            "/api/v1/registry/agents/support-bot",
            Some(&acme),
            None,
        )
        .await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["data"], mine["data"], "the agent is unchanged");

    // Its own tenant re-registers it (same id and owner); acme's new name is acme's.
    let (status, again) = s
        .call(
            "POST",
            "/api/v1/registry/agents",
            Some(&s.deployer),
            Some(agent),
        )
        .await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(again["data"]["id"], mine["data"]["id"]);
    let (status, theirs) = s
        .call(
            "POST",
            "/api/v1/registry/agents",
            Some(&acme),
            Some(json!({"name": "acme-bot", "framework": "crewai", "tools": []})),
        )
        .await;
    assert_eq!(status, 201, "{theirs}");
    assert_eq!(theirs["data"]["tenant"], "acme", "{theirs}");
    s.stop().await;
}

#[tokio::test]
async fn an_admin_creating_a_user_in_another_tenant_is_refused() {
    let s = TestServer::start().await;
    let ann = user_of(&s, "ann", "admin", "acme").await;
    for body in [
        json!({"username": "mole", "password": PASSWORD, "role": "deployer", "tenant": "default"}),
        json!({"username": "mole", "password": PASSWORD, "role": "viewer", "tenant": "globex"}),
    ] {
        let (status, answer) = s
            .call("POST", "/api/v1/users", Some(&ann), Some(body))
            .await;
        assert_eq!(status, 403, "{answer}");
        assert_eq!(answer["error"]["code"], "FORBIDDEN", "{answer}");
        assert_eq!(
            answer["error"]["details"]["fields"][0]["field"], "tenant",
            "{answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("own tenant (`acme`)") && message.contains("organisation owner"),
            "{message}"
        );
    }
    // Nor may an admin make an owner, even in its own tenant.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&ann),
            Some(json!({"username": "mole", "password": PASSWORD, "role": "owner"})),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        answer["error"]["details"]["fields"][0]["field"], "role",
        "{answer}"
    );
    // No `mole` exists anywhere.
    let (_, users) = s.call("GET", "/api/v1/users", Some(&s.admin), None).await;
    assert!(
        !users["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["username"] == "mole"),
        "{users}"
    );

    // In its own tenant it may: the tenant defaults to the admin's.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&ann),
            Some(json!({"username": "andy", "password": PASSWORD, "role": "admin"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["data"]["tenant"], "acme", "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn an_owner_creates_users_in_any_tenant() {
    let s = TestServer::start().await;
    // The first account the server seeded is the organisation's owner.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/auth/login",
            None,
            Some(json!({"username": "admin", "password": common::ADMIN_PASSWORD})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["role"], "owner", "{answer}");

    for (name, role, tenant) in [
        ("gus", "admin", "globex"),
        ("ida", "viewer", "initech"),
        ("oli", "owner", "acme"),
    ] {
        let token = user_of(&s, name, role, tenant).await;
        assert!(!token.is_empty());
    }
    // An owner it made is an owner too: it adds users anywhere.
    let oli = s.login("oli", PASSWORD).await;
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&oli),
            Some(json!({"username": "dan", "password": PASSWORD, "role": "deployer", "tenant": "default"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (_, users) = s.call("GET", "/api/v1/users", Some(&s.admin), None).await;
    let tenants: Vec<(&str, &str)> = users["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["username"].as_str().unwrap(),
                u["tenant"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tenants,
        [
            ("admin", "default"),
            ("dan", "default"),
            ("dee", "default"),
            ("gus", "globex"),
            ("ida", "initech"),
            ("oli", "acme"),
            ("vic", "default")
        ]
    );
    s.stop().await;
}

#[tokio::test]
async fn an_admin_lists_and_removes_only_its_own_tenants_users() {
    let s = TestServer::start().await;
    let ann = user_of(&s, "ann", "admin", "acme").await;
    user_of(&s, "ada", "deployer", "acme").await;
    user_of(&s, "oli", "owner", "acme").await;

    let (status, users) = s.call("GET", "/api/v1/users", Some(&ann), None).await;
    assert_eq!(status, 200, "{users}");
    let names: Vec<&str> = users["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ada", "ann", "oli"], "only acme's users");

    // The tenants list, in the same scope: an admin sees its own tenant only (never
    // the default tenant's counts or admins), the owner every tenant.
    let ada = s.login("ada", PASSWORD).await;
    register(&s, &ada, "acme-lookup").await;
    let (status, tenants) = s.call("GET", "/api/v1/tenants", Some(&ann), None).await;
    assert_eq!(status, 200, "{tenants}");
    assert_eq!(
        tenants["data"],
        json!([{"name": "acme", "users": 3, "admins": ["ann", "oli"], "tools": 1, "agents": 0, "mcp_servers": 0}])
    );
    let (status, tenants) = s.call("GET", "/api/v1/tenants", Some(&s.admin), None).await;
    assert_eq!(status, 200, "{tenants}");
    let listed: Vec<(&str, u64)> = tenants["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["users"].as_u64().unwrap()))
        .collect();
    assert_eq!(listed, [("acme", 3), ("default", 3)], "{tenants}");
    assert_eq!(tenants["data"][1]["admins"], json!(["admin"]));
    // Below the admin role, in either tenant: 403, and no tenant named.
    for token in [&ada, &s.deployer, &s.viewer] {
        let (status, answer) = s.call("GET", "/api/v1/tenants", Some(token), None).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (403, Some("FORBIDDEN")),
            "{answer}"
        );
        assert!(!answer.to_string().contains("acme"), "{answer}");
    }
    let (status, _) = s.call("GET", "/api/v1/tenants", None, None).await;
    assert_eq!(status, 401);

    // Another tenant's user is a 404, as an unknown name is, and stays.
    let (status, answer) = s
        .call("DELETE", "/api/v1/users/dee", Some(&ann), None)
        .await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        s.call("DELETE", "/api/v1/users/nobody", Some(&ann), None)
            .await
            .1["error"]["message"]
            .as_str()
            .unwrap()
            .replace("nobody", "dee"),
        "another tenant's user reads as unknown"
    );
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(&s.deployer),
            None,
        )
        .await;
    assert_eq!(status, 200, "dee still works");

    // An owner of the admin's own tenant is not the admin's to remove.
    let (status, answer) = s
        .call("DELETE", "/api/v1/users/oli", Some(&ann), None)
        .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "NOT_OWNER", "{answer}");
    // Its own tenant's deployer is.
    let (status, answer) = s
        .call("DELETE", "/api/v1/users/ada", Some(&ann), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    // The organisation's owner removes anyone.
    let (status, answer) = s
        .call("DELETE", "/api/v1/users/oli", Some(&s.admin), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn a_client_claiming_source_stdlib_is_refused_naming_the_field() {
    let s = TestServer::start().await;
    let fake = json!({"name": "get-time", "description": "The time, honest.",
        "endpoint": "builtin:get_current_time", "source": "stdlib"});
    for token in [&s.deployer, &s.admin] {
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/registry/tools",
                Some(token),
                Some(fake.clone()),
            )
            .await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["code"], "INVALID_BODY", "{answer}");
        assert_eq!(
            answer["error"]["details"]["fields"][0]["field"], "source",
            "{answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("reserved for the tools the server registers itself"),
            "{answer}"
        );
    }
    // Nor by an update, of one's own tool or of a seeded one.
    register(&s, &s.deployer, "clock").await;
    for name in ["clock", "get_current_time"] {
        let (status, answer) = s
            .call(
                "PUT",
                &format!("/api/v1/registry/tools/{name}"),
                Some(&s.deployer),
                Some(json!({"name": name, "description": "The time.",
                    "endpoint": "builtin:get_current_time", "source": "stdlib"})),
            )
            .await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(
            answer["error"]["details"]["fields"][0]["field"], "source",
            "{answer}"
        );
    }
    // Only the seeded tools carry the source.
    let (_, listed) = s
        .call(
            "GET",
            "/api/v1/registry/tools?source=stdlib",
            Some(&s.viewer),
            None,
        )
        .await;
    let names: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!names.is_empty() && !names.contains(&"get-time") && !names.contains(&"clock"));
    assert_eq!(tool(&s, &s.viewer, "clock").await["source"], "manual");
    s.stop().await;
}

#[tokio::test]
async fn two_tenants_executing_one_tool_never_share_a_worker() {
    let s = TestServer::start().await;
    let acme = user_of(&s, "ada", "deployer", "acme").await;
    // Each worker process draws its own random id once, when it loads the code.
    let py = s.write(
        "worker.py",
        "import os, uuid\nWORKER = uuid.uuid4().hex\n\ndef worker() -> dict:\n    \"\"\"Say which process answers.\"\"\"\n    return {\"worker\": WORKER, \"pid\": os.getpid()}\n",
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            Some(json!({"name": "worker", "endpoint": format!("python:{py}")})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let worker = |token: String| {
        let s = &s;
        async move {
            let (status, answer) = s
                .call(
                    "POST",
                    "/api/v1/registry/tools/worker/execute",
                    Some(&token),
                    None,
                )
                .await;
            assert_eq!(status, 200, "{answer}");
            let out = &answer["data"]["output"];
            (
                out["worker"].as_str().unwrap().to_owned(),
                out["pid"].as_u64().unwrap(),
            )
        }
    };
    let default_1 = worker(s.deployer.clone()).await;
    let default_2 = worker(s.deployer.clone()).await;
    // The pool is warm: the default tenant's second call reuses its worker.
    assert_eq!(
        default_1, default_2,
        "a warm worker serves its own tenant again"
    );
    let acme_1 = worker(acme.clone()).await;
    let acme_2 = worker(acme.clone()).await;
    assert_ne!(
        acme_1.0, default_1.0,
        "acme got the default tenant's worker"
    );
    assert_eq!(acme_1, acme_2, "acme's warm worker serves acme again");
    // And the default tenant still gets its own, never acme's.
    let default_3 = worker(s.deployer.clone()).await;
    assert_eq!(default_3, default_1);
    assert_ne!(default_3.0, acme_1.0);
    s.stop().await;
}

/// `PATCH /api/v1/users/{username}` keeps to the caller's tenant as the other user
/// routes do: an admin changes only its own tenant's users (another tenant's, or the
/// organisation's owner, is a 404 as for an unknown name), may not move a user to
/// another tenant or grant a role above its own; the owner may do both.
#[tokio::test]
async fn an_admin_changes_only_its_own_tenants_users_and_cannot_move_or_promote_them() {
    let s = TestServer::start().await;
    let acme_admin = user_of(&s, "ada", "admin", "acme").await;
    let _ = user_of(&s, "abe", "deployer", "acme").await;
    let patch = |who: &str, token: &str, body: Value| {
        let path = format!("/api/v1/users/{who}");
        let token = token.to_owned();
        let s = &s;
        async move { s.call("PATCH", &path, Some(&token), Some(body)).await }
    };
    // Another tenant's user, and the owner: not found.
    for who in ["dee", "admin"] {
        let (status, answer) = patch(who, &acme_admin, json!({"role": "viewer"})).await;
        assert_eq!(status, 404, "{who}: {answer}");
        assert_eq!(answer["error"]["code"], "NOT_FOUND");
    }
    let (status, answer) = s.call("GET", "/api/v1/users", Some(&s.admin), None).await;
    assert_eq!(status, 200, "{answer}");
    let dee = answer["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == "dee")
        .cloned()
        .unwrap();
    assert_eq!(dee["role"], "deployer", "dee is unchanged: {dee}");
    // Moving its own user to another tenant, or promoting it to owner: refused.
    let (status, answer) = patch("abe", &acme_admin, json!({"tenant": "globex"})).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["details"]["fields"][0]["field"], "tenant");
    let (status, answer) = patch("abe", &acme_admin, json!({"role": "owner"})).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["details"]["fields"][0]["field"], "role");
    // Within its tenant and its role, allowed.
    let (status, answer) = patch("abe", &acme_admin, json!({"role": "viewer"})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["role"], "viewer");
    // The owner moves a user between tenants.
    let (status, answer) = patch("abe", &s.admin, json!({"tenant": "globex"})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["tenant"], "globex");
    s.stop().await;
}
