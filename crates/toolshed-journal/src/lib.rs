//! # toolshed-journal
//!
//! The durable event log of runs, calls, approvals, human answers and crumbs, behind one
//! trait ([`Journal`]) with one implementation ([`SqlJournal`]) on two databases that
//! pass the same behavioural test suite: SQLite (the embedded default: one file, WAL,
//! grouped fsync'd commits) and PostgreSQL. The state rules, the reads and the decoding
//! of rows are written once (`rules.rs`, `reads.rs`); each database only has its
//! group-commit writer and its statements (`sqlite.rs`, `postgres.rs`). Connections,
//! migrations and reader pools come from `toolshed-store`.
//!
//! Open one with [`open`] and a URL: `sqlite://PATH` or `postgres://…`.
//!
//! **Durability contract:** every write method returns only after its change is
//! committed durably (SQLite: WAL with `synchronous=FULL`; PostgreSQL: a committed
//! transaction). Concurrent writers are grouped into one commit, so many runs share the
//! cost of one flush.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), toolshed_journal::JournalError> {
//! use toolshed_journal::{Budgets, NewRun, RunStatus};
//!
//! let dir = tempfile::tempdir().map_err(|e| toolshed_journal::JournalError::Backend(e.to_string()))?;
//! let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
//! let journal = toolshed_journal::open(&url).await?;
//! let run = journal
//!     .create_run(NewRun {
//!         id: "run-1".into(),
//!         agent_id: "support-bot".into(),
//!         session_id: "session-1".into(),
//!         principal: None,
//!         budgets: Budgets::default(),
//!         driver: serde_json::json!({"kind": "library"}),
//!     })
//!     .await?;
//! assert_eq!(run.status, RunStatus::Running);
//! assert_eq!(journal.get_run("run-1").await?, run);
//! # Ok(())
//! # }
//! ```
//!
//! # Group commit
//!
//! Each backend owns one writer (an OS thread for SQLite, a task for PostgreSQL) with its
//! own connection. Write methods turn their change into an operation, send it to the
//! writer on a channel with a one-shot reply, and wait. The writer takes everything
//! queued (up to 1024 operations), runs it in one transaction, commits once (one flush
//! for all of them) and only then replies to each caller with its own result: an
//! operation that fails (a conflict, a missing id) gets its own error and does not undo
//! the others. Every state transition is one conditional statement
//! (`UPDATE … WHERE id = … AND (status = … OR …)`), so it is race-free across processes
//! sharing the database too; when it changes nothing, the writer reads the row to say
//! why. Reads use other connections and run beside the writer.
//!
//! A keyed call needs two durable writes: [`Journal::open_and_start`] before its handler
//! runs, [`Journal::record_finished`] after. Under load many runs share each commit;
//! alone, a write costs about one flush (see `benches/journal.rs`).

use std::fmt;

use async_trait::async_trait;
use serde_json::Value;
use toolshed_store::{DbError, DbErrorKind, Location, OpenError};

mod attachments;
mod postgres;
pub mod process_runs;
mod reads;
mod records;
mod retention;
mod rules;
mod sqlite;
mod store;

pub use attachments::{AttachmentRecord, Attachments, NewAttachment, NewPage, NewPageContent};
pub use records::*;
pub use retention::{
    PrunableStatus, PruneOptions, PruneReport, PruneRule, Pruned, PrunedBatch, Space, SpaceMode,
    prune,
};
pub use store::SqlJournal;

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of [`JournalError`], the same for both databases.
    #[non_exhaustive]
    pub enum JournalCode {
        /// The database URL is not `sqlite://PATH` or `postgres://…`.
        InvalidDatabaseUrl,
        /// The database cannot be opened or reached, or was written by a newer toolshed.
        JournalUnavailable,
        /// The file is not a toolshed journal (someone else's database, or not one at all).
        NotAJournal,
        /// No such run or call.
        NotFound,
        /// The change conflicts with the record's state.
        Conflict,
        /// Any other failure of the database.
        JournalError,
    }
}

