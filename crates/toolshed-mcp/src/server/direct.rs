//! A plain `tools/call` answered without rmcp's per-request machinery: session-less
//! (`2026-07-28`) and in a session of the `initialize` era (`2025-11-25` and before).
//!
//! Why: rmcp serves a session-less request with a one-shot service of its own: it
//! parses the message through serde's buffered untagged enums, re-serializes it to
//! check the `Mcp-Method` and `Mcp-Name` headers, builds a transport with its
//! cancellation tokens and spawns two tasks. A session's request goes through the
//! session worker's routing loop, a request-wise channel, a task per request and an
//! SSE stream that opens with a priming event. Measured with callgrind, either is
//! about 100,000 instructions per call, a third of what the whole REST execute of the
//! same tool costs (BENCHMARKS.md, "MCP"). This module answers the common call directly.
//!
//! The rule that keeps it honest: **the direct path takes only requests it is sure of,
//! and answers them as rmcp would.** Anything unusual is left to rmcp, which answers it
//! (or refuses it) as before:
//! - [`wants`] looks at the headers only, before the body is read. Both routes need a
//!   `POST` with no resumption header (`Last-Event-ID`), no `Mcp-Param-*` header, no
//!   `Origin` (a browser's request keeps rmcp's origin check), a `Host` on the
//!   allowlist, `Accept` naming both `application/json` and `text/event-stream` without
//!   parameters, a JSON `Content-Type` and a `Content-Length` within the body limit.
//!   - Session-less ([`Route::Sessionless`]): no session header, exactly one
//!     `MCP-Protocol-Version: 2026-07-28`, `Mcp-Method: tools/call` and `Mcp-Name`.
//!   - In a session ([`Route::Session`]): exactly one `Mcp-Session-Id` and one
//!     `MCP-Protocol-Version`, and no `Mcp-Method` or `Mcp-Name` (the initialize era has
//!     none; a client that sends them gets rmcp's check of them).
//! - [`parse`] reads the body into a closed shape (unknown fields anywhere mean "not
//!   mine"): `jsonrpc` `2.0`, an id, method `tools/call`, params of `name`, `arguments`
//!   (an object) and `_meta`. Session-less, `name` equals `Mcp-Name` and `_meta` holds
//!   the protocol version `2026-07-28`, the client's capabilities, optionally its
//!   `clientInfo` and the idempotency key. In a session, `_meta` (optional) holds only
//!   the idempotency key. Never a progress token: a watched call streams its progress,
//!   which only rmcp does.
//! - In a session, [`Sessions::servable`](super::sessions::Sessions::servable) adds what
//!   only the session knows: the call is direct only when the client can answer no
//!   questions (no `elicitation` or `sampling` capability), set no log level, spoke the
//!   session's protocol version in the header, and the session's worker saw a message
//!   recently (so rmcp's idle timer never closes a session in use;
//!   [`super::sessions`]).
//!
//! A session's direct answer is one JSON body where rmcp sends an SSE stream of one
//! event: the transport allows either for a request's answer, and every client must
//! read both. What the direct answer gives up is the stream's resumability. rmcp's
//! stream opens with an event id, so a client whose connection drops during a long
//! call can resume it and still get the answer; a direct call whose connection drops
//! loses its answer, as a REST call does. The operator who turns on SSE polling
//! (`--mcp-sse-close-after`) for long calls keeps every session call on rmcp.
//!
//! A test sends the same requests to a server with the direct path and to one without
//! and requires the same answers (`tests/mcp.rs` in the server): session-less, the same
//! status, content type and body; in a session, the same JSON-RPC message.

use std::borrow::Cow;

use http::{HeaderMap, Method, StatusCode, header};
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ErrorCode, Implementation, JsonRpcVersion2_0, RequestId,
    ServerJsonRpcMessage, ServerResult,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::sessions::InSession;
use super::{
    CallOptions, CallOutcome, Gateway, GatewayError, IDEMPOTENCY_META, Inbound, McpHandler,
    answer_error, approve, ask, check_idempotency_key, client_label, content,
};

/// The protocol version of the session-less route.
const VERSION: &str = "2026-07-28";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";

