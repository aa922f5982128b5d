//! Executing one registry tool as a durable run with the caller's principal: the one
//! path behind `POST /api/v1/registry/tools/{id}/execute` and every MCP `tools/call` on
//! `/mcp`. Rate limit, argument check, credentials policy (at preparation), journal and
//! approvals all happen here, so the two front doors cannot drift apart.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolshed_api::ApiCode;
use toolshed_auth::Claims;
use toolshed_core::{CallOutcome, ToolCall};
use toolshed_journal::{JournalError, RunStatus};
use toolshed_runtime::{Attended, CallStep, Driver, NewRunBuilder};

use crate::error::ApiError;
use crate::routes::registry::REGISTRY_AGENT;
use crate::state::{AppState, Prepared};

/// The tool call id of the single call of an execute run.
const CALL_ID: &str = "call_0";

/// One execution to make.
#[derive(Debug, Clone)]
pub struct ExecuteRequest {
    /// The tool's id or name.
    pub tool: String,
    /// The arguments (`null` is `{}`; anything else but an object is refused).
    pub args: Option<Value>,
    /// Which run to make the call in.
    pub run: RunChoice,
    /// Where the run's agent id says it came from (`registry`, `mcp`).
    pub agent_id: &'static str,
    /// The MCP client and protocol of a call made over `/mcp`, recorded in the run's
    /// driver (what `runs show` prints as `via`).
    pub via: Option<toolshed_mcp::server::Inbound>,
    /// The tool as the caller already prepared it (`tool` names it): spares a second
    /// lookup.
    pub prepared: Option<Arc<Prepared>>,
    /// What the surface gives the run beside its record: who answers the questions the
    /// tool asks (an MCP client).
    pub attended: Attended,
}

/// Which run an execution is made in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunChoice {
    /// A new run with a fresh id.
    New,
    /// A new run with this id (the caller wants to know it before the call).
    Named(String),
    /// The run of this id when it exists (of the caller's tenant, for the same tool and
    /// arguments), else a new one of this id: how an idempotency key is kept. A decided
    /// approval takes effect; a finished run answers its recorded result.
    Continue(String),
}

/// How an execution ended.
pub struct Executed {
    /// The run.
    pub run_id: String,
    /// The tool as prepared (its record and runtime).
    pub prepared: Arc<Prepared>,
    /// The call's result, or the gate it waits at.
    pub step: CallStep,
}

impl ExecuteRequest {
    /// A request for `tool` with `args`, recorded as the registry's.
    pub fn new(tool: impl Into<String>, args: Option<Value>) -> Self {
        ExecuteRequest {
            tool: tool.into(),
            args,
            run: RunChoice::New,
            agent_id: REGISTRY_AGENT,
            via: None,
            prepared: None,
            attended: Attended::default(),
        }
    }
}

/// Execute a registry tool for `claims` (whose role the caller has checked).
pub async fn execute(
    state: &AppState,
    claims: &Claims,
    req: ExecuteRequest,
) -> Result<Executed, ApiError> {
    let tenant = claims.tenant.as_deref().unwrap_or(crate::DEFAULT_TENANT);
    state.admit_run(tenant)?;
    let args = match req.args {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a,
        Some(other) => {
            return Err(ApiError::field(
                "args",
                format!(
                    "must be a JSON object, not {}",
                    toolshed_core::schema::kind_of(&other)
                ),
            ));
        }
    };
    let prepared = match req.prepared {
        Some(p) => p,
        None => state.prepared(&req.tool).await?,
    };
    let name = prepared.record.name.clone();
    let pipeline = prepared.runtime.pipeline();
    if let Some(tool) = pipeline.toolset().get(&name) {
        let mut checked = args.clone();
        if let Err(violations) = tool.input_schema().validate_with_defaults(&mut checked) {
            return Err(ApiError::new(
                ApiCode::InvalidArgs,
                toolshed_core::schema::describe_violations(
                    &format!("invalid arguments for tool `{name}`"),
                    &violations,
                ),
            )
            .with_violations(violations));
        }
    }
    let call = ToolCall {
        id: CALL_ID.into(),
        name: name.clone(),
        args: args.clone(),
    };
    // Boxed: continuing a run (a keyed call) drives a whole run handle, whose future
    // would otherwise set the size of every execution's future, which is moved whole
    // wherever it goes (an MCP call boxes it once more).
    if let RunChoice::Continue(run_id) = &req.run
        && let Some(step) = Box::pin(continue_run(
            state,
            claims,
            &prepared,
            run_id,
            &call,
            &req.attended,
        ))
        .await?
    {
        return Ok(Executed {
            run_id: run_id.clone(),
            prepared,
            step,
        });
    }
    let driver = Driver::Direct {
        tool: name.clone(),
        args,
    };
    let mut driver = serde_json::to_value(&driver)
        .map_err(|e| ApiError::internal("cannot record the run's driver", e))?;
    if let Some(via) = &req.via {
        via.record_in(&mut driver);
    }
    let mut new = NewRunBuilder::new(req.agent_id)
        .principal(claims.principal())
        .driver(driver);
    if let RunChoice::Named(id) | RunChoice::Continue(id) = &req.run {
        new = new.id(id.clone());
    }
    let (run, step) = prepared
        .runtime
        .run_once_attended(new.build(), call, &req.attended)
        .await?;
    Ok(Executed {
        run_id: run.id,
        prepared,
        step,
    })
}

/// Continue the run `run_id` when it exists: `None` when there is none yet. A run of
/// another tenant, or of another tool or arguments, is refused rather than continued:
/// an idempotency key names one call.
async fn continue_run(
    state: &AppState,
    claims: &Claims,
    prepared: &Prepared,
    run_id: &str,
    call: &ToolCall,
    attended: &Attended,
) -> Result<Option<CallStep>, ApiError> {
    let journal = state.journal();
    let run = match journal.get_run(run_id).await {
        Ok(run) => run,
        Err(JournalError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let scope = crate::tenancy::scope_of(claims);
    let same_tool = matches!(
        serde_json::from_value::<Driver>(run.driver.clone()),
        Ok(Driver::Direct { tool, args }) if tool == call.name && args == call.args
    );
    if !run.tenant.as_deref().is_none_or(|t| scope.allows(t)) || !same_tool {
        return Err(ApiError::new(
            ApiCode::Conflict,
            format!(
                "the idempotency key is already used by another call (run `{run_id}`); use a new key for a new call"
            ),
        ));
    }
    if run.status.is_final() {
        let calls = journal.calls_of_run(run_id).await?;
        let Some(record) = calls.into_iter().find(|c| c.tool_call_id == CALL_ID) else {
            let reason = match run.status {
                RunStatus::Cancelled => "was cancelled",
                _ => "ended before its call was made",
            };
            return Err(ApiError::new(
                ApiCode::Conflict,
                format!("run `{run_id}` {reason}; use a new idempotency key"),
            ));
        };
        let result = match (record.result, record.error) {
            (_, Some(e)) => Err(e),
            (Some(v), None) => Ok(v),
            (None, None) => Ok(Value::Null),
        };
        return Ok(Some(CallStep::Done(CallOutcome {
            tool_call_id: Arc::from(CALL_ID),
            tool_name: Arc::from(call.name.as_str()),
            result,
            duration: Duration::from_secs_f64(record.duration_ms.unwrap_or(0.0).max(0.0) / 1000.0),
            attempts: record.attempts,
            diagnostics: record.diagnostics,
        })));
    }
    let handle = prepared.runtime.resume_attended(run_id, attended).await?;
    let step = handle.call(call.clone()).await?;
    handle.finish().await?;
    Ok(Some(step))
}
