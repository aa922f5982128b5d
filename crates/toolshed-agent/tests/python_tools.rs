//! Python files of the tools folder as users write them, through the real dispatch
//! layer: a file named unlike its one public function, a dataclass parameter the
//! function receives as a dataclass, AgentBreeder's module-level `SCHEMA`, and a file
//! with two public functions refused at start-up with both names and the ways out.
#![allow(clippy::unwrap_used)]

use serde_json::json;
use toolshed_agent::{AgentError, DispatchImplementations, load_agent};
use toolshed_dispatch::{Dispatcher, DispatcherConfig};

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

fn implementations(
    cache: &tempfile::TempDir,
    project: &std::path::Path,
) -> DispatchImplementations {
    DispatchImplementations::new(Dispatcher::new(DispatcherConfig {
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    }))
    .with_project(project)
}

const ORDERS_PY: &str = r#""""Order tools."""
from dataclasses import dataclass


@dataclass
class Line:
    sku: str
    qty: int = 1


def _total(lines):
    return sum(line.qty for line in lines)


def count_items(lines: list[Line], note: str = "") -> dict:
    """Count the items of an order.

    Args:
        lines: The order's lines.
    """
    return {"kind": type(lines[0]).__name__, "total": _total(lines), "note": note}
"#;

const SEARCH_PY: &str = r#""""Search the product catalogue."""
from typing import Any

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 2}},
    "required": ["query"],
}


def catalogue_search(query):
    return {"hits": [query.upper()]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_named_unlike_their_function_load_and_run() {
    let dir = project(
        "name: shop\nframework: langgraph\ntools:\n  - ref: tools/order-tools\n",
        &[
            ("tools/order_tools.py", ORDERS_PY),
            ("tools/search.py", SEARCH_PY),
        ],
    );
    let cache = tempfile::tempdir().unwrap();
    let implementations = implementations(&cache, dir.path());
    let a = load_agent(dir.path(), &implementations, None, &no_env)
        .await
        .unwrap();
    // The tool takes its function's name; the ref still names the file.
    assert_eq!(a.origins["count_items"], "tools/order_tools.py");
    assert_eq!(a.origins["catalogue_search"], "tools/search.py");
    let count = a.toolset.get("count_items").unwrap();
    assert_eq!(count.spec().description, "Count the items of an order.");
    assert_eq!(
        count.spec().input_schema["properties"]["lines"]["items"],
        json!({"$ref": "#/$defs/Line"})
    );
    let search = a.toolset.get("catalogue_search").unwrap();
    assert_eq!(search.spec().description, "Search the product catalogue.");
    assert_eq!(search.spec().input_schema["required"], json!(["query"]));

    let pipeline = toolshed_core::Pipeline::builder(a.toolset.clone()).build();
    let run = toolshed_core::RunContext::ephemeral();
    let out = pipeline
        .call(
            &run,
            toolshed_core::ToolCall::new(
                "count_items",
                json!({"lines": [{"sku": "A", "qty": 2}, {"sku": "B"}]}),
            ),
        )
        .await;
    assert_eq!(
        out.result.unwrap(),
        json!({"kind": "Line", "total": 3, "note": ""})
    );
    // A wrong field is refused by validation, naming it.
    let out = pipeline
        .call(
            &run,
            toolshed_core::ToolCall::new("count_items", json!({"lines": [{"qty": 2}]})),
        )
        .await;
    let err = out.result.unwrap_err();
    assert_eq!(err.code, toolshed_core::ErrorCode::InvalidArgs);
    assert!(err.message.contains("sku"), "{err:?}");
    let out = pipeline
        .call(
            &run,
            toolshed_core::ToolCall::new("catalogue_search", json!({"query": "mug"})),
        )
        .await;
    assert_eq!(out.result.unwrap(), json!({"hits": ["MUG"]}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_public_functions_are_a_start_up_error_naming_both() {
    let dir = project(
        "name: shop\nframework: langgraph\n",
        &[(
            "tools/helpers.py",
            "def alpha(x: int) -> int:\n    \"\"\"A.\"\"\"\n    return x\n\ndef beta(y: str) -> str:\n    \"\"\"B.\"\"\"\n    return y\n",
        )],
    );
    let cache = tempfile::tempdir().unwrap();
    let implementations = implementations(&cache, dir.path());
    let err = load_agent(dir.path(), &implementations, None, &no_env)
        .await
        .unwrap_err();
    let AgentError::Invalid { problems, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert!(
        p.starts_with("tools/helpers.py: ")
            && p.contains("defines 2 public functions (`alpha`, `beta`)")
            && p.contains("`def helpers(...)`")
            && p.contains("leading `_`")
            && p.contains(":alpha`"),
        "{p}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_definition_finds_the_file_whose_function_it_names() {
    let dir = project(
        "name: shop\nframework: langgraph\ntools:\n  - name: count_items\n    type: function\n    description: \"Count what an order holds.\"\n    schema:\n      type: object\n      properties:\n        lines: {type: array, minItems: 1}\n      required: [lines]\n",
        &[("tools/order_tools.py", ORDERS_PY)],
    );
    let cache = tempfile::tempdir().unwrap();
    let implementations = implementations(&cache, dir.path());
    let a = load_agent(dir.path(), &implementations, None, &no_env)
        .await
        .unwrap();
    assert_eq!(a.origins["count_items"], "inline");
    let t = a.toolset.get("count_items").unwrap();
    assert_eq!(t.spec().description, "Count what an order holds.");
    let pipeline = toolshed_core::Pipeline::builder(a.toolset.clone()).build();
    let run = toolshed_core::RunContext::ephemeral();
    let out = pipeline
        .call(
            &run,
            toolshed_core::ToolCall::new("count_items", json!({"lines": [{"sku": "A"}]})),
        )
        .await;
    // The file's function ran, and still got its dataclasses.
    assert_eq!(
        out.result.unwrap(),
        json!({"kind": "Line", "total": 1, "note": ""})
    );
    let out = pipeline
        .call(
            &run,
            toolshed_core::ToolCall::new("count_items", json!({"lines": []})),
        )
        .await;
    assert_eq!(
        out.result.unwrap_err().code,
        toolshed_core::ErrorCode::InvalidArgs
    );
}
