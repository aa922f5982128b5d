//! The tool spec: everything about a tool except its implementation.
//!
//! It unites the three seed products: bread's schema, output schema and credentials,
//! AgentBreeder's registry metadata, and Toren's durability contract (effects,
//! idempotency, approval, timeout, max attempts).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorCode, FieldError, ToolError};

/// A validated tool name: `^[A-Za-z0-9_-]{1,64}$`, which every model vendor accepts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ToolName(Arc<str>);

impl ToolName {
    /// Check and wrap a name.
    pub fn new(name: &str) -> Result<Self, FieldError> {
        if name.is_empty() {
            return Err(FieldError::new("name", "must not be empty"));
        }
        if name.len() > 64 {
            return Err(FieldError::new(
                "name",
                format!(
                    "`{}…` is {} characters long; at most 64 are allowed",
                    &name[..name.char_indices().nth(20).map_or(name.len(), |(i, _)| i)],
                    name.chars().count()
                ),
            ));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(FieldError::new(
                "name",
                format!(
                    "`{name}` contains {bad:?}; use only letters, digits, `_` and `-` \
                     (^[A-Za-z0-9_-]{{1,64}}$), e.g. `{}`",
                    suggest_name(name)
                ),
            ));
        }
        Ok(ToolName(Arc::from(name)))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as a shared string (cheap to clone into crumbs).
    pub fn as_arc(&self) -> &Arc<str> {
        &self.0
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn suggest_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() { "my_tool".into() } else { s }
}

/// What a tool touches; the runtime uses it to decide what is safe to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effects {
    /// A pure lookup.
    #[default]
    None,
    /// Writes something recoverable (a sandbox, a scratch folder).
    Sandbox,
    /// Anything the outside world sees: emails, payments, API writes.
    External,
}

/// How a call is recorded in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Idempotency {
    /// Recorded under a deterministic key; `Started` is durable before the handler runs.
    Keyed,
    /// Not keyed: for pure reads only, where a duplicate call is harmless.
    #[default]
    None,
}

/// A predicate deciding whether a call needs approval, given its validated args.
pub type ApprovalFn = dyn Fn(&Value) -> bool + Send + Sync;

/// An asynchronous approval predicate, given the validated args, the run and the tool
/// call id: for a predicate that lives elsewhere, e.g. a Toren tool's `approval`
/// function, evaluated in the tool's own worker process. An error fails the call
/// (failing open would skip the gate).
pub type ApprovalCheckFn = dyn for<'a> Fn(
        &'a Value,
        &'a crate::context::RunContext,
        &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<bool, ToolError>>
    + Send
    + Sync;

/// Whether a call waits for a human before it runs.
#[derive(Clone, Default)]
pub enum Approval {
    /// Never gated.
    #[default]
    Never,
    /// Always gated.
    Always,
    /// Gated when the Rust predicate holds for the args.
    When(Arc<ApprovalFn>),
    /// Gated when the CEL expression holds for `args` (specs from files).
    Cel(CelPredicate),
    /// Gated when an asynchronous predicate holds (see [`ApprovalCheckFn`]); the
    /// string describes it for listings (e.g. `predicate (node worker)`).
    Check(Arc<ApprovalCheckFn>, Arc<str>),
}

impl fmt::Debug for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Approval::Never => f.write_str("Never"),
            Approval::Always => f.write_str("Always"),
            Approval::When(_) => f.write_str("When(<closure>)"),
            Approval::Cel(p) => write!(f, "Cel({:?})", p.source()),
            Approval::Check(_, what) => write!(f, "Check({what:?})"),
        }
    }
}

impl Approval {
    /// A gate given by a Rust closure over the validated args.
    pub fn when(predicate: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        Approval::When(Arc::new(predicate))
    }

