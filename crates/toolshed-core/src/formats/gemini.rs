//! Gemini function calling: `functionDeclarations`, parsing `functionCall` parts, and
//! `functionResponse` parts.
//!
//! # Schema rewrite
//!
//! Gemini's `parameters` is a subset of the OpenAPI 3.0 Schema object, not JSON
//! Schema. Its fields are `type`, `format`, `title`, `description`, `nullable`,
//! `enum`, `properties`, `required`, `minProperties`, `maxProperties`, `items`,
//! `minItems`, `maxItems`, `minLength`, `maxLength`, `pattern`, `minimum`, `maximum`,
//! `anyOf`, `propertyOrdering`, `example` and `default`. [`gemini_schema`] rewrites a
//! JSON Schema into it, each rule for the reason given:
//!
//! - one `type` per schema: `type: [T, "null"]` becomes `type: T, nullable: true`, and
//!   several non-null types become an `anyOf` of one-type schemas;
//! - `anyOf: [X, {"type": "null"}]` (schemars' `Option<Struct>`) becomes `X` with
//!   `nullable: true`; a `null` in an `enum` becomes `nullable: true` as well;
//! - no references: every `$ref` is inlined from `$defs`/`definitions`, the referring
//!   schema's own keywords (its description) winning. A recursive reference (one
//!   already being expanded, or nested deeper than 8 references) becomes a plain
//!   `{"type": "object"}` whose description says it was not expanded;
//! - `oneOf` becomes `anyOf` (only `anyOf` exists; the variants of a tagged enum are
//!   disjoint, so they mean the same), and `allOf` is merged into its schema;
//! - `enum` holds strings only: a non-string enum is dropped and its values listed in
//!   the description; `const` becomes a one-value `enum` (or a description sentence);
//! - `format` for integers is `int32` or `int64` only. schemars' `int8`, `int16`,
//!   `uint8`, `uint16` fit `int32`; `uint32` does not (it goes to 4294967295), so it
//!   and every wider format (`uint64`, `int`, `uint`, `int128`, ...) map to `int64`,
//!   the widest there is; the `minimum: 0` schemars emits for unsigned types is kept.
//!   For numbers only `float` and `double` exist; other formats are dropped. For
//!   strings only `date-time` and `enum` are safe (older endpoints reject others with
//!   "only 'enum' and 'date-time' are supported for STRING type"), so another string
//!   format moves into the description (`Format: email.`);
//! - `exclusiveMinimum`/`exclusiveMaximum` do not exist: for integers they become the
//!   next `minimum`/`maximum` inward, for numbers the inclusive bound (slightly looser);
//! - `default` is accepted but ignored by Gemini, so it becomes a `Default: …` sentence
//!   of the description, which the model does read;
//! - a tuple (`prefixItems`) becomes an array whose `items` is an `anyOf` of the
//!   element schemas;
//! - everything else is dropped: `$schema`, `$defs`, `additionalProperties` (Gemini has
//!   no maps; an object with free-form keys keeps `type: object` and says so in its
//!   description), `uniqueItems`, `multipleOf`, `examples`, `not`, `if`/`then`/`else`...
//!   The pipeline still validates calls against the original schema.
//!
//! A tool without parameters is declared without `parameters`: Gemini rejects an
//! object schema whose `properties` is empty.

use serde_json::{Map, Value, json};

use super::{
    FormatError, MAX_SCHEMA_DEPTH, append_description, default_to_description, index_path,
    is_null_schema, join_path, merge_all_of, object_args, required_str, resolve_local_ref,
    tool_description,
};
use crate::pipeline::{CallOutcome, ToolCall};
use crate::schema::{kind_of, normalize_nullable, truncate_json};
use crate::spec::ToolSpec;
use crate::tool::Tool;

/// Ids made up for calls that came without one start with this.
pub const GENERATED_ID_PREFIX: &str = "gemini_call_";

/// How many `$ref`s deep an expansion may go before it is cut off, recursive or not.
const MAX_REF_DEPTH: usize = 8;

/// One function declaration: `{"name", "description", "parameters"}`, the parameters
/// rewritten by [`gemini_schema`] and left out for a tool without any.
pub fn gemini_function_declaration(spec: &ToolSpec) -> Value {
    let parameters = gemini_schema(&spec.input_schema);
    let has_parameters = parameters
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
        || parameters.get("anyOf").is_some();
    let mut decl = Map::new();
    decl.insert("name".into(), Value::String(spec.name.as_str().to_owned()));
    decl.insert("description".into(), tool_description(&spec.description));
    if has_parameters {
        decl.insert("parameters".into(), parameters);
    }
    Value::Object(decl)
}

