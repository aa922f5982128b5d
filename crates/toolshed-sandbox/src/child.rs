//! What the sandbox's first process does between `clone3` and `execve`: wait for the
//! parent to set its limits and identity, take the prepared root, lock itself down,
//! exec the tool. It becomes pid 1 of its own pid namespace, so when it dies the kernel
//! kills every process left in that namespace.
//!
//! This runs in a copy of a multi-threaded process: only async-signal-safe, raw system
//! calls on memory the parent prepared (no allocation, no locks, no formatting). A
//! failing step writes `(step, errno)` to the report pipe and exits; the parent turns it
//! into a typed error.

use std::ffi::{CStr, CString};
use std::os::fd::RawFd;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{CWD, Mode};
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, UnmountFlags};
use rustix::process::Signal;
use rustix::thread::{CapabilitiesSecureBits, CapabilitySet, CapabilitySets};

use crate::sys;

/// The uid and gid the tool has inside its namespaces (the pool's host uid outside).
pub(crate) const INSIDE_ID: u32 = 1000;

/// A step of the child's setup, reported when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Step {
    CloseInherited = 1,
    Cgroup,
    Wait,
    Identity,
    ParentDeath,
    CgroupNamespace,
    Hostname,
    Propagation,
    AttachRoot,
    EnterRoot,
    Mount,
    Proc,
    PivotRoot,
    DetachOldRoot,
    Workdir,
    Loopback,
    Stdio,
    Capabilities,
    NoNewPrivs,
    Landlock,
    Seccomp,
    Release,
    CloseFds,
    Exec,
    Command,
}

impl Step {
    const ALL: [Step; 25] = [
        Step::CloseInherited,
        Step::Cgroup,
        Step::Wait,
        Step::Identity,
        Step::ParentDeath,
        Step::CgroupNamespace,
        Step::Hostname,
        Step::Propagation,
        Step::AttachRoot,
        Step::EnterRoot,
        Step::Mount,
        Step::Proc,
        Step::PivotRoot,
        Step::DetachOldRoot,
        Step::Workdir,
        Step::Loopback,
        Step::Stdio,
        Step::Capabilities,
        Step::NoNewPrivs,
        Step::Landlock,
        Step::Seccomp,
        Step::Release,
        Step::CloseFds,
        Step::Exec,
        Step::Command,
    ];

    pub(crate) fn from_raw(raw: u32) -> Option<Step> {
        Step::ALL.into_iter().find(|s| *s as u32 == raw)
    }

    /// The step's name in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::CloseInherited => "close the supervisor's other fds",
            Step::Cgroup => "move into its cgroup",
            Step::Wait => "wait for the supervisor",
            Step::Identity => "switch to the sandbox uid and gid",
            Step::ParentDeath => "die with the supervisor (PR_SET_PDEATHSIG)",
            Step::CgroupNamespace => "new cgroup namespace",
            Step::Hostname => "set the hostname",
            Step::Propagation => "make mounts private",
            Step::AttachRoot => "attach the root",
            Step::EnterRoot => "enter the root",
            Step::Mount => "mount a prepared filesystem",
            Step::Proc => "mount /proc",
            Step::PivotRoot => "pivot_root",
            Step::DetachOldRoot => "detach the host's root",
            Step::Workdir => "enter /work",
            Step::Loopback => "bring up loopback",
            Step::Stdio => "connect stdin, stdout and stderr",
            Step::Capabilities => "drop every capability",
            Step::NoNewPrivs => "set no-new-privileges",
            Step::Landlock => "enforce Landlock",
            Step::Seccomp => "install the seccomp filter",
            Step::Release => "wait for the cgroup and the network",
            Step::CloseFds => "close inherited fds",
            Step::Exec => "execve",
            Step::Command => "read its command from the supervisor",
        }
    }
}