    /// A gate given by an asynchronous predicate (see [`ApprovalCheckFn`]), described
    /// as `what` in listings.
    pub fn check<F>(what: impl Into<Arc<str>>, predicate: F) -> Self
    where
        F: for<'a> Fn(
                &'a Value,
                &'a crate::context::RunContext,
                &'a str,
            ) -> futures_util::future::BoxFuture<'a, Result<bool, ToolError>>
            + Send
            + Sync
            + 'static,
    {
        Approval::Check(Arc::new(predicate), what.into())
    }

    /// Whether a call with these args needs approval. A CEL expression that fails to
    /// evaluate or yields a non-boolean is an error: failing open would skip the gate.
    pub fn applies(&self, args: &Value) -> Result<bool, ToolError> {
        match self {
            Approval::Never => Ok(false),
            Approval::Always => Ok(true),
            Approval::When(f) => Ok(f(args)),
            Approval::Cel(p) => p.evaluate(args),
            Approval::Check(_, what) => Err(ToolError::new(
                ErrorCode::ApprovalPredicateError,
                format!(
                    "the approval predicate ({what}) is asynchronous: evaluate it with `Approval::decide`"
                ),
            )),
        }
    }

    /// Whether a call with these args needs approval, evaluating an asynchronous
    /// predicate ([`Approval::Check`]) too. A CEL predicate is evaluated on a blocking
    /// thread, never on the async worker awaiting it (see
    /// [`CelPredicate::evaluate_off_worker`]); the other kinds answer as
    /// [`Approval::applies`].
    pub async fn decide(
        &self,
        args: &Value,
        run: &crate::context::RunContext,
        tool_call_id: &str,
    ) -> Result<bool, ToolError> {
        match self {
            Approval::Check(check, _) => check(args, run, tool_call_id).await,
            Approval::Cel(p) => p.evaluate_off_worker(args).await,
            other => other.applies(args),
        }
    }

    /// A description for listings and exports: `never`, `always`, `closure`, or the CEL text.
    pub fn describe(&self) -> String {
        match self {
            Approval::Never => "never".into(),
            Approval::Always => "always".into(),
            Approval::When(_) => "predicate (rust)".into(),
            Approval::Cel(p) => format!("when {}", p.source()),
            Approval::Check(_, what) => what.to_string(),
        }
    }
}

/// A compiled CEL expression over `args`, e.g. `args.amount > 100`.
#[derive(Clone)]
pub struct CelPredicate {
    source: Arc<str>,
    program: Arc<cel::Program>,
}

impl fmt::Debug for CelPredicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CelPredicate").field(&self.source).finish()
    }
}

/// How long one evaluation of a CEL predicate may take before the gate fails closed.
/// Its budget ([`crate::cel_limits`]) bounds its work well below this; the limit
/// contains whatever the budget does not foresee.
pub const CEL_EVALUATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most bytes of the reason an evaluation failed kept in its error.
const CEL_ERROR_BYTES: usize = 512;

impl CelPredicate {
    /// Compile an expression; a syntax error, or a predicate past the limits of
    /// [`crate::cel_limits`] (its size, depth, loop nesting, the functions it calls),
    /// names the `approval` field.
    pub fn compile(source: &str) -> Result<Self, FieldError> {
        let refused = |why: String| {
            let shown: String = source.chars().take(80).collect();
            let more = if shown.len() < source.len() {
                "…"
            } else {
                ""
            };
            FieldError::new(
                "approval.when",
                format!("the approval predicate `{shown}{more}` {why}"),
            )
        };
        let program = crate::cel_limits::parse(source).map_err(refused)?;
        Ok(CelPredicate {
            source: Arc::from(source),
            program: Arc::new(program),
        })
    }

    /// The expression text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// An error naming the predicate. What the interpreter says may quote values
    /// from the arguments, so it is cut to [`CEL_ERROR_BYTES`].
    fn error(&self, why: impl fmt::Display) -> ToolError {
        let mut why = why.to_string();
        if why.len() > CEL_ERROR_BYTES {
            let mut end = CEL_ERROR_BYTES;
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            why.truncate(end);
            why.push('…');
        }
        ToolError::new(
            ErrorCode::ApprovalPredicateError,
            format!(
                "approval predicate `{}` {why}; the call is refused (the gate fails closed)",
                self.source
            ),
        )
    }

