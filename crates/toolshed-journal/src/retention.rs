//! Retention: deleting finished runs (with their calls and crumbs) that ended before a
//! cutoff, in bounded batches, and returning the space to the file system.
//!
//! The rule is written once, over the store's [`Executor`] ([`prune_batch`],
//! [`count_prunable`]); each database only runs it in a transaction of its own on a
//! write connection (SQLite: the journal's one write connection, between two group
//! commits; PostgreSQL: a connection of its own, beside the writer task). [`prune`]
//! drives it: one batch per transaction, with a pause after each one so that the
//! writes of running agents never queue behind a long delete.
//!
//! **Parked and running runs are never pruned.** The statuses a prune may name are a
//! type of their own ([`PrunableStatus`]: completed, failed, cancelled), and every
//! statement also says so in its own text (`AND (status = 'completed' OR …)`), so a
//! run that still waits for a person or a driver stays whatever the caller asks.

use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use serde::Serialize;
use toolshed_store::{Dialect, Executor, Param};

use crate::{Journal, Result, RunStatus};

toolshed_core::wire_enum! {
    case = "lowercase";
    /// A status a prune may remove: only the final ones. `running` and `parked` are not
    /// representable, so no caller can ask for them.
    pub enum PrunableStatus {
        /// Finished: every call has a result.
        Completed,
        /// Failed.
        Failed,
        /// Cancelled.
        Cancelled,
    }
}

impl PrunableStatus {
    /// Every final status.
    pub const ALL: [PrunableStatus; 3] = [
        PrunableStatus::Completed,
        PrunableStatus::Failed,
        PrunableStatus::Cancelled,
    ];

    /// Parse a user-given status; `None` for anything else (including `running` and
    /// `parked`, which are never pruned).
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }

    /// The run status it is.
    pub fn run_status(self) -> RunStatus {
        match self {
            PrunableStatus::Completed => RunStatus::Completed,
            PrunableStatus::Failed => RunStatus::Failed,
            PrunableStatus::Cancelled => RunStatus::Cancelled,
        }
    }
}

/// Which runs a prune removes: those in one of `statuses` whose last change (the end,
/// for a finished run) is before `ended_before_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneRule {
    /// Milliseconds since the Unix epoch: runs that ended at or after it stay.
    pub ended_before_ms: i64,
    /// The statuses to remove; empty means none (nothing is removed).
    pub statuses: Vec<PrunableStatus>,
}

impl PruneRule {
    /// Every finished run that ended more than `age` ago.
    pub fn older_than(age: Duration) -> PruneRule {
        let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        PruneRule {
            ended_before_ms: toolshed_store::time::now_ms().saturating_sub(age_ms),
            statuses: PrunableStatus::ALL.to_vec(),
        }
    }
}

/// What one batch of a prune removed, and how long it held the write connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrunedBatch {
    /// Runs and calls removed.
    pub pruned: Pruned,
    /// Blobs that attachments it removed named and no attachment names any more (see
    /// [`PruneReport::released_blobs`]).
    pub released_blobs: Vec<String>,
    /// How long the transaction held the database's write connection (SQLite: the
    /// time other writes waited at most), its commit included.
    pub held: Duration,
}

/// How many runs and calls a prune removed (or, for a dry run, would remove), with the
/// attachments and background runs that went with them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Runs.
    pub runs: u64,
    /// Their calls.
    pub calls: u64,
    /// Attachments: those of the runs removed, and those uploaded before the cutoff
    /// that nothing keeps (a session's whose session has no running or parked run, a
    /// run's whose run does not exist). Their pages go with them.
    pub attachments: u64,
    /// Ended background runs (`run_process`) whose run is removed or gone.
    pub process_runs: u64,
}

impl Pruned {
    fn add(&mut self, other: Pruned) {
        self.runs += other.runs;
        self.calls += other.calls;
        self.attachments += other.attachments;
        self.process_runs += other.process_runs;
    }
}

/// What a SQLite file does with the pages a prune frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpaceMode {
    /// Free pages are returned to the file system by incremental vacuum after a prune.
    Incremental,
    /// A file created before toolshed enabled incremental vacuum: free pages are reused,
    /// but the file does not shrink until one `VACUUM` (`toolshed runs vacuum`).
    VacuumNeeded,
    /// PostgreSQL: deleted rows are reclaimed by (auto)vacuum and reused; the tables'
    /// files are not shrunk.
    Managed,
}

