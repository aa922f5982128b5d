//! JSON Schema handling: checking a schema once, compiling it once, validating values
//! against it with defaults applied, and reporting every violation precisely.
//!
//! Schemas come from Rust types, files, registries and MCP servers; the last three are
//! untrusted, so no `$ref` is ever resolved outside the schema itself (see
//! [`NoRemoteRefs`]).

use std::fmt;
use std::sync::Arc;

use jsonschema::{Draft, PatternOptions, Retrieve, Uri, Validator};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::FieldError;

/// The meta-schemas we recognise in `$schema`. A schema without `$schema` is read as
/// draft 2020-12.
const KNOWN_DRAFTS: &[(&str, Draft)] = &[
    (
        "https://json-schema.org/draft/2020-12/schema",
        Draft::Draft202012,
    ),
    (
        "https://json-schema.org/draft/2019-09/schema",
        Draft::Draft201909,
    ),
    ("http://json-schema.org/draft-07/schema", Draft::Draft7),
    ("http://json-schema.org/draft-06/schema", Draft::Draft6),
    ("http://json-schema.org/draft-04/schema", Draft::Draft4),
];

/// A retriever that refuses every external reference.
///
/// Why: a schema from a file or a remote registry could otherwise make the process
/// fetch arbitrary URLs (SSRF) or read local files when it is compiled.
#[derive(Debug, Clone, Copy)]
pub struct NoRemoteRefs;

impl Retrieve for NoRemoteRefs {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!(
            "external reference `{uri}` refused: toolshed never resolves remote or file \
             `$ref`s; inline the referenced schema under `$defs` and use `#/$defs/...`"
        )
        .into())
    }
}

/// The most memory one compiled `pattern` (or `patternProperties` key) may take, in
/// bytes: a pattern past it is refused when the schema is compiled.
pub const PATTERN_SIZE_LIMIT: usize = 1024 * 1024;

/// The regex engine of every schema toolshed compiles: the `regex` crate, which matches
/// in time linear in the input whatever the pattern, instead of the default
/// `fancy-regex`, whose backtracking makes `^(a+)+$`-style patterns exponential on an
/// attacker's input. The price: look-around and backreferences are refused at
/// registration (see [`compile_error_message`]).
fn linear_patterns() -> PatternOptions<jsonschema::Regex> {
    PatternOptions::regex()
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
}

/// The error of a schema that did not compile. A `pattern` (or `patternProperties`
/// key) the linear engine refuses is named by its place in the schema, with the fix.
fn compile_error(field: &str, err: &jsonschema::ValidationError<'_>) -> FieldError {
    let is_regex = matches!(
        err.kind(),
        jsonschema::error::ValidationErrorKind::Format { format } if format == "regex"
    );
    if !is_regex {
        return FieldError::new(field, format!("cannot compile JSON Schema: {err}"));
    }
    let at = pointer_to_dotted(err.schema_path().as_str());
    FieldError::new(
        join_field(field, &at),
        format!(
            "{} is not a pattern toolshed can match: patterns are matched in linear time, \
             so look-around (`(?=`, `(?!`, `(?<=`, `(?<!`) and backreferences (`\\1`) are \
             not supported, and a compiled pattern may take at most {PATTERN_SIZE_LIMIT} \
             bytes; rewrite it without them",
            truncate_json(err.instance(), 120)
        ),
    )
}

/// A schema checked against its meta-schema and compiled once, ready to validate
/// many values. Cheap to clone.
#[derive(Clone)]
pub struct CompiledSchema {
    inner: Arc<Compiled>,
}

struct Compiled {
    source: Value,
    validator: Validator,
    /// Whether any `default` keyword appears; when none does, applying defaults is a
    /// no-op and is skipped on the hot path.
    has_defaults: bool,
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("source", &self.inner.source)
            .finish()
    }
}