    /// Evaluate with `args` bound to the call's arguments, on this thread. Before it
    /// runs, its cost over these arguments is bounded ([`crate::cel_limits`]: steps,
    /// bytes built, bytes read); a predicate that could pass a limit is an error
    /// without running, so nothing past the budget is built. Every error fails the
    /// gate closed.
    pub fn evaluate(&self, args: &Value) -> Result<bool, ToolError> {
        crate::cel_limits::check_budget(self.program.expression(), args)
            .map_err(|why| self.error(why))?;
        let mut ctx = cel::Context::default();
        ctx.add_variable("args", args)
            .map_err(|e| self.error(format_args!("cannot bind its args: {e}")))?;
        match self.program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(self.error(format_args!(
                "must yield a boolean, got {}",
                other.type_of()
            ))),
            Err(e) => Err(self.error(format_args!("failed: {e}"))),
        }
    }

    /// [`CelPredicate::evaluate`] on a blocking thread (`spawn_blocking`), so a
    /// costly predicate never holds an async worker; a panic or an evaluation past
    /// [`CEL_EVALUATION_TIMEOUT`] is an error, and the gate fails closed. Outside a
    /// Tokio runtime it evaluates on this thread.
    pub async fn evaluate_off_worker(&self, args: &Value) -> Result<bool, ToolError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.evaluate(args);
        }
        let this = self.clone();
        let args = args.clone();
        let task = tokio::task::spawn_blocking(move || this.evaluate(&args));
        match tokio::time::timeout(CEL_EVALUATION_TIMEOUT, task).await {
            Ok(Ok(decided)) => decided,
            Ok(Err(e)) if e.is_panic() => Err(self.error(format_args!(
                "panicked: {}",
                crate::pipeline::panic_message(&*e.into_panic())
            ))),
            Ok(Err(e)) => Err(self.error(format_args!("was cancelled: {e}"))),
            Err(_) => Err(self.error(format_args!(
                "did not finish within {} s",
                CEL_EVALUATION_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// How a failed call is tried again (bounded; see [`RetryPolicy::max_retries`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Retries after the first attempt: `2` means at most three executions.
    #[serde(default)]
    pub attempts: u32,
    /// The wait before the first retry, in milliseconds.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
    /// Each further wait is multiplied by this.
    #[serde(default = "default_multiplier")]
    pub multiplier: f64,
    /// No wait is longer than this, in milliseconds.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

fn default_backoff_ms() -> u64 {
    100
}
fn default_multiplier() -> f64 {
    2.0
}
fn default_max_backoff_ms() -> u64 {
    10_000
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::none()
    }
}

impl RetryPolicy {
    /// No retries.
    pub const fn none() -> Self {
        RetryPolicy {
            attempts: 0,
            backoff_ms: 100,
            multiplier: 2.0,
            max_backoff_ms: 10_000,
        }
    }

    /// `attempts` retries with the default exponential backoff (100 ms, ×2, ≤ 10 s).
    pub const fn retries(attempts: u32) -> Self {
        RetryPolicy {
            attempts,
            ..RetryPolicy::none()
        }
    }

    /// The number of retries allowed after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.attempts
    }

    /// The wait before retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = self
            .multiplier
            .max(1.0)
            .powi(retry.saturating_sub(1) as i32);
        let ms = (self.backoff_ms as f64 * factor).min(self.max_backoff_ms as f64);
        Duration::from_millis(ms as u64)
    }

    fn check(&self) -> Result<(), FieldError> {
        if self.attempts > 100 {
            return Err(FieldError::new(
                "retry.attempts",
                format!("{} retries is too many; at most 100", self.attempts),
            ));
        }
        if !self.multiplier.is_finite() || self.multiplier < 1.0 {
            return Err(FieldError::new(
                "retry.multiplier",
                "must be a finite number of at least 1.0",
            ));
        }
        Ok(())
    }
}

/// The registry metadata of AgentBreeder's `tool.yaml`; informative, never used to
/// decide how a call runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolMeta {
    /// The tool's own version, e.g. `1.0.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The owning team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The owner, usually an email address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Free-form tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// `function`, `mcp` or `api`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_type: Option<String>,
    /// Where the implementation lives (`builtin:…`, `python:…`, `node:…`, `exec:…`, `http(s)://…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The implementation block of `tool.yaml`, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<Value>,
    /// Whether the tool may reach the network when sandboxed.
    #[serde(default)]
    pub network_access: bool,
    /// The revision a registry gave this definition (its revision number), when the
    /// tool comes from one. Not part of the file form: the runtime folds it into the
    /// tool revision it records with an approval gate, so an approval given for one
    /// revision never runs another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// The full definition of a tool, minus its implementation.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// The validated name.
    pub name: ToolName,
    /// What the tool does, for the model.
    pub description: String,
    /// The input JSON Schema (draft 2020-12 unless `$schema` says otherwise).
    pub input_schema: Value,
    /// The output JSON Schema, when results are checked.
    pub output_schema: Option<Value>,
    /// What the tool touches.
    pub effects: Effects,
    /// How calls are keyed in the journal.
    pub idempotency: Idempotency,
    /// Opt-out of the rule that `effects: external` needs `idempotency: keyed`.
    pub allow_unkeyed_external: bool,
    /// The human gate.
    pub approval: Approval,
    /// Four-eyes: whoever asked for a gated call may not approve it (`approval:
    /// {four_eyes: true, …}`); another user must decide. Denying is always allowed.
    pub four_eyes: bool,
    /// How long one execution may take; `None` uses the pipeline's default.
    pub timeout: Option<Duration>,
    /// Crash-window bound: how many times a keyed call may be started in all.
    pub max_attempts: Option<u32>,
    /// In-process retries on failure.
    pub retry: RetryPolicy,
    /// The credential names the tool may read (an enforced allowlist).
    pub credentials: Vec<String>,
    /// Whether the handler streams partial results (never retried).
    pub streaming: bool,
    /// Whether this is a human tool (its result is supplied by a person).
    pub human: bool,
    /// Registry metadata.
    pub meta: ToolMeta,
}

