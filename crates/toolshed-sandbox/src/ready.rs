//! Sandboxes started ahead of their command, for one-shot runs (`Sandbox::run`) without
//! binds and with the network off: the shape of inline code run once (the seed's
//! `POST /api/v1/tools/sandbox/execute`). Each waits in its namespaces and cgroup, with its root pivoted and
//! everything locked down (capabilities, Landlock, seccomp), for the command on its go
//! socket; a run then pays for that command's exec only.
//!
//! The rules:
//! - a sandbox started ahead serves exactly one run, then dies with it like any other;
//! - it is made for the start-relevant limits of the run that asked for it (the
//!   [`key`]); a run of other limits does not take it, and replaces it with one of its
//!   own limits, so a server whose runs share one shape keeps hitting;
//! - the first eligible run of a [`Sandbox`](crate::Sandbox) starts none, so a one-shot
//!   process (the CLI) makes nothing it does not use; from the second on, each run
//!   asks for the stock to be refilled once it has ended (while it runs, a start's
//!   kernel work on the other core slows the tool by about what it saves);
//! - a start that finds the uid pool exhausted gives the waiting sandboxes up first.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::config::Limits;
use crate::sandbox::Inner;
use crate::spawn::Waiting;

/// The part of the limits a start sets (the wall-clock timeout and the output caps are
/// the supervisor's own, applied after the start).
pub(crate) fn key(limits: &Limits) -> Limits {
    Limits {
        timeout_ms: 0,
        stdout_bytes: 0,
        stderr_bytes: 0,
        ..*limits
    }
}

/// The stock of waiting sandboxes.
#[derive(Debug, Default)]
pub(crate) struct Ready {
    items: Mutex<Vec<(Limits, Waiting)>>,
    /// A refill is under way.
    refilling: AtomicBool,
    /// Eligible runs so far (the first asks for no refill).
    runs: AtomicU64,
    /// Runs served by a sandbox started ahead.
    served: AtomicU64,
}

impl Ready {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Limits, Waiting)>> {
        self.items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many wait now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().len()
    }

    /// How many runs a sandbox started ahead has served.
    pub(crate) fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Counts a served run.
    pub(crate) fn count_served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a waiting sandbox made for `key`. Those made for other limits are given up
    /// (killed and cleaned up on the janitor thread).
    pub(crate) fn take(&self, key: &Limits) -> Option<Waiting> {
        let stale: Vec<(Limits, Waiting)>;
        let found = {
            let mut items = self.lock();
            let found = items
                .iter()
                .position(|(k, _)| k == key)
                .map(|i| items.swap_remove(i).1);
            stale = items.extract_if(.., |(k, _)| k != key).collect();
            found
        };
        drop(stale);
        found
    }

    /// Gives every waiting sandbox up (their uids return to the pool).
    pub(crate) fn clear(&self) {
        let items = std::mem::take(&mut *self.lock());
        drop(items);
    }

    /// Called by each eligible run once it has ended: from the second run on, starts
    /// sandboxes ahead for `key` until `started_ahead` wait, unless a refill is under
    /// way. Needs a tokio runtime (without one, nothing is started).
    pub(crate) fn refill(inner: &Arc<Inner>, key: Limits) {
        let ready = &inner.ready;
        let size = inner.config.started_ahead;
        if size == 0 || ready.runs.fetch_add(1, Ordering::Relaxed) == 0 {
            return;
        }
        if ready.waiting() >= size || ready.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            ready.refilling.store(false, Ordering::Release);
            return;
        };
        let inner = inner.clone();
        runtime.spawn(async move {
            let ready = &inner.ready;
            // Cleared however the task ends, a runtime shutting down under it included,
            // so a later run can refill again.
            let _refilling = Refilling(&ready.refilling);
            while ready.waiting() < size {
                match crate::spawn::start_ahead(&inner, &key).await {
                    Ok(waiting) => ready.lock().push((key, waiting)),
                    Err(e) => {
                        tracing::warn!(error = %e, code = %e.code(), "cannot start a sandbox ahead");
                        break;
                    }
                }
            }
        });
    }
}

/// Clears the refill flag when dropped.
struct Refilling<'a>(&'a AtomicBool);

impl Drop for Refilling<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
