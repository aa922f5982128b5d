//! `/api/v1/registry/…`: tools (register, list, show, update, delete, versions, usage,
//! execute) and agents (register, list, show).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use toolshed_agent::ToolEntry;
use toolshed_api::requests::{ExecuteBody, ToolRegistration};
use toolshed_api::views::{
    AgentView, CodeDownload, ExecuteStatus, ExecuteView, ToolDetail, ToolSummary, UsageView,
};
use toolshed_api::{ApiCode, Data, ErrorEnvelope, Paged};
use toolshed_auth::Role;
use toolshed_core::Diagnostics;
use toolshed_registry::{NewAgent, ToolFilter};
use toolshed_runtime::CallStep;
use utoipa::IntoParams;

use crate::Json;
use crate::error::ApiError;
use crate::execute::ExecuteRequest;
use crate::extract::{Auth, Body, Deployer, Query};
use crate::state::AppState;
use crate::tenancy::{scope_of, tenant_of};
use crate::tools::{
    Registration, complete_registration, find_by_name, find_tool, new_tool, parse_registration,
};
use crate::views;

/// The agent id recorded on runs started by the execute route.
pub const REGISTRY_AGENT: &str = "registry";

/// Listing filters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ToolQuery {
    /// Only this type: `function`, `mcp` or `api`.
    pub tool_type: Option<String>,
    /// Only this source: `manual`, `cli`, `stdlib`, …
    pub source: Option<String>,
    /// Only names starting with this.
    pub q: Option<String>,
    /// Only tools whose name or description contains this text (ASCII case ignored).
    pub search: Option<String>,
    /// Only tools owned by this tenant.
    pub tenant: Option<String>,
    /// `active` (the default) or `deleted`: deleted tools are listed only when asked.
    pub status: Option<String>,
    /// The page, from 1 (default 1).
    #[param(minimum = 1)]
    pub page: Option<u32>,
    /// Items per page, 1 to 500 (default 20).
    #[param(minimum = 1, maximum = 500)]
    pub per_page: Option<u32>,
}

/// Register a tool.
#[utoipa::path(post, path = "/api/v1/registry/tools", tag = "tools", security(("bearer" = [])),
    request_body = ToolRegistration,
    responses(
        (status = 201, description = "Registered", body = Data<ToolDetail>),
        (status = 400, description = "Not JSON", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 409, description = "The name is taken", body = ErrorEnvelope),
        (status = 413, body = ErrorEnvelope),
        (status = 422, description = "A field is wrong (all are listed)", body = ErrorEnvelope),
    ))]
pub async fn create_tool(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Body(body): Body<Value>,
) -> Result<(StatusCode, Json<Data<ToolDetail>>), ApiError> {
    let reg = parse_registration(body)?;
    if reg.expected_revision.is_some() {
        return Err(ApiError::field(
            "expected_revision",
            "only updates (PUT) take an expected revision",
        ));
    }
    let reg = complete_registration(state.dispatcher(), state.code()?, &claims, reg).await?;
    check_executable(&state, &reg)?;
    check_credentials(&state, &claims, &reg)?;
    let new = new_tool(&reg, &claims.sub, tenant_of(&claims))?;
    let record = state.registry().create_tool(new).await?;
    tracing::info!(tool = %record.name, id = %record.id, by = %claims.sub, "tool registered");
    Ok((
        StatusCode::CREATED,
        Json(Data {
            data: views::tool_detail(&record),
        }),
    ))
}

/// Build the definition as the runtime would: one it would refuse is refused now, not
/// at its first execution. (Building checks the spec, side-effect rule included: an
/// `effects: external` tool that is not keyed never gets this far.)
fn check_executable(state: &AppState, reg: &Registration) -> Result<(), ApiError> {
    crate::tools::executable(state.dispatcher(), reg.file.clone(), &reg.run_env)
        .map(drop)
        .map_err(|reason| ApiError::invalid_body(format!("tool `{}` {reason}", reg.file.name)))
}

