//! What both backends share: the write operations their group-commit writers run, the
//! raw rows those return, the state rules (written once, turned into SQL) and the
//! conflict messages.
//!
//! A write method builds a [`WriteOp`] on the caller's task (all JSON is serialized
//! there, so the single writer only binds strings), the writer runs it as one
//! conditional statement and returns an [`Outcome`] of raw rows, and the caller turns
//! those into records (JSON parsed on its own task again). When a conditional statement
//! changes nothing, the writer reads the row and [`call_conflict`] / [`run_conflict`]
//! say why, from the same rules the SQL was built from.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use toolshed_core::{ErrorCode, ToolError};

use crate::{
    Answer, CallRecord, CallResult, CallStatus, CrumbRecord, Decision, Gate, JournalError, NewCall,
    NewRun, OpenedCall, Result, RunRecord, RunStatus,
};

/// The most operations one group commit takes.
pub(crate) const MAX_BATCH: usize = 1024;

/// The columns of `runs` that make a [`RunRecord`], in [`RawRun`] order.
pub(crate) const RUN_COLUMNS: [&str; 12] = [
    "id",
    "agent_id",
    "session_id",
    "principal",
    "tenant",
    "status",
    "budgets",
    "driver",
    "resumes",
    "error",
    "created_at_ms",
    "updated_at_ms",
];

/// The columns of `calls` that make a [`CallRecord`], in [`RawCall`] order.
pub(crate) const CALL_COLUMNS: [&str; 17] = [
    "call_id",
    "run_id",
    "ordinal",
    "tool_call_id",
    "tool",
    "args_hash",
    "args",
    "status",
    "attempts",
    "result",
    "error",
    "duration_ms",
    "gate",
    "decision",
    "answer",
    "created_at_ms",
    "updated_at_ms",
];

/// A column list for a SELECT or RETURNING, each name prefixed (e.g. `c.`).
pub(crate) fn columns(names: &[&str], prefix: &str) -> String {
    names
        .iter()
        .map(|n| format!("{prefix}{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// An epoch-milliseconds time as RFC 3339 UTC, for messages.
pub(crate) fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ms} ms since the epoch"))
}

/// Refuse a journal written by a newer toolshed: the message for `Unavailable`.
pub(crate) fn check_versions(
    schema: u32,
    format: u32,
    latest: u32,
) -> std::result::Result<(), String> {
    if schema > latest {
        return Err(format!(
            "its schema version {schema} is newer than this toolshed supports ({latest}); upgrade toolshed"
        ));
    }
    if format > crate::FORMAT_VERSION {
        return Err(format!(
            "its record format version {format} is newer than this toolshed supports ({}); upgrade toolshed",
            crate::FORMAT_VERSION
        ));
    }
    Ok(())
}

/// The same error again, for every caller of a failed batch.
pub(crate) fn duplicate_error(e: &JournalError) -> JournalError {
    match e {
        JournalError::InvalidUrl { url, reason } => JournalError::InvalidUrl {
            url: url.clone(),
            reason: reason.clone(),
        },
        JournalError::Unavailable { url, message } => JournalError::Unavailable {
            url: url.clone(),
            message: message.clone(),
        },
        JournalError::NotAJournal { path, message } => JournalError::NotAJournal {
            path: path.clone(),
            message: message.clone(),
        },
        JournalError::NotFound { what, id } => JournalError::NotFound {
            what,
            id: id.clone(),
        },
        JournalError::Conflict(m) => JournalError::Conflict(m.clone()),
        JournalError::Backend(m) => JournalError::Backend(m.clone()),
    }
}

// ---- rules ----

/// The run statuses a run may leave: everything but the final ones.
pub(crate) const RUN_MUTABLE: &[RunStatus] = &[RunStatus::Running, RunStatus::Parked];

/// A change of a call's state, with the statuses it may start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallChange {
    Start,
    Finish,
    Gate,
    Decide,
    Answer,
}

