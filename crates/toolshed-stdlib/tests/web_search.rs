//! `web_search` against a local HTTP server that speaks Tavily's documented search API
//! (`POST /search`, `Authorization: Bearer …`, the JSON body and the `results[]`
//! answer). The server stands in for the paid Tavily API, which a test cannot call: it
//! checks every request it gets and answers in Tavily's shapes, errors included.
#![allow(clippy::unwrap_used)]

#[path = "common/tavily.rs"]
mod tavily;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tavily::{KEY, stand_in};
use toolshed_core::{ErrorCode, Pipeline, RunContext, ToolCall, ToolError, ToolSet};

fn pipeline() -> Pipeline {
    Pipeline::builder(ToolSet::from_tools([toolshed_stdlib::web_search_tool()]).unwrap()).build()
}

fn ctx(key: Option<&str>, base: &str) -> RunContext {
    let mut env = BTreeMap::new();
    if let Some(k) = key {
        env.insert("TAVILY_API_KEY".to_owned(), k.to_owned());
    }
    env.insert("TAVILY_BASE_URL".to_owned(), base.to_owned());
    RunContext::builder().env(env).build()
}

async fn call(ctx: &RunContext, args: Value) -> Result<Value, ToolError> {
    pipeline()
        .call(ctx, ToolCall::new("web_search", args))
        .await
        .result
}

#[tokio::test]
async fn searches_with_tavilys_documented_request_and_answer_shapes() {
    let (base, seen) = stand_in().await;
    let out = call(
        &ctx(Some(KEY), &base),
        json!({
            "query": "who is Leo Messi?",
            "max_results": 2,
            "topic": "news",
            "time_range": "week",
            "include_domains": ["britannica.com", "wikipedia.org"],
            "exclude_domains": ["example.com"]
        }),
    )
    .await
    .unwrap();
    assert_eq!(out["query"], "who is Leo Messi?");
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["title"], "Lionel Messi Facts | Britannica");
    assert_eq!(
        results[0]["url"],
        "https://www.britannica.com/facts/Lionel-Messi"
    );
    assert_eq!(results[0]["score"], 0.81025416);
    // Exactly the four documented fields per result, nothing Tavily adds.
    let keys: Vec<&String> = results[1].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["content", "score", "title", "url"]);

    let seen = seen.0.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let (auth, body) = &seen[0];
    assert_eq!(auth.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(body["query"], "who is Leo Messi?");
    assert_eq!(body["max_results"], 2);
    assert_eq!(body["topic"], "news");
    assert_eq!(body["time_range"], "week");
    assert_eq!(
        body["include_domains"],
        json!(["britannica.com", "wikipedia.org"])
    );
    assert_eq!(body["exclude_domains"], json!(["example.com"]));
    // The key travels only in the header.
    assert!(!body.to_string().contains(KEY));
}

#[tokio::test]
async fn defaults_are_five_general_results_and_no_filters() {
    let (base, seen) = stand_in().await;
    call(&ctx(Some(KEY), &base), json!({"query": "rust"}))
        .await
        .unwrap();
    let seen = seen.0.lock().unwrap();
    let body = &seen[0].1;
    assert_eq!(body["max_results"], 5);
    assert_eq!(body["topic"], "general");
    assert!(body.get("time_range").is_none(), "{body}");
    assert!(body.get("include_domains").is_none(), "{body}");
}

fn details(e: &ToolError) -> &Value {
    e.details.as_ref().expect("details")
}

#[tokio::test]
async fn tavilys_errors_become_results_the_model_can_act_on() {
    let (base, _) = stand_in().await;
    let ctx = ctx(Some(KEY), &base);

    let e = call(&ctx, json!({"query": "rate"})).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::HandlerError);
    assert_eq!(details(&e)["kind"], "rate_limited");
    assert_eq!(details(&e)["retryable"], true);
    assert_eq!(details(&e)["retry_after_seconds"], 7);
    assert!(e.message.contains("wait 7 s"), "{}", e.message);

    let e = call(&ctx, json!({"query": "down"})).await.unwrap_err();
    assert_eq!(details(&e)["kind"], "unavailable");
    assert_eq!(details(&e)["retryable"], true);
    assert!(e.message.contains("503"), "{}", e.message);

    let e = call(&ctx, json!({"query": "quota"})).await.unwrap_err();
    assert_eq!(details(&e)["kind"], "quota_exceeded");
    assert_eq!(details(&e)["retryable"], false);

    let e = call(&ctx, json!({"query": "garbage"})).await.unwrap_err();
    assert_eq!(details(&e)["kind"], "invalid_answer");
}

