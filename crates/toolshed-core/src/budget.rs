//! The output budget of one call: the most bytes of what a call produced that may
//! reach memory past its reader, an answer or the journal.
//!
//! One number ([`crate::PipelineConfig::max_output_bytes`], 1 MiB by default) bounds
//! everything a call can leave behind:
//! - **while reading**: a handler that reads a process, a file, an MCP server or an
//!   HTTP answer stops at [`crate::ToolContext::output_budget`] (plus its own framing),
//!   so an oversized output is never held whole;
//! - **when the call ends** ([`fit`], in the pipeline, before the final crumb, the
//!   journal or any answer sees the outcome):
//!   - a result over the budget becomes a `RESULT_TOO_LARGE` error result;
//!   - an error over [`error_cap`] keeps its code, its message is cut with a marker
//!     and its details are replaced by a note of their size;
//!   - content blocks keep the first ones that fit what the result left of the
//!     budget (`Diagnostics::content_truncated`);
//! - **partials**: at most [`MAX_PARTIALS`] partial results and the budget in bytes
//!   are published; later ones are counted in `Diagnostics::partials_dropped`, and the
//!   stream's last value is still the result.
//!
//! stdout and stderr tails have their own, smaller cap
//! ([`crate::PipelineConfig::max_diagnostic_bytes`]).

use serde_json::{Value, json};

use crate::diagnostics::Diagnostics;
use crate::error::{ErrorCode, ToolError};

/// The default output budget of a call: 1 MiB.
pub const DEFAULT_OUTPUT_BYTES: usize = 1024 * 1024;

/// The most partial results of one call that are published as crumbs.
pub const MAX_PARTIALS: u32 = 1000;

/// The most bytes an error result (message and details) may take: a sixteenth of the
/// budget, and at least 4 KiB. An error is read by a model; a longer one says no more.
pub fn error_cap(budget: usize) -> usize {
    (budget / 16).max(4096)
}

/// The size of `v` as compact JSON, counting no further than `limit + 1` bytes (so a
/// huge value is not walked whole): `None` when it is larger than `limit`.
pub fn json_size_within(v: &Value, limit: usize) -> Option<usize> {
    let mut counter = Counter { bytes: 0, limit };
    match serde_json::to_writer(&mut counter, v) {
        Ok(()) => Some(counter.bytes),
        Err(_) => None,
    }
}

/// An `io::Write` that counts, and fails once past its limit.
struct Counter {
    bytes: usize,
    limit: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes = self.bytes.saturating_add(buf.len());
        if self.bytes > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fit a finished call's result and diagnostics into `budget` bytes (see the module
/// docs). `tool` names the tool in the messages.
pub fn fit(
    tool: &str,
    budget: usize,
    result: &mut Result<Value, ToolError>,
    diagnostics: Option<&mut Diagnostics>,
) {
    let used = match result {
        Ok(v) => match json_size_within(v, budget) {
            Some(n) => n,
            None => {
                *result = Err(too_large(tool, budget));
                0
            }
        },
        Err(e) => fit_error(e, budget),
    };
    if let Some(d) = diagnostics
        && !d.content.is_empty()
    {
        fit_content(d, budget.saturating_sub(used));
    }
}

/// The `RESULT_TOO_LARGE` error of a result over the budget.
pub fn too_large(tool: &str, budget: usize) -> ToolError {
    ToolError::new(
        ErrorCode::ResultTooLarge,
        format!(
            "the result of {tool} is larger than the call's output budget of {budget} bytes; \
             return less (a summary, a page, or a blob URI)"
        ),
    )
    .with_details(json!({ "output_budget_bytes": budget }))
}

/// Cut an error over [`error_cap`]: its code stays, its message is cut at a character
/// boundary with a marker, and its details are replaced by a note of their size. The
/// bytes it takes afterwards.
fn fit_error(e: &mut ToolError, budget: usize) -> usize {
    let cap = error_cap(budget);
    let details = e
        .details
        .as_ref()
        .map_or(Some(0), |d| json_size_within(d, cap));
    let message = e.message.len();
    if let Some(d) = details
        && d.saturating_add(message) <= cap
    {
        return d + message;
    }
    if details.is_none() {
        e.details = Some(json!({
            "truncated": true,
            "why": format!("the error's details were larger than its cap of {cap} bytes"),
        }));
    }
    let room = cap.saturating_sub(e.details.as_ref().map_or(0, |d| d.to_string().len()));
    if e.message.len() > room {
        let mut cut = room.saturating_sub(128);
        while cut > 0 && !e.message.is_char_boundary(cut) {
            cut -= 1;
        }
        let dropped = e.message.len() - cut;
        e.message.truncate(cut);
        e.message.push_str(&format!(
            "… [{dropped} more bytes cut: the error was over its cap of {cap} bytes]"
        ));
    }
    cap
}

/// Keep the content blocks that fit in `room` bytes, in order.
fn fit_content(d: &mut Diagnostics, room: usize) {
    let mut used = 0usize;
    let mut keep = 0usize;
    for block in &d.content {
        match json_size_within(block, room.saturating_sub(used)) {
            Some(n) => {
                used += n;
                keep += 1;
            }
            None => break,
        }
    }
    if keep < d.content.len() {
        d.content.truncate(keep);
        d.content_truncated = true;
    }
}

/// What one call has published of its partial results: whether the next one may be.
#[derive(Debug, Clone, Copy)]
pub struct PartialBudget {
    published: u32,
    bytes: usize,
    budget: usize,
    /// Partials not published.
    pub dropped: u64,
}

impl PartialBudget {
    /// A call's partial budget, under its output budget.
    pub fn new(budget: usize) -> Self {
        PartialBudget {
            published: 0,
            bytes: 0,
            budget,
            dropped: 0,
        }
    }

