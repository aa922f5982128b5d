//! `toolshed approvals …` and `toolshed answer`: decide what parked runs wait for. The
//! decision is journaled with who and when; `toolshed runs resume` then continues the run.

use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::json;
use toolshed_journal::{Gate, GateFilter};

use crate::db::{Db, journal_failure, runtime_failure};
use crate::output::{Failure, print, print_json, table};

/// `toolshed approvals` subcommands.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List calls waiting for a person (approvals and human tools' answers).
    List {
        /// Only this run's calls.
        #[arg(long)]
        run: Option<String>,
    },
    /// Approve a call; it runs when its run resumes.
    Approve(DecideArgs),
    /// Deny a call; on resume it becomes an error result naming who denied it and why.
    Deny(DecideArgs),
}

/// Arguments of `approve` and `deny`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The call id (from `toolshed approvals list` or the parked run's message).
    id: String,
    /// Why.
    #[arg(long)]
    reason: Option<String>,
    /// Who decides (default: `$TOOLSHED_USER`, else `$USER`).
    #[arg(long)]
    by: Option<String>,
}

/// Arguments of `toolshed answer`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The call id of the human tool's call.
    call_id: String,
    /// The answer, a JSON value matching the tool's schema; `@FILE` reads a file.
    #[arg(long = "json", value_name = "JSON")]
    answer: String,
    /// Who answers (default: `$TOOLSHED_USER`, else `$USER`).
    #[arg(long)]
    by: Option<String>,
}

fn who(by: Option<String>) -> String {
    by.or_else(|| std::env::var("TOOLSHED_USER").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "cli".into())
}

/// Run an `approvals` subcommand.
pub async fn run(cmd: ApprovalsCommand, db: &Db, json_out: bool) -> Result<(), Failure> {
    let journal = db.journal().await?;
    match cmd {
        ApprovalsCommand::List { run } => {
            let pending = journal
                .pending_gates(&GateFilter {
                    run_id: run,
                    tenant: None,
                })
                .await
                .map_err(journal_failure)?;
            if json_out {
                print_json(&serde_json::to_value(&pending).unwrap_or_default());
            } else {
                let rows: Vec<Vec<String>> = pending
                    .iter()
                    .map(|c| {
                        let (what, revision, asked) = match &c.gate {
                            Some(Gate::Approval {
                                reason,
                                revision,
                                four_eyes,
                                requested_by,
                                requested_at_ms,
                                ..
                            }) => (
                                format!(
                                    "approval ({reason}){}",
                                    if *four_eyes { ", four-eyes" } else { "" }
                                ),
                                revision.clone().unwrap_or_else(|| "-".into()),
                                format!(
                                    "{} {}",
                                    requested_by.as_deref().unwrap_or("-"),
                                    crate::runs::format_time(
                                        requested_at_ms.unwrap_or(c.created_at_ms)
                                    )
                                ),
                            ),
                            Some(Gate::Answer { .. }) => (
                                "answer".into(),
                                "-".into(),
                                crate::runs::format_time(c.created_at_ms),
                            ),
                            None => ("-".into(), "-".into(), "-".into()),
                        };
                        vec![
                            c.call_id.clone(),
                            c.run_id.clone(),
                            c.tool.clone(),
                            what,
                            revision,
                            asked,
                            c.args.to_string(),
                        ]
                    })
                    .collect();
                print(&table(
                    &[
                        "CALL ID",
                        "RUN",
                        "TOOL",
                        "WAITING FOR",
                        "REVISION",
                        "ASKED",
                        "ARGS",
                    ],
                    &rows,
                    60,
                ));
            }
            Ok(())
        }
        ApprovalsCommand::Approve(a) => decide(&*journal, a, true, json_out).await,
        ApprovalsCommand::Deny(a) => decide(&*journal, a, false, json_out).await,
    }
}

async fn decide(
    journal: &dyn toolshed_journal::Journal,
    a: DecideArgs,
    approve: bool,
    json_out: bool,
) -> Result<(), Failure> {
    let by = who(a.by);
    let rec = if approve {
        toolshed_runtime::approve(journal, &a.id, &by, a.reason).await
    } else {
        toolshed_runtime::deny(journal, &a.id, &by, a.reason).await
    }
    .map_err(runtime_failure)?;
    let verb = if approve { "approved" } else { "denied" };
    if json_out {
        print_json(
            &json!({"call_id": rec.call_id, "run_id": rec.run_id, "decision": verb, "by": by}),
        );
    } else {
        print(&format!(
            "call {} {verb} by {by}; continue the run with: toolshed runs resume {}",
            rec.call_id, rec.run_id
        ));
    }
    Ok(())
}

/// `toolshed answer CALL_ID --json '{…}'`.
pub async fn answer(args: AnswerArgs, db: &Db) -> Result<(), Failure> {
    let text = match args.answer.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::bad_input(anyhow!("cannot read answer file {path}: {e}")))?,
        None => args.answer.clone(),
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Failure::bad_input(anyhow!(
            "--json is not valid JSON ({e}); e.g. --json '{{\"approved\": true}}'"
        ))
    })?;
    let journal = db.journal().await?;
    let by = who(args.by);
    let rec = toolshed_runtime::answer(&*journal, &args.call_id, value, &by)
        .await
        .map_err(runtime_failure)?;
    print(&format!(
        "call {} answered by {by}; continue the run with: toolshed runs resume {}",
        rec.call_id, rec.run_id
    ));
    Ok(())
}
