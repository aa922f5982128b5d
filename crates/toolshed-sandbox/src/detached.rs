//! Background runs that outlive whoever started them: a *detached supervisor* process
//! holds one sandboxed command, writes its output and its status to files in a state
//! folder, and goes on when the CLI or server that started it exits or is killed.
//!
//! Why a process of its own: a sandbox dies with the thread that cloned it (the
//! parent-death signal, see `spawn.rs`), so a sandbox started by the CLI would die with
//! the CLI. The supervisor is started in its own session (`setsid`), so no terminal
//! hang-up or process-group signal of its starter reaches it, and it is the one whose
//! death ends the sandbox.
//!
//! The state folder (made by the caller, mode 0700) holds:
//!
//! - `spec.json` ([`DetachedSpec`]): what to run, written by [`Supervisor::start`];
//! - `status.json` ([`DetachedStatus`]): `running`, then `exited` or `failed`, replaced
//!   atomically (written beside it, then renamed);
//! - `output.log` and `output.1.log`: stdout and stderr interleaved as they arrive; when
//!   `output.log` reaches the cap it becomes `output.1.log`, so the folder holds at most
//!   twice the cap and the newest output is always kept ([`read_tail`]);
//! - `supervisor.log`: the supervisor's own stderr.
//!
//! A supervisor that vanished (SIGKILL, OOM, a reboot) leaves `running` in its status:
//! whoever reads it compares the supervisor's pid and start time ([`process_start_time`])
//! to tell a live supervisor from a dead one or a reused pid.
//!
//! SIGTERM to the supervisor ([`request_stop`]) asks it to stop its command: it kills
//! the sandbox (every process of it) and writes `exited` with `killed: stopped`
//! ([`STOPPED`]), then exits.
//!
//! The supervisor is any binary that calls [`supervise`] with the state folder:
//! `toolshed-sandbox-exec --supervise DIR`, or the CLI's own hidden
//! `toolshed sandbox supervise DIR`. [`Supervisor::locate`] finds the first.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use crate::config::{Bind, LimitsRequest, Network, RunSpec, SandboxConfig};
use crate::error::SandboxCode;
use crate::run::KillReason;
use crate::sandbox::Sandbox;
use crate::spawn::Exit;

/// What to run, written by the starter into the state folder.
pub const SPEC_FILE: &str = "spec.json";
/// The run's status, written by the supervisor.
pub const STATUS_FILE: &str = "status.json";
/// The newest output (stdout and stderr interleaved).
pub const OUTPUT_FILE: &str = "output.log";
/// The output before `output.log`'s last rotation.
pub const OUTPUT_ROTATED_FILE: &str = "output.1.log";
/// The supervisor's own stderr.
pub const SUPERVISOR_LOG: &str = "supervisor.log";
/// The environment variable naming the supervisor binary (a `toolshed-sandbox-exec`).
pub const SUPERVISOR_ENV: &str = "TOOLSHED_SANDBOX_EXEC";
/// The format version of the spec and status files.
pub const FORMAT: u32 = 1;
/// `killed` of a status whose command was stopped on request ([`request_stop`]).
pub const STOPPED: &str = "stopped";

/// What a detached supervisor runs: the command and its sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetachedSpec {
    /// The file format ([`FORMAT`]).
    pub format: u32,
    /// The program, inside the sandbox.
    pub program: String,
    /// Its arguments, each one argv element as given (never split, never a shell's).
    pub args: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Host folders shown inside.
    pub binds: Vec<Bind>,
    /// Its limits (the wall-clock timeout does not apply: see `max_duration_ms`).
    pub limits: LimitsRequest,
    /// Network access.
    pub network: Network,
    /// Killed after this long, when set.
    pub max_duration_ms: Option<u64>,
    /// The most bytes `output.log` holds before it is rotated.
    pub output_cap_bytes: u64,
    /// The sandbox's settings.
    pub sandbox: SandboxConfig,
}

/// Where a detached run is, as its supervisor last wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DetachedState {
    /// The command runs.
    Running,
    /// The command ended (by itself, or killed: see `killed`).
    Exited,
    /// The command could not be started (see `code` and `message`).
    Failed,
}

/// The status file's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetachedStatus {
    /// The file format ([`FORMAT`]).
    pub format: u32,
    /// Where the run is.
    pub state: DetachedState,
    /// The supervisor's pid.
    pub supervisor_pid: u32,
    /// The sandbox's first process, on the host.
    pub sandbox_pid: Option<i32>,
    /// When the supervisor wrote `running` (or failed), ms since the epoch.
    pub started_at_ms: i64,
    /// When the command ended, ms since the epoch.
    pub ended_at_ms: Option<i64>,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Why the supervisor killed it (`timeout`), when it did.
    pub killed: Option<String>,
    /// Why it could not start: the sandbox's code.
    pub code: Option<SandboxCode>,
    /// Why it could not start, in a sentence.
    pub message: Option<String>,
    /// Bytes of output written so far, over both files.
    pub output_bytes: u64,
}

