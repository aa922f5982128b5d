//! Warm worker pools: long-lived processes (sandboxes, unless the operator runs tools
//! unsandboxed), each serving one request at a time. A pool is kept per endpoint, tenant
//! and sandbox policy ([`PoolKey`]), so a worker never serves two tenants, two tools or
//! two policies. The rules are two small functions, [`next_step`] (what a call does to
//! get a worker) and [`retire_reason`] (when a worker goes), under [`PoolConfig`]:
//!
//! - a call reuses an idle worker; else starts one while its pool is under
//!   `max_per_tool` and all pools are under `max_total`; at the global cap it retires
//!   another pool's idle worker to make room; else it waits for a worker to come back;
//! - a worker is retired when it exited, broke the protocol, timed out or hit a limit
//!   (the OOM killer), after `max_calls` calls, when its tool's file changed, and when it
//!   has been idle for `idle_timeout` (a background task looks, so idle pools shrink);
//! - a worker retired while its pool is in use is replaced in the background, so the
//!   next call finds a warm one.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::{Mode, PoolConfig, SandboxPolicy};
use crate::endpoint::Endpoint;
use crate::error::DispatchError;
use crate::launcher::Launcher;
use crate::process::{FileStamp, Proc};

/// What a pool is kept for: workers of one key serve only calls of that key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    /// The tool's endpoint.
    pub endpoint: Endpoint,
    /// The calling principal's tenant.
    pub tenant: Option<String>,
    /// The sandbox policy's fingerprint ([`SandboxPolicy::fingerprint`]).
    pub policy: String,
}

/// What a call does next to get a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Take an idle worker of its pool.
    Reuse,
    /// Start a new worker.
    Start,
    /// All pools together are at `max_total`: retire another pool's idle worker, then
    /// look again (or wait when there is none).
    MakeRoom,
    /// Its pool is at `max_per_tool` with every worker busy: wait for one.
    Wait,
}

/// The rule of growth: `idle_here` and `live_here` (idle, busy or starting) are the
/// pool's workers, `live_total` those of every pool.
pub(crate) fn next_step(
    idle_here: usize,
    live_here: usize,
    live_total: usize,
    rules: &PoolConfig,
) -> Step {
    if idle_here > 0 {
        Step::Reuse
    } else if live_here >= rules.max_per_tool.max(1) {
        Step::Wait
    } else if live_total < rules.max_total.max(1) {
        Step::Start
    } else {
        Step::MakeRoom
    }
}

/// Why a worker is retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum Retire {
    /// Its process ended.
    Exited,
    /// It hit a limit of its sandbox (the OOM killer killed one of its processes).
    LimitHit,
    /// Its tool's file changed since it started.
    Stale,
    /// It served `max_calls` calls.
    Calls,
    /// It was idle for `idle_timeout`.
    Idle,
    /// Its pool was dropped: its tool was deleted or changed, or the dispatcher stops.
    Dropped,
}

/// What is known of a worker when it comes back or sits idle.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Facts {
    /// Calls it served.
    pub calls: u64,
    /// How long it has been idle (zero when it just came back).
    pub idle_for: Duration,
    /// Its process ended.
    pub exited: bool,
    /// A limit was hit.
    pub limit_hit: bool,
    /// Its tool's file changed.
    pub stale: bool,
}

/// The rule of retirement (a broken worker, one that timed out or broke the protocol,
/// never comes back: its call discards it).
pub(crate) fn retire_reason(f: &Facts, rules: &PoolConfig) -> Option<Retire> {
    if f.exited {
        Some(Retire::Exited)
    } else if f.limit_hit {
        Some(Retire::LimitHit)
    } else if f.stale {
        Some(Retire::Stale)
    } else if f.calls >= rules.max_calls.max(1) {
        Some(Retire::Calls)
    } else if f.idle_for >= rules.idle_timeout {
        Some(Retire::Idle)
    } else {
        None
    }
}

/// The counts of one pool, for [`crate::Dispatcher::pool_stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// The endpoint.
    pub endpoint: String,
    /// The tenant it serves.
    pub tenant: Option<String>,
    /// Idle workers.
    pub idle: usize,
    /// Workers serving a call or starting.
    pub busy: usize,
    /// Workers started since the pool was made.
    pub started: u64,
    /// Workers retired or discarded since the pool was made.
    pub retired: u64,
}

/// State shared by every pool of one dispatcher.
struct Shared {
    rules: PoolConfig,
    /// Workers of every pool, idle, busy or starting.
    live: AtomicUsize,
    /// Told when a worker comes back idle or a slot frees, in any pool.
    freed: Notify,
}

