//! The stores' records as the API's views (`toolshed_api::views`): the one place that
//! knows both, so a change to a record or a view is a compile error here.

use serde_json::Value;
use toolshed_api::views::{
    AgentView, Budgets, CallStatus, CallView, Decision, Gate, HiddenCharactersView, HumanAnswer,
    RunStatus, RunView, TenantView, ToolDetail, ToolStatus, ToolSummary, UsageView, UserView,
};
use toolshed_api::{PageMeta, Paged};
use toolshed_journal as journal;
use toolshed_registry::{AgentRecord, Page, TenantRecord, ToolRecord, ToolUsage, UserRecord};

/// A page of the store mapped to views.
pub fn paged<S, T>(page: Page<S>, f: impl Fn(S) -> T) -> Paged<T> {
    Paged {
        meta: PageMeta {
            page: page.page,
            per_page: page.per_page,
            total: page.total,
        },
        data: page.items.into_iter().map(f).collect(),
    }
}

/// RFC 3339 text of milliseconds since the epoch.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// A registered tool, listing form.
pub fn tool_summary(t: &ToolRecord) -> ToolSummary {
    ToolSummary {
        id: t.id.clone(),
        name: t.name.clone(),
        description: t.description.clone(),
        tool_type: t.tool_type.clone(),
        status: match t.status {
            toolshed_registry::ToolStatus::Active => ToolStatus::Active,
            toolshed_registry::ToolStatus::Deleted => ToolStatus::Deleted,
        },
        source: t.source.clone(),
        endpoint: t.endpoint.clone(),
        version: t.version.clone(),
        revision: t.revision,
        tenant: t.tenant.clone(),
        created_at: time(t.created_at_ms),
        updated_at: time(t.updated_at_ms),
        hidden_characters: hidden_characters(&t.description, &t.definition),
    }
}

/// The most places [`hidden_characters`] lists (a schema could have thousands).
const MAX_HIDDEN_PLACES: usize = 64;

/// What a tool's description and schemas hide from a person reading them (zero-width,
/// tag, bidirectional, control and escape characters), per field and kind.
pub fn hidden_characters(description: &str, definition: &Value) -> Vec<HiddenCharactersView> {
    let mut found = Vec::new();
    toolshed_core::text::hidden_in_text("description", description, &mut found);
    for key in ["input_schema", "output_schema"] {
        if let Some(schema) = definition.get(key) {
            toolshed_core::text::hidden_in_json(key, schema, &mut found);
        }
    }
    found.truncate(MAX_HIDDEN_PLACES);
    found
        .into_iter()
        .map(|h| HiddenCharactersView {
            field: h.field,
            kind: h.kind.as_str().to_owned(),
            count: h.count,
        })
        .collect()
}

/// A registered tool with its schemas and definition.
pub fn tool_detail(t: &ToolRecord) -> ToolDetail {
    // The schemas as JSON Schema (OpenAPI's `nullable: true` as `type: [T, "null"]`),
    // as MCP and the pipeline read them; `definition` keeps what was registered.
    let field = |k: &str| {
        let mut v = t.definition.get(k).cloned().unwrap_or(Value::Null);
        toolshed_core::schema::normalize_nullable(&mut v);
        v
    };
    let mut schema = field("input_schema");
    if schema.is_null() {
        schema = toolshed_core::schema::empty_object_schema();
    }
    ToolDetail {
        summary: tool_summary(t),
        schema_definition: schema,
        output_schema: field("output_schema"),
        definition: t.definition.clone(),
        created_by: t.created_by.clone(),
        code: t.code.as_ref().map(code_view),
    }
}

/// A revision's uploaded code: hash, size, files.
pub fn code_view(c: &toolshed_registry::CodeRef) -> toolshed_api::views::CodeView {
    toolshed_api::views::CodeView {
        sha256: c.sha256.clone(),
        size_bytes: c.size_bytes,
        files: c.files,
    }
}

/// One agent using a tool.
pub fn usage(u: ToolUsage) -> UsageView {
    UsageView {
        agent_id: u.agent_id,
        agent_name: u.agent_name,
        agent_status: agent_status(u.agent_status),
    }
}

/// A registered agent.
pub fn agent(a: AgentRecord) -> AgentView {
    AgentView {
        id: a.id,
        name: a.name,
        framework: a.framework,
        status: agent_status(a.status),
        tenant: a.tenant,
        tool_ids: a.tool_ids,
        definition: a.definition,
        created_by: a.created_by,
        created_at: time(a.created_at_ms),
        updated_at: time(a.updated_at_ms),
    }
}

