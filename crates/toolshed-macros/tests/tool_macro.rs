//! End-to-end tests of `#[tool]`: the generated specs and schemas, and calls through
//! the real `toolshed_core::Pipeline`.
#![allow(clippy::unwrap_used)]

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolshed_core::{
    Approval, CallOutcome, CrumbKind, Effects, ErrorCode, Idempotency, MemorySink, Pipeline,
    RunContext, Streaming, Tool, ToolCall, ToolContext, ToolSet,
};
use toolshed_macros::tool;

// ---------------------------------------------------------------------------------------
// The tools under test.

/// A ticket in the index.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Ticket {
    /// The ticket number.
    pub id: u32,
    /// The ticket's title.
    pub title: String,
}

/// A failure of the ticket index.
#[derive(Debug)]
pub struct SearchError(String);

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "search failed: {}", self.0)
    }
}

fn default_limit() -> u32 {
    3
}

/// Search the ticket index by free text.
///
/// Longer text here is part of the description too.
#[tool(
    effects = "none",
    idempotency = "keyed",
    timeout_ms = 30000,
    max_attempts = 2,
    retries = 1,
    credentials = ["TICKETS_API_KEY"]
)]
pub async fn search_tickets(
    /// Free-text query.
    query: String,
    /// How many results to return.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 50))]
    limit: u32,
    ctx: &ToolContext,
) -> Result<Vec<Ticket>, SearchError> {
    if query == "fail" {
        return Err(SearchError(format!(
            "the index is offline (call {})",
            ctx.tool_call_id()
        )));
    }
    Ok((1..=limit)
        .map(|id| Ticket {
            id,
            title: format!("{query} #{id}"),
        })
        .collect())
}

/// Report who is calling.
#[tool(name = "whoami", effects = "sandbox")]
async fn call_identity(ctx: ToolContext) -> String {
    format!("{}/{}", ctx.tool_name(), ctx.tool_call_id())
}

/// Echo a note with the call's identity.
#[tool]
async fn echo_call(
    /// An optional note.
    note: Option<String>,
    ctx: &ToolContext,
) -> Value {
    json!({"id": ctx.tool_call_id(), "tool": ctx.tool_name(), "note": note})
}

/// Count up to a number, streaming every number on the way.
#[tool]
pub async fn count(
    /// Where to stop.
    to: u32,
) -> Streaming<u32> {
    Streaming::new(stream::iter(1..=to))
}

/// Summary statistics.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Stats {
    /// How many numbers there were.
    pub count: usize,
    /// Their mean.
    pub mean: f64,
}

/// This doc comment is overridden by the attribute.
#[tool(description = "Count and average some numbers.")]
pub async fn stats(
    /// The numbers.
    numbers: Vec<f64>,
) -> Stats {
    let count = numbers.len();
    let mean = if count == 0 {
        0.0
    } else {
        numbers.iter().sum::<f64>() / count as f64
    };
    Stats { count, mean }
}

/// Paging parameters, flattened into a tool's arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Paging {
    /// The page to return.
    #[serde(default)]
    pub page: u32,
    /// Items per page.
    #[serde(default = "default_per_page")]
    pub per_page: u32,
}

fn default_per_page() -> u32 {
    10
}

/// List the items of one kind.
#[tool]
async fn list_items(
    /// The kind of item.
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)] paging: Paging,
    /// Whether archived items count.
    #[serde(default)]
    archived: bool,
) -> Vec<String> {
    vec![format!(
        "{kind}:{}:{}:{archived}",
        paging.page, paging.per_page
    )]
}

/// Delete everything. Gated by a human.
#[tool(
    effects = "external",
    allow_unkeyed_external,
    approval = "always",
    output_schema = false
)]
async fn delete_everything() -> Result<u32, String> {
    Ok(0)
}

/// Fail on purpose, before streaming anything.
#[tool]
async fn refuse_stream(
    /// Whether to refuse.
    refuse: bool,
) -> Result<Streaming<String>, String> {
    if refuse {
        Err("not today".to_owned())
    } else {
        Ok(Streaming::new(stream::iter([
            "a".to_owned(),
            "ab".to_owned(),
        ])))
    }
}

