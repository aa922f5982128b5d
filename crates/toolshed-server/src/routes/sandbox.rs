//! `/api/v1/tools/sandbox/…`: the seed's Sandbox Test (run code, or a registered tool's
//! own code, in the sandbox; every run recorded) and the lookups of what was run, per
//! tenant.

use axum::extract::{Path, State};
use serde_json::{Value, json};
use toolshed_api::requests::SandboxExecuteBody;
use toolshed_api::views::{SandboxExecutionView, SandboxLanguage};
use toolshed_api::{ApiCode, Data, ErrorEnvelope, Paged};
use toolshed_auth::{Claims, Role};
use toolshed_registry::{NewSandboxExecution, SandboxExecutionRecord};
use toolshed_sandbox::snippet::Language;
use toolshed_sandbox::{LimitsRequest, Network};

use crate::Json;
use crate::error::ApiError;
use crate::extract::{Auth, Body, Deployer, Query};
use crate::routes::registry::PageQuery;
use crate::sandbox::{Prepared, cap, read_result, sandbox_error, view};
use crate::state::AppState;
use crate::tools::find_tool;

/// The longest `tool_id` accepted.
const MAX_TOOL_ID: usize = 256;

/// Run code in the sandbox (needs the deployer role): Python defining `run(input)` (the
/// seed's Sandbox Test), a Node module exporting `run`, or a shell script; or, with a
/// `tool_id` and no `code`, the registered tool's own code. The answer is the seed's
/// result plus what the sandbox measured; a failing run is a 200 with `error` set.
/// Every run is recorded under its `execution_id`.
#[utoipa::path(post, path = "/api/v1/tools/sandbox/execute", tag = "sandbox", security(("bearer" = [])),
    request_body = SandboxExecuteBody,
    responses(
        (status = 200, description = "Ran (see `error` for a failure of the code)", body = Data<SandboxExecutionView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope),
        (status = 404, description = "No such tool", body = ErrorEnvelope),
        (status = 409, description = "The tool's stored endpoint cannot run", body = ErrorEnvelope),
        (status = 413, description = "The body or the code is too large", body = ErrorEnvelope),
        (status = 422, description = "A field is wrong, or the tool is not code the sandbox can run", body = ErrorEnvelope),
        (status = 429, description = "The tenant's execute rate or run quota is used up (`Retry-After` says for how long)", body = ErrorEnvelope),
        (status = 503, description = "This host cannot sandbox (the message names the mechanism and the fix), or `STORAGE_FULL`", body = ErrorEnvelope),
    ))]
pub async fn execute(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Body(body): Body<SandboxExecuteBody>,
) -> Result<Json<Data<SandboxExecutionView>>, ApiError> {
    let settings = &state.config().sandbox;
    let timeout_ms = match body.timeout_seconds {
        Some(0) => {
            return Err(ApiError::field(
                "timeout_seconds",
                "must be at least 1 second",
            ));
        }
        t => t.map(|s| s.saturating_mul(1000)),
    };
    let memory_bytes = match body.memory_mb {
        Some(m) if m < 8 => {
            return Err(ApiError::field("memory_mb", "must be at least 8 MB"));
        }
        m => m.map(|m| m.saturating_mul(1024 * 1024)),
    };
    let input = match body.input_json {
        None | Some(Value::Null) => json!({}),
        Some(v) => v,
    };
    let tool_id = match body.tool_id {
        Some(t) if t.trim().is_empty() => {
            return Err(ApiError::field(
                "tool_id",
                "is empty; give a registered tool's id or name, or leave it out",
            ));
        }
        Some(t) if t.len() > MAX_TOOL_ID => {
            return Err(ApiError::field(
                "tool_id",
                format!("is longer than {MAX_TOOL_ID} characters"),
            ));
        }
        t => t,
    };
    let prepared = match (body.code, &tool_id) {
        (Some(code), _) => {
            if code.len() > settings.max_code_bytes {
                return Err(ApiError::new(
                    ApiCode::PayloadTooLarge,
                    format!(
                        "field `code`: {} bytes is more than the server's limit of {} bytes",
                        code.len(),
                        settings.max_code_bytes
                    ),
                )
                .with_fields(vec![toolshed_api::FieldProblem::new(
                    "code",
                    format!("at most {} bytes", settings.max_code_bytes),
                )]));
            }
            if code.trim().is_empty() {
                return Err(ApiError::field(
                    "code",
                    "is empty; give the code to run (Python defining `run(input)`), or leave it out and give a tool_id",
                ));
            }
            Prepared::code(language(body.language.unwrap_or_default()), &code, &input)?
        }
        (None, Some(id)) => {
            let record = find_tool(state.registry().as_ref(), id).await?;
            let env = crate::tools::run_env(
                state.dispatcher(),
                state.code()?,
                state.registry().as_ref(),
                &record,
            )
            .await?;
            let prepared = Prepared::tool(state.dispatcher(), &record, &env, &input).await?;
            if let Some(l) = body.language
                && l.as_str() != prepared.language
            {
                return Err(ApiError::field(
                    "language",
                    format!(
                        "is `{l}`, but tool `{}` is `{}` code; leave it out to run the tool",
                        record.name, prepared.language
                    ),
                ));
            }
            prepared
        }
        (None, None) => {
            return Err(ApiError::field(
                "code",
                "is missing: give the code to run (Python defining `run(input)`), or a tool_id to run a registered tool's own code",
            ));
        }
    };
    let sandbox = state.sandbox()?;
    // Each execution is recorded: it counts against the tenant's run quota and the
    // free-disk guard like a run.
    state.admit_run(&tenant_of(&claims))?;
    let Prepared {
        runner,
        mut spec,
        stdin,
        language,
        code_sha256,
        code_bytes,
        tool_timeout_ms,
        tool_network,
    } = prepared;
    let timeout_ms = timeout_ms.or(tool_timeout_ms);
    spec.limits = LimitsRequest {
        timeout_ms,
        // CPU time follows the wall clock, so a longer timeout is not cut short by it.
        cpu_time_ms: timeout_ms,
        memory_bytes,
        ..LimitsRequest::default()
    };
    spec.network = if body.network_enabled.unwrap_or(tool_network) {
        Network::On
    } else {
        Network::Off
    };
    let outcome = sandbox.run(spec, stdin).await.map_err(sandbox_error)?;
    let result = read_result(&runner, &outcome);
    let mut answer = view(&outcome, language, &result);
    let id = uuid::Uuid::new_v4().to_string();
    answer.execution_id = Some(id.clone());
    answer.tool_id = tool_id.clone();
    answer.code_sha256 = Some(code_sha256.clone());
    answer.created_by = Some(claims.sub.clone());

    let record = record_of(&state, &claims, &answer, &input, code_bytes)?;
    let stored = state.registry().record_sandbox_execution(record).await?;
    answer.created_at_ms = Some(stored.created_at_ms);
    tracing::info!(
        execution = %id,
        by = %claims.sub,
        language,
        tool = tool_id.as_deref().unwrap_or("-"),
        exit_code = ?answer.exit_code,
        timed_out = answer.timed_out,
        oom_killed = answer.oom_killed,
        duration_ms = answer.duration_ms,
        "sandbox execution"
    );
    Ok(Json(Data { data: answer }))
}

