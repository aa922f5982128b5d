//! `toolshed tools …`: list, show, run, export and validate tools.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use toolshed_core::file::{FileFormat, ToolFile, parse_tool_file};
use toolshed_core::formats::{Vendor, export};
use toolshed_core::{ErrorCode, Tool, ToolSet, ToolSource};
use toolshed_runtime::{Driver, NewRunBuilder};

use crate::agent::ProjectArgs;
use crate::db::{Db, runtime_failure, toolset};
use crate::output::{
    EXIT_BAD_INPUT, EXIT_PARKED, EXIT_TOOL_ERROR, Failure, hidden_warnings, print, print_json,
    table,
};

/// `toolshed tools` subcommands.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List the available tools: the agent project's (the working folder's agent.yaml,
    /// or `--agent DIR`), its MCP servers' tools included, else the CLI's own.
    List {
        #[command(flatten)]
        project: ProjectArgs,
    },
    /// Show one tool's full definition.
    Show {
        /// The tool's name.
        name: String,
        /// Show it in a model vendor's format: openai, openai-strict, anthropic, gemini.
        #[arg(long)]
        format: Option<String>,
        #[command(flatten)]
        project: ProjectArgs,
    },
    /// Run a tool as a durable run (journaled, resumable) and print its result.
    Run(RunArgs),
    /// Print every tool (the agent project's, else the CLI's own) in a model vendor's
    /// format.
    Export {
        /// openai, openai-strict, anthropic or gemini.
        #[arg(long, default_value = "openai")]
        format: String,
        #[command(flatten)]
        project: ProjectArgs,
    },
    /// Check tool definition files (tool.yaml or .json); prints every problem found.
    Validate {
        /// The files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Arguments of `toolshed tools run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The tool's name.
    name: String,
    /// The arguments as a JSON object; `@FILE` reads them from a file, `-` from stdin.
    #[arg(long, default_value = "{}")]
    args: String,
    /// The agent project whose tool to run, as a run of that agent (default: the
    /// working folder's agent.yaml; else one of the CLI's own tools).
    #[command(flatten)]
    project: ProjectArgs,
    /// Run in this session: `read_attachment` reads the files attached to it
    /// (`toolshed attach FILE --session ID`), and a resume keeps it. Default: a new
    /// session of the run's own.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
}

/// The tools a command works on: those of the agent project the flags pick (which
/// must be shut down after use), or the CLI's own.
async fn tools_of(
    project: &ProjectArgs,
) -> Result<(ToolSet, Option<crate::agent::Project>), Failure> {
    match project.load().await? {
        None => Ok((toolset()?, None)),
        Some(project) => Ok((project.agent.toolset.clone(), Some(project))),
    }
}

async fn shutdown(project: Option<crate::agent::Project>) {
    if let Some(p) = project {
        p.shutdown().await;
    }
}

