//! The SQLite backend: one file in WAL mode with `synchronous=FULL`, a writer thread
//! that groups concurrent writes into one fsync'd commit, and a small pool of read
//! connections used from `spawn_blocking`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Statement, params};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;

use crate::common::{
    CALL_COLUMNS, CallChange, MAX_BATCH, Outcome, RUN_COLUMNS, RawCall, RawRun, WriteOp,
    any_status, call_conflict, call_id_taken, check_versions, columns, created_run, crumb_record,
    not_found_call, not_found_run, now_ms, run_conflict, run_exists, run_mutable_condition,
};
use crate::{
    Answer, CallRecord, CallResult, CallStatus, CrumbRecord, Decision, FORMAT_VERSION, Gate,
    GateFilter, Journal, JournalError, NewCall, NewRun, OpenedCall, Result, RunFilter, RunRecord,
    RunStatus,
};

/// How long a connection waits for another process's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a caller whose write is the only one in flight polls for its answer
/// (yielding to other tasks between polls) before parking. Waking a parked thread
/// after the writer's fsync costs a sizeable fraction of a commit on small VMs; with
/// other writes in flight nobody polls, group commit takes over.
const CALLER_SPIN: Duration = Duration::from_micros(250);
/// How long the writer polls for the next request after a batch before parking.
const WRITER_SPIN: Duration = Duration::from_micros(50);
/// Reads at once, each on its own pooled connection.
const READERS: usize = 4;

/// The schema, one migration per version, each applied in the opening transaction.
/// JSON is stored as TEXT: exactly what serde_json wrote, the same in both backends.
/// Status lists are `=`/`OR` chains: SQLite evaluates `IN (…)` through a temporary index
/// built on every execution.
const MIGRATIONS: &[(u32, &str)] = &[(
    1,
    "
    CREATE TABLE runs (
        id             TEXT    NOT NULL PRIMARY KEY,
        agent_id       TEXT    NOT NULL,
        session_id     TEXT    NOT NULL,
        principal      TEXT,
        tenant         TEXT,
        status         TEXT    NOT NULL
            CHECK (status = 'running' OR status = 'parked' OR status = 'completed'
                   OR status = 'failed' OR status = 'cancelled'),
        budgets        TEXT    NOT NULL,
        driver         TEXT    NOT NULL,
        resumes        INTEGER NOT NULL DEFAULT 0,
        error          TEXT,
        next_crumb_seq INTEGER NOT NULL DEFAULT 0,
        created_at_ms  INTEGER NOT NULL,
        updated_at_ms  INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX runs_by_created ON runs (created_at_ms);
    CREATE INDEX runs_by_status ON runs (status, created_at_ms);
    CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms);
    CREATE INDEX runs_by_tenant ON runs (tenant, created_at_ms);

    CREATE TABLE calls (
        call_id       TEXT    NOT NULL PRIMARY KEY,
        run_id        TEXT    NOT NULL REFERENCES runs (id),
        ordinal       INTEGER NOT NULL CHECK (ordinal >= 0),
        tool_call_id  TEXT    NOT NULL,
        tool          TEXT    NOT NULL,
        args_hash     TEXT    NOT NULL,
        args          TEXT    NOT NULL,
        status        TEXT    NOT NULL
            CHECK (status = 'open' OR status = 'started' OR status = 'awaiting_approval'
                   OR status = 'awaiting_answer' OR status = 'approved'
                   OR status = 'completed' OR status = 'failed'),
        attempts      INTEGER NOT NULL DEFAULT 0,
        result        TEXT,
        error         TEXT,
        duration_ms   REAL,
        gate          TEXT,
        decision      TEXT,
        answer        TEXT,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        UNIQUE (run_id, ordinal)
    ) STRICT;
    CREATE INDEX calls_pending ON calls (run_id)
        WHERE (status = 'awaiting_approval' OR status = 'awaiting_answer');

    CREATE TABLE crumbs (
        run_id TEXT    NOT NULL REFERENCES runs (id),
        seq    INTEGER NOT NULL,
        crumb  TEXT    NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) STRICT, WITHOUT ROWID;
    ",
)];

/// The newest schema version this build knows.
fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |(v, _)| *v)
}

/// A journal in one SQLite file.
///
/// The writer thread owns the only write connection of this journal. Write methods send
/// a `WriteOp` with a one-shot reply on a channel and wait; the thread takes every
/// queued request (up to `MAX_BATCH`), runs them in one `BEGIN IMMEDIATE`
/// transaction, each inside its own `SAVEPOINT` (a failing operation is rolled back
/// alone and its error goes to its caller), commits once and then replies. Reads run on
/// other connections, which WAL lets proceed beside the writer. No SQLite call ever runs
/// on a tokio worker thread. Other processes may open the same file: `BEGIN IMMEDIATE`
/// and the busy timeout serialize their writers, and every transition is a conditional
/// statement, so the rules hold across processes too.
///
/// Latency of a lone write (one run working sequentially) is most of what a keyed call
/// costs, so the hot path is lean: prepared statements only, a new call inserted with a
/// plain `INSERT` (the conditional upsert only when that hits a constraint), rows read
/// back with a `SELECT` rather than `RETURNING` (several times dearer in SQLite), status
/// conditions written as `=`/`OR` rather than `IN (…)` (SQLite builds a temporary index
/// per execution of an `IN` list). Around the fsync both sides poll briefly instead of
/// parking, see `CALLER_SPIN` and `WRITER_SPIN`: waking a parked thread costs a
/// sizeable part of a commit on small VMs.
pub struct SqliteJournal {
    path: PathBuf,
    sender: Option<Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    readers: Arc<crate::sqlite_reads::Readers>,
    applied: Vec<u32>,
    in_flight: AtomicUsize,
}

