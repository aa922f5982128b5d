//! agent.yaml: parsing, the tools folder, the resolver chain, built-ins and start-up
//! checks. Code files (Python, JS) are covered with the dispatch layer in the CLI's
//! tests; here definitions use `builtin:` endpoints.
#![allow(clippy::unwrap_used)]

mod common;
use common::Builtins;

use async_trait::async_trait;
use serde_json::json;
use toolshed_agent::{
    ImplementationError, Implementations, RegistryLookup, RegistryLookupError, RegistryTool,
    load_agent, parse_agent_file,
};
use toolshed_core::file::ToolFile;

/// A registry holding one tool (an in-process stand-in for the registry server, which
/// the registry issue serves over HTTP).
struct OneTool;

#[async_trait]
impl RegistryLookup for OneTool {
    async fn find_tool(&self, name: &str) -> Result<Option<RegistryTool>, RegistryLookupError> {
        if name != "order-lookup" {
            return Ok(None);
        }
        let definition: ToolFile = serde_json::from_value(json!({
            "spec_version": "v1", "name": "order-lookup", "description": "Look up an order.",
            "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
        }))
        .unwrap();
        Ok(Some(RegistryTool {
            definition,
            endpoint: "builtin:get_current_time".into(),
        }))
    }
}

fn project(agent_yaml: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agent.yaml"), agent_yaml).unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn parses_the_seed_agent_yaml() {
    let text = "name: microlearning-ebook-agent\nframework: google_adk\n\ntools:\n  - ref: tools/web-search\n  - ref: tools/markdown-writer\n  - ref: tools/order-lookup\n  - ref: mcp-servers/slack\n";
    let a = parse_agent_file(text, "agent.yaml").unwrap();
    assert_eq!(a.name, "microlearning-ebook-agent");
    assert_eq!(a.tools.len(), 4);
    let inline = "name: support-agent\nframework: langgraph\ntools:\n  - ref: tools/order-lookup\n  - name: get_current_time\n    type: function\n    description: \"Return the current UTC time\"\n    schema:\n      type: object\n      properties: {}\n";
    let a = parse_agent_file(inline, "agent.yaml").unwrap();
    assert_eq!(a.tools.len(), 2);
}

#[test]
fn bad_files_list_every_problem() {
    let text = "name: 'bad name'\nframwork: x\nsandbox: maybe\ntools: [{ref: things/x}, {ref: tools/a, extra: 1}, 3]\nlimits: {max_attempts: 2}\nenv: [ok, 3]\n";
    let e = parse_agent_file(text, "agent.yaml")
        .unwrap_err()
        .to_string();
    for expect in [
        "field `name`",
        "unknown field `framwork`; did you mean `framework`?",
        "field `sandbox`",
        "tools[0].ref",
        "tools[1].extra",
        "tools[2]",
        "field `limits`",
        "env[1]",
    ] {
        assert!(e.contains(expect), "missing `{expect}` in:\n{e}");
    }
    assert!(parse_agent_file("[1, 2]", "agent.yaml").is_err());
    assert!(
        parse_agent_file("name: [unclosed", "agent.yaml")
            .unwrap_err()
            .to_string()
            .contains("not valid YAML")
    );
}

#[tokio::test]
async fn the_resolver_chain_goes_local_then_stdlib_then_registry() {
    let dir = project(
        "name: support\ntools:\n  - ref: tools/markdown-writer\n  - ref: tools/order-lookup\n  - ref: tools/local-time\nbuiltin_tools: [get_current_time]\n",
        &[(
            "tools/local_time.yaml",
            "spec_version: v1\nname: local_time\ndescription: The local time.\nendpoint: builtin:get_current_time\n",
        )],
    );
    let a = load_agent(dir.path(), &Builtins, Some(&OneTool), &no_env)
        .await
        .unwrap();
    let names: Vec<&str> = a.toolset.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        vec![
            "local_time",
            "markdown_writer",
            "order-lookup",
            "get_current_time"
        ]
    );
    assert_eq!(a.origins["local_time"], "tools/local_time.yaml");
    assert_eq!(a.origins["markdown_writer"], "stdlib");
    assert_eq!(a.origins["order-lookup"], "registry");
    assert_eq!(a.origins["get_current_time"], "builtin");
}

