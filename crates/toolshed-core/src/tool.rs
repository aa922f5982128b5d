//! A tool: a spec, its compiled schemas, a handler, its own hooks and an optional
//! per-tool credential provider. Built with [`Tool::builder`] or the `#[tool]` macro.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use serde::Serialize;
use serde_json::Value;

use crate::context::ToolContext;
use crate::credentials::CredentialProvider;
use crate::diagnostics::Diagnostics;
use crate::error::{FieldError, SpecError, ToolError};
use crate::hooks::Hook;
use crate::schema::CompiledSchema;
use crate::spec::{Approval, Effects, Idempotency, RetryPolicy, ToolMeta, ToolSpec};

/// What a handler produces: one value, or a stream whose last value is the result and
/// whose earlier values are partial results.
pub enum ToolOutput {
    /// A single result.
    Value(Value),
    /// Partial results, then the final one; an `Err` item ends the call with that error.
    Stream(BoxStream<'static, Result<Chunk, ToolError>>),
}

impl fmt::Debug for ToolOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolOutput::Value(v) => f.debug_tuple("Value").field(v).finish(),
            ToolOutput::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

/// One item of a streamed output.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// A value: a partial result, or the result when no value follows it.
    Value(Value),
    /// The execution's diagnostics, known only as the stream ends (a process's exit code,
    /// the rest of its stderr); they replace the ones the [`Reply`] carried.
    Diagnostics(Diagnostics),
}

/// What one execution of a handler ended with: its output or its error result, and its
/// diagnostics (empty for in-process tools). A failed execution keeps its diagnostics
/// too: a tool that exits 3 after printing to stderr reports both.
#[derive(Debug)]
pub struct Reply {
    /// The output, or the error result the model sees.
    pub output: Result<ToolOutput, ToolError>,
    /// What the execution left besides its result.
    pub diagnostics: Diagnostics,
}

impl Reply {
    /// A reply without diagnostics.
    pub fn new(output: Result<ToolOutput, ToolError>) -> Self {
        Reply {
            output,
            diagnostics: Diagnostics::default(),
        }
    }

    /// The same reply with these diagnostics.
    pub fn with_diagnostics(mut self, diagnostics: Diagnostics) -> Self {
        self.diagnostics = diagnostics;
        self
    }
}

impl From<Result<ToolOutput, ToolError>> for Reply {
    fn from(output: Result<ToolOutput, ToolError>) -> Self {
        Reply::new(output)
    }
}

/// The future a handler returns.
pub type HandlerFuture = BoxFuture<'static, Reply>;

/// The implementation of a tool.
pub trait Handler: Send + Sync + 'static {
    /// Run once with validated args.
    fn call(&self, args: Value, ctx: ToolContext) -> HandlerFuture;
}

impl<F> Handler for F
where
    F: Fn(Value, ToolContext) -> HandlerFuture + Send + Sync + 'static,
{
    fn call(&self, args: Value, ctx: ToolContext) -> HandlerFuture {
        self(args, ctx)
    }
}

/// A stream of partial values whose last item is the result: return it from a
/// `#[tool]` fn to make a streaming tool.
pub struct Streaming<T>(BoxStream<'static, Result<T, ToolError>>);

impl<T: Send + 'static> Streaming<T> {
    /// Wrap an infallible stream.
    pub fn new(stream: impl Stream<Item = T> + Send + 'static) -> Self {
        Streaming(stream.map(Ok).boxed())
    }

    /// Wrap a stream of results; an `Err` ends the call with that error.
    pub fn try_new<E: fmt::Display>(
        stream: impl Stream<Item = Result<T, E>> + Send + 'static,
    ) -> Self {
        Streaming(
            stream
                .map(|r| r.map_err(|e| ToolError::handler(e.to_string())))
                .boxed(),
        )
    }
}

impl<T: Serialize + Send + 'static> Streaming<T> {
    /// Convert to the handler's output.
    pub fn into_output(self) -> ToolOutput {
        ToolOutput::Stream(
            self.0
                .map(|item| item.and_then(|v| to_value(&v)).map(Chunk::Value))
                .boxed(),
        )
    }
}

fn to_value<T: Serialize>(v: &T) -> Result<Value, ToolError> {
    serde_json::to_value(v)
        .map_err(|e| ToolError::handler(format!("cannot serialize the result: {e}")))
}

/// A tool ready to be called. Cheap to clone.
#[derive(Clone)]
pub struct Tool {
    inner: Arc<ToolInner>,
}