fn source_label(source: Option<&ToolSource>) -> String {
    match source {
        Some(ToolSource::Builtin) => "builtin".into(),
        Some(ToolSource::Skill(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "-".into(),
    }
}

/// Run a `tools` subcommand.
pub async fn run(cmd: ToolsCommand, db: &Db, json_out: bool) -> Result<(), Failure> {
    match cmd {
        ToolsCommand::List { project } => {
            let (set, project) = tools_of(&project).await?;
            let listed = list(&set, json_out);
            shutdown(project).await;
            listed
        }
        ToolsCommand::Show {
            name,
            format,
            project,
        } => {
            let (set, project) = tools_of(&project).await?;
            let shown = show(&set, &name, format.as_deref(), json_out);
            shutdown(project).await;
            shown
        }
        ToolsCommand::Run(args) => {
            let (set, project) = tools_of(&args.project).await?;
            let ran = run_tool(args, set, project.as_ref(), db, json_out).await;
            shutdown(project).await;
            ran
        }
        ToolsCommand::Export { format, project } => {
            let vendor: Vendor = format
                .parse()
                .map_err(|e| Failure::bad_input(anyhow!("--format: {e}")))?;
            let (set, project) = tools_of(&project).await?;
            print_json(&export(vendor, set.iter()));
            shutdown(project).await;
            Ok(())
        }
        ToolsCommand::Validate { files } => validate(&files, json_out),
    }
}

/// What a tool's description and schemas hide from a person reading them.
fn hidden_in(spec: &toolshed_core::ToolSpec) -> Vec<toolshed_core::text::HiddenText> {
    let mut found = Vec::new();
    toolshed_core::text::hidden_in_text("description", &spec.description, &mut found);
    toolshed_core::text::hidden_in_json("input_schema", &spec.input_schema, &mut found);
    if let Some(o) = &spec.output_schema {
        toolshed_core::text::hidden_in_json("output_schema", o, &mut found);
    }
    found
}

fn list(set: &ToolSet, json_out: bool) -> Result<(), Failure> {
    if json_out {
        let items: Vec<Value> = set
            .iter()
            .map(|t| {
                let s = t.spec();
                json!({
                    "name": s.name.as_str(),
                    "description": s.description,
                    "source": source_label(set.source_of(t.name())),
                    "effects": s.effects,
                    "idempotency": s.idempotency,
                    "approval": s.approval.describe(),
                    "streaming": s.streaming,
                    "hidden_characters": hidden_in(s),
                })
            })
            .collect();
        print_json(&Value::Array(items));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = set
        .iter()
        .map(|t| {
            let s = t.spec();
            vec![
                s.name.to_string(),
                source_label(set.source_of(t.name())),
                format!("{:?}", s.effects).to_lowercase(),
                format!("{:?}", s.idempotency).to_lowercase(),
                s.description.clone(),
            ]
        })
        .collect();
    let text = table(
        &["NAME", "SOURCE", "EFFECTS", "IDEMPOTENCY", "DESCRIPTION"],
        &rows,
        70,
    );
    print(&text);
    for t in set.iter() {
        let found = hidden_in(t.spec());
        if !found.is_empty() {
            crate::output::eprint(&format!(
                "warning: {} hides characters a reader does not see ({}); `toolshed tools show {}` shows them escaped",
                t.name(),
                found
                    .iter()
                    .map(|h| h.kind.label())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
                    .join(", "),
                t.name()
            ));
        }
    }
    Ok(())
}

fn find<'a>(set: &'a ToolSet, name: &str) -> Result<&'a Tool, Failure> {
    set.get(name).ok_or_else(|| {
        let hint = set
            .did_you_mean(name)
            .unwrap_or_else(|| "run `toolshed tools list` to see the available tools".to_owned());
        Failure::bad_input(anyhow!("unknown tool `{name}`; {hint}"))
    })
}

fn show(set: &ToolSet, name: &str, format: Option<&str>, json_out: bool) -> Result<(), Failure> {
    let tool = find(set, name)?;
    if let Some(f) = format {
        let vendor: Vendor = f
            .parse()
            .map_err(|e| Failure::bad_input(anyhow!("--format: {e}")))?;
        let all = export(vendor, std::iter::once(tool));
        // Gemini wraps declarations in an object; the others are arrays of one.
        let one = all
            .get("functionDeclarations")
            .and_then(|d| d.get(0))
            .or_else(|| all.get(0))
            .cloned()
            .unwrap_or(all);
        print_json(&one);
        return Ok(());
    }
    let file = ToolFile::from_spec(tool.spec());
    let mut value = serde_json::to_value(&file).map_err(|e| Failure::Error {
        code: crate::output::EXIT_INTERNAL,
        error: e.into(),
    })?;
    let hidden = hidden_in(tool.spec());
    if let Some(obj) = value.as_object_mut() {
        obj.insert("source".into(), json!(source_label(set.source_of(name))));
        obj.insert("streaming".into(), json!(tool.spec().streaming));
        obj.insert("retry".into(), json!(tool.spec().retry));
        obj.insert("hidden_characters".into(), json!(hidden));
    }
    if json_out {
        print_json(&value);
        return Ok(());
    }
    let s = tool.spec();
    // The flags are diagnostics (stderr); the definition, escaped, is the data.
    if !hidden.is_empty() {
        crate::output::eprint(hidden_warnings(s.name.as_str(), &hidden).trim_end());
    }
    let mut text = String::new();
    text.push_str(&format!(
        "{}\n  {}\n\n  source       {}\n  effects      {}\n  idempotency  {}\n  approval     {}\n  timeout      {}\n  max attempts {}\n  retries      {}\n  credentials  {}\n  streaming    {}\n",
        s.name,
        s.description.replace('\n', "\n  "),
        source_label(set.source_of(name)),
        format!("{:?}", s.effects).to_lowercase(),
        format!("{:?}", s.idempotency).to_lowercase(),
        s.approval.describe(),
        s.timeout
            .map(|t| format!("{}ms", t.as_millis()))
            .unwrap_or_else(|| "default (300000ms)".into()),
        s.max_attempts
            .map(|n| n.to_string())
            .unwrap_or_else(|| "unbounded".into()),
        s.retry.attempts,
        if s.credentials.is_empty() {
            "none".into()
        } else {
            s.credentials.join(", ")
        },
        s.streaming,
    ));
    text.push_str("\ninput schema:\n");
    text.push_str(&serde_json::to_string_pretty(&s.input_schema).unwrap_or_default());
    if let Some(o) = &s.output_schema {
        text.push_str("\n\noutput schema:\n");
        text.push_str(&serde_json::to_string_pretty(o).unwrap_or_default());
    }
    print(&text);
    Ok(())
}

pub(crate) fn read_args(raw: &str) -> Result<Value, Failure> {
    let (text, origin) = if raw == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .context("cannot read --args from stdin")
            .map_err(Failure::bad_input)?;
        (buf, "stdin".to_owned())
    } else if let Some(path) = raw.strip_prefix('@') {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --args file {path}"))
            .map_err(Failure::bad_input)?;
        (text, path.to_owned())
    } else {
        (raw.to_owned(), "--args".to_owned())
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        Failure::bad_input(anyhow!(
            "{origin} is not valid JSON ({e}); pass an object such as --args '{{\"query\": \"rust\"}}'"
        ))
    })?;
    if !value.is_object() {
        return Err(Failure::bad_input(anyhow!(
            "{origin} must be a JSON object of named arguments, got {}",
            toolshed_core::schema::kind_of(&value)
        )));
    }
    Ok(value)
}