/// Record nothing and return nothing.
#[tool]
async fn noop() {}

// ---------------------------------------------------------------------------------------
// Helpers.

fn pipeline(tools: impl IntoIterator<Item = Tool>) -> Pipeline {
    Pipeline::builder(ToolSet::from_tools(tools).unwrap()).build()
}

async fn call(pipeline: &Pipeline, name: &str, args: Value) -> CallOutcome {
    pipeline
        .call(&RunContext::ephemeral(), ToolCall::new(name, args))
        .await
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Specs and schemas.

#[test]
fn input_schema_comes_from_the_parameters() {
    let tool = search_tickets_tool();
    let schema = &tool.spec().input_schema;
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], json!(false));
    assert_eq!(schema["required"], json!(["query"]));
    let props = schema["properties"].as_object().unwrap();
    assert_eq!(
        props.keys().collect::<Vec<_>>(),
        ["limit", "query"],
        "the context is not an argument: {schema:#}"
    );
    assert_eq!(props["query"]["type"], "string");
    assert_eq!(props["query"]["description"], "Free-text query.");
    assert_eq!(props["limit"]["type"], "integer");
    assert_eq!(props["limit"]["description"], "How many results to return.");
    assert_eq!(props["limit"]["default"], json!(3));
    assert_eq!(props["limit"]["minimum"], json!(1), "#[schemars] moved too");
    assert_eq!(props["limit"]["maximum"], json!(50));
    assert!(props["query"].get("default").is_none());
    assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
}

#[test]
fn optional_and_default_parameters_are_not_required() {
    let echo = echo_call_tool();
    let schema = &echo.spec().input_schema;
    assert!(
        schema.get("required").is_none_or(|r| r == &json!([])),
        "{schema:#}"
    );
    assert_eq!(
        schema["properties"]["note"]["description"],
        "An optional note."
    );

    let list = list_items_tool();
    let schema = &list.spec().input_schema;
    assert_eq!(schema["required"], json!(["type"]), "{schema:#}");
    let props = schema["properties"].as_object().unwrap();
    for key in ["type", "page", "per_page", "archived"] {
        assert!(props.contains_key(key), "{key} missing: {schema:#}");
    }
    assert!(!props.contains_key("kind") && !props.contains_key("paging"));
    assert_eq!(props["type"]["description"], "The kind of item.");
    assert_eq!(props["per_page"]["default"], json!(10));
    assert_eq!(props["archived"]["default"], json!(false));

    // No parameters at all: an empty object.
    let noop = noop_tool();
    let schema = &noop.spec().input_schema;
    assert_eq!(schema["type"], "object");
    assert!(
        schema
            .get("properties")
            .is_none_or(|p| p.as_object().unwrap().is_empty())
    );
}

#[test]
fn description_comes_from_the_doc_comment() {
    let tool = search_tickets_tool();
    assert_eq!(tool.name(), "search_tickets");
    assert_eq!(
        tool.spec().description,
        "Search the ticket index by free text.\n\nLonger text here is part of the description too."
    );
    // An explicit description wins over the doc comment.
    assert_eq!(
        stats_tool().spec().description,
        "Count and average some numbers."
    );
}

#[test]
fn attribute_fields_reach_the_spec() {
    let tool = search_tickets_tool();
    let spec = tool.spec();
    assert_eq!(spec.effects, Effects::None);
    assert_eq!(spec.idempotency, Idempotency::Keyed);
    assert_eq!(spec.timeout, Some(Duration::from_secs(30)));
    assert_eq!(spec.max_attempts, Some(2));
    assert_eq!(spec.retry.max_retries(), 1);
    assert_eq!(spec.credentials, ["TICKETS_API_KEY"]);
    assert!(!spec.streaming);
    assert!(!spec.allow_unkeyed_external);
    assert!(matches!(spec.approval, Approval::Never));

    let whoami = call_identity_tool();
    assert_eq!(whoami.name(), "whoami", "`name = ..` overrides the fn name");
    assert_eq!(whoami.spec().effects, Effects::Sandbox);
    assert_eq!(whoami.spec().idempotency, Idempotency::None);
    assert_eq!(whoami.spec().timeout, None);
    assert_eq!(whoami.spec().max_attempts, None);
    assert_eq!(whoami.spec().retry.max_retries(), 0);
    assert!(whoami.spec().credentials.is_empty());

    let delete = delete_everything_tool();
    let spec = delete.spec();
    assert_eq!(spec.effects, Effects::External);
    assert!(spec.allow_unkeyed_external);
    assert!(matches!(spec.approval, Approval::Always));
    assert!(spec.output_schema.is_none(), "output_schema = false");
}

