//! The PostgreSQL backend: a writer task with its own connection that groups concurrent
//! writes into one transaction, and a couple of read connections.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use std::future::poll_fn;
use std::pin::pin;
use std::task::Poll;

use futures_util::future::maybe_done;
use serde_json::Value;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Row, Statement};

use crate::common::{
    CALL_COLUMNS, CallChange, MAX_BATCH, Outcome, RUN_COLUMNS, RawCall, RawRun, WriteOp,
    call_conflict, call_id_taken, check_versions, columns, created_run, crumb_record,
    duplicate_error, not_found_call, not_found_run, now_ms, run_conflict, run_exists,
    run_mutable_condition, sql_list,
};
use crate::{
    Answer, CallRecord, CallResult, CallStatus, CrumbRecord, Decision, FORMAT_VERSION, Gate,
    GateFilter, Journal, JournalError, NewCall, NewRun, OpenedCall, Result, RunFilter, RunRecord,
    RunStatus, mask_password,
};

/// The connect timeout used when the URL sets none.
/// Read connections per journal.
const READERS: usize = 2;

/// The schema, one migration per version, each applied in the connecting transaction
/// under an advisory lock. JSON is stored as TEXT: exactly what serde_json wrote, the
/// same in both backends (and `jsonb` refuses `\u0000`, which tool output may contain).
/// Unlike the SQLite schema there are no `CHECK` constraints on statuses: PostgreSQL
/// rebuilds every CHECK expression from its stored text on each INSERT and UPDATE,
/// about a quarter of a journal statement's cost; statuses are only ever written from
/// the Rust enums.
const MIGRATIONS: &[(u32, &str)] = &[(
    1,
    "
    CREATE TABLE runs (
        seq            BIGINT  GENERATED ALWAYS AS IDENTITY,
        id             TEXT    NOT NULL PRIMARY KEY,
        agent_id       TEXT    NOT NULL,
        session_id     TEXT    NOT NULL,
        principal      TEXT,
        tenant         TEXT,
        status         TEXT    NOT NULL,
        budgets        TEXT    NOT NULL,
        driver         TEXT    NOT NULL,
        resumes        BIGINT  NOT NULL DEFAULT 0,
        error          TEXT,
        next_crumb_seq BIGINT  NOT NULL DEFAULT 0,
        created_at_ms  BIGINT  NOT NULL,
        updated_at_ms  BIGINT  NOT NULL
    );
    CREATE INDEX runs_by_created ON runs (created_at_ms DESC, seq DESC);
    CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, seq DESC);
    CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms DESC, seq DESC);
    CREATE INDEX runs_by_tenant ON runs (tenant, created_at_ms DESC, seq DESC);

    CREATE TABLE calls (
        call_id       TEXT    NOT NULL PRIMARY KEY,
        run_id        TEXT    NOT NULL REFERENCES runs (id),
        ordinal       BIGINT  NOT NULL,
        tool_call_id  TEXT    NOT NULL,
        tool          TEXT    NOT NULL,
        args_hash     TEXT    NOT NULL,
        args          TEXT    NOT NULL,
        status        TEXT    NOT NULL,
        attempts      BIGINT  NOT NULL DEFAULT 0,
        result        TEXT,
        error         TEXT,
        duration_ms   DOUBLE PRECISION,
        gate          TEXT,
        decision      TEXT,
        answer        TEXT,
        created_at_ms BIGINT  NOT NULL,
        updated_at_ms BIGINT  NOT NULL,
        UNIQUE (run_id, ordinal)
    );
    CREATE INDEX calls_pending ON calls (run_id)
        WHERE status IN ('awaiting_approval', 'awaiting_answer');

    CREATE TABLE crumbs (
        run_id TEXT   NOT NULL REFERENCES runs (id),
        seq    BIGINT NOT NULL,
        crumb  TEXT   NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    ",
)];

/// The newest schema version this build knows.
fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |(v, _)| *v)
}

