//! The IANA IPv4 and IPv6 Special-Purpose Address Registries, as data: every block
//! with its registry name, its RFC and whether the registry calls it globally
//! reachable, plus the few blocks the registries leave to others (multicast, IPv6
//! site-local). [`classify`] finds the most specific block holding an address; the
//! SSRF guard (`crate::guard`) refuses every address whose block is not globally
//! reachable, for HTTP tools and MCP URLs alike.
//!
//! Sources (checked 2025): <https://www.iana.org/assignments/iana-ipv4-special-registry/>
//! and <https://www.iana.org/assignments/iana-ipv6-special-registry/>. A block the
//! registry marks "N/A" (deprecated, or carrying another address inside) counts as not
//! globally reachable; addresses that carry an IPv4 address (IPv4-mapped,
//! IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by that IPv4
//! address first, in the guard.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One block of a special-purpose registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialBlock {
    /// The network address.
    pub net: IpAddr,
    /// The prefix length.
    pub prefix: u8,
    /// The registry's name for it, e.g. `Documentation (TEST-NET-1)`.
    pub name: &'static str,
    /// Where it is defined, e.g. `RFC 5737`.
    pub reference: &'static str,
    /// The registry's "Globally Reachable": only such blocks may be connected to.
    pub globally_reachable: bool,
    /// How a refusal names it: `a documentation address (Documentation (TEST-NET-1), RFC
    /// 5737)`. It starts with the kind of address (`a loopback address`, `a private
    /// address`, …), which messages and callers match on.
    pub says: &'static str,
}

#[expect(
    clippy::too_many_arguments,
    reason = "one row of a table, every column named"
)]
const fn v4(
    a: u8,
    b: u8,
    c: u8,
    d: u8,
    prefix: u8,
    name: &'static str,
    reference: &'static str,
    globally_reachable: bool,
    says: &'static str,
) -> SpecialBlock {
    SpecialBlock {
        net: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        prefix,
        name,
        reference,
        globally_reachable,
        says,
    }
}

const fn v6(
    segments: [u16; 8],
    prefix: u8,
    name: &'static str,
    reference: &'static str,
    globally_reachable: bool,
    says: &'static str,
) -> SpecialBlock {
    let [a, b, c, d, e, f, g, h] = segments;
    SpecialBlock {
        net: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
        prefix,
        name,
        reference,
        globally_reachable,
        says,
    }
}

