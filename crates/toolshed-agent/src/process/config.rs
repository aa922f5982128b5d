//! `processes:` in `agent.yaml`: the named commands `run_process` may start, each an
//! argv list whose `{arg}` elements are replaced, whole, by declared and typed
//! arguments. Parsing reports every problem at once, each naming its field.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Map, Number, Value, json};

/// The longest string argument, unless the process says less.
pub const DEFAULT_MAX_STRING: u64 = 4096;
/// The most arguments one process may declare.
const MAX_ARGS: usize = 64;
/// The longest command.
const MAX_COMMAND: usize = 256;

/// One element of a process's command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandPart {
    /// Given as written.
    Literal(String),
    /// `{name}`: the argument's value, as one element.
    Arg(String),
}

/// The type of a process argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgType {
    /// Text (no NUL byte, at most `max_length` bytes).
    String,
    /// A whole number.
    Integer,
    /// A number.
    Number,
    /// `true` or `false`, given to the command as that word.
    Boolean,
}

impl ArgType {
    fn parse(s: &str) -> Option<ArgType> {
        match s {
            "string" => Some(ArgType::String),
            "integer" => Some(ArgType::Integer),
            "number" => Some(ArgType::Number),
            "boolean" => Some(ArgType::Boolean),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Integer => "integer",
            ArgType::Number => "number",
            ArgType::Boolean => "boolean",
        }
    }
}

/// One declared argument of a process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArgDef {
    /// Its name, as `{name}` in the command.
    pub name: String,
    /// Its type.
    pub kind: ArgType,
    /// What it is, for the model.
    pub description: Option<String>,
    /// Its value when the call gives none; without one the argument is required.
    pub default: Option<Value>,
    /// The only values allowed.
    pub allowed: Option<Vec<Value>>,
    /// The smallest number allowed.
    pub minimum: Option<Number>,
    /// The largest number allowed.
    pub maximum: Option<Number>,
    /// A regular expression a string must match (unanchored, as JSON Schema's).
    pub pattern: Option<String>,
    /// The longest string, in characters.
    pub max_length: u64,
}

impl ArgDef {
    /// Its JSON Schema.
    pub fn schema(&self) -> Value {
        let mut s = Map::new();
        s.insert("type".into(), json!(self.kind.name()));
        if let Some(d) = &self.description {
            s.insert("description".into(), json!(d));
        }
        if let Some(d) = &self.default {
            s.insert("default".into(), d.clone());
        }
        if let Some(a) = &self.allowed {
            s.insert("enum".into(), Value::Array(a.clone()));
        }
        if let Some(m) = &self.minimum {
            s.insert("minimum".into(), Value::Number(m.clone()));
        }
        if let Some(m) = &self.maximum {
            s.insert("maximum".into(), Value::Number(m.clone()));
        }
        if self.kind == ArgType::String {
            s.insert("maxLength".into(), json!(self.max_length));
            if let Some(p) = &self.pattern {
                s.insert("pattern".into(), json!(p));
            }
        }
        Value::Object(s)
    }
}

/// One entry of `processes:`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessDef {
    /// Its name, as `run_process` takes it.
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// The argv: a literal program, then literals and `{arg}` elements.
    pub command: Vec<CommandPart>,
    /// Its arguments, in the order declared.
    pub args: Vec<ArgDef>,
    /// Environment variables given to it, as written (never the host's).
    pub env: Vec<(String, String)>,
    /// Stopped after this many seconds (default 3600).
    pub timeout_seconds: Option<u64>,
    /// Its memory, swap included, in MB (default 256).
    pub memory_mb: Option<u64>,
    /// Outbound network (off by default).
    pub network: bool,
    /// The agent's project folder shown read-only at `/project` (off by default).
    pub project: bool,
}

impl ProcessDef {
    /// The JSON Schema of its `args` object: exact (every argument typed, nothing else
    /// allowed).
    pub fn args_schema(&self) -> Value {
        let props: Map<String, Value> = self
            .args
            .iter()
            .map(|a| (a.name.clone(), a.schema()))
            .collect();
        let required: Vec<&str> = self
            .args
            .iter()
            .filter(|a| a.default.is_none())
            .map(|a| a.name.as_str())
            .collect();
        json!({
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": false,
        })
    }
}

fn valid_name(n: &str, max: usize, dash: bool) -> bool {
    !n.is_empty()
        && n.len() <= max
        && n.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || (dash && c == '-'))
}