/// A journal in a PostgreSQL database (one schema of it).
///
/// The writer task owns one connection. It takes every queued request (up to 1024) and
/// sends the whole batch *pipelined* in one round trip: `BEGIN`, every operation's
/// single prepared statement, `COMMIT`, back to back without waiting for answers. No
/// operation raises an error in the normal course of things (conflicts and missing ids
/// show up as "no row changed": inserts use `ON CONFLICT` and `WHERE EXISTS`,
/// transitions are `UPDATE … WHERE call_id = … AND (status = … OR …)`), so a batch
/// costs about one round trip plus one commit. If a statement does fail, PostgreSQL
/// answers the `COMMIT` by rolling back, and the batch is run again one operation at a
/// time, each inside its own `SAVEPOINT`, so the failure stays with its operation.
/// Conditional statements lock the rows they change and recheck the condition after a
/// concurrent commit, so the rules hold across processes and machines: of two
/// approvers, exactly one wins. Reads use two other connections.
///
/// The journal's tasks run on the tokio runtime that called
/// [`connect`](PostgresJournal::connect). Lost connections are reopened on next use; a
/// batch whose connection dropped during `COMMIT` reports that its outcome is unknown.
pub struct PostgresJournal {
    target: Arc<Target>,
    sender: mpsc::UnboundedSender<Request>,
    readers: Readers,
    applied: Vec<u32>,
}

impl fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("url", &self.target.masked_url)
            .field("schema", &self.target.schema)
            .finish_non_exhaustive()
    }
}

impl PostgresJournal {
    /// Connect to the database a `postgres://` URL names and apply pending migrations.
    ///
    /// The tables go into the first schema of the connection's `search_path`, which the
    /// URL may set: `?options=-csearch_path%3Dmy_schema` (the schema must exist; see
    /// [`connect_with_schema`](Self::connect_with_schema) otherwise). Without
    /// `connect_timeout` in the URL, connecting gives up after 5 seconds. A server that
    /// does not answer is `Unavailable`, with the password masked.
    pub async fn connect(url: &str) -> Result<PostgresJournal> {
        Self::connect_inner(url, None).await
    }

    /// Like [`connect`](Self::connect), with the journal in `schema`: the schema is
    /// created if missing and every connection sets `search_path` to it. Several
    /// journals (e.g. tests) can share one database this way.
    pub async fn connect_with_schema(url: &str, schema: &str) -> Result<PostgresJournal> {
        if schema.is_empty() {
            return Err(JournalError::InvalidUrl {
                url: mask_password(url),
                reason: "the schema name is empty".into(),
            });
        }
        Self::connect_inner(url, Some(schema.to_owned())).await
    }

    async fn connect_inner(url: &str, schema: Option<String>) -> Result<PostgresJournal> {
        let masked_url = mask_password(url);
        let config = crate::pg::config(url, "toolshed-journal").map_err(|reason| {
            JournalError::InvalidUrl {
                url: masked_url.clone(),
                reason,
            }
        })?;
        let target = Arc::new(Target {
            config,
            schema,
            masked_url,
        });

        let mut client = target.connect().await?;
        if let Some(schema) = &target.schema {
            crate::pg::create_schema(&client, schema)
                .await
                .map_err(|m| target.unavailable(m))?;
        }
        let applied = migrate(&mut client, &target).await?;
        if !applied.is_empty() {
            tracing::info!(url = %target.masked_url, schema = ?target.schema, ?applied, "applied journal migrations");
        }
        let statements = WriterStatements::prepare(&client).await.map_err(|e| {
            target.unavailable(format!(
                "cannot prepare statements: {}",
                crate::pg::message(&e)
            ))
        })?;
        let readers = Readers::connect(Arc::clone(&target)).await?;

        let (sender, receiver) = mpsc::unbounded_channel();
        let writer = Writer {
            target: Arc::clone(&target),
            conn: Some(WriterConn { client, statements }),
        };
        tokio::spawn(writer.run(receiver));
        Ok(PostgresJournal {
            target,
            sender,
            readers,
            applied,
        })
    }

