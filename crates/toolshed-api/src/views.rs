//! The resources the API answers with: tools, agents, users, runs and their calls,
//! executions. Statuses are enums, a tool's error result is core's `ToolError`, a gate
//! is a [`Gate`]: a client reads fields, never keys of untyped JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshed_core::{Principal, ToolError};
use utoipa::ToSchema;

toolshed_core::wire_enum! {
    case = "snake_case";
    /// A registered tool's status.
    #[derive(ToSchema)]
    pub enum ToolStatus {
        /// Listed and runnable.
        Active,
        /// Deleted: no longer listed or runnable; its revisions are kept.
        Deleted,
    }
}

/// A registered tool (listing form: no schemas).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolSummary {
    /// The tool id (UUID).
    pub id: String,
    /// The name agents and `tools/<name>` refs use.
    pub name: String,
    /// What it does.
    pub description: String,
    /// `function`, `mcp` or `api`.
    pub tool_type: String,
    /// `active` (deleted tools are not listed; their revisions show `deleted`).
    pub status: ToolStatus,
    /// Where the registration came from (`manual`, `cli`, `stdlib`, …).
    pub source: String,
    /// How it runs: `builtin:`, `python:`, `node:`, `exec:` or `http(s)://`.
    pub endpoint: Option<String>,
    /// The tool's own version label.
    pub version: Option<String>,
    /// The registry revision (1, then +1 per update).
    pub revision: u32,
    /// The tenant that owns it (its first registrant's): only that tenant's users (or
    /// the organisation's owner) may update or delete it. Everyone reads and executes it.
    pub tenant: String,
    /// When it was registered.
    pub created_at: String,
    /// When this revision was written.
    pub updated_at: String,
    /// Characters in its description, title or schemas that a reader does not see or
    /// that act on a terminal (zero-width, tag, bidirectional, control, escape): what a
    /// model reads but a person reviewing the tool would miss. Empty for most tools.
    /// Human surfaces (the CLI, the console) show such characters escaped.
    #[serde(default)]
    pub hidden_characters: Vec<HiddenCharactersView>,
}

/// Characters of one kind a reader does not see, found in one field of a tool's
/// definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HiddenCharactersView {
    /// Where: `description`, `title`, or a JSON pointer into a schema, e.g.
    /// `input_schema/properties/path/description`.
    pub field: String,
    /// `zero_width`, `tag`, `bidi`, `control` or `escape`.
    pub kind: String,
    /// How many.
    pub count: usize,
}

/// A registered tool with its schemas and whole definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: ToolSummary,
    /// The input JSON Schema.
    #[schema(value_type = Object)]
    pub schema_definition: Value,
    /// The output JSON Schema, if declared (null otherwise).
    #[schema(value_type = Option<Object>, nullable)]
    pub output_schema: Value,
    /// The whole definition, in `tool.yaml` form.
    #[schema(value_type = Object)]
    pub definition: Value,
    /// Who registered (or last updated) it.
    pub created_by: String,
    /// The uploaded code this revision runs (null for a built-in, HTTP or host-path
    /// tool); fetch it with `GET /api/v1/registry/tools/{id}/code`.
    #[serde(default)]
    pub code: Option<CodeView>,
}

/// The uploaded code of a tool revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeView {
    /// The SHA-256 of the code's archive (hex): its content address.
    pub sha256: String,
    /// The archive's size in bytes.
    pub size_bytes: u64,
    /// How many files it holds.
    pub files: u32,
}

/// A revision's code, to download: the archive (base64 of an uncompressed tar) and
/// what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeDownload {
    /// The tool id.
    pub tool_id: String,
    /// The revision whose code this is.
    pub revision: u32,
    /// Its hash, size and file count.
    #[serde(flatten)]
    pub code: CodeView,
    /// The files' paths inside the archive, sorted.
    pub paths: Vec<String>,
    /// The archive, base64 (standard alphabet, padded).
    pub archive_base64: String,
}

/// One agent using a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageView {
    /// The agent id.
    pub agent_id: String,
    /// The agent name.
    pub agent_name: String,
    /// The agent's state.
    pub agent_status: AgentStatus,
}

