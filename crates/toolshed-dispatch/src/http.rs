//! HTTP endpoints: the call is a JSON POST of `{"tool", "args", "context"}`; a 2xx JSON
//! answer is the result, anything else an error result quoting what came back.

use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{DispatchError, excerpt};
use crate::protocol::CallContext;

/// How much of a bad body an error quotes.
const EXCERPT_CHARS: usize = 300;

/// POST one call. Credentials are not sent: an HTTP service holds its own.
pub(crate) async fn post(
    client: &reqwest::Client,
    url: &str,
    tool: &str,
    args: &Value,
    context: &CallContext,
    timeout: Option<Duration>,
    cap: usize,
) -> Result<Value, DispatchError> {
    let body = json!({"tool": tool, "args": args, "context": context});
    let mut request = client
        .post(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .json(&body);
    if let Some(key) = &context.idempotency_key {
        request = request.header("Idempotency-Key", key);
    }
    if let Some(t) = timeout {
        request = request.timeout(t);
    }
    let transport = |source: reqwest::Error| {
        if source.is_timeout() {
            DispatchError::Timeout {
                tool: tool.to_owned(),
                ms: timeout.map(|t| t.as_millis()).unwrap_or_default(),
            }
        } else {
            DispatchError::Http {
                tool: tool.to_owned(),
                url: url.to_owned(),
                source,
            }
        }
    };
    let mut response = request.send().await.map_err(transport)?;
    let too_large = || DispatchError::HttpTooLarge {
        tool: tool.to_owned(),
        url: url.to_owned(),
        cap,
    };
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    let status = response.status();
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if bytes.len() + chunk.len() > cap {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    let text = || excerpt(&String::from_utf8_lossy(&bytes), EXCERPT_CHARS);
    if !status.is_success() {
        let body = text();
        return Err(DispatchError::HttpStatus {
            tool: tool.to_owned(),
            url: url.to_owned(),
            status: status.as_u16(),
            excerpt: if body.trim().is_empty() {
                "(empty body)".into()
            } else {
                body
            },
        });
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|_| DispatchError::HttpNotJson {
        tool: tool.to_owned(),
        url: url.to_owned(),
        excerpt: text(),
    })
}
