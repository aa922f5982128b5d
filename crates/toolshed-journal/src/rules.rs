//! The journal's rules, written once for both backends: the state transitions (as data,
//! turned into SQL conditions), the conflict messages, the write operations the
//! group-commit writers run, and how rows become records.
//!
//! A write method builds a [`WriteOp`] on the caller's task (all JSON is serialized
//! there, so the single writer only binds strings), the writer runs it as one
//! conditional statement and returns an [`Outcome`] of plain rows, and the caller turns
//! those into records (JSON parsed on its own task again). When a conditional statement
//! changes nothing, the writer reads the row and [`call_conflict`] / [`run_conflict`]
//! say why, from the same rules the SQL was built from.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use toolshed_core::{Diagnostics, ErrorCode, ToolError};
use toolshed_store::Row;
use toolshed_store::time::{format_ms, now_ms};

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
pub(crate) const CALL_COLUMNS: [&str; 18] = [
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
    "diagnostics",
];

/// A column list for a SELECT or RETURNING, each name prefixed (e.g. `c.`).
pub(crate) fn columns(names: &[&str], prefix: &str) -> String {
    names
        .iter()
        .map(|n| format!("{prefix}{n}"))
        .collect::<Vec<_>>()
        .join(", ")
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
    /// Ask again for an approved call whose approval no longer holds (its tool's
    /// revision changed): back to `awaiting_approval`, the decision cleared.
    Regate,
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
            CallChange::Regate => &[Approved],
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

/// Pieces of the writers' statements, derived from the rules once.
pub(crate) struct Fragments {
    /// [`RUN_COLUMNS`] as a list.
    pub run_cols: String,
    /// [`CALL_COLUMNS`] as a list.
    pub call_cols: String,
    /// The statuses a run may leave, as a condition on `status`.
    pub mutable: String,
    /// `running`.
    pub running: &'static str,
    /// `started`.
    pub started: &'static str,
}

impl Fragments {
    pub(crate) fn new() -> Fragments {
        Fragments {
            run_cols: columns(&RUN_COLUMNS, ""),
            call_cols: columns(&CALL_COLUMNS, ""),
            mutable: run_mutable_condition(),
            running: RunStatus::Running.as_str(),
            started: CallStatus::Started.as_str(),
        }
    }
}

/// A change of a run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunChange {
    SetStatus,
    /// Replace the driver JSON (allowed from the same statuses as the others: a run
    /// that is not finished).
    SetDriver,
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
        CallChange::Regate => format!(
            "call `{call_id}` is `{status}`; only an approved call can be asked again for an approval"
        ),
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
        RunChange::SetDriver => {
            format!("run `{run_id}` is already `{status}`; a finished run's driver cannot change")
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

/// A call's final result, serialized.
#[derive(Debug)]
pub(crate) struct Finished {
    pub status: &'static str,
    pub result: Option<String>,
    pub error: Option<String>,
    pub duration_ms: f64,
    /// `NULL` when there is nothing to keep.
    pub diagnostics: Option<String>,
}

impl Finished {
    /// `completed` with the result, or `failed` with the error result.
    pub(crate) fn new(outcome: &CallResult) -> Result<Finished> {
        let (status, result, error) = match &outcome.result {
            Ok(value) => (CallStatus::Completed, Some(to_json("result", value)?), None),
            Err(e) => (CallStatus::Failed, None, Some(to_json("error", e)?)),
        };
        let diagnostics = if outcome.diagnostics.is_empty() {
            None
        } else {
            Some(to_json("diagnostics", &outcome.diagnostics)?)
        };
        Ok(Finished {
            status: status.as_str(),
            result,
            error,
            duration_ms: outcome.duration_ms,
            diagnostics,
        })
    }
}

/// A whole run recorded after the fact (`record_run`): the run (driven once, in its
/// final status), its finished calls and its crumbs, serialized.
#[derive(Debug)]
pub(crate) struct FinishedRun {
    pub run: RunInsert,
    pub calls: Vec<(CallInsert, Finished)>,
    pub crumbs: Vec<String>,
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
    SetRunDriver {
        id: String,
        driver: String,
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
        finished: Finished,
        now: i64,
    },
    RecordGate {
        /// [`CallChange::Gate`] (a new call) or [`CallChange::Regate`] (an approved one
        /// asked again; its decision is cleared).
        change: CallChange,
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
    /// Insert a finished run whole: it stands or falls as one.
    RecordRun(FinishedRun),
}

impl WriteOp {
    /// The call change this operation makes, with its call id, if it is one.
    pub(crate) fn call_change(&self) -> Option<(CallChange, &str)> {
        match self {
            WriteOp::RecordStarted { call_id, .. } => Some((CallChange::Start, call_id)),
            WriteOp::RecordFinished { call_id, .. } => Some((CallChange::Finish, call_id)),
            WriteOp::RecordGate {
                change, call_id, ..
            } => Some((*change, call_id)),
            WriteOp::Decide { call_id, .. } => Some((CallChange::Decide, call_id)),
            WriteOp::Answer { call_id, .. } => Some((CallChange::Answer, call_id)),
            _ => None,
        }
    }

    /// The run change this operation makes, with its run id, if it is one.
    pub(crate) fn run_change(&self) -> Option<(RunChange, &str)> {
        match self {
            WriteOp::SetRunStatus { id, .. } => Some((RunChange::SetStatus, id)),
            WriteOp::SetRunDriver { id, .. } => Some((RunChange::SetDriver, id)),
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

    pub(crate) fn set_run_driver(id: &str, driver: &Value) -> Result<WriteOp> {
        Ok(WriteOp::SetRunDriver {
            id: id.to_owned(),
            driver: to_json("driver", driver)?,
            now: now_ms(),
        })
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
        Ok(WriteOp::RecordFinished {
            call_id: call_id.to_owned(),
            finished: Finished::new(outcome)?,
            now: now_ms(),
        })
    }

    pub(crate) fn record_run(
        run: &NewRun,
        calls: &[(NewCall, CallResult)],
        crumbs: &[Box<serde_json::value::RawValue>],
        status: RunStatus,
        now: i64,
    ) -> Result<WriteOp> {
        let mut finished = Vec::with_capacity(calls.len());
        for (call, outcome) in calls {
            if call.run_id != run.id {
                return Err(JournalError::Conflict(format!(
                    "call `{}` belongs to run `{}`, not to run `{}` being recorded",
                    call.call_id, call.run_id, run.id
                )));
            }
            let mut insert = WriteOp::call_insert(call)?;
            insert.now = now;
            finished.push((insert, Finished::new(outcome)?));
        }
        Ok(WriteOp::RecordRun(FinishedRun {
            run: RunInsert::new(run, status, now)?,
            calls: finished,
            crumbs: crumbs.iter().map(|c| c.get().to_owned()).collect(),
        }))
    }

    pub(crate) fn record_gate(call_id: &str, gate: &Gate) -> Result<WriteOp> {
        let status = match gate {
            Gate::Approval { .. } => CallStatus::AwaitingApproval,
            Gate::Answer { .. } => CallStatus::AwaitingAnswer,
        };
        Ok(WriteOp::RecordGate {
            change: CallChange::Gate,
            call_id: call_id.to_owned(),
            status: status.as_str(),
            gate: to_json("gate", gate)?,
            now: now_ms(),
        })
    }

    /// An approved call asked again: only an approval gate can be asked again (an
    /// answered human tool is final), so another gate is refused before any write.
    pub(crate) fn regate(call_id: &str, gate: &Gate) -> Result<WriteOp> {
        if !matches!(gate, Gate::Approval { .. }) {
            return Err(JournalError::Conflict(format!(
                "call `{call_id}` can only be asked again for an approval, not for an answer"
            )));
        }
        Ok(WriteOp::RecordGate {
            change: CallChange::Regate,
            call_id: call_id.to_owned(),
            status: CallStatus::AwaitingApproval.as_str(),
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

    pub(crate) fn append_crumbs(
        run_id: &str,
        crumbs: &[Box<serde_json::value::RawValue>],
    ) -> WriteOp {
        WriteOp::AppendCrumbs {
            run_id: run_id.to_owned(),
            crumbs: crumbs.iter().map(|c| c.get().to_owned()).collect(),
        }
    }
}

/// What the writer returns for one operation: plain rows, turned into records by the
/// caller.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// `create_run` inserted the run; `append_crumbs` appended; `record_run` recorded;
    /// `record_finished` finished the call.
    Done,
    /// A run row ([`RUN_COLUMNS`]).
    Run(Row),
    /// A call row ([`CALL_COLUMNS`]).
    Call(Row),
    /// A new call was inserted as asked and nothing was read back: the caller knows
    /// the row (see [`new_call_record`]).
    Inserted,
    /// `open_and_start` found or started this call.
    Opened { call: Row, started: bool },
    /// The attempts of a started call.
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
            Outcome::Run(row) => run_from_row(&row),
            other => Err(unexpected(&other)),
        }
    }

    /// The call a call change or `open_call` left; `new` is the call as inserted, for
    /// [`Outcome::Inserted`].
    pub(crate) fn into_call(self, new: Option<(NewCall, i64)>) -> Result<CallRecord> {
        match (self, new) {
            (Outcome::Call(row) | Outcome::Opened { call: row, .. }, _) => call_from_row(&row),
            (Outcome::Inserted, Some((call, now))) => {
                Ok(new_call_record(call, CallStatus::Open, 0, now))
            }
            (other, _) => Err(unexpected(&other)),
        }
    }

    /// What `open_and_start` found or did; `new` is the call as inserted, for
    /// [`Outcome::Inserted`].
    pub(crate) fn into_opened(self, new: NewCall, now: i64) -> Result<OpenedCall> {
        match self {
            Outcome::Opened { call, started } => Ok(OpenedCall {
                call: call_from_row(&call)?,
                started,
            }),
            Outcome::Inserted => Ok(OpenedCall {
                call: new_call_record(new, CallStatus::Started, 1, now),
                started: true,
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

/// The record of a call inserted new with `status` and `attempts` at `now`.
pub(crate) fn new_call_record(
    call: NewCall,
    status: CallStatus,
    attempts: u32,
    now: i64,
) -> CallRecord {
    CallRecord {
        call_id: call.call_id,
        run_id: call.run_id,
        ordinal: call.ordinal,
        tool_call_id: call.tool_call_id,
        tool: call.tool,
        args_hash: call.args_hash,
        args: call.args,
        status,
        attempts,
        result: None,
        error: None,
        duration_ms: None,
        gate: None,
        decision: None,
        answer: None,
        diagnostics: Diagnostics::default(),
        created_at_ms: now,
        updated_at_ms: now,
    }
}

// ---- rows ----

/// A `runs` row ([`RUN_COLUMNS`]) as a record.
pub(crate) fn run_from_row(row: &Row) -> Result<RunRecord> {
    let id: String = row.get(0)?;
    let what = || format!("run `{id}`");
    let status: String = row.get(5)?;
    Ok(RunRecord {
        agent_id: row.get(1)?,
        session_id: row.get(2)?,
        principal: opt_json(&what, "principal", row.get(3)?)?,
        tenant: row.get(4)?,
        status: RunStatus::parse(&status).ok_or_else(|| {
            JournalError::Backend(format!("{}: unknown stored status `{status}`", what()))
        })?,
        budgets: from_json(&what, "budgets", &row.get::<String>(6)?)?,
        driver: from_json(&what, "driver", &row.get::<String>(7)?)?,
        resumes: to_u32("resumes", row.get(8)?)?,
        error: row.get(9)?,
        created_at_ms: row.get(10)?,
        updated_at_ms: row.get(11)?,
        id,
    })
}

/// A `calls` row ([`CALL_COLUMNS`]) as a record.
pub(crate) fn call_from_row(row: &Row) -> Result<CallRecord> {
    let call_id: String = row.get(0)?;
    let what = || format!("call `{call_id}`");
    let status: String = row.get(7)?;
    Ok(CallRecord {
        run_id: row.get(1)?,
        ordinal: to_u32("ordinal", row.get(2)?)?,
        tool_call_id: row.get(3)?,
        tool: row.get(4)?,
        args_hash: row.get(5)?,
        args: from_json(&what, "args", &row.get::<String>(6)?)?,
        status: CallStatus::parse(&status).ok_or_else(|| {
            JournalError::Backend(format!("{}: unknown stored status `{status}`", what()))
        })?,
        attempts: to_u32("attempts", row.get(8)?)?,
        result: opt_json(&what, "result", row.get(9)?)?,
        error: opt_json(&what, "error", row.get(10)?)?,
        duration_ms: row.get(11)?,
        gate: opt_json(&what, "gate", row.get(12)?)?,
        decision: opt_json(&what, "decision", row.get(13)?)?,
        answer: opt_json(&what, "answer", row.get(14)?)?,
        created_at_ms: row.get(15)?,
        updated_at_ms: row.get(16)?,
        diagnostics: opt_json(&what, "diagnostics", row.get(17)?)?.unwrap_or_default(),
        call_id,
    })
}

/// A crumb row (`seq`, `crumb`).
pub(crate) fn crumb_from_row(run_id: &str, row: &Row) -> Result<CrumbRecord> {
    let seq: i64 = row.get(0)?;
    let what = || format!("crumb {seq} of run `{run_id}`");
    Ok(CrumbRecord {
        crumb: from_json(&what, "crumb", &row.get::<String>(1)?)?,
        seq: u64::try_from(seq)
            .map_err(|_| JournalError::Backend(format!("{}: negative sequence number", what())))?,
        run_id: run_id.to_owned(),
    })
}

// ---- conversions ----

pub(crate) fn to_json<T: Serialize + ?Sized>(field: &str, value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|e| JournalError::Backend(format!("cannot serialize the {field}: {e}")))
}

fn opt_json<T: DeserializeOwned>(
    what: &dyn Fn() -> String,
    field: &str,
    text: Option<String>,
) -> Result<Option<T>> {
    text.map(|t| from_json(what, field, &t)).transpose()
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
            CallChange::Regate.sql_condition(""),
            "(status = 'approved')"
        );
        assert_eq!(
            run_mutable_condition(),
            "(status = 'running' OR status = 'parked')"
        );
    }

    #[test]
    fn finish_is_allowed_from_every_non_final_status() {
        for status in CallChange::Finish.allowed_from() {
            assert!(!status.is_final());
        }
        assert_eq!(CallChange::Finish.allowed_from().len(), 5);
    }
}
