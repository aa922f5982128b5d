//! The registry's rules, written once over an [`Executor`]: what a registration checks,
//! what a revision bump does, how an agent's edges are replaced, how rows become records.
//! Each backend only runs the statements of `sql.rs`; whether a rule runs in a write
//! transaction or on a read connection is decided by its caller (`store.rs`).

use std::collections::BTreeMap;

use base64::Engine;
use toolshed_auth::Role;
use toolshed_store::sql::Query;
use toolshed_store::time::now_ms;
use toolshed_store::{Executor, Param, Row};

use crate::sql;
use crate::{
    AgentRecord, AgentStatus, CodeRef, MAX_PER_PAGE, NewAgent, NewCode, NewSandboxExecution,
    NewTool, NewUser, Page, RefreshSpent, RegistryError, Result, RevokedSession,
    SandboxExecutionRecord, SessionRefresh, SpendRefresh, TenantRecord, TenantScope, ToolFilter,
    ToolRecord, ToolStatus, ToolUsage, UserChange, UserRecord,
};

/// Items per page when the caller asks for 0.
pub(crate) const DEFAULT_PER_PAGE: u32 = 20;

/// A page request as applied: page from 1, per_page in 1..=MAX_PER_PAGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Paging {
    pub(crate) page: u32,
    pub(crate) per_page: u32,
}

impl Paging {
    /// Apply the defaults and the cap.
    pub(crate) fn new(page: u32, per_page: u32) -> Paging {
        let per_page = match per_page {
            0 => DEFAULT_PER_PAGE,
            n => n.min(MAX_PER_PAGE),
        };
        Paging {
            page: page.max(1),
            per_page,
        }
    }

    /// `LIMIT`.
    pub(crate) fn limit(self) -> i64 {
        i64::from(self.per_page)
    }

    /// `LIMIT n OFFSET m` as literals. Why not bound parameters: the SQLite we build
    /// plans with a bound `LIMIT`'s value and re-prepares such a statement on every
    /// execution, cached or not (13 % of a first page of 10,000 tools; BENCHMARKS.md).
    /// Both are numbers this type computed, never a caller's text.
    pub(crate) fn limit_offset_sql(self) -> String {
        format!(" LIMIT {} OFFSET {}", self.limit(), self.offset())
    }

    /// `OFFSET` (at most about 2^41, no overflow).
    pub(crate) fn offset(self) -> i64 {
        i64::from(self.page - 1) * i64::from(self.per_page)
    }

    fn page_of<T>(self, items: Vec<T>, total: u64) -> Page<T> {
        Page {
            items,
            page: self.page,
            per_page: self.per_page,
            total,
        }
    }
}

