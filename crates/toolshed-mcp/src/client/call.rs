//! `tools/call` mapped onto the pipeline: content blocks, `structuredContent` and
//! `isError` become the result, its diagnostics or an error result; progress becomes
//! partial results; our timeout or cancellation sends `notifications/cancelled`.
//!
//! The result value is `structuredContent` when the server sends it; else the text
//! when every block is text (joined by newlines); else `{"content": [blocks]}`. Every
//! block, as received, is also in `Diagnostics.content` (for an `isError` result only
//! there: the error carries their text). An answer larger than the call's output budget
//! (`ToolContext::output_budget`) or `max_result_bytes` is `RESULT_TOO_LARGE`.
//!
//! A call waits for its first event: a result that comes first is a plain value; a
//! progress notification that comes first turns the reply into a stream, whose
//! earlier items are the progress (`tool:result:partial` crumbs) and whose last is the
//! result. Plain calls (most of them) stay values for every caller.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientNotification, ClientRequest, ProgressNotificationParam, RequestId,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use toolshed_core::credentials::{scrub_error, scrub_value};
use toolshed_core::tool::{Chunk, Reply, ToolOutput};
use toolshed_core::{Diagnostics, ErrorCode, Secret, ToolContext, ToolError};

use super::ServerState;
use super::conn::Live;
use super::handler::ProgressGuard;
use crate::error::McpError;

/// The longest error text taken from an `isError` result.
const MAX_ERROR_TEXT: usize = 4000;

