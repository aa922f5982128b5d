//! A run being driven: assigns ordinals, replays recorded calls, parks gated ones,
//! records everything else. See `docs/design/durable-runs.md`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolshed_core::{
    CallOutcome, Crumb, CrumbKind, ErrorCode, ExecuteOptions, Idempotency, RunContext, ToolCall,
    ToolError,
};
use toolshed_journal::{CallRecord, CallResult, CallStatus, Gate, NewCall, RunRecord, RunStatus};

use crate::{RevisionChange, Runtime, RuntimeConfig, RuntimeError, args_hash, tool_revision};

/// What became of one call in a durable run.
#[derive(Debug, Clone, PartialEq)]
pub enum CallStep {
    /// The call has its result (executed now, or replayed from the journal).
    Done(CallOutcome),
    /// The call waits for a person; the run parks when the driver finishes.
    Parked(PendingGate),
}

/// A call waiting for a person.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingGate {
    /// The call's global id: approve, deny or answer by this id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// What it waits for.
    pub gate: Gate,
}

/// A run being driven by this process. Cheap to clone; calls may be issued concurrently.
#[derive(Clone, Debug)]
pub struct RunHandle {
    inner: Arc<RunState>,
}

#[derive(Debug)]
struct RunState {
    runtime: Runtime,
    run: RunRecord,
    ctx: RunContext,
    recorded: Mutex<HashMap<u32, CallRecord>>,
    next_ordinal: AtomicU32,
    parked: Mutex<Vec<PendingGate>>,
    deadline: Option<Instant>,
}

pub(crate) fn context_for(
    run: &RunRecord,
    config: &RuntimeConfig,
    attended: &Attended,
) -> RunContext {
    run_context(
        &run.agent_id,
        &run.id,
        &run.session_id,
        run.principal.as_ref(),
        config,
        attended,
    )
}

/// What the surface driving a run gives it beside its record: nothing of it is
/// recorded, and it lasts as long as this drive. Today: who answers the questions its
/// tools ask ([`toolshed_core::ask`]), when the run was started by an MCP client that
/// can.
#[derive(Clone, Default)]
pub struct Attended {
    /// Carries the tools' questions to the client of the call.
    pub asker: Option<Arc<dyn toolshed_core::Asker>>,
}

impl std::fmt::Debug for Attended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attended")
            .field("asker", &self.asker.is_some())
            .finish()
    }
}

