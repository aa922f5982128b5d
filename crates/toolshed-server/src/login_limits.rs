//! What a password check may cost the server: a few hashing slots (argon2 takes ~19 MiB
//! and tens of milliseconds per check, so a login flood must queue, not pile up), and
//! attempt limits per user name and per client address, answered `429` with
//! `Retry-After` before any hashing.
//!
//! Every map is bounded: the attempt counters live in caches of at most
//! [`LoginLimits::tracked`] entries each, forgotten a window after their first attempt,
//! so a flood of made-up user names or addresses costs a bounded amount of memory (the
//! least used counters go first).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use moka::sync::Cache;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolshed_api::ApiCode;

use crate::error::ApiError;

/// The login limits of a server ([`ServerConfig::login`](crate::ServerConfig::login)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginLimits {
    /// Attempts allowed per user name within one window (default 10). Successful
    /// attempts do not count.
    pub per_user: u32,
    /// Attempts allowed per client address within one window (default 50). Successful
    /// attempts do not count.
    pub per_address: u32,
    /// The window (default 60 s), counted from a key's first attempt.
    pub window: Duration,
    /// Password checks that run at once (default: the number of cores, at least 2).
    pub hash_slots: usize,
    /// How long an attempt waits for a free slot before it is answered 429 (default 2 s).
    pub hash_wait: Duration,
    /// Counters kept at most, per map (default 100,000).
    pub tracked: u64,
}

impl Default for LoginLimits {
    fn default() -> Self {
        LoginLimits {
            per_user: 10,
            per_address: 50,
            window: Duration::from_secs(60),
            hash_slots: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(2)
                .max(2),
            hash_wait: Duration::from_secs(2),
            tracked: 100_000,
        }
    }
}

/// The counters and the slots of one server.
pub(crate) struct LoginLimiter {
    limits: LoginLimits,
    users: Cache<String, Arc<Window>>,
    addresses: Cache<IpAddr, Arc<Window>>,
    slots: Arc<Semaphore>,
}

/// One key's attempts since `started`.
struct Window {
    started: Instant,
    count: AtomicU32,
}

/// An admitted attempt: it holds a hashing slot, and counts against its user and
/// address unless [`succeeded`](Attempt::succeeded) is called.
pub(crate) struct Attempt {
    windows: Vec<Arc<Window>>,
    _slot: OwnedSemaphorePermit,
}

impl Attempt {
    /// The password was right: the attempt does not count.
    pub(crate) fn succeeded(self) {
        for w in &self.windows {
            w.release();
        }
    }
}

impl Window {
    fn release(&self) {
        // Never below zero, even if the window was replaced meanwhile.
        let _ = self
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1));
    }
}

impl LoginLimiter {
    pub(crate) fn new(limits: LoginLimits) -> Self {
        LoginLimiter {
            users: Cache::builder()
                .max_capacity(limits.tracked)
                .time_to_live(limits.window)
                .build(),
            addresses: Cache::builder()
                .max_capacity(limits.tracked)
                .time_to_live(limits.window)
                .build(),
            slots: Arc::new(Semaphore::new(limits.hash_slots.max(1))),
            limits,
        }
    }

    /// Admit one attempt for `user` from `address`, or answer 429: the user's or the
    /// address's attempts are used up for this window (no slot is taken), or no
    /// hashing slot came free within `hash_wait`.
    pub(crate) async fn admit(
        &self,
        user: &str,
        address: Option<IpAddr>,
    ) -> Result<Attempt, ApiError> {
        let mut windows = Vec::with_capacity(2);
        if let Some(ip) = address {
            let w = self.addresses.get_with(ip, || Arc::new(Window::new()));
            take(&w, self.limits.per_address, self.limits.window, &windows)
                .map_err(|after| too_many("from this address", after))?;
            windows.push(w);
        }
        // The user counter is keyed by the name as given, capped in length, so a long
        // made-up name costs no more than a short one.
        let key: String = user.chars().take(64).collect();
        let w = self.users.get_with(key, || Arc::new(Window::new()));
        take(&w, self.limits.per_user, self.limits.window, &windows)
            .map_err(|after| too_many("for this user", after))?;
        windows.push(w);
        let slot = tokio::time::timeout(self.limits.hash_wait, self.slots.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok);
        let Some(slot) = slot else {
            // Nothing was checked: the attempt does not count.
            for w in &windows {
                w.release();
            }
            return Err(ApiError::new(
                ApiCode::TooManyAttempts,
                "the server is busy checking other passwords; try again in a second",
            )
            .with_retry_after(1));
        };
        Ok(Attempt {
            windows,
            _slot: slot,
        })
    }