/// A fresh id: a UUID v7 (time-ordered, so ids sort roughly by creation).
fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The smallest string greater than every string starting with `prefix`, if any: the
/// prefix with its last incrementable character incremented and the rest dropped.
/// Names are compared by code point in both backends (SQLite's `BINARY`, PostgreSQL's
/// `"C"` collation on UTF-8), so `name >= prefix AND name < upper` is exactly "starts
/// with `prefix`", and it is an index range rather than a scan.
pub(crate) fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            // Skip the surrogate range, which `char` cannot hold.
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(u32::from(c) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

// ---- errors callers see ----

pub(crate) fn tool_not_found(id: &str) -> RegistryError {
    RegistryError::NotFound {
        what: "tool",
        id: id.to_owned(),
    }
}

fn agent_not_found(id: &str) -> RegistryError {
    RegistryError::NotFound {
        what: "agent",
        id: id.to_owned(),
    }
}

fn user_not_found(username: &str) -> RegistryError {
    RegistryError::NotFound {
        what: "user",
        id: username.to_owned(),
    }
}

/// An active tool already has the name (`holder`: its id and owner, when known).
/// `tenant` is the caller's: the fix differs when the holder is another tenant's.
fn name_taken(name: &str, holder: Option<&Holder>, tenant: &str) -> RegistryError {
    match holder {
        Some(h) if h.tenant != tenant => RegistryError::Conflict(format!(
            "a tool named `{name}` is already registered (id {}) by tenant `{}`; choose another name",
            h.id, h.tenant
        )),
        Some(h) => RegistryError::Conflict(format!(
            "a tool named `{name}` is already registered (id {}); update it with PUT or delete it first",
            h.id
        )),
        None => RegistryError::Conflict(format!(
            "a tool named `{name}` is already registered; update it with PUT or delete it first"
        )),
    }
}

/// A tool or agent of another tenant, out of the caller's scope.
fn not_owner(what: &'static str, name: &str, owner: &str) -> RegistryError {
    RegistryError::NotOwner {
        what,
        name: name.to_owned(),
        owner: owner.to_owned(),
    }
}

/// The active tool holding a name: its id and owner.
struct Holder {
    id: String,
    tenant: String,
}

fn stale_revision(name: &str, current: u32, expected: u32) -> RegistryError {
    RegistryError::Conflict(format!(
        "tool `{name}` is at revision {current}, not {expected}: reload it and try again"
    ))
}

// ---- tools ----

/// The id and owner of the active tool named `name`, if any.
async fn active_tool_id(db: &mut dyn Executor, name: &str) -> Result<Option<Holder>> {
    match db.row(&sql::ACTIVE_TOOL_ID, &[name.into()]).await? {
        Some(row) => Ok(Some(Holder {
            id: row.get(0)?,
            tenant: row.get(1)?,
        })),
        None => Ok(None),
    }
}

/// The active tool with this id, if any.
pub(crate) async fn active_tool(db: &mut dyn Executor, id: &str) -> Result<Option<ToolRecord>> {
    db.row(&sql::ACTIVE_TOOL, &[id.into()])
        .await?
        .map(|row| tool_from_row(&row))
        .transpose()
}

/// The active tool with this exact name, if any.
pub(crate) async fn active_tool_by_name(
    db: &mut dyn Executor,
    name: &str,
) -> Result<Option<ToolRecord>> {
    db.row(&sql::ACTIVE_TOOL_BY_NAME, &[name.into()])
        .await?
        .map(|row| tool_from_row(&row))
        .transpose()
}

/// The row of a tool's current revision, as [`sql::INSERT_TOOL`] and
/// [`sql::UPDATE_TOOL`] bind it.
fn tool_params(id: &str, tool: &NewTool, now: i64) -> Vec<Param> {
    vec![
        id.into(),
        (&tool.name).into(),
        (&tool.description).into(),
        (&tool.tool_type).into(),
        (&tool.source).into(),
        (&tool.endpoint).into(),
        (&tool.version).into(),
        (&tool.definition).into(),
        (&tool.created_by).into(),
        now.into(),
        (&tool.tenant).into(),
    ]
}

/// Register a tool: the name must be free among active tools; revision 1 goes into the
/// history too. Of two registrations of one name at once (in any process), the unique
/// index lets one in; the other inserts nothing and names the winner.
pub(crate) async fn create_tool(db: &mut dyn Executor, new: NewTool) -> Result<ToolRecord> {
    if let Some(holder) = active_tool_id(db, &new.name).await? {
        return Err(name_taken(&new.name, Some(&holder), &new.tenant));
    }
    let now = now_ms();
    let id = new_id();
    if db
        .run(&sql::INSERT_TOOL, &tool_params(&id, &new, now))
        .await?
        == 0
    {
        let holder = active_tool_id(db, &new.name).await?;
        return Err(name_taken(&new.name, holder.as_ref(), &new.tenant));
    }
    db.run(&sql::SNAPSHOT_VERSION, &[id.as_str().into()])
        .await?;
    attach_code(db, &id, 1, new.code.as_ref()).await?;
    Ok(record(id, new, 1, now, now))
}

/// Replace an active tool's definition: revision n+1 becomes current and joins the
/// history. Only a caller whose scope holds the tool's owner may (checked on the row
/// this transaction locked; the owner is kept). A caller that names the revision it
/// last saw gets a conflict when another update came first; renaming onto another
/// active tool's name is a conflict.
pub(crate) async fn update_tool(
    db: &mut dyn Executor,
    id: &str,
    mut update: NewTool,
    expected_revision: Option<u32>,
    scope: &TenantScope,
) -> Result<ToolRecord> {
    let current = db
        .row(&sql::ACTIVE_TOOL_FOR_UPDATE, &[id.into()])
        .await?
        .map(|row| tool_from_row(&row))
        .transpose()?
        .ok_or_else(|| tool_not_found(id))?;
    if !scope.allows(&current.tenant) {
        return Err(not_owner("tool", &current.name, &current.tenant));
    }
    let caller = std::mem::replace(&mut update.tenant, current.tenant.clone());
    if let Some(expected) = expected_revision
        && expected != current.revision
    {
        return Err(stale_revision(&current.name, current.revision, expected));
    }
    if let Some(holder) = active_tool_id(db, &update.name).await?
        && holder.id != id
    {
        return Err(name_taken(&update.name, Some(&holder), &caller));
    }
    let revision = current.revision.saturating_add(1);
    let now = now_ms();
    let mut params = tool_params(id, &update, now);
    params.push(revision.into());
    db.run(&sql::UPDATE_TOOL, &params)
        .await
        .map_err(|e| unique_or(e, || name_taken(&update.name, None, &caller)))?;
    db.run(&sql::SNAPSHOT_VERSION, &[id.into()]).await?;
    attach_code(db, id, revision, update.code.as_ref()).await?;
    Ok(record(
        id.to_owned(),
        update,
        revision,
        current.created_at_ms,
        now,
    ))
}

/// The record a registration or an update wrote.
fn record(id: String, tool: NewTool, revision: u32, created: i64, updated: i64) -> ToolRecord {
    ToolRecord {
        id,
        name: tool.name,
        description: tool.description,
        tool_type: tool.tool_type,
        source: tool.source,
        status: ToolStatus::Active,
        endpoint: tool.endpoint,
        version: tool.version,
        revision,
        definition: tool.definition,
        created_by: tool.created_by,
        tenant: tool.tenant,
        created_at_ms: created,
        updated_at_ms: updated,
        code: tool.code.as_ref().map(NewCode::reference),
    }
}

/// Every revision of a tool, oldest first; none is `NotFound`.
pub(crate) async fn tool_versions(db: &mut dyn Executor, id: &str) -> Result<Vec<ToolRecord>> {
    let rows = db.rows(&sql::TOOL_VERSIONS, &[id.into()]).await?;
    if rows.is_empty() {
        return Err(tool_not_found(id));
    }
    rows.iter().map(tool_from_row).collect()
}

/// Mark an active tool deleted; its current revision's copy says deleted too, so the
/// history ends as the tool did. The name is free again. Only a caller whose scope
/// holds the tool's owner may (checked on the row this transaction locked).
pub(crate) async fn delete_tool(
    db: &mut dyn Executor,
    id: &str,
    scope: &TenantScope,
) -> Result<ToolRecord> {
    let mut tool = db
        .row(&sql::ACTIVE_TOOL_FOR_UPDATE, &[id.into()])
        .await?
        .map(|row| tool_from_row(&row))
        .transpose()?
        .ok_or_else(|| tool_not_found(id))?;
    if !scope.allows(&tool.tenant) {
        return Err(not_owner("tool", &tool.name, &tool.tenant));
    }
    let now = now_ms();
    db.run(&sql::DELETE_TOOL, &[id.into(), now.into()]).await?;
    db.run(
        &sql::DELETE_TOOL_VERSION,
        &[id.into(), tool.revision.into(), now.into()],
    )
    .await?;
    tool.status = ToolStatus::Deleted;
    tool.updated_at_ms = now;
    Ok(tool)
}

/// The agents using an active tool, by name.
pub(crate) async fn tool_usage(db: &mut dyn Executor, id: &str) -> Result<Vec<ToolUsage>> {
    let rows = db.rows(&sql::TOOL_USAGE, &[id.into()]).await?;
    if rows.is_empty() {
        return Err(tool_not_found(id));
    }
    let mut usage = Vec::with_capacity(rows.len());
    for row in &rows {
        if let Some(agent_id) = row.get::<Option<String>>(0)? {
            usage.push(ToolUsage {
                agent_id,
                agent_name: row.get(1)?,
                agent_status: parse_agent_status(&row.get::<String>(2)?)?,
            });
        }
    }
    Ok(usage)
}

/// One page of active tools and the total of the filter, from one statement. Every
/// variant filters on `status = 'active'` and orders by name, so it walks one of the
/// partial indexes (by name, or by type or source then name) and stops after the page;
/// the count walks the same index.
pub(crate) async fn list_tools(
    db: &mut dyn Executor,
    filter: &ToolFilter,
) -> Result<Page<ToolRecord>> {
    let paging = Paging::new(filter.page, filter.per_page);
    // The status is one of the enum's own names, never the caller's text.
    let status = filter.status.unwrap_or(ToolStatus::Active);
    let mut cond = Query::new(if status == ToolStatus::Active {
        "status = 'active'"
    } else {
        "status = 'deleted'"
    });
    if let Some(tool_type) = &filter.tool_type {
        cond.push(" AND tool_type = ").bind(tool_type);
    }
    if let Some(source) = &filter.source {
        cond.push(" AND source = ").bind(source);
    }
    if let Some(prefix) = filter.name_prefix.as_deref().filter(|p| !p.is_empty()) {
        cond.push(" AND name >= ").bind(prefix);
        if let Some(upper) = prefix_upper_bound(prefix) {
            cond.push(" AND name < ").bind(upper);
        }
    }
    if let Some(tenant) = &filter.tenant {
        cond.push(" AND tenant = ").bind(tenant);
    }
    if let Some(search) = filter.search.as_deref().filter(|s| !s.is_empty()) {
        // A substring match, `%` and `_` in the text taken literally: a scan of the
        // filtered rows, a few milliseconds at 10,000 tools.
        let pattern = format!("%{}%", escape_like(&search.to_lowercase()));
        cond.push(" AND (LOWER(name) LIKE ")
            .bind(pattern.clone())
            .push(" ESCAPE '\\' OR LOWER(description) LIKE ")
            .bind(pattern)
            .push(" ESCAPE '\\')");
    }
    let (cond_sql, cond_params) = cond.parts();
    let statement = format!(
        "{}{cond_sql}{}{cond_sql} ORDER BY name{}) p ON TRUE",
        if filter.skip_definitions {
            sql::TOOL_SUMMARY_PAGE_HEAD
        } else {
            sql::TOOL_PAGE_HEAD
        },
        sql::TOOL_PAGE_JOIN,
        paging.limit_offset_sql(),
    );
    let rows = db.query(&statement, cond_params).await?;
    let mut total = 0;
    let mut items = Vec::with_capacity(rows.len());
    for row in &rows {
        total = row.get(14)?;
        if row.get::<Option<String>>(0)?.is_some() {
            items.push(tool_from_row_with(row, !filter.skip_definitions)?);
        }
    }
    Ok(paging.page_of(items, total))
}

/// `text` with the `LIKE` wildcards (`%`, `_`) and the escape character (`\`)
/// escaped, so it matches only itself.
fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A tool row (id and the tool fields, in `sql::TOOL_FIELDS` order).
fn tool_from_row(row: &Row) -> Result<ToolRecord> {
    tool_from_row_with(row, true)
}

/// A tool row, its definition read only when `definition` is set (`null` otherwise).
fn tool_from_row_with(row: &Row, definition: bool) -> Result<ToolRecord> {
    let id: String = row.get(0)?;
    let status: String = row.get(5)?;
    let status = status.parse::<ToolStatus>().map_err(|_| {
        RegistryError::Backend(format!("tool `{id}` has an unknown status `{status}`"))
    })?;
    let revision = row
        .get::<u32>(8)
        .map_err(|e| RegistryError::Backend(format!("tool `{id}` has an invalid revision: {e}")))?;
    let definition = if definition {
        row.get::<serde_json::Value>(9).map_err(|e| {
            RegistryError::Backend(format!("tool `{id}` has a corrupt definition: {e}"))
        })?
    } else {
        serde_json::Value::Null
    };
    Ok(ToolRecord {
        name: row.get(1)?,
        description: row.get(2)?,
        tool_type: row.get(3)?,
        source: row.get(4)?,
        status,
        endpoint: row.get(6)?,
        version: row.get(7)?,
        revision,
        definition,
        created_by: row.get(10)?,
        created_at_ms: row.get(11)?,
        updated_at_ms: row.get(12)?,
        tenant: row.get(13)?,
        // Filled in by `with_code` (the code lives in its own tables).
        code: None,
        id,
    })
}

// ---- agents ----

/// Register an agent, or replace the one with its name (same id and owner, new
/// definition, its edges replaced) when the caller's scope holds its owner: the upsert
/// statement itself checks it, so a concurrent first registration by another tenant
/// cannot be overwritten. Every tool it uses must be active; PostgreSQL locks them
/// against a concurrent delete until the edges are committed.
pub(crate) async fn upsert_agent(
    db: &mut dyn Executor,
    new: NewAgent,
    scope: &TenantScope,
) -> Result<AgentRecord> {
    let mut tool_ids = new.tool_ids.clone();
    tool_ids.sort();
    tool_ids.dedup();
    for tool_id in &tool_ids {
        if db
            .row(&sql::TOOL_IS_ACTIVE_FOR_SHARE, &[tool_id.into()])
            .await?
            .is_none()
        {
            return Err(tool_not_found(tool_id));
        }
    }
    let now = now_ms();
    let row = db
        .row(
            &sql::UPSERT_AGENT,
            &[
                new_id().into(),
                (&new.name).into(),
                (&new.framework).into(),
                (&new.definition).into(),
                (&new.created_by).into(),
                now.into(),
                (&new.tenant).into(),
                scope.tenant().unwrap_or_default().into(),
                i64::from(scope == &TenantScope::All).into(),
            ],
        )
        .await?;
    let Some(row) = row else {
        // Nothing was written: the name is another tenant's agent.
        let owner: String = db
            .row(&sql::AGENT_TENANT, &[(&new.name).into()])
            .await?
            .ok_or_else(|| RegistryError::Backend("registering an agent returned no row".into()))?
            .get(0)?;
        return Err(not_owner("agent", &new.name, &owner));
    };
    let id: String = row.get(0)?;
    let created_at_ms: i64 = row.get(1)?;
    let tenant: String = row.get(2)?;
    db.run(&sql::DELETE_AGENT_EDGES, &[id.as_str().into()])
        .await?;
    for tool_id in &tool_ids {
        db.run(
            &sql::INSERT_AGENT_EDGE,
            &[id.as_str().into(), tool_id.into()],
        )
        .await?;
    }
    Ok(AgentRecord {
        id,
        name: new.name,
        framework: new.framework,
        status: AgentStatus::Registered,
        definition: new.definition,
        tool_ids,
        created_by: new.created_by,
        tenant,
        created_at_ms,
        updated_at_ms: now,
    })
}

/// An agent by id or name.
pub(crate) async fn agent(db: &mut dyn Executor, id_or_name: &str) -> Result<AgentRecord> {
    let rows = db.rows(&sql::AGENT, &[id_or_name.into()]).await?;
    agents_from_rows(&rows)?
        .pop()
        .ok_or_else(|| agent_not_found(id_or_name))
}

/// One page of agents by name.
pub(crate) async fn list_agents(
    db: &mut dyn Executor,
    page: u32,
    per_page: u32,
) -> Result<Page<AgentRecord>> {
    let paging = Paging::new(page, per_page);
    let rows = db
        .rows(
            &sql::LIST_AGENTS,
            &[paging.limit().into(), paging.offset().into()],
        )
        .await?;
    let mut total = 0;
    for row in &rows {
        total = row.get(10)?;
    }
    Ok(paging.page_of(agents_from_rows(&rows)?, total))
}

/// Agents from rows of agent columns plus one edge's tool id (NULL for none); rows of
/// NULLs (an empty page) are skipped. The order of first appearance is kept.
fn agents_from_rows(rows: &[Row]) -> Result<Vec<AgentRecord>> {
    let mut order: Vec<String> = Vec::new();
    let mut agents: BTreeMap<String, AgentRecord> = BTreeMap::new();
    for row in rows {
        let Some(id) = row.get::<Option<String>>(0)? else {
            continue;
        };
        if !agents.contains_key(&id) {
            let definition = row.get::<serde_json::Value>(4).map_err(|e| {
                RegistryError::Backend(format!("agent `{id}` has a corrupt definition: {e}"))
            })?;
            order.push(id.clone());
            agents.insert(
                id.clone(),
                AgentRecord {
                    id: id.clone(),
                    name: row.get(1)?,
                    framework: row.get(2)?,
                    status: parse_agent_status(&row.get::<String>(3)?)?,
                    definition,
                    tool_ids: Vec::new(),
                    created_by: row.get(5)?,
                    created_at_ms: row.get(6)?,
                    updated_at_ms: row.get(7)?,
                    tenant: row.get(8)?,
                },
            );
        }
        if let Some(tool_id) = row.get::<Option<String>>(9)?
            && let Some(agent) = agents.get_mut(&id)
        {
            agent.tool_ids.push(tool_id);
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|id| agents.remove(&id))
        .collect())
}

fn parse_agent_status(text: &str) -> Result<AgentStatus> {
    text.parse()
        .map_err(|_| RegistryError::Backend(format!("an agent has an unknown status `{text}`")))
}

// ---- users ----

/// Add a user; a taken name is a conflict.
pub(crate) async fn create_user(db: &mut dyn Executor, new: NewUser) -> Result<UserRecord> {
    let now = now_ms();
    let generation = first_token_generation();
    let inserted = db
        .run(
            &sql::INSERT_USER,
            &[
                (&new.username).into(),
                (&new.password_hash).into(),
                new.role.as_str().into(),
                (&new.tenant).into(),
                now.into(),
                generation.into(),
            ],
        )
        .await?;
    if inserted == 0 {
        return Err(RegistryError::Conflict(format!(
            "user `{}` already exists",
            new.username
        )));
    }
    Ok(UserRecord {
        username: new.username,
        password_hash: new.password_hash,
        role: new.role,
        tenant: new.tenant,
        created_at_ms: now,
        token_generation: generation,
    })
}

/// A new user's first token generation: random (below 2^53, so JSON readers keep it
/// exact), not 1, so a user deleted and added again under the same name does not
/// find the old user's tokens valid again.
fn first_token_generation() -> i64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bytes[..8]);
    let value = u64::from_le_bytes(low) & ((1u64 << 53) - 1);
    i64::try_from(value.max(1)).unwrap_or(1)
}

