//! The SQLite writer: one thread with the only write connection of the journal's file,
//! grouping concurrent writes into one fsync'd commit (WAL, `synchronous = FULL`). Reads
//! use `toolshed-store`'s pool of read connections beside it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{
    CachedStatement, Connection, ErrorCode, OpenFlags, OptionalExtension, Statement, params,
};
use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;
use toolshed_store::Readers;
use toolshed_store::sqlite::{BUSY_TIMEOUT, row_values};

use crate::rules::{
    CALL_COLUMNS, CallChange, FinishedRun, Fragments, MAX_BATCH, Outcome, WriteOp, call_conflict,
    call_from_row, call_id_taken, columns, not_found_run, run_conflict, run_exists, run_from_row,
};
use crate::store::{Counters, MIGRATIONS, Request, Writer};
use crate::{CallRecord, CallStatus, JournalError, PruneRule, PrunedBatch, Result, Space};

/// How long a caller whose write is the only one in flight polls for its answer
/// (yielding to other tasks between polls) before parking. Waking a parked thread
/// after the writer's fsync costs a sizeable fraction of a commit on small VMs; with
/// other writes in flight nobody polls, group commit takes over.
const CALLER_SPIN: Duration = Duration::from_micros(250);
/// How long the writer polls for the next request after a batch before parking.
const WRITER_SPIN: Duration = Duration::from_micros(50);
/// Reads at once, each on its own pooled connection.
const READERS: usize = 4;
/// Prepared statements cached per read connection.
const STATEMENT_CACHE: usize = 16;

/// Start the writer on `path` (creating and migrating the file) and the read pool
/// beside it. Returns them and the migrations applied.
///
/// A file that is not a SQLite database, or a SQLite database with tables but no
/// `toolshed_meta`, is `NotAJournal` (and is left unchanged); a journal written by a
/// newer toolshed is `Unavailable`.
pub(crate) async fn open(path: &Path) -> Result<(SqliteWriter, Readers, Vec<u32>)> {
    let path = path.to_path_buf();
    let open_path = path.clone();
    let counters = Arc::new(Counters::default());
    let core_counters = Arc::clone(&counters);
    let (core, applied) =
        tokio::task::spawn_blocking(move || Core::open(&open_path, core_counters))
            .await
            .map_err(|e| {
                JournalError::from(toolshed_store::sqlite::unavailable(
                    &path,
                    format!("opening failed: {e}"),
                ))
            })??;
    let core = Arc::new(Mutex::new(core));
    let (sender, receiver) = std::sync::mpsc::channel();
    // The thread starts idle: a first lone write commits on its caller's thread.
    let parked = Arc::new(AtomicBool::new(true));
    let exclusive_wanted = Arc::new(AtomicBool::new(false));
    let thread = std::thread::Builder::new()
        .name("toolshed-journal-writer".into())
        .spawn({
            let (core, counters) = (Arc::clone(&core), Arc::clone(&counters));
            let parked = Arc::clone(&parked);
            let wanted = Arc::clone(&exclusive_wanted);
            move || writer_thread(&receiver, &core, &counters, &parked, &wanted)
        })
        .map_err(|e| {
            JournalError::from(toolshed_store::sqlite::unavailable(
                &path,
                format!("cannot start the writer thread: {e}"),
            ))
        })?;
    let readers = Readers::sqlite(&path, MIGRATIONS.noun, READERS, STATEMENT_CACHE);
    let writer = SqliteWriter {
        path,
        core,
        sender: Some(sender),
        thread: Some(thread),
        counters,
        parked,
        exclusive_wanted,
    };
    Ok((writer, readers, applied))
}

/// The journal's one write connection, with what runs on it.
struct Core {
    conn: Connection,
    sql: Sql,
    /// Set by the WAL hook: copy the WAL back after this batch (it was alone).
    checkpoint_wanted: Arc<AtomicBool>,
}

impl Core {
    /// Open the write connection (migrating the file), check every statement, start the
    /// background checkpointer.
    fn open(path: &Path, counters: Arc<Counters>) -> Result<(Core, Vec<u32>)> {
        let (mut conn, applied) = toolshed_store::sqlite::open_writer(path, &MIGRATIONS)?;
        let sql = Sql::new();
        conn.set_prepared_statement_cache_capacity(WRITER_STATEMENT_CACHE);
        for text in sql.all() {
            conn.prepare_cached(text).map_err(|e| {
                JournalError::from(toolshed_store::sqlite::unavailable(
                    path,
                    format!("cannot prepare statements: {e}"),
                ))
            })?;
        }
        let checkpoint_wanted = Arc::new(AtomicBool::new(false));
        start_checkpoints(path, &mut conn, counters, Arc::clone(&checkpoint_wanted));
        Ok((
            Core {
                conn,
                sql,
                checkpoint_wanted,
            },
            applied,
        ))
    }

    /// Run `ops` in one transaction, commit once, and return each one's result (see
    /// [`run_batch`]). `Busy` only when `wait` is false and another connection holds
    /// the write lock: nothing was run.
    fn run(&self, ops: &[&WriteOp], counters: &Counters, wait: bool) -> Batch {
        if !wait {
            // A lone write on the caller's thread never waits for another process.
            let _ = self.conn.busy_timeout(Duration::ZERO);
        }
        let batch = run_batch(
            &WriterStatements {
                conn: &self.conn,
                sql: &self.sql,
            },
            ops,
            counters,
            wait,
        );
        if !wait {
            let _ = self.conn.busy_timeout(BUSY_TIMEOUT);
        }
        self.checkpoint_if_wanted();
        batch
    }

