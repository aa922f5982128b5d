//! What a password check may cost the server, and who a login flood can lock out.
//!
//! - **Hashing slots.** argon2 takes ~19 MiB and tens of milliseconds per check, so a
//!   few checks run at once and a flood queues (a check that waits past `hash_wait` is
//!   a 429), instead of piling up.
//! - **Failed attempts**, counted in token buckets (one allowance per key, coming back
//!   one attempt every `window / limit`; successes do not count), answered `429` with
//!   `Retry-After` before any hashing:
//!   - per user name *from one client address* (`per_address_user`, default 5): what
//!     stops guessing one account from one place;
//!   - per user name from every address (`per_user`, default 10): guessing one account
//!     from many places;
//!   - per client address, counting *user names*, not attempts (`per_address`, default
//!     20): the first failure of a name from the address takes from it, further ones
//!     only from that name's own allowance. Spraying one password over many accounts
//!     uses it up; a flood against a few accounts does not, so the other users behind
//!     the same address (an office, a proxy) still log in.
//! - **Known addresses.** A user's successful login from an address is remembered
//!   (`remember`, default 7 days): from there, the user's attempts take from neither
//!   the user's allowance nor the address's, so neither a flood against the account
//!   from elsewhere nor a spray from the same address locks the user out. Only the
//!   per-address-and-user allowance applies, and a failure forgets the address, so
//!   someone sharing it gains at most one guess per real login. This is what keeps
//!   spraying bounded: a known address only helps an account whose owner just proved
//!   the password from there.
//! - **Change-password's `current_password`.** A wrong one counts against the session
//!   it was sent in (`per_session`, default 5), never against the login allowances:
//!   whoever sends it holds a token of that session already, and must not be able to
//!   lock its user out of logging in; a session cannot guess faster than one address.
//!
//! Every map is bounded: at most [`LoginLimits::tracked`] entries each (the least
//! used go first), a bucket forgotten once it has been full for a window (it would be
//! full anyway), a known address after `remember`; a flood of made-up names or
//! addresses costs a bounded amount of memory.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use moka::sync::Cache;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolshed_api::ApiCode;

use crate::error::ApiError;

/// The login limits of a server ([`ServerConfig::login`](crate::ServerConfig::login)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginLimits {
    /// Failed attempts per user name from one client address within a window
    /// (default 5).
    pub per_address_user: u32,
    /// Failed attempts per user name from every address within a window (default 10);
    /// attempts from an address the user logged in from do not count.
    pub per_user: u32,
    /// User names one client address may fail on within a window (default 20);
    /// attempts for a user who logged in from the address do not count.
    pub per_address: u32,
    /// Wrong current passwords per session on change-password within a window
    /// (default 5).
    pub per_session: u32,
    /// The window (default 60 s). A used-up allowance comes back one attempt every
    /// `window / limit`.
    pub window: Duration,
    /// How long a user's successful login from an address is remembered (default 7
    /// days).
    pub remember: Duration,
    /// Password checks that run at once (default: the number of cores, at least 2).
    pub hash_slots: usize,
    /// How long an attempt waits for a free slot before it is answered 429 (default 2 s).
    pub hash_wait: Duration,
    /// Entries kept at most, per map (default 100,000).
    pub tracked: u64,
}

impl Default for LoginLimits {
    fn default() -> Self {
        LoginLimits {
            per_address_user: 5,
            per_user: 10,
            per_address: 20,
            per_session: 5,
            window: Duration::from_secs(60),
            remember: Duration::from_secs(7 * 24 * 3600),
            hash_slots: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(2)
                .max(2),
            hash_wait: Duration::from_secs(2),
            tracked: 100_000,
        }
    }
}

/// A user name from an address.
type Pair = (IpAddr, String);

/// The buckets, the known addresses and the slots of one server.
pub(crate) struct LoginLimiter {
    limits: LoginLimits,
    start: Instant,
    pairs: Cache<Pair, Arc<Bucket>>,
    users: Cache<String, Arc<Bucket>>,
    addresses: Cache<IpAddr, Arc<Bucket>>,
    sessions: Cache<String, Arc<Bucket>>,
    known: Cache<Pair, ()>,
    slots: Arc<Semaphore>,
}

/// A token bucket of failed attempts as one atomic (GCRA): the "theoretical arrival
/// time" of the next attempt, in nanoseconds since the limiter's start. The bucket is
/// full when it is not ahead of now.
#[derive(Default)]
struct Bucket {
    tat: AtomicU64,
}

/// One allowance: how much an attempt costs, and how far ahead of now a bucket may run.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    interval: u64,
    tolerance: u64,
}