/// Every tool, in order, as one Gemini tool: `{"functionDeclarations": [...]}`, an
/// element of a `generateContent` request's `tools` array.
pub fn gemini_tools<'a>(tools: impl IntoIterator<Item = &'a Tool>) -> Value {
    let declarations: Vec<Value> = tools
        .into_iter()
        .map(|t| gemini_function_declaration(t.spec()))
        .collect();
    json!({ "functionDeclarations": declarations })
}

/// Rewrite a JSON Schema into Gemini's OpenAPI subset (see the module docs for the
/// rules and why). The root always has `type: "object"`: Gemini requires it of
/// function parameters, and tool arguments are objects.
pub fn gemini_schema(schema: &Value) -> Value {
    let mut root = schema.clone();
    // OpenAPI's `nullable: true` (tool.yaml) is first normalized to JSON Schema so that
    // every nullable spelling goes through the same rules below.
    normalize_nullable(&mut root);
    let mut rewrite = Rewrite {
        root: &root,
        expanding: Vec::new(),
    };
    let mut out = rewrite.node(&root, 0);
    if let Value::Object(map) = &mut out {
        map.entry("type")
            .or_insert_with(|| Value::String("object".into()));
    }
    out
}

/// The rewrite of one schema tree.
struct Rewrite<'a> {
    /// The whole (normalized) input schema, for resolving `$ref`s.
    root: &'a Value,
    /// The references being expanded, outermost first, to spot recursion.
    expanding: Vec<String>,
}

