//! Deciding gates from outside a run: approve, deny, answer. These only write the
//! journal; the decision takes effect when a driver resumes the run, so the process
//! that decides need not be the one that resumes.

use serde_json::{Value, json};
use toolshed_core::schema::{CompiledSchema, describe_violations};
use toolshed_core::{Crumb, CrumbKind};
use toolshed_journal::{Answer, CallRecord, Decision, Gate, Journal};

use crate::RuntimeError;
use crate::run::now_ms;

/// Approve a call waiting for approval. Approving twice, or a call that awaits no
/// approval, is a `CONFLICT` error that says what the call is waiting for.
pub async fn approve(
    journal: &dyn Journal,
    call_id: &str,
    by: &str,
    reason: Option<String>,
) -> Result<CallRecord, RuntimeError> {
    decide(journal, call_id, true, by, reason).await
}

/// Deny a call waiting for approval: on resume it becomes an error result naming who
/// denied it and why.
pub async fn deny(
    journal: &dyn Journal,
    call_id: &str,
    by: &str,
    reason: Option<String>,
) -> Result<CallRecord, RuntimeError> {
    decide(journal, call_id, false, by, reason).await
}

async fn decide(
    journal: &dyn Journal,
    call_id: &str,
    approved: bool,
    by: &str,
    reason: Option<String>,
) -> Result<CallRecord, RuntimeError> {
    let decision = Decision {
        approved,
        by: by.to_owned(),
        reason: reason.clone(),
        at_ms: now_ms(),
    };
    let rec = journal.decide(call_id, decision).await?;
    crumb(
        journal,
        &rec,
        CrumbKind::ApprovalDecided,
        json!({"call_id": rec.call_id, "approved": approved, "by": by, "reason": reason}),
    )
    .await;
    Ok(rec)
}

/// Answer a human tool. The answer is validated against the tool's answer schema; a bad
/// answer is refused with every violation and the run stays parked.
pub async fn answer(
    journal: &dyn Journal,
    call_id: &str,
    value: Value,
    by: &str,
) -> Result<CallRecord, RuntimeError> {
    let rec = journal.get_call(call_id).await?;
    if let Some(Gate::Answer { schema }) = &rec.gate {
        let compiled = CompiledSchema::compile(schema, "answer_schema").map_err(|e| {
            RuntimeError::InvalidAnswer {
                call_id: call_id.to_owned(),
                details: e.to_string(),
                violations: Vec::new(),
            }
        })?;
        if let Err(violations) = compiled.validate(&value) {
            return Err(RuntimeError::InvalidAnswer {
                call_id: call_id.to_owned(),
                details: describe_violations("invalid answer", &violations),
                violations,
            });
        }
    }
    // The journal refuses calls that are not waiting for an answer, with the reason.
    let rec = journal
        .answer(
            call_id,
            Answer {
                value,
                by: by.to_owned(),
                at_ms: now_ms(),
            },
        )
        .await?;
    crumb(
        journal,
        &rec,
        CrumbKind::Answered,
        json!({"call_id": rec.call_id, "by": by}),
    )
    .await;
    Ok(rec)
}

/// Journal a decision crumb directly: the deciding process has no pipeline or driver.
async fn crumb(journal: &dyn Journal, rec: &CallRecord, kind: CrumbKind, payload: Value) {
    let value = match journal.get_run(&rec.run_id).await {
        Ok(run) => {
            let ctx = toolshed_core::RunContext::builder()
                .agent_id(run.agent_id)
                .run_id(run.id)
                .session_id(run.session_id)
                .build();
            let c = Crumb::new(kind, &ctx, &rec.tool_call_id, &rec.tool).with_payload(payload);
            serde_json::to_value(&c).unwrap_or(Value::Null)
        }
        Err(_) => return,
    };
    if let Err(e) = journal.append_crumbs(&rec.run_id, vec![value]).await {
        tracing::error!(run_id = %rec.run_id, error = %e, "cannot journal a decision crumb");
    }
}