struct ToolInner {
    spec: ToolSpec,
    input: CompiledSchema,
    output: Option<CompiledSchema>,
    handler: Arc<dyn Handler>,
    hooks: Vec<Arc<dyn Hook>>,
    credential_provider: Option<Arc<dyn CredentialProvider>>,
    credentials: Arc<[String]>,
    exports: crate::formats::ExportCache,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.inner.spec.name)
            .field("effects", &self.inner.spec.effects)
            .field("idempotency", &self.inner.spec.idempotency)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// Start building a tool at run time (schema + closure).
    pub fn builder(name: &str) -> ToolBuilder {
        ToolBuilder::new(name)
    }

    /// Build from a spec and a handler, checking and compiling everything.
    pub fn from_spec(mut spec: ToolSpec, handler: Arc<dyn Handler>) -> Result<Self, SpecError> {
        // OpenAPI's `nullable: true` means what JSON Schema says with `type: [T, "null"]`:
        // validated as such here, and exported so (an MCP client validates a `null`
        // result against the schema it was given).
        crate::schema::normalize_nullable(&mut spec.input_schema);
        if let Some(output) = &mut spec.output_schema {
            crate::schema::normalize_nullable(output);
        }
        let mut errors = Vec::new();
        let (input, output) = check_and_compile(&spec, &mut errors);
        match (errors.is_empty(), input) {
            (true, Some(input)) => Ok(Tool {
                inner: Arc::new(ToolInner {
                    credentials: Arc::from(spec.credentials.clone()),
                    spec,
                    input,
                    output,
                    handler,
                    hooks: Vec::new(),
                    credential_provider: None,
                    exports: Default::default(),
                }),
            }),
            _ => Err(SpecError::Fields {
                origin: None,
                errors,
            }),
        }
    }

    /// The spec.
    pub fn spec(&self) -> &ToolSpec {
        &self.inner.spec
    }
    /// The name.
    pub fn name(&self) -> &str {
        self.inner.spec.name.as_str()
    }
    /// The compiled input schema.
    pub fn input_schema(&self) -> &CompiledSchema {
        &self.inner.input
    }
    /// The compiled output schema, if declared.
    pub fn output_schema(&self) -> Option<&CompiledSchema> {
        self.inner.output.as_ref()
    }
    /// The handler.
    pub fn handler(&self) -> &Arc<dyn Handler> {
        &self.inner.handler
    }
    /// The tool's own hooks (first in the chain).
    pub fn hooks(&self) -> &[Arc<dyn Hook>] {
        &self.inner.hooks
    }
    /// The per-tool credential provider, if any.
    pub fn credential_provider(&self) -> Option<&Arc<dyn CredentialProvider>> {
        self.inner.credential_provider.as_ref()
    }
    pub(crate) fn exports(&self) -> &crate::formats::ExportCache {
        &self.inner.exports
    }
    pub(crate) fn declared_credentials(&self) -> &Arc<[String]> {
        &self.inner.credentials
    }

    /// A copy of this tool with one more hook of its own.
    pub fn with_hook(&self, hook: Arc<dyn Hook>) -> Tool {
        self.rebuild(|inner| inner.hooks.push(hook))
    }

    /// A copy with a per-tool credential provider (takes priority over the run default).
    pub fn with_credential_provider(&self, provider: Arc<dyn CredentialProvider>) -> Tool {
        self.rebuild(|inner| inner.credential_provider = Some(provider))
    }

    /// A copy whose handler is `handler` (spec, schemas, hooks and credentials kept):
    /// how a wrapping handler is put around the tool's own, e.g. one that hands a
    /// built-in the env it declares.
    pub fn with_handler(&self, handler: Arc<dyn Handler>) -> Tool {
        self.rebuild(|inner| inner.handler = handler)
    }

    fn rebuild(&self, change: impl FnOnce(&mut ToolInner)) -> Tool {
        let mut inner = ToolInner {
            spec: self.inner.spec.clone(),
            input: self.inner.input.clone(),
            output: self.inner.output.clone(),
            handler: self.inner.handler.clone(),
            hooks: self.inner.hooks.clone(),
            credential_provider: self.inner.credential_provider.clone(),
            credentials: self.inner.credentials.clone(),
            exports: Default::default(),
        };
        change(&mut inner);
        Tool {
            inner: Arc::new(inner),
        }
    }
}

