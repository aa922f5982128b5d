//! OpenAI function tools (Chat Completions and Responses API): export, strict mode,
//! and parsing tool calls back.
//!
//! # Strict mode
//!
//! With `strict: true` OpenAI constrains decoding to the parameters schema
//! ("Structured Outputs"), which only works for a subset of JSON Schema. The rules
//! [`openai_strict_schema`] applies, each for the reason given:
//!
//! - every object gets `additionalProperties: false` and lists *all* its properties in
//!   `required`: strict mode refuses any other object;
//! - a property that was optional (not in `required`) and does not accept `null` is
//!   made nullable, as `type: [T, "null"]` for a primitive (with `null` added to its
//!   `enum`, which would otherwise reject it) or `anyOf: [<schema>, {"type": "null"}]`
//!   for a `$ref`, an object, an array or a union: the model must send every key, so
//!   `null` is how it says "not given". [`strip_nulls_for_optional`] removes those nulls
//!   again so the call validates against the original schema and its defaults apply;
//! - `oneOf` becomes `anyOf` (only `anyOf` is supported; for the tagged enums
//!   generators emit the branches are disjoint, so the two mean the same);
//! - `allOf` is merged into its schema (not supported);
//! - a `$ref` with sibling keywords (e.g. a description) is replaced by its target
//!   with the siblings on top (a `$ref` must stand alone); bare `$ref`s and `$defs`
//!   stay, as definitions and recursion are supported. An optional property keeps a
//!   bare `$ref` inside its nullable `anyOf`, its description outside;
//! - `default` is removed (not supported) and turned into a `Default: …` sentence of
//!   the description;
//! - only supported keywords are kept: `type`, `description`, `title`, `properties`,
//!   `required`, `additionalProperties`, `items`, `enum`, `const`, `anyOf`, `$ref`,
//!   `$defs`/`definitions`, and the supported constraints: for strings `pattern` and
//!   `format` (only `date-time`, `time`, `date`, `duration`, `email`, `hostname`,
//!   `ipv4`, `ipv6`, `uuid`), for numbers `minimum`, `maximum`, `exclusiveMinimum`,
//!   `exclusiveMaximum`, `multipleOf`, for arrays `minItems`, `maxItems`. Everything
//!   else is dropped: `minLength`/`maxLength`, `uniqueItems`, `examples`, and integer
//!   and number `format`s such as schemars' `uint32`, `int64`, `double` (formats are
//!   only defined for strings). The pipeline still validates calls against the
//!   original schema, so a dropped constraint is enforced there.
//!
//! Some schemas cannot be made strict; [`openai_strict_schema`] reports them with the
//! path and [`openai_tool`] then exports that tool with `strict: false` (and logs a
//! warning) rather than failing the whole export:
//!
//! - a root that is a union (`anyOf`/`oneOf`): the root must be an object;
//! - an object with free-form keys (`additionalProperties: <schema>` or `true`
//!   without `properties`, e.g. a `HashMap`): every key must be listed;
//! - an untyped "any value" schema (`true`, `{}`, e.g. `serde_json::Value`);
//! - a tuple (`prefixItems`) or an array without an `items` schema.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::{
    FormatError, MAX_SCHEMA_DEPTH, accepts_null, default_to_description, index_path, join_path,
    merge_all_of, object_args, required_str, resolve_local_ref, tool_description,
};
use crate::pipeline::{CallOutcome, ToolCall};
use crate::schema::{kind_of, normalize_nullable, truncate_json};
use crate::spec::ToolSpec;
use crate::tool::Tool;
use crate::toolset::ToolSet;

/// String formats strict mode understands.
const STRICT_STRING_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords strict mode accepts; every other keyword is dropped.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "title",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// JSON types that a `type: [T, "null"]` list can carry.
const PRIMITIVE_TYPES: &[&str] = &["string", "number", "integer", "boolean"];

/// One tool in the Chat Completions format:
/// `{"type": "function", "function": {"name", "description", "parameters", "strict"}}`.
///
/// With `strict`, the parameters are rewritten by [`openai_strict_schema`]; a schema
/// that cannot be made strict is exported as given with `"strict": false` and a warning
/// is logged, so one unusual tool does not break the whole export.
pub fn openai_tool(spec: &ToolSpec, strict: bool) -> Value {
    let (parameters, strict) = if strict {
        match openai_strict_schema(&spec.input_schema) {
            Ok(schema) => (schema, true),
            Err(err) => {
                tracing::warn!(
                    tool = %spec.name,
                    error = %err,
                    "input schema cannot be made strict; exported with strict: false"
                );
                (plain_parameters(&spec.input_schema), false)
            }
        }
    } else {
        (plain_parameters(&spec.input_schema), false)
    };
    json!({
        "type": "function",
        "function": {
            "name": spec.name.as_str(),
            "description": tool_description(&spec.description),
            "parameters": parameters,
            "strict": strict,
        }
    })
}

/// Every tool, in order, as the array for a Chat Completions request's `tools`.
pub fn openai_tools<'a>(tools: impl IntoIterator<Item = &'a Tool>, strict: bool) -> Value {
    Value::Array(
        tools
            .into_iter()
            .map(|t| openai_tool(t.spec(), strict))
            .collect(),
    )
}

/// The schema as given, minus `$schema`, with `type: "object"` added to a root that
/// has none: OpenAI requires the parameters to be an object schema, and a root without
/// a type (e.g. a union of object variants) still only accepts objects.
fn plain_parameters(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.entry("type")
            .or_insert_with(|| Value::String("object".into()));
    }
    schema
}