/// Everything the child needs, prepared by the parent before `clone3`.
pub(crate) struct ChildPlan {
    /// Whether to bring up loopback (a namespace made ahead has it up already).
    pub loopback: bool,
    /// Started ahead: the command is not known yet. Once locked down, the child says
    /// `r` on the go socket and reads its command there ([`encode_command`]); `program`,
    /// `argv` and `envp` are empty.
    pub deferred: bool,
    /// The child's end of the go socket: `g` once identity and rlimits are in place,
    /// `x` once it is in its cgroup and its network is up.
    pub sync: RawFd,
    /// Write end of the report pipe (close-on-exec: EOF means the exec worked).
    pub report: RawFd,
    /// The child's stdin, stdout and stderr.
    pub stdio: [RawFd; 3],
    /// The detached root (a read-only clone of the skeleton).
    pub root: RawFd,
    /// The skeleton's host path, where the root is attached in the child's namespace.
    pub root_path: CString,
    /// Detached mounts and their targets relative to the root.
    pub mounts: Vec<(RawFd, CString)>,
    /// The Landlock ruleset to enforce, if any.
    pub ruleset: Option<RawFd>,
    /// cgroup v1: the `tasks` file of each of the run's cgroup folders, opened by the
    /// parent; the child moves itself into each (empty under v2, where it is born in its
    /// cgroup).
    pub cgroup_tasks: Vec<RawFd>,
    /// Every fd above, ascending: the only ones the child keeps from the clone on.
    pub keep: Vec<RawFd>,
    /// The seccomp program to install.
    pub seccomp: crate::seccomp::Program,
    /// The program (absolute, inside the sandbox).
    pub program: CString,
    /// argv, program name first.
    pub argv: Vec<CString>,
    /// `KEY=VALUE` strings: the whole environment.
    pub envp: Vec<CString>,
}

/// Pointer arrays into a plan's strings, built by the parent right before `clone3` (the
/// child must not allocate them).
pub(crate) struct Pointers {
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Pointers {
    pub(crate) fn new(plan: &ChildPlan) -> Pointers {
        let list = |v: &[CString]| {
            let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        Pointers {
            argv: list(&plan.argv),
            envp: list(&plan.envp),
        }
    }
}

/// A failed step and its errno.
type Failed = (Step, i32);

fn at<T>(step: Step, r: rustix::io::Result<T>) -> Result<T, Failed> {
    r.map_err(|e| (step, e.raw_os_error()))
}

fn at_io<T>(step: Step, r: std::io::Result<T>) -> Result<T, Failed> {
    r.map_err(|e| (step, e.raw_os_error().unwrap_or(libc::EIO)))
}

/// The child's whole life: set up, exec; on failure report the step and exit 127.
pub(crate) fn run(plan: &ChildPlan, pointers: &Pointers) -> ! {
    let (step, errno) = match setup_and_exec(plan, pointers) {
        Ok(never) => match never {},
        Err(f) => f,
    };
    // The parent is gone: nothing to report to.
    if step == Step::Wait && errno == 0 {
        sys::exit_now(0);
    }
    let mut record = [0u8; 8];
    record[..4].copy_from_slice(&(step as u32).to_le_bytes());
    record[4..].copy_from_slice(&errno.to_le_bytes());
    sys::write_all_raw(plan.report, &record);
    sys::exit_now(127);
}

fn setup_and_exec(
    plan: &ChildPlan,
    pointers: &Pointers,
) -> Result<std::convert::Infallible, Failed> {
    // 0. Close every fd of the supervisor this child does not use, before it waits for
    //    anything. The clone copied the whole fd table: the other ends of its own pipes,
    //    other sandboxes' go sockets, and the close-on-exec error pipe of a `Command`
    //    that another thread of the supervisor is spawning at this moment. That spawn
    //    waits for EOF on its pipe; had this child kept a copy while waiting for "go"
    //    from the thread blocked in that spawn, both would wait forever.
    at_io(Step::CloseInherited, sys::close_all_but(&plan.keep))?;

    // 0b. cgroup v1: move itself into the run's cgroup, through the `tasks` files the
    //     parent opened (the kernel checks the opener's credentials). A thread moving
    //     itself skips the cgroup core's thread-group lock, whose write side waits for an
    //     RCU grace period (6 to 16 ms when the lock has gone cold) when the parent
    //     moves the process through `cgroup.procs`. The child runs only supervisor code
    //     until its exec, which waits for this.
    for fd in &plan.cgroup_tasks {
        at_io(Step::Cgroup, sys::write_exact(*fd, b"0"))?;
    }

    // 0c. Die with the supervisor while waiting too: EOF on the go socket is not enough,
    //     since another sandbox cloned at the same moment may hold a copy of its other
    //     end for a moment. A supervisor that exits between the clone and "go" (a
    //     runtime shut down while a warm worker starts) would otherwise leave the child
    //     waiting forever. Step 2 clears it; step 3 sets it again.
    at(
        Step::ParentDeath,
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL)),
    )?;