/// The database's space after a step of reclaiming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Space {
    /// What happens to freed pages.
    pub mode: SpaceMode,
    /// The database's size in bytes (SQLite: pages × page size; PostgreSQL: 0, not
    /// measured).
    pub size_bytes: u64,
    /// Bytes of free pages still in the file (SQLite), reused by later writes.
    pub free_bytes: u64,
}

/// How [`prune`] paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneOptions {
    /// The most runs one transaction deletes (default 500).
    pub batch_runs: u32,
    /// How long one batch should hold the write connection (default 4 ms): batches are
    /// sized from the cost per run of the previous one, between 10 runs and
    /// `batch_runs`, so that writes queued behind a batch wait about this long at most
    /// whatever the machine and the size of the runs.
    pub batch_budget: Duration,
    /// After each batch (and each vacuum step), pause this many times as long as the
    /// batch took (default 3: pruning takes at most about a quarter of the writer's
    /// time, so writes queued behind a batch wait at most one batch).
    pub pause_factor: u32,
    /// The shortest pause between two batches (default 1 ms).
    pub min_pause: Duration,
    /// The most free pages one vacuum step returns (default 512, 2 MiB of 4 KiB pages).
    pub vacuum_step_pages: u32,
    /// Whether to return freed space after pruning (default true; SQLite only).
    pub reclaim: bool,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions {
            batch_runs: 500,
            batch_budget: Duration::from_millis(4),
            pause_factor: 3,
            min_pause: Duration::from_millis(1),
            vacuum_step_pages: 512,
            reclaim: true,
        }
    }
}

/// What [`prune`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Runs and calls removed.
    #[serde(flatten)]
    pub pruned: Pruned,
    /// The blob URIs (`blob:sha256:…`) of the files behind the attachments removed that
    /// no attachment names any more. The journal does not hold the files: whoever owns
    /// the blob folder deletes them, asking again first whether an upload has named one
    /// since (see `toolshed_server::routes::attachments::release_blobs`).
    pub released_blobs: Vec<String>,
    /// Transactions it took.
    pub batches: u64,
    /// Bytes returned to the file system by incremental vacuum (SQLite).
    pub reclaimed_bytes: u64,
    /// The space afterwards; `None` when reclaiming was not asked for.
    pub space: Option<Space>,
}

/// Remove every run `rule` selects, batch by batch (each its own transaction of at most
/// `options.batch_runs` runs, with a pause after it), then return the freed pages to the
/// file system in steps (SQLite with incremental vacuum). Returns what it removed; an
/// error stops it after the batches already committed (they stay removed).
pub async fn prune(
    journal: &dyn Journal,
    rule: &PruneRule,
    options: PruneOptions,
) -> Result<PruneReport> {
    let most = options.batch_runs.max(1);
    let least = MIN_BATCH.min(most);
    let mut limit = FIRST_BATCH.clamp(least, most);
    let mut report = PruneReport {
        pruned: Pruned::default(),
        released_blobs: Vec::new(),
        batches: 0,
        reclaimed_bytes: 0,
        space: None,
    };
    loop {
        let PrunedBatch {
            pruned,
            released_blobs,
            held,
        } = journal.prune_batch(rule, limit).await?;
        tracing::debug!(
            runs = pruned.runs,
            calls = pruned.calls,
            limit,
            held_ms = held.as_secs_f64() * 1000.0,
            "pruned a batch"
        );
        report.batches += 1;
        report.pruned.add(pruned);
        report.released_blobs.extend(released_blobs);
        if pruned.runs < u64::from(limit) {
            break;
        }
        // The next batch as big as the budget allows at this batch's cost per run.
        let per_run = held.as_secs_f64() / pruned.runs.max(1) as f64;
        let fits = options.batch_budget.as_secs_f64() / per_run.max(1e-9);
        limit = (fits.min(f64::from(most)) as u32).clamp(least, most);
        pause(held, &options).await;
    }
    if options.reclaim {
        let mut space = journal.reclaim_space(0).await?;
        let before = space.size_bytes;
        while space.mode == SpaceMode::Incremental && space.free_bytes > 0 {
            let started = Instant::now();
            let next = journal
                .reclaim_space(options.vacuum_step_pages.max(1))
                .await?;
            tracing::debug!(
                free_bytes = next.free_bytes,
                took_ms = started.elapsed().as_secs_f64() * 1000.0,
                "returned free pages"
            );
            let progressed = next.free_bytes < space.free_bytes;
            space = next;
            if !progressed {
                break;
            }
            pause(started.elapsed(), &options).await;
        }
        report.reclaimed_bytes = before.saturating_sub(space.size_bytes);
        report.space = Some(space);
    }
    Ok(report)
}