/// Rewrite an input schema for OpenAI strict mode (see the module docs for the rules
/// and why). The error names the part of the schema strict mode cannot express, as a
/// path starting at `parameters`.
pub fn openai_strict_schema(schema: &Value) -> Result<Value, FormatError> {
    let mut root = schema.clone();
    // `nullable: true` (OpenAPI, used by tool.yaml) means `type: [T, "null"]`.
    normalize_nullable(&mut root);
    let path = "parameters";
    let Value::Object(map) = &root else {
        return Err(FormatError::new(
            path,
            format!(
                "the input schema must be an object schema, got {}",
                kind_of(&root)
            ),
        ));
    };
    for key in ["anyOf", "oneOf"] {
        if map.contains_key(key) {
            return Err(FormatError::new(
                join_path(path, key),
                format!(
                    "the arguments schema is a union (`{key}`) at the root, but strict mode \
                     needs a root object; wrap the union in a property, e.g. \
                     {{\"type\":\"object\",\"properties\":{{\"action\":<union>}},\
                     \"required\":[\"action\"]}}, or export with strict: false"
                ),
            ));
        }
    }
    let mut top = map.clone();
    top.remove("$schema");
    // A root `$ref` (rare, but valid) is replaced by its target: the root must say
    // `type: object` itself.
    if let Some(Value::String(r)) = top.remove("$ref") {
        match resolve_local_ref(&root, &r) {
            Some(Value::Object(target)) => {
                for (k, v) in target {
                    top.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            _ => return Err(unresolved_ref(path, &r)),
        }
    }
    merge_all_of(&root, &mut top, 0);
    // A root without a type is a tool's argument object all the same.
    let root_type = top
        .entry("type")
        .or_insert_with(|| Value::String("object".into()))
        .clone();
    if root_type != "object" {
        return Err(FormatError::new(
            join_path(path, "type"),
            format!(
                "tool arguments are a JSON object, so the root type must be \"object\", got {root_type}"
            ),
        ));
    }
    Strict { root: &root }.node(&Value::Object(top), path, 0)
}

fn unresolved_ref(path: &str, reference: &str) -> FormatError {
    FormatError::new(
        join_path(path, "$ref"),
        format!(
            "cannot resolve `{reference}`; only local references into the schema, like \
             `#/$defs/Name`, can be exported"
        ),
    )
}

/// The strict-mode rewrite of one schema and everything below it.
struct Strict<'a> {
    /// The whole (normalized) input schema, for resolving `$ref`s.
    root: &'a Value,
}

impl Strict<'_> {
    fn node(&self, schema: &Value, path: &str, depth: usize) -> Result<Value, FormatError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(FormatError::new(
                path,
                format!(
                    "the schema nests deeper than {MAX_SCHEMA_DEPTH} levels (a `$ref` cycle \
                     through sibling keywords?); flatten it or export with strict: false"
                ),
            ));
        }
        let mut map = match schema {
            Value::Object(map) => map.clone(),
            Value::Bool(true) => return Err(any_value(path)),
            Value::Bool(false) => {
                return Err(FormatError::new(
                    path,
                    "a `false` schema (no value allowed) cannot be sent in strict mode; \
                     remove the property",
                ));
            }
            other => {
                return Err(FormatError::new(
                    path,
                    format!("a schema must be an object, got {}", kind_of(other)),
                ));
            }
        };
        map.remove("$schema");
        // `allOf` is not supported: merge it.
        merge_all_of(self.root, &mut map, 0);

        if let Some(Value::String(reference)) = map.get("$ref").cloned() {
            let Some(target) = resolve_local_ref(self.root, &reference) else {
                return Err(unresolved_ref(path, &reference));
            };
            if map.len() == 1 {
                // A bare `$ref` is supported; its target is rewritten under `$defs`.
                return Ok(json!({ "$ref": reference }));
            }
            // A `$ref` may not have sibling keywords (schemars puts a field's doc
            // comment next to it): inline the target, the siblings taking precedence.
            let Value::Object(target) = target else {
                return Err(any_value(path));
            };
            map.remove("$ref");
            for (k, v) in target {
                map.entry(k.clone()).or_insert_with(|| v.clone());
            }
            return self.node(&Value::Object(map), path, depth + 1);
        }

        // Only `anyOf` is supported; the variants of a tagged enum are disjoint, so
        // `oneOf` and `anyOf` accept the same values.
        if let Some(one_of) = map.remove("oneOf") {
            if map.contains_key("anyOf") {
                return Err(FormatError::new(
                    path,
                    "a schema with both `oneOf` and `anyOf` cannot be expressed in strict \
                     mode; merge them into one `anyOf`",
                ));
            }
            map.insert("anyOf".into(), one_of);
        }
        // `default` is not supported; keep it for the model as a sentence.
        default_to_description(&mut map);

        let types = type_names(&map);
        let is_object = types.iter().any(|t| t == "object")
            || (types.is_empty() && map.contains_key("properties"));
        if is_object {
            if types.is_empty() {
                map.insert("type".into(), Value::String("object".into()));
            }
            self.object(&mut map, path, depth)?;
        }
        if types.iter().any(|t| t == "array") || map.contains_key("items") {
            if map.contains_key("prefixItems") {
                return Err(FormatError::new(
                    join_path(path, "prefixItems"),
                    "tuples (`prefixItems`) are not supported in strict mode; use an object \
                     with named fields, or export with strict: false",
                ));
            }
            match map.get("items") {
                Some(items @ Value::Object(_)) => {
                    let items = self.node(items, &join_path(path, "items"), depth + 1)?;
                    map.insert("items".into(), items);
                }
                Some(Value::Bool(true)) | None => {
                    return Err(FormatError::new(
                        join_path(path, "items"),
                        "an array needs an `items` schema in strict mode (its elements \
                         cannot be any value); give the elements a type",
                    ));
                }
                Some(other) => {
                    return Err(FormatError::new(
                        join_path(path, "items"),
                        format!(
                            "`items` must be a schema object in strict mode, got {}",
                            truncate_json(other, 40)
                        ),
                    ));
                }
            }
        }
        if let Some(Value::Array(branches)) = map.get("anyOf") {
            let any_of_path = join_path(path, "anyOf");
            let rewritten = branches
                .iter()
                .enumerate()
                .map(|(i, b)| self.node(b, &index_path(&any_of_path, i), depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            map.insert("anyOf".into(), Value::Array(rewritten));
        }
        for key in ["$defs", "definitions"] {
            if let Some(Value::Object(defs)) = map.get(key) {
                let defs_path = join_path(path, key);
                let mut rewritten = Map::new();
                for (name, def) in defs {
                    rewritten.insert(
                        name.clone(),
                        self.node(def, &join_path(&defs_path, name), depth + 1)?,
                    );
                }
                map.insert(key.into(), Value::Object(rewritten));
            }
        }
        // Formats are only defined for strings, and only some of those.
        if let Some(Value::String(format)) = map.get("format") {
            let keep = types.iter().any(|t| t == "string")
                && STRICT_STRING_FORMATS.contains(&format.as_str());
            if !keep {
                map.remove("format");
            }
        }
        if !["type", "anyOf", "enum", "const", "$ref"]
            .iter()
            .any(|k| map.contains_key(*k))
        {
            return Err(any_value(path));
        }
        map.retain(|k, _| STRICT_KEYWORDS.contains(&k.as_str()));
        Ok(Value::Object(map))
    }

    /// Close an object: `additionalProperties: false`, every property required, the
    /// optional ones made nullable.
    fn object(
        &self,
        map: &mut Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<(), FormatError> {
        let props = match map.remove("properties") {
            Some(Value::Object(props)) => props,
            None => Map::new(),
            Some(other) => {
                return Err(FormatError::new(
                    join_path(path, "properties"),
                    format!("must be an object, got {}", kind_of(&other)),
                ));
            }
        };
        let open = !matches!(
            map.get("additionalProperties"),
            None | Some(Value::Bool(false))
        );
        if props.is_empty() && (open || map.contains_key("patternProperties")) {
            return Err(FormatError::new(
                join_path(path, "additionalProperties"),
                "an object with free-form keys (a map) cannot be expressed in strict mode, \
                 which needs every key listed in `properties`; give it fixed properties, \
                 make it an array of {\"key\", \"value\"} objects, or export with strict: false",
            ));
        }
        let required: HashSet<&str> = match map.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => HashSet::new(),
        };
        let props_path = join_path(path, "properties");
        let mut rewritten = Map::new();
        for (name, prop) in &props {
            let prop_path = join_path(&props_path, name);
            let optional = !required.contains(name.as_str()) && !accepts_null(self.root, prop, 0);
            let strict_prop = match prop {
                Value::Object(prop) if optional => {
                    // The annotations are split off before the rewrite, so that a
                    // `$ref` whose only siblings were annotations stays a bare `$ref`
                    // inside the nullable `anyOf` instead of being inlined. Rewriting
                    // before wrapping also keeps error paths on the property itself.
                    let mut core = prop.clone();
                    let mut annotations = Map::new();
                    for key in ["description", "title", "default"] {
                        if let Some(v) = core.remove(key) {
                            annotations.insert(key.into(), v);
                        }
                    }
                    default_to_description(&mut annotations);
                    let core = self.node(&Value::Object(core), &prop_path, depth + 1)?;
                    make_nullable(core, annotations)
                }
                _ => self.node(prop, &prop_path, depth + 1)?,
            };
            rewritten.insert(name.clone(), strict_prop);
        }
        map.insert(
            "required".into(),
            Value::Array(props.keys().cloned().map(Value::String).collect()),
        );
        map.insert("properties".into(), Value::Object(rewritten));
        map.insert("additionalProperties".into(), Value::Bool(false));
        Ok(())
    }
}

