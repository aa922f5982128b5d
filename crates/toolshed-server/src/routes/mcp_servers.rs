//! `/api/v1/mcp-servers/…` (and `/api/v1/mcp_servers`, the path AgentBreeder's `list`
//! command reads): MCP server entries per tenant, at AgentBreeder's own paths and
//! shapes. Viewers list and show their tenant's entries and the tool changes waiting;
//! deployers register, change, test, discover and execute; admins delete, enable an
//! entry registered disabled, accept a server's changes to its tools and let an entry
//! take them at once (`auto_accept`). Another tenant's entry is not found.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use toolshed_api::requests::{McpAcceptBody, McpServerBody};
use toolshed_api::views::{
    ExecuteView, McpAcceptView, McpDeletedView, McpDiscoverView, McpPendingView, McpServerView,
    McpTestView,
};
use toolshed_api::{Data, ErrorEnvelope, Paged};
use toolshed_auth::Role;
use toolshed_registry::{McpPing, McpServerRecord, ToolFilter, ToolRecord};
use utoipa::IntoParams;

use crate::Json;
use crate::error::ApiError;
use crate::extract::{Admin, Auth, Body, Deployer, Query};
use crate::mcp::{self, MCP_TOOL_TYPE};
use crate::routes::registry::{PageQuery, page_of, per_page_of};
use crate::state::AppState;
use crate::tenancy::scope_of;

/// List the tenant's MCP server entries, by name.
#[utoipa::path(get, path = "/api/v1/mcp-servers", tag = "mcp-servers", security(("bearer" = [])),
    params(PageQuery),
    responses(
        (status = 200, body = Paged<McpServerView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
    ))]
pub async fn list_mcp_servers(
    State(state): State<AppState>,
    auth: Auth,
    Query(q): Query<PageQuery>,
) -> Result<Json<Paged<McpServerView>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let page = state
        .registry()
        .list_mcp_servers(
            &scope_of(claims),
            page_of(q.page)?,
            per_page_of(q.per_page)?,
        )
        .await?;
    Ok(Json(crate::views::paged(page, |r| mcp::view(&r))))
}

/// [`list_mcp_servers`] at the path AgentBreeder's `agentbreeder list mcp_servers` reads.
#[utoipa::path(get, path = "/api/v1/mcp_servers", tag = "mcp-servers", security(("bearer" = [])),
    params(PageQuery),
    responses(
        (status = 200, body = Paged<McpServerView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
    ))]
pub async fn list_mcp_servers_alias(
    state: State<AppState>,
    auth: Auth,
    q: Query<PageQuery>,
) -> Result<Json<Paged<McpServerView>>, ApiError> {
    list_mcp_servers(state, auth, q).await
}

/// Register an MCP server entry (AgentBreeder's body, or ours). Nothing is started: `…/test`
/// connects, `…/discover` registers its tools.
#[utoipa::path(post, path = "/api/v1/mcp-servers", tag = "mcp-servers", security(("bearer" = [])),
    request_body = McpServerBody,
    responses(
        (status = 201, description = "Registered", body = Data<McpServerView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope),
        (status = 409, description = "The tenant has an entry of this name", body = ErrorEnvelope),
        (status = 413, body = ErrorEnvelope),
        (status = 422, description = "A field is wrong, a credential is outside the policy, or the URL is refused by the SSRF guard", body = ErrorEnvelope),
    ))]
pub async fn create_mcp_server(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Body(body): Body<McpServerBody>,
) -> Result<(StatusCode, Json<Data<McpServerView>>), ApiError> {
    if body.expected_revision.is_some() {
        return Err(ApiError::field(
            "expected_revision",
            "only updates (PUT) take an expected revision",
        ));
    }
    let entry = mcp::entry(&state, &claims, body, None)?;
    let record = state.registry().create_mcp_server(entry.new).await?;
    tracing::info!(mcp_server = %record.server.name, id = %record.id, tenant = %record.server.tenant, by = %claims.sub, "MCP server registered");
    Ok((
        StatusCode::CREATED,
        Json(Data {
            data: mcp::view(&record),
        }),
    ))
}

/// An entry of the caller's tenant by id.
async fn find(
    state: &AppState,
    claims: &toolshed_auth::Claims,
    id: &str,
) -> Result<McpServerRecord, ApiError> {
    state
        .registry()
        .get_mcp_server(id, &scope_of(claims))
        .await
        .map_err(|e| match e {
            toolshed_registry::RegistryError::NotFound { .. } => ApiError::not_found(format!(
                "no MCP server `{id}` in your tenant; list them with GET /api/v1/mcp-servers"
            )),
            other => other.into(),
        })
}

/// An MCP server entry by id.
#[utoipa::path(get, path = "/api/v1/mcp-servers/{id}", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id")),
    responses(
        (status = 200, body = Data<McpServerView>),
        (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
    ))]
