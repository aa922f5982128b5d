//! One tool process, on the host or in a sandbox: capped stdout lines, a stderr tail
//! collected in the background, and killing and reaping, so no process leaves a stray
//! child or a zombie behind. The lowest layer of the dispatcher: the launcher starts
//! processes, the pool keeps them, a conversation talks to one.
//!
//! A host process runs in its own process group. The group is killed before the leader
//! is reaped, on every path: while the leader is an unreaped zombie its pid cannot be
//! reused, so signalling the group can only reach the tool's own processes. Whatever
//! the tool left running (a background child) dies with it, also when the tool itself
//! exited cleanly.
//!
//! A sandboxed process ([`SandboxedChild`]) is pid 1 of its own pid namespace, in its
//! own cgroup: killing it (or dropping it) freezes and kills everything of its sandbox,
//! so the same guarantee holds there without process groups.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use toolshed_sandbox::{Accounting, Exit, ExitReport, SandboxedChild};

use crate::error::tail;

/// How many characters of stderr an exit error quotes.
const STDERR_TAIL_CHARS: usize = 2000;
/// How long to wait for the stderr pipe to close once the process is gone, or for a
/// pooled worker's end-of-call mark.
const STDERR_DRAIN: Duration = Duration::from_millis(250);
/// What the runners write to stderr right before each final answer: once the reader has
/// seen it, everything the call logged has been collected. Stripped from what is kept.
pub(crate) const CALL_END_MARK: &[u8] = b"\x1etoolshed:call-end\x1e\n";

/// How to start a tool process.
#[derive(Debug, Clone)]
pub(crate) struct SpawnSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: Option<PathBuf>,
    /// `None`: inherit the runtime's environment; `Some`: exactly these variables.
    pub env: Option<Vec<(OsString, OsString)>>,
    /// Set on top of either.
    pub extra_env: Vec<(OsString, OsString)>,
    /// The source file whose change retires pooled workers.
    pub watch: Option<PathBuf>,
    /// Whether the process writes [`CALL_END_MARK`] to stderr before each answer (the
    /// Python and Node runners do; an `exec:` tool does not).
    pub marks_calls: bool,
    /// What a sandboxed process sees of the host (read-only binds).
    pub binds: Vec<toolshed_sandbox::Bind>,
}

/// A source file's identity at one moment: a changed stamp means the file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
}

impl FileStamp {
    pub fn of(path: &std::path::Path) -> Option<FileStamp> {
        std::fs::metadata(path).ok().map(|m| FileStamp {
            modified: m.modified().ok(),
            len: m.len(),
        })
    }
}

/// The kept end of a process's stderr.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
    dropped: u64,
    /// Where a mark may start that has not been looked for yet.
    scan_from: usize,
}

impl Tail {
    /// Remove the complete marks from the bytes; how many there were.
    fn strip_marks(&mut self) -> u64 {
        let mut found = 0;
        while let Some(at) = self.bytes[self.scan_from.min(self.bytes.len())..]
            .windows(CALL_END_MARK.len())
            .position(|w| w == CALL_END_MARK)
        {
            let start = self.scan_from + at;
            self.bytes.drain(start..start + CALL_END_MARK.len());
            self.scan_from = start;
            found += 1;
        }
        // A mark cut by the end of this read starts in its last len-1 bytes.
        self.scan_from = self.bytes.len().saturating_sub(CALL_END_MARK.len() - 1);
        found
    }
}

/// A tool process's stdin.
pub(crate) type ProcStdin = Box<dyn AsyncWrite + Send + Unpin>;
type ProcStdout = Box<dyn AsyncRead + Send + Unpin>;

/// What runs the tool: a host process or a sandbox.
enum Backing {
    Host {
        child: Option<Child>,
        pid: u32,
        /// The process's pidfd, to wait for its exit without reaping it (Linux 5.4+;
        /// without it, what a tool that exited on its own left running is not killed).
        pidfd: Option<Arc<OwnedFd>>,
    },
    Sandboxed(Box<SandboxedChild>),
}

/// A running tool process.
pub(crate) struct Proc {
    backing: Backing,
    stdin: Option<ProcStdin>,
    stdout: BufReader<ProcStdout>,
    stderr: Arc<Mutex<Tail>>,
    stderr_eof: watch::Receiver<bool>,
    stderr_task: Option<JoinHandle<()>>,
    /// How many end-of-call marks stderr has carried.
    marks: watch::Receiver<u64>,
    marks_calls: bool,
    /// Requests written with [`Proc::send`].
    requests: u64,
    /// Set once the process is reaped (only this type reaps it).
    status: Option<ExitStatus>,
    /// What a sandboxed process used, once it ended.
    ended: Option<Accounting>,
    /// The watched source's stamp when this process started.
    pub stamp: Option<FileStamp>,
}

