//! Starting a sandbox: prepare everything the child needs, clone it on the spawner
//! thread (it closes what it does not need and joins its cgroup at once), set its
//! identity, rlimits and network while it waits, let it go, and learn whether its exec
//! worked. Ending one: freeze, kill everything, reap, account,
//! clean up.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Resource, Rlimit, Signal, WaitId, WaitIdOptions};
use tokio::io::AsyncReadExt;
use tokio::io::unix::AsyncFd;

use crate::cgroup::{RunCgroup, Usage};
use crate::child::{ChildPlan, INSIDE_ID, Pointers, Step};
use crate::config::{Bind, Limits, Network, RunSpec, check_target};
use crate::error::SandboxError;
use crate::landlock;
use crate::mounts::{self, MountPoint, Scratch};
use crate::net::NetHelper;
use crate::sandbox::Inner;
use crate::sys;
use crate::uidpool::Lease;

/// How long the child may take from "go" to its exec.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The namespaces of every sandbox (the cgroup namespace is unshared by the child once
/// it is in its cgroup).
const NAMESPACES: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS) as u64;

/// clone3's CLONE_CLEAR_SIGHAND: the child starts with no signal handler of the
/// supervisor's.
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

struct Job {
    plan: ChildPlan,
    cgroup: Option<OwnedFd>,
    /// A network namespace made ahead, entered by the spawner for the clone; without
    /// one, the clone creates a fresh namespace.
    netns: Option<OwnedFd>,
    reply: tokio::sync::oneshot::Sender<std::io::Result<(i32, OwnedFd)>>,
}

/// Clones a sandbox's first process: into the network namespace made ahead when there
/// is one (entered by this thread for the clone only), else into a fresh one.
fn clone_job(
    plan: &ChildPlan,
    cgroup: Option<&OwnedFd>,
    netns: Option<&OwnedFd>,
) -> std::io::Result<(i32, OwnedFd)> {
    let pointers = Pointers::new(plan);
    let cgroup = cgroup.map(AsRawFd::as_raw_fd);
    match netns {
        Some(netns) => crate::netns::within(netns, || {
            sys::clone_child(
                (NAMESPACES & !(libc::CLONE_NEWNET as u64)) | CLONE_CLEAR_SIGHAND,
                cgroup,
                plan,
                &pointers,
            )
        })
        .and_then(|r| r),
        None => sys::clone_child(NAMESPACES | CLONE_CLEAR_SIGHAND, cgroup, plan, &pointers),
    }
}

/// Whether the calling thread is the process's main thread, which lives as long as
/// the process (a Rust program ends when its main thread returns).
fn on_main_thread() -> bool {
    rustix::thread::gettid() == rustix::process::getpid()
}

/// The thread that clones the sandboxes started from other threads. The kernel sends
/// the parent-death signal when the *thread* that created a child exits, and a
/// runtime's worker threads may end before the process does; this thread lives as long
/// as the process, so a sandbox dies with its supervisor and never earlier. (The main
/// thread lives as long too: a start on it clones there, without the two hops.)
fn spawner() -> &'static mpsc::Sender<Job> {
    static SPAWNER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("sandbox-spawner".into())
            .spawn(move || {
                for job in rx {
                    let result = clone_job(&job.plan, job.cgroup.as_ref(), job.netns.as_ref());
                    let _ = job.reply.send(result);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the sandbox spawner thread");
        }
        tx
    })
}

/// A sandbox that is running (or has exited and is not yet reaped).
#[derive(Debug)]
pub(crate) struct Running {
    pub pid: i32,
    pidfd: AsyncFd<OwnedFd>,
    cgroup: Option<RunCgroup>,
    cgroups: Option<Arc<crate::cgroup::Cgroups>>,
    mount_ns: Option<OwnedFd>,
    net: Option<NetHelper>,
    lease: Lease,
    pub scratch: Scratch,
    pub started: Instant,
    /// The exit status once reaped.
    status: Option<Exit>,
}

/// How the sandbox's first process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

/// The pipes of a started sandbox.
pub(crate) struct Stdio {
    pub stdin: tokio::net::unix::pipe::Sender,
    pub stdout: tokio::net::unix::pipe::Receiver,
    pub stderr: tokio::net::unix::pipe::Receiver,
}

fn pipe(what: &str) -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SandboxError::io(format!("cannot create the {what} pipe"), e.into()))?;
    Ok((high(r)?, high(w)?))
}

