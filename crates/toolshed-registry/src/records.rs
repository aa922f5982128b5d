//! The registry's records: what is stored and what callers pass in.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshed_auth::Role;

toolshed_core::wire_enum! {
    case = "snake_case";
    /// A tool's state in the registry.
    pub enum ToolStatus {
        /// Listed and runnable.
        Active,
        /// Deleted: no longer listed or runnable by id or name; its versions are kept.
        Deleted,
    }
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// An agent's state in the registry.
    pub enum AgentStatus {
        /// Registered from its agent.yaml (deployment states come later).
        Registered,
    }
}

/// What registering (or updating) a tool stores. The caller has validated
/// `definition` (a `tool.yaml` as JSON, see `toolshed_core::ToolFile`); the other
/// fields are copies of its parts kept in columns for listing and filtering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewTool {
    /// The tool name (unique among active tools).
    pub name: String,
    /// What it does.
    pub description: String,
    /// `function`, `mcp` or `api`.
    pub tool_type: String,
    /// Where the registration came from: `manual`, `cli`, `stdlib`, `scan`, …
    pub source: String,
    /// The dispatch endpoint (`builtin:…`, `python:…`, …), if any.
    pub endpoint: Option<String>,
    /// The tool's own version label (`1.0.0`), if given.
    pub version: Option<String>,
    /// The whole definition (`ToolFile` as JSON).
    pub definition: Value,
    /// Who registered it (a user name).
    pub created_by: String,
    /// The tenant of the user registering it: the owner of a new tool. An update keeps
    /// the stored owner (it never changes); who may make it is [`TenantScope`]'s rule.
    pub tenant: String,
    /// The uploaded code this revision runs, if any (its endpoint then names a file
    /// inside it).
    #[serde(default)]
    pub code: Option<NewCode>,
}

/// Uploaded code to store with a revision: the archive (checked by the caller) and its
/// content address. An archive already stored under the hash is not stored again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewCode {
    /// The SHA-256 of `archive` (hex).
    pub sha256: String,
    /// How many files the archive holds.
    pub files: u32,
    /// The archive's bytes.
    pub archive: Vec<u8>,
}

impl NewCode {
    /// What a record says of this code.
    pub fn reference(&self) -> CodeRef {
        CodeRef {
            sha256: self.sha256.clone(),
            size_bytes: self.archive.len() as u64,
            files: self.files,
        }
    }
}

/// The code a revision runs: its hash, size and file count (the archive itself is read
/// with `RegistryStore::code_archive`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeRef {
    /// The SHA-256 of the archive (hex).
    pub sha256: String,
    /// The archive's size in bytes.
    pub size_bytes: u64,
    /// How many files it holds.
    pub files: u32,
}

/// Whose tools, agents and users a change may touch: one tenant's (an admin's, a
/// deployer's), or every tenant's (the organisation's owner). The store checks it in
/// the transaction that writes, so no race gets past it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TenantScope {
    /// Only what this tenant owns.
    Tenant(String),
    /// What every tenant owns.
    All,
}

impl TenantScope {
    /// Whether something owned by `owner` is in scope.
    pub fn allows(&self, owner: &str) -> bool {
        match self {
            TenantScope::Tenant(t) => t == owner,
            TenantScope::All => true,
        }
    }

    /// The tenant, or `None` for every tenant.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            TenantScope::Tenant(t) => Some(t),
            TenantScope::All => None,
        }
    }
}

/// A tool as stored: the current revision, or one of its earlier ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRecord {
    /// The tool id (a UUID), the same for every revision.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// `function`, `mcp` or `api`.
    pub tool_type: String,
    /// Where the registration came from.
    pub source: String,
    /// Active or deleted.
    pub status: ToolStatus,
    /// The dispatch endpoint.
    pub endpoint: Option<String>,
    /// The tool's own version label.
    pub version: Option<String>,
    /// The registry revision: 1 when registered, +1 on every update.
    pub revision: u32,
    /// The whole definition.
    pub definition: Value,
    /// Who registered (or last updated) it.
    pub created_by: String,
    /// The tenant that owns it (its first registrant's; `default` for tools registered
    /// before tools had owners).
    pub tenant: String,
    /// When the tool was first registered (milliseconds since the Unix epoch).
    pub created_at_ms: i64,
    /// When this revision was written (milliseconds since the Unix epoch).
    pub updated_at_ms: i64,
    /// The uploaded code this revision runs, if any.
    #[serde(default)]
    pub code: Option<CodeRef>,
}

