//! Tools asking the client of the call (`ctx.elicit`, `ctx.sample`: the protocol's
//! `ask`), through the pipeline. The client here is a scripted [`Asker`]: dispatch
//! knows nothing of MCP. The real path, a tool's question carried to an MCP client over
//! `/mcp` and answered there, is tested against the official conformance suite
//! (`toolshed-server --test mcp_conformance`) and the TypeScript SDK
//! (`toolshed-server --test mcp`).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use toolshed_core::{
    Ask, AskError, AskKind, Asker, CallOutcome, CredentialError, CredentialProvider, ErrorCode,
    RunContext, Secret, Tool, ToolCall,
};
use toolshed_dispatch::{Dispatcher, Mode};

/// A client that answers every question by `answer` and remembers what it was asked.
struct Client {
    asked: Mutex<Vec<(String, Ask)>>,
    answer: fn(&Ask) -> Result<Value, AskError>,
}

impl Client {
    fn new(answer: fn(&Ask) -> Result<Value, AskError>) -> Arc<Client> {
        Arc::new(Client {
            asked: Mutex::new(Vec::new()),
            answer,
        })
    }

    fn asked(&self) -> Vec<(String, Ask)> {
        self.asked.lock().unwrap().clone()
    }
}

impl Asker for Client {
    fn ask<'a>(&'a self, tool: &'a str, ask: Ask) -> BoxFuture<'a, Result<Value, AskError>> {
        let answer = (self.answer)(&ask);
        self.asked.lock().unwrap().push((tool.to_owned(), ask));
        Box::pin(std::future::ready(answer))
    }
}

/// Answers an elicitation with `{"ok": true, "name": "Ada"}`, a sampling with "hello".
fn obliging(ask: &Ask) -> Result<Value, AskError> {
    Ok(match ask.kind {
        AskKind::Elicit => json!({"action": "accept", "content": {"ok": true, "name": "Ada"}}),
        AskKind::Sample => {
            json!({"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"})
        }
    })
}

async fn call(
    d: &Dispatcher,
    prefix: &str,
    target: &str,
    asker: Option<Arc<Client>>,
) -> CallOutcome {
    let name = target.rsplit(':').next().unwrap().replace('.', "_");
    let name = name.as_str();
    let tool = tool(d, name, endpoint(prefix, target), Duration::from_secs(30));
    let mut run = RunContext::builder();
    if let Some(asker) = asker {
        run = run.asker(asker);
    }
    pipeline(vec![tool])
        .call(&run.build(), ToolCall::new(name, json!({})))
        .await
}

#[tokio::test]
async fn a_python_tool_asks_and_gets_the_answers_one_shot_and_pooled() {
    for mode in [Mode::OneShot, Mode::Pool] {
        let d = dispatcher(mode);
        let client = Client::new(obliging);
        let out = call(
            &d,
            "python",
            "asking.py:two_questions",
            Some(client.clone()),
        )
        .await;
        assert_eq!(
            out.result.unwrap(),
            json!({"name": "Ada", "greeting": "hello"}),
            "{mode:?}"
        );
        let asked = client.asked();
        assert_eq!(asked.len(), 2, "{mode:?}: {asked:?}");
        assert_eq!(asked[0].0, "two_questions");
        assert_eq!(asked[0].1.kind, AskKind::Elicit);
        assert_eq!(asked[0].1.params["message"], "Your name?");
        assert_eq!(asked[1].1.kind, AskKind::Sample);
        assert_eq!(
            asked[1].1.params,
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Greet Ada"}}], "maxTokens": 20})
        );
        // Recorded with the call: what was asked and how it ended, not the content.
        let records = &out.diagnostics.asks;
        assert_eq!(records.len(), 2, "{mode:?}");
        assert_eq!(records[0].outcome, "accept");
        assert_eq!(records[1].outcome, "answered");
        assert!(!serde_json::to_string(records).unwrap().contains("Ada"));
        if mode == Mode::OneShot {
            // The runner exited once its stdin closed after the answer.
            assert_eq!(out.diagnostics.exit_code, Some(0), "{:?}", out.diagnostics);
        }
        // The pooled worker serves the next call as usual.
        let again = call(&d, "python", "asking.py:confirm", Some(client.clone())).await;
        assert_eq!(again.result.unwrap()["answer"]["action"], "accept");
    }
}

