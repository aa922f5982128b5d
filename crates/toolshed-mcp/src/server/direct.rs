//! A plain session-less `tools/call` answered without rmcp's per-request machinery.
//!
//! Why: a `2026-07-28` request has no session, so rmcp serves each one with a one-shot
//! service of its own: it parses the message through serde's buffered untagged enums,
//! re-serializes it to check the `Mcp-Method` and `Mcp-Name` headers, builds a transport
//! with its cancellation tokens and spawns two tasks. Measured with callgrind, that is
//! about 100,000 instructions per call, a third of what the whole REST execute of the
//! same tool costs (BENCHMARKS.md, "MCP"). This module answers the common call directly.
//!
//! The rule that keeps it honest: **the direct path takes only requests it is sure of,
//! and answers them exactly as rmcp would.** Anything unusual is left to rmcp, which
//! answers it (or refuses it) as before:
//! - [`wants`] looks at the headers only, before the body is read: a `POST` with no
//!   session or resumption header, exactly one `MCP-Protocol-Version: 2026-07-28`,
//!   `Mcp-Method: tools/call` and `Mcp-Name`, no `Mcp-Param-*` header, no `Origin` (a
//!   browser's request keeps rmcp's origin check), a `Host` on the allowlist,
//!   `Accept` naming both `application/json` and `text/event-stream` without
//!   parameters, a JSON `Content-Type` and a `Content-Length` within the body limit;
//! - [`parse`] reads the body into a closed shape (unknown fields anywhere mean "not
//!   mine"): `jsonrpc` `2.0`, an id, method `tools/call`, params of `name` (equal to
//!   `Mcp-Name`), `arguments` (an object) and `_meta`, which holds the protocol version
//!   `2026-07-28`, the client's capabilities, optionally its `clientInfo` and the
//!   idempotency key, and nothing else (no progress token: a watched call streams its
//!   progress, which only rmcp does).
//!
//! A test sends the same requests to a server with the direct path and to one without
//! and requires the same status, content type and body (`tests/mcp.rs` in the server).

use std::borrow::Cow;

use http::{HeaderMap, Method, StatusCode, header};
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ErrorCode, Implementation, JsonRpcVersion2_0, RequestId,
    ServerJsonRpcMessage, ServerResult,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{
    CallOptions, Gateway, GatewayError, IDEMPOTENCY_META, Inbound, McpHandler, answer_error, ask,
    check_idempotency_key, client_label, content,
};

/// The protocol version the direct path serves.
const VERSION: &str = "2026-07-28";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";

/// A `tools/call` the direct path answers, read by [`parse`].
#[derive(Debug)]
pub struct DirectCall {
    id: RequestId,
    name: String,
    arguments: Map<String, Value>,
    key: Option<Value>,
    client: String,
}

/// Whether a request with these headers may be a direct call (its body not read yet).
/// `allowed_hosts` are the `Host` names the service allows (no ports: any port);
/// `max_body` the body limit in bytes.
pub fn wants(
    method: &Method,
    headers: &HeaderMap,
    allowed_hosts: &[String],
    max_body: usize,
) -> bool {
    if method != Method::POST
        || headers.contains_key("mcp-session-id")
        || headers.contains_key("last-event-id")
        || headers.contains_key(header::ORIGIN)
        || headers.keys().any(|k| k.as_str().starts_with("mcp-param-"))
    {
        return false;
    }
    let only = |name: &str| {
        let mut all = headers.get_all(name).iter();
        match (all.next(), all.next()) {
            (Some(v), None) => v.to_str().ok(),
            _ => None,
        }
    };
    if only("mcp-protocol-version") != Some(VERSION)
        || only("mcp-method") != Some("tools/call")
        || only("mcp-name").is_none()
    {
        return false;
    }
    let host_allowed = only(header::HOST.as_str())
        .and_then(|h| http::uri::Authority::try_from(h).ok())
        .is_some_and(|a| {
            let host = a.host().trim_start_matches('[').trim_end_matches(']');
            allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
        });
    let content_type_json = only(header::CONTENT_TYPE.as_str()).is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
    });
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',') {
            let entry = entry.trim();
            if entry.contains(';') {
                // Weights and parameters: rmcp's parser decides.
                return false;
            }
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    let length_within = only(header::CONTENT_LENGTH.as_str())
        .and_then(|l| l.parse::<usize>().ok())
        .is_some_and(|l| l <= max_body);
    host_allowed && content_type_json && json && sse && length_within
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    /// Only `"2.0"` reads (rmcp's own type for it).
    #[expect(dead_code, reason = "read to check it, as rmcp does")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    method: String,
    params: Params,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(rename = "_meta")]
    meta: Map<String, Value>,
}

