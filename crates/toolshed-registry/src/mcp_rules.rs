//! The rules of MCP server entries, written once over an [`Executor`] like `rules.rs`:
//! names unique per tenant, reads and writes scoped to the caller's tenant, and the
//! synchronisation of a server's registry tools in one transaction.

use std::collections::BTreeMap;

use toolshed_store::time::now_ms;
use toolshed_store::{Executor, Param, Row};

use crate::rules::{self, Paging};
use crate::sql;
use crate::{
    McpPing, McpServerRecord, McpServerStatus, McpSync, NewMcpServer, NewTool, Page, RegistryError,
    Result, TenantScope, ToolRecord,
};

fn not_found(id: &str) -> RegistryError {
    RegistryError::NotFound {
        what: "MCP server",
        id: id.to_owned(),
    }
}

fn name_taken(name: &str, tenant: &str, id: &str) -> RegistryError {
    RegistryError::Conflict(format!(
        "an MCP server named `{name}` is already registered in tenant `{tenant}` (id {id}); update it with PUT or delete it first"
    ))
}

/// `?N tenant, ?N+1 every tenant` of a scoped statement.
fn scope_params(scope: &TenantScope) -> [Param; 2] {
    [
        scope.tenant().unwrap_or_default().into(),
        i64::from(scope == &TenantScope::All).into(),
    ]
}

fn bool_param(b: bool) -> Param {
    i64::from(b).into()
}

/// Register a server: its name must be free in its tenant. Of two registrations of one
/// name at once, the unique index lets one in and the other names the winner.
pub(crate) async fn create(db: &mut dyn Executor, new: NewMcpServer) -> Result<McpServerRecord> {
    if let Some(holder) = by_name(db, &new.tenant, &new.name).await? {
        return Err(name_taken(&new.name, &new.tenant, &holder.id));
    }
    let now = now_ms();
    let id = uuid::Uuid::now_v7().to_string();
    let record = McpServerRecord {
        id,
        server: new,
        status: McpServerStatus::Registered,
        tool_count: 0,
        last_ping_at_ms: None,
        last_error: None,
        revision: 1,
        created_at_ms: now,
        updated_at_ms: now,
    };
    let s = &record.server;
    let inserted = db
        .run(
            &sql::INSERT_MCP_SERVER,
            &[
                (&record.id).into(),
                (&s.tenant).into(),
                (&s.name).into(),
                (&s.spec).into(),
                (&s.transport).into(),
                (&s.endpoint).into(),
                (&s.description).into(),
                (&serde_json::json!(s.tags)).into(),
                (&s.team).into(),
                bool_param(s.enabled),
                (&s.source).into(),
                (&s.overrides).into(),
                record.status.as_str().into(),
                0i64.into(),
                Param::Null,
                Param::Null,
                1i64.into(),
                (&s.created_by).into(),
                now.into(),
                now.into(),
            ],
        )
        .await?;
    if inserted == 0 {
        let holder = by_name(db, &record.server.tenant, &record.server.name).await?;
        return Err(name_taken(
            &record.server.name,
            &record.server.tenant,
            holder.as_ref().map_or("?", |h| h.id.as_str()),
        ));
    }
    Ok(record)
}

/// A server in scope by id; another tenant's is not found, as an unknown one.
pub(crate) async fn get(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
) -> Result<McpServerRecord> {
    let [tenant, all] = scope_params(scope);
    db.row(&sql::MCP_SERVER, &[id.into(), tenant, all])
        .await?
        .map(|row| server_from_row(&row))
        .transpose()?
        .ok_or_else(|| not_found(id))
}

/// The server in scope by id, locked for this transaction.
async fn locked(db: &mut dyn Executor, id: &str, scope: &TenantScope) -> Result<McpServerRecord> {
    let [tenant, all] = scope_params(scope);
    db.row(&sql::MCP_SERVER_FOR_UPDATE, &[id.into(), tenant, all])
        .await?
        .map(|row| server_from_row(&row))
        .transpose()?
        .ok_or_else(|| not_found(id))
}

/// A tenant's server by name, if any.
pub(crate) async fn by_name(
    db: &mut dyn Executor,
    tenant: &str,
    name: &str,
) -> Result<Option<McpServerRecord>> {
    db.row(&sql::MCP_SERVER_BY_NAME, &[tenant.into(), name.into()])
        .await?
        .map(|row| server_from_row(&row))
        .transpose()
}