    /// Copy the WAL back now if the WAL hook asked for it after the last commit.
    fn checkpoint_if_wanted(&self) {
        if self.checkpoint_wanted.swap(false, Ordering::AcqRel)
            && let Err(e) = self
                .conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        {
            tracing::debug!(error = %e, "a checkpoint after a lone write failed");
        }
    }

    /// One batch of a prune, in its own transaction on the write connection.
    fn prune_batch(&mut self, rule: &PruneRule, limit: u32) -> Result<PrunedBatch> {
        let started = Instant::now();
        let removed = toolshed_store::sqlite::transact(&mut self.conn, |db| {
            let rule = rule.clone();
            Box::pin(async move { crate::retention::prune_batch(db, &rule, limit).await })
        });
        self.checkpoint_if_wanted();
        let (pruned, released_blobs) = removed?;
        Ok(PrunedBatch {
            pruned,
            released_blobs,
            held: started.elapsed(),
        })
    }

    /// Return up to `pages` free pages (none for 0) and measure the file. The step that
    /// leaves no free page also copies the WAL back, which is when the file shrinks.
    fn reclaim_space(&mut self, pages: u32) -> Result<Space> {
        let before = toolshed_store::sqlite::space(&self.conn)?;
        if pages == 0 || before.free_pages == 0 {
            return Ok(crate::retention::sqlite_space(before));
        }
        toolshed_store::sqlite::incremental_vacuum(&self.conn, pages)?;
        let after = toolshed_store::sqlite::space(&self.conn)?;
        if after.free_pages == 0 {
            self.checkpoint_wanted.store(true, Ordering::Release);
        }
        self.checkpoint_if_wanted();
        Ok(crate::retention::sqlite_space(after))
    }

    /// Switch the file to incremental vacuum and rewrite it, once.
    fn vacuum(&mut self) -> Result<Space> {
        let before = toolshed_store::sqlite::space(&self.conn)?;
        if before.auto_vacuum == toolshed_store::sqlite::AutoVacuum::None {
            toolshed_store::sqlite::vacuum_incremental(&self.conn)?;
        } else if before.free_pages > 0 {
            toolshed_store::sqlite::incremental_vacuum(&self.conn, 0)?;
        }
        self.checkpoint_wanted.store(true, Ordering::Release);
        self.checkpoint_if_wanted();
        Ok(crate::retention::sqlite_space(
            toolshed_store::sqlite::space(&self.conn)?,
        ))
    }
}

/// The writer of the journal's file.
///
/// There is one write connection ([`Core`]). A write that is the only one in flight
/// runs on its caller's thread: it takes the connection, and commits (the hand-off to a
/// writer thread and back, two thread wake-ups on a small VM, cost more than half a
/// commit). It never waits for a lock there: if another process holds the file's write
/// lock, or another write holds the connection, the write goes to the writer thread,
/// like every write sent while others are in flight. The thread takes every queued
/// request (up to `MAX_BATCH`), runs them in one `BEGIN IMMEDIATE` transaction, each
/// inside its own `SAVEPOINT` (a failing operation is rolled back alone and its error
/// goes to its caller), commits once and then replies: concurrent writes share one
/// fsync. Other processes may open the same file: `BEGIN IMMEDIATE` and the busy
/// timeout serialize their writers, and every transition is a conditional statement, so
/// the rules hold across processes too.
///
/// The hot path is lean: statements prepared once and cached, a new call inserted with
/// a plain `INSERT` (the conditional upsert only when that hits a constraint), rows read
/// back with a `SELECT` rather than `RETURNING` (several times dearer in SQLite), status
/// conditions written as `=`/`OR` rather than `IN (…)` (SQLite builds a temporary index
/// per execution of an `IN` list). A queued write polls briefly for its answer instead
/// of parking (`CALLER_SPIN`), and the thread polls briefly for the next request
/// (`WRITER_SPIN`): waking a parked thread costs a sizeable part of a commit on small
/// VMs.
pub(crate) struct SqliteWriter {
    path: PathBuf,
    core: Arc<Mutex<Core>>,
    sender: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    /// The writer thread is parked waiting for requests: nobody has written for a while
    /// (longer than `WRITER_SPIN`). Under load it never parks, and writes stay off the
    /// callers' threads, where a commit would hold a tokio worker from the other runs.
    parked: Arc<AtomicBool>,
    /// A prune step waits for the connection: the writer thread lets it go first. A
    /// mutex hands itself back to the thread that just released it, and under load
    /// the writer thread re-locks at once after every batch, so without this the
    /// prune would wait for the load to end.
    exclusive_wanted: Arc<AtomicBool>,
}

impl Drop for SqliteWriter {
    fn drop(&mut self) {
        // Closing the channel ends the writer after the batch it is running; joining
        // it means the file is closed (and checkpointed) when the journal is gone.
        drop(self.sender.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(path = %self.path.display(), "the journal writer thread panicked");
        }
    }
}