/// What can go wrong talking to the journal. Each kind maps to one stable code, the
/// same for both backends.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The URL is not `sqlite://PATH` or `postgres://…`.
    #[error("invalid database URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given (passwords are masked).
        url: String,
        /// Why.
        reason: String,
    },
    /// The database cannot be opened or reached.
    #[error("cannot open the journal at `{url}`: {message}")]
    Unavailable {
        /// The URL (passwords are masked).
        url: String,
        /// What the driver said.
        message: String,
    },
    /// The file exists but is not a toolshed journal (or not a database at all).
    #[error("`{path}` is not a toolshed journal: {message}")]
    NotAJournal {
        /// The file.
        path: String,
        /// What the driver said.
        message: String,
    },
    /// A run, call or other record does not exist.
    #[error("{what} `{id}` not found")]
    NotFound {
        /// `run`, `call`, …
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// The change conflicts with the record's state (approving twice, answering a call
    /// that is not a human tool, completing a finished call…).
    #[error("{0}")]
    Conflict(String),
    /// Any other database failure.
    #[error("journal failure: {0}")]
    Backend(String),
}

impl JournalError {
    /// The stable code.
    pub fn code(&self) -> JournalCode {
        match self {
            JournalError::InvalidUrl { .. } => JournalCode::InvalidDatabaseUrl,
            JournalError::Unavailable { .. } => JournalCode::JournalUnavailable,
            JournalError::NotAJournal { .. } => JournalCode::NotAJournal,
            JournalError::NotFound { .. } => JournalCode::NotFound,
            JournalError::Conflict(_) => JournalCode::Conflict,
            JournalError::Backend(_) => JournalCode::JournalError,
        }
    }
}

impl From<OpenError> for JournalError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::InvalidUrl { url, reason } => JournalError::InvalidUrl { url, reason },
            OpenError::Unavailable { target, message } => JournalError::Unavailable {
                url: target,
                message,
            },
            OpenError::Foreign { path, message, .. } => JournalError::NotAJournal { path, message },
            other => JournalError::Backend(other.to_string()),
        }
    }
}

impl From<DbError> for JournalError {
    fn from(e: DbError) -> Self {
        match e.kind {
            DbErrorKind::ConnectionLost => JournalError::Unavailable {
                url: "the journal database".into(),
                message: e.message,
            },
            _ => JournalError::Backend(e.message),
        }
    }
}

/// A result of a journal operation.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;

/// The durable store of runs and calls. Implemented by [`SqlJournal`], on SQLite and
/// on PostgreSQL; both pass `tests/suite.rs`.
#[async_trait]
pub trait Journal: Send + Sync + fmt::Debug {
    /// A short description for messages, e.g. `sqlite:///path/toolshed.db`.
    fn describe(&self) -> String;

    /// What the writer has done so far (for metrics, and for tests of group commit).
    fn write_stats(&self) -> WriteStats;

    // ---- runs ----

    /// Create a run (status `running`, `resumes = 0`). Fails with `Conflict` if the id exists.
    async fn create_run(&self, run: NewRun) -> Result<RunRecord>;

    /// Read a run.
    async fn get_run(&self, id: &str) -> Result<RunRecord>;

    /// List runs, newest first (by creation), filtered by status, agent and tenant.
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>>;

    /// Change a run's status and set its error text (meant for `failed`/`cancelled`;
    /// `None` clears it). A run whose status is final (`completed`, `failed`,
    /// `cancelled`) never changes again: any change is a `Conflict`.
    async fn set_run_status(
        &self,
        id: &str,
        status: RunStatus,
        error: Option<String>,
    ) -> Result<RunRecord>;

    /// Replace a run's driver: what drives it and what the driver keeps with it (the
    /// CLI's plan, the agent project and each tool's revision), e.g. once a resume
    /// accepted tools that changed since the run started, so a later resume compares
    /// with the accepted revisions. Only a run that is not finished (`running`,
    /// `parked`); a finished run's driver never changes (`Conflict`), an unknown run is
    /// `NotFound`. Returns the updated run.
    async fn set_run_driver(&self, id: &str, driver: Value) -> Result<RunRecord>;

    /// Record that a driver (re)started the run and set its status to `running`.
    ///
    /// `resumes` is incremented only when the run was `running` before the call, i.e. a
    /// new run (its first drive) or one whose driver crashed; resuming a `parked` run
    /// (after an approval or an answer) sets `running` without counting. Returns the
    /// updated run. A final run is a `Conflict`.
    async fn begin_drive(&self, id: &str) -> Result<RunRecord>;