impl CompiledSchema {
    /// Check `schema` against its meta-schema and compile it. `field` names where the
    /// schema sits (e.g. `input_schema`) so errors can point at it.
    pub fn compile(schema: &Value, field: &str) -> Result<Self, FieldError> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err(FieldError::new(
                field,
                format!(
                    "a JSON Schema must be an object (or true/false), got {}",
                    kind_of(schema)
                ),
            ));
        }
        let draft = match schema.get("$schema") {
            None => Draft::Draft202012,
            Some(Value::String(uri)) => {
                let trimmed = uri.trim_end_matches('#');
                match KNOWN_DRAFTS.iter().find(|(known, _)| *known == trimmed) {
                    Some((_, draft)) => *draft,
                    None => {
                        return Err(FieldError::new(
                            format!("{field}.$schema"),
                            format!(
                                "unknown meta-schema `{uri}`; use \
                                 `https://json-schema.org/draft/2020-12/schema` or leave \
                                 `$schema` out"
                            ),
                        ));
                    }
                }
            }
            Some(other) => {
                return Err(FieldError::new(
                    format!("{field}.$schema"),
                    format!("must be a string URI, got {}", kind_of(other)),
                ));
            }
        };
        // Meta-validation first: it reports a misspelt type or a negative maxLength with
        // the path inside the schema, which compiling alone does not always do.
        if let Err(err) = jsonschema::meta::validate(schema) {
            let at = pointer_to_dotted(err.instance_path().as_str());
            return Err(FieldError::new(
                join_field(field, &at),
                format!("not a valid JSON Schema: {}", err),
            ));
        }
        let validator = jsonschema::options()
            .with_draft(draft)
            .with_retriever(NoRemoteRefs)
            .with_pattern_options(linear_patterns())
            .build(schema)
            .map_err(|err| compile_error(field, &err))?;
        Ok(CompiledSchema {
            inner: Arc::new(Compiled {
                has_defaults: contains_key(schema, "default"),
                source: schema.clone(),
                validator,
            }),
        })
    }

    /// The schema as given.
    pub fn source(&self) -> &Value {
        &self.inner.source
    }

    /// Apply defaults for missing properties, then validate. On failure, every
    /// violation is returned, each with its JSON pointer.
    pub fn validate_with_defaults(&self, value: &mut Value) -> Result<(), Vec<Violation>> {
        if self.inner.has_defaults {
            apply_defaults(&self.inner.source, &self.inner.source, value, 0);
        }
        self.validate(value)
    }

    /// Validate without changing the value.
    pub fn validate(&self, value: &Value) -> Result<(), Vec<Violation>> {
        // `is_valid` is much cheaper than collecting errors; only a failing value pays
        // for the full report.
        if self.inner.validator.is_valid(value) {
            return Ok(());
        }
        let violations: Vec<Violation> = self
            .inner
            .validator
            .iter_errors(value)
            .map(|err| Violation {
                pointer: err.instance_path().as_str().to_owned(),
                expected: err.to_string(),
                keyword: err.kind().keyword().to_owned(),
                given: err.instance().clone().into_owned(),
            })
            .collect();
        Err(violations)
    }
}

/// One way a value failed its schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    /// JSON pointer to the offending value (`""` is the whole value).
    pub pointer: String,
    /// The schema keyword that failed (`type`, `required`, `maximum`, …).
    pub keyword: String,
    /// What was expected, as the validator words it.
    pub expected: String,
    /// The value found at `pointer`.
    pub given: Value,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "(root)"
        } else {
            &self.pointer
        };
        write!(
            f,
            "at {at}: {} [{}]; given {}",
            self.expected,
            self.keyword,
            truncate_json(&self.given, 120)
        )
    }
}

/// Render violations as the text a model sees: one line each, every one listed.
pub fn describe_violations(what: &str, violations: &[Violation]) -> String {
    let mut out = format!(
        "{what} ({} problem{}):",
        violations.len(),
        if violations.len() == 1 { "" } else { "s" }
    );
    for v in violations {
        out.push_str("\n- ");
        out.push_str(&v.to_string());
    }
    out
}

/// Rewrite OpenAPI's `nullable: true` (used by the seed's `tool.yaml`) into JSON Schema's
/// `type: [T, "null"]`, everywhere in the schema. Schemas that never say `nullable` are
/// returned unchanged.
pub fn normalize_nullable(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("nullable") == Some(&Value::Bool(true)) {
                map.remove("nullable");
                match map.get_mut("type") {
                    Some(Value::String(t)) => {
                        let t = std::mem::take(t);
                        map.insert(
                            "type".into(),
                            Value::Array(vec![Value::String(t), Value::String("null".into())]),
                        );
                    }
                    Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
                        types.push(Value::String("null".into()));
                    }
                    _ => {}
                }
                // An enum lists every value the schema allows: `null` is one now.
                if let Some(Value::Array(values)) = map.get_mut("enum")
                    && !values.contains(&Value::Null)
                {
                    values.push(Value::Null);
                }
            } else if map.get("nullable") == Some(&Value::Bool(false)) {
                map.remove("nullable");
            }
            for v in map.values_mut() {
                normalize_nullable(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_nullable),
        _ => {}
    }
}