impl Shared {
    /// Take a slot under `max_total`.
    fn try_reserve(&self) -> bool {
        let cap = self.rules.max_total.max(1);
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    fn release(&self) {
        let _ = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        self.freed.notify_waiters();
    }
}

/// Every pool of one dispatcher.
pub(crate) struct Pools {
    map: Mutex<HashMap<PoolKey, Arc<Pool>>>,
    shared: Arc<Shared>,
    reaper: std::sync::Once,
}

impl Pools {
    pub fn new(rules: PoolConfig) -> Arc<Pools> {
        Arc::new(Pools {
            map: Mutex::new(HashMap::new()),
            shared: Arc::new(Shared {
                rules,
                live: AtomicUsize::new(0),
                freed: Notify::new(),
            }),
            reaper: std::sync::Once::new(),
        })
    }

    /// The pool of `key`, made on first use.
    pub fn get(
        self: &Arc<Self>,
        key: PoolKey,
        policy: &SandboxPolicy,
        launcher: &Arc<Launcher>,
    ) -> Arc<Pool> {
        self.start_reaper();
        let make = |key: PoolKey| {
            Arc::new(Pool {
                key,
                policy: policy.clone(),
                launcher: launcher.clone(),
                shared: self.shared.clone(),
                state: Mutex::new(State::default()),
                returned: Notify::new(),
                started: AtomicU64::new(0),
                retired: AtomicU64::new(0),
                closed: std::sync::atomic::AtomicBool::new(false),
            })
        };
        match self.map.lock() {
            Ok(mut map) => match map.get(&key) {
                Some(pool) => pool.clone(),
                None => map.entry(key.clone()).or_insert_with(|| make(key)).clone(),
            },
            // A poisoned map still works as a private pool for this call.
            Err(_) => make(key),
        }
    }

    /// A worker for a call to the pool of `key`.
    pub async fn acquire(
        self: &Arc<Self>,
        pool: &Arc<Pool>,
        tool: &str,
    ) -> Result<Lease, DispatchError> {
        pool.acquire(tool, || self.make_room(&pool.key)).await
    }

    /// Retire one idle worker of a pool other than `except`; whether one was.
    fn make_room(&self, except: &PoolKey) -> bool {
        let pools: Vec<Arc<Pool>> = match self.map.lock() {
            Ok(map) => map
                .iter()
                .filter(|(k, _)| *k != except)
                .map(|(_, p)| p.clone())
                .collect(),
            Err(_) => return false,
        };
        pools.iter().any(|p| p.retire_oldest_idle())
    }

    /// Every pool's counts.
    pub fn stats(&self) -> Vec<PoolStats> {
        let pools: Vec<Arc<Pool>> = match self.map.lock() {
            Ok(map) => map.values().cloned().collect(),
            Err(_) => Vec::new(),
        };
        pools.iter().map(|p| p.stats()).collect()
    }

    /// Drop every pool: idle workers are killed now, busy ones when their call ends.
    pub fn clear(&self) {
        let map = match self.map.lock() {
            Ok(mut m) => std::mem::take(&mut *m),
            Err(_) => HashMap::new(),
        };
        for pool in map.values() {
            pool.close();
        }
    }

    /// Drop the pools of `endpoint` (every tenant and policy): their idle workers are
    /// killed now, busy ones when their call ends; returns how many pools there were.
    /// A call already under way for it may start a new pool, which the reaper retires
    /// once idle.
    pub fn drop_endpoint(&self, endpoint: &Endpoint) -> usize {
        let dropped: Vec<Arc<Pool>> = match self.map.lock() {
            Ok(mut map) => {
                let keys: Vec<PoolKey> = map
                    .keys()
                    .filter(|k| k.endpoint == *endpoint)
                    .cloned()
                    .collect();
                keys.iter().filter_map(|k| map.remove(k)).collect()
            }
            Err(_) => return 0,
        };
        for pool in &dropped {
            pool.close();
        }
        dropped.len()
    }

    /// Start the task that retires idle workers (once, when a runtime is there).
    fn start_reaper(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.reaper.call_once(|| {
            let weak: Weak<Pools> = Arc::downgrade(self);
            let tick = (self.shared.rules.idle_timeout / 4)
                .clamp(Duration::from_millis(10), Duration::from_secs(30));
            handle.spawn(async move {
                loop {
                    tokio::time::sleep(tick).await;
                    let Some(pools) = weak.upgrade() else {
                        return;
                    };
                    pools.reap();
                }
            });
        });
    }

