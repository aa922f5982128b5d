//! What the API answers, as documented types: the `{"data": …}` envelope and the shape
//! of each resource.

use serde::Serialize;
use serde_json::Value;
use toolshed_journal::{CallRecord, RunRecord};
use toolshed_registry::{AgentRecord, Page, ToolRecord, ToolUsage, UserRecord};
use utoipa::ToSchema;

/// `{"data": …}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Data<T> {
    /// The answer.
    pub data: T,
}

/// `{"data": [...], "meta": {...}}` for paginated listings.
#[derive(Debug, Serialize, ToSchema)]
pub struct Paged<T> {
    /// This page's items.
    pub data: Vec<T>,
    /// Where this page is.
    pub meta: PageMeta,
}

/// Pagination facts.
#[derive(Debug, Serialize, ToSchema)]
pub struct PageMeta {
    /// The page, from 1.
    pub page: u32,
    /// Items per page.
    pub per_page: u32,
    /// Items matching in all.
    pub total: u64,
}

impl<T> Paged<T> {
    /// A page of the store mapped to views.
    pub fn from_page<S>(page: Page<S>, f: impl Fn(S) -> T) -> Self {
        Paged {
            meta: PageMeta {
                page: page.page,
                per_page: page.per_page,
                total: page.total,
            },
            data: page.items.into_iter().map(f).collect(),
        }
    }
}

/// RFC 3339 text of milliseconds since the epoch.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// A registered tool (listing form: no schemas).
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolSummary {
    /// The tool id (UUID).
    pub id: String,
    /// The name agents and `tools/<name>` refs use.
    pub name: String,
    /// What it does.
    pub description: String,
    /// `function`, `mcp` or `api`.
    pub tool_type: String,
    /// `active` (deleted tools are not listed).
    pub status: String,
    /// Where the registration came from (`manual`, `cli`, `stdlib`, …).
    pub source: String,
    /// How it runs: `builtin:`, `python:`, `node:`, `exec:` or `http(s)://`.
    pub endpoint: Option<String>,
    /// The tool's own version label.
    pub version: Option<String>,
    /// The registry revision (1, then +1 per update).
    pub revision: u32,
    /// When it was registered.
    pub created_at: String,
    /// When this revision was written.
    pub updated_at: String,
}

impl From<&ToolRecord> for ToolSummary {
    fn from(t: &ToolRecord) -> Self {
        ToolSummary {
            id: t.id.clone(),
            name: t.name.clone(),
            description: t.description.clone(),
            tool_type: t.tool_type.clone(),
            status: t.status.as_str().to_owned(),
            source: t.source.clone(),
            endpoint: t.endpoint.clone(),
            version: t.version.clone(),
            revision: t.revision,
            created_at: time(t.created_at_ms),
            updated_at: time(t.updated_at_ms),
        }
    }
}

/// A registered tool with its schemas and whole definition.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: ToolSummary,
    /// The input JSON Schema.
    #[schema(value_type = Object)]
    pub schema_definition: Value,
    /// The output JSON Schema, if declared.
    #[schema(value_type = Object)]
    pub output_schema: Value,
    /// The whole definition, in `tool.yaml` form.
    #[schema(value_type = Object)]
    pub definition: Value,
    /// Who registered (or last updated) it.
    pub created_by: String,
}

impl From<&ToolRecord> for ToolDetail {
    fn from(t: &ToolRecord) -> Self {
        let field = |k: &str| t.definition.get(k).cloned().unwrap_or(Value::Null);
        let mut schema = field("input_schema");
        if schema.is_null() {
            schema = toolshed_core::schema::empty_object_schema();
        }
        ToolDetail {
            summary: t.into(),
            schema_definition: schema,
            output_schema: field("output_schema"),
            definition: t.definition.clone(),
            created_by: t.created_by.clone(),
        }
    }
}

/// One agent using a tool.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageView {
    /// The agent id.
    pub agent_id: String,
    /// The agent name.
    pub agent_name: String,
    /// The agent status.
    pub agent_status: String,
}

impl From<ToolUsage> for UsageView {
    fn from(u: ToolUsage) -> Self {
        UsageView {
            agent_id: u.agent_id,
            agent_name: u.agent_name,
            agent_status: u.agent_status,
        }
    }
}

