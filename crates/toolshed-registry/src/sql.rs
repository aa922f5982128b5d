//! Every statement of the registry, in one place: one text for both dialects where they
//! agree, one each where they differ (row locks, which SQLite does not need: its writes
//! take the file's write lock up front). Placeholders are `?N` (PostgreSQL's `$N` is
//! derived). The rules that use them are in `rules.rs`.
//!
//! Every statement on tools says `status = 'active'` where the partial indexes do, so
//! that both planners use them.

use toolshed_store::Sql;

/// A tool row's columns, in the order `rules::tool_from_row` reads them; the same names in
/// `registry_tools` (with `id`) and `registry_tool_versions` (with `tool_id`).
macro_rules! tool_fields {
    () => {
        "name, description, tool_type, source, status, endpoint, version, revision, \
         definition, created_by, created_at_ms, updated_at_ms, tenant"
    };
}

/// An agent row's columns, in the order `rules::agents_from_rows` reads them.
macro_rules! agent_columns {
    () => {
        "id, name, framework, status, definition, created_by, created_at_ms, updated_at_ms, \
         tenant"
    };
}

/// A user row's columns, in the order `rules::user_from_row` reads them.
macro_rules! user_columns {
    () => {
        "username, password_hash, role, tenant, created_at_ms, token_generation"
    };
}

// ---- tools ----

/// The id and the owning tenant of the active tool with a name.
pub(crate) const ACTIVE_TOOL_ID: Sql =
    Sql::same("SELECT id, tenant FROM registry_tools WHERE name = ?1 AND status = 'active'");

/// The active tool with an id.
pub(crate) const ACTIVE_TOOL: Sql = Sql::same(concat!(
    "SELECT id, ",
    tool_fields!(),
    " FROM registry_tools WHERE id = ?1 AND status = 'active'"
));

/// The active tool with an id, locked until the transaction ends (PostgreSQL).
pub(crate) const ACTIVE_TOOL_FOR_UPDATE: Sql = Sql::per_dialect(
    concat!(
        "SELECT id, ",
        tool_fields!(),
        " FROM registry_tools WHERE id = ?1 AND status = 'active'"
    ),
    concat!(
        "SELECT id, ",
        tool_fields!(),
        " FROM registry_tools WHERE id = ?1 AND status = 'active' FOR UPDATE"
    ),
);

/// The active tool with a name.
pub(crate) const ACTIVE_TOOL_BY_NAME: Sql = Sql::same(concat!(
    "SELECT id, ",
    tool_fields!(),
    " FROM registry_tools WHERE name = ?1 AND status = 'active'"
));

/// Whether a tool is active, locked against deletion until the transaction ends
/// (PostgreSQL), so an agent's edges never point at a tool deleted meanwhile.
pub(crate) const TOOL_IS_ACTIVE_FOR_SHARE: Sql = Sql::per_dialect(
    "SELECT 1 FROM registry_tools WHERE id = ?1 AND status = 'active'",
    "SELECT 1 FROM registry_tools WHERE id = ?1 AND status = 'active' FOR SHARE",
);

/// Register a tool: revision 1, active; nothing when an active tool has the name (a
/// concurrent registration waits for the other's commit, then inserts nothing).
/// ?1 id, ?2 name, ?3 description, ?4 tool_type, ?5 source, ?6 endpoint, ?7 version,
/// ?8 definition, ?9 created_by, ?10 now, ?11 tenant (the owner).
pub(crate) const INSERT_TOOL: Sql = Sql::same(concat!(
    "INSERT INTO registry_tools (id, ",
    tool_fields!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, 1, ?8, ?9, ?10, ?10, ?11) \
     ON CONFLICT (name) WHERE status = 'active' DO NOTHING"
));

/// Replace a tool's current revision: the parameters of [`INSERT_TOOL`] (?11, the
/// tenant, is not written: the owner never changes), then ?12 revision.
pub(crate) const UPDATE_TOOL: Sql = Sql::same(
    "UPDATE registry_tools SET name = ?2, description = ?3, tool_type = ?4, source = ?5, \
     endpoint = ?6, version = ?7, definition = ?8, created_by = ?9, updated_at_ms = ?10, \
     revision = ?12 WHERE id = ?1 AND tenant = ?11",
);