#[async_trait]
impl Writer for SqliteWriter {
    async fn write(&self, op: WriteOp) -> Result<Outcome> {
        let pending = self.counters.enter();
        if pending.alone
            && self.parked.load(Ordering::Acquire)
            && !self.exclusive_wanted.load(Ordering::Acquire)
            && let Ok(core) = self.core.try_lock()
        {
            // Synchronous from here to the commit: the caller's future cannot be dropped
            // half-way through it.
            match core.run(&[&op], &self.counters, false) {
                Batch::Done { mut results, .. } => {
                    return results.pop().unwrap_or_else(|| Err(writer_stopped()));
                }
                Batch::Busy => {}
            }
        }
        let sender = self.sender.as_ref().ok_or_else(writer_stopped)?;
        let (reply, mut answer) = oneshot::channel();
        sender
            .send(Request { op, reply })
            .map_err(|_| writer_stopped())?;
        if pending.alone {
            // Alone, but the connection was busy: poll for the answer instead of
            // parking, see CALLER_SPIN. Other tasks still run between polls.
            let until = Instant::now() + CALLER_SPIN;
            loop {
                match answer.try_recv() {
                    Ok(result) => return result,
                    Err(TryRecvError::Closed) => return Err(writer_stopped()),
                    Err(TryRecvError::Empty) => {}
                }
                if Instant::now() >= until || self.counters.pending() > 1 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        answer.await.map_err(|_| writer_stopped())?
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    async fn prune_batch(&self, rule: &PruneRule, limit: u32) -> Result<PrunedBatch> {
        let rule = rule.clone();
        self.exclusive(move |core| core.prune_batch(&rule, limit))
            .await
    }

    async fn reclaim_space(&self, pages: u32) -> Result<Space> {
        self.exclusive(move |core| core.reclaim_space(pages)).await
    }

    async fn vacuum(&self) -> Result<Space> {
        self.exclusive(Core::vacuum).await
    }
}

impl SqliteWriter {
    /// Run `work` on the write connection on a blocking thread, between two batches of
    /// the writer: writes sent meanwhile queue and then share one commit. Each use is
    /// one bounded transaction (a prune batch, a vacuum step), so they wait at most that.
    async fn exclusive<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Core) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let core = Arc::clone(&self.core);
        let wanted = Arc::clone(&self.exclusive_wanted);
        tokio::task::spawn_blocking(move || {
            wanted.store(true, Ordering::Release);
            let mut core = core.lock().unwrap_or_else(PoisonError::into_inner);
            wanted.store(false, Ordering::Release);
            work(&mut core)
        })
        .await
        .map_err(|e| JournalError::Backend(format!("a prune step failed: {e}")))?
    }
}

// ---- the writer ----

fn writer_thread(
    receiver: &Receiver<Request>,
    core: &Mutex<Core>,
    counters: &Counters,
    parked: &AtomicBool,
    exclusive_wanted: &AtomicBool,
) {
    let mut batch = Vec::with_capacity(64);
    while let Some(first) = next_request(receiver, parked) {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        // A prune step waiting for the connection goes first (it is one bounded
        // transaction); this batch keeps growing meanwhile and shares one commit.
        while exclusive_wanted.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let results = {
            let core = core.lock().unwrap_or_else(PoisonError::into_inner);
            let ops: Vec<&WriteOp> = batch.iter().map(|r| &r.op).collect();
            match core.run(&ops, counters, true) {
                Batch::Done { results, .. } => results,
                // Only a caller's own attempt gives up on a lock.
                Batch::Busy => ops.iter().map(|_| Err(writer_stopped())).collect(),
            }
        };
        for (request, result) in batch.drain(..).zip(results) {
            let _ = request.reply.send(result);
        }
    }
}

/// WAL pages after which a lone write copies the WAL back (SQLite's own default
/// threshold, 4 MiB of 4 KiB pages).
const CHECKPOINT_PAGES: i32 = 1000;
/// WAL pages after which a commit under load asks the checkpointer thread to copy.
const LOADED_CHECKPOINT_PAGES: i32 = 64;
/// Commits under load between two requests for a checkpoint.
const LOADED_COMMITS_PER_CHECKPOINT: u32 = 32;
/// Prepared statements kept on the write connection (every one the writer has).
const WRITER_STATEMENT_CACHE: usize = 64;
/// WAL pages after which the writer checkpoints by itself: a backstop for when the
/// background checkpointer cannot keep up or could not start (64 MiB of 4 KiB pages).
const WAL_BACKSTOP_PAGES: i32 = 16_384;

/// Copies the WAL back into the database on its own thread and connection (PASSIVE:
/// never blocks the writer), once the WAL holds `CHECKPOINT_PAGES` pages: the write
/// connection's WAL hook, called after every commit with the WAL's size, asks for it.
/// SQLite's default runs that copy, and its fsync, inside the commit that crosses 1000
/// WAL pages, stalling every caller of that batch: under load that was the tail of the
/// latency. Asking by size rather than by commit count keeps the checkpoints' own
/// fsyncs rare while writes are small: a checkpoint every few commits made lone keyed
/// calls wait behind the checkpointer's fsync.
///
/// The checkpointer thread ends when the write connection (whose WAL hook holds the
/// only sender of its requests) is closed.
fn start_checkpoints(
    path: &Path,
    writer: &mut Connection,
    counters: Arc<Counters>,
    wanted: Arc<AtomicBool>,
) {
    let (kick, kicks) = std::sync::mpsc::sync_channel::<()>(1);
    let reader = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    );
    let spawned = reader.ok().and_then(|conn| {
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
        std::thread::Builder::new()
            .name("toolshed-checkpoint".into())
            .spawn(move || {
                for () in kicks {
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!(error = %e, "background checkpoint failed");
                    }
                }
            })
            .ok()
    });
    // Without a checkpointer thread, the writer checkpoints by itself at SQLite's
    // default threshold.
    let backstop = if spawned.is_some() {
        WAL_BACKSTOP_PAGES
    } else {
        CHECKPOINT_PAGES
    };
    let kick = spawned.map(|_| kick);
    let loaded_commits = std::sync::atomic::AtomicU32::new(0);
    let hooked = writer.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        if counters.pending() <= 1 {
            if pages >= CHECKPOINT_PAGES {
                // This commit was the only write in flight: the writer copies the WAL
                // back right after it (see `Core::run`), so that the next write starts
                // the WAL over. A checkpointer copying while writes keep coming rarely
                // catches up with the WAL's end; the WAL then grows, and every commit
                // that grows the file pays for the file system's metadata in its fsync.
                wanted.store(true, Ordering::Release);
            }
        } else if pages >= LOADED_CHECKPOINT_PAGES
            && loaded_commits
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(LOADED_COMMITS_PER_CHECKPOINT)
            && let Some(kick) = &kick
        {
            // Under load, copy every `LOADED_COMMITS_PER_CHECKPOINT` commits: often
            // enough that the WAL stays small, rarely enough that the checkpointer's
            // copying and fsyncs do not take the writer's core and disk (asked for at
            // every commit past 64 pages, it used a third of the CPU and cost 20 % of
            // the 64-run throughput; measured in BENCHMARKS.md). One asked for and not
            // started yet is enough.
            let _ = kick.try_send(());
        }
        if pages >= backstop {
            // PASSIVE, as `sqlite3_wal_checkpoint` is. A failure here is not the
            // commit's: it is committed.
            if let Err(e) = wal.checkpoint() {
                tracing::debug!(error = %e, "a backstop checkpoint failed");
            }
        }
        Ok(())
    }));
    if let Err(e) = hooked {
        tracing::warn!(error = %e, "cannot set the WAL hook; SQLite checkpoints by itself");
    }
}

