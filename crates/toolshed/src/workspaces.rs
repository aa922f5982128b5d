//! Deleting runs' workspaces (`sandbox: true`): when a run this CLI drives, resumes or
//! cancels has ended (completed, failed or cancelled; a parked or running run keeps
//! its workspace), and in `toolshed runs prune`, which also sweeps the folders of runs
//! that ended or no longer exist. A workspace that a background run of its run still
//! sees (read-only, `run_process`) is kept until that background run ends; a later
//! prune deletes it.

use toolshed_agent::{WorkspaceConfig, Workspaces};
use toolshed_journal::{Journal, JournalError};

use crate::output::{EXIT_INTERNAL, Failure};

fn internal(message: String) -> Failure {
    Failure::Error {
        code: EXIT_INTERNAL,
        error: anyhow::anyhow!(message),
    }
}

/// The runs' workspaces as this CLI places them (nothing is built or checked).
fn workspaces() -> Workspaces {
    Workspaces::new(WorkspaceConfig::new(crate::agent::workspaces_root()))
}

/// Whether run `run_id`'s workspace may go: the run ended or is gone, and no background
/// run it started still runs.
async fn unused(journal: &dyn Journal, run_id: &str) -> Result<bool, String> {
    match journal.get_run(run_id).await {
        Ok(run) if !run.status.is_final() => return Ok(false),
        Ok(_) | Err(JournalError::NotFound { .. }) => {}
        Err(e) => {
            return Err(format!(
                "the journal cannot say how run {run_id} stands: {e}"
            ));
        }
    }
    let running = crate::agent::processes_for_cleanup()
        .still_running(run_id)
        .await?;
    Ok(running == 0)
}

/// Deletes run `run_id`'s workspace if it has one and the run has ended (see the
/// module's doc). A failure is a warning on stderr: the run's own outcome stands.
pub(crate) async fn run_ended(journal: &dyn Journal, run_id: &str) {
    let ws = workspaces();
    // Most runs have no workspace: nothing is asked of the journal for them.
    let Ok(folder) = ws.folder(run_id) else {
        return;
    };
    if std::fs::symlink_metadata(&folder).is_err() {
        return;
    }
    let removed = match unused(journal, run_id).await {
        Ok(true) => ws.remove(run_id).await.map(|_| ()),
        Ok(false) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = removed {
        eprintln!("toolshed: the workspace of run {run_id} was kept: {e}");
    }
}

/// What a sweep of the workspaces did (or, for a dry run, would do).
#[derive(Debug, Default)]
pub(crate) struct Swept {
    /// Run ids whose workspace was deleted (or would be).
    pub removed: Vec<String>,
    /// Run ids whose workspace is kept although their run ended: a background run of
    /// theirs still runs.
    pub kept_for_background: Vec<String>,
}

/// Deletes the workspaces of runs that ended or no longer exist (not those a background
/// run still sees); with `dry_run`, only says which.
pub(crate) async fn sweep(journal: &dyn Journal, dry_run: bool) -> Result<Swept, Failure> {
    let ws = workspaces();
    let ids = ws.run_ids().map_err(internal)?;
    let mut swept = Swept::default();
    for id in ids {
        let ended = match journal.get_run(&id).await {
            Ok(run) => run.status.is_final(),
            Err(JournalError::NotFound { .. }) => true,
            Err(e) => return Err(crate::db::journal_failure(e)),
        };
        if !ended {
            continue;
        }
        let running = crate::agent::processes_for_cleanup()
            .still_running(&id)
            .await
            .map_err(internal)?;
        if running > 0 {
            swept.kept_for_background.push(id);
            continue;
        }
        if !dry_run {
            ws.remove(&id).await.map_err(internal)?;
        }
        swept.removed.push(id);
    }
    Ok(swept)
}