/// A user by name, if any.
pub(crate) async fn user(db: &mut dyn Executor, username: &str) -> Result<Option<UserRecord>> {
    db.row(&sql::USER, &[username.into()])
        .await?
        .map(|row| user_from_row(&row))
        .transpose()
}

/// Every user in scope by name.
pub(crate) async fn users(db: &mut dyn Executor, scope: &TenantScope) -> Result<Vec<UserRecord>> {
    let params = [
        scope.tenant().unwrap_or_default().into(),
        i64::from(scope == &TenantScope::All).into(),
    ];
    db.rows(&sql::USERS, &params)
        .await?
        .iter()
        .map(user_from_row)
        .collect()
}

/// Change a user's hash, role and/or tenant in scope; any change bumps its token
/// generation. As for a removal, another tenant's user is not found, and an
/// organisation owner is changed only by a caller whose scope is every tenant; checked
/// on the row this transaction locked.
pub(crate) async fn update_user(
    db: &mut dyn Executor,
    username: &str,
    change: UserChange,
    scope: &TenantScope,
) -> Result<UserRecord> {
    let current = db
        .row(&sql::USER_FOR_UPDATE, &[username.into()])
        .await?
        .map(|row| user_from_row(&row))
        .transpose()?
        .filter(|u| scope.allows(&u.tenant))
        .ok_or_else(|| user_not_found(username))?;
    if current.role == Role::Owner && scope != &TenantScope::All {
        return Err(RegistryError::OwnerOnly(current.username));
    }
    let step: i64 = if change.is_empty() { 0 } else { 1 };
    let changed = db
        .run(
            &sql::UPDATE_USER,
            &[
                username.into(),
                change.password_hash.into(),
                change.role.map(Role::as_str).into(),
                now_ms().into(),
                step.into(),
                change.tenant.into(),
            ],
        )
        .await?;
    if changed == 0 {
        return Err(user_not_found(username));
    }
    user(db, username)
        .await?
        .ok_or_else(|| user_not_found(username))
}