    // 1. Wait until the parent has written the uid and gid maps and set the rlimits.
    //    EOF: it gave up.
    let sync = sys::borrow(plan.sync);
    let mut go = [0u8; 1];
    loop {
        match rustix::io::read(sync, &mut go) {
            Ok(1) if go[0] == b'g' => break,
            Ok(_) => return Err((Step::Wait, 0)),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err((Step::Wait, e.raw_os_error())),
        }
    }

    // 2. Become the sandbox user before creating anything, so every file made from here
    //    on is owned by the pool uid; the capabilities of the namespace stay until step
    //    16 (the inside uid 0 is not mapped, so the kernel's setuid fix-up drops nothing).
    let id = INSIDE_ID;
    at(Step::Identity, rustix::thread::set_thread_groups(&[]))?;
    at(
        Step::Identity,
        rustix::thread::set_thread_res_gid(
            rustix::process::Gid::from_raw(id),
            rustix::process::Gid::from_raw(id),
            rustix::process::Gid::from_raw(id),
        ),
    )?;
    at(
        Step::Identity,
        rustix::thread::set_thread_res_uid(
            rustix::process::Uid::from_raw(id),
            rustix::process::Uid::from_raw(id),
            rustix::process::Uid::from_raw(id),
        ),
    )?;

    // 3. Die with the supervisor. A credential change clears the parent-death signal, so
    //    it is set after step 2; then check that the parent did not die before it was set
    //    (its end of the go pipe would be closed).
    at(
        Step::ParentDeath,
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL)),
    )?;
    let mut fds = [PollFd::new(&sync, PollFlags::empty())];
    let ready = at(
        Step::ParentDeath,
        rustix::event::poll(
            &mut fds,
            Some(&rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }),
        ),
    )?;
    if ready > 0 && fds[0].revents().contains(PollFlags::HUP) {
        return Err((Step::Wait, 0));
    }

    // 4. The hostname of its own uts namespace.
    at(Step::Hostname, rustix::system::sethostname(b"sandbox"))?;

    // 5. The prepared root: attach it over its own skeleton folder in this namespace,
    //    mount every prepared filesystem into it, pivot into it and drop the host's tree.
    at(
        Step::Propagation,
        rustix::mount::mount_change(
            c"/",
            MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
        ),
    )?;
    let root = sys::borrow(plan.root);
    at(
        Step::AttachRoot,
        rustix::mount::move_mount(
            root,
            c"",
            CWD,
            plan.root_path.as_c_str(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        ),
    )?;
    at(Step::EnterRoot, rustix::process::fchdir(root))?;
    for (fd, target) in &plan.mounts {
        at(
            Step::Mount,
            rustix::mount::move_mount(
                sys::borrow(*fd),
                c"",
                CWD,
                target.as_c_str(),
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            ),
        )?;
    }
    // A fresh /proc: mounted from inside the new pid namespace, it shows only the
    // sandbox's own processes.
    at(
        Step::Proc,
        rustix::mount::mount(
            c"proc",
            c"proc",
            c"proc",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            None::<&CStr>,
        ),
    )?;
    at(Step::PivotRoot, rustix::process::pivot_root(c".", c"."))?;
    at(
        Step::DetachOldRoot,
        rustix::mount::unmount(c".", UnmountFlags::DETACH),
    )?;
    at(Step::DetachOldRoot, rustix::process::chdir(c"/"))?;
    at(Step::Workdir, rustix::process::chdir(c"/work"))?;
    rustix::process::umask(Mode::from_raw_mode(0o022));

    // 6. The sandbox's own loopback (the host's stays unreachable: another namespace).
    if plan.loopback {
        at_io(Step::Loopback, sys::loopback_up())?;
    }

    // 7. stdin, stdout, stderr; default signal dispositions.
    at(
        Step::Stdio,
        rustix::stdio::dup2_stdin(sys::borrow(plan.stdio[0])),
    )?;
    at(
        Step::Stdio,
        rustix::stdio::dup2_stdout(sys::borrow(plan.stdio[1])),
    )?;
    at(
        Step::Stdio,
        rustix::stdio::dup2_stderr(sys::borrow(plan.stdio[2])),
    )?;
    sys::reset_signals();

    // 8. Only once its network is up (and, under v2, the parent has checked its cgroup)
    //    may it go on: wait for the second byte; then its own cgroup namespace, rooted at
    //    its cgroup (the last step needing a capability).
    loop {
        match rustix::io::read(sync, &mut go) {
            Ok(1) if go[0] == b'x' => break,
            Ok(_) => return Err((Step::Wait, 0)),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err((Step::Release, e.raw_os_error())),
        }
    }
    at(Step::CgroupNamespace, sys::unshare_cgroup())?;

    // 9. Lock-down: no capability left in any set (locked, so nothing regains one), no new
    //    privileges (setuid bits and file capabilities are ignored), Landlock, seccomp.
    at(
        Step::Capabilities,
        rustix::thread::set_capabilities_secure_bits(
            CapabilitiesSecureBits::NO_ROOT
                | CapabilitiesSecureBits::NO_ROOT_LOCKED
                | CapabilitiesSecureBits::NO_SETUID_FIXUP
                | CapabilitiesSecureBits::NO_SETUID_FIXUP_LOCKED
                | CapabilitiesSecureBits::KEEP_CAPS_LOCKED
                | CapabilitiesSecureBits::NO_CAP_AMBIENT_RAISE
                | CapabilitiesSecureBits::NO_CAP_AMBIENT_RAISE_LOCKED,
        ),
    )?;
    at_io(Step::Capabilities, sys::drop_bounding_set())?;
    at(
        Step::Capabilities,
        rustix::thread::clear_ambient_capability_set(),
    )?;
    at(
        Step::Capabilities,
        rustix::thread::set_capabilities(
            None,
            CapabilitySets {
                effective: CapabilitySet::empty(),
                permitted: CapabilitySet::empty(),
                inheritable: CapabilitySet::empty(),
            },
        ),
    )?;
    at(Step::NoNewPrivs, rustix::thread::set_no_new_privs(true))?;
    if let Some(ruleset) = plan.ruleset {
        at_io(Step::Landlock, sys::landlock_restrict_self(ruleset))?;
    }
    at_io(
        Step::Seccomp,
        sys::seccomp_install(plan.seccomp.instructions()),
    )?;

    // 10. Nothing inherited survives the exec but 0, 1 and 2.
    at_io(Step::CloseFds, sys::close_range_cloexec(3))?;
    if plan.deferred {
        return exec_command(plan.sync);
    }
    let e = sys::execve(&plan.program, &pointers.argv, &pointers.envp);
    Err((Step::Exec, e.raw_os_error().unwrap_or(libc::EIO)))
}