/// Copy a tool's current row into its history.
pub(crate) const SNAPSHOT_VERSION: Sql = Sql::same(concat!(
    "INSERT INTO registry_tool_versions (tool_id, ",
    tool_fields!(),
    ") SELECT id, ",
    tool_fields!(),
    " FROM registry_tools WHERE id = ?1"
));

/// Every revision of a tool, oldest first.
pub(crate) const TOOL_VERSIONS: Sql = Sql::same(concat!(
    "SELECT tool_id, ",
    tool_fields!(),
    " FROM registry_tool_versions WHERE tool_id = ?1 ORDER BY revision"
));

/// Mark a tool deleted. ?1 id, ?2 now.
pub(crate) const DELETE_TOOL: Sql =
    Sql::same("UPDATE registry_tools SET status = 'deleted', updated_at_ms = ?2 WHERE id = ?1");

/// Mark a tool's current revision deleted in its history. ?1 id, ?2 revision, ?3 now.
pub(crate) const DELETE_TOOL_VERSION: Sql = Sql::same(
    "UPDATE registry_tool_versions SET status = 'deleted', updated_at_ms = ?3 \
     WHERE tool_id = ?1 AND revision = ?2",
);

/// The agents using an active tool, by agent name: the tool's row with NULL agent
/// columns when nobody uses it, no row when it is not active (one snapshot).
pub(crate) const TOOL_USAGE: Sql = Sql::same(
    "SELECT a.id, a.name, a.status FROM registry_tools t \
     LEFT JOIN registry_agent_tools e ON e.tool_id = t.id \
     LEFT JOIN registry_agents a ON a.id = e.agent_id \
     WHERE t.id = ?1 AND t.status = 'active' ORDER BY a.name",
);

/// A listing page, around its condition (written twice, with the same placeholders):
/// the page's tools with the total of the filter on every row, from one statement (one
/// snapshot), and one row of NULL tool columns past the end. See `rules::list_tools`.
pub(crate) const TOOL_PAGE_HEAD: &str = "SELECT p.id, p.name, p.description, p.tool_type, \
     p.source, p.status, p.endpoint, p.version, p.revision, p.definition, p.created_by, \
     p.created_at_ms, p.updated_at_ms, p.tenant, t.total \
     FROM (SELECT COUNT(*) AS total FROM registry_tools WHERE ";
/// [`TOOL_PAGE_HEAD`] with NULL for each definition (`ToolFilter::skip_definitions`).
pub(crate) const TOOL_SUMMARY_PAGE_HEAD: &str = "SELECT p.id, p.name, p.description, \
     p.tool_type, p.source, p.status, p.endpoint, p.version, p.revision, NULL, p.created_by, \
     p.created_at_ms, p.updated_at_ms, p.tenant, t.total \
     FROM (SELECT COUNT(*) AS total FROM registry_tools WHERE ";
/// Between the two copies of the condition.
pub(crate) const TOOL_PAGE_JOIN: &str = concat!(
    ") t LEFT JOIN (SELECT id, ",
    tool_fields!(),
    " FROM registry_tools WHERE "
);

// ---- agents ----

/// Register an agent or replace the one with its name (same id, same owner); the id,
/// when it was first registered and its owner. The replacing happens only when the
/// stored agent is in the caller's scope (its owner is ?8, or ?9 is 1: every tenant),
/// checked by the statement that writes, so no concurrent registration gets between a
/// check and the write; out of scope, nothing is written and no row comes back.
/// ?1 new id, ?2 name, ?3 framework, ?4 definition, ?5 created_by, ?6 now, ?7 tenant
/// (the owner of a new agent), ?8 the scope's tenant, ?9 every tenant (1) or not (0).
pub(crate) const UPSERT_AGENT: Sql = Sql::same(concat!(
    "INSERT INTO registry_agents (",
    agent_columns!(),
    ") VALUES (?1, ?2, ?3, 'registered', ?4, ?5, ?6, ?6, ?7) \
     ON CONFLICT (name) DO UPDATE SET framework = excluded.framework, \
     status = excluded.status, definition = excluded.definition, \
     created_by = excluded.created_by, updated_at_ms = excluded.updated_at_ms \
     WHERE registry_agents.tenant = ?8 OR ?9 = 1 \
     RETURNING id, created_at_ms, tenant"
));