impl Allowance {
    fn new(limit: u32, window: Duration) -> Self {
        let limit = u64::from(limit.max(1));
        let window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX / 4);
        let interval = (window / limit).max(1);
        Allowance {
            interval,
            tolerance: interval.saturating_mul(limit - 1),
        }
    }
}

impl Bucket {
    /// Take one attempt, or `Err(nanoseconds until one comes back)`.
    fn take(&self, now: u64, a: Allowance) -> Result<(), u64> {
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let from = tat.max(now);
            if from - now > a.tolerance {
                return Err(from - now - a.tolerance);
            }
            match self.tat.compare_exchange_weak(
                tat,
                from + a.interval,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
    }

    /// Give an attempt back (it succeeded, or was never checked).
    fn give_back(&self, a: Allowance) {
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(a.interval))
            });
    }

    /// No attempt is outstanding.
    fn is_full(&self, now: u64) -> bool {
        self.tat.load(Ordering::Relaxed) <= now
    }
}

/// An admitted attempt: it holds a hashing slot, and counts against the buckets it
/// took from unless [`succeeded`](Attempt::succeeded) is called. A failed attempt from
/// a known address forgets the address.
pub(crate) struct Attempt {
    taken: Vec<(Arc<Bucket>, Allowance)>,
    known: Option<(Cache<Pair, ()>, Pair)>,
    remember: Option<(Cache<Pair, ()>, Pair)>,
    _slot: OwnedSemaphorePermit,
}

impl Attempt {
    /// The password was right: the attempt does not count, and the address is the
    /// user's known one from now on.
    pub(crate) fn succeeded(mut self) {
        for (bucket, allowance) in self.taken.drain(..) {
            bucket.give_back(allowance);
        }
        self.known = None;
        if let Some((cache, pair)) = self.remember.take() {
            cache.insert(pair, ());
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        // Failed (or abandoned): a known address loses its standing.
        if let Some((cache, pair)) = self.known.take() {
            cache.invalidate(&pair);
        }
    }
}

/// The buckets taken so far, given back when a later one refuses.
struct Taking(Vec<(Arc<Bucket>, Allowance)>);

impl Taking {
    fn take(&mut self, bucket: Arc<Bucket>, now: u64, a: Allowance) -> Result<(), u64> {
        bucket.take(now, a)?;
        self.0.push((bucket, a));
        Ok(())
    }

    fn give_back(self) {
        for (bucket, a) in self.0 {
            bucket.give_back(a);
        }
    }
}

impl LoginLimiter {
    pub(crate) fn new(limits: LoginLimits) -> Self {
        LoginLimiter {
            start: Instant::now(),
            pairs: buckets(&limits),
            users: buckets(&limits),
            addresses: buckets(&limits),
            sessions: buckets(&limits),
            known: Cache::builder()
                .max_capacity(limits.tracked)
                .time_to_live(limits.remember)
                .build(),
            slots: Arc::new(Semaphore::new(limits.hash_slots.max(1))),
            limits,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX / 4)
    }

    fn allowance(&self, limit: u32) -> Allowance {
        Allowance::new(limit, self.limits.window)
    }

    /// Admit one login attempt for `user` from `address`, or answer 429: an allowance
    /// it takes from is used up (no slot is taken), or no hashing slot came free within
    /// `hash_wait`.
    pub(crate) async fn admit(
        &self,
        user: &str,
        address: Option<IpAddr>,
    ) -> Result<Attempt, ApiError> {
        let now = self.now();
        // Keyed by the name as given, capped in length, so a long made-up name costs no
        // more than a short one.
        let name: String = user.chars().take(64).collect();
        let mut taking = Taking(Vec::with_capacity(3));
        let mut known = None;
        let mut remember = None;
        let refused = |taking: Taking, whom: &str, wait: u64| {
            taking.give_back();
            too_many(whom, wait)
        };
        if let Some(ip) = address.map(|a| a.to_canonical()) {
            let pair: Pair = (ip, name.clone());
            let is_known = self.known.contains_key(&pair);
            let bucket = self.pairs.get_with(pair.clone(), Arc::default);
            let first_failure = bucket.is_full(now);
            if let Err(wait) =
                taking.take(bucket, now, self.allowance(self.limits.per_address_user))
            {
                return Err(refused(taking, "for this user from this address", wait));
            }
            if is_known {
                known = Some((self.known.clone(), pair.clone()));
            } else {
                if first_failure {
                    let bucket = self.addresses.get_with(ip, Arc::default);
                    if let Err(wait) =
                        taking.take(bucket, now, self.allowance(self.limits.per_address))
                    {
                        return Err(refused(
                            taking,
                            "from this address for different user names",
                            wait,
                        ));
                    }
                }
                let bucket = self.users.get_with(name, Arc::default);
                if let Err(wait) = taking.take(bucket, now, self.allowance(self.limits.per_user)) {
                    return Err(refused(taking, "for this user", wait));
                }
            }
            remember = Some((self.known.clone(), pair));
        } else {
            let bucket = self.users.get_with(name, Arc::default);
            if let Err(wait) = taking.take(bucket, now, self.allowance(self.limits.per_user)) {
                return Err(refused(taking, "for this user", wait));
            }
        }
        let slot = match self.slot().await {
            Ok(slot) => slot,
            Err(busy) => {
                // Nothing was checked: the attempt does not count.
                taking.give_back();
                return Err(busy);
            }
        };
        Ok(Attempt {
            taken: taking.0,
            known,
            remember,
            _slot: slot,
        })
    }