/// The largest command a sandbox started ahead takes: program, arguments and
/// environment, each with its NUL. A larger one starts a sandbox of its own.
pub(crate) const COMMAND_MAX: usize = 64 * 1024;
/// The most arguments (program name included) and environment entries it takes.
pub(crate) const COMMAND_MAX_STRINGS: usize = 512;

/// The command for a sandbox started ahead, as sent on its go socket: the body's
/// length, the number of arguments and of environment entries (`u32`, little-endian),
/// then the program, each argument and each `KEY=VALUE`, each ending in NUL. `None`
/// when it is over [`COMMAND_MAX`] or [`COMMAND_MAX_STRINGS`].
pub(crate) fn encode_command(
    program: &CStr,
    argv: &[CString],
    envp: &[CString],
) -> Option<Vec<u8>> {
    let strings = std::iter::once(program)
        .chain(argv.iter().map(CString::as_c_str))
        .chain(envp.iter().map(CString::as_c_str));
    let body: usize = strings.clone().map(|s| s.to_bytes_with_nul().len()).sum();
    if body > COMMAND_MAX || argv.len() > COMMAND_MAX_STRINGS || envp.len() > COMMAND_MAX_STRINGS {
        return None;
    }
    let mut out = Vec::with_capacity(12 + body);
    for n in [body, argv.len(), envp.len()] {
        out.extend_from_slice(&u32::try_from(n).ok()?.to_le_bytes());
    }
    for s in strings {
        out.extend_from_slice(s.to_bytes_with_nul());
    }
    Some(out)
}

