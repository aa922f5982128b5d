//! The system calls neither `rustix` nor the `landlock` crate wraps
//! for us: `clone3` with namespace flags, `mount_setattr`, `close_range`,
//! `landlock_restrict_self` on a prepared ruleset, installing a prepared seccomp
//! program, resetting signals, `execve`. This module and [`crate::child`] are the only
//! places of the workspace that use `unsafe`.
//!
//! Everything here that the child calls between `clone3` and `execve` is
//! async-signal-safe: a raw system call on memory the parent prepared, no allocation, no
//! lock, no glibc function that keeps process-wide state (glibc's `setuid` family would
//! try to signal threads that do not exist in the child; rustix's per-thread calls are
//! used instead).

#![expect(
    unsafe_code,
    reason = "clone3, mount_setattr, close_range, Landlock, seccomp and execve are raw \
              system calls; each block says why it is sound"
)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// What `clone3` returned.
enum Cloned {
    /// In the parent: the child's pid and a pidfd for it.
    Parent { pid: i32, pidfd: OwnedFd },
    /// In the child.
    Child,
}

/// `clone3(flags | CLONE_PIDFD)` (and `CLONE_INTO_CGROUP` with a cgroup v2 folder fd)
/// without a new stack: fork semantics (the child runs on a
/// copy of the caller's memory), with no exit signal (so only a `waitid(__WALL)` for this
/// pid reaps it, never a stray `waitpid(-1)` elsewhere in the process).
///
/// # Safety
/// In a multi-threaded process the child may only make async-signal-safe calls until it
/// execs or exits: the caller must run nothing else in the child (see `child::run`).
unsafe fn clone3(flags: u64, cgroup: Option<RawFd>) -> io::Result<Cloned> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: clone_args is a plain C struct; all-zero is its documented "no options"
    // value, filled in below.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = flags | libc::CLONE_PIDFD as u64;
    args.pidfd = std::ptr::addr_of_mut!(pidfd) as u64;
    args.exit_signal = 0;
    if let Some(fd) = cgroup {
        // CLONE_INTO_CGROUP: born in its cgroup (v2), no migration afterwards.
        args.flags |= 0x2_0000_0000;
        args.cgroup = fd as u64;
    }
    // SAFETY: `args` is a valid clone_args of the size passed; `pidfd` outlives the call
    // (the kernel writes it before returning in the parent). With no stack given, the
    // child continues on a copy of this stack like fork(2); the caller guarantees it only
    // makes async-signal-safe calls.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of_mut!(args),
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Cloned::Child),
        pid => {
            // SAFETY: on success the kernel stored a new, owned pidfd in `pidfd`.
            let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            Ok(Cloned::Parent {
                pid: pid as i32,
                pidfd,
            })
        }
    }
}

/// Clones the sandbox's first process with `flags` (namespaces) and runs
/// [`child::run`](crate::child::run) in it; returns its pid and a pidfd.
pub(crate) fn clone_child(
    flags: u64,
    cgroup: Option<RawFd>,
    plan: &crate::child::ChildPlan,
    pointers: &crate::child::Pointers,
) -> io::Result<(i32, OwnedFd)> {
    // SAFETY: the child runs nothing but `child::run`, which makes only async-signal-safe
    // raw system calls on memory prepared before this call, and never returns.
    match unsafe { clone3(flags, cgroup) }? {
        Cloned::Child => crate::child::run(plan, pointers),
        Cloned::Parent { pid, pidfd } => Ok((pid, pidfd)),
    }
}

/// Sets (`set`) and clears (`clear`) `MOUNT_ATTR_*` flags on a mount, or on the whole
/// tree below it with `recursive`.
pub(crate) fn mount_setattr(
    fd: BorrowedFd<'_>,
    set: u64,
    clear: u64,
    recursive: bool,
) -> io::Result<()> {
    let mut attr = libc::mount_attr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: the fd is borrowed for the call; "" with AT_EMPTY_PATH names the fd
    // itself; `attr` is a valid mount_attr of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            std::ptr::addr_of_mut!(attr),
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The running kernel's Landlock ABI version, or the errno why there is none
/// (`ENOSYS`: not built in; `EOPNOTSUPP`: built in but disabled at boot).
pub(crate) fn landlock_abi() -> Result<i32, io::Error> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: a NULL attr with size 0 and the VERSION flag only queries the ABI.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as i32)
    }
}