/// The next request, or `None` once the journal is gone. Polled for [`WRITER_SPIN`]
/// before blocking: a caller working sequentially sends its next write within
/// microseconds of its answer, and waking a parked thread costs more than that.
fn next_request(receiver: &Receiver<Request>, parked: &AtomicBool) -> Option<Request> {
    let until = Instant::now() + WRITER_SPIN;
    loop {
        match receiver.try_recv() {
            Ok(request) => {
                parked.store(false, Ordering::Release);
                return Some(request);
            }
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
            Err(std::sync::mpsc::TryRecvError::Empty) if Instant::now() < until => {
                std::hint::spin_loop();
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                parked.store(true, Ordering::Release);
                let request = receiver.recv().ok();
                parked.store(false, Ordering::Release);
                return request;
            }
        }
    }
}

/// What running a batch gave.
enum Batch {
    /// Each operation's result, in order (all errors when nothing was committed).
    Done { results: Vec<Result<Outcome>> },
    /// Not run: the write lock is held elsewhere and the caller would not wait.
    Busy,
}

/// Run a batch in one transaction and commit once: each operation in its own savepoint
/// (rolled back alone when it fails; a lone operation needs none, its transaction is
/// rolled back instead), a finished run checked and then inserted plainly.
fn run_batch(
    st: &WriterStatements<'_>,
    ops: &[&WriteOp],
    counters: &Counters,
    wait: bool,
) -> Batch {
    let conn = st.conn;
    let control = |sql: &str| st.get(sql).and_then(|mut stmt| stmt.execute([]).map(drop));
    // Counted before a BEGIN that may wait for another process's lock; a BEGIN that
    // would not wait counts once it has the lock.
    if wait {
        counters.began();
    }
    let begun = control(&st.sql.begin);
    if !wait && begun.is_ok() {
        counters.began();
    }
    if let Err(e) = begun {
        if !wait && e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) {
            return Batch::Busy;
        }
        let message = format!("cannot begin a write transaction: {e}");
        return Batch::Done {
            results: ops
                .iter()
                .map(|_| Err(JournalError::Backend(message.clone())))
                .collect(),
        };
    }
    let mut results = Vec::with_capacity(ops.len());
    let mut broken = None;
    for op in ops {
        if broken.is_some() {
            break;
        }
        if let WriteOp::RecordRun(run) = op {
            // Checked first, then inserted without a savepoint: a savepoint copies
            // every page it touches (the biggest cost of these plain inserts), and
            // after the checks only a broken database can make an insert fail.
            let result = match finished_conflict(st, run) {
                Err(e) => Err(e),
                Ok(()) => insert_finished(st, run).inspect_err(|e| {
                    broken = Some(format!("a checked insert failed: {e}"));
                }),
            };
            if broken.is_none() && conn.is_autocommit() {
                broken = Some("the transaction was rolled back by SQLite".to_owned());
            }
            results.push(result);
            continue;
        }
        if ops.len() == 1 {
            // Alone in its transaction: a failure rolls the whole transaction back,
            // which undoes exactly what a savepoint would, so it needs none. A savepoint
            // copies every page the operation touches into SQLite's statement journal:
            // about 27,000 instructions of a keyed call's 212,000 (callgrind,
            // BENCHMARKS.md "Durable runs").
            let result = apply(st, op);
            if result.is_err() {
                broken = Some("the operation failed".to_owned());
            } else if conn.is_autocommit() {
                broken = Some("the transaction was rolled back by SQLite".to_owned());
            }
            results.push(result);
            continue;
        }
        if let Err(e) = control(&st.sql.savepoint) {
            broken = Some(format!("cannot open a savepoint: {e}"));
            break;
        }
        let result = apply(st, op);
        let ended = if result.is_ok() {
            control(&st.sql.release)
        } else {
            control(&st.sql.rollback_to).and_then(|()| control(&st.sql.release))
        };
        if let Err(e) = ended {
            broken = Some(format!("cannot end a savepoint: {e}"));
        } else if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (an I/O error, a full disk).
            broken = Some("the transaction was rolled back by SQLite".to_owned());
        }
        results.push(result);
    }
    let failure = match broken {
        Some(reason) => Some(reason),
        None => control(&st.sql.commit)
            .err()
            .map(|e| format!("the commit failed: {e}")),
    };
    if let Some(reason) = failure {
        if !conn.is_autocommit() {
            let _ = control(&st.sql.rollback);
        }
        // Nothing of this batch is stored: an operation that failed on its own keeps
        // its own error, every other one gets the batch's.
        let mut own = results.into_iter();
        let results = ops
            .iter()
            .map(|_| match own.next() {
                Some(Err(e)) => Err(e),
                _ => Err(JournalError::Backend(format!(
                    "nothing was written: {reason}"
                ))),
            })
            .collect();
        return Batch::Done { results };
    }
    counters.committed(ops.len());
    Batch::Done { results }
}