/// `{name}` as a whole element: the argument's name.
fn placeholder(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('{')?.strip_suffix('}')?;
    valid_name(inner, 64, false).then_some(inner)
}

/// Whether `s` holds a `{name}` somewhere inside it.
fn embeds_placeholder(s: &str) -> Option<&str> {
    let mut rest = s;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        if let Some(close) = after.find('}') {
            let inner = &after[..close];
            if valid_name(inner, 64, false) {
                return Some(inner);
            }
        }
        rest = after;
    }
    None
}

/// Parse `processes:` (a mapping of name to definition), pushing every problem.
pub fn parse_processes(value: Value, problems: &mut Vec<String>) -> Vec<ProcessDef> {
    let Value::Object(map) = value else {
        problems.push("field `processes`: must be a mapping of process name to `{command: [PROGRAM, ARG…], args: {NAME: {type: …}}}`".into());
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, def) in map {
        let field = format!("processes.{name}");
        if !valid_name(&name, 64, true) {
            problems.push(format!(
                "field `{field}`: the name must be 1–64 letters, digits, `_` or `-`, starting with a letter"
            ));
            continue;
        }
        if let Some(p) = parse_one(&name, def, &field, problems) {
            out.push(p);
        }
    }
    out
}

fn parse_one(
    name: &str,
    def: Value,
    field: &str,
    problems: &mut Vec<String>,
) -> Option<ProcessDef> {
    let before = problems.len();
    let Value::Object(mut m) = def else {
        problems.push(format!(
            "field `{field}`: must be a mapping with `command: [PROGRAM, ARG…]`"
        ));
        return None;
    };
    let description = match m.remove("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            problems.push(format!("field `{field}.description`: must be a string"));
            None
        }
    };
    let args = match m.remove("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(a)) => {
            if a.len() > MAX_ARGS {
                problems.push(format!(
                    "field `{field}.args`: at most {MAX_ARGS} arguments"
                ));
            }
            a.into_iter()
                .filter_map(|(n, d)| parse_arg(&n, d, &format!("{field}.args.{n}"), problems))
                .collect()
        }
        Some(_) => {
            problems.push(format!(
                "field `{field}.args`: must be a mapping of argument name to `{{type: string|integer|number|boolean, …}}`"
            ));
            Vec::new()
        }
    };
    let declared: BTreeSet<&str> = args.iter().map(|a: &ArgDef| a.name.as_str()).collect();
    let mut used = BTreeSet::new();
    let command = match m.remove("command") {
        Some(Value::Array(items)) if !items.is_empty() => {
            if items.len() > MAX_COMMAND {
                problems.push(format!(
                    "field `{field}.command`: at most {MAX_COMMAND} elements"
                ));
            }
            let mut parts = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                let f = format!("{field}.command[{i}]");
                let text = match item {
                    Value::String(s) => s,
                    // Numbers are written as YAML gives them, e.g. `--epochs, 3`.
                    Value::Number(n) => n.to_string(),
                    _ => {
                        problems.push(format!("field `{f}`: must be a string"));
                        continue;
                    }
                };
                if text.contains('\0') {
                    problems.push(format!("field `{f}`: contains a NUL byte"));
                    continue;
                }
                if let Some(arg) = placeholder(&text) {
                    if i == 0 {
                        problems.push(format!(
                            "field `{f}`: the program must be written out, not an argument: a model never chooses what runs"
                        ));
                    } else if !declared.contains(arg) {
                        problems.push(format!(
                            "field `{f}`: `{{{arg}}}` names no argument; declare it under `{field}.args.{arg}`"
                        ));
                    } else {
                        used.insert(arg.to_owned());
                    }
                    parts.push(CommandPart::Arg(arg.to_owned()));
                } else if let Some(arg) = embeds_placeholder(&text) {
                    problems.push(format!(
                        "field `{f}`: `{{{arg}}}` may only be a whole element (an argument is never spliced into a string); write e.g. `--{arg}`, `{{{arg}}}` as two elements"
                    ));
                } else {
                    parts.push(CommandPart::Literal(text));
                }
            }
            parts
        }
        Some(Value::String(_)) => {
            problems.push(format!(
                "field `{field}.command`: must be a list (argv), not a shell string: write `[python3, train.py, --epochs, \"{{epochs}}\"]`"
            ));
            Vec::new()
        }
        None => {
            problems.push(format!(
                "field `{field}.command` is missing: give the argv, e.g. `[python3, /project/train.py]`"
            ));
            Vec::new()
        }
        Some(_) => {
            problems.push(format!(
                "field `{field}.command`: must be a non-empty list of strings (argv)"
            ));
            Vec::new()
        }
    };
    for a in &args {
        if !used.contains(&a.name) && !command.is_empty() {
            problems.push(format!(
                "field `{field}.args.{0}`: declared but not used; put `\"{{{0}}}\"` in `{field}.command` or remove it",
                a.name
            ));
        }
    }
    let env = match m.remove("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(e)) => e
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) if valid_name(&k, 128, false) && !s.contains('\0') => Some((k, s)),
                Value::Number(n) if valid_name(&k, 128, false) => Some((k, n.to_string())),
                _ => {
                    problems.push(format!(
                        "field `{field}.env.{k}`: must be a variable name with a string value"
                    ));
                    None
                }
            })
            .collect(),
        Some(_) => {
            problems.push(format!(
                "field `{field}.env`: must be a mapping of variable name to value"
            ));
            Vec::new()
        }
    };
    let mut number = |key: &str, max: u64| -> Option<u64> {
        match m.remove(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_u64().is_some_and(|v| (1..=max).contains(&v)) => {
                n.as_u64()
            }
            Some(_) => {
                problems.push(format!(
                    "field `{field}.{key}`: must be a whole number between 1 and {max}"
                ));
                None
            }
        }
    };
    let timeout_seconds = number("timeout_seconds", 7 * 86_400);
    let memory_mb = number("memory_mb", 1_048_576);
    let mut flag = |key: &str| -> bool {
        match m.remove(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                problems.push(format!("field `{field}.{key}`: must be true or false"));
                false
            }
        }
    };
    let network = flag("network");
    let project = flag("project");
    for k in m.keys() {
        problems.push(format!(
            "field `{field}.{k}`: unknown; a process has `description`, `command`, `args`, `env`, `timeout_seconds`, `memory_mb`, `network` and `project`"
        ));
    }
    (problems.len() == before).then(|| ProcessDef {
        name: name.to_owned(),
        description,
        command,
        args,
        env,
        timeout_seconds,
        memory_mb,
        network,
        project,
    })
}