/// Every credential the tool declares must be in the operator's policy for the caller's
/// tenant (a 422 `CREDENTIAL_NOT_ALLOWED` naming each one and the fix).
fn check_credentials(
    state: &AppState,
    claims: &toolshed_auth::Claims,
    reg: &Registration,
) -> Result<(), ApiError> {
    state
        .credentials()
        .policy()
        .check_declared(tenant_of(claims), &reg.file.credentials)
}

/// List tools, ordered by name.
#[utoipa::path(get, path = "/api/v1/registry/tools", tag = "tools", security(("bearer" = [])),
    params(ToolQuery),
    responses(
        (status = 200, body = Paged<ToolSummary>),
        (status = 400, description = "A bad query parameter", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
    ))]
pub async fn list_tools(
    State(state): State<AppState>,
    auth: Auth,
    Query(q): Query<ToolQuery>,
) -> Result<Json<Paged<ToolSummary>>, ApiError> {
    auth.require(Role::Viewer)?;
    let page = state
        .registry()
        .list_tools(&ToolFilter {
            tool_type: q.tool_type,
            source: q.source,
            name_prefix: q.q,
            search: q.search,
            tenant: q.tenant,
            status: q
                .status
                .as_deref()
                .map(|s| {
                    s.parse::<toolshed_registry::ToolStatus>().map_err(|_| {
                        ApiError::invalid_query(format!(
                            "`status={s}` is not a tool status; use active (the default) or deleted"
                        ))
                    })
                })
                .transpose()?,
            page: page_of(q.page)?,
            per_page: per_page_of(q.per_page)?,
            // A summary shows no definition.
            skip_definitions: true,
        })
        .await?;
    Ok(Json(views::paged(page, |t| views::tool_summary(&t))))
}

/// A tool with its full schema, by id or name.
#[utoipa::path(get, path = "/api/v1/registry/tools/{id}", tag = "tools", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tool id, or its name")),
    responses(
        (status = 200, body = Data<ToolDetail>),
        (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
    ))]
pub async fn get_tool(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<ToolDetail>>, ApiError> {
    auth.require(Role::Viewer)?;
    let record = find_tool(state.registry().as_ref(), &id).await?;
    Ok(Json(Data {
        data: views::tool_detail(&record),
    }))
}

/// Replace a tool's definition: a new revision; earlier ones are kept.
#[utoipa::path(put, path = "/api/v1/registry/tools/{id}", tag = "tools", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tool id, or its name")),
    request_body = ToolRegistration,
    responses(
        (status = 200, body = Data<ToolDetail>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, description = "The role is too low (`FORBIDDEN`), or the tool is another tenant's (`NOT_OWNER`, naming it)", body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
        (status = 409, description = "Stale revision or name taken", body = ErrorEnvelope),
        (status = 413, body = ErrorEnvelope), (status = 422, body = ErrorEnvelope),
    ))]
pub async fn update_tool(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(id): Path<String>,
    Body(body): Body<Value>,
) -> Result<Json<Data<ToolDetail>>, ApiError> {
    let current = find_tool(state.registry().as_ref(), &id).await?;
    let scope = scope_of(&claims);
    // Refused before any work on the body (completing it may run the code to infer a
    // schema); the store checks again in the transaction that writes.
    if !scope.allows(&current.tenant) {
        return Err(toolshed_registry::RegistryError::NotOwner {
            what: "tool",
            name: current.name,
            owner: current.tenant,
        }
        .into());
    }
    let reg = parse_registration(body)?;
    let expected = reg.expected_revision;
    let reg = complete_registration(state.dispatcher(), state.code()?, &claims, reg).await?;
    check_executable(&state, &reg)?;
    check_credentials(&state, &claims, &reg)?;
    let new = new_tool(&reg, &claims.sub, tenant_of(&claims))?;
    let record = state
        .registry()
        .update_tool(&current.id, new, expected, &scope)
        .await?;
    state.forget(&current);
    tracing::info!(tool = %record.name, id = %record.id, revision = record.revision, by = %claims.sub, "tool updated");
    Ok(Json(Data {
        data: views::tool_detail(&record),
    }))
}