/// Why a detached run could not be started or read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DetachedError {
    /// The sandbox's code for it (`IO` for the state folder and the supervisor binary).
    pub code: SandboxCode,
    /// What happened and what to do.
    pub message: String,
}

impl DetachedError {
    fn io(message: impl Into<String>) -> DetachedError {
        DetachedError {
            code: SandboxCode::Io,
            message: message.into(),
        }
    }
}

/// A started detached run: who supervises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The supervisor's pid.
    pub supervisor_pid: u32,
    /// The supervisor's start time (clock ticks after boot, `/proc/PID/stat` field 22),
    /// which tells it from a later process given the same pid.
    pub supervisor_start: u64,
    /// The sandbox's first process, on the host.
    pub sandbox_pid: i32,
}

/// The binary that supervises detached runs, and the arguments before the state folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    program: PathBuf,
    args: Vec<OsString>,
}

impl Supervisor {
    /// `program ARGS… STATE_DIR` supervises a run (its `main` calls [`supervise`]).
    pub fn new<I, S>(program: impl Into<PathBuf>, args: I) -> Supervisor
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Supervisor {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// `toolshed-sandbox-exec --supervise`: the binary named by `TOOLSHED_SANDBOX_EXEC`,
    /// else the one beside the running executable (or one folder up, where a test
    /// binary in `target/debug/deps` finds the crate's binaries).
    pub fn locate() -> Result<Supervisor, DetachedError> {
        if let Some(p) = std::env::var_os(SUPERVISOR_ENV).filter(|p| !p.is_empty()) {
            return Ok(Supervisor::new(p, ["--supervise"]));
        }
        let exe = std::env::current_exe()
            .map_err(|e| DetachedError::io(format!("cannot find the running executable: {e}")))?;
        let name = "toolshed-sandbox-exec";
        let beside = exe.parent().map(|d| d.join(name));
        let above = exe.parent().and_then(Path::parent).map(|d| d.join(name));
        for candidate in [beside, above].into_iter().flatten() {
            if candidate.is_file() {
                return Ok(Supervisor::new(candidate, ["--supervise"]));
            }
        }
        Err(DetachedError::io(format!(
            "cannot find the background-run supervisor `{name}` beside {}; install it there or set {SUPERVISOR_ENV} to its path",
            exe.display()
        )))
    }

    /// Starts a supervisor for `spec` on the state folder `dir` (which must exist and
    /// hold nothing yet), and waits at most `wait` for it to report that the sandbox
    /// runs. The supervisor outlives the caller; the caller keeps no handle on it (the
    /// runtime reaps it if the caller lives longer).
    pub async fn start(
        &self,
        dir: &Path,
        spec: &DetachedSpec,
        wait: Duration,
    ) -> Result<Started, DetachedError> {
        let text = serde_json::to_vec_pretty(spec)
            .map_err(|e| DetachedError::io(format!("cannot write the run's spec: {e}")))?;
        write_new(&dir.join(SPEC_FILE), &text)
            .map_err(|e| DetachedError::io(format!("cannot write {SPEC_FILE}: {e}")))?;
        let log = new_file(&dir.join(SUPERVISOR_LOG))
            .map_err(|e| DetachedError::io(format!("cannot create {SUPERVISOR_LOG}: {e}")))?;
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .arg(dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| {
                DetachedError::io(format!(
                    "cannot start the background-run supervisor {}: {e}; set {SUPERVISOR_ENV} to a toolshed-sandbox-exec binary",
                    self.program.display()
                ))
            })?;
        let pid = child.id().unwrap_or(0);
        // Read while the child cannot have been reaped (we hold it), so the pid is its.
        let start = process_start_time(pid).unwrap_or(0);
        let Some(stdout) = child.stdout.take() else {
            return Err(DetachedError::io("the supervisor's stdout was not piped"));
        };
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(stdout);
        let read = tokio::time::timeout(wait, reader.read_line(&mut line)).await;
        match read {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let _ = child.start_kill();
                return Err(DetachedError::io(format!(
                    "cannot read the supervisor's answer: {e}"
                )));
            }
            Err(_) => {
                let _ = child.start_kill();
                return Err(DetachedError::io(format!(
                    "the supervisor did not report within {} ms that the sandbox runs; it was stopped (see {})",
                    wait.as_millis(),
                    dir.join(SUPERVISOR_LOG).display()
                )));
            }
        }
        let line = line.trim_end();
        if let Some(p) = line.strip_prefix("started ") {
            let sandbox_pid = p.trim().parse().unwrap_or(0);
            // Dropped unawaited: tokio reaps it once it exits; the caller may exit first.
            drop(child);
            return Ok(Started {
                supervisor_pid: pid,
                supervisor_start: start,
                sandbox_pid,
            });
        }
        // The supervisor wrote why into its status; prefer that over the line.
        let _ = child.wait().await;
        match read_status(dir) {
            Ok(Some(s)) if s.state == DetachedState::Failed => Err(DetachedError {
                code: s.code.unwrap_or(SandboxCode::Io),
                message: s
                    .message
                    .unwrap_or_else(|| "the sandbox could not start".into()),
            }),
            _ => {
                let mut log = String::new();
                let _ = File::open(dir.join(SUPERVISOR_LOG))
                    .and_then(|f| f.take(4096).read_to_string(&mut log));
                Err(DetachedError::io(format!(
                    "the supervisor exited without starting the run: {}",
                    if log.trim().is_empty() {
                        line.to_owned()
                    } else {
                        log.trim().to_owned()
                    }
                )))
            }
        }
    }
}

