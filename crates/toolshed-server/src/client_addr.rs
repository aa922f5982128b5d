//! The client's address, which the login limits count by: the socket peer's, unless
//! the peer is a proxy the operator trusts (`toolshed serve --trusted-proxy CIDR`).
//! Then it is the address the proxies' forwarding headers name (`Forwarded`, RFC 7239,
//! or `X-Forwarded-For`), read from the right: the rightmost hop that is not a trusted
//! proxy, since every hop left of it was written by someone no trusted proxy vouches
//! for. Without a trusted proxy the headers are ignored: any client can write them.
//!
//! A proxy appends to one of the two headers, and passes the other one on as the
//! client sent it. When a request carries both and they name different clients, which
//! one the proxy wrote cannot be told, so neither is believed: the client is the proxy
//! itself. A client forging the header its proxy does not write is then counted with
//! every other such request, never as an address of its choosing.
//!
//! The forwarding headers are parsed by hand: only the `for=` nodes of `Forwarded` and
//! the comma-separated list of `X-Forwarded-For` matter, and the crates that parse them
//! bring a framework along.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use axum::http::HeaderMap;

/// An address or range whose connections are a proxy's: its forwarding headers are
/// believed, and the per-address connection cap does not apply to it (it carries many
/// clients; it enforces its own limits on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustedProxy(ipnet::IpNet);

impl TrustedProxy {
    /// Whether `ip` is in the range (an IPv4 address mapped into IPv6 counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }
}

/// Why a trusted proxy did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{given}` is not an address or a range: write an IP address or a CIDR range, e.g. `192.0.2.7`, `10.0.0.0/8` or `fd00::/8`"
)]
pub struct TrustedProxyParseError {
    given: String,
}

impl FromStr for TrustedProxy {
    type Err = TrustedProxyParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let net = match text.parse::<ipnet::IpNet>() {
            Ok(net) => net,
            Err(_) => text
                .parse::<IpAddr>()
                .map(ipnet::IpNet::from)
                .map_err(|_| TrustedProxyParseError {
                    given: s.to_owned(),
                })?,
        };
        // `10.1.2.3/8` means `10.0.0.0/8`.
        Ok(TrustedProxy(net.trunc()))
    }
}

impl fmt::Display for TrustedProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether `ip` is one of the trusted proxies.
pub(crate) fn is_trusted(ip: IpAddr, trusted: &[TrustedProxy]) -> bool {
    trusted.iter().any(|t| t.contains(ip))
}

/// The client of a request that came from `peer` with `headers`.
pub(crate) fn client_address(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[TrustedProxy],
) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let forwarded = hops(headers, "forwarded", forwarded_node);
    let forwarded_for = hops(headers, "x-forwarded-for", |entry| Some(node(entry)));
    let from = |hops: Vec<Hop>| rightmost_untrusted(peer, &hops, trusted);
    match (forwarded, forwarded_for) {
        (None, None) => peer,
        (Some(h), None) | (None, Some(h)) => from(h),
        (Some(a), Some(b)) => {
            let (a, b) = (from(a), from(b));
            if a == b { a } else { peer }
        }
    }
}

/// One hop of a forwarding header: an address, or something else (`unknown`, an
/// obfuscated name, garbage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    Address(IpAddr),
    Unknown,
}

/// At most this many hops are read, from the right; a chain of more trusted proxies
/// than this is not a deployment.
const MAX_HOPS: usize = 32;

/// The hops of every instance of header `name`, left to right (`None` without the
/// header). `parse` reads one comma-separated element; `None` skips it.
fn hops(headers: &HeaderMap, name: &str, parse: fn(&str) -> Option<Hop>) -> Option<Vec<Hop>> {
    let mut values = headers.get_all(name).iter().peekable();
    values.peek()?;
    let mut hops = Vec::new();
    for value in values {
        // A header that is not visible ASCII is no hop anyone trusted wrote.
        let Ok(text) = value.to_str() else {
            hops.push(Hop::Unknown);
            continue;
        };
        hops.extend(split_outside_quotes(text, ',').filter_map(parse));
    }
    if hops.len() > MAX_HOPS {
        hops.drain(..hops.len() - MAX_HOPS);
    }
    Some(hops)
}

