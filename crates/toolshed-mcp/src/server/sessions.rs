//! What the direct path needs to know of the sessions of `/mcp` (the `initialize`
//! era), kept beside rmcp's own session manager, which feeds it.
//!
//! rmcp keeps a session's state in its session worker: the client's capabilities, the
//! log level, the request streams. A `tools/call` answered directly
//! ([`super::direct`]) never reaches that worker, so it may be answered directly only
//! when nothing of that state matters to it:
//! - the client declared neither `elicitation` nor `sampling` (nobody can be asked a
//!   question over a JSON answer; such a client's calls keep rmcp's peer);
//! - the client never sent `logging/setLevel` (log messages stream with the call);
//! - the request's `MCP-Protocol-Version` is the one the session negotiated;
//! - the session's worker saw a message of the session within the last
//!   [`Sessions::FRESH_FOR`]. rmcp closes a session whose worker has been idle for five
//!   minutes (its `keep_alive`), and direct calls do not reach the worker: a session
//!   used only for direct calls would close while in use. Once a minute at most, one
//!   call goes through rmcp instead, and resets that timer.
//!
//! `notifications/cancelled` reaches rmcp's worker, which knows nothing of a direct
//! call: [`Sessions::seen`] cancels the direct call of that id.
//!
//! **Invariant:** a session is in the table only between rmcp's answer to its
//! `initialize` ([`Sessions::initialized`]) and its close ([`Sessions::closed`]); rmcp
//! closes every session through the session manager that feeds this table (a `DELETE`,
//! its idle timer, its worker's end), so a direct call never serves a session rmcp
//! has closed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, RequestId, ServerJsonRpcMessage,
    ServerResult,
};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::client_label;
use super::direct::DirectCall;

/// The sessions a direct call may be answered in: one per `initialize` rmcp answered.
#[derive(Debug)]
pub struct Sessions {
    table: RwLock<HashMap<String, Arc<Session>>>,
    fresh_for: Duration,
    epoch: Instant,
}

/// One session, as its `initialize` and its later messages described it.
#[derive(Debug)]
pub struct Session {
    protocol_version: String,
    client: String,
    /// The client declared `elicitation` or `sampling`.
    can_answer: bool,
    /// The client sent `logging/setLevel`.
    wants_logs: AtomicBool,
    /// When a message of the session last went to rmcp's worker, in milliseconds
    /// since [`Sessions::epoch`].
    last_seen: AtomicU64,
    /// The direct calls in flight, by JSON-RPC id: their cancellation.
    in_flight: Mutex<HashMap<RequestId, CancellationToken>>,
}

/// What a client's `initialize` says that the direct path needs: read before rmcp
/// takes the message ([`Sessions::hello`]).
#[derive(Debug)]
pub struct Hello {
    client: String,
    can_answer: bool,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(Sessions::FRESH_FOR)
    }
}

impl Sessions {
    /// How recently the session's worker must have seen a message for a call to skip
    /// it: a fifth of rmcp's idle timeout (five minutes).
    pub const FRESH_FOR: Duration = Duration::from_secs(60);