impl CallChange {
    /// The statuses the change is allowed from: the one source of the state rules.
    pub(crate) fn allowed_from(self) -> &'static [CallStatus] {
        use CallStatus::*;
        match self {
            CallChange::Start => &[Open, Started, Approved],
            CallChange::Finish => &[Open, Started, AwaitingApproval, AwaitingAnswer, Approved],
            CallChange::Gate => &[Open],
            CallChange::Decide => &[AwaitingApproval],
            CallChange::Answer => &[AwaitingAnswer],
        }
    }

    /// `(status = 'open' OR status = 'started')`: the allowed statuses as an SQL
    /// condition on the `status` column of `table` (or unqualified for `""`).
    /// Equalities rather than `IN (…)`: SQLite builds a temporary index for every
    /// execution of an `IN` list.
    pub(crate) fn sql_condition(self, table: &str) -> String {
        any_status(table, self.allowed_from().iter().map(|s| s.as_str()))
    }
}

/// `('a', 'b')` from status names (fixed identifiers, never user input).
pub(crate) fn sql_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = names.into_iter().map(|n| format!("'{n}'")).collect();
    format!("({})", quoted.join(", "))
}

/// `(t.status = 'a' OR t.status = 'b')` from status names (fixed identifiers, never
/// user input).
pub(crate) fn any_status<'a>(table: &str, names: impl IntoIterator<Item = &'a str>) -> String {
    let column = if table.is_empty() {
        "status".to_owned()
    } else {
        format!("{table}.status")
    };
    let terms: Vec<String> = names
        .into_iter()
        .map(|n| format!("{column} = '{n}'"))
        .collect();
    format!("({})", terms.join(" OR "))
}

/// The run statuses a run may leave, as an SQL condition on `status`.
pub(crate) fn run_mutable_condition() -> String {
    any_status("", RUN_MUTABLE.iter().map(|s| s.as_str()))
}

/// A change of a run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunChange {
    SetStatus,
    BeginDrive,
}

/// Why `change` did not apply to `call` (read after the conditional statement changed
/// nothing). `None` means the row is gone.
pub(crate) fn call_conflict(
    change: CallChange,
    call_id: &str,
    call: Option<&CallRecord>,
) -> JournalError {
    let Some(call) = call else {
        return not_found_call(call_id);
    };
    if change.allowed_from().contains(&call.status) {
        // Another writer changed the call between the statement and this read.
        return JournalError::Conflict(format!(
            "call `{call_id}` changed while this change was being recorded (it is now `{}`); try again",
            call.status.as_str()
        ));
    }
    let status = call.status.as_str();
    let message = match change {
        CallChange::Start => match call.status {
            CallStatus::AwaitingApproval => {
                format!(
                    "call `{call_id}` awaits an approval; it cannot start before it is approved"
                )
            }
            CallStatus::AwaitingAnswer => {
                format!("call `{call_id}` is a human tool awaiting an answer; it is never started")
            }
            _ => format!("call `{call_id}` already finished (`{status}`); it cannot start again"),
        },
        CallChange::Finish => format!(
            "call `{call_id}` already finished (`{status}`) at {}; a result is recorded once",
            format_ms(call.updated_at_ms)
        ),
        CallChange::Gate => {
            format!("call `{call_id}` is `{status}`; only a new (`open`) call can wait for a human")
        }
        CallChange::Decide => match (&call.decision, &call.gate) {
            (Some(d), _) => format!(
                "call `{call_id}` was already {} by `{}` at {}",
                if d.approved { "approved" } else { "denied" },
                d.by,
                format_ms(d.at_ms)
            ),
            (None, Some(Gate::Answer { .. })) if call.answer.is_none() => format!(
                "call `{call_id}` awaits an answer to human tool `{}`, not an approval",
                call.tool
            ),
            _ => format!(
                "call `{call_id}` (tool `{}`) awaits no approval: it is `{status}`",
                call.tool
            ),
        },
        CallChange::Answer => match (&call.answer, &call.gate) {
            (Some(a), _) => format!(
                "call `{call_id}` was already answered by `{}` at {}",
                a.by,
                format_ms(a.at_ms)
            ),
            (None, Some(Gate::Approval { .. })) => format!(
                "call `{call_id}` is not a human tool: it is a call of tool `{}` {}, not an answer",
                call.tool,
                if call.status == CallStatus::AwaitingApproval {
                    "awaiting an approval".to_owned()
                } else {
                    format!("that was gated by an approval (now `{status}`)")
                }
            ),
            _ => format!(
                "call `{call_id}` is not a human tool awaiting an answer: it is a call of tool `{}` (`{status}`)",
                call.tool
            ),
        },
    };
    JournalError::Conflict(message)
}