    /// Admit one check of a signed-in caller's current password (change-password) in
    /// session `session`, or answer 429: the session's wrong guesses are used up, or no
    /// hashing slot came free. Counts against no login allowance.
    pub(crate) async fn admit_in_session(&self, session: &str) -> Result<Attempt, ApiError> {
        let now = self.now();
        let bucket = self.sessions.get_with(session.to_owned(), Arc::default);
        let a = self.allowance(self.limits.per_session);
        if let Err(wait) = bucket.take(now, a) {
            return Err(ApiError::new(
                ApiCode::TooManyAttempts,
                format!(
                    "too many wrong current passwords in this session; try again in {} s",
                    seconds(wait)
                ),
            )
            .with_retry_after(seconds(wait)));
        }
        match self.slot().await {
            Ok(slot) => Ok(Attempt {
                taken: vec![(bucket, a)],
                known: None,
                remember: None,
                _slot: slot,
            }),
            Err(busy) => {
                bucket.give_back(a);
                Err(busy)
            }
        }
    }

    /// A hashing slot for hashing a new password (an authenticated caller's), or 429
    /// when none comes free within `hash_wait`. Counts against no limit.
    pub(crate) async fn hash_slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.slot().await
    }

    async fn slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
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

/// A map of buckets. Idle for a window, a bucket is full again: forgetting it is exact.
fn buckets<K>(limits: &LoginLimits) -> Cache<K, Arc<Bucket>>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(limits.tracked)
        .time_to_idle(limits.window)
        .build()
}

/// Whole seconds, rounded up, at least 1.
fn seconds(nanos: u64) -> u64 {
    nanos.div_ceil(1_000_000_000).max(1)
}

