//! The three tools: `run_process {name, args}`, `check_run {run_id, tail_bytes}` and
//! `stop_run {run_id}`.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolshed_core::{
    Effects, ErrorCode, HandlerFuture, Idempotency, Reply, Tool, ToolContext, ToolError, ToolOutput,
};
use toolshed_journal::process_runs::{
    Inserted, NewProcessRun, ProcessEnd, ProcessRunRecord, ProcessRuns, ProcessStatus,
};
use toolshed_sandbox::detached::{
    self, DetachedSpec, DetachedState, DetachedStatus, FORMAT, supervisor_alive,
};
use toolshed_sandbox::{Bind, LimitsRequest, Network};

use super::config::{CommandPart, ProcessDef, check_value, render};
use super::{ProcessCaps, Processes};
use crate::AgentFile;
use crate::workspace::Workspaces;

/// Where the run's workspace appears, read-only.
const WORKSPACE_INSIDE: &str = "/workspace";
/// Where the project appears, read-only, for a process with `project: true`.
const PROJECT_INSIDE: &str = "/project";
/// Background run ids: this prefix and 32 hex digits.
const ID_PREFIX: &str = "proc_";

/// What one agent's two tools share.
struct Agent {
    name: String,
    project: PathBuf,
    processes: Vec<ProcessDef>,
    runs: Processes,
    workspaces: Option<Workspaces>,
}

/// The built-in `name` (`run_process` or `check_run`) for this agent, or the start-up
/// problem that keeps it out.
pub(crate) fn builtin(
    name: &str,
    file: &AgentFile,
    project: &Path,
    runs: Option<&Processes>,
    workspaces: Option<&Workspaces>,
) -> Result<Tool, String> {
    let Some(runs) = runs else {
        return Err(format!(
            "`{name}` needs background runs, and this loader was given none; load the agent with `LoadOptions::processes` (the CLI does)"
        ));
    };
    if name == "run_process" && file.processes.is_empty() {
        return Err(
            "`run_process` needs `processes:` in agent.yaml: name the commands it may start, e.g. `processes: {train: {command: [python3, /project/train.py, --epochs, \"{epochs}\"], args: {epochs: integer}, project: true}}`".into(),
        );
    }
    let agent = Arc::new(Agent {
        name: file.name.clone(),
        project: std::path::absolute(project).unwrap_or_else(|_| project.to_owned()),
        processes: file.processes.clone(),
        runs: runs.clone(),
        workspaces: workspaces.cloned(),
    });
    let built = match name {
        "run_process" => run_process_tool(agent),
        "stop_run" => stop_run_tool(agent),
        _ => check_run_tool(agent),
    };
    built.map_err(|e| format!("`{name}`: {e}"))
}

fn invalid(field: &str, message: impl Into<String>, given: &Value) -> ToolError {
    let message = message.into();
    ToolError::new(ErrorCode::InvalidArgs, format!("`{field}`: {message}")).with_details(json!({
        "violations": [{
            "pointer": format!("/{}", field.replace('.', "/")),
            "keyword": "process",
            "expected": message,
            "given": given,
        }]
    }))
}

fn reply(r: Result<Value, ToolError>) -> Reply {
    Reply::new(r.map(ToolOutput::Value))
}

fn run_process_tool(agent: Arc<Agent>) -> Result<Tool, toolshed_core::SpecError> {
    let names: Vec<&str> = agent.processes.iter().map(|p| p.name.as_str()).collect();
    let listing: Vec<String> = agent
        .processes
        .iter()
        .map(|p| match &p.description {
            Some(d) => format!("`{}` ({d})", p.name),
            None => format!("`{}`", p.name),
        })
        .collect();
    // One branch per process: `args` must be exactly that process's arguments.
    let branches: Vec<Value> = agent
        .processes
        .iter()
        .map(|p| {
            let mut then = json!({"properties": {"args": p.args_schema()}});
            if p.args.iter().any(|a| a.default.is_none()) {
                then["required"] = json!(["args"]);
            }
            json!({
                "if": {"properties": {"name": {"const": p.name}}, "required": ["name"]},
                "then": then,
            })
        })
        .collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": names, "description": "Which of the agent's processes to start."},
            "args": {"type": "object", "description": "The process's arguments, as it declares them."}
        },
        "required": ["name"],
        "additionalProperties": false,
        "allOf": branches,
    });
    let description = format!(
        "Start one of this agent's processes as a background run in a sandbox, and return its run id at once; poll it with check_run. Processes: {}.",
        listing.join(", ")
    );
    let handler = {
        let agent = Arc::clone(&agent);
        Arc::new(move |args: Value, ctx: ToolContext| -> HandlerFuture {
            let agent = Arc::clone(&agent);
            Box::pin(async move { reply(start(&agent, args, &ctx).await) })
        })
    };
    Tool::builder("run_process")
        .description(description)
        .input_schema(schema)
        .effects(Effects::Sandbox)
        // Keyed: a resumed run replays the recorded start instead of starting again,
        // and a crash mid-start re-runs it under the same key, which names the same run.
        .idempotency(Idempotency::Keyed)
        .timeout(agent.runs.config().caps.start_wait + Duration::from_secs(30))
        .raw_handler(handler)
        .build()
}