/// The owner of the agent with a name.
pub(crate) const AGENT_TENANT: Sql =
    Sql::same("SELECT tenant FROM registry_agents WHERE name = ?1");

/// Remove an agent's edges.
pub(crate) const DELETE_AGENT_EDGES: Sql =
    Sql::same("DELETE FROM registry_agent_tools WHERE agent_id = ?1");

/// Add one edge of the usage graph.
pub(crate) const INSERT_AGENT_EDGE: Sql =
    Sql::same("INSERT INTO registry_agent_tools (agent_id, tool_id) VALUES (?1, ?2)");

/// An agent by id, else by name (an id wins: a name could look like another agent's
/// id), with one row per edge (NULL tool for none), from one snapshot.
pub(crate) const AGENT: Sql = Sql::same(concat!(
    "SELECT a.id, a.name, a.framework, a.status, a.definition, a.created_by, \
     a.created_at_ms, a.updated_at_ms, a.tenant, e.tool_id FROM (SELECT ",
    agent_columns!(),
    " FROM registry_agents WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1) a \
     LEFT JOIN registry_agent_tools e ON e.agent_id = a.id ORDER BY e.tool_id"
));

/// One page of agents by name with their edges and the total, from one snapshot (one
/// row of NULL agent columns past the end). ?1 limit, ?2 offset.
pub(crate) const LIST_AGENTS: Sql = Sql::same(concat!(
    "SELECT a.id, a.name, a.framework, a.status, a.definition, a.created_by, \
     a.created_at_ms, a.updated_at_ms, a.tenant, e.tool_id, t.total FROM \
     (SELECT COUNT(*) AS total FROM registry_agents) t \
     LEFT JOIN (SELECT ",
    agent_columns!(),
    " FROM registry_agents ORDER BY name LIMIT ?1 OFFSET ?2) a ON TRUE \
     LEFT JOIN registry_agent_tools e ON e.agent_id = a.id ORDER BY a.name, e.tool_id"
));

// ---- users ----

/// Add a user unless the name is taken.
/// ?1 username, ?2 password_hash, ?3 role, ?4 tenant, ?5 now, ?6 token generation.
pub(crate) const INSERT_USER: Sql = Sql::same(concat!(
    "INSERT INTO registry_users (",
    user_columns!(),
    ", updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?5) ON CONFLICT (username) DO NOTHING"
));

/// A user by name.
pub(crate) const USER: Sql = Sql::same(concat!(
    "SELECT ",
    user_columns!(),
    " FROM registry_users WHERE username = ?1"
));

/// Every user by name, or those of one tenant. ?1 tenant, ?2 every tenant (1) or not (0).
pub(crate) const USERS: Sql = Sql::same(concat!(
    "SELECT ",
    user_columns!(),
    " FROM registry_users WHERE tenant = ?1 OR ?2 = 1 ORDER BY username"
));

/// A user by name, locked until the transaction ends (PostgreSQL), so what a removal
/// checks (tenant, role) holds when it deletes.
pub(crate) const USER_FOR_UPDATE: Sql = Sql::per_dialect(
    concat!(
        "SELECT ",
        user_columns!(),
        " FROM registry_users WHERE username = ?1"
    ),
    concat!(
        "SELECT ",
        user_columns!(),
        " FROM registry_users WHERE username = ?1 FOR UPDATE"
    ),
);