/// An agent's state in the registry.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, strum::Display,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AgentStatus {
    /// Registered from its agent.yaml.
    Registered,
}

/// What a user may do: a viewer reads, a deployer also registers and executes tools
/// and decides approvals, an admin also manages its tenant's users, an owner manages
/// every tenant.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    ToSchema,
    strum::Display,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// Reads the registry and its tenant's runs.
    Viewer,
    /// Also registers and executes tools and decides approvals.
    Deployer,
    /// Also manages the users of its own tenant.
    Admin,
    /// The organisation's role: manages every tenant's users, tools and agents.
    Owner,
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// Where an execution ended.
    #[derive(ToSchema)]
    pub enum ExecuteStatus {
        /// The call has its result (see `error` for a tool failure).
        Completed,
        /// The call waits for an approval or an answer.
        Parked,
    }
}

/// What a parked call waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Gate {
    /// An approval of the call with its args.
    Approval {
        /// Why the gate applies (`always`, or the predicate's text).
        reason: String,
        /// The tool revision the approval is asked for (`4@sha256:…` for a registry
        /// tool's revision 4); an approval runs only against it. Null for gates recorded
        /// before revisions were kept.
        #[serde(default)]
        revision: Option<String>,
        /// Four-eyes (the tool's `approval.four_eyes`): whoever asked may not approve.
        #[serde(default)]
        four_eyes: bool,
        /// Who asked for the call (the run's principal), if known.
        #[serde(default)]
        requested_by: Option<String>,
        /// When it was asked (milliseconds since the Unix epoch), if known.
        #[serde(default)]
        requested_at_ms: Option<i64>,
        /// Earlier approvals that no longer hold (given for a revision the tool left),
        /// oldest first.
        #[serde(default)]
        superseded: Vec<Decision>,
    },
    /// A human tool's answer, which must match this schema.
    Answer {
        /// The answer's JSON Schema.
        #[schema(value_type = Object)]
        schema: Value,
    },
}

/// What executing a tool answers (the seed's shape, plus the run it was recorded in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecuteView {
    /// `completed`, or `parked` when the call waits for an approval or an answer.
    pub status: ExecuteStatus,
    /// The tool's result (null on error or when parked).
    #[schema(value_type = Value)]
    pub output: Value,
    /// Protocol lines the tool's process printed (subprocess tools).
    pub stdout: String,
    /// What the tool's process printed to stderr (its tail when long).
    pub stderr: String,
    /// The exit code of a one-shot process; null for pooled workers, built-ins and HTTP.
    pub exit_code: Option<i32>,
    /// The signal that ended the process (9 when it was killed), or null.
    #[serde(default)]
    pub signal: Option<i32>,
    /// The call ran out of time and was stopped (`error.code` is then `TIMEOUT`).
    #[serde(default)]
    pub timed_out: bool,
    /// `stdout` holds only the end of what the process printed.
    #[serde(default)]
    pub stdout_truncated: bool,
    /// `stderr` holds only the end of what the process printed.
    #[serde(default)]
    pub stderr_truncated: bool,
    /// Wall time of the call in milliseconds.
    pub duration_ms: f64,
    /// The tool's error result, or null.
    #[schema(value_type = Option<crate::schema::ToolErrorSchema>, nullable)]
    pub error: Option<ToolError>,
    /// The run recording this execution (`GET /api/v1/runs/{id}`).
    pub run_id: String,
    /// The call's id (approve, deny or answer by it when parked).
    pub call_id: Option<String>,
    /// What a parked call waits for; null otherwise.
    pub gate: Option<Gate>,
}

/// A registered agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentView {
    /// The agent id (UUID).
    pub id: String,
    /// The agent name.
    pub name: String,
    /// The framework.
    pub framework: String,
    /// Its state.
    pub status: AgentStatus,
    /// The tenant that owns it (its first registrant's): only that tenant's users (or
    /// the organisation's owner) may register it again.
    pub tenant: String,
    /// The registry tools it uses (the usage graph's edges).
    pub tool_ids: Vec<String>,
    /// Its agent.yaml as JSON.
    #[schema(value_type = Object)]
    pub definition: Value,
    /// Who registered it.
    pub created_by: String,
    /// When it was first registered.
    pub created_at: String,
    /// When it was last registered.
    pub updated_at: String,
}

