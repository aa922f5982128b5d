//! [`SqlJournal`]: the one implementation of [`Journal`]. Reads are written once
//! (`reads.rs`) and run on the read connections of either database; writes become
//! [`WriteOp`]s that the database's group-commit writer (`sqlite.rs`, `postgres.rs`)
//! runs, so each backend only executes statements.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::Value;
use toolshed_store::time::now_ms;
use toolshed_store::{Location, Migration, Migrations, Readers};

use crate::rules::{Outcome, WriteOp, created_run, not_found_call, not_found_run};
use crate::{
    Answer, CallRecord, CallResult, CrumbRecord, Decision, FORMAT_VERSION, Gate, GateFilter,
    Journal, NewCall, NewRun, OpenedCall, PruneRule, Pruned, PrunedBatch, Result, RunFilter,
    RunRecord, RunStatus, Space, WriteStats, reads,
};

/// The journal's migrations, in the shared `toolshed_meta` under `schema_version`, with
/// the record format version beside it.
pub(crate) static MIGRATIONS: Migrations = Migrations {
    store: "journal",
    noun: "journal",
    version_key: "schema_version",
    format: Some(("format_version", FORMAT_VERSION)),
    steps: &[
        Migration {
            version: 1,
            sqlite: include_str!("../migrations/sqlite/0001_journal.sql"),
            postgres: include_str!("../migrations/postgres/0001_journal.sql"),
        },
        Migration {
            version: 2,
            sqlite: include_str!("../migrations/sqlite/0002_diagnostics.sql"),
            postgres: include_str!("../migrations/postgres/0002_diagnostics.sql"),
        },
        Migration {
            version: 3,
            sqlite: include_str!("../migrations/sqlite/0003_retention.sql"),
            postgres: include_str!("../migrations/postgres/0003_retention.sql"),
        },
        Migration {
            version: 4,
            sqlite: include_str!("../migrations/sqlite/0004_attachments.sql"),
            postgres: include_str!("../migrations/postgres/0004_attachments.sql"),
        },
        Migration {
            version: 5,
            sqlite: include_str!("../migrations/sqlite/0005_process_runs.sql"),
            postgres: include_str!("../migrations/postgres/0005_process_runs.sql"),
        },
        Migration {
            version: 6,
            sqlite: include_str!("../migrations/sqlite/0006_process_runs_by_run.sql"),
            postgres: include_str!("../migrations/postgres/0006_process_runs_by_run.sql"),
        },
        Migration {
            version: 7,
            sqlite: include_str!("../migrations/sqlite/0007_prune_and_hosts.sql"),
            postgres: include_str!("../migrations/postgres/0007_prune_and_hosts.sql"),
        },
    ],
};

/// The counters behind [`WriteStats`], shared by a writer's handle and its thread or
/// task.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    batches: AtomicU64,
    commits: AtomicU64,
    operations: AtomicU64,
    pending: AtomicU64,
}