fn language(l: SandboxLanguage) -> Language {
    match l {
        SandboxLanguage::Python => Language::Python,
        SandboxLanguage::Node => Language::Node,
        SandboxLanguage::Bash => Language::Bash,
    }
}

/// What is recorded: the answer with stdout and stderr capped, the input if small.
fn record_of(
    state: &AppState,
    claims: &Claims,
    answer: &SandboxExecutionView,
    input: &Value,
    code_bytes: u64,
) -> Result<NewSandboxExecution, ApiError> {
    let settings = &state.config().sandbox;
    let mut kept = answer.clone();
    let (stdout, cut) = cap(&answer.stdout, settings.record_output_bytes);
    kept.stdout = stdout;
    kept.stdout_truncated |= cut;
    let (stderr, cut) = cap(&answer.stderr, settings.record_output_bytes);
    kept.stderr = stderr;
    kept.stderr_truncated |= cut;
    // `output_value` is `output` parsed: recorded once, as `output`, and parsed again
    // when read back.
    kept.output_value = Value::Null;
    let input_text = input.to_string();
    let result = serde_json::to_value(&kept)
        .map_err(|e| ApiError::internal("cannot record the execution", e))?;
    Ok(NewSandboxExecution {
        id: answer.execution_id.clone().unwrap_or_default(),
        tenant: tenant_of(claims),
        created_by: claims.sub.clone(),
        tool_id: answer.tool_id.clone(),
        language: answer.language.clone(),
        code_sha256: answer.code_sha256.clone().unwrap_or_default(),
        code_bytes,
        input: (input_text.len() <= settings.record_input_bytes).then(|| input.clone()),
        input_bytes: input_text.len() as u64,
        exit_code: answer.exit_code,
        timed_out: answer.timed_out,
        duration_ms: answer.duration_ms,
        result,
    })
}

fn tenant_of(claims: &Claims) -> String {
    claims
        .tenant
        .clone()
        .unwrap_or_else(|| crate::DEFAULT_TENANT.to_owned())
}

/// The recorded answer, with when it was recorded.
fn recorded(r: SandboxExecutionRecord) -> Result<SandboxExecutionView, ApiError> {
    let mut v: SandboxExecutionView = serde_json::from_value(r.execution.result)
        .map_err(|e| ApiError::internal("a recorded sandbox execution is unreadable", e))?;
    if v.output_value.is_null() {
        v.output_value = v
            .output
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(Value::Null);
    }
    v.execution_id = Some(r.execution.id);
    v.created_by = Some(r.execution.created_by);
    v.created_at_ms = Some(r.created_at_ms);
    Ok(v)
}

/// A recorded execution of the caller's tenant (viewers read, as they read runs).
/// Another tenant's is not found.
#[utoipa::path(get, path = "/api/v1/tools/sandbox/executions/{execution_id}", tag = "sandbox", security(("bearer" = [])),
    params(("execution_id" = String, Path, description = "The `execution_id` an execution answered")),
    responses(
        (status = 200, body = Data<SandboxExecutionView>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
    ))]
pub async fn get_execution(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<SandboxExecutionView>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let record = state
        .registry()
        .sandbox_execution(&id, &tenant_of(claims))
        .await?;
    Ok(Json(Data {
        data: recorded(record)?,
    }))
}

/// The caller's tenant's recorded executions, newest first.
#[utoipa::path(get, path = "/api/v1/tools/sandbox/executions", tag = "sandbox", security(("bearer" = [])),
    params(PageQuery),
    responses(
        (status = 200, body = Paged<SandboxExecutionView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope),
    ))]
pub async fn list_executions(
    State(state): State<AppState>,
    auth: Auth,
    Query(q): Query<PageQuery>,
) -> Result<Json<Paged<SandboxExecutionView>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let page = state
        .registry()
        .list_sandbox_executions(
            &tenant_of(claims),
            crate::routes::registry::page_of(q.page)?,
            crate::routes::registry::per_page_of(q.per_page)?,
        )
        .await?;
    let meta = toolshed_api::PageMeta {
        page: page.page,
        per_page: page.per_page,
        total: page.total,
    };
    let data = page
        .items
        .into_iter()
        .map(recorded)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(Paged { data, meta }))
}