impl fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteJournal {
    /// Open (or create) the journal file at `path`, creating its parent folder if
    /// needed, and apply pending migrations.
    ///
    /// A file that is not a SQLite database, or a SQLite database with tables but no
    /// `toolshed_meta`, is `NotAJournal` (and is left unchanged); a journal written by a
    /// newer toolshed is `Unavailable`.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteJournal> {
        let path = path.as_ref().to_path_buf();
        let (sender, receiver) = std::sync::mpsc::channel();
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread_path = path.clone();
        let writer = std::thread::Builder::new()
            .name("toolshed-journal-writer".into())
            .spawn(move || writer_thread(&thread_path, receiver, ready_tx))
            .map_err(|e| unavailable(&path, format!("cannot start the writer thread: {e}")))?;
        let applied = match ready_rx.await {
            Ok(Ok(applied)) => applied,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(unavailable(
                    &path,
                    "the writer thread stopped while opening".into(),
                ));
            }
        };
        if !applied.is_empty() {
            tracing::info!(path = %path.display(), ?applied, "applied journal migrations");
        }
        Ok(SqliteJournal {
            readers: Arc::new(crate::sqlite_reads::Readers::new(
                &path,
                READERS,
                BUSY_TIMEOUT,
                16,
            )),
            path,
            sender: Some(sender),
            writer: Some(writer),
            applied,
            in_flight: AtomicUsize::new(0),
        })
    }

    /// The schema versions this open applied: empty when the file was up to date.
    pub fn applied_migrations(&self) -> &[u32] {
        &self.applied
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn write(&self, op: WriteOp) -> Result<Outcome> {
        self.send(Op::One(op)).await
    }

    async fn send(&self, op: Op) -> Result<Outcome> {
        let sender = self.sender.as_ref().ok_or_else(writer_stopped)?;
        let (reply, mut answer) = oneshot::channel();
        let in_flight = InFlight::enter(&self.in_flight);
        sender
            .send(Request { op, reply })
            .map_err(|_| writer_stopped())?;
        if in_flight.alone {
            // A lone write (one run working sequentially): poll for the answer instead of
            // parking, see CALLER_SPIN. Other tasks still run between polls.
            let until = Instant::now() + CALLER_SPIN;
            loop {
                match answer.try_recv() {
                    Ok(result) => return result,
                    Err(TryRecvError::Closed) => return Err(writer_stopped()),
                    Err(TryRecvError::Empty) => {}
                }
                if Instant::now() >= until || self.in_flight.load(Ordering::Acquire) > 1 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        answer.await.map_err(|_| writer_stopped())?
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.readers.read(f).await
    }
}

impl Drop for SqliteJournal {
    fn drop(&mut self) {
        // Closing the channel ends the writer after the batch it is running; joining
        // it means the file is closed (and checkpointed) when the journal is gone.
        drop(self.sender.take());
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!(path = %self.path.display(), "the journal writer thread panicked");
        }
    }
}

#[async_trait]
impl Journal for SqliteJournal {
    fn describe(&self) -> String {
        format!("sqlite://{}", self.path.display())
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
        self.read(move |conn| load_run(conn, &id)?.ok_or_else(|| not_found_run(&id)))
            .await
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>> {
        let filter = filter.clone();
        self.read(move |conn| list_runs(conn, &filter)).await
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

    async fn begin_drive(&self, id: &str) -> Result<RunRecord> {
        self.write(WriteOp::begin_drive(id)).await?.into_run()
    }

    async fn calls_of_run(&self, run_id: &str) -> Result<Vec<CallRecord>> {
        let run_id = run_id.to_owned();
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM calls WHERE run_id = ?1 ORDER BY ordinal",
                columns(&CALL_COLUMNS, "")
            );
            let calls = query_calls(conn, &sql, &[SqlValue::Text(run_id.clone())])?;
            if calls.is_empty() && !run_exists_in(conn, &run_id)? {
                return Err(not_found_run(&run_id));
            }
            Ok(calls)
        })
        .await
    }

    async fn get_call(&self, call_id: &str) -> Result<CallRecord> {
        let call_id = call_id.to_owned();
        self.read(move |conn| load_call(conn, &call_id)?.ok_or_else(|| not_found_call(&call_id)))
            .await
    }

    async fn open_call(&self, call: NewCall) -> Result<CallRecord> {
        self.write(WriteOp::OpenCall(WriteOp::call_insert(&call)?))
            .await?
            .into_call()
    }

    async fn open_and_start(&self, call: NewCall) -> Result<OpenedCall> {
        self.write(WriteOp::OpenAndStart(WriteOp::call_insert(&call)?))
            .await?
            .into_opened()
    }

    async fn record_started(&self, call_id: &str) -> Result<u32> {
        self.write(WriteOp::record_started(call_id))
            .await?
            .into_attempts()
    }

    async fn record_finished(&self, call_id: &str, outcome: CallResult) -> Result<CallRecord> {
        self.write(WriteOp::record_finished(call_id, &outcome)?)
            .await?
            .into_call()
    }

    async fn record_gate(&self, call_id: &str, gate: Gate) -> Result<CallRecord> {
        self.write(WriteOp::record_gate(call_id, &gate)?)
            .await?
            .into_call()
    }

    async fn decide(&self, call_id: &str, decision: Decision) -> Result<CallRecord> {
        self.write(WriteOp::decide(call_id, &decision)?)
            .await?
            .into_call()
    }

    async fn answer(&self, call_id: &str, answer: Answer) -> Result<CallRecord> {
        self.write(WriteOp::answer(call_id, &answer)?)
            .await?
            .into_call()
    }

    async fn pending_gates(&self, filter: &GateFilter) -> Result<Vec<CallRecord>> {
        let filter = filter.clone();
        self.read(move |conn| {
            let mut sql = format!(
                "SELECT {} FROM calls c JOIN runs r ON r.id = c.run_id WHERE {}",
                columns(&CALL_COLUMNS, "c."),
                // The partial index's own predicate, so that SQLite uses it.
                any_status(
                    "c",
                    [
                        CallStatus::AwaitingApproval.as_str(),
                        CallStatus::AwaitingAnswer.as_str()
                    ]
                )
            );
            let mut args = Vec::new();
            if let Some(run_id) = filter.run_id {
                args.push(SqlValue::Text(run_id));
                sql.push_str(&format!(" AND c.run_id = ?{}", args.len()));
            }
            if let Some(tenant) = filter.tenant {
                args.push(SqlValue::Text(tenant));
                sql.push_str(&format!(" AND r.tenant = ?{}", args.len()));
            }
            sql.push_str(" ORDER BY c.created_at_ms, c.run_id, c.ordinal");
            query_calls(conn, &sql, &args)
        })
        .await
    }

    async fn append_crumbs(&self, run_id: &str, crumbs: Vec<Value>) -> Result<()> {
        self.write(WriteOp::append_crumbs(run_id, &crumbs)?)
            .await?
            .into_done()
    }

    async fn record_run(
        &self,
        run: NewRun,
        calls: Vec<(NewCall, CallResult)>,
        crumbs: Vec<Value>,
        status: RunStatus,
    ) -> Result<RunRecord> {
        let now = now_ms();
        let row = crate::common::RunInsert::new(&run, status, now)?;
        let mut finished_calls = Vec::with_capacity(calls.len());
        for (call, outcome) in &calls {
            let (call_status, result, error) = match &outcome.result {
                Ok(value) => (
                    CallStatus::Completed,
                    Some(crate::common::to_json("result", value)?),
                    None,
                ),
                Err(e) => (
                    CallStatus::Failed,
                    None,
                    Some(crate::common::to_json("error", e)?),
                ),
            };
            finished_calls.push(FinishedCall {
                call: WriteOp::call_insert(call)?,
                status: call_status.as_str(),
                result,
                error,
                duration_ms: outcome.duration_ms,
            });
        }
        let crumbs = crumbs.iter().map(Value::to_string).collect();
        self.send(Op::Finished(FinishedRun {
            run: row,
            calls: finished_calls,
            crumbs,
        }))
        .await?
        .into_done()?;
        let mut record = crate::common::created_run(run, now);
        record.status = status;
        record.resumes = 1;
        Ok(record)
    }

    async fn crumbs_of_run(&self, run_id: &str) -> Result<Vec<CrumbRecord>> {
        let run_id = run_id.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT seq, crumb FROM crumbs WHERE run_id = ?1 ORDER BY seq")
                .map_err(db)?;
            let rows = stmt
                .query_map([&run_id], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(db)?;
            let mut crumbs = Vec::new();
            for row in rows {
                let (seq, crumb) = row.map_err(db)?;
                crumbs.push(crumb_record(run_id.clone(), seq, &crumb)?);
            }
            if crumbs.is_empty() && !run_exists_in(conn, &run_id)? {
                return Err(not_found_run(&run_id));
            }
            Ok(crumbs)
        })
        .await
    }
}

