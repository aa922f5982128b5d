//! A credential handed to a tool appears nowhere else: a Python tool executed through
//! the server and a streaming Rust tool run on the same journal both echo it in partial
//! results, in their result, in an error's message and details and on stderr, and the
//! secret is in no API answer, no crumb, no row of the database and no log line.
//!
//! The seeded built-ins read the env they declare (`TAVILY_API_KEY`,
//! `SQL_DATABASE_URL`, …) from the same policy, for the tenant of each run: each tenant
//! gets its own key and database, a tenant the policy does not serve is told how to get
//! one, and the key appears in no answer.
//!
//! The server reads credentials from its environment, and a test may not change its
//! own, so each test runs itself again in a child process whose environment holds the
//! secret; the parent then also reads everything the child logged.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../toolshed-stdlib/tests/common/tavily.rs"]
mod tavily;

use std::path::Path;
use std::sync::Arc;

use common::TestServer;
use futures_util::StreamExt;
use serde_json::{Value, json};
use toolshed_core::{
    CallOutcome, Diagnostics, HandlerFuture, Pipeline, Principal, Reply, Tool, ToolCall,
    ToolContext, ToolError, ToolSet,
};
use toolshed_runtime::{CallStep, NewRunBuilder, Runtime, RuntimeConfig};

/// The credential's name, also the variable the child process has it in (the server's
/// credentials policy serves it from there; a `TOOLSHED_*` name would never be served).
const CREDENTIAL: &str = "LEAKY_TEST_KEY";
/// Its value.
const SECRET: &str = "sk-live-7f3a9c1e5b2d4086";
/// This test's name, to run it alone in the child.
const NAME: &str = "a_credential_appears_in_no_answer_crumb_row_or_log";

#[test]
fn a_credential_appears_in_no_answer_crumb_row_or_log() {
    if std::env::var(CREDENTIAL).is_ok() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(in_the_child());
        return;
    }
    let (passed, text) = toolshed_testkit::rerun_alone(NAME, [(CREDENTIAL, SECRET)]);
    let shown = text.replace(SECRET, "<THE SECRET>");
    assert!(passed, "the child failed:\n{shown}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{shown}");
    assert!(
        !text.contains(SECRET),
        "the secret is in the output or logs:\n{shown}"
    );
    // The logs were captured: the tool's stderr was logged, scrubbed.
    assert!(
        text.contains("toolshed::dispatch") && text.contains("the key is [REDACTED]"),
        "the tool's stderr was not logged:\n{shown}"
    );
}

/// Everything that runs with the secret in the environment.
async fn in_the_child() {
    // Every log line of the server, the runtime and the dispatcher, to stderr, where the
    // parent reads it.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug,toolshed=trace"))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let s = TestServer::start_with(|c| {
        c.credentials = toolshed_server::credentials::CredentialsPolicy::parse(
            &format!("'*': {{{CREDENTIAL}: {{provider: env}}}}"),
            "policy.yaml",
        )
        .unwrap();
    })
    .await;
    let mut answers: Vec<Value> = Vec::new();
    let python_runs = python_tool_through_the_server(&s, &mut answers).await;
    let rust_runs = rust_tool_on_the_same_journal(&s).await;
    for run_id in python_runs.iter().chain(&rust_runs) {
        let (status, run) = s
            .call(
                "GET",
                &format!("/api/v1/runs/{run_id}?crumbs=true"),
                Some(&s.deployer),
                None,
            )
            .await;
        assert_eq!(status, 200, "{run}");
        let partials = run["data"]["crumbs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "tool:result:partial")
            .count();
        assert!(partials >= 1, "run {run_id} recorded no partial: {run}");
        answers.push(run);
    }
    let (_, runs) = s.call("GET", "/api/v1/runs", Some(&s.deployer), None).await;
    answers.push(runs);
    for answer in &answers {
        let text = answer.to_string();
        assert!(!text.contains(SECRET), "an API answer holds the secret");
    }
    // The tools did echo it: what reached the answers is the scrubbed form.
    assert!(answers.iter().any(|a| a.to_string().contains("[REDACTED]")));
    // Every write has been made: one-call runs are recorded before the answer, and a
    // finished run has flushed its crumbs.
    no_secret_in_the_database(&s.dir.path().join("toolshed.db"));
    s.stop().await;
}

