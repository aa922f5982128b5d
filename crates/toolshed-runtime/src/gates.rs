//! Deciding gates from outside a run: approve, deny, answer. These only write the
//! journal; the decision takes effect when a driver resumes the run, so the process
//! that decides need not be the one that resumes.
//!
//! A decision records who, when, why and the tool revision it was made for (the
//! gate's), on the call and in an `approval_decided` crumb of the run: the audit trail.
//! Four-eyes (the tool's `approval.four_eyes`, or [`ApprovalPolicy::four_eyes`] for a
//! whole server) refuses an approval by whoever asked for the call.

use serde_json::{Value, json};
use toolshed_core::schema::{CompiledSchema, describe_violations};
use toolshed_core::{Crumb, CrumbKind};
use toolshed_journal::{Answer, CallRecord, Decision, Gate, Journal};

use crate::RuntimeError;
use crate::run::now_ms;

/// What a deployment adds to every tool's own approval rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Four-eyes for every gated call (`toolshed serve --four-eyes`), not only those of
    /// tools that declare `approval.four_eyes`.
    pub four_eyes: bool,
}

/// Approve a call waiting for approval. Approving twice, or a call that awaits no
/// approval, is a `CONFLICT` error that says what the call is waiting for; a call of a
/// four-eyes tool approved by whoever asked for it is [`RuntimeError::SelfApproval`].
pub async fn approve(
    journal: &dyn Journal,
    call_id: &str,
    by: &str,
    reason: Option<String>,
) -> Result<CallRecord, RuntimeError> {
    approve_under(journal, call_id, by, reason, ApprovalPolicy::default()).await
}

/// [`approve`] under a deployment's policy as well as the tool's.
pub async fn approve_under(
    journal: &dyn Journal,
    call_id: &str,
    by: &str,
    reason: Option<String>,
    policy: ApprovalPolicy,
) -> Result<CallRecord, RuntimeError> {
    decide(journal, call_id, true, by, reason, policy).await
}

/// Deny a call waiting for approval: on resume it becomes an error result naming who
/// denied it and why.
pub async fn deny(
    journal: &dyn Journal,
    call_id: &str,
    by: &str,
    reason: Option<String>,
) -> Result<CallRecord, RuntimeError> {
    // Denying one's own call is always allowed: four-eyes guards running a call, and a
    // denial runs nothing.
    decide(
        journal,
        call_id,
        false,
        by,
        reason,
        ApprovalPolicy::default(),
    )
    .await
}

async fn decide(
    journal: &dyn Journal,
    call_id: &str,
    approved: bool,
    by: &str,
    reason: Option<String>,
    policy: ApprovalPolicy,
) -> Result<CallRecord, RuntimeError> {
    // The gate says which revision is being decided and who asked. The journal's own
    // conditional write refuses a call that is not waiting (with who decided it); this
    // read only adds what the decision is about.
    let current = journal.get_call(call_id).await?;
    let (revision, tool_four_eyes, requested_by) = match &current.gate {
        Some(Gate::Approval {
            revision,
            four_eyes,
            requested_by,
            ..
        }) => (revision.clone(), *four_eyes, requested_by.clone()),
        _ => (None, false, None),
    };
    if approved && (tool_four_eyes || policy.four_eyes) {
        let policy = if tool_four_eyes {
            "the tool's approval.four_eyes"
        } else {
            "the server's --four-eyes"
        };
        // A gate recorded before gates kept their requester: the run's principal asked.
        let requested_by = match requested_by {
            Some(who) => Some(who),
            None => journal
                .get_run(&current.run_id)
                .await?
                .principal
                .map(|p| p.sub),
        };
        match &requested_by {
            Some(who) if who != by => {}
            _ => {
                return Err(RuntimeError::SelfApproval {
                    call_id: call_id.to_owned(),
                    requested_by,
                    policy,
                });
            }
        }
    }
    let at_ms = now_ms();
    let decision = Decision {
        approved,
        by: by.to_owned(),
        reason: reason.clone(),
        at_ms,
        revision: revision.clone(),
    };
    let rec = journal.decide(call_id, decision).await?;
    crumb(
        journal,
        &rec,
        CrumbKind::ApprovalDecided,
        json!({
            "call_id": rec.call_id,
            "approved": approved,
            "by": by,
            "reason": reason,
            "revision": revision,
            "at_ms": at_ms,
        }),
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
            match serde_json::value::to_raw_value(&c) {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!(run_id = %rec.run_id, error = %e, "cannot serialize a decision crumb");
                    return;
                }
            }
        }
        Err(_) => return,
    };
    if let Err(e) = journal.append_crumbs(&rec.run_id, vec![value]).await {
        tracing::error!(run_id = %rec.run_id, error = %e, "cannot journal a decision crumb");
    }
}