// ---- the writer ----

struct Request {
    op: Op,
    reply: oneshot::Sender<Result<Outcome>>,
}

/// What the writer applies in one savepoint: one operation, or several that stand or
/// fall together (their answer is the last one's).
enum Op {
    One(WriteOp),
    /// A finished run inserted whole (`record_run`): plain inserts, nothing read back.
    Finished(FinishedRun),
}

/// The rows of a run recorded after the fact, serialized.
struct FinishedRun {
    run: crate::common::RunInsert,
    calls: Vec<FinishedCall>,
    crumbs: Vec<String>,
}

struct FinishedCall {
    call: crate::common::CallInsert,
    status: &'static str,
    result: Option<String>,
    error: Option<String>,
    duration_ms: f64,
}

fn writer_thread(
    path: &Path,
    receiver: Receiver<Request>,
    ready: oneshot::Sender<Result<Vec<u32>>>,
) {
    let (conn, applied) = match open_writer(path) {
        Ok(opened) => opened,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut stmts = match WriterStatements::prepare(&conn) {
        Ok(stmts) => stmts,
        Err(e) => {
            let _ = ready.send(Err(unavailable(
                path,
                format!("cannot prepare statements: {e}"),
            )));
            return;
        }
    };
    if ready.send(Ok(applied)).is_err() {
        return; // the opener gave up
    }
    let checkpoints = Checkpointer::start(path, &conn);
    let mut batch = Vec::with_capacity(64);
    let mut commits = 0_u32;
    while let Some(first) = next_request(&receiver) {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        run_batch(&conn, &mut stmts, &mut batch);
        commits = commits.wrapping_add(1);
        if commits.is_multiple_of(CHECKPOINT_EVERY) {
            checkpoints.kick();
        }
    }
}

/// Commits between two background checkpoints.
const CHECKPOINT_EVERY: u32 = 32;
/// WAL pages after which the writer checkpoints by itself: a backstop for when the
/// background checkpointer cannot keep up or could not start (64 MiB of 4 KiB pages).
const WAL_BACKSTOP_PAGES: u32 = 16_384;

/// Copies the WAL back into the database on its own thread and connection (PASSIVE:
/// never blocks the writer). SQLite's default runs that copy, and its fsync, inside the
/// commit that crosses 1000 WAL pages, stalling every caller of that batch: under load
/// that was the tail of the latency.
struct Checkpointer {
    kick: Option<std::sync::mpsc::SyncSender<()>>,
}

impl Checkpointer {
    fn start(path: &Path, writer: &Connection) -> Checkpointer {
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
                        if let Err(e) =
                            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                        {
                            tracing::debug!(error = %e, "background checkpoint failed");
                        }
                    }
                })
                .ok()
        });
        let pages = if spawned.is_some() {
            WAL_BACKSTOP_PAGES
        } else {
            1000 // SQLite's default: the writer checkpoints alone.
        };
        if let Err(e) = writer.execute_batch(&format!("PRAGMA wal_autocheckpoint = {pages}")) {
            tracing::warn!(error = %e, "cannot set wal_autocheckpoint");
        }
        Checkpointer {
            kick: spawned.map(|_| kick),
        }
    }

    /// Ask for a checkpoint; one already asked for and not started yet is enough.
    fn kick(&self) {
        if let Some(kick) = &self.kick {
            let _ = kick.try_send(());
        }
    }
}

