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
}

impl Step {
    const ALL: [Step; 24] = [
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
        }
    }
}

/// Everything the child needs, prepared by the parent before `clone3`.
pub(crate) struct ChildPlan {
    /// Whether to bring up loopback (a namespace made ahead has it up already).
    pub loopback: bool,
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
    let e = sys::execve(&plan.program, &pointers.argv, &pointers.envp);
    Err((Step::Exec, e.raw_os_error().unwrap_or(libc::EIO)))
}
