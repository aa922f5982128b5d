//! The two ways to use a sandbox: a one-shot [`Sandbox::run`] (stdin bytes in, an
//! [`Outcome`] out: output, exit, limits hit, accounting) and a long-lived
//! [`SandboxedChild`] with piped stdio (for warm worker pools), killed with
//! [`SandboxedChild::kill`] and accounted the same way.

use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::cgroup::Usage;
use crate::config::{Clamp, Limits, Network, RunSpec, Weakening};
use crate::error::SandboxError;
use crate::mounts::Scratch;
use crate::overlay::Upper;
use crate::sandbox::Sandbox;
use crate::spawn::{self, Exit, Running};

/// Why the supervisor killed a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum KillReason {
    /// The wall-clock timeout passed.
    Timeout,
    /// stdout or stderr went past its cap.
    OutputCap,
    /// The caller asked ([`SandboxedChild::kill`], or the handle was dropped).
    Requested,
}

/// A file read back from the scratch folder after a run.
#[derive(Debug, Clone)]
pub struct CollectedFile {
    /// Its path relative to the scratch folder.
    pub path: PathBuf,
    /// Its contents, or why it was refused (a symlink, not a regular file, too large,
    /// missing).
    pub contents: Result<Vec<u8>, String>,
    /// Its size, when it was refused for being larger than the cap
    /// ([`RunSpec::collect_max_bytes`](crate::RunSpec::collect_max_bytes)).
    pub too_large: Option<u64>,
}

/// What the kernel measured over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Peak memory (swap included where counted), when the cgroup reports it.
    pub memory_peak_bytes: Option<u64>,
    /// CPU time of every process of the sandbox, when the cgroup reports it.
    pub cpu_time: Option<Duration>,
    /// Whether the kernel's OOM killer killed a process of the sandbox.
    pub oom_killed: bool,
}

impl From<Usage> for Accounting {
    fn from(u: Usage) -> Self {
        Accounting {
            memory_peak_bytes: u.memory_peak_bytes,
            cpu_time: u.cpu_time,
            oom_killed: u.oom_killed,
        }
    }
}

/// How a sandbox ended: its exit, why it was killed, what it used.
#[derive(Debug, Clone)]
pub struct ExitReport {
    /// How its first process ended.
    pub exit: Exit,
    /// Why the supervisor killed it, if it did.
    pub killed: Option<KillReason>,
    /// What it used.
    pub accounting: Accounting,
    /// From the exec to the exit.
    pub duration: Duration,
}

/// Everything about one finished one-shot run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How the tool's process ended.
    pub exit: Exit,
    /// The wall-clock timeout passed and everything was killed.
    pub timed_out: bool,
    /// Why the supervisor killed the sandbox, if it did.
    pub killed: Option<KillReason>,
    /// The OOM killer killed a process of the sandbox.
    pub oom_killed: bool,
    /// Peak memory, swap included where the kernel counts it.
    pub memory_peak_bytes: Option<u64>,
    /// CPU time of all its processes.
    pub cpu_time: Option<Duration>,
    /// From the exec to the exit.
    pub duration: Duration,
    /// stdout, at most `limits.stdout_bytes` (raw bytes: not necessarily UTF-8).
    pub stdout: Vec<u8>,
    /// More stdout was written than kept.
    pub stdout_truncated: bool,
    /// stderr, at most `limits.stderr_bytes`.
    pub stderr: Vec<u8>,
    /// More stderr was written than kept.
    pub stderr_truncated: bool,
    /// The files of [`RunSpec::collect`], read back from the scratch folder.
    pub files: Vec<CollectedFile>,
    /// The layers of the overlay binds ([`Bind::overlay`](crate::Bind::overlay)), in the
    /// order of the binds: what the run changed there, for the caller to merge (also
    /// after a run that was killed). Dropped unmerged, the changes are gone.
    pub uppers: Vec<Upper>,
    /// The limits the run had.
    pub limits: Limits,
    /// Whether it had the network.
    pub network: Network,
    /// Requested values lowered to the server's ceilings.
    pub clamped: Vec<Clamp>,
    /// Protections it ran without (by the operator's opt-in).
    pub weakened: Vec<Weakening>,
    /// The host uid it ran as.
    pub host_uid: u32,
}

