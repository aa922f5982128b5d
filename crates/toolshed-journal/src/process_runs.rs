//! Background runs of agents' named processes (`run_process` / `check_run`): the
//! record of each one, in the journal's database (migration 5, `process_runs`).
//!
//! Writes are rare (a start, a status change), so the store is a
//! [`toolshed_store::Db`] of its own beside the journal's group-commit writer, in the
//! same file or schema. Every rule is written once over the store's [`Executor`]; a
//! status change is one conditional statement built from
//! [`ProcessStatus::allowed_from`], so two processes checking one run at once cannot
//! both change it, and a final status is never changed again.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshed_store::{Db, DbOptions, Executor, Location, Param, Row, Sql};

use crate::store::MIGRATIONS;
use crate::{JournalError, Result};

toolshed_core::wire_enum! {
    case = "lowercase";
    /// Where a background run is.
    pub enum ProcessStatus {
        /// Recorded; its supervisor is being started.
        Starting,
        /// Its supervisor runs it.
        Running,
        /// It ended by itself or was stopped by its timeout (the exit code or signal
        /// says how).
        Exited,
        /// It could not be started.
        Failed,
        /// Its supervisor vanished without recording how it ended.
        Lost,
        /// `stop_run` stopped it (its supervisor killed the sandbox).
        Stopped,
    }
}

impl ProcessStatus {
    /// Parse a stored status.
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }

    /// Whether nothing may change it any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ProcessStatus::Exited
                | ProcessStatus::Failed
                | ProcessStatus::Lost
                | ProcessStatus::Stopped
        )
    }

    /// The statuses a run may come to this one from: the one table of transitions.
    pub fn allowed_from(self) -> &'static [ProcessStatus] {
        match self {
            ProcessStatus::Starting => &[],
            ProcessStatus::Running => &[ProcessStatus::Starting],
            ProcessStatus::Exited
            | ProcessStatus::Failed
            | ProcessStatus::Lost
            | ProcessStatus::Stopped => &[ProcessStatus::Starting, ProcessStatus::Running],
        }
    }
}

/// A background run to record, before its supervisor starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewProcessRun {
    /// Its id.
    pub id: String,
    /// The tenant it acts for (`default` without one).
    pub tenant: String,
    /// The agent whose process it is.
    pub agent: String,
    /// The run that started it.
    pub run_id: String,
    /// The session of that run.
    pub session_id: String,
    /// The process's name in `agent.yaml`.
    pub process: String,
    /// The arguments it was given.
    pub args: Value,
    /// Its state folder (spec, status and output files).
    pub state_dir: String,
    /// The machine its supervisor runs on: the starter's host name.
    pub host: String,
    /// That machine's boot (`/proc/sys/kernel/random/boot_id`): a check after a restart
    /// knows the supervisor is gone.
    pub boot_id: String,
}

/// A recorded background run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessRunRecord {
    /// Its id.
    pub id: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// The agent whose process it is.
    pub agent: String,
    /// The run that started it.
    pub run_id: String,
    /// The session of that run.
    pub session_id: String,
    /// The process's name.
    pub process: String,
    /// Its arguments.
    pub args: Value,
    /// Its state folder.
    pub state_dir: String,
    /// Its supervisor's pid, once started.
    pub supervisor_pid: Option<u32>,
    /// Its supervisor's start time (clock ticks after boot), to tell it from a process
    /// that reused the pid.
    pub supervisor_start: Option<u64>,
    /// Where it is.
    pub status: ProcessStatus,
    /// Its exit code, once it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Why it failed, was lost or was stopped.
    pub message: Option<String>,
    /// When it was recorded (ms since the epoch).
    pub created_at: i64,
    /// When its supervisor reported it running.
    pub started_at: Option<i64>,
    /// When it ended (or was found lost).
    pub ended_at: Option<i64>,
    /// The machine its supervisor runs on (none for runs recorded before hosts were).
    pub host: Option<String>,
    /// That machine's boot when it started.
    pub boot_id: Option<String>,
}

/// How a background run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessEnd {
    /// `exited`, `failed` or `lost`.
    pub status: ProcessStatus,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Why, in a sentence.
    pub message: Option<String>,
    /// When (ms since the epoch).
    pub ended_at: i64,
}

/// Whether [`ProcessRuns::insert`] recorded a new run or found one with that id.
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    /// Recorded now.
    New(ProcessRunRecord),
    /// A run with this id was already recorded (a resumed call starting it again).
    Existing(ProcessRunRecord),
}