    /// An empty table whose sessions stay fresh for `fresh_for` after a message.
    pub fn new(fresh_for: Duration) -> Self {
        Sessions {
            table: RwLock::new(HashMap::new()),
            fresh_for,
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// What `message` says of its client, when it is an `initialize` request.
    pub fn hello(message: &ClientJsonRpcMessage) -> Option<Hello> {
        let ClientJsonRpcMessage::Request(request) = message else {
            return None;
        };
        let ClientRequest::InitializeRequest(init) = &request.request else {
            return None;
        };
        let caps = &init.params.capabilities;
        Some(Hello {
            client: client_label(
                &init.params.client_info.name,
                &init.params.client_info.version,
            ),
            can_answer: caps.elicitation.is_some() || caps.sampling.is_some(),
        })
    }

    /// rmcp answered the `initialize` of session `id` with `answer`: the session is
    /// served from now on, at the protocol version the answer names. An error answer,
    /// or a version without `initialize`, adds nothing.
    pub fn initialized(&self, id: &str, hello: Hello, answer: &ServerJsonRpcMessage) {
        let ServerJsonRpcMessage::Response(response) = answer else {
            return;
        };
        let ServerResult::InitializeResult(result) = &response.result else {
            return;
        };
        if !result.protocol_version.has_initialize() {
            return;
        }
        let session = Session {
            protocol_version: result.protocol_version.as_str().to_owned(),
            client: hello.client,
            can_answer: hello.can_answer,
            wants_logs: AtomicBool::new(false),
            last_seen: AtomicU64::new(self.now()),
            in_flight: Mutex::new(HashMap::new()),
        };
        if let Ok(mut table) = self.table.write() {
            table.insert(id.to_owned(), Arc::new(session));
        }
    }

    /// A message of session `id` goes to rmcp's worker (`None`: a stream was opened or
    /// resumed): the worker's idle timer starts again; a log level turns the direct path
    /// off for the session; a cancellation reaches the direct call it names.
    pub fn seen(&self, id: &str, message: Option<&ClientJsonRpcMessage>) {
        let Some(session) = self.get(id) else {
            return;
        };
        session.last_seen.store(self.now(), Ordering::Relaxed);
        match message {
            Some(ClientJsonRpcMessage::Request(request))
                if matches!(request.request, ClientRequest::SetLevelRequest(_)) =>
            {
                session.wants_logs.store(true, Ordering::Relaxed);
            }
            Some(ClientJsonRpcMessage::Notification(notification)) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(request_id) = &cancelled.params.request_id
                    && let Ok(in_flight) = session.in_flight.lock()
                    && let Some(token) = in_flight.get(request_id)
                {
                    token.cancel();
                }
            }
            _ => {}
        }
    }

    /// Session `id` was closed. Its direct calls in flight go on to their answers, each
    /// on its own connection: a durable run is better finished than abandoned. (rmcp
    /// gives its own calls of a closed session a few seconds, then cancels them; a call
    /// quiet for five minutes has its session closed under it by the idle timer.)
    pub fn closed(&self, id: &str) {
        if let Ok(mut table) = self.table.write() {
            table.remove(id);
        }
    }

    fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.table.read().ok()?.get(id).cloned()
    }

    /// Session `id`, when a plain call sent in it with `MCP-Protocol-Version: version`
    /// may be answered directly (the module's rules). Read from the headers alone, so
    /// a request for rmcp goes there before its body is read.
    pub fn servable(&self, id: &str, version: &str) -> Option<Arc<Session>> {
        let session = self.get(id)?;
        let fresh = self
            .now()
            .saturating_sub(session.last_seen.load(Ordering::Relaxed))
            < u64::try_from(self.fresh_for.as_millis()).unwrap_or(u64::MAX);
        let servable = session.protocol_version == version
            && !session.can_answer
            && !session.wants_logs.load(Ordering::Relaxed)
            && fresh;
        servable.then_some(session)
    }

    /// Whether no session is served.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.table.read().map(|t| t.is_empty()).unwrap_or(true)
    }
}

impl Session {
    /// `call` as a direct call in flight in this session; `None` when another request
    /// of the session with the same id is in flight (rmcp then answers this one).
    pub fn start(self: &Arc<Self>, call: &DirectCall) -> Option<InSession> {
        let token = CancellationToken::new();
        {
            let mut in_flight = self.in_flight.lock().ok()?;
            if in_flight.contains_key(call.id()) {
                return None;
            }
            in_flight.insert(call.id().clone(), token.clone());
        }
        Some(InSession {
            session: self.clone(),
            id: call.id().clone(),
            token,
        })
    }
}

/// A direct call in flight in a session; it leaves the session's calls in flight when
/// dropped.
#[derive(Debug)]
pub struct InSession {
    session: Arc<Session>,
    id: RequestId,
    token: CancellationToken,
}

impl InSession {
    /// The protocol version the session negotiated.
    pub fn protocol_version(&self) -> &str {
        &self.session.protocol_version
    }

    /// The client as its `initialize` named it (printable, capped).
    pub fn client(&self) -> &str {
        &self.session.client
    }

    /// Completes when the client cancels the call (`notifications/cancelled`).
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }
}