/// Delete a tool: no longer listed or runnable; its revisions are kept.
#[utoipa::path(delete, path = "/api/v1/registry/tools/{id}", tag = "tools", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tool id, or its name")),
    responses(
        (status = 200, body = Data<ToolSummary>),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "The role is too low (`FORBIDDEN`), or the tool is another tenant's (`NOT_OWNER`, naming it)", body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
    ))]
pub async fn delete_tool(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<ToolSummary>>, ApiError> {
    let claims = auth.require(Role::Deployer)?;
    let current = find_tool(state.registry().as_ref(), &id).await?;
    let record = state
        .registry()
        .delete_tool(&current.id, &scope_of(claims))
        .await?;
    state.forget(&current);
    tracing::info!(tool = %record.name, id = %record.id, by = %claims.sub, "tool deleted");
    // Its code and dependency folders go when no other tool runs them.
    if let Some(cache) = state.code_cache()
        && let Err(e) = cache.sweep_unused(state.registry().as_ref()).await
    {
        tracing::warn!(error = ?e, "the code cache was not swept");
    }
    Ok(Json(Data {
        data: views::tool_summary(&record),
    }))
}

/// Every revision of a tool, oldest first.
#[utoipa::path(get, path = "/api/v1/registry/tools/{id}/versions", tag = "tools", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tool id, or its name")),
    responses(
        (status = 200, body = Data<Vec<ToolDetail>>),
        (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
    ))]
pub async fn tool_versions(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<Vec<ToolDetail>>>, ApiError> {
    auth.require(Role::Viewer)?;
    let id = match find_tool(state.registry().as_ref(), &id).await {
        Ok(t) => t.id,
        // A deleted tool's history is still readable by id.
        Err(e) if e.code() == ApiCode::NotFound => id,
        Err(e) => return Err(e),
    };
    let versions = state.registry().tool_versions(&id).await?;
    Ok(Json(Data {
        data: versions.iter().map(views::tool_detail).collect(),
    }))
}

/// The agents using a tool.
#[utoipa::path(get, path = "/api/v1/registry/tools/{id}/usage", tag = "tools", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tool id, or its name")),
    responses(
        (status = 200, body = Data<Vec<UsageView>>),
        (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
    ))]
pub async fn tool_usage(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<Vec<UsageView>>>, ApiError> {
    auth.require(Role::Viewer)?;
    let tool = find_tool(state.registry().as_ref(), &id).await?;
    let usage = state.registry().tool_usage(&tool.id).await?;
    Ok(Json(Data {
        data: usage.into_iter().map(views::usage).collect(),
    }))
}

/// Execute a registered tool through the whole pipeline, recorded as a run (needs the
/// deployer role). A tool failure is a 200 with `error` set; arguments that do not
/// match the tool's schema are a 422 listing every violation; a call that needs an
/// approval or an answer is a 202 with `status: parked`.
#[utoipa::path(post, path = "/api/v1/registry/tools/{id}/execute", tag = "tools", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tool id, or its name")),
    request_body = ExecuteBody,
    responses(
        (status = 200, description = "Executed (see `error` for a tool failure)", body = Data<ExecuteView>),
        (status = 202, description = "Parked: approve, deny or answer `call_id`, then resume the run", body = Data<ExecuteView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
        (status = 413, body = ErrorEnvelope),
        (status = 422, description = "The args do not match the tool's schema", body = ErrorEnvelope),
        (status = 429, description = "The tenant's execute rate or run quota is used up (`Retry-After` says for how long)", body = ErrorEnvelope),
        (status = 503, description = "`STORAGE_FULL`: the server's disk is below the free space it keeps", body = ErrorEnvelope),
    ))]
pub async fn execute_tool(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(id): Path<String>,
    Body(body): Body<ExecuteBody>,
) -> Result<(StatusCode, Json<Data<ExecuteView>>), ApiError> {
    execute(&state, &claims, &id, body.args).await
}