    /// Retire the idle workers past their idle timeout (or otherwise retirable), and
    /// forget pools that are empty and unused.
    fn reap(&self) {
        let pools: Vec<Arc<Pool>> = match self.map.lock() {
            Ok(map) => map.values().cloned().collect(),
            Err(_) => return,
        };
        for pool in &pools {
            pool.prune_idle();
        }
        drop(pools);
        if let Ok(mut map) = self.map.lock() {
            map.retain(|_, p| Arc::strong_count(p) > 1 || p.live() > 0);
        }
    }
}

/// An idle worker.
struct Idle {
    proc: Proc,
    since: Instant,
}

#[derive(Default)]
struct State {
    idle: Vec<Idle>,
    /// Workers of this pool: idle, busy or starting.
    live: usize,
}

/// The workers of one [`PoolKey`].
pub(crate) struct Pool {
    pub key: PoolKey,
    policy: SandboxPolicy,
    launcher: Arc<Launcher>,
    shared: Arc<Shared>,
    state: Mutex<State>,
    /// Told when a worker of this pool comes back idle or its slot frees.
    returned: Notify,
    started: AtomicU64,
    retired: AtomicU64,
    /// Dropped from the map ([`Pools::clear`], [`Pools::drop_endpoint`]): a worker
    /// coming back is killed, not kept, and none is started to replace one.
    closed: std::sync::atomic::AtomicBool,
}

/// One worker, held by one call. Dropped without [`Lease::release`] (a call cut
/// short), its worker is killed and its slot freed.
pub(crate) struct Lease {
    // Dropped in this order: the worker is killed, then its slot freed.
    proc: Proc,
    slot: Slot,
    /// Whether the worker was started for this call (not reused).
    pub fresh: bool,
}

/// A busy worker's place in its pool; freed when dropped armed.
struct Slot {
    pool: Arc<Pool>,
    armed: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.armed {
            self.pool.retired.fetch_add(1, Ordering::Relaxed);
            self.pool.free_slot();
        }
    }
}

impl Pool {
    /// Reuse an idle worker, start one, make room for one, or wait ([`next_step`]).
    async fn acquire(
        self: &Arc<Self>,
        tool: &str,
        make_room: impl Fn() -> bool,
    ) -> Result<Lease, DispatchError> {
        loop {
            // Registered before looking, so a worker coming back in between is seen.
            let mut here = pin!(self.returned.notified());
            here.as_mut().enable();
            let mut anywhere = pin!(self.shared.freed.notified());
            anywhere.as_mut().enable();
            let (step, reused, dropped) = {
                let Ok(mut st) = self.state.lock() else {
                    return Err(DispatchError::Io {
                        what: format!("the worker pool of tool {tool} is unusable"),
                        source: std::io::Error::other("poisoned lock"),
                    });
                };
                let dropped = self.prune(&mut st);
                let mut step = next_step(
                    st.idle.len(),
                    st.live,
                    self.shared.live.load(Ordering::Acquire),
                    &self.shared.rules,
                );
                let mut reused = None;
                match step {
                    Step::Reuse => reused = st.idle.pop().map(|i| i.proc),
                    Step::Start if self.shared.try_reserve() => st.live += 1,
                    Step::Start => step = Step::MakeRoom,
                    Step::MakeRoom | Step::Wait => {}
                }
                (step, reused, dropped)
            };
            self.retired_now(dropped);
            match step {
                Step::Reuse => {
                    if let Some(proc) = reused {
                        return Ok(self.lease(proc, false));
                    }
                }
                Step::Start => {
                    let proc = self.start(tool).await?;
                    return Ok(self.lease(proc, true));
                }
                Step::MakeRoom => {
                    if !make_room() {
                        tokio::select! {
                            () = &mut here => {}
                            () = &mut anywhere => {}
                        }
                    }
                }
                Step::Wait => here.await,
            }
        }
    }

    /// Start a worker in a slot already reserved; the slot is freed on failure.
    async fn start(&self, tool: &str) -> Result<Proc, DispatchError> {
        match self
            .launcher
            .spawn(&self.key.endpoint, tool, Mode::Pool, &self.policy)
            .await
        {
            Ok(proc) => {
                self.started.fetch_add(1, Ordering::Relaxed);
                Ok(proc)
            }
            Err(e) => {
                self.free_slot();
                Err(e)
            }
        }
    }

    fn lease(self: &Arc<Self>, proc: Proc, fresh: bool) -> Lease {
        Lease {
            proc,
            slot: Slot {
                pool: self.clone(),
                armed: true,
            },
            fresh,
        }
    }

