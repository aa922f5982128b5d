//! Least privilege at the edges, over real HTTP against the server: HTTP tools reach
//! only public addresses unless the operator allowlists them (a tool at 127.0.0.1, and
//! an allowlisted first hop redirecting to 127.0.0.1, are both refused), answers are
//! capped; credentials come only from the operator's policy, per tenant, `TOOLSHED_*`
//! never; a sandboxed tool sees none of the server's secrets.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::TestServer;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use toolshed_auth::Role;
use toolshed_registry::NewUser;
use toolshed_server::credentials::CredentialsPolicy;

/// A tiny HTTP/1.1 server on `ip`: `/echo` answers what it was sent, `/redirect` a 302
/// to `location`, `/big` 1 MiB without a length (so only streaming can cap it). Counts
/// the requests it got.
async fn serve(ip: &str, location: Option<String>) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let location = location.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let response = match path.as_str() {
                    "/redirect" => format!(
                        "HTTP/1.1 302 Found\r\nlocation: {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        location.unwrap_or_default()
                    ),
                    "/big" => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n\"{}\"",
                        "x".repeat(1 << 20)
                    ),
                    _ => {
                        let body = json!({"ok": true, "path": path}).to_string();
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    }
                };
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, hits)
}

async fn register(s: &TestServer, token: &str, body: Value) -> (u16, Value) {
    s.call("POST", "/api/v1/registry/tools", Some(token), Some(body))
        .await
}

/// Execute a tool; its `error` (or null) and `output`.
async fn execute(s: &TestServer, token: &str, tool: &str) -> (Value, Value) {
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/registry/tools/{tool}/execute"),
            Some(token),
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    (
        answer["data"]["error"].clone(),
        answer["data"]["output"].clone(),
    )
}