/// Why `change` did not apply to `run`. `None` means the row is gone.
pub(crate) fn run_conflict(
    change: RunChange,
    run_id: &str,
    run: Option<&RunRecord>,
) -> JournalError {
    let Some(run) = run else {
        return not_found_run(run_id);
    };
    if RUN_MUTABLE.contains(&run.status) {
        return JournalError::Conflict(format!(
            "run `{run_id}` changed while this change was being recorded (it is now `{}`); try again",
            run.status.as_str()
        ));
    }
    let status = run.status.as_str();
    JournalError::Conflict(match change {
        RunChange::SetStatus => {
            format!("run `{run_id}` is already `{status}`; a finished run's status cannot change")
        }
        RunChange::BeginDrive => {
            format!("run `{run_id}` is `{status}`; a finished run cannot be driven again")
        }
    })
}

/// `NotFound` for a run.
pub(crate) fn not_found_run(id: &str) -> JournalError {
    JournalError::NotFound {
        what: "run",
        id: id.to_owned(),
    }
}

/// `NotFound` for a call.
pub(crate) fn not_found_call(id: &str) -> JournalError {
    JournalError::NotFound {
        what: "call",
        id: id.to_owned(),
    }
}

/// `Conflict` for a run id that exists.
pub(crate) fn run_exists(id: &str) -> JournalError {
    JournalError::Conflict(format!("run `{id}` already exists"))
}

/// `Conflict` for a call id used at another key.
pub(crate) fn call_id_taken(call_id: &str, other: Option<&CallRecord>) -> JournalError {
    JournalError::Conflict(match other {
        Some(c) => format!(
            "call id `{call_id}` is already used by call {} of run `{}`",
            c.ordinal, c.run_id
        ),
        None => format!("call id `{call_id}` is already used by another call"),
    })
}

// ---- operations ----

/// A run to insert.
#[derive(Debug)]
pub(crate) struct RunInsert {
    pub id: String,
    pub agent_id: String,
    pub session_id: String,
    pub principal: Option<String>,
    pub tenant: Option<String>,
    pub status: &'static str,
    pub budgets: String,
    pub driver: String,
    pub now: i64,
}

impl RunInsert {
    /// The row of a new run in `status`.
    pub(crate) fn new(run: &NewRun, status: RunStatus, now: i64) -> Result<RunInsert> {
        Ok(RunInsert {
            id: run.id.clone(),
            agent_id: run.agent_id.clone(),
            session_id: run.session_id.clone(),
            principal: run
                .principal
                .as_ref()
                .map(|p| to_json("principal", p))
                .transpose()?,
            tenant: run.principal.as_ref().and_then(|p| p.tenant.clone()),
            status: status.as_str(),
            budgets: to_json("budgets", &run.budgets)?,
            driver: to_json("driver", &run.driver)?,
            now,
        })
    }
}

/// A call to insert.
#[derive(Debug)]
pub(crate) struct CallInsert {
    pub call_id: String,
    pub run_id: String,
    pub ordinal: i64,
    pub tool_call_id: String,
    pub tool: String,
    pub args_hash: String,
    pub args: String,
    pub now: i64,
}

