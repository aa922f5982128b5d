//! `toolshed runs …`: start a plan, list, show the call timeline, resume and cancel
//! (pruning and vacuuming are in `retention.rs`).

use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use toolshed_journal::{Budgets, CallRecord, CallStatus, Gate, RunFilter, RunRecord, RunStatus};
use toolshed_runtime::{Driver, NewRunBuilder, RunOutcome};

use crate::db::{Db, journal_failure, runtime_failure};
use crate::output::{EXIT_PARKED, EXIT_TOOL_ERROR, Failure, print, print_json, table};

/// `toolshed runs` subcommands.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Start a run from a plan: a JSON list of `{"tool": NAME, "args": {…}}` executed in
    /// order (an item `{"parallel": [...]}` runs its calls concurrently).
    Start(StartArgs),
    /// List runs, newest first.
    List {
        /// Only runs with this status: running, parked, completed, failed, cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only this agent's runs.
        #[arg(long)]
        agent: Option<String>,
        /// Only this tenant's runs.
        #[arg(long)]
        tenant: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show a run and its call timeline from the journal.
    Show {
        /// The run id.
        id: String,
        /// Also print the run's journaled crumbs.
        #[arg(long)]
        crumbs: bool,
    },
    /// Continue a run started from the CLI: recorded calls replay, decided approvals and
    /// answers take effect, the rest executes. A run of an agent project loads the
    /// project it recorded (or `--agent DIR`) and refuses to go on when a tool it still
    /// has to call changed since, unless `--accept-changes`.
    Resume(ResumeArgs),
    /// Cancel a run; it will not be resumed.
    Cancel {
        /// The run id.
        id: String,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Remove finished runs (completed, failed, cancelled) that ended longer ago than
    /// `--older-than`, with their calls and crumbs, and return the space (SQLite); and
    /// delete the workspaces of runs that ended or no longer exist. Running and parked
    /// runs are never removed.
    Prune(crate::retention::PruneArgs),
    /// Rewrite an older SQLite journal once so that prunes return space to the file
    /// system (stop the server first: it holds the write lock for the whole rewrite).
    Vacuum,
}

/// Arguments of `toolshed runs start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The plan file (`-` for stdin).
    #[arg(long)]
    plan: PathBuf,
    /// The agent project whose tools the plan calls (default: the working folder's
    /// agent.yaml; else the CLI's own tools).
    #[command(flatten)]
    project: crate::agent::ProjectArgs,
    /// The agent id the run is recorded under (default: the project's agent name, else
    /// `cli`).
    #[arg(long, value_name = "NAME")]
    agent_id: Option<String>,
    /// Run in this session: `read_attachment` reads the files attached to it
    /// (`toolshed attach FILE --session ID`), and a resume keeps it. Default: a new
    /// session of the run's own.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Fail the run once it has been started this many times after crashes.
    #[arg(long)]
    max_attempts_per_task: Option<u32>,
    /// Fail the run once this many minutes have passed since it started (parked time included).
    #[arg(long)]
    max_wall_clock_min: Option<u32>,
}

/// Run a `runs` subcommand.
pub async fn run(cmd: RunsCommand, db: &Db, json_out: bool) -> Result<(), Failure> {
    match cmd {
        RunsCommand::Start(args) => start(args, db, json_out).await,
        RunsCommand::List {
            status,
            agent,
            tenant,
            limit,
        } => {
            let status = match status.as_deref() {
                None => None,
                Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
                    Failure::bad_input(anyhow!(
                        "--status `{s}` is not one of running, parked, completed, failed, cancelled"
                    ))
                })?),
            };
            let journal = db.journal().await?;
            let runs = journal
                .list_runs(&RunFilter {
                    status,
                    agent_id: agent,
                    tenant,
                    limit,
                })
                .await
                .map_err(journal_failure)?;
            if json_out {
                print_json(&serde_json::to_value(&runs).unwrap_or_default());
            } else {
                let rows: Vec<Vec<String>> = runs
                    .iter()
                    .map(|r| {
                        vec![
                            r.id.clone(),
                            r.status.as_str().into(),
                            r.agent_id.clone(),
                            driver_label(&r.driver),
                            format_time(r.created_at_ms),
                            r.error.clone().unwrap_or_default(),
                        ]
                    })
                    .collect();
                print(&table(
                    &["ID", "STATUS", "AGENT", "DRIVER", "CREATED", "ERROR"],
                    &rows,
                    60,
                ));
            }
            Ok(())
        }
        RunsCommand::Show { id, crumbs } => show(&id, crumbs, db, json_out).await,
        RunsCommand::Prune(args) => crate::retention::prune(args, db, json_out).await,
        RunsCommand::Vacuum => crate::retention::vacuum(db, json_out).await,
        RunsCommand::Resume(args) => resume_command(args, db, json_out).await,
        RunsCommand::Cancel { id, reason } => {
            let runtime = db.runtime().await?;
            runtime.cancel(&id, reason).await.map_err(runtime_failure)?;
            crate::workspaces::run_ended(runtime.journal().as_ref(), &id).await;
            if json_out {
                print_json(&json!({"id": id, "status": "cancelled"}));
            } else {
                print(&format!("run {id} cancelled"));
            }
            Ok(())
        }
    }
}