/// The smallest batch: below it the commit, not the deletes, is the cost.
const MIN_BATCH: u32 = 10;
/// The first batch, before its cost is known.
const FIRST_BATCH: u32 = 50;

/// Wait after a batch that took `took`, so that queued writes go first.
async fn pause(took: Duration, options: &PruneOptions) {
    let pause = took
        .saturating_mul(options.pause_factor)
        .max(options.min_pause);
    tokio::time::sleep(pause).await;
}

// ---- the rule ----

/// Runs deleted by one statement: the id list of each `DELETE` has this many
/// placeholders (a short batch repeats its last id), so each statement has one text
/// and is prepared once per connection.
const CHUNK: usize = 64;

/// The final statuses, as a condition every statement carries.
static FINAL: LazyLock<String> = LazyLock::new(|| final_condition("status"));

/// `(COLUMN = 'completed' OR COLUMN = 'failed' OR COLUMN = 'cancelled')`.
fn final_condition(column: &str) -> String {
    let terms: Vec<String> = PrunableStatus::ALL
        .iter()
        .map(|s| format!("{column} = '{}'", s.run_status().as_str()))
        .collect();
    format!("({})", terms.join(" OR "))
}

/// The oldest runs of one status that ended before a cutoff (index
/// `runs_by_status_updated`).
static SELECT_BATCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id FROM runs WHERE status = ?1 AND updated_at_ms < ?2 AND {} \
         ORDER BY updated_at_ms LIMIT ?3",
        *FINAL
    )
});

static COUNT_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT count(*) FROM runs WHERE status = ?1 AND updated_at_ms < ?2 AND {}",
        *FINAL
    )
});

static COUNT_CALLS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT count(*) FROM calls WHERE run_id IN \
         (SELECT id FROM runs WHERE status = ?1 AND updated_at_ms < ?2 AND {})",
        *FINAL
    )
});

static COUNT_RUN_ATTACHMENTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT count(*) FROM attachments WHERE run_id IN \
         (SELECT id FROM runs WHERE status = ?1 AND updated_at_ms < ?2 AND {})",
        *FINAL
    )
});

fn id_list() -> String {
    (1..=CHUNK)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

static DELETE_CRUMBS: LazyLock<String> =
    LazyLock::new(|| format!("DELETE FROM crumbs WHERE run_id IN ({})", id_list()));

static DELETE_CALLS: LazyLock<String> =
    LazyLock::new(|| format!("DELETE FROM calls WHERE run_id IN ({})", id_list()));

/// The runs themselves, by id. On SQLite the status condition is written `+status`,
/// which keeps the planner off the status indexes: without table statistics it
/// otherwise walks `runs_by_status_updated` over every finished run for each chunk
/// instead of looking the ids up by primary key.
static DELETE_RUNS: LazyLock<[String; 2]> = LazyLock::new(|| {
    let delete = |column: &str| {
        format!(
            "DELETE FROM runs WHERE id IN ({}) AND {}",
            id_list(),
            final_condition(column)
        )
    };
    [delete("+status"), delete("status")]
});

/// The attachments of the runs, by run id; each removed one's blob is returned.
static DELETE_ATTACHMENTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM attachments WHERE run_id IN ({}) RETURNING blob_uri",
        id_list()
    )
});

