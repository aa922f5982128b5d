//! The PostgreSQL writer: a task with its own connection that sends each batch of
//! queued writes pipelined in one transaction. Reads use `toolshed-store`'s pipelined
//! read connections beside it.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use async_trait::async_trait;
use futures_util::future::maybe_done;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use toolshed_store::Readers;
use toolshed_store::pg::{Target, row_values};

use crate::rules::{
    CALL_COLUMNS, CallChange, CallInsert, Finished, FinishedRun, Fragments, MAX_BATCH, Outcome,
    RUN_COLUMNS, WriteOp, call_conflict, call_from_row, call_id_taken, columns, not_found_run,
    run_conflict, run_exists, run_from_row,
};
use crate::store::{Counters, MIGRATIONS, Request, Writer};
use crate::{
    CallRecord, CallStatus, JournalError, PruneRule, PrunedBatch, Result, RunRecord, Space,
    SpaceMode,
};

/// Read connections per journal.
const READERS: usize = 2;

/// Connect to the database a `postgres://` URL names (the tables in `schema`, created if
/// missing, or in the first schema of the connection's `search_path`), apply pending
/// migrations, and start the writer task and the read connections.
///
/// Without `connect_timeout` in the URL, connecting gives up after 5 seconds. A server
/// that does not answer is `Unavailable`, with the password masked. The journal's tasks
/// run on the tokio runtime that called this.
pub(crate) async fn connect(
    url: &str,
    schema: Option<&str>,
) -> Result<(PgWriter, Readers, Vec<u32>)> {
    let target = Arc::new(Target::new(url, schema, "toolshed-journal")?);
    let (client, applied) = target.open(&MIGRATIONS).await?;
    let statements = WriterStatements::prepare(&client).await.map_err(|e| {
        target.unavailable(format!(
            "cannot prepare statements: {}",
            toolshed_store::pg::message(&e)
        ))
    })?;
    let readers = toolshed_store::pg::Readers::connect(Arc::clone(&target), READERS).await?;
    let (sender, receiver) = mpsc::unbounded_channel();
    let counters = Arc::new(Counters::default());
    let target_for_prune = Arc::clone(&target);
    let task = WriterTask {
        target,
        counters: Arc::clone(&counters),
        conn: Some(WriterConn { client, statements }),
    };
    tokio::spawn(task.run(receiver));
    Ok((
        PgWriter {
            sender,
            counters,
            prune_target: Arc::clone(&target_for_prune),
            pruner: tokio::sync::OnceCell::new(),
        },
        Readers::Postgres(Arc::new(readers)),
        applied,
    ))
}

/// The handle of the writer task.
///
/// The task owns one connection. It takes every queued request (up to 1024) and sends
/// the whole batch *pipelined* in one round trip: `BEGIN`, every operation's single
/// prepared statement, `COMMIT`, back to back without waiting for answers. No operation
/// raises an error in the normal course of things (conflicts and missing ids show up as
/// "no row changed": inserts use `ON CONFLICT` and `WHERE EXISTS`, transitions are
/// `UPDATE … WHERE call_id = … AND (status = … OR …)`), so a batch costs about one round
/// trip plus one commit; a finished run recorded whole is one statement, so concurrent
/// one-call runs share one transaction per batch. If a statement does fail, PostgreSQL
/// answers the `COMMIT` by rolling back, and the batch is run again one operation at a
/// time, each inside its own `SAVEPOINT`, so the failure stays with its operation.
/// Conditional statements lock the rows they change and recheck the condition after a
/// concurrent commit, so the rules hold across processes and machines: of two
/// approvers, exactly one wins.
///
/// A lost connection is reopened on next use; a batch whose connection dropped during
/// `COMMIT` reports that its outcome is unknown.
pub(crate) struct PgWriter {
    sender: mpsc::UnboundedSender<Request>,
    counters: Arc<Counters>,
    prune_target: Arc<Target>,
    /// The connection prunes run on, opened by the first: a delete of old rows locks
    /// only those rows, so it runs beside the writer task instead of inside its batches.
    pruner: tokio::sync::OnceCell<toolshed_store::pg::Writer>,
}