fn any_value(path: &str) -> FormatError {
    FormatError::new(
        path,
        "an untyped schema (any JSON value, e.g. `true` or `{}`) cannot be expressed in \
         strict mode; give it a `type`, or export with strict: false",
    )
}

/// The names in a schema's `type` (one string or a list).
fn type_names(map: &Map<String, Value>) -> Vec<String> {
    match map.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Let an optional property be `null`, so a model that must send every key can say
/// "not given". `schema` is the property's strict rewrite without its annotations
/// (description, title), which are put back where the model reads them first.
fn make_nullable(schema: Value, annotations: Map<String, Value>) -> Value {
    let Value::Object(mut map) = schema else {
        return schema;
    };
    let composite = ["$ref", "anyOf", "const"]
        .iter()
        .any(|k| map.contains_key(*k));
    let primitive = |t: &Value| t.as_str().is_some_and(|t| PRIMITIVE_TYPES.contains(&t));
    let simple = !composite
        && match map.get("type") {
            Some(t @ Value::String(_)) => primitive(t),
            Some(Value::Array(ts)) => ts.iter().all(primitive),
            _ => false,
        };
    if simple {
        // A primitive: `type: [T, "null"]`, and `null` added to its enum, which
        // would otherwise still reject it.
        match map.get_mut("type") {
            Some(Value::String(t)) => {
                let t = std::mem::take(t);
                map.insert("type".into(), json!([t, "null"]));
            }
            Some(Value::Array(ts)) => ts.push(Value::String("null".into())),
            _ => {}
        }
        if let Some(Value::Array(values)) = map.get_mut("enum") {
            values.push(Value::Null);
        }
        map.extend(annotations);
        return Value::Object(map);
    }
    // Anything else (a `$ref`, an object, an array, a union, a `const`): `anyOf` with
    // null, the annotations outside.
    let mut outer = annotations;
    outer.insert(
        "anyOf".into(),
        json!([Value::Object(map), {"type": "null"}]),
    );
    Value::Object(outer)
}

/// Remove the `null`s a strict-mode model sends for optional arguments it did not
/// mean to give, so `args` validates against the tool's original schema and the
/// pipeline fills in defaults.
///
/// A `null` is removed only where the original schema makes that property optional
/// (not in `required`) and does not accept `null` itself; an `Option<T>` field keeps its
/// explicit `null`. Nested objects, arrays and `$ref`s are followed; for a union the
/// first branch that fits the value (its type, its `const`/`enum` tags, its required
/// keys) is followed, which picks the right variant of a tagged enum.
pub fn strip_nulls_for_optional(spec_input_schema: &Value, args: &mut Value) {
    strip(spec_input_schema, spec_input_schema, args, 0);
}

/// [`strip_nulls_for_optional`] for every call whose tool is in `tools` (the others are
/// left alone: the pipeline reports them as unknown).
pub fn strip_nulls_in_calls(tools: &ToolSet, calls: &mut [ToolCall]) {
    for call in calls {
        if let Some(tool) = tools.get(&call.name) {
            strip_nulls_for_optional(&tool.spec().input_schema, &mut call.args);
        }
    }
}

fn strip(root: &Value, schema: &Value, value: &mut Value, depth: usize) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    let Some(map) = schema.as_object() else {
        return;
    };
    if let Some(Value::String(r)) = map.get("$ref")
        && let Some(target) = resolve_local_ref(root, r)
    {
        strip(root, target, value, depth + 1);
    }
    if let Some(Value::Array(all)) = map.get("allOf") {
        for branch in all {
            strip(root, branch, value, depth + 1);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = map.get(key)
            && let Some(branch) = branches.iter().find(|b| fits(root, b, value, depth + 1))
        {
            strip(root, branch, value, depth + 1);
        }
    }
    match value {
        Value::Object(obj) => {
            let Some(Value::Object(props)) = map.get("properties") else {
                return;
            };
            let required: HashSet<&str> = match map.get("required") {
                Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
                _ => HashSet::new(),
            };
            obj.retain(|name, v| {
                let drop = v.is_null()
                    && !required.contains(name.as_str())
                    && props.get(name).is_some_and(|p| !accepts_null(root, p, 0));
                !drop
            });
            for (name, v) in obj.iter_mut() {
                if let Some(p) = props.get(name) {
                    strip(root, p, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema @ Value::Object(_)) = map.get("items") {
                for item in items {
                    strip(root, item_schema, item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Whether `value` plausibly is an instance of this union branch: its type, `const` and
/// `enum` match, its required keys are present, and its properties' tags (`const` or
/// `enum`) match. Cheaper than full validation, and enough to tell variants apart.
fn fits(root: &Value, schema: &Value, value: &Value, depth: usize) -> bool {
    if depth > MAX_SCHEMA_DEPTH {
        return false;
    }
    let Some(map) = schema.as_object() else {
        return schema.as_bool().unwrap_or(false);
    };
    if !shallow_fits(root, schema, value, depth) {
        return false;
    }
    if let Some(Value::String(r)) = map.get("$ref") {
        match resolve_local_ref(root, r) {
            Some(target) if fits(root, target, value, depth + 1) => {}
            _ => return false,
        }
    }
    if let (Value::Object(obj), Some(Value::Object(props))) = (value, map.get("properties")) {
        if let Some(Value::Array(required)) = map.get("required") {
            let missing = required
                .iter()
                .any(|n| n.as_str().is_none_or(|n| !obj.contains_key(n)));
            if missing {
                return false;
            }
        }
        for (name, v) in obj {
            if let Some(p) = props.get(name)
                && !v.is_null()
                && !shallow_fits(root, p, v, depth + 1)
            {
                return false;
            }
        }
    }
    true
}

/// Type, `const` and `enum` of a schema (following `$ref`s) against a value.
fn shallow_fits(root: &Value, schema: &Value, value: &Value, depth: usize) -> bool {
    if depth > MAX_SCHEMA_DEPTH {
        return false;
    }
    let Some(map) = schema.as_object() else {
        return schema.as_bool().unwrap_or(false);
    };
    if let Some(t) = map.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, value),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, value)),
            _ => true,
        };
        if !ok {
            return false;
        }
    }
    if let Some(c) = map.get("const")
        && c != value
    {
        return false;
    }
    if let Some(Value::Array(values)) = map.get("enum")
        && !values.contains(value)
    {
        return false;
    }
    match map.get("$ref") {
        Some(Value::String(r)) => match resolve_local_ref(root, r) {
            Some(target) => shallow_fits(root, target, value, depth + 1),
            None => false,
        },
        _ => true,
    }
}

fn type_matches(t: &str, value: &Value) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

// ---------------------------------------------------------------------------------
// Parsing tool calls
// ---------------------------------------------------------------------------------

/// Read the tool calls out of an OpenAI response.
///
/// Accepted shapes:
/// - a Chat Completions assistant message, `{"role": "assistant", "tool_calls": [{"id",
///   "type": "function", "function": {"name", "arguments": "<JSON string>"}}]}` (no
///   `tool_calls` means no calls), or a whole response with `choices[0].message`;
/// - a Responses API `output` array, a whole response with `output`, or one item
///   `{"type": "function_call", "call_id", "name", "arguments"}`; items of other types
///   (messages, reasoning) are skipped.
///
/// `arguments` must be a JSON object encoded as a string; an empty string means `{}`.
/// Errors name the path, e.g. `tool_calls[1].function.arguments`.
///
/// In strict mode optional arguments arrive as `null`: pass the calls through
/// [`strip_nulls_in_calls`] before running them.
pub fn parse_openai_tool_calls(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let obj = match message {
        Value::Array(items) => return parse_responses_items(items, ""),
        Value::Object(obj) => obj,
        other => {
            return Err(FormatError::new(
                "message",
                format!(
                    "expected an assistant message object (with `tool_calls`) or a \
                     Responses API output array, got {}",
                    kind_of(other)
                ),
            ));
        }
    };
    if let Some(choices) = obj.get("choices") {
        let Some(first) = choices.as_array().and_then(|c| c.first()) else {
            return Err(FormatError::new(
                "choices",
                "expected a non-empty array of choices; pass `choices[0].message`",
            ));
        };
        let Some(message) = first.get("message") else {
            return Err(FormatError::new(
                "choices[0].message",
                "missing; a Chat Completions choice carries the assistant `message`",
            ));
        };
        return parse_chat_message(message, "choices[0].message");
    }
    if let Some(output) = obj.get("output") {
        return match output {
            Value::Array(items) => parse_responses_items(items, "output"),
            other => Err(FormatError::new(
                "output",
                format!(
                    "a Responses API `output` must be an array of items, got {}",
                    kind_of(other)
                ),
            )),
        };
    }
    if obj.get("type").and_then(Value::as_str) == Some("function_call") {
        return Ok(vec![parse_function_call_item(obj, "")?]);
    }
    parse_chat_message(message, "")
}

fn parse_chat_message(message: &Value, base: &str) -> Result<Vec<ToolCall>, FormatError> {
    let Some(obj) = message.as_object() else {
        return Err(FormatError::new(
            if base.is_empty() { "message" } else { base },
            format!(
                "expected an assistant message object, got {}",
                kind_of(message)
            ),
        ));
    };
    let calls_path = join_path(base, "tool_calls");
    let calls = match obj.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(other) => {
            return Err(FormatError::new(
                calls_path,
                format!("must be an array of tool calls, got {}", kind_of(other)),
            ));
        }
    };
    let mut out = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let path = index_path(&calls_path, i);
        let Some(call) = call.as_object() else {
            return Err(FormatError::new(
                path,
                format!(
                    "a tool call must be an object {{\"id\", \"type\": \"function\", \
                     \"function\"}}, got {}",
                    kind_of(call)
                ),
            ));
        };
        match call.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "function" => {}
            Some(other) => {
                return Err(FormatError::new(
                    join_path(&path, "type"),
                    format!(
                        "unsupported tool call type {other}; toolshed exports only \
                         `function` tools"
                    ),
                ));
            }
        }
        let id = required_str(call, "id", &path, "the tool call id")?;
        let function_path = join_path(&path, "function");
        let Some(function) = call.get("function").and_then(Value::as_object) else {
            return Err(FormatError::new(
                function_path,
                "missing or not an object; a tool call carries \
                 `function: {\"name\", \"arguments\"}`",
            ));
        };
        let name = required_str(function, "name", &function_path, "the function name")?;
        let args = parse_arguments(
            function.get("arguments"),
            &join_path(&function_path, "arguments"),
        )?;
        out.push(ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            args,
        });
    }
    Ok(out)
}

