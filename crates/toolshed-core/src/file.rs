//! Tool definitions as files: AgentBreeder's `tool.yaml` format (also accepted as
//! JSON), extended with toolshed's durability fields.
//!
//! Parsing is strict: unknown fields are refused (a misspelt `idempotancy` must not be
//! silently ignored), every field is checked, and errors name the field and the fix.
//! This module parses text; reading the file is the caller's job (the model layer does
//! no IO).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{FieldError, SpecError};
use crate::schema::{CompiledSchema, normalize_nullable};
use crate::spec::{
    Approval, CelPredicate, Effects, Idempotency, RetryPolicy, ToolMeta, ToolName, ToolSpec,
};

/// The text format of a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// YAML (`tool.yaml`).
    Yaml,
    /// JSON.
    Json,
}

impl FileFormat {
    /// Guess from a file name: `.json` is JSON, anything else YAML.
    pub fn from_path(path: &str) -> Self {
        if path.to_ascii_lowercase().ends_with(".json") {
            FileFormat::Json
        } else {
            FileFormat::Yaml
        }
    }
}

/// The `implementation` block of `tool.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Implementation {
    /// `python`, `node`, `javascript`, `typescript`, `exec`, `http` or `builtin`.
    pub language: String,
    /// `path/to/file.py:function`, a module path, a URL…
    pub entrypoint: String,
    /// Package requirements, informative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
}

/// A tool definition file, field for field. The seed's fields come first, then
/// toolshed's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFile {
    /// Must be `v1`.
    pub spec_version: String,
    /// The tool name, `^[A-Za-z0-9_-]{1,64}$`.
    pub name: String,
    /// The tool's own version, `MAJOR.MINOR.PATCH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// What the tool does.
    pub description: String,
    /// The owning team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// `function`, `mcp` or `api`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub tool_type: Option<String>,
    /// The input JSON Schema; a tool without arguments may leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// The output JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Where the code is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<Implementation>,
    /// The dispatch endpoint (`builtin:`, `python:`, `node:`, `exec:`, `http(s)://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Timeout in seconds (the seed's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// Timeout in milliseconds (finer; do not set both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Whether the tool may use the network in a sandbox.
    #[serde(default)]
    pub network_access: bool,
    /// `none`, `sandbox` or `external`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects: Option<Effects>,
    /// `keyed` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<Idempotency>,
    /// Opt out of "external effects need keyed idempotency".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unkeyed_external: bool,
    /// `never`, `always`, `{when: "<CEL over args>"}` or `{always: true}`, the mappings
    /// optionally with `four_eyes: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
    /// Crash-window bound for keyed calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// In-process retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Credential names the tool may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// A bread or Toren file's own contract, as its code declares it (an approval
    /// predicate, hooks, a human gate, retries): read from the code by the registry
    /// when it is registered, never taken from a client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<Value>,
}

const TOOL_TYPES: &[&str] = &["function", "mcp", "api"];
const LANGUAGES: &[&str] = &[
    "python",
    "node",
    "javascript",
    "typescript",
    "exec",
    "http",
    "builtin",
];
/// The longest timeout a file may ask for: one day.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Parse and check a definition. `origin` (a file name) is put into error messages.
pub fn parse_tool_file(
    text: &str,
    format: FileFormat,
    origin: Option<&str>,
) -> Result<ToolSpec, SpecError> {
    let file: ToolFile = deserialize(text, format).map_err(|message| SpecError::Parse {
        origin: origin.map(str::to_owned),
        message,
    })?;
    file.into_spec().map_err(|e| match origin {
        Some(o) => e.with_origin(o),
        None => e,
    })
}

fn deserialize<T: serde::de::DeserializeOwned>(
    text: &str,
    format: FileFormat,
) -> Result<T, String> {
    match format {
        FileFormat::Yaml => {
            if text.trim().is_empty() {
                return Err("the file is empty; a tool definition needs at least spec_version, name and description".into());
            }
            let de = serde_yaml_ng::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de)
                .map_err(|e| describe_path_error(e.path().to_string(), e.into_inner().to_string()))
        }
        FileFormat::Json => {
            let mut de = serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(&mut de)
                .map_err(|e| describe_path_error(e.path().to_string(), e.into_inner().to_string()))
        }
    }
}

fn describe_path_error(path: String, inner: String) -> String {
    if path.is_empty() || path == "." {
        inner
    } else {
        format!("field `{path}`: {inner}")
    }
}