/// A user (never the password hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserView {
    /// The user name.
    pub username: String,
    /// What the user may do.
    pub role: Role,
    /// The tenant whose runs the user sees.
    pub tenant: String,
    /// When the user was added.
    pub created_at: String,
}

/// A removed user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeletedUser {
    /// The user name.
    pub username: String,
    /// Always true.
    pub deleted: bool,
}

/// A logout's answer: the session's tokens (access and refresh, of the login and of
/// every refresh after it) are refused from now on; the user's other sessions go on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LoggedOut {
    /// Always true.
    pub logged_out: bool,
    /// Whether a session was ended server-side (false when the request carried no
    /// valid session token: nothing was left to end).
    pub session_ended: bool,
}

/// A tenant: a name that users, tools, agents and MCP server entries belong to, with
/// what it owns and who manages it. Tenants have no record of their own: one exists
/// while something belongs to it (a tenant's first user is added with
/// `POST /api/v1/users` and `tenant`, by an organisation owner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TenantView {
    /// The tenant's name.
    pub name: String,
    /// How many users it has.
    pub users: u64,
    /// Its users with the admin or owner role, by name.
    pub admins: Vec<String>,
    /// How many active registry tools it owns.
    pub tools: u64,
    /// How many registry agents it owns.
    pub agents: u64,
    /// How many MCP server entries it has.
    pub mcp_servers: u64,
}

/// A login's (or a refresh's, or a password change's) answer: a short-lived access
/// token and the refresh token that buys the next one. `Debug` prints the tokens as `***`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenView {
    /// The bearer token (a JWT) to send as `Authorization: Bearer`.
    pub token: String,
    /// The same token, under the name AgentBreeder's CLI reads.
    pub access_token: String,
    /// Always `bearer`.
    pub token_type: String,
    /// Seconds until the access token expires.
    pub expires_in: u64,
    /// Exchanged at `POST /api/v1/auth/refresh` for a new access token; refused there
    /// once the user is deleted or changed.
    pub refresh_token: String,
    /// Seconds until the refresh token expires.
    pub refresh_expires_in: u64,
    /// The user's role.
    pub role: Role,
}

/// The caller, as `GET /api/v1/auth/me` answers: toolshed's names, and the names
/// AgentBreeder's CLI reads (`email`, `name`, `id` are the user name, `team` the
/// tenant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MeView {
    /// The user name.
    pub username: String,
    /// What the user may do.
    pub role: Role,
    /// The tenant whose runs the user sees.
    pub tenant: String,
    /// When the user was added.
    pub created_at: String,
    /// When the token sent expires (RFC 3339).
    pub token_expires_at: String,
    /// The user name (AgentBreeder's `email`).
    pub email: String,
    /// The user name (AgentBreeder's `name`).
    pub name: String,
    /// The user name (AgentBreeder's `id`).
    pub id: String,
    /// The tenant (AgentBreeder's `team`).
    pub team: String,
    /// Always false: toolshed does not force a password change at login.
    pub must_change_password: bool,
}

impl std::fmt::Debug for TokenView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenView")
            .field("token", &"***")
            .field("access_token", &"***")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("refresh_token", &"***")
            .field("refresh_expires_in", &self.refresh_expires_in)
            .field("role", &self.role)
            .finish()
    }
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// A run's status.
    #[derive(ToSchema)]
    pub enum RunStatus {
        /// A driver is (or was, until it crashed) executing it.
        Running,
        /// Waiting for a person.
        Parked,
        /// Every call has a result.
        Completed,
        /// A runtime failure or a spent budget (`error` says which).
        Failed,
        /// Cancelled by someone.
        Cancelled,
    }
}

/// A run's budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Budgets {
    /// How many times a driver may start the run after a crash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts_per_task: Option<u32>,
    /// Wall-clock minutes from creation, parked time included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_clock_min: Option<u32>,
}