/// An fd numbered 3 or above (the child's ends must never be one of 0, 1, 2 before it
/// moves them there).
fn high(fd: OwnedFd) -> Result<OwnedFd, SandboxError> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    rustix::io::fcntl_dupfd_cloexec(&fd, 3)
        .map_err(|e| SandboxError::io("cannot move a pipe above fd 2", e.into()))
}

fn cstring(field: &str, bytes: &[u8]) -> Result<CString, SandboxError> {
    CString::new(bytes).map_err(|_| SandboxError::config(field, "contains a NUL byte"))
}

/// Checks the binds: absolute, existing sources, allowed targets, none inside another.
fn check_binds(binds: &[Bind]) -> Result<Vec<MountPoint>, SandboxError> {
    let mut points = Vec::with_capacity(binds.len());
    for (i, b) in binds.iter().enumerate() {
        check_target(&format!("binds[{i}].target"), &b.target)?;
        if !b.source.is_absolute() {
            return Err(SandboxError::config(
                format!("binds[{i}].source"),
                format!("{} is not absolute", b.source.display()),
            ));
        }
        let meta =
            std::fs::metadata(&b.source).map_err(|source| SandboxError::BindSourceNotFound {
                path: b.source.clone(),
                source,
            })?;
        points.push(MountPoint {
            target: b.target.clone(),
            dir: meta.is_dir(),
        });
    }
    for (i, a) in binds.iter().enumerate() {
        for (j, b) in binds.iter().enumerate() {
            if i != j && a.target.starts_with(&b.target) {
                return Err(SandboxError::config(
                    format!("binds[{i}].target"),
                    format!(
                        "{} is inside another bind's target {}; bind the folder once",
                        a.target.display(),
                        b.target.display()
                    ),
                ));
            }
        }
    }
    points.sort();
    Ok(points)
}

/// The program's path inside the sandbox, checked to exist there.
fn resolve_program(program: &OsStr, binds: &[Bind]) -> Result<PathBuf, SandboxError> {
    let not_found = |reason: String| SandboxError::ProgramNotFound {
        program: program.to_string_lossy().into_owned(),
        reason,
    };
    let host_path = |inside: &Path| -> Option<PathBuf> {
        for b in binds {
            if let Ok(rest) = inside.strip_prefix(&b.target) {
                return Some(if rest.as_os_str().is_empty() {
                    b.source.clone()
                } else {
                    b.source.join(rest)
                });
            }
        }
        let first = inside.components().nth(1)?;
        let first = first.as_os_str().to_str()?;
        (first == "usr" || mounts_top(first)).then(|| inside.to_owned())
    };
    let bytes = program.as_bytes();
    if bytes.is_empty() {
        return Err(not_found("the program is empty".into()));
    }
    if bytes.contains(&b'/') {
        let inside = PathBuf::from(program);
        if !inside.is_absolute() {
            return Err(not_found(
                "a program path must be absolute inside the sandbox (the working directory is /work)"
                    .into(),
            ));
        }
        let host = host_path(&inside).ok_or_else(|| {
            not_found(
                "programs live under /usr, the bin and lib links, or an executable bind".into(),
            )
        })?;
        return match std::fs::metadata(&host) {
            Ok(m) if m.is_file() => Ok(inside),
            Ok(_) => Err(not_found("it is not a file".into())),
            Err(e) => Err(not_found(format!("{e}"))),
        };
    }
    for dir in ["/usr/local/bin", "/usr/bin", "/bin"] {
        let inside = Path::new(dir).join(program);
        if host_path(&inside).is_some_and(|h| h.is_file()) {
            return Ok(inside);
        }
    }
    Err(not_found(
        "not found in /usr/local/bin, /usr/bin or /bin of the sandbox".into(),
    ))
}

fn mounts_top(name: &str) -> bool {
    ["bin", "sbin", "lib", "lib32", "lib64", "libx32"].contains(&name)
}

fn environment(env: &[(OsString, OsString)]) -> Result<Vec<CString>, SandboxError> {
    env.iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let field = format!("env[{i}]");
            if k.is_empty() || k.as_bytes().contains(&b'=') {
                return Err(SandboxError::config(
                    field,
                    "a variable name must be non-empty and contain no `=`",
                ));
            }
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(&field, &kv)
        })
        .collect()
}