#[tokio::test]
async fn a_refused_key_is_not_retryable_and_never_shown() {
    let (base, seen) = stand_in().await;
    // The stand-in echoes the key it got in its error text, as a careless API might.
    let wrong = "tvly-wrong-key-do-not-show";
    let e = call(&ctx(Some(wrong), &base), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(details(&e)["kind"], "unauthorized");
    assert_eq!(details(&e)["retryable"], false);
    assert!(e.message.contains("TAVILY_API_KEY"), "{}", e.message);
    assert!(!e.message.contains(wrong), "{}", e.message);
    assert!(!e.to_model_text().contains(wrong));
    assert_eq!(seen.0.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn bad_inputs_are_refused_before_any_request() {
    let (base, seen) = stand_in().await;
    let ctx = ctx(Some(KEY), &base);
    for args in [
        json!({}),
        json!({"query": ""}),
        json!({"query": 3}),
        json!({"query": "x", "max_results": 0}),
        json!({"query": "x", "max_results": 21}),
        json!({"query": "x", "topic": "sports"}),
        json!({"query": "x", "time_range": "decade"}),
        json!({"query": "x", "include_domains": "nasa.gov"}),
        json!({"query": "x", "extra": 1}),
        json!({"query": "x".repeat(2001)}),
    ] {
        let e = call(&ctx, args.clone()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgs, "{args}: {e}");
    }
    for args in [
        json!({"query": "   "}),
        json!({"query": "x", "include_domains": ["https://nasa.gov/x"]}),
        json!({"query": "x", "exclude_domains": ["a b"]}),
    ] {
        let e = call(&ctx, args.clone()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgs, "{args}: {e}");
        assert!(
            e.message.starts_with("query") || e.message.contains("domains"),
            "{e}"
        );
    }
    assert!(seen.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn configuration_problems_say_which_env_var_to_fix() {
    let (base, seen) = stand_in().await;
    let e = call(&ctx(None, &base), json!({"query": "x"}))
        .await
        .unwrap_err();
    assert_eq!(details(&e)["kind"], "not_configured");
    assert!(e.message.contains("TAVILY_API_KEY"), "{}", e.message);
    // Plain http to a host that is not loopback would send the key in clear.
    for bad in [
        "http://api.tavily.com",
        "ftp://127.0.0.1",
        "https://user:pw@api.tavily.com",
    ] {
        let e = call(&ctx(Some(KEY), bad), json!({"query": "x"}))
            .await
            .unwrap_err();
        assert_eq!(details(&e)["kind"], "not_configured", "{bad}");
        assert!(e.message.contains("TAVILY_BASE_URL"), "{}", e.message);
    }
    assert!(seen.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unreachable_service_is_retryable() {
    // A port nothing listens on: bind one, then let it go.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let e = call(
        &ctx(Some(KEY), &format!("http://{addr}")),
        json!({"query": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(details(&e)["kind"], "unreachable");
    assert_eq!(details(&e)["retryable"], true);
    assert!(!e.message.contains(KEY));
}

#[test]
fn web_search_is_also_web_dash_search_with_its_env() {
    let tool = toolshed_stdlib::get("web-search").unwrap();
    assert_eq!(tool.name(), "web_search");
    assert_eq!(
        toolshed_stdlib::required_env("web-search"),
        ["TAVILY_API_KEY"]
    );
    assert_eq!(
        toolshed_stdlib::optional_env("web_search"),
        ["TAVILY_BASE_URL"]
    );
    let spec = tool.spec();
    assert_eq!(spec.effects, toolshed_core::Effects::None);
    assert_eq!(spec.idempotency, toolshed_core::Idempotency::None);
    assert!(spec.timeout.is_some());
    assert!(spec.output_schema.is_some());
    for field in [
        "query",
        "max_results",
        "topic",
        "time_range",
        "include_domains",
        "exclude_domains",
    ] {
        assert!(
            spec.input_schema["properties"].get(field).is_some(),
            "{field}"
        );
    }
}