/// Register and execute a Python tool that echoes its credential everywhere; the ids of
/// its runs.
async fn python_tool_through_the_server(s: &TestServer, answers: &mut Vec<Value>) -> Vec<String> {
    let d = Some(s.deployer.as_str());
    let py = s.write(
        "leaky.py",
        &format!(
            r#"import sys


class Rejected(Exception):
    pass


def leaky(ctx, fail: bool = False):
    """Echo the credential in partials, the result, an error and stderr."""
    key = ctx.credentials["{CREDENTIAL}"]
    print("the key is " + key, file=sys.stderr)
    yield {{"progress": "using " + key}}
    yield {{key: "as a key"}}
    if fail:
        e = Rejected("upstream rejected " + key)
        e.code = key
        raise e
    yield {{"done": key}}
"#
        ),
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(s.admin.as_str()),
            Some(json!({"name": "leaky", "endpoint": format!("python:{py}"), "credentials": [CREDENTIAL]})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    answers.push(answer);
    let mut runs = Vec::new();
    for fail in [false, true] {
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/registry/tools/leaky/execute",
                d,
                Some(json!({"args": {"fail": fail}})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        let data = &answer["data"];
        let stderr = data["stderr"].as_str().unwrap();
        assert!(stderr.starts_with("the key is [REDACTED]\n"), "{data}");
        if fail {
            assert_eq!(
                data["error"]["message"], "Rejected: upstream rejected [REDACTED]",
                "{data}"
            );
            assert_eq!(
                data["error"]["details"]["tool_code"], "[REDACTED]",
                "{data}"
            );
        } else {
            assert_eq!(data["output"], json!({"done": "[REDACTED]"}), "{data}");
        }
        runs.push(data["run_id"].as_str().unwrap().to_owned());
        answers.push(answer);
    }
    runs
}

/// Run a streaming Rust tool that reads the credential and yields it, on a second
/// runtime over the server's database, as the deployer's tenant; the ids of its runs.
async fn rust_tool_on_the_same_journal(s: &TestServer) -> Vec<String> {
    let streamer = Tool::builder("key_streamer")
        .description("Streams its key.")
        .input_schema(json!({"type": "object", "properties": {"fail": {"type": "boolean"}}}))
        .credentials([CREDENTIAL])
        .stream_handler(|args, ctx| {
            let fail = args["fail"].as_bool().unwrap_or(false);
            futures_util::stream::once(async move {
                ctx.credentials()
                    .get(CREDENTIAL)
                    .await
                    .map_err(ToolError::from)
            })
            .flat_map(move |key| {
                let items = match key {
                    Err(e) => vec![Err(e)],
                    Ok(key) => {
                        let key = key.expose().to_owned();
                        let last = if fail {
                            Err(ToolError::handler(format!("upstream rejected {key}"))
                                .with_details(json!({"key": key})))
                        } else {
                            Ok(json!({"done": key}))
                        };
                        vec![
                            Ok(json!({"progress": format!("using {key}")})),
                            Ok(json!({key.clone(): "as a key"})),
                            last,
                        ]
                    }
                };
                futures_util::stream::iter(items)
            })
        })
        .build()
        .unwrap();
    // A handler whose diagnostics carry the key (as a process's stderr would).
    let noisy = Tool::builder("key_logger")
        .description("Logs its key.")
        .credentials([CREDENTIAL])
        .raw_handler(Arc::new(|_a: Value, ctx: ToolContext| -> HandlerFuture {
            Box::pin(async move {
                let key = match ctx.credentials().get(CREDENTIAL).await {
                    Ok(k) => k.expose().to_owned(),
                    Err(e) => return Reply::new(Err(e.into())),
                };
                Reply::new(Err(ToolError::handler(format!("rejected {key}")))).with_diagnostics(
                    Diagnostics {
                        stderr: format!("the key is {key}\n"),
                        ..Diagnostics::default()
                    },
                )
            })
        }))
        .build()
        .unwrap();
    let url = format!("sqlite://{}", s.dir.path().join("toolshed.db").display());
    let journal = toolshed_journal::open(&url).await.unwrap();
    let pipeline = Pipeline::builder(ToolSet::from_tools([streamer, noisy]).unwrap()).build();
    let runtime = Runtime::new(pipeline, journal, RuntimeConfig::default()).unwrap();
    let dee = Principal {
        iss: "toolshed".into(),
        sub: "dee".into(),
        tenant: Some("default".into()),
    };
    let mut runs = Vec::new();
    for fail in [false, true] {
        let run = runtime
            .start(
                NewRunBuilder::new("rust-agent")
                    .principal(dee.clone())
                    .build(),
            )
            .await
            .unwrap();
        let outcome = done(
            run.call(ToolCall::new("key_streamer", json!({"fail": fail})))
                .await
                .unwrap(),
        );
        match &outcome.result {
            Ok(v) => assert_eq!(v, &json!({"done": "[REDACTED]"})),
            Err(e) => {
                assert_eq!(e.message, "upstream rejected [REDACTED]");
                assert_eq!(e.details, Some(json!({"key": "[REDACTED]"})));
            }
        }
        if fail {
            let logged = done(
                run.call(ToolCall::new("key_logger", json!({})))
                    .await
                    .unwrap(),
            );
            assert_eq!(logged.diagnostics.stderr, "the key is [REDACTED]\n");
        }
        run.finish().await.unwrap();
        runs.push(run.id().to_owned());
    }
    runs
}

fn done(step: CallStep) -> CallOutcome {
    match step {
        CallStep::Done(outcome) => outcome,
        CallStep::Parked(gate) => panic!("parked: {gate:?}"),
    }
}

/// Every text and blob cell of every table, and the raw bytes of the database files.
fn no_secret_in_the_database(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(tables.iter().any(|t| t == "crumbs"), "{tables:?}");
    let mut cells = 0;
    let mut redacted = 0;
    for table in &tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let columns = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for i in 0..columns {
                let bytes = match row.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => b,
                    _ => continue,
                };
                cells += 1;
                let text = String::from_utf8_lossy(bytes);
                assert!(
                    !text.contains(SECRET),
                    "table {table}, column {i} holds the secret"
                );
                if text.contains("[REDACTED]") {
                    redacted += 1;
                }
            }
        }
    }
    assert!(
        cells > 0 && redacted > 0,
        "{cells} cells, {redacted} redacted"
    );
    drop(conn);
    for file in ["toolshed.db", "toolshed.db-wal"] {
        let path = db.with_file_name(file);
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                "{} holds the secret",
                path.display()
            );
        }
    }
}

