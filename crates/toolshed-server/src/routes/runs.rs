//! `/api/v1/runs`, `/api/v1/approvals`, `/api/v1/answers`: the journal's runs, seen
//! per tenant (a run of another tenant is "not found"), decided and resumed over HTTP.

use axum::extract::{Path, State};
use serde::Deserialize;
use toolshed_api::requests::{AnswerBody, ReasonBody};
use toolshed_api::views::{
    AnswerView, CallView, DecisionView, ParkedCall, ResumeView, ResumedCall, RunSummary, RunView,
};
use toolshed_api::{ApiCode, Data, ErrorEnvelope};
use toolshed_auth::{Claims, Role};
use toolshed_journal::{
    CallRecord, CallStatus, GateFilter, JournalError, RunFilter, RunRecord, RunStatus,
};
use toolshed_runtime::{Driver, PlanStep, Runtime};
use utoipa::IntoParams;

use crate::Json;
use crate::error::ApiError;
use crate::extract::{Auth, Body, Deployer, Query};
use crate::state::AppState;
use crate::views;

/// How deep the list reaches: `page` × `limit` at most this many runs, newest first
/// (the journal lists newest first with a limit, so a deeper page reads every run
/// before it).
pub const RUNS_REACHABLE: u32 = 10_000;

/// Which runs to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    /// `running`, `parked`, `completed`, `failed` or `cancelled`.
    pub status: Option<String>,
    /// Only this agent's runs (`registry` for runs of the execute route).
    pub agent_id: Option<String>,
    /// At most this many, newest first: 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Which page of `limit` runs, from 1 (default): page 2 is the `limit` runs older
    /// than page 1's. The 10,000 newest runs that match are reachable; past them,
    /// narrow with `status` or `agent_id`.
    #[param(minimum = 1)]
    pub page: Option<u32>,
    /// `true`: only runs that failed or have a call that ended in an error (a tool's
    /// error result leaves its run `completed`). Looks through the 10,000 newest runs
    /// that match the other filters.
    pub failed: Option<bool>,
}

/// List the caller's tenant's runs, newest first, a page at a time, each with how many
/// of its calls ended in an error.
#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", security(("bearer" = [])), params(RunQuery),
    responses((status = 200, body = Data<Vec<RunSummary>>), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope)))]
pub async fn list_runs(
    State(state): State<AppState>,
    auth: Auth,
    Query(q): Query<RunQuery>,
) -> Result<Json<Data<Vec<RunSummary>>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::invalid_query(format!(
                "`status={s}` is not a run status; use running, parked, completed, failed or cancelled"
            ))
        })?),
    };
    let limit = crate::extract::bounded("limit", q.limit, 100, 1..=1000)?;
    let page = crate::extract::bounded("page", q.page, 1, 1..=RUNS_REACHABLE)?;
    let skip = (page - 1).saturating_mul(limit);
    if skip.saturating_add(limit) > RUNS_REACHABLE {
        return Err(ApiError::invalid_query(format!(
            "`page={page}` of {limit} runs reaches past the {RUNS_REACHABLE} newest runs; narrow the list with `status` or `agent_id`"
        )));
    }
    let filter = RunFilter {
        status,
        agent_id: q.agent_id,
        tenant: Some(tenant_of(claims)),
        limit: skip + limit,
    };
    let journal = state.journal();
    let mut listed = Vec::new();
    if q.failed.unwrap_or(false) {
        for (run, calls_failed) in failed_runs(journal.as_ref(), filter, skip + limit).await? {
            listed.push(RunSummary {
                run: views::run(run),
                calls_failed,
            });
        }
    } else {
        for run in journal.list_runs(&filter).await? {
            let calls_failed = calls_failed(journal.as_ref(), &run.id).await?;
            listed.push(RunSummary {
                run: views::run(run),
                calls_failed,
            });
        }
    }
    Ok(Json(Data {
        data: listed.into_iter().skip(skip as usize).collect(),
    }))
}

/// How many of a run's calls ended in an error result.
async fn calls_failed(
    journal: &dyn toolshed_journal::Journal,
    run_id: &str,
) -> Result<u32, ApiError> {
    let calls = journal.calls_of_run(run_id).await?;
    Ok(calls
        .iter()
        .filter(|c| c.status == CallStatus::Failed)
        .count() as u32)
}

