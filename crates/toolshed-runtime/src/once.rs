//! One-call runs (the registry's execute): when the call needs nothing durable before
//! it executes, it runs first and the whole run is recorded in one journal write.
//!
//! Why this is safe: a call with `idempotency: none` records no Started entry in an
//! ordinary run either, so a crash before its result is recorded loses nothing an
//! ordinary run would have kept except an empty `running` run. Calls that must be
//! durable before they run (keyed, gated, human) take the ordinary path.
//!
//! Only a call with `effects: none` takes the shortcut: one that changes something
//! outside (`sandbox` or `external`, the default of registry Python tools and of MCP
//! tools without hints) is a run in the journal before it executes, so it shows as
//! `running` while it runs, and a caller that goes away (an MCP client's
//! `notifications/cancelled`, a dropped connection) leaves its run `cancelled`: a
//! side effect may have happened, and the journal says so.

use serde_json::json;
use toolshed_core::{Approval, Crumb, CrumbKind, Effects, Idempotency, ToolCall};
use toolshed_journal::{Budgets, NewCall, NewRun, RunRecord, RunStatus};

use crate::run::{Attended, CallStep, run_context};
use crate::{Runtime, RuntimeError, args_hash};

impl Runtime {
    /// A run that makes one call and ends: the run record after it, and the call's step.
    ///
    /// A call with `idempotency: none`, no approval and no budgets executes first, and
    /// its run (created, the call with its result, its crumbs, `completed`) is recorded
    /// in one journal write. Any other call takes the ordinary path: the run is created,
    /// the call is made (durably started, or parked at its gate), and the run finishes
    /// or parks.
    pub async fn run_once(
        &self,
        new: NewRun,
        call: ToolCall,
    ) -> Result<(RunRecord, CallStep), RuntimeError> {
        self.run_once_attended(new, call, &Attended::default())
            .await
    }

    /// [`Runtime::run_once`] with what the surface making the call gives the run.
    pub async fn run_once_attended(
        &self,
        new: NewRun,
        call: ToolCall,
        attended: &Attended,
    ) -> Result<(RunRecord, CallStep), RuntimeError> {
        let eligible = new.budgets == Budgets::default()
            && self.pipeline().toolset().get(&call.name).is_some_and(|t| {
                let s = t.spec();
                s.idempotency == Idempotency::None
                    && s.effects == Effects::None
                    && !s.human
                    && matches!(s.approval, Approval::Never)
            });
        if !eligible {
            let handle = self.start_attended(new, attended).await?;
            let mut gone = CancelIfDropped {
                runtime: self,
                run_id: Some(handle.id().to_owned()),
            };
            let step = handle.call(call).await?;
            let run = handle.finish().await?;
            gone.run_id = None;
            return Ok((run, step));
        }

        let ctx = run_context(
            &new.agent_id,
            &new.id,
            &new.session_id,
            new.principal.as_ref(),
            self.config(),
            attended,
        );
        let held = self.journal_crumbs().hold(&new.id);
        let hash = args_hash(&call.args);
        let new_call = NewCall {
            call_id: uuid::Uuid::now_v7().to_string(),
            run_id: new.id.clone(),
            ordinal: 0,
            tool_call_id: call.id.clone(),
            tool: call.name.clone(),
            args_hash: hash,
            args: call.args.clone(),
        };
        let outcome = self.pipeline().call(&ctx, call).await;
        self.pipeline().crumbs().emit(
            Crumb::new(CrumbKind::RunCompleted, &ctx, "", "")
                .with_payload(json!({"waiting_for": []})),
        );
        let held = held.take(self.pipeline().config().max_output_bytes);
        let result = crate::run::call_result(&outcome);
        let run = self
            .journal()
            .record_run(new, vec![(new_call, result)], held, RunStatus::Completed)
            .await?;
        Ok((run, CallStep::Done(outcome)))
    }
}

/// Cancels a one-call run whose caller went away before it ended: the future making
/// the call was dropped (its tool's process is killed with it), so nothing will finish
/// the run, and a `running` run nobody drives would stay so.
struct CancelIfDropped<'a> {
    runtime: &'a Runtime,
    /// `None` once the run ended (finished or parked) as it should.
    run_id: Option<String>,
}

impl Drop for CancelIfDropped<'_> {
    fn drop(&mut self) {
        let Some(run_id) = self.run_id.take() else {
            return;
        };
        // An error (the run could not be started, the journal refused a write) also
        // drops this; the run is then cancelled as well, which is what it is.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let runtime = self.runtime.clone();
        handle.spawn(async move {
            let reason = "the caller went away before the call ended".to_owned();
            if let Err(e) = runtime.cancel(&run_id, Some(reason)).await {
                tracing::warn!(run_id, error = %e, "could not mark an abandoned run cancelled");
            }
        });
    }
}