impl PgWriter {
    async fn pruner(&self) -> Result<&toolshed_store::pg::Writer> {
        self.pruner
            .get_or_try_init(|| async {
                let client = self.prune_target.connect().await?;
                Ok::<_, JournalError>(toolshed_store::pg::Writer::new(
                    Arc::clone(&self.prune_target),
                    client,
                ))
            })
            .await
    }
}

#[async_trait]
impl Writer for PgWriter {
    async fn write(&self, op: WriteOp) -> Result<Outcome> {
        let (reply, answer) = oneshot::channel();
        let _pending = self.counters.enter();
        self.sender
            .send(Request { op, reply })
            .map_err(|_| writer_stopped())?;
        answer.await.map_err(|_| writer_stopped())?
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    async fn prune_batch(&self, rule: &PruneRule, limit: u32) -> Result<PrunedBatch> {
        let rule = rule.clone();
        let pruner = self.pruner().await?;
        let started = std::time::Instant::now();
        let (pruned, released_blobs) = pruner
            .write(move |db| {
                Box::pin(async move { crate::retention::prune_batch(db, &rule, limit).await })
            })
            .await?;
        Ok(PrunedBatch {
            pruned,
            released_blobs,
            held: started.elapsed(),
        })
    }

    async fn reclaim_space(&self, _pages: u32) -> Result<Space> {
        Ok(managed_space())
    }

    async fn vacuum(&self) -> Result<Space> {
        Ok(managed_space())
    }
}

/// PostgreSQL's space: its autovacuum makes deleted rows reusable; files never shrink
/// without `VACUUM FULL`, which locks the tables, so toolshed does not run it.
fn managed_space() -> Space {
    Space {
        mode: SpaceMode::Managed,
        size_bytes: 0,
        free_bytes: 0,
    }
}

// ---- the writer ----

struct WriterTask {
    target: Arc<Target>,
    counters: Arc<Counters>,
    conn: Option<WriterConn>,
}

struct WriterConn {
    client: Client,
    statements: WriterStatements,
}

/// Why a pipelined batch could not be committed.
enum BatchFailure {
    /// A statement failed: the transaction was rolled back, run the batch one by one.
    Statement,
    /// The connection or the commit failed: every operation gets this error.
    Fatal(JournalError),
}

impl WriterTask {
    async fn run(mut self, mut receiver: mpsc::UnboundedReceiver<Request>) {
        let mut batch = Vec::with_capacity(64);
        while receiver.recv_many(&mut batch, MAX_BATCH).await > 0 {
            self.run_batch(&mut batch).await;
        }
    }

    async fn run_batch(&mut self, batch: &mut Vec<Request>) {
        let target = Arc::clone(&self.target);
        let target = target.as_ref();
        let counters = Arc::clone(&self.counters);
        let conn = match self.connection().await {
            Ok(conn) => conn,
            Err(e) => {
                for request in batch.drain(..) {
                    let _ = request.reply.send(Err(e.clone()));
                }
                return;
            }
        };
        let ops: Vec<&WriteOp> = batch.iter().map(|r| &r.op).collect();
        counters.began();
        let rows = match pipelined(conn, target, &ops).await {
            Ok(rows) => Ok(rows.into_iter().map(Ok).collect()),
            Err(BatchFailure::Statement) => {
                // The pipelined transaction was rolled back; a second one runs the
                // operations one by one.
                counters.began();
                one_by_one(conn, target, &ops).await
            }
            Err(BatchFailure::Fatal(e)) => Err(e),
        };
        let rows: Vec<Result<Vec<Row>>> = match rows {
            Ok(rows) => rows,
            Err(e) => {
                // Never leave a transaction open for the next batch.
                if !conn.client.is_closed() {
                    let _ = conn.client.batch_execute("ROLLBACK").await;
                }
                for request in batch.drain(..) {
                    let _ = request.reply.send(Err(e.clone()));
                }
                return;
            }
        };
        counters.committed(batch.len());
        // Committed. Turn rows into outcomes; an operation that changed nothing reads
        // the row to say why.
        let mut outcomes = Vec::with_capacity(batch.len());
        for (op, rows) in ops.iter().zip(rows) {
            outcomes.push(match rows {
                Ok(rows) => finish(conn, target, op, rows).await,
                Err(e) => Err(e),
            });
        }
        for (request, outcome) in batch.drain(..).zip(outcomes) {
            let _ = request.reply.send(outcome);
        }
    }