impl Proc {
    /// Start a process in its own process group with piped stdio.
    pub fn spawn(spec: &SpawnSpec, stderr_cap: usize) -> std::io::Result<Proc> {
        let stamp = spec.watch.as_deref().and_then(FileStamp::of);
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own group, so a timeout kills whatever the tool started too.
            .process_group(0);
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        if let Some(env) = &spec.env {
            cmd.env_clear();
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
        }
        cmd.envs(spec.extra_env.iter().map(|(k, v)| (k, v)));
        let mut child = cmd.spawn()?;
        let pid = child.id().unwrap_or(0);
        let pidfd = raw_pid(pid)
            .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
            .map(Arc::new);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the child's stdio was not piped"));
        };
        let backing = Backing::Host {
            child: Some(child),
            pid,
            pidfd,
        };
        Ok(Proc::assemble(
            backing,
            (Box::new(stdin), Box::new(stdout), stderr),
            stderr_cap,
            spec.marks_calls,
            stamp,
        ))
    }

    /// Wrap a started sandbox: `watch` is the source file whose change retires it.
    pub fn sandboxed(
        mut child: SandboxedChild,
        watch: Option<&std::path::Path>,
        marks_calls: bool,
        stderr_cap: usize,
    ) -> std::io::Result<Proc> {
        let stamp = watch.and_then(FileStamp::of);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the sandbox's stdio was not piped"));
        };
        Ok(Proc::assemble(
            Backing::Sandboxed(Box::new(child)),
            (Box::new(stdin), Box::new(stdout), stderr),
            stderr_cap,
            marks_calls,
            stamp,
        ))
    }

    fn assemble<E: AsyncRead + Send + Unpin + 'static>(
        backing: Backing,
        (stdin, stdout, mut stderr): (ProcStdin, ProcStdout, E),
        stderr_cap: usize,
        marks_calls: bool,
        stamp: Option<FileStamp>,
    ) -> Proc {
        let tail = Arc::new(Mutex::new(Tail::default()));
        let (eof_tx, eof_rx) = watch::channel(false);
        let (marks_tx, marks_rx) = watch::channel(0_u64);
        let sink = tail.clone();
        let stderr_task = tokio::spawn(async move {
            let mut chunk = vec![0u8; 8192];
            loop {
                match stderr.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut marks = 0;
                        if let Ok(mut t) = sink.lock() {
                            t.bytes.extend_from_slice(&chunk[..n]);
                            marks = t.strip_marks();
                            if t.bytes.len() > stderr_cap {
                                let cut = t.bytes.len() - stderr_cap;
                                t.bytes.drain(..cut);
                                t.dropped += cut as u64;
                                t.scan_from = t.scan_from.saturating_sub(cut);
                            }
                        }
                        if marks > 0 {
                            marks_tx.send_modify(|m| *m += marks);
                        }
                    }
                }
            }
            let _ = eof_tx.send(true);
        });
        Proc {
            backing,
            stdin: Some(stdin),
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            stderr: tail,
            stderr_eof: eof_rx,
            stderr_task: Some(stderr_task),
            marks: marks_rx,
            marks_calls,
            requests: 0,
            status: None,
            ended: None,
            stamp,
        }
    }

    /// What a sandboxed process has used so far (the cgroup's counters), or used in
    /// all once it ended. `None` on the host.
    pub fn accounting(&self) -> Option<Accounting> {
        match &self.backing {
            Backing::Sandboxed(child) => Some(self.ended.unwrap_or_else(|| child.accounting())),
            Backing::Host { .. } => None,
        }
    }

    /// The requests written with [`Proc::send`] so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Record how a sandbox ended.
    fn ended(&mut self, report: &ExitReport) {
        self.status = Some(exit_status(report.exit));
        self.ended = Some(report.accounting);
    }

    /// Write one request line.
    pub async fn send(&mut self, line: &[u8]) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        self.requests += 1;
        stdin.write_all(line).await?;
        stdin.flush().await
    }

    /// Write a line that is not a request (the answer to a tool's ask).
    pub async fn answer(&mut self, line: &[u8]) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        stdin.write_all(line).await?;
        stdin.flush().await
    }

    /// Give back stdin taken with [`Proc::take_stdin`].
    pub fn put_stdin(&mut self, stdin: ProcStdin) {
        self.stdin = Some(stdin);
    }

    /// Take stdin, to write from elsewhere or to close it (end-of-file for the tool).
    pub fn take_stdin(&mut self) -> Option<ProcStdin> {
        self.stdin.take()
    }

    /// Read one line into `buf` (newline included), refusing to go past `budget` bytes.
    pub async fn read_line(
        &mut self,
        buf: &mut Vec<u8>,
        budget: usize,
    ) -> std::io::Result<LineRead> {
        buf.clear();
        loop {
            let available = self.stdout.fill_buf().await?;
            if available.is_empty() {
                return Ok(if buf.is_empty() {
                    LineRead::Eof
                } else {
                    LineRead::Line
                });
            }
            let (take, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            if buf.len() + take > budget {
                return Ok(LineRead::TooLong);
            }
            buf.extend_from_slice(&available[..take]);
            self.stdout.consume(take);
            if done {
                return Ok(LineRead::Line);
            }
        }
    }

    /// Whether the process has exited (then it is reaped, its group killed first).
    pub fn has_exited(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let (child, pid) = match &mut self.backing {
            Backing::Sandboxed(child) => {
                return match child.try_exit() {
                    Some(exit) => {
                        self.status = Some(exit_status(exit));
                        true
                    }
                    None => false,
                };
            }
            Backing::Host { child: None, .. } => return true,
            Backing::Host {
                child: Some(child),
                pid,
                ..
            } => (child, *pid),
        };
        let Some(raw) = raw_pid(pid) else {
            return true;
        };
        // Asked without reaping, so the group can still be killed safely.
        let options = rustix::process::WaitIdOptions::EXITED
            | rustix::process::WaitIdOptions::NOHANG
            | rustix::process::WaitIdOptions::NOWAIT;
        match rustix::process::waitid(rustix::process::WaitId::Pid(raw), options) {
            Ok(None) => false,
            Ok(Some(_)) => {
                kill_group(pid);
                if let Ok(Some(status)) = child.try_wait() {
                    self.status = Some(status);
                }
                true
            }
            // Not (or no longer) our child to wait on: nothing to kill safely.
            Err(_) => {
                if let Ok(Some(status)) = child.try_wait() {
                    self.status = Some(status);
                }
                true
            }
        }
    }

    /// Wait up to `grace` for the process to exit on its own; then kill whatever is left
    /// of its group and reap it. `None`: it is still running.
    pub async fn wait_exit(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.status.is_some() {
            return self.status;
        }
        let (child, pidfd) = match &mut self.backing {
            Backing::Sandboxed(child) => {
                // A wait cut short kills the sandbox (the caller kills it next anyway).
                if let Ok(report) = tokio::time::timeout(grace, child.wait()).await {
                    self.ended(&report);
                }
                return self.status;
            }
            Backing::Host { child, pidfd, .. } => (child, pidfd.clone()),
        };
        match pidfd {
            Some(fd) => {
                // waitid blocks, so it waits on a blocking thread; one still waiting after
                // the grace returns once the process is killed.
                let exited = tokio::task::spawn_blocking(move || wait_exited(&fd));
                if matches!(tokio::time::timeout(grace, exited).await, Ok(Ok(true))) {
                    self.reap().await;
                }
            }
            None => {
                let child = child.as_mut()?;
                if let Ok(Ok(status)) = tokio::time::timeout(grace, child.wait()).await {
                    self.status = Some(status);
                }
            }
        }
        self.status
    }

    /// Kill the process group (or everything of the sandbox) and reap the process.
    pub async fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        match &mut self.backing {
            Backing::Sandboxed(child) => {
                let report = child.kill().await;
                self.ended(&report);
            }
            Backing::Host { child, .. } => {
                if let Some(child) = child.as_mut() {
                    let _ = child.start_kill();
                }
                self.reap().await;
            }
        }
    }

    /// Kill the group (the unreaped leader still holds its id), then reap the leader.
    async fn reap(&mut self) {
        let Backing::Host { child, pid, .. } = &mut self.backing else {
            return;
        };
        kill_group(*pid);
        if let Some(child) = child.as_mut()
            && let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(5), child.wait()).await
        {
            self.status = Some(status);
        }
    }

    /// Wait (briefly) until everything the process wrote to stderr is read.
    pub async fn drain_stderr(&mut self) {
        let _ = tokio::time::timeout(STDERR_DRAIN, self.stderr_eof.wait_for(|eof| *eof)).await;
    }

    /// Wait (briefly) until stderr has carried `count` end-of-call marks, i.e. until
    /// everything a call logged before its answer is collected. A process that writes no
    /// marks (an `exec:` tool) only gets one turn for its reader.
    pub async fn wait_marks(&mut self, count: u64) {
        // Every request answered cleanly ends with one mark: the `count`th mark is the
        // end of the `count`th request, whenever this is called.
        if self.marks_calls {
            let _ = tokio::time::timeout(STDERR_DRAIN, self.marks.wait_for(|m| *m >= count)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }

    /// Take the stderr collected so far, and whether its start was dropped (the tail
    /// is kept).
    pub fn take_stderr(&self) -> (String, bool) {
        match self.stderr.lock() {
            Ok(mut t) => {
                let taken = describe_tail(&t);
                t.dropped = 0;
                t.bytes.clear();
                taken
            }
            Err(_) => (String::new(), false),
        }
    }

    /// [`Proc::take_stderr`] without taking it (for a call cut short).
    pub fn stderr_so_far(&self) -> (String, bool) {
        self.stderr
            .lock()
            .map(|t| describe_tail(&t))
            .unwrap_or_default()
    }

    /// The end of the stderr collected so far, without taking it.
    pub fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|t| tail(&String::from_utf8_lossy(&t.bytes), STDERR_TAIL_CHARS))
            .unwrap_or_default()
    }

    /// The exit status, once known.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(task) = self.stderr_task.take() {
            task.abort();
        }
        // A sandbox dropped here kills everything in it (its own drop).
        let Backing::Host { child, pid, .. } = &mut self.backing else {
            return;
        };
        let Some(mut child) = child.take() else {
            return;
        };
        if self.status.is_some() {
            return;
        }
        // Not reaped yet (exited or not), so the group id is still the tool's.
        kill_group(*pid);
        let _ = child.start_kill();
        // Reap it so no zombie stays behind; without a runtime, tokio's orphan reaper
        // gets it later.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = child.wait().await;
            });
        }
    }
}