impl ToolSpec {
    /// A spec with a name and description and everything else at its default.
    pub fn new(name: &str, description: impl Into<String>) -> Result<Self, FieldError> {
        Ok(ToolSpec {
            name: ToolName::new(name)?,
            description: description.into(),
            input_schema: crate::schema::empty_object_schema(),
            output_schema: None,
            effects: Effects::None,
            idempotency: Idempotency::None,
            allow_unkeyed_external: false,
            approval: Approval::Never,
            four_eyes: false,
            timeout: None,
            max_attempts: None,
            retry: RetryPolicy::none(),
            credentials: Vec::new(),
            streaming: false,
            human: false,
            meta: ToolMeta::default(),
        })
    }

    /// Check the rules that span fields. Every problem is returned, not only the first.
    pub fn check(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if self.description.trim().is_empty() {
            errors.push(FieldError::new(
                "description",
                "must not be empty: the model chooses tools by their description",
            ));
        }
        // Only a well-formed type other than "object" is reported here; a misspelt type
        // is the schema compiler's to report.
        const TYPES: &[&str] = &["array", "string", "number", "integer", "boolean", "null"];
        if let Some(root_type) = self.input_schema.get("type")
            && root_type.as_str().is_some_and(|t| TYPES.contains(&t))
        {
            errors.push(FieldError::new(
                "input_schema.type",
                format!(
                    "tool arguments are a JSON object, so the input schema's root type \
                         must be \"object\", got {root_type}"
                ),
            ));
        }
        if self.effects == Effects::External
            && self.idempotency == Idempotency::None
            && !self.allow_unkeyed_external
        {
            errors.push(FieldError::new(
                "idempotency",
                "a tool with `effects: external` must be `idempotency: keyed`, so a resumed \
                 run never repeats its side effect; set `allow_unkeyed_external: true` to \
                 opt out explicitly",
            ));
        }
        if let Some(t) = self.timeout
            && t.is_zero()
        {
            errors.push(FieldError::new("timeout", "must be greater than zero"));
        }
        if self.four_eyes && matches!(self.approval, Approval::Never) {
            errors.push(FieldError::new(
                "approval.four_eyes",
                "needs a gate to apply to: use `approval: {always: true, four_eyes: true}` or \
                 `approval: {when: \"<CEL over args>\", four_eyes: true}`",
            ));
        }
        if self.max_attempts == Some(0) {
            errors.push(FieldError::new(
                "max_attempts",
                "must be at least 1 (leave it out for no bound)",
            ));
        }
        if let Err(e) = self.retry.check() {
            errors.push(e);
        }
        for (i, name) in self.credentials.iter().enumerate() {
            if let Err(e) = crate::credentials::check_credential_name(name) {
                errors.push(FieldError::new(format!("credentials[{i}]"), e.message));
            }
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "web_search", "order-lookup", "A1", &"x".repeat(64)] {
            assert!(ToolName::new(ok).is_ok(), "{ok}");
        }
        for (bad, expect) in [
            ("", "must not be empty"),
            ("has space", "contains ' '"),
            ("dot.name", "contains '.'"),
            ("slash/name", "contains '/'"),
            ("ünïcode", "contains 'ü'"),
            (&"x".repeat(65), "at most 64"),
        ] {
            let err = ToolName::new(bad).unwrap_err();
            assert_eq!(err.field, "name");
            assert!(err.message.contains(expect), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn external_needs_keyed_unless_opted_out() {
        let mut spec = ToolSpec::new("pay", "Pay an invoice").unwrap();
        spec.effects = Effects::External;
        let errs = spec.check();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "idempotency");
        spec.allow_unkeyed_external = true;
        assert!(spec.check().is_empty());
        spec.allow_unkeyed_external = false;
        spec.idempotency = Idempotency::Keyed;
        assert!(spec.check().is_empty());
    }

    #[test]
    fn four_eyes_needs_a_gate() {
        let mut spec = ToolSpec::new("pay", "Pay.").unwrap();
        spec.four_eyes = true;
        let errors = spec.check();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "approval.four_eyes");
        assert!(errors[0].message.contains("always: true"), "{errors:?}");
        spec.approval = Approval::Always;
        assert!(spec.check().is_empty());
    }

    #[test]
    fn cel_approval() {
        let p = CelPredicate::compile("args.amount > 100").unwrap();
        let gate = Approval::Cel(p);
        assert!(gate.applies(&json!({"amount": 150})).unwrap());
        assert!(!gate.applies(&json!({"amount": 5})).unwrap());
        let err = CelPredicate::compile("args.amount >").unwrap_err();
        assert_eq!(err.field, "approval.when");
        let not_bool = Approval::Cel(CelPredicate::compile("args.amount + 1").unwrap());
        let err = not_bool.applies(&json!({"amount": 1})).unwrap_err();
        assert_eq!(err.code, ErrorCode::ApprovalPredicateError);
        let closure = Approval::when(|a| a["n"].as_i64() == Some(3));
        assert!(closure.applies(&json!({"n": 3})).unwrap());
    }

    #[test]
    fn an_async_predicate_is_decided_not_applied() {
        let gate = Approval::check("predicate (test)", |args, run, call_id| {
            let big = args["n"].as_i64().unwrap_or(0) > 1;
            let seen = format!("{}:{call_id}", run.run_id());
            Box::pin(async move {
                if seen.ends_with(":boom") {
                    return Err(ToolError::new(ErrorCode::ApprovalPredicateError, "boom"));
                }
                Ok(big)
            })
        });
        assert_eq!(gate.describe(), "predicate (test)");
        // The synchronous path cannot evaluate it, and says so instead of failing open.
        let err = gate.applies(&json!({"n": 5})).unwrap_err();
        assert_eq!(err.code, ErrorCode::ApprovalPredicateError);
        let run = crate::context::RunContext::ephemeral();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(
            rt.block_on(gate.decide(&json!({"n": 5}), &run, "c1"))
                .unwrap()
        );
        assert!(
            !rt.block_on(gate.decide(&json!({"n": 1}), &run, "c1"))
                .unwrap()
        );
        assert!(
            rt.block_on(gate.decide(&json!({"n": 5}), &run, "boom"))
                .is_err()
        );
        // The other kinds decide as they apply.
        assert!(
            rt.block_on(Approval::Always.decide(&json!({}), &run, "c"))
                .unwrap()
        );
    }

    #[test]
    fn hostile_cel_predicates_are_refused_at_compile() {
        let nested3 = "args.l.all(a, args.l.all(b, args.l.all(c, a == b && b == c)))";
        let built = "args.l.map(x, args.l.map(y, x)).exists(z, size(z) > 0)";
        // Past the limits, whatever nesting a parser would overflow its stack on.
        let deep = format!("{}true{}", "!(".repeat(400), ")".repeat(400));
        let nots = format!("{}true", "!".repeat(1000));
        let lists = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        let long = format!("args.a == '{}'", "x".repeat(3000));
        let wide = (0..120)
            .map(|i| format!("args.a=={i}"))
            .collect::<Vec<_>>()
            .join("||");
        for (source, says) in [
            (nested3, "more than 2 deep"),
            (built, "builds itself"),
            (deep.as_str(), "deep"),
            (nots.as_str(), "in a row"),
            (lists.as_str(), "at most 2048"),
            (long.as_str(), "at most 2048"),
            (wide.as_str(), "nodes"),
        ] {
            let err = CelPredicate::compile(source).unwrap_err();
            assert_eq!(err.field, "approval.when");
            assert!(err.message.contains(says), "{source}: {err}");
        }
        // Ordinary predicates, loops included, compile.
        let ok = [
            "args.amount > 100".to_owned(),
            "args.items.exists(i, i.qty > 10)".to_owned(),
            "args.orders.all(o, o.lines.all(l, l.price < 1000))".to_owned(),
            "[1, 2, 3].exists(x, x == args.n)".to_owned(),
            "args.items.filter(i, i.qty > 1).size() > 2".to_owned(),
            // At the nesting limits, the parser's stack holds.
            format!("{}args.a{}", "!(".repeat(6), ")".repeat(6)),
            format!("{}1{} == args.a", "[".repeat(12), "]".repeat(12)),
            format!("{}args.a{} > 0", "-(".repeat(4), ")".repeat(4)),
        ];
        for ok in &ok {
            CelPredicate::compile(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn an_evaluation_error_quoting_a_big_argument_is_cut() {
        let p = CelPredicate::compile("args.s + 1 == 2").unwrap();
        let err = Approval::Cel(p)
            .applies(&json!({"s": "x".repeat(100_000)}))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ApprovalPredicateError);
        assert!(err.message.len() < 1024, "{} bytes", err.message.len());
        assert!(err.message.contains("args.s + 1 == 2"), "{}", err.message);
    }

    #[test]
    fn a_costly_predicate_over_big_arguments_is_stopped_before_it_runs() {
        // Two nested loops over 100,000 items: 10^10 steps, refused at once.
        let p = CelPredicate::compile("args.l.exists(a, args.l.exists(b, a + b == -1))").unwrap();
        let big = json!({"l": vec![0; 100_000]});
        let err = Approval::Cel(p.clone()).applies(&big).unwrap_err();
        assert_eq!(err.code, ErrorCode::ApprovalPredicateError);
        assert!(err.message.contains("steps"), "{}", err.message);
        // The same predicate over a small list runs.
        assert!(!Approval::Cel(p).applies(&json!({"l": [1, 2, 3]})).unwrap());

        // String growth in a loop: 1,000 copies of a 1 MB string.
        let p = CelPredicate::compile("args.l.map(x, args.s + args.s).size() > 0").unwrap();
        let big = json!({"l": vec![0; 1000], "s": "x".repeat(1 << 20)});
        let err = Approval::Cel(p.clone()).applies(&big).unwrap_err();
        assert!(err.message.contains("bytes"), "{}", err.message);
        assert!(
            Approval::Cel(p)
                .applies(&json!({"l": [1], "s": "ab"}))
                .unwrap()
        );
    }

    #[test]
    fn backoff_grows_and_caps() {
        let p = RetryPolicy {
            attempts: 5,
            backoff_ms: 100,
            multiplier: 2.0,
            max_backoff_ms: 350,
        };
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(200));
        assert_eq!(p.backoff(3), Duration::from_millis(350));
    }
}