#[tokio::test]
async fn an_http_tool_at_127_0_0_1_is_refused_with_a_clear_error() {
    let (addr, hits) = serve("127.0.0.1", None).await;
    let s = TestServer::start().await;
    let (status, body) = register(
        &s,
        &s.deployer,
        json!({"name": "internal", "description": "Reaches a loopback service.",
               "endpoint": format!("http://{addr}/echo")}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (error, output) = execute(&s, &s.deployer, "internal").await;
    assert_eq!(output, Value::Null);
    assert_eq!(
        error["details"]["dispatch_code"], "HTTP_ADDRESS_REFUSED",
        "{error}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("a loopback address") && message.contains("--allow-http-host"),
        "{message}"
    );
    // Nothing reached the loopback service.
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    s.stop().await;
}

#[tokio::test]
async fn an_allowlisted_first_hop_redirecting_to_127_0_0_1_is_refused_naming_the_location() {
    // The target: a loopback service the operator did not allowlist.
    let (target, target_hits) = serve("127.0.0.1", None).await;
    // The first hop, on an address the operator did allowlist, answers 302 to it.
    let (hop, hop_hits) = serve(
        "127.0.0.2",
        Some(format!("http://127.0.0.1:{}/echo", target.port())),
    )
    .await;
    let s = TestServer::start_with(|c| {
        c.dispatcher.http.allow = vec!["127.0.0.2".parse().unwrap()];
    })
    .await;
    let (status, body) = register(
        &s,
        &s.deployer,
        json!({"name": "hop", "description": "Redirects inwards.",
               "endpoint": format!("http://{hop}/redirect")}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (error, _) = execute(&s, &s.deployer, "hop").await;
    assert_eq!(
        error["details"]["dispatch_code"], "HTTP_REDIRECT_REFUSED",
        "{error}"
    );
    let location = format!("http://127.0.0.1:{}/echo", target.port());
    assert_eq!(error["details"]["location"], location.as_str());
    assert!(
        error["message"].as_str().unwrap().contains(&location),
        "{error}"
    );
    assert_eq!(hop_hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        target_hits.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
    s.stop().await;
}

#[tokio::test]
async fn an_allowlisted_http_tool_works_and_an_oversize_answer_is_cut_with_a_clear_error() {
    let (addr, _) = serve("127.0.0.2", None).await;
    let s = TestServer::start_with(|c| {
        c.dispatcher.http.allow = vec!["127.0.0.2/32".parse().unwrap()];
        c.dispatcher.http_response_cap = 64 * 1024;
    })
    .await;
    for (name, path) in [("allowed", "/echo"), ("flood", "/big")] {
        let (status, body) = register(
            &s,
            &s.deployer,
            json!({"name": name, "description": "An allowlisted service.",
                   "endpoint": format!("http://{addr}{path}")}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (error, output) = execute(&s, &s.deployer, "allowed").await;
    assert_eq!(error, Value::Null);
    assert_eq!(output, json!({"ok": true, "path": "/echo"}));

    let (error, _) = execute(&s, &s.deployer, "flood").await;
    assert_eq!(error["code"], "RESULT_TOO_LARGE", "{error}");
    assert_eq!(error["details"]["dispatch_code"], "HTTP_RESPONSE_TOO_LARGE");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("more than 65536 bytes"),
        "{error}"
    );
    // The loopback address next to the allowlisted one stays refused.
    let (status, _) = register(
        &s,
        &s.deployer,
        json!({"name": "next-door", "description": "Not allowlisted.",
               "endpoint": format!("http://127.0.0.1:{}/echo", addr.port())}),
    )
    .await;
    assert_eq!(status, 201);
    let (error, _) = execute(&s, &s.deployer, "next-door").await;
    assert_eq!(
        error["details"]["dispatch_code"], "HTTP_ADDRESS_REFUSED",
        "{error}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_tool_declaring_toolshed_jwt_secret_is_refused_at_registration_and_update() {
    let s = TestServer::start_with(|c| {
        // Even a policy cannot serve it: such a policy is refused when it is read.
        assert!(
            CredentialsPolicy::parse("'*': {TOOLSHED_JWT_SECRET: {provider: env}}", "p").is_err()
        );
        c.credentials = CredentialsPolicy::parse("'*': {MAPS_KEY: {provider: env}}", "p").unwrap();
    })
    .await;
    let (status, body) = register(
        &s,
        &s.deployer,
        json!({"name": "thief", "description": "Wants the signing secret.",
               "endpoint": "builtin:get_current_time",
               "credentials": ["MAPS_KEY", "TOOLSHED_JWT_SECRET"]}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "CREDENTIAL_NOT_ALLOWED");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`TOOLSHED_JWT_SECRET`") && message.contains("never served"),
        "{message}"
    );
    assert_eq!(
        body["error"]["details"]["fields"],
        json!([{"field": "credentials[1]", "message": body["error"]["details"]["fields"][0]["message"]}])
    );
    // Registered without it, then updated to declare it: refused too.
    let (status, body) = register(
        &s,
        &s.deployer,
        json!({"name": "thief", "description": "Harmless for now.",
               "endpoint": "builtin:get_current_time", "credentials": ["MAPS_KEY"]}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = s
        .call(
            "PUT",
            "/api/v1/registry/tools/thief",
            Some(&s.deployer),
            Some(json!({"name": "thief", "description": "Not any more.",
                        "endpoint": "builtin:get_current_time",
                        "credentials": ["TOOLSHED_JWT_SECRET"]})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "CREDENTIAL_NOT_ALLOWED");
    // A name outside the policy is refused with the fix.
    let (status, body) = register(
        &s,
        &s.deployer,
        json!({"name": "stranger", "description": "Undeclared by the operator.",
               "endpoint": "builtin:get_current_time", "credentials": ["STRIPE_KEY"]}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`STRIPE_KEY`")
            && message.contains("tenant `default`")
            && message.contains("--credentials-policy"),
        "{message}"
    );
    s.stop().await;
}

/// The variable holding acme's credential in the child's environment, and its value.
const ACME_VAR: &str = "EDGES_ACME_STRIPE";
const ACME_VALUE: &str = "sk-acme-5e1f0b7c93";
/// Server secrets in the child's environment, which no tool may see.
const SERVER_SECRETS: [(&str, &str); 2] = [
    ("TOOLSHED_JWT_SECRET", "jwt-secret-in-the-env-4c1d"),
    ("TOOLSHED_ADMIN_PASSWORD", "admin-password-in-the-env-9a2e"),
];
const TENANT_TEST: &str =
    "an_allowed_credential_is_served_to_its_tenant_only_and_no_tool_sees_the_servers_secrets";

#[test]
fn an_allowed_credential_is_served_to_its_tenant_only_and_no_tool_sees_the_servers_secrets() {
    if std::env::var(ACME_VAR).is_ok() {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(tenants_in_the_child());
        return;
    }
    let mut env = vec![(ACME_VAR, ACME_VALUE)];
    env.extend(SERVER_SECRETS);
    let (passed, text) = toolshed_testkit::rerun_alone(TENANT_TEST, env);
    assert!(passed, "the child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

/// An admin of `tenant` (a host-path endpoint is an admin's to register), created in
/// the store (as `toolshed user add` does), logged in.
async fn user_of(s: &TestServer, name: &str, tenant: &str) -> String {
    let url = format!("sqlite://{}", s.dir.path().join("toolshed.db").display());
    let registry = toolshed_registry::open(&url).await.unwrap();
    registry
        .create_user(NewUser {
            username: name.into(),
            password_hash: toolshed_auth::hash_password("password-123").unwrap(),
            role: Role::Admin,
            tenant: tenant.into(),
        })
        .await
        .unwrap();
    s.login(name, "password-123").await
}

async fn tenants_in_the_child() {
    let s = TestServer::start_with(|c| {
        c.credentials = CredentialsPolicy::parse(
            &format!("acme: {{STRIPE_KEY: {{provider: env, key: {ACME_VAR}}}}}"),
            "policy.yaml",
        )
        .unwrap();
    })
    .await;
    let acme = user_of(&s, "ann", "acme").await;
    let beta = user_of(&s, "bob", "beta").await;
    // The value is handed back reversed: the pipeline scrubs the value itself from
    // every result.
    let py = s.write(
        "charge.py",
        r#"import os


def charge(ctx):
    """Use the Stripe key, and look for the server's secrets."""
    seen = dict(os.environ)
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    seen["proc_" + pid] = f.read().decode("utf-8", "replace")
            except OSError:
                pass
    return {"reversed": ctx.credentials["STRIPE_KEY"][::-1], "seen": seen}
"#,
    );
    let tool = json!({"name": "charge", "description": "Charges.",
                      "endpoint": format!("python:{py}"), "credentials": ["STRIPE_KEY"]});
    // Beta may not declare acme's name.
    let (status, body) = register(&s, &beta, tool.clone()).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "CREDENTIAL_NOT_ALLOWED");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant `beta`")
    );
    let (status, body) = register(&s, &acme, tool).await;
    assert_eq!(status, 201, "{body}");

    // Acme's run gets it; nothing of the server's environment is in the tool's view.
    let (error, output) = execute(&s, &acme, "charge").await;
    assert_eq!(error, Value::Null, "{output}");
    let reversed: String = ACME_VALUE.chars().rev().collect();
    assert_eq!(output["reversed"], reversed.as_str());
    let seen = output["seen"].to_string();
    for (name, value) in SERVER_SECRETS {
        assert!(!seen.contains(value), "the tool saw {name}: {seen}");
        assert!(!seen.contains(name), "the tool saw {name}: {seen}");
    }
    assert!(
        !seen.contains(ACME_VAR),
        "the tool saw the variable itself: {seen}"
    );

    // Beta's run of the same tool is not served acme's credential.
    let (error, output) = execute(&s, &beta, "charge").await;
    assert_eq!(output, Value::Null);
    assert_eq!(error["code"], "CREDENTIAL_NOT_ALLOWED", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("tenant `beta`"),
        "{error}"
    );
    assert!(!error.to_string().contains(ACME_VALUE));
    s.stop().await;
}

#[test]
fn server_config_debug_never_prints_its_secrets() {
    let mut config =
        toolshed_server::ServerConfig::new("postgres://toolshed:db-pass-77f1@db:5432/reg");
    config.jwt_secret = Some("jwt-secret-3b9e".into());
    config.admin_password = Some("admin-pass-c40a".into());
    for text in [format!("{config:?}"), format!("{config:#?}")] {
        for secret in ["db-pass-77f1", "jwt-secret-3b9e", "admin-pass-c40a"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(
            text.contains("jwt_secret: Some(\"***\")") || text.contains("\"***\""),
            "{text}"
        );
        assert!(text.contains("db:5432"), "{text}");
    }
}