impl Counters {
    /// A write was sent; it is pending until the guard is dropped. `alone` says whether
    /// no other write was pending when it was sent.
    pub(crate) fn enter(&self) -> Pending<'_> {
        let alone = self.pending.fetch_add(1, Ordering::AcqRel) == 0;
        Pending {
            counters: self,
            alone,
        }
    }

    /// How many writes are pending now.
    pub(crate) fn pending(&self) -> u64 {
        self.pending.load(Ordering::Acquire)
    }

    /// A batch's transaction began.
    pub(crate) fn began(&self) {
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch of `operations` committed.
    pub(crate) fn committed(&self, operations: usize) {
        self.operations
            .fetch_add(operations as u64, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> WriteStats {
        WriteStats {
            batches: self.batches.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            operations: self.operations.load(Ordering::Relaxed),
            pending: self.pending(),
        }
    }
}

/// A write in flight, counted as pending for as long as it lives.
pub(crate) struct Pending<'a> {
    counters: &'a Counters,
    /// Whether no other write was pending when this one was sent.
    pub(crate) alone: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.counters.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One write queued for a writer, with where its answer goes.
pub(crate) struct Request {
    pub(crate) op: WriteOp,
    pub(crate) reply: tokio::sync::oneshot::Sender<Result<Outcome>>,
}

/// A database's group-commit writer: it runs each operation as its statements, many
/// operations to a commit, and answers each with its own outcome.
#[async_trait]
pub(crate) trait Writer: Send + Sync + 'static {
    /// Run one operation; returns once it is durably committed (or failed alone).
    async fn write(&self, op: WriteOp) -> Result<Outcome>;

    /// The writer's counters.
    fn counters(&self) -> &Counters;

    /// One batch of a prune ([`crate::retention::prune_batch`]) in its own transaction
    /// on a write connection, beside the group commits.
    async fn prune_batch(&self, rule: &PruneRule, limit: u32) -> Result<PrunedBatch>;

    /// Return up to `pages` free pages to the file system (0: only measure).
    async fn reclaim_space(&self, pages: u32) -> Result<Space>;

    /// The one-time rewrite that lets [`Writer::reclaim_space`] return space.
    async fn vacuum(&self) -> Result<Space>;
}

/// The journal in a SQLite file or a PostgreSQL database (one schema of it).
///
/// Write methods send one operation to the database's writer and wait for its durable
/// commit, which concurrent writes share. Reads run on other connections beside it.
pub struct SqlJournal {
    writer: Box<dyn Writer>,
    readers: Readers,
    described: String,
    applied: Vec<u32>,
}

impl fmt::Debug for SqlJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlJournal")
            .field("database", &self.described)
            .finish_non_exhaustive()
    }
}

impl SqlJournal {
    /// Open the journal at `location`, creating it (and applying migrations) when
    /// needed; see [`crate::open`] for the errors.
    pub async fn open(location: &Location) -> Result<SqlJournal> {
        let (writer, readers, applied): (Box<dyn Writer>, _, _) = match location {
            Location::Sqlite { path } => {
                let (writer, readers, applied) = crate::sqlite::open(path).await?;
                (Box::new(writer), readers, applied)
            }
            Location::Postgres { url, schema } => {
                let (writer, readers, applied) =
                    crate::postgres::connect(url, schema.as_deref()).await?;
                (Box::new(writer), readers, applied)
            }
        };
        let described = location.describe();
        if !applied.is_empty() {
            tracing::info!(database = %described, ?applied, "applied journal migrations");
        }
        Ok(SqlJournal {
            writer,
            readers,
            described,
            applied,
        })
    }

    /// The schema versions this open applied: empty when the database was up to date.
    pub fn applied_migrations(&self) -> &[u32] {
        &self.applied
    }

    async fn write(&self, op: WriteOp) -> Result<Outcome> {
        self.writer.write(op).await
    }
}

#[async_trait]
impl Journal for SqlJournal {
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn write_stats(&self) -> WriteStats {
        self.writer.counters().snapshot()
    }

    async fn create_run(&self, run: NewRun) -> Result<RunRecord> {
        let now = now_ms();
        self.write(WriteOp::create_run(&run, now)?)
            .await?
            .into_done()?;
        Ok(created_run(run, now))
    }