/// The start time of process `pid` (clock ticks after boot), or `None` when no such
/// process exists or it is a zombie (it has exited and only waits to be reaped).
pub fn process_start_time(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state …`: comm may hold spaces and parentheses, so split after the last `)`.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // Field 22 of the line; `state` was field 3.
    fields.nth(18)?.parse().ok()
}

/// Whether the supervisor `pid` that started at `start` still runs.
pub fn supervisor_alive(pid: u32, start: u64) -> bool {
    process_start_time(pid) == Some(start)
}

/// The status the supervisor last wrote, or `None` before it wrote one.
pub fn read_status(dir: &Path) -> Result<Option<DetachedStatus>, DetachedError> {
    let path = dir.join(STATUS_FILE);
    let bytes = match read_no_follow(&path, 1024 * 1024) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DetachedError::io(format!("cannot read {STATUS_FILE}: {e}"))),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| DetachedError::io(format!("{STATUS_FILE} is not a status: {e}")))
}

/// The last `max` bytes of the run's output (over the rotated file too), and whether
/// older output still on disk was left out (output rotated away is not counted:
/// compare the tail's length with [`DetachedStatus::output_bytes`]).
pub fn read_tail(dir: &Path, max: u64) -> Result<(Vec<u8>, bool), DetachedError> {
    let newest = tail_of(&dir.join(OUTPUT_FILE), max)?;
    let mut tail = newest.bytes;
    let mut more = newest.more;
    if (tail.len() as u64) < max {
        let older = tail_of(&dir.join(OUTPUT_ROTATED_FILE), max - tail.len() as u64)?;
        more = older.more;
        let mut joined = older.bytes;
        joined.extend_from_slice(&tail);
        tail = joined;
    } else if dir.join(OUTPUT_ROTATED_FILE).exists() {
        more = true;
    }
    Ok((tail, more))
}

struct Tail {
    bytes: Vec<u8>,
    more: bool,
}

fn tail_of(path: &Path, max: u64) -> Result<Tail, DetachedError> {
    let mut f = match open_no_follow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Tail {
                bytes: Vec::new(),
                more: false,
            });
        }
        Err(e) => return Err(DetachedError::io(format!("cannot read the output: {e}"))),
    };
    let io = |e: std::io::Error| DetachedError::io(format!("cannot read the output: {e}"));
    let len = f.metadata().map_err(io)?.len();
    let from = len.saturating_sub(max);
    f.seek(SeekFrom::Start(from)).map_err(io)?;
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes).map_err(io)?;
    Ok(Tail {
        bytes,
        more: from > 0,
    })
}

fn open_no_follow(path: &Path) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

fn read_no_follow(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_no_follow(path)?.take(cap).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = new_file(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn new_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Replaces the status file atomically: a reader sees the old or the new one, whole.
fn write_status(dir: &Path, status: &DetachedStatus) -> std::io::Result<()> {
    let tmp = dir.join(format!("{STATUS_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let bytes = serde_json::to_vec_pretty(status).map_err(std::io::Error::other)?;
    write_new(&tmp, &bytes)?;
    std::fs::rename(&tmp, dir.join(STATUS_FILE))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The output files, rotated at the cap.
struct OutputLog {
    dir: PathBuf,
    file: File,
    in_file: u64,
    cap: u64,
    total: u64,
}

impl OutputLog {
    fn open(dir: &Path, cap: u64) -> std::io::Result<OutputLog> {
        Ok(OutputLog {
            dir: dir.to_owned(),
            file: new_file(&dir.join(OUTPUT_FILE))?,
            in_file: 0,
            cap: cap.max(1),
            total: 0,
        })
    }

    fn append(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        self.total += bytes.len() as u64;
        while !bytes.is_empty() {
            if self.in_file >= self.cap {
                std::fs::rename(
                    self.dir.join(OUTPUT_FILE),
                    self.dir.join(OUTPUT_ROTATED_FILE),
                )?;
                self.file = new_file(&self.dir.join(OUTPUT_FILE))?;
                self.in_file = 0;
            }
            let room = usize::try_from(self.cap - self.in_file).unwrap_or(usize::MAX);
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.file.write_all(now)?;
            self.in_file += now.len() as u64;
            bytes = later;
        }
        Ok(())
    }
}

/// The supervisor's whole life, for a binary's `main`: leaves its starter's session,
/// reads `DIR/spec.json`, starts the command in the sandbox, reports `started PID` (or
/// `failed CODE`) on stdout, then writes the output and the status files until the
/// command ends. Exit code 0 when the command ran (whatever its own exit), 125 when it
/// could not start.
pub fn supervise(dir: &Path) -> ExitCode {
    // Its own session: no hang-up or group signal of the starter's terminal reaches it.
    let _ = rustix::process::setsid();
    let me = std::process::id();
    let fail = |code: SandboxCode, message: String| -> ExitCode {
        let status = DetachedStatus {
            format: FORMAT,
            state: DetachedState::Failed,
            supervisor_pid: me,
            sandbox_pid: None,
            started_at_ms: now_ms(),
            ended_at_ms: Some(now_ms()),
            exit_code: None,
            signal: None,
            killed: None,
            code: Some(code),
            message: Some(message.clone()),
            output_bytes: 0,
        };
        if let Err(e) = write_status(dir, &status) {
            eprintln!("toolshed-sandbox-exec: cannot write {STATUS_FILE}: {e}");
        }
        eprintln!("toolshed-sandbox-exec: {message} [{code}]");
        // The starter may be gone: a closed pipe is not a reason to panic.
        let _ = writeln!(std::io::stdout(), "failed {code}");
        ExitCode::from(125)
    };
    let spec: DetachedSpec = match read_no_follow(&dir.join(SPEC_FILE), 16 * 1024 * 1024)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => return fail(SandboxCode::Io, format!("cannot read {SPEC_FILE}: {e}")),
    };
    if spec.format != FORMAT {
        return fail(
            SandboxCode::InvalidConfig,
            format!(
                "{SPEC_FILE} has format {}, this supervisor reads {FORMAT}",
                spec.format
            ),
        );
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(SandboxCode::Io, format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        let mut config = spec.sandbox.clone();
        // One sandbox in this process's life: nothing to prepare ahead.
        config.prepared_ahead = 0;
        let sandbox = match Sandbox::new(config) {
            Ok(s) => s,
            Err(e) => return fail(e.code(), e.to_string()),
        };
        let mut run = RunSpec::new(&spec.program, &spec.args);
        run.env = spec.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
        run.binds = spec.binds.clone();
        run.limits = spec.limits;
        run.network = spec.network;
        let log = match OutputLog::open(dir, spec.output_cap_bytes) {
            Ok(l) => Arc::new(Mutex::new(l)),
            Err(e) => return fail(SandboxCode::Io, format!("cannot create {OUTPUT_FILE}: {e}")),
        };
        let mut child = match sandbox.spawn(run).await {
            Ok(c) => c,
            Err(e) => return fail(e.code(), e.to_string()),
        };
        // The command reads nothing: its stdin is closed.
        drop(child.stdin.take());
        let started_at_ms = now_ms();
        let mut status = DetachedStatus {
            format: FORMAT,
            state: DetachedState::Running,
            supervisor_pid: me,
            sandbox_pid: Some(child.id()),
            started_at_ms,
            ended_at_ms: None,
            exit_code: None,
            signal: None,
            killed: None,
            code: None,
            message: None,
            output_bytes: 0,
        };
        // Listening for a stop request before `running` is written, so whoever reads
        // `running` may ask.
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    child.kill().await;
                    return fail(SandboxCode::Io, format!("cannot listen for SIGTERM: {e}"));
                }
            };
        if let Err(e) = write_status(dir, &status) {
            child.kill().await;
            return fail(SandboxCode::Io, format!("cannot write {STATUS_FILE}: {e}"));
        }
        // The starter may have been killed meanwhile: `println!` would panic on the
        // closed pipe (and take the sandbox with it); the run goes on without an answer.
        let _ = writeln!(std::io::stdout(), "started {}", child.id());
        let _ = std::io::stdout().flush();
        // The starter has its answer; nothing more goes to its pipe (it may be gone).
        if let Ok(null) = File::options().write(true).open("/dev/null") {
            let _ = rustix::stdio::dup2_stdout(&null);
        }
        let pumps = [
            child.stdout.take().map(|p| pump(p, Arc::clone(&log))),
            child.stderr.take().map(|p| pump(p, Arc::clone(&log))),
        ];
        let deadline = async {
            match spec.max_duration_ms {
                Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                None => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            r = child.wait() => Ended::Exited(r),
            () = deadline => Ended::Timeout,
            _ = term.recv() => Ended::Stop,
        };
        let (report, stopped) = match ended {
            Ended::Exited(r) => (r, false),
            Ended::Timeout => {
                let mut r = child.kill().await;
                r.killed = Some(KillReason::Timeout);
                (r, false)
            }
            Ended::Stop => (child.kill().await, true),
        };
        // Everything of the sandbox is dead, so the pipes are at their end.
        for p in pumps.into_iter().flatten() {
            let _ = p.await;
        }
        status.state = DetachedState::Exited;
        status.ended_at_ms = Some(now_ms());
        match report.exit {
            Exit::Code(c) => status.exit_code = Some(c),
            Exit::Signal(s) => status.signal = Some(s),
        }
        status.killed = if stopped {
            Some(STOPPED.to_owned())
        } else {
            report.killed.map(|k| k.to_string())
        };
        status.output_bytes = log.lock().map(|l| l.total).unwrap_or_default();
        if let Err(e) = write_status(dir, &status) {
            eprintln!("toolshed-sandbox-exec: cannot write {STATUS_FILE}: {e}");
            return ExitCode::from(1);
        }
        ExitCode::SUCCESS
    })
}

/// Ask the supervisor `pid`, started at `start` (clock ticks after boot, as recorded
/// from [`process_start_time`]), to stop its command: SIGTERM, which it answers by
/// killing the sandbox and writing `exited` with `killed: stopped`. `Ok(false)` when
/// no such supervisor runs (it is gone, or another process reused its pid: nothing is
/// signalled then).
pub fn request_stop(pid: u32, start: u64) -> Result<bool, DetachedError> {
    if !supervisor_alive(pid, start) {
        return Ok(false);
    }
    let Some(target) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return Ok(false);
    };
    match rustix::process::kill_process(target, rustix::process::Signal::TERM) {
        Ok(()) => Ok(true),
        // It exited between the check and the signal.
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(e) => Err(DetachedError::io(format!(
            "cannot signal the supervisor (pid {pid}): {e}"
        ))),
    }
}

/// How a supervised command's wait ended.
enum Ended {
    Exited(crate::run::ExitReport),
    Timeout,
    Stop,
}

/// Copies a pipe into the output log as it arrives.
fn pump(
    mut pipe: tokio::net::unix::pipe::Receiver,
    log: Arc<Mutex<OutputLog>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let mut l = log
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Err(e) = l.append(&buf[..n]) {
                        eprintln!("toolshed-sandbox-exec: cannot write the output: {e}");
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_of_this_process_is_read_and_a_missing_pid_has_none() {
        let me = std::process::id();
        let t = process_start_time(me);
        assert!(t.is_some());
        assert!(supervisor_alive(me, t.unwrap_or_default()));
        assert!(!supervisor_alive(me, t.unwrap_or_default() + 1));
        assert_eq!(process_start_time(0), None);
        assert_eq!(process_start_time(u32::MAX), None);
    }

    #[test]
    fn the_output_log_rotates_at_the_cap_and_the_tail_spans_both_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut log = OutputLog::open(dir.path(), 10).unwrap_or_else(|e| panic!("{e}"));
        log.append(b"0123456789abcdefghij")
            .unwrap_or_else(|e| panic!("{e}"));
        log.append(b"XYZ").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(log.total, 23);
        let (tail, more) = read_tail(dir.path(), 5).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tail, b"ijXYZ");
        assert!(more);
        let (tail, more) = read_tail(dir.path(), 100).unwrap_or_else(|e| panic!("{e}"));
        // The first ten bytes were rotated away twice; the folder holds at most 2 × cap.
        assert_eq!(tail, b"abcdefghijXYZ");
        assert!(!more, "nothing older is on disk to show");
    }
}
