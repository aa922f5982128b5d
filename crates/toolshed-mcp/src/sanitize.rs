//! A server's tool definitions are untrusted: names are made to fit our name rule,
//! schemas may only hold local `$ref`s, and schemas and descriptions are capped.
//!
//! - A tool's qualified name is `<server>__<tool>`, every character outside
//!   `[A-Za-z0-9_-]` replaced by `_`, cut to 64 characters. A name that sanitises to
//!   nothing is skipped with a warning; two tools that sanitise to the same name are an
//!   error naming both (silently dropping one would hide a tool, or pick the wrong one).
//! - A `$ref` (or `$dynamicRef`, `$schema` aside) must be local (`#…`): a remote one
//!   would make validation fetch a URL the server chose. A tool whose schema has one
//!   is skipped with a warning naming the reference.
//! - A schema over `max_schema_bytes`, or nested deeper than [`MAX_SCHEMA_DEPTH`], is
//!   skipped with a warning; a description over `max_description_bytes` is cut.

use std::collections::HashMap;

use serde_json::Value;

use crate::client::{ClientLimits, McpTool, ToolHints};
use crate::error::McpError;

/// Our tool-name rule's length: `^[A-Za-z0-9_-]{1,64}$`.
pub const MAX_NAME: usize = 64;

/// The longest tool name (as the server names it) accepted at all, in bytes.
pub const MAX_TOOL_NAME_BYTES: usize = 128;

/// The deepest nesting a schema may have.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// One tool as the server listed it, before sanitising.
#[derive(Debug, Clone)]
pub struct RawTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Its input schema.
    pub input_schema: Value,
    /// Its output schema.
    pub output_schema: Option<Value>,
    /// Its hints.
    pub hints: ToolHints,
}

/// What sanitising a listing gave: the tools, and one warning per tool skipped.
#[derive(Debug, Clone, Default)]
pub struct Sanitized {
    /// The tools kept.
    pub tools: Vec<McpTool>,
    /// Why tools were skipped (each names the server and the tool).
    pub warnings: Vec<String>,
}

/// `<server>__<tool>` fitted to `^[A-Za-z0-9_-]{1,64}$`, or `None` when the tool's
/// part has no character left.
pub fn qualified_name(server: &str, tool: &str) -> Option<String> {
    let part: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if part.trim_matches('_').is_empty() {
        return None;
    }
    let mut name = format!("{server}__{part}");
    name.truncate(MAX_NAME);
    Some(name)
}

/// Sanitises a server's listing.
pub fn sanitize_tools(
    server: &str,
    raw: Vec<RawTool>,
    limits: &ClientLimits,
) -> Result<Sanitized, McpError> {
    let mut out = Sanitized::default();
    let mut by_name: HashMap<String, String> = HashMap::new();
    for t in raw {
        let shown: String = t.name.chars().take(80).collect();
        let skip = |why: String| format!("MCP server `{server}`: tool `{shown}` skipped: {why}");
        if t.name.len() > MAX_TOOL_NAME_BYTES || t.name.chars().any(char::is_control) {
            out.warnings.push(skip(format!(
                "its name is over {MAX_TOOL_NAME_BYTES} bytes or has control characters"
            )));
            continue;
        }
        let Some(qualified) = qualified_name(server, &t.name) else {
            out.warnings.push(skip(
                "its name has no letter, digit, `_` or `-` to build a tool name from".into(),
            ));
            continue;
        };
        let mut schemas = vec![("inputSchema", &t.input_schema)];
        if let Some(o) = &t.output_schema {
            schemas.push(("outputSchema", o));
        }
        if let Some(why) = schemas
            .iter()
            .find_map(|(field, s)| check_schema(field, s, limits))
        {
            out.warnings.push(skip(why));
            continue;
        }
        if !t.input_schema.is_object() {
            out.warnings
                .push(skip("its `inputSchema` is not a JSON object".into()));
            continue;
        }
        if let Some(first) = by_name.get(&qualified) {
            return Err(McpError::NameCollision {
                server: server.to_owned(),
                first: first.clone(),
                second: t.name.clone(),
                name: qualified,
            });
        }
        by_name.insert(qualified.clone(), t.name.clone());
        out.tools.push(McpTool {
            server: server.to_owned(),
            qualified_name: qualified,
            description: cap_text(
                t.description.as_deref().unwrap_or(""),
                limits.max_description_bytes,
            ),
            input_schema: t.input_schema,
            output_schema: t.output_schema,
            hints: ToolHints {
                title: t.hints.title.map(|s| cap_text(&s, 200)),
                ..t.hints
            },
            name: t.name,
        });
    }
    Ok(out)
}