fn parse_responses_items(items: &[Value], base: &str) -> Result<Vec<ToolCall>, FormatError> {
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = index_path(base, i);
        let Some(obj) = item.as_object() else {
            return Err(FormatError::new(
                path,
                format!("an output item must be an object, got {}", kind_of(item)),
            ));
        };
        if obj.get("type").and_then(Value::as_str) == Some("function_call") {
            out.push(parse_function_call_item(obj, &path)?);
        }
    }
    Ok(out)
}

fn parse_function_call_item(obj: &Map<String, Value>, path: &str) -> Result<ToolCall, FormatError> {
    // `call_id` is what the `function_call_output` refers to; `id` is the item's own.
    let id = required_str(obj, "call_id", path, "the call id")?;
    let name = required_str(obj, "name", path, "the function name")?;
    let args = parse_arguments(obj.get("arguments"), &join_path(path, "arguments"))?;
    Ok(ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        args,
    })
}

/// Decode `arguments`: a JSON object encoded as a string (an already-decoded object,
/// as some compatible servers send, is accepted too).
fn parse_arguments(arguments: Option<&Value>, path: &str) -> Result<Value, FormatError> {
    match arguments {
        Some(Value::String(text)) if text.trim().is_empty() => Ok(Value::Object(Map::new())),
        Some(Value::String(text)) => {
            let value: Value = serde_json::from_str(text).map_err(|e| {
                FormatError::new(
                    path,
                    format!(
                        "not valid JSON ({e}): `{}`; the arguments must be a JSON object \
                         encoded as a string, e.g. \"{{\\\"query\\\": \\\"rust\\\"}}\"",
                        truncate_chars(text, 80)
                    ),
                )
            })?;
            object_args(value, path)
        }
        Some(value @ Value::Object(_)) => Ok(value.clone()),
        None | Some(Value::Null) => Err(FormatError::new(
            path,
            "missing; send the arguments as a JSON object encoded as a string (\"{}\" \
             when there are none)",
        )),
        Some(other) => Err(FormatError::new(
            path,
            format!(
                "must be a JSON object encoded as a string, got {}",
                kind_of(other)
            ),
        )),
    }
}

fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

// ---------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------

/// The Chat Completions message that answers a call:
/// `{"role": "tool", "tool_call_id", "content"}`, the content being the result as text
/// (or `error CODE: message`).
pub fn openai_tool_result_message(outcome: &CallOutcome) -> Value {
    json!({
        "role": "tool",
        "tool_call_id": &*outcome.tool_call_id,
        "content": outcome.to_model_text(),
    })
}

/// The Responses API input item that answers a call:
/// `{"type": "function_call_output", "call_id", "output"}`.
pub fn openai_function_call_output(outcome: &CallOutcome) -> Value {
    json!({
        "type": "function_call_output",
        "call_id": &*outcome.tool_call_id,
        "output": outcome.to_model_text(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::error::{ErrorCode, ToolError};
    use crate::formats::fixtures;
    use crate::schema::CompiledSchema;

    /// Every subschema, with its path, for invariant checks.
    fn assert_strict_invariants(schema: &Value) {
        assert_eq!(schema["type"], "object", "root must be an object");
        assert!(schema.get("anyOf").is_none() && schema.get("oneOf").is_none());
        let mut nodes = Vec::new();
        super::super::fixtures::walk_schema(schema, "parameters".into(), &mut nodes);
        for (path, node) in nodes {
            let map = node
                .as_object()
                .unwrap_or_else(|| panic!("{path}: not an object"));
            for key in map.keys() {
                assert!(
                    STRICT_KEYWORDS.contains(&key.as_str()),
                    "{path}: unsupported keyword `{key}`"
                );
            }
            if map.contains_key("$ref") {
                assert_eq!(map.len(), 1, "{path}: $ref with siblings");
            }
            let is_object = match map.get("type") {
                Some(Value::String(t)) => t == "object",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
                _ => false,
            };
            if is_object {
                assert_eq!(
                    map.get("additionalProperties"),
                    Some(&json!(false)),
                    "{path}: additionalProperties"
                );
                let props: Vec<&String> = map["properties"].as_object().unwrap().keys().collect();
                let required: Vec<&str> = map["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                assert_eq!(props, required, "{path}: every property required");
            }
            if let Some(Value::String(f)) = map.get("format") {
                assert!(
                    STRICT_STRING_FORMATS.contains(&f.as_str()),
                    "{path}: format {f}"
                );
            }
        }
    }

    fn strict(schema: &Value) -> Value {
        let out = openai_strict_schema(schema).unwrap();
        assert_strict_invariants(&out);
        // Still a valid JSON Schema.
        CompiledSchema::compile(&out, "parameters").unwrap();
        out
    }

    #[test]
    fn strict_search_snapshot() {
        let out = strict(&fixtures::search_schema());
        // Optional primitives become nullable, enums get null too.
        assert_eq!(
            out["properties"]["page"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(
            out["properties"]["mode"]["enum"],
            json!(["fast", "thorough", null])
        );
        // Already nullable: unchanged.
        assert_eq!(
            out["properties"]["limit"]["type"],
            json!(["integer", "null"])
        );
        insta::assert_json_snapshot!("strict_search", out);
    }

    #[test]
    fn strict_order_snapshot() {
        let out = strict(&fixtures::order_schema());
        // `$ref` + description was inlined; the tagged enum became anyOf.
        assert!(out["properties"]["address"].get("$ref").is_none());
        assert!(out["$defs"]["Shape"].get("anyOf").is_some());
        assert!(out["$defs"]["Shape"].get("oneOf").is_none());
        // An optional `$ref` with a default: anyOf with null, default in the description.
        assert_eq!(
            out["properties"]["gift"]["anyOf"][1],
            json!({"type": "null"})
        );
        assert!(
            out["properties"]["gift"]["description"]
                .as_str()
                .unwrap()
                .contains(r#"Default: {"paper":"plain"}."#)
        );
        insta::assert_json_snapshot!("strict_order", out);
    }

    #[test]
    fn strict_tree_snapshot() {
        // Recursion through `$defs` is supported and kept.
        let out = strict(&fixtures::tree_schema());
        assert_eq!(
            out["$defs"]["Node"]["properties"]["children"]["items"],
            json!({"$ref": "#/$defs/Node"})
        );
        insta::assert_json_snapshot!("strict_tree", out);
    }

    #[test]
    fn real_schemars_output_is_made_strict() {
        let original = fixtures::schemars_schema();
        let out = strict(&original);
        // A strict-mode answer that leaves every optional out validates against the
        // strict schema, and after stripping, against the original.
        let mut args = json!({
            "query": "q", "limit": null, "page": null, "exact": null, "order": "asc",
            "then_by": null, "ship_to": null, "bill_to": {"street": "s", "zip": null},
            "filters": [{"kind": "range", "min": 1, "max": null}, {"kind": "tag", "tag": "t"}],
            "category": {"name": "c", "children": []}, "weight": 1.5
        });
        CompiledSchema::compile(&out, "p")
            .unwrap()
            .validate(&args)
            .unwrap();
        strip_nulls_for_optional(&original, &mut args);
        CompiledSchema::compile(&original, "input_schema")
            .unwrap()
            .validate_with_defaults(&mut args)
            .unwrap();
        assert_eq!(args["page"], json!(1));
        assert_eq!(
            args["filters"][0],
            json!({"kind": "range", "min": 1, "max": null})
        );
    }

    #[test]
    fn tool_wrapper_snapshot() {
        let tools = fixtures::tools();
        let plain = openai_tools(&tools[..1], false);
        assert!(plain[0]["function"]["parameters"].get("$schema").is_none());
        assert_eq!(
            plain[0]["function"]["parameters"]["properties"],
            fixtures::search_schema()["properties"],
            "non-strict keeps the schema as is"
        );
        insta::assert_json_snapshot!("tool_non_strict", plain);
        let ping = openai_tool(tools[3].spec(), true);
        insta::assert_json_snapshot!("tool_strict_no_args", ping);
    }

    #[test]
    fn unstrictable_schemas_are_reported_and_fall_back() {
        let cases = [
            (
                json!({"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}}),
                "parameters.properties.labels.additionalProperties",
                "free-form keys",
            ),
            (
                json!({"type": "object", "properties": {"payload": true}}),
                "parameters.properties.payload",
                "untyped",
            ),
            (
                json!({"type": "object", "properties": {"payload": {"description": "anything"}}}),
                "parameters.properties.payload",
                "untyped",
            ),
            (
                json!({"type": "object", "properties": {"pair": fixtures::map_schema()["properties"]["pair"].clone()}}),
                "parameters.properties.pair.prefixItems",
                "tuples",
            ),
            (
                json!({"type": "object", "properties": {"list": {"type": "array"}}}),
                "parameters.properties.list.items",
                "`items` schema",
            ),
            (
                fixtures::union_root_schema(),
                "parameters.oneOf",
                "root object",
            ),
            (
                json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}}),
                "parameters.properties.x.$ref",
                "cannot resolve",
            ),
            (
                json!({"type": "object", "additionalProperties": true}),
                "parameters.additionalProperties",
                "free-form keys",
            ),
        ];
        for (schema, path, words) in cases {
            let err = openai_strict_schema(&schema).unwrap_err();
            assert_eq!(err.path, path, "{schema}: {err}");
            assert!(err.message.contains(words), "{err}");
        }
        let tool = fixtures::tool("tag", "Tag things.", fixtures::map_schema());
        let exported = openai_tool(tool.spec(), true);
        assert_eq!(exported["function"]["strict"], json!(false));
        assert_eq!(
            exported["function"]["parameters"],
            fixtures::map_schema(),
            "falls back to the schema as given"
        );
        let union = fixtures::tool("kv", "Get or set.", fixtures::union_root_schema());
        let exported = openai_tool(union.spec(), true);
        assert_eq!(exported["function"]["strict"], json!(false));
        assert_eq!(exported["function"]["parameters"]["type"], json!("object"));
    }

    #[test]
    fn nullable_openapi_and_root_details() {
        // `nullable: true` (tool.yaml) counts as nullable; a typeless root is an object;
        // a property literally named "default" is a property, not a keyword.
        let out = strict(&json!({
            "properties": {
                "tracking": {"type": "string", "nullable": true},
                "default": {"type": "string"}
            }
        }));
        assert_eq!(
            out["properties"]["tracking"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            out["properties"]["default"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(out["type"], json!("object"));
        let err = openai_strict_schema(&json!({"type": "string"})).unwrap_err();
        assert_eq!(err.path, "parameters.type");
        // allOf is merged.
        let out = strict(&json!({
            "type": "object",
            "allOf": [{"$ref": "#/$defs/Base"}],
            "properties": {"extra": {"type": "integer"}},
            "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}
        }));
        assert_eq!(out["required"], json!(["extra", "id"]));
        assert_eq!(
            out["properties"]["extra"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(out["properties"]["id"]["type"], json!("string"));
    }

    #[test]
    fn strict_args_round_trip_to_the_original_schema() {
        // What a strict-mode model sends: every key, null for "not given".
        let original = fixtures::order_schema();
        let strict_schema = CompiledSchema::compile(&strict(&original), "parameters").unwrap();
        let mut args = json!({
            "address": {"street": "1 Main St", "zip": null, "country": null},
            "billing": null,
            "items": [{"sku": "A1", "qty": 2, "note": null}],
            "shape": {"kind": "rect", "w": 1.0, "h": 2.0, "label": null},
            "gift": null
        });
        strict_schema.validate(&args).unwrap();
        strip_nulls_for_optional(&original, &mut args);
        assert_eq!(
            args,
            json!({
                // `zip` and `note` are `Option`s: their null is meaningful and stays.
                "address": {"street": "1 Main St", "zip": null},
                "billing": null,
                "items": [{"sku": "A1", "qty": 2, "note": null}],
                "shape": {"kind": "rect", "w": 1.0, "h": 2.0, "label": null}
            })
        );
        let compiled = CompiledSchema::compile(&original, "input_schema").unwrap();
        compiled.validate_with_defaults(&mut args).unwrap();
        assert_eq!(args["gift"], json!({"paper": "plain"}));
        assert_eq!(args["address"]["country"], json!("US"));

        let original = fixtures::search_schema();
        let mut args = json!({
            "query": "rust", "limit": null, "page": null, "exact": null, "sort": "asc",
            "then_by": null, "mode": null, "weight": 0.5, "since": null, "tags": [],
            "offset": null
        });
        CompiledSchema::compile(&strict(&original), "p")
            .unwrap()
            .validate(&args)
            .unwrap();
        strip_nulls_for_optional(&original, &mut args);
        assert_eq!(
            args,
            json!({"query": "rust", "limit": null, "sort": "asc", "then_by": null, "weight": 0.5, "tags": []})
        );
        let compiled = CompiledSchema::compile(&original, "input_schema").unwrap();
        compiled.validate_with_defaults(&mut args).unwrap();
        assert_eq!(args["page"], json!(1));
    }

    #[test]
    fn strip_picks_the_matching_variant() {
        let schema = json!({
            "type": "object",
            "properties": {"op": {"$ref": "#/$defs/Op"}},
            "required": ["op"],
            "$defs": {"Op": {"oneOf": [
                {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "b"}, "x": {"type": ["integer", "null"]}}, "required": ["kind"]}
            ]}}
        });
        let mut a = json!({"op": {"kind": "a", "x": null}});
        strip_nulls_for_optional(&schema, &mut a);
        assert_eq!(a, json!({"op": {"kind": "a"}}));
        let mut b = json!({"op": {"kind": "b", "x": null}});
        strip_nulls_for_optional(&schema, &mut b);
        assert_eq!(b, json!({"op": {"kind": "b", "x": null}}));
        // Required nulls are left for validation to report.
        let mut bad = json!({"op": null});
        strip_nulls_for_optional(&schema, &mut bad);
        assert_eq!(bad, json!({"op": null}));
    }

    #[test]
    fn strip_nulls_in_calls_uses_each_tool_schema() {
        let tools = ToolSet::from_tools(fixtures::tools()).unwrap();
        let mut calls = vec![
            ToolCall {
                id: "1".into(),
                name: "search".into(),
                args: json!({"query": "q", "page": null}),
            },
            ToolCall {
                id: "2".into(),
                name: "nope".into(),
                args: json!({"page": null}),
            },
        ];
        strip_nulls_in_calls(&tools, &mut calls);
        assert_eq!(calls[0].args, json!({"query": "q"}));
        assert_eq!(calls[1].args, json!({"page": null}));
    }

    #[test]
    fn parses_chat_completions_messages() {
        let message = json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"rust\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "ping", "arguments": ""}}
            ]
        });
        let calls = parse_openai_tool_calls(&message).unwrap();
        assert_eq!(
            calls,
            vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "search".into(),
                    args: json!({"query": "rust"})
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "ping".into(),
                    args: json!({})
                },
            ]
        );
        let response =
            json!({"object": "chat.completion", "choices": [{"index": 0, "message": message}]});
        assert_eq!(parse_openai_tool_calls(&response).unwrap(), calls);
        let text_only = json!({"role": "assistant", "content": "hello"});
        assert!(parse_openai_tool_calls(&text_only).unwrap().is_empty());
    }

    #[test]
    fn parses_responses_api_items() {
        let output = json!([
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "search", "arguments": "{\"query\":\"x\"}", "status": "completed"},
            {"type": "message", "role": "assistant", "content": []}
        ]);
        let calls = parse_openai_tool_calls(&output).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "call_9");
        assert_eq!(calls[0].args, json!({"query": "x"}));
        let response = json!({"object": "response", "output": output});
        assert_eq!(parse_openai_tool_calls(&response).unwrap(), calls);
        let item = output[1].clone();
        assert_eq!(parse_openai_tool_calls(&item).unwrap(), calls);
    }

    #[test]
    fn reports_bad_openai_messages_with_paths() {
        let call = |function: Value| {
            json!({"role": "assistant", "tool_calls": [
                {"id": "ok", "type": "function", "function": {"name": "ping", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": function}
            ]})
        };
        let cases = [
            (
                call(json!({"name": "search", "arguments": "{\"query\": "})),
                "tool_calls[1].function.arguments",
                "not valid JSON",
            ),
            (
                call(json!({"name": "search", "arguments": "[1, 2]"})),
                "tool_calls[1].function.arguments",
                "must be a JSON object",
            ),
            (
                call(json!({"name": "search", "arguments": "\"rust\""})),
                "tool_calls[1].function.arguments",
                "got a string",
            ),
            (
                call(json!({"name": "search", "arguments": 42})),
                "tool_calls[1].function.arguments",
                "encoded as a string, got a number",
            ),
            (
                call(json!({"name": "search"})),
                "tool_calls[1].function.arguments",
                "missing",
            ),
            (
                call(json!({"arguments": "{}"})),
                "tool_calls[1].function.name",
                "missing",
            ),
            (
                call(json!({"name": 7, "arguments": "{}"})),
                "tool_calls[1].function.name",
                "must be a string, got a number",
            ),
            (
                call(json!("search")),
                "tool_calls[1].function",
                "not an object",
            ),
            (
                json!({"tool_calls": [{"type": "function", "function": {"name": "a", "arguments": "{}"}}]}),
                "tool_calls[0].id",
                "missing",
            ),
            (
                json!({"tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "a", "input": "x"}}]}),
                "tool_calls[0].type",
                "only `function`",
            ),
            (
                json!({"tool_calls": {"id": "c"}}),
                "tool_calls",
                "must be an array",
            ),
            (json!({"choices": []}), "choices", "non-empty"),
            (json!("hello"), "message", "got a string"),
            (
                json!([{"type": "function_call", "call_id": "c", "name": "a", "arguments": "nope"}]),
                "[0].arguments",
                "not valid JSON",
            ),
            (
                json!({"output": [{"type": "function_call", "name": "a", "arguments": "{}"}]}),
                "output[0].call_id",
                "missing",
            ),
        ];
        for (message, path, words) in cases {
            let err = parse_openai_tool_calls(&message).unwrap_err();
            assert_eq!(err.path, path, "{message}: {err}");
            assert!(err.message.contains(words), "{path}: {}", err.message);
        }
    }

    #[test]
    fn result_messages() {
        let ok = CallOutcome {
            tool_call_id: Arc::from("call_1"),
            tool_name: Arc::from("search"),
            result: Ok(json!({"hits": 3})),
            duration: Duration::from_millis(5),
            attempts: 1,
            diagnostics: Default::default(),
        };
        assert_eq!(
            openai_tool_result_message(&ok),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"hits\":3}"})
        );
        let err = CallOutcome {
            result: Err(ToolError::new(ErrorCode::InvalidArgs, "limit is too big")),
            ..ok
        };
        assert_eq!(
            openai_function_call_output(&err),
            json!({"type": "function_call_output", "call_id": "call_1", "output": "error INVALID_ARGS: limit is too big"})
        );
    }
}