/// Why a finished run cannot be inserted: its id or one of its call ids exists.
fn finished_conflict(st: &WriterStatements<'_>, f: &FinishedRun) -> Result<()> {
    if st
        .get(&st.sql.run_exists)
        .map_err(db)?
        .exists([&f.run.id])
        .map_err(db)?
    {
        return Err(run_exists(&f.run.id));
    }
    for (call, _) in &f.calls {
        if st
            .get(&st.sql.call_exists)
            .map_err(db)?
            .exists([&call.call_id])
            .map_err(db)?
        {
            return Err(call_id_taken(
                &call.call_id,
                load_call(st.conn, &call.call_id)?.as_ref(),
            ));
        }
    }
    Ok(())
}

/// Insert a finished run, its calls and its crumbs: plain inserts, nothing to read
/// back. Callers check [`finished_conflict`] first.
fn insert_finished(st: &WriterStatements<'_>, f: &FinishedRun) -> Result<Outcome> {
    let r = &f.run;
    let crumb_count = i64::try_from(f.crumbs.len())
        .map_err(|_| JournalError::Backend("too many crumbs in one run".into()))?;
    let constraint =
        |e: &rusqlite::Error| e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation);
    st.get(&st.sql.insert_finished_run)
        .map_err(db)?
        .execute(params![
            r.id,
            r.agent_id,
            r.session_id,
            r.principal,
            r.tenant,
            r.status,
            r.budgets,
            r.driver,
            crumb_count,
            r.now
        ])
        .map_err(|e| {
            if constraint(&e) {
                run_exists(&r.id)
            } else {
                db(e)
            }
        })?;
    for (call, done) in &f.calls {
        st.get(&st.sql.insert_finished_call)
            .map_err(db)?
            .execute(params![
                call.call_id,
                call.run_id,
                call.ordinal,
                call.tool_call_id,
                call.tool,
                call.args_hash,
                call.args,
                done.status,
                done.result,
                done.error,
                done.duration_ms,
                call.now,
                done.diagnostics
            ])
            .map_err(|e| {
                if constraint(&e) {
                    JournalError::Conflict(format!(
                        "call id `{}` or call {} of run `{}` already exists",
                        call.call_id, call.ordinal, call.run_id
                    ))
                } else {
                    db(e)
                }
            })?;
    }
    for (seq, crumb) in (0_i64..).zip(&f.crumbs) {
        st.get(&st.sql.crumb_insert)
            .map_err(db)?
            .execute(params![r.id, seq, crumb])
            .map_err(db)?;
    }
    Ok(Outcome::Done)
}