/// The client: walking from the right, past the trusted proxies, the first hop that is
/// not one. An unreadable hop stops the walk at the proxy that wrote it (what is left of
/// it cannot be believed); when every hop is trusted, the leftmost.
fn rightmost_untrusted(peer: IpAddr, hops: &[Hop], trusted: &[TrustedProxy]) -> IpAddr {
    let mut nearest = peer;
    for hop in hops.iter().rev() {
        match *hop {
            Hop::Address(ip) if is_trusted(ip, trusted) => nearest = ip,
            Hop::Address(ip) => return ip,
            Hop::Unknown => return nearest,
        }
    }
    nearest
}

/// The `for=` node of one `Forwarded` element (`for=192.0.2.60;proto=http`); an
/// element without one is an unknown hop. Parameter names are case-insensitive.
fn forwarded_node(element: &str) -> Option<Hop> {
    let element = element.trim();
    if element.is_empty() {
        return None;
    }
    let node = split_outside_quotes(element, ';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim().eq_ignore_ascii_case("for").then_some(value)
    });
    Some(node.map_or(Hop::Unknown, |v| node_of(unquote(v.trim()))))
}

/// One `X-Forwarded-For` entry.
fn node(entry: &str) -> Hop {
    node_of(entry.trim())
}

/// A node: `192.0.2.60`, `192.0.2.60:4711`, `2001:db8::1`, `[2001:db8::1]` or
/// `[2001:db8::1]:4711`; anything else is unknown.
fn node_of(text: &str) -> Hop {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Hop::Address(ip.to_canonical());
    }
    let host = match text.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map(|(inside, _)| inside),
        None => text.split_once(':').map(|(host, _)| host),
    };
    host.and_then(|h| h.parse::<IpAddr>().ok())
        .map_or(Hop::Unknown, |ip| Hop::Address(ip.to_canonical()))
}

/// A quoted-string's content (escapes dropped), or the token as it is.
fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