impl ToolFile {
    /// Check every field and build the spec. All problems are reported together.
    pub fn into_spec(self) -> Result<ToolSpec, SpecError> {
        let mut errors: Vec<FieldError> = Vec::new();
        if self.spec_version != "v1" {
            errors.push(FieldError::new(
                "spec_version",
                format!("`{}` is not supported; use `v1`", self.spec_version),
            ));
        }
        let name = ToolName::new(&self.name).map_err(|e| errors.push(e)).ok();
        if let Some(v) = &self.version
            && !is_semver(v)
        {
            errors.push(FieldError::new(
                "version",
                format!("`{v}` is not MAJOR.MINOR.PATCH, e.g. `1.0.0`"),
            ));
        }
        if let Some(t) = &self.tool_type
            && !TOOL_TYPES.contains(&t.as_str())
        {
            errors.push(FieldError::new(
                "type",
                format!("`{t}` is not one of {}", TOOL_TYPES.join(", ")),
            ));
        }
        for (i, tag) in self.tags.iter().enumerate() {
            if tag.trim().is_empty() {
                errors.push(FieldError::new(format!("tags[{i}]"), "must not be empty"));
            }
        }
        let input_schema = self
            .input_schema
            .map(|mut s| {
                normalize_nullable(&mut s);
                s
            })
            .unwrap_or_else(crate::schema::empty_object_schema);
        if let Err(e) = CompiledSchema::compile(&input_schema, "input_schema") {
            errors.push(e);
        }
        let output_schema = self.output_schema.map(|mut s| {
            normalize_nullable(&mut s);
            s
        });
        if let Some(s) = &output_schema
            && let Err(e) = CompiledSchema::compile(s, "output_schema")
        {
            errors.push(e);
        }
        if let Some(imp) = &self.implementation {
            if !LANGUAGES.contains(&imp.language.as_str()) {
                errors.push(FieldError::new(
                    "implementation.language",
                    format!("`{}` is not one of {}", imp.language, LANGUAGES.join(", ")),
                ));
            }
            if imp.entrypoint.trim().is_empty() {
                errors.push(FieldError::new(
                    "implementation.entrypoint",
                    "must not be empty, e.g. `tools/order_lookup.py:order_lookup`",
                ));
            }
        }
        if let Some(ep) = &self.endpoint {
            const PREFIXES: &[&str] = &[
                "builtin:", "python:", "node:", "exec:", "http://", "https://", "mcp:",
            ];
            if !PREFIXES.iter().any(|p| ep.starts_with(p)) {
                errors.push(FieldError::new(
                    "endpoint",
                    format!(
                        "`{ep}` has no known prefix; use one of {}",
                        PREFIXES.join(", ")
                    ),
                ));
            }
        }
        let timeout = match (self.timeout_seconds, self.timeout_ms) {
            (Some(_), Some(_)) => {
                errors.push(FieldError::new(
                    "timeout_ms",
                    "set either `timeout_seconds` or `timeout_ms`, not both",
                ));
                None
            }
            (Some(s), None) => Some(("timeout_seconds", Duration::from_secs(s))),
            (None, Some(ms)) => Some(("timeout_ms", Duration::from_millis(ms))),
            (None, None) => None,
        };
        let timeout = timeout.and_then(|(field, t)| {
            if t.is_zero() {
                errors.push(FieldError::new(field, "must be greater than zero"));
                None
            } else if t > MAX_TIMEOUT {
                errors.push(FieldError::new(
                    field,
                    "must be at most one day (86400 seconds)",
                ));
                None
            } else {
                Some(t)
            }
        });
        let (approval, four_eyes) = match self.approval.as_ref().map(parse_approval) {
            None => (Approval::Never, false),
            Some(Ok(a)) => a,
            Some(Err(e)) => {
                errors.push(e);
                (Approval::Never, false)
            }
        };
        let name_ok = name.is_some();
        let spec = ToolSpec {
            // A placeholder keeps the cross-field checks below running when the name is
            // bad, so every problem is reported in one pass.
            name: name.unwrap_or_else(|| ToolName::new("invalid").expect("a valid literal")),
            description: self.description,
            input_schema,
            output_schema,
            effects: self.effects.unwrap_or_default(),
            idempotency: self.idempotency.unwrap_or_default(),
            allow_unkeyed_external: self.allow_unkeyed_external,
            approval,
            four_eyes,
            timeout,
            max_attempts: self.max_attempts,
            retry: self.retry.unwrap_or_default(),
            credentials: self.credentials,
            streaming: false,
            human: false,
            meta: ToolMeta {
                version: self.version,
                team: self.team,
                owner: self.owner,
                tags: self.tags,
                tool_type: self.tool_type,
                endpoint: self.endpoint,
                implementation: self
                    .implementation
                    .and_then(|i| serde_json::to_value(i).ok()),
                network_access: self.network_access,
                revision: None,
            },
        };
        errors.extend(spec.check());
        if errors.is_empty() && name_ok {
            Ok(spec)
        } else {
            Err(SpecError::Fields {
                origin: None,
                errors,
            })
        }
    }