/// Fill in `default`s of missing object properties, following local `#/...` refs.
/// Depth-bounded so a recursive schema cannot loop.
fn apply_defaults(root: &Value, schema: &Value, value: &mut Value, depth: usize) {
    if depth > 32 {
        return;
    }
    let Some(schema_obj) = schema.as_object() else {
        return;
    };
    if let Some(Value::String(reference)) = schema_obj.get("$ref")
        && let Some(target) = resolve_local_ref(root, reference)
    {
        apply_defaults(root, target, value, depth + 1);
    }
    for key in ["allOf"] {
        if let Some(Value::Array(subs)) = schema_obj.get(key) {
            for sub in subs {
                apply_defaults(root, sub, value, depth + 1);
            }
        }
    }
    let (Some(Value::Object(props)), Value::Object(obj)) = (schema_obj.get("properties"), value)
    else {
        return;
    };
    for (name, prop_schema) in props {
        match obj.get_mut(name) {
            Some(present) => apply_defaults(root, prop_schema, present, depth + 1),
            None => {
                if let Some(default) = default_of(root, prop_schema, depth) {
                    // A default object may itself miss defaulted properties.
                    let mut filled = default.clone();
                    apply_defaults(root, prop_schema, &mut filled, depth + 1);
                    obj.insert(name.clone(), filled);
                }
            }
        }
    }
}

fn default_of<'a>(root: &'a Value, schema: &'a Value, depth: usize) -> Option<&'a Value> {
    if depth > 32 {
        return None;
    }
    let obj = schema.as_object()?;
    if let Some(d) = obj.get("default") {
        return Some(d);
    }
    match obj.get("$ref") {
        Some(Value::String(r)) => default_of(root, resolve_local_ref(root, r)?, depth + 1),
        _ => None,
    }
}

fn resolve_local_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn contains_key(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map.contains_key(key) || map.values().any(|v| contains_key(v, key)),
        Value::Array(items) => items.iter().any(|v| contains_key(v, key)),
        _ => false,
    }
}