/// The context handlers of a run see: its ids and principal, and the runtime's env,
/// credentials and blob store.
pub(crate) fn run_context(
    agent_id: &str,
    run_id: &str,
    session_id: &str,
    principal: Option<&toolshed_core::Principal>,
    config: &RuntimeConfig,
    attended: &Attended,
) -> RunContext {
    let mut b = RunContext::builder()
        .agent_id(agent_id.to_owned())
        .run_id(run_id.to_owned())
        .session_id(session_id.to_owned())
        .env(config.env.clone())
        .secrets(config.secrets.clone());
    if let Some(p) = principal {
        b = b.principal(p.clone());
    }
    if let Some(c) = &config.credentials {
        b = b.credentials(c.clone());
    }
    if let Some(s) = &config.blob_store {
        b = b.blob_store(s.clone());
    }
    if let Some(a) = &config.attachments {
        b = b.attachments(a.clone());
    }
    if let Some(a) = &attended.asker {
        b = b.asker(a.clone());
    }
    b.build()
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl RunHandle {
    pub(crate) async fn begin(
        runtime: Runtime,
        run_id: String,
        attended: &Attended,
    ) -> Result<Self, RuntimeError> {
        let journal = runtime.journal().clone();
        let current = journal.get_run(&run_id).await?;
        if current.status.is_final() {
            return Err(RuntimeError::RunFinished {
                run_id,
                status: current.status,
            });
        }
        // Read before the drive begins: an approved call whose tool changed since its
        // approval is asked again, and the run stays parked, before anything runs.
        let calls = journal.calls_of_run(&run_id).await?;
        ask_again_if_changed(&runtime, &current, &calls).await?;
        let run = journal.begin_drive(&run_id).await?;
        let ctx = context_for(&run, runtime.config(), attended);
        // Budgets: checked before anything runs, so a spent run never executes a call.
        if let Some(max) = run.budgets.max_attempts_per_task
            && run.resumes > max
        {
            let reason = format!(
                "budget exhausted: max_attempts_per_task is {max} and the run was started {} times \
                     (each start after a crash counts)",
                run.resumes
            );
            return Err(fail(&runtime, &run, &ctx, reason).await);
        }
        let deadline = match run.budgets.max_wall_clock_min {
            Some(min) => {
                let end_ms = run.created_at_ms + i64::from(min) * 60_000;
                let left = end_ms - now_ms();
                if left <= 0 {
                    let reason = format!(
                        "budget exhausted: max_wall_clock_min is {min} and the run started {} minutes ago",
                        (now_ms() - run.created_at_ms) / 60_000
                    );
                    return Err(fail(&runtime, &run, &ctx, reason).await);
                }
                Some(Instant::now() + Duration::from_millis(left as u64))
            }
            None => None,
        };
        // The calls read above are the drive's record: an approved call among them was
        // checked against its tool's revision, so none runs unchecked.
        let recorded: HashMap<u32, CallRecord> =
            calls.into_iter().map(|c| (c.ordinal, c)).collect();
        runtime.pipeline().crumbs().emit(
            Crumb::new(CrumbKind::RunResumed, &ctx, "", "")
                .with_payload(json!({"resumes": run.resumes, "recorded_calls": recorded.len()})),
        );
        Ok(RunHandle {
            inner: Arc::new(RunState {
                runtime,
                run,
                ctx,
                recorded: Mutex::new(recorded),
                next_ordinal: AtomicU32::new(0),
                parked: Mutex::new(Vec::new()),
                deadline,
            }),
        })
    }

    /// The run as it was when this drive began.
    pub fn record(&self) -> &RunRecord {
        &self.inner.run
    }

    /// The run id.
    pub fn id(&self) -> &str {
        &self.inner.run.id
    }

    /// Issue the next call of the run.
    pub async fn call(&self, call: ToolCall) -> Result<CallStep, RuntimeError> {
        let ordinal = self.inner.next_ordinal.fetch_add(1, Ordering::SeqCst);
        self.call_at(ordinal, call).await
    }

    /// Issue the calls of one model turn: ordinals are assigned in the order given, the
    /// calls run concurrently, gated ones park while the others run and are recorded.
    pub async fn call_many(&self, calls: Vec<ToolCall>) -> Result<Vec<CallStep>, RuntimeError> {
        let first = self
            .inner
            .next_ordinal
            .fetch_add(calls.len() as u32, Ordering::SeqCst);
        let handles: Vec<_> = calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| {
                let this = self.clone();
                tokio::spawn(async move { this.call_at(first + i as u32, call).await })
            })
            .collect();
        let mut steps = Vec::with_capacity(handles.len());
        let mut first_error = None;
        for h in handles {
            match h.await {
                Ok(Ok(step)) => steps.push(step),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(RuntimeError::TaskFailed(e.to_string()));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(steps),
        }
    }

    /// The calls of this drive that wait for a person.
    pub fn parked(&self) -> Vec<PendingGate> {
        self.inner
            .parked
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// End this drive: the run parks if any call waits for a person, else it completes.
    pub async fn finish(&self) -> Result<RunRecord, RuntimeError> {
        let parked = self.parked();
        let (status, kind) = if parked.is_empty() {
            (RunStatus::Completed, CrumbKind::RunCompleted)
        } else {
            (RunStatus::Parked, CrumbKind::RunParked)
        };
        let record = self
            .inner
            .runtime
            .journal()
            .set_run_status(self.id(), status, None)
            .await?;
        let waiting: Vec<&str> = parked.iter().map(|p| p.call_id.as_str()).collect();
        self.emit(
            Crumb::new(kind, &self.inner.ctx, "", "").with_payload(json!({"waiting_for": waiting})),
        );
        self.inner.runtime.journal_crumbs().flush().await;
        Ok(record)
    }

    /// End this drive by failing the run (the driver decided it cannot go on).
    pub async fn fail(&self, reason: impl Into<String>) -> Result<RunRecord, RuntimeError> {
        let reason = reason.into();
        let record = self
            .inner
            .runtime
            .journal()
            .set_run_status(self.id(), RunStatus::Failed, Some(reason.clone()))
            .await?;
        self.emit(
            Crumb::new(CrumbKind::RunFailed, &self.inner.ctx, "", "")
                .with_payload(json!({"reason": reason})),
        );
        self.inner.runtime.journal_crumbs().flush().await;
        Ok(record)
    }

    fn emit(&self, crumb: Crumb) {
        self.inner.runtime.pipeline().crumbs().emit(crumb);
    }

    async fn call_at(&self, ordinal: u32, call: ToolCall) -> Result<CallStep, RuntimeError> {
        let work = self.call_inner(ordinal, call);
        match self.inner.deadline {
            None => work.await,
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), work).await {
                Ok(r) => r,
                Err(_) => {
                    let min = self.inner.run.budgets.max_wall_clock_min.unwrap_or(0);
                    let reason = format!(
                        "budget exhausted: max_wall_clock_min is {min} and call #{ordinal} was still \
                         running when it ran out"
                    );
                    Err(fail(
                        &self.inner.runtime,
                        &self.inner.run,
                        &self.inner.ctx,
                        reason,
                    )
                    .await)
                }
            },
        }
    }

    async fn call_inner(&self, ordinal: u32, call: ToolCall) -> Result<CallStep, RuntimeError> {
        let state = &self.inner;
        let journal = state.runtime.journal();
        let hash = args_hash(&call.args);
        let recorded = state
            .recorded
            .lock()
            .ok()
            .and_then(|m| m.get(&ordinal).cloned());
        if let Some(rec) = &recorded {
            if rec.tool != call.name || rec.args_hash != hash {
                return Err(RuntimeError::NonDeterminism {
                    run_id: state.run.id.clone(),
                    ordinal,
                    recorded_tool: rec.tool.clone(),
                    recorded_hash: rec.args_hash.chars().take(12).collect(),
                    asked_tool: call.name.clone(),
                    asked_hash: hash.chars().take(12).collect(),
                });
            }
            match rec.status {
                CallStatus::Completed | CallStatus::Failed => {
                    let outcome = replayed(rec);
                    self.emit(
                        Crumb::new(CrumbKind::Replayed, &state.ctx, &rec.tool_call_id, &rec.tool)
                            .with_payload(json!({"ordinal": ordinal, "call_id": rec.call_id, "ok": outcome.result.is_ok()})),
                    );
                    return Ok(CallStep::Done(outcome));
                }
                CallStatus::AwaitingApproval | CallStatus::AwaitingAnswer => {
                    return Ok(self.park(rec));
                }
                _ => {}
            }
        }

        let pipeline = state.runtime.pipeline();
        let tool_call_id = recorded
            .as_ref()
            .map(|r| r.tool_call_id.clone())
            .unwrap_or_else(|| call.id.clone());
        let raw_args = call.args.clone();
        let call = ToolCall {
            id: tool_call_id.clone(),
            ..call
        };
        let name = call.name.clone();
        let new_call = || NewCall {
            call_id: uuid::Uuid::now_v7().to_string(),
            run_id: state.run.id.clone(),
            ordinal,
            tool_call_id: tool_call_id.clone(),
            tool: name.clone(),
            args_hash: hash.clone(),
            args: raw_args.clone(),
        };

        // Steps 1–2: resolve and validate. A failure is an error result, recorded like any.
        let prepared = match pipeline.prepare(&state.ctx, call) {
            Ok(p) => p,
            Err(outcome) => {
                let rec = self.recorded_or_open(recorded, &new_call).await?;
                return self.finish_call(&rec, outcome).await.map(CallStep::Done);
            }
        };
        let spec = prepared.tool().spec().clone();
        let keyed = spec.idempotency == Idempotency::Keyed;
        let gated_now = match &recorded {
            // An approved call is past its gate; a started one was past it before a crash.
            Some(r) => matches!(r.status, CallStatus::Open),
            None => true,
        };

        // Step 4: the gates.
        if gated_now {
            let gate = if spec.human {
                Some(Gate::Answer {
                    schema: spec.output_schema.clone().unwrap_or(json!({})),
                })
            } else {
                match prepared.needs_approval(&state.ctx).await {
                    Ok(false) => None,
                    Ok(true) => Some(Gate::Approval {
                        reason: spec.approval.describe(),
                        revision: Some(tool_revision(&spec)),
                        four_eyes: spec.four_eyes,
                        requested_by: state.run.principal.as_ref().map(|p| p.sub.clone()),
                        requested_at_ms: Some(now_ms()),
                        superseded: Vec::new(),
                    }),
                    Err(err) => {
                        let rec = self.recorded_or_open(recorded, &new_call).await?;
                        let outcome =
                            pipeline.finish_prepared(&state.ctx, &prepared, Err(err), 0, &[]);
                        return self.finish_call(&rec, outcome).await.map(CallStep::Done);
                    }
                }
            };
            if let Some(gate) = gate {
                let rec = self.recorded_or_open(recorded, &new_call).await?;
                let kind = match gate {
                    Gate::Answer { .. } => CrumbKind::AnswerRequested,
                    Gate::Approval { .. } => CrumbKind::ApprovalRequested,
                };
                let rec = journal.record_gate(&rec.call_id, gate).await?;
                self.emit(
                    Crumb::new(kind, &state.ctx, &rec.tool_call_id, &rec.tool).with_payload(
                        json!({"call_id": rec.call_id, "args": rec.args, "gate": rec.gate}),
                    ),
                );
                return Ok(self.park(&rec));
            }
        }

        // Step 6: a keyed call is durably Started before its handler runs (one write for
        // a new call); past max_attempts starts (crashes), it fails closed instead.
        let rec = match (recorded, keyed) {
            (None, true) => journal.open_and_start(new_call()).await?.call,
            (None, false) => journal.open_call(new_call()).await?,
            (Some(rec), true) => {
                if let Some(max) = spec.max_attempts
                    && rec.attempts >= max
                {
                    let err = ToolError::new(
                        ErrorCode::AttemptsExhausted,
                        format!(
                            "tool {} was started {} times without completing (max_attempts = {max}); \
                                 failing closed instead of running it again",
                            spec.name, rec.attempts
                        ),
                    );
                    let outcome = pipeline.finish_prepared(&state.ctx, &prepared, Err(err), 0, &[]);
                    return self.finish_call(&rec, outcome).await.map(CallStep::Done);
                }
                journal.record_started(&rec.call_id).await?;
                rec
            }
            (Some(rec), false) => rec,
        };

        // Steps 5, 7–10: hooks, execution, retries, output validation.
        let key = format!("{}:{ordinal}", state.run.id);
        let outcome = pipeline
            .execute(
                &state.ctx,
                prepared,
                ExecuteOptions {
                    idempotency_key: keyed.then_some(key),
                },
            )
            .await;
        self.finish_call(&rec, outcome).await.map(CallStep::Done)
    }

    /// The call's record: the one the journal had, or a newly opened one.
    async fn recorded_or_open(
        &self,
        recorded: Option<CallRecord>,
        new_call: &impl Fn() -> NewCall,
    ) -> Result<CallRecord, RuntimeError> {
        match recorded {
            Some(r) => Ok(r),
            None => Ok(self.inner.runtime.journal().open_call(new_call()).await?),
        }
    }

    /// Step 11: record the final result (the pipeline has fitted it into the call's
    /// output budget).
    async fn finish_call(
        &self,
        rec: &CallRecord,
        outcome: CallOutcome,
    ) -> Result<CallOutcome, RuntimeError> {
        self.inner
            .runtime
            .journal()
            .record_finished(&rec.call_id, call_result(&outcome))
            .await?;
        Ok(outcome)
    }

    fn park(&self, rec: &CallRecord) -> CallStep {
        let gate = PendingGate {
            call_id: rec.call_id.clone(),
            tool: rec.tool.clone(),
            gate: rec.gate.clone().unwrap_or_else(|| Gate::approval("")),
        };
        if let Ok(mut p) = self.inner.parked.lock() {
            p.push(gate.clone());
        }
        CallStep::Parked(gate)
    }
}

