//! The built-in tools through the real pipeline.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::json;
use toolshed_core::{ErrorCode, Pipeline, RunContext, ToolCall, ToolSet};

fn pipeline() -> Pipeline {
    Pipeline::builder(ToolSet::from_tools(toolshed_stdlib::tools()).unwrap()).build()
}

fn run_in(dir: &std::path::Path) -> RunContext {
    RunContext::builder()
        .env(BTreeMap::from([(
            toolshed_stdlib::OUTPUT_DIR_ENV.to_string(),
            dir.display().to_string(),
        )]))
        .build()
}

#[tokio::test]
async fn markdown_writer_writes_inside_the_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline();
    let run = run_in(dir.path());
    let out = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "title": "Hello", "content": "body"}),
            ),
        )
        .await;
    let result = out.result.unwrap();
    let written = std::fs::read_to_string(dir.path().join("default/notes/a.md")).unwrap();
    assert_eq!(written, "# Hello\n\nbody\n");
    assert_eq!(result["bytes"], json!(written.len()));
    assert_eq!(
        result["sha256"],
        json!(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            written.as_bytes()
        )))
    );

    // Same content again (a keyed re-run) is fine; different content needs overwrite.
    let again = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "title": "Hello", "content": "body"}),
            ),
        )
        .await;
    assert!(again.result.is_ok());
    let clash = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "content": "other"}),
            ),
        )
        .await;
    let e = clash.result.unwrap_err();
    assert!(e.message.contains("overwrite"), "{}", e.message);
    let forced = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "notes/a.md", "content": "other", "overwrite": true}),
            ),
        )
        .await;
    assert!(forced.result.is_ok());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("default/notes/a.md")).unwrap(),
        "other\n"
    );
}

#[tokio::test]
async fn markdown_writer_refuses_escapes_and_bad_args() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline();
    let run = run_in(dir.path());
    let out = p
        .call(
            &run,
            ToolCall::new(
                "markdown_writer",
                json!({"filename": "../escape.md", "content": "x"}),
            ),
        )
        .await;
    assert_eq!(out.result.unwrap_err().code, ErrorCode::HandlerError);
    assert!(!dir.path().parent().unwrap().join("escape.md").exists());
    let out = p
        .call(
            &run,
            ToolCall::new("markdown_writer", json!({"filename": 3})),
        )
        .await;
    let e = out.result.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgs);
    assert!(e.message.contains("content"), "{}", e.message);
    assert!(e.message.contains("/filename"), "{}", e.message);
}

#[tokio::test]
async fn get_current_time_answers_in_utc() {
    let p = pipeline();
    let out = p
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("get_current_time", json!({})),
        )
        .await;
    let v = out.result.unwrap();
    assert!(v["iso8601"].as_str().unwrap().ends_with('Z'));
    assert!(v["unix"].as_i64().unwrap() > 1_700_000_000);
    let out = p
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("get_current_time", json!({"utc_offset": "EST"})),
        )
        .await;
    assert_eq!(out.result.unwrap_err().code, ErrorCode::HandlerError);
}

#[test]
fn specs_are_complete() {
    for t in toolshed_stdlib::tools() {
        assert!(!t.spec().description.is_empty());
        assert!(
            t.output_schema().is_some(),
            "{} declares its output",
            t.name()
        );
    }
    let mw = toolshed_stdlib::get("markdown_writer").unwrap();
    assert_eq!(mw.spec().idempotency, toolshed_core::Idempotency::Keyed);
}

fn run_as(dir: &std::path::Path, tenant: &str) -> RunContext {
    RunContext::builder()
        .env(BTreeMap::from([(
            toolshed_stdlib::OUTPUT_DIR_ENV.to_string(),
            dir.display().to_string(),
        )]))
        .principal(toolshed_core::Principal {
            iss: "toolshed".into(),
            sub: "ann".into(),
            tenant: Some(tenant.into()),
        })
        .build()
}

async fn write(
    p: &Pipeline,
    run: &RunContext,
    args: serde_json::Value,
) -> Result<serde_json::Value, String> {
    p.call(run, ToolCall::new("markdown_writer", args))
        .await
        .result
        .map_err(|e| e.message)
}

#[tokio::test]
async fn markdown_writer_keeps_each_tenants_files_in_its_own_folder() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline();
    let acme = run_as(dir.path(), "acme");
    let beta = run_as(dir.path(), "beta");
    write(
        &p,
        &acme,
        json!({"filename": "plan.md", "content": "acme's plan"}),
    )
    .await
    .unwrap();
    // Beta's file of the same name is its own: acme's is neither read nor replaced,
    // with or without `overwrite`.
    let out = write(
        &p,
        &beta,
        json!({"filename": "plan.md", "content": "beta's", "overwrite": true}),
    )
    .await
    .unwrap();
    assert!(
        out["path"].as_str().unwrap().ends_with("beta/plan.md"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("acme/plan.md")).unwrap(),
        "acme's plan\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("beta/plan.md")).unwrap(),
        "beta's\n"
    );
    // A tenant cannot name another's folder through the filename.
    let e = write(
        &p,
        &beta,
        json!({"filename": "../acme/plan.md", "content": "x", "overwrite": true}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("relative path"), "{e}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("acme/plan.md")).unwrap(),
        "acme's plan\n"
    );
}