/// Remove a user in scope. Another tenant's user is not found, as if it did not exist
/// (a tenant's admin does not learn other tenants' user names); an organisation owner
/// is removed only by a caller whose scope is every tenant. Checked on the row this
/// transaction locked.
pub(crate) async fn delete_user(
    db: &mut dyn Executor,
    username: &str,
    scope: &TenantScope,
) -> Result<()> {
    let user = db
        .row(&sql::USER_FOR_UPDATE, &[username.into()])
        .await?
        .map(|row| user_from_row(&row))
        .transpose()?
        .filter(|u| scope.allows(&u.tenant))
        .ok_or_else(|| user_not_found(username))?;
    if user.role == Role::Owner && scope != &TenantScope::All {
        return Err(RegistryError::OwnerOnly(user.username));
    }
    if db.run(&sql::DELETE_USER, &[username.into()]).await? == 0 {
        return Err(user_not_found(username));
    }
    Ok(())
}

/// How many users exist.
pub(crate) async fn count_users(db: &mut dyn Executor) -> Result<u64> {
    match db.row(&sql::COUNT_USERS, &[]).await? {
        Some(row) => Ok(row.get(0)?),
        None => Ok(0),
    }
}

fn user_from_row(row: &Row) -> Result<UserRecord> {
    let username: String = row.get(0)?;
    let role: String = row.get(2)?;
    let role = role.parse::<Role>().map_err(|_| {
        RegistryError::Backend(format!("user `{username}` has an unknown role `{role}`"))
    })?;
    Ok(UserRecord {
        password_hash: row.get(1)?,
        role,
        tenant: row.get(3)?,
        created_at_ms: row.get(4)?,
        token_generation: row.get(5)?,
        username,
    })
}

