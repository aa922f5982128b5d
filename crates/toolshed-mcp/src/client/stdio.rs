//! Stdio servers: a child in the sandbox (or, on the developer's opt-in, a plain child
//! process), its stderr read into a capped log, shut down by closing stdin, then
//! SIGTERM, then SIGKILL.
//!
//! The transport is ours rather than rmcp's async-rw one because a server that writes
//! something other than JSON-RPC on stdout must fail with a message that quotes it;
//! rmcp's transport ignores such lines, which turns a misconfigured server into a
//! silent timeout.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use toolshed_sandbox::{Bind, LimitsRequest, Network, RunSpec};

use super::ClientConfig;
use super::profile::{CACHE_TARGET, SandboxProfile};
use crate::error::McpError;
use crate::spec::StdioLaunch;

/// The `PATH` a server gets when its spec sets none: the sandbox's program folders.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What a long-lived server may use: more than a one-shot tool (a Node server with its
/// dependencies needs several hundred MB and many threads), clamped to the sandbox's
/// ceilings as every request is.
fn server_limits() -> LimitsRequest {
    LimitsRequest {
        memory_bytes: Some(1024 * 1024 * 1024),
        pids: Some(256),
        // A server lives for hours: CPU seconds are not a useful bound for it (the
        // cgroup's CPU quota still is).
        cpu_time_ms: Some(24 * 3600 * 1000),
        open_files: Some(1024),
        scratch_bytes: Some(256 * 1024 * 1024),
        tmp_bytes: Some(256 * 1024 * 1024),
        ..LimitsRequest::default()
    }
}

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A running server process.
pub(crate) enum Child {
    Sandboxed(Box<toolshed_sandbox::SandboxedChild>),
    Plain(tokio::process::Child),
}

impl Child {
    fn pid(&self) -> Option<i32> {
        match self {
            Child::Sandboxed(c) => Some(c.id()),
            Child::Plain(c) => c.id().and_then(|p| i32::try_from(p).ok()),
        }
    }