impl Outcome {
    /// The exit code, when it exited rather than being killed by a signal.
    pub fn exit_code(&self) -> Option<i32> {
        match self.exit {
            Exit::Code(c) => Some(c),
            Exit::Signal(_) => None,
        }
    }

    /// The signal that ended it, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.exit {
            Exit::Signal(s) => Some(s),
            Exit::Code(_) => None,
        }
    }

    /// Exit code 0, no limit hit.
    pub fn success(&self) -> bool {
        self.exit == Exit::Code(0) && self.killed.is_none() && !self.oom_killed
    }

    /// The collected file at `path`, if it was read.
    pub fn file(&self, path: impl AsRef<std::path::Path>) -> Option<&[u8]> {
        self.files
            .iter()
            .find(|f| f.path == path.as_ref())
            .and_then(|f| f.contents.as_deref().ok())
    }
}

/// Output kept up to a cap; the rest is counted and dropped.
struct Capture {
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
}

/// Reads `r` to its end, keeping up to `cap` bytes; tells `over` once past the cap.
async fn capture<R: AsyncRead + Unpin>(mut r: R, cap: u64, over: Arc<Notify>) -> Capture {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut c = Capture {
        kept: Vec::with_capacity(cap.min(64 * 1024)),
        cap,
        truncated: false,
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return c,
            Ok(n) => {
                let room = c.cap - c.kept.len();
                c.kept.extend_from_slice(&buf[..n.min(room)]);
                if n > room && !c.truncated {
                    c.truncated = true;
                    over.notify_one();
                }
            }
        }
    }
}

impl Sandbox {
    /// Runs one command to its end (or its limits): `stdin` is written to it, stdout
    /// and stderr are read concurrently and capped; past the timeout, or past an output
    /// cap, everything of the sandbox is frozen, killed and reaped. Files listed in
    /// [`RunSpec::collect`] are read back from the scratch folder.
    ///
    /// An overlay bind's layer is mounted before the start and handed back in
    /// [`Outcome::uppers`].
    ///
    /// A failure of the tool (an exit code, a signal, a limit hit) is an [`Outcome`];
    /// an error means the sandbox could not run it at all.
    pub async fn run(&self, spec: RunSpec, stdin: Vec<u8>) -> Result<Outcome, SandboxError> {
        let preferred = preferred_uid(&spec);
        let (spec, uppers) = match crate::overlay::prepare(&spec)? {
            Some((prepared, uppers)) => (prepared, uppers),
            None => (spec, Vec::new()),
        };
        let (limits, network, clamped) = self.resolve(&spec);
        let (mut running, stdio, ahead) =
            self.start_run(preferred, &spec, &limits, network).await?;
        let deadline = tokio::time::Instant::from_std(running.started + limits.timeout());
        let host_uid = running.uid();

        let over = Arc::new(Notify::new());
        let mut writer = stdio.stdin;
        let io = async {
            let write = async move {
                // A tool that exits without reading its input is not an error.
                let _ = writer.write_all(&stdin).await;
                let _ = writer.shutdown().await;
            };
            let (out, err, ()) = tokio::join!(
                capture(stdio.stdout, limits.stdout_bytes, over.clone()),
                capture(stdio.stderr, limits.stderr_bytes, over.clone()),
                write
            );
            (out, err)
        };
        let mut io = pin!(io);
        let mut killed = None;
        let mut captured = None;
        let mut exit = None;
        let mut ended_at = None;
        while captured.is_none() || exit.is_none() {
            tokio::select! {
                c = &mut io, if captured.is_none() => captured = Some(c),
                e = running.wait(), if exit.is_none() => {
                    ended_at = Some(Instant::now());
                    exit = Some(e);
                }
                () = tokio::time::sleep_until(deadline), if exit.is_none() && killed.is_none() => {
                    killed = Some(KillReason::Timeout);
                    running.kill().await;
                }
                () = over.notified(), if exit.is_none() && killed.is_none() => {
                    killed = Some(KillReason::OutputCap);
                    running.kill().await;
                }
            }
        }
        let exit = exit.unwrap_or(Exit::Signal(libc::SIGKILL));
        let duration = ended_at.unwrap_or_else(Instant::now) - running.started;
        let (out, err) = captured.unwrap_or_else(|| {
            let empty = || Capture {
                kept: Vec::new(),
                cap: 0,
                truncated: false,
            };
            (empty(), empty())
        });
        let files = spec
            .collect
            .iter()
            .map(|path| {
                let max = spec
                    .collect_max_bytes
                    .map_or(limits.file_size_bytes, |m| m.min(limits.file_size_bytes));
                let read = running.scratch.read(path, max);
                CollectedFile {
                    path: path.clone(),
                    too_large: match &read {
                        Err(SandboxError::FileTooLarge { size, .. }) => Some(*size),
                        _ => None,
                    },
                    contents: read.map_err(|e| e.to_string()),
                }
            })
            .collect();
        let usage = running.finish().await;
        // The next sandbox is started ahead now that this run is over, not while it ran:
        // a start's kernel work (namespaces, mounts) on the other core slows a running
        // tool by about as much as it would have cost the next run, while a server's
        // pause between calls absorbs it whole.
        if let Some(key) = ahead {
            crate::ready::Ready::refill(&self.inner, key);
        }
        Ok(Outcome {
            exit,
            timed_out: killed == Some(KillReason::Timeout),
            killed,
            oom_killed: usage.oom_killed,
            memory_peak_bytes: usage.memory_peak_bytes,
            cpu_time: usage.cpu_time,
            duration,
            stdout: out.kept,
            stdout_truncated: out.truncated,
            stderr: err.kept,
            stderr_truncated: err.truncated,
            files,
            uppers,
            limits,
            network,
            clamped,
            weakened: self.inner.weakened.clone(),
            host_uid,
        })
    }