    /// The schema versions this connect applied: empty when the database was up to date.
    pub fn applied_migrations(&self) -> &[u32] {
        &self.applied
    }

    async fn write(&self, op: WriteOp) -> Result<Outcome> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Request { op, reply })
            .map_err(|_| writer_stopped())?;
        answer.await.map_err(|_| writer_stopped())?
    }

    /// Queue every operation before awaiting any answer, so the writer runs them in one
    /// pipelined batch, in order. The first error is returned (the others may have been
    /// applied: callers must not depend on the later ones then).
    async fn write_all(&self, ops: Vec<WriteOp>) -> Result<Vec<Outcome>> {
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            let (reply, answer) = oneshot::channel();
            self.sender
                .send(Request { op, reply })
                .map_err(|_| writer_stopped())?;
            answers.push(answer);
        }
        let mut outcomes = Vec::with_capacity(answers.len());
        let mut failure = None;
        for answer in answers {
            match answer.await.map_err(|_| writer_stopped())? {
                Ok(outcome) => outcomes.push(outcome),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(outcomes),
        }
    }

    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let client = self.readers.client().await?;
        client
            .query(sql, params)
            .await
            .map_err(|e| self.target.error(&e))
    }
}

#[async_trait]
impl Journal for PostgresJournal {
    fn describe(&self) -> String {
        match &self.target.schema {
            Some(schema) => format!("{} (schema `{schema}`)", self.target.masked_url),
            None => self.target.masked_url.clone(),
        }
    }

    async fn create_run(&self, run: NewRun) -> Result<RunRecord> {
        let now = now_ms();
        self.write(WriteOp::create_run(&run, now)?)
            .await?
            .into_done()?;
        Ok(created_run(run, now))
    }