/// One page of the servers in scope, by name.
pub(crate) async fn list(
    db: &mut dyn Executor,
    scope: &TenantScope,
    page: u32,
    per_page: u32,
) -> Result<Page<McpServerRecord>> {
    let paging = Paging::new(page, per_page);
    let [tenant, all] = scope_params(scope);
    let rows = db
        .rows(
            &sql::LIST_MCP_SERVERS,
            &[tenant, all, paging.limit().into(), paging.offset().into()],
        )
        .await?;
    let mut total = 0;
    let mut items = Vec::with_capacity(rows.len());
    for row in &rows {
        total = row.get(20)?;
        if row.get::<Option<String>>(0)?.is_some() {
            items.push(server_from_row(row)?);
        }
    }
    Ok(Page {
        items,
        page: paging.page,
        per_page: paging.per_page,
        total,
    })
}

/// Replace a server's registration (revision n+1; its owner kept). A renamed server's
/// tools are deleted with the old name (their names and endpoints carry it); discover
/// registers them under the new one.
pub(crate) async fn update(
    db: &mut dyn Executor,
    id: &str,
    mut new: NewMcpServer,
    expected_revision: Option<u32>,
    scope: &TenantScope,
) -> Result<McpServerRecord> {
    let current = locked(db, id, scope).await?;
    new.tenant = current.server.tenant.clone();
    if let Some(expected) = expected_revision
        && expected != current.revision
    {
        return Err(RegistryError::Conflict(format!(
            "MCP server `{}` is at revision {}, not {expected}: reload it and try again",
            current.server.name, current.revision
        )));
    }
    if new.name != current.server.name {
        if let Some(holder) = by_name(db, &new.tenant, &new.name).await? {
            return Err(name_taken(&new.name, &new.tenant, &holder.id));
        }
        for tool in linked_tools(db, id).await? {
            remove_tool(db, id, &tool).await?;
        }
        db.run(&sql::MCP_SERVER_TOOL_COUNT, &[id.into(), 0i64.into()])
            .await?;
    }
    let revision = current.revision.saturating_add(1);
    let now = now_ms();
    db.run(
        &sql::UPDATE_MCP_SERVER,
        &[
            id.into(),
            (&new.name).into(),
            (&new.spec).into(),
            (&new.transport).into(),
            (&new.endpoint).into(),
            (&new.description).into(),
            (&serde_json::json!(new.tags)).into(),
            (&new.team).into(),
            bool_param(new.enabled),
            (&new.source).into(),
            (&new.overrides).into(),
            (&new.created_by).into(),
            now.into(),
            revision.into(),
        ],
    )
    .await
    .map_err(|e| {
        if e.is_unique_violation() {
            name_taken(&new.name, &new.tenant, "?")
        } else {
            e.into()
        }
    })?;
    get(db, id, &TenantScope::All).await
}

/// Record what a test or discover saw.
pub(crate) async fn record_status(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
    ping: McpPing,
) -> Result<McpServerRecord> {
    locked(db, id, scope).await?;
    let (status, error, at) = match ping {
        McpPing::Reached => (McpServerStatus::Active, None, Some(now_ms())),
        McpPing::Failed(why) => (McpServerStatus::Error, Some(why), None),
    };
    db.run(
        &sql::MCP_SERVER_STATUS,
        &[id.into(), status.as_str().into(), error.into(), at.into()],
    )
    .await?;
    get(db, id, &TenantScope::All).await
}

/// Remove a server and delete its registry tools (their histories are kept).
pub(crate) async fn delete(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
) -> Result<McpServerRecord> {
    let current = locked(db, id, scope).await?;
    for tool in linked_tools(db, id).await? {
        remove_tool(db, id, &tool).await?;
    }
    // Links to tools deleted elsewhere (through the tools route) go too.
    for row in db.rows(&sql::MCP_SERVER_TOOL_IDS, &[id.into()]).await? {
        let tool_id: String = row.get(0)?;
        db.run(&sql::UNLINK_MCP_TOOL, &[id.into(), tool_id.into()])
            .await?;
    }
    db.run(&sql::DELETE_MCP_SERVER, &[id.into()]).await?;
    Ok(current)
}

/// The active registry tools linked to a server; links to tools deleted meanwhile
/// (through the tools route) are dropped.
async fn linked_tools(db: &mut dyn Executor, server_id: &str) -> Result<Vec<ToolRecord>> {
    let rows = db
        .rows(&sql::MCP_SERVER_TOOL_IDS, &[server_id.into()])
        .await?;
    let mut tools = Vec::with_capacity(rows.len());
    for row in &rows {
        let tool_id: String = row.get(0)?;
        match rules::active_tool(db, &tool_id).await? {
            Some(t) => tools.push(t),
            None => {
                db.run(&sql::UNLINK_MCP_TOOL, &[server_id.into(), tool_id.into()])
                    .await?;
            }
        }
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tools)
}

/// Delete one of a server's tools and its link.
async fn remove_tool(db: &mut dyn Executor, server_id: &str, tool: &ToolRecord) -> Result<()> {
    rules::delete_tool(db, &tool.id, &TenantScope::All).await?;
    db.run(
        &sql::UNLINK_MCP_TOOL,
        &[server_id.into(), tool.id.as_str().into()],
    )
    .await?;
    Ok(())
}