/// Split on `sep` where it is not inside a quoted string.
fn split_outside_quotes(text: &str, sep: char) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn proxies(list: &[&str]) -> Vec<TrustedProxy> {
        list.iter()
            .map(|p| p.parse().unwrap_or_else(|e| panic!("{e}")))
            .collect()
    }

    fn check(peer: &str, headers: &[(&str, &str)], trusted: &[&str], expect: &str) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes())
                    .unwrap_or_else(|e| panic!("{e}")),
                HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")),
            );
        }
        let got = client_address(
            peer.parse().unwrap_or_else(|e| panic!("{e}")),
            &map,
            &proxies(trusted),
        );
        assert_eq!(
            got.to_string(),
            expect,
            "{peer} {headers:?} trusted {trusted:?}"
        );
    }

    #[test]
    fn proxies_parse_as_addresses_or_ranges_and_refuse_the_rest() {
        let shown: Vec<String> = proxies(&[
            "10.0.0.0/8",
            "192.0.2.7",
            "fd00::/8",
            "10.1.2.3/16",
            " ::1 ",
        ])
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            shown,
            [
                "10.0.0.0/8",
                "192.0.2.7/32",
                "fd00::/8",
                "10.1.0.0/16",
                "::1/128"
            ]
        );
        for bad in ["", "10.0.0.0/33", "proxy.internal", "10.0.0", "*"] {
            let err = bad.parse::<TrustedProxy>().unwrap_err().to_string();
            assert!(
                err.contains("CIDR") && err.contains(&format!("`{bad}`")),
                "{err}"
            );
        }
    }

    #[test]
    fn headers_are_ignored_unless_the_peer_is_a_trusted_proxy() {
        let spoof = [
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=203.0.113.9"),
        ];
        check("198.51.100.4", &spoof, &[], "198.51.100.4");
        check("198.51.100.4", &spoof, &["10.0.0.0/8"], "198.51.100.4");
        check("10.0.0.2", &spoof, &["10.0.0.0/8"], "203.0.113.9");
        // An IPv4 peer mapped into IPv6 is the IPv4 address.
        check("::ffff:10.0.0.2", &spoof, &["10.0.0.0/8"], "203.0.113.9");
        // A trusted proxy without the headers is the client.
        check("10.0.0.2", &[], &["10.0.0.0/8"], "10.0.0.2");
    }

    #[test]
    fn the_client_is_the_rightmost_hop_no_trusted_proxy_wrote() {
        let t = &["10.0.0.0/8"];
        // A client's own entries (left) are never believed over the proxy's (right).
        check(
            "10.0.0.2",
            &[("x-forwarded-for", "1.2.3.4, 203.0.113.9")],
            t,
            "203.0.113.9",
        );
        check(
            "10.0.0.2",
            &[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.0.0.3")],
            t,
            "203.0.113.9",
        );
        // Several header lines read as one list, in order.
        check(
            "10.0.0.2",
            &[
                ("x-forwarded-for", "1.2.3.4"),
                ("x-forwarded-for", "203.0.113.9, 10.0.0.3"),
            ],
            t,
            "203.0.113.9",
        );
        // Every hop trusted: the leftmost.
        check(
            "10.0.0.2",
            &[("x-forwarded-for", "10.0.0.9, 10.0.0.3")],
            t,
            "10.0.0.9",
        );
        // An unreadable hop: the proxy that wrote it.
        check(
            "10.0.0.2",
            &[("x-forwarded-for", "1.2.3.4, unknown, 10.0.0.3")],
            t,
            "10.0.0.3",
        );
        check("10.0.0.2", &[("x-forwarded-for", "garbage")], t, "10.0.0.2");
        // Ports and brackets.
        check(
            "10.0.0.2",
            &[("x-forwarded-for", "203.0.113.9:4711")],
            t,
            "203.0.113.9",
        );
        check(
            "10.0.0.2",
            &[("x-forwarded-for", "2001:db8::1")],
            t,
            "2001:db8::1",
        );
        check(
            "10.0.0.2",
            &[("x-forwarded-for", "[2001:db8::1]:80")],
            t,
            "2001:db8::1",
        );
    }

    #[test]
    fn forwarded_reads_the_for_node_of_each_element() {
        let t = &["10.0.0.0/8"];
        check(
            "10.0.0.2",
            &[(
                "forwarded",
                "for=1.2.3.4, for=203.0.113.9;proto=https;by=10.0.0.2",
            )],
            t,
            "203.0.113.9",
        );
        check(
            "10.0.0.2",
            &[("forwarded", r#"For="[2001:db8:cafe::17]:4711""#)],
            t,
            "2001:db8:cafe::17",
        );
        check(
            "10.0.0.2",
            &[("forwarded", "for=203.0.113.9:8080;proto=http")],
            t,
            "203.0.113.9",
        );
        // A quoted comma does not split an element.
        check(
            "10.0.0.2",
            &[("forwarded", r#"for=203.0.113.9;by="a,b""#)],
            t,
            "203.0.113.9",
        );
        // `unknown`, an obfuscated node, or an element without `for`: the proxy.
        check("10.0.0.2", &[("forwarded", "for=unknown")], t, "10.0.0.2");
        check(
            "10.0.0.2",
            &[("forwarded", "for=_hidden, for=10.0.0.5")],
            t,
            "10.0.0.5",
        );
        check("10.0.0.2", &[("forwarded", "proto=https")], t, "10.0.0.2");
    }

    #[test]
    fn both_headers_count_only_when_they_agree() {
        let t = &["10.0.0.0/8"];
        check(
            "10.0.0.2",
            &[
                ("forwarded", "for=203.0.113.9"),
                ("x-forwarded-for", "203.0.113.9"),
            ],
            t,
            "203.0.113.9",
        );
        // The proxy wrote one of them and the client the other: neither is believed.
        check(
            "10.0.0.2",
            &[
                ("forwarded", "for=1.2.3.4"),
                ("x-forwarded-for", "203.0.113.9"),
            ],
            t,
            "10.0.0.2",
        );
    }
}
