//! `toolshed runs prune` and `toolshed runs vacuum`: removing finished runs from the
//! journal and returning their space (prune also deletes the workspaces of runs that
//! ended or are gone, `workspaces.rs`); and the durations (`30d`, `12h`, `90m`) that
//! `prune --older-than` and `serve --retain-runs` take.

use std::time::Duration;

use clap::Args;
use serde_json::json;
use toolshed_journal::{PrunableStatus, PruneOptions, PruneRule, SpaceMode};

use anyhow::anyhow;
use toolshed_server::routes::attachments::{ReleasedBlobs, release_blobs};

use crate::db::{Db, journal_failure};
use crate::output::{EXIT_INTERNAL, Failure, print, print_json};

/// Arguments of `toolshed runs prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove runs that ended longer ago than this: a whole number and a unit, `s`, `m`,
    /// `h`, `d` or `w` (e.g. `30d`, `12h`, `90m`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    older_than: Duration,
    /// Only runs with these statuses, comma-separated (default: completed, failed,
    /// cancelled). Running and parked runs are never pruned.
    #[arg(long, value_name = "STATUS,…", value_delimiter = ',', value_parser = parse_status)]
    status: Vec<PrunableStatus>,
    /// Count what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// The most runs one transaction removes (the writes of a server on the same
    /// database wait at most one batch).
    #[arg(long, value_name = "RUNS", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
}

/// `toolshed runs prune`.
pub async fn prune(args: PruneArgs, db: &Db, json_out: bool) -> Result<(), Failure> {
    let mut rule = PruneRule::older_than(args.older_than);
    if !args.status.is_empty() {
        let mut statuses = Vec::new();
        for s in args.status {
            if !statuses.contains(&s) {
                statuses.push(s);
            }
        }
        rule.statuses = statuses;
    }
    let journal = db.journal().await?;
    let statuses: Vec<&str> = rule.statuses.iter().map(|s| s.as_str()).collect();
    let before = crate::runs::format_time(rule.ended_before_ms);
    if args.dry_run {
        let counted = journal
            .count_prunable(&rule)
            .await
            .map_err(journal_failure)?;
        // Today's ended runs' workspaces (those of the runs pruned are among them).
        let swept = crate::workspaces::sweep(journal.as_ref(), true).await?;
        if json_out {
            print_json(&json!({
                "dry_run": true,
                "runs": counted.runs,
                "calls": counted.calls,
                "attachments": counted.attachments,
                "process_runs": counted.process_runs,
                "ended_before_ms": rule.ended_before_ms,
                "statuses": statuses,
                "workspaces": swept.removed.len(),
                "workspaces_kept_for_background_runs": swept.kept_for_background,
            }));
        } else {
            print(&format!(
                "would remove {} and {} ({} runs that ended before {before} UTC), {}, {}, and {} of runs that ended or are gone; running and parked runs are kept{}",
                count(counted.runs, "run"),
                count(counted.calls, "call"),
                statuses.join(", "),
                count(counted.attachments, "attachment"),
                count(counted.process_runs, "ended background run"),
                count(swept.removed.len() as u64, "workspace"),
                kept_text(&swept),
            ));
        }
        return Ok(());
    }
    let options = PruneOptions {
        batch_runs: args.batch,
        ..PruneOptions::default()
    };
    let report = toolshed_journal::prune(journal.as_ref(), &rule, options)
        .await
        .map_err(journal_failure)?;
    let space = report.space;
    // The workspaces of the runs just pruned, and of any other run that ended or is gone.
    let swept = crate::workspaces::sweep(journal.as_ref(), false).await?;
    let files = release_files(db, &report.released_blobs).await?;
    let folders = crate::agent::processes_for_cleanup()
        .sweep_state(false)
        .await
        .map_err(|e| Failure::Error {
            code: EXIT_INTERNAL,
            error: anyhow!("the pruned background runs' folders: {e}"),
        })?;
    if json_out {
        print_json(&json!({
            "dry_run": false,
            "runs": report.pruned.runs,
            "calls": report.pruned.calls,
            "attachments": report.pruned.attachments,
            "attachment_files": files.removed,
            "attachment_files_kept": files.failed,
            "process_runs": report.pruned.process_runs,
            "process_folders": folders.len(),
            "batches": report.batches,
            "ended_before_ms": rule.ended_before_ms,
            "statuses": statuses,
            "reclaimed_bytes": report.reclaimed_bytes,
            "space": space,
            "vacuum_needed": space.is_some_and(|s| s.mode == SpaceMode::VacuumNeeded),
            "workspaces": swept.removed.len(),
            "workspaces_kept_for_background_runs": swept.kept_for_background,
        }));
        return Ok(());
    }
    let mut text = format!(
        "removed {} and {} ({} runs that ended before {before} UTC) in {}, {} ({}), {} ({}), and {} of runs that ended or are gone{}",
        count(report.pruned.runs, "run"),
        count(report.pruned.calls, "call"),
        statuses.join(", "),
        count(report.batches, "batch"),
        count(report.pruned.attachments, "attachment"),
        count(files.removed, "file"),
        count(report.pruned.process_runs, "ended background run"),
        count(folders.len() as u64, "state folder"),
        count(swept.removed.len() as u64, "workspace"),
        kept_text(&swept),
    );
    match space {
        Some(s) if s.mode == SpaceMode::Incremental => text.push_str(&format!(
            "; returned {} to the file system ({} now)",
            bytes(report.reclaimed_bytes),
            bytes(s.size_bytes)
        )),
        Some(s) if s.mode == SpaceMode::VacuumNeeded => text.push_str(&format!(
            "\nthe file keeps {} of free pages, which new runs reuse: this database was created before toolshed returned space by itself; run `toolshed runs vacuum` once (it rewrites the file; stop the server first) and later prunes shrink it",
            bytes(s.free_bytes)
        )),
        _ => {}
    }
    for failure in &files.failed {
        text.push_str(&format!("\nkept a file no attachment names: {failure}"));
    }
    print(&text);
    Ok(())
}