// ---- revoked sessions ----

/// Revoke a session until its tokens expire, and prune the sessions whose tokens all
/// have (so the table holds one refresh-token lifetime of logouts, whatever the
/// traffic). In one write transaction.
pub(crate) async fn revoke_session(db: &mut dyn Executor, session: RevokedSession) -> Result<()> {
    db.run(&sql::PRUNE_REVOKED_SESSIONS, &[now_ms().into()])
        .await?;
    // An ended session has no live refresh token.
    db.run(&sql::FORGET_SESSION, &[session.session_id.clone().into()])
        .await?;
    db.run(
        &sql::REVOKE_SESSION,
        &[
            session.session_id.into(),
            session.username.into(),
            session.expires_at_ms.into(),
        ],
    )
    .await?;
    Ok(())
}

// ---- sessions' live refresh tokens ----

/// Make a refresh token its session's live one, and prune the sessions whose refresh
/// tokens have all expired (so the table holds one refresh-token lifetime of logins).
pub(crate) async fn record_refresh(db: &mut dyn Executor, refresh: SessionRefresh) -> Result<()> {
    db.run(&sql::PRUNE_SESSIONS, &[now_ms().into()]).await?;
    db.run(
        &sql::RECORD_REFRESH,
        &[
            refresh.session_id.into(),
            refresh.username.into(),
            refresh.refresh_id.into(),
            refresh.expires_at_ms.into(),
        ],
    )
    .await?;
    Ok(())
}