/// The next request, or `None` once the journal is gone. Polled for [`WRITER_SPIN`]
/// before blocking: a caller working sequentially sends its next write within
/// microseconds of its answer, and waking a parked thread costs more than that.
fn next_request(receiver: &Receiver<Request>) -> Option<Request> {
    let until = Instant::now() + WRITER_SPIN;
    loop {
        match receiver.try_recv() {
            Ok(request) => return Some(request),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
            Err(std::sync::mpsc::TryRecvError::Empty) if Instant::now() < until => {
                std::hint::spin_loop();
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => return receiver.recv().ok(),
        }
    }
}

/// Counts the writes in flight for as long as it lives.
struct InFlight<'a> {
    count: &'a AtomicUsize,
    /// Whether no other write was in flight when this one started.
    alone: bool,
}

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        let alone = count.fetch_add(1, Ordering::AcqRel) == 0;
        InFlight { count, alone }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Run a batch in one transaction, commit once, then reply to each request.
fn run_batch(conn: &Connection, st: &mut WriterStatements<'_>, batch: &mut Vec<Request>) {
    if let Err(e) = st.begin.execute([]) {
        let message = format!("cannot begin a write transaction: {e}");
        for request in batch.drain(..) {
            let _ = request
                .reply
                .send(Err(JournalError::Backend(message.clone())));
        }
        return;
    }
    let mut results = Vec::with_capacity(batch.len());
    let mut broken = None;
    for request in batch.iter() {
        if broken.is_some() {
            break;
        }
        let op = match &request.op {
            Op::One(op) => op,
            Op::Finished(run) => {
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
        };
        if let Err(e) = st.savepoint.execute([]) {
            broken = Some(format!("cannot open a savepoint: {e}"));
            break;
        }
        let result = apply(st, op);
        let ended = if result.is_ok() {
            st.release.execute([]).map(drop)
        } else {
            st.rollback_to
                .execute([])
                .and_then(|_| st.release.execute([]))
                .map(drop)
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
        None => st
            .commit
            .execute([])
            .err()
            .map(|e| format!("the commit failed: {e}")),
    };
    if let Some(reason) = failure {
        if !conn.is_autocommit() {
            let _ = st.rollback.execute([]);
        }
        // Nothing of this batch is stored: an operation that failed on its own keeps
        // its own error, every other one gets the batch's.
        let mut results = results.into_iter();
        for request in batch.drain(..) {
            let result = match results.next() {
                Some(Err(own)) => Err(own),
                _ => Err(JournalError::Backend(format!(
                    "nothing was written: {reason}"
                ))),
            };
            let _ = request.reply.send(result);
        }
        return;
    }
    for (request, result) in batch.drain(..).zip(results) {
        let _ = request.reply.send(result);
    }
}

/// Why a finished run cannot be inserted: its id or one of its call ids exists.
fn finished_conflict(st: &mut WriterStatements<'_>, f: &FinishedRun) -> Result<()> {
    if st.run_exists.exists([&f.run.id]).map_err(db)? {
        return Err(run_exists(&f.run.id));
    }
    for c in &f.calls {
        if st.call_exists.exists([&c.call.call_id]).map_err(db)? {
            return Err(call_id_taken(
                &c.call.call_id,
                load_call(st.conn, &c.call.call_id)?.as_ref(),
            ));
        }
    }
    Ok(())
}

/// Insert a finished run, its calls and its crumbs: plain inserts, nothing to read
/// back. Callers check [`finished_conflict`] first.
fn insert_finished(st: &mut WriterStatements<'_>, f: &FinishedRun) -> Result<Outcome> {
    let r = &f.run;
    let crumb_count = i64::try_from(f.crumbs.len())
        .map_err(|_| JournalError::Backend("too many crumbs in one run".into()))?;
    let constraint =
        |e: &rusqlite::Error| e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation);
    st.insert_finished_run
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
    for c in &f.calls {
        let call = &c.call;
        st.insert_finished_call
            .execute(params![
                call.call_id,
                call.run_id,
                call.ordinal,
                call.tool_call_id,
                call.tool,
                call.args_hash,
                call.args,
                c.status,
                c.result,
                c.error,
                c.duration_ms,
                call.now
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
        st.crumb_insert
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
fn apply(st: &mut WriterStatements<'_>, op: &WriteOp) -> Result<Outcome> {
    match op {
        WriteOp::CreateRun(r) => {
            let inserted = st
                .create_run
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
                .set_run_status
                .execute(params![id, status, error, now])
                .map_err(db)?;
            run_outcome(st, op, id, changed)
        }
        WriteOp::BeginDrive { id, now } => {
            let changed = st.begin_drive.execute(params![id, now]).map_err(db)?;
            run_outcome(st, op, id, changed)
        }
        WriteOp::OpenCall(c) | WriteOp::OpenAndStart(c) => {
            let start = matches!(op, WriteOp::OpenAndStart(_));
            // The usual case, a new call: a plain insert, and the row is known.
            let (fresh, status, attempts) = if start {
                (&mut st.insert_started, CallStatus::Started, 1)
            } else {
                (&mut st.insert_open, CallStatus::Open, 0)
            };
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
                Ok(_) => {
                    let call = inserted_call(c, status, attempts);
                    return Ok(if start {
                        Outcome::Opened {
                            call,
                            started: true,
                        }
                    } else {
                        Outcome::Call(call)
                    });
                }
                // The key or the call id exists, or the run does not: SQLite undid the
                // statement; the conditional upsert below sorts it out.
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {}
                Err(e) => return Err(db(e)),
            }
            let stmt = if start {
                &mut st.open_and_start
            } else {
                &mut st.open_call
            };
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
            let existing = st
                .call_at
                .query_row(params![c.run_id, c.ordinal], raw_call)
                .optional()
                .map_err(db)?;
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
                .record_started
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
                .attempts
                .query_row([call_id], |row| row.get(0))
                .map_err(db)?;
            Ok(Outcome::Attempts(attempts))
        }
        WriteOp::RecordFinished {
            call_id,
            status,
            result,
            error,
            duration_ms,
            now,
        } => {
            let changed = st
                .record_finished
                .execute(params![call_id, status, result, error, duration_ms, now])
                .map_err(db)?;
            call_outcome(st, op, call_id, changed)
        }
        WriteOp::RecordGate {
            call_id,
            status,
            gate,
            now,
        } => {
            let changed = st
                .record_gate
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
                .decide
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
                .answer
                .execute(params![call_id, result, answer, now])
                .map_err(db)?;
            call_outcome(st, op, call_id, changed)
        }
        WriteOp::AppendCrumbs { run_id, crumbs } => {
            let count = i64::try_from(crumbs.len())
                .map_err(|_| JournalError::Backend("too many crumbs in one append".into()))?;
            if st
                .crumb_counter
                .execute(params![run_id, count])
                .map_err(db)?
                == 0
            {
                return Err(not_found_run(run_id));
            }
            let next: i64 = st
                .crumb_next
                .query_row([run_id], |row| row.get(0))
                .map_err(db)?;
            for (seq, crumb) in (next - count..).zip(crumbs) {
                st.crumb_insert
                    .execute(params![run_id, seq, crumb])
                    .map_err(db)?;
            }
            Ok(Outcome::Done)
        }
    }
}

/// The row a plain insert of `c` wrote.
fn inserted_call(c: &crate::common::CallInsert, status: CallStatus, attempts: i64) -> RawCall {
    RawCall {
        call_id: c.call_id.clone(),
        run_id: c.run_id.clone(),
        ordinal: c.ordinal,
        tool_call_id: c.tool_call_id.clone(),
        tool: c.tool.clone(),
        args_hash: c.args_hash.clone(),
        args: c.args.clone(),
        status: status.as_str().to_owned(),
        attempts,
        result: None,
        error: None,
        duration_ms: None,
        gate: None,
        decision: None,
        answer: None,
        created_at_ms: c.now,
        updated_at_ms: c.now,
    }
}

/// The run after a run change, or why it did not apply.
fn run_outcome(
    st: &mut WriterStatements<'_>,
    op: &WriteOp,
    id: &str,
    changed: usize,
) -> Result<Outcome> {
    let run = st
        .run_by_id
        .query_row([id], raw_run)
        .optional()
        .map_err(db)?;
    match (changed, run, op.run_change()) {
        (1, Some(run), _) => Ok(Outcome::Run(run)),
        (_, run, Some((change, _))) => {
            let run = run.map(RawRun::into_record).transpose()?;
            Err(run_conflict(change, id, run.as_ref()))
        }
        (_, _, None) => Err(JournalError::Backend("not a run change".into())),
    }
}

/// The call after a call change, or why it did not apply.
fn call_outcome(
    st: &mut WriterStatements<'_>,
    op: &WriteOp,
    call_id: &str,
    changed: usize,
) -> Result<Outcome> {
    let call = st
        .call_by_id
        .query_row([call_id], raw_call)
        .optional()
        .map_err(db)?;
    match (changed, call, op.call_change()) {
        (1, Some(call), _) => Ok(Outcome::Call(call)),
        (_, call, Some((change, _))) => {
            let call = call.map(RawCall::into_record).transpose()?;
            Err(call_conflict(change, call_id, call.as_ref()))
        }
        (_, _, None) => Err(JournalError::Backend("not a call change".into())),
    }
}

/// The writer's statements, prepared once.
struct WriterStatements<'c> {
    conn: &'c Connection,
    begin: Statement<'c>,
    commit: Statement<'c>,
    rollback: Statement<'c>,
    savepoint: Statement<'c>,
    release: Statement<'c>,
    rollback_to: Statement<'c>,
    create_run: Statement<'c>,
    set_run_status: Statement<'c>,
    begin_drive: Statement<'c>,
    run_by_id: Statement<'c>,
    insert_open: Statement<'c>,
    insert_started: Statement<'c>,
    open_call: Statement<'c>,
    open_and_start: Statement<'c>,
    call_at: Statement<'c>,
    call_by_id: Statement<'c>,
    record_started: Statement<'c>,
    attempts: Statement<'c>,
    record_finished: Statement<'c>,
    record_gate: Statement<'c>,
    decide: Statement<'c>,
    answer: Statement<'c>,
    crumb_counter: Statement<'c>,
    crumb_next: Statement<'c>,
    crumb_insert: Statement<'c>,
    insert_finished_run: Statement<'c>,
    insert_finished_call: Statement<'c>,
    run_exists: Statement<'c>,
    call_exists: Statement<'c>,
}

impl<'c> WriterStatements<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        let run_cols = columns(&RUN_COLUMNS, "");
        let call_cols = columns(&CALL_COLUMNS, "");
        let mutable = run_mutable_condition();
        let running = RunStatus::Running.as_str();
        let started = CallStatus::Started.as_str();
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
        Ok(WriterStatements {
            conn,
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            commit: conn.prepare("COMMIT")?,
            rollback: conn.prepare("ROLLBACK")?,
            savepoint: conn.prepare("SAVEPOINT op")?,
            release: conn.prepare("RELEASE op")?,
            rollback_to: conn.prepare("ROLLBACK TO op")?,
            create_run: conn.prepare(
                "INSERT INTO runs (id, agent_id, session_id, principal, tenant, status, budgets, driver, \
                 resumes, error, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, NULL, ?9, ?9) ON CONFLICT (id) DO NOTHING",
            )?,
            set_run_status: conn.prepare(&format!(
                "UPDATE runs SET status = ?2, error = ?3, updated_at_ms = ?4 WHERE id = ?1 AND {mutable}"
            ))?,
            begin_drive: conn.prepare(&format!(
                "UPDATE runs SET resumes = resumes + (CASE WHEN status = '{running}' THEN 1 ELSE 0 END), \
                 status = '{running}', updated_at_ms = ?2 WHERE id = ?1 AND {mutable}"
            ))?,
            run_by_id: conn.prepare(&format!("SELECT {run_cols} FROM runs WHERE id = ?1"))?,
            insert_open: conn.prepare(&plain_insert(CallStatus::Open.as_str(), 0))?,
            insert_started: conn.prepare(&plain_insert(started, 1))?,
            open_call: conn.prepare(&format!(
                "{} ON CONFLICT DO NOTHING",
                insert_call(CallStatus::Open.as_str(), 0)
            ))?,
            open_and_start: conn.prepare(&format!(
                "{} ON CONFLICT (run_id, ordinal) DO UPDATE SET status = '{started}', \
                 attempts = calls.attempts + 1, updated_at_ms = excluded.updated_at_ms \
                 WHERE calls.tool = excluded.tool AND calls.args_hash = excluded.args_hash \
                 AND {}",
                insert_call(started, 1),
                CallChange::Start.sql_condition("calls")
            ))?,
            call_at: conn.prepare(&format!(
                "SELECT {call_cols} FROM calls WHERE run_id = ?1 AND ordinal = ?2"
            ))?,
            call_by_id: conn.prepare(&format!("SELECT {call_cols} FROM calls WHERE call_id = ?1"))?,
            record_started: conn.prepare(&format!(
                "UPDATE calls SET status = '{started}', attempts = attempts + 1, updated_at_ms = ?2 \
                 WHERE call_id = ?1 AND {}",
                CallChange::Start.sql_condition("")
            ))?,
            attempts: conn.prepare("SELECT attempts FROM calls WHERE call_id = ?1")?,
            record_finished: conn.prepare(&format!(
                "UPDATE calls SET status = ?2, result = ?3, error = ?4, duration_ms = ?5, updated_at_ms = ?6 \
                 WHERE call_id = ?1 AND {}",
                CallChange::Finish.sql_condition("")
            ))?,
            record_gate: conn.prepare(&format!(
                "UPDATE calls SET status = ?2, gate = ?3, updated_at_ms = ?4 WHERE call_id = ?1 AND {}",
                CallChange::Gate.sql_condition("")
            ))?,
            decide: conn.prepare(&format!(
                "UPDATE calls SET status = ?2, decision = ?3, error = ?4, updated_at_ms = ?5 \
                 WHERE call_id = ?1 AND {}",
                CallChange::Decide.sql_condition("")
            ))?,
            answer: conn.prepare(&format!(
                "UPDATE calls SET status = '{}', result = ?2, answer = ?3, updated_at_ms = ?4 \
                 WHERE call_id = ?1 AND {}",
                CallStatus::Completed.as_str(),
                CallChange::Answer.sql_condition("")
            ))?,
            crumb_counter: conn.prepare("UPDATE runs SET next_crumb_seq = next_crumb_seq + ?2 WHERE id = ?1")?,
            crumb_next: conn.prepare("SELECT next_crumb_seq FROM runs WHERE id = ?1")?,
            crumb_insert: conn.prepare("INSERT INTO crumbs (run_id, seq, crumb) VALUES (?1, ?2, ?3)")?,
            insert_finished_run: conn.prepare(
                "INSERT INTO runs (id, agent_id, session_id, principal, tenant, status, budgets, driver, \
                 resumes, next_crumb_seq, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, ?10, ?10)",
            )?,
            insert_finished_call: conn.prepare(
                "INSERT INTO calls (call_id, run_id, ordinal, tool_call_id, tool, args_hash, args, status, \
                 attempts, result, error, duration_ms, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?10, ?11, ?12, ?12)",
            )?,
            run_exists: conn.prepare("SELECT 1 FROM runs WHERE id = ?1")?,
            call_exists: conn.prepare("SELECT 1 FROM calls WHERE call_id = ?1")?,
        })
    }
}

// ---- opening and migrating ----

/// Open the write connection: check the file is ours (before changing anything), set
/// WAL and the pragmas, migrate.
fn open_writer(path: &Path) -> Result<(Connection, Vec<u32>)> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|e| {
            unavailable(
                path,
                format!("cannot create the folder `{}`: {e}", parent.display()),
            )
        })?;
    }
    let conn = Connection::open(path).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| open_error(path, e))?;
    check_is_journal(&conn, path)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(unavailable(
            path,
            format!("cannot switch to WAL mode (the journal mode is `{mode}`)"),
        ));
    }
    // temp_store = MEMORY: every operation runs in a savepoint, and SQLite keeps the
    // original of each page a savepoint changes in a sub-journal; on disk (the default)
    // that is a pwrite per page, which took over a quarter of the writer's time under
    // load. In memory it is a copy; the savepoint only needs it until it is released.
    conn.execute_batch(
        "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;",
    )
    .map_err(|e| open_error(path, e))?;
    let applied = migrate(&conn, path)?;
    Ok((conn, applied))
}

