//! What an execution leaves besides its result: stdout, stderr, exit code, signal,
//! limits hit (and, once the sandbox and MCP arrive, resource figures and content
//! blocks). A handler returns them with its output ([`crate::Reply`]); the pipeline
//! scrubs and caps them, and [`crate::CallOutcome`] carries them to every caller.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::credentials::{Secret, scrub, scrub_value};

/// The diagnostics of one execution. Empty for in-process tools; a subprocess tool
/// fills the process fields. Serialized with every empty field left out, so it can be
/// stored as JSON beside a call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    /// What the process wrote to stdout (for a subprocess tool: its protocol lines).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout: String,
    /// What the process wrote to stderr (its log).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// The exit code, when the process exited on its own and was waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the process (9 when it was killed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The call ran out of time and was stopped.
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    /// `stdout` holds only the end of what was written.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdout_truncated: bool,
    /// `stderr` holds only the end of what was written.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stderr_truncated: bool,
    /// Peak resident memory in bytes, where the launcher measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// CPU time (user and system) in milliseconds, where the launcher measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    /// The process was killed for going over its memory limit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub oom_killed: bool,
    /// Content blocks the tool sent beside its result (MCP `content`), as received.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Value>,
    /// `content` holds only the first blocks: the rest were over the call's output
    /// budget (see [`crate::budget`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub content_truncated: bool,
    /// Partial results of a streaming call that were not published: past the most a
    /// call may publish (see [`crate::budget`]). The call's result is still its last.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub partials_dropped: u64,
    /// For a call to an MCP server's tool: which server and tool, over which protocol
    /// era and version (what `runs show` prints beside the call's timing). Boxed: most
    /// calls are not MCP calls, and every call carries a `Diagnostics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Box<McpCall>>,
    /// The questions the tool asked the client of the call (elicitation, sampling),
    /// in order: what was asked and how it ended, never the answer's content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<crate::ask::AskRecord>,
}

/// The MCP side of one call (`Diagnostics::mcp`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCall {
    /// The MCP server's name (its registry entry's or agent.yaml's).
    pub server: String,
    /// The tool's name as the server names it.
    pub tool: String,
    /// `legacy` (`initialize`) or `discover` (`server/discover`); empty when the call
    /// never got a connection.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub era: String,
    /// The negotiated protocol version, e.g. `2025-11-25`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_version: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Diagnostics {
    /// Whether nothing at all was reported.
    pub fn is_empty(&self) -> bool {
        // Field by field (every field named, so a new one cannot be forgotten) rather
        // than against a `Diagnostics::default()`: the pipeline asks this of every
        // handler's reply.
        let Diagnostics {
            stdout,
            stderr,
            exit_code,
            signal,
            timed_out,
            stdout_truncated,
            stderr_truncated,
            peak_memory_bytes,
            cpu_time_ms,
            oom_killed,
            content,
            content_truncated,
            partials_dropped,
            mcp,
            asks,
        } = self;
        stdout.is_empty()
            && stderr.is_empty()
            && exit_code.is_none()
            && signal.is_none()
            && !timed_out
            && !stdout_truncated
            && !stderr_truncated
            && peak_memory_bytes.is_none()
            && cpu_time_ms.is_none()
            && !oom_killed
            && content.is_empty()
            && !content_truncated
            && *partials_dropped == 0
            && mcp.is_none()
            && asks.is_empty()
    }

    /// Replace every secret value in the text fields and content blocks with
    /// `[REDACTED]` (see [`crate::credentials::scrub`]).
    pub fn scrub(&mut self, secrets: &[Secret]) {
        if secrets.is_empty() {
            return;
        }
        for text in [&mut self.stdout, &mut self.stderr] {
            if let Some(clean) = scrub(text, secrets) {
                *text = clean;
            }
        }
        self.content
            .iter_mut()
            .for_each(|block| scrub_value(block, secrets));
    }

    /// Keep at most `max_bytes` of `stdout` and of `stderr` (their ends, where a log's
    /// last words are), setting the truncated flag of a field that was cut.
    pub fn cap(&mut self, max_bytes: usize) {
        if keep_tail(&mut self.stdout, max_bytes) {
            self.stdout_truncated = true;
        }
        if keep_tail(&mut self.stderr, max_bytes) {
            self.stderr_truncated = true;
        }
    }
}