#[tokio::test]
async fn a_local_file_overrides_the_standard_library() {
    let dir = project(
        "name: a\ntools:\n  - ref: tools/markdown-writer\n",
        &[(
            "tools/markdown_writer.yaml",
            "spec_version: v1\nname: markdown_writer\ndescription: My own writer.\nendpoint: builtin:get_current_time\n",
        )],
    );
    let a = load_agent(dir.path(), &Builtins, None, &no_env)
        .await
        .unwrap();
    assert_eq!(
        a.toolset.get("markdown_writer").unwrap().spec().description,
        "My own writer."
    );
    assert_eq!(a.origins["markdown_writer"], "tools/markdown_writer.yaml");
}

#[tokio::test]
async fn missing_env_lists_every_name_at_once() {
    let dir = project(
        "name: a\nenv: [TICKETS_API_KEY, REGION, SLACK_TOKEN]\n",
        &[],
    );
    let e = load_agent(dir.path(), &Builtins, None, &|n: &str| {
        (n == "REGION").then(|| "eu".into())
    })
    .await
    .unwrap_err();
    assert_eq!(e.code(), "MISSING_ENV");
    assert_eq!(
        e.to_string(),
        "agent `a`: missing environment variables: TICKETS_API_KEY, SLACK_TOKEN; set them before starting"
    );
    let a = load_agent(dir.path(), &Builtins, None, &|_: &str| Some("v".into()))
        .await
        .unwrap();
    assert_eq!(a.env.len(), 3);
}

#[tokio::test]
async fn builtin_collisions_bash_and_unknown_refs_are_start_up_errors() {
    let dir = project(
        "name: a\nbuiltin_tools: [get_current_time, bash, web_scraper]\ntools:\n  - ref: tools/nowhere\n  - ref: mcp-servers/slack\n",
        &[(
            "tools/get_current_time.yaml",
            "spec_version: v1\nname: get_current_time\ndescription: Mine.\nendpoint: builtin:get_current_time\n",
        )],
    );
    let e = load_agent(dir.path(), &Builtins, None, &no_env)
        .await
        .unwrap_err()
        .to_string();
    for expect in [
        "built-in `get_current_time` collides with the agent's own tool `get_current_time` (tools/get_current_time.yaml)",
        "`bash` cannot be listed in builtin_tools: set `sandbox: true`",
        "unknown built-in `web_scraper`",
        "ref tools/nowhere: not found in tools/nowhere.(py|js|mjs|ts|yaml)",
        "mcp-servers/slack",
    ] {
        assert!(e.contains(expect), "missing `{expect}` in:\n{e}");
    }
}

#[tokio::test]
async fn inline_tools_take_their_implementation_from_the_chain() {
    let dir = project(
        "name: support-agent\ntools:\n  - name: get_current_time\n    type: function\n    description: \"Return the current UTC time as ISO 8601\"\n    schema:\n      type: object\n      properties: {}\n      required: []\n  - name: orphan\n    description: Has no code.\n",
        &[],
    );
    let e = load_agent(dir.path(), &Builtins, None, &no_env)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("inline tool `orphan`: no implementation"), "{e}");
    let dir = project(
        "name: support-agent\ntools:\n  - name: get_current_time\n    type: function\n    description: \"Return the current UTC time as ISO 8601\"\n    schema:\n      type: object\n      properties: {}\n",
        &[],
    );
    let a = load_agent(dir.path(), &Builtins, None, &no_env)
        .await
        .unwrap();
    let t = a.toolset.get("get_current_time").unwrap();
    assert_eq!(
        t.spec().description,
        "Return the current UTC time as ISO 8601"
    );
    let out = toolshed_core::Pipeline::builder(a.toolset.clone())
        .build()
        .call(
            &toolshed_core::RunContext::ephemeral(),
            toolshed_core::ToolCall::new("get_current_time", json!({})),
        )
        .await;
    assert!(out.result.unwrap()["iso8601"].is_string());
}