    /// Whether it has exited, with its status when known.
    pub(crate) fn exited(&mut self) -> Option<String> {
        match self {
            Child::Sandboxed(c) => c.try_exit().map(|e| format!("{e:?}")),
            Child::Plain(c) => match c.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(e) => Some(format!("cannot wait: {e}")),
            },
        }
    }

    /// Waits up to `grace` for it to exit by itself (polling: the sandbox's own wait is
    /// not cancel-safe).
    async fn exits_within(&mut self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        loop {
            if self.exited().is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, a grace period, then SIGKILL (of the whole sandbox, for a sandboxed
    /// child). Its stdin must already be closed: that is the first, polite step.
    pub(crate) async fn stop(&mut self, grace: Duration) {
        if self.exits_within(grace).await {
            self.reap().await;
            return;
        }
        if let Some(pid) = self.pid().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if !self.exits_within(grace).await {
            tracing::debug!("MCP server ignored SIGTERM; killing it");
        }
        self.reap().await;
    }

    async fn reap(&mut self) {
        match self {
            Child::Sandboxed(c) => {
                c.kill().await;
            }
            Child::Plain(c) => {
                let _ = c.kill().await;
            }
        }
    }
}

/// The end of a server's stderr, capped.
pub(crate) struct StderrLog {
    buf: Mutex<VecDeque<u8>>,
    cap: usize,
    /// Readers still reading a process's stderr (one per start of the server).
    reading: std::sync::atomic::AtomicUsize,
    /// Told when a reader reaches the end of its pipe.
    ended: tokio::sync::Notify,
}

impl StderrLog {
    pub(crate) fn new(cap: usize) -> Arc<StderrLog> {
        Arc::new(StderrLog {
            buf: Mutex::new(VecDeque::new()),
            cap,
            reading: std::sync::atomic::AtomicUsize::new(0),
            ended: tokio::sync::Notify::new(),
        })
    }

    /// Wait (at most `within`) until every reader has read its pipe to the end: a
    /// process that just exited may still have its last words in the pipe, and an
    /// error that quotes them must not be written before they are read.
    pub(crate) async fn drained(&self, within: Duration) {
        use std::sync::atomic::Ordering;
        let _ = tokio::time::timeout(within, async {
            loop {
                let ended = self.ended.notified();
                tokio::pin!(ended);
                ended.as_mut().enable();
                if self.reading.load(Ordering::Acquire) == 0 {
                    return;
                }
                ended.await;
            }
        })
        .await;
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        buf.extend(bytes);
        let over = buf.len().saturating_sub(self.cap);
        buf.drain(..over);
    }

    /// Everything kept, lossily decoded.
    pub(crate) fn text(&self) -> String {
        let buf = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        let (a, b) = buf.as_slices();
        let mut v = Vec::with_capacity(a.len() + b.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// The last `chars` characters, for an error message.
    pub(crate) fn tail(&self, chars: usize) -> String {
        let text = self.text();
        let n = text.chars().count();
        text.chars().skip(n.saturating_sub(chars)).collect()
    }

    fn spawn_reader(self: &Arc<Self>, mut r: impl AsyncRead + Send + Unpin + 'static) {
        use std::sync::atomic::Ordering;
        let log = self.clone();
        log.reading.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            loop {
                match r.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => log.push(&chunk[..n]),
                }
            }
            log.reading.fetch_sub(1, Ordering::AcqRel);
            log.ended.notify_waiters();
        });
    }
}

/// What went wrong on the stream, kept for the error message (the rmcp service only
/// sees the stream end).
pub(crate) type Fault = Arc<Mutex<Option<String>>>;

/// A started server: the process and the transport on its pipes.
pub(crate) struct Spawned {
    pub(crate) child: Child,
    pub(crate) transport: StdioTransport,
}

/// Starts the server of `launch` with the environment `env` (credentials expanded).
pub(crate) async fn spawn(
    config: &ClientConfig,
    server: &str,
    launch: &StdioLaunch,
    env: Vec<(String, String)>,
    profile: &SandboxProfile,
    stderr: &Arc<StderrLog>,
    fault: Fault,
) -> Result<Spawned, McpError> {
    let start_err = |reason: String| McpError::Start {
        server: server.to_owned(),
        reason,
    };
    let mut env = env;
    if let Some(cache) = &profile.cache {
        std::fs::create_dir_all(cache).map_err(|e| {
            start_err(format!(
                "cannot create its package cache {}: {e}",
                cache.display()
            ))
        })?;
    }
    let cache_dir = |host: &Path| -> String {
        if config.sandbox.is_some() {
            CACHE_TARGET.to_owned()
        } else {
            host.display().to_string()
        }
    };
    if let Some(cache) = &profile.cache {
        let inside = cache_dir(cache);
        for (k, v) in [
            ("HOME", inside.clone()),
            ("npm_config_cache", format!("{inside}/npm")),
            ("UV_CACHE_DIR", format!("{inside}/uv")),
            ("XDG_CACHE_HOME", format!("{inside}/xdg")),
        ] {
            if !env.iter().any(|(key, _)| key == k) {
                env.push((k.to_owned(), v));
            }
        }
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    let (child, stdin, stdout, err): (Child, BoxWrite, BoxRead, BoxRead) = match &config.sandbox {
        Some(sandbox) => {
            let mut run = RunSpec::new(&launch.command, launch.args.iter().map(OsString::from));
            run.env = env
                .into_iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect();
            run.network = if profile.network {
                Network::On
            } else {
                Network::Off
            };
            run.limits = server_limits();
            if let Some(cache) = &profile.cache {
                run.binds.push(Bind::package_cache(cache, CACHE_TARGET));
            }
            for (host, inside) in &profile.binds {
                run.binds.push(Bind::executable(host, inside));
            }
            let mut c = sandbox
                .spawn(run)
                .await
                .map_err(|e| start_err(format!("the sandbox refused it: {e}")))?;
            let (Some(i), Some(o), Some(e)) = (c.stdin.take(), c.stdout.take(), c.stderr.take())
            else {
                return Err(start_err("the sandbox gave no pipes".into()));
            };
            (
                Child::Sandboxed(Box::new(c)),
                Box::new(i),
                Box::new(o),
                Box::new(e),
            )
        }
        None if config.unsandboxed => {
            let mut cmd = tokio::process::Command::new(&launch.command);
            cmd.args(&launch.args)
                .env_clear()
                .envs(env)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let mut c = cmd
                .spawn()
                .map_err(|e| start_err(format!("cannot run `{}`: {e}", launch.command)))?;
            let (Some(i), Some(o), Some(e)) = (c.stdin.take(), c.stdout.take(), c.stderr.take())
            else {
                return Err(start_err("the process has no pipes".into()));
            };
            (Child::Plain(c), Box::new(i), Box::new(o), Box::new(e))
        }
        None => {
            return Err(McpError::SandboxRequired {
                server: server.to_owned(),
            });
        }
    };
    stderr.spawn_reader(err);
    Ok(Spawned {
        child,
        transport: StdioTransport {
            read: BufReader::new(stdout),
            line: Vec::new(),
            max_line: config.limits.max_line_bytes,
            max_result: config.limits.max_result_bytes,
            calls: Arc::new(Mutex::new(VecDeque::new())),
            discarding: false,
            write: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            fault,
        },
    })
}

/// Newline-delimited JSON-RPC on a child's pipes, strict about what the child writes.
pub(crate) struct StdioTransport {
    read: BufReader<Box<dyn AsyncRead + Send + Unpin>>,
    /// The line being read; kept here because `receive` is polled inside a `select!`
    /// and may be cancelled between reads.
    line: Vec<u8>,
    max_line: usize,
    /// A `tools/call` answer longer than this (plus [`FRAMING_BYTES`]) is not parsed:
    /// it is replaced by [`too_large_answer`], so an oversized answer costs its line
    /// and nothing more.
    max_result: usize,
    /// The ids (as JSON) of the latest `tools/call` requests sent, at most
    /// [`CALLS_KEPT`]: an answer over `max_result` to one of them is replaced.
    calls: Arc<Mutex<VecDeque<String>>>,
    discarding: bool,
    write: Arc<tokio::sync::Mutex<Option<Box<dyn AsyncWrite + Send + Unpin>>>>,
    fault: Fault,
}

/// How many characters of a bad line an error quotes.
const EXCERPT: usize = 120;

/// What a `tools/call` answer may carry around its result (the JSON-RPC envelope).
const FRAMING_BYTES: usize = 64 * 1024;

/// How many `tools/call` ids are remembered for [`StdioTransport::calls`].
const CALLS_KEPT: usize = 1024;

/// The `_meta` key of an answer that replaced one over the result cap; its value is
/// the size of the answer that was not read.
pub(crate) const TOO_LARGE_META: &str = "io.toolshed/result_too_large_bytes";

/// The first fields of a message, read without keeping the rest (`IgnoredAny` walks the
/// result without allocating).
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    result: Option<serde::de::IgnoredAny>,
}

/// The answer that stands in for a `tools/call` answer of `bytes` bytes: an error
/// result carrying its size under [`TOO_LARGE_META`] (`call.rs` makes it
/// `RESULT_TOO_LARGE`).
fn too_large_answer(id: &Value, bytes: usize) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {
            "content": [{"type": "text", "text": format!("the answer was {bytes} bytes")}],
            "isError": true,
            "_meta": { TOO_LARGE_META: bytes },
        },
    })
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let mut out: String = text.chars().take(EXCERPT).collect();
    if text.chars().count() > EXCERPT {
        out.push('…');
    }
    out
}

