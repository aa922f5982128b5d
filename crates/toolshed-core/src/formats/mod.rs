//! Model-vendor tool formats: export tool specs to the OpenAI, Anthropic and Gemini
//! tool formats, and parse those vendors' tool-call messages back into [`ToolCall`]s.
//!
//! Everything here is a pure function over `serde_json::Value`: no IO, no clients.
//!
//! | vendor | export | parse calls | result message |
//! |---|---|---|---|
//! | OpenAI | [`openai_tools`] (`strict` or not) | [`parse_openai_tool_calls`] | [`openai_tool_result_message`] |
//! | Anthropic | [`anthropic_tools`] | [`parse_anthropic_tool_calls`] | [`anthropic_tool_result_block`] |
//! | Gemini | [`gemini_tools`] | [`parse_gemini_function_calls`] | [`gemini_function_response_part`] |
//!
//! Schemas are rewritten per vendor because each accepts a different subset of JSON
//! Schema: Anthropic takes it nearly as is, OpenAI's strict mode wants closed objects
//! whose properties are all required, and Gemini takes a subset of the OpenAPI 3.0
//! Schema object (one `type` per schema, `nullable`, no `$ref`). The rules and the
//! reasons for them are documented in each vendor's module.
//!
//! The rewrites only ever *narrow* what a model is told to send or drop constraints the
//! vendor cannot express: every call is still validated against the tool's original
//! schema by the pipeline, so a dropped constraint shows up as an `INVALID_ARGS` error
//! the model can act on, never as an unchecked call.
//!
//! [`ToolCall`]: crate::pipeline::ToolCall

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::tool::Tool;

pub mod anthropic;
pub mod gemini;
pub mod openai;

#[cfg(test)]
mod fixtures;

pub use anthropic::{
    anthropic_tool, anthropic_tool_result_block, anthropic_tools, parse_anthropic_tool_calls,
};
pub use gemini::{
    gemini_function_declaration, gemini_function_response_part, gemini_schema, gemini_tools,
    parse_gemini_function_calls,
};
pub use openai::{
    openai_function_call_output, openai_strict_schema, openai_tool, openai_tool_result_message,
    openai_tools, parse_openai_tool_calls, strip_nulls_for_optional, strip_nulls_in_calls,
};

/// A vendor message that cannot be read as tool calls (or an unknown vendor name).
///
/// `path` points into the message, e.g. `tool_calls[1].function.arguments`; `message`
/// says what is wrong and what would be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at `{path}`: {message}")]
pub struct FormatError {
    /// Where in the message the problem is, e.g. `content[2].input`.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl FormatError {
    /// A new error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FormatError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// The tool formats toolshed can export to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// OpenAI function tools, schemas as given (`strict: false`).
    OpenAi,
    /// OpenAI function tools in strict mode (Structured Outputs): schemas rewritten so
    /// the model's arguments always parse against them.
    OpenAiStrict,
    /// Anthropic Messages API tools.
    Anthropic,
    /// Gemini `functionDeclarations`.
    Gemini,
}

impl Vendor {
    /// Every vendor, in the order they are listed in messages.
    pub const ALL: [Vendor; 4] = [
        Vendor::OpenAi,
        Vendor::OpenAiStrict,
        Vendor::Anthropic,
        Vendor::Gemini,
    ];

    /// The name used on the command line and in config: `openai`, `openai-strict`,
    /// `anthropic` or `gemini`.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::OpenAi => "openai",
            Vendor::OpenAiStrict => "openai-strict",
            Vendor::Anthropic => "anthropic",
            Vendor::Gemini => "gemini",
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Vendor {
    type Err = FormatError;

    /// Parse a vendor name (case-insensitive; `_` may stand for `-`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Vendor::ALL
            .into_iter()
            .find(|v| v.as_str() == wanted)
            .ok_or_else(|| {
                let choices: Vec<&str> = Vendor::ALL.iter().map(|v| v.as_str()).collect();
                FormatError::new(
                    "vendor",
                    format!(
                        "unknown vendor `{s}`; choose one of: {}",
                        choices.join(", ")
                    ),
                )
            })
    }
}

/// Export tools in a vendor's format: the value to put under the request's `tools` key
/// for OpenAI and Anthropic (an array), or one element of Gemini's `tools` array
/// (`{"functionDeclarations": [...]}`).
pub fn export<'a>(vendor: Vendor, tools: impl IntoIterator<Item = &'a Tool>) -> Value {
    match vendor {
        Vendor::OpenAi => openai_tools(tools, false),
        Vendor::OpenAiStrict => openai_tools(tools, true),
        Vendor::Anthropic => anthropic_tools(tools),
        Vendor::Gemini => gemini_tools(tools),
    }
}