/// Refuse a database that has tables but no `toolshed_meta` (someone else's).
fn check_is_journal(conn: &Connection, path: &Path) -> Result<()> {
    let tables = user_tables(conn).map_err(|e| open_error(path, e))?;
    if !tables.is_empty() && !tables.iter().any(|t| t == "toolshed_meta") {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(JournalError::NotAJournal {
            path: path.display().to_string(),
            message: format!(
                "it has tables ({}) but no toolshed_meta: not a toolshed journal",
                shown.join(", ")
            ),
        });
    }
    Ok(())
}

fn user_tables(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         ORDER BY name",
    )?;
    let names = stmt.query_map([], |row| row.get::<_, String>(0))?;
    names.collect()
}

/// Apply the migrations newer than the stored version, in one transaction.
fn migrate(conn: &Connection, path: &Path) -> Result<Vec<u32>> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_error(path, e))?;
    let result = migrate_in_transaction(conn, path);
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = conn.execute_batch(end).map_err(|e| open_error(path, e));
    let applied = result?;
    ended?;
    Ok(applied)
}

fn migrate_in_transaction(conn: &Connection, path: &Path) -> Result<Vec<u32>> {
    let err = |e: rusqlite::Error| open_error(path, e);
    // Again under the write lock: another process may have created tables meanwhile.
    check_is_journal(conn, path)?;
    conn.execute_batch("CREATE TABLE IF NOT EXISTS toolshed_meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL) STRICT")
        .map_err(err)?;
    let meta = |key: &str| -> Result<Option<u32>> {
        let value: Option<String> = conn
            .query_row(
                "SELECT value FROM toolshed_meta WHERE key = ?1",
                [key],
                |row| row.get(0),
            )
            .optional()
            .map_err(err)?;
        value
            .map(|v| {
                v.parse::<u32>().map_err(|_| {
                    unavailable(path, format!("toolshed_meta has an invalid {key} `{v}`"))
                })
            })
            .transpose()
    };
    let version = meta("schema_version")?.unwrap_or(0);
    let format = meta("format_version")?.unwrap_or(FORMAT_VERSION);
    check_versions(version, format, latest_version()).map_err(|m| unavailable(path, m))?;
    let mut applied = Vec::new();
    for (v, sql) in MIGRATIONS {
        if *v > version {
            conn.execute_batch(sql)
                .map_err(|e| unavailable(path, format!("migration {v} failed: {e}")))?;
            applied.push(*v);
        }
    }
    if !applied.is_empty() {
        conn.execute(
            "INSERT INTO toolshed_meta (key, value) VALUES ('schema_version', ?1), ('format_version', ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![latest_version().to_string(), FORMAT_VERSION.to_string()],
        )
        .map_err(err)?;
    }
    Ok(applied)
}