pub async fn get_mcp_server(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<McpServerView>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let record = find(&state, claims, &id).await?;
    Ok(Json(Data {
        data: mcp::view(&record),
    }))
}

/// Change an entry: every field left out keeps its value (a new revision). Enabling a
/// disabled entry needs the admin role. A rename deletes its tools (discover registers
/// them under the new name); changed overrides apply at the next discover.
#[utoipa::path(put, path = "/api/v1/mcp-servers/{id}", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id")),
    request_body = McpServerBody,
    responses(
        (status = 200, body = Data<McpServerView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, description = "The role is too low (enabling a disabled entry needs admin)", body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
        (status = 409, description = "Stale revision, or the name is taken in the tenant", body = ErrorEnvelope),
        (status = 413, body = ErrorEnvelope), (status = 422, body = ErrorEnvelope),
    ))]
pub async fn update_mcp_server(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(id): Path<String>,
    Body(body): Body<McpServerBody>,
) -> Result<Json<Data<McpServerView>>, ApiError> {
    let current = find(&state, &claims, &id).await?;
    let expected = body.expected_revision;
    let entry = mcp::entry(&state, &claims, body, Some(&current))?;
    let tools = server_tools(&state, &current).await?;
    let record = state
        .registry()
        .update_mcp_server(&current.id, entry.new, expected, &scope_of(&claims))
        .await?;
    for t in &tools {
        state.forget(t);
    }
    if !record.server.enabled || record.server.name != current.server.name {
        // Nothing of a disabled (or renamed) entry keeps running.
        mcp::stop(&state, &current).await;
    }
    tracing::info!(mcp_server = %record.server.name, id = %record.id, revision = record.revision, enabled = record.server.enabled, by = %claims.sub, "MCP server updated");
    Ok(Json(Data {
        data: mcp::view(&record),
    }))
}

/// Remove an entry and its registry tools (admin, as AgentBreeder has it).
#[utoipa::path(delete, path = "/api/v1/mcp-servers/{id}", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id")),
    responses(
        (status = 200, body = Data<McpDeletedView>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
    ))]
pub async fn delete_mcp_server(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<McpDeletedView>>, ApiError> {
    let claims = auth.require(Role::Admin)?;
    let current = find(&state, claims, &id).await?;
    let tools = server_tools(&state, &current).await?;
    let record = state
        .registry()
        .delete_mcp_server(&current.id, &scope_of(claims))
        .await?;
    for t in &tools {
        state.forget(t);
    }
    mcp::stop(&state, &record).await;
    tracing::info!(mcp_server = %record.server.name, id = %record.id, by = %claims.sub, "MCP server deleted");
    Ok(Json(Data {
        data: McpDeletedView {
            deleted: true,
            id: record.id,
            name: record.server.name,
            tools_removed: u32::try_from(tools.len()).unwrap_or(u32::MAX),
        },
    }))
}

/// Connect (start a stdio server in the sandbox, or reach an HTTP one) and finish the
/// handshake; the entry's status and last ping are updated. Unreachable: 502.
#[utoipa::path(post, path = "/api/v1/mcp-servers/{id}/test", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id")),
    responses(
        (status = 200, body = Data<McpTestView>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
        (status = 409, description = "The entry is disabled (`MCP_SERVER_DISABLED`)", body = ErrorEnvelope),
        (status = 502, description = "The server could not be started or reached (`MCP_SERVER_UNREACHABLE`)", body = ErrorEnvelope),
    ))]
pub async fn test_mcp_server(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<McpTestView>>, ApiError> {
    let claims = auth.require(Role::Deployer)?;
    let record = find(&state, claims, &id).await?;
    let server = mcp::connection(&state, &record)?;
    let scope = scope_of(claims);
    match server.connect().await {
        Ok(info) => {
            state
                .registry()
                .record_mcp_status(&record.id, &scope, McpPing::Reached)
                .await?;
            Ok(Json(Data {
                data: McpTestView {
                    success: true,
                    latency_ms: u64::try_from(info.latency.as_millis()).unwrap_or(u64::MAX),
                    era: info.era.as_str().to_owned(),
                    protocol_version: info.protocol_version,
                    server_name: info.server_name,
                    server_version: info.server_version,
                },
            }))
        }
        Err(e) => Err(failed(&state, &record, &scope, &server, &e).await),
    }
}

/// Record a failure on the entry and answer it as a 502.
async fn failed(
    state: &AppState,
    record: &McpServerRecord,
    scope: &toolshed_registry::TenantScope,
    server: &toolshed_mcp::McpServer,
    e: &toolshed_mcp::McpError,
) -> ApiError {
    let answer = mcp::unreachable(record, server, e);
    if let Err(store) = state
        .registry()
        .record_mcp_status(&record.id, scope, McpPing::Failed(e.to_string()))
        .await
    {
        tracing::warn!(error = %store, "cannot record an MCP server's failure");
    }
    answer
}

/// List the server's tools (every page) and register them as registry tools
/// (`<server>__<tool>`, `tool_type: mcp`, endpoint `mcp:<server>/<tool>`): added,
/// changed and removed ones in one transaction. A tool whose definition the server
/// changed since it was accepted is held back (`pending`): every client keeps the
/// accepted revision until an admin accepts the change (`POST …/accept`), unless the
/// entry has `auto_accept`. A name another tool holds is a 409 naming both.
#[utoipa::path(post, path = "/api/v1/mcp-servers/{id}/discover", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id")),
    responses(
        (status = 200, body = Data<McpDiscoverView>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
        (status = 409, description = "The entry is disabled, or a tool's name collides with another tool (both named)", body = ErrorEnvelope),
        (status = 422, description = "An override makes a tool's spec invalid", body = ErrorEnvelope),
        (status = 502, description = "The server could not be started or reached, or its tools/list failed", body = ErrorEnvelope),
    ))]