/// The newest `wanted` runs matching `filter` that failed or have a failed call, each
/// with its count, looking through at most [`RUNS_REACHABLE`] runs: windows of runs
/// four times larger each round, each run's calls counted once.
async fn failed_runs(
    journal: &dyn toolshed_journal::Journal,
    mut filter: RunFilter,
    wanted: u32,
) -> Result<Vec<(RunRecord, u32)>, ApiError> {
    let mut found = Vec::new();
    let mut seen = 0;
    filter.limit = wanted.saturating_mul(4).min(RUNS_REACHABLE);
    loop {
        let runs = journal.list_runs(&filter).await?;
        let listed = runs.len();
        for run in runs.into_iter().skip(seen) {
            seen += 1;
            let n = calls_failed(journal, &run.id).await?;
            if n > 0 || run.status == RunStatus::Failed {
                found.push((run, n));
                if found.len() >= wanted as usize {
                    return Ok(found);
                }
            }
        }
        if listed < filter.limit as usize || filter.limit >= RUNS_REACHABLE {
            return Ok(found);
        }
        filter.limit = filter.limit.saturating_mul(4).min(RUNS_REACHABLE);
    }
}

fn tenant_of(claims: &Claims) -> String {
    claims
        .tenant
        .clone()
        .unwrap_or_else(|| crate::DEFAULT_TENANT.to_owned())
}

/// The run, if the caller's tenant owns it; otherwise "not found" (never "forbidden":
/// another tenant's ids are not confirmed to exist).
async fn visible_run(state: &AppState, claims: &Claims, id: &str) -> Result<RunRecord, ApiError> {
    let missing = || ApiError::not_found(format!("run `{id}` not found"));
    let run = match state.journal().get_run(id).await {
        Ok(r) => r,
        Err(JournalError::NotFound { .. }) => return Err(missing()),
        Err(e) => return Err(e.into()),
    };
    if run.tenant.as_deref() != Some(tenant_of(claims).as_str()) {
        return Err(missing());
    }
    Ok(run)
}

async fn visible_call(
    state: &AppState,
    claims: &Claims,
    call_id: &str,
) -> Result<CallRecord, ApiError> {
    let missing = || ApiError::not_found(format!("call `{call_id}` not found"));
    let call = match state.journal().get_call(call_id).await {
        Ok(c) => c,
        Err(JournalError::NotFound { .. }) => return Err(missing()),
        Err(e) => return Err(e.into()),
    };
    visible_run(state, claims, &call.run_id)
        .await
        .map_err(|_| missing())?;
    Ok(call)
}

/// Whether to include crumbs.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ShowQuery {
    /// Include the run's crumbs.
    pub crumbs: Option<bool>,
}

/// A run with its calls (and crumbs with `?crumbs=true`).
#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs", security(("bearer" = [])),
    params(("id" = String, Path, description = "The run id"), ShowQuery),
    responses((status = 200, body = Data<RunView>), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
pub async fn get_run(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Json<Data<RunView>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let run = visible_run(&state, claims, &id).await?;
    let calls = state.journal().calls_of_run(&id).await?;
    let mut view = views::run(run);
    view.calls = Some(calls.into_iter().map(views::call).collect());
    if q.crumbs.unwrap_or(false) {
        let crumbs = state.journal().crumbs_of_run(&id).await?;
        view.crumbs = Some(crumbs.into_iter().map(|c| c.crumb).collect());
    }
    Ok(Json(Data { data: view }))
}

/// Resume a run: decided approvals and answers take effect, recorded calls replay, and
/// the rest executes. Needs the deployer role. An approved call whose tool changed since
/// its approval is not run: 409 `REVISION_CHANGED` naming both revisions, the run stays
/// parked and the call waits for a new decision (`GET /api/v1/approvals`).
#[utoipa::path(post, path = "/api/v1/runs/{id}/resume", tag = "runs", security(("bearer" = [])),
    params(("id" = String, Path, description = "The run id")),
    responses((status = 200, body = Data<ResumeView>), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope), (status = 409, description = "Finished, not resumable here, or an approved call's tool changed (`REVISION_CHANGED`)", body = ErrorEnvelope)))]