    async fn get_run(&self, id: &str) -> Result<RunRecord> {
        let id = id.to_owned();
        self.readers
            .read(move |db| {
                Box::pin(
                    async move { reads::run(db, &id).await?.ok_or_else(|| not_found_run(&id)) },
                )
            })
            .await
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>> {
        let filter = filter.clone();
        self.readers
            .read(move |db| Box::pin(async move { reads::runs(db, &filter).await }))
            .await
    }

    async fn set_run_status(
        &self,
        id: &str,
        status: RunStatus,
        error: Option<String>,
    ) -> Result<RunRecord> {
        self.write(WriteOp::set_run_status(id, status, error))
            .await?
            .into_run()
    }

    async fn set_run_driver(&self, id: &str, driver: Value) -> Result<RunRecord> {
        self.write(WriteOp::set_run_driver(id, &driver)?)
            .await?
            .into_run()
    }

    async fn begin_drive(&self, id: &str) -> Result<RunRecord> {
        self.write(WriteOp::begin_drive(id)).await?.into_run()
    }

    async fn record_run(
        &self,
        run: NewRun,
        calls: Vec<(NewCall, CallResult)>,
        crumbs: Vec<Box<serde_json::value::RawValue>>,
        status: RunStatus,
    ) -> Result<RunRecord> {
        let now = now_ms();
        self.write(WriteOp::record_run(&run, &calls, &crumbs, status, now)?)
            .await?
            .into_done()?;
        let mut record = created_run(run, now);
        record.status = status;
        record.resumes = 1;
        Ok(record)
    }

    async fn calls_of_run(&self, run_id: &str) -> Result<Vec<CallRecord>> {
        let run_id = run_id.to_owned();
        self.readers
            .read(move |db| Box::pin(async move { reads::calls_of_run(db, &run_id).await }))
            .await
    }

    async fn get_call(&self, call_id: &str) -> Result<CallRecord> {
        let call_id = call_id.to_owned();
        self.readers
            .read(move |db| {
                Box::pin(async move {
                    reads::call(db, &call_id)
                        .await?
                        .ok_or_else(|| not_found_call(&call_id))
                })
            })
            .await
    }

    async fn open_call(&self, call: NewCall) -> Result<CallRecord> {
        let insert = WriteOp::call_insert(&call)?;
        let now = insert.now;
        self.write(WriteOp::OpenCall(insert))
            .await?
            .into_call(Some((call, now)))
    }

    async fn open_and_start(&self, call: NewCall) -> Result<OpenedCall> {
        let insert = WriteOp::call_insert(&call)?;
        let now = insert.now;
        self.write(WriteOp::OpenAndStart(insert))
            .await?
            .into_opened(call, now)
    }

    async fn record_started(&self, call_id: &str) -> Result<u32> {
        self.write(WriteOp::record_started(call_id))
            .await?
            .into_attempts()
    }

    async fn record_finished(&self, call_id: &str, outcome: CallResult) -> Result<()> {
        self.write(WriteOp::record_finished(call_id, &outcome)?)
            .await?
            .into_done()
    }

    async fn record_gate(&self, call_id: &str, gate: Gate) -> Result<CallRecord> {
        self.write(WriteOp::record_gate(call_id, &gate)?)
            .await?
            .into_call(None)
    }

    async fn regate(&self, call_id: &str, gate: Gate) -> Result<CallRecord> {
        self.write(WriteOp::regate(call_id, &gate)?)
            .await?
            .into_call(None)
    }

    async fn decide(&self, call_id: &str, decision: Decision) -> Result<CallRecord> {
        self.write(WriteOp::decide(call_id, &decision)?)
            .await?
            .into_call(None)
    }

    async fn answer(&self, call_id: &str, answer: Answer) -> Result<CallRecord> {
        self.write(WriteOp::answer(call_id, &answer)?)
            .await?
            .into_call(None)
    }

    async fn pending_gates(&self, filter: &GateFilter) -> Result<Vec<CallRecord>> {
        let filter = filter.clone();
        self.readers
            .read(move |db| Box::pin(async move { reads::pending_gates(db, &filter).await }))
            .await
    }

    async fn append_crumbs(
        &self,
        run_id: &str,
        crumbs: Vec<Box<serde_json::value::RawValue>>,
    ) -> Result<()> {
        self.write(WriteOp::append_crumbs(run_id, &crumbs))
            .await?
            .into_done()
    }

    async fn crumbs_of_run(&self, run_id: &str) -> Result<Vec<CrumbRecord>> {
        let run_id = run_id.to_owned();
        self.readers
            .read(move |db| Box::pin(async move { reads::crumbs_of_run(db, &run_id).await }))
            .await
    }

    async fn prune_batch(&self, rule: &PruneRule, limit: u32) -> Result<PrunedBatch> {
        self.writer.prune_batch(rule, limit).await
    }

    async fn count_prunable(&self, rule: &PruneRule) -> Result<Pruned> {
        let rule = rule.clone();
        self.readers
            .read(move |db| {
                Box::pin(async move { crate::retention::count_prunable(db, &rule).await })
            })
            .await
    }

    async fn reclaim_space(&self, max_pages: u32) -> Result<Space> {
        self.writer.reclaim_space(max_pages).await
    }

    async fn vacuum(&self) -> Result<Space> {
        self.writer.vacuum().await
    }
}
