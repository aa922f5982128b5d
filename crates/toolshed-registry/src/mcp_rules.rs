//! The rules of MCP server entries, written once over an [`Executor`] like `rules.rs`:
//! names unique per tenant, reads and writes scoped to the caller's tenant, the
//! synchronisation of a server's registry tools in one transaction, and the changes a
//! server made to a tool held back until an admin accepts them.

use std::collections::BTreeMap;

use toolshed_store::time::now_ms;
use toolshed_store::{Executor, Param, Row};

use crate::rules::{self, Paging};
use crate::sql;
use crate::{
    McpFound, McpPending, McpPing, McpServerRecord, McpServerStatus, McpSync, NewMcpServer,
    NewTool, Page, RegistryError, Result, TenantScope, ToolRecord,
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
        pending_changes: 0,
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
                bool_param(s.auto_accept),
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
        total = row.get(sql::MCP_PENDING_COUNT + 1)?;
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
        for (tool, _) in linked_tools(db, id).await? {
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
            bool_param(new.auto_accept),
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
    for (tool, _) in linked_tools(db, id).await? {
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

/// A tool's link to its server: what the server sent when it was last accepted, and a
/// change waiting for an admin.
#[derive(Debug, Clone, Default)]
struct Link {
    accepted: Option<serde_json::Value>,
    pending: Option<serde_json::Value>,
    pending_at_ms: Option<i64>,
}

/// The active registry tools linked to a server, by name, with their links; links to
/// tools deleted meanwhile (through the tools route) are dropped.
async fn linked_tools(db: &mut dyn Executor, server_id: &str) -> Result<Vec<(ToolRecord, Link)>> {
    let rows = db
        .rows(&sql::MCP_SERVER_TOOL_LINKS, &[server_id.into()])
        .await?;
    let mut tools = Vec::with_capacity(rows.len());
    for row in &rows {
        let tool_id: String = row.get(0)?;
        match rules::active_tool(db, &tool_id).await? {
            Some(t) => tools.push((
                t,
                Link {
                    accepted: row.get(1)?,
                    pending: row.get(2)?,
                    pending_at_ms: row.get(3)?,
                },
            )),
            None => {
                db.run(&sql::UNLINK_MCP_TOOL, &[server_id.into(), tool_id.into()])
                    .await?;
            }
        }
    }
    tools.sort_by(|a, b| a.0.name.cmp(&b.0.name));
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
/// new names registered and linked (what their server sent accepted), names no longer
/// listed deleted, and for each other tool:
/// - its server sent what was accepted (or the entry takes changes at once): a changed
///   definition (the owner's overrides changed) is a new revision, and a change held
///   back before is dropped;
/// - otherwise its server changed it: the change is held back as pending, the accepted
///   revision stays active. A link from before changes were held back has nothing
///   accepted: its tool counts as changed when the definition it gives differs.
///
/// A name held by a tool that is not this server's is a conflict naming both sources,
/// and nothing is written.
pub(crate) async fn sync_tools(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
    found: Vec<McpFound>,
) -> Result<McpSync> {
    let server = locked(db, id, scope).await?;
    let mut current: BTreeMap<String, (ToolRecord, Link)> = linked_tools(db, id)
        .await?
        .into_iter()
        .map(|(t, link)| (t.name.clone(), (t, link)))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut sync = McpSync {
        tools: Vec::with_capacity(found.len()),
        added: Vec::new(),
        changed: Vec::new(),
        removed: Vec::new(),
        pending: Vec::new(),
    };
    for McpFound { mut tool, sent } in found {
        tool.tenant = server.server.tenant.clone();
        if !seen.insert(tool.name.clone()) {
            return Err(RegistryError::Conflict(format!(
                "MCP server `{}` lists two tools named `{}` (after sanitising); rename one on the server",
                server.server.name, tool.name
            )));
        }
        match current.remove(&tool.name) {
            Some((existing, link)) => {
                let same = same_definition(&existing, &tool);
                let server_changed = match &link.accepted {
                    Some(accepted) => *accepted != sent,
                    None => !same,
                };
                if server_changed && !server.server.auto_accept {
                    if link.pending.as_ref() != Some(&sent) {
                        db.run(
                            &sql::HOLD_MCP_TOOL,
                            &[
                                id.into(),
                                existing.id.as_str().into(),
                                (&sent).into(),
                                now_ms().into(),
                            ],
                        )
                        .await?;
                    }
                    sync.pending.push(tool.name.clone());
                    sync.tools.push(existing);
                    continue;
                }
                let name = tool.name.clone();
                let kept = if same {
                    existing
                } else {
                    sync.changed.push(name);
                    rules::update_tool(db, &existing.id, tool, None, &TenantScope::All).await?
                };
                if link.accepted.as_ref() != Some(&sent) || link.pending.is_some() {
                    db.run(
                        &sql::ACCEPT_MCP_TOOL,
                        &[id.into(), kept.id.as_str().into(), (&sent).into()],
                    )
                    .await?;
                }
                sync.tools.push(kept);
            }
            None => {
                if let Some(holder) = rules::active_tool_by_name(db, &tool.name).await? {
                    return Err(collision(&server, &tool, &holder));
                }
                let name = tool.name.clone();
                let created = rules::create_tool(db, tool).await?;
                db.run(
                    &sql::LINK_MCP_TOOL,
                    &[id.into(), created.id.as_str().into(), (&sent).into()],
                )
                .await?;
                sync.added.push(name);
                sync.tools.push(created);
            }
        }
    }
    for (name, (gone, _)) in current {
        remove_tool(db, id, &gone).await?;
        sync.removed.push(name);
    }
    sync.tools.sort_by(|a, b| a.name.cmp(&b.name));
    let count = i64::try_from(sync.tools.len()).unwrap_or(i64::MAX);
    db.run(&sql::MCP_SERVER_TOOL_COUNT, &[id.into(), count.into()])
        .await?;
    Ok(sync)
}

/// Whether a stored tool already is what `tool` would write.
fn same_definition(existing: &ToolRecord, tool: &NewTool) -> bool {
    existing.definition == tool.definition
        && existing.description == tool.description
        && existing.endpoint == tool.endpoint
}

/// The server's tools with a change waiting, by name.
pub(crate) async fn pending(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
) -> Result<Vec<McpPending>> {
    get(db, id, scope).await?;
    Ok(linked_tools(db, id)
        .await?
        .into_iter()
        .filter_map(|(tool, link)| {
            let sent = link.pending?;
            Some(McpPending {
                tool,
                accepted: link.accepted,
                sent,
                since_ms: link.pending_at_ms.unwrap_or_default(),
            })
        })
        .collect())
}

/// Accept the changes waiting for `found`'s tools: each definition becomes the active
/// revision (when it differs) and what its server sent the accepted one. A tool with no
/// change waiting, or whose waiting change is not `sent` (the server changed it again
/// since it was read), is a conflict, and nothing is written.
pub(crate) async fn accept_tools(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
    found: Vec<McpFound>,
) -> Result<Vec<ToolRecord>> {
    let server = locked(db, id, scope).await?;
    let mut current: BTreeMap<String, (ToolRecord, Link)> = linked_tools(db, id)
        .await?
        .into_iter()
        .map(|(t, link)| (t.name.clone(), (t, link)))
        .collect();
    let mut out = Vec::with_capacity(found.len());
    for McpFound { mut tool, sent } in found {
        tool.tenant = server.server.tenant.clone();
        let Some((existing, link)) = current.remove(&tool.name) else {
            return Err(RegistryError::Conflict(format!(
                "MCP server `{}` has no tool `{}` (or it was named twice); discover it again",
                server.server.name, tool.name
            )));
        };
        match &link.pending {
            Some(pending) if *pending == sent => {}
            Some(_) => {
                return Err(RegistryError::Conflict(format!(
                    "tool `{}` of MCP server `{}` changed again since it was read; review the change again",
                    tool.name, server.server.name
                )));
            }
            None => {
                return Err(RegistryError::Conflict(format!(
                    "tool `{}` of MCP server `{}` has no change waiting",
                    tool.name, server.server.name
                )));
            }
        }
        let kept = if same_definition(&existing, &tool) {
            existing
        } else {
            rules::update_tool(db, &existing.id, tool, None, &TenantScope::All).await?
        };
        db.run(
            &sql::ACCEPT_MCP_TOOL,
            &[id.into(), kept.id.as_str().into(), (&sent).into()],
        )
        .await?;
        out.push(kept);
    }
    Ok(out)
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
    let pending: i64 = row.get(sql::MCP_PENDING_COUNT)?;
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
            auto_accept: row.get::<i64>(20)? != 0,
        },
        status,
        tool_count: u32::try_from(tool_count).unwrap_or(u32::MAX),
        last_ping_at_ms: row.get(14)?,
        last_error: row.get(15)?,
        revision: u32::try_from(revision).unwrap_or(u32::MAX),
        pending_changes: u32::try_from(pending).unwrap_or(u32::MAX),
        created_at_ms: row.get(18)?,
        updated_at_ms: row.get(19)?,
        id,
    })
}