    /// The file form of a spec (for `show`, exports and registries). A Rust-closure
    /// approval cannot be written down and is shown as `{"when": "<rust closure>"}`.
    pub fn from_spec(spec: &ToolSpec) -> ToolFile {
        let m = &spec.meta;
        ToolFile {
            spec_version: "v1".into(),
            name: spec.name.to_string(),
            version: m.version.clone(),
            description: spec.description.clone(),
            team: m.team.clone(),
            owner: m.owner.clone(),
            tags: m.tags.clone(),
            tool_type: m.tool_type.clone(),
            input_schema: Some(spec.input_schema.clone()),
            output_schema: spec.output_schema.clone(),
            implementation: m
                .implementation
                .clone()
                .and_then(|v| serde_json::from_value(v).ok()),
            endpoint: m.endpoint.clone(),
            timeout_seconds: None,
            timeout_ms: spec.timeout.map(|t| t.as_millis() as u64),
            network_access: m.network_access,
            effects: Some(spec.effects),
            idempotency: Some(spec.idempotency),
            allow_unkeyed_external: spec.allow_unkeyed_external,
            approval: Some(match (&spec.approval, spec.four_eyes) {
                (Approval::Never, _) => Value::String("never".into()),
                (Approval::Always, false) => Value::String("always".into()),
                (Approval::Always, true) => serde_json::json!({"always": true, "four_eyes": true}),
                (Approval::When(_), four_eyes) => {
                    with_four_eyes(serde_json::json!({"when": "<rust closure>"}), four_eyes)
                }
                (Approval::Cel(p), four_eyes) => {
                    with_four_eyes(serde_json::json!({"when": p.source()}), four_eyes)
                }
                (Approval::Check(_, what), four_eyes) => {
                    with_four_eyes(serde_json::json!({"when": format!("<{what}>")}), four_eyes)
                }
            }),
            max_attempts: spec.max_attempts,
            retry: (spec.retry.attempts > 0).then_some(spec.retry),
            credentials: spec.credentials.clone(),
            compat: None,
        }
    }
}

fn with_four_eyes(mut approval: Value, four_eyes: bool) -> Value {
    if four_eyes && let Some(map) = approval.as_object_mut() {
        map.insert("four_eyes".into(), Value::Bool(true));
    }
    approval
}

/// `approval`: `never`, `always`, or a mapping `{when: "<CEL>"}` / `{always: true}`,
/// either with `four_eyes: true` (the caller may not approve its own call).
fn parse_approval(value: &Value) -> Result<(Approval, bool), FieldError> {
    const HELP: &str = "use `never`, `always`, `{when: \"<CEL expression over args>\"}` \
                        (e.g. `{when: \"args.amount > 100\"}`) or `{always: true}`, either \
                        with `four_eyes: true` to forbid approving one's own call";
    match value {
        Value::String(s) if s == "never" => Ok((Approval::Never, false)),
        Value::String(s) if s == "always" => Ok((Approval::Always, false)),
        Value::String(s) => Err(FieldError::new(
            "approval",
            format!("`{s}` is not valid; {HELP}"),
        )),
        Value::Object(map) => {
            if let Some(extra) = map
                .keys()
                .find(|k| !["when", "always", "four_eyes"].contains(&k.as_str()))
            {
                return Err(FieldError::new(
                    format!("approval.{extra}"),
                    format!("unknown field; {HELP}"),
                ));
            }
            let four_eyes = match map.get("four_eyes") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(FieldError::new(
                        "approval.four_eyes",
                        format!(
                            "must be true or false, got {}",
                            crate::schema::kind_of(other)
                        ),
                    ));
                }
            };
            let approval = match (map.get("when"), map.get("always")) {
                (Some(_), Some(_)) => {
                    return Err(FieldError::new(
                        "approval",
                        format!("give `when` or `always`, not both; {HELP}"),
                    ));
                }
                (Some(Value::String(expr)), None) if !expr.trim().is_empty() => {
                    Approval::Cel(CelPredicate::compile(expr)?)
                }
                (Some(_), None) => {
                    return Err(FieldError::new(
                        "approval.when",
                        "must be a non-empty CEL expression string over `args`",
                    ));
                }
                (None, Some(Value::Bool(true))) => Approval::Always,
                (None, Some(_)) => {
                    return Err(FieldError::new(
                        "approval.always",
                        "must be `true` (leave `approval` out, or write `never`, for no gate)",
                    ));
                }
                (None, None) => {
                    return Err(FieldError::new(
                        "approval",
                        format!("missing `when` or `always`; {HELP}"),
                    ));
                }
            };
            Ok((approval, four_eyes))
        }
        other => Err(FieldError::new(
            "approval",
            format!("got {}; {HELP}", crate::schema::kind_of(other)),
        )),
    }
}

fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's `tool.yaml`, verbatim.
    const SEED: &str = r#"
spec_version: v1
name: order-lookup
version: 1.0.0
description: Look up an order by ID with optional tracking
team: customer-success
owner: alice@company.com
tags: [orders, ecommerce]

type: function   # function | mcp | api

input_schema:
  type: object
  properties:
    order_id:
      type: string
      description: Order ID in format ORD-XXXXXX
    include_tracking:
      type: boolean
      default: false
  required: [order_id]

output_schema:
  type: object
  properties:
    order_id: { type: string }
    status:   { type: string }
    tracking: { type: string, nullable: true }

implementation:
  language: python
  entrypoint: tools/order_lookup.py:order_lookup
  dependencies:
    - requests==2.31.0

timeout_seconds: 30
network_access: false
"#;

    fn check_err(text: &str, format: FileFormat, expect_field: &str, expect_msg: &str) {
        let err = parse_tool_file(text, format, Some("tool.yaml")).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("tool.yaml"), "{shown}");
        match &err {
            SpecError::Fields { errors, .. } => {
                let hit = errors
                    .iter()
                    .find(|e| e.field == expect_field)
                    .unwrap_or_else(|| panic!("no error on `{expect_field}` in: {shown}"));
                assert!(hit.message.contains(expect_msg), "{shown}");
            }
            SpecError::Parse { message, .. } => {
                assert!(message.contains(expect_field), "{shown}");
                assert!(message.contains(expect_msg), "{shown}");
            }
        }
    }

    #[test]
    fn reads_the_seed_file() {
        let spec = parse_tool_file(SEED, FileFormat::Yaml, None).unwrap();
        assert_eq!(spec.name.as_str(), "order-lookup");
        assert_eq!(spec.timeout, Some(Duration::from_secs(30)));
        assert_eq!(spec.meta.tags, vec!["orders", "ecommerce"]);
        assert_eq!(spec.meta.tool_type.as_deref(), Some("function"));
        // `nullable: true` became a JSON Schema type union.
        assert_eq!(
            spec.output_schema.unwrap()["properties"]["tracking"]["type"],
            serde_json::json!(["string", "null"])
        );
    }

    #[test]
    fn reads_json_and_extensions() {
        let text = r#"{"spec_version":"v1","name":"pay","description":"Pay an invoice",
            "effects":"external","idempotency":"keyed","approval":{"when":"args.amount > 100"},
            "max_attempts":2,"retry":{"attempts":3},"credentials":["PAY_KEY"],"timeout_ms":1500,
            "input_schema":{"type":"object","properties":{"amount":{"type":"number"}}}}"#;
        let spec = parse_tool_file(text, FileFormat::Json, None).unwrap();
        assert_eq!(spec.effects, Effects::External);
        assert_eq!(spec.retry.attempts, 3);
        assert_eq!(spec.timeout, Some(Duration::from_millis(1500)));
        assert!(
            spec.approval
                .applies(&serde_json::json!({"amount": 101}))
                .unwrap()
        );
        assert!(
            !spec
                .approval
                .applies(&serde_json::json!({"amount": 99}))
                .unwrap()
        );
    }

    #[test]
    fn four_eyes_is_read_from_the_approval_mapping_and_written_back() {
        let base = "spec_version: v1\nname: t\ndescription: d\n";
        for (approval, gated, four_eyes) in [
            ("always", true, false),
            ("{always: true}", true, false),
            ("{always: true, four_eyes: true}", true, true),
            ("{when: 'args.n > 1', four_eyes: true}", true, true),
            ("{when: 'args.n > 1', four_eyes: false}", true, false),
        ] {
            let text = format!("{base}approval: {approval}\n");
            let spec = parse_tool_file(&text, FileFormat::Yaml, None).unwrap();
            assert_eq!(spec.four_eyes, four_eyes, "{approval}");
            assert_eq!(
                spec.approval.applies(&serde_json::json!({"n": 2})).unwrap(),
                gated,
                "{approval}"
            );
            // The file form keeps the policy, so a registry round trip keeps it too.
            let back = ToolFile::from_spec(&spec).approval.unwrap();
            let again = parse_approval(&back).unwrap();
            assert_eq!(again.1, four_eyes, "{approval} -> {back}");
        }
    }

    #[test]
    fn bad_four_eyes_approvals_name_the_field() {
        use FileFormat::*;
        let base = "spec_version: v1\nname: t\ndescription: d\n";
        check_err(
            &format!("{base}approval: {{four_eyes: true}}\n"),
            Yaml,
            "approval",
            "missing `when` or `always`",
        );
        check_err(
            &format!("{base}approval: {{always: true, four_eyes: 'yes'}}\n"),
            Yaml,
            "approval.four_eyes",
            "must be true or false",
        );
        check_err(
            &format!("{base}approval: {{always: false}}\n"),
            Yaml,
            "approval.always",
            "must be `true`",
        );
        check_err(
            &format!("{base}approval: {{always: true, when: 'args.x > 1'}}\n"),
            Yaml,
            "approval",
            "not both",
        );
        check_err(
            &format!("{base}approval: {{always: true, four_eye: true}}\n"),
            Yaml,
            "approval.four_eye",
            "unknown field",
        );
    }

    #[test]
    fn bad_files_name_the_field() {
        use FileFormat::*;
        let base = "spec_version: v1\nname: t\ndescription: d\n";
        check_err("", Yaml, "", "empty");
        check_err("name: [unclosed", Yaml, "", "");
        check_err(
            &format!("{base}timeout_seconds: abc\n"),
            Yaml,
            "timeout_seconds",
            "invalid type",
        );
        check_err(
            &format!("{base}idempotancy: keyed\n"),
            Yaml,
            "",
            "unknown field `idempotancy`",
        );
        check_err(
            &format!("{base}effects: loud\n"),
            Yaml,
            "effects",
            "unknown variant",
        );
        check_err(
            "spec_version: v2\nname: t\ndescription: d\n",
            Yaml,
            "spec_version",
            "use `v1`",
        );
        check_err(
            "spec_version: v1\nname: bad name\ndescription: d\n",
            Yaml,
            "name",
            "contains ' '",
        );
        check_err(
            &format!("{base}input_schema: {{type: strng}}\n"),
            Yaml,
            "input_schema.type",
            "not a valid JSON Schema",
        );
        check_err(
            &format!("{base}input_schema: {{type: array}}\n"),
            Yaml,
            "input_schema.type",
            "must be \"object\"",
        );
        check_err(
            &format!("{base}approval: sometimes\n"),
            Yaml,
            "approval",
            "is not valid",
        );
        check_err(
            &format!("{base}approval: {{when: 'args.x >'}}\n"),
            Yaml,
            "approval.when",
            "not a valid CEL",
        );
        check_err(
            &format!("{base}timeout_seconds: 0\n"),
            Yaml,
            "timeout_seconds",
            "greater than zero",
        );
        check_err(
            &format!("{base}credentials: ['a/b']\n"),
            Yaml,
            "credentials[0]",
            "contains '/'",
        );
        check_err(
            &format!("{base}effects: external\n"),
            Yaml,
            "idempotency",
            "keyed",
        );
        check_err(&format!("{base}type: lambda\n"), Yaml, "type", "not one of");
        check_err(
            &format!("{base}version: one\n"),
            Yaml,
            "version",
            "MAJOR.MINOR.PATCH",
        );
        check_err(
            &format!("{base}endpoint: ftp://x\n"),
            Yaml,
            "endpoint",
            "no known prefix",
        );
        check_err(
            "{\"spec_version\": \"v1\", \"name\": 3}",
            Json,
            "name",
            "invalid type",
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = "spec_version: v9\nname: 'a b'\ndescription: ''\ntimeout_seconds: 0\n";
        let err = parse_tool_file(text, FileFormat::Yaml, None).unwrap_err();
        let fields: Vec<&str> = err
            .field_errors()
            .iter()
            .map(|e| e.field.as_str())
            .collect();
        assert_eq!(
            fields,
            vec!["spec_version", "name", "timeout_seconds", "description"]
        );
    }

    #[test]
    fn round_trips_through_the_file_form() {
        let spec = parse_tool_file(SEED, FileFormat::Yaml, None).unwrap();
        let file = ToolFile::from_spec(&spec);
        let text = serde_json::to_string(&file).unwrap();
        let again = parse_tool_file(&text, FileFormat::Json, None).unwrap();
        assert_eq!(again.input_schema, spec.input_schema);
        assert_eq!(again.output_schema, spec.output_schema);
        assert_eq!(again.timeout, spec.timeout);
    }
}