/// Refuse to drive a run holding an approved call whose tool is no longer at the
/// revision the approval was given for: each such call is asked again (back to
/// `awaiting_approval`, its gate at the current revision, the old decision kept in the
/// gate's `superseded`), the run is (or stays) parked, and the error names every one.
/// A gate without a revision was recorded before gates kept one and is not compared;
/// a call whose tool the runtime does not have fails on its own when it is issued.
async fn ask_again_if_changed(
    runtime: &Runtime,
    run: &RunRecord,
    calls: &[CallRecord],
) -> Result<(), RuntimeError> {
    let mut changes = Vec::new();
    for call in calls.iter().filter(|c| c.status == CallStatus::Approved) {
        let Some(Gate::Approval {
            revision: Some(approved),
            requested_by,
            superseded,
            ..
        }) = &call.gate
        else {
            continue;
        };
        let Some(tool) = runtime.pipeline().toolset().get(&call.tool) else {
            continue;
        };
        let spec = tool.spec();
        let current = tool_revision(spec);
        if &current == approved {
            continue;
        }
        let mut history = superseded.clone();
        history.extend(call.decision.clone());
        let gate = Gate::Approval {
            reason: match spec.approval {
                toolshed_core::Approval::Never => "the tool changed since it was approved".into(),
                ref a => a.describe(),
            },
            revision: Some(current.clone()),
            four_eyes: spec.four_eyes,
            requested_by: requested_by.clone(),
            requested_at_ms: Some(now_ms()),
            superseded: history,
        };
        let rec = runtime.journal().regate(&call.call_id, gate).await?;
        let ctx = context_for(run, runtime.config(), &Attended::default());
        runtime.pipeline().crumbs().emit(
            Crumb::new(
                CrumbKind::ApprovalRequested,
                &ctx,
                &rec.tool_call_id,
                &rec.tool,
            )
            .with_payload(json!({
                "call_id": rec.call_id,
                "args": rec.args,
                "gate": rec.gate,
                "revision_changed": {"approved": approved, "current": current},
            })),
        );
        changes.push(RevisionChange {
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            approved_revision: approved.clone(),
            current_revision: current,
            approved_by: call
                .decision
                .as_ref()
                .map(|d| d.by.clone())
                .unwrap_or_default(),
        });
    }
    if changes.is_empty() {
        return Ok(());
    }
    // A run left `running` by a crashed driver parks: its calls wait for people now.
    if run.status == RunStatus::Running {
        runtime
            .journal()
            .set_run_status(&run.id, RunStatus::Parked, None)
            .await?;
    }
    runtime.journal_crumbs().flush().await;
    Err(RuntimeError::RevisionChanged {
        run_id: run.id.clone(),
        changes,
    })
}