#[tokio::test]
async fn markdown_writer_never_follows_a_symlink_planted_in_the_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim.md"), "untouched\n").unwrap();
    let p = pipeline();
    let acme = run_as(dir.path(), "acme");
    // The tenant's folder itself is a link out.
    std::os::unix::fs::symlink(outside.path(), dir.path().join("acme")).unwrap();
    let e = write(
        &p,
        &acme,
        json!({"filename": "victim.md", "content": "pwned", "overwrite": true}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("symlink"), "{e}");
    // A subfolder is a link out.
    std::fs::remove_file(dir.path().join("acme")).unwrap();
    std::fs::create_dir(dir.path().join("acme")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("acme/reports")).unwrap();
    let e = write(
        &p,
        &acme,
        json!({"filename": "reports/victim.md", "content": "pwned", "overwrite": true}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("symlink"), "{e}");
    // The file is a link out: refused, even with `overwrite`.
    std::os::unix::fs::symlink(
        outside.path().join("victim.md"),
        dir.path().join("acme/victim.md"),
    )
    .unwrap();
    let e = write(
        &p,
        &acme,
        json!({"filename": "victim.md", "content": "pwned", "overwrite": true}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("symlink"), "{e}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("victim.md")).unwrap(),
        "untouched\n"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "nothing was written outside"
    );
}

#[tokio::test]
async fn markdown_writer_caps_each_file_and_each_tenants_folder() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline();
    let acme = run_as(dir.path(), "acme");
    let big = "x".repeat(toolshed_stdlib::MAX_FILE_BYTES + 1);
    let e = write(&p, &acme, json!({"filename": "big.md", "content": big}))
        .await
        .unwrap_err();
    assert!(e.contains("more than the 1048576"), "{e}");
    // A folder already at its cap (a sparse file counts at its size) takes no more.
    std::fs::create_dir_all(dir.path().join("acme")).unwrap();
    let full = std::fs::File::create(dir.path().join("acme/full.md")).unwrap();
    full.set_len(toolshed_stdlib::MAX_TENANT_BYTES).unwrap();
    let e = write(
        &p,
        &acme,
        json!({"filename": "one-more.md", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("past 67108864"), "{e}");
    // Another tenant is not held back by it.
    let beta = run_as(dir.path(), "beta");
    write(
        &p,
        &beta,
        json!({"filename": "one-more.md", "content": "x"}),
    )
    .await
    .unwrap();
}

/// A source of built-ins' env as the CLI's environment or the server's policy would be:
/// a few names with values, one that fails like a secret store that does not answer.
#[derive(Debug)]
struct Source(BTreeMap<&'static str, &'static str>);

impl toolshed_core::CredentialProvider for Source {
    fn describe(&self) -> String {
        "test source".into()
    }

    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<toolshed_core::Secret, toolshed_core::CredentialError>,
    > {
        let found = match self.0.get(name) {
            Some(&"<fails>") => Err(toolshed_core::CredentialError::new(
                ErrorCode::CredentialProviderError,
                "the secret store does not answer",
            )),
            Some(v) => Ok(toolshed_core::Secret::new(*v)),
            None => Err(toolshed_core::CredentialError::new(
                ErrorCode::CredentialNotFound,
                format!("`{name}` is not set"),
            )),
        };
        Box::pin(std::future::ready(found))
    }
}

/// A stand-in with a built-in's name whose handler answers the env it was handed (and
/// echoes it into an error when asked), to see what the wrapper gives it.
fn env_echo(name: &str) -> toolshed_core::Tool {
    toolshed_core::Tool::builder(name)
        .description("Echo ctx.env.")
        .raw_handler(std::sync::Arc::new(
            |args: serde_json::Value,
             ctx: toolshed_core::ToolContext|
             -> toolshed_core::HandlerFuture {
                Box::pin(async move {
                    let env = serde_json::to_value(ctx.run().env_vars()).unwrap();
                    if args["fail"] == true {
                        return toolshed_core::Reply::new(Err(toolshed_core::ToolError::handler(
                            format!("cannot connect with {env}"),
                        )));
                    }
                    toolshed_core::Reply::new(Ok(toolshed_core::ToolOutput::Value(env)))
                })
            },
        ))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_built_in_outside_an_agent_gets_exactly_its_declared_env_and_its_secrets_are_scrubbed() {
    let source = std::sync::Arc::new(Source(BTreeMap::from([
        ("TAVILY_API_KEY", "tvly-key-123456"),
        ("TAVILY_BASE_URL", "http://127.0.0.1:9"),
        (
            "SQL_DATABASE_URL",
            "postgres://reader:pa%24%24word-99@127.0.0.1:1/shop",
        ),
        ("OTHER_SECRET", "not-for-any-built-in"),
    ])));
    let tools = [
        toolshed_stdlib::with_env_from(env_echo("web_search"), source.clone()),
        toolshed_stdlib::with_env_from(env_echo("sql_query"), source.clone()),
        toolshed_stdlib::with_env_from(env_echo("get_current_time"), source.clone()),
    ];
    let p = Pipeline::builder(ToolSet::from_tools(tools).unwrap()).build();
    // The run's own env is not passed on either.
    let run = RunContext::builder()
        .env(BTreeMap::from([("RUN_ENV".to_owned(), "x".to_owned())]))
        .build();
    let call = |name: &'static str, args: serde_json::Value| {
        let (p, run) = (p.clone(), run.clone());
        async move { p.call(&run, ToolCall::new(name, args)).await.result }
    };
    // Its names only, its secrets scrubbed from what it answers.
    assert_eq!(
        call("web_search", json!({})).await.unwrap(),
        json!({"TAVILY_API_KEY": "[REDACTED]", "TAVILY_BASE_URL": "http://127.0.0.1:9"})
    );
    assert_eq!(
        call("sql_query", json!({})).await.unwrap(),
        json!({"SQL_DATABASE_URL": "postgres://reader:[REDACTED]@127.0.0.1:1/shop"})
    );
    let err = call("sql_query", json!({"fail": true})).await.unwrap_err();
    assert!(
        !err.message.contains("pa%24%24word-99") && err.message.contains("[REDACTED]"),
        "{err}"
    );
    assert_eq!(
        call("get_current_time", json!({})).await.unwrap(),
        json!({})
    );

    // A required name the source lacks: not_configured, with the source's reason.
    let lacking = std::sync::Arc::new(Source(BTreeMap::from([(
        "TAVILY_BASE_URL",
        "http://127.0.0.1:9",
    )])));
    let p = Pipeline::builder(
        ToolSet::from_tools([toolshed_stdlib::with_env_from(
            env_echo("web_search"),
            lacking,
        )])
        .unwrap(),
    )
    .build();
    let err = p
        .call(&run, ToolCall::new("web_search", json!({})))
        .await
        .result
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::HandlerError);
    assert_eq!(
        err.details.as_ref().unwrap()["kind"],
        "not_configured",
        "{err}"
    );
    assert!(
        err.message.contains("web_search needs TAVILY_API_KEY")
            && err.message.contains("`TAVILY_API_KEY` is not set"),
        "{err}"
    );
    // An optional one it lacks is left out; a source that fails is `unavailable`.
    let partial = std::sync::Arc::new(Source(BTreeMap::from([(
        "TAVILY_API_KEY",
        "tvly-key-123456",
    )])));
    let failing = std::sync::Arc::new(Source(BTreeMap::from([("SQL_DATABASE_URL", "<fails>")])));
    let p = Pipeline::builder(
        ToolSet::from_tools([
            toolshed_stdlib::with_env_from(env_echo("web_search"), partial),
            toolshed_stdlib::with_env_from(env_echo("sql_query"), failing),
        ])
        .unwrap(),
    )
    .build();
    let only_key = p
        .call(&run, ToolCall::new("web_search", json!({})))
        .await
        .result
        .unwrap();
    assert_eq!(only_key, json!({"TAVILY_API_KEY": "[REDACTED]"}));
    let err = p
        .call(&run, ToolCall::new("sql_query", json!({})))
        .await
        .result
        .unwrap_err();
    let details = err.details.as_ref().unwrap();
    assert_eq!(
        (&details["kind"], &details["retryable"]),
        (&json!("unavailable"), &json!(true)),
        "{err}"
    );
    assert!(
        err.message.contains("the secret store does not answer"),
        "{err}"
    );
}

#[test]
fn the_secret_parts_of_built_ins_env_values_are_known() {
    let parts = |name: &str, value: &str| -> Vec<String> {
        toolshed_stdlib::secret_parts(name, value)
            .iter()
            .map(|s| s.expose().to_owned())
            .collect()
    };
    assert_eq!(parts("TAVILY_API_KEY", "tvly-1"), ["tvly-1"]);
    assert!(parts("TAVILY_API_KEY", " ").is_empty());
    assert!(parts("TAVILY_BASE_URL", "https://api.tavily.com").is_empty());
    assert_eq!(
        parts("SQL_DATABASE_URL", "postgres://u:p%40ss@h/db"),
        ["p%40ss", "p@ss"]
    );
    assert_eq!(
        parts("SQL_DATABASE_URL", "mysql://u@h/db?password=hunter22"),
        ["hunter22"]
    );
    assert!(parts("SQL_DATABASE_URL", "sqlite:///tmp/shop.db").is_empty());
    assert!(parts("SQL_DATABASE_URL", "postgres://u@h/db").is_empty());
    assert!(parts("ORDER_API_BASE", "anything").is_empty());
}
