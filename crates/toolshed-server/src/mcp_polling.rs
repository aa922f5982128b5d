//! SSE polling for long `/mcp` calls (SEP-1699): a session's POST stream that has not
//! ended after `--mcp-sse-close-after` is closed by the server, and the client resumes
//! it with a GET carrying `Last-Event-ID`, which replays what it missed (the answer
//! included) from the session's cache.
//!
//! Why: a call may wait minutes (an approval, a slow tool, a person answering an
//! elicitation), and proxies between client and server drop connections held that
//! long. Closing on our side, after the priming event that tells the client its event
//! id and when to reconnect, turns a dropped connection into a planned poll.
//!
//! rmcp's session worker ignores a stream nobody reads (as its own `close_sse_stream`
//! does), so ending the stream we hand to HTTP is all a close takes. The resume needs
//! the events kept: rmcp's own cache of a request's stream goes with its answer, so a
//! client that comes back after the answer was sent would find nothing. An
//! [`ReplayStore`] (rmcp's `EventStore`) keeps each request stream's events until a
//! minute after its answer, and a resumed stream replays what came after the client's
//! `Last-Event-ID`, then follows the call live until its answer. Off unless the
//! operator sets it: a client that cannot resume would lose the answer, and nothing is
//! stored when it is off.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionError};
use rmcp::transport::streamable_http_server::session::store::{
    EventId, EventStore, EventStoreError, EventStream,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use toolshed_mcp::server::sessions::Sessions;

/// rmcp's local session manager, with POST streams closed after `close_after`, and
/// the table of sessions the direct path serves fed with what passes.
#[derive(Default)]
pub(crate) struct PollingSessions {
    inner: LocalSessionManager,
    close_after: Option<Duration>,
    /// The event store, when polling is on.
    store: Option<Arc<ReplayStore>>,
    /// The sessions whose plain calls may be answered directly
    /// ([`toolshed_mcp::server::sessions`]); `None` when the direct path is off.
    direct: Option<Arc<Sessions>>,
}

impl PollingSessions {
    /// Sessions whose POST streams close after `close_after` (never when `None`),
    /// feeding `direct` when given.
    pub(crate) fn new(close_after: Option<Duration>, direct: Option<Arc<Sessions>>) -> Self {
        let mut inner = LocalSessionManager::default();
        let store = close_after.map(|_| Arc::new(ReplayStore::default()));
        if let Some(store) = &store {
            inner = inner.with_event_store(store.clone());
        }
        PollingSessions {
            inner,
            close_after,
            store,
            direct,
        }
    }

    /// Tell the direct path's table that `message` (or a stream) of session `id` goes
    /// to rmcp's worker.
    fn seen(&self, id: &SessionId, message: Option<&ClientJsonRpcMessage>) {
        if let Some(direct) = &self.direct {
            direct.seen(id, message);
        }
    }
}

/// How long a request stream's events are kept after its answer.
const KEEP_AFTER_ANSWER: Duration = Duration::from_secs(60);

/// The most events kept of one stream (the oldest go first): a call that floods
/// progress cannot fill the server's memory.
const MAX_EVENTS: usize = 1000;

/// Each request stream's events, in memory, for resumes (rmcp's `EventStore`). Event
/// ids are `STREAM/N`: rmcp names a request's stream by a random UUID, so an id names
/// one stream of one session and cannot be guessed. The session's common stream (GET)
/// is not kept: its resume starts afresh.
#[derive(Default)]
pub(crate) struct ReplayStore {
    state: Arc<Mutex<Streams>>,
}

#[derive(Default)]
struct Streams {
    logs: HashMap<String, Log>,
    /// Streams whose answer was sent, oldest first: evicted after `KEEP_AFTER_ANSWER`.
    answered: VecDeque<(Instant, String)>,
}

struct Log {
    /// The number the next event gets.
    next: u64,
    /// The kept events and their numbers.
    events: VecDeque<(u64, ServerSseMessage)>,
    answered: bool,
    /// Wakes the streams replaying this one when an event is added.
    added: Arc<tokio::sync::Notify>,
    /// The session whose request the stream answers: only it may resume the stream.
    session: Option<SessionId>,
}

impl Log {
    fn new() -> Log {
        Log {
            next: 0,
            events: VecDeque::new(),
            answered: false,
            added: Arc::new(tokio::sync::Notify::new()),
            session: None,
        }
    }
}

/// The stream an event id (`STREAM/N`) names.
fn stream_of(event_id: &str) -> Option<&str> {
    event_id.rsplit_once('/').map(|(stream, _)| stream)
}

impl ReplayStore {
    /// Record that the stream of `event_id` answers `session` (the first time only).
    fn claim(&self, event_id: &str, session: &SessionId) {
        let (Some(stream), Ok(mut state)) = (stream_of(event_id), self.state.lock()) else {
            return;
        };
        if let Some(log) = state.logs.get_mut(stream)
            && log.session.is_none()
        {
            log.session = Some(session.clone());
        }
    }

    /// Whether `session` may resume from `event_id`: the stream answers that session.
    /// Another session (another caller, perhaps another tenant, who learnt an event
    /// id) gets nothing.
    fn owned_by(&self, event_id: &str, session: &SessionId) -> bool {
        let (Some(stream), Ok(state)) = (stream_of(event_id), self.state.lock()) else {
            return false;
        };
        state
            .logs
            .get(stream)
            .is_some_and(|log| log.session.as_ref() == Some(session))
    }
}

fn is_answer(event: &ServerSseMessage) -> bool {
    matches!(
        event.message.as_deref(),
        Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
    )
}

/// What a replay has seen of one stream.
struct Seen {
    /// The events after this number, and whether the stream has its answer.
    events: Vec<(u64, ServerSseMessage)>,
    answered: bool,
    added: Arc<tokio::sync::Notify>,
}

/// The events of `stream` after number `after` (`None`: the stream is unknown, or was
/// evicted).
fn after(state: &Mutex<Streams>, stream: &str, after: u64) -> Option<Seen> {
    let state = state.lock().ok()?;
    let log = state.logs.get(stream)?;
    Some(Seen {
        events: log
            .events
            .iter()
            .filter(|(n, _)| *n > after)
            .cloned()
            .collect(),
        answered: log.answered,
        added: log.added.clone(),
    })
}

/// A replay in progress: the events still to send, and where it stands.
struct Cursor {
    state: Arc<Mutex<Streams>>,
    stream: String,
    last: u64,
    pending: VecDeque<ServerSseMessage>,
    answered: bool,
    /// The stream's wake-up, told of every event added.
    added: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl EventStore for ReplayStore {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| EventStoreError::from("the replay store's lock is poisoned"))?;
        let now = Instant::now();
        while let Some((at, _)) = state.answered.front()
            && now.duration_since(*at) > KEEP_AFTER_ANSWER
        {
            if let Some((_, gone)) = state.answered.pop_front() {
                state.logs.remove(&gone);
            }
        }
        if stream_id.ends_with(":common") {
            // Not kept: numbered for the client, never replayed.
            return Ok(format!("{stream_id}/0"));
        }
        let log = state
            .logs
            .entry(stream_id.to_owned())
            .or_insert_with(Log::new);
        let n = log.next;
        log.next += 1;
        let id = format!("{stream_id}/{n}");
        let mut kept = event.clone();
        kept.event_id = Some(id.clone());
        if log.events.len() == MAX_EVENTS {
            log.events.pop_front();
        }
        log.events.push_back((n, kept));
        let answered = is_answer(event);
        log.answered |= answered;
        log.added.notify_waiters();
        if answered {
            state.answered.push_back((now, stream_id.to_owned()));
        }
        Ok(id)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let (stream, last) = last_event_id
            .rsplit_once('/')
            .and_then(|(s, n)| Some((s.to_owned(), n.parse::<u64>().ok()?)))
            .ok_or_else(|| {
                EventStoreError::from(format!(
                    "`{last_event_id}` is not an event id of this server"
                ))
            })?;
        let Some(first) = after(&self.state, &stream, last) else {
            return Err(EventStoreError::from(format!(
                "no stream has the event `{last_event_id}` (its answer was sent more than {} s ago, or it never was)",
                KEEP_AFTER_ANSWER.as_secs()
            )));
        };
        // What came after the client's last event, then the call live until its answer.
        let cursor = Cursor {
            state: self.state.clone(),
            stream,
            last,
            pending: VecDeque::new(),
            answered: false,
            added: first.added,
        };
        let replay = futures_util::stream::unfold(cursor, |mut c| async move {
            loop {
                if let Some(event) = c.pending.pop_front() {
                    return Some((event, c));
                }
                if c.answered {
                    return None;
                }
                // Registered before the look, so an event added right after it wakes us.
                let added = c.added.clone();
                let notified = added.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let seen = after(&c.state, &c.stream, c.last)?;
                c.answered = seen.answered;
                for (n, event) in seen.events {
                    c.last = n;
                    c.pending.push_back(event);
                }
                if c.pending.is_empty() && !c.answered {
                    notified.await;
                }
            }
        });
        Ok(Box::pin(replay))
    }
}

