//! The SQLite writer: one thread with the only write connection of the journal's file,
//! grouping concurrent writes into one fsync'd commit (WAL, `synchronous = FULL`). Reads
//! use `toolshed-store`'s pool of read connections beside it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Statement, params};
use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;
use toolshed_store::Readers;
use toolshed_store::sqlite::{BUSY_TIMEOUT, row_values};

use crate::rules::{
    CALL_COLUMNS, CallChange, FinishedRun, Fragments, MAX_BATCH, Outcome, WriteOp, call_conflict,
    call_from_row, call_id_taken, columns, not_found_run, run_conflict, run_exists, run_from_row,
};
use crate::store::{Counters, MIGRATIONS, Writer};
use crate::{CallRecord, CallStatus, JournalError, Result};

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

/// Start the writer thread on `path` (creating and migrating the file) and the read
/// pool beside it. Returns them and the migrations applied.
///
/// A file that is not a SQLite database, or a SQLite database with tables but no
/// `toolshed_meta`, is `NotAJournal` (and is left unchanged); a journal written by a
/// newer toolshed is `Unavailable`.
pub(crate) async fn open(path: &Path) -> Result<(SqliteWriter, Readers, Vec<u32>)> {
    let path = path.to_path_buf();
    let (sender, receiver) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = oneshot::channel();
    let thread_path = path.clone();
    let counters = Arc::new(Counters::default());
    let thread_counters = Arc::clone(&counters);
    let writer = std::thread::Builder::new()
        .name("toolshed-journal-writer".into())
        .spawn(move || writer_thread(&thread_path, receiver, ready_tx, &thread_counters))
        .map_err(|e| {
            JournalError::from(toolshed_store::sqlite::unavailable(
                &path,
                format!("cannot start the writer thread: {e}"),
            ))
        })?;
    let applied = match ready_rx.await {
        Ok(Ok(applied)) => applied,
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(toolshed_store::sqlite::unavailable(
                &path,
                "the writer thread stopped while opening".into(),
            )
            .into());
        }
    };
    let readers = Readers::sqlite(&path, MIGRATIONS.noun, READERS, STATEMENT_CACHE);
    let writer = SqliteWriter {
        path,
        sender: Some(sender),
        thread: Some(writer),
        counters,
    };
    Ok((writer, readers, applied))
}

/// The handle of the writer thread.
///
/// The thread owns the only write connection of this journal. [`Writer::write`] sends a
/// `WriteOp` with a one-shot reply on a channel and waits; the thread takes every
/// queued request (up to `MAX_BATCH`), runs them in one `BEGIN IMMEDIATE`
/// transaction, each inside its own `SAVEPOINT` (a failing operation is rolled back
/// alone and its error goes to its caller), commits once and then replies. No SQLite
/// call ever runs on a tokio worker thread. Other processes may open the same file:
/// `BEGIN IMMEDIATE` and the busy timeout serialize their writers, and every transition
/// is a conditional statement, so the rules hold across processes too.
///
/// Latency of a lone write (one run working sequentially) is most of what a keyed call
/// costs, so the hot path is lean: prepared statements only, a new call inserted with a
/// plain `INSERT` (the conditional upsert only when that hits a constraint), rows read
/// back with a `SELECT` rather than `RETURNING` (several times dearer in SQLite), status
/// conditions written as `=`/`OR` rather than `IN (…)` (SQLite builds a temporary index
/// per execution of an `IN` list). Around the fsync both sides poll briefly instead of
/// parking, see `CALLER_SPIN` and `WRITER_SPIN`: waking a parked thread costs a
/// sizeable part of a commit on small VMs.
pub(crate) struct SqliteWriter {
    path: PathBuf,
    sender: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
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
        let sender = self.sender.as_ref().ok_or_else(writer_stopped)?;
        let (reply, mut answer) = oneshot::channel();
        let pending = self.counters.enter();
        sender
            .send(Request { op, reply })
            .map_err(|_| writer_stopped())?;
        if pending.alone {
            // A lone write (one run working sequentially): poll for the answer instead of
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
}

// ---- the writer ----

struct Request {
    op: WriteOp,
    reply: oneshot::Sender<Result<Outcome>>,
}

fn writer_thread(
    path: &Path,
    receiver: Receiver<Request>,
    ready: oneshot::Sender<Result<Vec<u32>>>,
    counters: &Counters,
) {
    let (conn, applied) = match toolshed_store::sqlite::open_writer(path, &MIGRATIONS) {
        Ok(opened) => opened,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let mut stmts = match WriterStatements::prepare(&conn) {
        Ok(stmts) => stmts,
        Err(e) => {
            let _ = ready.send(Err(toolshed_store::sqlite::unavailable(
                path,
                format!("cannot prepare statements: {e}"),
            )
            .into()));
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
        run_batch(&conn, &mut stmts, &mut batch, counters);
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

/// Run a batch in one transaction, commit once, then reply to each request.
fn run_batch(
    conn: &Connection,
    st: &mut WriterStatements<'_>,
    batch: &mut Vec<Request>,
    counters: &Counters,
) {
    // Counted before BEGIN, which may wait for another process's lock.
    counters.began();
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
            WriteOp::RecordRun(run) => {
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
            op => op,
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
    counters.committed(batch.len());
    for (request, result) in batch.drain(..).zip(results) {
        let _ = request.reply.send(result);
    }
}

/// Why a finished run cannot be inserted: its id or one of its call ids exists.
fn finished_conflict(st: &mut WriterStatements<'_>, f: &FinishedRun) -> Result<()> {
    if st.run_exists.exists([&f.run.id]).map_err(db)? {
        return Err(run_exists(&f.run.id));
    }
    for (call, _) in &f.calls {
        if st.call_exists.exists([&call.call_id]).map_err(db)? {
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
    for (call, done) in &f.calls {
        st.insert_finished_call
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
            let fresh = if start {
                &mut st.insert_started
            } else {
                &mut st.insert_open
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
                // The caller knows the row it asked for.
                Ok(_) => return Ok(Outcome::Inserted),
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
            let existing = first_row(&mut st.call_at, params![c.run_id, c.ordinal])?;
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
            finished,
            now,
        } => {
            let changed = st
                .record_finished
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
        WriteOp::RecordRun(_) => Err(JournalError::Backend(
            "a finished run is recorded by the batch, not as an operation".into(),
        )),
    }
}

/// The run after a run change, or why it did not apply.
fn run_outcome(
    st: &mut WriterStatements<'_>,
    op: &WriteOp,
    id: &str,
    changed: usize,
) -> Result<Outcome> {
    let run = first_row(&mut st.run_by_id, [id])?;
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
    st: &mut WriterStatements<'_>,
    op: &WriteOp,
    call_id: &str,
    changed: usize,
) -> Result<Outcome> {
    let call = first_row(&mut st.call_by_id, [call_id])?;
    match (changed, call, op.call_change()) {
        (1, Some(call), _) => Ok(Outcome::Call(call)),
        (_, call, Some((change, _))) => {
            let call = call.map(|row| call_from_row(&row)).transpose()?;
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
                "UPDATE calls SET status = ?2, result = ?3, error = ?4, duration_ms = ?5, updated_at_ms = ?6, \
                 diagnostics = ?7 \
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
                 attempts, result, error, duration_ms, created_at_ms, updated_at_ms, diagnostics) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?10, ?11, ?12, ?12, ?13)",
            )?,
            run_exists: conn.prepare("SELECT 1 FROM runs WHERE id = ?1")?,
            call_exists: conn.prepare("SELECT 1 FROM calls WHERE call_id = ?1")?,
        })
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
