//! The seccomp deny-list: one classic BPF program, built once per supervisor and
//! installed by every sandbox's first process before it execs.
//!
//! Denied with `EPERM`: io_uring, bpf, userfaultfd, perf_event_open, the keyring calls,
//! ptrace and process_vm_*; mount, umount, pivot_root, unshare and setns (and the new
//! mount API: fsopen, fsconfig, fsmount, fspick, move_mount, open_tree, mount_setattr);
//! clone with any namespace flag; kexec, module loading, open_by_handle_at, and the
//! TIOCSTI ioctl. `socket` and `socketpair` are allowed by address family, as a list:
//! `AF_UNIX` always, `AF_INET` and `AF_INET6` only in a sandbox with the network on;
//! every other family (vsock, packet, netlink, alg, bluetooth, …) answers
//! `EAFNOSUPPORT`, as a kernel built without it would. Some of those families are not
//! isolated by the network namespace (vsock reaches the host and its other guests), so
//! the namespace alone does not close them. `clone3` answers `ENOSYS`: its flags are behind a pointer the filter
//! cannot read, and libc then falls back to `clone`, whose flags it can. On x86_64 the
//! x32 system call numbers answer `ENOSYS` (they reach other entry points than the
//! names above), and a system call of another architecture (the 32-bit entry points)
//! kills the process.
//!
//! Why written out here rather than compiled by `seccompiler` (which this crate used
//! before): `seccompiler` gives one filter a single match action, so `EPERM`, clone3's
//! `ENOSYS` and the x32 guard took three filters, 220 instructions in all. Every
//! filter is checked, translated and JIT-compiled when installed, and the kernel then
//! emulates it for every system call number to build its allow cache; every one of a
//! tool's system calls that the cache cannot answer runs all three. One program of
//! about fifty instructions does the same work: the child's install fell from about
//! 0.2 ms to a few hundredths (BENCHMARKS.md, "Sandbox"). The rules stay data
//! ([`DENIED`], [`NAMESPACE_FLAGS`]), and `tests/privileges.rs` calls every one of them
//! from inside a sandbox.

use std::sync::Arc;

/// The denied system calls by name (every one fails with `EPERM`), for tests and docs.
pub const DENIED: &[(&str, i64)] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("bpf", libc::SYS_bpf),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("keyctl", libc::SYS_keyctl),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
];

/// The namespace flags `clone` may not carry.
pub const NAMESPACE_FLAGS: &[(&str, i32)] = &[
    ("CLONE_NEWNS", libc::CLONE_NEWNS),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER),
    ("CLONE_NEWPID", libc::CLONE_NEWPID),
    ("CLONE_NEWNET", libc::CLONE_NEWNET),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP),
];

/// The socket address families a sandbox may open, whatever its network: `AF_UNIX`.
pub const SOCKET_FAMILIES: &[(&str, i32)] = &[("AF_UNIX", libc::AF_UNIX)];

/// The families a sandbox with the network on may open besides [`SOCKET_FAMILIES`].
pub const NETWORK_SOCKET_FAMILIES: &[(&str, i32)] =
    &[("AF_INET", libc::AF_INET), ("AF_INET6", libc::AF_INET6)];

/// The two programs of a supervisor: one for runs with the network off, one for runs
/// with it on. They differ only in the socket families allowed.
#[derive(Debug, Clone)]
pub(crate) struct Programs {
    /// For runs with the network off.
    pub off: Program,
    /// For runs with the network on.
    pub on: Program,
}

impl Programs {
    /// Both programs.
    pub(crate) fn build() -> Result<Programs, String> {
        Ok(Programs {
            off: program(false)?,
            on: program(true)?,
        })
    }

    /// The program for a run with the network `on` or not.
    pub(crate) fn for_network(&self, on: bool) -> &Program {
        if on { &self.on } else { &self.off }
    }
}

/// A classic BPF program (the kernel's `sock_filter` instructions).
#[derive(Clone)]
pub(crate) struct Program(Arc<[libc::sock_filter]>);

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Program({} instructions)", self.0.len())
    }
}

impl Program {
    /// The instructions.
    pub(crate) fn instructions(&self) -> &[libc::sock_filter] {
        &self.0
    }
}

/// `AUDIT_ARCH_*` of the architecture this supervisor was built for: the only one whose
/// system calls a sandbox may make.
fn audit_arch() -> Result<u32, String> {
    // EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE (linux/audit.h).
    const LE64: u32 = 0x8000_0000 | 0x4000_0000;
    match std::env::consts::ARCH {
        "x86_64" => Ok(LE64 | 62),
        "aarch64" => Ok(LE64 | 183),
        "riscv64" => Ok(LE64 | 243),
        other => Err(format!(
            "seccomp filters are not built for this architecture: {other}"
        )),
    }
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

// Offsets in `struct seccomp_data`: nr, arch, then the six arguments as u64 from 16.
// The filter reads the low 32 bits of an argument (little-endian: its first word).
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}
const _: () = assert!(
    cfg!(target_endian = "little"),
    "arg_low reads the first word"
);

