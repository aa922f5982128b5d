//! Journals crumbs: a non-blocking sink on the pipeline's crumb bus that buffers crumbs,
//! and one task that appends them to the journal in order, in batches.
//!
//! Why a buffer and not a channel per crumb: waking a task for every crumb costs more
//! than the crumb is worth on the hot path of a keyed call. The sink pushes under a
//! short lock and wakes the writer only when the buffer was empty; the writer lingers
//! a moment so one append carries many crumbs. A flush (a drive ending) writes at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{Notify, oneshot};
use toolshed_core::{Crumb, CrumbSink};
use toolshed_journal::Journal;

/// How long crumbs wait for company before they are written.
const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

#[derive(Default)]
struct Buffer {
    crumbs: Vec<Arc<Crumb>>,
    flushes: Vec<oneshot::Sender<()>>,
    closed: bool,
    /// Crumbs of runs that are not in the journal yet (a one-call run records its run,
    /// call and crumbs in one write when it ends), kept aside by run id.
    held: HashMap<Arc<str>, Vec<Arc<Crumb>>>,
}

/// The sink. Cheap to clone; when the last clone is dropped, the writer task writes
/// what is left and ends (releasing the journal).
#[derive(Clone)]
pub(crate) struct JournalCrumbs {
    handle: Arc<Handle>,
}

struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Ok(mut b) = self.shared.buffer.lock() {
            b.closed = true;
        }
        self.shared.wake.notify_one();
    }
}

struct Shared {
    buffer: Mutex<Buffer>,
    wake: Notify,
}

impl std::fmt::Debug for JournalCrumbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JournalCrumbs")
    }
}

impl JournalCrumbs {
    /// Start the writer task. Payloads larger than `max_payload` bytes are replaced by a
    /// note, so an oversized result does not reach the journal through its crumb.
    pub(crate) fn start(journal: Arc<dyn Journal>, max_payload: usize) -> Self {
        let shared = Arc::new(Shared {
            buffer: Mutex::new(Buffer::default()),
            wake: Notify::new(),
        });
        let writer = shared.clone();
        tokio::spawn(async move {
            loop {
                writer.wake.notified().await;
                let urgent = writer
                    .buffer
                    .lock()
                    .map(|b| !b.flushes.is_empty() || b.closed)
                    .unwrap_or(true);
                if !urgent {
                    // Linger, unless a flush request arrives meanwhile.
                    let _ = tokio::time::timeout(LINGER, writer.wake.notified()).await;
                }
                let (crumbs, flushes, closed) = match writer.buffer.lock() {
                    Ok(mut b) => (
                        std::mem::take(&mut b.crumbs),
                        std::mem::take(&mut b.flushes),
                        b.closed,
                    ),
                    Err(_) => return,
                };
                write(&*journal, &crumbs, max_payload).await;
                for f in flushes {
                    let _ = f.send(());
                }
                if closed {
                    return;
                }
            }
        });
        JournalCrumbs {
            handle: Arc::new(Handle { shared }),
        }
    }

    /// Wait until every crumb emitted so far is in the journal.
    pub(crate) async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        let shared = &self.handle.shared;
        match shared.buffer.lock() {
            Ok(mut b) => b.flushes.push(tx),
            Err(_) => return,
        }
        shared.wake.notify_one();
        let _ = rx.await;
    }

    /// Keep the crumbs of `run_id` aside until the returned guard takes them. Dropping
    /// the guard (the call was abandoned) discards them, so nothing stays held.
    pub(crate) fn hold(&self, run_id: &str) -> Held {
        let run_id: Arc<str> = Arc::from(run_id);
        if let Ok(mut b) = self.handle.shared.buffer.lock() {
            b.held.insert(run_id.clone(), Vec::new());
        }
        Held {
            shared: self.handle.shared.clone(),
            run_id,
            taken: false,
        }
    }
}

/// The crumbs of one run kept aside by [`JournalCrumbs::hold`].
pub(crate) struct Held {
    shared: Arc<Shared>,
    run_id: Arc<str>,
    taken: bool,
}

impl Held {
    /// The crumbs kept aside, as journal JSON; they are no longer held.
    pub(crate) fn take(mut self, max_payload: usize) -> Vec<Value> {
        self.taken = true;
        self.release()
            .iter()
            .map(|c| to_json(c, max_payload))
            .collect()
    }

    fn release(&self) -> Vec<Arc<Crumb>> {
        match self.shared.buffer.lock() {
            Ok(mut b) => b.held.remove(&self.run_id).unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.taken {
            self.release();
        }
    }
}

impl CrumbSink for JournalCrumbs {
    fn emit(&self, crumb: &Arc<Crumb>) {
        let shared = &self.handle.shared;
        let was_empty = match shared.buffer.lock() {
            Ok(mut b) => {
                if let Some(held) = b.held.get_mut(&crumb.run_id) {
                    held.push(crumb.clone());
                    return;
                }
                b.crumbs.push(crumb.clone());
                b.crumbs.len() == 1
            }
            Err(_) => return,
        };
        if was_empty {
            shared.wake.notify_one();
        }
    }
}

fn to_json(crumb: &Crumb, max_payload: usize) -> Value {
    let mut value = serde_json::to_value(crumb).unwrap_or(Value::Null);
    if let Some(payload) = value.get_mut("payload") {
        let size = serde_json::to_string(payload).map(|s| s.len()).unwrap_or(0);
        if size > max_payload {
            *payload = serde_json::json!({ "truncated": true, "bytes": size });
        }
    }
    value
}

async fn write(journal: &dyn Journal, batch: &[Arc<Crumb>], max_payload: usize) {
    // Group by run, keeping the order within each run.
    let mut order: Vec<Arc<str>> = Vec::new();
    let mut groups: HashMap<Arc<str>, Vec<Value>> = HashMap::new();
    for c in batch {
        let json = to_json(c, max_payload);
        groups
            .entry(c.run_id.clone())
            .or_insert_with(|| {
                order.push(c.run_id.clone());
                Vec::new()
            })
            .push(json);
    }
    // Sent together, the appends of many runs share one journal commit.
    let appends = order.into_iter().filter_map(|run| {
        let crumbs = groups.remove(&run)?;
        Some(async move {
            if let Err(e) = journal.append_crumbs(&run, crumbs).await {
                tracing::error!(run_id = &*run, error = %e, "cannot journal crumbs");
            }
        })
    });
    futures_util::future::join_all(appends).await;
}