/// Change a user's hash, role and/or tenant (NULL keeps it), and add ?5 to its token
/// generation (1 when anything changes, which ends every token it had).
/// ?1 username, ?2 hash, ?3 role, ?4 now, ?5 generation step, ?6 tenant.
pub(crate) const UPDATE_USER: Sql = Sql::same(
    "UPDATE registry_users SET password_hash = COALESCE(?2, password_hash), \
     role = COALESCE(?3, role), tenant = COALESCE(?6, tenant), \
     token_generation = token_generation + ?5, updated_at_ms = ?4 WHERE username = ?1",
);

/// Remove a user.
pub(crate) const DELETE_USER: Sql = Sql::same("DELETE FROM registry_users WHERE username = ?1");

/// How many users exist.
pub(crate) const COUNT_USERS: Sql = Sql::same("SELECT COUNT(*) FROM registry_users");

// ---- revoked sessions ----

/// Forget the revoked sessions whose every token has expired. ?1 now.
pub(crate) const PRUNE_REVOKED_SESSIONS: Sql =
    Sql::same("DELETE FROM registry_revoked_sessions WHERE expires_at_ms <= ?1");

/// Revoke a session; revoked again, it keeps the later of the two expiries.
/// ?1 session id, ?2 username, ?3 expires_at_ms.
pub(crate) const REVOKE_SESSION: Sql = Sql::same(
    "INSERT INTO registry_revoked_sessions (session_id, username, expires_at_ms) \
     VALUES (?1, ?2, ?3) ON CONFLICT (session_id) DO UPDATE \
     SET expires_at_ms = excluded.expires_at_ms \
     WHERE excluded.expires_at_ms > registry_revoked_sessions.expires_at_ms",
);

/// A user's revoked sessions whose tokens may still be alive. ?1 username, ?2 now.
pub(crate) const REVOKED_SESSIONS: Sql = Sql::same(
    "SELECT session_id FROM registry_revoked_sessions \
     WHERE username = ?1 AND expires_at_ms > ?2 ORDER BY session_id",
);

// ---- sessions' live refresh tokens ----

/// Forget the sessions whose refresh tokens have all expired. ?1 now.
pub(crate) const PRUNE_SESSIONS: Sql =
    Sql::same("DELETE FROM registry_sessions WHERE expires_at_ms <= ?1");

/// Make a refresh token its session's live one. ?1 session id, ?2 username, ?3 refresh
/// id, ?4 expires_at_ms.
pub(crate) const RECORD_REFRESH: Sql = Sql::same(
    "INSERT INTO registry_sessions (session_id, username, refresh_id, expires_at_ms) \
     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (session_id) DO UPDATE \
     SET refresh_id = excluded.refresh_id, expires_at_ms = excluded.expires_at_ms \
     WHERE registry_sessions.username = excluded.username",
);

/// Spend the live refresh token of a session for the next one: one row when
/// `presented` was live. ?1 next id, ?2 its expires_at_ms, ?3 session id, ?4 username,
/// ?5 presented id.
pub(crate) const ROTATE_REFRESH: Sql = Sql::same(
    "UPDATE registry_sessions SET refresh_id = ?1, expires_at_ms = ?2 \
     WHERE session_id = ?3 AND username = ?4 AND refresh_id = ?5",
);

/// Forget a session's live refresh token. ?1 session id.
pub(crate) const FORGET_SESSION: Sql =
    Sql::same("DELETE FROM registry_sessions WHERE session_id = ?1");

// ---- tenants ----

/// What each tenant in scope owns, one row per tenant and kind: tenant, kind (`users`,
/// `tools`, `agents`, `mcp_servers`), count. ?1 tenant, ?2 every tenant (1) or not (0).
pub(crate) const TENANT_COUNTS: Sql = Sql::same(
    "SELECT tenant, 'users', COUNT(*) FROM registry_users \
     WHERE tenant = ?1 OR ?2 = 1 GROUP BY tenant \
     UNION ALL SELECT tenant, 'tools', COUNT(*) FROM registry_tools \
     WHERE status = 'active' AND (tenant = ?1 OR ?2 = 1) GROUP BY tenant \
     UNION ALL SELECT tenant, 'agents', COUNT(*) FROM registry_agents \
     WHERE tenant = ?1 OR ?2 = 1 GROUP BY tenant \
     UNION ALL SELECT tenant, 'mcp_servers', COUNT(*) FROM registry_mcp_servers \
     WHERE tenant = ?1 OR ?2 = 1 GROUP BY tenant",
);