impl Rewrite<'_> {
    fn node(&mut self, schema: &Value, depth: usize) -> Value {
        let Value::Object(source) = schema else {
            // `true` / `false`: there is no "any value" schema; leave it untyped.
            return json!({"description": "Any JSON value."});
        };
        let mut map = source.clone();
        if depth > MAX_SCHEMA_DEPTH {
            return placeholder(&map, "the schema nests too deeply to be expanded");
        }
        merge_all_of(self.root, &mut map, 0);
        if let Some(one_of) = map.remove("oneOf") {
            map.entry("anyOf").or_insert(one_of);
        }

        // `anyOf: [X, null]`: X, nullable.
        if let Some(Value::Array(branches)) = map.get("anyOf")
            && branches.iter().any(is_null_schema)
        {
            let rest: Vec<Value> = branches
                .iter()
                .filter(|b| !is_null_schema(b))
                .cloned()
                .collect();
            map.remove("anyOf");
            match rest.as_slice() {
                [] => {}
                [Value::Object(only)] => {
                    for (k, v) in only {
                        map.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                [_] => {}
                _ => {
                    map.insert("anyOf".into(), Value::Array(rest));
                }
            }
            let mut out = self.node(&Value::Object(map), depth + 1);
            set_nullable(&mut out);
            return out;
        }

        // No `$ref` in Gemini: inline the target, the referring schema's keywords first.
        if let Some(Value::String(reference)) = map.remove("$ref") {
            let name = reference
                .rsplit('/')
                .next()
                .unwrap_or(&reference)
                .to_owned();
            if self.expanding.contains(&reference) {
                return placeholder(
                    &map,
                    &format!(
                        "A nested `{name}`, with the same fields as the enclosing `{name}` \
                         (recursive, so not expanded here)."
                    ),
                );
            }
            if self.expanding.len() >= MAX_REF_DEPTH {
                return placeholder(
                    &map,
                    &format!("A `{name}` object (nested too deeply to be expanded here)."),
                );
            }
            match resolve_local_ref(self.root, &reference) {
                Some(Value::Object(target)) => {
                    for (k, v) in target {
                        map.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                // Compiling the tool rejects unresolvable references; be safe anyway.
                _ => return placeholder(&map, &format!("A `{name}` value.")),
            }
            self.expanding.push(reference);
            let out = self.node(&Value::Object(map), depth + 1);
            self.expanding.pop();
            return out;
        }

        self.plain(map, depth)
    }

    /// A schema without `$ref`, `oneOf`, `allOf` or null branches.
    fn plain(&mut self, mut map: Map<String, Value>, depth: usize) -> Value {
        let mut out = Map::new();
        let mut nullable = false;
        let mut types: Vec<String> = match map.get("type") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        if types.iter().any(|t| t == "null") {
            nullable = true;
            types.retain(|t| t != "null");
        }
        // `default` is ignored by Gemini; the model reads it in the description.
        default_to_description(&mut map);
        for key in ["title", "description"] {
            if let Some(v @ Value::String(_)) = map.get(key) {
                out.insert(key.into(), v.clone());
            }
        }

        // One type per schema: several become an `anyOf` of one-type copies.
        if types.len() > 1 {
            let branches: Vec<Value> = types
                .iter()
                .map(|t| {
                    let mut copy = map.clone();
                    for key in ["title", "description", "default", "anyOf"] {
                        copy.remove(key);
                    }
                    copy.insert("type".into(), Value::String(t.clone()));
                    self.plain(copy, depth + 1)
                })
                .collect();
            out.insert("anyOf".into(), Value::Array(branches));
            if nullable {
                out.insert("nullable".into(), Value::Bool(true));
            }
            return Value::Object(out);
        }

        // `const` is a one-value enum.
        if let Some(c) = map.remove("const") {
            if c.is_null() {
                nullable = true;
            } else {
                map.insert("enum".into(), Value::Array(vec![c]));
            }
        }
        if let Some(Value::Array(values)) = map.remove("enum") {
            if values.iter().any(Value::is_null) {
                nullable = true;
            }
            let values: Vec<Value> = values.into_iter().filter(|v| !v.is_null()).collect();
            if !values.is_empty() && values.iter().all(Value::is_string) {
                out.insert("enum".into(), Value::Array(values));
                if types.is_empty() {
                    types.push("string".into());
                }
            } else if !values.is_empty() {
                // Gemini enums hold strings only; say it in words instead, and keep
                // the type the values share.
                if types.is_empty()
                    && let Some(t) = shared_type(&values)
                {
                    types.push(t.into());
                }
                let listed: Vec<String> = values.iter().map(|v| truncate_json(v, 40)).collect();
                let note = if values.len() == 1 {
                    format!("Must be {}.", listed[0])
                } else {
                    format!("One of: {}.", listed.join(", "))
                };
                append_description(&mut out, &note);
            }
        }

        // A schema without a type says what it is by its keywords.
        if types.is_empty() {
            if map.contains_key("properties") {
                types.push("object".into());
            } else if map.contains_key("items") || map.contains_key("prefixItems") {
                types.push("array".into());
            }
        }
        let ty = types.first().cloned();
        if let Some(t) = &ty {
            out.insert("type".into(), Value::String(t.clone()));
        }
        match ty.as_deref() {
            Some("object") => self.object(&map, &mut out, depth),
            Some("array") => self.array(&map, &mut out, depth),
            Some("string") => {
                copy_keys(&map, &mut out, &["minLength", "maxLength", "pattern"]);
                if let Some(Value::String(f)) = map.get("format") {
                    if f == "date-time" || f == "enum" {
                        out.insert("format".into(), Value::String(f.clone()));
                    } else {
                        append_description(&mut out, &format!("Format: {f}."));
                    }
                }
            }
            Some(t @ ("integer" | "number")) => {
                let integer = t == "integer";
                copy_keys(&map, &mut out, &["minimum", "maximum"]);
                bound(&map, &mut out, "exclusiveMinimum", "minimum", integer, 1.0);
                bound(&map, &mut out, "exclusiveMaximum", "maximum", integer, -1.0);
                let format = map.get("format").and_then(Value::as_str).and_then(|f| {
                    if integer {
                        integer_format(f)
                    } else {
                        number_format(f)
                    }
                });
                if let Some(f) = format {
                    out.insert("format".into(), Value::String(f.into()));
                }
            }
            _ => {}
        }

        if let Some(Value::Array(branches)) = map.get("anyOf") {
            let rewritten: Vec<Value> = branches.iter().map(|b| self.node(b, depth + 1)).collect();
            out.insert("anyOf".into(), Value::Array(rewritten));
        }
        if nullable {
            out.insert("nullable".into(), Value::Bool(true));
        }
        Value::Object(out)
    }

    fn object(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>, depth: usize) {
        let props = map.get("properties").and_then(Value::as_object);
        match props {
            Some(props) if !props.is_empty() => {
                let mut rewritten = Map::new();
                for (name, prop) in props {
                    rewritten.insert(name.clone(), self.node(prop, depth + 1));
                }
                out.insert("properties".into(), Value::Object(rewritten));
                if let Some(Value::Array(required)) = map.get("required") {
                    // Only names that are properties: Gemini checks them.
                    let required: Vec<Value> = required
                        .iter()
                        .filter(|n| n.as_str().is_some_and(|n| props.contains_key(n)))
                        .cloned()
                        .collect();
                    if !required.is_empty() {
                        out.insert("required".into(), Value::Array(required));
                    }
                }
            }
            // No `properties` key at all: an empty one is rejected for OBJECT.
            _ => {
                let open = !matches!(
                    map.get("additionalProperties"),
                    None | Some(Value::Bool(false))
                ) || map.contains_key("patternProperties");
                if open {
                    append_description(out, "An object with free-form keys.");
                }
            }
        }
        copy_keys(map, out, &["minProperties", "maxProperties"]);
    }

    fn array(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>, depth: usize) {
        let items = match (map.get("prefixItems"), map.get("items")) {
            // A tuple: each element is one of the element schemas.
            (Some(Value::Array(prefix)), _) if !prefix.is_empty() => {
                let rewritten: Vec<Value> =
                    prefix.iter().map(|p| self.node(p, depth + 1)).collect();
                if rewritten.len() == 1 || rewritten.iter().all(|r| *r == rewritten[0]) {
                    rewritten[0].clone()
                } else {
                    json!({ "anyOf": rewritten })
                }
            }
            (_, Some(items @ Value::Object(_))) => self.node(items, depth + 1),
            // No item schema: any elements.
            _ => json!({"description": "Any JSON value."}),
        };
        out.insert("items".into(), items);
        copy_keys(map, out, &["minItems", "maxItems"]);
    }
}

/// The JSON type every value has, if they share one (integers count as numbers when
/// mixed with other numbers).
fn shared_type(values: &[Value]) -> Option<&'static str> {
    let type_of = |v: &Value| match v {
        Value::Bool(_) => Some("boolean"),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some("integer"),
        Value::Number(_) => Some("number"),
        Value::String(_) => Some("string"),
        _ => None,
    };
    let mut shared = type_of(values.first()?)?;
    for v in &values[1..] {
        match (shared, type_of(v)?) {
            (a, b) if a == b => {}
            ("integer", "number") | ("number", "integer") => shared = "number",
            _ => return None,
        }
    }
    Some(shared)
}

/// A stand-in for a schema that is not expanded: a plain object, the reason in its
/// description (after the referring schema's own description, if any).
fn placeholder(map: &Map<String, Value>, note: &str) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), Value::String("object".into()));
    if let Some(d @ Value::String(_)) = map.get("description") {
        out.insert("description".into(), d.clone());
    }
    append_description(&mut out, note);
    Value::Object(out)
}