    /// Starts a one-shot run: in a sandbox started ahead when the spec has the shape of
    /// one (no binds, the network off, a command that fits) and one made for these
    /// limits waits; else in a sandbox of its own. For an eligible run, also the key the
    /// caller asks the next one to be started ahead for, once this run has ended (see
    /// `ready.rs`).
    async fn start_run(
        &self,
        preferred: Option<u32>,
        spec: &RunSpec,
        limits: &Limits,
        network: Network,
    ) -> Result<(spawn::Running, spawn::Stdio, Option<Limits>), SandboxError> {
        let inner = &self.inner;
        let eligible =
            inner.config.started_ahead > 0 && spec.binds.is_empty() && network == Network::Off;
        if !eligible {
            let (running, stdio) =
                start_preferring(preferred, spawn::start(inner, spec, limits, network)).await?;
            return Ok((running, stdio, None));
        }
        let command = spawn::Command::of(spec)?;
        let Some(encoded) = command.encoded() else {
            let (running, stdio) =
                spawn::start_with(inner, spec, &command, limits, network).await?;
            return Ok((running, stdio, None));
        };
        let key = crate::ready::key(limits);
        if let Some(waiting) = inner.ready.take(&key) {
            match waiting.exec(&command, &encoded, &spec.files).await {
                Ok((running, stdio)) => {
                    inner.ready.count_served();
                    return Ok((running, stdio, Some(key)));
                }
                Err(Some(e)) => return Err(e),
                // It was gone: start one for this run.
                Err(None) => {}
            }
        }
        let (running, stdio) = spawn::start_with(inner, spec, &command, limits, network).await?;
        Ok((running, stdio, Some(key)))
    }

    /// Starts a long-lived sandboxed child with piped stdin, stdout and stderr (a warm
    /// worker speaking newline-delimited JSON). The wall-clock timeout does not apply:
    /// the caller ends it with [`SandboxedChild::kill`] (or by dropping it, which kills
    /// it too); every other limit does.
    pub async fn spawn(&self, spec: RunSpec) -> Result<SandboxedChild, SandboxError> {
        let (limits, network, clamped) = self.resolve(&spec);
        let (running, stdio) = start_preferring(
            preferred_uid(&spec),
            spawn::start(&self.inner, &spec, &limits, network),
        )
        .await?;
        Ok(SandboxedChild {
            stdin: Some(stdio.stdin),
            stdout: Some(stdio.stdout),
            stderr: Some(stdio.stderr),
            host_uid: running.uid(),
            pid: running.pid,
            scratch: running.scratch.clone(),
            running: Some(running),
            limits,
            network,
            clamped,
            report: None,
        })
    }
}

