//! The records the journal stores. These are wire/storage types: they carry serde
//! derives and a format version, and change only with a migration.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshed_core::{Diagnostics, Principal, ToolError};

/// The version of the record formats below, stored with every database.
pub const FORMAT_VERSION: u32 = 1;

toolshed_core::wire_enum! {
    case = "lowercase";
    /// A run's status.
    pub enum RunStatus {
        /// A driver is (or was, until it crashed) executing it.
        Running,
        /// Waiting for a human: holds no process and no memory.
        Parked,
        /// Finished: every call has a result.
        Completed,
        /// Failed: a runtime failure or a spent budget (the error says which).
        Failed,
        /// Cancelled by someone.
        Cancelled,
    }
}

impl RunStatus {
    /// Parse a stored or user-given status.
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }

    /// Whether no driver may change the run any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

/// A run's budgets, enforced by the runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budgets {
    /// How many times a driver may start the run after a crash (`resumes` counts every
    /// drive, including the first; resuming a parked run does not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts_per_task: Option<u32>,
    /// Wall-clock minutes from creation, parked time included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_clock_min: Option<u32>,
}

/// What a new run records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// The run id (a UUID unless the caller chose one).
    pub id: String,
    /// The agent.
    pub agent_id: String,
    /// The session.
    pub session_id: String,
    /// Who the run acts for.
    pub principal: Option<Principal>,
    /// Budgets.
    pub budgets: Budgets,
    /// What drives the run, so `runs resume` can continue it: the runtime's `Driver`
    /// serialized, e.g. `{"kind": "direct", "tool": …, "args": …}` or
    /// `{"kind": "plan", "steps": […]}`. The journal stores it as given; library users
    /// put what their own driver needs here.
    pub driver: Value,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run id.
    pub id: String,
    /// The agent.
    pub agent_id: String,
    /// The session.
    pub session_id: String,
    /// Who the run acts for.
    pub principal: Option<Principal>,
    /// The principal's tenant, stored apart so runs can be listed per tenant.
    pub tenant: Option<String>,
    /// The status.
    pub status: RunStatus,
    /// Budgets.
    pub budgets: Budgets,
    /// What drives the run.
    pub driver: Value,
    /// How many times a driver started the run from `running` (new or crashed).
    pub resumes: u32,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only this agent's runs.
    pub agent_id: Option<String>,
    /// Only this tenant's runs.
    pub tenant: Option<String>,
    /// At most this many (newest first); 0 means 100.
    pub limit: u32,
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// A call's state.
    pub enum CallStatus {
        /// Recorded, not yet started (an unkeyed call in flight, or one about to be gated).
        Open,
        /// A keyed call whose handler was started (and maybe crashed).
        Started,
        /// Waiting for an approval decision.
        AwaitingApproval,
        /// Waiting for a human tool's answer.
        AwaitingAnswer,
        /// Approved; runs on the next drive.
        Approved,
        /// Finished with a result.
        Completed,
        /// Finished with an error result (including a denial).
        Failed,
    }
}

impl CallStatus {
    /// Parse a stored status.
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }

    /// Whether the call has its result.
    pub fn is_final(self) -> bool {
        matches!(self, CallStatus::Completed | CallStatus::Failed)
    }
}

/// A call to record at `(run_id, ordinal)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewCall {
    /// The global call id (a UUID), used by approvals and answers.
    pub call_id: String,
    /// The run.
    pub run_id: String,
    /// The call's position in the run, from 0: with the run id, its deterministic key.
    pub ordinal: u32,
    /// The id the model gave the call.
    pub tool_call_id: String,
    /// The tool name.
    pub tool: String,
    /// Hex SHA-256 of the canonical (key-sorted) JSON of the validated args.
    pub args_hash: String,
    /// The validated args.
    pub args: Value,
}

/// A call as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The global call id.
    pub call_id: String,
    /// The run.
    pub run_id: String,
    /// The ordinal.
    pub ordinal: u32,
    /// The model's call id.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// Hash of the canonical args.
    pub args_hash: String,
    /// The args.
    pub args: Value,
    /// The state.
    pub status: CallStatus,
    /// Durable starts of a keyed call.
    pub attempts: u32,
    /// The result, once `completed`.
    pub result: Option<Value>,
    /// The error result, once `failed`.
    pub error: Option<ToolError>,
    /// The call's duration in milliseconds, once final.
    pub duration_ms: Option<f64>,
    /// The gate, when a human was asked.
    pub gate: Option<Gate>,
    /// The approval decision, once made.
    pub decision: Option<Decision>,
    /// The human tool's answer, once given.
    pub answer: Option<Answer>,
    /// What the call's last execution left besides its result (stdout, stderr, exit
    /// code, limits hit), once final; empty for in-process tools.
    pub diagnostics: Diagnostics,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
}

/// The final outcome of a call, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    /// The result or the error result.
    pub result: std::result::Result<Value, ToolError>,
    /// Duration in milliseconds.
    pub duration_ms: f64,
    /// What the execution left besides its result (already scrubbed and capped by the
    /// pipeline); stored with the call and replayed with it.
    #[serde(default)]
    pub diagnostics: Diagnostics,
}

/// What a gated call waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Gate {
    /// An approval of the call with its args.
    ///
    /// The fields past `reason` came with approvals bound to revisions; a gate recorded
    /// before them reads with their defaults (no revision: nothing to compare on resume).
    Approval {
        /// Why the gate applies (`always`, or the predicate's text).
        reason: String,
        /// The revision of the tool the approval is asked for (the runtime's
        /// `tool_revision`): an approval runs only against this revision.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<String>,
        /// Four-eyes: whoever asked for the call may not approve it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        four_eyes: bool,
        /// Who asked for the call (the run's principal's subject), if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<String>,
        /// When the approval was asked for (milliseconds since the Unix epoch).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_at_ms: Option<i64>,
        /// Earlier approvals of this call that no longer hold (given for a revision the
        /// tool has left), oldest first: the call was asked again after each.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        superseded: Vec<Decision>,
    },
    /// A human tool's answer, which must match this schema.
    Answer {
        /// The answer's JSON Schema.
        schema: Value,
    },
}

/// An approval decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Approved or denied.
    pub approved: bool,
    /// Who decided (a user name or principal subject).
    pub by: String,
    /// Why, if given.
    pub reason: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The tool revision the decision was made for (the gate's), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

impl Gate {
    /// An approval gate with only its reason (no revision, no policy), as recorded
    /// before approvals were bound to revisions; what tests and simple callers build.
    pub fn approval(reason: impl Into<String>) -> Gate {
        Gate::Approval {
            reason: reason.into(),
            revision: None,
            four_eyes: false,
            requested_by: None,
            requested_at_ms: None,
            superseded: Vec::new(),
        }
    }
}

/// A human tool's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The answer (validated against the gate's schema by the caller).
    pub value: Value,
    /// Who answered.
    pub by: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
}

/// Which pending gates to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateFilter {
    /// Only this run's.
    pub run_id: Option<String>,
    /// Only this tenant's runs.
    pub tenant: Option<String>,
}

/// One journaled crumb.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrumbRecord {
    /// The run.
    pub run_id: String,
    /// Position in the run's crumb log, from 0.
    pub seq: u64,
    /// The crumb as serialized.
    pub crumb: Value,
}