/// One execute of a registry tool by id or name, as a durable run of the caller, as the
/// REST answer: `POST /api/v1/registry/tools/{id}/execute` and
/// `POST /api/v1/mcp-servers/{id}/execute`. The work (the rate limit, the args checked
/// against the schema, the credentials policy, the journal, approvals) is
/// [`crate::execute::execute`], which `/mcp`'s `tools/call` shares.
pub(crate) async fn execute(
    state: &AppState,
    claims: &toolshed_auth::Claims,
    id: &str,
    args: Option<Value>,
) -> Result<(StatusCode, Json<Data<ExecuteView>>), ApiError> {
    let executed = crate::execute::execute(state, claims, ExecuteRequest::new(id, args)).await?;
    let run_id = executed.run_id;
    let step = executed.step;
    let (status, view) = match step {
        CallStep::Done(outcome) => {
            let (output, error) = match outcome.result {
                Ok(v) => (v, None),
                Err(e) => (Value::Null, Some(e)),
            };
            let Diagnostics {
                stdout,
                stderr,
                exit_code,
                signal,
                timed_out,
                stdout_truncated,
                stderr_truncated,
                ..
            } = outcome.diagnostics;
            (
                StatusCode::OK,
                ExecuteView {
                    status: ExecuteStatus::Completed,
                    output,
                    stdout,
                    stderr,
                    exit_code,
                    signal,
                    timed_out,
                    stdout_truncated,
                    stderr_truncated,
                    duration_ms: outcome.duration.as_secs_f64() * 1000.0,
                    error,
                    run_id,
                    call_id: None,
                    gate: None,
                },
            )
        }
        CallStep::Parked(gate) => (
            StatusCode::ACCEPTED,
            ExecuteView {
                status: ExecuteStatus::Parked,
                output: Value::Null,
                stdout: String::new(),
                stderr: String::new(),
                exit_code: None,
                signal: None,
                timed_out: false,
                stdout_truncated: false,
                stderr_truncated: false,
                duration_ms: 0.0,
                error: None,
                run_id,
                call_id: Some(gate.call_id),
                gate: Some(views::gate(gate.gate)),
            },
        ),
    };
    Ok((status, Json(Data { data: view })))
}

/// Register (or re-register) an agent from its agent.yaml, as JSON. Its `tools/<name>`
/// refs found in the registry become edges of the usage graph.
#[utoipa::path(post, path = "/api/v1/registry/agents", tag = "agents", security(("bearer" = [])),
    request_body(content = Object, description = "agent.yaml as a JSON object"),
    responses(
        (status = 201, body = Data<AgentView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, description = "The role is too low (`FORBIDDEN`), or an agent of this name is another tenant's (`NOT_OWNER`, naming it)", body = ErrorEnvelope),
        (status = 413, body = ErrorEnvelope),
        (status = 422, body = ErrorEnvelope),
    ))]
pub async fn register_agent(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Body(body): Body<Value>,
) -> Result<(StatusCode, Json<Data<AgentView>>), ApiError> {
    if !body.is_object() {
        return Err(ApiError::invalid_body(
            "the body must be agent.yaml as a JSON object (name, framework, tools, …)",
        ));
    }
    let text = serde_json::to_string(&body)
        .map_err(|e| ApiError::internal("cannot serialize an agent", e))?;
    let file = toolshed_agent::parse_agent_file(&text, "body")
        .map_err(|e| ApiError::invalid_body(e.to_string()))?;
    let mut tool_ids = Vec::new();
    for entry in &file.tools {
        if let ToolEntry::Tool { name, .. } = entry
            && let Some(t) = find_by_name(state.registry().as_ref(), name).await?
            && !tool_ids.contains(&t.id)
        {
            tool_ids.push(t.id);
        }
    }
    let record = state
        .registry()
        .upsert_agent(
            NewAgent {
                name: file.name.clone(),
                framework: file.framework.clone().unwrap_or_default(),
                definition: body,
                tool_ids,
                created_by: claims.sub.clone(),
                tenant: tenant_of(&claims).to_owned(),
            },
            &scope_of(&claims),
        )
        .await?;
    tracing::info!(agent = %record.name, id = %record.id, by = %claims.sub, "agent registered");
    Ok((
        StatusCode::CREATED,
        Json(Data {
            data: views::agent(record),
        }),
    ))
}

/// The `page` parameter: from 1, default 1.
pub fn page_of(page: Option<u32>) -> Result<u32, ApiError> {
    crate::extract::bounded("page", page, 1, 1..=u32::MAX)
}

