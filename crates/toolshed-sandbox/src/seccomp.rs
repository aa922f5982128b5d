//! The seccomp deny-list, compiled to BPF once per supervisor (with `seccompiler`) and
//! installed by every sandbox's first process before it execs.
//!
//! Denied with `EPERM`: io_uring, bpf, userfaultfd, perf_event_open, the keyring calls,
//! ptrace and process_vm_*; mount, umount, pivot_root, unshare and setns (and the new
//! mount API: fsopen, fsconfig, fsmount, fspick, move_mount, open_tree, mount_setattr);
//! clone with any namespace flag; kexec, module loading, open_by_handle_at, and the
//! TIOCSTI ioctl. `clone3` answers `ENOSYS`: its flags are behind a pointer the filter
//! cannot read, and libc then falls back to `clone`, whose flags it can. A system call
//! of another architecture (the 32-bit entry points) kills the process.

use std::collections::BTreeMap;
use std::sync::Arc;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

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

/// The compiled programs, in the order they are installed.
pub(crate) fn programs() -> Result<Vec<Arc<[sock_filter]>>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp filters are not built for this architecture: {e:?}"))?;
    let eperm = SeccompAction::Errno(libc::EPERM as u32);

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENIED {
        rules.insert(*nr, Vec::new());
    }
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| format!("cannot build a seccomp rule: {e:?}"))
    };
    rules.insert(
        libc::SYS_ioctl,
        vec![cond(1, SeccompCmpOp::Eq, libc::TIOCSTI)?],
    );
    let mut clone_rules = Vec::new();
    for (_, flag) in NAMESPACE_FLAGS {
        let flag = *flag as u64;
        clone_rules.push(cond(0, SeccompCmpOp::MaskedEq(flag), flag)?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let deny = SeccompFilter::new(rules, SeccompAction::Allow, eperm, arch)
        .map_err(|e| format!("cannot build the seccomp deny-list: {e:?}"))?;
    let deny: BpfProgram = deny
        .try_into()
        .map_err(|e| format!("cannot compile the seccomp deny-list: {e:?}"))?;

    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, Vec::new());
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("cannot build the clone3 filter: {e:?}"))?;
    let clone3: BpfProgram = clone3
        .try_into()
        .map_err(|e| format!("cannot compile the clone3 filter: {e:?}"))?;

    let mut out: Vec<Arc<[sock_filter]>> = vec![deny.into(), clone3.into()];
    if let Some(x32) = x32_guard() {
        out.push(x32.into());
    }
    Ok(out)
}

/// On x86_64, system call numbers with the x32 bit set reach other entry points than the
/// deny-list names: refuse them all (`ENOSYS`, as a kernel without x32 does).
fn x32_guard() -> Option<Vec<sock_filter>> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    const X32_BIT: u32 = 0x4000_0000;
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    Some(vec![
        // A = seccomp_data.nr (offset 0).
        stmt(BPF_LD_W_ABS, 0),
        sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_BIT,
        },
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_programs_compile() {
        let p = super::programs().unwrap_or_else(|e| panic!("{e}"));
        assert!(p.len() >= 2);
        assert!(p.iter().all(|p| !p.is_empty() && p.len() < 4096));
    }
}