/// What the journal records of a finished call: the one place a [`CallOutcome`] becomes
/// a [`CallResult`] (ordinary runs and one-call runs alike).
pub(crate) fn call_result(outcome: &CallOutcome) -> CallResult {
    // The diagnostics are already scrubbed and capped by the pipeline; `replayed` reads
    // them back, so a resumed run reports what the call printed when it ran.
    CallResult {
        result: outcome.result.clone(),
        duration_ms: outcome.duration.as_secs_f64() * 1000.0,
        diagnostics: outcome.diagnostics.clone(),
    }
}

fn replayed(rec: &CallRecord) -> CallOutcome {
    let result = match (&rec.result, &rec.error) {
        (_, Some(e)) => Err(e.clone()),
        (Some(v), None) => Ok(v.clone()),
        (None, None) => Ok(Value::Null),
    };
    CallOutcome {
        tool_call_id: Arc::from(rec.tool_call_id.as_str()),
        tool_name: Arc::from(rec.tool.as_str()),
        result,
        duration: Duration::from_secs_f64(rec.duration_ms.unwrap_or(0.0).max(0.0) / 1000.0),
        attempts: rec.attempts,
        diagnostics: rec.diagnostics.clone(),
    }
}

/// Mark the run failed with `reason` and return the error for the driver.
pub(crate) async fn fail(
    runtime: &Runtime,
    run: &RunRecord,
    ctx: &RunContext,
    reason: String,
) -> RuntimeError {
    if let Err(e) = runtime
        .journal()
        .set_run_status(&run.id, RunStatus::Failed, Some(reason.clone()))
        .await
    {
        return e.into();
    }
    runtime.pipeline().crumbs().emit(
        Crumb::new(CrumbKind::RunFailed, ctx, "", "").with_payload(json!({"reason": reason})),
    );
    runtime.journal_crumbs().flush().await;
    RuntimeError::BudgetExhausted {
        run_id: run.id.clone(),
        reason,
    }
}