    /// Start workers until `warm` are idle (or a cap is reached); how many started.
    pub async fn warm(self: &Arc<Self>, tool: &str) -> Result<usize, DispatchError> {
        let mut started = 0;
        loop {
            let reserved = match self.state.lock() {
                Ok(mut st) => {
                    let want = st.idle.len() < self.shared.rules.warm
                        && next_step(
                            0,
                            st.live,
                            self.shared.live.load(Ordering::Acquire),
                            &self.shared.rules,
                        ) == Step::Start;
                    let ok = want && self.shared.try_reserve();
                    if ok {
                        st.live += 1;
                    }
                    ok
                }
                Err(_) => false,
            };
            if !reserved {
                return Ok(started);
            }
            let proc = self.start(tool).await?;
            self.put_idle(proc);
            started += 1;
        }
    }

    /// Start a replacement in the background when the pool has no idle worker, so the
    /// next call finds a warm one.
    fn replenish(self: &Arc<Self>) {
        if self.is_closed() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let reserved = match self.state.lock() {
            Ok(mut st) => {
                let ok = st.idle.is_empty()
                    && st.live < self.shared.rules.max_per_tool.max(1)
                    && self.shared.try_reserve();
                if ok {
                    st.live += 1;
                }
                ok
            }
            Err(_) => false,
        };
        if !reserved {
            return;
        }
        let pool = self.clone();
        handle.spawn(async move {
            match pool.start("replacement").await {
                Ok(proc) => pool.put_idle(proc),
                Err(e) => tracing::warn!(
                    target: "toolshed::dispatch",
                    endpoint = %pool.key.endpoint,
                    error = %e.message(),
                    "cannot start a replacement worker"
                ),
            }
        });
    }

    /// Put a worker back idle (it keeps its slot); a closed pool's is killed instead.
    /// Closing is looked at under the state lock, so no worker slips in after
    /// [`Pool::close`] drained the idle ones.
    fn put_idle(&self, proc: Proc) {
        let Ok(mut st) = self.state.lock() else {
            drop(proc);
            self.free_slot();
            return;
        };
        if self.is_closed() {
            st.live = st.live.saturating_sub(1);
            drop(st);
            self.retired_now(vec![(proc, Retire::Dropped)]);
            return;
        }
        st.idle.push(Idle {
            proc,
            since: Instant::now(),
        });
        drop(st);
        self.returned.notify_one();
        self.shared.freed.notify_waiters();
    }

    /// A worker of this pool is gone: free its slot.
    fn free_slot(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.live = st.live.saturating_sub(1);
        }
        self.shared.release();
        self.returned.notify_one();
    }

    /// Take the retirable idle workers out (with the lock held); they are killed by
    /// [`Pool::retired_now`] outside it.
    fn prune(&self, st: &mut State) -> Vec<(Proc, Retire)> {
        let now = Instant::now();
        let current = self.key.endpoint.path().and_then(FileStamp::of);
        let rules = &self.shared.rules;
        let mut out = Vec::new();
        let mut i = 0;
        while i < st.idle.len() {
            let idle = &mut st.idle[i];
            let facts = Facts {
                calls: idle.proc.requests(),
                idle_for: now.saturating_duration_since(idle.since),
                exited: idle.proc.has_exited(),
                limit_hit: false,
                stale: idle.proc.stamp != current,
            };
            // A worker at its call count was retired when it came back; only the
            // other reasons are looked at here.
            match retire_reason(&facts, rules) {
                Some(reason) if reason != Retire::Calls => {
                    let gone = st.idle.swap_remove(i);
                    st.live = st.live.saturating_sub(1);
                    out.push((gone.proc, reason));
                }
                _ => i += 1,
            }
        }
        out
    }

    /// Kill workers taken out of the pool and free their slots.
    fn retired_now(&self, gone: Vec<(Proc, Retire)>) {
        for (proc, reason) in gone {
            tracing::debug!(target: "toolshed::dispatch", endpoint = %self.key.endpoint, %reason, "worker retired");
            drop(proc);
            self.retired.fetch_add(1, Ordering::Relaxed);
            self.shared.release();
            self.returned.notify_one();
        }
    }

    fn prune_idle(&self) {
        let gone = match self.state.lock() {
            Ok(mut st) => self.prune(&mut st),
            Err(_) => return,
        };
        self.retired_now(gone);
    }

    /// Retire the longest-idle worker to make room for another pool.
    fn retire_oldest_idle(&self) -> bool {
        let gone = match self.state.lock() {
            Ok(mut st) => {
                let oldest = st
                    .idle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, i)| i.since)
                    .map(|(at, _)| at);
                match oldest {
                    Some(at) => {
                        st.live = st.live.saturating_sub(1);
                        Some(st.idle.swap_remove(at).proc)
                    }
                    None => None,
                }
            }
            Err(_) => None,
        };
        let found = gone.is_some();
        if let Some(proc) = gone {
            self.retired_now(vec![(proc, Retire::Idle)]);
        }
        found
    }

    /// Close the pool (dropped from the map): kill its idle workers now; busy ones are
    /// killed when they come back.
    fn close(&self) {
        let gone: Vec<(Proc, Retire)> = match self.state.lock() {
            Ok(mut st) => {
                self.closed.store(true, Ordering::Release);
                let n = st.idle.len();
                st.live = st.live.saturating_sub(n);
                st.idle
                    .drain(..)
                    .map(|i| (i.proc, Retire::Dropped))
                    .collect()
            }
            Err(_) => {
                self.closed.store(true, Ordering::Release);
                return;
            }
        };
        self.retired_now(gone);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn live(&self) -> usize {
        self.state.lock().map(|st| st.live).unwrap_or(0)
    }

    fn stats(&self) -> PoolStats {
        let (idle, live) = self
            .state
            .lock()
            .map(|st| (st.idle.len(), st.live))
            .unwrap_or_default();
        PoolStats {
            endpoint: self.key.endpoint.to_string(),
            tenant: self.key.tenant.clone(),
            idle,
            busy: live.saturating_sub(idle),
            started: self.started.load(Ordering::Relaxed),
            retired: self.retired.load(Ordering::Relaxed),
        }
    }
}