/// The users who manage the tenants in scope (admins and owners): tenant, username, by
/// name. ?1 tenant, ?2 every tenant (1) or not (0).
pub(crate) const TENANT_ADMINS: Sql = Sql::same(
    "SELECT tenant, username FROM registry_users \
     WHERE (role = 'admin' OR role = 'owner') AND (tenant = ?1 OR ?2 = 1) ORDER BY username",
);

// ---- settings ----

/// A setting's value.
pub(crate) const SETTING: Sql = Sql::same("SELECT value FROM registry_settings WHERE key = ?1");

/// Store a setting unless one is stored (a concurrent first caller waits for the
/// other's commit on the key, then does nothing).
pub(crate) const INIT_SETTING: Sql = Sql::same(
    "INSERT INTO registry_settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
);

// ---- sandbox executions ----

/// A sandbox execution row's columns, in the order `rules::execution_from_row` reads them.
macro_rules! execution_columns {
    () => {
        "id, tenant, created_by, tool_id, language, code_sha256, code_bytes, input, \
         input_bytes, exit_code, timed_out, duration_ms, result, created_at_ms"
    };
}

/// Record an execution. ?1..?14 in the order of `execution_columns!`.
pub(crate) const INSERT_EXECUTION: Sql = Sql::same(concat!(
    "INSERT INTO registry_sandbox_executions (",
    execution_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
));

/// An execution of a tenant. ?1 id, ?2 tenant.
pub(crate) const EXECUTION: Sql = Sql::same(concat!(
    "SELECT ",
    execution_columns!(),
    " FROM registry_sandbox_executions WHERE id = ?1 AND tenant = ?2"
));

/// One page of a tenant's executions, newest first, each row with the tenant's total
/// (one row of NULLs and the total when the page is empty). ?1 tenant, ?2 limit, ?3 offset.
pub(crate) const LIST_EXECUTIONS: Sql = Sql::same(concat!(
    "SELECT e.*, t.total FROM \
     (SELECT COUNT(*) AS total FROM registry_sandbox_executions WHERE tenant = ?1) t \
     LEFT JOIN (SELECT ",
    execution_columns!(),
    " FROM registry_sandbox_executions WHERE tenant = ?1 \
     ORDER BY created_at_ms DESC, id DESC LIMIT ?2 OFFSET ?3) e ON TRUE \
     ORDER BY e.created_at_ms DESC, e.id DESC"
));

// ---- uploaded code ----

/// Store an archive under its hash unless one is stored. ?1 sha256, ?2 size, ?3 files,
/// ?4 archive (base64), ?5 now.
pub(crate) const INSERT_CODE: Sql = Sql::same(
    "INSERT INTO registry_code (sha256, size_bytes, files, archive, created_at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (sha256) DO NOTHING",
);

/// Attach an archive to a revision. ?1 tool id, ?2 revision, ?3 sha256.
pub(crate) const INSERT_TOOL_CODE: Sql =
    Sql::same("INSERT INTO registry_tool_code (tool_id, revision, sha256) VALUES (?1, ?2, ?3)");

/// The code of a revision: hash, size, files. ?1 tool id, ?2 revision.
pub(crate) const TOOL_CODE: Sql = Sql::same(
    "SELECT c.sha256, c.size_bytes, c.files FROM registry_tool_code t \
     JOIN registry_code c ON c.sha256 = t.sha256 WHERE t.tool_id = ?1 AND t.revision = ?2",
);