/// Spend a refresh token: rotate when it is the session's live one; else end the
/// session (forget its live refresh token, revoke its id). The rule of reuse
/// detection, for both databases: the rotation is one conditional update, so only one
/// of two concurrent spends of a token can succeed.
pub(crate) async fn spend_refresh(
    db: &mut dyn Executor,
    spend: SpendRefresh,
) -> Result<RefreshSpent> {
    let rotated = db
        .run(
            &sql::ROTATE_REFRESH,
            &[
                spend.next.into(),
                spend.expires_at_ms.into(),
                spend.session_id.clone().into(),
                spend.username.clone().into(),
                spend.presented.into(),
            ],
        )
        .await?;
    if rotated == 1 {
        return Ok(RefreshSpent::Rotated);
    }
    revoke_session(
        db,
        RevokedSession {
            session_id: spend.session_id,
            username: spend.username,
            expires_at_ms: spend.revoked_until_ms,
        },
    )
    .await?;
    Ok(RefreshSpent::SessionEnded)
}

/// A user's revoked sessions that may still have live tokens.
pub(crate) async fn revoked_sessions(db: &mut dyn Executor, username: &str) -> Result<Vec<String>> {
    db.rows(&sql::REVOKED_SESSIONS, &[username.into(), now_ms().into()])
        .await?
        .iter()
        .map(|row| Ok(row.get(0)?))
        .collect()
}

// ---- tenants ----

/// The tenants in scope, by name: every name a user, an active tool, an agent or an MCP
/// server entry belongs to, with what it owns and who manages it.
pub(crate) async fn tenants(
    db: &mut dyn Executor,
    scope: &TenantScope,
) -> Result<Vec<TenantRecord>> {
    let params = [
        scope.tenant().unwrap_or_default().into(),
        i64::from(scope == &TenantScope::All).into(),
    ];
    let mut tenants: BTreeMap<String, TenantRecord> = BTreeMap::new();
    for row in db.rows(&sql::TENANT_COUNTS, &params).await? {
        let name: String = row.get(0)?;
        let kind: String = row.get(1)?;
        let count: i64 = row.get(2)?;
        let count = u64::try_from(count).unwrap_or(0);
        let tenant = tenants.entry(name.clone()).or_insert_with(|| TenantRecord {
            name,
            ..TenantRecord::default()
        });
        match kind.as_str() {
            "users" => tenant.users = count,
            "tools" => tenant.tools = count,
            "agents" => tenant.agents = count,
            "mcp_servers" => tenant.mcp_servers = count,
            other => {
                return Err(RegistryError::Backend(format!(
                    "the tenants statement gave an unknown kind `{other}`"
                )));
            }
        }
    }
    for row in db.rows(&sql::TENANT_ADMINS, &params).await? {
        let name: String = row.get(0)?;
        if let Some(tenant) = tenants.get_mut(&name) {
            tenant.admins.push(row.get(1)?);
        }
    }
    Ok(tenants.into_values().collect())
}