/// Run one operation inside the batch's transaction.
///
/// Each change is one conditional statement; the row is then read back with a SELECT
/// (in this SQLite build `RETURNING` costs several times the statement itself). The
/// writer holds the write lock, so nothing changes between the two.
fn apply(st: &WriterStatements<'_>, op: &WriteOp) -> Result<Outcome> {
    match op {
        WriteOp::CreateRun(r) => {
            let inserted = st
                .get(&st.sql.create_run)
                .map_err(db)?
                .execute(params![
                    r.id,
                    r.agent_id,
                    r.session_id,
                    r.principal,
                    r.tenant,
                    r.status,
                    r.budgets,
                    r.driver,
                    r.now
                ])
                .map_err(db)?;
            if inserted == 1 {
                Ok(Outcome::Done)
            } else {
                Err(run_exists(&r.id))
            }
        }
        WriteOp::SetRunStatus {
            id,
            status,
            error,
            now,
        } => {
            let changed = st
                .get(&st.sql.set_run_status)
                .map_err(db)?
                .execute(params![id, status, error, now])
                .map_err(db)?;
            run_outcome(st, op, id, changed)
        }
        WriteOp::SetRunDriver { id, driver, now } => {
            let changed = st
                .get(&st.sql.set_run_driver)
                .map_err(db)?
                .execute(params![id, driver, now])
                .map_err(db)?;
            run_outcome(st, op, id, changed)
        }
        WriteOp::BeginDrive { id, now } => {
            let changed = st
                .get(&st.sql.begin_drive)
                .map_err(db)?
                .execute(params![id, now])
                .map_err(db)?;
            run_outcome(st, op, id, changed)
        }
        WriteOp::OpenCall(c) | WriteOp::OpenAndStart(c) => {
            let start = matches!(op, WriteOp::OpenAndStart(_));
            // The usual case, a new call: a plain insert, and the row is known.
            let mut fresh = st
                .get(if start {
                    &st.sql.insert_started
                } else {
                    &st.sql.insert_open
                })
                .map_err(db)?;
            let inserted = fresh.execute(params![
                c.call_id,
                c.run_id,
                c.ordinal,
                c.tool_call_id,
                c.tool,
                c.args_hash,
                c.args,
                c.now
            ]);
            match inserted {
                // The caller knows the row it asked for.
                Ok(_) => return Ok(Outcome::Inserted),
                // The key or the call id exists, or the run does not: SQLite undid the
                // statement; the conditional upsert below sorts it out.
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {}
                Err(e) => return Err(db(e)),
            }
            let mut stmt = st
                .get(if start {
                    &st.sql.open_and_start
                } else {
                    &st.sql.open_call
                })
                .map_err(db)?;
            let changed = stmt.execute(params![
                c.call_id,
                c.run_id,
                c.ordinal,
                c.tool_call_id,
                c.tool,
                c.args_hash,
                c.args,
                c.now
            ]);
            let changed = match changed {
                Ok(changed) => changed,
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                    return Err(call_id_taken(
                        &c.call_id,
                        load_call(st.conn, &c.call_id)?.as_ref(),
                    ));
                }
                Err(e) => return Err(db(e)),
            };
            // Inserted or started: the row at the key. Otherwise the key exists (return
            // it unchanged), the run does not, or the call id is used at another key.
            let existing = first_row(
                &mut *st.get(&st.sql.call_at).map_err(db)?,
                params![c.run_id, c.ordinal],
            )?;
            match existing {
                Some(call) if start => Ok(Outcome::Opened {
                    call,
                    started: changed == 1,
                }),
                Some(call) => Ok(Outcome::Call(call)),
                None if !run_exists_in(st.conn, &c.run_id)? => Err(not_found_run(&c.run_id)),
                None => Err(call_id_taken(
                    &c.call_id,
                    load_call(st.conn, &c.call_id)?.as_ref(),
                )),
            }
        }
        WriteOp::RecordStarted { call_id, now } => {
            if st
                .get(&st.sql.record_started)
                .map_err(db)?
                .execute(params![call_id, now])
                .map_err(db)?
                == 0
            {
                return Err(call_conflict(
                    CallChange::Start,
                    call_id,
                    load_call(st.conn, call_id)?.as_ref(),
                ));
            }
            let attempts = st
                .get(&st.sql.attempts)
                .map_err(db)?
                .query_row([call_id], |row| row.get(0))
                .map_err(db)?;
            Ok(Outcome::Attempts(attempts))
        }
        WriteOp::RecordFinished {
            call_id,
            finished,
            now,
        } => {
            let changed = st
                .get(&st.sql.record_finished)
                .map_err(db)?
                .execute(params![
                    call_id,
                    finished.status,
                    finished.result,
                    finished.error,
                    finished.duration_ms,
                    now,
                    finished.diagnostics
                ])
                .map_err(db)?;
            // Nothing to read back when it took (the caller has the result); a refusal
            // reads the call to say why.
            if changed == 1 {
                return Ok(Outcome::Done);
            }
            call_outcome(st, op, call_id, changed)
        }
        WriteOp::RecordGate {
            change,
            call_id,
            status,
            gate,
            now,
        } => {
            let sql = match change {
                CallChange::Regate => &st.sql.regate,
                _ => &st.sql.record_gate,
            };
            let changed = st
                .get(sql)
                .map_err(db)?
                .execute(params![call_id, status, gate, now])
                .map_err(db)?;
            call_outcome(st, op, call_id, changed)
        }
        WriteOp::Decide {
            call_id,
            status,
            decision,
            error,
            now,
        } => {
            let changed = st
                .get(&st.sql.decide)
                .map_err(db)?
                .execute(params![call_id, status, decision, error, now])
                .map_err(db)?;
            call_outcome(st, op, call_id, changed)
        }
        WriteOp::Answer {
            call_id,
            result,
            answer,
            now,
        } => {
            let changed = st
                .get(&st.sql.answer)
                .map_err(db)?
                .execute(params![call_id, result, answer, now])
                .map_err(db)?;
            call_outcome(st, op, call_id, changed)
        }
        WriteOp::AppendCrumbs { run_id, crumbs } => {
            let count = i64::try_from(crumbs.len())
                .map_err(|_| JournalError::Backend("too many crumbs in one append".into()))?;
            if st
                .get(&st.sql.crumb_counter)
                .map_err(db)?
                .execute(params![run_id, count])
                .map_err(db)?
                == 0
            {
                return Err(not_found_run(run_id));
            }
            let next: i64 = st
                .get(&st.sql.crumb_next)
                .map_err(db)?
                .query_row([run_id], |row| row.get(0))
                .map_err(db)?;
            for (seq, crumb) in (next - count..).zip(crumbs) {
                st.get(&st.sql.crumb_insert)
                    .map_err(db)?
                    .execute(params![run_id, seq, crumb])
                    .map_err(db)?;
            }
            Ok(Outcome::Done)
        }
        WriteOp::RecordRun(_) => Err(JournalError::Backend(
            "a finished run is recorded by the batch, not as an operation".into(),
        )),
    }
}

