//! Python schema inference as users' files are written: dataclasses, `TypedDict`s and
//! pydantic models of the same file (and a run proving the function gets real
//! instances), a module-level `SCHEMA` (AgentBreeder's convention), a file whose one
//! public function is not named after it, and every bad input: unsupported field types,
//! non-literal or non-object `SCHEMA`s, ambiguous files, wrong args, a refusing
//! validator, and a file whose top-level code must not run at inference.
//!
//! The pydantic cases need pydantic in the Python the tests run (`pip install pydantic`).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolshed_core::{ErrorCode, RunContext, Tool, ToolCall};
use toolshed_dispatch::{
    Dispatcher, Endpoint, InferredTool, Mode, infer_python_file, infer_python_schema,
};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A pipeline tool from an inferred schema, run by `function` of `path`.
fn tool_from(dispatcher: &Dispatcher, path: &Path, inferred: &InferredTool) -> Tool {
    let endpoint =
        Endpoint::parse(&format!("python:{}:{}", path.display(), inferred.name)).unwrap();
    let mut b = Tool::builder(&inferred.name)
        .description(inferred.description.clone())
        .input_schema(inferred.input_schema.clone())
        .timeout(Duration::from_secs(30))
        .raw_handler(dispatcher.handler(endpoint, &inferred.name));
    if let Some(out) = &inferred.output_schema {
        b = b.output_schema(out.clone());
    }
    b.build().unwrap()
}

#[tokio::test]
async fn dataclasses_typeddicts_and_pydantic_models_become_defs() {
    let inferred = infer_python_schema(&fixture("orders.py"), "place_order")
        .await
        .unwrap();
    assert!(inferred.warnings.is_empty(), "{:?}", inferred.warnings);
    assert_eq!(
        inferred.description,
        "Place an order and report what the function received."
    );
    assert_eq!(
        inferred.input_schema,
        json!({
            "type": "object",
            "properties": {
                "order": {"$ref": "#/$defs/Order", "description": "The order to place."},
                "customer": {"$ref": "#/$defs/Customer"},
                "rush": {"type": "boolean", "description": "Ship it today.", "default": false}
            },
            "required": ["order", "customer"],
            "$defs": {
                "Address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                    "required": []
                },
                "Customer": {
                    "type": "object",
                    "description": "A customer.",
                    "properties": {
                        "name": {"type": "string", "description": "Full name", "minLength": 1},
                        "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
                        "kind": {"type": "string", "enum": ["b2b", "b2c"], "default": "b2c"},
                        "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": null}
                    },
                    "required": ["name"],
                    "additionalProperties": false
                },
                "Line": {
                    "type": "object",
                    "description": "One line of an order.",
                    "properties": {
                        "sku": {"type": "string", "description": "The stock-keeping unit."},
                        "qty": {"type": "integer", "default": 1, "description": "How many."},
                        "size": {"type": "string", "enum": ["s", "m"], "default": "m"},
                        "tags": {"type": "array", "items": {"type": "string"}}
                    },
                    "required": ["sku"],
                    "additionalProperties": false
                },
                "Order": {
                    "type": "object",
                    "description": "An order.",
                    "properties": {
                        "id": {"type": "string"},
                        "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
                        "note": {"type": ["string", "null"], "default": null},
                        "parent": {"anyOf": [{"$ref": "#/$defs/Order"}, {"type": "null"}], "default": null}
                    },
                    "required": ["id", "lines"],
                    "additionalProperties": false
                }
            }
        })
    );
}

#[tokio::test]
async fn the_function_receives_real_dataclass_and_model_instances() {
    let path = fixture("orders.py");
    for mode in [Mode::OneShot, Mode::Pool] {
        let dispatcher = dispatcher(mode);
        let inferred = dispatcher
            .infer_python_schema(&path, "place_order")
            .await
            .unwrap();
        let pipeline = pipeline(vec![tool_from(&dispatcher, &path, &inferred)]);
        let run = RunContext::ephemeral();
        let args = json!({
            "order": {
                "id": "ORD-2",
                "lines": [{"sku": "W-1", "qty": 2, "size": "s"}],
                "parent": {"id": "ORD-1", "lines": [{"sku": "W-0"}]}
            },
            "customer": {"name": "Ada", "address": {"city": "London"}}
        });
        let outcome = pipeline
            .call(&run, ToolCall::new("place_order", args))
            .await;
        assert_eq!(
            outcome.result.unwrap(),
            json!({
                "order": "Order",
                "order_is_dataclass": true,
                "line": "Line",
                "size": "<Size.S: 's'>",
                "qty": 2,
                "parent": "Order",
                "parent_line": "Line",
                "customer": "Customer",
                "customer_is_model": true,
                "age": 30,
                "address": {"city": "London"},
                "rush": false
            }),
            "{mode:?}"
        );
        dispatcher.shutdown();
    }
}