#[test]
fn output_schema_comes_from_the_return_type() {
    let stats = stats_tool();
    let schema = stats.spec().output_schema.clone().unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["count"]["type"], "integer");
    assert_eq!(schema["properties"]["mean"]["type"], "number");
    assert_eq!(schema["properties"]["mean"]["description"], "Their mean.");
    assert!(stats.output_schema().is_some(), "compiled too");

    // `Result<Vec<Ticket>, E>`: the schema of the `Ok` type.
    let search = search_tickets_tool();
    let schema = search.spec().output_schema.clone().unwrap();
    assert_eq!(schema["type"], "array", "{schema:#}");
    assert!(schema.to_string().contains("\"title\""), "{schema:#}");

    // `Streaming<u32>`: the schema of the item.
    assert_eq!(
        count_tool().spec().output_schema.as_ref().unwrap()["type"],
        "integer"
    );
    assert_eq!(
        call_identity_tool().spec().output_schema.as_ref().unwrap()["type"],
        "string"
    );
    // `Value` and `()` have none.
    assert!(echo_call_tool().spec().output_schema.is_none());
    assert!(noop_tool().spec().output_schema.is_none());
}

// ---------------------------------------------------------------------------------------
// Calls through the pipeline.

#[test]
fn calls_through_the_pipeline_return_the_value() {
    rt().block_on(async {
        let p = pipeline([search_tickets_tool(), stats_tool()]);
        let out = call(&p, "search_tickets", json!({"query": "login", "limit": 2})).await;
        assert_eq!(
            out.result.unwrap(),
            json!([{"id": 1, "title": "login #1"}, {"id": 2, "title": "login #2"}])
        );
        let out = call(&p, "stats", json!({"numbers": [1.0, 2.0, 6.0]})).await;
        assert_eq!(out.result.unwrap(), json!({"count": 3, "mean": 3.0}));
    });
}

#[test]
fn defaults_are_applied() {
    rt().block_on(async {
        let p = pipeline([search_tickets_tool(), list_items_tool()]);
        let out = call(&p, "search_tickets", json!({"query": "q"})).await;
        assert_eq!(out.result.unwrap().as_array().unwrap().len(), 3);
        let out = call(&p, "list_items", json!({"type": "book", "page": 2})).await;
        assert_eq!(out.result.unwrap(), json!(["book:2:10:false"]));
        let out = call(
            &p,
            "list_items",
            json!({"type": "pen", "per_page": 5, "archived": true}),
        )
        .await;
        assert_eq!(out.result.unwrap(), json!(["pen:0:5:true"]));
    });
}

#[test]
fn bad_arguments_are_invalid_args() {
    rt().block_on(async {
        let p = pipeline([search_tickets_tool(), list_items_tool()]);
        for (name, args) in [
            ("search_tickets", json!({"query": "q", "bogus": 1})),
            ("search_tickets", json!({"limit": 1})),
            ("search_tickets", json!({"query": 7})),
            ("search_tickets", json!({"query": "q", "limit": 51})),
            ("list_items", json!({"type": "book", "bogus": 1})),
        ] {
            let err = call(&p, name, args.clone()).await.result.unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgs, "{name} {args}: {err}");
        }
    });
}