/// The run after a run change, or why it did not apply.
fn run_outcome(
    st: &WriterStatements<'_>,
    op: &WriteOp,
    id: &str,
    changed: usize,
) -> Result<Outcome> {
    let run = first_row(&mut *st.get(&st.sql.run_by_id).map_err(db)?, [id])?;
    match (changed, run, op.run_change()) {
        (1, Some(run), _) => Ok(Outcome::Run(run)),
        (_, run, Some((change, _))) => {
            let run = run.map(|row| run_from_row(&row)).transpose()?;
            Err(run_conflict(change, id, run.as_ref()))
        }
        (_, _, None) => Err(JournalError::Backend("not a run change".into())),
    }
}

/// The call after a call change, or why it did not apply.
fn call_outcome(
    st: &WriterStatements<'_>,
    op: &WriteOp,
    call_id: &str,
    changed: usize,
) -> Result<Outcome> {
    let call = first_row(&mut *st.get(&st.sql.call_by_id).map_err(db)?, [call_id])?;
    match (changed, call, op.call_change()) {
        (1, Some(call), _) => Ok(Outcome::Call(call)),
        (_, call, Some((change, _))) => {
            let call = call.map(|row| call_from_row(&row)).transpose()?;
            Err(call_conflict(change, call_id, call.as_ref()))
        }
        (_, _, None) => Err(JournalError::Backend("not a call change".into())),
    }
}

/// The text of the writer's statements, built once from the rules. Each is prepared
/// once per connection and kept in its statement cache.
struct Sql {
    begin: String,
    commit: String,
    rollback: String,
    savepoint: String,
    release: String,
    rollback_to: String,
    create_run: String,
    set_run_status: String,
    set_run_driver: String,
    begin_drive: String,
    run_by_id: String,
    insert_open: String,
    insert_started: String,
    open_call: String,
    open_and_start: String,
    call_at: String,
    call_by_id: String,
    record_started: String,
    attempts: String,
    record_finished: String,
    record_gate: String,
    regate: String,
    decide: String,
    answer: String,
    crumb_counter: String,
    crumb_next: String,
    crumb_insert: String,
    insert_finished_run: String,
    insert_finished_call: String,
    run_exists: String,
    call_exists: String,
}

/// The writer's connection and statements, for one batch.
struct WriterStatements<'c> {
    conn: &'c Connection,
    sql: &'c Sql,
}

impl<'c> WriterStatements<'c> {
    /// A statement, from the connection's cache.
    fn get(&self, sql: &str) -> rusqlite::Result<CachedStatement<'c>> {
        self.conn.prepare_cached(sql)
    }
}

impl Sql {
    /// Every statement, to prepare (and check) them all when the journal opens.
    fn all(&self) -> [&str; 31] {
        [
            &self.begin,
            &self.commit,
            &self.rollback,
            &self.savepoint,
            &self.release,
            &self.rollback_to,
            &self.create_run,
            &self.set_run_status,
            &self.set_run_driver,
            &self.begin_drive,
            &self.run_by_id,
            &self.insert_open,
            &self.insert_started,
            &self.open_call,
            &self.open_and_start,
            &self.call_at,
            &self.call_by_id,
            &self.record_started,
            &self.attempts,
            &self.record_finished,
            &self.record_gate,
            &self.regate,
            &self.decide,
            &self.answer,
            &self.crumb_counter,
            &self.crumb_next,
            &self.crumb_insert,
            &self.insert_finished_run,
            &self.insert_finished_call,
            &self.run_exists,
            &self.call_exists,
        ]
    }