/// A run in the list of `GET /api/v1/runs`: the run, and how many of its calls ended
/// in an error (a tool's error result leaves its run `completed`, so the run's status
/// alone does not show it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunSummary {
    /// The run (without its calls and crumbs: `GET /api/v1/runs/{id}` has them).
    #[serde(flatten)]
    pub run: RunView,
    /// How many of its calls ended in an error result (a denial included).
    pub calls_failed: u32,
}

/// A run, as the journal records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    /// The run id.
    pub id: String,
    /// The agent (`registry` for runs of the execute route).
    pub agent_id: String,
    /// The session.
    pub session_id: String,
    /// Who the run acts for.
    #[schema(value_type = Option<crate::schema::PrincipalSchema>, nullable)]
    pub principal: Option<Principal>,
    /// The principal's tenant.
    pub tenant: Option<String>,
    /// The status.
    pub status: RunStatus,
    /// Budgets.
    pub budgets: Budgets,
    /// What drives the run (`{"kind": "direct", …}`, `{"kind": "plan", "steps": […]}`,
    /// or a library program's own).
    #[schema(value_type = Object)]
    pub driver: Value,
    /// How many times a driver started the run from `running`.
    pub resumes: u32,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// Its calls (in `GET /api/v1/runs/{id}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<Vec<CallView>>,
    /// Its crumbs (with `?crumbs=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub crumbs: Option<Vec<Value>>,
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// A call's state.
    #[derive(ToSchema)]
    pub enum CallStatus {
        /// Recorded, not yet started.
        Open,
        /// A keyed call whose handler was started (and maybe crashed).
        Started,
        /// Waiting for an approval decision.
        AwaitingApproval,
        /// Waiting for a human tool's answer.
        AwaitingAnswer,
        /// Approved; runs on the next drive.
        Approved,
        /// Finished with a result.
        Completed,
        /// Finished with an error result (including a denial).
        Failed,
    }
}

/// An approval decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Decision {
    /// Approved or denied.
    pub approved: bool,
    /// Who decided.
    pub by: String,
    /// Why, if given.
    pub reason: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The tool revision decided on (the gate's); null for decisions recorded before
    /// revisions were kept.
    #[serde(default)]
    pub revision: Option<String>,
}

/// A resumed run's approved call whose tool changed since the approval (the
/// `details.changes` of a `REVISION_CHANGED` answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RevisionChangeView {
    /// The call: decide it again by this id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The revision the approval was given for.
    pub approved_revision: String,
    /// The tool's revision now.
    pub current_revision: String,
    /// Who approved it.
    pub approved_by: String,
}

/// A human tool's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HumanAnswer {
    /// The answer.
    #[schema(value_type = Value)]
    pub value: Value,
    /// Who answered.
    pub by: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
}

/// A call of a run, as the journal records it (also the form of a call waiting for a
/// person in `GET /api/v1/approvals`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CallView {
    /// The global call id (approve, deny or answer by it).
    pub call_id: String,
    /// The run.
    pub run_id: String,
    /// The call's position in the run, from 0.
    pub ordinal: u32,
    /// The model's call id.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// Hash of the canonical args.
    pub args_hash: String,
    /// The args.
    #[schema(value_type = Object)]
    pub args: Value,
    /// The state.
    pub status: CallStatus,
    /// Durable starts of a keyed call.
    pub attempts: u32,
    /// The result, once `completed`.
    #[schema(value_type = Value)]
    pub result: Option<Value>,
    /// The error result, once `failed`.
    #[schema(value_type = Option<crate::schema::ToolErrorSchema>, nullable)]
    pub error: Option<ToolError>,
    /// The call's duration in milliseconds, once final.
    pub duration_ms: Option<f64>,
    /// The gate, when a person was asked.
    pub gate: Option<Gate>,
    /// The approval decision, once made.
    pub decision: Option<Decision>,
    /// The human tool's answer, once given.
    pub answer: Option<HumanAnswer>,
    /// What the call's execution left besides its result: `stdout`, `stderr`,
    /// `exit_code`, `signal`, `timed_out`, the truncation flags, and `asks` (the
    /// questions the tool put to the client of the call: `kind`, `outcome`, `ms`),
    /// each left out when empty; `{}` for in-process tools.
    #[schema(value_type = Object)]
    #[serde(default)]
    pub diagnostics: toolshed_core::Diagnostics,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
}

