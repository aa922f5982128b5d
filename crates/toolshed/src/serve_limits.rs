//! The flags of `toolshed serve` that limit clients: the connection caps (in all and
//! per client address), the header, body and idle timeouts, the minimum body rate, the
//! per-tenant execute rate and run quota, and the free-disk guard.

use std::time::Duration;

use clap::Args;
use toolshed_server::limits::{Limits, Rate, RunQuota};

/// Limits on clients (flattened into `toolshed serve`'s arguments).
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The most connections held open at once (default 1024). At the cap the server
    /// stops accepting; further connections wait in the kernel's backlog.
    #[arg(long, env = "TOOLSHED_MAX_CONNECTIONS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// The most connections one client address holds at once (default 128, and never
    /// more than --max-connections); an IPv6 client is counted by its /64. One more is
    /// answered 429 TOO_MANY_CONNECTIONS and closed. A --trusted-proxy is not capped so.
    #[arg(long, env = "TOOLSHED_MAX_CONNECTIONS_PER_ADDRESS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_address: Option<u32>,
    /// How long a request's head (request line and headers) may take to arrive, in
    /// seconds (default 10).
    #[arg(long, env = "TOOLSHED_HEADER_TIMEOUT_SECONDS", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_seconds: Option<u64>,
    /// How long a connection with no request in progress may stay silent, in seconds
    /// (default 60).
    #[arg(long, env = "TOOLSHED_IDLE_TIMEOUT_SECONDS", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_seconds: Option<u64>,
    /// How long a request's body may take to arrive whole, in seconds, from its head
    /// (default 300); past it, 408 BODY_TIMEOUT and the connection closes.
    #[arg(long, env = "TOOLSHED_BODY_TIMEOUT_SECONDS", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout_seconds: Option<u64>,
    /// The slowest a request's body may arrive on average after its first 5 seconds, in
    /// bytes per second (default 1024; 0 for no minimum); slower is 408 BODY_TIMEOUT and
    /// the connection closes.
    #[arg(long, env = "TOOLSHED_MIN_BODY_BYTES_PER_SECOND", value_name = "BYTES")]
    min_body_bytes_per_second: Option<u32>,
    /// Executes allowed per tenant: PER_SECOND on average, bursts of BURST (default:
    /// one second's worth). Off by default; over it, an execute is a 429 RATE_LIMITED
    /// with Retry-After.
    #[arg(long, env = "TOOLSHED_EXECUTE_RATE", value_name = "PER_SECOND[:BURST]")]
    execute_rate: Option<Rate>,
    /// Runs one tenant may start per period (executes and sandboxed executions), e.g.
    /// `100000/1d` (the default; units s, m, h, d, w), or `off`. The quota is a bucket
    /// that holds RUNS and refills over AGE; past it, a run is a 429 RUN_QUOTA_EXCEEDED
    /// with Retry-After.
    #[arg(long, env = "TOOLSHED_RUN_QUOTA", value_name = "RUNS/AGE|off", value_parser = parse_run_quota)]
    run_quota: Option<Quota>,
    /// New runs are refused with 503 STORAGE_FULL while the journal's or the
    /// attachments' filesystem has less free space than this many MB (default 1024; 0
    /// turns the guard off).
    #[arg(long, env = "TOOLSHED_MIN_FREE_DISK_MB", value_name = "MB")]
    min_free_disk_mb: Option<u64>,
}

/// `--run-quota`: a quota, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// This quota.
    Runs(RunQuota),
    /// No quota.
    Off,
}

/// `RUNS/AGE` (e.g. `100000/1d`) or `off`.
fn parse_run_quota(text: &str) -> Result<Quota, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Ok(Quota::Off);
    }
    let hint = "write RUNS/AGE, e.g. `100000/1d` or `5000/1h` (RUNS at least 1; AGE a whole number and a unit s, m, h, d or w), or `off`";
    let (runs, age) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not a quota; {hint}"))?;
    let runs: u32 = runs
        .trim()
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("`{runs}` is not a number of runs; {hint}"))?;
    let per = crate::retention::parse_age(age)?;
    if per.is_zero() {
        return Err(format!("the period `{age}` is zero; {hint}"));
    }
    Ok(Quota::Runs(RunQuota { runs, per }))
}

impl LimitArgs {
    /// The limits these flags set, over the defaults.
    pub fn apply(&self, limits: &mut Limits) {
        let c = &mut limits.connections;
        if let Some(n) = self.max_connections {
            c.max_connections = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = self.max_connections_per_address {
            c.max_connections_per_address = usize::try_from(n).unwrap_or(usize::MAX);
        }
        // One address never holds more than all of them.
        c.max_connections_per_address = c.max_connections_per_address.min(c.max_connections);
        if let Some(s) = self.header_timeout_seconds {
            c.header_timeout = Duration::from_secs(s);
        }
        if let Some(s) = self.idle_timeout_seconds {
            c.idle_timeout = Duration::from_secs(s);
        }
        if let Some(s) = self.body_timeout_seconds {
            c.body_timeout = Duration::from_secs(s);
        }
        if let Some(rate) = self.min_body_bytes_per_second {
            c.min_body_rate = rate;
        }
        if let Some(rate) = self.execute_rate {
            limits.execute_rate = Some(rate);
        }
        match self.run_quota {
            Some(Quota::Runs(q)) => limits.run_quota = Some(q),
            Some(Quota::Off) => limits.run_quota = None,
            None => {}
        }
    }

    /// The free-disk guard's floor these flags set, over the default.
    pub fn apply_storage(&self, storage: &mut toolshed_server::storage::StorageSettings) {
        if let Some(mb) = self.min_free_disk_mb {
            storage.min_free_bytes = mb.saturating_mul(1024 * 1024);
        }
    }
}
