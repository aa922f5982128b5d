//! Secrets in MCP server entries: a literal `env` or `headers` value (an API key pasted
//! into a client's config file, `--env K=V`) is refused at registration, naming the key
//! and the `${NAME}` reference to write instead, and never echoed; an entry stored with
//! one before (inserted through the store directly) is masked for every role and named,
//! key by key and never by value, in a warning at the server's start. SQLite and
//! PostgreSQL.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::TestServer;
use serde_json::json;
use toolshed_registry::NewMcpServer;

const OPENAI: &str = "sk-proj-Zq81mDw2LkT0bQ9nVf3x";
const SLACK: &str = "xoxb-2231-8842-Hs7QpL0aVwq";
const GITHUB: &str = "ghp_8FhQ2nLr0vZx6TbC1mYd";

fn assert_no_secret(text: &str) {
    for secret in [OPENAI, SLACK, GITHUB] {
        assert!(!text.contains(secret), "a secret is in: {text}");
    }
}

#[tokio::test]
async fn literal_env_and_header_values_are_refused_naming_the_key_and_the_reference() {
    let s = TestServer::start().await;
    // What a scanned Claude Desktop file held, posted as it is.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(
                json!({"name": "slack", "command": "npx", "args": ["-y", "@x/slack"],
                "env": {"OPENAI_API_KEY": OPENAI, "SLACK_BOT_TOKEN": SLACK}}),
            ),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let text = answer.to_string();
    assert_no_secret(&text);
    let fields: Vec<&str> = answer["error"]["details"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["env.OPENAI_API_KEY", "env.SLACK_BOT_TOKEN"]);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("${OPENAI_API_KEY}") && message.contains("${SLACK_BOT_TOKEN}"),
        "{message}"
    );
    assert!(message.contains("credentials"), "{message}");

    // A header: the reference keeps the scheme word, never the token.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(json!({"name": "gh", "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": format!("Bearer {GITHUB}")}})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_no_secret(&answer.to_string());
    assert_eq!(
        answer["error"]["details"]["fields"][0]["field"],
        "headers.Authorization"
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("Bearer ${AUTHORIZATION}"), "{message}");

    // Text beside a reference is a literal too.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(
                json!({"name": "mixed", "command": "npx", "credentials": ["TOKEN"],
                "env": {"KEY": format!("{OPENAI}${{TOKEN}}")}}),
            ),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_no_secret(&answer.to_string());

    // Nothing was stored.
    let (_, list) = s
        .call("GET", "/api/v1/mcp-servers", Some(&s.admin), None)
        .await;
    assert_eq!(list["meta"]["total"], 0, "{list}");

    // References register; a change that brings a literal is refused as well.
    let (status, created) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(json!({"name": "ok", "command": "npx", "env": {"LOG_LEVEL": ""}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap();
    let (status, answer) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.deployer),
            Some(json!({"env": {"OPENAI_API_KEY": OPENAI}})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_no_secret(&answer.to_string());
    assert_eq!(
        answer["error"]["details"]["fields"][0]["field"],
        "env.OPENAI_API_KEY"
    );
}

/// An entry as stored before literals were refused: the scan of a Claude Desktop file.
fn leaky_entry() -> NewMcpServer {
    serde_json::from_value(json!({
        "name": "leaky",
        "tenant": "default",
        "spec": {"name": "leaky", "launch": {"transport": "stdio", "command": "npx",
            "args": ["-y", "@x/slack"],
            "env": {"OPENAI_API_KEY": OPENAI, "SLACK_BOT_TOKEN": SLACK, "REGION": "${REGION}"}},
            "credentials": ["REGION"]},
        "transport": "stdio",
        "endpoint": "npx -y @x/slack",
        "description": "",
        "tags": [],
        "team": null,
        "enabled": true,
        "source": "scan:/home/u/.config/Claude/claude_desktop_config.json",
        "overrides": {},
        "created_by": "dee",
    }))
    .unwrap()
}

/// Every role reads the entry: no value, `***` in its place, the keys named.
async fn no_role_reads_the_values(s: &TestServer, id: &str) {
    for token in [&s.viewer, &s.deployer, &s.admin] {
        for path in [
            "/api/v1/mcp-servers".to_owned(),
            "/api/v1/mcp_servers".to_owned(),
            format!("/api/v1/mcp-servers/{id}"),
        ] {
            let (status, answer) = s.call("GET", &path, Some(token), None).await;
            assert_eq!(status, 200, "{answer}");
            assert_no_secret(&answer.to_string());
            let entry = answer["data"]
                .as_array()
                .and_then(|a| a.first())
                .unwrap_or(&answer["data"]);
            assert_eq!(entry["env"]["OPENAI_API_KEY"], "***", "{entry}");
            assert_eq!(entry["env"]["SLACK_BOT_TOKEN"], "***", "{entry}");
            assert_eq!(entry["env"]["REGION"], "${REGION}", "{entry}");
            assert_eq!(
                entry["literal_values"],
                json!(["env.OPENAI_API_KEY", "env.SLACK_BOT_TOKEN"]),
                "{entry}"
            );
        }
    }
    // Disabling it (a change that leaves the values alone) still works.
    let (status, answer) = s
        .call(
            "PUT",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.admin),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_no_secret(&answer.to_string());
}

/// Log lines written while the guard lives (this thread's subscriber).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Insert the leaky entry through the store, start the server on that database with
/// its log captured, and check the warning and every view.
async fn stored_literals_are_masked_and_named_at_start(url: String) {
    let store = toolshed_registry::open(&url).await.unwrap();
    let record = store.create_mcp_server(leaky_entry()).await.unwrap();
    drop(store);

    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let s = TestServer::start_with(move |c| {
        c.database_url = url;
        c.credentials = toolshed_server::credentials::CredentialsPolicy::parse(
            "default: {REGION: {provider: env}}",
            "test",
        )
        .unwrap();
    })
    .await;
    drop(guard);
    // The attack first: a viewer reads the entry back (nothing of the values comes).
    no_role_reads_the_values(&s, &record.id).await;
    let text = log.text();
    assert_no_secret(&text);
    for key in ["env.OPENAI_API_KEY", "env.SLACK_BOT_TOKEN"] {
        let line = text
            .lines()
            .find(|l| l.contains("WARN") && l.contains(key))
            .unwrap_or_else(|| panic!("no start-up warning naming {key}:\n{text}"));
        assert!(
            line.contains(&record.id) && line.contains("leaky"),
            "the warning names the entry: {line}"
        );
    }
    assert!(
        !text.contains("env.REGION"),
        "a reference is no literal:\n{text}"
    );
}

#[tokio::test]
async fn a_stored_literal_is_masked_for_every_role_and_named_at_start_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    stored_literals_are_masked_and_named_at_start(url).await;
}

#[tokio::test]
async fn a_stored_literal_is_masked_for_every_role_and_named_at_start_postgres() {
    toolshed_store::testing::with_schema(|admin, schema| async move {
        admin
            .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
            .await
            .unwrap();
        let url = format!(
            "{}?options=-csearch_path%3D{schema}",
            toolshed_store::testing::postgres_url()
        );
        // The test body holds a thread-local subscriber: run it on one thread.
        tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(stored_literals_are_masked_and_named_at_start(url));
        })
        .await
        .unwrap();
    })
    .await;
}

#[tokio::test]
async fn an_entry_of_references_shows_them_to_a_viewer() {
    let s = TestServer::start_with(|c| {
        c.credentials = toolshed_server::credentials::CredentialsPolicy::parse(
            "default: {OPENAI_API_KEY: {provider: env}}",
            "test",
        )
        .unwrap();
    })
    .await;
    let (status, created) = s
        .call(
            "POST",
            "/api/v1/mcp-servers",
            Some(&s.deployer),
            Some(
                json!({"name": "ai", "command": "npx", "credentials": ["OPENAI_API_KEY"],
                "env": {"OPENAI_API_KEY": "${OPENAI_API_KEY}"}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap();
    let (_, got) = s
        .call(
            "GET",
            &format!("/api/v1/mcp-servers/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(got["data"]["env"]["OPENAI_API_KEY"], "${OPENAI_API_KEY}");
    assert_eq!(got["data"]["literal_values"], json!([]));
}