    async fn get_run(&self, id: &str) -> Result<RunRecord> {
        let sql = format!(
            "SELECT {} FROM runs WHERE id = $1",
            columns(&RUN_COLUMNS, "")
        );
        match self.query(&sql, &[&id]).await?.first() {
            Some(row) => raw_run(row)?.into_record(),
            None => Err(not_found_run(id)),
        }
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>> {
        let mut sql = format!("SELECT {} FROM runs WHERE TRUE", columns(&RUN_COLUMNS, ""));
        let status = filter.status.map(RunStatus::as_str);
        let limit = i64::from(if filter.limit == 0 { 100 } else { filter.limit });
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::new();
        if let Some(status) = &status {
            params.push(status);
            sql.push_str(&format!(" AND status = ${}", params.len()));
        }
        if let Some(agent_id) = &filter.agent_id {
            params.push(agent_id);
            sql.push_str(&format!(" AND agent_id = ${}", params.len()));
        }
        if let Some(tenant) = &filter.tenant {
            params.push(tenant);
            sql.push_str(&format!(" AND tenant = ${}", params.len()));
        }
        params.push(&limit);
        sql.push_str(&format!(
            " ORDER BY created_at_ms DESC, seq DESC LIMIT ${}",
            params.len()
        ));
        self.query(&sql, &params)
            .await?
            .iter()
            .map(|row| raw_run(row)?.into_record())
            .collect()
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
        let sql = format!(
            "SELECT {} FROM calls WHERE run_id = $1 ORDER BY ordinal",
            columns(&CALL_COLUMNS, "")
        );
        let calls: Vec<CallRecord> = self
            .query(&sql, &[&run_id])
            .await?
            .iter()
            .map(|row| raw_call(row)?.into_record())
            .collect::<Result<_>>()?;
        if calls.is_empty() && !self.run_exists(run_id).await? {
            return Err(not_found_run(run_id));
        }
        Ok(calls)
    }

    async fn get_call(&self, call_id: &str) -> Result<CallRecord> {
        let sql = format!(
            "SELECT {} FROM calls WHERE call_id = $1",
            columns(&CALL_COLUMNS, "")
        );
        match self.query(&sql, &[&call_id]).await?.first() {
            Some(row) => raw_call(row)?.into_record(),
            None => Err(not_found_call(call_id)),
        }
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
        let mut sql = format!(
            "SELECT {} FROM calls c JOIN runs r ON r.id = c.run_id WHERE c.status IN {}",
            columns(&CALL_COLUMNS, "c."),
            sql_list([
                CallStatus::AwaitingApproval.as_str(),
                CallStatus::AwaitingAnswer.as_str()
            ])
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::new();
        if let Some(run_id) = &filter.run_id {
            params.push(run_id);
            sql.push_str(&format!(" AND c.run_id = ${}", params.len()));
        }
        if let Some(tenant) = &filter.tenant {
            params.push(tenant);
            sql.push_str(&format!(" AND r.tenant = ${}", params.len()));
        }
        sql.push_str(" ORDER BY c.created_at_ms, c.run_id, c.ordinal");
        self.query(&sql, &params)
            .await?
            .iter()
            .map(|row| raw_call(row)?.into_record())
            .collect()
    }

    async fn record_run(
        &self,
        run: NewRun,
        calls: Vec<(NewCall, CallResult)>,
        crumbs: Vec<Value>,
        status: RunStatus,
    ) -> Result<RunRecord> {
        // Three round trips instead of one per step, each a pipelined batch of the
        // writer: (1) create the run alone, so an existing id stops everything; (2) begin
        // it and insert its calls, and check each is the new row with our call id (a call
        // id taken elsewhere stops here); (3) only then finish those calls, append the
        // crumbs and set the status, which can touch nothing but this run's own rows.
        // A failure after (1) leaves the run `failed` with the reason, as the trait says.
        let id = run.id.clone();
        self.write(WriteOp::create_run(&run, now_ms())?)
            .await?
            .into_done()?;
        let steps = async {
            let mut opening = vec![WriteOp::begin_drive(&id)];
            for (call, _) in &calls {
                opening.push(WriteOp::OpenCall(WriteOp::call_insert(call)?));
            }
            for (step, outcome) in self.write_all(opening).await?.into_iter().enumerate() {
                if let (Some((call, _)), Outcome::Call(raw)) =
                    (step.checked_sub(1).and_then(|i| calls.get(i)), &outcome)
                    && (raw.call_id != call.call_id || raw.run_id != id)
                {
                    return Err(JournalError::Conflict(format!(
                        "call {} of run `{id}` exists already with another call id",
                        call.ordinal
                    )));
                }
            }
            let mut finishing = Vec::with_capacity(calls.len() + 2);
            for (call, result) in &calls {
                finishing.push(WriteOp::record_finished(&call.call_id, result)?);
            }
            if !crumbs.is_empty() {
                finishing.push(WriteOp::append_crumbs(&id, &crumbs)?);
            }
            finishing.push(WriteOp::set_run_status(&id, status, None));
            self.write_all(finishing)
                .await?
                .pop()
                .ok_or_else(|| JournalError::Backend("no answer for the run's status".into()))?
                .into_run()
        };
        match steps.await {
            Ok(run) => Ok(run),
            Err(e) => {
                let reason = format!("recording the run failed part-way: {e}");
                let _ = self
                    .set_run_status(&id, RunStatus::Failed, Some(reason))
                    .await;
                Err(e)
            }
        }
    }

    async fn append_crumbs(&self, run_id: &str, crumbs: Vec<Value>) -> Result<()> {
        self.write(WriteOp::append_crumbs(run_id, &crumbs)?)
            .await?
            .into_done()
    }

    async fn crumbs_of_run(&self, run_id: &str) -> Result<Vec<CrumbRecord>> {
        let rows = self
            .query(
                "SELECT seq, crumb FROM crumbs WHERE run_id = $1 ORDER BY seq",
                &[&run_id],
            )
            .await?;
        let mut crumbs = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq: i64 = get(row, 0)?;
            let crumb: String = get(row, 1)?;
            crumbs.push(crumb_record(run_id.to_owned(), seq, &crumb)?);
        }
        if crumbs.is_empty() && !self.run_exists(run_id).await? {
            return Err(not_found_run(run_id));
        }
        Ok(crumbs)
    }
}

impl PostgresJournal {
    async fn run_exists(&self, id: &str) -> Result<bool> {
        Ok(!self
            .query("SELECT 1 FROM runs WHERE id = $1", &[&id])
            .await?
            .is_empty())
    }
}

// ---- connections ----

/// Where to connect, for the first connection and every reconnection.
struct Target {
    config: Config,
    schema: Option<String>,
    masked_url: String,
}

impl Target {
    /// Open a connection, spawn its task, set the search path.
    async fn connect(&self) -> Result<Client> {
        crate::pg::connect(&self.config, self.schema.as_deref(), "journal")
            .await
            .map_err(|m| self.unavailable(m))
    }