/// Arguments of `toolshed runs resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run id.
    id: String,
    /// The agent project whose tools the run calls (default: the project the run
    /// recorded; for a run that recorded none, the working folder's agent.yaml).
    #[command(flatten)]
    project: crate::agent::ProjectArgs,
    /// Resume even though tools the run still has to call changed since it started:
    /// the rest of the run uses the new code (calls already finished replay their
    /// recorded results).
    #[arg(long)]
    accept_changes: bool,
}

/// Which project a resume loads: `--no-agent` none; `--agent DIR`; the folder the run
/// recorded; for a run that recorded none, the working folder's agent.yaml unless the
/// run was one of the CLI's own tools (agent `cli`).
fn resume_project(
    args: &ResumeArgs,
    run: &RunRecord,
    recorded: Option<&toolshed_agent::ProjectIdentity>,
) -> Option<crate::agent::ProjectDir> {
    use crate::agent::ProjectDir;
    if args.project.no_agent {
        return None;
    }
    if let Some(dir) = &args.project.agent {
        return Some(ProjectDir::Flag(dir.clone()));
    }
    if let Some(r) = recorded {
        return Some(ProjectDir::Flag(r.dir.clone()));
    }
    if run.agent_id == "cli" {
        return None;
    }
    args.project.pick()
}

/// The tools the run still has to call: its driver's calls, by ordinal, that have not
/// finished (never started, started and cut off, parked, approved).
fn pending_tools(driver: &Driver, calls: &[CallRecord]) -> Vec<String> {
    let planned = match driver {
        Driver::Direct { tool, .. } => vec![tool.clone()],
        Driver::Plan { steps } => plan_tools(steps),
        Driver::Library => Vec::new(),
    };
    planned
        .into_iter()
        .enumerate()
        .filter(|(ordinal, tool)| {
            !calls.iter().any(|c| {
                c.ordinal as usize == *ordinal
                    && c.tool == *tool
                    && matches!(c.status, CallStatus::Completed | CallStatus::Failed)
            })
        })
        .map(|(_, tool)| tool)
        .collect()
}

async fn resume_command(args: ResumeArgs, db: &Db, json_out: bool) -> Result<(), Failure> {
    let journal = db.journal().await?;
    let run = journal.get_run(&args.id).await.map_err(journal_failure)?;
    let recorded = crate::agent::recorded_project(&run.id, &run.driver)?;
    let Some(dir) = resume_project(&args, &run, recorded.as_ref()) else {
        return resume(&args.id, db.runtime().await?, json_out).await;
    };
    let project = match crate::agent::load_picked(&dir).await {
        Ok(p) => p,
        Err(Failure::Error { code, error })
            if recorded.is_some() && args.project.agent.is_none() =>
        {
            return Err(Failure::Error {
                code,
                error: error.context(format!(
                    "run {} ran the agent project in {}, which does not load now; fix it, or pass --agent DIR where the project is now",
                    run.id,
                    dir.path().display()
                )),
            });
        }
        Err(e) => return Err(e),
    };
    let resumed = async {
        if let Some(was) = &recorded {
            let driver: Driver = serde_json::from_value(run.driver.clone()).map_err(|e| {
                Failure::bad_input(anyhow!(
                    "run {} has a driver this CLI cannot read: {e}",
                    run.id
                ))
            })?;
            let calls = journal
                .calls_of_run(&run.id)
                .await
                .map_err(journal_failure)?;
            let pending = pending_tools(&driver, &calls);
            if let Err(changed) = was.check_resume(
                &run.id,
                &project.identity,
                pending.iter().map(String::as_str),
            ) {
                if !args.accept_changes {
                    return Err(Failure::bad_input(anyhow!(
                        "{changed} [{}]",
                        changed.code()
                    )));
                }
                // Said once, on stderr, so a script's log shows what it accepted.
                eprintln!(
                    "resuming run {} with the new code (--accept-changes):\n- {}",
                    run.id,
                    changed.changes.join("\n- ")
                );
                // The accepted revisions become the run's: a later resume compares
                // with them, and does not ask about these changes again.
                journal
                    .set_run_driver(&run.id, project.driver_value(&driver))
                    .await
                    .map_err(journal_failure)?;
            }
        }
        let runtime = project.runtime(db).await?;
        resume(&args.id, runtime, json_out).await
    }
    .await;
    project.shutdown().await;
    resumed
}