// ---- reads ----

fn load_run(conn: &Connection, id: &str) -> Result<Option<RunRecord>> {
    let sql = format!(
        "SELECT {} FROM runs WHERE id = ?1",
        columns(&RUN_COLUMNS, "")
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    stmt.query_row([id], raw_run)
        .optional()
        .map_err(db)?
        .map(RawRun::into_record)
        .transpose()
}

fn load_call(conn: &Connection, call_id: &str) -> Result<Option<CallRecord>> {
    let sql = format!(
        "SELECT {} FROM calls WHERE call_id = ?1",
        columns(&CALL_COLUMNS, "")
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    stmt.query_row([call_id], raw_call)
        .optional()
        .map_err(db)?
        .map(RawCall::into_record)
        .transpose()
}

fn run_exists_in(conn: &Connection, id: &str) -> Result<bool> {
    conn.query_row("SELECT 1 FROM runs WHERE id = ?1", [id], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .map_err(db)
}

fn list_runs(conn: &Connection, filter: &RunFilter) -> Result<Vec<RunRecord>> {
    let mut sql = format!("SELECT {} FROM runs WHERE 1 = 1", columns(&RUN_COLUMNS, ""));
    let mut args = Vec::new();
    if let Some(status) = filter.status {
        args.push(SqlValue::Text(status.as_str().to_owned()));
        sql.push_str(&format!(" AND status = ?{}", args.len()));
    }
    if let Some(agent_id) = &filter.agent_id {
        args.push(SqlValue::Text(agent_id.clone()));
        sql.push_str(&format!(" AND agent_id = ?{}", args.len()));
    }
    if let Some(tenant) = &filter.tenant {
        args.push(SqlValue::Text(tenant.clone()));
        sql.push_str(&format!(" AND tenant = ?{}", args.len()));
    }
    let limit = if filter.limit == 0 { 100 } else { filter.limit };
    args.push(SqlValue::Integer(i64::from(limit)));
    sql.push_str(&format!(
        " ORDER BY created_at_ms DESC, rowid DESC LIMIT ?{}",
        args.len()
    ));
    let mut stmt = conn.prepare_cached(&sql).map_err(db)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), raw_run)
        .map_err(db)?;
    let mut runs = Vec::new();
    for row in rows {
        runs.push(row.map_err(db)?.into_record()?);
    }
    Ok(runs)
}

fn query_calls(conn: &Connection, sql: &str, args: &[SqlValue]) -> Result<Vec<CallRecord>> {
    let mut stmt = conn.prepare_cached(sql).map_err(db)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), raw_call)
        .map_err(db)?;
    let mut calls = Vec::new();
    for row in rows {
        calls.push(row.map_err(db)?.into_record()?);
    }
    Ok(calls)
}