/// The `per_page` parameter: 1 to [`toolshed_registry::MAX_PER_PAGE`], default 20.
pub fn per_page_of(per_page: Option<u32>) -> Result<u32, ApiError> {
    crate::extract::bounded(
        "per_page",
        per_page,
        20,
        1..=toolshed_registry::MAX_PER_PAGE,
    )
}

/// Paging of agents.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// The page, from 1 (default 1).
    #[param(minimum = 1)]
    pub page: Option<u32>,
    /// Items per page, 1 to 500 (default 20).
    #[param(minimum = 1, maximum = 500)]
    pub per_page: Option<u32>,
}

/// List agents, ordered by name.
#[utoipa::path(get, path = "/api/v1/registry/agents", tag = "agents", security(("bearer" = [])),
    params(PageQuery),
    responses((status = 200, body = Paged<AgentView>), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope)))]
pub async fn list_agents(
    State(state): State<AppState>,
    auth: Auth,
    Query(q): Query<PageQuery>,
) -> Result<Json<Paged<AgentView>>, ApiError> {
    auth.require(Role::Viewer)?;
    let page = state
        .registry()
        .list_agents(page_of(q.page)?, per_page_of(q.per_page)?)
        .await?;
    Ok(Json(views::paged(page, views::agent)))
}

/// An agent by id or name.
#[utoipa::path(get, path = "/api/v1/registry/agents/{id}", tag = "agents", security(("bearer" = [])),
    params(("id" = String, Path, description = "The agent id, or its name")),
    responses((status = 200, body = Data<AgentView>), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
pub async fn get_agent(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<AgentView>>, ApiError> {
    auth.require(Role::Viewer)?;
    let agent = state.registry().get_agent(&id).await?;
    Ok(Json(Data {
        data: views::agent(agent),
    }))
}

/// Which revision's code to download.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CodeQuery {
    /// The revision (default: the current one).
    pub revision: Option<u32>,
}

/// Download a revision's uploaded code: the archive exactly as it was pushed (base64 of
/// an uncompressed tar), its hash, size and paths. A tool without uploaded code (a
/// built-in, HTTP or host-path tool) is a 404.
#[utoipa::path(get, path = "/api/v1/registry/tools/{id}/code", tag = "tools", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tool id, or its name"), CodeQuery),
    responses(
        (status = 200, body = Data<CodeDownload>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 404, description = "No such tool or revision, or it has no uploaded code", body = ErrorEnvelope),
    ))]
pub async fn tool_code(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Query(q): Query<CodeQuery>,
) -> Result<Json<Data<CodeDownload>>, ApiError> {
    auth.require(Role::Viewer)?;
    let current = find_tool(state.registry().as_ref(), &id).await?;
    let record = match q.revision {
        None => current,
        Some(r) if r == current.revision => current,
        Some(r) => state
            .registry()
            .tool_versions(&current.id)
            .await?
            .into_iter()
            .find(|v| v.revision == r)
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "tool `{}` has no revision {r} (it is at revision {}); list them with GET /api/v1/registry/tools/{}/versions",
                    current.name, current.revision, current.id
                ))
            })?,
    };
    let Some(code) = &record.code else {
        return Err(ApiError::not_found(format!(
            "revision {} of tool `{}` has no uploaded code (its endpoint is {})",
            record.revision,
            record.name,
            record.endpoint.as_deref().unwrap_or("none")
        )));
    };
    let archive = state.registry().code_archive(&code.sha256).await?;
    let unlimited = toolshed_api::code::CodeLimits {
        max_archive_bytes: u64::MAX,
        max_file_bytes: u64::MAX,
        max_files: usize::MAX,
        max_path_bytes: usize::MAX,
    };
    let paths = toolshed_api::code::check_archive(&archive, &unlimited)
        .map(|files| files.into_iter().map(|f| f.path).collect())
        .map_err(|p| ApiError::internal("a stored archive does not read back", p))?;
    Ok(Json(Data {
        data: CodeDownload {
            tool_id: record.id.clone(),
            revision: record.revision,
            code: views::code_view(code),
            paths,
            archive_base64: toolshed_api::code::encode_base64(&archive),
        },
    }))
}
