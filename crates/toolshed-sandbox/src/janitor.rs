//! Work that need not delay a caller, done on a thread of its own: removing a finished
//! run's cgroup, dropping the last reference to its mount namespace (whose teardown waits
//! for an RCU grace period), keeping a stock of fresh cgroups ready.
//!
//! [`flush`] does not only wait: it runs queued jobs on the calling thread while the
//! janitor runs others, so a one-shot process ending (a cgroup to remove, a mount
//! namespace to drop) uses both cores instead of waiting for one.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    /// Queued jobs with their sequence numbers, oldest first.
    queued: VecDeque<(u64, Job)>,
    /// Sequence numbers of the jobs running now (on the janitor or a flushing caller).
    running: Vec<u64>,
    next: u64,
    /// Whether the janitor thread runs (else `later` runs jobs inline).
    started: bool,
}

struct Janitor {
    state: Mutex<State>,
    /// A job was queued.
    queued: Condvar,
    /// A job ended.
    ended: Condvar,
}

impl Janitor {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The oldest queued job if it was queued before `before`, marked running.
    fn start_next(s: &mut State, before: u64) -> Option<(u64, Job)> {
        if s.queued.front().is_none_or(|(seq, _)| *seq >= before) {
            return None;
        }
        let (seq, job) = s.queued.pop_front()?;
        s.running.push(seq);
        Some((seq, job))
    }

    /// Runs `job` numbered `seq` (already marked running), then marks it ended. A job
    /// that panics is logged and counts as ended: the janitor and every flush go on.
    fn run(&self, seq: u64, job: Job) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            tracing::error!("a sandbox janitor job panicked");
        }
        let mut s = self.lock();
        s.running.retain(|r| *r != seq);
        drop(s);
        self.ended.notify_all();
    }
}

fn janitor() -> &'static Janitor {
    static JANITOR: OnceLock<Janitor> = OnceLock::new();
    JANITOR.get_or_init(|| {
        let made = Janitor {
            state: Mutex::new(State::default()),
            queued: Condvar::new(),
            ended: Condvar::new(),
        };
        let started = std::thread::Builder::new()
            .name("sandbox-janitor".into())
            .spawn(|| {
                let j = janitor();
                loop {
                    let mut s = j.lock();
                    let (seq, job) = loop {
                        if let Some(next) = Janitor::start_next(&mut s, u64::MAX) {
                            break next;
                        }
                        s = j
                            .queued
                            .wait(s)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    };
                    drop(s);
                    j.run(seq, job);
                }
            })
            .is_ok();
        made.lock().started = started;
        made
    })
}

/// Runs `job` on the janitor thread (inline if that thread cannot be started).
pub(crate) fn later(job: impl FnOnce() + Send + 'static) {
    let j = janitor();
    let mut s = j.lock();
    if !s.started {
        drop(s);
        job();
        return;
    }
    let seq = s.next;
    s.next += 1;
    s.queued.push_back((seq, Box::new(job)));
    drop(s);
    j.queued.notify_one();
}

/// For a name a supervisor made as `<pid>-<anything>` (a run's cgroup, a skeleton being
/// built): whether that process is gone, so what it left may be removed. `None` when
/// the name is not of that shape.
pub(crate) fn maker_gone(name: &str) -> Option<bool> {
    let pid = name.split_once('-')?.0.parse::<i32>().ok()?;
    Some(
        rustix::process::Pid::from_raw(pid)
            .is_none_or(|p| rustix::process::test_kill_process(p).is_err()),
    )
}

/// Returns once every job queued so far has run, running queued ones on this thread
/// meanwhile.
pub(crate) fn flush() {
    let j = janitor();
    let mut s = j.lock();
    let target = s.next;
    loop {
        if let Some((seq, job)) = Janitor::start_next(&mut s, target) {
            drop(s);
            j.run(seq, job);
            s = j.lock();
            continue;
        }
        if s.running.iter().all(|r| *r >= target) {
            return;
        }
        s = j
            .ended
            .wait(s)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn flush_runs_queued_jobs_on_the_calling_thread_and_returns_after_all_of_them() {
        // The janitor is held by a first job until the second has run (or ten seconds
        // have passed): only a flush that runs queued jobs itself gets the second run
        // before that, on a thread other than the janitor.
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let (begun_tx, begun) = std::sync::mpsc::channel::<()>();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        later(move || {
            let _ = begun_tx.send(());
            let _ = gate.recv_timeout(std::time::Duration::from_secs(10));
            r.fetch_add(1, Ordering::SeqCst);
        });
        begun
            .recv()
            .unwrap_or_else(|e| panic!("the janitor never began: {e}"));
        let r = ran.clone();
        let on = Arc::new(Mutex::new(None));
        let o = on.clone();
        later(move || {
            *o.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(std::thread::current().name().map(str::to_owned));
            r.fetch_add(1, Ordering::SeqCst);
            let _ = go.send(());
        });
        flush();
        assert_eq!(
            ran.load(Ordering::SeqCst),
            2,
            "flush returned before a job ran"
        );
        let on = on
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        assert_ne!(
            on,
            Some(Some("sandbox-janitor".to_owned())),
            "the flush only waited: the second job ran on the janitor"
        );
    }

    #[test]
    fn a_job_that_panics_counts_as_ended_and_the_janitor_goes_on() {
        later(|| panic!("a janitor job failing on purpose"));
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        later(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        flush();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        // The janitor thread is still there for the next job.
        let (done, finished) = std::sync::mpsc::channel();
        later(move || {
            let _ = done.send(());
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("no job ran after the panic: {e}"));
    }
}
