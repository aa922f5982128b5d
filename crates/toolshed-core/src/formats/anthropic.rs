//! Anthropic Messages API tools: export, parsing `tool_use` blocks, and `tool_result`
//! blocks.
//!
//! Anthropic takes the input schema as JSON Schema, so it is sent as is with two
//! exceptions: `$schema` is removed (it says nothing to the model and only costs
//! tokens), and a root without a `type` gets `"type": "object"`, which Anthropic
//! requires of `input_schema` and which tool arguments always are.

use serde_json::{Map, Value, json};

use super::{FormatError, index_path, join_path, object_args, required_str, tool_description};
use crate::pipeline::{CallOutcome, ToolCall};
use crate::schema::kind_of;
use crate::spec::ToolSpec;
use crate::tool::Tool;

/// One tool in Anthropic's format: `{"name", "description", "input_schema"}`.
pub fn anthropic_tool(spec: &ToolSpec) -> Value {
    let mut schema = spec.input_schema.clone();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.entry("type")
            .or_insert_with(|| Value::String("object".into()));
    }
    json!({
        "name": spec.name.as_str(),
        "description": tool_description(&spec.description),
        "input_schema": schema,
    })
}

/// Every tool, in order, as the array for a Messages request's `tools`.
pub fn anthropic_tools<'a>(tools: impl IntoIterator<Item = &'a Tool>) -> Value {
    Value::Array(
        tools
            .into_iter()
            .map(|t| anthropic_tool(t.spec()))
            .collect(),
    )
}

/// Read the tool calls out of an Anthropic assistant message (or a whole Messages API
/// response, which has the same shape), `{"role": "assistant", "content": [{"type":
/// "text", ..}, {"type": "tool_use", "id", "name", "input"}]}`, or out of the bare
/// `content` array. Blocks other than `tool_use` (text, thinking, server tools) are
/// skipped; a string `content` has no calls.
pub fn parse_anthropic_tool_calls(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let (blocks, base) = match message {
        Value::Array(blocks) => (blocks, ""),
        Value::Object(obj) => match obj.get("content") {
            Some(Value::Array(blocks)) => (blocks, "content"),
            Some(Value::String(_)) | Some(Value::Null) => return Ok(Vec::new()),
            None => {
                return Err(FormatError::new(
                    "content",
                    "missing; an assistant message carries its blocks in `content`",
                ));
            }
            Some(other) => {
                return Err(FormatError::new(
                    "content",
                    format!(
                        "must be an array of content blocks (or a string), got {}",
                        kind_of(other)
                    ),
                ));
            }
        },
        other => {
            return Err(FormatError::new(
                "message",
                format!(
                    "expected an assistant message object or its content array, got {}",
                    kind_of(other)
                ),
            ));
        }
    };
    let mut calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let path = index_path(base, i);
        let Some(block) = block.as_object() else {
            return Err(FormatError::new(
                path,
                format!("a content block must be an object, got {}", kind_of(block)),
            ));
        };
        match block.get("type") {
            Some(Value::String(t)) if t == "tool_use" => calls.push(parse_tool_use(block, &path)?),
            Some(Value::String(_)) => {}
            _ => {
                return Err(FormatError::new(
                    join_path(&path, "type"),
                    "missing or not a string; every content block says its `type` \
                     (`text`, `tool_use`, ...)",
                ));
            }
        }
    }
    Ok(calls)
}

fn parse_tool_use(block: &Map<String, Value>, path: &str) -> Result<ToolCall, FormatError> {
    let id = required_str(block, "id", path, "the tool_use id")?;
    let name = required_str(block, "name", path, "the tool name")?;
    let input_path = join_path(path, "input");
    let args = match block.get("input") {
        Some(input) => object_args(input.clone(), &input_path)?,
        None => {
            return Err(FormatError::new(
                input_path,
                "missing; a tool_use block carries its arguments as an `input` object \
                 ({} when there are none)",
            ));
        }
    };
    Ok(ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        args,
    })
}