    /// The live writer connection, reconnecting a lost one.
    async fn connection(&mut self) -> Result<&WriterConn> {
        if self.conn.as_ref().is_none_or(|c| c.client.is_closed()) {
            self.conn = None;
            let client = self.target.connect().await?;
            let statements = WriterStatements::prepare(&client)
                .await
                .map_err(|e| error(&self.target, &e))?;
            self.conn = Some(WriterConn { client, statements });
        }
        self.conn
            .as_ref()
            .ok_or_else(|| JournalError::Backend("no writer connection".into()))
    }
}

/// The fast path: `BEGIN`, every statement and `COMMIT` sent back to back in one
/// round trip. If a statement fails, PostgreSQL answers the `COMMIT` by rolling the
/// transaction back, and the batch is run again by [`one_by_one`].
async fn pipelined(
    conn: &WriterConn,
    target: &Target,
    ops: &[&WriteOp],
) -> std::result::Result<Vec<Vec<Row>>, BatchFailure> {
    let client = &conn.client;
    // COMMIT is sent with the rest: a connection lost now leaves the outcome unknown.
    let fatal = |e: tokio_postgres::Error| BatchFailure::Fatal(commit_error(target, &e));
    let bound: Vec<_> = ops.iter().map(|op| conn.statements.bind(op)).collect();
    let params: Vec<_> = bound.iter().map(|(_, params)| params.refs()).collect();
    // A request goes out when its future is first polled: poll each once, in order,
    // then collect the answers, which arrive in the same order.
    let mut begin = pin!(maybe_done(client.batch_execute("BEGIN")));
    let mut queries: Vec<_> = bound
        .iter()
        .zip(&params)
        .map(|((stmt, _), params)| Box::pin(maybe_done(client.query(*stmt, params))))
        .collect();
    let mut commit = pin!(maybe_done(client.batch_execute("COMMIT")));
    poll_fn(|cx| {
        let _ = begin.as_mut().poll(cx);
        for query in &mut queries {
            let _ = query.as_mut().poll(cx);
        }
        let _ = commit.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;

    (&mut begin).await;
    match begin.as_mut().take_output() {
        Some(Ok(())) => {}
        Some(Err(e)) => return Err(fatal(e)),
        None => {
            return Err(BatchFailure::Fatal(JournalError::Backend(
                "BEGIN gave no answer".into(),
            )));
        }
    }
    let mut rows = Vec::with_capacity(queries.len());
    let mut failed = false;
    for query in &mut queries {
        query.as_mut().await;
        match query.as_mut().take_output() {
            Some(Ok(r)) => rows.push(r),
            Some(Err(e)) if e.is_closed() => return Err(fatal(e)),
            Some(Err(_)) => failed = true,
            None => {
                return Err(BatchFailure::Fatal(JournalError::Backend(
                    "a statement gave no answer".into(),
                )));
            }
        }
    }
    (&mut commit).await;
    let Some(committed) = commit.as_mut().take_output() else {
        return Err(BatchFailure::Fatal(JournalError::Backend(
            "COMMIT gave no answer; the changes may or may not be stored".into(),
        )));
    };
    if failed {
        // The transaction was aborted and the COMMIT rolled it back.
        return match committed {
            Err(e) if e.is_closed() => Err(fatal(e)),
            _ => Err(BatchFailure::Statement),
        };
    }
    committed.map_err(|e| BatchFailure::Fatal(commit_error(target, &e)))?;
    Ok(rows)
}

/// The slow path: one operation at a time, each in a savepoint.
async fn one_by_one(
    conn: &WriterConn,
    target: &Target,
    ops: &[&WriteOp],
) -> Result<Vec<Result<Vec<Row>>>> {
    let client = &conn.client;
    let fatal = |e: tokio_postgres::Error| error(target, &e);
    client.batch_execute("BEGIN").await.map_err(fatal)?;
    let mut results = Vec::with_capacity(ops.len());
    for op in ops {
        client.batch_execute("SAVEPOINT op").await.map_err(fatal)?;
        let (stmt, params) = conn.statements.bind(op);
        match client.query(stmt, &params.refs()).await {
            Ok(rows) => {
                client
                    .batch_execute("RELEASE SAVEPOINT op")
                    .await
                    .map_err(fatal)?;
                results.push(Ok(rows));
            }
            Err(e) if e.is_closed() => return Err(fatal(e)),
            Err(e) => {
                client
                    .batch_execute("ROLLBACK TO SAVEPOINT op; RELEASE SAVEPOINT op")
                    .await
                    .map_err(fatal)?;
                results.push(Err(op_error(client, target, op, &e).await));
            }
        }
    }
    commit(conn, target).await?;
    Ok(results)
}

async fn commit(conn: &WriterConn, target: &Target) -> Result<()> {
    conn.client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| commit_error(target, &e))
}

/// A failure once `COMMIT` may have been sent.
fn commit_error(target: &Target, e: &tokio_postgres::Error) -> JournalError {
    if e.is_closed() {
        target
            .unavailable(format!(
                "the connection was lost while committing; the changes may or may not be stored: {}",
                toolshed_store::pg::message(e)
            ))
            .into()
    } else {
        JournalError::Backend(format!(
            "the transaction failed: {}",
            toolshed_store::pg::message(e)
        ))
    }
}

/// An operation's own statement failed (the slow path): map it to an error kind.
async fn op_error(
    client: &Client,
    target: &Target,
    op: &WriteOp,
    e: &tokio_postgres::Error,
) -> JournalError {
    match (e.code(), op) {
        (Some(code), WriteOp::CreateRun(r)) if *code == SqlState::UNIQUE_VIOLATION => {
            run_exists(&r.id)
        }
        (Some(code), WriteOp::OpenCall(c) | WriteOp::OpenAndStart(c))
            if *code == SqlState::UNIQUE_VIOLATION =>
        {
            match load_call(client, target, &c.call_id).await {
                Ok(other) => call_id_taken(&c.call_id, other.as_ref()),
                Err(e) => e,
            }
        }
        (Some(code), WriteOp::OpenCall(c) | WriteOp::OpenAndStart(c))
            if *code == SqlState::FOREIGN_KEY_VIOLATION =>
        {
            not_found_run(&c.run_id)
        }
        (Some(code), WriteOp::RecordRun(f)) if *code == SqlState::UNIQUE_VIOLATION => {
            let constraint = e.as_db_error().and_then(|db| db.constraint());
            if constraint == Some("runs_pkey") {
                return run_exists(&f.run.id);
            }
            // One of its call ids is taken: say which, and by what.
            for (call, _) in &f.calls {
                match load_call(client, target, &call.call_id).await {
                    Ok(Some(other)) => return call_id_taken(&call.call_id, Some(&other)),
                    Ok(None) => {}
                    Err(e) => return e,
                }
            }
            JournalError::Conflict(format!(
                "run `{}` or one of its calls already exists",
                f.run.id
            ))
        }
        _ => JournalError::Backend(toolshed_store::pg::message(e)),
    }
}

/// Turn an operation's rows into its outcome.
async fn finish(
    conn: &WriterConn,
    target: &Target,
    op: &WriteOp,
    rows: Vec<Row>,
) -> Result<Outcome> {
    let client = &conn.client;
    let first = rows.first();
    match op {
        WriteOp::CreateRun(r) => match first {
            Some(_) => Ok(Outcome::Done),
            None => Err(run_exists(&r.id)),
        },
        WriteOp::SetRunStatus { id, .. }
        | WriteOp::SetRunDriver { id, .. }
        | WriteOp::BeginDrive { id, .. } => match first {
            Some(row) => Ok(Outcome::Run(row_values(row)?)),
            None => {
                let change = op.run_change().map(|(c, _)| c);
                let run = load_run(client, target, id).await?;
                match change {
                    Some(change) => Err(run_conflict(change, id, run.as_ref())),
                    None => Err(JournalError::Backend("not a run change".into())),
                }
            }
        },
        WriteOp::OpenCall(c) | WriteOp::OpenAndStart(c) => {
            let start = matches!(op, WriteOp::OpenAndStart(_));
            if let Some(row) = first {
                let call = row_values(row)?;
                return Ok(if start {
                    Outcome::Opened {
                        call,
                        started: true,
                    }
                } else {
                    Outcome::Call(call)
                });
            }
            // Not inserted: the key exists (return it unchanged), the run does not, or
            // the call id is used at another key.
            let sql = format!(
                "SELECT {} FROM calls WHERE run_id = $1 AND ordinal = $2",
                columns(&CALL_COLUMNS, "")
            );
            let existing = client
                .query(&sql, &[&c.run_id, &c.ordinal])
                .await
                .map_err(|e| error(target, &e))?;
            if let Some(row) = existing.first() {
                let call = row_values(row)?;
                return Ok(if start {
                    Outcome::Opened {
                        call,
                        started: false,
                    }
                } else {
                    Outcome::Call(call)
                });
            }
            let run = client
                .query("SELECT 1 FROM runs WHERE id = $1", &[&c.run_id])
                .await
                .map_err(|e| error(target, &e))?;
            if run.is_empty() {
                return Err(not_found_run(&c.run_id));
            }
            Err(call_id_taken(
                &c.call_id,
                load_call(client, target, &c.call_id).await?.as_ref(),
            ))
        }
        WriteOp::RecordStarted { call_id, .. } => match first {
            Some(row) => Ok(Outcome::Attempts(row_values(row)?.get(0)?)),
            None => Err(call_conflict(
                CallChange::Start,
                call_id,
                load_call(client, target, call_id).await?.as_ref(),
            )),
        },
        // Nothing to read back when it took (the caller has the result).
        WriteOp::RecordFinished { .. } if first.is_some() => Ok(Outcome::Done),
        WriteOp::RecordFinished { call_id, .. }
        | WriteOp::RecordGate { call_id, .. }
        | WriteOp::Decide { call_id, .. }
        | WriteOp::Answer { call_id, .. } => match first {
            Some(row) => Ok(Outcome::Call(row_values(row)?)),
            None => {
                let call = load_call(client, target, call_id).await?;
                match op.call_change() {
                    Some((change, _)) => Err(call_conflict(change, call_id, call.as_ref())),
                    None => Err(JournalError::Backend("not a call change".into())),
                }
            }
        },
        WriteOp::AppendCrumbs { run_id, .. } => match first {
            Some(_) => Ok(Outcome::Done),
            None => Err(not_found_run(run_id)),
        },
        WriteOp::RecordRun(f) => match first {
            Some(_) => Ok(Outcome::Done),
            None => Err(run_exists(&f.run.id)),
        },
    }
}

async fn load_call(client: &Client, target: &Target, call_id: &str) -> Result<Option<CallRecord>> {
    let sql = format!(
        "SELECT {} FROM calls WHERE call_id = $1",
        columns(&CALL_COLUMNS, "")
    );
    let rows = client
        .query(&sql, &[&call_id])
        .await
        .map_err(|e| error(target, &e))?;
    rows.first()
        .map(|row| call_from_row(&row_values(row)?))
        .transpose()
}

async fn load_run(client: &Client, target: &Target, id: &str) -> Result<Option<RunRecord>> {
    let sql = format!(
        "SELECT {} FROM runs WHERE id = $1",
        columns(&RUN_COLUMNS, "")
    );
    let rows = client
        .query(&sql, &[&id])
        .await
        .map_err(|e| error(target, &e))?;
    rows.first()
        .map(|row| run_from_row(&row_values(row)?))
        .transpose()
}

/// The writer's statements, prepared once per connection.
struct WriterStatements {
    create_run: Statement,
    set_run_status: Statement,
    set_run_driver: Statement,
    begin_drive: Statement,
    open_call: Statement,
    open_and_start: Statement,
    record_started: Statement,
    record_finished: Statement,
    record_gate: Statement,
    regate: Statement,
    decide: Statement,
    answer: Statement,
    append_crumbs: Statement,
    record_run: Statement,
}

/// An operation's parameters: borrowed from the operation, or built for it (the column
/// arrays of a finished run).
enum Params<'a> {
    Borrowed(Vec<&'a (dyn ToSql + Sync)>),
    Owned(Vec<Box<dyn ToSql + Sync + Send>>),
}

impl Params<'_> {
    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        match self {
            Params::Borrowed(refs) => refs.clone(),
            Params::Owned(values) => values
                .iter()
                .map(|v| v.as_ref() as &(dyn ToSql + Sync))
                .collect(),
        }
    }
}