/// Cut `text` to its last `max` bytes at a character boundary; whether it was cut.
fn keep_tail(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.drain(..start);
    true
}

/// Where a handler leaves what it has seen so far when its future is dropped before it
/// returns (the pipeline timed the call out, or the run was cancelled). A dropped future
/// cannot return anything, so the handler's own guard records its diagnostics here on
/// drop and the pipeline reads them; a handler that returns puts its diagnostics in its
/// [`crate::Reply`] instead. Each execution gets its own sink in its
/// [`crate::ToolContext`]. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct DiagnosticsSink {
    left: Arc<Mutex<Option<Diagnostics>>>,
}

impl DiagnosticsSink {
    /// Record the diagnostics seen so far (the last record counts).
    pub fn record(&self, diagnostics: Diagnostics) {
        if let Ok(mut left) = self.left.lock() {
            *left = Some(diagnostics);
        }
    }

    /// Take what was recorded, if anything.
    pub fn take(&self) -> Option<Diagnostics> {
        self.left.lock().ok().and_then(|mut left| left.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_fields_are_left_out_and_read_back() {
        assert_eq!(
            serde_json::to_string(&Diagnostics::default()).unwrap(),
            "{}"
        );
        let d = Diagnostics {
            stderr: "boom\n".into(),
            exit_code: Some(3),
            timed_out: true,
            ..Diagnostics::default()
        };
        let text = serde_json::to_string(&d).unwrap();
        assert_eq!(
            text,
            r#"{"stderr":"boom\n","exit_code":3,"timed_out":true}"#
        );
        assert_eq!(serde_json::from_str::<Diagnostics>(&text).unwrap(), d);
        assert_eq!(
            serde_json::from_str::<Diagnostics>("{}").unwrap(),
            Diagnostics::default()
        );
    }

    #[test]
    fn caps_keep_the_end_on_a_char_boundary_and_flag_the_cut() {
        let mut d = Diagnostics {
            stdout: "short".into(),
            stderr: "ééé-the end".into(),
            ..Diagnostics::default()
        };
        d.cap(9);
        assert_eq!(d.stdout, "short");
        assert!(!d.stdout_truncated);
        // 9 bytes from the end would split an `é`: the cut moves past it.
        assert_eq!(d.stderr, "-the end");
        assert!(d.stderr_truncated);
    }

    #[test]
    fn secrets_are_scrubbed_from_text_and_content() {
        let mut d = Diagnostics {
            stdout: "{\"result\":\"key-1234\"}".into(),
            stderr: "using key-1234\n".into(),
            content: vec![serde_json::json!({"type": "text", "text": "key-1234"})],
            ..Diagnostics::default()
        };
        d.scrub(&[Secret::new("key-1234")]);
        let text = serde_json::to_string(&d).unwrap();
        assert!(!text.contains("key-1234"), "{text}");
        assert_eq!(d.stderr, "using [REDACTED]\n");
    }

    #[test]
    fn a_sink_hands_over_the_last_record_once() {
        let sink = DiagnosticsSink::default();
        assert_eq!(sink.take(), None);
        sink.record(Diagnostics {
            stdout: "a".into(),
            ..Diagnostics::default()
        });
        sink.clone().record(Diagnostics {
            stdout: "b".into(),
            ..Diagnostics::default()
        });
        assert_eq!(sink.take().unwrap().stdout, "b");
        assert_eq!(sink.take(), None);
    }
}