pub async fn resume_run(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<ResumeView>>, ApiError> {
    let claims = auth.require(Role::Deployer)?;
    let run = visible_run(&state, claims, &id).await?;
    let driver: Driver =
        serde_json::from_value(run.driver.clone()).map_err(|_| not_resumable(&id))?;
    let runtime = runtime_for(&state, &id, &driver).await?;
    let handle = runtime.resume(&id).await?;
    let outcome = toolshed_runtime::drive(&handle, &driver).await?;
    let outcomes = outcome
        .outcomes
        .into_iter()
        .map(|o| {
            let (output, error) = match o.result {
                Ok(v) => (Some(v), None),
                Err(e) => (None, Some(e)),
            };
            ResumedCall {
                call_id: o.tool_call_id.to_string(),
                tool: o.tool_name.to_string(),
                output,
                error,
            }
        })
        .collect();
    let parked = outcome
        .parked
        .into_iter()
        .map(|p| ParkedCall {
            call_id: p.call_id,
            tool: p.tool,
            gate: views::gate(p.gate),
        })
        .collect();
    Ok(Json(Data {
        data: ResumeView {
            run: views::run(outcome.run),
            outcomes,
            parked,
        },
    }))
}

fn not_resumable(id: &str) -> ApiError {
    ApiError::new(
        ApiCode::NotResumable,
        format!(
            "run `{id}` is driven by a program using the library; resume it by running that program again"
        ),
    )
}

/// A runtime holding every tool the driver calls, from the registry.
async fn runtime_for(state: &AppState, id: &str, driver: &Driver) -> Result<Runtime, ApiError> {
    let mut names = Vec::new();
    let mut collect = |step: &PlanStep| {
        if let PlanStep::Call { tool, .. } = step
            && !names.contains(tool)
        {
            names.push(tool.clone());
        }
    };
    match driver {
        Driver::Direct { tool, .. } => names.push(tool.clone()),
        Driver::Plan { steps } => {
            for step in steps {
                match step {
                    PlanStep::Parallel(inner) => inner.iter().for_each(&mut collect),
                    other => collect(other),
                }
            }
        }
        Driver::Library => return Err(not_resumable(id)),
    }
    let missing = |name: &str| {
        ApiError::new(
            ApiCode::NotResumable,
            format!(
                "run `{id}` calls `{name}`, which is not in the registry; resume it where it was started (`toolshed runs resume {id}`)"
            ),
        )
    };
    if let [one] = names.as_slice() {
        return match state.prepared(one).await {
            Ok(p) => Ok(p.runtime.clone()),
            Err(e) if e.code() == ApiCode::NotFound => Err(missing(one)),
            Err(e) => Err(e),
        };
    }
    let mut tools = Vec::new();
    for name in &names {
        let record = match crate::tools::find_tool(state.registry().as_ref(), name).await {
            Ok(r) => r,
            Err(e) if e.code() == ApiCode::NotFound => return Err(missing(name)),
            Err(e) => return Err(e),
        };
        tools.push(state.runnable(&record).await?);
    }
    let set = toolshed_core::ToolSet::from_tools(tools)
        .map_err(|e| ApiError::internal("cannot build a toolset", e))?;
    Runtime::new(
        toolshed_core::Pipeline::builder(set)
            .config(crate::tools::pipeline_config(state))
            .build(),
        state.journal().clone(),
        crate::tools::runtime_config(state),
    )
    .map_err(ApiError::from)
}

/// Cancel a run (it will not be resumed). Needs the deployer role.
#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", tag = "runs", security(("bearer" = [])),
    params(("id" = String, Path, description = "The run id")), request_body = ReasonBody,
    responses((status = 200, body = Data<RunView>), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope)))]
pub async fn cancel_run(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(id): Path<String>,
    Body(body): Body<ReasonBody>,
) -> Result<Json<Data<RunView>>, ApiError> {
    visible_run(&state, &claims, &id).await?;
    let run = state
        .journal()
        .set_run_status(&id, RunStatus::Cancelled, body.reason)
        .await?;
    Ok(Json(Data {
        data: views::run(run),
    }))
}

/// Calls of the caller's tenant waiting for an approval or an answer.
#[utoipa::path(get, path = "/api/v1/approvals", tag = "approvals", security(("bearer" = [])),
    responses((status = 200, body = Data<Vec<CallView>>), (status = 401, body = ErrorEnvelope)))]
