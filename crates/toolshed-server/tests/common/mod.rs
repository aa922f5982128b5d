//! A real server on 127.0.0.1:0 over a temp SQLite file (or a fresh PostgreSQL schema),
//! with an admin, a deployer and a viewer, and a client that returns status and JSON.

#![allow(dead_code, missing_docs)]

pub mod contract;

use std::time::Duration;

use serde_json::{Value, json};
use toolshed_server::{Server, ServerConfig};

pub const SECRET: &str = "test-secret-test-secret-test-secret-0123456789";
pub const ADMIN_PASSWORD: &str = "admin-password-1";

pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    pub admin: String,
    pub deployer: String,
    pub viewer: String,
    pub dir: tempfile::TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
        let mut config = ServerConfig::new(url);
        config.addr = "127.0.0.1:0".parse().unwrap();
        config.jwt_secret = Some(SECRET.into());
        config.admin_password = Some(ADMIN_PASSWORD.into());
        config.dispatcher.cache_dir = dir.path().join("cache");
        // toolshed's Node helper package (zod 4), as scripts/test installs it.
        config.dispatcher.node_deps = Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-dispatch/node"),
        );
        // Tests that register host paths (as an admin) write them here.
        config.code.tool_roots = vec![dir.path().to_path_buf()];
        adjust(&mut config);
        let server = Server::open(config).await.unwrap();
        assert_eq!(
            server.seeded().admin.as_ref().map(|a| a.0.as_str()),
            Some("admin")
        );
        let base = format!("http://{}", server.local_addr());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        let client = reqwest::Client::new();
        let mut s = TestServer {
            base,
            client,
            admin: String::new(),
            deployer: String::new(),
            viewer: String::new(),
            dir,
            shutdown: Some(tx),
            task: Some(task),
        };
        s.admin = s.login("admin", ADMIN_PASSWORD).await;
        for (name, role) in [("dee", "deployer"), ("vic", "viewer")] {
            let (status, body) = s
                .call(
                    "POST",
                    "/api/v1/users",
                    Some(&s.admin.clone()),
                    Some(json!({"username": name, "password": "password-123", "role": role})),
                )
                .await;
            assert_eq!(status, 201, "{body}");
        }
        s.deployer = s.login("dee", "password-123").await;
        s.viewer = s.login("vic", "password-123").await;
        s
    }

    pub async fn login(&self, user: &str, password: &str) -> String {
        let (status, body) = self
            .call(
                "POST",
                "/api/v1/auth/login",
                None,
                Some(json!({"username": user, "password": password})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["data"]["token"].as_str().unwrap().to_owned()
    }

    /// Send a request; the answer's status and JSON body (every answer must be JSON).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let raw = body.map(|b| b.to_string().into_bytes());
        self.raw(method, path, token, raw).await
    }

    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> (u16, Value) {
        let method_name = method;
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .client
            .request(method, format!("{}{}", self.base, path))
            .timeout(Duration::from_secs(60));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("answer to {path} is not JSON ({e}): {text:?}"));
        assert_ne!(status, 500, "a 500 for {path}: {value}");
        contract::check(method_name, path, status, &value);
        if status >= 400 {
            let err = &value["error"];
            assert!(
                err["code"].is_string() && err["message"].is_string(),
                "not an error envelope: {value}"
            );
        } else {
            assert!(
                value.get("data").is_some() || path == "/healthz" || path.ends_with("openapi.json"),
                "not a data envelope: {value}"
            );
        }
        (status, value)
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the server stops within 30 s")
                .unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A token signed with the right secret whose expiry is in the past.
pub fn expired_token() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({"iss": "toolshed", "sub": "admin", "tenant": "default", "role": "admin",
        "iat": now - 7200, "exp": now - 3600});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// The same token with its signature's last characters changed.
pub fn tampered(token: &str) -> String {
    let (head, sig) = token.rsplit_once('.').unwrap();
    let mut sig: Vec<char> = sig.chars().collect();
    let n = sig.len();
    sig[n - 2] = if sig[n - 2] == 'A' { 'B' } else { 'A' };
    format!("{head}.{}", sig.into_iter().collect::<String>())
}