fn set_nullable(schema: &mut Value) {
    if let Value::Object(map) = schema {
        map.insert("nullable".into(), Value::Bool(true));
    }
}

fn copy_keys(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(v) = from.get(*key) {
            to.insert((*key).into(), v.clone());
        }
    }
}

/// Turn an exclusive bound into an inclusive one, unless an inclusive one is given:
/// one step inward for integers, the bound itself for numbers.
fn bound(
    from: &Map<String, Value>,
    to: &mut Map<String, Value>,
    exclusive: &str,
    inclusive: &str,
    integer: bool,
    step: f64,
) {
    if to.contains_key(inclusive) {
        return;
    }
    let Some(limit) = from.get(exclusive).and_then(Value::as_f64) else {
        return;
    };
    let value = if integer {
        let inward = if step > 0.0 {
            limit.floor() + 1.0
        } else {
            limit.ceil() - 1.0
        };
        // Whole numbers stay integers in the JSON.
        json!(inward as i64)
    } else {
        from.get(exclusive).cloned().unwrap_or(json!(limit))
    };
    to.insert(inclusive.into(), value);
}

/// Map a JSON Schema integer format (schemars spelling) to Gemini's `int32`/`int64`.
fn integer_format(format: &str) -> Option<&'static str> {
    match format {
        "int8" | "int16" | "int32" | "uint8" | "uint16" => Some("int32"),
        "int64" | "uint32" | "uint64" | "int" | "uint" | "int128" | "uint128" => Some("int64"),
        _ => None,
    }
}