fn check_run_tool(agent: Arc<Agent>) -> Result<Tool, toolshed_core::SpecError> {
    let caps = agent.runs.config().caps;
    let schema = json!({
        "type": "object",
        "properties": {
            "run_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The id run_process returned."},
            "tail_bytes": {"type": "integer", "minimum": 0, "maximum": caps.max_tail_bytes, "description": format!("How much of the end of its output to return, in bytes (default {}).", caps.tail_bytes)}
        },
        "required": ["run_id"],
        "additionalProperties": false,
    });
    let handler = {
        let agent = Arc::clone(&agent);
        Arc::new(move |args: Value, ctx: ToolContext| -> HandlerFuture {
            let agent = Arc::clone(&agent);
            Box::pin(async move { reply(check(&agent, args, &ctx).await) })
        })
    };
    Tool::builder("check_run")
        .description("Check a background run started by run_process: its status (starting, running, exited, stopped, failed or lost), exit code, and the end of its output.")
        .input_schema(schema)
        .effects(Effects::None)
        .idempotency(Idempotency::None)
        .timeout(Duration::from_secs(30))
        .raw_handler(handler)
        .build()
}

fn stop_run_tool(agent: Arc<Agent>) -> Result<Tool, toolshed_core::SpecError> {
    let caps = agent.runs.config().caps;
    let schema = json!({
        "type": "object",
        "properties": {
            "run_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The id run_process returned."}
        },
        "required": ["run_id"],
        "additionalProperties": false,
    });
    let handler = {
        let agent = Arc::clone(&agent);
        Arc::new(move |args: Value, ctx: ToolContext| -> HandlerFuture {
            let agent = Arc::clone(&agent);
            Box::pin(async move { reply(stop(&agent, args, &ctx).await) })
        })
    };
    Tool::builder("stop_run")
        .description("Stop a background run started by run_process: its sandboxed command is killed, and the run reports `stopped` with the end of its output. A run that already ended is reported as it ended.")
        .input_schema(schema)
        // It ends a sandboxed process of this agent's, nothing outside the sandbox;
        // stopping twice is harmless (the second answer reports the first stop).
        .effects(Effects::Sandbox)
        .idempotency(Idempotency::None)
        .timeout(caps.stop_wait + Duration::from_secs(15))
        .raw_handler(handler)
        .build()
}

fn tenant_of(ctx: &ToolContext) -> String {
    ctx.principal()
        .and_then(|p| p.tenant.clone())
        .unwrap_or_else(|| "default".into())
}

