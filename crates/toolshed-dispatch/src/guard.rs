//! Where an `http(s)://` tool may connect: public addresses only, unless the operator
//! allowlists a host or a range. The check runs on the addresses a name resolves to, in
//! the client's own resolver (`GuardedResolver`), so the addresses checked are the
//! ones connected to: a DNS answer that changes between a check and the connection (a
//! rebinding) cannot slip a private address through.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Where HTTP endpoints may connect, and how long and how much they may answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPolicy {
    /// Hosts and ranges reachable even when not public (the operator's allowlist).
    pub allow: Vec<HttpAllow>,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// How long one call may take in all (connecting, sending, the whole answer), on
    /// top of the call's own timeout, which usually ends it first.
    pub timeout: Duration,
}

impl Default for HttpPolicy {
    /// Public addresses only, 10 s to connect, 5 minutes in all.
    fn default() -> Self {
        HttpPolicy {
            allow: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
        }
    }
}

impl HttpPolicy {
    /// The policy with loopback (`127.0.0.0/8`, `::1`) allowed too: what the CLI uses on
    /// its user's own machine, where a tool at `http://localhost:8080` is the usual
    /// development set-up and reaches nothing the user could not reach anyway.
    pub fn with_loopback(mut self) -> Self {
        for range in ["127.0.0.0/8", "::1/128"] {
            if let Ok(allow) = range.parse() {
                self.allow.push(allow);
            }
        }
        self
    }

    /// Whether a connection to `host` (as the URL names it) at `ip` is allowed; `Err`
    /// says what kind of address was refused.
    pub fn check(&self, host: &str, ip: IpAddr) -> Result<(), &'static str> {
        let ip = canonical(ip);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if self.allow.iter().any(|a| a.matches(host, ip)) {
            return Ok(());
        }
        match refused_kind(ip) {
            Some(kind) => Err(kind),
            None => Ok(()),
        }
    }
}

/// One allowlist entry: a host name (any address it resolves to) or a CIDR range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpAllow {
    /// A host name, compared without case (`api.internal`).
    Host(String),
    /// An address range (`10.1.0.0/16`, `127.0.0.1`, `fd00::/8`).
    Range {
        /// The network address.
        net: IpAddr,
        /// The prefix length.
        prefix: u8,
    },
}

impl HttpAllow {
    fn matches(&self, host: &str, ip: IpAddr) -> bool {
        match self {
            HttpAllow::Host(h) => h.eq_ignore_ascii_case(host),
            HttpAllow::Range { net, prefix } => in_range(ip, canonical(*net), *prefix),
        }
    }
}

impl fmt::Display for HttpAllow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpAllow::Host(h) => f.write_str(h),
            HttpAllow::Range { net, prefix } => write!(f, "{net}/{prefix}"),
        }
    }
}

/// Why an allowlist entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{entry}` is not a host name or an address range: {why}; write e.g. `api.internal`, `10.0.0.0/8` or `127.0.0.1`"
)]
pub struct HttpAllowError {
    /// The entry as given.
    pub entry: String,
    /// What is wrong with it.
    pub why: String,
}

impl FromStr for HttpAllow {
    type Err = HttpAllowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let entry = s.trim();
        let err = |why: &str| HttpAllowError {
            entry: s.to_owned(),
            why: why.to_owned(),
        };
        if entry.is_empty() {
            return Err(err("it is empty"));
        }
        let (addr, prefix) = match entry.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (entry, None),
        };
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        if let Ok(net) = addr.parse::<IpAddr>() {
            let max = if net.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                None => max,
                Some(p) => match p.parse::<u8>() {
                    Ok(p) if p <= max => p,
                    _ => return Err(err(&format!("the prefix must be 0 to {max}"))),
                },
            };
            return Ok(HttpAllow::Range { net, prefix });
        }
        if prefix.is_some() {
            return Err(err("a range needs an IP address before the `/`"));
        }
        let valid = entry.len() <= 253
            && entry.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !valid {
            return Err(err("a host name has letters, digits, `-`, `_` and dots"));
        }
        Ok(HttpAllow::Host(entry.to_ascii_lowercase()))
    }
}

/// An IPv4-mapped or -compatible IPv6 address as the IPv4 address it carries, so
/// `::ffff:127.0.0.1` is judged as `127.0.0.1`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn in_range(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// What kind of non-public address `ip` is, if it is one: the cloud metadata
/// addresses by name, then the most specific block of the IANA special-purpose
/// registries ([`crate::special_purpose`]) that is not globally reachable. An IPv6
/// address carrying an IPv4 address (IPv4-compatible, NAT64, 6to4) is judged by that
/// IPv4 address.
fn refused_kind(ip: IpAddr) -> Option<&'static str> {
    const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
    // AWS's IPv6 instance metadata service.
    const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);
    match ip {
        IpAddr::V4(v4) if v4 == METADATA_V4 => return Some("a cloud metadata address"),
        IpAddr::V6(v6) if v6 == METADATA_V6 => return Some("a cloud metadata address"),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return refused_kind(IpAddr::V4(v4));
            }
        }
        IpAddr::V4(_) => {}
    }
    crate::special_purpose::classify(ip)
        .filter(|block| !block.globally_reachable)
        .map(|block| block.says)
}

/// The IPv4 address an IPv6 address carries for a gateway to reach: IPv4-compatible
/// (`::a.b.c.d`, deprecated), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`).
/// (IPv4-mapped addresses were made IPv4 by [`canonical`] already.)
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    if s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified() {
        ip.to_ipv4()
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])))
    } else if s[0] == 0x2002 {
        Some(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])))
    } else {
        None
    }
}