pub(crate) async fn call(
    server: &Arc<ServerState>,
    tool: &str,
    args: Value,
    ctx: &ToolContext,
) -> Reply {
    let c = server.ctx();
    let live = match server.conn.live(&c).await {
        Ok(l) => l,
        Err(e) => return failed(e, &server.conn.secrets()),
    };
    let secrets = server.conn.secrets();
    let arguments = match args {
        Value::Object(m) => m,
        Value::Null => serde_json::Map::new(),
        other => {
            return Reply::new(Err(ToolError::new(
                ErrorCode::InvalidArgs,
                format!(
                    "the arguments of an MCP tool are a JSON object, not {}",
                    kind(&other)
                ),
            )));
        }
    };
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments),
    ));
    let handle = match live
        .peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => {
            let e = server.conn.service_error(&c, &live, "tools/call", e).await;
            return failed(e, &secrets);
        }
    };
    let (progress, progress_guard) = server.conn.shared.watch_progress(&handle.progress_token);
    let mut pending = Pending {
        server: server.clone(),
        live: live.clone(),
        answer: handle.rx,
        cancel: CancelOnDrop {
            peer: Some(live.peer.clone()),
            id: handle.id.clone(),
        },
        progress,
        _progress_guard: progress_guard,
        cancelled: ctx.cancellation().clone(),
        deadline: tokio::time::Instant::now() + server.spec.timeout,
        timeout: server.spec.timeout,
        secrets,
        // The call's output budget bounds what is taken of the answer, whatever the
        // server's own cap.
        max_result: server
            .config
            .limits
            .max_result_bytes
            .min(ctx.output_budget()),
        tool: tool.to_owned(),
    };
    match pending.next().await {
        Event::Done(result, diagnostics) => {
            Reply::new(result.map(ToolOutput::Value)).with_diagnostics(diagnostics)
        }
        Event::Progress(first) => {
            let state = StreamState {
                pending: Some(pending),
                queue: VecDeque::from([Ok(Chunk::Value(first))]),
            };
            let stream = futures_util::stream::unfold(state, |mut s| async move {
                if let Some(item) = s.queue.pop_front() {
                    return Some((item, s));
                }
                let mut p = s.pending.take()?;
                match p.next().await {
                    Event::Progress(v) => {
                        s.pending = Some(p);
                        Some((Ok(Chunk::Value(v)), s))
                    }
                    Event::Done(result, diagnostics) => {
                        let first = match result {
                            Ok(v) => Ok(Chunk::Value(v)),
                            Err(e) => Err(e),
                        };
                        s.queue.push_back(Ok(Chunk::Diagnostics(diagnostics)));
                        // An error ends the stream: its diagnostics go first.
                        if first.is_err() {
                            s.queue.clear();
                            return Some((first, s));
                        }
                        Some((first, s))
                    }
                }
            });
            Reply::new(Ok(ToolOutput::Stream(stream.boxed())))
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn failed(e: McpError, secrets: &[Secret]) -> Reply {
    let mut err = ToolError::from(e);
    scrub_error(&mut err, secrets);
    Reply::new(Err(err))
}

struct StreamState {
    pending: Option<Pending>,
    queue: VecDeque<Result<Chunk, ToolError>>,
}

enum Event {
    Progress(Value),
    Done(Result<Value, ToolError>, Diagnostics),
}

/// A call in flight.
struct Pending {
    server: Arc<ServerState>,
    live: Arc<Live>,
    answer: oneshot::Receiver<Result<rmcp::model::ServerResult, ServiceError>>,
    cancel: CancelOnDrop,
    progress: mpsc::Receiver<ProgressNotificationParam>,
    _progress_guard: ProgressGuard,
    cancelled: tokio_util::sync::CancellationToken,
    deadline: tokio::time::Instant,
    timeout: Duration,
    secrets: Vec<Secret>,
    max_result: usize,
    tool: String,
}

impl Pending {
    async fn next(&mut self) -> Event {
        tokio::select! {
            biased;
            // Progress first: the transport routes a call's progress before its answer
            // is read, so this order keeps them in the order they were sent.
            Some(p) = self.progress.recv() => {
                let mut v = json!({"progress": p.progress});
                if let Some(t) = p.total { v["total"] = json!(t); }
                if let Some(m) = p.message { v["message"] = json!(m); }
                scrub_value(&mut v, &self.secrets);
                Event::Progress(v)
            }
            answer = &mut self.answer => {
                self.cancel.disarm();
                let answer = answer.unwrap_or(Err(ServiceError::TransportClosed));
                self.done(answer).await
            }
            _ = self.cancelled.cancelled() => {
                self.cancel.fire("the caller cancelled the call");
                Event::Done(
                    Err(ToolError::new(ErrorCode::Cancelled, format!(
                        "MCP server `{}`: the call of `{}` was cancelled; the server was told (notifications/cancelled)",
                        self.server.name(), self.tool
                    ))),
                    Diagnostics::default(),
                )
            }
            _ = tokio::time::sleep_until(self.deadline) => {
                self.cancel.fire("timeout");
                let e = McpError::Timeout {
                    server: self.server.name().to_owned(),
                    method: "tools/call".into(),
                    timeout: self.timeout,
                };
                let d = Diagnostics { timed_out: true, ..Diagnostics::default() };
                Event::Done(Err(e.into()), d)
            }
        }
    }

    async fn done(&mut self, answer: Result<rmcp::model::ServerResult, ServiceError>) -> Event {
        let conn = &self.server.conn;
        let ctx = self.server.ctx();
        let result = match answer {
            Ok(r) => r,
            Err(e) => {
                let e = conn.service_error(&ctx, &self.live, "tools/call", e).await;
                let mut err = ToolError::from(e);
                scrub_error(&mut err, &self.secrets);
                return Event::Done(Err(err), Diagnostics::default());
            }
        };
        conn.succeeded(&self.live);
        let size = serde_json::to_vec(&result).map(|v| v.len()).unwrap_or(0);
        if size > self.max_result {
            return Event::Done(
                Err(ToolError::new(
                    ErrorCode::ResultTooLarge,
                    format!(
                        "MCP server `{}`: the result of `{}` is {size} bytes, over the cap of {} (the call's output budget, or the server's `max_result_bytes` when lower); return less",
                        self.server.name(),
                        self.tool,
                        self.max_result
                    ),
                )),
                Diagnostics::default(),
            );
        }
        let mut value = match serde_json::to_value(&result) {
            Ok(v) => v,
            Err(e) => {
                return Event::Done(
                    Err(ToolError::handler(format!(
                        "MCP server `{}`: its result cannot be read: {e}",
                        self.server.name()
                    ))),
                    Diagnostics::default(),
                );
            }
        };
        if let Some(bytes) = value
            .get("_meta")
            .and_then(|m| m.get(super::stdio::TOO_LARGE_META))
            .and_then(Value::as_u64)
        {
            return Event::Done(
                Err(ToolError::new(
                    ErrorCode::ResultTooLarge,
                    format!(
                        "MCP server `{}`: the answer of `{}` is {bytes} bytes, over the cap of {} (the call's output budget, or the server's `max_result_bytes` when lower); it was not read; return less",
                        self.server.name(),
                        self.tool,
                        self.max_result
                    ),
                )),
                Diagnostics::default(),
            );
        }
        scrub_value(&mut value, &self.secrets);
        let (result, diagnostics) = map_result(self.server.name(), &self.tool, value);
        Event::Done(result, diagnostics)
    }
}

/// A `CallToolResult` (as JSON) as a pipeline result and its diagnostics.
pub(crate) fn map_result(
    server: &str,
    tool: &str,
    value: Value,
) -> (Result<Value, ToolError>, Diagnostics) {
    let content = match value.get("content") {
        Some(Value::Array(c)) => c.clone(),
        _ => Vec::new(),
    };
    let diagnostics = Diagnostics {
        content: content.clone(),
        ..Diagnostics::default()
    };
    let texts: Vec<&str> = content
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    if value.get("isError").and_then(Value::as_bool) == Some(true) {
        let mut text = texts.join("\n");
        if text.trim().is_empty() {
            text = "the tool reported an error without a message".into();
        }
        if text.len() > MAX_ERROR_TEXT {
            let mut cut = MAX_ERROR_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        // The blocks are kept once, in the diagnostics: an error that carried them too
        // would record them twice, and hand them to every crumb of the error.
        let err = ToolError::handler(format!("MCP server `{server}`, tool `{tool}`: {text}"))
            .with_details(json!({ "mcp_is_error": true }));
        return (Err(err), diagnostics);
    }
    let result = match value.get("structuredContent") {
        Some(s) if !s.is_null() => s.clone(),
        _ if content.is_empty() => Value::Null,
        _ if texts.len() == content.len() => Value::String(texts.join("\n")),
        _ => json!({ "content": content }),
    };
    (Ok(result), diagnostics)
}

/// Sends `notifications/cancelled` for a request unless it was answered: on our
/// timeout or cancellation, and when the call's future is dropped (the pipeline's own
/// timeout drops it).
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.peer = None;
    }

    fn fire(&mut self, reason: &str) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let note = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(self.id.clone()), Some(reason.to_owned())),
        ));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = peer.send_notification(note).await;
            });
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.fire("the call was abandoned");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_map_to_values_and_diagnostics() {
        let (r, d) = map_result(
            "s",
            "t",
            json!({"content": [{"type": "text", "text": "hi"}]}),
        );
        assert_eq!(r.ok(), Some(json!("hi")));
        assert_eq!(d.content.len(), 1);
        let (r, _) = map_result(
            "s",
            "t",
            json!({"content": [{"type": "text", "text": "{}"}], "structuredContent": {"a": 1}}),
        );
        assert_eq!(r.ok(), Some(json!({"a": 1})));
        let (r, d) = map_result(
            "s",
            "t",
            json!({"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}]}),
        );
        assert_eq!(
            r.ok()
                .and_then(|v| v.get("content").cloned())
                .map(|c| c.as_array().map(Vec::len)),
            Some(Some(2))
        );
        assert_eq!(d.content[1]["type"], "image");
        let (r, _) = map_result(
            "s",
            "t",
            json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}),
        );
        let e = r.err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.message.contains("no such file")),
            "{e:?}"
        );
        let (r, _) = map_result("s", "t", json!({"isError": true}));
        assert!(r.is_err());
    }
}
