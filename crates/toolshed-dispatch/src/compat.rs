//! Tool files written for bread (`@breadai/core`) and Toren (`@toren-run/core`), run
//! unchanged: the rest of their definition ([`CompatSpec`], read by the Node runner's
//! `--schema` beside the schemas zod 4 converted) mapped onto a toolshed [`Tool`]
//! ([`Dispatcher::tool_from_inferred`]). Toren's approval predicate and bread's hooks
//! stay in the tool's own worker: the gate and the pipeline's hook chain ask it with the
//! protocol's `approval` and `hook` requests (`Op`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use toolshed_core::hooks::{AfterRun, BeforeRun, Hook, HookCall, OnError};
use toolshed_core::{
    Approval, Effects, ErrorCode, Idempotency, RetryPolicy, SpecError, Tool, ToolError, ToolMeta,
    ToolSpec,
};

use crate::config::SandboxPolicy;
use crate::dispatcher::Dispatcher;
use crate::endpoint::Endpoint;
use crate::error::DispatchError;
use crate::infer::InferredTool;
use crate::protocol::{CallContext, Op};

/// Which framework a tool file was written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    /// bread: `defineTool` / `defineHumanTool` from `@breadai/core`.
    Bread,
    /// Toren: `defineTool` from `@toren-run/core`.
    Toren,
}

/// What a bread or Toren definition says besides its name, description and schemas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompatSpec {
    /// The framework.
    pub framework: Framework,
    /// Toren's `effects`.
    #[serde(default)]
    pub effects: Option<Effects>,
    /// Toren's `idempotency`.
    #[serde(default)]
    pub idempotency: Option<Idempotency>,
    /// Toren's `approval`: `never`, `always`, or `predicate` (a function, evaluated in
    /// the tool's worker).
    #[serde(default)]
    pub approval: Option<String>,
    /// Toren's `timeoutMs`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Toren's `maxAttempts`.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// bread's `credentials`: the allowlist.
    #[serde(default)]
    pub credentials: Vec<String>,
    /// bread's `defineHumanTool`: a person answers the call.
    #[serde(default)]
    pub human: bool,
    /// bread's async generator `execute`: yields are partial results.
    #[serde(default)]
    pub streaming: bool,
    /// bread's `hooks` the tool defines (`beforeRun`, `afterRun`, `onError`).
    #[serde(default)]
    pub hooks: Vec<String>,
    /// bread's `errorHandling.retry.attempts`: retries after the first attempt.
    #[serde(default)]
    pub retry: u32,
}

/// How an approval predicate in a worker is described in listings and gates.
pub const WORKER_PREDICATE: &str = "predicate (in the tool's worker)";

impl Dispatcher {
    /// The tool an inferred Node or Python file makes, running at `endpoint` with
    /// `policy`: its schemas and description, and for a bread or Toren file
    /// ([`InferredTool::compat`]) its effects, idempotency, approval (a predicate
    /// evaluated in the tool's own worker), timeout, max attempts, retries, credentials,
    /// streaming, hooks (run in the tool's worker, first in the pipeline's chain) or
    /// human gate.
    pub fn tool_from_inferred(
        &self,
        endpoint: Endpoint,
        inferred: InferredTool,
        policy: SandboxPolicy,
    ) -> Result<Tool, SpecError> {
        let meta = ToolMeta {
            endpoint: Some(endpoint.to_string()),
            tool_type: Some("function".into()),
            ..Default::default()
        };
        let InferredTool {
            name,
            description,
            input_schema,
            output_schema,
            compat,
            ..
        } = inferred;
        let Some(compat) = compat else {
            let handler = self.handler_with(endpoint, &name, policy);
            let mut b = Tool::builder(&name)
                .description(description)
                .input_schema(input_schema)
                .meta(meta)
                .raw_handler(handler);
            if let Some(out) = output_schema {
                b = b.output_schema(out);
            }
            return b.build();
        };
        let mut spec = ToolSpec::new(&name, description).map_err(|e| SpecError::Fields {
            origin: None,
            errors: vec![e],
        })?;
        spec.input_schema = input_schema;
        spec.output_schema = output_schema;
        spec.meta = meta;
        self.compat_tool(endpoint, spec, &compat, policy)
    }

