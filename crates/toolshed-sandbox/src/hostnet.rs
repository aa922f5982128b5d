//! Keeps the host's own addresses out of reach of a sandbox with the network on.
//!
//! slirp4netns makes the sandbox's outbound connections from the host, as its own
//! sockets: `--disable-host-loopback` refuses 127.0.0.0/8, but a connection to the host's
//! other addresses (192.0.2.2:2024, say) would reach every service listening on
//! 0.0.0.0. So each helper runs in a cgroup v2 folder of its own with two eBPF programs
//! (`cgroup/connect4` and `cgroup/sendmsg4`) that refuse, with `EPERM`, any destination
//! that is an address of this host (every `LOCAL` and `BROADCAST` entry of the kernel's
//! routing tables, 127.0.0.0/8 and 0.0.0.0) or a cloud metadata address (169.254.0.0/16,
//! 100.100.100.200, 168.63.129.16), except port 53 of the host's configured resolvers
//! (so DNS works through a local resolver). IPv6 is refused altogether: the
//! sandbox is offered IPv4 only.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

const PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
const ATTACH_INET4_CONNECT: u32 = 10;
const ATTACH_INET6_CONNECT: u32 = 11;
const ATTACH_UDP4_SENDMSG: u32 = 14;
const ATTACH_UDP6_SENDMSG: u32 = 15;

/// `struct bpf_sock_addr` offsets.
const USER_IP4: i16 = 4;
const USER_PORT: i16 = 24;