    /// Whether `v` may be published; counts it either way.
    pub fn admit(&mut self, v: &Value) -> bool {
        if self.published >= MAX_PARTIALS {
            self.dropped += 1;
            return false;
        }
        match json_size_within(v, self.budget.saturating_sub(self.bytes)) {
            Some(n) => {
                self.bytes += n;
                self.published += 1;
                true
            }
            None => {
                self.dropped += 1;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_counted_up_to_the_limit() {
        let v = json!({"a": "x".repeat(100)});
        let n = v.to_string().len();
        assert_eq!(json_size_within(&v, n), Some(n));
        assert_eq!(json_size_within(&v, n - 1), None);
    }

    #[test]
    fn a_result_over_the_budget_becomes_result_too_large() {
        let mut r = Ok(json!("x".repeat(2000)));
        fit("t", 1000, &mut r, None);
        let e = r.unwrap_err();
        assert_eq!(e.code, ErrorCode::ResultTooLarge);
        assert!(e.message.contains("output budget of 1000 bytes"), "{e:?}");
        let mut r = Ok(json!("x".repeat(500)));
        fit("t", 1000, &mut r, None);
        assert!(r.is_ok());
    }

    #[test]
    fn an_error_over_its_cap_keeps_its_code_and_is_cut_with_a_marker() {
        let budget = 64 * 1024;
        let cap = error_cap(budget);
        let mut r: Result<Value, ToolError> =
            Err(ToolError::new(ErrorCode::HandlerError, "é".repeat(cap))
                .with_details(json!({"content": vec!["y".repeat(100); 1000]})));
        fit("t", budget, &mut r, None);
        let e = r.unwrap_err();
        assert_eq!(e.code, ErrorCode::HandlerError);
        assert!(
            e.message.contains("more bytes cut"),
            "{}",
            &e.message[e.message.len() - 100..]
        );
        assert_eq!(e.details.as_ref().unwrap()["truncated"], true);
        let size = serde_json::to_string(&e).unwrap().len();
        assert!(size <= cap + 256, "{size} > {cap}");
        // A small error is left alone.
        let small = ToolError::handler("boom").with_details(json!({"k": 1}));
        let mut r: Result<Value, ToolError> = Err(small.clone());
        fit("t", budget, &mut r, None);
        assert_eq!(r.unwrap_err(), small);
    }

    #[test]
    fn content_blocks_keep_what_fits_beside_the_result() {
        let block = json!({"type": "text", "text": "z".repeat(90)});
        let one = block.to_string().len();
        let mut d = Diagnostics {
            content: vec![block; 100],
            ..Diagnostics::default()
        };
        let mut r = Ok(json!("r"));
        fit("t", 10 * one + 3, &mut r, Some(&mut d));
        assert_eq!(d.content.len(), 10);
        assert!(d.content_truncated);
    }

    #[test]
    fn partials_stop_at_their_count_and_bytes() {
        let mut p = PartialBudget::new(1024 * 1024);
        let v = json!({"progress": 1});
        let admitted = (0..MAX_PARTIALS + 500).filter(|_| p.admit(&v)).count();
        assert_eq!(admitted, MAX_PARTIALS as usize);
        assert_eq!(p.dropped, 500);
        let mut p = PartialBudget::new(100);
        assert!(p.admit(&json!("x".repeat(50))));
        assert!(!p.admit(&json!("x".repeat(50))));
        assert_eq!(p.dropped, 1);
    }
}