/// Export tools in a vendor's format, serialized: the JSON text to put under the
/// request's `tools` key (for Gemini, one element of `tools`). It equals
/// `export(vendor, tools).to_string()` as JSON, but is what a model request needs and is
/// much cheaper: OpenAI (plain) and Anthropic tools are written straight from the spec
/// without cloning a schema, and the strict OpenAI and Gemini rewrites are computed once
/// per tool and kept with it, since an agent sends the same tools on every turn.
pub fn export_json<'a>(vendor: Vendor, tools: impl IntoIterator<Item = &'a Tool>) -> String {
    let mut out = Vec::with_capacity(8192);
    if vendor == Vendor::Gemini {
        out.extend_from_slice(b"{\"functionDeclarations\":");
    }
    out.push(b'[');
    for (i, t) in tools.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let s = t.spec();
        let (name, description) = (s.name.as_str(), s.description.trim());
        let params = SchemaView(&s.input_schema);
        let written = match vendor {
            Vendor::OpenAi => serde_json::to_writer(
                &mut out,
                &OpenAiView {
                    kind: "function",
                    function: FunctionView {
                        name,
                        description,
                        parameters: params,
                        strict: false,
                    },
                },
            ),
            Vendor::OpenAiStrict => serde_json::to_writer(
                &mut out,
                t.exports()
                    .openai_strict
                    .get_or_init(|| openai_tool(s, true)),
            ),
            Vendor::Anthropic => serde_json::to_writer(
                &mut out,
                &AnthropicView {
                    name,
                    description,
                    input_schema: params,
                },
            ),
            Vendor::Gemini => serde_json::to_writer(
                &mut out,
                t.exports()
                    .gemini
                    .get_or_init(|| gemini_function_declaration(s)),
            ),
        };
        // Writing JSON values and plain structs into a Vec cannot fail.
        debug_assert!(written.is_ok(), "{written:?}");
    }
    out.push(b']');
    if vendor == Vendor::Gemini {
        out.push(b'}');
    }
    // serde_json writes UTF-8 only.
    String::from_utf8(out).unwrap_or_default()
}

/// Rewrites computed once per tool for [`export_json`].
#[derive(Debug, Default)]
pub(crate) struct ExportCache {
    openai_strict: std::sync::OnceLock<Value>,
    gemini: std::sync::OnceLock<Value>,
}

#[derive(serde::Serialize)]
struct OpenAiView<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionView<'a>,
}

#[derive(serde::Serialize)]
struct FunctionView<'a> {
    name: &'a str,
    description: &'a str,
    parameters: SchemaView<'a>,
    strict: bool,
}

#[derive(serde::Serialize)]
struct AnthropicView<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: SchemaView<'a>,
}

/// A borrowed input schema written as both vendors want it: without `$schema`, and with
/// `type: "object"` on a root that has no type (see `plain_parameters`).
struct SchemaView<'a>(&'a Value);