/// Delete the blob files of the attachments a prune removed, unless an attachment names
/// them again (`release_blobs`).
async fn release_files(db: &Db, released: &[String]) -> Result<ReleasedBlobs, Failure> {
    if released.is_empty() {
        return Ok(ReleasedBlobs::default());
    }
    let (store, blobs) = crate::attach::stores(db).await?;
    Ok(release_blobs(&store, &blobs, released).await)
}

/// `toolshed runs vacuum`: the one-time rewrite of an older SQLite file.
pub async fn vacuum(db: &Db, json_out: bool) -> Result<(), Failure> {
    let journal = db.journal().await?;
    let before = journal.reclaim_space(0).await.map_err(journal_failure)?;
    let after = journal.vacuum().await.map_err(journal_failure)?;
    if json_out {
        print_json(&json!({
            "before": before,
            "after": after,
            "reclaimed_bytes": before.size_bytes.saturating_sub(after.size_bytes),
        }));
        return Ok(());
    }
    print(&match after.mode {
        SpaceMode::Managed => {
            "PostgreSQL reclaims deleted rows with its own autovacuum: nothing to do".to_owned()
        }
        _ => format!(
            "{} → {}: free pages are returned after every prune from now on",
            bytes(before.size_bytes),
            bytes(after.size_bytes)
        ),
    });
    Ok(())
}

/// A duration as the CLI takes it: a whole number and a unit, `s`, `m`, `h`, `d` or `w`.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let hint = "expected a whole number and a unit: s, m, h, d or w (e.g. 30d, 12h, 90m)";
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit; {hint}"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number; {hint}"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(format!("`{text}`: unknown unit `{unit}`; {hint}")),
    };
    n.checked_mul(seconds)
        .filter(|s| *s <= 100 * 365 * 86_400)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is more than 100 years"))
}

/// A status `--status` takes: completed, failed or cancelled.
fn parse_status(text: &str) -> Result<PrunableStatus, String> {
    let choices = "choose from completed, failed, cancelled";
    match text.trim() {
        "running" => Err(format!(
            "running runs are never pruned: a driver may still record their calls; {choices}"
        )),
        "parked" => Err(format!(
            "parked runs are never pruned: they wait for a person's approval or answer; {choices}"
        )),
        other => PrunableStatus::parse(other)
            .ok_or_else(|| format!("`{other}` is not a run status; {choices}")),
    }
}

/// The workspaces kept for background runs, as a clause.
fn kept_text(swept: &crate::workspaces::Swept) -> String {
    match swept.kept_for_background.len() {
        0 => String::new(),
        n => format!(
            " ({} kept: a background run of theirs still runs)",
            count(n as u64, "workspace")
        ),
    }
}

fn count(n: u64, noun: &str) -> String {
    let plural = match (n, noun) {
        (1, _) => noun.to_owned(),
        (_, "batch") => "batches".to_owned(),
        _ => format!("{noun}s"),
    };
    format!("{n} {plural}")
}

fn bytes(n: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if n >= 1024 * 1024 {
        format!("{:.1} MiB", n as f64 / MIB)
    } else {
        format!("{:.0} KiB", n as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_take_a_number_and_a_unit() {
        assert_eq!(parse_age("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_age("90m"), Ok(Duration::from_secs(90 * 60)));
        assert_eq!(parse_age("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in ["30", "d", "", "30x", "-1d", "1.5h", "99999999999999999999d"] {
            let e = parse_age(bad).unwrap_err();
            assert!(
                e.contains("e.g. 30d") || e.contains("100 years"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn only_final_statuses_can_be_named() {
        assert_eq!(parse_status("failed"), Ok(PrunableStatus::Failed));
        assert!(parse_status("parked").unwrap_err().contains("never pruned"));
        assert!(
            parse_status("running")
                .unwrap_err()
                .contains("never pruned")
        );
        assert!(
            parse_status("done")
                .unwrap_err()
                .contains("completed, failed")
        );
    }
}