fn setup_error(step: Step, errno: i32, program: &str) -> SandboxError {
    let source = std::io::Error::from_raw_os_error(errno);
    match step {
        Step::Exec
            if matches!(
                errno,
                libc::ENOENT | libc::EACCES | libc::ENOEXEC | libc::ENOTDIR
            ) =>
        {
            SandboxError::ProgramNotFound {
                program: program.to_owned(),
                reason: format!("execve failed: {source}"),
            }
        }
        _ => SandboxError::SetupFailed {
            step: step.name(),
            source,
        },
    }
}

/// A checked command: the program's path inside the sandbox, its arguments (program
/// name first) and its whole environment.
pub(crate) struct Command {
    program: PathBuf,
    program_c: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl Command {
    /// Checks `spec`'s program, arguments, environment and files: everything that can be
    /// checked before any resource is taken.
    pub(crate) fn of(spec: &RunSpec) -> Result<Command, SandboxError> {
        let program = resolve_program(&spec.program, &spec.binds)?;
        let program_c = cstring("program", program.as_os_str().as_bytes())?;
        let mut argv = vec![program_c.clone()];
        for (i, a) in spec.args.iter().enumerate() {
            argv.push(cstring(&format!("args[{i}]"), a.as_bytes())?);
        }
        let envp = environment(&spec.env)?;
        for (i, (path, _)) in spec.files.iter().enumerate() {
            if path.is_absolute()
                || path
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(SandboxError::config(
                    format!("files[{i}]"),
                    "must be a path relative to the scratch folder, without `.` or `..`",
                ));
            }
        }
        Ok(Command {
            program,
            program_c,
            argv,
            envp,
        })
    }

    /// The command as a sandbox started ahead reads it, or `None` when it is too large
    /// for one (it then starts a sandbox of its own).
    pub(crate) fn encoded(&self) -> Option<Vec<u8>> {
        crate::child::encode_command(&self.program_c, &self.argv, &self.envp)
    }
}

/// A sandbox started ahead (`Sandbox::run` of a spec without binds, with the network
/// off): in its namespaces and cgroup, locked down, waiting on its go socket for the
/// command ([`crate::child::encode_command`]).
pub(crate) struct Waiting {
    running: Running,
    stdio: Stdio,
    sync: tokio::net::UnixStream,
    report: OwnedFd,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("running", &self.running)
            .finish_non_exhaustive()
    }
}

impl Waiting {
    /// Writes `files` into its scratch folder, sends it the command and waits for the
    /// exec. `Err(None)`: it is gone (killed while it waited, say), and the caller starts
    /// a sandbox of its own; `Err(Some(e))`: the command itself failed, as it would have
    /// in a sandbox of its own.
    pub(crate) async fn exec(
        mut self,
        command: &Command,
        encoded: &[u8],
        files: &[(PathBuf, Vec<u8>)],
    ) -> Result<(Running, Stdio), Option<SandboxError>> {
        use tokio::io::AsyncWriteExt;
        if self.running.exited().is_some() {
            return Err(None);
        }
        let uid = self.running.uid();
        for (path, contents) in files {
            self.running
                .scratch
                .write(path, contents, uid)
                .map_err(Some)?;
        }
        if self.sync.write_all(encoded).await.is_err() {
            return Err(None);
        }
        let mut running = self.running;
        match exec_report(None, self.report, None, &command.program).await {
            Ok(()) => {
                // The report pipe also closes when it dies while waiting (killed from
                // outside, say): only its `c`, written before the exec, tells them apart.
                let mut byte = [0u8; 1];
                if !matches!(self.sync.try_read(&mut byte), Ok(1) if byte[0] == b'c') {
                    return Err(None);
                }
                running.started = Instant::now();
                Ok((running, self.stdio))
            }
            Err(e) => {
                running.kill().await;
                running.finish().await;
                Err(Some(e))
            }
        }
    }
}

/// Starts a sandbox for `spec` with these (already clamped) limits.
pub(crate) async fn start(
    inner: &Arc<Inner>,
    spec: &RunSpec,
    limits: &Limits,
    network: Network,
) -> Result<(Running, Stdio), SandboxError> {
    start_with(inner, spec, &Command::of(spec)?, limits, network).await
}

/// [`start`] with the spec's command already checked.
pub(crate) async fn start_with(
    inner: &Arc<Inner>,
    spec: &RunSpec,
    command: &Command,
    limits: &Limits,
    network: Network,
) -> Result<(Running, Stdio), SandboxError> {
    let Released {
        mut running,
        stdio,
        sync_w,
        report_r,
        failed,
    } = launch(inner, spec, limits, network, Some(command)).await?;
    if let Err(e) = exec_report(Some(sync_w), report_r, failed, &command.program).await {
        running.kill().await;
        running.finish().await;
        return Err(e);
    }
    running.started = Instant::now();
    Ok((running, stdio))
}