fn too_many(whom: &str, wait: u64) -> ApiError {
    let retry_after = seconds(wait);
    ApiError::new(
        ApiCode::TooManyAttempts,
        format!("too many failed logins {whom}; try again in {retry_after} s"),
    )
    .with_retry_after(retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_address_user: u32, per_user: u32, per_address: u32) -> LoginLimiter {
        LoginLimiter::new(LoginLimits {
            per_address_user,
            per_user,
            per_address,
            per_session: 2,
            window: Duration::from_secs(60),
            remember: Duration::from_secs(3600),
            hash_slots: 4,
            hash_wait: Duration::from_millis(50),
            tracked: 100,
        })
    }

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    async fn fail(l: &LoginLimiter, user: &str, address: Option<IpAddr>) -> Result<(), String> {
        l.admit(user, address)
            .await
            .map(drop)
            .map_err(|e| e.message().to_owned())
    }

    async fn succeed(l: &LoginLimiter, user: &str, address: Option<IpAddr>) -> Result<(), String> {
        l.admit(user, address)
            .await
            .map(Attempt::succeeded)
            .map_err(|e| e.message().to_owned())
    }

    #[tokio::test]
    async fn failures_count_per_user_and_address_and_successes_do_not() {
        let l = limiter(2, 100, 100);
        for _ in 0..5 {
            succeed(&l, "ana", ip(1)).await.unwrap();
        }
        let l = limiter(2, 100, 100);
        fail(&l, "ana", ip(1)).await.unwrap();
        fail(&l, "ana", ip(1)).await.unwrap();
        let e = l.admit("ana", ip(1)).await.err().unwrap();
        assert_eq!(e.code(), ApiCode::TooManyAttempts);
        assert!(
            e.message().contains("for this user from this address"),
            "{}",
            e.message()
        );
        // One attempt comes back every 30 s.
        assert!(
            e.retry_after().is_some_and(|s| (1..=30).contains(&s)),
            "{e:?}"
        );
        // The same user from elsewhere, and another user from here, are not limited.
        fail(&l, "ana", ip(2)).await.unwrap();
        fail(&l, "bob", ip(1)).await.unwrap();
    }

    #[tokio::test]
    async fn a_user_is_limited_across_addresses_but_not_from_a_known_one() {
        let l = limiter(100, 3, 100);
        succeed(&l, "ana", ip(9)).await.unwrap();
        for last in 1..=3 {
            fail(&l, "ana", ip(last)).await.unwrap();
        }
        let e = fail(&l, "ana", ip(4)).await.unwrap_err();
        assert!(e.contains("for this user"), "{e}");
        // From where ana logged in before, her right password still works…
        succeed(&l, "ana", ip(9)).await.unwrap();
        // …and a failure there forgets it: the next attempt from there waits too.
        fail(&l, "ana", ip(9)).await.unwrap();
        let e = fail(&l, "ana", ip(9)).await.unwrap_err();
        assert!(e.contains("for this user"), "{e}");
    }

    #[tokio::test]
    async fn an_address_is_limited_by_user_names_not_by_attempts() {
        let l = limiter(1000, 1000, 3);
        // A flood against a few accounts uses up one name each.
        for _ in 0..50 {
            for name in ["a", "b"] {
                fail(&l, name, ip(7)).await.unwrap();
            }
        }
        // A bystander from the same address still gets checked.
        succeed(&l, "bea", ip(7)).await.unwrap();
        // Spraying: every new name takes one.
        fail(&l, "c", ip(7)).await.unwrap();
        let e = fail(&l, "d", ip(7)).await.unwrap_err();
        assert!(e.contains("from this address"), "{e}");
        // One name's allowance comes back within seconds (60 s / 3 = 20 s here).
        let e = l.admit("d", ip(7)).await.err().unwrap();
        assert!(e.retry_after().is_some_and(|s| s <= 20), "{e:?}");
        // A name that logged in from here before is not held back by the spray.
        succeed(&l, "bea", ip(7)).await.unwrap();
        // Nor is anyone from another address.
        fail(&l, "d", ip(8)).await.unwrap();
    }

    #[tokio::test]
    async fn wrong_current_passwords_count_per_session_only() {
        let l = limiter(1, 1, 1);
        for _ in 0..2 {
            drop(l.admit_in_session("s-1").await.unwrap());
        }
        let e = l.admit_in_session("s-1").await.err().unwrap();
        assert!(e.message().contains("in this session"), "{}", e.message());
        // Another session of the user, and the user's logins, are untouched.
        drop(l.admit_in_session("s-2").await.unwrap());
        succeed(&l, "ana", ip(1)).await.unwrap();
    }

    #[tokio::test]
    async fn busy_slots_answer_429_and_do_not_count() {
        let l = LoginLimiter::new(LoginLimits {
            hash_slots: 1,
            hash_wait: Duration::from_millis(50),
            per_address_user: 1,
            ..LoginLimits::default()
        });
        let held = l.admit("ana", ip(1)).await.unwrap();
        let e = l.admit("bob", ip(1)).await.err().unwrap();
        assert!(e.message().contains("busy"), "{}", e.message());
        assert_eq!(e.retry_after(), Some(1));
        drop(held);
        // bob's refused attempt was not counted: his one attempt is still there.
        drop(l.admit("bob", ip(1)).await.unwrap());
    }

    #[tokio::test]
    async fn every_map_is_bounded() {
        let l = limiter(5, 5, 5);
        for i in 0..10_000u32 {
            let [a, b, c, d] = i.to_be_bytes();
            let address = Some(IpAddr::from([a.max(1), b, c, d]));
            let name = format!("user-{i}");
            if i % 2 == 0 {
                succeed(&l, &name, address).await.unwrap();
            } else {
                fail(&l, &name, address).await.unwrap();
            }
            drop(l.admit_in_session(&name).await.unwrap());
        }
        for (map, count) in [
            ("pairs", {
                l.pairs.run_pending_tasks();
                l.pairs.entry_count()
            }),
            ("users", {
                l.users.run_pending_tasks();
                l.users.entry_count()
            }),
            ("addresses", {
                l.addresses.run_pending_tasks();
                l.addresses.entry_count()
            }),
            ("sessions", {
                l.sessions.run_pending_tasks();
                l.sessions.entry_count()
            }),
            ("known", {
                l.known.run_pending_tasks();
                l.known.entry_count()
            }),
        ] {
            assert!(count <= 100, "{map}: {count} entries");
        }
    }
}