/// A short name for a JSON value's kind, for error messages.
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serialize `value` compactly, cut to at most `max` characters.
pub fn truncate_json(value: &Value, max: usize) -> String {
    let text = value.to_string();
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

fn pointer_to_dotted(pointer: &str) -> String {
    pointer
        .split('/')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

fn join_field(field: &str, sub: &str) -> String {
    if sub.is_empty() {
        field.to_owned()
    } else {
        format!("{field}.{sub}")
    }
}

/// An empty object schema: a tool without arguments.
pub fn empty_object_schema() -> Value {
    let mut map = Map::new();
    map.insert("type".into(), Value::String("object".into()));
    map.insert("properties".into(), Value::Object(Map::new()));
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check_invalid_schema(schema: Value, expect_field: &str, expect_in_msg: &str) {
        let err = CompiledSchema::compile(&schema, "input_schema").unwrap_err();
        assert_eq!(err.field, expect_field, "{err}");
        assert!(
            err.message.contains(expect_in_msg),
            "message `{}` should contain `{expect_in_msg}`",
            err.message
        );
    }

    #[test]
    fn a_catastrophic_pattern_is_matched_in_linear_time() {
        // `^(a+)+$` backtracks exponentially on `aaaa…!` in a backtracking engine; the
        // linear engine answers at once. No timing assert: it must return an answer.
        let hostile = format!("{}!", "a".repeat(100_000));
        for (schema, bad, good) in [
            (
                json!({"type": "string", "pattern": "^(a+)+$"}),
                json!(hostile),
                json!("aaaa"),
            ),
            (
                json!({"type": "string", "pattern": "^(a|aa)*(a|aa)*(a|aa)*b$"}),
                json!(hostile),
                json!("aaab"),
            ),
            (
                json!({"patternProperties": {"^(a|a)*$": {"type": "integer"}}}),
                json!({ hostile.clone(): 1, "aaa": "not an integer" }),
                json!({ hostile.clone(): "anything", "aaa": 1 }),
            ),
        ] {
            let compiled = CompiledSchema::compile(&schema, "input_schema").unwrap();
            assert!(compiled.validate(&bad).is_err(), "{schema}");
            assert!(compiled.validate(&good).is_ok(), "{schema}");
        }
    }

    #[test]
    fn patterns_the_linear_engine_cannot_match_are_refused_at_compile() {
        for (schema, field) in [
            (
                json!({"type": "string", "pattern": "^(?=a)a+$"}),
                "input_schema.pattern",
            ),
            (
                json!({"properties": {"code": {"pattern": "(a)\\1"}}}),
                "input_schema.properties.code.pattern",
            ),
            (
                json!({"patternProperties": {"^(?!x)": {}}}),
                "input_schema.patternProperties",
            ),
        ] {
            let err = CompiledSchema::compile(&schema, "input_schema").unwrap_err();
            assert!(
                err.field.starts_with(field),
                "{schema}: field {}",
                err.field
            );
            assert!(err.message.contains("look-around"), "{schema}: {err}");
        }
    }

    #[test]
    fn rejects_schemas_that_are_not_json_schema() {
        check_invalid_schema(json!({"type": "strng"}), "input_schema.type", "not a valid");
        check_invalid_schema(
            json!({"type": "object", "properties": {"a": {"maxLength": -1}}}),
            "input_schema.properties.a.maxLength",
            "not a valid",
        );
        check_invalid_schema(json!("object"), "input_schema", "must be an object");
        check_invalid_schema(
            json!({"$schema": "https://evil.example/schema"}),
            "input_schema.$schema",
            "unknown meta-schema",
        );
    }

    #[test]
    fn refuses_remote_refs() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"$ref": "https://example.com/schema.json"}}
        });
        let err = CompiledSchema::compile(&schema, "input_schema").unwrap_err();
        assert!(err.message.contains("refused"), "{err}");
        let schema = json!({"$ref": "file:///etc/passwd"});
        let err = CompiledSchema::compile(&schema, "input_schema").unwrap_err();
        assert!(err.message.contains("refused"), "{err}");
    }

    #[test]
    fn local_refs_and_defaults() {
        let schema = json!({
            "type": "object",
            "properties": {
                "opts": {"$ref": "#/$defs/Opts", "default": {}},
                "limit": {"type": "integer", "default": 5}
            },
            "$defs": {"Opts": {"type": "object", "properties": {"deep": {"type": "boolean", "default": true}}}}
        });
        let compiled = CompiledSchema::compile(&schema, "input_schema").unwrap();
        let mut value = json!({});
        compiled.validate_with_defaults(&mut value).unwrap();
        assert_eq!(value, json!({"opts": {"deep": true}, "limit": 5}));
    }

    #[test]
    fn reports_every_violation_with_pointer_expected_and_given() {
        let schema = json!({
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "maximum": 10},
                "tags": {"type": "array", "items": {"type": "string"}}
            }
        });
        let compiled = CompiledSchema::compile(&schema, "input_schema").unwrap();
        let mut value = json!({"limit": 50, "tags": ["a", 3]});
        let violations = compiled.validate_with_defaults(&mut value).unwrap_err();
        let mut pointers: Vec<_> = violations.iter().map(|v| v.pointer.as_str()).collect();
        pointers.sort_unstable();
        assert_eq!(pointers, vec!["", "/limit", "/tags/1"]);
        let limit = violations.iter().find(|v| v.pointer == "/limit").unwrap();
        assert_eq!(limit.keyword, "maximum");
        assert_eq!(limit.given, json!(50));
        let text = describe_violations("invalid arguments", &violations);
        assert!(text.contains("3 problems"), "{text}");
        assert!(text.contains("\"query\""), "{text}");
    }

    #[test]
    fn nullable_is_rewritten() {
        let mut schema = json!({"type": "object", "properties": {
            "tracking": {"type": "string", "nullable": true},
            "n": {"type": ["integer"], "nullable": true},
            "m": {"type": "integer", "nullable": false}
        }});
        normalize_nullable(&mut schema);
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {
                "tracking": {"type": ["string", "null"]},
                "n": {"type": ["integer", "null"]},
                "m": {"type": "integer"}
            }})
        );
    }
}