    /// The tool `spec` defines, running at `endpoint` with `policy`, under the contract
    /// a bread or Toren file declares (`compat`): its effects, idempotency, approval (a
    /// predicate evaluated in the tool's own worker), timeout, max attempts, retries,
    /// credentials, streaming, hooks (run in the tool's worker, first in the pipeline's
    /// chain) or human gate. What the file declares wins over `spec` where both say.
    /// Agent projects and the registry build a tool file's tool with it alike.
    pub fn compat_tool(
        &self,
        endpoint: Endpoint,
        spec: ToolSpec,
        compat: &CompatSpec,
        policy: SandboxPolicy,
    ) -> Result<Tool, SpecError> {
        let name = spec.name.as_str().to_owned();
        if compat.human {
            // The answer is what the person sends: any JSON, as bread's human tools take.
            let asked = toolshed_core::tool::human_tool_with(
                &name,
                &spec.description,
                spec.input_schema.clone(),
                spec.output_schema.clone().unwrap_or_else(|| json!({})),
            )?;
            let mut human = asked.spec().clone();
            human.meta = spec.meta;
            return Tool::from_spec(human, asked.handler().clone());
        }
        let handler = self.handler_with(endpoint.clone(), &name, policy.clone());
        let worker = Worker {
            dispatcher: self.clone(),
            endpoint: Arc::new(endpoint),
            tool: Arc::from(name.as_str()),
            policy: Arc::new(policy),
        };
        let mut spec = spec;
        spec.credentials.extend(compat.credentials.iter().cloned());
        spec.credentials.sort();
        spec.credentials.dedup();
        spec.streaming |= compat.streaming;
        if let Some(e) = compat.effects {
            spec.effects = e;
        }
        if let Some(i) = compat.idempotency {
            spec.idempotency = i;
        }
        if let Some(ms) = compat.timeout_ms {
            spec.timeout = Some(Duration::from_millis(ms));
        }
        if let Some(n) = compat.max_attempts {
            spec.max_attempts = Some(n);
        }
        if compat.retry > 0 {
            spec.retry = RetryPolicy {
                attempts: compat.retry,
                ..RetryPolicy::default()
            };
        }
        match compat.approval.as_deref() {
            Some("always") => spec.approval = Approval::Always,
            Some("predicate") => spec.approval = worker.clone().approval(),
            _ => {}
        }
        let tool = Tool::from_spec(spec, handler)?;
        if compat.hooks.is_empty() {
            return Ok(tool);
        }
        Ok(tool.with_hook(Arc::new(WorkerHook {
            worker,
            before: compat.hooks.iter().any(|h| h == "beforeRun"),
            after: compat.hooks.iter().any(|h| h == "afterRun"),
            error: compat.hooks.iter().any(|h| h == "onError"),
        })))
    }
}

/// A compatibility tool's worker pool: where its predicate and hooks are asked.
#[derive(Clone)]
struct Worker {
    dispatcher: Dispatcher,
    endpoint: Arc<Endpoint>,
    tool: Arc<str>,
    policy: Arc<SandboxPolicy>,
}

impl Worker {
    async fn ask(
        &self,
        op: Op,
        args: &Value,
        run: &toolshed_core::RunContext,
        tool_call_id: &str,
    ) -> Result<Value, DispatchError> {
        let context = CallContext::from_run(run, tool_call_id);
        self.dispatcher
            .ask(
                &self.endpoint,
                &self.tool,
                &self.policy,
                &op,
                args,
                &context,
                run.env_vars(),
                run.secrets(),
            )
            .await
    }

    /// Toren's approval predicate, evaluated in the worker. Anything but a boolean
    /// answer fails the call: failing open would skip the gate.
    fn approval(self) -> Approval {
        Approval::check(WORKER_PREDICATE, move |args, run, call_id| {
            let worker = self.clone();
            Box::pin(async move {
                let fail = |message: String, code: Option<&str>| {
                    let mut err = ToolError::new(ErrorCode::ApprovalPredicateError, message);
                    if let Some(code) = code {
                        err = err.with_details(json!({ "dispatch_code": code }));
                    }
                    err
                };
                match worker.ask(Op::Approval, args, run, call_id).await {
                    Ok(Value::Bool(b)) => Ok(b),
                    Ok(other) => Err(fail(
                        format!(
                            "the approval predicate of tool `{}` answered {other}, not a boolean",
                            worker.tool
                        ),
                        None,
                    )),
                    Err(e) => Err(fail(
                        format!(
                            "the approval predicate of tool `{}` failed in its worker: {}",
                            worker.tool,
                            e.message()
                        ),
                        Some(e.code().as_str()),
                    )),
                }
            }) as BoxFuture<'_, Result<bool, ToolError>>
        })
    }
}