    fn unavailable(&self, message: String) -> JournalError {
        JournalError::Unavailable {
            url: self.masked_url.clone(),
            message,
        }
    }

    /// A driver failure after connecting.
    fn error(&self, e: &tokio_postgres::Error) -> JournalError {
        if e.is_closed() {
            self.unavailable(format!(
                "the connection was lost: {}",
                crate::pg::message(e)
            ))
        } else {
            JournalError::Backend(crate::pg::message(e))
        }
    }
}

struct Readers {
    target: Arc<Target>,
    slots: Vec<Mutex<Option<Arc<Client>>>>,
    next: AtomicUsize,
}

impl Readers {
    async fn connect(target: Arc<Target>) -> Result<Readers> {
        let mut slots = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            slots.push(Mutex::new(Some(Arc::new(target.connect().await?))));
        }
        Ok(Readers {
            target,
            slots,
            next: AtomicUsize::new(0),
        })
    }

    /// A live read connection (reconnecting a lost one).
    async fn client(&self) -> Result<Arc<Client>> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % READERS;
        let Some(slot) = self.slots.get(i) else {
            return Err(JournalError::Backend("no read connection".into()));
        };
        let mut slot = slot.lock().await;
        if let Some(client) = slot.as_ref()
            && !client.is_closed()
        {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(self.target.connect().await?);
        *slot = Some(Arc::clone(&client));
        Ok(client)
    }
}

/// Apply the migrations newer than the stored version, in one transaction, under an
/// advisory lock so concurrent connects migrate once.
async fn migrate(client: &mut Client, target: &Target) -> Result<Vec<u32>> {
    let err = |e: tokio_postgres::Error| {
        target.unavailable(format!(
            "cannot migrate the journal: {}",
            crate::pg::message(&e)
        ))
    };
    let tx = client.transaction().await.map_err(err)?;
    let schema: Option<String> = tx
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(err)?
        .try_get(0)
        .map_err(err)?;
    let Some(schema) = schema else {
        return Err(target.unavailable(
            "the search_path names no existing schema to create the journal in: create it, or use \
             PostgresJournal::connect_with_schema"
                .into(),
        ));
    };
    let lock_key = format!("toolshed-journal:{schema}");
    tx.query(
        "SELECT pg_advisory_xact_lock(hashtext($1)::bigint)",
        &[&lock_key],
    )
    .await
    .map_err(err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS toolshed_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    )
    .await
    .map_err(err)?;
    let mut version = 0;
    let mut format = FORMAT_VERSION;
    for row in tx
        .query(
            "SELECT key, value FROM toolshed_meta WHERE key IN ('schema_version', 'format_version')",
            &[],
        )
        .await
        .map_err(err)?
    {
        let key: String = row.try_get(0).map_err(err)?;
        let value: String = row.try_get(1).map_err(err)?;
        let parsed = value
            .parse::<u32>()
            .map_err(|_| target.unavailable(format!("toolshed_meta has an invalid {key} `{value}`")))?;
        if key == "schema_version" {
            version = parsed;
        } else {
            format = parsed;
        }
    }
    check_versions(version, format, latest_version()).map_err(|m| target.unavailable(m))?;
    let mut applied = Vec::new();
    for (v, sql) in MIGRATIONS {
        if *v > version {
            tx.batch_execute(sql).await.map_err(|e| {
                target.unavailable(format!("migration {v} failed: {}", crate::pg::message(&e)))
            })?;
            applied.push(*v);
        }
    }
    if !applied.is_empty() {
        tx.execute(
            "INSERT INTO toolshed_meta (key, value) VALUES ('schema_version', $1), ('format_version', $2) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&latest_version().to_string(), &FORMAT_VERSION.to_string()],
        )
        .await
        .map_err(err)?;
    }
    tx.commit().await.map_err(err)?;
    Ok(applied)
}

