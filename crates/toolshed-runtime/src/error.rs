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
        /// Every violation.
        details: String,
    },
    /// The runtime cannot start with this configuration.
    #[error("{0}")]
    Startup(String),
}

impl RuntimeError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            RuntimeError::Journal(e) => e.code().as_str(),
            RuntimeError::NonDeterminism { .. } => "NON_DETERMINISM",
            RuntimeError::BudgetExhausted { .. } => "BUDGET_EXHAUSTED",
            RuntimeError::RunFinished { .. } => "RUN_FINISHED",
            RuntimeError::InvalidAnswer { .. } => "INVALID_ANSWER",
            RuntimeError::Startup(_) => "STARTUP",
        }
    }
}