fn parse_arg(name: &str, def: Value, field: &str, problems: &mut Vec<String>) -> Option<ArgDef> {
    if !valid_name(name, 64, false) {
        problems.push(format!(
            "field `{field}`: an argument name must be 1–64 letters, digits or `_`, starting with a letter or `_`"
        ));
        return None;
    }
    let before = problems.len();
    // `epochs: integer` is short for `epochs: {type: integer}`.
    let mut m = match def {
        Value::String(t) => {
            let mut m = Map::new();
            m.insert("type".into(), Value::String(t));
            m
        }
        Value::Object(m) => m,
        _ => {
            problems.push(format!(
                "field `{field}`: must be a type (`string`, `integer`, `number`, `boolean`) or `{{type: …, description: …}}`"
            ));
            return None;
        }
    };
    let kind = match m.remove("type") {
        Some(Value::String(t)) => match ArgType::parse(&t) {
            Some(k) => k,
            None => {
                problems.push(format!(
                    "field `{field}.type`: `{t}` is not one of string, integer, number, boolean"
                ));
                return None;
            }
        },
        _ => {
            problems.push(format!(
                "field `{field}.type` is missing: one of string, integer, number, boolean"
            ));
            return None;
        }
    };
    let description = match m.remove("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            problems.push(format!("field `{field}.description`: must be a string"));
            None
        }
    };
    let numeric = matches!(kind, ArgType::Integer | ArgType::Number);
    let mut bound = |key: &str| -> Option<Number> {
        match m.remove(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if numeric => Some(n),
            Some(_) if !numeric => {
                problems.push(format!(
                    "field `{field}.{key}`: only an integer or number argument has one"
                ));
                None
            }
            Some(_) => {
                problems.push(format!("field `{field}.{key}`: must be a number"));
                None
            }
        }
    };
    let minimum = bound("minimum");
    let maximum = bound("maximum");
    let pattern = match m.remove("pattern") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if kind == ArgType::String => {
            match regex::RegexBuilder::new(&p).size_limit(1 << 20).build() {
                Ok(_) => Some(p),
                Err(e) => {
                    problems.push(format!(
                        "field `{field}.pattern`: not a valid regular expression: {e}"
                    ));
                    None
                }
            }
        }
        Some(_) => {
            problems.push(format!(
                "field `{field}.pattern`: only a string argument has one, and it must be a string"
            ));
            None
        }
    };
    let max_length = match m.remove("max_length").or_else(|| m.remove("maxLength")) {
        None | Some(Value::Null) => DEFAULT_MAX_STRING,
        Some(Value::Number(n))
            if kind == ArgType::String
                && n.as_u64()
                    .is_some_and(|v| (1..=DEFAULT_MAX_STRING * 16).contains(&v)) =>
        {
            n.as_u64().unwrap_or(DEFAULT_MAX_STRING)
        }
        Some(_) => {
            problems.push(format!(
                "field `{field}.max_length`: a string argument's length cap, between 1 and {}",
                DEFAULT_MAX_STRING * 16
            ));
            DEFAULT_MAX_STRING
        }
    };
    let mut def = ArgDef {
        name: name.to_owned(),
        kind,
        description,
        default: None,
        allowed: None,
        minimum,
        maximum,
        pattern,
        max_length,
    };
    if let Some(allowed) = m.remove("enum") {
        match allowed {
            Value::Array(values) if !values.is_empty() => {
                for (i, v) in values.iter().enumerate() {
                    if let Err(e) = check_value(&def, v) {
                        problems.push(format!("field `{field}.enum[{i}]`: {e}"));
                    }
                }
                def.allowed = Some(values);
            }
            _ => problems.push(format!(
                "field `{field}.enum`: must be a non-empty list of values"
            )),
        }
    }
    if let Some(d) = m.remove("default") {
        match check_value(&def, &d) {
            Ok(()) => def.default = Some(d),
            Err(e) => problems.push(format!("field `{field}.default`: {e}")),
        }
    }
    for k in m.keys() {
        problems.push(format!(
            "field `{field}.{k}`: unknown; an argument has `type`, `description`, `default`, `enum`, `minimum`, `maximum`, `pattern` and `max_length`"
        ));
    }
    (problems.len() == before).then_some(def)
}