#[test]
fn an_err_result_is_a_handler_error() {
    rt().block_on(async {
        let p = pipeline([search_tickets_tool(), refuse_stream_tool()]);
        let call_ = ToolCall::new("search_tickets", json!({"query": "fail"}));
        let id = call_.id.clone();
        let out = p.call(&RunContext::ephemeral(), call_).await;
        let err = out.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::HandlerError);
        assert_eq!(err.code.to_string(), "HANDLER_ERROR");
        assert_eq!(
            err.message,
            format!("search failed: the index is offline (call {id})")
        );
        assert_eq!(out.attempts, 2, "`retries = 1` retried the handler error");

        let err = call(&p, "refuse_stream", json!({"refuse": true}))
            .await
            .result
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::HandlerError);
        assert_eq!(err.message, "not today");
        let out = call(&p, "refuse_stream", json!({"refuse": false})).await;
        assert_eq!(out.result.unwrap(), json!("ab"));
    });
}

#[test]
fn the_context_parameter_receives_the_call() {
    rt().block_on(async {
        let p = pipeline([call_identity_tool(), echo_call_tool()]);
        let whoami = ToolCall::new("whoami", json!({}));
        let id = whoami.id.clone();
        let out = p.call(&RunContext::ephemeral(), whoami).await;
        assert_eq!(out.result.unwrap(), json!(format!("whoami/{id}")));

        let echo = ToolCall::new("echo_call", json!({"note": "hi"}));
        let id = echo.id.clone();
        let out = p.call(&RunContext::ephemeral(), echo).await;
        assert_eq!(
            out.result.unwrap(),
            json!({"id": id, "tool": "echo_call", "note": "hi"})
        );
    });
}

#[test]
fn a_streaming_tool_returns_its_last_item_and_streams_the_rest() {
    rt().block_on(async {
        let tool = count_tool();
        assert!(tool.spec().streaming);
        let p = pipeline([tool]);
        let sink = MemorySink::new();
        p.crumbs().add_sink(Arc::new(sink.clone()));
        let out = call(&p, "count", json!({"to": 4})).await;
        assert_eq!(out.result.unwrap(), json!(4));
        let partials: Vec<Value> = sink
            .crumbs()
            .iter()
            .filter(|c| c.kind == CrumbKind::Partial)
            .map(|c| {
                assert_eq!(c.kind.as_str(), "tool:result:partial");
                c.payload.clone().unwrap()
            })
            .collect();
        // Every item is a partial as it comes, the last one the result too.
        assert_eq!(partials, [json!(1), json!(2), json!(3), json!(4)]);
        assert!(
            refuse_stream_tool().spec().streaming,
            "Result<Streaming<T>, E>"
        );
    });
}

#[test]
fn approval_and_unit_tools_run_through_the_pipeline() {
    rt().block_on(async {
        let p = pipeline([delete_everything_tool(), noop_tool()]);
        let err = call(&p, "delete_everything", json!({}))
            .await
            .result
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ApprovalRequired);
        let out = call(&p, "noop", json!({})).await;
        assert_eq!(out.result.unwrap(), Value::Null);
    });
}

#[test]
fn the_fn_is_still_callable_directly() {
    rt().block_on(async {
        let ctx = ToolContext::detached("search_tickets");
        let tickets = search_tickets("direct".to_owned(), 1, &ctx).await.unwrap();
        assert_eq!(
            tickets,
            [Ticket {
                id: 1,
                title: "direct #1".into()
            }]
        );
        let s = stats(vec![2.0, 4.0]).await;
        assert_eq!((s.count, s.mean), (2, 3.0));
        let who = call_identity(ToolContext::detached("whoami")).await;
        assert_eq!(who, "whoami/detached");
        let items = list_items(
            "cup".into(),
            Paging {
                page: 1,
                per_page: 2,
            },
            true,
        )
        .await;
        assert_eq!(items, ["cup:1:2:true"]);
    });
}

#[test]
fn the_constructor_hands_out_the_same_tool() {
    let a = stats_tool();
    let b = stats_tool();
    assert_eq!(a.name(), b.name());
    assert!(
        Arc::ptr_eq(a.handler(), b.handler()),
        "built once, then cloned"
    );
}