/// The body of a request [`wants`] took, as a direct call; `None` when it is not one
/// the direct path is sure of (rmcp then serves it).
pub fn parse(headers: &HeaderMap, body: &[u8]) -> Option<DirectCall> {
    let envelope: Envelope = serde_json::from_slice(body).ok()?;
    let Params {
        name,
        arguments,
        mut meta,
    } = envelope.params;
    let named = headers.get("mcp-name").and_then(|v| v.to_str().ok());
    if envelope.method != "tools/call" || named != Some(&name) {
        return None;
    }
    if meta.get(META_VERSION).and_then(Value::as_str) != Some(VERSION) {
        return None;
    }
    // Read as rmcp reads them: capabilities that are not MCP's shape make the
    // request's metadata malformed, which rmcp answers.
    serde_json::from_value::<ClientCapabilities>(meta.remove(META_CAPABILITIES)?).ok()?;
    let client = match meta.remove(META_CLIENT) {
        None => String::new(),
        Some(info) => {
            let info: Implementation = serde_json::from_value(info).ok()?;
            client_label(&info.name, &info.version)
        }
    };
    let key = meta.remove(IDEMPOTENCY_META);
    meta.remove(META_VERSION);
    if !meta.is_empty() {
        // A progress token, a log level or anything newer: rmcp's.
        return None;
    }
    Some(DirectCall {
        id: envelope.id,
        name,
        arguments: arguments.unwrap_or_default(),
        key,
        client,
    })
}

/// The answer to a direct call: the HTTP status and the JSON-RPC message as bytes
/// (`Content-Type: application/json`).
#[derive(Debug)]
pub struct DirectAnswer {
    /// The HTTP status, as rmcp maps a session-less request's JSON-RPC answer.
    pub status: StatusCode,
    /// The JSON-RPC response or error.
    pub body: Vec<u8>,
}

impl<G: Gateway> McpHandler<G> {
    /// Answer a direct call made by the request whose head is `parts` (its caller is
    /// in its extensions, as for every `/mcp` request): the same run, result and
    /// errors as the `tools/call` of a session-less request through rmcp.
    pub async fn answer_direct(
        &self,
        parts: &http::request::Parts,
        call: DirectCall,
    ) -> DirectAnswer {
        let DirectCall {
            id,
            name,
            arguments,
            key,
            client,
        } = call;
        tracing::debug!(tool = %name, "a session-less tools/call answered directly");
        let answered = async {
            let caller = self.caller_in(Some(parts))?;
            let key = check_idempotency_key(key.as_ref())?;
            let options = CallOptions {
                idempotency_key: key,
                events: None,
                continue_run: None,
                via: Some(Inbound {
                    era: "discover".to_owned(),
                    protocol_version: VERSION.to_owned(),
                    client,
                }),
                asker: Some(ask::sessionless()),
            };
            let outcome = self
                .gateway
                .call_tool(&caller, &name, arguments, options)
                .await
                .map_err(GatewayError::into_mcp)?;
            content::call_tool_result(&name, outcome).map_err(answer_error)
        };
        let (message, status) = match answered.await {
            Ok(result) => (
                ServerJsonRpcMessage::response(ServerResult::CallToolResult(result), id),
                StatusCode::OK,
            ),
            Err(error) => {
                let status = status_of(&error);
                (ServerJsonRpcMessage::error(error, Some(id)), status)
            }
        };
        match serde_json::to_vec(&message) {
            Ok(body) => DirectAnswer { status, body },
            Err(e) => {
                let error = ErrorData::internal_error(
                    Cow::Owned(format!("cannot serialize the answer: {e}")),
                    None,
                );
                let body = serde_json::to_vec(&ServerJsonRpcMessage::error(error, None))
                    .unwrap_or_default();
                DirectAnswer {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    body,
                }
            }
        }
    }
}