/// Starts a sandbox ahead of its command, for runs of these limits without binds and
/// with the network off.
pub(crate) async fn start_ahead(
    inner: &Arc<Inner>,
    limits: &Limits,
) -> Result<Waiting, SandboxError> {
    let spec = RunSpec::new("", Vec::<String>::new());
    let Released {
        mut running,
        stdio,
        sync_w,
        report_r,
        failed,
    } = launch(inner, &spec, limits, Network::Off, None).await?;
    match ready_report(sync_w, &report_r, failed).await {
        Ok(sync) => Ok(Waiting {
            running,
            stdio,
            sync,
            report: report_r,
        }),
        Err(e) => {
            running.kill().await;
            running.finish().await;
            Err(e)
        }
    }
}

/// A sandbox [`launch`] has released: set up (or setting itself up) and told to go on;
/// the caller waits for its exec ([`exec_report`]) or its readiness ([`ready_report`]).
struct Released {
    running: Running,
    stdio: Stdio,
    sync_w: OwnedFd,
    report_r: OwnedFd,
    /// The network failed after "go" (the child was not told to go on).
    failed: Option<SandboxError>,
}

/// A start up to its release: with a command (exec'd as soon as the sandbox is set up)
/// or without one (the sandbox waits for it, locked down).
async fn launch(
    inner: &Arc<Inner>,
    spec: &RunSpec,
    limits: &Limits,
    network: Network,
    command: Option<&Command>,
) -> Result<Released, SandboxError> {
    let points = check_binds(&spec.binds)?;

    let lease = match inner.pool.lease() {
        // Sandboxes started ahead hold uids: a run that finds none left gives them up.
        Err(SandboxError::UidPoolExhausted { .. })
            if command.is_some() && inner.ready.waiting() > 0 =>
        {
            inner.ready.clear();
            inner.pool.lease()?
        }
        lease => lease?,
    };
    let uid = lease.id();
    let skeleton = inner.skeletons.get(&inner.config.runtime_dir, points)?;
    let prepared = mounts::prepare(&skeleton, &spec.binds, network == Network::On, limits, uid)?;
    let scratch = Scratch::new(prepared.scratch.clone());
    for (path, contents) in &spec.files {
        scratch.write(path, contents, uid)?;
    }

    let ruleset = match inner.landlock_abi {
        Some(_) => {
            let mut exec = vec![inner.usr.as_fd()];
            exec.extend(inner.top_dirs.iter().map(AsFd::as_fd));
            let bind_fds: Vec<OwnedFd> = spec
                .binds
                .iter()
                .map(|b| {
                    rustix::fs::open(
                        &b.source,
                        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
                        rustix::fs::Mode::empty(),
                    )
                    .map_err(|e| SandboxError::BindSourceNotFound {
                        path: b.source.clone(),
                        source: e.into(),
                    })
                })
                .collect::<Result<_, _>>()?;
            let mut read = Vec::new();
            let mut writable = Vec::new();
            for (b, fd) in spec.binds.iter().zip(&bind_fds) {
                if b.writable {
                    writable.push(fd.as_fd());
                    // A package cache: write, and execute too (the rules add up).
                    if b.exec {
                        exec.push(fd.as_fd());
                    }
                } else if b.exec {
                    exec.push(fd.as_fd());
                } else {
                    read.push(fd.as_fd());
                }
            }
            let certs;
            if network == Network::On {
                certs = rustix::fs::open(
                    "/etc/ssl/certs",
                    rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .ok();
                if let Some(c) = &certs {
                    read.push(c.as_fd());
                }
            }
            let paths = landlock::Paths {
                root: skeleton.fd.as_fd(),
                exec,
                read,
                write: [prepared.scratch.as_fd(), prepared.tmp.as_fd()]
                    .into_iter()
                    .chain(writable)
                    .collect(),
                devices: prepared.devices.iter().map(|d| d.as_fd()).collect(),
            };
            Some(
                landlock::ruleset(&paths, network).map_err(|e| SandboxError::SetupFailed {
                    step: "build the Landlock ruleset",
                    source: std::io::Error::other(e),
                })?,
            )
        }
        None => None,
    };

    let cgroup = match &inner.ahead.cgroups {
        Some(c) => Some(
            c.take(limits)
                .await
                .map_err(|e| SandboxError::io("cannot create the run's cgroup", e))?,
        ),
        None => None,
    };

    let (sync_r, sync_w) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| SandboxError::io("cannot create the go socket", e.into()))?;
    let (sync_r, sync_w) = (high(sync_r)?, high(sync_w)?);
    let (report_r, report_w) = pipe("report")?;
    let (stdin_r, stdin_w) = pipe("stdin")?;
    let (stdout_r, stdout_w) = pipe("stdout")?;
    let (stderr_r, stderr_w) = pipe("stderr")?;

    let cgroup_tasks = match &cgroup {
        Some(cg) => cg.v1_tasks().map_err(|e| {
            cg.clone().remove_later();
            SandboxError::io("cannot open the run's cgroup", e)
        })?,
        None => Vec::new(),
    };

    let netns = inner.ahead.netns.take().await;
    let mut plan = ChildPlan {
        loopback: netns.is_none(),
        sync: sync_r.as_raw_fd(),
        report: report_w.as_raw_fd(),
        stdio: [
            stdin_r.as_raw_fd(),
            stdout_w.as_raw_fd(),
            stderr_w.as_raw_fd(),
        ],
        root: prepared.root.as_raw_fd(),
        root_path: skeleton.cpath.clone(),
        mounts: prepared
            .mounts
            .iter()
            .map(|(fd, target)| (fd.as_raw_fd(), target.clone()))
            .collect(),
        ruleset: ruleset.as_ref().map(AsRawFd::as_raw_fd),
        cgroup_tasks: cgroup_tasks.iter().map(AsRawFd::as_raw_fd).collect(),
        keep: Vec::new(),
        seccomp: inner.seccomp.for_network(network == Network::On).clone(),
        deferred: command.is_none(),
        program: command.map(|c| c.program_c.clone()).unwrap_or_default(),
        argv: command.map(|c| c.argv.clone()).unwrap_or_default(),
        envp: command.map(|c| c.envp.clone()).unwrap_or_default(),
    };
    plan.keep = [plan.sync, plan.report, plan.root]
        .into_iter()
        .chain(plan.stdio)
        .chain(plan.mounts.iter().map(|(fd, _)| *fd))
        .chain(plan.ruleset)
        .chain(plan.cgroup_tasks.iter().copied())
        .collect();
    plan.keep.sort_unstable();
    plan.keep.dedup();
    let cgroup_fd = match cgroup.as_ref().and_then(RunCgroup::v2_dir) {
        Some(dir) => Some(
            rustix::fs::open(
                &dir,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| SandboxError::io(format!("cannot open {}", dir.display()), e.into()))?,
        ),
        None => None,
    };
    let cloned = if on_main_thread() {
        clone_job(&plan, cgroup_fd.as_ref(), netns.as_ref())
    } else {
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
        spawner()
            .send(Job {
                plan,
                cgroup: cgroup_fd,
                netns,
                reply: reply_tx,
            })
            .map_err(|_| {
                SandboxError::io(
                    "the sandbox spawner thread is gone",
                    std::io::Error::other("channel closed"),
                )
            })?;
        reply_rx.await.map_err(|_| {
            SandboxError::io(
                "the sandbox spawner thread is gone",
                std::io::Error::other("no reply"),
            )
        })?
    };
    let (pid, pidfd) = match cloned {
        Ok(p) => p,
        Err(e) => {
            if let Some(cg) = cgroup {
                cg.remove_later();
            }
            return Err(clone_error(e));
        }
    };
    // The child has its own copies now; the parent keeps only its ends.
    drop((
        sync_r,
        report_w,
        stdin_r,
        stdout_w,
        stderr_w,
        prepared.root,
        prepared.mounts,
        ruleset,
        cgroup_tasks,
    ));

    // Hold the sandbox's mount namespace: its teardown (an RCU grace period) then runs
    // on the janitor thread when this fd is dropped, not in the exit of the tool.
    let mount_ns = rustix::fs::open(
        format!("/proc/{pid}/ns/mnt"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok();
    let pidfd = sys::watch_pidfd(pidfd)
        .map_err(|e| SandboxError::io("cannot watch the sandbox's pidfd", e))?;
    let mut running = Running {
        pid,
        pidfd,
        cgroup,
        cgroups: inner.ahead.cgroups.clone(),
        mount_ns,
        net: None,
        lease,
        scratch,
        started: Instant::now(),
        status: None,
    };
    let failed = match release(&mut running, inner, limits, network, uid, &sync_w).await {
        Ok(failed) => failed,
        Err(e) => {
            running.kill().await;
            running.finish().await;
            return Err(e);
        }
    };
    let stdio = Stdio {
        stdin: tokio::net::unix::pipe::Sender::from_owned_fd(stdin_w)
            .map_err(|e| SandboxError::io("cannot use the stdin pipe", e))?,
        stdout: tokio::net::unix::pipe::Receiver::from_owned_fd(stdout_r)
            .map_err(|e| SandboxError::io("cannot use the stdout pipe", e))?,
        stderr: tokio::net::unix::pipe::Receiver::from_owned_fd(stderr_r)
            .map_err(|e| SandboxError::io("cannot use the stderr pipe", e))?,
    };
    Ok(Released {
        running,
        stdio,
        sync_w,
        report_r,
        failed,
    })
}

fn clone_error(e: std::io::Error) -> SandboxError {
    let fix = match e.raw_os_error() {
        Some(libc::EPERM) => {
            "the kernel or a security policy (a container's seccomp profile, AppArmor's restrict_unprivileged_userns) refuses new user namespaces: allow them for the supervisor, or run it outside that container"
        }
        Some(libc::ENOSPC) => {
            "the user namespace limit is reached: raise /proc/sys/user/max_user_namespaces (sysctl user.max_user_namespaces)"
        }
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            "the kernel lacks clone3 or one of the namespaces (Linux 5.5 or newer with CONFIG_USER_NS, CONFIG_PID_NS, CONFIG_NET_NS is needed)"
        }
        _ => "check the kernel log",
    };
    SandboxError::MechanismUnavailable {
        mechanism: crate::check::Mechanism::Namespaces,
        detail: format!(
            "clone3 with new user, mount, pid, net, ipc and uts namespaces failed: {e}"
        ),
        fix: fix.to_owned(),
    }
}

/// The parent's half of the start, while the child waits: identity and rlimits, then
/// "go", then the network; then "exec" (or, for a sandbox started ahead, "lock down and
/// wait"). `Ok(Some(e))`: the network failed after "go", and the child was not told to
/// go on; its own report may say more.
async fn release(
    running: &mut Running,
    inner: &Inner,
    limits: &Limits,
    network: Network,
    uid: u32,
    sync_w: &OwnedFd,
) -> Result<Option<SandboxError>, SandboxError> {
    let pid = running.pid;
    let map = format!("{INSIDE_ID} {uid} 1\n");
    for file in ["uid_map", "gid_map"] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, &map).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) => SandboxError::PrivilegeRequired {
                what: "CAP_SETUID and CAP_SETGID to map the sandbox to a pool uid".into(),
                fix: "run the supervisor as root".into(),
            },
            _ => SandboxError::io(format!("cannot write {path}"), e),
        })?;
    }
    set_rlimits(pid, limits)?;

    // Go: the child sets itself up (identity, root, lock-down) while the parent starts
    // its network; only the exec waits for that. (It is in its cgroup already: born
    // there under v2, moved in by itself as its first step under v1.)
    send(sync_w, b'g').map_err(|e| SandboxError::io("cannot release the sandbox", e))?;
    let net = async {
        if network != Network::On {
            return Ok(None);
        }
        let helper = crate::check::find_helper(&inner.config.network_helper).ok_or_else(|| {
            SandboxError::NetworkUnavailable {
                reason: format!("{} is not installed", inner.config.network_helper.display()),
                fix: "install slirp4netns (Debian: `apt-get install slirp4netns`) or set `network_helper`; or run the tool with the network off".into(),
            }
        })?;
        crate::net::start(
            &helper,
            pid,
            inner.cgroup2.as_deref(),
            &inner.config.cgroup_parent,
        )
        .await
        .map(Some)
    };
    let failed = match net.await {
        Ok(net) => {
            running.net = net;
            None
        }
        Err(e) => Some(e),
    };
    // Exec. A child that already failed reads nothing; its report says why. Without
    // `x` (a failure above), it reads the end of the socket and exits.
    if failed.is_none() {
        let _ = send(sync_w, b'x');
    }
    Ok(failed)
}