async fn run_tool(
    args: RunArgs,
    set: ToolSet,
    project: Option<&crate::agent::Project>,
    db: &Db,
    json_out: bool,
) -> Result<(), Failure> {
    find(&set, &args.name)?;
    let call_args = read_args(&args.args)?;
    if let Some(session) = &args.session {
        crate::attach::check_session(session)?;
    }
    let driver = Driver::Direct {
        tool: args.name.clone(),
        args: call_args,
    };
    // A project's run records the project (its folder, each tool's revision), so a
    // resume finds it and can tell whether its code changed.
    let (runtime, agent_id, driver_value) = match project {
        Some(p) => (
            p.runtime(db).await?,
            p.agent.file.name.clone(),
            p.driver_value(&driver),
        ),
        None => (
            db.runtime_with(set).await?,
            "cli".to_owned(),
            serde_json::to_value(&driver).unwrap_or_default(),
        ),
    };
    // agent.yaml's limits hold for every run of the project, recorded with the run so a
    // resume holds them too.
    let mut new = NewRunBuilder::new(&agent_id).driver(driver_value).budgets(
        project
            .map(crate::agent::Project::budgets)
            .unwrap_or_default(),
    );
    if let Some(session) = args.session {
        new = new.session_id(session);
    }
    let new = new.build();
    let handle = runtime.start(new).await.map_err(runtime_failure)?;
    let outcome = toolshed_runtime::drive(&handle, &driver).await;
    crate::workspaces::run_ended(runtime.journal().as_ref(), handle.id()).await;
    let outcome = outcome.map_err(runtime_failure)?;
    let run_id = outcome.run.id.clone();
    if !outcome.parked.is_empty() {
        crate::runs::report_parked(&outcome, json_out);
        if let (Some(p), false) = (project, json_out) {
            // The resume finds the project by itself; say which one it will load.
            eprintln!(
                "(the run calls the tools of the agent `{}` in {}; the resume loads that project again and checks that its tools did not change)",
                p.agent.file.name,
                p.identity.dir.display()
            );
        }
        return Err(Failure::Reported(EXIT_PARKED));
    }
    let Some(call) = outcome.outcomes.first() else {
        return Err(Failure::Error {
            code: crate::output::EXIT_INTERNAL,
            error: anyhow!("run {run_id} ended without a result"),
        });
    };
    let duration_ms = call.duration.as_secs_f64() * 1000.0;
    match &call.result {
        Ok(value) => {
            if json_out {
                print_json(
                    &json!({"ok": true, "run_id": run_id, "result": value, "duration_ms": duration_ms, "attempts": call.attempts}),
                );
            } else {
                print(&match value {
                    Value::String(s) => s.clone(),
                    other => serde_json::to_string_pretty(other).unwrap_or_default(),
                });
            }
            Ok(())
        }
        Err(err) => {
            if json_out {
                print_json(
                    &json!({"ok": false, "run_id": run_id, "error": err, "duration_ms": duration_ms, "attempts": call.attempts}),
                );
            } else {
                crate::output::eprint(&format!("error {}: {}", err.code, err.message));
            }
            let code = match err.code {
                ErrorCode::InvalidArgs | ErrorCode::UnknownTool => EXIT_BAD_INPUT,
                _ => EXIT_TOOL_ERROR,
            };
            Err(Failure::Reported(code))
        }
    }
}

fn validate(files: &[PathBuf], json_out: bool) -> Result<(), Failure> {
    let mut reports = Vec::new();
    let mut failed = false;
    for path in files {
        let shown = path.display().to_string();
        let outcome = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {shown}: {e}"))
            .and_then(|text| {
                parse_tool_file(&text, FileFormat::from_path(&shown), Some(&shown))
                    .map_err(|e| e.to_string())
            });
        match outcome {
            Ok(spec) => {
                if !json_out {
                    print(&format!("ok    {shown} ({})", spec.name));
                }
                reports.push(json!({"file": shown, "ok": true, "name": spec.name.as_str()}));
            }
            Err(message) => {
                failed = true;
                if !json_out {
                    eprintln!("error {message}");
                }
                reports.push(json!({"file": shown, "ok": false, "error": message}));
            }
        }
    }
    if json_out {
        print_json(&Value::Array(reports));
    }
    if failed {
        Err(Failure::Reported(EXIT_BAD_INPUT))
    } else {
        Ok(())
    }
}