impl StdioTransport {
    /// For a line over the result cap that answers one of our `tools/call` requests:
    /// the small answer that stands in for it.
    fn oversized_answer(&self, body: &[u8]) -> Option<Value> {
        let head: Head = serde_json::from_slice(body).ok()?;
        head.result?;
        let id = head.id?;
        let key = serde_json::to_string(&id).ok()?;
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let at = calls.iter().position(|c| *c == key)?;
        calls.remove(at);
        Some(too_large_answer(&id, body.len()))
    }

    fn set_fault(&self, why: String) {
        let mut f = self.fault.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(why);
    }

    /// One line into `self.line`; `false` at the end of the stream (or a fault).
    async fn read_line(&mut self) -> bool {
        loop {
            let (used, done) = {
                let available = match self.read.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => {
                        self.set_fault(format!("cannot read its stdout: {e}"));
                        return false;
                    }
                };
                if available.is_empty() {
                    return false;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.line.len() + take > self.max_line {
                    self.discarding = true;
                    self.line.clear();
                } else if !self.discarding {
                    self.line.extend_from_slice(&available[..take]);
                }
                (take, newline.is_some())
            };
            self.read.consume(used);
            if self.discarding {
                let max = self.max_line;
                self.set_fault(format!(
                    "wrote a message longer than {max} bytes on stdout (the cap `max_line_bytes`)"
                ));
                return false;
            }
            if done {
                return true;
            }
        }
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        if let rmcp::model::JsonRpcMessage::Request(r) = &item
            && matches!(r.request, rmcp::model::ClientRequest::CallToolRequest(_))
            && let Ok(id) = serde_json::to_string(&r.id)
        {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            if calls.len() == CALLS_KEPT {
                calls.pop_front();
            }
            calls.push_back(id);
        }
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            let mut w = write.lock().await;
            match w.as_mut() {
                Some(w) => {
                    w.write_all(&line).await?;
                    w.flush().await
                }
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "stdin is closed",
                )),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if !self.read_line().await {
                return None;
            }
            let line = std::mem::take(&mut self.line);
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            if body.iter().all(u8::is_ascii_whitespace) {
                self.line = line;
                self.line.clear();
                continue;
            }
            let replaced = (body.len() > self.max_result.saturating_add(FRAMING_BYTES))
                .then(|| self.oversized_answer(body))
                .flatten();
            let parsed = match &replaced {
                Some(stand_in) => serde_json::from_value(stand_in.clone()),
                None => serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(body),
            };
            match parsed {
                Ok(message) => {
                    self.line = line;
                    self.line.clear();
                    return Some(message);
                }
                Err(e) if e.is_syntax() || e.is_eof() => {
                    self.set_fault(format!(
                        "wrote something other than JSON-RPC on stdout: `{}` (a stdio MCP server must write only protocol messages there, and its logs to stderr)",
                        excerpt(body)
                    ));
                    return None;
                }
                // Well-formed JSON that is no message we know (a newer notification):
                // ignored, as the other SDKs do.
                Err(e) => {
                    tracing::debug!("ignoring an MCP message of an unknown shape: {e}");
                    self.line = line;
                    self.line.clear();
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping stdin is the first step of a shutdown: the server sees EOF.
        self.write.lock().await.take();
        Ok(())
    }
}