/// A call of a resumed run that has its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResumedCall {
    /// The model's call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The result (null on error).
    #[schema(value_type = Value)]
    pub output: Option<Value>,
    /// The error result, or null.
    #[schema(value_type = Option<crate::schema::ToolErrorSchema>, nullable)]
    pub error: Option<ToolError>,
}

/// A call of a resumed run that waits for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ParkedCall {
    /// The global call id: approve, deny or answer by it.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// What it waits for.
    pub gate: Gate,
}

/// A resumed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResumeView {
    /// The run after the drive.
    pub run: RunView,
    /// Results of the calls, in order.
    pub outcomes: Vec<ResumedCall>,
    /// Calls still waiting for a person.
    pub parked: Vec<ParkedCall>,
}

/// An approval or a denial, recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DecisionView {
    /// The call.
    pub call_id: String,
    /// Its run (resume it to go on).
    pub run_id: String,
    /// The decision.
    pub decision: Option<Decision>,
}

/// A human tool's answer, recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnswerView {
    /// The call.
    pub call_id: String,
    /// Its run (resume it to go on).
    pub run_id: String,
    /// The answer.
    pub answer: Option<HumanAnswer>,
}

/// `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The server version.
    pub version: String,
}

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator;

    use super::*;

    fn same_names<E>()
    where
        E: IntoEnumIterator + Serialize + std::fmt::Display + std::fmt::Debug,
    {
        for v in E::iter() {
            assert_eq!(
                serde_json::to_value(&v).unwrap(),
                v.to_string(),
                "{v:?}: serde and Display disagree"
            );
        }
    }

    #[test]
    fn statuses_print_as_they_are_sent() {
        same_names::<ToolStatus>();
        same_names::<ExecuteStatus>();
        same_names::<RunStatus>();
        same_names::<CallStatus>();
    }

    #[test]
    fn a_missing_field_is_named() {
        let e = serde_json::from_str::<UsageView>(r#"{"agent_id": "a", "agent_name": "b"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("agent_status"), "{e}");
    }
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// The languages the sandbox's execute route runs code in.
    #[derive(ToSchema, Default)]
    pub enum SandboxLanguage {
        /// Python 3: the code defines `run(input)`.
        #[default]
        Python,
        /// Node: the module exports `run` (named or default).
        Node,
        /// A shell script (bash): the input on stdin and in `TOOLSHED_INPUT`, the result
        /// on stdout.
        Bash,
    }
}

/// A limit lowered to the server's ceiling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SandboxClamp {
    /// The limit, e.g. `timeout_ms`, `memory_bytes` or `network`.
    pub limit: String,
    /// What was asked for.
    pub requested: u64,
    /// What was granted.
    pub granted: u64,
    /// The same in a sentence.
    pub message: String,
}

/// The limits a sandboxed run had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SandboxLimits {
    /// Memory, swap included, in bytes.
    pub memory_bytes: u64,
    /// Wall-clock limit in milliseconds.
    pub timeout_ms: u64,
    /// Processes and threads at once.
    pub pids: u32,
    /// CPU bandwidth in thousandths of a CPU.
    pub cpu_millis: u32,
}