impl WriterStatements {
    async fn prepare(client: &Client) -> std::result::Result<Self, tokio_postgres::Error> {
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
                 SELECT $1::text, $2::text, $3::bigint, $4::text, $5::text, $6::text, $7::text, '{status}', \
                 {attempts}, $8::bigint, $8::bigint \
                 WHERE EXISTS (SELECT 1 FROM runs WHERE id = $2::text)"
            )
        };
        Ok(WriterStatements {
            create_run: client
                .prepare(
                    "INSERT INTO runs (id, agent_id, session_id, principal, tenant, status, budgets, driver, \
                     resumes, error, created_at_ms, updated_at_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, NULL, $9, $9) \
                     ON CONFLICT (id) DO NOTHING RETURNING id",
                )
                .await?,
            set_run_status: client
                .prepare(&format!(
                    "UPDATE runs SET status = $2, error = $3, updated_at_ms = $4 \
                     WHERE id = $1 AND {mutable} RETURNING {run_cols}"
                ))
                .await?,
            set_run_driver: client
                .prepare(&format!(
                    "UPDATE runs SET driver = $2, updated_at_ms = $3 \
                     WHERE id = $1 AND {mutable} RETURNING {run_cols}"
                ))
                .await?,
            begin_drive: client
                .prepare(&format!(
                    "UPDATE runs SET resumes = resumes + (CASE WHEN status = '{running}' THEN 1 ELSE 0 END), \
                     status = '{running}', updated_at_ms = $2 \
                     WHERE id = $1 AND {mutable} RETURNING {run_cols}"
                ))
                .await?,
            open_call: client
                .prepare(&format!(
                    "{} ON CONFLICT DO NOTHING RETURNING {call_cols}",
                    insert_call(CallStatus::Open.as_str(), 0)
                ))
                .await?,
            open_and_start: client
                .prepare(&format!(
                    "{} ON CONFLICT (run_id, ordinal) DO UPDATE SET status = '{started}', \
                     attempts = calls.attempts + 1, updated_at_ms = EXCLUDED.updated_at_ms \
                     WHERE calls.tool = EXCLUDED.tool AND calls.args_hash = EXCLUDED.args_hash \
                     AND {} RETURNING {call_cols}",
                    insert_call(started, 1),
                    CallChange::Start.sql_condition("calls")
                ))
                .await?,
            record_started: client
                .prepare(&format!(
                    "UPDATE calls SET status = '{started}', attempts = attempts + 1, updated_at_ms = $2 \
                     WHERE call_id = $1 AND {} RETURNING attempts",
                    CallChange::Start.sql_condition("")
                ))
                .await?,
            record_finished: client
                .prepare(&format!(
                    "UPDATE calls SET status = $2, result = $3, error = $4, duration_ms = $5, updated_at_ms = $6, \
                     diagnostics = $7 \
                     WHERE call_id = $1 AND {} RETURNING 1",
                    CallChange::Finish.sql_condition("")
                ))
                .await?,
            record_gate: client
                .prepare(&format!(
                    "UPDATE calls SET status = $2, gate = $3, updated_at_ms = $4 \
                     WHERE call_id = $1 AND {} RETURNING {call_cols}",
                    CallChange::Gate.sql_condition("")
                ))
                .await?,
            regate: client
                .prepare(&format!(
                    "UPDATE calls SET status = $2, gate = $3, decision = NULL, updated_at_ms = $4 \
                     WHERE call_id = $1 AND {} RETURNING {call_cols}",
                    CallChange::Regate.sql_condition("")
                ))
                .await?,
            decide: client
                .prepare(&format!(
                    "UPDATE calls SET status = $2, decision = $3, error = $4, updated_at_ms = $5 \
                     WHERE call_id = $1 AND {} RETURNING {call_cols}",
                    CallChange::Decide.sql_condition("")
                ))
                .await?,
            answer: client
                .prepare(&format!(
                    "UPDATE calls SET status = '{}', result = $2, answer = $3, updated_at_ms = $4 \
                     WHERE call_id = $1 AND {} RETURNING {call_cols}",
                    CallStatus::Completed.as_str(),
                    CallChange::Answer.sql_condition("")
                ))
                .await?,
            // The counter row lock orders concurrent appends to one run, across
            // processes too; the crumbs get consecutive numbers from the old count.
            append_crumbs: client
                .prepare(
                    "WITH counter AS ( \
                         UPDATE runs SET next_crumb_seq = next_crumb_seq + cardinality($2::text[]) \
                         WHERE id = $1 RETURNING next_crumb_seq - cardinality($2::text[]) AS base \
                     ), inserted AS ( \
                         INSERT INTO crumbs (run_id, seq, crumb) \
                         SELECT $1, counter.base + t.ord - 1, t.crumb \
                         FROM counter, unnest($2::text[]) WITH ORDINALITY AS t (crumb, ord) \
                     ) \
                     SELECT base FROM counter",
                )
                .await?,
            record_run: client.prepare(RECORD_RUN).await?,
        })
    }

    /// The statement and parameters of an operation.
    fn bind<'a>(&'a self, op: &'a WriteOp) -> (&'a Statement, Params<'a>) {
        let (stmt, params): (_, Vec<&'a (dyn ToSql + Sync)>) = match op {
            WriteOp::CreateRun(r) => (
                &self.create_run,
                vec![
                    &r.id,
                    &r.agent_id,
                    &r.session_id,
                    &r.principal,
                    &r.tenant,
                    &r.status,
                    &r.budgets,
                    &r.driver,
                    &r.now,
                ],
            ),
            WriteOp::SetRunStatus {
                id,
                status,
                error,
                now,
            } => (&self.set_run_status, vec![id, status, error, now]),
            WriteOp::SetRunDriver { id, driver, now } => {
                (&self.set_run_driver, vec![id, driver, now])
            }
            WriteOp::BeginDrive { id, now } => (&self.begin_drive, vec![id, now]),
            WriteOp::OpenCall(c) | WriteOp::OpenAndStart(c) => (
                if matches!(op, WriteOp::OpenAndStart(_)) {
                    &self.open_and_start
                } else {
                    &self.open_call
                },
                vec![
                    &c.call_id,
                    &c.run_id,
                    &c.ordinal,
                    &c.tool_call_id,
                    &c.tool,
                    &c.args_hash,
                    &c.args,
                    &c.now,
                ],
            ),
            WriteOp::RecordStarted { call_id, now } => (&self.record_started, vec![call_id, now]),
            WriteOp::RecordFinished {
                call_id,
                finished: f,
                now,
            } => (
                &self.record_finished,
                vec![
                    call_id,
                    &f.status,
                    &f.result,
                    &f.error,
                    &f.duration_ms,
                    now,
                    &f.diagnostics,
                ],
            ),
            WriteOp::RecordGate {
                change,
                call_id,
                status,
                gate,
                now,
            } => (
                match change {
                    CallChange::Regate => &self.regate,
                    _ => &self.record_gate,
                },
                vec![call_id, status, gate, now],
            ),
            WriteOp::Decide {
                call_id,
                status,
                decision,
                error,
                now,
            } => (&self.decide, vec![call_id, status, decision, error, now]),
            WriteOp::Answer {
                call_id,
                result,
                answer,
                now,
            } => (&self.answer, vec![call_id, result, answer, now]),
            WriteOp::AppendCrumbs { run_id, crumbs } => (&self.append_crumbs, vec![run_id, crumbs]),
            WriteOp::RecordRun(f) => return (&self.record_run, finished_run_params(f)),
        };
        (stmt, Params::Borrowed(params))
    }
}