/// A cgroup v2 folder whose sockets cannot reach the host's own addresses.
#[derive(Debug)]
pub(crate) struct HelperCgroup {
    dir: PathBuf,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl HelperCgroup {
    /// Creates the folder under `<cgroup2>/<parent>` and attaches the programs.
    pub(crate) fn create(cgroup2: &Path, parent: &str) -> Result<HelperCgroup, String> {
        let base = cgroup2.join(parent);
        match std::fs::create_dir(&base) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(format!("cannot create {}: {e}", base.display()));
            }
            _ => {}
        }
        let dir = base.join(format!(
            "net-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cg = HelperCgroup { dir };
        cg.attach().inspect_err(|_| cg.remove_now())?;
        Ok(cg)
    }

    fn attach(&self) -> Result<(), String> {
        let fd = rustix::fs::open(
            &self.dir,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("cannot open {}: {e}", self.dir.display()))?;
        let v4 = ipv4_filter(&host_ipv4(), &resolvers());
        let deny = deny_all();
        for (attach, prog) in [
            (ATTACH_INET4_CONNECT, &v4),
            (ATTACH_UDP4_SENDMSG, &v4),
            (ATTACH_INET6_CONNECT, &deny),
            (ATTACH_UDP6_SENDMSG, &deny),
        ] {
            let p = sys::bpf_prog_load(PROG_TYPE_CGROUP_SOCK_ADDR, attach, prog)
                .map_err(|e| format!("cannot load the host-address filter (bpf): {e}"))?;
            sys::bpf_prog_attach(fd.as_fd(), p.as_fd(), attach).map_err(|e| {
                format!(
                    "cannot attach the host-address filter to {}: {e}",
                    self.dir.display()
                )
            })?;
        }
        Ok(())
    }

    /// `cgroup.procs`, open for the helper to join before it execs.
    pub(crate) fn procs(&self) -> Result<OwnedFd, String> {
        let p = self.dir.join("cgroup.procs");
        rustix::fs::open(
            &p,
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("cannot open {}: {e}", p.display()))
    }

    fn remove_now(&self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Drop for HelperCgroup {
    fn drop(&mut self) {
        // Empty once the helper has exited; a leftover is swept like a run's cgroup.
        let dir = self.dir.clone();
        crate::janitor::later(move || {
            for _ in 0..200 {
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
    }
}

/// Every IPv4 address of this host: the `LOCAL` and `BROADCAST` entries of
/// `/proc/net/fib_trie`.
pub(crate) fn host_ipv4() -> Vec<Ipv4Addr> {
    let text = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(addr) = t.strip_prefix("|-- ").or_else(|| t.strip_prefix("+-- ")) {
            last = addr.split('/').next().and_then(|a| a.parse().ok());
        } else if (t.contains("host LOCAL") || t.contains("link BROADCAST"))
            && let Some(a) = last
            && !out.contains(&a)
        {
            out.push(a);
        }
    }
    out
}

/// The host's DNS resolvers (IPv4) from `/etc/resolv.conf`.
fn resolvers() -> Vec<Ipv4Addr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse().ok())
        .collect()
}

/// An IPv4 address as the program loads it: network byte order, read as a
/// little-endian (native) u32.
fn loaded(a: Ipv4Addr) -> i32 {
    i32::from_ne_bytes(a.octets())
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    let regs = (src << 4) | (dst & 0x0f);
    u64::from(code)
        | (u64::from(regs) << 8)
        | (u64::from(off as u16) << 16)
        | (u64::from(imm as u32) << 32)
}

const LDX_W: u8 = 0x61; // dst = *(u32 *)(src + off)
const MOV32_X: u8 = 0xbc; // w_dst = w_src
const AND32_K: u8 = 0x54; // w_dst &= imm
const JEQ32_K: u8 = 0x16; // if w_dst == imm goto +off
const JNE32_K: u8 = 0x56; // if w_dst != imm goto +off
const MOV64_K: u8 = 0xb7; // dst = imm
const EXIT: u8 = 0x95;

/// Metadata services outside the link-local range: Alibaba Cloud's and Azure's
/// platform address (WireServer).
const METADATA: [Ipv4Addr; 2] = [
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(168, 63, 129, 16),
];

/// The connect4/sendmsg4 program: 0 (refuse) for the host's addresses and the metadata
/// addresses, 1 otherwise.
fn ipv4_filter(host: &[Ipv4Addr], resolvers: &[Ipv4Addr]) -> Vec<u64> {
    enum Op {
        I(u64),
        /// A jump to `Allow` or `Deny`, with its opcode, register and immediate.
        J(u8, u8, i32, bool),
        /// A jump over the next `n` instructions.
        Skip(u8, u8, i32, i16),
    }
    let mut ops = vec![
        Op::I(insn(LDX_W, 2, 1, USER_IP4, 0)),
        Op::I(insn(LDX_W, 4, 1, USER_PORT, 0)),
    ];
    // DNS to a configured resolver stays possible, even a local one.
    let dns = i32::from(53u16.to_be());
    for r in resolvers {
        ops.push(Op::Skip(JNE32_K, 2, loaded(*r), 1));
        ops.push(Op::J(JEQ32_K, 4, dns, true));
    }
    // 127.0.0.0/8: the first octet is the low byte of the loaded word.
    ops.push(Op::I(insn(MOV32_X, 3, 2, 0, 0)));
    ops.push(Op::I(insn(AND32_K, 3, 0, 0, 0xff)));
    ops.push(Op::J(JEQ32_K, 3, 127, false));
    ops.push(Op::J(JEQ32_K, 2, 0, false));
    // 169.254.0.0/16, link-local: the clouds' metadata services (169.254.169.254 and
    // its kin) answer there with the host's credentials. Masked in load order, so the
    // check holds whatever the byte order.
    ops.push(Op::I(insn(MOV32_X, 3, 2, 0, 0)));
    ops.push(Op::I(insn(
        AND32_K,
        3,
        0,
        0,
        loaded(Ipv4Addr::new(255, 255, 0, 0)),
    )));
    ops.push(Op::J(
        JEQ32_K,
        3,
        loaded(Ipv4Addr::new(169, 254, 0, 0)),
        false,
    ));
    for a in METADATA {
        ops.push(Op::J(JEQ32_K, 2, loaded(a), false));
    }
    for a in host {
        ops.push(Op::J(JEQ32_K, 2, loaded(*a), false));
    }
    let allow_at = ops.len();
    let deny_at = allow_at + 2;
    let mut prog = Vec::with_capacity(ops.len() + 4);
    for (pc, op) in ops.iter().enumerate() {
        prog.push(match op {
            Op::I(i) => *i,
            Op::J(code, reg, imm, allow) => {
                let target = if *allow { allow_at } else { deny_at };
                let off = (target - pc - 1) as i16;
                insn(*code, *reg, 0, off, *imm)
            }
            Op::Skip(code, reg, imm, n) => insn(*code, *reg, 0, *n, *imm),
        });
    }
    prog.push(insn(MOV64_K, 0, 0, 0, 1));
    prog.push(insn(EXIT, 0, 0, 0, 0));
    prog.push(insn(MOV64_K, 0, 0, 0, 0));
    prog.push(insn(EXIT, 0, 0, 0, 0));
    prog
}

fn deny_all() -> Vec<u64> {
    vec![insn(MOV64_K, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_addresses_include_loopback_and_its_own() {
        let a = host_ipv4();
        assert!(a.contains(&Ipv4Addr::LOCALHOST), "{a:?}");
    }

    #[test]
    fn jumps_land_on_allow_or_deny() {
        let p = ipv4_filter(
            &[Ipv4Addr::new(192, 0, 2, 2)],
            &[Ipv4Addr::new(127, 0, 0, 53)],
        );
        // The last four instructions: allow (r0 = 1, exit), deny (r0 = 0, exit).
        assert_eq!(p[p.len() - 4], insn(MOV64_K, 0, 0, 0, 1));
        assert_eq!(p[p.len() - 2], insn(MOV64_K, 0, 0, 0, 0));
        for (pc, i) in p.iter().enumerate() {
            let code = (*i & 0xff) as u8;
            if code == JEQ32_K || code == JNE32_K {
                let off = ((*i >> 16) & 0xffff) as u16 as i16;
                let target = pc as i64 + 1 + i64::from(off);
                assert!(
                    target > pc as i64 && (target as usize) < p.len(),
                    "pc {pc} jumps to {target}"
                );
            }
        }
    }
}