    /// A hashing slot for hashing a new password (an authenticated caller's), or 429
    /// when none comes free within `hash_wait`. Counts against no limit.
    pub(crate) async fn hash_slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        tokio::time::timeout(self.limits.hash_wait, self.slots.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(|| {
                ApiError::new(
                    ApiCode::TooManyAttempts,
                    "the server is busy checking other passwords; try again in a second",
                )
                .with_retry_after(1)
            })
    }
}

impl Window {
    fn new() -> Self {
        Window {
            started: Instant::now(),
            count: AtomicU32::new(0),
        }
    }
}

/// Count one attempt in `w` unless its `limit` is reached; `Err(seconds until the
/// window ends)` when it is. On refusal the windows already taken are released.
fn take(w: &Window, limit: u32, window: Duration, taken: &[Arc<Window>]) -> Result<(), u64> {
    let counted = w
        .count
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            (c < limit).then_some(c + 1)
        })
        .is_ok();
    if counted {
        return Ok(());
    }
    for t in taken {
        t.release();
    }
    let left = window.saturating_sub(w.started.elapsed());
    Err(left.as_secs().max(1))
}

fn too_many(whom: &str, retry_after: u64) -> ApiError {
    ApiError::new(
        ApiCode::TooManyAttempts,
        format!("too many login attempts {whom}; try again in {retry_after} s"),
    )
    .with_retry_after(retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_user: u32, per_address: u32, slots: usize) -> LoginLimiter {
        LoginLimiter::new(LoginLimits {
            per_user,
            per_address,
            window: Duration::from_secs(60),
            hash_slots: slots,
            hash_wait: Duration::from_millis(50),
            tracked: 100,
        })
    }

    #[tokio::test]
    async fn failures_count_successes_do_not() {
        let l = limiter(2, 100, 4);
        let ip = Some(IpAddr::from([127, 0, 0, 1]));
        for _ in 0..5 {
            l.admit("ana", ip).await.map(Attempt::succeeded).unwrap();
        }
        drop(l.admit("ana", ip).await.unwrap());
        drop(l.admit("ana", ip).await.unwrap());
        let e = l.admit("ana", ip).await.err().unwrap();
        assert_eq!(e.code(), ApiCode::TooManyAttempts);
        assert!(e.message().contains("for this user"), "{}", e.message());
        assert!(e.retry_after().is_some_and(|s| (1..=60).contains(&s)));
        // Another user from the same address is not limited by ana's failures.
        drop(l.admit("bob", ip).await.unwrap());
    }

    #[tokio::test]
    async fn an_address_is_limited_across_user_names() {
        let l = limiter(100, 3, 4);
        let ip = Some(IpAddr::from([10, 0, 0, 7]));
        for name in ["a", "b", "c"] {
            drop(l.admit(name, ip).await.unwrap());
        }
        let e = l.admit("d", ip).await.err().unwrap();
        assert!(e.message().contains("from this address"), "{}", e.message());
        // The refused attempt did not use up d's own allowance.
        drop(
            l.admit("d", Some(IpAddr::from([10, 0, 0, 8])))
                .await
                .unwrap(),
        );
    }

    #[tokio::test]
    async fn busy_slots_answer_429_and_do_not_count() {
        let l = limiter(1, 100, 1);
        let held = l.admit("ana", None).await.unwrap();
        let e = l.admit("bob", None).await.err().unwrap();
        assert!(e.message().contains("busy"), "{}", e.message());
        assert_eq!(e.retry_after(), Some(1));
        drop(held);
        // bob's refused attempt was not counted: his one attempt is still there.
        drop(l.admit("bob", None).await.unwrap());
    }

    #[test]
    fn the_maps_are_bounded() {
        let l = limiter(5, 5, 1);
        for i in 0..10_000u32 {
            let w = l.users.get_with(i.to_string(), || Arc::new(Window::new()));
            drop(w);
        }
        l.users.run_pending_tasks();
        assert!(l.users.entry_count() <= 100, "{}", l.users.entry_count());
    }
}