/// Continue run `id` over `runtime`'s tools.
async fn resume(
    id: &str,
    runtime: toolshed_runtime::Runtime,
    json_out: bool,
) -> Result<(), Failure> {
    let run = runtime
        .journal()
        .get_run(id)
        .await
        .map_err(journal_failure)?;
    let driver: Driver = serde_json::from_value(run.driver.clone()).map_err(|e| {
        Failure::bad_input(anyhow!("run {id} has a driver this CLI cannot read: {e}"))
    })?;
    let handle = runtime.resume(id).await.map_err(runtime_failure)?;
    let outcome = toolshed_runtime::drive(&handle, &driver).await;
    crate::workspaces::run_ended(runtime.journal().as_ref(), id).await;
    report(&outcome.map_err(runtime_failure)?, json_out)
}

async fn start(args: StartArgs, db: &Db, json_out: bool) -> Result<(), Failure> {
    if let Some(session) = &args.session {
        crate::attach::check_session(session)?;
    }
    let shown = args.plan.display().to_string();
    let text = if shown == "-" {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
            .map_err(|e| Failure::bad_input(anyhow!("cannot read the plan from stdin: {e}")))?;
        buf
    } else {
        std::fs::read_to_string(&args.plan)
            .map_err(|e| Failure::bad_input(anyhow!("cannot read plan file {shown}: {e}")))?
    };
    let driver =
        Driver::parse_plan(&text).map_err(|e| Failure::bad_input(anyhow!("{shown}: {e}")))?;
    let project = args.project.load().await?;
    let started = start_with(&args, &driver, &shown, project.as_ref(), db, json_out).await;
    if let Some(p) = project {
        p.shutdown().await;
    }
    started
}

async fn start_with(
    args: &StartArgs,
    driver: &Driver,
    shown: &str,
    project: Option<&crate::agent::Project>,
    db: &Db,
    json_out: bool,
) -> Result<(), Failure> {
    // Unknown tools are refused before a run is created, with the nearest names.
    let set = match project {
        Some(p) => p.agent.toolset.clone(),
        None => crate::db::toolset()?,
    };
    if let Driver::Plan { steps } = &driver {
        for name in plan_tools(steps) {
            if set.get(&name).is_none() {
                let hint = set
                    .did_you_mean(&name)
                    .map(|h| format!("; {h}"))
                    .unwrap_or_default();
                return Err(Failure::bad_input(anyhow!(
                    "{shown}: unknown tool `{name}`{hint}"
                )));
            }
        }
    }
    let (runtime, agent_id, driver_value) = match project {
        Some(p) => (
            p.runtime(db).await?,
            p.agent.file.name.clone(),
            p.driver_value(driver),
        ),
        None => (
            db.runtime_with(set).await?,
            "cli".to_owned(),
            serde_json::to_value(driver).unwrap_or_default(),
        ),
    };
    // A flag overrides agent.yaml's limit of the same name.
    let declared = project
        .map(crate::agent::Project::budgets)
        .unwrap_or_default();
    let mut new = NewRunBuilder::new(args.agent_id.as_deref().unwrap_or(&agent_id))
        .budgets(Budgets {
            max_attempts_per_task: args
                .max_attempts_per_task
                .or(declared.max_attempts_per_task),
            max_wall_clock_min: args.max_wall_clock_min.or(declared.max_wall_clock_min),
        })
        .driver(driver_value);
    if let Some(session) = &args.session {
        new = new.session_id(session.clone());
    }
    let new = new.build();
    let handle = runtime.start(new).await.map_err(runtime_failure)?;
    let outcome = toolshed_runtime::drive(&handle, driver).await;
    crate::workspaces::run_ended(runtime.journal().as_ref(), handle.id()).await;
    report(&outcome.map_err(runtime_failure)?, json_out)
}

