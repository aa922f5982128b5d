//! The journal's reads, written once over an [`Executor`]: they run on the read
//! connections of either database, beside the writer.

use std::sync::LazyLock;

use toolshed_store::sql::Query;
use toolshed_store::{Executor, Sql};

use crate::rules::{
    CALL_COLUMNS, RUN_COLUMNS, RUN_MUTABLE, any_status, call_from_row, columns, crumb_from_row,
    not_found_run, run_from_row,
};
use crate::{CallRecord, CallStatus, CrumbRecord, GateFilter, Result, RunFilter, RunRecord};

static RUN_BY_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM runs WHERE id = ?1",
        columns(&RUN_COLUMNS, "")
    )
});

static CALL_BY_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM calls WHERE call_id = ?1",
        columns(&CALL_COLUMNS, "")
    )
});

static CALLS_OF_RUN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {} FROM calls WHERE run_id = ?1 ORDER BY ordinal",
        columns(&CALL_COLUMNS, "")
    )
});

const RUN_EXISTS: Sql = Sql::same("SELECT 1 FROM runs WHERE id = ?1");

const CRUMBS_OF_RUN: Sql =
    Sql::same("SELECT seq, crumb FROM crumbs WHERE run_id = ?1 ORDER BY seq");

/// Newest first; runs created in the same millisecond by insertion order (SQLite's
/// `rowid`, PostgreSQL's identity column `seq`).
const NEWEST_FIRST: Sql = Sql::per_dialect(
    " ORDER BY created_at_ms DESC, rowid DESC LIMIT ",
    " ORDER BY created_at_ms DESC, seq DESC LIMIT ",
);

/// A run, if it exists.
pub(crate) async fn run(db: &mut dyn Executor, id: &str) -> Result<Option<RunRecord>> {
    let rows = db.query(&RUN_BY_ID, &[id.into()]).await?;
    rows.first().map(run_from_row).transpose()
}

/// A call, if it exists.
pub(crate) async fn call(db: &mut dyn Executor, call_id: &str) -> Result<Option<CallRecord>> {
    let rows = db.query(&CALL_BY_ID, &[call_id.into()]).await?;
    rows.first().map(call_from_row).transpose()
}

async fn run_exists(db: &mut dyn Executor, id: &str) -> Result<bool> {
    Ok(db.row(&RUN_EXISTS, &[id.into()]).await?.is_some())
}

/// Runs newest first, filtered.
pub(crate) async fn runs(db: &mut dyn Executor, filter: &RunFilter) -> Result<Vec<RunRecord>> {
    let mut q = Query::new(&format!(
        "SELECT {} FROM runs WHERE 1 = 1",
        columns(&RUN_COLUMNS, "")
    ));
    if let Some(status) = filter.status {
        q.push(" AND status = ").bind(status.as_str());
    }
    if let Some(agent_id) = &filter.agent_id {
        q.push(" AND agent_id = ").bind(agent_id);
    }
    if let Some(tenant) = &filter.tenant {
        q.push(" AND tenant = ").bind(tenant);
    }
    let limit = if filter.limit == 0 { 100 } else { filter.limit };
    q.push(NEWEST_FIRST.text(db.dialect())).bind(limit);
    let (sql, params) = q.parts();
    db.query(sql, params)
        .await?
        .iter()
        .map(run_from_row)
        .collect()
}

/// Every call of a run, by ordinal; an unknown run is `NotFound`.
pub(crate) async fn calls_of_run(db: &mut dyn Executor, run_id: &str) -> Result<Vec<CallRecord>> {
    let calls: Vec<CallRecord> = db
        .query(&CALLS_OF_RUN, &[run_id.into()])
        .await?
        .iter()
        .map(call_from_row)
        .collect::<Result<_>>()?;
    if calls.is_empty() && !run_exists(db, run_id).await? {
        return Err(not_found_run(run_id));
    }
    Ok(calls)
}

/// Calls waiting for a human, oldest first. The condition on the status is the partial
/// index's own predicate, so that both planners use it.
pub(crate) async fn pending_gates(
    db: &mut dyn Executor,
    filter: &GateFilter,
) -> Result<Vec<CallRecord>> {
    let mut q = Query::new(&format!(
        "SELECT {} FROM calls c JOIN runs r ON r.id = c.run_id WHERE {}",
        columns(&CALL_COLUMNS, "c."),
        any_status(
            "c",
            [
                CallStatus::AwaitingApproval.as_str(),
                CallStatus::AwaitingAnswer.as_str()
            ]
        )
    ));
    // A gate of a finished (cancelled, failed) run waits for nobody.
    q.push(" AND ")
        .push(&any_status("r", RUN_MUTABLE.iter().map(|s| s.as_str())));
    if let Some(run_id) = &filter.run_id {
        q.push(" AND c.run_id = ").bind(run_id);
    }
    if let Some(tenant) = &filter.tenant {
        q.push(" AND r.tenant = ").bind(tenant);
    }
    q.push(" ORDER BY c.created_at_ms, c.run_id, c.ordinal");
    let (sql, params) = q.parts();
    db.query(sql, params)
        .await?
        .iter()
        .map(call_from_row)
        .collect()
}

/// A run's crumbs in order; an unknown run is `NotFound`.
pub(crate) async fn crumbs_of_run(db: &mut dyn Executor, run_id: &str) -> Result<Vec<CrumbRecord>> {
    let crumbs: Vec<CrumbRecord> = db
        .rows(&CRUMBS_OF_RUN, &[run_id.into()])
        .await?
        .iter()
        .map(|row| crumb_from_row(run_id, row))
        .collect::<Result<_>>()?;
    if crumbs.is_empty() && !run_exists(db, run_id).await? {
        return Err(not_found_run(run_id));
    }
    Ok(crumbs)
}