/// The HTTP status rmcp gives a session-less request's JSON-RPC error (its
/// `jsonrpc_http_status`, for a request whose metadata was well formed).
fn status_of(error: &ErrorData) -> StatusCode {
    match error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use serde_json::json;

    use super::*;

    fn headers(extra: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("host", "127.0.0.1:8080"),
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json; charset=utf-8"),
            ("content-length", "100"),
            ("mcp-protocol-version", VERSION),
            ("mcp-method", "tools/call"),
            ("mcp-name", "clock"),
        ] {
            h.insert(k, HeaderValue::from_static(v));
        }
        for (k, v) in extra {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn wanted(h: &HeaderMap) -> bool {
        wants(&Method::POST, h, &["127.0.0.1".to_owned()], 1000)
    }

    #[test]
    fn only_plain_headers_are_taken() {
        assert!(wanted(&headers(&[])));
        let mut h = headers(&[]);
        h.insert("host", HeaderValue::from_static("127.0.0.1"));
        assert!(wanted(&h), "a host without a port");
        assert!(!wants(
            &Method::GET,
            &headers(&[]),
            &["127.0.0.1".to_owned()],
            1000
        ));
        for extra in [
            ("mcp-session-id", "s1"),
            ("last-event-id", "1"),
            ("origin", "http://localhost:1"),
            ("mcp-param-city", "Paris"),
            // A second value of a header that must have one.
            ("mcp-method", "tools/call"),
            ("mcp-name", "clock"),
            ("mcp-protocol-version", VERSION),
            ("host", "127.0.0.1"),
            // Weights are rmcp's to read.
            ("accept", "text/event-stream;q=0"),
        ] {
            assert!(!wanted(&headers(&[extra])), "{extra:?}");
        }
        for (k, v) in [
            ("host", "evil.example.com"),
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/list"),
            ("content-type", "text/plain"),
            ("accept", "application/json"),
            ("content-length", "1001"),
            ("content-length", "many"),
        ] {
            let mut h = headers(&[]);
            h.insert(k, HeaderValue::from_static(v));
            assert!(!wanted(&h), "{k}: {v}");
        }
        let mut h = headers(&[]);
        h.remove("content-length");
        assert!(!wanted(&h), "no length: a streamed body is rmcp's");
    }

    fn body(params: serde_json::Value) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params})
            .to_string()
            .into_bytes()
    }

    fn meta() -> serde_json::Value {
        json!({META_VERSION: VERSION, META_CAPABILITIES: {}, META_CLIENT: {"name": "c\u{7}li", "version": "2"}})
    }

    #[test]
    fn only_a_closed_shape_of_body_is_taken() {
        let h = headers(&[]);
        let call = parse(
            &h,
            &body(json!({"name": "clock", "arguments": {"a": 1}, "_meta": meta()})),
        )
        .expect("a plain call");
        assert_eq!(call.name, "clock");
        assert_eq!(call.arguments["a"], 1);
        assert_eq!(call.client, "cli 2", "printable, as rmcp's path records it");
        assert_eq!(call.key, None);
        let mut keyed = meta();
        keyed[IDEMPOTENCY_META] = json!("k-1");
        let call = parse(&h, &body(json!({"name": "clock", "_meta": keyed}))).unwrap();
        assert_eq!(call.key, Some(json!("k-1")));
        assert!(call.arguments.is_empty());

        let mut progress = meta();
        progress["progressToken"] = json!("p");
        let mut old = meta();
        old[META_VERSION] = json!("2025-11-25");
        let mut no_caps = meta();
        no_caps.as_object_mut().unwrap().remove(META_CAPABILITIES);
        let mut bad_info = meta();
        bad_info[META_CLIENT] = json!("me");
        for (what, b) in [
            ("another name", body(json!({"name": "other", "_meta": meta()}))),
            ("a progress token", body(json!({"name": "clock", "_meta": progress}))),
            ("an older version", body(json!({"name": "clock", "_meta": old}))),
            ("no capabilities", body(json!({"name": "clock", "_meta": no_caps}))),
            ("a malformed clientInfo", body(json!({"name": "clock", "_meta": bad_info}))),
            ("no _meta", body(json!({"name": "clock"}))),
            ("arguments not an object", body(json!({"name": "clock", "arguments": [], "_meta": meta()}))),
            ("an unknown param", body(json!({"name": "clock", "task": {}, "_meta": meta()}))),
            ("a null id", json!({"jsonrpc": "2.0", "id": null, "method": "tools/call", "params": {"name": "clock", "_meta": meta()}}).to_string().into_bytes()),
            ("another method", json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"name": "clock", "_meta": meta()}}).to_string().into_bytes()),
            ("JSON-RPC 1", json!({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "clock", "_meta": meta()}}).to_string().into_bytes()),
            ("a batch", b"[]".to_vec()),
            ("not JSON", b"{\"jsonrpc\"".to_vec()),
        ] {
            assert!(parse(&h, &b).is_none(), "{what}");
        }
    }
}