/// Which direct call a request's headers promise ([`wants`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A `2026-07-28` request, with no session.
    Sessionless,
    /// A request in the session of this id (`Mcp-Session-Id`), sent with this
    /// `MCP-Protocol-Version`.
    Session {
        /// The session's id, as the client sent it.
        id: String,
        /// The protocol version the request's header names.
        version: String,
    },
}

/// A `tools/call` the direct path answers, read by [`parse`].
#[derive(Debug)]
pub struct DirectCall {
    id: RequestId,
    name: String,
    arguments: Map<String, Value>,
    key: Option<Value>,
    client: String,
    /// Session-less, the client declared `elicitation`: a pending approval is asked of
    /// it ([`super::approve`]).
    elicits: bool,
}

impl DirectCall {
    /// The JSON-RPC id of the request.
    pub fn id(&self) -> &RequestId {
        &self.id
    }
}

/// Whether a request with these headers may be a direct call (its body not read yet),
/// and of which route. `allowed_hosts` are the `Host` names the service allows (no
/// ports: any port); `max_body` the body limit in bytes.
pub fn wants(
    method: &Method,
    headers: &HeaderMap,
    allowed_hosts: &[String],
    max_body: usize,
) -> Option<Route> {
    if method != Method::POST
        || headers.contains_key("last-event-id")
        || headers.contains_key(header::ORIGIN)
        || headers.keys().any(|k| k.as_str().starts_with("mcp-param-"))
    {
        return None;
    }
    let only = |name: &str| {
        let mut all = headers.get_all(name).iter();
        match (all.next(), all.next()) {
            (Some(v), None) => v.to_str().ok(),
            _ => None,
        }
    };
    let route = if headers.contains_key("mcp-session-id") {
        if headers.contains_key("mcp-method") || headers.contains_key("mcp-name") {
            return None;
        }
        Route::Session {
            id: only("mcp-session-id")?.to_owned(),
            version: only("mcp-protocol-version")?.to_owned(),
        }
    } else {
        if only("mcp-protocol-version") != Some(VERSION)
            || only("mcp-method") != Some("tools/call")
            || only("mcp-name").is_none()
        {
            return None;
        }
        Route::Sessionless
    };
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
        let value = value.to_str().ok()?;
        for entry in value.split(',') {
            let entry = entry.trim();
            if entry.contains(';') {
                // Weights and parameters: rmcp's parser decides.
                return None;
            }
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    let length_within = only(header::CONTENT_LENGTH.as_str())
        .and_then(|l| l.parse::<usize>().ok())
        .is_some_and(|l| l <= max_body);
    (host_allowed && content_type_json && json && sse && length_within).then_some(route)
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
    #[serde(rename = "_meta", default)]
    meta: Option<Map<String, Value>>,
}

/// The body of a request [`wants`] took for `route`, as a direct call; `None` when it
/// is not one the direct path is sure of (rmcp then serves it).
pub fn parse(headers: &HeaderMap, body: &[u8], route: &Route) -> Option<DirectCall> {
    let envelope: Envelope = serde_json::from_slice(body).ok()?;
    let Params {
        name,
        arguments,
        meta,
    } = envelope.params;
    if envelope.method != "tools/call" {
        return None;
    }
    let mut meta = meta.unwrap_or_default();
    let (client, elicits) = match route {
        Route::Sessionless => {
            let named = headers.get("mcp-name").and_then(|v| v.to_str().ok());
            if named != Some(&name)
                || meta.remove(META_VERSION).as_ref().and_then(Value::as_str) != Some(VERSION)
            {
                return None;
            }
            // Read as rmcp reads them: capabilities that are not MCP's shape make the
            // request's metadata malformed, which rmcp answers.
            let capabilities =
                serde_json::from_value::<ClientCapabilities>(meta.remove(META_CAPABILITIES)?)
                    .ok()?;
            let client = match meta.remove(META_CLIENT) {
                None => String::new(),
                Some(info) => {
                    let info: Implementation = serde_json::from_value(info).ok()?;
                    client_label(&info.name, &info.version)
                }
            };
            (client, capabilities.elicitation.is_some())
        }
        // The session's client is the one its `initialize` named; one that declared
        // `elicitation` is never served here.
        Route::Session { .. } => (String::new(), false),
    };
    let key = meta.remove(IDEMPOTENCY_META);
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
        elicits,
    })
}