/// A user, without the password hash.
pub fn user(u: UserRecord) -> UserView {
    UserView {
        username: u.username,
        role: role(u.role),
        tenant: u.tenant,
        created_at: time(u.created_at_ms),
    }
}

/// A tenant.
pub fn tenant(t: TenantRecord) -> TenantView {
    TenantView {
        name: t.name,
        users: t.users,
        admins: t.admins,
        tools: t.tools,
        agents: t.agents,
        mcp_servers: t.mcp_servers,
    }
}

/// A run without its calls.
pub fn run(r: journal::RunRecord) -> RunView {
    RunView {
        created_at: time(r.created_at_ms),
        updated_at: time(r.updated_at_ms),
        id: r.id,
        agent_id: r.agent_id,
        session_id: r.session_id,
        principal: r.principal,
        tenant: r.tenant,
        status: run_status(r.status),
        budgets: Budgets {
            max_attempts_per_task: r.budgets.max_attempts_per_task,
            max_wall_clock_min: r.budgets.max_wall_clock_min,
        },
        driver: r.driver,
        resumes: r.resumes,
        error: r.error,
        created_at_ms: r.created_at_ms,
        updated_at_ms: r.updated_at_ms,
        calls: None,
        crumbs: None,
    }
}

fn run_status(s: journal::RunStatus) -> RunStatus {
    match s {
        journal::RunStatus::Running => RunStatus::Running,
        journal::RunStatus::Parked => RunStatus::Parked,
        journal::RunStatus::Completed => RunStatus::Completed,
        journal::RunStatus::Failed => RunStatus::Failed,
        journal::RunStatus::Cancelled => RunStatus::Cancelled,
    }
}

/// A call of a run.
pub fn call(c: journal::CallRecord) -> CallView {
    CallView {
        call_id: c.call_id,
        run_id: c.run_id,
        ordinal: c.ordinal,
        tool_call_id: c.tool_call_id,
        tool: c.tool,
        args_hash: c.args_hash,
        args: c.args,
        status: match c.status {
            journal::CallStatus::Open => CallStatus::Open,
            journal::CallStatus::Started => CallStatus::Started,
            journal::CallStatus::AwaitingApproval => CallStatus::AwaitingApproval,
            journal::CallStatus::AwaitingAnswer => CallStatus::AwaitingAnswer,
            journal::CallStatus::Approved => CallStatus::Approved,
            journal::CallStatus::Completed => CallStatus::Completed,
            journal::CallStatus::Failed => CallStatus::Failed,
        },
        attempts: c.attempts,
        result: c.result,
        error: c.error,
        duration_ms: c.duration_ms,
        gate: c.gate.map(gate),
        decision: c.decision.map(decision),
        answer: c.answer.map(answer),
        diagnostics: c.diagnostics,
        created_at_ms: c.created_at_ms,
        updated_at_ms: c.updated_at_ms,
    }
}

/// What a gated call waits for.
pub fn gate(g: journal::Gate) -> Gate {
    match g {
        journal::Gate::Approval {
            reason,
            revision,
            four_eyes,
            requested_by,
            requested_at_ms,
            superseded,
        } => Gate::Approval {
            reason,
            revision,
            four_eyes,
            requested_by,
            requested_at_ms,
            superseded: superseded.into_iter().map(decision).collect(),
        },
        journal::Gate::Answer { schema } => Gate::Answer { schema },
    }
}

/// An approval decision.
pub fn decision(d: journal::Decision) -> Decision {
    Decision {
        approved: d.approved,
        by: d.by,
        reason: d.reason,
        at_ms: d.at_ms,
        revision: d.revision,
    }
}

/// A human tool's answer.
pub fn answer(a: journal::Answer) -> HumanAnswer {
    HumanAnswer {
        value: a.value,
        by: a.by,
        at_ms: a.at_ms,
    }
}

/// A user's role as the API names it.
pub fn role(r: toolshed_auth::Role) -> toolshed_api::views::Role {
    use toolshed_api::views::Role as Wire;
    match r {
        toolshed_auth::Role::Viewer => Wire::Viewer,
        toolshed_auth::Role::Deployer => Wire::Deployer,
        toolshed_auth::Role::Admin => Wire::Admin,
        toolshed_auth::Role::Owner => Wire::Owner,
    }
}

/// An agent's state as the API names it.
fn agent_status(s: toolshed_registry::AgentStatus) -> toolshed_api::views::AgentStatus {
    match s {
        toolshed_registry::AgentStatus::Registered => toolshed_api::views::AgentStatus::Registered,
    }
}