/// One write, as the writer runs it: every value already serialized.
#[derive(Debug)]
pub(crate) enum WriteOp {
    CreateRun(RunInsert),
    SetRunStatus {
        id: String,
        status: &'static str,
        error: Option<String>,
        now: i64,
    },
    BeginDrive {
        id: String,
        now: i64,
    },
    OpenCall(CallInsert),
    OpenAndStart(CallInsert),
    RecordStarted {
        call_id: String,
        now: i64,
    },
    RecordFinished {
        call_id: String,
        status: &'static str,
        result: Option<String>,
        error: Option<String>,
        duration_ms: f64,
        now: i64,
    },
    RecordGate {
        call_id: String,
        status: &'static str,
        gate: String,
        now: i64,
    },
    Decide {
        call_id: String,
        status: &'static str,
        decision: String,
        error: Option<String>,
        now: i64,
    },
    Answer {
        call_id: String,
        result: String,
        answer: String,
        now: i64,
    },
    AppendCrumbs {
        run_id: String,
        crumbs: Vec<String>,
    },
}

impl WriteOp {
    /// The call change this operation makes, with its call id, if it is one.
    pub(crate) fn call_change(&self) -> Option<(CallChange, &str)> {
        match self {
            WriteOp::RecordStarted { call_id, .. } => Some((CallChange::Start, call_id)),
            WriteOp::RecordFinished { call_id, .. } => Some((CallChange::Finish, call_id)),
            WriteOp::RecordGate { call_id, .. } => Some((CallChange::Gate, call_id)),
            WriteOp::Decide { call_id, .. } => Some((CallChange::Decide, call_id)),
            WriteOp::Answer { call_id, .. } => Some((CallChange::Answer, call_id)),
            _ => None,
        }
    }

    /// The run change this operation makes, with its run id, if it is one.
    pub(crate) fn run_change(&self) -> Option<(RunChange, &str)> {
        match self {
            WriteOp::SetRunStatus { id, .. } => Some((RunChange::SetStatus, id)),
            WriteOp::BeginDrive { id, .. } => Some((RunChange::BeginDrive, id)),
            _ => None,
        }
    }

    pub(crate) fn create_run(run: &NewRun, now: i64) -> Result<WriteOp> {
        RunInsert::new(run, RunStatus::Running, now).map(WriteOp::CreateRun)
    }

    pub(crate) fn set_run_status(id: &str, status: RunStatus, error: Option<String>) -> WriteOp {
        WriteOp::SetRunStatus {
            id: id.to_owned(),
            status: status.as_str(),
            error,
            now: now_ms(),
        }
    }

    pub(crate) fn begin_drive(id: &str) -> WriteOp {
        WriteOp::BeginDrive {
            id: id.to_owned(),
            now: now_ms(),
        }
    }

    pub(crate) fn call_insert(call: &NewCall) -> Result<CallInsert> {
        Ok(CallInsert {
            call_id: call.call_id.clone(),
            run_id: call.run_id.clone(),
            ordinal: i64::from(call.ordinal),
            tool_call_id: call.tool_call_id.clone(),
            tool: call.tool.clone(),
            args_hash: call.args_hash.clone(),
            args: to_json("args", &call.args)?,
            now: now_ms(),
        })
    }

    pub(crate) fn record_started(call_id: &str) -> WriteOp {
        WriteOp::RecordStarted {
            call_id: call_id.to_owned(),
            now: now_ms(),
        }
    }

    pub(crate) fn record_finished(call_id: &str, outcome: &CallResult) -> Result<WriteOp> {
        let (status, result, error) = match &outcome.result {
            Ok(value) => (CallStatus::Completed, Some(to_json("result", value)?), None),
            Err(e) => (CallStatus::Failed, None, Some(to_json("error", e)?)),
        };
        Ok(WriteOp::RecordFinished {
            call_id: call_id.to_owned(),
            status: status.as_str(),
            result,
            error,
            duration_ms: outcome.duration_ms,
            now: now_ms(),
        })
    }

    pub(crate) fn record_gate(call_id: &str, gate: &Gate) -> Result<WriteOp> {
        let status = match gate {
            Gate::Approval { .. } => CallStatus::AwaitingApproval,
            Gate::Answer { .. } => CallStatus::AwaitingAnswer,
        };
        Ok(WriteOp::RecordGate {
            call_id: call_id.to_owned(),
            status: status.as_str(),
            gate: to_json("gate", gate)?,
            now: now_ms(),
        })
    }