const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// The answer to a direct call: the JSON-RPC message as one JSON body, or (a call its
/// client cancelled) an event stream that ends with no message.
#[derive(Debug)]
pub struct DirectAnswer {
    /// The HTTP status, as rmcp maps the request's JSON-RPC answer.
    pub status: StatusCode,
    /// `application/json`, or `text/event-stream` for the empty stream.
    pub content_type: &'static str,
    /// The JSON-RPC response or error (nothing after a cancellation).
    pub body: Vec<u8>,
}

impl<G: Gateway> McpHandler<G> {
    /// Answer a direct call made by the request whose head is `parts` (its caller is
    /// in its extensions, as for every `/mcp` request), in `session` when it has one:
    /// the same run, result and errors as the `tools/call` of the same request through
    /// rmcp.
    pub async fn answer_direct(
        &self,
        parts: &http::request::Parts,
        call: DirectCall,
        session: Option<InSession>,
    ) -> DirectAnswer {
        let DirectCall {
            id,
            name,
            arguments,
            key,
            client,
            elicits,
        } = call;
        let (via, asker) = match &session {
            None => {
                tracing::debug!(tool = %name, "a session-less tools/call answered directly");
                let via = Inbound {
                    era: "discover".to_owned(),
                    protocol_version: VERSION.to_owned(),
                    client,
                };
                (via, ask::sessionless())
            }
            Some(s) => {
                tracing::debug!(tool = %name, "a tools/call of a session answered directly");
                let via = Inbound {
                    era: "legacy".to_owned(),
                    protocol_version: s.protocol_version().to_owned(),
                    client: s.client().to_owned(),
                };
                // Only a client that declared neither capability is served here.
                (via, ask::undeclared())
            }
        };
        // `Err(None)`: the client cancelled the call.
        let answered = async {
            let caller = self.caller_in(Some(parts))?;
            let key = check_idempotency_key(key.as_ref())?;
            let options = CallOptions {
                idempotency_key: key,
                events: None,
                continue_run: None,
                via: Some(via),
                asker: Some(asker),
            };
            // Kept only for the approval's form, which shows them.
            let asked_args = elicits.then(|| arguments.clone());
            let called = self.gateway.call_tool(&caller, &name, arguments, options);
            let outcome = match &session {
                None => called.await,
                Some(s) => tokio::select! {
                    outcome = called => outcome,
                    // The client cancelled (`notifications/cancelled`): dropping the call
                    // stops its tool, and the runtime ends its run `cancelled`.
                    () = s.cancelled() => return Err(None),
                },
            };
            let outcome = outcome.map_err(GatewayError::into_mcp)?;
            if let (
                CallOutcome::PendingApproval {
                    run_id,
                    four_eyes: false,
                    reason,
                    ..
                },
                Some(args),
            ) = (&outcome, &asked_args)
            {
                // As rmcp's path answers it (`McpHandler::call_sessionless`).
                let asked = approve::input_required(&name, reason, args, run_id)?;
                return Ok(ServerResult::InputRequiredResult(asked));
            }
            Ok::<ServerResult, Option<ErrorData>>(ServerResult::CallToolResult(
                content::call_tool_result(&name, outcome).map_err(answer_error)?,
            ))
        };
        let (message, status) = match answered.await {
            Ok(mut result) => {
                if session.is_some() {
                    // As rmcp: a session is of the initialize era, whose results never
                    // carried `resultType`.
                    result.strip_result_type_for_legacy_peer();
                }
                (ServerJsonRpcMessage::response(result, id), StatusCode::OK)
            }
            Err(Some(error)) => {
                // A session's answer is a message of its stream: 200 whatever it says.
                let status = match session {
                    None => status_of(&error),
                    Some(_) => StatusCode::OK,
                };
                (ServerJsonRpcMessage::error(error, Some(id)), status)
            }
            // What rmcp does: a cancelled request gets no answer, so its stream ends
            // with none.
            Err(None) => {
                return DirectAnswer {
                    status: StatusCode::OK,
                    content_type: EVENT_STREAM,
                    body: Vec::new(),
                };
            }
        };
        match serde_json::to_vec(&message) {
            Ok(body) => DirectAnswer {
                status,
                content_type: JSON,
                body,
            },
            Err(e) => {
                let error = ErrorData::internal_error(
                    Cow::Owned(format!("cannot serialize the answer: {e}")),
                    None,
                );
                let body = serde_json::to_vec(&ServerJsonRpcMessage::error(error, None))
                    .unwrap_or_default();
                DirectAnswer {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    content_type: JSON,
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
        wants(&Method::POST, h, &["127.0.0.1".to_owned()], 1000) == Some(Route::Sessionless)
    }

    #[test]
    fn only_plain_headers_are_taken() {
        assert!(wanted(&headers(&[])));
        let mut h = headers(&[]);
        h.insert("host", HeaderValue::from_static("127.0.0.1"));
        assert!(wanted(&h), "a host without a port");
        assert!(wants(&Method::GET, &headers(&[]), &["127.0.0.1".to_owned()], 1000).is_none());
        for extra in [
            // A session's request, with the session-less era's headers: rmcp's.
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
            &Route::Sessionless,
        )
        .expect("a plain call");
        assert_eq!(call.name, "clock");
        assert_eq!(call.arguments["a"], 1);
        assert_eq!(call.client, "cli 2", "printable, as rmcp's path records it");
        assert_eq!(call.key, None);
        let mut keyed = meta();
        keyed[IDEMPOTENCY_META] = json!("k-1");
        let call = parse(
            &h,
            &body(json!({"name": "clock", "_meta": keyed})),
            &Route::Sessionless,
        )
        .unwrap();
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
            assert!(parse(&h, &b, &Route::Sessionless).is_none(), "{what}");
        }
    }
    fn session_headers(extra: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = headers(&[]);
        h.remove("mcp-method");
        h.remove("mcp-name");
        h.insert(
            "mcp-protocol-version",
            HeaderValue::from_static("2025-11-25"),
        );
        h.insert("mcp-session-id", HeaderValue::from_static("s1"));
        for (k, v) in extra {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn session_route() -> Route {
        Route::Session {
            id: "s1".into(),
            version: "2025-11-25".into(),
        }
    }

    #[test]
    fn a_session_request_names_its_session_and_version_and_nothing_of_the_new_era() {
        let allowed = ["127.0.0.1".to_owned()];
        let route = |h: &HeaderMap| wants(&Method::POST, h, &allowed, 1000);
        assert_eq!(route(&session_headers(&[])), Some(session_route()));
        for extra in [
            ("mcp-session-id", "s2"),
            ("mcp-protocol-version", "2025-11-25"),
            // The new era's headers in a session: rmcp checks them.
            ("mcp-method", "tools/call"),
            ("mcp-name", "clock"),
            ("mcp-param-city", "Paris"),
            ("last-event-id", "1"),
            ("origin", "http://localhost:1"),
        ] {
            assert_eq!(route(&session_headers(&[extra])), None, "{extra:?}");
        }
        let mut h = session_headers(&[]);
        h.remove("mcp-protocol-version");
        assert_eq!(route(&h), None, "no version: rmcp assumes one");
        let mut h = session_headers(&[]);
        h.insert("host", HeaderValue::from_static("evil.example.com"));
        assert_eq!(route(&h), None, "a foreign host");
    }

    #[test]
    fn a_session_call_carries_at_most_an_idempotency_key_in_its_meta() {
        let h = session_headers(&[]);
        let route = session_route();
        let call = parse(
            &h,
            &body(json!({"name": "clock", "arguments": {"a": 1}})),
            &route,
        )
        .expect("a plain call");
        assert_eq!((call.name.as_str(), call.key.clone()), ("clock", None));
        assert_eq!(call.client, "", "the session's client is its initialize's");
        let keyed = json!({"name": "clock", "_meta": {IDEMPOTENCY_META: "k-1"}});
        let call = parse(&h, &body(keyed), &route).expect("a keyed call");
        assert_eq!(call.key, Some(json!("k-1")));
        for (what, params) in [
            (
                "a progress token",
                json!({"name": "clock", "_meta": {"progressToken": 1}}),
            ),
            (
                "the new era's metadata",
                json!({"name": "clock", "_meta": meta()}),
            ),
            (
                "arguments not an object",
                json!({"name": "clock", "arguments": "x"}),
            ),
            ("an unknown param", json!({"name": "clock", "task": {}})),
        ] {
            assert!(parse(&h, &body(params), &route).is_none(), "{what}");
        }
    }
}