pub async fn discover_mcp_server(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<McpDiscoverView>>, ApiError> {
    let claims = auth.require(Role::Deployer)?;
    let record = find(&state, claims, &id).await?;
    let spec = mcp::spec_of(&record)?;
    let server = mcp::connection(&state, &record)?;
    let scope = scope_of(claims);
    let tools = match server.tools().await {
        Ok(t) => t,
        Err(e) => return Err(failed(&state, &record, &scope, &server, &e).await),
    };
    let before = server_tools(&state, &record).await?;
    let new = mcp::registry_tools(&record, &spec, &tools, &claims.sub)?;
    let sync = state
        .registry()
        .sync_mcp_tools(&record.id, &scope, new)
        .await?;
    state
        .registry()
        .record_mcp_status(&record.id, &scope, McpPing::Reached)
        .await?;
    for t in &before {
        state.forget(t);
    }
    tracing::info!(mcp_server = %record.server.name, id = %record.id, tools = sync.tools.len(), added = sync.added.len(), changed = sync.changed.len(), removed = sync.removed.len(), pending = sync.pending.len(), by = %claims.sub, "MCP server discovered");
    if !sync.pending.is_empty() {
        tracing::warn!(mcp_server = %record.server.name, id = %record.id, tools = ?sync.pending, "MCP server changed tool definitions; the changes wait for an admin (GET /api/v1/mcp-servers/{}/pending)", record.id);
    }
    let tools: Vec<_> = sync.tools.iter().map(mcp::discovered).collect();
    Ok(Json(Data {
        data: McpDiscoverView {
            total: tools.len(),
            tools,
            added: sync.added,
            changed: sync.changed,
            removed: sync.removed,
            pending: sync.pending,
        },
    }))
}

/// The entry's tools whose server changed their definition since it was accepted: the
/// accepted definition (what every client gets) beside what the server sends now, and
/// the characters the new one hides from a reader.
#[utoipa::path(get, path = "/api/v1/mcp-servers/{id}/pending", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id")),
    responses(
        (status = 200, body = Data<Vec<McpPendingView>>),
        (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
    ))]
pub async fn pending_mcp_changes(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<Vec<McpPendingView>>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let record = find(&state, claims, &id).await?;
    let pending = state
        .registry()
        .mcp_pending(&record.id, &scope_of(claims))
        .await?;
    Ok(Json(Data {
        data: pending.iter().filter_map(mcp::pending_view).collect(),
    }))
}

/// Accept a server's changes to its tools (admin): each change waiting (or those
/// named in `tools`) becomes the active revision, built with the owner's overrides of
/// now. A named tool with no change waiting is a 409; so is a change the server made
/// again since it was listed (review it again).
#[utoipa::path(post, path = "/api/v1/mcp-servers/{id}/accept", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id")),
    request_body = McpAcceptBody,
    responses(
        (status = 200, body = Data<McpAcceptView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
        (status = 409, description = "A named tool has no change waiting, or it changed again", body = ErrorEnvelope),
        (status = 422, description = "An override makes a changed tool's spec invalid", body = ErrorEnvelope),
    ))]