/// `(COLUMN = 'exited' OR …)`: the background runs' final statuses.
fn process_final_condition(column: &str) -> String {
    use crate::process_runs::ProcessStatus as S;
    let terms: Vec<String> = [S::Exited, S::Failed, S::Lost, S::Stopped]
        .iter()
        .inspect(|s| debug_assert!(s.is_final()))
        .map(|s| format!("{column} = '{}'", s.as_str()))
        .collect();
    format!("({})", terms.join(" OR "))
}

/// The ended background runs of the runs, by run id. One that still runs is kept: it
/// still writes its record, and `check_run` still reports it; a later prune removes it
/// once it has ended ([`DELETE_ORPHAN_PROCESS_RUNS`]).
static DELETE_PROCESS_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM process_runs WHERE run_id IN ({}) AND {}",
        id_list(),
        process_final_condition("status")
    )
});

/// Ended background runs whose run is gone (it was pruned while they still ran), at
/// most `?1`.
static DELETE_ORPHAN_PROCESS_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM process_runs WHERE id IN (SELECT p.id FROM process_runs p \
         WHERE {} AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id) LIMIT ?1)",
        process_final_condition("p.status")
    )
});

/// Attachments uploaded before the cutoff `?1` that nothing keeps, at most `?2`: a
/// session's alone (no run) whose session has no running or parked run, and a run's
/// whose run does not exist (attached to an id that was never a run's, or after its run
/// was pruned). Indexes `attachments_by_created`, `runs_by_status` (live runs are few:
/// runs are not indexed by session, which would cost every run's insert) and the runs'
/// primary key.
static DELETE_LEFT_ATTACHMENTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM attachments WHERE id IN (SELECT a.id FROM attachments a \
         WHERE a.created_at_ms < ?1 AND {} LIMIT ?2) RETURNING blob_uri",
        *LEFT_ATTACHMENT
    )
});