/// Waits for the exec (the report pipe closes) or the child's record of a failed step.
async fn exec_report(
    sync_w: Option<OwnedFd>,
    report_r: OwnedFd,
    failed: Option<SandboxError>,
    program: &Path,
) -> Result<(), SandboxError> {
    let mut report = tokio::net::unix::pipe::Receiver::from_owned_fd(report_r)
        .map_err(|e| SandboxError::io("cannot read the sandbox's report", e))?;
    let mut record = Vec::with_capacity(8);
    let read = tokio::time::timeout(SETUP_TIMEOUT, report.read_to_end(&mut record)).await;
    drop(sync_w);
    // The child's own report of a failure says more than ours (a cgroup move refused
    // because it had already exited, say).
    match read {
        Err(_) => Err(failed.unwrap_or(SandboxError::SetupFailed {
            step: "wait for the sandbox's exec",
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        })),
        Ok(Err(e)) => {
            Err(failed.unwrap_or(SandboxError::io("cannot read the sandbox's report", e)))
        }
        Ok(Ok(_)) if record.is_empty() => failed.map_or(Ok(()), Err),
        Ok(Ok(_)) => Err(record_error(&record, &program.to_string_lossy())),
    }
}

/// The error a child's failure record (`(step, errno)`) names.
fn record_error(record: &[u8], program: &str) -> SandboxError {
    let step = record
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .and_then(Step::from_raw);
    let errno = record
        .get(4..8)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(i32::from_le_bytes)
        .unwrap_or(libc::EIO);
    match step {
        Some(step) => setup_error(step, errno, program),
        None => SandboxError::SetupFailed {
            step: "an unknown step",
            source: std::io::Error::from_raw_os_error(errno),
        },
    }
}

