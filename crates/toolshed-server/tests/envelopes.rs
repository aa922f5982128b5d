//! The answers the server's layers give, on a real server on loopback: a handler that
//! panics is a 500 envelope that leaks nothing and the server goes on; a request past
//! the request timeout is a 503 `REQUEST_TIMEOUT` envelope (an embedded route that never
//! answers, and a tool execution that outlasts it); a bad token sent with a bad body is
//! a 401, whatever is wrong with the body.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::{ADMIN_PASSWORD, SECRET, TestServer, expired_token, tampered};
use serde_json::{Value, json};
use toolshed_server::{AppState, Server, ServerConfig};

/// A server whose router has the embedding application's routes `extra`, with an
/// admin token minted directly (no login, so no request in the setup can come near a
/// short request timeout).
struct Embedded {
    base: String,
    client: reqwest::Client,
    token: String,
    dir: tempfile::TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Embedded {
    async fn start(adjust: impl FnOnce(&mut ServerConfig), extra: Router<AppState>) -> Embedded {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
        let mut config = ServerConfig::new(url);
        config.addr = "127.0.0.1:0".parse().unwrap();
        config.jwt_secret = Some(SECRET.into());
        config.admin_password = Some(ADMIN_PASSWORD.into());
        config.dispatcher.cache_dir = dir.path().join("cache");
        config.code.tool_roots = vec![dir.path().to_path_buf()];
        adjust(&mut config);
        let server = Server::open(config).await.unwrap();
        let state = server.state().clone();
        drop(server); // its listener; this test serves the router itself
        let admin = state.registry().get_user("admin").await.unwrap().unwrap();
        let token = state
            .tokens()
            .issue(
                "admin",
                admin.role,
                Some(toolshed_server::DEFAULT_TENANT),
                u64::try_from(admin.token_generation).unwrap(),
            )
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = toolshed_server::router_with(state, extra);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Embedded {
            base,
            client: reqwest::Client::new(),
            token,
            dir,
            shutdown: Some(tx),
            task,
        }
    }

    /// Send a request: the status, the content type and the body as JSON.
    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> (u16, String, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(60));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path}: the answer is not JSON ({e}): {text:?}"));
        (status, content_type, value)
    }

    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the server stops within 30 s")
            .unwrap();
    }
}

/// The envelope of an error answer: `{"error": {"code", "message", "details"}}` and
/// nothing else.
fn assert_envelope(answer: &Value, code: &str) {
    let object = answer.as_object().unwrap();
    assert_eq!(
        object.keys().collect::<Vec<_>>(),
        ["error"],
        "not an error envelope: {answer}"
    );
    assert_eq!(answer["error"]["code"], code, "{answer}");
    assert!(answer["error"]["message"].is_string(), "{answer}");
}

async fn panics() -> &'static str {
    panic!("the vault password is hunter2")
}

#[tokio::test]
async fn a_panicking_handler_is_a_500_envelope_that_leaks_nothing() {
    let s = Embedded::start(|_| {}, Router::new().route("/embedded/panic", get(panics))).await;
    for _ in 0..2 {
        let (status, content_type, answer) = s.send("GET", "/embedded/panic", None).await;
        assert_eq!(status, 500, "{answer}");
        assert_eq!(content_type, "application/json");
        assert_envelope(&answer, "INTERNAL");
        let text = answer.to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("vault"),
            "the panic's message leaked: {text}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the server log has the details"),
            "{answer}"
        );
    }
    // The server goes on: the API answers as before.
    let (status, _, answer) = s.send("GET", "/api/v1/registry/tools", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["meta"]["total"], 5,
        "the seeded stdlib tools: {answer}"
    );
    let (status, _, _) = s.send("GET", "/healthz", None).await;
    assert_eq!(status, 200);
    s.stop().await;
}