/// On x86_64, the bit that marks an x32 system call number.
const X32_BIT: u32 = 0x4000_0000;

/// The deny-list, as one program, for a run with the network on (`network`) or off.
pub(crate) fn program(network: bool) -> Result<Program, String> {
    let arch = audit_arch()?;
    // Jumps are relative and forward: each instruction is written with symbolic
    // targets, resolved once the layout is known.
    #[derive(Clone, Copy)]
    enum To {
        Next,
        Allow,
        Eperm,
        Enosys,
        Ioctl,
        Clone,
        Socket,
        Kill,
    }
    let mut code: Vec<(u16, To, To, u32)> = Vec::new();
    let stmt = |code: &mut Vec<_>, op, k| code.push((op, To::Next, To::Next, k));
    // Another architecture's system calls: kill (the numbers below would not mean
    // what they say).
    stmt(&mut code, LD_W_ABS, ARCH);
    code.push((JEQ_K, To::Next, To::Kill, arch));
    stmt(&mut code, LD_W_ABS, NR);
    if cfg!(target_arch = "x86_64") {
        code.push((JGE_K, To::Enosys, To::Next, X32_BIT));
    }
    let number = |nr: i64| u32::try_from(nr).map_err(|_| format!("system call number {nr}"));
    for (_, nr) in DENIED {
        code.push((JEQ_K, To::Eperm, To::Next, number(*nr)?));
    }
    code.push((JEQ_K, To::Enosys, To::Next, number(libc::SYS_clone3)?));
    code.push((JEQ_K, To::Ioctl, To::Next, number(libc::SYS_ioctl)?));
    code.push((JEQ_K, To::Clone, To::Next, number(libc::SYS_clone)?));
    code.push((JEQ_K, To::Socket, To::Next, number(libc::SYS_socket)?));
    code.push((JEQ_K, To::Socket, To::Next, number(libc::SYS_socketpair)?));
    // Anything else: allowed.
    stmt(&mut code, RET_K, libc::SECCOMP_RET_ALLOW);
    // ioctl: the request is an unsigned int to the kernel, so its low word decides.
    let ioctl = code.len();
    stmt(&mut code, LD_W_ABS, arg_low(1));
    code.push((JEQ_K, To::Eperm, To::Allow, libc::TIOCSTI as u32));
    // clone: any namespace flag in the flags word.
    let clone = code.len();
    let mask = NAMESPACE_FLAGS
        .iter()
        .fold(0u32, |m, (_, f)| m | (*f as u32));
    stmt(&mut code, LD_W_ABS, arg_low(0));
    code.push((JSET_K, To::Eperm, To::Allow, mask));
    // socket and socketpair: the family (an int) is the first argument's low word.
    let socket = code.len();
    stmt(&mut code, LD_W_ABS, arg_low(0));
    let allowed = SOCKET_FAMILIES.iter().chain(if network {
        NETWORK_SOCKET_FAMILIES
    } else {
        &[]
    });
    for (_, family) in allowed {
        code.push((JEQ_K, To::Allow, To::Next, *family as u32));
    }
    stmt(
        &mut code,
        RET_K,
        libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32,
    );
    // The returns the jumps above land on (classic BPF jumps only forward).
    let allow = code.len();
    stmt(&mut code, RET_K, libc::SECCOMP_RET_ALLOW);
    let kill = code.len();
    stmt(&mut code, RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    let eperm = code.len();
    stmt(
        &mut code,
        RET_K,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    );
    let enosys = code.len();
    stmt(
        &mut code,
        RET_K,
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
    );

    let target = |to: To| match to {
        To::Next => None,
        To::Allow => Some(allow),
        To::Eperm => Some(eperm),
        To::Enosys => Some(enosys),
        To::Ioctl => Some(ioctl),
        To::Clone => Some(clone),
        To::Socket => Some(socket),
        To::Kill => Some(kill),
    };
    let mut program = Vec::with_capacity(code.len());
    for (i, (op, jt, jf, k)) in code.iter().enumerate() {
        let jump = |to: Option<usize>| -> Result<u8, String> {
            match to {
                None => Ok(0),
                Some(t) => t
                    .checked_sub(i + 1)
                    .and_then(|d| u8::try_from(d).ok())
                    .ok_or_else(|| format!("jump from {i} to {t} out of range")),
            }
        };
        program.push(libc::sock_filter {
            code: *op,
            jt: jump(target(*jt))?,
            jf: jump(target(*jf))?,
            k: *k,
        });
    }
    Ok(Program(program.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic BPF program on a `seccomp_data` the way the kernel does (only the
    /// instructions the program uses), checking every jump stays inside it.
    fn eval(program: &[libc::sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&nr.to_le_bytes());
        data.extend_from_slice(&arch.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        for a in args {
            data.extend_from_slice(&a.to_le_bytes());
        }
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let i = program[pc];
            let jump = |taken: bool| pc + 1 + usize::from(if taken { i.jt } else { i.jf });
            pc = match i.code {
                LD_W_ABS => {
                    let at = i.k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                    pc + 1
                }
                JEQ_K => jump(acc == i.k),
                JGE_K => jump(acc >= i.k),
                JSET_K => jump(acc & i.k != 0),
                RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x} at {pc}"),
            };
            assert!(pc < program.len(), "a jump leaves the program");
        }
    }

    fn program() -> Vec<libc::sock_filter> {
        programs(false)
    }

    fn programs(network: bool) -> Vec<libc::sock_filter> {
        let p = super::program(network).unwrap_or_else(|e| panic!("{e}"));
        p.instructions().to_vec()
    }

    const EAFNOSUPPORT: u32 = libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;

    /// Every address family the kernel headers name, up to AF_MAX and a little beyond.
    fn every_family() -> impl Iterator<Item = i32> {
        0..=64
    }

    #[test]
    fn socket_families_are_allowed_by_list_with_the_network_off_and_on() {
        let arch = audit_arch().unwrap();
        for network in [false, true] {
            let p = programs(network);
            let nr = |n: i64| u32::try_from(n).unwrap();
            for call in [libc::SYS_socket, libc::SYS_socketpair] {
                for family in every_family() {
                    let allowed = family == libc::AF_UNIX
                        || (network && (family == libc::AF_INET || family == libc::AF_INET6));
                    let want = if allowed {
                        libc::SECCOMP_RET_ALLOW
                    } else {
                        EAFNOSUPPORT
                    };
                    let args = [family as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
                    assert_eq!(
                        eval(&p, nr(call), arch, args),
                        want,
                        "call {call}, family {family}, network {network}"
                    );
                    // High bits of the argument do not change the family the kernel reads.
                    let high = [
                        (family as u64) | 1 << 32,
                        libc::SOCK_STREAM as u64,
                        0,
                        0,
                        0,
                        0,
                    ];
                    assert_eq!(eval(&p, nr(call), arch, high), want);
                }
                assert_eq!(
                    eval(&p, nr(call), arch, [libc::AF_VSOCK as u64, 1, 0, 0, 0, 0]),
                    EAFNOSUPPORT,
                    "vsock, network {network}"
                );
            }
        }
    }

    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

    #[test]
    fn the_program_denies_each_rule_and_allows_the_rest() {
        let p = program();
        assert!(p.len() < 64, "{} instructions", p.len());
        assert!(programs(true).len() < 64);
        let arch = audit_arch().unwrap();
        let nr = |n: i64| u32::try_from(n).unwrap();
        let call = |n: i64, args: [u64; 6]| eval(&p, nr(n), arch, args);
        for (name, n) in DENIED {
            assert_eq!(call(*n, [0; 6]), EPERM, "{name}");
        }
        assert_eq!(call(libc::SYS_clone3, [0; 6]), ENOSYS);
        for (name, flag) in NAMESPACE_FLAGS {
            let flags = (*flag as u64) | libc::SIGCHLD as u64;
            assert_eq!(
                call(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]),
                EPERM,
                "{name}"
            );
        }
        let fork = libc::SIGCHLD as u64;
        assert_eq!(
            call(libc::SYS_clone, [fork, 0, 0, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        let tiocsti = libc::TIOCSTI;
        assert_eq!(call(libc::SYS_ioctl, [0, tiocsti, 0, 0, 0, 0]), EPERM);
        // The kernel truncates the request to 32 bits: high bits do not get it through.
        assert_eq!(
            call(libc::SYS_ioctl, [0, tiocsti | 1 << 32, 0, 0, 0, 0]),
            EPERM
        );
        assert_eq!(
            call(libc::SYS_ioctl, [0, libc::TIOCGWINSZ, 0, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        for n in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_execve,
            libc::SYS_openat,
        ] {
            assert_eq!(call(n, [0; 6]), libc::SECCOMP_RET_ALLOW, "{n}");
        }
        // Another architecture's calls kill the process.
        assert_eq!(
            eval(&p, nr(libc::SYS_read), arch ^ 0x4000_0000, [0; 6]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
        if cfg!(target_arch = "x86_64") {
            // x32 numbers: refused as a kernel without x32 refuses them.
            let x32_mount = X32_BIT | nr(libc::SYS_mount);
            assert_eq!(eval(&p, x32_mount, arch, [0; 6]), ENOSYS);
        }
    }
}