/// Installs a prepared seccomp program on the calling thread (no-new-privileges must
/// already be set). Async-signal-safe.
pub(crate) fn seccomp_install(program: &[libc::sock_filter]) -> io::Result<()> {
    let Ok(len) = u16::try_from(program.len()) else {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    };
    let prog = libc::sock_fprog {
        len,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `program`, alive for the call; the kernel copies the
    // instructions before returning.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            std::ptr::addr_of!(prog),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Enforces a prepared Landlock ruleset on the calling thread. Async-signal-safe.
pub(crate) fn landlock_restrict_self(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: the fd is a Landlock ruleset the parent created; flags 0.
    let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Closes every fd from 3 up except those in `keep` (ascending). Async-signal-safe.
pub(crate) fn close_all_but(keep: &[RawFd]) -> io::Result<()> {
    let close_range = |first: u32, last: u32| -> io::Result<()> {
        // SAFETY: close_range only closes fds of this process's own table (the child's
        // copy); `keep` names every fd the caller still uses.
        let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    let mut first: u32 = 3;
    for &fd in keep {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd < first {
            continue;
        }
        if fd > first {
            close_range(first, fd - 1)?;
        }
        first = fd + 1;
    }
    close_range(first, u32::MAX)
}

/// Writes all of a small buffer to an fd in one `write` (a cgroupfs file takes a
/// value in one write). Async-signal-safe.
pub(crate) fn write_exact(fd: RawFd, buf: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `buf` is valid for its length; a bad fd only yields an error.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if n as usize != buf.len() {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        return Ok(());
    }
}

/// Marks every fd from `first` up close-on-exec. Async-signal-safe.
pub(crate) fn close_range_cloexec(first: u32) -> io::Result<()> {
    // SAFETY: close_range only changes fd flags of this process.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Every signal back to its default action and unblocked: a supervisor ignores SIGPIPE
/// (Rust does by default), and an ignored signal stays ignored across `execve`.
/// Async-signal-safe.
pub(crate) fn reset_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL is a valid disposition for every catchable signal; errors (the
        // two glibc-internal signals) are ignored on purpose.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    // SAFETY: an all-zero sigset is the empty set; rt_sigprocmask with it unblocks all.
    unsafe {
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            std::ptr::addr_of!(empty),
            std::ptr::null_mut::<libc::sigset_t>(),
            8usize,
        );
    }
}

/// Removes every capability from the bounding set (needs CAP_SETPCAP, which the child
/// still has in its namespace). Async-signal-safe.
pub(crate) fn drop_bounding_set() -> io::Result<()> {
    for cap in 0..64 {
        // SAFETY: prctl(PR_CAPBSET_DROP) only changes this thread's credentials.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if ret != 0 {
            let e = io::Error::last_os_error();
            // Past the last capability the kernel knows: done.
            if e.raw_os_error() == Some(libc::EINVAL) {
                return Ok(());
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Brings the namespace's loopback interface up, so a tool can talk to itself over
/// 127.0.0.1 (only to itself: this is the sandbox's own loopback). Async-signal-safe.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: a datagram socket is only used for the interface ioctls below and closed.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sock` was just created and is owned here.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is a plain C struct (all-zero valid); the name "lo" fits its array.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    req.ifr_name[0] = b'l' as libc::c_char;
    req.ifr_name[1] = b'o' as libc::c_char;
    // SAFETY: SIOCGIFFLAGS fills the flags union member of a valid ifreq.
    if unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS,
            std::ptr::addr_of_mut!(req),
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the flags member was just written by the kernel.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads the same valid ifreq.
    if unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFFLAGS,
            std::ptr::addr_of_mut!(req),
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `execve`; returns only on failure. Async-signal-safe.
///
/// `argv` and `envp` are NULL-terminated arrays of pointers to NUL-terminated strings,
/// alive for the call.
pub(crate) fn execve(
    program: &CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> io::Error {
    if argv.last().is_none_or(|p| !p.is_null()) || envp.last().is_none_or(|p| !p.is_null()) {
        return io::Error::from_raw_os_error(libc::EINVAL);
    }
    // SAFETY: both arrays are NULL-terminated (checked above) and point at strings the
    // parent prepared, alive until exec replaces this process.
    unsafe {
        libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
    }
    io::Error::last_os_error()
}

/// Makes `fds` the fds 3, 4, … of a command's process, and moves the process into a
/// cgroup (writing to its `cgroup.procs`, given open) before it execs. The command owns
/// the fds until it is dropped. (No parent-death signal: that would follow the spawning thread, not the
/// process; the helper watches an exit pipe instead.)
pub(crate) fn pass_fds<const N: usize>(
    cmd: &mut std::process::Command,
    fds: [OwnedFd; N],
    join_cgroup: Option<OwnedFd>,
) {
    use std::os::unix::process::CommandExt;
    let raw: [RawFd; N] = std::array::from_fn(|i| fds[i].as_raw_fd());
    let procs = join_cgroup.as_ref().map(AsRawFd::as_raw_fd);
    let keep = (fds, join_cgroup);
    // SAFETY: the hook runs in the forked child before exec and makes only
    // async-signal-safe calls (write, fcntl, dup2) on fds the closure keeps alive.
    unsafe {
        cmd.pre_exec(move || {
            let _ = &keep;
            // Join the cgroup before exec, so every socket the program opens is in it.
            if let Some(procs) = procs
                && libc::write(procs, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(io::Error::last_os_error());
            }
            // First move every fd above the targets, so no dup2 overwrites a source.
            let mut high = [0; N];
            for (i, fd) in raw.iter().enumerate() {
                let h = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 16 + N as libc::c_int);
                if h < 0 {
                    return Err(io::Error::last_os_error());
                }
                high[i] = h;
            }
            for (i, fd) in high.iter().enumerate() {
                if libc::dup2(*fd, 3 + i as libc::c_int) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// A new cgroup namespace for the calling process. Async-signal-safe.
pub(crate) fn unshare_cgroup() -> rustix::io::Result<()> {
    // SAFETY: only CLONE_NEWCGROUP is unshared; the fd table (the reason rustix marks
    // unshare unsafe) stays shared as it was.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWCGROUP) }
}

/// A new network namespace for the calling thread only (the janitor, making one ahead).
pub(crate) fn unshare_net() -> io::Result<()> {
    // SAFETY: only CLONE_NEWNET is unshared, for this thread; the fd table (the reason
    // rustix marks unshare unsafe) stays shared as it was.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }?;
    Ok(())
}

/// Ends the child without running any destructor or atexit handler. Async-signal-safe.
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit is always safe to call; it does not return.
    unsafe { libc::_exit(code) }
}

/// Writes a whole small buffer to a pipe, retrying on EINTR. Async-signal-safe.
pub(crate) fn write_all_raw(fd: RawFd, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for its length; a bad fd only yields an error.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        buf = &buf[(n as usize).min(buf.len())..];
    }
}

/// Registers a pidfd with the async runtime (readable once the process exits).
pub(crate) fn watch_pidfd(pidfd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the fd stays open and names
    // the same pidfd for the AsyncFd's whole life.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| io::Error::other(e.to_string()))
}

/// `bpf(BPF_PROG_LOAD)` of an eBPF program (8-byte instructions) of `prog_type`,
/// expected to be attached as `attach_type`.
pub(crate) fn bpf_prog_load(
    prog_type: u32,
    attach_type: u32,
    insns: &[u64],
) -> io::Result<OwnedFd> {
    #[repr(C)]
    #[derive(Default)]
    struct Load {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }
    let license = c"Apache-2.0";
    let attr = Load {
        prog_type,
        insn_cnt: u32::try_from(insns.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: attach_type,
        ..Load::default()
    };
    // SAFETY: `attr` is a valid prefix of `union bpf_attr` for BPF_PROG_LOAD, its
    // pointers name `insns` and `license`, alive for the call; the kernel copies them.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            5, // BPF_PROG_LOAD
            std::ptr::addr_of!(attr),
            std::mem::size_of::<Load>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success the kernel returned a new, owned program fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `bpf(BPF_PROG_ATTACH)` of a program to a cgroup v2 folder.
pub(crate) fn bpf_prog_attach(
    cgroup: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
) -> io::Result<()> {
    #[repr(C)]
    struct Attach {
        target_fd: u32,
        attach_bpf_fd: u32,
        attach_type: u32,
        attach_flags: u32,
        replace_bpf_fd: u32,
    }
    let attr = Attach {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type,
        attach_flags: 0,
        replace_bpf_fd: 0,
    };
    // SAFETY: `attr` is a valid prefix of `union bpf_attr` for BPF_PROG_ATTACH; both
    // fds are borrowed for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            8, // BPF_PROG_ATTACH
            std::ptr::addr_of!(attr),
            std::mem::size_of::<Attach>(),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A borrowed fd from a raw one the plan owns for the child's whole setup.
pub(crate) fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: the parent keeps every fd of the plan open until the child has exec'd or
    // exited, and the child never closes them before exec (close-on-exec does; the
    // child's first step closes only fds outside the plan's `keep`).
    unsafe { BorrowedFd::borrow_raw(fd) }
}
