//! Mapping toolshed's values onto MCP's: a tool listing entry, a call's outcome as a
//! `CallToolResult`, a partial result as a progress step.
//!
//! A result becomes content this way:
//! - content blocks the tool itself sent (an MCP-backed tool's) pass through;
//! - a result object with a `$content` array of MCP content blocks (`text`, `image`,
//!   `audio`, `resource`, `resource_link`) is those blocks, and the rest of the object
//!   (if any) its `structuredContent`: how a Python or JavaScript tool returns images,
//!   audio or embedded resources;
//! - a string is one text block;
//! - anything else is its JSON as one text block, and an object result is also the
//!   `structuredContent`.

use rmcp::model::{CallToolResult, ContentBlock, MetaObject, ResultType};
use serde_json::{Map, Value, json};
use toolshed_core::ToolError;

use super::{CallOutcome, ExposedTool, IDEMPOTENCY_META};

/// The result key holding MCP content blocks.
pub const CONTENT_KEY: &str = "$content";

/// The most content blocks one result may carry.
const MAX_BLOCKS: usize = 64;

/// A tool as `tools/list` shows it.
pub fn tool_json(tool: &ExposedTool) -> Value {
    // Schemas leave toolshed as JSON Schema: OpenAPI's `nullable: true`, which a
    // registered definition may still carry, becomes `type: [T, "null"]`.
    let schema = |s: &Value| {
        let mut s = s.clone();
        toolshed_core::schema::normalize_nullable(&mut s);
        s
    };
    let mut v = json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": schema(&tool.input_schema),
        "annotations": {
            "readOnlyHint": tool.read_only,
            "destructiveHint": tool.destructive,
            "idempotentHint": tool.idempotent,
        },
    });
    if let Some(out) = &tool.output_schema {
        v["outputSchema"] = schema(out);
    }
    v
}

/// A partial result as progress: its own `progress` (with `total` and `message`) when it
/// is an object carrying a number there, else the step count.
pub fn progress_of(value: &Value, step: f64) -> (f64, Option<f64>, Option<String>) {
    let progress = value
        .get("progress")
        .and_then(Value::as_f64)
        .filter(|p| p.is_finite());
    match progress {
        Some(p) => (
            p,
            value
                .get("total")
                .and_then(Value::as_f64)
                .filter(|t| t.is_finite()),
            value
                .get("message")
                .and_then(Value::as_str)
                .map(|m| m.chars().take(500).collect()),
        ),
        None => (step, None, None),
    }
}

/// A call's outcome as a `CallToolResult` (JSON).
pub fn call_result(tool: &str, outcome: CallOutcome) -> Value {
    match outcome {
        CallOutcome::Done {
            run_id,
            result: Ok(value),
            content,
        } => success(value, content, &run_id),
        CallOutcome::Done {
            run_id,
            result: Err(error),
            ..
        } => failure(&error, &run_id),
        CallOutcome::InvalidArgs { message } => json!({
            "isError": true,
            "content": [{"type": "text", "text": message}],
        }),
        CallOutcome::PendingApproval {
            run_id,
            call_id,
            four_eyes,
            reason,
            idempotency_key,
        } => {
            let again = match &idempotency_key {
                Some(k) => format!(
                    "then call `{tool}` again with `_meta.{IDEMPOTENCY_META}` = `{k}` to get its result"
                ),
                None => format!(
                    "then resume run `{run_id}` (`toolshed runs resume {run_id}`, POST /api/v1/runs/{run_id}/resume); next time pass `_meta.{IDEMPOTENCY_META}` and call again with the same key instead"
                ),
            };
            let who = if four_eyes {
                " by someone other than whoever asked for it (four-eyes)"
            } else {
                ""
            };
            let text = format!(
                "tool `{tool}` needs approval ({reason}): pending approval `{call_id}` (run `{run_id}`). \
                 Decide it{who} with `toolshed approvals approve {call_id}` or `toolshed approvals deny {call_id}` \
                 (POST /api/v1/approvals/{call_id}/approve or …/deny), {again}."
            );
            json!({
                "isError": true,
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"status": "pending_approval", "call_id": call_id, "run_id": run_id, "four_eyes": four_eyes, "idempotency_key": idempotency_key},
            })
        }
        CallOutcome::PendingAnswer {
            run_id,
            call_id,
            idempotency_key,
        } => {
            let text = format!(
                "tool `{tool}` waits for an answer from a person: call `{call_id}` (run `{run_id}`). \
                 Answer it with `toolshed approvals answer {call_id} …` (POST /api/v1/answers/{call_id}){}.",
                idempotency_key
                    .as_ref()
                    .map(|k| format!(
                        ", then call `{tool}` again with `_meta.{IDEMPOTENCY_META}` = `{k}`"
                    ))
                    .unwrap_or_default()
            );
            json!({
                "isError": true,
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"status": "pending_answer", "call_id": call_id, "run_id": run_id, "idempotency_key": idempotency_key},
            })
        }
    }
}