/// The parameters of [`RECORD_RUN`]: the run's columns, then one array per call column
/// and the crumbs.
fn finished_run_params(f: &FinishedRun) -> Params<'static> {
    let r = &f.run;
    let calls = &f.calls;
    fn column<T: Clone>(
        items: &[(CallInsert, Finished)],
        get: impl Fn(&(CallInsert, Finished)) -> T,
    ) -> Vec<T> {
        items.iter().map(get).collect()
    }
    Params::Owned(vec![
        Box::new(r.id.clone()),
        Box::new(r.agent_id.clone()),
        Box::new(r.session_id.clone()),
        Box::new(r.principal.clone()),
        Box::new(r.tenant.clone()),
        Box::new(r.status),
        Box::new(r.budgets.clone()),
        Box::new(r.driver.clone()),
        Box::new(r.now),
        Box::new(column(calls, |(c, _)| c.call_id.clone())),
        Box::new(column(calls, |(c, _)| c.ordinal)),
        Box::new(column(calls, |(c, _)| c.tool_call_id.clone())),
        Box::new(column(calls, |(c, _)| c.tool.clone())),
        Box::new(column(calls, |(c, _)| c.args_hash.clone())),
        Box::new(column(calls, |(c, _)| c.args.clone())),
        Box::new(column(calls, |(_, d)| d.status)),
        Box::new(column(calls, |(_, d)| d.result.clone())),
        Box::new(column(calls, |(_, d)| d.error.clone())),
        Box::new(column(calls, |(_, d)| d.duration_ms)),
        Box::new(f.crumbs.clone()),
        Box::new(column(calls, |(_, d)| d.diagnostics.clone())),
    ])
}