/// The IPv4 Special-Purpose Address Registry, then multicast (RFC 5771), which has a
/// registry of its own.
#[rustfmt::skip]
pub const IPV4: &[SpecialBlock] = &[
    v4(0, 0, 0, 0, 8, "This network", "RFC 791", false,
        "an unspecified address (This network, RFC 791)"),
    v4(0, 0, 0, 0, 32, "This host on this network", "RFC 1122", false,
        "an unspecified address (This host on this network, RFC 1122)"),
    v4(10, 0, 0, 0, 8, "Private-Use", "RFC 1918", false,
        "a private address (Private-Use, RFC 1918)"),
    v4(100, 64, 0, 0, 10, "Shared Address Space", "RFC 6598", false,
        "a carrier-grade NAT address (Shared Address Space, RFC 6598)"),
    v4(127, 0, 0, 0, 8, "Loopback", "RFC 1122", false,
        "a loopback address (Loopback, RFC 1122)"),
    v4(169, 254, 0, 0, 16, "Link Local", "RFC 3927", false,
        "a link-local address (Link Local, RFC 3927)"),
    v4(172, 16, 0, 0, 12, "Private-Use", "RFC 1918", false,
        "a private address (Private-Use, RFC 1918)"),
    v4(192, 0, 0, 0, 24, "IETF Protocol Assignments", "RFC 6890", false,
        "a reserved address (IETF Protocol Assignments, RFC 6890)"),
    v4(192, 0, 0, 0, 29, "IPv4 Service Continuity Prefix", "RFC 7335", false,
        "a reserved address (IPv4 Service Continuity Prefix, RFC 7335)"),
    v4(192, 0, 0, 8, 32, "IPv4 dummy address", "RFC 7600", false,
        "a reserved address (IPv4 dummy address, RFC 7600)"),
    v4(192, 0, 0, 9, 32, "Port Control Protocol Anycast", "RFC 7723", true,
        "a public address (Port Control Protocol Anycast, RFC 7723)"),
    v4(192, 0, 0, 10, 32, "Traversal Using Relays around NAT Anycast", "RFC 8155", true,
        "a public address (Traversal Using Relays around NAT Anycast, RFC 8155)"),
    v4(192, 0, 0, 170, 32, "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050", false,
        "a reserved address (NAT64/DNS64 Discovery, RFC 8880)"),
    v4(192, 0, 0, 171, 32, "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050", false,
        "a reserved address (NAT64/DNS64 Discovery, RFC 8880)"),
    v4(192, 0, 2, 0, 24, "Documentation (TEST-NET-1)", "RFC 5737", false,
        "a documentation address (Documentation (TEST-NET-1), RFC 5737)"),
    v4(192, 31, 196, 0, 24, "AS112-v4", "RFC 7535", true,
        "a public address (AS112-v4, RFC 7535)"),
    v4(192, 52, 193, 0, 24, "AMT", "RFC 7450", true,
        "a public address (AMT, RFC 7450)"),
    v4(192, 88, 99, 0, 24, "Deprecated (6to4 Relay Anycast)", "RFC 7526", false,
        "a reserved address (Deprecated (6to4 Relay Anycast), RFC 7526)"),
    v4(192, 168, 0, 0, 16, "Private-Use", "RFC 1918", false,
        "a private address (Private-Use, RFC 1918)"),
    v4(192, 175, 48, 0, 24, "Direct Delegation AS112 Service", "RFC 7534", true,
        "a public address (Direct Delegation AS112 Service, RFC 7534)"),
    v4(198, 18, 0, 0, 15, "Benchmarking", "RFC 2544", false,
        "a benchmarking address (Benchmarking, RFC 2544)"),
    v4(198, 51, 100, 0, 24, "Documentation (TEST-NET-2)", "RFC 5737", false,
        "a documentation address (Documentation (TEST-NET-2), RFC 5737)"),
    v4(203, 0, 113, 0, 24, "Documentation (TEST-NET-3)", "RFC 5737", false,
        "a documentation address (Documentation (TEST-NET-3), RFC 5737)"),
    v4(240, 0, 0, 0, 4, "Reserved", "RFC 1112", false,
        "a reserved address (Reserved, RFC 1112)"),
    v4(255, 255, 255, 255, 32, "Limited Broadcast", "RFC 8190, RFC 919", false,
        "a broadcast address (Limited Broadcast, RFC 919)"),
    v4(224, 0, 0, 0, 4, "Multicast", "RFC 5771", false,
        "a multicast address (Multicast, RFC 5771)"),
];