/// Checks a value against an argument's declaration; the message says what is wrong
/// (the caller names the field).
pub fn check_value(def: &ArgDef, v: &Value) -> Result<(), String> {
    let kind = def.kind.name();
    match (def.kind, v) {
        (ArgType::String, Value::String(s)) => {
            if s.contains('\0') {
                return Err("contains a NUL byte".into());
            }
            let len = s.chars().count() as u64;
            if len > def.max_length {
                return Err(format!("is {len} characters; at most {}", def.max_length));
            }
            if let Some(p) = &def.pattern {
                let re = regex::RegexBuilder::new(p)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| format!("the declared pattern does not compile: {e}"))?;
                if !re.is_match(s) {
                    return Err(format!("does not match the pattern `{p}`"));
                }
            }
        }
        (ArgType::Integer, Value::Number(n)) if n.is_i64() || n.is_u64() => {}
        (ArgType::Number, Value::Number(_)) | (ArgType::Boolean, Value::Bool(_)) => {}
        (_, other) => {
            return Err(format!(
                "must be {} {kind}, got {}",
                if kind == "integer" { "an" } else { "a" },
                toolshed_core::schema::kind_of(other)
            ));
        }
    }
    if let Value::Number(n) = v {
        let x = n.as_f64().unwrap_or(f64::NAN);
        if let Some(min) = def.minimum.as_ref().and_then(Number::as_f64)
            && x < min
        {
            return Err(format!("{n} is below the minimum {min}"));
        }
        if let Some(max) = def.maximum.as_ref().and_then(Number::as_f64)
            && x > max
        {
            return Err(format!("{n} is above the maximum {max}"));
        }
    }
    if let Some(allowed) = &def.allowed
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Err(format!("{v} is not one of {}", list.join(", ")));
    }
    Ok(())
}