    fn new() -> Sql {
        let Fragments {
            run_cols,
            call_cols,
            mutable,
            running,
            started,
        } = Fragments::new();
        let insert_call = |status: &str, attempts: u32| {
            format!(
                "INSERT INTO calls (call_id, run_id, ordinal, tool_call_id, tool, args_hash, args, status, \
                 attempts, created_at_ms, updated_at_ms) \
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, '{status}', {attempts}, ?8, ?8 \
                 WHERE EXISTS (SELECT 1 FROM runs WHERE id = ?2)"
            )
        };
        let plain_insert = |status: &str, attempts: u32| {
            format!(
                "INSERT INTO calls (call_id, run_id, ordinal, tool_call_id, tool, args_hash, args, status, \
                 attempts, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, '{status}', {attempts}, ?8, ?8)"
            )
        };
        Sql {
            begin: "BEGIN IMMEDIATE".to_owned(),
            commit: "COMMIT".to_owned(),
            rollback: "ROLLBACK".to_owned(),
            savepoint: "SAVEPOINT op".to_owned(),
            release: "RELEASE op".to_owned(),
            rollback_to: "ROLLBACK TO op".to_owned(),
            create_run: "INSERT INTO runs (id, agent_id, session_id, principal, tenant, status, budgets, driver, \
                 resumes, error, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, NULL, ?9, ?9) ON CONFLICT (id) DO NOTHING"
                .to_owned(),
            set_run_status: format!(
                "UPDATE runs SET status = ?2, error = ?3, updated_at_ms = ?4 WHERE id = ?1 AND {mutable}"
            ),
            set_run_driver: format!(
                "UPDATE runs SET driver = ?2, updated_at_ms = ?3 WHERE id = ?1 AND {mutable}"
            ),
            begin_drive: format!(
                "UPDATE runs SET resumes = resumes + (CASE WHEN status = '{running}' THEN 1 ELSE 0 END), \
                 status = '{running}', updated_at_ms = ?2 WHERE id = ?1 AND {mutable}"
            ),
            run_by_id: format!("SELECT {run_cols} FROM runs WHERE id = ?1"),
            insert_open: plain_insert(CallStatus::Open.as_str(), 0),
            insert_started: plain_insert(started, 1),
            open_call: format!(
                "{} ON CONFLICT DO NOTHING",
                insert_call(CallStatus::Open.as_str(), 0)
            ),
            open_and_start: format!(
                "{} ON CONFLICT (run_id, ordinal) DO UPDATE SET status = '{started}', \
                 attempts = calls.attempts + 1, updated_at_ms = excluded.updated_at_ms \
                 WHERE calls.tool = excluded.tool AND calls.args_hash = excluded.args_hash \
                 AND {}",
                insert_call(started, 1),
                CallChange::Start.sql_condition("calls")
            ),
            call_at: format!(
                "SELECT {call_cols} FROM calls WHERE run_id = ?1 AND ordinal = ?2"
            ),
            call_by_id: format!("SELECT {call_cols} FROM calls WHERE call_id = ?1"),
            record_started: format!(
                "UPDATE calls SET status = '{started}', attempts = attempts + 1, updated_at_ms = ?2 \
                 WHERE call_id = ?1 AND {}",
                CallChange::Start.sql_condition("")
            ),
            attempts: "SELECT attempts FROM calls WHERE call_id = ?1".to_owned(),
            record_finished: format!(
                "UPDATE calls SET status = ?2, result = ?3, error = ?4, duration_ms = ?5, updated_at_ms = ?6, \
                 diagnostics = ?7 \
                 WHERE call_id = ?1 AND {}",
                CallChange::Finish.sql_condition("")
            ),
            record_gate: format!(
                "UPDATE calls SET status = ?2, gate = ?3, updated_at_ms = ?4 WHERE call_id = ?1 AND {}",
                CallChange::Gate.sql_condition("")
            ),
            regate: format!(
                "UPDATE calls SET status = ?2, gate = ?3, decision = NULL, updated_at_ms = ?4 \
                 WHERE call_id = ?1 AND {}",
                CallChange::Regate.sql_condition("")
            ),
            decide: format!(
                "UPDATE calls SET status = ?2, decision = ?3, error = ?4, updated_at_ms = ?5 \
                 WHERE call_id = ?1 AND {}",
                CallChange::Decide.sql_condition("")
            ),
            answer: format!(
                "UPDATE calls SET status = '{}', result = ?2, answer = ?3, updated_at_ms = ?4 \
                 WHERE call_id = ?1 AND {}",
                CallStatus::Completed.as_str(),
                CallChange::Answer.sql_condition("")
            ),
            crumb_counter: "UPDATE runs SET next_crumb_seq = next_crumb_seq + ?2 WHERE id = ?1".to_owned(),
            crumb_next: "SELECT next_crumb_seq FROM runs WHERE id = ?1".to_owned(),
            crumb_insert: "INSERT INTO crumbs (run_id, seq, crumb) VALUES (?1, ?2, ?3)".to_owned(),
            insert_finished_run: "INSERT INTO runs (id, agent_id, session_id, principal, tenant, status, budgets, driver, \
                 resumes, next_crumb_seq, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, ?10, ?10)"
                .to_owned(),
            insert_finished_call: "INSERT INTO calls (call_id, run_id, ordinal, tool_call_id, tool, args_hash, args, status, \
                 attempts, result, error, duration_ms, created_at_ms, updated_at_ms, diagnostics) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?10, ?11, ?12, ?12, ?13)"
                .to_owned(),
            run_exists: "SELECT 1 FROM runs WHERE id = ?1".to_owned(),
            call_exists: "SELECT 1 FROM calls WHERE call_id = ?1".to_owned(),
        }
    }
}

// ---- reads on the writer's connection ----

/// A call, read on the writer's connection (to say why a change did not apply).
fn load_call(conn: &Connection, call_id: &str) -> Result<Option<CallRecord>> {
    let sql = format!(
        "SELECT {} FROM calls WHERE call_id = ?1",
        columns(&CALL_COLUMNS, "")
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    let columns = stmt.column_count();
    stmt.query_row([call_id], |row| Ok(row_values(row, columns)))
        .optional()
        .map_err(db)?
        .transpose()?
        .map(|row| call_from_row(&row))
        .transpose()
}

fn run_exists_in(conn: &Connection, id: &str) -> Result<bool> {
    conn.query_row("SELECT 1 FROM runs WHERE id = ?1", [id], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .map_err(db)
}

/// The first row of a prepared statement, as plain values.
fn first_row<P: rusqlite::Params>(
    stmt: &mut Statement<'_>,
    params: P,
) -> Result<Option<toolshed_store::Row>> {
    let columns = stmt.column_count();
    stmt.query_row(params, |row| Ok(row_values(row, columns)))
        .optional()
        .map_err(db)?
        .transpose()
        .map_err(JournalError::from)
}

// ---- errors ----

/// A driver failure after the journal is open.
fn db(e: rusqlite::Error) -> JournalError {
    toolshed_store::DbError::from(e).into()
}

fn writer_stopped() -> JournalError {
    JournalError::Backend("the journal writer has stopped".into())
}