/// Make a server's registry tools what its discover found, in this one transaction:
/// new names registered and linked, changed definitions given a new revision, names no
/// longer listed deleted. A name held by a tool that is not this server's is a conflict
/// naming both sources, and nothing is written.
pub(crate) async fn sync_tools(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
    tools: Vec<NewTool>,
) -> Result<McpSync> {
    let server = locked(db, id, scope).await?;
    let mut current: BTreeMap<String, ToolRecord> = linked_tools(db, id)
        .await?
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut sync = McpSync {
        tools: Vec::with_capacity(tools.len()),
        added: Vec::new(),
        changed: Vec::new(),
        removed: Vec::new(),
    };
    for mut tool in tools {
        tool.tenant = server.server.tenant.clone();
        if !seen.insert(tool.name.clone()) {
            return Err(RegistryError::Conflict(format!(
                "MCP server `{}` lists two tools named `{}` (after sanitising); rename one on the server",
                server.server.name, tool.name
            )));
        }
        match current.remove(&tool.name) {
            Some(existing)
                if existing.definition == tool.definition
                    && existing.description == tool.description
                    && existing.endpoint == tool.endpoint =>
            {
                sync.tools.push(existing);
            }
            Some(existing) => {
                let name = tool.name.clone();
                let updated =
                    rules::update_tool(db, &existing.id, tool, None, &TenantScope::All).await?;
                sync.changed.push(name);
                sync.tools.push(updated);
            }
            None => {
                if let Some(holder) = rules::active_tool_by_name(db, &tool.name).await? {
                    return Err(collision(&server, &tool, &holder));
                }
                let name = tool.name.clone();
                let created = rules::create_tool(db, tool).await?;
                db.run(
                    &sql::LINK_MCP_TOOL,
                    &[id.into(), created.id.as_str().into()],
                )
                .await?;
                sync.added.push(name);
                sync.tools.push(created);
            }
        }
    }
    for (name, gone) in current {
        remove_tool(db, id, &gone).await?;
        sync.removed.push(name);
    }
    sync.tools.sort_by(|a, b| a.name.cmp(&b.name));
    let count = i64::try_from(sync.tools.len()).unwrap_or(i64::MAX);
    db.run(&sql::MCP_SERVER_TOOL_COUNT, &[id.into(), count.into()])
        .await?;
    Ok(sync)
}

/// A discovered tool whose name another tool holds: both sources named.
fn collision(server: &McpServerRecord, tool: &NewTool, holder: &ToolRecord) -> RegistryError {
    let theirs = match holder.endpoint.as_deref() {
        Some(e) if e.starts_with("mcp:") => format!("`{e}`"),
        _ => format!("source `{}`", holder.source),
    };
    RegistryError::Conflict(format!(
        "tool `{}` of MCP server `{}` (`{}`) collides with tool `{}` (id {}, {theirs}, tenant `{}`); rename the server or delete the other tool",
        tool.name,
        server.server.name,
        tool.endpoint.as_deref().unwrap_or("?"),
        holder.name,
        holder.id,
        holder.tenant,
    ))
}

fn server_from_row(row: &Row) -> Result<McpServerRecord> {
    let id: String = row.get(0)?;
    let corrupt = |what: &str, e: &dyn std::fmt::Display| {
        RegistryError::Backend(format!("MCP server `{id}` has a corrupt {what}: {e}"))
    };
    let tags: serde_json::Value = row.get(7).map_err(|e| corrupt("tags", &e))?;
    let tags: Vec<String> = serde_json::from_value(tags).map_err(|e| corrupt("tags", &e))?;
    let status: String = row.get(12)?;
    let status = status
        .parse::<McpServerStatus>()
        .map_err(|_| corrupt("status", &status))?;
    let tool_count: i64 = row.get(13)?;
    let revision: i64 = row.get(16)?;
    Ok(McpServerRecord {
        server: NewMcpServer {
            tenant: row.get(1)?,
            name: row.get(2)?,
            spec: row.get(3).map_err(|e| corrupt("spec", &e))?,
            transport: row.get(4)?,
            endpoint: row.get(5)?,
            description: row.get(6)?,
            tags,
            team: row.get(8)?,
            enabled: row.get::<i64>(9)? != 0,
            source: row.get(10)?,
            overrides: row.get(11).map_err(|e| corrupt("overrides", &e))?,
            created_by: row.get(17)?,
        },
        status,
        tool_count: u32::try_from(tool_count).unwrap_or(u32::MAX),
        last_ping_at_ms: row.get(14)?,
        last_error: row.get(15)?,
        revision: u32::try_from(revision).unwrap_or(u32::MAX),
        created_at_ms: row.get(18)?,
        updated_at_ms: row.get(19)?,
        id,
    })
}