    /// Record a whole run after the fact, in one durable write where the backend can:
    /// created, driven once, its calls already finished with their results, its crumbs,
    /// and its final `status`. What a run whose calls need nothing durable before they
    /// execute (`idempotency: none`, no gate) records when it ends, instead of one
    /// write per step. An existing id is a `Conflict` and nothing is stored.
    ///
    /// One atomic write on both databases, grouped with concurrent ones into one
    /// commit: if any part fails, nothing is stored.
    async fn record_run(
        &self,
        run: NewRun,
        calls: Vec<(NewCall, CallResult)>,
        crumbs: Vec<Box<serde_json::value::RawValue>>,
        status: RunStatus,
    ) -> Result<RunRecord>;

    // ---- calls ----

    /// Every call of a run, by ordinal: what a resumed run replays from (one query). An
    /// unknown run is `NotFound`.
    async fn calls_of_run(&self, run_id: &str) -> Result<Vec<CallRecord>>;

    /// Read one call by its global id.
    async fn get_call(&self, call_id: &str) -> Result<CallRecord>;

    /// Insert the call at `(run_id, ordinal)` if it is new (status `open`), or return the
    /// existing one unchanged. Callers compare tool and args hash with what was recorded.
    /// An unknown run is `NotFound`; a `call_id` already used at another key is a
    /// `Conflict`.
    async fn open_call(&self, call: NewCall) -> Result<CallRecord>;

    /// [`open_call`](Journal::open_call) and [`record_started`](Journal::record_started)
    /// in one durable write: what a keyed call records before its handler runs.
    ///
    /// A new call is inserted as `started` with `attempts = 1`. An existing call is
    /// started again (`attempts + 1`) only if it has the same tool and args hash and a
    /// status `record_started` accepts (`open`, `started`, `approved`); otherwise it is
    /// returned unchanged with `started: false` (a replay, a pending gate, or a
    /// mismatch the caller reports). Errors as for `open_call`.
    ///
    async fn open_and_start(&self, call: NewCall) -> Result<OpenedCall>;

    /// Durably record one more start of a keyed call (status `started`, `attempts + 1`)
    /// and return the new attempt count. Only valid on an `open`, `started` (a restart
    /// after a crash) or `approved` call; a call waiting for a human or already final is
    /// a `Conflict`.
    async fn record_started(&self, call_id: &str) -> Result<u32>;

    /// Durably record a call's final result or error result (status `completed` or
    /// `failed`), from any non-final status (a gated call may be finished too, e.g. when
    /// its run is cancelled). A call that is already final is a `Conflict`. Nothing is
    /// read back (the runtime has the result already; [`get_call`](Journal::get_call)
    /// reads the stored call).
    async fn record_finished(&self, call_id: &str, outcome: CallResult) -> Result<()>;

    /// Mark a call as waiting for a human: status `awaiting_approval` for
    /// [`Gate::Approval`], `awaiting_answer` for [`Gate::Answer`]. Only valid on an
    /// `open` call.
    async fn record_gate(&self, call_id: &str, gate: Gate) -> Result<CallRecord>;

    /// Ask again for an approved call whose approval no longer holds (the runtime does
    /// when the tool's revision changed since the approval): status `approved` →
    /// `awaiting_approval` with `gate` (an [`Gate::Approval`]; the caller keeps the
    /// cleared decision in its `superseded`), so it can be decided again. Only valid on
    /// an `approved` call; anything else is a `Conflict`.
    async fn regate(&self, call_id: &str, gate: Gate) -> Result<CallRecord>;

    /// Decide a pending approval. Approved → status `approved` (the call runs on the
    /// next drive); denied → status `failed` with the error result `APPROVAL_DENIED`,
    /// "denied by BY: REASON". Deciding twice, or a call that awaits no approval, is a
    /// `Conflict` (the message says who decided when, or what the call is waiting for).
    async fn decide(&self, call_id: &str, decision: Decision) -> Result<CallRecord>;

    /// Record a human tool's answer (already validated by the caller): status
    /// `completed` with the answer's value as the result. Answering twice, or a call
    /// that is not a human tool awaiting an answer, is a `Conflict` saying what the call
    /// is.
    async fn answer(&self, call_id: &str, answer: Answer) -> Result<CallRecord>;