/// The argv of `p` for these args (defaults applied, every value checked).
fn argv(p: &ProcessDef, given: &Value) -> Result<(Vec<String>, Value), ToolError> {
    let empty = Map::new();
    let args = match given {
        Value::Null => &empty,
        Value::Object(m) => m,
        other => {
            return Err(invalid(
                "args",
                format!("must be an object of `{}`'s arguments", p.name),
                other,
            ));
        }
    };
    if let Some(extra) = args.keys().find(|k| !p.args.iter().any(|a| &a.name == *k)) {
        let known: Vec<&str> = p.args.iter().map(|a| a.name.as_str()).collect();
        return Err(invalid(
            &format!("args.{extra}"),
            format!(
                "`{}` has no argument `{extra}`; it takes: {}",
                p.name,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
            &args[extra.as_str()],
        ));
    }
    let mut values = Map::new();
    for a in &p.args {
        let v = match (args.get(&a.name), &a.default) {
            (Some(v), _) => v.clone(),
            (None, Some(d)) => d.clone(),
            (None, None) => {
                return Err(invalid(
                    &format!("args.{}", a.name),
                    format!("is required ({})", a.kind_name()),
                    &Value::Null,
                ));
            }
        };
        check_value(a, &v).map_err(|e| invalid(&format!("args.{}", a.name), e, &v))?;
        values.insert(a.name.clone(), v);
    }
    let argv = p
        .command
        .iter()
        .map(|part| match part {
            CommandPart::Literal(s) => s.clone(),
            CommandPart::Arg(n) => values.get(n).map(render).unwrap_or_default(),
        })
        .collect();
    Ok((argv, Value::Object(values)))
}

/// A run id: from the call's idempotency key when it has one (a re-run of the call
/// names the same run), else random.
fn run_id_for(agent: &str, tenant: &str, ctx: &ToolContext) -> String {
    let mut h = Sha256::new();
    match ctx.idempotency_key() {
        Some(key) => {
            for part in [tenant, agent, key] {
                h.update(part.as_bytes());
                h.update([0]);
            }
        }
        None => h.update(uuid::Uuid::new_v4().as_bytes()),
    }
    format!("{ID_PREFIX}{}", &hex::encode(h.finalize())[..32])
}

pub(crate) fn valid_run_id(id: &str) -> bool {
    id.strip_prefix(ID_PREFIX)
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

async fn store(agent: &Agent) -> Result<Arc<ProcessRuns>, ToolError> {
    agent.runs.store().await.map_err(ToolError::handler)
}

async fn start(agent: &Agent, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    let name = match args.get("name") {
        Some(Value::String(n)) => n.clone(),
        other => {
            return Err(invalid(
                "name",
                "must be the name of one of the agent's processes",
                other.unwrap_or(&Value::Null),
            ));
        }
    };
    let Some(p) = agent.processes.iter().find(|p| p.name == name) else {
        let names: Vec<&str> = agent.processes.iter().map(|p| p.name.as_str()).collect();
        return Err(invalid(
            "name",
            format!(
                "`{name}` is not one of this agent's processes: {}",
                names.join(", ")
            ),
            &Value::String(name.clone()),
        ));
    };
    let (argv, values) = argv(p, args.get("args").unwrap_or(&Value::Null))?;
    let tenant = tenant_of(ctx);
    let id = run_id_for(&agent.name, &tenant, ctx);
    let root = agent.runs.config().root.clone();
    let dir = root.join(&id);
    let store = store(agent).await?;
    let record = NewProcessRun {
        id: id.clone(),
        tenant: tenant.clone(),
        agent: agent.name.clone(),
        run_id: ctx.run_id().to_owned(),
        session_id: ctx.session_id().to_owned(),
        process: p.name.clone(),
        args: values.clone(),
        state_dir: dir.display().to_string(),
        host: Machine::this().host.clone(),
        boot_id: Machine::this().boot_id.clone(),
    };
    match store.insert(record).await.map_err(journal)? {
        Inserted::New(_) => {}
        // The same call again (a resumed run): report the run it started.
        Inserted::Existing(r) => return view(r, 0),
    }
    let spec = match detached_spec(agent, p, argv, ctx).await {
        Ok(s) => s,
        Err(e) => return Err(failed(&store, &id, e).await),
    };
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)
        .and_then(|()| std::fs::DirBuilder::new().mode(0o700).create(&dir));
    if let Err(e) = made {
        let e = ToolError::handler(format!(
            "cannot create the run's state folder {}: {e}",
            dir.display()
        ));
        return Err(failed(&store, &id, e).await);
    }
    let supervisor = match agent.runs.supervisor() {
        Ok(s) => s,
        Err(m) => return Err(failed(&store, &id, ToolError::handler(m)).await),
    };
    let caps = agent.runs.config().caps;
    let started = match supervisor.start(&dir, &spec, caps.start_wait).await {
        Ok(s) => s,
        Err(e) => {
            let err = ToolError::handler(format!(
                "process `{}` could not start in the sandbox: {} [{}]",
                p.name, e.message, e.code
            ))
            .with_details(json!({"sandbox_code": e.code.as_str()}));
            return Err(failed(&store, &id, err).await);
        }
    };
    let now = toolshed_journal_now();
    let r = store
        .mark_running(&id, started.supervisor_pid, started.supervisor_start, now)
        .await
        .map_err(journal)?;
    Ok(json!({
        "run_id": r.id,
        "process": r.process,
        "args": r.args,
        "status": r.status.as_str(),
        "started_at_ms": r.started_at,
    }))
}

fn toolshed_journal_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn journal(e: toolshed_journal::JournalError) -> ToolError {
    ToolError::handler(format!(
        "the background runs' journal failed: {e} [{}]",
        e.code()
    ))
}

/// Records the run as failed with the error's message, and returns the error.
async fn failed(store: &ProcessRuns, id: &str, e: ToolError) -> ToolError {
    let end = ProcessEnd {
        status: ProcessStatus::Failed,
        exit_code: None,
        signal: None,
        message: Some(e.message.clone()),
        ended_at: toolshed_journal_now(),
    };
    if let Err(j) = store.finish(id, end).await {
        warn_unrecorded(&j);
    }
    e
}

/// A journal failure while recording a failure: the caller's error says more, so this
/// one only goes to stderr.
fn warn_unrecorded(e: &toolshed_journal::JournalError) {
    eprintln!("toolshed: cannot record a failed background run: {e}");
}

async fn detached_spec(
    agent: &Agent,
    p: &ProcessDef,
    argv: Vec<String>,
    ctx: &ToolContext,
) -> Result<DetachedSpec, ToolError> {
    let config = agent.runs.config();
    let caps: ProcessCaps = config.caps;
    let mut binds = Vec::new();
    if let Some(ws) = &agent.workspaces {
        let folder = ws.ensure(ctx.run_id()).await.map_err(|e| {
            ToolError::handler(format!("the run's workspace cannot be opened: {e}"))
        })?;
        binds.push(Bind::read_only(folder, WORKSPACE_INSIDE));
    }
    if p.project {
        binds.push(Bind::read_only(&agent.project, PROJECT_INSIDE));
    }
    let mut env = vec![
        ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
        ("HOME".to_owned(), "/work".to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("TERM".to_owned(), "dumb".to_owned()),
    ];
    env.extend(p.env.iter().cloned());
    let mut argv = argv.into_iter();
    let program = argv.next().unwrap_or_default();
    let timeout = p.timeout_seconds.unwrap_or(caps.default_timeout_seconds);
    let memory = p.memory_mb.unwrap_or(caps.default_memory_mb);
    Ok(DetachedSpec {
        format: FORMAT,
        program,
        args: argv.collect(),
        env,
        binds,
        limits: LimitsRequest {
            memory_bytes: Some(memory.saturating_mul(1024 * 1024)),
            cpu_time_ms: Some(timeout.saturating_mul(1000)),
            ..LimitsRequest::default()
        },
        network: if p.network { Network::On } else { Network::Off },
        max_duration_ms: Some(timeout.saturating_mul(1000)),
        output_cap_bytes: caps.output_file_bytes,
        sandbox: config.sandbox.clone(),
    })
}

/// The `run_id` argument.
fn run_id_arg(args: &Value) -> Result<String, ToolError> {
    match args.get("run_id") {
        Some(Value::String(s)) => Ok(s.clone()),
        other => Err(invalid(
            "run_id",
            "must be the run id run_process returned",
            other.unwrap_or(&Value::Null),
        )),
    }
}

/// The record of run `id` of this agent and the call's tenant; any other id (malformed,
/// unknown, another tenant's or agent's) is the same `INVALID_ARGS`.
async fn owned_run(
    agent: &Agent,
    id: &str,
    ctx: &ToolContext,
) -> Result<(Arc<ProcessRuns>, ProcessRunRecord), ToolError> {
    let unknown = || {
        invalid(
            "run_id",
            format!("no background run `{id}` of this agent; use the run_id run_process returned"),
            &Value::String(id.to_owned()),
        )
    };
    if !valid_run_id(id) {
        return Err(unknown());
    }
    let store = store(agent).await?;
    match store
        .get(&tenant_of(ctx), &agent.name, id)
        .await
        .map_err(journal)?
    {
        Some(record) => Ok((store, record)),
        None => Err(unknown()),
    }
}

async fn stop(agent: &Agent, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    let caps = agent.runs.config().caps;
    let id = run_id_arg(&args)?;
    let (store, record) = owned_run(agent, &id, ctx).await?;
    let record = settle(&store, record, caps).await?;
    if record.status.is_final() {
        // Ended already (by itself, stopped before, lost): said as it is.
        return view(record, caps.tail_bytes);
    }
    if Machine::this().sees(&record) == Seen::Elsewhere {
        return Err(ToolError::handler(format!(
            "background run `{id}` runs on host `{}`; only toolshed on that machine can stop it",
            record.host.as_deref().unwrap_or_default()
        )));
    }
    let dir = PathBuf::from(&record.state_dir);
    // The supervisor as recorded, else as its status file names it (its starter died
    // before recording it); a run still starting has none to ask yet.
    let supervisor = match (record.supervisor_pid, record.supervisor_start) {
        (Some(pid), Some(start)) => Some((pid, start)),
        _ => detached::read_status(&dir).ok().flatten().and_then(|s| {
            detached::process_start_time(s.supervisor_pid).map(|t| (s.supervisor_pid, t))
        }),
    };
    let Some((pid, start)) = supervisor else {
        return Err(ToolError::handler(format!(
            "background run `{id}` is still starting; stop it once check_run reports it running"
        ))
        .with_details(json!({"retryable": true})));
    };
    let asked = detached::request_stop(pid, start).map_err(|e| {
        ToolError::handler(format!("cannot stop background run `{id}`: {}", e.message))
    })?;
    if asked {
        // The supervisor kills the sandbox and writes how the command ended; wait for
        // that (bounded), then record it.
        let deadline = std::time::Instant::now() + caps.stop_wait;
        loop {
            let done = detached::read_status(&dir)
                .ok()
                .flatten()
                .is_some_and(|s| s.state != DetachedState::Running);
            if done || !supervisor_alive(pid, start) {
                break;
            }
            if std::time::Instant::now() >= deadline {
                return Err(ToolError::handler(format!(
                    "background run `{id}` was asked to stop and has not stopped within {} s; check it with check_run",
                    caps.stop_wait.as_secs()
                ))
                .with_details(json!({"retryable": true})));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let record = settle(&store, record, caps).await?;
    view(record, caps.tail_bytes)
}

async fn check(agent: &Agent, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    let caps = agent.runs.config().caps;
    let id = run_id_arg(&args)?;
    let tail = match args.get("tail_bytes") {
        None | Some(Value::Null) => caps.tail_bytes,
        Some(v) => match v.as_u64() {
            Some(n) if n <= caps.max_tail_bytes => n,
            _ => {
                return Err(invalid(
                    "tail_bytes",
                    format!("must be a whole number from 0 to {}", caps.max_tail_bytes),
                    v,
                ));
            }
        },
    };
    let (store, record) = owned_run(agent, &id, ctx).await?;
    let record = settle(&store, record, caps).await?;
    view(record, tail)
}

/// Brings a run that is not final up to date from its status file and its supervisor.
pub(super) async fn settle(
    store: &ProcessRuns,
    r: ProcessRunRecord,
    caps: ProcessCaps,
) -> Result<ProcessRunRecord, ToolError> {
    if r.status.is_final() {
        return Ok(r);
    }
    match Machine::this().sees(&r) {
        Seen::Here => {}
        // Its pid means nothing here: it is reported as recorded.
        Seen::Elsewhere => return Ok(r),
        Seen::Restarted => {
            let end = ProcessEnd {
                status: ProcessStatus::Lost,
                exit_code: None,
                signal: None,
                message: Some(
                    "the machine it ran on restarted since it started, and the sandboxed process died with it; start it again with run_process"
                        .to_owned(),
                ),
                ended_at: toolshed_journal_now(),
            };
            return store.finish(&r.id, end).await.map_err(journal);
        }
    }
    let dir = PathBuf::from(&r.state_dir);
    let status = detached::read_status(&dir).ok().flatten();
    if let Some(s) = &status
        && let Some(end) = ended(s)
    {
        return store.finish(&r.id, end).await.map_err(journal);
    }
    let alive = match (r.supervisor_pid, r.supervisor_start) {
        (Some(pid), Some(start)) => supervisor_alive(pid, start),
        // Its starter died before recording the supervisor: the status file names it,
        // when the supervisor got that far.
        _ => match &status {
            Some(s) => detached::process_start_time(s.supervisor_pid).is_some(),
            None => {
                let age = toolshed_journal_now().saturating_sub(r.created_at);
                u64::try_from(age).unwrap_or(0) < caps.starting_grace.as_millis() as u64
            }
        },
    };
    if alive {
        // Its starter died after the supervisor answered but before recording it: the
        // status file names the supervisor, which runs; record it as the starter would.
        if r.status == ProcessStatus::Starting
            && let Some(s) = &status
            && let Some(start) = detached::process_start_time(s.supervisor_pid)
        {
            return store
                .mark_running(&r.id, s.supervisor_pid, start, s.started_at_ms)
                .await
                .map_err(journal);
        }
        return Ok(r);
    }
    // It may have written its end just before it exited: read once more.
    if let Some(s) = detached::read_status(&dir).ok().flatten()
        && let Some(end) = ended(&s)
    {
        return store.finish(&r.id, end).await.map_err(journal);
    }
    let who = r
        .supervisor_pid
        .or(status.as_ref().map(|s| s.supervisor_pid))
        .map(|p| format!(" (pid {p})"))
        .unwrap_or_default();
    let end = ProcessEnd {
        status: ProcessStatus::Lost,
        exit_code: None,
        signal: None,
        message: Some(format!(
            "its supervisor{who} is gone without recording how the process ended: it was killed (SIGKILL, the OOM killer) or the machine restarted, and the sandboxed process died with it; start it again with run_process"
        )),
        ended_at: toolshed_journal_now(),
    };
    store.finish(&r.id, end).await.map_err(journal)
}

/// The end a status file records, if it records one.
fn ended(s: &DetachedStatus) -> Option<ProcessEnd> {
    let at = s.ended_at_ms.unwrap_or_else(toolshed_journal_now);
    match s.state {
        DetachedState::Running => None,
        DetachedState::Exited if s.killed.as_deref() == Some(detached::STOPPED) => {
            Some(ProcessEnd {
                status: ProcessStatus::Stopped,
                exit_code: s.exit_code,
                signal: s.signal,
                message: Some("stopped by stop_run: its sandbox was killed".into()),
                ended_at: at,
            })
        }
        DetachedState::Exited => Some(ProcessEnd {
            status: ProcessStatus::Exited,
            exit_code: s.exit_code,
            signal: s.signal,
            message: s
                .killed
                .as_deref()
                .map(|k| format!("stopped by the supervisor: {k}")),
            ended_at: at,
        }),
        DetachedState::Failed => Some(ProcessEnd {
            status: ProcessStatus::Failed,
            exit_code: None,
            signal: None,
            message: s.message.clone(),
            ended_at: at,
        }),
    }
}

/// What `check_run` (and a repeated `run_process`) answers.
fn view(r: ProcessRunRecord, tail: u64) -> Result<Value, ToolError> {
    let dir = PathBuf::from(&r.state_dir);
    let (bytes, _) = if tail == 0 {
        (Vec::new(), false)
    } else {
        detached::read_tail(&dir, tail).unwrap_or_default()
    };
    let written = detached::read_status(&dir)
        .ok()
        .flatten()
        .map(|s| s.output_bytes);
    let on_disk = file_len(&dir.join(detached::OUTPUT_FILE))
        + file_len(&dir.join(detached::OUTPUT_ROTATED_FILE));
    // The status counts everything written once the run ended; while it runs, the
    // files are the count.
    let total = written.unwrap_or(0).max(on_disk);
    let mut out = json!({
        "run_id": r.id,
        "process": r.process,
        "args": r.args,
        "status": r.status.as_str(),
        "exit_code": r.exit_code,
        "signal": r.signal,
        "started_at_ms": r.started_at,
        "ended_at_ms": r.ended_at,
        "output_tail": String::from_utf8_lossy(&bytes),
        "output_truncated": total > bytes.len() as u64,
        "output_bytes": total,
    });
    if let Some(m) = &r.message {
        out["message"] = json!(m);
    }
    if let Some(h) = &r.host {
        out["host"] = json!(h);
    }
    if !r.status.is_final() && Machine::this().sees(&r) == Seen::Elsewhere {
        out["message"] = json!(format!(
            "it runs on host `{}`: its status is as that machine last recorded it, and its output is read there",
            r.host.as_deref().unwrap_or_default()
        ));
    }
    Ok(out)
}

/// The machine this process runs on, as background runs record it: its host name and
/// its current boot. Read once.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    host: String,
    boot_id: String,
}

/// How this machine stands to a background run's supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It was started here, in this boot (or recorded before hosts were): its pid can
    /// be checked.
    Here,
    /// It was started here before the machine restarted: it is gone.
    Restarted,
    /// It runs on another machine: only a check there can tell.
    Elsewhere,
}

impl Machine {
    pub(crate) fn this() -> &'static Machine {
        static THIS: std::sync::OnceLock<Machine> = std::sync::OnceLock::new();
        THIS.get_or_init(|| {
            let read = |path: &str| {
                std::fs::read_to_string(path)
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_default()
            };
            Machine {
                host: read("/proc/sys/kernel/hostname"),
                boot_id: read("/proc/sys/kernel/random/boot_id"),
            }
        })
    }

    /// How this machine stands to `r`'s supervisor. A host name and a boot both
    /// recorded decide it; a record without them is checked here, as before hosts were
    /// recorded.
    pub(crate) fn sees(&self, r: &ProcessRunRecord) -> Seen {
        Self::stands(&self.host, &self.boot_id, r)
    }

    fn stands(host: &str, boot_id: &str, r: &ProcessRunRecord) -> Seen {
        match (r.host.as_deref(), r.boot_id.as_deref()) {
            (Some(h), _) if !h.is_empty() && h != host => Seen::Elsewhere,
            (Some(_), Some(b)) if !b.is_empty() && !boot_id.is_empty() && b != boot_id => {
                Seen::Restarted
            }
            _ => Seen::Here,
        }
    }
}

fn file_len(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).map(|m| m.len()).unwrap_or(0)
}

impl super::config::ArgDef {
    fn kind_name(&self) -> &'static str {
        match self.kind {
            super::config::ArgType::String => "a string",
            super::config::ArgType::Integer => "an integer",
            super::config::ArgType::Number => "a number",
            super::config::ArgType::Boolean => "true or false",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Machine, ProcessRunRecord, ProcessStatus, Seen};

    fn record(host: Option<&str>, boot_id: Option<&str>) -> ProcessRunRecord {
        ProcessRunRecord {
            id: "proc_1".into(),
            tenant: "default".into(),
            agent: "a".into(),
            run_id: "r".into(),
            session_id: "s".into(),
            process: "train".into(),
            args: serde_json::json!({}),
            state_dir: "/nowhere".into(),
            supervisor_pid: Some(1),
            supervisor_start: Some(1),
            status: ProcessStatus::Running,
            exit_code: None,
            signal: None,
            message: None,
            created_at: 0,
            started_at: Some(0),
            ended_at: None,
            host: host.map(Into::into),
            boot_id: boot_id.map(Into::into),
        }
    }

    #[test]
    fn a_run_is_checked_only_on_its_own_machine_and_boot() {
        let stands = |h, b| Machine::stands("worker-1", "boot-2", &record(h, b));
        assert_eq!(stands(Some("worker-1"), Some("boot-2")), Seen::Here);
        // Recorded before hosts were: checked here, as before.
        assert_eq!(stands(None, None), Seen::Here);
        // Another machine sharing the database: its pid means nothing here.
        assert_eq!(stands(Some("worker-2"), Some("boot-2")), Seen::Elsewhere);
        assert_eq!(stands(Some("worker-2"), None), Seen::Elsewhere);
        // This machine, an earlier boot: its supervisor is gone.
        assert_eq!(stands(Some("worker-1"), Some("boot-1")), Seen::Restarted);
        // A boot this machine cannot read says nothing.
        assert_eq!(
            Machine::stands("worker-1", "", &record(Some("worker-1"), Some("boot-1"))),
            Seen::Here
        );
        // This process's own machine is read from the kernel.
        let this = Machine::this();
        assert!(
            !this.host.is_empty() && !this.boot_id.is_empty(),
            "{this:?}"
        );
    }
}