/// Check a spec and compile its schemas, pushing every problem into `errors`.
fn check_and_compile(
    spec: &ToolSpec,
    errors: &mut Vec<FieldError>,
) -> (Option<CompiledSchema>, Option<CompiledSchema>) {
    errors.extend(spec.check());
    let input = CompiledSchema::compile(&spec.input_schema, "input_schema")
        .map_err(|e| errors.push(e))
        .ok();
    let output = match &spec.output_schema {
        Some(s) => CompiledSchema::compile(s, "output_schema")
            .map_err(|e| errors.push(e))
            .ok(),
        None => None,
    };
    (input, output)
}

/// Builds a [`Tool`] at run time. Problems are collected and reported together by
/// [`ToolBuilder::build`].
pub struct ToolBuilder {
    spec: Result<ToolSpec, FieldError>,
    handler: Option<Arc<dyn Handler>>,
    hooks: Vec<Arc<dyn Hook>>,
    credential_provider: Option<Arc<dyn CredentialProvider>>,
}

impl ToolBuilder {
    fn new(name: &str) -> Self {
        ToolBuilder {
            spec: ToolSpec::new(name, ""),
            handler: None,
            hooks: Vec::new(),
            credential_provider: None,
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut ToolSpec)) -> Self {
        if let Ok(spec) = &mut self.spec {
            f(spec);
        }
        self
    }

    /// Start from a complete spec (e.g. one loaded from a file).
    pub fn from_spec(spec: ToolSpec) -> Self {
        ToolBuilder {
            spec: Ok(spec),
            handler: None,
            hooks: Vec::new(),
            credential_provider: None,
        }
    }

    /// What the tool does, for the model.
    pub fn description(self, d: impl Into<String>) -> Self {
        let d = d.into();
        self.edit(|s| s.description = d)
    }
    /// The input JSON Schema.
    pub fn input_schema(self, schema: Value) -> Self {
        self.edit(|s| s.input_schema = schema)
    }
    /// The output JSON Schema.
    pub fn output_schema(self, schema: Value) -> Self {
        self.edit(|s| s.output_schema = Some(schema))
    }
    /// What the tool touches.
    pub fn effects(self, e: Effects) -> Self {
        self.edit(|s| s.effects = e)
    }
    /// How calls are keyed.
    pub fn idempotency(self, i: Idempotency) -> Self {
        self.edit(|s| s.idempotency = i)
    }
    /// Allow `effects: external` without keyed idempotency.
    pub fn allow_unkeyed_external(self) -> Self {
        self.edit(|s| s.allow_unkeyed_external = true)
    }
    /// The human gate.
    pub fn approval(self, a: Approval) -> Self {
        self.edit(|s| s.approval = a)
    }
    /// Four-eyes: whoever asked for a gated call may not approve it.
    pub fn four_eyes(self, on: bool) -> Self {
        self.edit(|s| s.four_eyes = on)
    }
    /// The per-execution timeout.
    pub fn timeout(self, t: Duration) -> Self {
        self.edit(|s| s.timeout = Some(t))
    }
    /// The crash-window bound for keyed calls.
    pub fn max_attempts(self, n: u32) -> Self {
        self.edit(|s| s.max_attempts = Some(n))
    }
    /// The retry policy.
    pub fn retry(self, r: RetryPolicy) -> Self {
        self.edit(|s| s.retry = r)
    }
    /// Declare credential names (the allowlist).
    pub fn credentials<I, S>(self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        self.edit(|s| s.credentials = names)
    }
    /// Registry metadata.
    pub fn meta(self, m: ToolMeta) -> Self {
        self.edit(|s| s.meta = m)
    }
    /// Add one of the tool's own hooks.
    pub fn hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hooks.push(hook);
        self
    }
    /// A per-tool credential provider.
    pub fn credential_provider(mut self, p: Arc<dyn CredentialProvider>) -> Self {
        self.credential_provider = Some(p);
        self
    }

    /// Set any handler (the general form).
    pub fn raw_handler(mut self, handler: Arc<dyn Handler>) -> Self {
        self.handler = Some(handler);
        self
    }

    /// A handler closure returning one value, or an error message.
    pub fn handler<F, Fut, T, E>(self, f: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize,
        E: fmt::Display,
    {
        self.raw_handler(Arc::new(
            move |args: Value, ctx: ToolContext| -> HandlerFuture {
                let fut = f(args, ctx);
                Box::pin(async move { Reply::new(__private::result_output(fut.await)) })
            },
        ))
    }

    /// A handler returning a stream of partial values whose last item is the result.
    /// Streaming tools are never retried.
    pub fn stream_handler<F, S>(self, f: F) -> Self
    where
        F: Fn(Value, ToolContext) -> S + Send + Sync + 'static,
        S: Stream<Item = Result<Value, ToolError>> + Send + 'static,
    {
        self.edit(|s| s.streaming = true).raw_handler(Arc::new(
            move |args: Value, ctx: ToolContext| -> HandlerFuture {
                let stream = f(args, ctx).map(|item| item.map(Chunk::Value)).boxed();
                Box::pin(std::future::ready(Reply::new(Ok(ToolOutput::Stream(
                    stream,
                )))))
            },
        ))
    }

    /// Mark the tool as streaming (set by the `#[tool]` macro).
    pub fn streaming(self, yes: bool) -> Self {
        self.edit(|s| s.streaming = yes)
    }

    /// Check everything and build. Every problem is reported at once.
    pub fn build(self) -> Result<Tool, SpecError> {
        let spec = self.spec.map_err(|e| SpecError::Fields {
            origin: None,
            errors: vec![e],
        })?;
        let Some(handler) = self.handler else {
            let mut errors = Vec::new();
            check_and_compile(&spec, &mut errors);
            errors.push(FieldError::new(
                "handler",
                "no handler: call `.handler(...)` or `.stream_handler(...)`",
            ));
            return Err(SpecError::Fields {
                origin: None,
                errors,
            });
        };
        let mut tool = Tool::from_spec(spec, handler)?;
        if let Some(inner) = Arc::get_mut(&mut tool.inner) {
            inner.hooks = self.hooks;
            inner.credential_provider = self.credential_provider;
        }
        Ok(tool)
    }
}