/// Waits for a sandbox started ahead to say it is locked down and waiting (`r` on the
/// go socket); on EOF instead, its report names the step that failed.
async fn ready_report(
    sync_w: OwnedFd,
    report_r: &OwnedFd,
    failed: Option<SandboxError>,
) -> Result<tokio::net::UnixStream, SandboxError> {
    use tokio::io::AsyncReadExt as _;
    if let Some(e) = failed {
        return Err(e);
    }
    let io = |e: std::io::Error| SandboxError::io("cannot use the go socket", e);
    let sync = std::os::unix::net::UnixStream::from(sync_w);
    sync.set_nonblocking(true).map_err(io)?;
    let mut sync = tokio::net::UnixStream::from_std(sync).map_err(io)?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(SETUP_TIMEOUT, sync.read(&mut byte)).await {
        Ok(Ok(1)) if byte[0] == b'r' => Ok(sync),
        Ok(Ok(_)) | Ok(Err(_)) => {
            // It exited: its report is complete (read without blocking all the same).
            let mut record = [0u8; 8];
            let _ = rustix::io::ioctl_fionbio(report_r, true);
            let n = rustix::io::read(report_r, &mut record).unwrap_or(0);
            Err(record_error(&record[..n], "(started ahead)"))
        }
        Err(_) => Err(SandboxError::SetupFailed {
            step: "wait for a sandbox started ahead",
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        }),
    }
}