#[tokio::test]
async fn a_returned_dataclass_is_json_and_matches_its_output_schema() {
    let path = fixture("orders.py");
    let dispatcher = dispatcher(Mode::OneShot);
    let inferred = dispatcher
        .infer_python_schema(&path, "echo_order")
        .await
        .unwrap();
    assert_eq!(
        inferred.output_schema.as_ref().unwrap()["$ref"],
        json!("#/$defs/Order")
    );
    // The pipeline validates the result against the output schema, `$defs` and all.
    let pipeline = pipeline(vec![tool_from(&dispatcher, &path, &inferred)]);
    let outcome = pipeline
        .call(
            &RunContext::ephemeral(),
            ToolCall::new(
                "echo_order",
                json!({"order": {"id": "o", "lines": [{"sku": "a", "size": "s", "tags": ["x"]}]}}),
            ),
        )
        .await;
    assert_eq!(
        outcome.result.unwrap(),
        json!({
            "id": "o",
            "lines": [{"sku": "a", "qty": 1, "size": "s", "tags": ["x"]}],
            "note": null,
            "parent": null
        })
    );
}

#[tokio::test]
async fn wrong_args_are_refused_naming_the_field() {
    let path = fixture("orders.py");
    let dispatcher = dispatcher(Mode::OneShot);
    let inferred = dispatcher
        .infer_python_schema(&path, "place_order")
        .await
        .unwrap();
    let pipeline = pipeline(vec![tool_from(&dispatcher, &path, &inferred)]);
    let run = RunContext::ephemeral();
    let cases = [
        // A nested dataclass field of the wrong type.
        (
            json!({"order": {"id": "o", "lines": [{"sku": "a", "qty": "two"}]}, "customer": {"name": "Ada"}}),
            "/order/lines/0/qty",
        ),
        // A key the dataclass does not have (its constructor would refuse it).
        (
            json!({"order": {"id": "o", "lines": [], "colour": "red"}, "customer": {"name": "Ada"}}),
            "/order",
        ),
        // A value outside the Enum.
        (
            json!({"order": {"id": "o", "lines": [{"sku": "a", "size": "xl"}]}, "customer": {"name": "Ada"}}),
            "/order/lines/0/size",
        ),
        // pydantic's Field constraints, read from the file.
        (
            json!({"order": {"id": "o", "lines": []}, "customer": {"name": "", "age": 3}}),
            "/customer/name",
        ),
        (
            json!({"order": {"id": "o", "lines": []}, "customer": {"name": "Ada", "age": 200}}),
            "/customer/age",
        ),
        // A missing required field of the model.
        (
            json!({"order": {"id": "o", "lines": []}, "customer": {}}),
            "/customer",
        ),
    ];
    for (args, pointer) in cases {
        let outcome = pipeline
            .call(&run, ToolCall::new("place_order", args.clone()))
            .await;
        let err = outcome.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgs, "{args}: {err:?}");
        let violations = err.details.as_ref().unwrap()["violations"].to_string();
        assert!(
            violations.contains(&format!("\"{pointer}\"")),
            "{args}: expected a violation at {pointer}: {violations}"
        );
    }
    // What validation cannot see, the model's own validator refuses at call time: an
    // error result naming the argument, not a crash.
    let outcome = pipeline
        .call(
            &run,
            ToolCall::new(
                "place_order",
                json!({"order": {"id": "o", "lines": []}, "customer": {"name": "Robot"}}),
            ),
        )
        .await;
    let err = outcome.result.unwrap_err();
    assert!(
        err.message.contains("argument `customer`") && err.message.contains("robots cannot order"),
        "{err:?}"
    );
    assert_eq!(
        err.details.as_ref().unwrap()["tool_code"],
        json!("InvalidArgument"),
        "{err:?}"
    );
}

#[tokio::test]
async fn unsupported_field_types_are_warnings_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "audit.py",
        r##"
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
import threading

@dataclass
class Entry:
    counts: Counter
    lock: threading.Lock
    when: datetime = datetime.now()

def audit(entry: Entry) -> None:
    """Audit an entry."""