/// The IPv6 Special-Purpose Address Registry, then multicast (RFC 4291) and the
/// deprecated site-local block (RFC 3879), which it does not list.
pub const IPV6: &[SpecialBlock] = &[
    v6(
        [0, 0, 0, 0, 0, 0, 0, 1],
        128,
        "Loopback Address",
        "RFC 4291",
        false,
        "a loopback address (Loopback Address, RFC 4291)",
    ),
    v6(
        [0, 0, 0, 0, 0, 0, 0, 0],
        128,
        "Unspecified Address",
        "RFC 4291",
        false,
        "an unspecified address (Unspecified Address, RFC 4291)",
    ),
    v6(
        [0, 0, 0, 0, 0, 0xffff, 0, 0],
        96,
        "IPv4-mapped Address",
        "RFC 4291",
        false,
        "an IPv4-mapped address (IPv4-mapped Address, RFC 4291)",
    ),
    v6(
        [0x64, 0xff9b, 0, 0, 0, 0, 0, 0],
        96,
        "IPv4-IPv6 Translat.",
        "RFC 6052",
        true,
        "a public address (IPv4-IPv6 Translat., RFC 6052)",
    ),
    v6(
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "IPv4-IPv6 Translat.",
        "RFC 8215",
        false,
        "a local translation address (IPv4-IPv6 Translat., RFC 8215)",
    ),
    v6(
        [0x100, 0, 0, 0, 0, 0, 0, 0],
        64,
        "Discard-Only Address Block",
        "RFC 6666",
        false,
        "a discard-only address (Discard-Only Address Block, RFC 6666)",
    ),
    v6(
        [0x100, 0, 0, 1, 0, 0, 0, 0],
        64,
        "Dummy IPv6 Prefix",
        "RFC 9780",
        false,
        "a reserved address (Dummy IPv6 Prefix, RFC 9780)",
    ),
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF Protocol Assignments",
        "RFC 2928",
        false,
        "a reserved address (IETF Protocol Assignments, RFC 2928)",
    ),
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        32,
        "TEREDO",
        "RFC 4380, RFC 8190",
        false,
        "a tunnel address (TEREDO, RFC 4380)",
    ),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 1],
        128,
        "Port Control Protocol Anycast",
        "RFC 7723",
        true,
        "a public address (Port Control Protocol Anycast, RFC 7723)",
    ),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 2],
        128,
        "Traversal Using Relays around NAT Anycast",
        "RFC 8155",
        true,
        "a public address (Traversal Using Relays around NAT Anycast, RFC 8155)",
    ),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 3],
        128,
        "DNS-SD Service Registration Protocol Anycast",
        "RFC 9665",
        true,
        "a public address (DNS-SD Service Registration Protocol Anycast, RFC 9665)",
    ),
    v6(
        [0x2001, 2, 0, 0, 0, 0, 0, 0],
        48,
        "Benchmarking",
        "RFC 5180",
        false,
        "a benchmarking address (Benchmarking, RFC 5180)",
    ),
    v6(
        [0x2001, 3, 0, 0, 0, 0, 0, 0],
        32,
        "AMT",
        "RFC 7450",
        true,
        "a public address (AMT, RFC 7450)",
    ),
    v6(
        [0x2001, 4, 0x112, 0, 0, 0, 0, 0],
        48,
        "AS112-v6",
        "RFC 7535",
        true,
        "a public address (AS112-v6, RFC 7535)",
    ),
    v6(
        [0x2001, 0x10, 0, 0, 0, 0, 0, 0],
        28,
        "Deprecated (previously ORCHID)",
        "RFC 4843",
        false,
        "a reserved address (Deprecated (previously ORCHID), RFC 4843)",
    ),
    v6(
        [0x2001, 0x20, 0, 0, 0, 0, 0, 0],
        28,
        "ORCHIDv2",
        "RFC 7343",
        true,
        "a public address (ORCHIDv2, RFC 7343)",
    ),
    v6(
        [0x2001, 0x30, 0, 0, 0, 0, 0, 0],
        28,
        "Drone Remote ID Protocol Entity Tags (DETs) Prefix",
        "RFC 9374",
        true,
        "a public address (Drone Remote ID Protocol Entity Tags (DETs) Prefix, RFC 9374)",
    ),
    v6(
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "Documentation",
        "RFC 3849",
        false,
        "a documentation address (Documentation, RFC 3849)",
    ),
    v6(
        [0x2002, 0, 0, 0, 0, 0, 0, 0],
        16,
        "6to4",
        "RFC 3056",
        false,
        "a tunnel address (6to4, RFC 3056)",
    ),
    v6(
        [0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0],
        48,
        "Direct Delegation AS112 Service",
        "RFC 7534",
        true,
        "a public address (Direct Delegation AS112 Service, RFC 7534)",
    ),
    v6(
        [0x3fff, 0, 0, 0, 0, 0, 0, 0],
        20,
        "Documentation",
        "RFC 9637",
        false,
        "a documentation address (Documentation, RFC 9637)",
    ),
    v6(
        [0x5f00, 0, 0, 0, 0, 0, 0, 0],
        16,
        "Segment Routing (SRv6) SIDs",
        "RFC 9602",
        false,
        "a reserved address (Segment Routing (SRv6) SIDs, RFC 9602)",
    ),
    v6(
        [0xfc00, 0, 0, 0, 0, 0, 0, 0],
        7,
        "Unique-Local",
        "RFC 4193, RFC 8190",
        false,
        "a private (unique local) address (Unique-Local, RFC 4193)",
    ),
    v6(
        [0xfe80, 0, 0, 0, 0, 0, 0, 0],
        10,
        "Link-Local Unicast",
        "RFC 4291",
        false,
        "a link-local address (Link-Local Unicast, RFC 4291)",
    ),
    v6(
        [0xfec0, 0, 0, 0, 0, 0, 0, 0],
        10,
        "Site-Local (deprecated)",
        "RFC 3879",
        false,
        "a link-local address (Site-Local (deprecated), RFC 3879)",
    ),
    v6(
        [0xff00, 0, 0, 0, 0, 0, 0, 0],
        8,
        "Multicast",
        "RFC 4291",
        false,
        "a multicast address (Multicast, RFC 4291)",
    ),
];