/// One byte to the child on the go socket (never SIGPIPE: the child may be gone).
fn send(sync: &OwnedFd, byte: u8) -> std::io::Result<()> {
    rustix::net::send(sync, &[byte], rustix::net::SendFlags::NOSIGNAL)?;
    Ok(())
}

fn set_rlimits(pid: i32, limits: &Limits) -> Result<(), SandboxError> {
    let pid = Pid::from_raw(pid);
    let cpu_secs = limits.cpu_time_ms.div_ceil(1000).max(1);
    let set = |resource: Resource, soft: u64, hard: u64, name: &str| {
        rustix::process::prlimit(
            pid,
            resource,
            Rlimit {
                current: Some(soft),
                maximum: Some(hard),
            },
        )
        .map_err(|e| SandboxError::io(format!("cannot set the {name} rlimit"), e.into()))
    };
    // CPU: SIGXCPU at the soft limit, SIGKILL a second later.
    set(Resource::Cpu, cpu_secs, cpu_secs + 1, "CPU time")?;
    set(
        Resource::Fsize,
        limits.file_size_bytes,
        limits.file_size_bytes,
        "file size",
    )?;
    let files = u64::from(limits.open_files);
    set(Resource::Nofile, files, files, "open files")?;
    set(Resource::Core, 0, 0, "core size")?;
    let procs = u64::from(limits.pids);
    set(Resource::Nproc, procs, procs, "process count")?;
    Ok(())
}

impl Running {
    /// The host uid it runs as.
    pub(crate) fn uid(&self) -> u32 {
        self.lease.id()
    }