    /// Calls waiting for a human: pending approvals and unanswered human tools of runs
    /// that are not finished, oldest first, filtered by run and by the run's tenant.
    async fn pending_gates(&self, filter: &GateFilter) -> Result<Vec<CallRecord>>;

    // ---- crumbs ----

    /// Append crumbs to a run's log, in order, each already serialized as JSON (a
    /// [`RawValue`](serde_json::value::RawValue): the runtime writes a crumb's text once,
    /// without building a JSON tree first). Sequence numbers are assigned by the
    /// journal: consecutive per run from 0, the crumbs of one append contiguous, also
    /// under concurrent appends. An unknown run is `NotFound`.
    async fn append_crumbs(
        &self,
        run_id: &str,
        crumbs: Vec<Box<serde_json::value::RawValue>>,
    ) -> Result<()>;

    /// Read a run's crumbs in order. An unknown run is `NotFound`.
    async fn crumbs_of_run(&self, run_id: &str) -> Result<Vec<CrumbRecord>>;

    // ---- retention (see [`prune`], which drives these) ----

    /// Delete up to `limit` runs that `rule` selects (finished, ended before its cutoff;
    /// oldest first) with their calls and crumbs, in one transaction of its own, and say
    /// how many. Running and parked runs are never deleted. Fewer than `limit` means
    /// nothing else is selected (at the time of the batch).
    async fn prune_batch(&self, rule: &PruneRule, limit: u32) -> Result<PrunedBatch>;

    /// How many runs and calls `rule` selects now: what a prune would delete (a dry run).
    async fn count_prunable(&self, rule: &PruneRule) -> Result<Pruned>;

    /// Return up to `max_pages` free pages of the database to the file system, as one
    /// transaction (SQLite's incremental vacuum; `0` only measures), and report the
    /// space. PostgreSQL reclaims deleted rows with its own (auto)vacuum: nothing to do.
    async fn reclaim_space(&self, max_pages: u32) -> Result<Space>;

    /// Rewrite a SQLite file created before incremental vacuum was enabled (`VACUUM`,
    /// once), after which [`Journal::reclaim_space`] returns space; on a file that has it
    /// already, return every free page. Holds the write lock for the whole rewrite:
    /// meant for an operator's one-off command, not a running server. A no-op on
    /// PostgreSQL.
    async fn vacuum(&self) -> Result<Space>;
}

/// What a journal's writer has done since it was opened: how many batches it began,
/// how many of them it committed, how many operations those commits carried, and how
/// many writes are waiting for their answer now. `operations / commits` is how many
/// writes shared each durable commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Batches taken, each in its own transaction (counted when the writer takes the
    /// batch, before its transaction may wait for a lock); PostgreSQL counts a second
    /// one when a failing statement makes it run the batch again one by one.
    pub batches: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Operations in committed transactions.
    pub operations: u64,
    /// Writes sent and not yet answered.
    pub pending: u64,
}

/// What [`Journal::open_and_start`] found or did.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenedCall {
    /// The call as it now is.
    pub call: CallRecord,
    /// Whether this write recorded a start (and counted an attempt).
    pub started: bool,
}

/// Open the journal a URL names, creating it (and applying migrations) when needed.
///
/// - `sqlite://PATH` (relative or absolute) → SQLite, the file created on first use;
/// - `postgres://…` or `postgresql://…` → PostgreSQL.
///
/// Anything else (or an empty path) is `InvalidUrl`; a file that is not a database, or
/// someone else's SQLite database, is `NotAJournal`; a server that does not answer, or a
/// journal written by a newer toolshed, is `Unavailable`. To put a PostgreSQL journal in
/// a schema of its own, open a [`Location`] with [`SqlJournal::open`].
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn Journal>> {
    Ok(std::sync::Arc::new(
        SqlJournal::open(&Location::parse(url)?).await?,
    ))
}

/// [`open`], with a PostgreSQL journal's tables in `schema` (created if missing), so that
/// several journals (tests, tenants of a shared server) can share one database. For a
/// SQLite URL the schema is ignored.
pub async fn open_in_schema(url: &str, schema: &str) -> Result<std::sync::Arc<dyn Journal>> {
    let location = Location::parse(url)?.in_schema(schema)?;
    Ok(std::sync::Arc::new(SqlJournal::open(&location).await?))
}