// ---- settings ----

/// A stored setting, if any.
pub(crate) async fn setting(db: &mut dyn Executor, key: &str) -> Result<Option<String>> {
    match db.row(&sql::SETTING, &[key.into()]).await? {
        Some(row) => Ok(Some(row.get(0)?)),
        None => Ok(None),
    }
}

/// The stored value of `key`, or `value` stored and returned when there is none yet. In
/// a write transaction: of two first callers (in any process) the first inserts, the
/// second waits for its commit, inserts nothing, and reads the first one's value.
pub(crate) async fn init_setting(
    db: &mut dyn Executor,
    key: &str,
    value: String,
) -> Result<String> {
    db.run(&sql::INIT_SETTING, &[key.into(), value.into()])
        .await?;
    setting(db, key).await?.ok_or_else(|| {
        RegistryError::Backend(format!("the setting `{key}` vanished while being set"))
    })
}

/// A unique violation is `conflict()`; anything else passes through.
fn unique_or(
    e: toolshed_store::DbError,
    conflict: impl FnOnce() -> RegistryError,
) -> RegistryError {
    if e.is_unique_violation() {
        conflict()
    } else {
        e.into()
    }
}

// ---- sandbox executions ----

/// Record an execution; its id is fresh (a UUID), so a taken one is a bug reported as a
/// conflict.
pub(crate) async fn record_execution(
    db: &mut dyn Executor,
    new: NewSandboxExecution,
) -> Result<SandboxExecutionRecord> {
    let now = now_ms();
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    db.run(
        &sql::INSERT_EXECUTION,
        &[
            (&new.id).into(),
            (&new.tenant).into(),
            (&new.created_by).into(),
            (&new.tool_id).into(),
            (&new.language).into(),
            (&new.code_sha256).into(),
            n(new.code_bytes).into(),
            new.input.as_ref().map(Param::from).unwrap_or(Param::Null),
            n(new.input_bytes).into(),
            new.exit_code.map(i64::from).into(),
            i64::from(new.timed_out).into(),
            n(new.duration_ms).into(),
            (&new.result).into(),
            now.into(),
        ],
    )
    .await
    .map_err(|e| match e.kind {
        toolshed_store::DbErrorKind::UniqueViolation => {
            RegistryError::Conflict(format!("execution `{}` is recorded already", new.id))
        }
        _ => e.into(),
    })?;
    Ok(SandboxExecutionRecord {
        execution: new,
        created_at_ms: now,
    })
}

/// An execution of a tenant; another tenant's is not found.
pub(crate) async fn execution(
    db: &mut dyn Executor,
    id: &str,
    tenant: &str,
) -> Result<SandboxExecutionRecord> {
    match db.row(&sql::EXECUTION, &[id.into(), tenant.into()]).await? {
        Some(row) => execution_from_row(&row),
        None => Err(RegistryError::NotFound {
            what: "sandbox execution",
            id: id.to_owned(),
        }),
    }
}

/// One page of a tenant's executions, newest first.
pub(crate) async fn list_executions(
    db: &mut dyn Executor,
    tenant: &str,
    page: u32,
    per_page: u32,
) -> Result<Page<SandboxExecutionRecord>> {
    let paging = Paging::new(page, per_page);
    let rows = db
        .rows(
            &sql::LIST_EXECUTIONS,
            &[tenant.into(), paging.limit().into(), paging.offset().into()],
        )
        .await?;
    let mut total = 0;
    let mut items = Vec::with_capacity(rows.len());
    for row in &rows {
        total = row.get(14)?;
        if row.get::<Option<String>>(0)?.is_some() {
            items.push(execution_from_row(row)?);
        }
    }
    Ok(paging.page_of(items, total))
}

fn execution_from_row(row: &Row) -> Result<SandboxExecutionRecord> {
    let id: String = row.get(0)?;
    let exit_code = row
        .get::<Option<i64>>(9)?
        .map(|c| i32::try_from(c).unwrap_or(i32::MIN));
    Ok(SandboxExecutionRecord {
        execution: NewSandboxExecution {
            tenant: row.get(1)?,
            created_by: row.get(2)?,
            tool_id: row.get(3)?,
            language: row.get(4)?,
            code_sha256: row.get(5)?,
            code_bytes: row.get(6)?,
            input: row.get(7)?,
            input_bytes: row.get(8)?,
            exit_code,
            timed_out: row.get::<i64>(10)? != 0,
            duration_ms: row.get(11)?,
            result: row.get::<serde_json::Value>(12).map_err(|e| {
                RegistryError::Backend(format!("execution `{id}` has a corrupt result: {e}"))
            })?,
            id,
        },
        created_at_ms: row.get(13)?,
    })
}