impl serde::Serialize for SchemaView<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(map) = self.0 else {
            return self.0.serialize(serializer);
        };
        let mut m = serializer.serialize_map(None)?;
        if !map.contains_key("type") {
            m.serialize_entry("type", "object")?;
        }
        for (k, v) in map {
            if k != "$schema" {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

// ---------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------

/// How deep schema rewrites and walks may go before giving up; generated schemas are
/// far shallower, so hitting this means a cycle the other guards did not catch.
pub(crate) const MAX_SCHEMA_DEPTH: usize = 48;

/// `base.key`, or `key` when `base` is empty.
pub(crate) fn join_path(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_owned()
    } else {
        format!("{base}.{key}")
    }
}

/// `base[i]`.
pub(crate) fn index_path(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// Resolve a local `#/...` reference against the root schema.
pub(crate) fn resolve_local_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

/// Whether `schema` accepts `null`: every constraint present must allow it (`type`,
/// `enum`, `const`, `$ref`, `allOf`), and a union must have a branch that does. A schema
/// without any of these constraints accepts anything, null included. OpenAPI's
/// `nullable: true` counts too.
pub(crate) fn accepts_null(root: &Value, schema: &Value, depth: usize) -> bool {
    if depth > MAX_SCHEMA_DEPTH {
        return false;
    }
    let obj = match schema {
        Value::Bool(b) => return *b,
        Value::Object(obj) => obj,
        _ => return false,
    };
    if obj.get("nullable") == Some(&Value::Bool(true)) {
        return true;
    }
    if let Some(t) = obj.get("type") {
        let ok = match t {
            Value::String(s) => s == "null",
            Value::Array(types) => types.iter().any(|t| t == "null"),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    if let Some(Value::Array(values)) = obj.get("enum")
        && !values.iter().any(Value::is_null)
    {
        return false;
    }
    if let Some(c) = obj.get("const")
        && !c.is_null()
    {
        return false;
    }
    if let Some(Value::String(r)) = obj.get("$ref") {
        match resolve_local_ref(root, r) {
            Some(target) if accepts_null(root, target, depth + 1) => {}
            _ => return false,
        }
    }
    if let Some(Value::Array(all)) = obj.get("allOf")
        && !all.iter().all(|s| accepts_null(root, s, depth + 1))
    {
        return false;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = obj.get(key)
            && !branches.iter().any(|s| accepts_null(root, s, depth + 1))
        {
            return false;
        }
    }
    true
}

/// Whether a union branch is exactly "null" (`{"type": "null"}` and friends).
pub(crate) fn is_null_schema(schema: &Value) -> bool {
    let Some(obj) = schema.as_object() else {
        return false;
    };
    match obj.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => !types.is_empty() && types.iter().all(|t| t == "null"),
        _ => match (obj.get("const"), obj.get("enum")) {
            (Some(Value::Null), _) => true,
            (_, Some(Value::Array(values))) => {
                !values.is_empty() && values.iter().all(Value::is_null)
            }
            _ => false,
        },
    }
}

/// Merge the branches of an `allOf` into `map`, resolving branches that are `$ref`s.
///
/// Neither OpenAI's strict mode nor Gemini support `allOf`. For the object schemas
/// generators emit (`#[serde(flatten)]`, a `$ref` wrapped to carry a description) the
/// conjunction is the union of the properties and of the `required` lists; for any
/// other keyword the schema's own value wins, then the first branch's.
pub(crate) fn merge_all_of(root: &Value, map: &mut Map<String, Value>, depth: usize) {
    let Some(Value::Array(branches)) = map.remove("allOf") else {
        return;
    };
    for branch in branches {
        let mut branch = branch;
        // A branch that is itself `{"$ref": ...}` (possibly with its own allOf) is
        // flattened first, so its properties merge like an inline one's.
        for _ in 0..MAX_SCHEMA_DEPTH {
            let Some(Value::String(r)) = branch.get("$ref").cloned() else {
                break;
            };
            let Some(Value::Object(target)) = resolve_local_ref(root, &r).cloned() else {
                break;
            };
            let Some(obj) = branch.as_object_mut() else {
                break;
            };
            obj.remove("$ref");
            for (k, v) in target {
                obj.entry(k).or_insert(v);
            }
        }
        if let Some(obj) = branch.as_object_mut()
            && depth < MAX_SCHEMA_DEPTH
        {
            merge_all_of(root, obj, depth + 1);
        }
        let Value::Object(branch) = branch else {
            continue;
        };
        for (key, value) in branch {
            match (key.as_str(), map.get_mut(&key), value) {
                ("properties", Some(Value::Object(props)), Value::Object(more)) => {
                    for (name, s) in more {
                        props.entry(name).or_insert(s);
                    }
                }
                ("required", Some(Value::Array(req)), Value::Array(more)) => {
                    for name in more {
                        if !req.contains(&name) {
                            req.push(name);
                        }
                    }
                }
                (_, Some(_), _) => {}
                (_, None, value) => {
                    map.insert(key, value);
                }
            }
        }
    }
}

/// Append a sentence to a schema's `description`, creating it if needed.
pub(crate) fn append_description(map: &mut Map<String, Value>, note: &str) {
    let text = match map.get("description") {
        Some(Value::String(d)) if !d.trim().is_empty() => {
            let d = d.trim_end();
            if d.ends_with(['.', '!', '?', ':']) {
                format!("{d} {note}")
            } else {
                format!("{d}. {note}")
            }
        }
        _ => note.to_owned(),
    };
    map.insert("description".into(), Value::String(text));
}

/// Turn a schema's `default` into a sentence of its description.
///
/// Neither OpenAI strict mode nor Gemini use `default` (OpenAI rejects it, Gemini
/// accepts and ignores it), yet the model benefits from knowing it. In OpenAI strict
/// mode an optional argument is sent as `null`, which [`strip_nulls_for_optional`]
/// removes so the pipeline applies this default.
pub(crate) fn default_to_description(map: &mut Map<String, Value>) {
    if let Some(default) = map.remove("default") {
        let shown = crate::schema::truncate_json(&default, 200);
        append_description(map, &format!("Default: {shown}."));
    }
}

/// The tool description to export: the spec's, with surrounding whitespace trimmed.
pub(crate) fn tool_description(tool_description: &str) -> Value {
    Value::String(tool_description.trim().to_owned())
}

/// Read a required string field of a vendor message.
pub(crate) fn required_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    base: &str,
    what: &str,
) -> Result<&'a str, FormatError> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(FormatError::new(
            join_path(base, key),
            format!("{what} is an empty string; it must name {}", name_hint(key)),
        )),
        None | Some(Value::Null) => Err(FormatError::new(
            join_path(base, key),
            format!("{what} is missing; every call needs a string `{key}`"),
        )),
        Some(other) => Err(FormatError::new(
            join_path(base, key),
            format!(
                "{what} must be a string, got {}",
                crate::schema::kind_of(other)
            ),
        )),
    }
}