fn plan_tools(steps: &[toolshed_runtime::PlanStep]) -> Vec<String> {
    steps
        .iter()
        .flat_map(|s| match s {
            toolshed_runtime::PlanStep::Call { tool, .. } => vec![tool.clone()],
            toolshed_runtime::PlanStep::Parallel(inner) => plan_tools(inner),
        })
        .collect()
}

/// Print how a drive ended; a parked run exits with 4.
pub fn report(outcome: &RunOutcome, json_out: bool) -> Result<(), Failure> {
    if !outcome.parked.is_empty() {
        report_parked(outcome, json_out);
        return Err(Failure::Reported(EXIT_PARKED));
    }
    if json_out {
        let calls: Vec<Value> = outcome
            .outcomes
            .iter()
            .map(|o| match &o.result {
                Ok(v) => json!({"tool": &*o.tool_name, "ok": true, "result": v}),
                Err(e) => json!({"tool": &*o.tool_name, "ok": false, "error": e}),
            })
            .collect();
        print_json(
            &json!({"run_id": outcome.run.id, "status": outcome.run.status, "calls": calls}),
        );
    } else {
        let rows: Vec<Vec<String>> = outcome
            .outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| {
                vec![
                    i.to_string(),
                    o.tool_name.to_string(),
                    if o.result.is_ok() {
                        "ok".into()
                    } else {
                        "error".into()
                    },
                    o.to_model_text(),
                ]
            })
            .collect();
        print(&format!(
            "run {} {}\n\n{}",
            outcome.run.id,
            outcome.run.status.as_str(),
            table(&["#", "TOOL", "OUTCOME", "RESULT"], &rows, 80)
        ));
    }
    // One exit code for "a call failed", whichever command drove it (`tools run`,
    // `runs start`, `runs resume`, `registry resume`).
    if outcome.outcomes.iter().any(|o| o.result.is_err()) {
        return Err(Failure::Reported(EXIT_TOOL_ERROR));
    }
    Ok(())
}

/// Say what a parked run waits for and how to go on.
pub fn report_parked(outcome: &RunOutcome, json_out: bool) {
    let run = &outcome.run.id;
    if json_out {
        let waiting: Vec<Value> = outcome
            .parked
            .iter()
            .map(|p| json!({"call_id": p.call_id, "tool": p.tool, "gate": p.gate}))
            .collect();
        print_json(&json!({"run_id": run, "status": "parked", "waiting_for": waiting}));
        return;
    }
    let mut text = format!("run {run} parked: it waits for a person.\n");
    for p in &outcome.parked {
        match &p.gate {
            Gate::Approval { reason, .. } => text.push_str(&format!(
                "  call {} ({}) needs approval ({reason}):\n    toolshed approvals approve {} [--reason TEXT]   or   toolshed approvals deny {} --reason TEXT\n",
                p.call_id, p.tool, p.call_id, p.call_id
            )),
            Gate::Answer { .. } => text.push_str(&format!(
                "  call {} ({}) needs an answer:\n    toolshed answer {} --json '{{…}}'\n",
                p.call_id, p.tool, p.call_id
            )),
        }
    }
    text.push_str(&format!("then: toolshed runs resume {run}"));
    eprintln!("{text}");
}

