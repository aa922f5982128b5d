//! A stock of things made ahead on the janitor thread (network namespaces, cgroups),
//! each handed to one run only. It starts with one (made while the supervisor prepares
//! its first run) and is refilled from the second run on, so a one-shot process (the
//! CLI) makes none it does not use. A run that finds the stock empty while one is being
//! made waits for it rather than making a second; one that finds an item asked for but
//! not yet begun (the janitor is busy with another stock's) makes it itself, so a
//! one-shot start keeps both cores busy instead of waiting for one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

/// How long a run waits for an item already being made before making its own.
const WAIT: Duration = Duration::from_millis(50);

type Make<T> = dyn Fn() -> std::io::Result<T> + Send + Sync;

struct State<T> {
    ready: Vec<T>,
    /// Items the janitor has been asked to make and has not finished.
    pending: usize,
    /// Of those, the ones it has not begun: a run may take one over.
    unstarted: usize,
}

/// The stock.
pub(crate) struct Stock<T: Send + 'static> {
    state: Mutex<State<T>>,
    made: Notify,
    taken: AtomicU64,
    size: usize,
    what: &'static str,
    make: Box<Make<T>>,
}

impl<T: Send + 'static> std::fmt::Debug for Stock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stock")
            .field("what", &self.what)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Stock<T> {
    /// A stock of `size` (0: none kept) made by `make`; the first one is started now.
    pub(crate) fn new(
        what: &'static str,
        size: usize,
        make: impl Fn() -> std::io::Result<T> + Send + Sync + 'static,
    ) -> Arc<Stock<T>> {
        let stock = Arc::new(Stock {
            state: Mutex::new(State {
                ready: Vec::new(),
                pending: 0,
                unstarted: 0,
            }),
            made: Notify::new(),
            taken: AtomicU64::new(0),
            size,
            what,
            make: Box::new(make),
        });
        stock.fill(size.min(1));
        stock
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many are ready now.
    pub(crate) fn ready(&self) -> usize {
        self.lock().ready.len()
    }

    fn fill(self: &Arc<Self>, target: usize) {
        let missing = {
            let mut s = self.lock();
            let missing = target.saturating_sub(s.ready.len() + s.pending);
            s.pending += missing;
            s.unstarted += missing;
            missing
        };
        if missing == 0 {
            return;
        }
        let me = self.clone();
        crate::janitor::later(move || {
            for _ in 0..missing {
                {
                    let mut s = me.lock();
                    if s.unstarted == 0 {
                        // Runs took the rest over.
                        return;
                    }
                    s.unstarted -= 1;
                }
                match (me.make)() {
                    Ok(item) => {
                        let mut s = me.lock();
                        s.pending -= 1;
                        s.ready.push(item);
                    }
                    Err(e) => {
                        // This one failed; the rest are given up.
                        me.lock().pending -= 1;
                        me.close();
                        me.made.notify_waiters();
                        tracing::warn!(error = %e, what = me.what, "cannot prepare ahead");
                        return;
                    }
                }
                me.made.notify_waiters();
            }
        });
    }

    /// One item: a ready one, one asked for and not begun (made here and now), or one
    /// being made (waited for briefly); `None` when there is none, or making it here
    /// failed, and the caller makes its own.
    pub(crate) async fn take(self: &Arc<Self>) -> Option<T> {
        let item = self.wait_for_one().await;
        if self.taken.fetch_add(1, Ordering::Relaxed) >= 1 {
            self.fill(self.size);
        }
        item
    }

    async fn wait_for_one(&self) -> Option<T> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.made.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if let Some(item) = s.ready.pop() {
                    return Some(item);
                }
                if s.unstarted > 0 {
                    s.unstarted -= 1;
                    s.pending -= 1;
                    drop(s);
                    return (self.make)().ok();
                }
                if s.pending == 0 {
                    return None;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.lock().ready.pop();
            }
        }
    }

    /// Makes nothing more of what was asked for: the items not begun are given up (the
    /// supervisor is shutting down, or making one failed).
    pub(crate) fn close(&self) {
        let mut s = self.lock();
        s.pending -= s.unstarted;
        s.unstarted = 0;
    }

    /// Drops what is ready (the supervisor is shutting down), handing each to `end`.
    pub(crate) fn clear(&self, mut end: impl FnMut(T)) {
        let items = std::mem::take(&mut self.lock().ready);
        for item in items {
            end(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[tokio::test]
    async fn a_take_waits_for_the_item_being_made_and_never_makes_two_for_one_run() {
        let made = Arc::new(AtomicUsize::new(0));
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let (begun_tx, begun) = std::sync::mpsc::channel::<()>();
        let begun_tx = Mutex::new(begun_tx);
        let m = made.clone();
        let stock = Stock::new("test item", 3, move || {
            // The first item is made only once the test says so.
            if m.load(Ordering::SeqCst) == 0 {
                let _ = begun_tx.lock().map(|b| b.send(()));
                let _ = gate.lock().map(|g| g.recv());
            }
            Ok(m.fetch_add(1, Ordering::SeqCst))
        });
        // The janitor has begun the first item. The take is polled first: nothing is
        // ready, one is being made; it waits for it instead of returning empty-handed
        // (and the caller making its own).
        begun.recv().unwrap();
        let (first, ()) = tokio::join!(stock.take(), async {
            tokio::task::yield_now().await;
            let _ = go.send(());
        });
        assert_eq!(first, Some(0));
        crate::janitor::flush();
        assert_eq!(
            made.load(Ordering::SeqCst),
            1,
            "the first run refills nothing"
        );
        // From the second take on, the stock refills to its size.
        assert_eq!(stock.take().await, None, "nothing was ready or being made");
        crate::janitor::flush();
        assert_eq!(stock.ready(), 3);
    }

    #[tokio::test]
    async fn a_take_makes_an_item_the_janitor_has_not_begun_and_the_janitor_then_skips_it() {
        // The janitor is busy with other work until the test lets it go.
        let (go, gate) = std::sync::mpsc::channel::<()>();
        crate::janitor::later(move || {
            let _ = gate.recv();
        });
        let made_by = Arc::new(Mutex::new(Vec::new()));
        let m = made_by.clone();
        let stock = Stock::new("test item", 3, move || {
            let name = std::thread::current().name().map(str::to_owned);
            let mut m = m.lock().unwrap();
            m.push(name);
            Ok(m.len())
        });
        // The first item is asked for, not begun: the run makes it on its own thread.
        assert_eq!(stock.take().await, Some(1));
        assert_eq!(
            *made_by.lock().unwrap(),
            [std::thread::current().name().map(str::to_owned)]
        );
        go.send(()).unwrap();
        crate::janitor::flush();
        assert_eq!(
            made_by.lock().unwrap().len(),
            1,
            "the janitor made a second"
        );
        assert_eq!(stock.ready(), 0);
    }

    #[tokio::test]
    async fn a_stock_of_size_zero_makes_nothing() {
        let stock: Arc<Stock<u32>> = Stock::new("test item", 0, || Ok(1));
        assert_eq!(stock.take().await, None);
        assert_eq!(stock.take().await, None);
        crate::janitor::flush();
        assert_eq!(stock.ready(), 0);
    }
}