type Inner = LocalSessionManager;

impl SessionManager for PollingSessions {
    type Error = <Inner as SessionManager>::Error;
    type Transport = <Inner as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let hello = self.direct.as_ref().and_then(|_| Sessions::hello(&message));
        let answer = self.inner.initialize_session(id, message).await?;
        if let (Some(direct), Some(hello)) = (&self.direct, hello) {
            direct.initialized(id, hello, &answer);
        }
        Ok(answer)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        if let Some(direct) = &self.direct {
            direct.closed(id);
        }
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.seen(id, Some(&message));
        let stream = self.inner.create_stream(id, message).await?;
        // Each event that reaches this session's client binds its stream to the session
        // before the client can know the id (it learns ids only from these events).
        let store = self.store.clone();
        let session = id.clone();
        let stream = stream.inspect(move |event| {
            if let (Some(store), Some(event_id)) = (&store, &event.event_id) {
                store.claim(event_id, &session);
            }
        });
        Ok(self.closing(stream))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.seen(id, Some(&message));
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.seen(id, None);
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // A resumed stream stays open until the answer (a client that polls once gets
        // it there); should the connection drop, the client resumes again from the
        // last event it got.
        if let Some(store) = &self.store
            && !store.owned_by(&last_event_id, id)
        {
            // rmcp answers a failed resume with an empty stream that ends at once.
            return Err(SessionError::InvalidEventId.into());
        }
        self.seen(id, None);
        self.inner.resume(id, last_event_id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

impl PollingSessions {
    /// `stream`, ended at the deadline unless it ended first (its answer sent).
    fn closing<S>(&self, stream: S) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static
    where
        S: Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    {
        match self.close_after {
            Some(after) => stream.take_until(tokio::time::sleep(after)).left_stream(),
            None => stream.right_stream(),
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{JsonRpcResponse, NumberOrString, RequestId, ServerResult};

    use super::*;

    fn answer(id: i64) -> ServerSseMessage {
        let response = JsonRpcResponse {
            jsonrpc: Default::default(),
            id: RequestId::from(NumberOrString::Number(id)),
            result: ServerResult::empty(()),
        };
        ServerSseMessage::from_message(ServerJsonRpcMessage::Response(response))
    }

    fn priming() -> ServerSseMessage {
        ServerSseMessage::priming("", Duration::from_secs(3))
    }

    #[tokio::test]
    async fn a_replay_sends_what_came_after_the_last_event_then_follows_live_to_the_answer() {
        let store = ReplayStore::default();
        let first = store.store_event("s1", &priming()).await.unwrap();
        let second = store.store_event("s1", &priming()).await.unwrap();
        assert_eq!((first.as_str(), second.as_str()), ("s1/0", "s1/1"));
        let mut replay = store.replay_events_after(&first).await.unwrap();
        // What the client missed comes first, with the id it was given.
        let got = replay.next().await.unwrap();
        assert_eq!(got.event_id.as_deref(), Some("s1/1"));
        // Then the answer, stored while the replay waits, and the replay ends.
        let waiting = tokio::spawn(async move {
            let got = replay.next().await.unwrap();
            (got, replay.next().await.is_none())
        });
        tokio::task::yield_now().await;
        store.store_event("s1", &answer(7)).await.unwrap();
        let (got, ended) = waiting.await.unwrap();
        assert_eq!(got.event_id.as_deref(), Some("s1/2"));
        assert!(is_answer(&got) && ended);
        // A resume after the answer replays it and ends at once.
        let late: Vec<_> = store
            .replay_events_after(&second)
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(late.len(), 1);
        assert!(is_answer(&late[0]));
    }

    #[tokio::test]
    async fn unknown_and_malformed_ids_are_refused_and_the_common_stream_is_not_kept() {
        let store = ReplayStore::default();
        assert!(store.replay_events_after("nope/0").await.is_err());
        assert!(store.replay_events_after("no-number").await.is_err());
        assert!(store.replay_events_after("s1/x").await.is_err());
        let id = store.store_event("sess:common", &priming()).await.unwrap();
        assert!(store.replay_events_after(&id).await.is_err());
    }

    #[tokio::test]
    async fn only_the_session_whose_stream_it_is_may_resume_it() {
        let store = ReplayStore::default();
        let id = store.store_event("s1", &priming()).await.unwrap();
        let (a, b): (SessionId, SessionId) = ("session-a".into(), "session-b".into());
        // Not yet seen by any session's client: nobody may resume.
        assert!(!store.owned_by(&id, &a));
        store.claim(&id, &a);
        // Another session that learnt the id cannot take the stream over.
        store.claim(&id, &b);
        assert!(store.owned_by(&id, &a));
        assert!(!store.owned_by(&id, &b));
        assert!(!store.owned_by("s2/0", &a), "an unknown stream");
        assert!(!store.owned_by("no-number", &a));
    }

    #[tokio::test]
    async fn a_stream_keeps_its_last_thousand_events() {
        let store = ReplayStore::default();
        for _ in 0..MAX_EVENTS + 5 {
            store.store_event("s1", &priming()).await.unwrap();
        }
        let kept: Vec<_> = store
            .replay_events_after("s1/0")
            .await
            .unwrap()
            .take(MAX_EVENTS + 5)
            .take_until(tokio::time::sleep(Duration::from_millis(50)))
            .collect()
            .await;
        assert_eq!(kept.len(), MAX_EVENTS);
        assert_eq!(kept[0].event_id.as_deref(), Some("s1/5"));
    }
}
