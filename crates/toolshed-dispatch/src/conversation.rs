//! One call's exchange with a tool process, and the one loop every subprocess call
//! takes ([`Conversation::events`]): write the request, read protocol lines until a
//! final one, end the conversation (the process kept for the pool, or killed and
//! reaped) and report what it left as [`Diagnostics`]. The top layer of the dispatcher's
//! process side: process ← launcher ← pool ← conversation.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, Stream};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use toolshed_core::credentials::scrub;
use toolshed_core::{Diagnostics, DiagnosticsSink, Secret};

use crate::error::DispatchError;
use crate::pool::Lease;
use crate::process::{LineRead, Proc, describe_status};
use crate::protocol::{Message, parse_line};

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

/// When a conversation must end, whatever the tool is doing (the dispatcher's own
/// timeout, for [`crate::Dispatcher::execute`]; through the pipeline, the pipeline owns
/// the timeout and there is none).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// The moment.
    pub at: Instant,
    /// The timeout it came from, for the error.
    pub after: Duration,
}

/// What a conversation yields: partial results, then its end.
#[derive(Debug)]
pub(crate) enum Event {
    /// A partial result.
    Partial(Value),
    /// The result or the error, with what the process left. Always the last event.
    End(Result<Value, DispatchError>, Diagnostics),
}

/// One call's exchange with a process.
pub(crate) struct Conversation {
    /// `None` once the conversation has ended.
    worker: Option<Worker>,
    tool: Arc<str>,
    id: String,
    cap: usize,
    used: usize,
    stdout: Vec<u8>,
    stdout_truncated: bool,
    line: Vec<u8>,
    grace: Duration,
    /// Set once the process misbehaved or died: it must not serve again.
    broken: bool,
    answered: bool,
    /// Where to leave what was seen if the conversation is dropped before it ends.
    sink: Option<DiagnosticsSink>,
}

/// How to start a conversation.
pub(crate) struct Opening {
    /// The tool's name.
    pub tool: Arc<str>,
    /// The request id.
    pub id: String,
    /// The request line.
    pub request: Vec<u8>,
    /// The stdout cap.
    pub cap: usize,
    /// How long a one-shot process may take to exit after its answer.
    pub grace: Duration,
    /// Where a dropped conversation leaves its diagnostics.
    pub sink: Option<DiagnosticsSink>,
}

impl Conversation {
    /// Send the request. A one-shot process then gets end-of-file; the write happens in
    /// the background so a tool that answers before reading cannot block the caller.
    /// Returns the conversation and whether the write failed (the worker was already
    /// gone, so the tool never saw the request).
    pub async fn start(mut worker: Worker, opening: Opening) -> (Conversation, bool) {
        let Opening {
            tool,
            id,
            request,
            cap,
            grace,
            sink,
        } = opening;
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
        let conv = Conversation {
            worker: Some(worker),
            tool,
            id,
            cap,
            used: 0,
            stdout: Vec::new(),
            stdout_truncated: false,
            line: Vec::new(),
            grace,
            broken: write_failed,
            answered: false,
            sink,
        };
        (conv, write_failed)
    }

    /// Give back the worker of a conversation whose request never reached the tool.
    pub fn into_worker(mut self) -> Option<Worker> {
        self.worker.take()
    }

