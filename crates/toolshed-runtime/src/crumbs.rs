//! Journals crumbs: a non-blocking sink on the pipeline's crumb bus feeding one task
//! that appends them to the journal in order, batched.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use toolshed_core::{Crumb, CrumbSink};
use toolshed_journal::Journal;

/// How long crumbs wait for company before they are written.
const LINGER: std::time::Duration = std::time::Duration::from_millis(20);
/// The most crumbs written in one batch.
const MAX_BATCH: usize = 1024;

enum Msg {
    Crumb(Arc<Crumb>),
    Flush(oneshot::Sender<()>),
}

/// The sink. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct JournalCrumbs {
    tx: mpsc::UnboundedSender<Msg>,
}

impl JournalCrumbs {
    /// Start the writer task. Payloads larger than `max_payload` bytes are replaced by a
    /// note, so an oversized result does not reach the journal through its crumb.
    pub(crate) fn start(journal: Arc<dyn Journal>, max_payload: usize) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        tokio::spawn(async move {
            let mut batch: Vec<(Arc<str>, Value)> = Vec::new();
            let mut waiters: Vec<oneshot::Sender<()>> = Vec::new();
            while let Some(first) = rx.recv().await {
                // Linger a little before writing: crumbs are observability, not results,
                // and giving each call's crumbs a commit of their own would double the
                // flushes a keyed call costs. A flush request (a drive ending) writes at once.
                let linger = tokio::time::sleep(LINGER);
                tokio::pin!(linger);
                let mut next = Some(first);
                loop {
                    match next.take() {
                        Some(Msg::Crumb(c)) => batch.push((c.run_id.clone(), to_json(&c, max_payload))),
                        Some(Msg::Flush(w)) => {
                            waiters.push(w);
                            break;
                        }
                        None => {}
                    }
                    if batch.len() >= MAX_BATCH {
                        break;
                    }
                    tokio::select! {
                        biased;
                        msg = rx.recv() => match msg {
                            Some(m) => next = Some(m),
                            None => break,
                        },
                        _ = &mut linger => break,
                    }
                }
                write(&*journal, std::mem::take(&mut batch)).await;
                for w in waiters.drain(..) {
                    let _ = w.send(());
                }
            }
        });
        JournalCrumbs { tx }
    }

    /// Wait until every crumb emitted so far is in the journal.
    pub(crate) async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

impl CrumbSink for JournalCrumbs {
    fn emit(&self, crumb: &Arc<Crumb>) {
        // Only crumbs of a run are journaled; a send error means the writer is gone
        // (runtime shutting down).
        let _ = self.tx.send(Msg::Crumb(crumb.clone()));
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

async fn write(journal: &dyn Journal, batch: Vec<(Arc<str>, Value)>) {
    // Group consecutive crumbs of the same run, keeping the overall order per run.
    let mut groups: Vec<(Arc<str>, Vec<Value>)> = Vec::new();
    for (run, crumb) in batch {
        match groups.iter_mut().find(|(r, _)| *r == run) {
            Some((_, v)) => v.push(crumb),
            None => groups.push((run, vec![crumb])),
        }
    }
    for (run, crumbs) in groups {
        if let Err(e) = journal.append_crumbs(&run, crumbs).await {
            tracing::error!(run_id = &*run, error = %e, "cannot journal crumbs");
        }
    }
}