/// The wait status of a sandbox's exit, as the host's.
fn exit_status(exit: Exit) -> ExitStatus {
    match exit {
        Exit::Code(code) => ExitStatus::from_raw((code & 0xff) << 8),
        Exit::Signal(signal) => ExitStatus::from_raw(signal & 0x7f),
    }
}

/// SIGKILL the process group led by `pid`. Called only while the leader is known not
/// to be reaped, so the group id cannot have been reused.
fn kill_group(pid: u32) {
    if let Some(pid) = raw_pid(pid) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// A pid we may signal or wait on: never 0 or 1 (kill(-1) would signal every process
/// we may signal).
fn raw_pid(pid: u32) -> Option<rustix::process::Pid> {
    if pid <= 1 {
        return None;
    }
    rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)
}

/// Block until the process of `pidfd` has exited, without reaping it; whether it did.
fn wait_exited(pidfd: &OwnedFd) -> bool {
    let options = rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT;
    loop {
        match rustix::process::waitid(rustix::process::WaitId::PidFd(pidfd.as_fd()), options) {
            Err(rustix::io::Errno::INTR) => continue,
            result => return result.is_ok(),
        }
    }
}

/// The kept stderr as text, with a note of what was dropped before it.
fn describe_tail(t: &Tail) -> (String, bool) {
    let text = String::from_utf8_lossy(&t.bytes).into_owned();
    if t.dropped > 0 {
        (
            format!("[{} earlier bytes of stderr dropped]\n{text}", t.dropped),
            true,
        )
    } else {
        (text, false)
    }
}

/// What [`Proc::read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineRead {
    /// A line (the last one may lack its newline).
    Line,
    /// End of file.
    Eof,
    /// The line would go past the budget.
    TooLong,
}

/// Describe how a process ended.
pub(crate) fn describe_status(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            (None, None) => "exited".into(),
        },
        None => "closed its stdout".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{CALL_END_MARK, Tail};

    #[test]
    fn marks_are_counted_and_stripped_even_when_split_across_reads() {
        let mut t = Tail::default();
        let mark = CALL_END_MARK;
        let (head, rest) = mark.split_at(5);
        let mut feed = |bytes: &[u8]| {
            t.bytes.extend_from_slice(bytes);
            t.strip_marks()
        };
        assert_eq!(feed(b"log one\n"), 0);
        assert_eq!(feed(&[b"more\n".as_slice(), head].concat()), 0);
        assert_eq!(
            feed(&[rest, b"next call\n".as_slice(), mark, mark].concat()),
            3
        );
        assert_eq!(feed(b"tail"), 0);
        assert_eq!(
            String::from_utf8_lossy(&t.bytes),
            "log one\nmore\nnext call\ntail"
        );
    }
}
