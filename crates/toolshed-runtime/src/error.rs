//! Runtime errors: failures for whoever drives a run, as opposed to a tool's error
//! results, which the model sees.

use toolshed_journal::{JournalError, RunStatus};

/// A failure of the runtime itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The journal failed or refused the change.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A resumed run issued a different call than the one recorded at this ordinal.
    #[error(
        "non-determinism in run {run_id} at call #{ordinal}: the journal recorded `{recorded_tool}` \
         with args hash {recorded_hash}, but the driver now asks for `{asked_tool}` with args hash \
         {asked_hash}; a resumed run must issue the same calls in the same order"
    )]
    NonDeterminism {
        /// The run.
        run_id: String,
        /// The call's position.
        ordinal: u32,
        /// What the journal has.
        recorded_tool: String,
        /// Its args hash (first 12 hex digits).
        recorded_hash: String,
        /// What the driver asked for now.
        asked_tool: String,
        /// Its args hash (first 12 hex digits).
        asked_hash: String,
    },
    /// A run budget is spent; the run has been marked failed.
    #[error("run {run_id} failed: {reason}")]
    BudgetExhausted {
        /// The run.
        run_id: String,
        /// Which budget and by how much.
        reason: String,
    },
    /// The run is completed, failed or cancelled and cannot be driven.
    #[error("run {run_id} is {} and cannot be resumed", .status.as_str())]
    RunFinished {
        /// The run.
        run_id: String,
        /// Its final status: completed, failed or cancelled.
        status: RunStatus,
    },
    /// A human tool's answer does not match its schema; the run stays parked.
    #[error("the answer to call {call_id} does not match the tool's schema: {details}")]
    InvalidAnswer {
        /// The call.
        call_id: String,
        /// Every violation, as text.
        details: String,
        /// Every violation (empty when the tool's answer schema itself is unusable).
        violations: Vec<toolshed_core::schema::Violation>,
    },
    /// A resumed run holds approved calls whose tool changed since the approval: they
    /// were not run, each waits for a new decision, and the run stays parked.
    #[error("{}", revision_message(.run_id, .changes))]
    RevisionChanged {
        /// The run.
        run_id: String,
        /// Each approved call whose tool changed, in ordinal order.
        changes: Vec<RevisionChange>,
    },
    /// Four-eyes: the decider is the one who asked for the call (or who asked is not
    /// known); another user must approve it.
    #[error(
        "call {call_id} needs another user's approval: four-eyes applies ({policy}) and {}",
        match .requested_by {
            Some(who) => format!("`{who}` asked for it; ask another user to approve it (denying it yourself is allowed)"),
            None => "its run records no requester, so it cannot be told apart from the approver; approve it where the run records who asked (the registry server)".to_owned(),
        }
    )]
    SelfApproval {
        /// The call.
        call_id: String,
        /// Who asked for the call, when known (the approver, if so).
        requested_by: Option<String>,
        /// Where the policy comes from: `the tool's approval.four_eyes` or `the server's --four-eyes`.
        policy: &'static str,
    },
    /// The runtime cannot start with this configuration.
    #[error("{0}")]
    Startup(String),
    /// A task the runtime spawned for a call panicked or was cancelled: a bug, never the
    /// caller's mistake.
    #[error("a call task failed: {0}")]
    TaskFailed(String),
}

/// One approved call whose tool is no longer at the revision it was approved for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RevisionChange {
    /// The call (decide it again by this id).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The revision the approval was given for.
    pub approved_revision: String,
    /// The tool's revision now.
    pub current_revision: String,
    /// Who approved it.
    pub approved_by: String,
}

fn revision_message(run_id: &str, changes: &[RevisionChange]) -> String {
    let each: Vec<String> = changes
        .iter()
        .map(|c| {
            format!(
                "call {} of tool `{}` was approved by `{}` for revision {}, but the tool is now at revision {}",
                c.call_id, c.tool, c.approved_by, c.approved_revision, c.current_revision
            )
        })
        .collect();
    format!(
        "run {run_id} was not resumed: {}; nothing ran and the run stays parked. Each call waits \
         for a new decision on the current revision: review it (`toolshed approvals list`, \
         GET /api/v1/approvals), approve or deny it again, then resume",
        each.join("; ")
    )
}

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of the runtime's own failures (a journal failure keeps the
    /// journal's code). Listed with what to do in `docs/errors.md`.
    #[non_exhaustive]
    pub enum RuntimeCode {
        /// A resumed run issued a different call than the recorded one.
        NonDeterminism,
        /// A run budget is spent.
        BudgetExhausted,
        /// The run is final and cannot be driven.
        RunFinished,
        /// A human tool's answer does not match its schema.
        InvalidAnswer,
        /// An approved call's tool changed since the approval; the call waits for a new decision.
        RevisionChanged,
        /// Four-eyes: the one who asked for a call cannot approve it.
        SelfApproval,
        /// The runtime refused its configuration.
        Startup,
        /// A spawned call task panicked or was cancelled.
        TaskFailed,
    }
}

impl RuntimeError {
    /// The runtime's own code, or `None` for a journal failure (whose code is the
    /// journal's, [`JournalError::code`]).
    pub fn runtime_code(&self) -> Option<RuntimeCode> {
        self.layer_code().ok()
    }

    /// The stable code as text: the journal's for a journal failure, else the runtime's.
    pub fn code(&self) -> &'static str {
        match self.layer_code() {
            Ok(code) => code.as_str(),
            Err(journal) => journal.code().as_str(),
        }
    }

    fn layer_code(&self) -> Result<RuntimeCode, &JournalError> {
        Ok(match self {
            RuntimeError::Journal(e) => return Err(e),
            RuntimeError::NonDeterminism { .. } => RuntimeCode::NonDeterminism,
            RuntimeError::BudgetExhausted { .. } => RuntimeCode::BudgetExhausted,
            RuntimeError::RunFinished { .. } => RuntimeCode::RunFinished,
            RuntimeError::InvalidAnswer { .. } => RuntimeCode::InvalidAnswer,
            RuntimeError::RevisionChanged { .. } => RuntimeCode::RevisionChanged,
            RuntimeError::SelfApproval { .. } => RuntimeCode::SelfApproval,
            RuntimeError::Startup(_) => RuntimeCode::Startup,
            RuntimeError::TaskFailed(_) => RuntimeCode::TaskFailed,
        })
    }
}