/// The second test's name, to run it alone in the child.
const BUILTINS: &str = "built_ins_read_their_env_from_the_policy_for_each_tenant_and_no_other";

#[test]
fn built_ins_read_their_env_from_the_policy_for_each_tenant_and_no_other() {
    if std::env::var("ACME_TAVILY_KEY").is_ok() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(built_ins_in_the_child());
        return;
    }
    // The stand-in for Tavily's paid API (see tavily.rs) runs here, the server in the
    // child; one SQLite database per tenant.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = rt.block_on(tavily::stand_in());
    let dir = tempfile::tempdir().unwrap();
    let mut urls = Vec::new();
    for tenant in ["acme", "beta"] {
        let path = dir.path().join(format!("{tenant}.db"));
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(&format!(
                "CREATE TABLE owner (tenant TEXT); INSERT INTO owner VALUES ('{tenant}');"
            ))
            .unwrap();
        urls.push(format!("sqlite://{}", path.display()));
    }
    let (passed, text) = toolshed_testkit::rerun_alone(
        BUILTINS,
        [
            ("ACME_TAVILY_KEY", tavily::KEY),
            ("SHARED_TAVILY_BASE", base.as_str()),
            ("ACME_SQL_URL", urls[0].as_str()),
            ("BETA_SQL_URL", urls[1].as_str()),
        ],
    );
    let shown = text.replace(tavily::KEY, "<THE KEY>");
    assert!(passed, "the child failed:\n{shown}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{shown}");
    assert!(
        !text.contains(tavily::KEY),
        "the key is in the output:\n{shown}"
    );
    // Only acme's search reached Tavily, with acme's key.
    let seen = seen.0.lock().unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].0.as_deref(),
        Some(format!("Bearer {}", tavily::KEY).as_str())
    );
    drop(seen);
    drop(rt);
}

