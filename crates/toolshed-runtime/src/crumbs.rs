//! Journals crumbs: a non-blocking sink on the pipeline's crumb bus that buffers crumbs,
//! and one task that appends them to the journal in order, in batches.
//!
//! Why a buffer and not a channel per crumb: waking a task for every crumb costs more
//! than the crumb is worth on the hot path of a keyed call. The sink pushes under a
//! short lock and wakes the writer only when the buffer was empty; the writer lingers
//! a moment so one append carries many crumbs. A flush (a drive ending) writes at once.

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
}

impl CrumbSink for JournalCrumbs {
    fn emit(&self, crumb: &Arc<Crumb>) {
        let shared = &self.handle.shared;
        let was_empty = match shared.buffer.lock() {
            Ok(mut b) => {
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
    let mut groups: Vec<(Arc<str>, Vec<Value>)> = Vec::new();
    for c in batch {
        let json = to_json(c, max_payload);
        match groups.iter_mut().find(|(r, _)| *r == c.run_id) {
            Some((_, v)) => v.push(json),
            None => groups.push((c.run_id.clone(), vec![json])),
        }
    }
    for (run, crumbs) in groups {
        if let Err(e) = journal.append_crumbs(&run, crumbs).await {
            tracing::error!(run_id = &*run, error = %e, "cannot journal crumbs");
        }
    }
}
