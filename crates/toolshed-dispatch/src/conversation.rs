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
use tokio::task::JoinHandle;
use tokio::time::Instant;
use toolshed_core::credentials::{scrub, scrub_value};
use toolshed_core::{Ask, AskError, AskRecord, Asker, Diagnostics, DiagnosticsSink, Secret};

use crate::error::DispatchError;
use crate::pool::Lease;
use crate::process::{LineRead, Proc, ProcStdin, describe_status};
use crate::protocol::{Line, Message, encode_answer, parse_line};

/// The most questions one call may put to its client: a tool that asks in a loop is
/// told no after this many, rather than pestering a person without end.
pub(crate) const MAX_ASKS: usize = 16;

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
    /// Boxed: the diagnostics are large, and every partial result moves an `Event`.
    End(Result<Value, DispatchError>, Box<Diagnostics>),
    /// The stream ended (`end`): its last partial is the result. Always the last event,
    /// and only after a partial.
    StreamEnd(Box<Diagnostics>),
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
    /// Who answers the tool's questions.
    asker: Option<Arc<dyn Asker>>,
    /// A one-shot process's stdin while the request is written to it, kept open so
    /// that its questions can be answered (see [`Opening::keep_stdin`]).
    solo_writer: Option<JoinHandle<Option<ProcStdin>>>,
    /// The questions asked so far.
    asks: Vec<AskRecord>,
    /// What no question may carry to the client (set by [`Conversation::events`]).
    secrets: Arc<[Secret]>,
    /// Whether the process's stdin stays open for answers (a pooled worker, or a
    /// one-shot process opened with [`Opening::keep_stdin`]).
    can_answer: bool,
    /// A partial result came: an `end` line may close the stream.
    streamed: bool,
    /// One of toolshed's runners ([`Opening::runner`]).
    runner: bool,
    /// What the tool printed to its stdout, as its runner relayed it (`stdout` lines).
    printed: String,
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
    /// Who answers the tool's questions (`None`: each is answered `ASK_NO_CLIENT`).
    pub asker: Option<Arc<dyn Asker>>,
    /// Keep a one-shot process's stdin open after the request, so its questions can
    /// be answered; it is closed when the conversation ends. For the Python runner,
    /// which reads requests line by line; an `exec:` tool may read to end-of-file, and
    /// the Node runner's one-shot mode does, so they get end-of-file right after their
    /// request.
    pub keep_stdin: bool,
    /// The process is one of toolshed's runners: the diagnostics' stdout is what the
    /// tool printed (its `stdout` lines), not the protocol the runner spoke for it.
    pub runner: bool,
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
            asker,
            keep_stdin,
            runner,
        } = opening;
        let mut write_failed = false;
        let mut solo_writer = None;
        let can_answer = keep_stdin || matches!(worker, Worker::Pooled(_));
        match &mut worker {
            Worker::Solo(p) => {
                if let Some(mut stdin) = p.take_stdin() {
                    let writer = tokio::spawn(async move {
                        let written = stdin.write_all(&request).await.is_ok();
                        if keep_stdin && written && stdin.flush().await.is_ok() {
                            return Some(stdin);
                        }
                        let _ = stdin.shutdown().await;
                        None
                    });
                    solo_writer = keep_stdin.then_some(writer);
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
            asker,
            solo_writer,
            asks: Vec::new(),
            secrets: Arc::from(Vec::new()),
            can_answer,
            streamed: false,
            runner,
            printed: String::new(),
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
        let mut conv = self;
        conv.secrets = secrets.clone();
        stream::unfold(Some(conv), move |state| {
            let secrets = secrets.clone();
            async move {
                let mut conv = state?;
                let tool = conv.tool.clone();
                let next = match deadline {
                    None => Some(conv.next().await),
                    Some(d) => tokio::time::timeout_at(d.at, conv.next()).await.ok(),
                };
                let (result, diagnostics) = match next {
                    Some(Ok(Message::Partial(v))) => {
                        conv.streamed = true;
                        return Some((Event::Partial(v), Some(conv)));
                    }
                    Some(Ok(Message::End)) if conv.streamed => {
                        let diagnostics = conv.finish().await;
                        log_stderr(&tool, &diagnostics, &secrets);
                        return Some((Event::StreamEnd(Box::new(diagnostics)), None));
                    }
                    Some(Ok(Message::End)) => {
                        let err = DispatchError::Protocol {
                            tool: tool.to_string(),
                            problem: "an `end` line came before any partial result; a tool without partials answers with `result`".into(),
                            excerpt: String::new(),
                        };
                        (Err(err), conv.finish().await)
                    }
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
                Some((Event::End(result, Box::new(diagnostics)), None))
            }
        })
    }

    /// The next message. Blank lines are skipped; anything invalid ends the call.
    pub async fn next(&mut self) -> Result<Message, DispatchError> {
        loop {
            let Some(worker) = self.worker.as_mut() else {
                return Err(DispatchError::Io {
                    what: format!("the conversation with tool {} has ended", self.tool),
                    source: std::io::Error::other("conversation ended"),
                });
            };
            let budget = self.cap.saturating_sub(self.used);
            let read = worker.proc().read_line(&mut self.line, budget).await;
            match read {
                Ok(LineRead::Line) => {
                    self.used += self.line.len();
                    if !self.runner {
                        // A runner's protocol lines are not the tool's output.
                        self.stdout.extend_from_slice(&self.line);
                    }
                    let trimmed = trim_newline(&self.line);
                    if trimmed.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return match parse_line(trimmed, &self.id) {
                        Ok(Line::Stdout(text)) => {
                            // Bounded: its line counted against the stdout cap.
                            self.printed.push_str(&text);
                            continue;
                        }
                        Ok(Line::Ask { seq, ask }) => {
                            let excerpt =
                                crate::error::excerpt(&String::from_utf8_lossy(trimmed), 200);
                            self.answer_ask(&seq, ask, excerpt).await?;
                            continue;
                        }
                        Ok(Line::Said(m)) => {
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

    /// Put the tool's question to the asker and write the answer to the tool. Only a
    /// tool whose stdin was closed after its request cannot be answered: that ends the
    /// call.
    async fn answer_ask(
        &mut self,
        seq: &Value,
        mut ask: Ask,
        excerpt: String,
    ) -> Result<(), DispatchError> {
        let kind = ask.kind;
        if !self.can_answer {
            self.broken = true;
            return Err(DispatchError::Protocol {
                tool: self.tool.to_string(),
                problem: format!(
                    "the tool asked a question ({kind}) but its stdin gets end-of-file right after its request: a one-shot `exec:` or `node:` tool cannot ask; run it in pool mode (`mode: pool`) to ask"
                ),
                excerpt,
            });
        }
        // A question leaves toolshed: the secrets the tool was handed stay here.
        scrub_value(&mut ask.params, &self.secrets);
        let began = std::time::Instant::now();
        let answer = if self.asks.len() >= MAX_ASKS {
            Err(AskError::Failed {
                kind,
                message: format!("a call may ask at most {MAX_ASKS} questions"),
            })
        } else {
            match &self.asker {
                Some(asker) => asker.ask(&self.tool, ask).await,
                None => Err(AskError::NoClient { kind }),
            }
        };
        let ms = began.elapsed().as_secs_f64() * 1000.0;
        self.asks.push(AskRecord::of(kind, &answer, ms));
        let line = encode_answer(&self.id, seq, &answer);
        let Some(worker) = self.worker.as_mut() else {
            return Ok(());
        };
        if let Some(writer) = self.solo_writer.take()
            && let Ok(Some(stdin)) = writer.await
        {
            worker.proc().put_stdin(stdin);
        }
        // A failed write means the process is gone: the next read sees its end and
        // reports how it exited.
        let _ = worker.proc().answer(&line).await;
        Ok(())
    }

    /// The stdout a person is shown: what the tool printed (relayed by its runner), or
    /// for any other process the lines it wrote.
    fn shown_stdout(&mut self) -> String {
        if self.runner {
            std::mem::take(&mut self.printed)
        } else {
            String::from_utf8_lossy(&self.stdout).into_owned()
        }
    }

    /// End the conversation and report what the process left. A one-shot process gets
    /// `exit_grace` to exit (then whatever it left running is killed with its group), or
    /// is killed; a pooled worker that answered cleanly goes back to its pool, any other
    /// is killed (and the pool starts a replacement).
    pub async fn finish(mut self) -> Diagnostics {
        let healthy = self.answered && !self.broken;
        let mut diagnostics = Diagnostics {
            stdout: self.shown_stdout(),
            stdout_truncated: self.stdout_truncated,
            asks: std::mem::take(&mut self.asks),
            ..Diagnostics::default()
        };
        let writer = self.solo_writer.take();
        let Some(worker) = self.worker.take() else {
            return diagnostics;
        };
        match worker {
            Worker::Solo(mut proc) => {
                // End-of-file: a runner that kept reading for answers exits now.
                if let Some(writer) = writer {
                    writer.abort();
                }
                drop(proc.take_stdin());
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
        if self.worker.is_none() || self.sink.is_none() {
            return;
        }
        let stdout = self.shown_stdout();
        let (Some(worker), Some(sink)) = (self.worker.as_mut(), &self.sink) else {
            return;
        };
        let proc = worker.proc();
        let (stderr, stderr_truncated) = proc.stderr_so_far();
        let mut left = Diagnostics {
            stdout,
            stdout_truncated: self.stdout_truncated,
            stderr,
            stderr_truncated,
            asks: std::mem::take(&mut self.asks),
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
