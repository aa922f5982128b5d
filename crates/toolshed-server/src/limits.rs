//! The server's limits on its clients: how many connections it holds, how many of them
//! one address may hold, and how long a silent or slow one may stay
//! ([`ConnectionLimits`], enforced by the accept loop), and how fast one tenant may
//! execute ([`Rate`], enforced by [`RateLimiter`]).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How many connections the server holds and how long an idle or slow one may stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// The most connections open at once (default 1024). At the cap the server stops
    /// accepting: further connections wait in the kernel's backlog until one closes.
    pub max_connections: usize,
    /// The most connections one client address holds at once (default 128; at most
    /// `max_connections`), an IPv6 client counted by its /64. One more is answered 429
    /// `TOO_MANY_CONNECTIONS` and closed. Trusted proxies are not capped this way.
    pub max_connections_per_address: usize,
    /// How long a request's head (request line and headers) may take to arrive, from
    /// its first byte (default 10 s).
    pub header_timeout: Duration,
    /// How long a connection with no request in progress may stay without moving a
    /// byte, before its next request or while its client is not reading the answer
    /// (default 60 s).
    pub idle_timeout: Duration,
    /// How long a request's body may take to arrive whole, from its head's arrival
    /// (default 300 s); past it, 408 `BODY_TIMEOUT` and the connection closes.
    pub body_timeout: Duration,
    /// The slowest a request's body may arrive on average once `body_rate_grace` has
    /// passed, in bytes per second (default 1024; 0: no minimum); slower is 408
    /// `BODY_TIMEOUT` and the connection closes.
    pub min_body_rate: u32,
    /// How long a body may take before the minimum rate applies (default 5 s).
    pub body_rate_grace: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            max_connections_per_address: 128,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(300),
            min_body_rate: 1024,
            body_rate_grace: Duration::from_secs(5),
        }
    }
}

impl ConnectionLimits {
    /// How often a connection with a request in progress is looked at again.
    pub(crate) fn check_interval(&self) -> Duration {
        self.header_timeout
            .min(self.idle_timeout)
            .max(Duration::from_millis(10))
    }
}

/// The server's limits on its clients (part of [`crate::ServerConfig`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Connections: the cap and the timeouts.
    pub connections: ConnectionLimits,
    /// Executions per tenant (`POST /api/v1/tools/{id}/execute`). `None` (the default):
    /// unlimited, as before this setting existed; an operator sets it with
    /// `toolshed serve --execute-rate`.
    pub execute_rate: Option<Rate>,
    /// How many runs (executes, sandboxed executions) one tenant may start per period,
    /// so no tenant can fill the journal (429 `RUN_QUOTA_EXCEEDED` past it). Default
    /// [`RunQuota::DEFAULT`]; `None` turns it off (`toolshed serve --run-quota off`).
    pub run_quota: Option<RunQuota>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: ConnectionLimits::default(),
            execute_rate: None,
            run_quota: Some(RunQuota::DEFAULT),
        }
    }
}

/// A tenant's run quota: `runs` per `per`, as a token bucket that holds `runs` and
/// refills over `per` (so a tenant that used none may start `runs` at once, and then
/// `runs` per `per` on average).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunQuota {
    /// Runs per period (at least 1).
    pub runs: u32,
    /// The period.
    pub per: Duration,
}

impl RunQuota {
    /// 100,000 runs per tenant per day: at about 2 KB a run, 200 MB a day, and with the
    /// default retention of 30 days at most about 6 GB per tenant.
    pub const DEFAULT: RunQuota = RunQuota {
        runs: 100_000,
        per: Duration::from_secs(86_400),
    };

    /// The quota as a rate with a burst of the whole quota.
    pub(crate) fn rate(&self) -> Rate {
        Rate {
            per_second: f64::from(self.runs.max(1)) / self.per.as_secs_f64().max(1e-3),
            burst: self.runs.max(1),
        }
    }
}

impl Default for RunQuota {
    fn default() -> Self {
        RunQuota::DEFAULT
    }
}

/// A sustained rate with a burst: `per_second` on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Calls per second, on average (above 0).
    pub per_second: f64,
    /// Calls that may come at once after a quiet spell (at least 1).
    pub burst: u32,
}