// ---- uploaded code ----

/// Store a revision's uploaded code: the archive once per hash (a second upload of the
/// same bytes stores nothing), then the revision's link to it, in the caller's
/// transaction.
pub(crate) async fn attach_code(
    db: &mut dyn Executor,
    tool_id: &str,
    revision: u32,
    code: Option<&NewCode>,
) -> Result<()> {
    let Some(code) = code else {
        return Ok(());
    };
    let archive = base64::engine::general_purpose::STANDARD.encode(&code.archive);
    db.run(
        &sql::INSERT_CODE,
        &[
            code.sha256.as_str().into(),
            (code.archive.len() as i64).into(),
            i64::from(code.files).into(),
            archive.into(),
            now_ms().into(),
        ],
    )
    .await?;
    db.run(
        &sql::INSERT_TOOL_CODE,
        &[tool_id.into(), revision.into(), code.sha256.as_str().into()],
    )
    .await?;
    Ok(())
}

/// The code a revision runs, if it has uploaded code.
pub(crate) async fn code_ref(
    db: &mut dyn Executor,
    tool_id: &str,
    revision: u32,
) -> Result<Option<CodeRef>> {
    let Some(row) = db
        .row(&sql::TOOL_CODE, &[tool_id.into(), revision.into()])
        .await?
    else {
        return Ok(None);
    };
    let size: i64 = row.get(1)?;
    let files: i64 = row.get(2)?;
    Ok(Some(CodeRef {
        sha256: row.get(0)?,
        size_bytes: u64::try_from(size).unwrap_or(0),
        files: u32::try_from(files).unwrap_or(0),
    }))
}

/// A record with its code filled in.
pub(crate) async fn with_code(db: &mut dyn Executor, mut tool: ToolRecord) -> Result<ToolRecord> {
    tool.code = code_ref(db, &tool.id, tool.revision).await?;
    Ok(tool)
}

/// Records with their code filled in.
pub(crate) async fn all_with_code(
    db: &mut dyn Executor,
    tools: Vec<ToolRecord>,
) -> Result<Vec<ToolRecord>> {
    // One read for the whole page (a listing, a tool's versions), not one per record.
    let mut tools = tools;
    if tools.is_empty() {
        return Ok(tools);
    }
    let pairs: Vec<(&str, u32)> = tools.iter().map(|t| (t.id.as_str(), t.revision)).collect();
    let pairs = serde_json::to_string(&pairs)
        .map_err(|e| RegistryError::Backend(format!("cannot encode revision pairs: {e}")))?;
    let mut codes = std::collections::HashMap::new();
    for row in db.rows(&sql::TOOL_CODES, &[pairs.into()]).await? {
        let id: String = row.get(0)?;
        let revision: i64 = row.get(1)?;
        let size: i64 = row.get(3)?;
        let files: i64 = row.get(4)?;
        let code = CodeRef {
            sha256: row.get(2)?,
            size_bytes: u64::try_from(size).unwrap_or(0),
            files: u32::try_from(files).unwrap_or(0),
        };
        codes.insert((id, revision), code);
    }
    for t in &mut tools {
        t.code = codes.remove(&(t.id.clone(), i64::from(t.revision)));
    }
    Ok(tools)
}

/// A stored archive's bytes.
pub(crate) async fn code_archive(db: &mut dyn Executor, sha256: &str) -> Result<Vec<u8>> {
    let row = db
        .row(&sql::CODE_ARCHIVE, &[sha256.into()])
        .await?
        .ok_or_else(|| RegistryError::NotFound {
            what: "code",
            id: sha256.to_owned(),
        })?;
    let text: String = row.get(0)?;
    base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|e| RegistryError::Backend(format!("code {sha256} is corrupt: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_defaults_and_caps() {
        assert_eq!(
            Paging::new(0, 0),
            Paging {
                page: 1,
                per_page: 20
            }
        );
        assert_eq!(Paging::new(3, 10_000).per_page, MAX_PER_PAGE);
        assert_eq!(Paging::new(3, 10).offset(), 20);
        assert_eq!(
            Paging::new(u32::MAX, MAX_PER_PAGE).offset(),
            i64::from(u32::MAX - 1) * 500
        );
    }

    #[test]
    fn prefix_bounds() {
        assert_eq!(prefix_upper_bound("abc").as_deref(), Some("abd"));
        assert_eq!(prefix_upper_bound("").as_deref(), None);
        assert_eq!(
            prefix_upper_bound("a\u{10FFFF}").as_deref(),
            Some("b"),
            "a maximal last character is dropped and the one before incremented"
        );
        assert_eq!(prefix_upper_bound("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_upper_bound("\u{10FFFF}"), None);
    }
}