/// What leaves an old attachment kept by nothing (see [`DELETE_LEFT_ATTACHMENTS`]),
/// over `attachments a`.
static LEFT_ATTACHMENT: LazyLock<String> = LazyLock::new(|| {
    let live = [RunStatus::Running, RunStatus::Parked]
        .iter()
        .map(|s| format!("r.status = '{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(" OR ");
    format!(
        "CASE WHEN a.run_id IS NULL THEN NOT EXISTS (SELECT 1 FROM runs r \
         WHERE ({live}) AND r.session_id = a.session_id) \
         ELSE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = a.run_id) END"
    )
});

/// Delete up to `limit` runs `rule` selects, oldest first, with their crumbs, calls,
/// attachments and ended background runs; then up to `limit` attachments nothing keeps
/// any more ([`DELETE_LEFT_ATTACHMENTS`]) and ended background runs whose run is gone.
/// Returns what it removed and the blobs no attachment names any more: the statements
/// of one transaction, which the caller opens and commits.
pub(crate) async fn prune_batch(
    db: &mut dyn Executor,
    rule: &PruneRule,
    limit: u32,
) -> Result<(Pruned, Vec<String>)> {
    // No status named removes nothing, leftovers included (as `count_prunable` counts).
    if rule.statuses.is_empty() {
        return Ok((Pruned::default(), Vec::new()));
    }
    let mut ids: Vec<String> = Vec::new();
    for status in &rule.statuses {
        let wanted = u64::from(limit).saturating_sub(ids.len() as u64);
        if wanted == 0 {
            break;
        }
        let params = [
            Param::from(status.run_status().as_str()),
            Param::Int(rule.ended_before_ms),
            Param::Int(i64::try_from(wanted).unwrap_or(i64::MAX)),
        ];
        for row in db.query(&SELECT_BATCH, &params).await? {
            ids.push(row.get(0)?);
        }
    }
    let mut pruned = Pruned::default();
    let mut blobs: BTreeSet<String> = BTreeSet::new();
    for chunk in ids.chunks(CHUNK) {
        let Some(last) = chunk.last() else {
            continue;
        };
        let params: Vec<Param> = chunk
            .iter()
            .chain(std::iter::repeat(last))
            .take(CHUNK)
            .map(Param::from)
            .collect();
        // Children first: the foreign keys of both databases check every statement.
        db.execute(&DELETE_CRUMBS, &params).await?;
        pruned.calls += db.execute(&DELETE_CALLS, &params).await?;
        // An attachment's pages go with it (`ON DELETE CASCADE`).
        for row in db.query(&DELETE_ATTACHMENTS, &params).await? {
            pruned.attachments += 1;
            blobs.insert(row.get(0)?);
        }
        pruned.process_runs += db.execute(&DELETE_PROCESS_RUNS, &params).await?;
        let [sqlite, postgres] = &*DELETE_RUNS;
        let delete_runs = match db.dialect() {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        };
        pruned.runs += db.execute(delete_runs, &params).await?;
    }
    // What the runs leave behind once they are gone, a batch's worth at a time.
    let most = Param::Int(i64::from(limit));
    for row in db
        .query(
            &DELETE_LEFT_ATTACHMENTS,
            &[Param::Int(rule.ended_before_ms), most.clone()],
        )
        .await?
    {
        pruned.attachments += 1;
        blobs.insert(row.get(0)?);
    }
    pruned.process_runs += db
        .execute(&DELETE_ORPHAN_PROCESS_RUNS, std::slice::from_ref(&most))
        .await?;
    // A file is released only when no attachment names it any more: the same bytes
    // uploaded twice are one blob.
    let mut released = Vec::with_capacity(blobs.len());
    for uri in blobs {
        let named = crate::attachments::BLOB_NAMED.text(db.dialect());
        let named = db.query(named, &[Param::from(uri.as_str())]).await?;
        if named.is_empty() {
            released.push(uri);
        }
    }
    Ok((pruned, released))
}

/// How many runs, calls, attachments and background runs [`prune_batch`] would delete
/// in all (a dry run), read on a read connection.
pub(crate) async fn count_prunable(db: &mut dyn Executor, rule: &PruneRule) -> Result<Pruned> {
    let count = |rows: Vec<toolshed_store::Row>| -> Result<u64> {
        Ok(match rows.first() {
            Some(row) => row.get(0)?,
            None => 0,
        })
    };
    let mut counted = Pruned::default();
    for status in &rule.statuses {
        let params = [
            Param::from(status.run_status().as_str()),
            Param::Int(rule.ended_before_ms),
        ];
        counted.runs += count(db.query(&COUNT_RUNS, &params).await?)?;
        counted.calls += count(db.query(&COUNT_CALLS, &params).await?)?;
        counted.attachments += count(db.query(&COUNT_RUN_ATTACHMENTS, &params).await?)?;
    }
    if rule.statuses.is_empty() {
        return Ok(counted);
    }
    // What is left once those runs are gone: a run stays unless the rule selects it.
    let stays = format!(
        "NOT (r.updated_at_ms < ?1 AND ({}))",
        rule.statuses
            .iter()
            .map(|s| format!("r.status = '{}'", s.run_status().as_str()))
            .collect::<Vec<_>>()
            .join(" OR ")
    );
    let cutoff = [Param::Int(rule.ended_before_ms)];
    // Only the live runs of a session keep its attachments, and live runs are never
    // pruned: the rule is the same before and after the runs go.
    let left = format!(
        "SELECT count(*) FROM attachments a WHERE a.created_at_ms < ?1 AND {}",
        *LEFT_ATTACHMENT
    );
    counted.attachments += count(db.query(&left, &cutoff).await?)?;
    let processes = format!(
        "SELECT count(*) FROM process_runs p WHERE {} \
         AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id AND {stays})",
        process_final_condition("p.status")
    );
    counted.process_runs += count(db.query(&processes, &cutoff).await?)?;
    Ok(counted)
}

/// [`Space`] from a SQLite file's figures.
pub(crate) fn sqlite_space(space: toolshed_store::sqlite::Space) -> Space {
    use toolshed_store::sqlite::AutoVacuum;
    Space {
        mode: match space.auto_vacuum {
            AutoVacuum::Incremental | AutoVacuum::Full => SpaceMode::Incremental,
            AutoVacuum::None => SpaceMode::VacuumNeeded,
        },
        size_bytes: space.pages.saturating_mul(space.page_size),
        free_bytes: match space.auto_vacuum {
            // FULL gives pages back at every commit by itself.
            AutoVacuum::Full => 0,
            _ => space.free_pages.saturating_mul(space.page_size),
        },
    }
}