/// A value as the one argv element it becomes: strings as they are, numbers and
/// booleans as JSON writes them.
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Vec<ProcessDef>, Vec<String>> {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        let mut problems = Vec::new();
        let out = parse_processes(v, &mut problems);
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    #[track_caller]
    fn refused(yaml: &str, expect: &[&str]) {
        let problems = parse(yaml).expect_err("must be refused");
        for e in expect {
            assert!(
                problems.iter().any(|p| p.contains(e)),
                "no problem mentions {e:?}: {problems:#?}"
            );
        }
    }

    #[test]
    fn a_process_with_typed_args_parses_into_an_exact_schema() {
        let p = parse(
            r#"
train:
  description: Train the model.
  command: [python3, /project/train.py, --epochs, "{epochs}", "{dataset}", "{fast}"]
  args:
    epochs: {type: integer, minimum: 1, maximum: 50, default: 3}
    dataset: {type: string, enum: [small, large]}
    fast: boolean
  timeout_seconds: 60
  project: true
"#,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert_eq!(
            p.command,
            [
                CommandPart::Literal("python3".into()),
                CommandPart::Literal("/project/train.py".into()),
                CommandPart::Literal("--epochs".into()),
                CommandPart::Arg("epochs".into()),
                CommandPart::Arg("dataset".into()),
                CommandPart::Arg("fast".into()),
            ]
        );
        assert_eq!(
            p.args_schema(),
            json!({
                "type": "object",
                "properties": {
                    "epochs": {"type": "integer", "minimum": 1, "maximum": 50, "default": 3},
                    "dataset": {"type": "string", "enum": ["small", "large"], "maxLength": 4096},
                    "fast": {"type": "boolean"}
                },
                "required": ["dataset", "fast"],
                "additionalProperties": false
            })
        );
        assert!(p.project);
        assert_eq!(p.timeout_seconds, Some(60));
    }

    #[test]
    fn every_bad_field_is_named_with_the_fix() {
        refused(
            "p: {command: \"python3 train.py {x}\"}",
            &["processes.p.command`: must be a list (argv), not a shell string"],
        );
        refused(
            "p: {command: [\"{prog}\", x], args: {prog: string}}",
            &["processes.p.command[0]`: the program must be written out"],
        );
        refused(
            "p: {command: [python3, \"--epochs={epochs}\"], args: {epochs: integer}}",
            &[
                "processes.p.command[1]`: `{epochs}` may only be a whole element",
                "processes.p.args.epochs`: declared but not used",
            ],
        );
        refused(
            "p: {command: [echo, \"{nope}\"]}",
            &["processes.p.command[1]`: `{nope}` names no argument"],
        );
        refused(
            "p: {command: [echo, \"{n}\"], args: {n: {type: float}}}",
            &["processes.p.args.n.type`: `float` is not one of"],
        );
        refused(
            "p: {command: [echo, \"{n}\"], args: {n: {type: integer, default: many}}}",
            &["processes.p.args.n.default`: must be an integer, got a string"],
        );
        refused(
            "p: {command: [echo, \"{n}\"], args: {n: {type: string, minimum: 1}}}",
            &["processes.p.args.n.minimum`: only an integer or number argument"],
        );
        refused(
            "p: {command: [echo], timeout_seconds: 0, network: yes-please, shell: true}",
            &[
                "processes.p.timeout_seconds`: must be a whole number",
                "processes.p.network`: must be true or false",
                "processes.p.shell`: unknown",
            ],
        );
        refused("p: {}", &["processes.p.command` is missing"]);
        refused("\"bad name\": {command: [echo]}", &["processes.bad name`"]);
        refused("[echo]", &["field `processes`: must be a mapping"]);
    }

    #[test]
    fn braces_that_name_no_argument_stay_literal() {
        let p = parse("p: {command: [awk, \"{print $1}\", \"{}\"]}")
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            p[0].command,
            [
                CommandPart::Literal("awk".into()),
                CommandPart::Literal("{print $1}".into()),
                CommandPart::Literal("{}".into()),
            ]
        );
    }

    #[test]
    fn values_are_checked_against_their_declaration() {
        let p = parse(
            "p: {command: [echo, \"{n}\", \"{s}\"], args: {n: {type: integer, minimum: 1, maximum: 5}, s: {type: string, max_length: 3, pattern: '^[a-z]+$'}}}",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let (n, s) = (&p[0].args[0], &p[0].args[1]);
        assert!(check_value(n, &json!(3)).is_ok());
        assert!(
            check_value(n, &json!(0))
                .unwrap_err()
                .contains("below the minimum")
        );
        assert!(
            check_value(n, &json!(2.5))
                .unwrap_err()
                .contains("must be an integer")
        );
        assert!(
            check_value(n, &json!("3"))
                .unwrap_err()
                .contains("got a string")
        );
        assert!(check_value(s, &json!("abc")).is_ok());
        assert!(
            check_value(s, &json!("abcd"))
                .unwrap_err()
                .contains("at most 3")
        );
        assert!(
            check_value(s, &json!("a;b"))
                .unwrap_err()
                .contains("pattern")
        );
        assert!(check_value(s, &json!("a\0")).unwrap_err().contains("NUL"));
        assert_eq!(render(&json!("$(id)")), "$(id)");
        assert_eq!(render(&json!(true)), "true");
        assert_eq!(render(&json!(2.5)), "2.5");
    }
}