"##,
    );
    let inferred = infer_python_schema(&path, "audit").await.unwrap();
    let w = inferred.warnings.join("\n");
    assert!(
        w.contains("field `Entry.counts`: `Counter` is imported from `collections`")
            && w.contains("define it here"),
        "{w}"
    );
    assert!(
        w.contains("field `Entry.lock`: the annotation `threading.Lock` has no JSON Schema"),
        "{w}"
    );
    assert!(
        w.contains("field `Entry.when`: the default `datetime.now()` is not a JSON constant"),
        "{w}"
    );
    let entry = &inferred.input_schema["$defs"]["Entry"];
    assert_eq!(entry["required"], json!(["counts", "lock"]), "{entry}");
    assert_eq!(
        entry["properties"]["when"],
        json!({"type": "string", "format": "date-time"})
    );
}

#[tokio::test]
async fn inference_never_runs_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let path = write(
        dir.path(),
        "sneaky.py",
        &format!(
            r##"
import pathlib
pathlib.Path({marker:?}).write_text("top-level code ran")
from pydantic import BaseModel

class Query(BaseModel):
    text: str
    def __init_subclass__(cls, **kw):
        pathlib.Path({marker:?}).write_text("class code ran")

SCHEMA = {{"type": "object", "properties": {{"q": {{"$ref": "#/$defs/x"}}}}}}

def sneaky(q: Query) -> dict:
    return {{}}
"##,
            marker = marker.display().to_string()
        ),
    );
    let inferred = infer_python_file(&path, None).await.unwrap();
    assert_eq!(inferred.name, "sneaky");
    assert!(!marker.exists(), "inference ran the module's code");
    // A non-literal SCHEMA is refused rather than evaluated.
    let path = write(
        dir.path(),
        "computed.py",
        &format!(
            r##"
import pathlib
def _build():
    pathlib.Path({marker:?}).write_text("SCHEMA was evaluated")
    return {{"type": "object"}}
SCHEMA = _build()
def computed(x: int) -> int:
    return x
"##,
            marker = marker.display().to_string()
        ),
    );
    let err = infer_python_file(&path, None).await.unwrap_err();
    assert_eq!(err.code(), "SCHEMA_INFERENCE_FAILED");
    assert!(
        err.to_string()
            .contains("SCHEMA (line 6) is not a dict literal")
            && err.to_string().contains("remove it to infer the schema"),
        "{err}"
    );
    assert!(!marker.exists(), "inference evaluated SCHEMA");
}

/// AgentBreeder's stdlib tools declare `SCHEMA: dict[str, Any] = {...}` beside the
/// function (its CLI's `tool push` refuses a Python module without one).
const AGENTBREEDER_STYLE: &str = r##""""Generic web search tool backed by a search API.