/// Why a rate did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{given}` is not a rate: write PER_SECOND[:BURST], e.g. `50` or `50:100` (PER_SECOND above 0, BURST a whole number of at least 1)"
)]
pub struct RateParseError {
    given: String,
}

impl FromStr for Rate {
    type Err = RateParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || RateParseError {
            given: s.to_owned(),
        };
        let (rate, burst) = match s.split_once(':') {
            Some((r, b)) => (r, Some(b)),
            None => (s, None),
        };
        let per_second: f64 = rate.trim().parse().map_err(|_| bad())?;
        if !per_second.is_finite() || per_second <= 0.0 || per_second > 1e9 {
            return Err(bad());
        }
        let burst = match burst {
            Some(b) => b.trim().parse::<u32>().map_err(|_| bad())?,
            // One second's worth by default.
            None => per_second.ceil().clamp(1.0, f64::from(u32::MAX)) as u32,
        };
        if burst == 0 {
            return Err(bad());
        }
        Ok(Rate { per_second, burst })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.per_second, self.burst)
    }
}

/// Shards of the tenants' buckets: a lookup read-locks one shard, so executes of
/// different tenants rarely share a lock, and never wait on a writer but when a
/// tenant is seen for the first time.
const SHARDS: usize = 16;

/// One shard of the buckets: tenant → its bucket's theoretical arrival time.
type Shard = RwLock<HashMap<Arc<str>, Arc<AtomicU64>>>;

/// One token bucket per tenant, each a single atomic (GCRA: the bucket is the
/// "theoretical arrival time" of the next call), in a sharded map. A check is one
/// read lock, one hash and one compare-and-swap.
pub struct RateLimiter {
    rate: Rate,
    /// Nanoseconds one call costs: `1 / per_second`.
    interval_ns: u64,
    /// How far ahead of now the bucket may run: `(burst - 1) × interval`.
    tolerance_ns: u64,
    start: Instant,
    hasher: RandomState,
    shards: Box<[Shard]>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    /// A limiter allowing `rate` to every key.
    pub fn new(rate: Rate) -> Self {
        let interval_ns = (1e9 / rate.per_second).round().max(1.0) as u64;
        RateLimiter {
            rate,
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(u64::from(rate.burst.max(1)) - 1),
            start: Instant::now(),
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
        }
    }

    /// The rate it allows.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Take one call for `key`: `Ok`, or `Err(wait)` with how long until one is allowed.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let bucket = self.bucket(key);
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX / 2);
        let mut tat = bucket.load(Ordering::Relaxed);
        loop {
            let from = tat.max(now);
            if from - now > self.tolerance_ns {
                return Err(Duration::from_nanos(from - now - self.tolerance_ns));
            }
            match bucket.compare_exchange_weak(
                tat,
                from + self.interval_ns,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
    }

    fn bucket(&self, key: &str) -> Arc<AtomicU64> {
        let shard = &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS];
        if let Some(b) = shard
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
        {
            return b.clone();
        }
        shard
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(Arc::from(key))
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_and_without_a_burst() {
        assert_eq!(
            "50".parse::<Rate>(),
            Ok(Rate {
                per_second: 50.0,
                burst: 50
            })
        );
        assert_eq!(
            "0.5:3".parse::<Rate>(),
            Ok(Rate {
                per_second: 0.5,
                burst: 3
            })
        );
        for bad in ["", "0", "-1", "x", "5:0", "5:x", "inf", "NaN", "5:-2"] {
            let err = bad.parse::<Rate>().unwrap_err();
            assert!(
                err.to_string().contains("PER_SECOND[:BURST]"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_bucket_allows_its_burst_then_names_the_wait_and_keys_are_apart() {
        let limiter = RateLimiter::new(Rate {
            per_second: 0.001,
            burst: 3,
        });
        for _ in 0..3 {
            assert_eq!(limiter.check("a"), Ok(()));
        }
        let wait = limiter.check("a").unwrap_err();
        assert!(wait > Duration::from_secs(900), "{wait:?}");
        // Another tenant has its own bucket.
        assert_eq!(limiter.check("b"), Ok(()));
    }
}