/// Splits a command's body ([`encode_command`]): the program, then `argc` arguments into
/// `argv`, then `envc` entries into `envp`, each ending in NUL, nothing after the last.
/// Every pointer points into `body`; the entry after the last of each list is left as
/// it is (NULL). An errno when the body does not have that shape.
pub(crate) fn split_command<'a>(
    body: &'a [u8],
    argc: usize,
    envc: usize,
    argv: &mut [*const libc::c_char],
    envp: &mut [*const libc::c_char],
) -> Result<&'a CStr, i32> {
    if argc == 0 || argc >= argv.len() || envc >= envp.len() {
        return Err(libc::E2BIG);
    }
    let mut start = 0;
    let mut n = 0;
    for (i, byte) in body.iter().enumerate() {
        if *byte != 0 {
            continue;
        }
        let s = body[start..].as_ptr().cast::<libc::c_char>();
        match n {
            0 => {}
            k if k <= argc => argv[k - 1] = s,
            k if k <= argc + envc => envp[k - 1 - argc] = s,
            _ => return Err(libc::EINVAL),
        }
        n += 1;
        start = i + 1;
    }
    if n != 1 + argc + envc || start != body.len() {
        return Err(libc::EINVAL);
    }
    CStr::from_bytes_until_nul(body).map_err(|_| libc::EINVAL)
}

/// Reads exactly `buf.len()` bytes from the go socket (EOF: the supervisor gave the
/// sandbox up).
fn read_exact(sync: RawFd, buf: &mut [u8]) -> Result<(), Failed> {
    let mut at_byte = 0;
    while at_byte < buf.len() {
        match rustix::io::read(sys::borrow(sync), &mut buf[at_byte..]) {
            Ok(0) => return Err((Step::Wait, 0)),
            Ok(n) => at_byte += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err((Step::Command, e.raw_os_error())),
        }
    }
    Ok(())
}