/// [`call_result`] as rmcp's `CallToolResult`, equal to reading that JSON back. The
/// common answer (a result with no content blocks of its own) is built directly, which
/// spares building the JSON and reading it again on every call; every other outcome
/// goes through [`call_result`].
pub fn call_tool_result(
    tool: &str,
    outcome: CallOutcome,
) -> Result<CallToolResult, serde_json::Error> {
    match outcome {
        CallOutcome::Done {
            run_id,
            result: Ok(value),
            content,
        } if content.is_empty() && value.get(CONTENT_KEY).is_none() => {
            Ok(plain_success(value, &run_id))
        }
        other => {
            let mut result: CallToolResult = serde_json::from_value(call_result(tool, other))?;
            result.result_type = Some(ResultType::COMPLETE);
            Ok(result)
        }
    }
}

/// What [`success`] makes of a result without content blocks, as a `CallToolResult`.
fn plain_success(value: Value, run_id: &str) -> CallToolResult {
    // `resultType: "complete"`, as `2026-07-28` requires; rmcp (or the direct path)
    // takes it off for a peer of an older version.
    let mut result = CallToolResult::default();
    result.result_type = Some(ResultType::COMPLETE);
    match value {
        Value::Object(_) => {
            result.content = vec![ContentBlock::text(value.to_string())];
            result.structured_content = Some(value);
        }
        Value::String(text) => result.content = vec![ContentBlock::text(text)],
        other => result.content = vec![ContentBlock::text(other.to_string())],
    }
    let mut meta = Map::new();
    meta.insert("toolshed/run_id".into(), Value::String(run_id.to_owned()));
    result.meta = Some(MetaObject(meta));
    result
}

fn success(value: Value, sent: Vec<Value>, run_id: &str) -> Value {
    let meta = json!({"toolshed/run_id": run_id});
    let sent: Vec<Value> = sent.into_iter().filter(is_block).take(MAX_BLOCKS).collect();
    if !sent.is_empty() {
        let mut v = json!({"content": sent, "_meta": meta});
        if value.is_object() {
            v["structuredContent"] = value;
        }
        return v;
    }
    if let Value::Object(mut obj) = value {
        if let Some(Value::Array(blocks)) = obj.get(CONTENT_KEY)
            && !blocks.is_empty()
            && blocks.len() <= MAX_BLOCKS
            && blocks.iter().all(is_block)
        {
            let blocks = obj.remove(CONTENT_KEY).unwrap_or_default();
            let mut v = json!({"content": blocks, "_meta": meta});
            if !obj.is_empty() {
                v["structuredContent"] = Value::Object(obj);
            }
            return v;
        }
        let text = Value::Object(obj.clone()).to_string();
        return json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": Value::Object(obj),
            "_meta": meta,
        });
    }
    let text = match value {
        Value::String(s) => s,
        other => other.to_string(),
    };
    json!({"content": [{"type": "text", "text": text}], "_meta": meta})
}

fn failure(error: &ToolError, run_id: &str) -> Value {
    let mut structured = Map::new();
    structured.insert("code".into(), json!(error.code));
    if let Some(d) = &error.details {
        structured.insert("details".into(), d.clone());
    }
    json!({
        "isError": true,
        "content": [{"type": "text", "text": error.message}],
        "structuredContent": {"error": structured},
        "_meta": {"toolshed/run_id": run_id},
    })
}