Required env: ``TAVILY_API_KEY``.
"""

from __future__ import annotations

from typing import Any, TypedDict


class WebSearchResult(TypedDict):
    answer: str
    query: str


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "The search query. Be specific."},
        "max_results": {"type": "integer", "default": 6, "minimum": 1, "maximum": 10},
    },
    "required": ["query"],
}


def _helper(x):
    return x


def search_the_web(query: str, max_results: int = 6) -> WebSearchResult:
    return WebSearchResult(answer="%d results for %s" % (max_results, query), query=query)
"##;

#[tokio::test]
async fn a_module_level_schema_is_used_and_the_tool_runs() {
    let dir = tempfile::tempdir().unwrap();
    // Named neither like the function nor as a Python identifier.
    let path = write(dir.path(), "web-search.py", AGENTBREEDER_STYLE);
    let dispatcher = dispatcher(Mode::OneShot);
    let inferred = dispatcher.infer_python_file(&path, None).await.unwrap();
    assert_eq!(inferred.name, "search_the_web");
    assert_eq!(
        inferred.description,
        "Generic web search tool backed by a search API."
    );
    assert_eq!(
        inferred.input_schema["properties"]["max_results"],
        json!({"type": "integer", "default": 6, "minimum": 1, "maximum": 10})
    );
    assert_eq!(inferred.input_schema["required"], json!(["query"]));
    assert_eq!(
        inferred.output_schema.as_ref().unwrap()["$ref"],
        json!("#/$defs/WebSearchResult")
    );
    assert!(inferred.warnings.is_empty(), "{:?}", inferred.warnings);

    let pipeline = pipeline(vec![tool_from(&dispatcher, &path, &inferred)]);
    let outcome = pipeline
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("search_the_web", json!({"query": "rust"})),
        )
        .await;
    assert_eq!(
        outcome.result.unwrap(),
        json!({"answer": "6 results for rust", "query": "rust"})
    );
    // The declared schema's constraints are enforced.
    let outcome = pipeline
        .call(
            &RunContext::ephemeral(),
            ToolCall::new(
                "search_the_web",
                json!({"query": "rust", "max_results": 50}),
            ),
        )
        .await;
    let err = outcome.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgs);
    assert!(
        err.details.as_ref().unwrap()["violations"]
            .to_string()
            .contains("/max_results"),
        "{err:?}"
    );
}

#[tokio::test]
async fn declared_schemas_in_every_form_and_their_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = dispatcher(Mode::OneShot);
    let infer = |name: &'static str, text: &'static str| {
        let path = write(dir.path(), name, text);
        let dispatcher = dispatcher.clone();
        async move { dispatcher.infer_python_file(&path, None).await }
    };

    // A lowercase `schema` definition, with its own description and output schema.
    let t = infer(
        "lower.py",
        r##"
schema = {"description": "Add one.", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
          "output_schema": {"type": "integer"}}
def lower(n):
    return n + 1
"##,
    )
    .await
    .unwrap();
    assert_eq!(t.description, "Add one.");
    assert_eq!(t.input_schema["required"], json!(["n"]));
    assert_eq!(t.output_schema, Some(json!({"type": "integer"})));

    // A lowercase `schema` that is something else is ignored, with a warning.
    let t = infer(
        "other.py",
        "import json\nschema = json.loads('{}')\ndef other(n: int) -> int:\n    return n\n",
    )
    .await
    .unwrap();
    assert_eq!(
        t.input_schema,
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    );
    assert!(
        t.warnings
            .join("\n")
            .contains("`schema` (line 2) is not a dict literal"),
        "{:?}",
        t.warnings
    );

    // A SCHEMA that disagrees with the function: warnings naming both sides.
    let t = infer(
        "disagree.py",
        r##"
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}, "extra": {"type": "string"}}}
def disagree(q: str, limit: int) -> list:
    return []
"##,
    )
    .await
    .unwrap();
    let w = t.warnings.join("\n");
    assert!(
        w.contains("SCHEMA does not list the required parameter `limit` of `disagree`"),
        "{w}"
    );
    assert!(
        w.contains("SCHEMA lists `extra`, which `disagree` does not accept"),
        "{w}"
    );

    // A SCHEMA that does not describe an object is refused.
    let err = infer(
        "array.py",
        "SCHEMA = {\"type\": \"array\"}\ndef array(x):\n    return x\n",
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "SCHEMA_INFERENCE_FAILED");
    assert!(
        err.to_string()
            .contains("SCHEMA (line 1) must describe the tool's arguments as a JSON object"),
        "{err}"
    );
}

#[tokio::test]
async fn which_function_is_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    // One public function, named unlike the file: it is the tool.
    let path = write(
        dir.path(),
        "order_tools.py",
        "def _fmt(x):\n    return x\n\ndef lookup(order_id: str) -> dict:\n    \"\"\"Look up.\"\"\"\n    return {}\n",
    );
    assert_eq!(infer_python_file(&path, None).await.unwrap().name, "lookup");

    // Several public functions, one named like the file: that one, as before.
    let path = write(
        dir.path(),
        "stats.py",
        "def mean(xs: list[float]) -> float:\n    return 0\n\ndef stats(xs: list[float]) -> dict:\n    return {}\n",
    );
    assert_eq!(infer_python_file(&path, None).await.unwrap().name, "stats");

    // Several and none named like the file: an error listing them and the ways out.
    let path = write(
        dir.path(),
        "helpers.py",
        "def alpha(x: int) -> int:\n    return x\n\nasync def beta(y: str) -> str:\n    return y\n",
    );
    let err = infer_python_file(&path, None).await.unwrap_err();
    assert_eq!(err.code(), "SCHEMA_INFERENCE_FAILED");
    let text = err.to_string();
    assert!(
        text.contains("for the file's tool function")
            && text.contains("defines 2 public functions (`alpha`, `beta`)")
            && text.contains("`def helpers(...)`")
            && text.contains("leading `_`")
            && text.contains(&format!("python:{}:alpha", path.display())),
        "{text}"
    );
    // Naming one still works.
    assert_eq!(
        infer_python_file(&path, Some("beta")).await.unwrap().name,
        "beta"
    );

    // No public function at all.
    let path = write(dir.path(), "nothing.py", "def _private():\n    pass\n");
    let err = infer_python_file(&path, None).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("defines no public top-level function"),
        "{err}"
    );
}

#[tokio::test]
async fn containers_unions_and_typeddicts_of_models_are_built_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "shapes.py",
        r##"
from __future__ import annotations
from dataclasses import dataclass
from typing import Union
from typing_extensions import TypedDict, NotRequired

@dataclass
class Point:
    x: float
    y: float

@dataclass
class Label:
    text: str

class Scene(TypedDict):
    origin: Point
    label: NotRequired[Label]

def draw(points: list[Point], pair: tuple[Point, int], by_name: dict[str, Point],
         thing: Union[Point, str], unique: set[str], scene: Scene) -> dict:
    """Report the types each argument arrived as."""
    return {
        "points": [type(p).__name__ for p in points],
        "pair": [type(pair).__name__, type(pair[0]).__name__, pair[1]],
        "by_name": {k: type(v).__name__ for k, v in by_name.items()},
        "thing": type(thing).__name__,
        "unique": type(unique).__name__,
        "scene": [type(scene).__name__, type(scene["origin"]).__name__, type(scene["label"]).__name__],
    }
"##,
    );
    let dispatcher = dispatcher(Mode::OneShot);
    let inferred = dispatcher.infer_python_file(&path, None).await.unwrap();
    assert!(inferred.warnings.is_empty(), "{:?}", inferred.warnings);
    assert_eq!(
        inferred.input_schema["$defs"]["Scene"]["required"],
        json!(["origin"])
    );
    let pipeline = pipeline(vec![tool_from(&dispatcher, &path, &inferred)]);
    let p = json!({"x": 1, "y": 2.5});
    for (thing, kind) in [(p.clone(), "Point"), (json!("a string"), "str")] {
        let args = json!({
            "points": [p, p], "pair": [p, 3], "by_name": {"a": p}, "thing": thing,
            "unique": ["a", "b"], "scene": {"origin": p, "label": {"text": "hi"}}
        });
        let outcome = pipeline
            .call(&RunContext::ephemeral(), ToolCall::new("draw", args))
            .await;
        assert_eq!(
            outcome.result.unwrap(),
            json!({
                "points": ["Point", "Point"],
                "pair": ["tuple", "Point", 3],
                "by_name": {"a": "Point"},
                "thing": kind,
                "unique": "set",
                "scene": ["dict", "Point", "Label"]
            })
        );
    }
}

/// The plain case keeps its shape: no `$defs` and no conversion for plain annotations.
#[tokio::test]
async fn plain_signatures_are_unchanged() {
    let inferred = infer_python_file(&fixture("order_lookup.py"), None)
        .await
        .unwrap();
    assert_eq!(inferred.name, "order_lookup");
    assert!(inferred.input_schema.get("$defs").is_none());
    assert_eq!(
        inferred.input_schema["required"],
        Value::from(vec!["order_id"])
    );
}

/// Python inference runs in the sandbox (the file is parsed there, never imported), and
/// what it found is kept while the file's text is unchanged: the next dispatcher over
/// the same cache (the next CLI command) reads it back without inferring, and a changed
/// file is inferred again.
#[tokio::test]
async fn a_python_inference_is_kept_while_the_file_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "add.py",
        "def add(a: int, b: int = 1) -> int:\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n",
    );
    let d = || {
        Dispatcher::new(toolshed_dispatch::DispatcherConfig {
            cache_dir: cache.path().to_path_buf(),
            ..config(Mode::OneShot)
        })
    };
    let first = d().infer_python_file(&file, None).await.unwrap();
    assert_eq!(first.description, "Add two numbers.");
    assert_eq!(first.input_schema["required"], json!(["a"]));
    let kept: Vec<_> = std::fs::read_dir(cache.path().join("schemas"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    // What is kept is what is answered: mark it, and a new dispatcher answers the mark.
    let mut marked = first.clone();
    marked.description = "read from the cache".into();
    std::fs::write(&kept[0], serde_json::to_vec(&marked).unwrap()).unwrap();
    assert_eq!(d().infer_python_file(&file, None).await.unwrap(), marked);
    // A changed file is inferred again.
    std::fs::write(
        &file,
        "def add(a: int, b: int) -> int:\n    \"\"\"Add both numbers.\"\"\"\n    return a + b\n",
    )
    .unwrap();
    let changed = d().infer_python_file(&file, None).await.unwrap();
    assert_eq!(changed.description, "Add both numbers.");
    assert_eq!(changed.input_schema["required"], json!(["a", "b"]));
}