impl Drop for InSession {
    fn drop(&mut self) {
        if let Ok(mut in_flight) = self.session.in_flight.lock() {
            in_flight.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::server::direct::{Route, parse};

    fn message(value: serde_json::Value) -> ClientJsonRpcMessage {
        serde_json::from_value(value).expect("a client message")
    }

    fn initialize(caps: serde_json::Value) -> ClientJsonRpcMessage {
        message(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": caps,
            "clientInfo": {"name": "c\u{7}li", "version": "2"}}}),
        )
    }

    fn answer(version: &str) -> ServerJsonRpcMessage {
        serde_json::from_value(json!({"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": version, "capabilities": {},
            "serverInfo": {"name": "toolshed", "version": "1"}}}))
        .expect("an initialize answer")
    }

    fn call(id: u32) -> DirectCall {
        let route = Route::Session {
            id: "s".into(),
            version: "2025-11-25".into(),
        };
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "clock", "arguments": {}}});
        parse(&http::HeaderMap::new(), body.to_string().as_bytes(), &route).expect("a plain call")
    }

    /// What the gateway does: the session's rules, then the call in flight.
    fn taken(sessions: &Sessions, id: &str, version: &str, call: &DirectCall) -> Option<InSession> {
        sessions.servable(id, version)?.start(call)
    }

    fn served(fresh_for: Duration, caps: serde_json::Value) -> Sessions {
        let sessions = Sessions::new(fresh_for);
        let hello = Sessions::hello(&initialize(caps)).expect("an initialize");
        sessions.initialized("s", hello, &answer("2025-11-25"));
        sessions
    }

    #[test]
    fn a_plain_session_serves_direct_calls_at_its_own_version_only() {
        let sessions = served(Sessions::FRESH_FOR, json!({"roots": {}}));
        let direct = taken(&sessions, "s", "2025-11-25", &call(1)).expect("direct");
        assert_eq!(
            direct.client(),
            "cli 2",
            "printable, as rmcp's path records it"
        );
        assert_eq!(direct.protocol_version(), "2025-11-25");
        assert!(
            taken(&sessions, "s", "2025-06-18", &call(2)).is_none(),
            "another version"
        );
        assert!(
            taken(&sessions, "other", "2025-11-25", &call(2)).is_none(),
            "unknown"
        );
        // The same id twice in flight: the second is rmcp's; once the first is done,
        // the id is free again.
        assert!(taken(&sessions, "s", "2025-11-25", &call(1)).is_none());
        drop(direct);
        assert!(taken(&sessions, "s", "2025-11-25", &call(1)).is_some());
        sessions.closed("s");
        assert!(
            taken(&sessions, "s", "2025-11-25", &call(1)).is_none(),
            "closed"
        );
        assert!(sessions.is_empty());
    }

    #[test]
    fn clients_that_can_answer_or_want_logs_keep_rmcp() {
        for caps in [json!({"elicitation": {}}), json!({"sampling": {}})] {
            let sessions = served(Sessions::FRESH_FOR, caps.clone());
            assert!(
                taken(&sessions, "s", "2025-11-25", &call(1)).is_none(),
                "{caps}"
            );
        }
        let sessions = served(Sessions::FRESH_FOR, json!({}));
        let ping = message(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
        sessions.seen("s", Some(&ping));
        assert!(taken(&sessions, "s", "2025-11-25", &call(1)).is_some());
        let level = message(
            json!({"jsonrpc": "2.0", "id": 4, "method": "logging/setLevel",
            "params": {"level": "info"}}),
        );
        sessions.seen("s", Some(&level));
        assert!(taken(&sessions, "s", "2025-11-25", &call(2)).is_none());
    }

    #[test]
    fn a_stale_session_sends_its_next_call_through_the_worker() {
        let sessions = served(Duration::ZERO, json!({}));
        assert!(taken(&sessions, "s", "2025-11-25", &call(1)).is_none());
        let sessions = served(Duration::from_secs(3600), json!({}));
        sessions.seen("s", None);
        assert!(taken(&sessions, "s", "2025-11-25", &call(1)).is_some());
    }

    #[test]
    fn only_a_successful_initialize_of_an_initialize_era_adds_a_session() {
        let sessions = Sessions::default();
        let hello = || Sessions::hello(&initialize(json!({}))).expect("an initialize");
        let error: ServerJsonRpcMessage = serde_json::from_value(
            json!({"jsonrpc": "2.0", "id": 0, "error": {"code": -32602, "message": "no"}}),
        )
        .unwrap();
        sessions.initialized("a", hello(), &error);
        sessions.initialized("b", hello(), &answer("2026-07-28"));
        assert!(sessions.is_empty());
        let ping = message(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
        assert!(Sessions::hello(&ping).is_none());
    }

    #[test]
    fn a_cancellation_reaches_the_direct_call_it_names_only() {
        let sessions = served(Sessions::FRESH_FOR, json!({}));
        let one = taken(&sessions, "s", "2025-11-25", &call(1)).unwrap();
        let two = taken(&sessions, "s", "2025-11-25", &call(2)).unwrap();
        let cancel = message(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "user"}}),
        );
        sessions.seen("s", Some(&cancel));
        assert!(two.token.is_cancelled());
        assert!(!one.token.is_cancelled());
        // Another session's cancellation of the same id touches nothing here.
        sessions.seen("other", Some(&cancel));
        assert!(!one.token.is_cancelled());
    }
}