    /// What the cgroup has measured so far.
    pub(crate) fn usage(&self) -> Usage {
        self.cgroup
            .as_ref()
            .map(RunCgroup::usage)
            .unwrap_or_default()
    }

    /// Waits until the sandbox's first process exits, then reaps it. Its exit takes
    /// every other process of its pid namespace with it, so nothing of the sandbox is
    /// left once this returns.
    pub(crate) async fn wait(&mut self) -> Exit {
        if let Some(s) = self.status {
            return s;
        }
        loop {
            if let Some(s) = self.try_reap() {
                return s;
            }
            match self.pidfd.readable().await {
                Ok(mut guard) => guard.clear_ready(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot poll a sandbox's pidfd");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }

    fn try_reap(&mut self) -> Option<Exit> {
        let options = WaitIdOptions::EXITED
            | WaitIdOptions::NOHANG
            | WaitIdOptions::from_bits_retain(libc::__WALL as u32);
        match rustix::process::waitid(WaitId::PidFd(self.pidfd.get_ref().as_fd()), options) {
            Ok(Some(status)) => {
                let exit = match (status.exit_status(), status.terminating_signal()) {
                    (Some(code), _) if status.exited() => Exit::Code(code),
                    (_, Some(sig)) => Exit::Signal(sig),
                    (Some(code), None) => Exit::Code(code),
                    (None, None) => Exit::Signal(libc::SIGKILL),
                };
                self.status = Some(exit);
                Some(exit)
            }
            Ok(None) => None,
            Err(rustix::io::Errno::CHILD) => {
                // Reaped already (should not happen: only this handle waits for it).
                let exit = Exit::Signal(libc::SIGKILL);
                self.status = Some(exit);
                Some(exit)
            }
            Err(_) => None,
        }
    }

    /// Whether it has exited (without waiting).
    pub(crate) fn exited(&mut self) -> Option<Exit> {
        self.status.or_else(|| self.try_reap())
    }

    /// Freezes the cgroup, kills everything in it, thaws, and kills the first process
    /// (whose death the kernel turns into the death of its whole pid namespace); then
    /// reaps.
    pub(crate) async fn kill(&mut self) -> Exit {
        if let Some(s) = self.exited() {
            return s;
        }
        if let Some(cg) = self.cgroup.take() {
            let cg = tokio::task::spawn_blocking(move || {
                cg.kill_all();
                cg
            })
            .await;
            match cg {
                Ok(cg) => self.cgroup = Some(cg),
                Err(e) => tracing::warn!(error = %e, "the cgroup kill task failed"),
            }
        }
        let _ = rustix::process::pidfd_send_signal(self.pidfd.get_ref(), Signal::KILL);
        self.wait().await
    }

    /// The accounting, then cleanup: the cgroup removed, the network helper stopped, the
    /// uid released. Call after the first process is reaped.
    pub(crate) async fn finish(mut self) -> Usage {
        let usage = self
            .cgroup
            .as_ref()
            .map(RunCgroup::usage)
            .unwrap_or_default();
        let mount_ns = self.mount_ns.take();
        crate::janitor::later(move || drop(mount_ns));
        if let (Some(cg), Some(cgroups)) = (self.cgroup.take(), &self.cgroups) {
            cgroups.recycle(cg);
        }
        if let Some(net) = self.net.take() {
            net.stop().await;
        }
        usage
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A handle dropped while its sandbox runs (a cancelled call): kill its first
        // process now (its namespace dies with it), and leave the freezing, reaping and
        // cleanup to the janitor thread.
        if self.status.is_some()
            && self.cgroup.is_none()
            && self.net.is_none()
            && self.mount_ns.is_none()
        {
            return;
        }
        let running = self.exited().is_none();
        if running {
            let _ = rustix::process::pidfd_send_signal(self.pidfd.get_ref(), Signal::KILL);
        }
        let cgroup = self.cgroup.take();
        let net = self.net.take();
        let mount_ns = self.mount_ns.take();
        let pidfd = self.pidfd.get_ref().try_clone();
        crate::janitor::later(move || {
            if running {
                if let Some(cg) = &cgroup {
                    cg.kill_all();
                }
                if let Ok(fd) = pidfd {
                    let _ = rustix::process::waitid(
                        WaitId::PidFd(fd.as_fd()),
                        WaitIdOptions::EXITED
                            | WaitIdOptions::from_bits_retain(libc::__WALL as u32),
                    );
                }
            }
            drop(mount_ns);
            if let Some(cg) = cgroup {
                cg.remove();
            }
            drop(net);
        });
    }
}