/// A human tool: a tool whose result a person supplies. The durable runtime parks the
/// run when one is called, and the answer (validated against `answer_schema`) becomes
/// the call's result. The model may pass any object as context for the person.
///
/// Called outside the durable runtime, it fails with `ANSWER_REQUIRED`.
pub fn human_tool(name: &str, answer_schema: Value) -> Result<Tool, SpecError> {
    human_tool_with(
        name,
        "Ask a person. The run waits until they answer; their answer is the result.",
        serde_json::json!({"type": "object"}),
        answer_schema,
    )
}

/// A human tool with its own description and input schema (what the model must pass).
pub fn human_tool_with(
    name: &str,
    description: &str,
    input_schema: Value,
    answer_schema: Value,
) -> Result<Tool, SpecError> {
    let tool_name = name.to_owned();
    ToolBuilder::new(name)
        .description(description)
        .input_schema(input_schema)
        .output_schema(answer_schema)
        .edit(|s| s.human = true)
        .raw_handler(Arc::new(
            move |_args: Value, _ctx: ToolContext| -> HandlerFuture {
                let err = ToolError::new(
                    crate::ErrorCode::AnswerRequired,
                    format!(
                        "tool `{tool_name}` is a human tool: a person must answer it, so run it \
                     through the durable runtime, which parks the run until they do"
                    ),
                );
                Box::pin(std::future::ready(Reply::new(Err(err))))
            },
        ))
        .build()
}

/// Support for code generated by `#[tool]`. Not a stable API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    pub use futures_util;
    pub use schemars;
    pub use serde;
    pub use serde_json;

    /// Deserialize validated args into the generated args struct.
    pub fn parse_args<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, ToolError> {
        serde_json::from_value(args).map_err(|e| {
            ToolError::new(
                crate::ErrorCode::InvalidArgs,
                format!("arguments do not fit the handler's types: {e}"),
            )
        })
    }

    /// A plain return value.
    pub fn value_output<T: Serialize>(v: T) -> Result<ToolOutput, ToolError> {
        to_value(&v).map(ToolOutput::Value)
    }

    /// A `Result` return value.
    pub fn result_output<T: Serialize, E: fmt::Display>(
        r: Result<T, E>,
    ) -> Result<ToolOutput, ToolError> {
        match r {
            Ok(v) => value_output(v),
            Err(e) => Err(ToolError::handler(e.to_string())),
        }
    }

    /// The handler future of a `#[tool]` fn's body.
    pub fn reply<F>(body: F) -> HandlerFuture
    where
        F: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Box::pin(async move { Reply::new(body.await) })
    }

    /// A streaming return value.
    pub fn stream_output<T: Serialize + Send + 'static>(
        s: Streaming<T>,
    ) -> Result<ToolOutput, ToolError> {
        Ok(s.into_output())
    }

    /// The JSON Schema of a type, as a value with the `$schema` and `title` keys removed.
    pub fn schema_of<T: schemars::JsonSchema>() -> Value {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
        let mut value = schema.to_value();
        if let Some(obj) = value.as_object_mut() {
            obj.remove("$schema");
            obj.remove("title");
        }
        value
    }
}
