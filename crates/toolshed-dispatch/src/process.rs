//! One tool process and one conversation with it: spawning in its own process group,
//! capped stdout lines, a stderr tail collected in the background, and killing and
//! reaping on every path (answer, error, timeout, a dropped future), so no call leaves a
//! stray process or a zombie behind.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{DispatchError, tail};
use crate::pool::Lease;
use crate::protocol::{Message, parse_line};

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

/// A running tool process.
pub(crate) struct Proc {
    child: Option<Child>,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Tail>>,
    stderr_eof: watch::Receiver<bool>,
    stderr_task: Option<JoinHandle<()>>,
    /// How many end-of-call marks stderr has carried.
    marks: watch::Receiver<u64>,
    marks_calls: bool,
    status: Option<ExitStatus>,
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
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the child's stdio was not piped"));
        };
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
        Ok(Proc {
            child: Some(child),
            pid,
            stdin: Some(stdin),
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            stderr: tail,
            stderr_eof: eof_rx,
            stderr_task: Some(stderr_task),
            marks: marks_rx,
            marks_calls: spec.marks_calls,
            status: None,
            stamp,
        })
    }

    /// Write one request line.
    pub async fn send(&mut self, line: &[u8]) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        stdin.write_all(line).await?;
        stdin.flush().await
    }

    /// Take stdin, to write from elsewhere or to close it (end-of-file for the tool).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
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

    /// Whether the process has exited (reaping it if so).
    pub fn has_exited(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => {
                self.status = Some(status);
                true
            }
            Some(Ok(None)) => false,
            Some(Err(_)) | None => true,
        }
    }

    /// Wait up to `grace` for the process to exit on its own.
    pub async fn wait_exit(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            let child = self.child.as_mut()?;
            if let Ok(Ok(status)) = tokio::time::timeout(grace, child.wait()).await {
                self.status = Some(status);
            }
        }
        self.status
    }

    /// Kill the process group and reap the process.
    pub async fn kill(&mut self) {
        if self.has_exited() {
            return;
        }
        kill_group(self.pid);
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
            if let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(5), child.wait()).await
            {
                self.status = Some(status);
            }
        }
    }

    /// Wait (briefly) until everything the process wrote to stderr is read.
    pub async fn drain_stderr(&mut self) {
        let _ = tokio::time::timeout(STDERR_DRAIN, self.stderr_eof.wait_for(|eof| *eof)).await;
    }

    /// How many calls this process has marked as ended on stderr.
    pub fn marks(&self) -> u64 {
        *self.marks.borrow()
    }

    /// Wait (briefly) until stderr has carried `count` end-of-call marks, i.e. until
    /// everything a call logged before its answer is collected. A process that writes no
    /// marks (an `exec:` tool) only gets one turn for its reader.
    pub async fn wait_marks(&mut self, count: u64) {
        if self.marks_calls {
            let _ = tokio::time::timeout(STDERR_DRAIN, self.marks.wait_for(|m| *m >= count)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }

    /// Take the stderr collected so far.
    pub fn take_stderr(&self) -> String {
        match self.stderr.lock() {
            Ok(mut t) => {
                let text = String::from_utf8_lossy(&t.bytes).into_owned();
                let dropped = std::mem::take(&mut t.dropped);
                t.bytes.clear();
                if dropped > 0 {
                    format!("[{dropped} earlier bytes of stderr dropped]\n{text}")
                } else {
                    text
                }
            }
            Err(_) => String::new(),
        }
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
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.status.is_some() || matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        kill_group(self.pid);
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

/// SIGKILL the process group led by `pid`. Called only while the leader is known not
/// to be reaped, so the group id cannot have been reused.
fn kill_group(pid: u32) {
    // Never pid 0 or 1: kill(-1) would signal every process we may signal.
    if pid <= 1 {
        return;
    }
    let Ok(raw) = i32::try_from(pid) else {
        return;
    };
    if let Some(pid) = rustix::process::Pid::from_raw(raw) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
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

/// The process a conversation talks to: its own, or one leased from a pool.
pub(crate) enum Worker {
    /// A one-shot process.
    Solo(Proc),
    /// A pooled worker.
    Pooled(Lease),
}

impl Worker {
    fn proc(&mut self) -> &mut Proc {
        match self {
            Worker::Solo(p) => p,
            Worker::Pooled(lease) => lease.proc(),
        }
    }
}

/// What a finished conversation leaves: the captured streams and the exit code.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
}

/// One call's exchange with a process.
pub(crate) struct Conversation {
    worker: Worker,
    tool: Arc<str>,
    id: String,
    cap: usize,
    used: usize,
    stdout: Vec<u8>,
    line: Vec<u8>,
    grace: Duration,
    /// Set once the process misbehaved or died: it must not serve again.
    broken: bool,
    answered: bool,
    /// The worker's end-of-call marks before this call.
    marks_before: u64,
}

impl Conversation {
    /// Send the request. A one-shot process then gets end-of-file; the write happens in
    /// the background so a tool that answers before reading cannot block the caller.
    /// Returns the conversation and whether the write failed (the worker was already
    /// gone, so the tool never saw the request).
    pub async fn start(
        mut worker: Worker,
        tool: Arc<str>,
        id: String,
        request: Vec<u8>,
        cap: usize,
        grace: Duration,
    ) -> (Conversation, bool) {
        let mut write_failed = false;
        match &mut worker {
            Worker::Solo(p) => {
                if let Some(mut stdin) = p.take_stdin() {
                    tokio::spawn(async move {
                        let _ = stdin.write_all(&request).await;
                        let _ = stdin.shutdown().await;
                    });
                }
            }
            Worker::Pooled(lease) => {
                write_failed = lease.proc().send(&request).await.is_err();
            }
        }
        let marks_before = worker.proc().marks();
        let conv = Conversation {
            worker,
            tool,
            id,
            cap,
            used: 0,
            stdout: Vec::new(),
            line: Vec::new(),
            grace,
            broken: write_failed,
            answered: false,
            marks_before,
        };
        (conv, write_failed)
    }

    /// Whether the process is a pooled worker.
    pub fn is_pooled(&self) -> bool {
        matches!(self.worker, Worker::Pooled(_))
    }

    /// Give back the worker of a conversation whose request never reached the tool.
    pub fn into_worker(self) -> Worker {
        self.worker
    }

    /// The next message. Blank lines are skipped; anything invalid ends the call.
    pub async fn next(&mut self) -> Result<Message, DispatchError> {
        loop {
            let budget = self.cap.saturating_sub(self.used);
            let read = self.worker.proc().read_line(&mut self.line, budget).await;
            match read {
                Ok(LineRead::Line) => {
                    self.used += self.line.len();
                    self.stdout.extend_from_slice(&self.line);
                    let trimmed = trim_newline(&self.line);
                    if trimmed.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return match parse_line(trimmed, &self.id) {
                        Ok(m) => {
                            if m.is_final() {
                                self.answered = true;
                            }
                            Ok(m)
                        }
                        Err(bad) => {
                            self.broken = true;
                            Err(DispatchError::Protocol {
                                tool: self.tool.to_string(),
                                problem: bad.problem,
                                excerpt: bad.excerpt,
                            })
                        }
                    };
                }
                Ok(LineRead::TooLong) => {
                    self.broken = true;
                    self.worker.proc().kill().await;
                    return Err(DispatchError::StdoutTooLarge {
                        tool: self.tool.to_string(),
                        cap: self.cap,
                    });
                }
                Ok(LineRead::Eof) | Err(_) => {
                    self.broken = true;
                    let grace = self.grace;
                    let proc = self.worker.proc();
                    let status = proc.wait_exit(grace).await;
                    if status.is_none() {
                        proc.kill().await;
                    }
                    proc.drain_stderr().await;
                    return Err(DispatchError::Exited {
                        tool: self.tool.to_string(),
                        status: describe_status(status),
                        exit_code: status.and_then(|s| s.code()),
                        stderr_tail: proc.stderr_tail(),
                    });
                }
            }
        }
    }

    /// End the conversation. A one-shot process gets `exit_grace` to exit, then is
    /// killed; a pooled worker that answered cleanly goes back to its pool, any other
    /// is killed (and the pool starts a replacement).
    pub async fn finish(mut self) -> Leftovers {
        let healthy = self.answered && !self.broken;
        let stdout = String::from_utf8_lossy(&self.stdout).into_owned();
        let grace = self.grace;
        match self.worker {
            Worker::Solo(ref mut proc) => {
                let status = if healthy {
                    proc.wait_exit(grace).await
                } else {
                    proc.status()
                };
                if status.is_none() {
                    proc.kill().await;
                }
                proc.drain_stderr().await;
                Leftovers {
                    stdout,
                    stderr: proc.take_stderr(),
                    exit_code: status.and_then(|s| s.code()),
                }
            }
            Worker::Pooled(mut lease) => {
                if healthy {
                    // Logs written just before the answer may still be in the pipe.
                    lease.proc().wait_marks(self.marks_before + 1).await;
                    let stderr = lease.proc().take_stderr();
                    lease.release();
                    Leftovers {
                        stdout,
                        stderr,
                        exit_code: None,
                    }
                } else {
                    let proc = lease.proc();
                    proc.kill().await;
                    proc.drain_stderr().await;
                    let stderr = proc.take_stderr();
                    let exit_code = proc.status().and_then(|s| s.code());
                    lease.discard();
                    Leftovers {
                        stdout,
                        stderr,
                        exit_code,
                    }
                }
            }
        }
    }

    /// Kill the process now (a timeout) and collect what it left.
    pub async fn abort(mut self) -> Leftovers {
        self.broken = true;
        self.answered = false;
        self.worker.proc().kill().await;
        self.finish().await
    }
}

fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
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
