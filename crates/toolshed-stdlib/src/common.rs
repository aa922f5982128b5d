//! What the built-ins that reach a service share: error results the model can act on,
//! secrets kept out of them, and schemas from Rust types.

use serde_json::{Value, json};
use toolshed_core::{ToolError, ToolOutput};

/// The error result of a built-in: `HANDLER_ERROR` with `details` saying what kind of
/// failure it was (`kind`), whether the same call may succeed later (`retryable`) and,
/// when the service said so, after how many seconds (`retry_after_seconds`).
///
/// Every message goes through [`scrub`] with the call's secrets before it is built, so
/// an API key or a database password never reaches the model, a crumb or the journal.
pub(crate) fn failure(
    kind: &str,
    message: impl Into<String>,
    retryable: bool,
    retry_after_seconds: Option<u64>,
    secrets: &[&str],
) -> ToolError {
    let mut details = json!({"kind": kind, "retryable": retryable});
    if let Some(s) = retry_after_seconds {
        details["retry_after_seconds"] = json!(s);
    }
    ToolError::handler(scrub(&message.into(), secrets)).with_details(details)
}

/// `text` with every non-trivial secret replaced by `[REDACTED]`.
pub(crate) fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        // A one- or two-character "secret" would shred the message and protects nothing.
        if s.len() >= 3 && out.contains(s) {
            out = out.replace(s, "[REDACTED]");
        }
    }
    out
}

/// The JSON Schema of a type, without the `$schema` and `title` keys.
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> Value {
    let mut value = schemars::SchemaGenerator::default()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
    }
    value
}

/// A result value as a handler output.
pub(crate) fn output<T: serde::Serialize>(value: &T) -> Result<ToolOutput, ToolError> {
    serde_json::to_value(value)
        .map(ToolOutput::Value)
        .map_err(|e| ToolError::handler(format!("cannot encode the result: {e}")))
}

/// `text` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_replaces_secrets_and_ignores_tiny_ones() {
        assert_eq!(
            scrub("key tvly-abc refused", &["tvly-abc", "x"]),
            "key [REDACTED] refused"
        );
        assert_eq!(clip("héllo", 2), "h…");
        assert_eq!(clip("abc", 5), "abc");
    }
}