#[tokio::test]
async fn a_request_past_the_request_timeout_is_a_503_timeout_envelope() {
    let s = Embedded::start(
        |c| c.request_timeout = Duration::from_secs(1),
        Router::new().route(
            "/embedded/never",
            get(|| async {
                std::future::pending::<()>().await;
                "unreachable"
            }),
        ),
    )
    .await;
    // A route that never answers.
    let (status, content_type, answer) = s.send("GET", "/embedded/never", None).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(content_type, "application/json");
    assert_envelope(&answer, "REQUEST_TIMEOUT");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than the server allows"),
        "{answer}"
    );

    // A tool that outlasts the request timeout (its own timeout is a minute).
    let script = s.dir.path().join("slow.sh");
    std::fs::write(&script, "#!/bin/sh\nread -r line\nsleep 60\n").unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let (status, _, answer) = s
        .send(
            "POST",
            "/api/v1/registry/tools",
            Some(json!({
                "name": "slow", "description": "Answers after a minute.",
                "endpoint": format!("exec:{}", script.display()), "timeout_ms": 60_000
            })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, content_type, answer) = s
        .send(
            "POST",
            "/api/v1/registry/tools/slow/execute",
            Some(json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(content_type, "application/json");
    assert_envelope(&answer, "REQUEST_TIMEOUT");
    let (status, _, _) = s.send("GET", "/healthz", None).await;
    assert_eq!(status, 200);
    s.stop().await;
}

/// Every route that reads a body: (method, path).
const BODY_ROUTES: &[(&str, &str)] = &[
    ("POST", "/api/v1/users"),
    ("POST", "/api/v1/registry/tools"),
    ("PUT", "/api/v1/registry/tools/get_current_time"),
    ("POST", "/api/v1/registry/tools/get_current_time/execute"),
    ("POST", "/api/v1/registry/agents"),
    ("POST", "/api/v1/runs/r1/cancel"),
    ("POST", "/api/v1/approvals/c1/approve"),
    ("POST", "/api/v1/approvals/c1/deny"),
    ("POST", "/api/v1/answers/c1"),
    ("POST", "/api/v1/tools/sandbox/execute"),
];

/// Send `body` with `content_type` and `token`; the status and the JSON answer.
async fn send_body(
    s: &TestServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let mut req = s
        .client
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", s.base),
        )
        .header("content-type", content_type)
        .body(body)
        .timeout(Duration::from_secs(60));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: the answer is not JSON ({e}): {text:?}"));
    (status, value)
}

#[tokio::test]
async fn a_bad_token_with_a_bad_body_is_a_401() {
    let s = TestServer::start_with(|c| c.max_body_bytes = 64 * 1024).await;
    // (what is wrong, content type, body, and the answer it gets with a valid token)
    let bodies: [(&str, &str, Vec<u8>, u16, &str); 4] = [
        (
            "malformed JSON",
            "application/json",
            b"{\"name\": ".to_vec(),
            400,
            "INVALID_JSON",
        ),
        (
            "the wrong shape",
            "application/json",
            b"[1, 2]".to_vec(),
            422,
            "INVALID_BODY",
        ),
        (
            "too large",
            "application/json",
            vec![b' '; 100 * 1024],
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            "not JSON",
            "text/plain",
            b"name=x".to_vec(),
            400,
            "INVALID_JSON",
        ),
    ];
    // The bodies are bad: with a valid token each is refused for what it is.
    for (what, content_type, body, status_with_token, code) in &bodies {
        let (status, answer) = send_body(
            &s,
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            content_type,
            body.clone(),
        )
        .await;
        assert_eq!(status, *status_with_token, "{what}: {answer}");
        assert_envelope(&answer, code);
    }
    let expired = expired_token();
    let tampered = tampered(&s.admin);
    for (method, path) in BODY_ROUTES {
        for (token, token_what) in [
            (None, "no token"),
            (Some("not-a-jwt"), "a garbage token"),
            (Some(tampered.as_str()), "a tampered token"),
            (Some(expired.as_str()), "an expired token"),
        ] {
            for (what, content_type, body, _, _) in &bodies {
                let (status, answer) =
                    send_body(&s, method, path, token, content_type, body.clone()).await;
                assert_eq!(
                    status, 401,
                    "{method} {path} with {token_what} and a body that is {what}: {answer}"
                );
                assert_envelope(&answer, "UNAUTHENTICATED");
            }
        }
    }
    s.stop().await;
}