/// The guarded resolver for another crate's reqwest client (the MCP client's
/// Streamable HTTP transport): every address a name resolves to is checked against
/// `policy`, and a name with any refused address is refused whole. A literal address
/// in a URL never reaches a resolver: check it with [`HttpPolicy::check`].
pub fn resolver(policy: &HttpPolicy) -> Arc<dyn reqwest::dns::Resolve> {
    Arc::new(GuardedResolver {
        policy: Arc::new(policy.clone()),
    })
}

/// Why a connection was refused: carried through reqwest's error chain so the
/// dispatcher can name it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{host} resolves to {address}, {kind}, which tools may not reach")]
pub(crate) struct Refused {
    pub(crate) host: String,
    pub(crate) address: IpAddr,
    pub(crate) kind: &'static str,
}

/// The client's resolver: the system's (`getaddrinfo`, on a blocking thread), then
/// every address checked; a name with any refused address is refused whole, so the
/// client never picks one of several.
pub(crate) struct GuardedResolver {
    pub(crate) policy: Arc<HttpPolicy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let lookup = host.clone();
            let addrs: Vec<SocketAddr> =
                tokio::task::spawn_blocking(move || (lookup.as_str(), 0).to_socket_addrs())
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)??
                    .collect();
            for addr in &addrs {
                if let Err(kind) = policy.check(&host, addr.ip()) {
                    return Err(Box::new(Refused {
                        host: host.clone(),
                        address: addr.ip(),
                        kind,
                    })
                        as Box<dyn std::error::Error + Send + Sync>);
                }
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> bool {
        HttpPolicy::default()
            .check("h", ip.parse().expect("an address"))
            .is_err()
    }

    #[test]
    fn non_public_addresses_are_refused() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(refused(ip), "{ip} was allowed");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "100.128.0.1"] {
            assert!(!refused(ip), "{ip} was refused");
        }
    }

    #[test]
    fn documentation_benchmarking_and_shared_ranges_are_refused_in_every_form() {
        let kind = |ip: &str| {
            HttpPolicy::default()
                .check("h", ip.parse().expect("an address"))
                .expect_err(ip)
        };
        for (ip, says) in [
            ("192.0.2.1", "Documentation (TEST-NET-1)"),
            ("198.51.100.1", "Documentation (TEST-NET-2)"),
            ("203.0.113.1", "Documentation (TEST-NET-3)"),
            ("198.18.0.1", "Benchmarking"),
            ("100.64.0.1", "Shared Address Space"),
            ("2001:db8::1", "Documentation"),
        ] {
            assert!(kind(ip).contains(says), "{ip}: {}", kind(ip));
            if let Ok(std::net::IpAddr::V4(v4)) = ip.parse::<IpAddr>() {
                // The IPv4-mapped, IPv4-compatible, NAT64 and 6to4 forms carry it too.
                let [a, b, c, d] = v4.octets();
                for form in [
                    format!("::ffff:{ip}"),
                    format!("::{ip}"),
                    format!("64:ff9b::{ip}"),
                    format!("2002:{a:02x}{b:02x}:{c:02x}{d:02x}::1"),
                ] {
                    assert!(kind(&form).contains(says), "{form}: {}", kind(&form));
                }
            }
        }
    }

    #[test]
    fn every_special_purpose_block_is_judged_as_the_registry_says() {
        use crate::special_purpose::{IPV4, IPV6, last};
        let policy = HttpPolicy::default();
        for block in IPV4.iter().chain(IPV6) {
            for ip in [block.net, last(block)] {
                // Addresses that carry an IPv4 address are judged by it instead.
                let carries_v4 = match ip {
                    IpAddr::V6(v6) => canonical(ip).is_ipv4() || embedded_v4(v6).is_some(),
                    IpAddr::V4(_) => false,
                };
                if carries_v4 {
                    continue;
                }
                // The most specific block holding it decides (e.g. 0.0.0.0 is "This
                // host on this network", inside "This network").
                let decides = crate::special_purpose::classify(ip).unwrap_or(block);
                let verdict = policy.check("h", ip);
                if decides.globally_reachable {
                    assert!(verdict.is_ok(), "{ip} ({}) was refused", decides.name);
                } else {
                    let says = verdict.expect_err(decides.name);
                    assert!(
                        says.contains(decides.name) || says == "a cloud metadata address",
                        "{ip}: {says}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_allowlist_opens_hosts_and_ranges_and_nothing_else() {
        let policy = HttpPolicy {
            allow: vec![
                "api.internal".parse().expect("host"),
                "10.1.0.0/16".parse().expect("range"),
                "127.0.0.2".parse().expect("address"),
            ],
            ..HttpPolicy::default()
        };
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        assert!(policy.check("API.internal", ip("10.9.9.9")).is_ok());
        assert!(policy.check("x", ip("10.1.200.3")).is_ok());
        assert!(policy.check("x", ip("::ffff:10.1.0.1")).is_ok());
        assert!(policy.check("x", ip("10.2.0.1")).is_err());
        assert!(policy.check("x", ip("127.0.0.2")).is_ok());
        assert!(policy.check("x", ip("127.0.0.1")).is_err());
        assert!(
            HttpPolicy::default()
                .with_loopback()
                .check("x", ip("127.0.0.1"))
                .is_ok()
        );
        assert!(
            HttpPolicy::default()
                .with_loopback()
                .check("x", ip("169.254.169.254"))
                .is_err()
        );
    }

    #[test]
    fn bad_allowlist_entries_say_what_to_write() {
        for bad in ["", "10.0.0.0/33", "::/200", "a b", "host/8", "x..y"] {
            let e = bad.parse::<HttpAllow>().expect_err(bad);
            assert!(e.to_string().contains("10.0.0.0/8"), "{e}");
        }
    }
}