/// A sandbox started ahead, locked down: say it is ready (`r`), read its command, say
/// it has it (`c`), exec it.
/// Everything lives on this stack (a copy of a multi-threaded process may not
/// allocate); the command is checked as it is split, so no pointer leaves the buffer.
#[inline(never)]
fn exec_command(sync: RawFd) -> Result<std::convert::Infallible, Failed> {
    let mut body = [0u8; COMMAND_MAX];
    let mut argv = [std::ptr::null::<libc::c_char>(); COMMAND_MAX_STRINGS + 1];
    let mut envp = [std::ptr::null::<libc::c_char>(); COMMAND_MAX_STRINGS + 1];
    sys::write_all_raw(sync, b"r");
    let mut header = [0u8; 12];
    read_exact(sync, &mut header)?;
    let field = |i: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&header[i * 4..i * 4 + 4]);
        u32::from_le_bytes(b) as usize
    };
    let (len, argc, envc) = (field(0), field(1), field(2));
    if len > COMMAND_MAX || argc == 0 || argc > COMMAND_MAX_STRINGS || envc > COMMAND_MAX_STRINGS {
        return Err((Step::Command, libc::E2BIG));
    }
    let body = &mut body[..len];
    read_exact(sync, body)?;
    let program =
        split_command(body, argc, envc, &mut argv, &mut envp).map_err(|e| (Step::Command, e))?;
    // Received: the supervisor then tells an exec from a death while waiting (both close
    // the report pipe).
    sys::write_all_raw(sync, b"c");
    let e = sys::execve(program, &argv[..=argc], &envp[..=envc]);
    Err((Step::Exec, e.raw_os_error().unwrap_or(libc::EIO)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(encoded: &[u8]) -> (usize, usize, usize, &[u8]) {
        let field = |i: usize| {
            u32::from_le_bytes([
                encoded[i * 4],
                encoded[i * 4 + 1],
                encoded[i * 4 + 2],
                encoded[i * 4 + 3],
            ]) as usize
        };
        (field(0), field(1), field(2), &encoded[12..])
    }

    #[test]
    fn a_command_splits_back_into_its_program_arguments_and_environment() {
        let argv = [
            c"python3".to_owned(),
            c"-c".to_owned(),
            c"print(1)".to_owned(),
        ];
        let envp = [c"A=1".to_owned(), c"EMPTY=".to_owned()];
        let encoded = encode_command(c"/usr/bin/python3", &argv, &envp).expect("fits");
        let (len, argc, envc, body) = header(&encoded);
        assert_eq!((len, argc, envc), (body.len(), 3, 2));

        let mut a = [std::ptr::null(); 8];
        let mut e = [std::ptr::null(); 8];
        let program = split_command(body, argc, envc, &mut a, &mut e).expect("splits");
        assert_eq!(program, c"/usr/bin/python3");
        // Each pointer starts its string inside the body, and the lists end in NULL.
        let at = |p: *const libc::c_char| p as usize - body.as_ptr() as usize;
        let offsets: Vec<usize> = a[..3].iter().chain(&e[..2]).map(|p| at(*p)).collect();
        let mut expected = Vec::new();
        let mut off = "/usr/bin/python3".len() + 1;
        for s in ["python3", "-c", "print(1)", "A=1", "EMPTY="] {
            expected.push(off);
            off += s.len() + 1;
        }
        assert_eq!(offsets, expected);
        assert!(a[3].is_null() && e[2].is_null());
    }

    #[test]
    fn a_command_of_the_wrong_shape_is_refused_without_a_pointer_outside_it() {
        let argv = [c"sh".to_owned()];
        let encoded = encode_command(c"/bin/sh", &argv, &[c"A=1".to_owned()]).expect("fits");
        let (_, argc, envc, body) = header(&encoded);
        let mut a = [std::ptr::null(); 4];
        let mut e = [std::ptr::null(); 4];
        // Cut short (the last string loses its NUL, or a whole string is missing).
        for cut in 0..body.len() {
            assert!(
                split_command(&body[..cut], argc, envc, &mut a, &mut e).is_err(),
                "{cut}"
            );
        }
        // One string too many, and counts the arrays cannot hold.
        let mut longer = body.to_vec();
        longer.extend_from_slice(b"B=2\0");
        assert_eq!(
            split_command(&longer, argc, envc, &mut a, &mut e),
            Err(libc::EINVAL)
        );
        assert_eq!(
            split_command(body, 0, envc, &mut a, &mut e),
            Err(libc::E2BIG)
        );
        assert_eq!(
            split_command(body, 4, envc, &mut a, &mut e),
            Err(libc::E2BIG)
        );
        assert_eq!(
            split_command(body, argc, 4, &mut a, &mut e),
            Err(libc::E2BIG)
        );
    }

    #[test]
    fn a_command_too_large_for_a_sandbox_started_ahead_is_not_encoded() {
        let big = CString::new(vec![b'x'; COMMAND_MAX]).expect("no NUL");
        assert!(encode_command(c"/bin/sh", &[c"sh".to_owned(), big], &[]).is_none());
        let many: Vec<CString> = (0..=COMMAND_MAX_STRINGS).map(|_| c"x".to_owned()).collect();
        assert!(encode_command(c"/bin/sh", &many, &[]).is_none());
        assert!(encode_command(c"/bin/sh", &[c"sh".to_owned()], &many).is_none());
    }
}