/// The code of several revisions in one read: ?1 a JSON array of `[tool_id, revision]`
/// pairs; each row is tool id, revision, hash, size, files (revisions without code have
/// no row).
pub(crate) const TOOL_CODES: Sql = Sql::per_dialect(
    "SELECT t.tool_id, t.revision, c.sha256, c.size_bytes, c.files \
     FROM json_each(?1) j \
     JOIN registry_tool_code t ON t.tool_id = json_extract(j.value, '$[0]') \
         AND t.revision = json_extract(j.value, '$[1]') \
     JOIN registry_code c ON c.sha256 = t.sha256",
    "SELECT t.tool_id, t.revision, c.sha256, c.size_bytes, c.files \
     FROM jsonb_array_elements(CAST(?1 AS TEXT)::jsonb) j \
     JOIN registry_tool_code t ON t.tool_id = j->>0 AND t.revision = (j->>1)::bigint \
     JOIN registry_code c ON c.sha256 = t.sha256",
);

/// An archive by hash. ?1 sha256.
pub(crate) const CODE_ARCHIVE: Sql =
    Sql::same("SELECT archive FROM registry_code WHERE sha256 = ?1");

// ---- MCP servers ----

/// An MCP server row's stored columns, in the order `mcp_rules::server_from_row` reads
/// them (then [`MCP_PENDING_COUNT`]).
macro_rules! mcp_columns {
    () => {
        "id, tenant, name, spec, transport, endpoint, description, tags, team, enabled, \
         source, overrides, status, tool_count, last_ping_at_ms, last_error, revision, \
         created_by, created_at_ms, updated_at_ms, auto_accept"
    };
}

/// The columns a read selects: the stored ones and how many of the server's tools have
/// a change waiting.
macro_rules! mcp_select {
    () => {
        concat!(
            mcp_columns!(),
            ", (SELECT COUNT(*) FROM registry_mcp_server_tools p \
             WHERE p.server_id = registry_mcp_servers.id AND p.pending IS NOT NULL) AS pending_count"
        )
    };
}

/// Where a row's pending count is (after the stored columns).
pub(crate) const MCP_PENDING_COUNT: usize = 21;

/// Register a server; nothing when its tenant has one of the name. ?1..?21 in the order
/// of `mcp_columns!`.
pub(crate) const INSERT_MCP_SERVER: Sql = Sql::same(concat!(
    "INSERT INTO registry_mcp_servers (",
    mcp_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
     ?18, ?19, ?20, ?21) ON CONFLICT (tenant, name) DO NOTHING"
));

/// A server by id, in scope. ?1 id, ?2 tenant, ?3 every tenant (1) or not (0).
pub(crate) const MCP_SERVER: Sql = Sql::same(concat!(
    "SELECT ",
    mcp_select!(),
    " FROM registry_mcp_servers WHERE id = ?1 AND (tenant = ?2 OR ?3 = 1)"
));

/// [`MCP_SERVER`], locked until the transaction ends (PostgreSQL).
pub(crate) const MCP_SERVER_FOR_UPDATE: Sql = Sql::per_dialect(
    concat!(
        "SELECT ",
        mcp_select!(),
        " FROM registry_mcp_servers WHERE id = ?1 AND (tenant = ?2 OR ?3 = 1)"
    ),
    concat!(
        "SELECT ",
        mcp_select!(),
        " FROM registry_mcp_servers WHERE id = ?1 AND (tenant = ?2 OR ?3 = 1) FOR UPDATE"
    ),
);

/// A tenant's server by name. ?1 tenant, ?2 name.
pub(crate) const MCP_SERVER_BY_NAME: Sql = Sql::same(concat!(
    "SELECT ",
    mcp_select!(),
    " FROM registry_mcp_servers WHERE tenant = ?1 AND name = ?2"
));

/// One page of the servers in scope by name, each row with the scope's total (one row
/// of NULLs and the total when the page is empty). ?1 tenant, ?2 every tenant (1) or
/// not (0), ?3 limit, ?4 offset.
pub(crate) const LIST_MCP_SERVERS: Sql = Sql::same(concat!(
    "SELECT s.*, t.total FROM \
     (SELECT COUNT(*) AS total FROM registry_mcp_servers WHERE tenant = ?1 OR ?2 = 1) t \
     LEFT JOIN (SELECT ",
    mcp_select!(),
    " FROM registry_mcp_servers WHERE tenant = ?1 OR ?2 = 1 \
     ORDER BY name, tenant LIMIT ?3 OFFSET ?4) s ON TRUE \
     ORDER BY s.name, s.tenant"
));