// ---- the writer ----

struct Request {
    op: WriteOp,
    reply: oneshot::Sender<Result<Outcome>>,
}

struct Writer {
    target: Arc<Target>,
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

impl Writer {
    async fn run(mut self, mut receiver: mpsc::UnboundedReceiver<Request>) {
        let mut batch = Vec::with_capacity(64);
        while receiver.recv_many(&mut batch, MAX_BATCH).await > 0 {
            self.run_batch(&mut batch).await;
        }
    }

    async fn run_batch(&mut self, batch: &mut Vec<Request>) {
        let target = Arc::clone(&self.target);
        let target = target.as_ref();
        let conn = match self.connection().await {
            Ok(conn) => conn,
            Err(e) => {
                for request in batch.drain(..) {
                    let _ = request.reply.send(Err(duplicate_error(&e)));
                }
                return;
            }
        };
        let ops: Vec<&WriteOp> = batch.iter().map(|r| &r.op).collect();
        let rows = match pipelined(conn, target, &ops).await {
            Ok(rows) => Ok(rows.into_iter().map(Ok).collect()),
            Err(BatchFailure::Statement) => one_by_one(conn, target, &ops).await,
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
                    let _ = request.reply.send(Err(duplicate_error(&e)));
                }
                return;
            }
        };
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
                .map_err(|e| self.target.error(&e))?;
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
    // A request goes out when its future is first polled: poll each once, in order,
    // then collect the answers, which arrive in the same order.
    let mut begin = pin!(maybe_done(client.batch_execute("BEGIN")));
    let mut queries: Vec<_> = bound
        .iter()
        .map(|(stmt, params)| Box::pin(maybe_done(client.query(*stmt, params))))
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
    let fatal = |e: tokio_postgres::Error| target.error(&e);
    client.batch_execute("BEGIN").await.map_err(fatal)?;
    let mut results = Vec::with_capacity(ops.len());
    for op in ops {
        client.batch_execute("SAVEPOINT op").await.map_err(fatal)?;
        let (stmt, params) = conn.statements.bind(op);
        match client.query(stmt, &params).await {
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
        target.unavailable(format!(
            "the connection was lost while committing; the changes may or may not be stored: {}",
            crate::pg::message(e)
        ))
    } else {
        JournalError::Backend(format!("the transaction failed: {}", crate::pg::message(e)))
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
        _ => JournalError::Backend(crate::pg::message(e)),
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
        WriteOp::SetRunStatus { id, .. } | WriteOp::BeginDrive { id, .. } => match first {
            Some(row) => Ok(Outcome::Run(raw_run(row)?)),
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
                let call = raw_call(row)?;
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
                .map_err(|e| target.error(&e))?;
            if let Some(row) = existing.first() {
                let call = raw_call(row)?;
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
                .map_err(|e| target.error(&e))?;
            if run.is_empty() {
                return Err(not_found_run(&c.run_id));
            }
            Err(call_id_taken(
                &c.call_id,
                load_call(client, target, &c.call_id).await?.as_ref(),
            ))
        }
        WriteOp::RecordStarted { call_id, .. } => match first {
            Some(row) => Ok(Outcome::Attempts(get(row, 0)?)),
            None => Err(call_conflict(
                CallChange::Start,
                call_id,
                load_call(client, target, call_id).await?.as_ref(),
            )),
        },
        WriteOp::RecordFinished { call_id, .. }
        | WriteOp::RecordGate { call_id, .. }
        | WriteOp::Decide { call_id, .. }
        | WriteOp::Answer { call_id, .. } => match first {
            Some(row) => Ok(Outcome::Call(raw_call(row)?)),
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
        .map_err(|e| target.error(&e))?;
    rows.first()
        .map(|row| raw_call(row)?.into_record())
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
        .map_err(|e| target.error(&e))?;
    rows.first()
        .map(|row| raw_run(row)?.into_record())
        .transpose()
}

/// The writer's statements, prepared once per connection.
struct WriterStatements {
    create_run: Statement,
    set_run_status: Statement,
    begin_drive: Statement,
    open_call: Statement,
    open_and_start: Statement,
    record_started: Statement,
    record_finished: Statement,
    record_gate: Statement,
    decide: Statement,
    answer: Statement,
    append_crumbs: Statement,
}

impl WriterStatements {
    async fn prepare(client: &Client) -> std::result::Result<Self, tokio_postgres::Error> {
        let run_cols = columns(&RUN_COLUMNS, "");
        let call_cols = columns(&CALL_COLUMNS, "");
        let mutable = run_mutable_condition();
        let running = RunStatus::Running.as_str();
        let started = CallStatus::Started.as_str();
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
                    "UPDATE calls SET status = $2, result = $3, error = $4, duration_ms = $5, updated_at_ms = $6 \
                     WHERE call_id = $1 AND {} RETURNING {call_cols}",
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
        })
    }

    /// The statement and parameters of an operation.
    fn bind<'a>(&'a self, op: &'a WriteOp) -> (&'a Statement, Vec<&'a (dyn ToSql + Sync)>) {
        match op {
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
                status,
                result,
                error,
                duration_ms,
                now,
            } => (
                &self.record_finished,
                vec![call_id, status, result, error, duration_ms, now],
            ),
            WriteOp::RecordGate {
                call_id,
                status,
                gate,
                now,
            } => (&self.record_gate, vec![call_id, status, gate, now]),
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
        }
    }
}