async fn show(id: &str, with_crumbs: bool, db: &Db, json_out: bool) -> Result<(), Failure> {
    let journal = db.journal().await?;
    let run = journal.get_run(id).await.map_err(journal_failure)?;
    let calls = journal.calls_of_run(id).await.map_err(journal_failure)?;
    let crumbs = if with_crumbs {
        Some(journal.crumbs_of_run(id).await.map_err(journal_failure)?)
    } else {
        None
    };
    if json_out {
        let mut v = json!({"run": run, "calls": calls});
        if let Some(c) = &crumbs {
            v["crumbs"] = serde_json::to_value(c).unwrap_or_default();
        }
        print_json(&v);
        return Ok(());
    }
    let mut text = run_header(&run);
    let rows: Vec<Vec<String>> = calls.iter().map(call_row).collect();
    text.push('\n');
    text.push_str(&table(
        &["#", "CALL ID", "TOOL", "STATUS", "ATTEMPTS", "MS", "RESULT"],
        &rows,
        70,
    ));
    text.push_str(&diagnostics_text(&calls));
    text.push_str(&approvals_text(&calls));
    if let Some(crumbs) = crumbs {
        text.push_str("\ncrumbs:\n");
        let rows: Vec<Vec<String>> = crumbs
            .iter()
            .map(|c| {
                let kind = c.crumb["type"].as_str().unwrap_or("?").to_owned();
                let tool = c.crumb["tool_name"].as_str().unwrap_or("").to_owned();
                let detail = c
                    .crumb
                    .get("payload")
                    .or_else(|| c.crumb.get("error"))
                    .map(Value::to_string)
                    .unwrap_or_default();
                vec![c.seq.to_string(), kind, tool, detail]
            })
            .collect();
        text.push_str(&table(&["SEQ", "TYPE", "TOOL", "DETAIL"], &rows, 70));
    }
    print(&text);
    Ok(())
}

/// The audit trail of each gated call: who asked and when, for which tool revision,
/// under which policy, and every decision (who, when, why, which revision), the ones
/// that no longer hold included.
fn approvals_text(calls: &[CallRecord]) -> String {
    let mut text = String::new();
    for c in calls {
        let Some(Gate::Approval {
            revision,
            four_eyes,
            requested_by,
            requested_at_ms,
            superseded,
            ..
        }) = &c.gate
        else {
            continue;
        };
        text.push_str(&format!(
            "\ncall {} ({}): approval asked{}{}{}{}\n",
            c.ordinal,
            c.tool,
            requested_by
                .as_deref()
                .map(|w| format!(" by {w}"))
                .unwrap_or_default(),
            requested_at_ms
                .map(|t| format!(" at {}", format_time(t)))
                .unwrap_or_default(),
            revision
                .as_deref()
                .map(|r| format!(" for revision {r}"))
                .unwrap_or_default(),
            if *four_eyes { " (four-eyes)" } else { "" },
        ));
        for d in superseded {
            text.push_str(&format!("  {} (no longer holds)\n", decision_line(d)));
        }
        if let Some(d) = &c.decision {
            text.push_str(&format!("  {}\n", decision_line(d)));
        }
    }
    text
}