    pub(crate) fn decide(call_id: &str, decision: &Decision) -> Result<WriteOp> {
        let (status, error) = if decision.approved {
            (CallStatus::Approved, None)
        } else {
            let message = match &decision.reason {
                Some(reason) => format!("denied by {}: {reason}", decision.by),
                None => format!("denied by {}", decision.by),
            };
            let error = ToolError::new(ErrorCode::ApprovalDenied, message);
            (CallStatus::Failed, Some(to_json("error", &error)?))
        };
        Ok(WriteOp::Decide {
            call_id: call_id.to_owned(),
            status: status.as_str(),
            decision: to_json("decision", decision)?,
            error,
            now: now_ms(),
        })
    }

    pub(crate) fn answer(call_id: &str, answer: &Answer) -> Result<WriteOp> {
        Ok(WriteOp::Answer {
            call_id: call_id.to_owned(),
            result: to_json("answer", &answer.value)?,
            answer: to_json("answer", answer)?,
            now: now_ms(),
        })
    }

    pub(crate) fn append_crumbs(run_id: &str, crumbs: &[Value]) -> Result<WriteOp> {
        Ok(WriteOp::AppendCrumbs {
            run_id: run_id.to_owned(),
            crumbs: crumbs
                .iter()
                .map(|c| to_json("crumb", c))
                .collect::<Result<_>>()?,
        })
    }
}

/// What the writer returns for one operation: raw rows, turned into records by the
/// caller.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// `create_run` inserted the run; `append_crumbs` appended.
    Done,
    Run(RawRun),
    Call(RawCall),
    Opened {
        call: RawCall,
        started: bool,
    },
    Attempts(i64),
}