/// Cuts `text` to `max` bytes on a character boundary, marking the cut.
fn cap_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut cut = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// Why a schema is refused, if it is: too large, too deep, or a non-local reference.
fn check_schema(field: &str, schema: &Value, limits: &ClientLimits) -> Option<String> {
    let size = serde_json::to_vec(schema)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > limits.max_schema_bytes {
        return Some(format!(
            "its `{field}` is {size} bytes, over the cap of {} (`max_schema_bytes`)",
            limits.max_schema_bytes
        ));
    }
    find_bad(field, schema, 0)
}

fn find_bad(path: &str, v: &Value, depth: usize) -> Option<String> {
    if depth > MAX_SCHEMA_DEPTH {
        return Some(format!(
            "`{path}` nests deeper than {MAX_SCHEMA_DEPTH} levels"
        ));
    }
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if matches!(k.as_str(), "$ref" | "$dynamicRef" | "$recursiveRef")
                    && let Some(r) = child.as_str()
                    && !r.starts_with('#')
                {
                    let shown: String = r.chars().take(120).collect();
                    return Some(format!(
                        "`{path}.{k}` is `{shown}`, a remote reference; only local ones (`#/$defs/…`) are allowed"
                    ));
                }
                if let Some(why) = find_bad(&format!("{path}.{k}"), child, depth + 1) {
                    return Some(why);
                }
            }
            None
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, c)| find_bad(&format!("{path}[{i}]"), c, depth + 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raw(name: &str, schema: Value) -> RawTool {
        RawTool {
            name: name.into(),
            description: Some("d".into()),
            input_schema: schema,
            output_schema: None,
            hints: ToolHints::default(),
        }
    }

    fn obj() -> Value {
        json!({"type": "object"})
    }

    #[test]
    fn names_are_fitted_to_the_rule() {
        assert_eq!(
            qualified_name("fs", "read_file").as_deref(),
            Some("fs__read_file")
        );
        assert_eq!(
            qualified_name("fs", "read.file/x").as_deref(),
            Some("fs__read_file_x")
        );
        assert_eq!(qualified_name("fs", "...").as_deref(), None);
        assert_eq!(qualified_name("fs", "工具").as_deref(), None);
        let long = qualified_name("fs", &"a".repeat(100)).unwrap_or_default();
        assert_eq!(long.len(), 64);
    }

    #[test]
    fn bad_tools_are_skipped_with_a_warning_and_collisions_are_errors() {
        let limits = ClientLimits {
            max_schema_bytes: 200,
            max_description_bytes: 10,
            ..ClientLimits::default()
        };
        let mut long = raw("long", obj());
        long.description = Some("é".repeat(50));
        let tools = vec![
            raw("ok", obj()),
            raw("...", obj()),
            raw(
                "remote",
                json!({"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}}),
            ),
            raw(
                "local",
                json!({"type": "object", "$defs": {"x": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/x"}}}),
            ),
            raw(
                "big",
                json!({"type": "object", "description": "x".repeat(300)}),
            ),
            raw("notobj", json!(true)),
            long,
        ];
        let s = sanitize_tools("srv", tools, &limits).expect("sanitized");
        let names: Vec<&str> = s.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["ok", "local", "long"]);
        assert_eq!(s.warnings.len(), 4, "{:?}", s.warnings);
        assert!(s.warnings.iter().any(|w| w.contains("evil.example")));
        assert!(s.tools[2].description.len() <= 10);

        let err = sanitize_tools("srv", vec![raw("a.b", obj()), raw("a/b", obj())], &limits)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("`a.b`") && err.contains("`a/b`") && err.contains("srv__a_b"),
            "{err}"
        );
    }

    #[test]
    fn deep_schemas_are_refused() {
        let mut v = json!({"type": "string"});
        for _ in 0..100 {
            v = json!({"type": "object", "properties": {"x": v}});
        }
        let s = sanitize_tools("srv", vec![raw("deep", v)], &ClientLimits::default())
            .expect("sanitized");
        assert!(s.tools.is_empty() && s.warnings[0].contains("deeper"));
    }
}