/// Which tools to list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolFilter {
    /// Only this `tool_type`.
    pub tool_type: Option<String>,
    /// Only this `source`.
    pub source: Option<String>,
    /// Only names starting with this text.
    pub name_prefix: Option<String>,
    /// Only tools whose name or description contains this text, ignoring ASCII case.
    pub search: Option<String>,
    /// Only tools owned by this tenant.
    pub tenant: Option<String>,
    /// Only tools in this state (default: [`ToolStatus::Active`]; deleted tools are
    /// listed only when asked for).
    pub status: Option<ToolStatus>,
    /// The page, from 1 (0 is read as 1).
    pub page: u32,
    /// Items per page (0 means 20; at most [`MAX_PER_PAGE`]).
    pub per_page: u32,
    /// Leave out each tool's definition: every record's `definition` is `null`. For
    /// listings that show only the other fields (the REST listing's summaries), where
    /// reading and parsing the definitions was about a fifth of a page's cost.
    pub skip_definitions: bool,
}

/// The largest page a listing returns.
pub const MAX_PER_PAGE: u32 = 500;

/// One page of a listing, ordered by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The page number, from 1.
    pub page: u32,
    /// Items per page as applied.
    pub per_page: u32,
    /// How many items match the filter in all.
    pub total: u64,
}

/// What registering an agent stores. Registering a name again replaces the agent's
/// definition and its edges in the usage graph (same id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAgent {
    /// The agent name (unique).
    pub name: String,
    /// The framework named in agent.yaml.
    pub framework: String,
    /// The whole agent.yaml as JSON.
    pub definition: Value,
    /// The ids of the registry tools the agent uses (the usage graph's edges).
    pub tool_ids: Vec<String>,
    /// Who registered it.
    pub created_by: String,
    /// The tenant of the user registering it: the owner of a new agent (a registration
    /// over an existing agent keeps its owner).
    pub tenant: String,
}

/// An agent as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The agent id (a UUID).
    pub id: String,
    /// The agent name.
    pub name: String,
    /// The framework.
    pub framework: String,
    /// Its state.
    pub status: AgentStatus,
    /// The whole agent.yaml as JSON.
    pub definition: Value,
    /// The ids of the registry tools it uses, sorted.
    pub tool_ids: Vec<String>,
    /// Who registered it (last).
    pub created_by: String,
    /// The tenant that owns it (its first registrant's; `default` for agents registered
    /// before agents had owners).
    pub tenant: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
}

/// One agent using a tool (the seed's usage answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolUsage {
    /// The agent id.
    pub agent_id: String,
    /// The agent name.
    pub agent_name: String,
    /// The agent's state.
    pub agent_status: AgentStatus,
}

/// What adding a user stores. `Debug` prints the hash as `***`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewUser {
    /// The user name (unique).
    pub username: String,
    /// The argon2 PHC string (never the password).
    pub password_hash: String,
    /// What the user may do.
    pub role: Role,
    /// The tenant the user's runs belong to.
    pub tenant: String,
}

impl std::fmt::Debug for NewUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewUser")
            .field("username", &self.username)
            .field("password_hash", &"***")
            .field("role", &self.role)
            .field("tenant", &self.tenant)
            .finish()
    }
}

/// A user as stored. `Debug` prints the hash as `***`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    /// The user name.
    pub username: String,
    /// The argon2 PHC string.
    #[serde(skip_serializing, default)]
    pub password_hash: String,
    /// What the user may do.
    pub role: Role,
    /// The tenant.
    pub tenant: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// The generation every token of this user carries: bumped by every change of its
    /// password, role or tenant, so the server refuses the tokens issued before.
    pub token_generation: i64,
}

/// What [`RegistryStore::update_user`](crate::RegistryStore::update_user) changes:
/// `None` keeps a field. Any change bumps the user's token generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserChange {
    /// A new argon2 PHC string.
    pub password_hash: Option<String>,
    /// A new role.
    pub role: Option<Role>,
    /// A new tenant.
    pub tenant: Option<String>,
}

impl UserChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.password_hash.is_none() && self.role.is_none() && self.tenant.is_none()
    }
}

impl std::fmt::Debug for UserRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserRecord")
            .field("username", &self.username)
            .field("password_hash", &"***")
            .field("role", &self.role)
            .field("tenant", &self.tenant)
            .field("created_at_ms", &self.created_at_ms)
            .finish()
    }
}