/// What a sandboxed execution answers: the seed's result (`execution_id`, `output`,
/// `stdout`, `stderr`, `exit_code`, `duration_ms`, `timed_out`, `error`) and what the
/// sandbox measured besides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SandboxExecutionView {
    /// The execution's id (`GET /api/v1/tools/sandbox/executions/{id}`); absent from the
    /// CLI's local runs, which are not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// The result, JSON-encoded as the code wrote it (the seed's shape:
    /// `"{\"order_id\": \"ORD-123456\", \"status\": \"shipped\"}"`); null on failure.
    pub output: Option<String>,
    /// What the code printed (invalid UTF-8 replaced).
    pub stdout: String,
    /// What the code printed to stderr.
    pub stderr: String,
    /// The exit code; null when a signal ended it.
    pub exit_code: Option<i32>,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// The run passed its timeout and everything in it was killed.
    pub timed_out: bool,
    /// Why the run failed, or null.
    pub error: Option<String>,
    /// `output` decoded (null when there is none).
    #[schema(value_type = Value)]
    pub output_value: Value,
    /// `python`, `node`, `bash`, or `exec` for a registered executable.
    pub language: String,
    /// The signal that ended the process, or null.
    pub signal: Option<i32>,
    /// Why the supervisor killed the run (`timeout`, `output_cap`), or null.
    pub killed: Option<String>,
    /// The kernel's OOM killer killed a process of the run.
    pub oom_killed: bool,
    /// Peak memory in bytes, where the kernel reports it.
    pub memory_peak_bytes: Option<u64>,
    /// CPU time of all its processes in milliseconds, where the kernel reports it.
    pub cpu_time_ms: Option<u64>,
    /// More stdout was written than kept.
    pub stdout_truncated: bool,
    /// More stderr was written than kept.
    pub stderr_truncated: bool,
    /// Whether the run had outbound network access.
    pub network_enabled: bool,
    /// The limits it ran under.
    pub limits: SandboxLimits,
    /// Requested limits lowered to the server's ceilings.
    pub clamped: Vec<SandboxClamp>,
    /// Protections the run went without, by the operator's opt-in (`landlock`, `cgroup`).
    pub weakened: Vec<String>,
    /// The unprivileged host uid it ran as (never 0).
    pub host_uid: u32,
    /// The registered tool it ran or was a test of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// SHA-256 of the code that ran (hex); the code itself is not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_sha256: Option<String>,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// When (milliseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_ms: Option<i64>,
}

/// An MCP server entry: AgentBreeder's `McpServerResponse` fields first, then ours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpServerView {
    /// The entry's id (UUID).
    pub id: String,
    /// Its name, unique in the tenant.
    pub name: String,
    /// The URL, or a stdio server's command line.
    pub endpoint: String,
    /// `stdio`, `streamable_http`, `http` or `sse`, as registered.
    pub transport: String,
    /// `registered` (never tested), `active` (the last test or discover reached it) or
    /// `error` (see `last_error`).
    pub status: String,
    /// How many registry tools its last discover registered.
    pub tool_count: u32,
    /// When a test or discover last reached it.
    pub last_ping_at: Option<String>,
    /// When it was registered.
    pub created_at: String,
    /// When it was last changed.
    pub updated_at: String,
    /// How long one MCP request may take.
    pub timeout_seconds: u64,
    /// What it is for.
    pub description: String,
    /// Labels.
    pub tags: Vec<String>,
    /// The owning team.
    pub team: Option<String>,
    /// Whether its tools may run (entries from project-scoped config files start
    /// disabled until an admin enables them).
    pub enabled: bool,
    /// Where it came from: `api`, `cli`, `scan:<file>`.
    pub source: String,
    /// The tenant that owns it; only its users see it.
    pub tenant: String,
    /// 1, then +1 per update.
    pub revision: u32,
    /// A stdio server's program.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment: values name credentials as `${NAME}`. A literal value (stored
    /// before literals were refused) is never shown: it reads `***` and its key is in
    /// `literal_values`.
    pub env: std::collections::BTreeMap<String, String>,
    /// A Streamable HTTP server's URL.
    pub url: Option<String>,
    /// Its headers: values name credentials as `${NAME}`; a literal one reads `***`.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The `env`/`headers` entries holding a literal value, as `env.KEY` or
    /// `headers.KEY` (their values are masked): replace each with a `${NAME}` reference.
    #[serde(default)]
    pub literal_values: Vec<String>,
    /// The credentials `env` and `headers` name.
    pub credentials: Vec<String>,
    /// Whether a stdio server may reach the network (null: its kind's default).
    pub network: Option<bool>,
    /// Why the last test or discover failed.
    pub last_error: Option<String>,
    /// The per-tool overrides of the registry owner.
    #[schema(value_type = Object)]
    pub overrides: Value,
    /// Who registered or last changed it.
    pub created_by: String,
    /// Whether a discover that finds a tool's definition changed makes it active at
    /// once. False by default: the change waits until an admin accepts it
    /// (`GET …/pending`, `POST …/accept`).
    #[serde(default)]
    pub auto_accept: bool,
    /// How many of its tools have a changed definition waiting for an admin.
    #[serde(default)]
    pub pending_changes: u32,
}