fn decision_line(d: &toolshed_journal::Decision) -> String {
    format!(
        "{} by {} at {}{}{}",
        if d.approved { "approved" } else { "denied" },
        d.by,
        format_time(d.at_ms),
        d.revision
            .as_deref()
            .map(|r| format!(" for revision {r}"))
            .unwrap_or_default(),
        d.reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

/// What each call's execution printed, for the calls that printed anything: the exit
/// code or signal, whether it timed out, and its stdout and stderr (their last lines).
fn diagnostics_text(calls: &[CallRecord]) -> String {
    let mut text = String::new();
    for c in calls.iter().filter(|c| !c.diagnostics.is_empty()) {
        let d = &c.diagnostics;
        let mut facts = Vec::new();
        if let Some(code) = d.exit_code {
            facts.push(format!("exit {code}"));
        }
        if let Some(signal) = d.signal {
            facts.push(format!("signal {signal}"));
        }
        if d.timed_out {
            facts.push("timed out".to_owned());
        }
        if d.oom_killed {
            facts.push("out of memory".to_owned());
        }
        if let Some(m) = &d.mcp {
            // The MCP side of the call: which server and tool, over which era.
            let era = match (m.era.as_str(), m.protocol_version.as_str()) {
                ("", _) => "not connected".to_owned(),
                (era, "") => era.to_owned(),
                (era, version) => format!("{era} {version}"),
            };
            facts.push(format!("mcp {}/{} ({era})", m.server, m.tool));
            if let Some(ms) = c.duration_ms {
                facts.push(format!("{ms:.1} ms"));
            }
        }
        text.push_str(&format!(
            "\ncall {} ({}){}{}\n",
            c.ordinal,
            c.tool,
            if facts.is_empty() { "" } else { ": " },
            facts.join(", ")
        ));
        // The questions the tool put to the client of the call: what and how each ended.
        for ask in &d.asks {
            text.push_str(&format!(
                "  asked the client: {} -> {} ({:.1} ms)\n",
                ask.kind, ask.outcome, ask.ms
            ));
        }
        for (name, body, cut) in [
            ("stdout", &d.stdout, d.stdout_truncated),
            ("stderr", &d.stderr, d.stderr_truncated),
        ] {
            if body.trim().is_empty() {
                continue;
            }
            let lines: Vec<&str> = body.trim_end().lines().collect();
            let shown = &lines[lines.len().saturating_sub(20)..];
            let note = if cut || shown.len() < lines.len() {
                " (its end)"
            } else {
                ""
            };
            text.push_str(&format!("  {name}{note}:\n"));
            for line in shown {
                text.push_str(&format!("    {line}\n"));
            }
        }
    }
    text
}

fn run_header(run: &RunRecord) -> String {
    let mut s = format!(
        "run      {}\nstatus   {}\nagent    {}\nsession  {}\ndriver   {}\ncreated  {}\nupdated  {}\nstarts   {}\n",
        run.id,
        run.status.as_str(),
        run.agent_id,
        run.session_id,
        driver_label(&run.driver),
        format_time(run.created_at_ms),
        format_time(run.updated_at_ms),
        run.resumes,
    );
    if let Some(p) = &run.principal {
        s.push_str(&format!(
            "principal {} ({}{})\n",
            p.sub,
            p.iss,
            p.tenant
                .as_deref()
                .map(|t| format!(", tenant {t}"))
                .unwrap_or_default()
        ));
    }
    if let Some(via) = toolshed_mcp::server::Inbound::recorded(&run.driver) {
        s.push_str(&format!("via      {}\n", via.label()));
    }
    if let Some(e) = &run.error {
        s.push_str(&format!("error    {e}\n"));
    }
    s.push_str(&project_text(run));
    s
}

/// The agent project a run recorded: its folder, the agent, each tool's revision.
fn project_text(run: &RunRecord) -> String {
    let project = match crate::agent::recorded_project(&run.id, &run.driver) {
        Ok(Some(p)) => p,
        Ok(None) => return String::new(),
        Err(_) => return "project  (recorded in a form this CLI cannot read)\n".to_owned(),
    };
    let mut s = format!(
        "project  {} (agent {})\n",
        project.dir.display(),
        project.agent
    );
    let rows: Vec<Vec<String>> = project
        .tools
        .iter()
        .map(|(name, r)| {
            let files: Vec<String> = r.files.iter().map(|(f, h)| format!("{f} {h}")).collect();
            vec![
                name.clone(),
                r.origin.clone(),
                r.hash.clone(),
                files.join(", "),
            ]
        })
        .collect();
    s.push_str("\ntool revisions:\n");
    s.push_str(&table(&["TOOL", "FROM", "REVISION", "FILES"], &rows, 70));
    s.push('\n');
    s
}

fn call_row(c: &CallRecord) -> Vec<String> {
    let result = match (&c.result, &c.error, &c.gate, &c.decision) {
        (_, Some(e), _, _) => format!("{}: {}", e.code, e.message),
        (Some(v), None, _, _) => v.to_string(),
        (None, None, Some(Gate::Approval { .. }), Some(d)) => {
            format!(
                "approved by {}{}",
                d.by,
                d.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )
        }
        (None, None, Some(Gate::Approval { reason, .. }), None) => {
            format!("waiting for approval ({reason})")
        }
        (None, None, Some(Gate::Answer { .. }), _) => "waiting for an answer".into(),
        (None, None, None, _) => String::new(),
    };
    vec![
        c.ordinal.to_string(),
        c.call_id.clone(),
        c.tool.clone(),
        c.status.as_str().into(),
        c.attempts.to_string(),
        c.duration_ms.map(|d| format!("{d:.1}")).unwrap_or_default(),
        result,
    ]
}

fn driver_label(driver: &Value) -> String {
    match driver["kind"].as_str() {
        Some("direct") => format!("tools run {}", driver["tool"].as_str().unwrap_or("?")),
        Some("plan") => format!(
            "plan ({} steps)",
            driver["steps"].as_array().map_or(0, Vec::len)
        ),
        Some(other) => other.to_owned(),
        None => "-".into(),
    }
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn format_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| ms.to_string())
}