/// Whether `v` is an MCP content block of a known type with its required fields.
pub fn is_block(v: &Value) -> bool {
    let s = |k: &str| v.get(k).is_some_and(Value::is_string);
    match v.get("type").and_then(Value::as_str) {
        Some("text") => s("text"),
        Some("image") | Some("audio") => s("data") && s("mimeType"),
        Some("resource") => v.get("resource").is_some_and(|r| {
            r.get("uri").is_some_and(Value::is_string)
                && (r.get("text").is_some_and(Value::is_string)
                    || r.get("blob").is_some_and(Value::is_string))
        }),
        Some("resource_link") => s("uri") && s("name"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(value: Value) -> Value {
        call_result(
            "t",
            CallOutcome::Done {
                run_id: "r".into(),
                result: Ok(value),
                content: vec![],
            },
        )
    }

    #[test]
    fn schemas_leave_as_json_schema_with_nullable_as_a_type_union() {
        let tool = crate::server::ExposedTool {
            name: "track".into(),
            description: "d".into(),
            input_schema: json!({"type": "object", "properties": {"carrier": {"type": "string", "enum": ["ups", "dhl"], "nullable": true}}}),
            output_schema: Some(
                json!({"type": "object", "properties": {"tracking": {"type": "string", "nullable": true}}}),
            ),
            read_only: true,
            destructive: false,
            idempotent: true,
        };
        let v = tool_json(&tool);
        assert_eq!(
            v["outputSchema"]["properties"]["tracking"],
            json!({"type": ["string", "null"]})
        );
        assert_eq!(
            v["inputSchema"]["properties"]["carrier"],
            json!({"type": ["string", "null"], "enum": ["ups", "dhl", null]})
        );
    }

    #[test]
    fn results_become_content() {
        assert_eq!(done(json!("hi"))["content"][0]["text"], "hi");
        let v = done(json!({"a": 1}));
        assert_eq!(v["structuredContent"], json!({"a": 1}));
        assert_eq!(v["content"][0]["text"], "{\"a\":1}");
        let img = json!({"type": "image", "data": "AA==", "mimeType": "image/png"});
        let v = done(json!({"$content": [img.clone()], "n": 2}));
        assert_eq!(v["content"], json!([img]));
        assert_eq!(v["structuredContent"], json!({"n": 2}));
        // A malformed block is not content: the whole object is the result.
        let v = done(json!({"$content": [{"type": "image"}]}));
        assert_eq!(v["content"][0]["type"], "text");
        assert!(v["structuredContent"]["$content"].is_array());
    }

    #[test]
    fn the_direct_result_is_the_json_one_read_back() {
        let img = json!({"type": "image", "data": "AA==", "mimeType": "image/png"});
        let cases = [
            (
                json!({"iso": "2026-12-02T12:00:00Z", "unix": 1_796_212_800}),
                vec![],
            ),
            (json!({}), vec![]),
            (json!("hi \"there\"\n"), vec![]),
            (json!(""), vec![]),
            (json!(42.5), vec![]),
            (json!(null), vec![]),
            (json!([1, {"a": "b"}]), vec![]),
            (json!(true), vec![]),
            (json!({"nested": {"z": 1, "a": [null]}, "ü": "é"}), vec![]),
            // Content blocks (its own, or sent beside it) take the JSON path.
            (json!({"$content": [img.clone()], "n": 2}), vec![]),
            (json!({"$content": "not blocks"}), vec![]),
            (json!({"a": 1}), vec![img.clone()]),
            (json!("x"), vec![json!({"type": "bogus"})]),
        ];
        for (value, content) in cases {
            let outcome = CallOutcome::Done {
                run_id: "run-1".into(),
                result: Ok(value.clone()),
                content: content.clone(),
            };
            let mut read_back: CallToolResult =
                serde_json::from_value(call_result("t", outcome.clone())).expect("valid JSON");
            // Both are marked complete (`2026-07-28`; rmcp strips it for older peers).
            read_back.result_type = Some(ResultType::COMPLETE);
            let direct = call_tool_result("t", outcome).expect("a result");
            assert_eq!(direct, read_back, "{value} with {content:?}");
            assert_eq!(
                serde_json::to_value(&direct).expect("serializes"),
                serde_json::to_value(&read_back).expect("serializes"),
                "{value}"
            );
        }
        let failed = CallOutcome::Done {
            run_id: "r".into(),
            result: Err(ToolError::handler("boom")),
            content: vec![],
        };
        let direct = call_tool_result("t", failed.clone()).expect("a result");
        assert_eq!(direct.is_error, Some(true));
        let mut read_back: CallToolResult =
            serde_json::from_value(call_result("t", failed)).expect("valid");
        read_back.result_type = Some(ResultType::COMPLETE);
        assert_eq!(direct, read_back);
    }

    #[test]
    fn errors_and_pending_calls_are_error_results() {
        let v = call_result(
            "t",
            CallOutcome::Done {
                run_id: "r".into(),
                result: Err(ToolError::handler("boom")),
                content: vec![],
            },
        );
        assert_eq!(v["isError"], true);
        assert_eq!(v["content"][0]["text"], "boom");
        let v = call_result(
            "t",
            CallOutcome::PendingApproval {
                run_id: "r".into(),
                call_id: "c1".into(),
                four_eyes: false,
                reason: "always".into(),
                idempotency_key: Some("k1".into()),
            },
        );
        assert_eq!(v["isError"], true);
        let text = v["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("toolshed approvals approve c1"), "{text}");
        assert!(text.contains("`k1`"), "{text}");
    }

    #[test]
    fn progress_reads_its_own_numbers_or_counts() {
        assert_eq!(
            progress_of(&json!({"progress": 50, "total": 100}), 1.0),
            (50.0, Some(100.0), None)
        );
        assert_eq!(progress_of(&json!("x"), 3.0), (3.0, None, None));
    }
}