/// A session ended by a logout: the tokens carrying its id are refused until
/// `expires_at_ms`, when every one of them has expired anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedSession {
    /// The session id its tokens carry (`Claims::sid` of toolshed-auth).
    pub session_id: String,
    /// The user it belongs to (the refusal is read with the user's token generation).
    pub username: String,
    /// When its last token expires, in milliseconds since the Unix epoch; the row is
    /// pruned after that.
    pub expires_at_ms: i64,
}

/// A session's live refresh token ([`crate::RegistryStore::record_refresh`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRefresh {
    /// The session id its tokens carry (`Claims::sid` of toolshed-auth).
    pub session_id: String,
    /// The user it belongs to.
    pub username: String,
    /// The refresh token's own id (`Claims::jti`).
    pub refresh_id: String,
    /// When the refresh token expires, in milliseconds since the Unix epoch.
    pub expires_at_ms: i64,
}

/// A refresh token presented for new tokens ([`crate::RegistryStore::spend_refresh`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendRefresh {
    /// The session id the presented token carries.
    pub session_id: String,
    /// The user it belongs to.
    pub username: String,
    /// The presented refresh token's id.
    pub presented: String,
    /// The id of the refresh token issued in its place.
    pub next: String,
    /// When the next refresh token expires, in milliseconds since the Unix epoch.
    pub expires_at_ms: i64,
    /// Until when the session is revoked if it ends (every one of its tokens has
    /// expired by then), in milliseconds since the Unix epoch.
    pub revoked_until_ms: i64,
}

/// What spending a refresh token did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefreshSpent {
    /// It was the session's live refresh token; the next one is live now.
    Rotated,
    /// It was spent already, or its session is not known: the session is ended.
    SessionEnded,
}

/// A tenant as the registry knows it: a name that owns users, tools, agents and MCP
/// server entries. It has no row of its own: it exists while something belongs to it
/// (a user's `tenant`, a tool's or agent's owner), so it is read, never created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// The tenant's name.
    pub name: String,
    /// How many users it has.
    pub users: u64,
    /// Its users who manage it (the admin and owner roles), by name.
    pub admins: Vec<String>,
    /// How many active tools it owns.
    pub tools: u64,
    /// How many agents it owns.
    pub agents: u64,
    /// How many MCP server entries it has.
    pub mcp_servers: u64,
}

/// One run of the sandbox's execute route, as recorded: who ran what on which input, and
/// the answer it got. The code itself is not kept (it may embed keys), only its SHA-256
/// and size; the input is kept up to the server's cap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewSandboxExecution {
    /// The execution id (a UUID), the answer's `execution_id`.
    pub id: String,
    /// The tenant of the caller; lookups are scoped to it.
    pub tenant: String,
    /// Who ran it (a user name).
    pub created_by: String,
    /// The registry tool it ran or was a test of, if any.
    pub tool_id: Option<String>,
    /// `python`, `node`, `bash` or `exec`.
    pub language: String,
    /// SHA-256 of the code that ran (hex).
    pub code_sha256: String,
    /// Size of the code in bytes.
    pub code_bytes: u64,
    /// The input, or `None` when it was larger than the cap.
    pub input: Option<Value>,
    /// Size of the input as JSON, in bytes.
    pub input_bytes: u64,
    /// The exit code, if the process exited.
    pub exit_code: Option<i32>,
    /// Whether it ran out of time.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// The answer as given (stdout and stderr capped).
    pub result: Value,
}

/// A recorded sandbox execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxExecutionRecord {
    /// What was recorded.
    #[serde(flatten)]
    pub execution: NewSandboxExecution,
    /// When (milliseconds since the Unix epoch).
    pub created_at_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_a_password_hash() {
        let hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA";
        let new = NewUser {
            username: "ann".into(),
            password_hash: hash.into(),
            role: Role::Admin,
            tenant: "acme".into(),
        };
        let stored = UserRecord {
            username: "ann".into(),
            password_hash: hash.into(),
            role: Role::Admin,
            tenant: "acme".into(),
            created_at_ms: 1,
            token_generation: 7,
        };
        for text in [format!("{new:?}"), format!("{stored:#?}")] {
            assert!(!text.contains("argon2"), "{text}");
            assert!(text.contains("***") && text.contains("acme"), "{text}");
        }
    }
}