// ---- rows and errors ----

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i).map_err(|e| {
        JournalError::Backend(format!(
            "cannot read column {i}: {}",
            crate::pg::message(&e)
        ))
    })
}

fn raw_run(row: &Row) -> Result<RawRun> {
    Ok(RawRun {
        id: get(row, 0)?,
        agent_id: get(row, 1)?,
        session_id: get(row, 2)?,
        principal: get(row, 3)?,
        tenant: get(row, 4)?,
        status: get(row, 5)?,
        budgets: get(row, 6)?,
        driver: get(row, 7)?,
        resumes: get(row, 8)?,
        error: get(row, 9)?,
        created_at_ms: get(row, 10)?,
        updated_at_ms: get(row, 11)?,
    })
}

fn raw_call(row: &Row) -> Result<RawCall> {
    Ok(RawCall {
        call_id: get(row, 0)?,
        run_id: get(row, 1)?,
        ordinal: get(row, 2)?,
        tool_call_id: get(row, 3)?,
        tool: get(row, 4)?,
        args_hash: get(row, 5)?,
        args: get(row, 6)?,
        status: get(row, 7)?,
        attempts: get(row, 8)?,
        result: get(row, 9)?,
        error: get(row, 10)?,
        duration_ms: get(row, 11)?,
        gate: get(row, 12)?,
        decision: get(row, 13)?,
        answer: get(row, 14)?,
        created_at_ms: get(row, 15)?,
        updated_at_ms: get(row, 16)?,
    })
}

fn writer_stopped() -> JournalError {
    JournalError::Backend("the journal writer has stopped".into())
}