/// The content block that answers a call, for the next user message:
/// `{"type": "tool_result", "tool_use_id", "content", "is_error"}`, the content being
/// the result as text (or `error CODE: message`, with `is_error: true`).
pub fn anthropic_tool_result_block(outcome: &CallOutcome) -> Value {
    json!({
        "type": "tool_result",
        "tool_use_id": &*outcome.tool_call_id,
        "content": outcome.to_model_text(),
        "is_error": outcome.result.is_err(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::error::ToolError;
    use crate::formats::fixtures;

    #[test]
    fn tools_snapshot() {
        let tools = fixtures::tools();
        let exported = anthropic_tools(&tools);
        let search = &exported[0];
        assert_eq!(search["name"], "search");
        assert_eq!(search["description"], "Search the catalogue.");
        assert!(search["input_schema"].get("$schema").is_none());
        let mut expected = fixtures::search_schema();
        expected.as_object_mut().unwrap().remove("$schema");
        assert_eq!(search["input_schema"], expected, "schema otherwise as is");
        insta::assert_json_snapshot!("anthropic_tools", exported);
    }

    #[test]
    fn union_root_gets_object_type() {
        let tool = fixtures::tool("kv", "Get or set.", fixtures::union_root_schema());
        let exported = anthropic_tool(tool.spec());
        assert_eq!(exported["input_schema"]["type"], "object");
        assert_eq!(
            exported["input_schema"]["oneOf"],
            fixtures::union_root_schema()["oneOf"]
        );
    }

    #[test]
    fn parses_tool_use_blocks() {
        let message = json!({
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "...", "signature": "x"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": "rust"}},
                {"type": "tool_use", "id": "toolu_2", "name": "ping", "input": {}}
            ],
            "stop_reason": "tool_use"
        });
        let calls = parse_anthropic_tool_calls(&message).unwrap();
        assert_eq!(
            calls,
            vec![
                ToolCall {
                    id: "toolu_1".into(),
                    name: "search".into(),
                    args: json!({"query": "rust"})
                },
                ToolCall {
                    id: "toolu_2".into(),
                    name: "ping".into(),
                    args: json!({})
                },
            ]
        );
        assert_eq!(
            parse_anthropic_tool_calls(&message["content"]).unwrap(),
            calls
        );
        let text = json!({"role": "assistant", "content": "just text"});
        assert!(parse_anthropic_tool_calls(&text).unwrap().is_empty());
    }

    #[test]
    fn reports_bad_anthropic_messages_with_paths() {
        let with = |block: Value| json!({"role": "assistant", "content": [{"type": "text", "text": "hi"}, block]});
        let cases = [
            (
                with(
                    json!({"type": "tool_use", "id": "t", "name": "search", "input": "{\"q\": 1}"}),
                ),
                "content[1].input",
                "must be a JSON object",
            ),
            (
                with(json!({"type": "tool_use", "id": "t", "name": "search", "input": [1]})),
                "content[1].input",
                "got an array",
            ),
            (
                with(json!({"type": "tool_use", "id": "t", "name": "search"})),
                "content[1].input",
                "missing",
            ),
            (
                with(json!({"type": "tool_use", "id": "t", "input": {}})),
                "content[1].name",
                "missing",
            ),
            (
                with(json!({"type": "tool_use", "id": "t", "name": "", "input": {}})),
                "content[1].name",
                "empty",
            ),
            (
                with(json!({"type": "tool_use", "id": 5, "name": "a", "input": {}})),
                "content[1].id",
                "must be a string",
            ),
            (with(json!({"name": "a"})), "content[1].type", "missing"),
            (with(json!("tool_use")), "content[1]", "must be an object"),
            (json!({"role": "assistant"}), "content", "missing"),
            (
                json!({"content": {"type": "text"}}),
                "content",
                "must be an array",
            ),
            (json!(42), "message", "got a number"),
            (
                json!([{"type": "tool_use", "id": "t", "name": "a", "input": null}]),
                "[0].input",
                "got null",
            ),
        ];
        for (message, path, words) in cases {
            let err = parse_anthropic_tool_calls(&message).unwrap_err();
            assert_eq!(err.path, path, "{message}: {err}");
            assert!(err.message.contains(words), "{path}: {}", err.message);
        }
    }

    #[test]
    fn result_blocks() {
        let ok = CallOutcome {
            tool_call_id: Arc::from("toolu_1"),
            tool_name: Arc::from("search"),
            result: Ok(json!("three hits")),
            duration: Duration::from_millis(5),
            attempts: 1,
            diagnostics: Default::default(),
        };
        assert_eq!(
            anthropic_tool_result_block(&ok),
            json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "three hits", "is_error": false})
        );
        let failed = CallOutcome {
            result: Err(ToolError::handler("backend down")),
            ..ok
        };
        assert_eq!(
            anthropic_tool_result_block(&failed),
            json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "error HANDLER_ERROR: backend down", "is_error": true})
        );
    }
}