/// Gemini's number formats are `float` and `double`.
fn number_format(format: &str) -> Option<&'static str> {
    match format {
        "float" => Some("float"),
        "double" => Some("double"),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------
// Parsing function calls
// ---------------------------------------------------------------------------------

/// Read the function calls out of a Gemini model turn.
///
/// Accepted shapes: a `Content`, `{"role": "model", "parts": [{"text": ..},
/// {"functionCall": {"name", "args", "id"?}}]}`; a whole `generateContent` response
/// (the calls of `candidates[0].content`); or a bare `parts` array. Missing `args` mean
/// `{}`. Calls without an `id` get `gemini_call_<n>`, `n` counting the calls of this
/// turn from 0, so the same turn always yields the same ids.
///
/// Keep the model's turn as it came (including any `thoughtSignature`) when sending
/// it back in the history; only the calls are read here.
pub fn parse_gemini_function_calls(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let (content, base) = match message {
        Value::Array(parts) => return parse_parts(parts, ""),
        Value::Object(obj) if obj.contains_key("candidates") => {
            let Some(first) = obj
                .get("candidates")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
            else {
                return Err(FormatError::new(
                    "candidates",
                    "no candidates in the response; the prompt may have been blocked \
                     (see `promptFeedback`)",
                ));
            };
            match first.get("content") {
                Some(content) => (content, "candidates[0].content"),
                None => {
                    let reason = first
                        .get("finishReason")
                        .map(|r| format!(" (finishReason {r})"))
                        .unwrap_or_default();
                    return Err(FormatError::new(
                        "candidates[0].content",
                        format!("missing{reason}; the candidate has no content to read"),
                    ));
                }
            }
        }
        other => (other, ""),
    };
    let Some(obj) = content.as_object() else {
        return Err(FormatError::new(
            if base.is_empty() { "message" } else { base },
            format!(
                "expected a model turn {{\"role\": \"model\", \"parts\": [...]}}, got {}",
                kind_of(content)
            ),
        ));
    };
    match obj.get("parts") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(parts)) => parse_parts(parts, &join_path(base, "parts")),
        Some(other) => Err(FormatError::new(
            join_path(base, "parts"),
            format!("must be an array of parts, got {}", kind_of(other)),
        )),
    }
}

fn parse_parts(parts: &[Value], base: &str) -> Result<Vec<ToolCall>, FormatError> {
    let mut calls = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let path = index_path(base, i);
        let Some(part) = part.as_object() else {
            return Err(FormatError::new(
                path,
                format!("a part must be an object, got {}", kind_of(part)),
            ));
        };
        // REST JSON spells it `functionCall`; SDK dumps may use `function_call`.
        let (key, call) = match (part.get("functionCall"), part.get("function_call")) {
            (Some(call), _) => ("functionCall", call),
            (None, Some(call)) => ("function_call", call),
            (None, None) => continue,
        };
        let call_path = join_path(&path, key);
        let Some(call) = call.as_object() else {
            return Err(FormatError::new(
                call_path,
                format!(
                    "must be an object {{\"name\", \"args\"}}, got {}",
                    kind_of(call)
                ),
            ));
        };
        let name = required_str(call, "name", &call_path, "the function name")?;
        let args = match call.get("args") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(args) => object_args(args.clone(), &join_path(&call_path, "args"))?,
        };
        let id = match call.get("id") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            None | Some(Value::Null) | Some(Value::String(_)) => {
                format!("{GENERATED_ID_PREFIX}{}", calls.len())
            }
            Some(other) => {
                return Err(FormatError::new(
                    join_path(&call_path, "id"),
                    format!("must be a string when given, got {}", kind_of(other)),
                ));
            }
        };
        calls.push(ToolCall {
            id,
            name: name.to_owned(),
            args,
        });
    }
    Ok(calls)
}

