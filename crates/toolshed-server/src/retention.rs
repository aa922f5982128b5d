//! The server's retention task (`toolshed serve --retain-runs 30d`): every
//! [`Retention::interval`], prune the finished runs that ended longer ago than
//! [`Retention::older_than`], in the journal's bounded batches, and return the space.

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolshed_journal::{Journal, PruneOptions, PruneRule, SpaceMode};

use crate::routes::attachments::{AttachmentStores, ReleasedBlobs, release_blobs};

/// How long the server keeps finished runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Finished runs (completed, failed, cancelled) that ended longer ago than this are
    /// removed with their calls and crumbs. Running and parked runs are always kept.
    pub older_than: Duration,
    /// How often to prune (default 5 minutes): the first pass runs at start-up.
    pub interval: Duration,
    /// How each pass paces itself.
    pub options: PruneOptions,
}

impl Retention {
    /// Keep finished runs for `older_than`, pruning every 5 minutes.
    pub fn new(older_than: Duration) -> Self {
        Retention {
            older_than,
            interval: Duration::from_secs(300),
            options: PruneOptions::default(),
        }
    }
}

/// Prune now and then every interval, until the task is aborted. A failed pass is
/// logged and tried again at the next interval; batches it committed stay removed.
/// The files of attachments it removed go from the blob folder when no attachment
/// names them any more.
pub(crate) async fn run(
    journal: Arc<dyn Journal>,
    attachments: Option<AttachmentStores>,
    retention: Retention,
) {
    let mut ticks = tokio::time::interval(retention.interval.max(Duration::from_millis(1)));
    // A pass longer than the interval delays the next one instead of starting a burst.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut vacuum_noted = false;
    loop {
        ticks.tick().await;
        let rule = PruneRule::older_than(retention.older_than);
        let started = Instant::now();
        match toolshed_journal::prune(journal.as_ref(), &rule, retention.options).await {
            Ok(report) => {
                let took_ms = started.elapsed().as_secs_f64() * 1000.0;
                let released = match &attachments {
                    Some((store, blobs)) if !report.released_blobs.is_empty() => {
                        release_blobs(store, blobs, &report.released_blobs).await
                    }
                    _ => ReleasedBlobs::default(),
                };
                for failure in &released.failed {
                    tracing::warn!(error = %failure, "a pruned attachment's file stays");
                }
                if report.pruned != Default::default() {
                    tracing::info!(
                        runs = report.pruned.runs,
                        calls = report.pruned.calls,
                        attachments = report.pruned.attachments,
                        process_runs = report.pruned.process_runs,
                        files = released.removed,
                        batches = report.batches,
                        reclaimed_bytes = report.reclaimed_bytes,
                        took_ms,
                        "pruned finished runs"
                    );
                } else {
                    tracing::debug!(took_ms, "nothing to prune");
                }
                if !vacuum_noted
                    && report
                        .space
                        .is_some_and(|s| s.mode == SpaceMode::VacuumNeeded)
                {
                    vacuum_noted = true;
                    tracing::warn!(
                        "the journal's SQLite file predates incremental vacuum: pruned runs' pages are reused but the file does not shrink; stop the server and run `toolshed runs vacuum` once"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, code = %e.code(), "pruning finished runs failed"),
        }
    }
}