fn raw_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        id: row.get(0)?,
        agent_id: row.get(1)?,
        session_id: row.get(2)?,
        principal: row.get(3)?,
        tenant: row.get(4)?,
        status: row.get(5)?,
        budgets: row.get(6)?,
        driver: row.get(7)?,
        resumes: row.get(8)?,
        error: row.get(9)?,
        created_at_ms: row.get(10)?,
        updated_at_ms: row.get(11)?,
    })
}

fn raw_call(row: &Row<'_>) -> rusqlite::Result<RawCall> {
    Ok(RawCall {
        call_id: row.get(0)?,
        run_id: row.get(1)?,
        ordinal: row.get(2)?,
        tool_call_id: row.get(3)?,
        tool: row.get(4)?,
        args_hash: row.get(5)?,
        args: row.get(6)?,
        status: row.get(7)?,
        attempts: row.get(8)?,
        result: row.get(9)?,
        error: row.get(10)?,
        duration_ms: row.get(11)?,
        gate: row.get(12)?,
        decision: row.get(13)?,
        answer: row.get(14)?,
        created_at_ms: row.get(15)?,
        updated_at_ms: row.get(16)?,
    })
}

// ---- errors ----

/// A driver failure after the journal is open.
fn db(e: rusqlite::Error) -> JournalError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            JournalError::Backend(format!("the journal is locked by another process: {e}"))
        }
        _ => JournalError::Backend(e.to_string()),
    }
}

/// A driver failure while opening `path`.
fn open_error(path: &Path, e: rusqlite::Error) -> JournalError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => JournalError::NotAJournal {
            path: path.display().to_string(),
            message: "the file is not a SQLite database".into(),
        },
        _ => unavailable(path, e.to_string()),
    }
}

fn unavailable(path: &Path, message: String) -> JournalError {
    JournalError::Unavailable {
        url: format!("sqlite://{}", path.display()),
        message,
    }
}

fn writer_stopped() -> JournalError {
    JournalError::Backend("the journal writer has stopped".into())
}

impl From<crate::sqlite_reads::ReadFailure> for JournalError {
    fn from(f: crate::sqlite_reads::ReadFailure) -> Self {
        use crate::sqlite_reads::ReadFailure;
        match f {
            ReadFailure::Open { path, source } => open_error(&path, source),
            ReadFailure::Closed => JournalError::Backend("the journal is closing".into()),
            ReadFailure::Crashed(m) => JournalError::Backend(format!("a journal read failed: {m}")),
        }
    }
}