pub async fn accept_mcp_changes(
    State(state): State<AppState>,
    Admin(claims): Admin,
    Path(id): Path<String>,
    Body(body): Body<McpAcceptBody>,
) -> Result<Json<Data<McpAcceptView>>, ApiError> {
    let record = find(&state, &claims, &id).await?;
    let spec = mcp::spec_of(&record)?;
    let scope = scope_of(&claims);
    let waiting = state.registry().mcp_pending(&record.id, &scope).await?;
    let wanted = body.tools;
    let mut chosen = Vec::new();
    for p in &waiting {
        let sent: toolshed_mcp::McpTool = serde_json::from_value(p.sent.clone())
            .map_err(|e| ApiError::internal("cannot read a held-back MCP tool", e))?;
        let named = wanted
            .as_ref()
            .is_none_or(|w| w.iter().any(|n| *n == sent.name || *n == p.tool.name));
        if named {
            chosen.push(sent);
        }
    }
    if let Some(w) = &wanted
        && let Some(missing) = w.iter().find(|n| {
            !chosen
                .iter()
                .any(|t| t.name == **n || t.qualified_name == **n)
        })
    {
        return Err(ApiError::conflict(format!(
            "MCP server `{}` has no change waiting for tool `{missing}`; `GET /api/v1/mcp-servers/{}/pending` lists them",
            record.server.name, record.id
        )));
    }
    let found = mcp::registry_tools(&record, &spec, &chosen, &claims.sub)?;
    let accepted = state
        .registry()
        .accept_mcp_tools(&record.id, &scope, found)
        .await?;
    for t in &accepted {
        state.forget(t);
    }
    tracing::info!(mcp_server = %record.server.name, id = %record.id, tools = ?accepted.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), by = %claims.sub, "MCP tool changes accepted");
    Ok(Json(Data {
        data: McpAcceptView {
            accepted: accepted.iter().map(|t| t.name.clone()).collect(),
            tools: accepted.iter().map(mcp::discovered).collect(),
        },
    }))
}

/// Which tool to execute.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExecuteQuery {
    /// The tool's name as the server names it, or its registry name
    /// (`<server>__<tool>`).
    pub tool_name: String,
}

/// Execute one of the entry's discovered tools with the body as its arguments
/// (AgentBreeder's shape): the same durable execute as
/// `POST /api/v1/registry/tools/{id}/execute` (validation, credentials policy, journal,
/// approvals, rate limits).
#[utoipa::path(post, path = "/api/v1/mcp-servers/{id}/execute", tag = "mcp-servers", security(("bearer" = [])),
    params(("id" = String, Path, description = "The entry's id"), ExecuteQuery),
    request_body(content = Object, description = "The tool's arguments (a JSON object; empty or null for none)"),
    responses(
        (status = 200, description = "Executed (see `error` for a tool failure)", body = Data<ExecuteView>),
        (status = 202, description = "Parked: approve, deny or answer `call_id`, then resume the run", body = Data<ExecuteView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
        (status = 409, description = "The entry is disabled", body = ErrorEnvelope),
        (status = 413, body = ErrorEnvelope),
        (status = 422, description = "The args do not match the tool's schema", body = ErrorEnvelope),
        (status = 429, body = ErrorEnvelope),
        (status = 503, description = "`STORAGE_FULL`: the server's disk is below the free space it keeps", body = ErrorEnvelope),
    ))]
pub async fn execute_mcp_tool(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Path(id): Path<String>,
    Query(q): Query<ExecuteQuery>,
    Body(args): Body<Value>,
) -> Result<(StatusCode, Json<Data<ExecuteView>>), ApiError> {
    let record = find(&state, &claims, &id).await?;
    if !record.server.enabled {
        // Refused before the tool is looked up: nothing of a disabled entry runs.
        mcp::connection(&state, &record)?;
    }
    let tool = server_tools(&state, &record)
        .await?
        .into_iter()
        .find(|t| {
            t.name == q.tool_name
                || t.endpoint.as_deref()
                    == Some(format!("mcp:{}/{}", record.server.name, q.tool_name).as_str())
        })
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "MCP server `{}` has no registered tool `{}`; discover its tools first (POST /api/v1/mcp-servers/{}/discover)",
                record.server.name, q.tool_name, record.id
            ))
        })?;
    crate::routes::registry::execute(&state, &claims, &tool.id, Some(args)).await
}

/// The active registry tools of an entry (the MCP tools of its tenant whose endpoint
/// names it).
async fn server_tools(
    state: &AppState,
    record: &McpServerRecord,
) -> Result<Vec<ToolRecord>, ApiError> {
    let prefix = format!("mcp:{}/", record.server.name);
    let mut out = Vec::new();
    let mut page = 1;
    loop {
        let got = state
            .registry()
            .list_tools(&ToolFilter {
                tool_type: Some(MCP_TOOL_TYPE.to_owned()),
                source: Some(MCP_TOOL_TYPE.to_owned()),
                name_prefix: Some(format!("{}__", record.server.name)),
                page,
                per_page: toolshed_registry::MAX_PER_PAGE,
                ..ToolFilter::default()
            })
            .await?;
        let done = u64::from(page) * u64::from(got.per_page) >= got.total || got.items.is_empty();
        out.extend(got.items.into_iter().filter(|t| {
            t.tenant == record.server.tenant
                && t.endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with(&prefix))
        }));
        if done {
            return Ok(out);
        }
        page += 1;
    }
}