/// The owner of the spec's first writable bind's folder: the pool uid of the run that
/// last had it, which a start prefers (a folder already its run's needs no re-owning).
fn preferred_uid(spec: &RunSpec) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let bind = spec.binds.iter().find(|b| b.writable)?;
    std::fs::symlink_metadata(&bind.source)
        .ok()
        .map(|m| m.uid())
}

/// Runs a start with `preferred` as the uid its lease tries first.
async fn start_preferring<T>(
    preferred: Option<u32>,
    start: impl std::future::Future<Output = T>,
) -> T {
    match preferred {
        Some(uid) => crate::uidpool::PREFERRED.scope(uid, start).await,
        None => start.await,
    }
}

/// The child's stdin (write newline-delimited requests here).
pub type ChildStdin = tokio::net::unix::pipe::Sender;
/// The child's stdout.
pub type ChildStdout = tokio::net::unix::pipe::Receiver;
/// The child's stderr.
pub type ChildStderr = tokio::net::unix::pipe::Receiver;

/// A long-lived sandboxed process. Dropping it kills everything of its sandbox.
#[derive(Debug)]
pub struct SandboxedChild {
    /// Its stdin; take it to write (and drop it to close).
    pub stdin: Option<ChildStdin>,
    /// Its stdout; take it to read.
    pub stdout: Option<ChildStdout>,
    /// Its stderr; take it to read (keep reading it, or its writes block when the pipe
    /// is full).
    pub stderr: Option<ChildStderr>,
    host_uid: u32,
    pid: i32,
    scratch: Scratch,
    running: Option<Running>,
    limits: Limits,
    network: Network,
    clamped: Vec<Clamp>,
    report: Option<ExitReport>,
}

impl SandboxedChild {
    /// The host pid of its first process (pid 1 inside).
    pub fn id(&self) -> i32 {
        self.pid
    }

    /// The host uid it runs as.
    pub fn host_uid(&self) -> u32 {
        self.host_uid
    }

    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether it has the network.
    pub fn network(&self) -> Network {
        self.network
    }

    /// Requested values lowered to the server's ceilings.
    pub fn clamped(&self) -> &[Clamp] {
        &self.clamped
    }

    /// Its scratch folder, for reading back what it wrote.
    pub fn scratch(&self) -> &Scratch {
        &self.scratch
    }

    /// What it has used so far (for recycling a worker that nears a limit).
    pub fn accounting(&self) -> Accounting {
        self.running
            .as_ref()
            .map(|r| r.usage().into())
            .or_else(|| self.report.as_ref().map(|r| r.accounting))
            .unwrap_or_default()
    }

    /// Whether it has exited, without waiting.
    pub fn try_exit(&mut self) -> Option<Exit> {
        match &mut self.running {
            Some(r) => r.exited(),
            None => self.report.as_ref().map(|r| r.exit),
        }
    }

    /// Waits until it exits by itself; then accounts and cleans up.
    pub async fn wait(&mut self) -> ExitReport {
        self.end(None).await
    }

    /// Freezes its cgroup, kills everything in it, reaps; then accounts and cleans up.
    pub async fn kill(&mut self) -> ExitReport {
        self.end(Some(KillReason::Requested)).await
    }

    async fn end(&mut self, kill: Option<KillReason>) -> ExitReport {
        if let Some(r) = &self.report {
            return r.clone();
        }
        let Some(mut running) = self.running.take() else {
            return ExitReport {
                exit: Exit::Signal(libc::SIGKILL),
                killed: kill,
                accounting: Accounting::default(),
                duration: Duration::ZERO,
            };
        };
        let already = running.exited();
        let exit = match (already, kill) {
            (Some(e), _) => e,
            (None, Some(_)) => running.kill().await,
            (None, None) => running.wait().await,
        };
        let duration = running.started.elapsed();
        let usage = running.finish().await;
        let report = ExitReport {
            exit,
            killed: if already.is_some() { None } else { kill },
            accounting: usage.into(),
            duration,
        };
        self.report = Some(report.clone());
        report
    }
}