/// bread's `hooks`, run in the tool's worker as the tool's own hook (first in the
/// chain: tool → plugins → global, as bread orders them).
struct WorkerHook {
    worker: Worker,
    before: bool,
    after: bool,
    error: bool,
}

impl WorkerHook {
    async fn run(
        &self,
        hook: &str,
        call: HookCall<'_>,
        args: &Value,
        fields: Map<String, Value>,
    ) -> Result<Map<String, Value>, ToolError> {
        let mut fields = fields;
        fields.insert("hook".into(), json!(hook));
        fields.insert("attempt".into(), json!(call.attempt));
        let answer = self
            .worker
            .ask(Op::Hook(fields), args, call.run, call.tool_call_id)
            .await
            .map_err(|e| {
                let mut err = e.to_tool_error();
                err.message = format!(
                    "the {hook} hook of tool `{}` failed: {}",
                    self.worker.tool, err.message
                );
                err
            })?;
        match answer {
            Value::Object(map) => Ok(map),
            other => Err(ToolError::new(
                ErrorCode::HandlerError,
                format!(
                    "the {hook} hook of tool `{}` answered {other}, not a decision",
                    self.worker.tool
                ),
            )),
        }
    }
}

fn decision(map: &Map<String, Value>) -> &str {
    map.get("decision").and_then(Value::as_str).unwrap_or("")
}

fn take(map: &mut Map<String, Value>, key: &str) -> Value {
    map.remove(key).unwrap_or(Value::Null)
}

impl Hook for WorkerHook {
    fn name(&self) -> &str {
        "bread hooks"
    }

    fn before_run<'a>(&'a self, call: HookCall<'a>, args: &'a Value) -> BoxFuture<'a, BeforeRun> {
        Box::pin(async move {
            if !self.before {
                return BeforeRun::Continue;
            }
            match self.run("beforeRun", call, args, Map::new()).await {
                Err(e) => BeforeRun::Fail(e),
                Ok(mut m) => match decision(&m) {
                    "replace_args" => BeforeRun::ReplaceArgs(take(&mut m, "args")),
                    "short_circuit" => BeforeRun::ShortCircuit(take(&mut m, "output")),
                    _ => BeforeRun::Continue,
                },
            }
        })
    }

    fn after_run<'a>(&'a self, call: HookCall<'a>, result: &'a Value) -> BoxFuture<'a, AfterRun> {
        Box::pin(async move {
            if !self.after {
                return AfterRun::Keep;
            }
            let mut fields = Map::new();
            fields.insert("result".into(), result.clone());
            match self.run("afterRun", call, call.args, fields).await {
                Err(e) => AfterRun::Fail(e),
                Ok(mut m) => match decision(&m) {
                    "replace" => AfterRun::Replace(take(&mut m, "output")),
                    _ => AfterRun::Keep,
                },
            }
        })
    }

    fn on_error<'a>(&'a self, call: HookCall<'a>, error: &'a ToolError) -> BoxFuture<'a, OnError> {
        Box::pin(async move {
            if !self.error {
                return OnError::Propagate;
            }
            let mut fields = Map::new();
            fields.insert(
                "error".into(),
                json!({"message": error.message, "code": error.code.as_str()}),
            );
            match self.run("onError", call, call.args, fields).await {
                Err(e) => OnError::Fail(e),
                Ok(mut m) => match decision(&m) {
                    "recover" => OnError::Recover(take(&mut m, "output")),
                    "retry" => OnError::Retry,
                    "fail" => {
                        let message = take(&mut m, "message");
                        let mut err = ToolError::new(
                            ErrorCode::HandlerError,
                            message.as_str().unwrap_or("failed by the onError hook"),
                        );
                        if let Some(code) = m.get("code").and_then(Value::as_str) {
                            err = err.with_details(json!({ "tool_code": code }));
                        }
                        OnError::Fail(err)
                    }
                    _ => OnError::Propagate,
                },
            }
        })
    }
}