/// A successful connection test: AgentBreeder's `McpServerTestResult` and what the
/// handshake said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpTestView {
    /// Always true here (a failed test is a 502 `MCP_SERVER_UNREACHABLE`).
    pub success: bool,
    /// How long starting and the handshake took, in milliseconds.
    pub latency_ms: u64,
    /// `legacy` (`initialize`) or `discover` (`server/discover`).
    pub era: String,
    /// The negotiated protocol version, e.g. `2025-11-25`.
    pub protocol_version: String,
    /// The server's own name.
    pub server_name: String,
    /// The server's own version.
    pub server_version: String,
}

/// One tool a discover registered (AgentBreeder's `McpServerDiscoveredTool` plus ours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpDiscoveredTool {
    /// The tool's name as the server names it.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its input JSON Schema.
    #[schema(value_type = Object)]
    pub schema_definition: Value,
    /// The registry tool's id.
    pub tool_id: String,
    /// The registry tool's name, `<server>__<tool>`.
    pub registry_name: String,
    /// `mcp:<server>/<tool>`.
    pub endpoint: String,
    /// `none`, `sandbox` or `external`, after hints and overrides.
    pub effects: String,
    /// Whether a call waits for an approval: `never`, `always`, or `{"when": "<CEL>"}`.
    pub approval: Value,
    /// Characters of its definition a reader does not see (see `ToolSummary`).
    #[serde(default)]
    pub hidden_characters: Vec<HiddenCharactersView>,
}

/// A tool whose MCP server changed its definition: the change waits for an admin, and
/// every client (REST, `/mcp`) keeps getting the accepted revision meanwhile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpPendingView {
    /// The tool's name as the server names it.
    pub name: String,
    /// The registry tool's name, `<server>__<tool>`.
    pub registry_name: String,
    /// The registry tool's id.
    pub tool_id: String,
    /// The accepted (active) revision.
    pub revision: u32,
    /// The accepted description.
    pub description: String,
    /// The accepted input JSON Schema.
    #[schema(value_type = Object)]
    pub schema_definition: Value,
    /// The description the server sends now.
    pub pending_description: String,
    /// The input JSON Schema the server sends now.
    #[schema(value_type = Object)]
    pub pending_schema_definition: Value,
    /// The output JSON Schema the server sends now, if any.
    #[schema(value_type = Option<Object>, nullable)]
    pub pending_output_schema: Option<Value>,
    /// The behaviour hints the server sends now (`read_only`, `destructive`,
    /// `idempotent`, `open_world`, `title`).
    #[schema(value_type = Object)]
    pub pending_hints: Value,
    /// When a discover first found this change.
    pub since: String,
    /// Characters of the changed definition a reader does not see.
    pub hidden_characters: Vec<HiddenCharactersView>,
}

/// What an accept made active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpAcceptView {
    /// Registry names whose change is now the active revision.
    pub accepted: Vec<String>,
    /// Those tools, as registered now.
    pub tools: Vec<McpDiscoveredTool>,
}

/// What a discover found and registered (AgentBreeder's `McpServerDiscoverResult` plus
/// what changed in the registry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpDiscoverView {
    /// Every tool the server lists, as registered.
    pub tools: Vec<McpDiscoveredTool>,
    /// How many.
    pub total: usize,
    /// Registry names of tools registered by this discover.
    pub added: Vec<String>,
    /// Registry names given a new revision.
    pub changed: Vec<String>,
    /// Registry names deleted (the server no longer lists them).
    pub removed: Vec<String>,
    /// Registry names whose server changed their definition: the change waits for an
    /// admin (`GET …/pending`, `POST …/accept`) and `tools` shows the accepted one.
    #[serde(default)]
    pub pending: Vec<String>,
}

/// A deleted MCP server entry (AgentBreeder answers `{"deleted": true}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpDeletedView {
    /// True.
    pub deleted: bool,
    /// The entry's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// How many of its registry tools were deleted with it.
    pub tools_removed: u32,
}