/// Replace a server's registration (its tenant, status and counts are kept).
/// ?1 id, ?2 name, ?3 spec, ?4 transport, ?5 endpoint, ?6 description, ?7 tags, ?8 team,
/// ?9 enabled, ?10 source, ?11 overrides, ?12 created_by, ?13 now, ?14 revision,
/// ?15 auto_accept.
pub(crate) const UPDATE_MCP_SERVER: Sql = Sql::same(
    "UPDATE registry_mcp_servers SET name = ?2, spec = ?3, transport = ?4, endpoint = ?5, \
     description = ?6, tags = ?7, team = ?8, enabled = ?9, source = ?10, overrides = ?11, \
     created_by = ?12, updated_at_ms = ?13, revision = ?14, auto_accept = ?15 WHERE id = ?1",
);

/// What a test or discover saw. ?1 id, ?2 status, ?3 last error, ?4 ping time (NULL
/// keeps the last one).
pub(crate) const MCP_SERVER_STATUS: Sql = Sql::same(
    "UPDATE registry_mcp_servers SET status = ?2, last_error = ?3, \
     last_ping_at_ms = COALESCE(?4, last_ping_at_ms) WHERE id = ?1",
);

/// Set a server's tool count. ?1 id, ?2 count.
pub(crate) const MCP_SERVER_TOOL_COUNT: Sql =
    Sql::same("UPDATE registry_mcp_servers SET tool_count = ?2 WHERE id = ?1");

/// Remove a server (its tool links first).
pub(crate) const DELETE_MCP_SERVER: Sql =
    Sql::same("DELETE FROM registry_mcp_servers WHERE id = ?1");

/// The ids of the tools linked to a server.
pub(crate) const MCP_SERVER_TOOL_IDS: Sql = Sql::same(
    "SELECT tool_id FROM registry_mcp_server_tools WHERE server_id = ?1 ORDER BY tool_id",
);

/// The links of a server's tools: tool id, what its server sent when last accepted,
/// the change waiting (if any) and since when. ?1 server id.
pub(crate) const MCP_SERVER_TOOL_LINKS: Sql = Sql::same(
    "SELECT tool_id, accepted, pending, pending_at_ms FROM registry_mcp_server_tools \
     WHERE server_id = ?1 ORDER BY tool_id",
);

/// Link a tool to a server, accepting what its server sent. ?1 server id, ?2 tool id,
/// ?3 what the server sent.
pub(crate) const LINK_MCP_TOOL: Sql = Sql::same(
    "INSERT INTO registry_mcp_server_tools (server_id, tool_id, accepted) VALUES (?1, ?2, ?3) \
     ON CONFLICT (server_id, tool_id) DO NOTHING",
);

/// Accept what a tool's server sent: no change waits any more. ?1 server id, ?2 tool
/// id, ?3 what the server sent.
pub(crate) const ACCEPT_MCP_TOOL: Sql = Sql::same(
    "UPDATE registry_mcp_server_tools SET accepted = ?3, pending = NULL, pending_at_ms = NULL \
     WHERE server_id = ?1 AND tool_id = ?2",
);

/// Hold a changed definition back until an admin accepts it. ?1 server id, ?2 tool id,
/// ?3 what the server sent now, ?4 since when.
pub(crate) const HOLD_MCP_TOOL: Sql = Sql::same(
    "UPDATE registry_mcp_server_tools SET pending = ?3, pending_at_ms = ?4 \
     WHERE server_id = ?1 AND tool_id = ?2",
);

/// Unlink a tool from a server. ?1 server id, ?2 tool id.
pub(crate) const UNLINK_MCP_TOOL: Sql =
    Sql::same("DELETE FROM registry_mcp_server_tools WHERE server_id = ?1 AND tool_id = ?2");