#[tokio::test]
async fn broken_tool_files_name_the_file() {
    let dir = project(
        "name: a\n",
        &[
            (
                "tools/broken.yaml",
                "spec_version: v1\nname: 'bad name'\ndescription: x\n",
            ),
            ("tools/code.py", "def code(): pass\n"),
        ],
    );
    let e = load_agent(dir.path(), &Builtins, None, &no_env)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tools/broken.yaml") && e.contains("field `name`"),
        "{e}"
    );
    assert!(
        e.contains("tools/code.py") && e.contains("needs the dispatch layer"),
        "{e}"
    );
}

/// The seed's `tools/order_lookup.py`, verbatim: a plain function, no SDK import.
const ORDER_LOOKUP_PY: &str = r#"
def order_lookup(order_id: str, include_tracking: bool = False) -> dict:
    """
    Look up an order by ID.

    Args:
        order_id: The order ID (format: ORD-XXXXXX)
        include_tracking: Whether to include shipping tracking info

    Returns:
        dict with order status, items, and optionally tracking
    """
    # Your implementation here
    return {
        "order_id": order_id,
        "status": "shipped",
        "items": ["Widget A", "Widget B"],
        "tracking": "1Z999AA10123456784" if include_tracking else None,
    }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_file_in_the_tools_folder_is_loaded_and_runs() {
    let dir = project(
        "name: support-agent\nframework: langgraph\ntools:\n  - ref: tools/order-lookup\n",
        &[("tools/order_lookup.py", ORDER_LOOKUP_PY)],
    );
    let cache = tempfile::tempdir().unwrap();
    let config = toolshed_dispatch::DispatcherConfig {
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    };
    let implementations =
        toolshed_agent::DispatchImplementations::new(toolshed_dispatch::Dispatcher::new(config));
    let a = load_agent(dir.path(), &implementations, None, &no_env)
        .await
        .unwrap();
    assert_eq!(a.origins["order_lookup"], "tools/order_lookup.py");
    let t = a.toolset.get("order_lookup").unwrap();
    assert_eq!(t.spec().input_schema["required"], json!(["order_id"]));
    assert_eq!(
        t.spec().input_schema["properties"]["include_tracking"]["default"],
        json!(false)
    );
    let out = toolshed_core::Pipeline::builder(a.toolset.clone())
        .build()
        .call(
            &toolshed_core::RunContext::ephemeral(),
            toolshed_core::ToolCall::new(
                "order_lookup",
                json!({"order_id": "ORD-123456", "include_tracking": true}),
            ),
        )
        .await;
    let v = out.result.unwrap();
    assert_eq!(v["status"], "shipped");
    assert_eq!(v["tracking"], "1Z999AA10123456784");
}

#[tokio::test]
async fn dispatch_implementations_give_typed_errors_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let implementations = toolshed_agent::DispatchImplementations::new(
        toolshed_dispatch::Dispatcher::new(toolshed_dispatch::DispatcherConfig {
            cache_dir: dir.path().join("cache"),
            ..Default::default()
        }),
    );
    let err = implementations
        .handler_for(
            "ftp://example.com/tool",
            &toolshed_core::ToolSpec::new("t", "a tool").unwrap(),
        )
        .err()
        .unwrap();
    assert!(matches!(err, ImplementationError::Dispatch(_)), "{err:?}");
    assert_eq!(err.code(), "INVALID_ENDPOINT");
    assert!(
        err.to_string()
            .contains("invalid endpoint `ftp://example.com/tool`"),
        "{err}"
    );
    let err = implementations
        .load_code_file(&dir.path().join("tools/gone.py"))
        .await
        .unwrap_err();
    assert!(matches!(err, ImplementationError::Path(_)), "{err:?}");
    assert_eq!(err.code(), "PATH_UNRESOLVED");
    assert!(
        err.to_string().starts_with("cannot resolve the path: "),
        "{err}"
    );
}