/// Execute a seeded built-in as `token`; the answer's `data`.
async fn execute(s: &TestServer, token: &str, tool: &str, args: Value) -> Value {
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/registry/tools/{tool}/execute"),
            Some(token),
            Some(json!({ "args": args })),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(!answer.to_string().contains(tavily::KEY), "{answer}");
    answer["data"].clone()
}

async fn built_ins_in_the_child() {
    let s = TestServer::start_with(|c| {
        c.credentials = toolshed_server::credentials::CredentialsPolicy::parse(
            "acme:
  TAVILY_API_KEY: {provider: env, key: ACME_TAVILY_KEY}
  SQL_DATABASE_URL: {provider: env, key: ACME_SQL_URL}
beta:
  SQL_DATABASE_URL: {provider: env, key: BETA_SQL_URL}
'*':
  TAVILY_BASE_URL: {provider: env, key: SHARED_TAVILY_BASE}
",
            "policy.yaml",
        )
        .unwrap();
    })
    .await;
    let mut tokens = Vec::new();
    for (name, tenant) in [("ann", "acme"), ("bob", "beta")] {
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/users",
                Some(&s.admin),
                Some(json!({"username": name, "password": "password-123", "role": "deployer", "tenant": tenant})),
            )
            .await;
        assert_eq!(status, 201, "{answer}");
        tokens.push(s.login(name, "password-123").await);
    }
    let (ann, bob) = (&tokens[0], &tokens[1]);
    let owner = json!({"query": "SELECT tenant FROM owner"});

    // Each tenant's sql_query reads its own database.
    let data = execute(&s, ann, "sql_query", owner.clone()).await;
    assert_eq!(data["output"]["rows"], json!([["acme"]]), "{data}");
    let data = execute(&s, bob, "sql_query", owner.clone()).await;
    assert_eq!(data["output"]["rows"], json!([["beta"]]), "{data}");
    // acme's key searches; the answer does not hold it.
    let data = execute(&s, ann, "web_search", json!({"query": "messi"})).await;
    assert!(data["error"].is_null(), "{data}");
    assert_eq!(
        data["output"]["results"][1]["url"], "https://en.wikipedia.org/wiki/Lionel_Messi",
        "{data}"
    );
    // beta has no key, the default tenant nothing at all: each is told what is missing
    // and who adds it, and nothing reaches Tavily or a database.
    for (token, tool, args, tenant, name) in [
        (
            bob.as_str(),
            "web_search",
            json!({"query": "messi"}),
            "beta",
            "TAVILY_API_KEY",
        ),
        (
            s.deployer.as_str(),
            "web_search",
            json!({"query": "messi"}),
            "default",
            "TAVILY_API_KEY",
        ),
        (
            s.deployer.as_str(),
            "sql_query",
            owner.clone(),
            "default",
            "SQL_DATABASE_URL",
        ),
    ] {
        let data = execute(&s, token, tool, args).await;
        assert!(data["output"].is_null(), "{data}");
        assert_eq!(data["error"]["details"]["kind"], "not_configured", "{data}");
        let message = data["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{tool} needs {name}"))
                && message.contains(&format!("tenant `{tenant}`"))
                && message.contains("--credentials-policy"),
            "{message}"
        );
    }
    s.stop().await;
}