    /// The call's events: each partial result, then [`Event::End`] once a final line
    /// came (or the process broke the protocol, flooded stdout, died, or passed the
    /// `deadline`) and the conversation has ended. The one loop of every subprocess
    /// call; tool stderr is also logged under `toolshed::dispatch`, scrubbed of
    /// `secrets`. Dropping the stream before its end kills the process (see
    /// [`Conversation`]'s drop).
    pub fn events(
        self,
        deadline: Option<Deadline>,
        secrets: Arc<[Secret]>,
    ) -> impl Stream<Item = Event> + Send + 'static {
        stream::unfold(Some(self), move |state| {
            let secrets = secrets.clone();
            async move {
                let mut conv = state?;
                let tool = conv.tool.clone();
                let next = match deadline {
                    None => Some(conv.next().await),
                    Some(d) => tokio::time::timeout_at(d.at, conv.next()).await.ok(),
                };
                let (result, diagnostics) = match next {
                    Some(Ok(Message::Partial(v))) => return Some((Event::Partial(v), Some(conv))),
                    Some(Ok(Message::Result(v))) => (Ok(v), conv.finish().await),
                    Some(Ok(Message::Error { message, code })) => {
                        let err = DispatchError::ToolFailed {
                            tool: tool.to_string(),
                            message,
                            code,
                        };
                        (Err(err), conv.finish().await)
                    }
                    Some(Err(e)) => (Err(e), conv.finish().await),
                    None => {
                        let ms = deadline.map(|d| d.after.as_millis()).unwrap_or_default();
                        let err = DispatchError::Timeout {
                            tool: tool.to_string(),
                            ms,
                        };
                        let mut left = conv.abort().await;
                        left.timed_out = true;
                        (Err(err), left)
                    }
                };
                log_stderr(&tool, &diagnostics, &secrets);
                Some((Event::End(result, diagnostics), None))
            }
        })
    }

    /// The next message. Blank lines are skipped; anything invalid ends the call.
    pub async fn next(&mut self) -> Result<Message, DispatchError> {
        let Some(worker) = self.worker.as_mut() else {
            return Err(DispatchError::Io {
                what: format!("the conversation with tool {} has ended", self.tool),
                source: std::io::Error::other("conversation ended"),
            });
        };
        loop {
            let budget = self.cap.saturating_sub(self.used);
            let read = worker.proc().read_line(&mut self.line, budget).await;
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
                    self.stdout_truncated = true;
                    worker.proc().kill().await;
                    return Err(DispatchError::StdoutTooLarge {
                        tool: self.tool.to_string(),
                        cap: self.cap,
                    });
                }
                Ok(LineRead::Eof) | Err(_) => {
                    self.broken = true;
                    let proc = worker.proc();
                    let status = proc.wait_exit(self.grace).await;
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

    /// End the conversation and report what the process left. A one-shot process gets
    /// `exit_grace` to exit (then whatever it left running is killed with its group), or
    /// is killed; a pooled worker that answered cleanly goes back to its pool, any other
    /// is killed (and the pool starts a replacement).
    pub async fn finish(mut self) -> Diagnostics {
        let healthy = self.answered && !self.broken;
        let mut diagnostics = Diagnostics {
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stdout_truncated: self.stdout_truncated,
            ..Diagnostics::default()
        };
        let Some(worker) = self.worker.take() else {
            return diagnostics;
        };
        match worker {
            Worker::Solo(mut proc) => {
                if healthy {
                    proc.wait_exit(self.grace).await;
                }
                proc.kill().await;
                proc.drain_stderr().await;
                (diagnostics.stderr, diagnostics.stderr_truncated) = proc.take_stderr();
                set_status(&mut diagnostics, proc.status());
                set_accounting(&mut diagnostics, &proc);
            }
            Worker::Pooled(mut lease) => {
                if healthy {
                    // Logs written just before the answer may still be in the pipe. The
                    // count is the worker's requests, not the marks seen when this call
                    // began: under load the mark can be counted before that look, and
                    // waiting for one more would cost the whole drain timeout.
                    let proc = lease.proc();
                    let requests = proc.requests();
                    proc.wait_marks(requests).await;
                    (diagnostics.stderr, diagnostics.stderr_truncated) = lease.proc().take_stderr();
                    lease.release();
                } else {
                    let proc = lease.proc();
                    proc.kill().await;
                    proc.drain_stderr().await;
                    (diagnostics.stderr, diagnostics.stderr_truncated) = proc.take_stderr();
                    set_status(&mut diagnostics, proc.status());
                    set_accounting(&mut diagnostics, proc);
                    lease.discard();
                }
            }
        }
        diagnostics
    }

    /// Kill the process now (its deadline passed) and report what it left.
    pub async fn abort(mut self) -> Diagnostics {
        self.broken = true;
        self.answered = false;
        if let Some(worker) = self.worker.as_mut() {
            worker.proc().kill().await;
        }
        self.finish().await
    }
}

impl Drop for Conversation {
    /// A conversation dropped before its end (the pipeline timed the call out, the run
    /// was cancelled, the caller went away) leaves what it saw in its sink; dropping the
    /// worker then kills the process group.
    fn drop(&mut self) {
        let (Some(worker), Some(sink)) = (self.worker.as_mut(), &self.sink) else {
            return;
        };
        let proc = worker.proc();
        let (stderr, stderr_truncated) = proc.stderr_so_far();
        let mut left = Diagnostics {
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stdout_truncated: self.stdout_truncated,
            stderr,
            stderr_truncated,
            ..Diagnostics::default()
        };
        set_status(&mut left, proc.status());
        sink.record(left);
    }
}

/// Tool stderr is the tool's log: it also goes to `tracing`.
fn log_stderr(tool: &str, diagnostics: &Diagnostics, secrets: &[Secret]) {
    let stderr = diagnostics.stderr.trim_end();
    if stderr.is_empty() {
        return;
    }
    let clean = scrub(stderr, secrets);
    let stderr = clean.as_deref().unwrap_or(stderr);
    tracing::info!(
        target: "toolshed::dispatch",
        tool,
        exit_code = diagnostics.exit_code,
        "stderr: {stderr}"
    );
}

fn set_status(diagnostics: &mut Diagnostics, status: Option<ExitStatus>) {
    if let Some(status) = status {
        diagnostics.exit_code = status.code();
        diagnostics.signal = status.signal();
    }
}

/// What a sandbox measured (peak memory, CPU time, the OOM killer), for a process
/// that ended.
fn set_accounting(diagnostics: &mut Diagnostics, proc: &Proc) {
    if let Some(a) = proc.accounting() {
        diagnostics.peak_memory_bytes = a.memory_peak_bytes;
        diagnostics.cpu_time_ms = a
            .cpu_time
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        diagnostics.oom_killed = a.oom_killed;
    }
}

fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}