impl Lease {
    /// The worker.
    pub fn proc(&mut self) -> &mut Proc {
        &mut self.proc
    }

    /// Give a worker back after a clean answer: idle for the next call, or retired by
    /// [`retire_reason`] (and replaced in the background).
    pub fn release(self) {
        let Lease {
            mut proc, mut slot, ..
        } = self;
        let facts = Facts {
            calls: proc.requests(),
            idle_for: Duration::ZERO,
            exited: proc.has_exited(),
            limit_hit: proc.accounting().is_some_and(|a| a.oom_killed),
            stale: false,
        };
        let pool = slot.pool.clone();
        match retire_reason(&facts, &pool.shared.rules) {
            None => {
                slot.armed = false;
                pool.put_idle(proc);
            }
            Some(reason) => {
                tracing::debug!(target: "toolshed::dispatch", endpoint = %pool.key.endpoint, %reason, "worker retired");
                drop(proc);
                drop(slot);
                pool.replenish();
            }
        }
    }

    /// Kill a broken worker (it crashed, timed out, broke the protocol) and start a
    /// replacement in the background.
    pub fn discard(self) {
        let pool = self.slot.pool.clone();
        drop(self);
        pool.replenish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(max_per_tool: usize, max_total: usize) -> PoolConfig {
        PoolConfig {
            max_per_tool,
            max_total,
            max_calls: 3,
            idle_timeout: Duration::from_secs(10),
            ..PoolConfig::default()
        }
    }

    #[test]
    fn a_call_reuses_then_grows_then_waits() {
        let r = rules(2, 10);
        assert_eq!(next_step(1, 2, 5, &r), Step::Reuse);
        assert_eq!(next_step(0, 0, 0, &r), Step::Start);
        assert_eq!(next_step(0, 1, 5, &r), Step::Start);
        assert_eq!(next_step(0, 2, 5, &r), Step::Wait, "the per-tool cap");
    }

    #[test]
    fn at_the_global_cap_a_pool_makes_room_instead_of_starting() {
        let r = rules(4, 3);
        assert_eq!(next_step(0, 1, 3, &r), Step::MakeRoom);
        assert_eq!(
            next_step(0, 4, 3, &r),
            Step::Wait,
            "its own cap comes first"
        );
        assert_eq!(next_step(1, 1, 3, &r), Step::Reuse);
    }

    #[test]
    fn workers_retire_after_n_calls_when_idle_and_on_any_limit() {
        let r = rules(2, 10);
        let ok = Facts {
            calls: 1,
            ..Facts::default()
        };
        assert_eq!(retire_reason(&ok, &r), None);
        let check = |f: Facts, want: Retire| assert_eq!(retire_reason(&f, &r), Some(want));
        check(Facts { calls: 3, ..ok }, Retire::Calls);
        check(
            Facts {
                idle_for: Duration::from_secs(10),
                ..ok
            },
            Retire::Idle,
        );
        check(Facts { exited: true, ..ok }, Retire::Exited);
        check(
            Facts {
                limit_hit: true,
                ..ok
            },
            Retire::LimitHit,
        );
        check(Facts { stale: true, ..ok }, Retire::Stale);
    }
}