pub async fn list_approvals(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<Data<Vec<CallView>>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let gates = state
        .journal()
        .pending_gates(&GateFilter {
            run_id: None,
            tenant: Some(tenant_of(claims)),
        })
        .await?;
    Ok(Json(Data {
        data: gates.into_iter().map(views::call).collect(),
    }))
}

/// Approve a waiting call (deployer). It runs when the run is resumed, against the tool
/// revision it was approved for. Under four-eyes (the tool's `approval.four_eyes`, or
/// `toolshed serve --four-eyes`) the user who asked for the call cannot approve it: 403
/// `SELF_APPROVAL`.
#[utoipa::path(post, path = "/api/v1/approvals/{call_id}/approve", tag = "approvals", security(("bearer" = [])),
    params(("call_id" = String, Path, description = "The call id")), request_body = ReasonBody,
    responses((status = 200, body = Data<DecisionView>), (status = 401, body = ErrorEnvelope), (status = 403, description = "Not a deployer, or four-eyes: the caller asked for this call (`SELF_APPROVAL`)", body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope), (status = 409, description = "Not waiting for an approval", body = ErrorEnvelope)))]
pub async fn approve(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(call_id): Path<String>,
    Body(body): Body<ReasonBody>,
) -> Result<Json<Data<DecisionView>>, ApiError> {
    decide(state, claims, call_id, body, true).await
}

/// Deny a waiting call (deployer). On resume it becomes an error result naming who and why.
#[utoipa::path(post, path = "/api/v1/approvals/{call_id}/deny", tag = "approvals", security(("bearer" = [])),
    params(("call_id" = String, Path, description = "The call id")), request_body = ReasonBody,
    responses((status = 200, body = Data<DecisionView>), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope)))]
pub async fn deny(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(call_id): Path<String>,
    Body(body): Body<ReasonBody>,
) -> Result<Json<Data<DecisionView>>, ApiError> {
    decide(state, claims, call_id, body, false).await
}

async fn decide(
    state: AppState,
    claims: Claims,
    call_id: String,
    body: ReasonBody,
    approved: bool,
) -> Result<Json<Data<DecisionView>>, ApiError> {
    let rec = decide_as(&state, &claims, &call_id, body.reason, approved).await?;
    Ok(Json(Data {
        data: DecisionView {
            call_id: rec.call_id,
            run_id: rec.run_id,
            decision: rec.decision.map(views::decision),
        },
    }))
}

/// Approve or deny a waiting call as `claims` (a deployer or above): the one path of the
/// REST routes and of an approval given at an MCP client (elicitation). The call must
/// be visible to the caller's tenant; four-eyes rules apply.
pub(crate) async fn decide_as(
    state: &AppState,
    claims: &Claims,
    call_id: &str,
    reason: Option<String>,
    approved: bool,
) -> Result<CallRecord, ApiError> {
    claims.require(Role::Deployer)?;
    visible_call(state, claims, call_id).await?;
    let journal = state.journal().as_ref();
    let rec = if approved {
        let policy = toolshed_runtime::ApprovalPolicy {
            four_eyes: state.config().four_eyes,
        };
        toolshed_runtime::approve_under(journal, call_id, &claims.sub, reason, policy).await?
    } else {
        toolshed_runtime::deny(journal, call_id, &claims.sub, reason).await?
    };
    Ok(rec)
}

/// Answer a human tool's call (deployer). A wrong answer is a 422 and the run stays parked.
#[utoipa::path(post, path = "/api/v1/answers/{call_id}", tag = "approvals", security(("bearer" = [])),
    params(("call_id" = String, Path, description = "The call id")), request_body = AnswerBody,
    responses((status = 200, body = Data<AnswerView>), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope), (status = 422, body = ErrorEnvelope)))]
pub async fn answer(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(call_id): Path<String>,
    Body(body): Body<AnswerBody>,
) -> Result<Json<Data<AnswerView>>, ApiError> {
    visible_call(&state, &claims, &call_id).await?;
    let rec =
        toolshed_runtime::answer(state.journal().as_ref(), &call_id, body.answer, &claims.sub)
            .await?;
    Ok(Json(Data {
        data: AnswerView {
            call_id: rec.call_id,
            run_id: rec.run_id,
            answer: rec.answer.map(views::answer),
        },
    }))
}