/// The part that answers a call, for the next `user` turn:
/// `{"functionResponse": {"name", "response", "id"?}}`.
///
/// An object result is the response as is; any other result is wrapped as
/// `{"result": ...}` (the response must be an object); a failure is
/// `{"error": {"code", "message", "details"?}}`, the key Gemini documents for errors.
/// The call's `id` is echoed when Gemini gave one (ids toolshed made up, starting with
/// [`GENERATED_ID_PREFIX`], are not Gemini's and are left out).
pub fn gemini_function_response_part(outcome: &CallOutcome) -> Value {
    let response = match &outcome.result {
        Ok(Value::Object(map)) => Value::Object(map.clone()),
        Ok(other) => json!({ "result": other }),
        Err(err) => {
            let mut error = Map::new();
            error.insert("code".into(), Value::String(err.code.as_str().into()));
            error.insert("message".into(), Value::String(err.message.clone()));
            if let Some(details) = &err.details {
                error.insert("details".into(), details.clone());
            }
            json!({ "error": error })
        }
    };
    let mut function_response = Map::new();
    if !outcome.tool_call_id.starts_with(GENERATED_ID_PREFIX) {
        function_response.insert("id".into(), Value::String(outcome.tool_call_id.to_string()));
    }
    function_response.insert("name".into(), Value::String(outcome.tool_name.to_string()));
    function_response.insert("response".into(), response);
    json!({ "functionResponse": function_response })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::error::{ErrorCode, ToolError};
    use crate::formats::fixtures;

    /// The Schema fields Gemini documents.
    const GEMINI_KEYWORDS: &[&str] = &[
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "anyOf",
        "propertyOrdering",
        "example",
        "default",
    ];

    fn assert_gemini_invariants(schema: &Value) {
        assert_eq!(schema["type"], "object", "parameters must be an object");
        let mut nodes = Vec::new();
        super::super::fixtures::walk_schema(schema, "parameters".into(), &mut nodes);
        for (path, node) in nodes {
            let map = node
                .as_object()
                .unwrap_or_else(|| panic!("{path}: not an object"));
            for key in map.keys() {
                assert!(
                    GEMINI_KEYWORDS.contains(&key.as_str()),
                    "{path}: unsupported keyword `{key}`"
                );
            }
            if let Some(t) = map.get("type") {
                assert!(t.is_string(), "{path}: type must be one string, got {t}");
                assert_ne!(t, "null", "{path}: type null");
            }
            if let Some(Value::Array(branches)) = map.get("anyOf") {
                assert!(
                    !branches.iter().any(is_null_schema),
                    "{path}: anyOf with a null branch"
                );
            }
            if let Some(Value::Array(values)) = map.get("enum") {
                assert!(
                    values.iter().all(Value::is_string),
                    "{path}: enum of non-strings"
                );
            }
            if let Some(Value::String(f)) = map.get("format") {
                let ok = match map.get("type").and_then(Value::as_str) {
                    Some("integer") => ["int32", "int64"].contains(&f.as_str()),
                    Some("number") => ["float", "double"].contains(&f.as_str()),
                    Some("string") => ["date-time", "enum"].contains(&f.as_str()),
                    _ => false,
                };
                assert!(ok, "{path}: format {f}");
            }
            if let Some(Value::Object(props)) = map.get("properties") {
                assert!(!props.is_empty(), "{path}: empty properties");
            }
            if map.get("type") == Some(&json!("array")) {
                assert!(map.contains_key("items"), "{path}: array without items");
            }
        }
        let text = schema.to_string();
        assert!(!text.contains("\"$ref\""), "a $ref is left: {text}");
        assert!(!text.contains("\"$defs\""), "$defs are left: {text}");
    }

    fn rewrite(schema: &Value) -> Value {
        let out = gemini_schema(schema);
        assert_gemini_invariants(&out);
        out
    }

    #[test]
    fn search_snapshot() {
        let out = rewrite(&fixtures::search_schema());
        let props = &out["properties"];
        assert_eq!(props["limit"]["type"], "integer");
        assert_eq!(props["limit"]["nullable"], true);
        assert_eq!(
            props["limit"]["format"], "int64",
            "uint32 does not fit int32"
        );
        assert_eq!(
            props["weight"]["minimum"],
            json!(0),
            "exclusiveMinimum as inclusive"
        );
        // `$ref` + description: inlined, the field's description wins.
        assert_eq!(props["sort"]["description"], "The sort order.");
        assert_eq!(props["sort"]["enum"], json!(["asc", "desc"]));
        assert_eq!(props["then_by"]["nullable"], true);
        assert_eq!(props["then_by"]["enum"], json!(["asc", "desc"]));
        assert_eq!(props["page"]["description"], "Page number. Default: 1.");
        insta::assert_json_snapshot!("gemini_search", out);
    }

    #[test]
    fn order_snapshot() {
        let out = rewrite(&fixtures::order_schema());
        let props = &out["properties"];
        assert_eq!(props["billing"]["type"], "object");
        assert_eq!(props["billing"]["nullable"], true);
        assert_eq!(
            props["items"]["items"]["properties"]["qty"]["format"],
            "int64"
        );
        let shape = &props["shape"]["anyOf"];
        assert_eq!(shape[0]["properties"]["kind"]["enum"], json!(["circle"]));
        assert_eq!(shape[1]["properties"]["kind"]["enum"], json!(["rect"]));
        insta::assert_json_snapshot!("gemini_order", out);
    }

    #[test]
    fn recursion_is_cut_with_a_placeholder() {
        let out = rewrite(&fixtures::tree_schema());
        let node = &out["properties"]["root"];
        assert_eq!(node["properties"]["name"]["type"], "string");
        let child = &node["properties"]["children"]["items"];
        assert_eq!(child["type"], "object");
        assert!(child.get("properties").is_none());
        assert!(
            child["description"].as_str().unwrap().contains("recursive"),
            "{child}"
        );
        assert_eq!(out["properties"]["depth"]["format"], "int32");
        insta::assert_json_snapshot!("gemini_tree", out);

        // A chain of references deeper than the limit is cut too.
        let mut defs = Map::new();
        for i in 0..12 {
            defs.insert(
                format!("L{i}"),
                json!({"type": "object", "properties": {"next": {"$ref": format!("#/$defs/L{}", i + 1)}}}),
            );
        }
        defs.insert("L12".into(), json!({"type": "string"}));
        let deep = rewrite(
            &json!({"type": "object", "properties": {"start": {"$ref": "#/$defs/L0"}}, "$defs": defs}),
        );
        assert!(deep.to_string().contains("nested too deeply"), "{deep}");
    }

    #[test]
    fn real_schemars_output_meets_the_invariants() {
        let out = rewrite(&fixtures::schemars_schema());
        assert_eq!(out["properties"]["ship_to"]["nullable"], true);
        assert_eq!(out["properties"]["ship_to"]["type"], "object");
        assert_eq!(out["properties"]["limit"]["format"], "int64");
    }

    #[test]
    fn keyword_edge_cases() {
        let out = rewrite(&json!({
            "type": "object",
            "properties": {
                "id": {"type": ["string", "integer"], "description": "Either."},
                "maybe_id": {"type": ["string", "integer", "null"]},
                "level": {"type": "integer", "enum": [1, 2, 3]},
                "fixed": {"const": "v1"},
                "none": {"const": 7},
                "email": {"type": "string", "format": "email", "description": "Contact"},
                "pct": {"type": "integer", "format": "uint8", "exclusiveMaximum": 100},
                "ratio": {"type": "number", "format": "decimal"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "pair": fixtures::map_schema()["properties"]["pair"].clone(),
                "payload": true,
                "anything": {"type": "array"},
                "tracking": {"type": "string", "nullable": true},
                "choice": {"type": ["string", "null"], "enum": ["a", "b", null]}
            },
            "required": ["id", "ghost"]
        }));
        let p = &out["properties"];
        assert_eq!(
            p["id"]["anyOf"],
            json!([{"type": "string"}, {"type": "integer"}])
        );
        assert_eq!(p["id"]["description"], "Either.");
        assert_eq!(p["maybe_id"]["nullable"], true);
        assert_eq!(p["level"]["description"], "One of: 1, 2, 3.");
        assert!(p["level"].get("enum").is_none());
        assert_eq!(p["fixed"], json!({"type": "string", "enum": ["v1"]}));
        assert_eq!(
            p["none"],
            json!({"type": "integer", "description": "Must be 7."})
        );
        assert_eq!(p["email"]["description"], "Contact. Format: email.");
        assert_eq!(p["pct"]["maximum"], json!(99));
        assert_eq!(p["pct"]["format"], "int32");
        assert!(p["ratio"].get("format").is_none());
        assert_eq!(p["labels"]["description"], "An object with free-form keys.");
        assert_eq!(
            p["pair"]["items"]["anyOf"][0],
            json!({"type": "integer", "format": "int32", "minimum": 0, "maximum": 255})
        );
        assert_eq!(p["payload"], json!({"description": "Any JSON value."}));
        assert_eq!(
            p["anything"]["items"],
            json!({"description": "Any JSON value."})
        );
        assert_eq!(p["tracking"], json!({"type": "string", "nullable": true}));
        assert_eq!(
            p["choice"],
            json!({"type": "string", "enum": ["a", "b"], "nullable": true})
        );
        assert_eq!(out["required"], json!(["id"]), "unknown names dropped");
        insta::assert_json_snapshot!("gemini_edge_cases", out);
    }

    #[test]
    fn declarations_snapshot() {
        let tools = fixtures::tools();
        let exported = gemini_tools(&tools);
        let decls = exported["functionDeclarations"].as_array().unwrap();
        assert_eq!(decls.len(), 4);
        assert_eq!(decls[0]["name"], "search");
        assert!(
            decls[3].get("parameters").is_none(),
            "no-arg tool: no parameters"
        );
        // Only the wrapper is snapshotted here; the schemas have their own snapshots.
        let names: Vec<&Value> = decls.iter().map(|d| &d["name"]).collect();
        assert_eq!(
            names,
            [
                &json!("search"),
                &json!("place_order"),
                &json!("walk_tree"),
                &json!("ping")
            ]
        );
        insta::assert_json_snapshot!("gemini_ping_declaration", decls[3]);
    }

    #[test]
    fn parses_function_calls() {
        let content = json!({
            "role": "model",
            "parts": [
                {"text": "Looking it up."},
                {"functionCall": {"name": "search", "args": {"query": "rust"}}},
                {"functionCall": {"name": "ping"}},
                {"functionCall": {"name": "search", "args": {"query": "go"}, "id": "fc_7"}}
            ]
        });
        let calls = parse_gemini_function_calls(&content).unwrap();
        assert_eq!(
            calls,
            vec![
                ToolCall {
                    id: "gemini_call_0".into(),
                    name: "search".into(),
                    args: json!({"query": "rust"})
                },
                ToolCall {
                    id: "gemini_call_1".into(),
                    name: "ping".into(),
                    args: json!({})
                },
                ToolCall {
                    id: "fc_7".into(),
                    name: "search".into(),
                    args: json!({"query": "go"})
                },
            ]
        );
        let response = json!({"candidates": [{"content": content, "finishReason": "STOP"}]});
        assert_eq!(parse_gemini_function_calls(&response).unwrap(), calls);
        assert_eq!(
            parse_gemini_function_calls(&content["parts"]).unwrap(),
            calls
        );
        let snake = json!({"parts": [{"function_call": {"name": "ping", "args": {}}}]});
        assert_eq!(parse_gemini_function_calls(&snake).unwrap()[0].name, "ping");
        let text = json!({"role": "model", "parts": [{"text": "hi"}]});
        assert!(parse_gemini_function_calls(&text).unwrap().is_empty());
    }

    #[test]
    fn reports_bad_gemini_messages_with_paths() {
        let with = |part: Value| json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}, part]}}]});
        let cases = [
            (
                with(json!({"functionCall": {"name": "search", "args": "{\"q\":1}"}})),
                "candidates[0].content.parts[1].functionCall.args",
                "must be a JSON object",
            ),
            (
                with(json!({"functionCall": {"name": "search", "args": [1]}})),
                "candidates[0].content.parts[1].functionCall.args",
                "got an array",
            ),
            (
                with(json!({"functionCall": {"args": {}}})),
                "candidates[0].content.parts[1].functionCall.name",
                "missing",
            ),
            (
                with(json!({"functionCall": {"name": ["search"]}})),
                "candidates[0].content.parts[1].functionCall.name",
                "must be a string",
            ),
            (
                with(json!({"functionCall": {"name": "a", "id": 3}})),
                "candidates[0].content.parts[1].functionCall.id",
                "must be a string",
            ),
            (
                with(json!({"functionCall": "search"})),
                "candidates[0].content.parts[1].functionCall",
                "must be an object",
            ),
            (
                with(json!(5)),
                "candidates[0].content.parts[1]",
                "must be an object",
            ),
            (json!({"candidates": []}), "candidates", "blocked"),
            (
                json!({"candidates": [{"finishReason": "SAFETY"}]}),
                "candidates[0].content",
                "SAFETY",
            ),
            (json!({"parts": {"text": "x"}}), "parts", "must be an array"),
            (json!(null), "message", "got null"),
        ];
        for (message, path, words) in cases {
            let err = parse_gemini_function_calls(&message).unwrap_err();
            assert_eq!(err.path, path, "{message}: {err}");
            assert!(err.message.contains(words), "{path}: {}", err.message);
        }
    }

    #[test]
    fn function_response_parts() {
        let outcome = |id: &str, result: Result<Value, ToolError>| CallOutcome {
            tool_call_id: Arc::from(id),
            tool_name: Arc::from("search"),
            result,
            duration: Duration::from_millis(1),
            attempts: 1,
            diagnostics: Default::default(),
        };
        assert_eq!(
            gemini_function_response_part(&outcome("gemini_call_0", Ok(json!({"hits": 3})))),
            json!({"functionResponse": {"name": "search", "response": {"hits": 3}}})
        );
        assert_eq!(
            gemini_function_response_part(&outcome("fc_7", Ok(json!([1, 2])))),
            json!({"functionResponse": {"id": "fc_7", "name": "search", "response": {"result": [1, 2]}}})
        );
        let err = ToolError::new(ErrorCode::InvalidArgs, "bad limit")
            .with_details(json!([{"pointer": "/limit"}]));
        assert_eq!(
            gemini_function_response_part(&outcome("gemini_call_1", Err(err))),
            json!({"functionResponse": {"name": "search", "response": {"error": {
                "code": "INVALID_ARGS", "message": "bad limit", "details": [{"pointer": "/limit"}]
            }}}})
        );
    }
}
