//! Work that need not delay a caller, done on a thread of its own: removing a finished
//! run's cgroup, dropping the last reference to its mount namespace (whose teardown waits
//! for an RCU grace period), keeping a stock of fresh cgroups ready.

use std::sync::OnceLock;
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

fn sender() -> Option<&'static mpsc::Sender<Job>> {
    static TX: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sandbox-janitor".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .ok()
            .map(|_| tx)
    })
    .as_ref()
}

/// Runs `job` on the janitor thread (inline if that thread cannot be started).
pub(crate) fn later(job: impl FnOnce() + Send + 'static) {
    match sender() {
        Some(tx) => {
            if let Err(mpsc::SendError(job)) = tx.send(Box::new(job)) {
                job();
            }
        }
        None => job(),
    }
}

/// Waits until every job queued so far has run.
pub(crate) fn flush() {
    let (tx, rx) = mpsc::channel::<()>();
    later(move || {
        let _ = tx.send(());
    });
    let _ = rx.recv();
}