fn name_hint(key: &str) -> &'static str {
    match key {
        "name" => "the tool to call",
        _ => "the call",
    }
}

/// Check that already-decoded arguments are a JSON object.
pub(crate) fn object_args(value: Value, path: &str) -> Result<Value, FormatError> {
    match value {
        Value::Object(_) => Ok(value),
        other => Err(FormatError::new(
            path,
            format!(
                "tool arguments must be a JSON object like {{\"name\": value}}, got {}: {}",
                crate::schema::kind_of(&other),
                crate::schema::truncate_json(&other, 80)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn export_json_equals_export_for_every_vendor() {
        let mut tools = fixtures::tools();
        // A root without `type` and with `$schema` exercises the borrowed view.
        tools.push(fixtures::tool(
            "untyped_root",
            "d",
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
                   "properties": {"a": {"type": "string"}}}),
        ));
        for v in Vendor::ALL {
            let text = export_json(v, tools.iter());
            let parsed: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(parsed, export(v, tools.iter()), "{v}");
            // The cached rewrites give the same answer the second time.
            assert_eq!(export_json(v, tools.iter()), text, "{v}");
        }
    }

    #[test]
    fn vendor_names_round_trip() {
        for v in Vendor::ALL {
            assert_eq!(v.as_str().parse::<Vendor>().unwrap(), v);
            assert_eq!(v.to_string(), v.as_str());
        }
        assert_eq!(
            "OpenAI_Strict".parse::<Vendor>().unwrap(),
            Vendor::OpenAiStrict
        );
        let err = "claude".parse::<Vendor>().unwrap_err();
        assert_eq!(err.path, "vendor");
        assert!(
            err.message
                .contains("openai, openai-strict, anthropic, gemini"),
            "{err}"
        );
        assert!(err.message.contains("`claude`"), "{err}");
    }

    #[test]
    fn export_dispatches_per_vendor() {
        let tools = fixtures::tools();
        let openai = export(Vendor::OpenAi, &tools);
        assert_eq!(openai[0]["function"]["strict"], json!(false));
        let strict = export(Vendor::OpenAiStrict, &tools);
        assert_eq!(strict[0]["function"]["strict"], json!(true));
        let anthropic = export(Vendor::Anthropic, &tools);
        assert_eq!(anthropic[0]["name"], json!("search"));
        let gemini = export(Vendor::Gemini, &tools);
        assert_eq!(
            gemini["functionDeclarations"].as_array().unwrap().len(),
            tools.len()
        );
    }

    #[test]
    fn null_acceptance() {
        let root = json!({"$defs": {"N": {"type": "null"}, "S": {"type": "string"}}});
        for yes in [
            json!({}),
            json!(true),
            json!({"type": ["string", "null"]}),
            json!({"anyOf": [{"$ref": "#/$defs/S"}, {"type": "null"}]}),
            json!({"$ref": "#/$defs/N"}),
            json!({"enum": ["a", null]}),
            json!({"type": "string", "nullable": true}),
            json!({"description": "anything"}),
        ] {
            assert!(accepts_null(&root, &yes, 0), "{yes}");
        }
        for no in [
            json!({"type": "string"}),
            json!({"$ref": "#/$defs/S"}),
            json!({"enum": ["a"]}),
            json!({"const": "a"}),
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"type": ["string", "null"], "enum": ["a"]}),
            json!(false),
        ] {
            assert!(!accepts_null(&root, &no, 0), "{no}");
        }
    }

    #[test]
    fn all_of_merges_properties_and_required() {
        let root = json!({"$defs": {"Base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}});
        let mut map = json!({
            "type": "object",
            "properties": {"extra": {"type": "integer"}},
            "required": ["extra"],
            "allOf": [{"$ref": "#/$defs/Base"}, {"description": "later"}]
        })
        .as_object()
        .cloned()
        .unwrap();
        merge_all_of(&root, &mut map, 0);
        assert_eq!(
            Value::Object(map),
            json!({
                "type": "object",
                "description": "later",
                "properties": {"extra": {"type": "integer"}, "id": {"type": "string"}},
                "required": ["extra", "id"]
            })
        );
    }

    #[test]
    fn descriptions_get_notes() {
        let mut m = Map::new();
        append_description(&mut m, "Default: 1.");
        assert_eq!(m["description"], json!("Default: 1."));
        let mut m = json!({"description": "Page number", "default": 2})
            .as_object()
            .cloned()
            .unwrap();
        default_to_description(&mut m);
        assert_eq!(m["description"], json!("Page number. Default: 2."));
        assert!(!m.contains_key("default"));
    }
}