/// What executing a tool answers (the seed's shape, plus the run it was recorded in).
#[derive(Debug, Serialize, ToSchema)]
pub struct ExecuteView {
    /// `completed`, or `parked` when the call waits for an approval or an answer.
    pub status: String,
    /// The tool's result (null on error or when parked).
    #[schema(value_type = Object)]
    pub output: Value,
    /// Protocol lines the tool's process printed (subprocess tools).
    pub stdout: String,
    /// What the tool's process printed to stderr (its tail when long).
    pub stderr: String,
    /// The exit code of a one-shot process; null for pooled workers, built-ins and HTTP.
    pub exit_code: Option<i32>,
    /// The signal that ended the process (9 when it was killed), or null.
    pub signal: Option<i32>,
    /// The call ran out of time and was stopped (`error.code` is then `TIMEOUT`).
    pub timed_out: bool,
    /// `stdout` holds only the end of what the process printed.
    pub stdout_truncated: bool,
    /// `stderr` holds only the end of what the process printed.
    pub stderr_truncated: bool,
    /// Wall time of the call in milliseconds.
    pub duration_ms: f64,
    /// The error result: `{"code", "message", "details"}`, or null.
    #[schema(value_type = Object)]
    pub error: Value,
    /// The run recording this execution (`GET /api/v1/runs/{id}`).
    pub run_id: String,
    /// The call's id (approve, deny or answer by it when parked).
    pub call_id: Option<String>,
    /// What a parked call waits for.
    #[schema(value_type = Object)]
    pub gate: Value,
}

/// A registered agent.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentView {
    /// The agent id (UUID).
    pub id: String,
    /// The agent name.
    pub name: String,
    /// The framework.
    pub framework: String,
    /// `registered`.
    pub status: String,
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

impl From<AgentRecord> for AgentView {
    fn from(a: AgentRecord) -> Self {
        AgentView {
            id: a.id,
            name: a.name,
            framework: a.framework,
            status: a.status,
            tool_ids: a.tool_ids,
            definition: a.definition,
            created_by: a.created_by,
            created_at: time(a.created_at_ms),
            updated_at: time(a.updated_at_ms),
        }
    }
}

/// A user (never the password hash).
#[derive(Debug, Serialize, ToSchema)]
pub struct UserView {
    /// The user name.
    pub username: String,
    /// `viewer`, `deployer` or `admin`.
    pub role: String,
    /// The tenant whose runs the user sees.
    pub tenant: String,
    /// When the user was added.
    pub created_at: String,
}

impl From<UserRecord> for UserView {
    fn from(u: UserRecord) -> Self {
        UserView {
            username: u.username,
            role: u.role,
            tenant: u.tenant,
            created_at: time(u.created_at_ms),
        }
    }
}

/// A login's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    /// The bearer token (a JWT).
    pub token: String,
    /// Seconds until it expires.
    pub expires_in: u64,
    /// The user's role.
    pub role: String,
}

/// A run, as the journal records it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunView {
    /// The run.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub run: RunRecord,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// Its calls (in `GET /api/v1/runs/{id}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub calls: Option<Vec<CallRecord>>,
    /// Its crumbs (with `?crumbs=true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub crumbs: Option<Vec<Value>>,
}

impl RunView {
    /// A run without its calls.
    pub fn new(run: RunRecord) -> Self {
        RunView {
            created_at: time(run.created_at_ms),
            updated_at: time(run.updated_at_ms),
            run,
            calls: None,
            crumbs: None,
        }
    }
}

/// A call that waits for a person.
#[derive(Debug, Serialize, ToSchema)]
pub struct GateView {
    /// The call.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub call: CallRecord,
}

/// A resumed run.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResumeView {
    /// The run after the drive.
    pub run: RunView,
    /// Results of the calls, in order.
    #[schema(value_type = Vec<Object>)]
    pub outcomes: Vec<Value>,
    /// Calls still waiting for a person.
    #[schema(value_type = Vec<Object>)]
    pub parked: Vec<Value>,
}

/// `/healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The server version.
    pub version: String,
}