impl Outcome {
    pub(crate) fn into_done(self) -> Result<()> {
        match self {
            Outcome::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    pub(crate) fn into_run(self) -> Result<RunRecord> {
        match self {
            Outcome::Run(raw) => raw.into_record(),
            other => Err(unexpected(&other)),
        }
    }

    pub(crate) fn into_call(self) -> Result<CallRecord> {
        match self {
            Outcome::Call(raw) => raw.into_record(),
            Outcome::Opened { call, .. } => call.into_record(),
            other => Err(unexpected(&other)),
        }
    }

    pub(crate) fn into_opened(self) -> Result<OpenedCall> {
        match self {
            Outcome::Opened { call, started } => Ok(OpenedCall {
                call: call.into_record()?,
                started,
            }),
            other => Err(unexpected(&other)),
        }
    }

    pub(crate) fn into_attempts(self) -> Result<u32> {
        match self {
            Outcome::Attempts(n) => to_u32("attempts", n),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(outcome: &Outcome) -> JournalError {
    JournalError::Backend(format!(
        "the writer answered with an unexpected outcome: {outcome:?}"
    ))
}

/// The record `create_run` stored.
pub(crate) fn created_run(run: NewRun, now: i64) -> RunRecord {
    RunRecord {
        tenant: run.principal.as_ref().and_then(|p| p.tenant.clone()),
        id: run.id,
        agent_id: run.agent_id,
        session_id: run.session_id,
        principal: run.principal,
        status: RunStatus::Running,
        budgets: run.budgets,
        driver: run.driver,
        resumes: 0,
        error: None,
        created_at_ms: now,
        updated_at_ms: now,
    }
}

// ---- raw rows ----

/// A `runs` row as stored (JSON as text).
#[derive(Debug)]
pub(crate) struct RawRun {
    pub id: String,
    pub agent_id: String,
    pub session_id: String,
    pub principal: Option<String>,
    pub tenant: Option<String>,
    pub status: String,
    pub budgets: String,
    pub driver: String,
    pub resumes: i64,
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl RawRun {
    pub(crate) fn into_record(self) -> Result<RunRecord> {
        let what = || format!("run `{}`", self.id);
        Ok(RunRecord {
            principal: self
                .principal
                .as_deref()
                .map(|p| from_json(&what, "principal", p))
                .transpose()?,
            status: RunStatus::parse(&self.status).ok_or_else(|| {
                JournalError::Backend(format!(
                    "{}: unknown stored status `{}`",
                    what(),
                    self.status
                ))
            })?,
            budgets: from_json(&what, "budgets", &self.budgets)?,
            driver: from_json(&what, "driver", &self.driver)?,
            resumes: to_u32("resumes", self.resumes)?,
            tenant: self.tenant,
            error: self.error,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            agent_id: self.agent_id,
            session_id: self.session_id,
            id: self.id,
        })
    }
}

/// A `calls` row as stored (JSON as text).
#[derive(Debug)]
pub(crate) struct RawCall {
    pub call_id: String,
    pub run_id: String,
    pub ordinal: i64,
    pub tool_call_id: String,
    pub tool: String,
    pub args_hash: String,
    pub args: String,
    pub status: String,
    pub attempts: i64,
    pub result: Option<String>,
    pub error: Option<String>,
    pub duration_ms: Option<f64>,
    pub gate: Option<String>,
    pub decision: Option<String>,
    pub answer: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl RawCall {
    pub(crate) fn into_record(self) -> Result<CallRecord> {
        let what = || format!("call `{}`", self.call_id);
        fn opt<T: DeserializeOwned>(
            what: &dyn Fn() -> String,
            field: &str,
            text: Option<&str>,
        ) -> Result<Option<T>> {
            text.map(|t| from_json(what, field, t)).transpose()
        }
        Ok(CallRecord {
            ordinal: to_u32("ordinal", self.ordinal)?,
            args: from_json(&what, "args", &self.args)?,
            status: CallStatus::parse(&self.status).ok_or_else(|| {
                JournalError::Backend(format!(
                    "{}: unknown stored status `{}`",
                    what(),
                    self.status
                ))
            })?,
            attempts: to_u32("attempts", self.attempts)?,
            result: opt(&what, "result", self.result.as_deref())?,
            error: opt(&what, "error", self.error.as_deref())?,
            gate: opt(&what, "gate", self.gate.as_deref())?,
            decision: opt(&what, "decision", self.decision.as_deref())?,
            answer: opt(&what, "answer", self.answer.as_deref())?,
            duration_ms: self.duration_ms,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            tool_call_id: self.tool_call_id,
            tool: self.tool,
            args_hash: self.args_hash,
            run_id: self.run_id,
            call_id: self.call_id,
        })
    }
}

/// A crumb row.
pub(crate) fn crumb_record(run_id: String, seq: i64, crumb: &str) -> Result<CrumbRecord> {
    let what = || format!("crumb {seq} of run `{run_id}`");
    Ok(CrumbRecord {
        crumb: from_json(&what, "crumb", crumb)?,
        seq: u64::try_from(seq)
            .map_err(|_| JournalError::Backend(format!("{}: negative sequence number", what())))?,
        run_id,
    })
}

// ---- conversions ----

pub(crate) fn to_json<T: Serialize + ?Sized>(field: &str, value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|e| JournalError::Backend(format!("cannot serialize the {field}: {e}")))
}

fn from_json<T: DeserializeOwned>(what: &dyn Fn() -> String, field: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| {
        JournalError::Backend(format!("{}: the stored {field} is not valid: {e}", what()))
    })
}

fn to_u32(field: &str, n: i64) -> Result<u32> {
    u32::try_from(n)
        .map_err(|_| JournalError::Backend(format!("stored {field} {n} is out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_conditions_follow_the_rules() {
        assert_eq!(
            CallChange::Start.sql_condition("calls"),
            "(calls.status = 'open' OR calls.status = 'started' OR calls.status = 'approved')"
        );
        assert_eq!(CallChange::Gate.sql_condition(""), "(status = 'open')");
        assert_eq!(
            run_mutable_condition(),
            "(status = 'running' OR status = 'parked')"
        );
        assert_eq!(sql_list(["a", "b"]), "('a', 'b')");
    }

    #[test]
    fn finish_is_allowed_from_every_non_final_status() {
        for status in CallChange::Finish.allowed_from() {
            assert!(!status.is_final());
        }
        assert_eq!(CallChange::Finish.allowed_from().len(), 5);
    }

    #[test]
    fn format_ms_is_rfc3339() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
    }
}
