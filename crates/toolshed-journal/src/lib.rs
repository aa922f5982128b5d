//! # toolshed-journal
//!
//! The durable event log of runs, calls, approvals, human answers and crumbs, behind one
//! trait ([`Journal`]) with two backends that pass the same behavioural test suite:
//! SQLite (the embedded default: one file, WAL, grouped fsync'd commits) and
//! PostgreSQL.
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
//!         driver: serde_json::json!({"kind": "direct"}),
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

mod common;
pub mod pg;
mod postgres;
mod records;
mod sqlite;
pub mod sqlite_reads;

pub use postgres::PostgresJournal;
pub use records::*;
pub use sqlite::SqliteJournal;

/// What can go wrong talking to the journal. Each kind maps to one stable code, the
/// same for both backends.
#[derive(Debug, thiserror::Error)]
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
    /// The stable code: `INVALID_DATABASE_URL`, `JOURNAL_UNAVAILABLE`, `NOT_A_JOURNAL`,
    /// `NOT_FOUND`, `CONFLICT`, `JOURNAL_ERROR`.
    pub fn code(&self) -> &'static str {
        match self {
            JournalError::InvalidUrl { .. } => "INVALID_DATABASE_URL",
            JournalError::Unavailable { .. } => "JOURNAL_UNAVAILABLE",
            JournalError::NotAJournal { .. } => "NOT_A_JOURNAL",
            JournalError::NotFound { .. } => "NOT_FOUND",
            JournalError::Conflict(_) => "CONFLICT",
            JournalError::Backend(_) => "JOURNAL_ERROR",
        }
    }
}

/// A result of a journal operation.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;

/// The durable store of runs and calls. Implemented by [`SqliteJournal`] and
/// [`PostgresJournal`]; both pass `tests/suite.rs`.
#[async_trait]
pub trait Journal: Send + Sync + fmt::Debug {
    /// A short description for messages, e.g. `sqlite:///path/toolshed.db`.
    fn describe(&self) -> String;

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
    /// SQLite overrides it with one atomic write: if any part fails, nothing is
    /// stored. The default implementation makes one write per step, PostgreSQL three
    /// pipelined ones; when a step after the run's creation fails, the run is left
    /// `failed` with the reason.
    async fn record_run(
        &self,
        run: NewRun,
        calls: Vec<(NewCall, CallResult)>,
        crumbs: Vec<Value>,
        status: RunStatus,
    ) -> Result<RunRecord> {
        let id = run.id.clone();
        self.create_run(run).await?;
        let steps = async {
            self.begin_drive(&id).await?;
            for (call, result) in calls {
                let rec = self.open_call(call).await?;
                self.record_finished(&rec.call_id, result).await?;
            }
            if !crumbs.is_empty() {
                self.append_crumbs(&id, crumbs).await?;
            }
            self.set_run_status(&id, status, None).await
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
    /// The default implementation makes two writes; both backends override it with one.
    async fn open_and_start(&self, call: NewCall) -> Result<OpenedCall> {
        let (tool, args_hash) = (call.tool.clone(), call.args_hash.clone());
        let mut existing = self.open_call(call).await?;
        let startable = matches!(
            existing.status,
            CallStatus::Open | CallStatus::Started | CallStatus::Approved
        );
        if existing.tool != tool || existing.args_hash != args_hash || !startable {
            return Ok(OpenedCall {
                call: existing,
                started: false,
            });
        }
        existing.attempts = self.record_started(&existing.call_id).await?;
        existing.status = CallStatus::Started;
        Ok(OpenedCall {
            call: existing,
            started: true,
        })
    }

    /// Durably record one more start of a keyed call (status `started`, `attempts + 1`)
    /// and return the new attempt count. Only valid on an `open`, `started` (a restart
    /// after a crash) or `approved` call; a call waiting for a human or already final is
    /// a `Conflict`.
    async fn record_started(&self, call_id: &str) -> Result<u32>;

    /// Durably record a call's final result or error result (status `completed` or
    /// `failed`), from any non-final status (a gated call may be finished too, e.g. when
    /// its run is cancelled). A call that is already final is a `Conflict`.
    async fn record_finished(&self, call_id: &str, outcome: CallResult) -> Result<CallRecord>;

    /// Mark a call as waiting for a human: status `awaiting_approval` for
    /// [`Gate::Approval`], `awaiting_answer` for [`Gate::Answer`]. Only valid on an
    /// `open` call.
    async fn record_gate(&self, call_id: &str, gate: Gate) -> Result<CallRecord>;

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

    /// Calls waiting for a human: pending approvals and unanswered human tools, oldest
    /// first, filtered by run and by the run's tenant.
    async fn pending_gates(&self, filter: &GateFilter) -> Result<Vec<CallRecord>>;

    // ---- crumbs ----

    /// Append crumbs (already serialized) to a run's log, in order. Sequence numbers are
    /// assigned by the journal: consecutive per run from 0, the crumbs of one append
    /// contiguous, also under concurrent appends. An unknown run is `NotFound`.
    async fn append_crumbs(&self, run_id: &str, crumbs: Vec<Value>) -> Result<()>;

    /// Read a run's crumbs in order. An unknown run is `NotFound`.
    async fn crumbs_of_run(&self, run_id: &str) -> Result<Vec<CrumbRecord>>;
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
/// journal written by a newer toolshed, is `Unavailable`.
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn Journal>> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err(JournalError::InvalidUrl {
                url: mask_password(url),
                reason: "the path is missing: use `sqlite://PATH`, e.g. `sqlite://toolshed.db`"
                    .into(),
            });
        }
        Ok(std::sync::Arc::new(SqliteJournal::open(path).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(std::sync::Arc::new(PostgresJournal::connect(url).await?))
    } else {
        Err(JournalError::InvalidUrl {
            url: mask_password(url),
            reason: "use `sqlite://PATH` or `postgres://USER@HOST:PORT/DB`".into(),
        })
    }
}

/// Hide the password part of a URL for messages: `scheme://user:password@host` and a
/// `password=…` query parameter.
pub fn mask_password(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    // scheme://user:password@host → scheme://user:***@host
    let mut masked = base.to_owned();
    if let Some((scheme, rest)) = base.split_once("://")
        && let Some((creds, host)) = rest.rsplit_once('@')
        && let Some((user, _)) = creds.split_once(':')
    {
        masked = format!("{scheme}://{user}:***@{host}");
    }
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => param.to_owned(),
            })
            .collect();
        masked.push('?');
        masked.push_str(&params.join("&"));
    }
    masked
}

#[cfg(test)]
mod tests {
    use super::mask_password;

    #[test]
    fn masks_passwords_in_userinfo_and_query() {
        assert_eq!(
            mask_password("postgres://u:s3cret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            mask_password("postgres://u@h/db?password=s3cret&x=1"),
            "postgres://u@h/db?password=***&x=1"
        );
        assert_eq!(mask_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(mask_password("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
    }
}