/// The most specific block holding `ip`, if any (an address in no block is an
/// ordinary public one).
pub fn classify(ip: IpAddr) -> Option<&'static SpecialBlock> {
    let table = if ip.is_ipv4() { IPV4 } else { IPV6 };
    table
        .iter()
        .filter(|b| contains(b, ip))
        .max_by_key(|b| b.prefix)
}

/// Whether `block` holds `ip`.
pub fn contains(block: &SpecialBlock, ip: IpAddr) -> bool {
    match (ip, block.net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(block.prefix))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(block.prefix))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The last address of a block.
pub fn last(block: &SpecialBlock) -> IpAddr {
    match block.net {
        IpAddr::V4(n) => {
            let host = u32::MAX.checked_shr(u32::from(block.prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(n) | host))
        }
        IpAddr::V6(n) => {
            let host = u128::MAX.checked_shr(u32::from(block.prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(n) | host))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_is_well_formed_and_found_at_both_ends() {
        for block in IPV4.iter().chain(IPV6) {
            let max = if block.net.is_ipv4() { 32 } else { 128 };
            assert!(block.prefix <= max, "{block:?}");
            // The network address is the block's first address (no host bits set).
            let first = block.net;
            let end = last(block);
            assert!(contains(block, first) && contains(block, end), "{block:?}");
            assert!(block.says.contains(block.name), "{block:?}");
            for ip in [first, end] {
                let found = classify(ip).expect("in a block");
                // The most specific block wins; no two blocks of one prefix overlap
                // with a different verdict.
                assert!(
                    found.prefix >= block.prefix,
                    "{ip}: {found:?} over {block:?}"
                );
            }
        }
    }

    #[test]
    fn exceptions_inside_refused_blocks_are_the_most_specific() {
        let found = |s: &str| classify(s.parse().expect("an address")).expect("a block");
        assert!(found("192.0.0.9").globally_reachable);
        assert!(found("192.0.0.10").globally_reachable);
        assert!(!found("192.0.0.11").globally_reachable);
        assert!(found("2001:1::1").globally_reachable);
        assert!(found("2001:20::1").globally_reachable);
        assert!(!found("2001:2::1").globally_reachable);
        assert!(!found("2001:0:1::1").globally_reachable);
        assert_eq!(found("198.19.255.255").name, "Benchmarking");
        assert!(classify("8.8.8.8".parse().expect("an address")).is_none());
    }
}