#[tokio::test]
async fn without_a_client_the_tool_gets_an_ask_error_it_can_catch() {
    let d = dispatcher(Mode::Pool);
    let out = call(&d, "python", "asking.py:careful", None).await;
    let v = out.result.unwrap();
    assert_eq!(v["code"], "ASK_NO_CLIENT", "{v}");
    assert_eq!(v["kind"], "AskError");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("did not come from an MCP client"),
        "{v}"
    );
    // Uncaught, it ends the call as the tool's error, with its code.
    let out = call(&d, "python", "asking.py:careless", None).await;
    let err = out.result.unwrap_err();
    assert_eq!(dispatch_code(&err), "TOOL_ERROR", "{err}");
    assert!(err.message.contains("nobody can answer"), "{err}");
    assert_eq!(out.diagnostics.asks[0].outcome, "ASK_NO_CLIENT");

    // A client that refuses: the tool sees the client's reason.
    let refusing = Client::new(|ask| {
        Err(AskError::Unsupported {
            kind: ask.kind,
            why: "it did not declare the `sampling` capability".into(),
        })
    });
    let out = call(&d, "python", "asking.py:careful", Some(refusing)).await;
    let v = out.result.unwrap();
    assert_eq!(v["code"], "ASK_UNSUPPORTED");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("`sampling` capability"),
        "{v}"
    );
}

#[tokio::test]
async fn a_node_tool_asks_two_questions_at_once_in_a_pooled_worker() {
    let d = dispatcher(Mode::Pool);
    let client = Client::new(obliging);
    let out = call(&d, "node", "asking.mjs:both", Some(client.clone())).await;
    assert_eq!(out.result.unwrap(), json!({"name": "Ada", "said": "hello"}));
    assert_eq!(client.asked().len(), 2);

    // One-shot, the Node runner reads its stdin whole: it is told at once it cannot ask.
    let d = dispatcher(Mode::OneShot);
    let out = call(&d, "node", "asking.mjs:both", Some(client.clone())).await;
    let err = out.result.unwrap_err();
    assert!(
        err.message.contains("one-shot node: tool cannot ask"),
        "{err}"
    );
    assert_eq!(client.asked().len(), 2, "nothing more reached the client");
}

#[tokio::test]
async fn a_one_shot_exec_tool_that_asks_ends_with_a_protocol_error_naming_the_fix() {
    let d = dispatcher(Mode::OneShot);
    let client = Client::new(obliging);
    let out = call(&d, "exec", "ask_exec.sh", Some(client.clone())).await;
    let err = out.result.unwrap_err();
    assert_eq!(dispatch_code(&err), "PROTOCOL_VIOLATION", "{err}");
    assert!(err.message.contains("mode: pool"), "{err}");
    assert!(client.asked().is_empty(), "the client was not bothered");
}

#[derive(Debug)]
struct Vault;

impl CredentialProvider for Vault {
    fn describe(&self) -> String {
        "test".into()
    }
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        let r = if name == "API_TOKEN" {
            Ok(Secret::new("tok-never-leaves"))
        } else {
            Err(CredentialError::new(ErrorCode::CredentialNotFound, name))
        };
        Box::pin(std::future::ready(r))
    }
}

#[tokio::test]
async fn a_question_never_carries_the_tools_credentials_to_the_client() {
    let d = dispatcher(Mode::Pool);
    let client = Client::new(obliging);
    let tool = Tool::builder("leaky")
        .description("puts its token in a question")
        .input_schema(json!({"type": "object"}))
        .credentials(["API_TOKEN"])
        .raw_handler(d.handler(endpoint("python", "asking.py:leaky"), "leaky"))
        .build()
        .unwrap();
    let run = RunContext::builder()
        .credentials(Arc::new(Vault))
        .asker(client.clone())
        .build();
    let out = pipeline(vec![tool])
        .call(&run, ToolCall::new("leaky", json!({})))
        .await;
    assert_eq!(out.result.unwrap()["action"], "accept");
    let asked = client.asked();
    assert_eq!(asked[0].1.params["message"], "the token is [REDACTED]");
    assert!(!format!("{asked:?}").contains("tok-never-leaves"));
    // Nor in what the call recorded (stdout holds the ask line).
    assert!(
        !serde_json::to_string(&out.diagnostics)
            .unwrap()
            .contains("tok-never-leaves")
    );
}

#[tokio::test]
async fn a_tool_that_asks_without_end_is_told_no_after_sixteen_questions() {
    let d = dispatcher(Mode::Pool);
    let client = Client::new(obliging);
    let out = call(&d, "python", "asking.py:pester", Some(client.clone())).await;
    assert_eq!(
        out.result.unwrap(),
        json!({"asked": 16, "code": "ASK_FAILED"})
    );
    assert_eq!(client.asked().len(), 16);
    assert_eq!(out.diagnostics.asks.len(), 17);
    assert_eq!(out.diagnostics.asks[16].outcome, "ASK_FAILED");
}