/// A finished run recorded whole, in one statement: the run (driven once, in its final
/// status, its crumb counter set), its calls and its crumbs. The inserts of data-modifying
/// `WITH` clauses all run, and the calls' foreign key is checked at the end of the
/// statement, when the run is in. An existing run or call id fails the statement (the
/// batch then runs one by one and this operation gets the conflict).
const RECORD_RUN: &str = "WITH run AS ( \
         INSERT INTO runs (id, agent_id, session_id, principal, tenant, status, budgets, driver, \
             resumes, next_crumb_seq, created_at_ms, updated_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, cardinality($20::text[]), $9, $9) \
         RETURNING id \
     ), call_rows AS ( \
         INSERT INTO calls (call_id, run_id, ordinal, tool_call_id, tool, args_hash, args, \
             status, attempts, result, error, duration_ms, diagnostics, created_at_ms, \
             updated_at_ms) \
         SELECT c.call_id, run.id, c.ordinal, c.tool_call_id, c.tool, c.args_hash, c.args, \
             c.status, 0, c.result, c.error, c.duration_ms, c.diagnostics, $9, $9 \
         FROM run, unnest($10::text[], $11::bigint[], $12::text[], $13::text[], $14::text[], \
             $15::text[], $16::text[], $17::text[], $18::text[], $19::float8[], $21::text[]) \
             AS c (call_id, ordinal, tool_call_id, tool, args_hash, args, status, result, error, \
                   duration_ms, diagnostics) \
         RETURNING 1 \
     ), crumb_rows AS ( \
         INSERT INTO crumbs (run_id, seq, crumb) \
         SELECT run.id, t.ord - 1, t.crumb \
         FROM run, unnest($20::text[]) WITH ORDINALITY AS t (crumb, ord) \
         RETURNING 1 \
     ) \
     SELECT id FROM run";

// ---- errors ----

/// A driver failure on the writer's connection.
fn error(target: &Target, e: &tokio_postgres::Error) -> JournalError {
    if e.is_closed() {
        target
            .unavailable(format!(
                "the connection was lost: {}",
                toolshed_store::pg::message(e)
            ))
            .into()
    } else {
        JournalError::Backend(toolshed_store::pg::message(e))
    }
}

fn writer_stopped() -> JournalError {
    JournalError::Backend("the journal writer has stopped".into())
}