const INSERT: Sql = Sql::same(
    "INSERT INTO process_runs (id, tenant, agent, run_id, session_id, process, args, state_dir, status, created_at, host, boot_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
);
const BY_ID: Sql = Sql::same(
    "SELECT id, tenant, agent, run_id, session_id, process, args, state_dir, supervisor_pid, supervisor_start, status, exit_code, signal, message, created_at, started_at, ended_at, host, boot_id FROM process_runs WHERE id = ?1",
);
// The owner is part of the statement: another tenant's or agent's id reads as unknown.
const OWNED: Sql = Sql::same(
    "SELECT id, tenant, agent, run_id, session_id, process, args, state_dir, supervisor_pid, supervisor_start, status, exit_code, signal, message, created_at, started_at, ended_at, host, boot_id FROM process_runs WHERE id = ?1 AND tenant = ?2 AND agent = ?3",
);
/// Whether a background run is recorded, whoever owns it.
const RECORDED: Sql = Sql::same("SELECT 1 FROM process_runs WHERE id = ?1");
const LIST: Sql = Sql::same(
    "SELECT id, tenant, agent, run_id, session_id, process, args, state_dir, supervisor_pid, supervisor_start, status, exit_code, signal, message, created_at, started_at, ended_at, host, boot_id FROM process_runs WHERE tenant = ?1 AND agent = ?2 ORDER BY created_at DESC, id DESC LIMIT ?3",
);
// Scans the table (no index on `run_id`): it holds a few rows per agent, and a run's
// end asks it once.
const UNFINISHED_OF_RUN: Sql = Sql::same(
    "SELECT id, tenant, agent, run_id, session_id, process, args, state_dir, supervisor_pid, supervisor_start, status, exit_code, signal, message, created_at, started_at, ended_at, host, boot_id FROM process_runs WHERE run_id = ?1 AND status IN ('starting', 'running') ORDER BY created_at, id",
);
// `?5` and `?6` are the statuses `allowed_from` lists (repeated when it lists one).
const MARK_RUNNING: Sql = Sql::same(
    "UPDATE process_runs SET status = ?2, supervisor_pid = ?3, supervisor_start = ?4, started_at = ?7 WHERE id = ?1 AND (status = ?5 OR status = ?6)",
);
const FINISH: Sql = Sql::same(
    "UPDATE process_runs SET status = ?2, exit_code = ?3, signal = ?4, message = ?7, ended_at = ?8 WHERE id = ?1 AND (status = ?5 OR status = ?6)",
);

/// The two statuses a change may come from, as the statements bind them.
fn from_params(to: ProcessStatus) -> [Param; 2] {
    let from = to.allowed_from();
    let first = from.first().copied().unwrap_or(to);
    let second = from.get(1).copied().unwrap_or(first);
    [first.as_str().into(), second.as_str().into()]
}

fn decode(row: &Row) -> Result<ProcessRunRecord> {
    let status: String = row.get(10)?;
    let status = ProcessStatus::parse(&status).ok_or_else(|| {
        JournalError::Backend(format!("process run with an unknown status `{status}`"))
    })?;
    let args: Value = row.get(6)?;
    Ok(ProcessRunRecord {
        id: row.get(0)?,
        tenant: row.get(1)?,
        agent: row.get(2)?,
        run_id: row.get(3)?,
        session_id: row.get(4)?,
        process: row.get(5)?,
        args,
        state_dir: row.get(7)?,
        supervisor_pid: row.get(8)?,
        supervisor_start: row.get(9)?,
        status,
        exit_code: row.get::<Option<i64>>(11)?.map(narrow),
        signal: row.get::<Option<i64>>(12)?.map(narrow),
        message: row.get(13)?,
        created_at: row.get(14)?,
        started_at: row.get(15)?,
        ended_at: row.get(16)?,
        host: row.get(17)?,
        boot_id: row.get(18)?,
    })
}

fn narrow(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MIN)
}

async fn by_id(x: &mut dyn Executor, id: &str) -> Result<ProcessRunRecord> {
    match x.row(&BY_ID, &[id.into()]).await? {
        Some(row) => decode(&row),
        None => Err(JournalError::NotFound {
            what: "process run",
            id: id.to_owned(),
        }),
    }
}

/// The rule of a start: the run is recorded `starting`, unless a run of that id exists
/// already, which is returned as it is.
async fn insert_rule(x: &mut dyn Executor, new: NewProcessRun, now: i64) -> Result<Inserted> {
    if let Some(row) = x.row(&BY_ID, &[new.id.as_str().into()]).await? {
        return Ok(Inserted::Existing(decode(&row)?));
    }
    x.run(
        &INSERT,
        &[
            new.id.as_str().into(),
            new.tenant.into(),
            new.agent.into(),
            new.run_id.into(),
            new.session_id.into(),
            new.process.into(),
            Param::Json(new.args),
            new.state_dir.into(),
            ProcessStatus::Starting.as_str().into(),
            Param::Int(now),
            new.host.into(),
            new.boot_id.into(),
        ],
    )
    .await?;
    Ok(Inserted::New(by_id(x, &new.id).await?))
}

/// The rule of a status change: applied when the run's status allows it, and the run
/// as it is afterwards returned either way (a final run stays as it was).
async fn change_rule(
    x: &mut dyn Executor,
    id: String,
    to: ProcessStatus,
    sql: &'static Sql,
    head: [Param; 2],
    tail: Vec<Param>,
) -> Result<ProcessRunRecord> {
    // ?1 the id, ?2 the new status, ?3 and ?4 `head`, ?5 and ?6 the statuses it may
    // come from, ?7… `tail`.
    let [a, b] = head;
    let [f1, f2] = from_params(to);
    let mut params = vec![id.as_str().into(), to.as_str().into(), a, b, f1, f2];
    params.extend(tail);
    x.run(sql, &params).await?;
    by_id(x, &id).await
}

