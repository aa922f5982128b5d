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
use serde_json::value::RawValue;
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
    pub(crate) fn take(mut self, max_payload: usize) -> Vec<Box<RawValue>> {
        self.taken = true;
        self.release()
            .iter()
            .filter_map(|c| to_json(c, max_payload))
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

/// A crumb as the journal stores it, its payload replaced by `{"truncated": true,
/// "bytes": N}` when its JSON is longer than `max_payload`. Written as text once: no
/// JSON tree is built (building, then dropping, one cost more than the crumb's text
/// itself, BENCHMARKS.md "Durable runs").
fn to_json(crumb: &Crumb, max_payload: usize) -> Option<Box<RawValue>> {
    let size = crumb.payload.as_ref().map_or(0, json_len);
    let written = if size > max_payload {
        let mut cut = crumb.clone();
        cut.payload = Some(serde_json::json!({ "truncated": true, "bytes": size }));
        serde_json::value::to_raw_value(&cut)
    } else {
        serde_json::value::to_raw_value(crumb)
    };
    written
        .inspect_err(|e| tracing::error!(error = %e, "cannot serialize a crumb"))
        .ok()
}

/// The length of `value`'s JSON, counted as it is written (nothing is kept).
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    match serde_json::to_writer(&mut n, value) {
        Ok(()) => n.0,
        Err(_) => 0,
    }
}

async fn write(journal: &dyn Journal, batch: &[Arc<Crumb>], max_payload: usize) {
    // Group by run, keeping the order within each run.
    let mut order: Vec<Arc<str>> = Vec::new();
    let mut groups: HashMap<Arc<str>, Vec<Box<RawValue>>> = HashMap::new();
    for c in batch {
        let Some(json) = to_json(c, max_payload) else {
            continue;
        };
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolshed_core::{CrumbKind, RunContext};

    use super::*;

    fn stored(crumb: &Crumb, max: usize) -> Value {
        let raw = to_json(crumb, max).expect("a crumb serializes");
        serde_json::from_str(raw.get()).expect("the stored text is JSON")
    }

    #[test]
    fn a_crumb_is_stored_as_its_json_and_a_long_payload_as_its_size() {
        let ctx = RunContext::ephemeral();
        let payload = json!({"text": "x".repeat(100), "n": [1, 2.5, null]});
        let size = serde_json::to_string(&payload).unwrap().len();
        let crumb = Crumb::new(CrumbKind::Result, &ctx, "tc-1", "echo").with_payload(payload);
        // At the limit: kept whole, exactly the crumb's own JSON.
        assert_eq!(stored(&crumb, size), serde_json::to_value(&crumb).unwrap());
        // One byte over: the payload is replaced by its size, the rest kept.
        let cut = stored(&crumb, size - 1);
        assert_eq!(cut["payload"], json!({"truncated": true, "bytes": size}));
        let mut whole = serde_json::to_value(&crumb).unwrap();
        whole["payload"] = cut["payload"].clone();
        assert_eq!(cut, whole);
        // No payload: nothing to measure.
        let bare = Crumb::new(CrumbKind::Call, &ctx, "tc-1", "echo");
        assert_eq!(stored(&bare, 0), serde_json::to_value(&bare).unwrap());
        assert_eq!(stored(&bare, 0).get("payload"), None);
    }
}