/// The background runs of every agent, in the journal's database.
#[derive(Debug)]
pub struct ProcessRuns {
    db: Db,
}

impl ProcessRuns {
    /// Open (creating and migrating) the journal's database at `url`
    /// (`sqlite://PATH` or `postgres://…`).
    pub async fn open(url: &str) -> Result<ProcessRuns> {
        let location = Location::parse(url)?;
        Self::open_at(&location).await
    }

    /// Open the journal's database at `location` (a PostgreSQL schema included).
    pub async fn open_at(location: &Location) -> Result<ProcessRuns> {
        let options = DbOptions {
            application_name: "toolshed-process-runs",
            sqlite_readers: 2,
            postgres_readers: 1,
            statement_cache: 16,
        };
        Ok(ProcessRuns {
            db: Db::open(location, &MIGRATIONS, options).await?,
        })
    }

    /// Record a run as `starting`; a run of that id recorded before is returned
    /// unchanged ([`Inserted::Existing`]).
    pub async fn insert(&self, new: NewProcessRun) -> Result<Inserted> {
        let now = toolshed_store::time::now_ms();
        self.db
            .write(move |x| Box::pin(insert_rule(x, new, now)))
            .await
    }

    /// The run is running under this supervisor (from `starting` only).
    pub async fn mark_running(
        &self,
        id: &str,
        supervisor_pid: u32,
        supervisor_start: u64,
        started_at: i64,
    ) -> Result<ProcessRunRecord> {
        let id = id.to_owned();
        let start = i64::try_from(supervisor_start).unwrap_or(i64::MAX);
        self.db
            .write(move |x| {
                Box::pin(change_rule(
                    x,
                    id,
                    ProcessStatus::Running,
                    &MARK_RUNNING,
                    [Param::Int(i64::from(supervisor_pid)), Param::Int(start)],
                    vec![Param::Int(started_at)],
                ))
            })
            .await
    }

    /// The run ended (from `starting` or `running`; a final run is returned as it is).
    pub async fn finish(&self, id: &str, end: ProcessEnd) -> Result<ProcessRunRecord> {
        if !end.status.is_final() {
            return Err(JournalError::Conflict(format!(
                "a process run cannot end as `{}`",
                end.status
            )));
        }
        let id = id.to_owned();
        self.db
            .write(move |x| {
                Box::pin(change_rule(
                    x,
                    id,
                    end.status,
                    &FINISH,
                    [
                        end.exit_code.map(i64::from).into(),
                        end.signal.map(i64::from).into(),
                    ],
                    vec![end.message.into(), Param::Int(end.ended_at)],
                ))
            })
            .await
    }

    /// The run `id` of this tenant's agent; another owner's run is `None`, as an
    /// unknown id is.
    pub async fn get(
        &self,
        tenant: &str,
        agent: &str,
        id: &str,
    ) -> Result<Option<ProcessRunRecord>> {
        let params: Vec<Param> = vec![id.into(), tenant.into(), agent.into()];
        self.db
            .read(move |x| {
                Box::pin(async move {
                    match x.row(&OWNED, &params).await? {
                        Some(row) => decode(&row).map(Some),
                        None => Ok(None),
                    }
                })
            })
            .await
    }

    /// Whether background run `id` is recorded, whoever owns it. A prune removes the
    /// records of ended ones; their state folders go when this says no.
    pub async fn recorded(&self, id: &str) -> Result<bool> {
        let params: Vec<Param> = vec![id.into()];
        self.db
            .read(move |x| Box::pin(async move { Ok(x.row(&RECORDED, &params).await?.is_some()) }))
            .await
    }

    /// The background runs that run `run_id` started and that are recorded as not
    /// ended (`starting` or `running`; a supervisor may have vanished since, which only
    /// a check of it tells), oldest first, whoever owns them.
    pub async fn unfinished_of_run(&self, run_id: &str) -> Result<Vec<ProcessRunRecord>> {
        let params: Vec<Param> = vec![run_id.into()];
        self.db
            .read(move |x| {
                Box::pin(async move {
                    x.rows(&UNFINISHED_OF_RUN, &params)
                        .await?
                        .iter()
                        .map(decode)
                        .collect::<Result<Vec<_>>>()
                })
            })
            .await
    }

    /// This tenant's agent's newest runs, at most `limit`.
    pub async fn list(
        &self,
        tenant: &str,
        agent: &str,
        limit: u32,
    ) -> Result<Vec<ProcessRunRecord>> {
        let params: Vec<Param> = vec![tenant.into(), agent.into(), Param::Int(i64::from(limit))];
        self.db
            .read(move |x| {
                Box::pin(async move {
                    x.rows(&LIST, &params)
                        .await?
                        .iter()
                        .map(decode)
                        .collect::<Result<Vec<_>>>()
                })
            })
            .await
    }
}
