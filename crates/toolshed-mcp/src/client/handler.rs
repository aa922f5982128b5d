//! The client side of the session: rmcp's `ClientHandler`, which counts
//! `notifications/tools/list_changed`, and [`Tap`], the transport wrapper that routes
//! progress to the call that asked for it.
//!
//! One [`Shared`] lives as long as the server's [`Connection`](super::conn::Connection),
//! across restarts, so a `changes()` receiver keeps working after the process is
//! replaced.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig as RmcpClientConfig, Implementation,
    ProgressNotificationParam, ProgressToken, ProtocolVersion,
};
use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{NotificationContext, RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, watch};

/// How many progress notifications of one call wait unread before more are dropped
/// (a server flooding progress must not grow memory).
pub(crate) const PROGRESS_BUFFER: usize = 64;

/// How long progress for a token nobody watches is kept.
const ORPHAN_TTL: Duration = Duration::from_secs(5);

/// State the handler shares with the connection.
pub(crate) struct Shared {
    progress: Mutex<HashMap<String, mpsc::Sender<ProgressNotificationParam>>>,
    /// Progress for a token no call watches yet: a call learns its token only once
    /// rmcp has queued the request, and a quick server may answer with progress
    /// before the call registers. Kept briefly, bounded; handed over on registration.
    orphans: Mutex<VecDeque<(Instant, String, ProgressNotificationParam)>>,
    changes: watch::Sender<u64>,
}

impl Shared {
    pub(crate) fn new() -> Arc<Shared> {
        Arc::new(Shared {
            progress: Mutex::new(HashMap::new()),
            orphans: Mutex::new(VecDeque::new()),
            changes: watch::channel(0).0,
        })
    }

    /// Hands a progress notification to the call that asked for it.
    fn route_progress(&self, params: &ProgressNotificationParam) {
        let key = token_key(&params.progress_token);
        let progress = lock(&self.progress);
        match progress.get(&key) {
            // Full: the call is not reading fast enough; a dropped progress is harmless.
            Some(tx) => {
                let _ = tx.try_send(params.clone());
            }
            None => {
                let mut orphans = lock(&self.orphans);
                let now = Instant::now();
                orphans.retain(|(at, _, _)| now.duration_since(*at) < ORPHAN_TTL);
                if orphans.len() >= PROGRESS_BUFFER {
                    orphans.pop_front();
                }
                orphans.push_back((now, key, params.clone()));
            }
        }
    }

    /// A receiver of the list-changed counter.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The counter now.
    pub(crate) fn changed_count(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Routes the progress of `token` to the returned receiver until the guard drops.
    pub(crate) fn watch_progress(
        self: &Arc<Self>,
        token: &ProgressToken,
    ) -> (mpsc::Receiver<ProgressNotificationParam>, ProgressGuard) {
        let (tx, rx) = mpsc::channel(PROGRESS_BUFFER);
        let key = token_key(token);
        // Under the routing lock: nothing is routed between the hand-over and the
        // registration, so the order is kept.
        let mut progress = lock(&self.progress);
        lock(&self.orphans).retain(|(_, k, p)| {
            if *k == key {
                let _ = tx.try_send(p.clone());
                false
            } else {
                true
            }
        });
        progress.insert(key.clone(), tx);
        drop(progress);
        (
            rx,
            ProgressGuard {
                shared: self.clone(),
                key,
            },
        )
    }
}

/// Unregisters a call's progress route when dropped.
pub(crate) struct ProgressGuard {
    shared: Arc<Shared>,
    key: String,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        lock(&self.shared.progress).remove(&self.key);
    }
}

fn token_key(token: &ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock leaves a plain map behind: still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The handler one session runs with.
pub(crate) struct Handler {
    pub(crate) shared: Arc<Shared>,
    pub(crate) info: RmcpClientConfig,
}

impl Handler {
    pub(crate) fn new(shared: Arc<Shared>) -> Handler {
        let mut info = RmcpClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolshed", env!("CARGO_PKG_VERSION")),
        );
        // rmcp's default is the newest version, which has no `initialize`: the legacy
        // handshake asks for the newest version that has one.
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        Handler { shared, info }
    }
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.shared.changes.send_modify(|n| *n += 1);
        std::future::ready(())
    }

    fn get_info(&self) -> RmcpClientConfig {
        self.info.clone()
    }
}

/// A transport that routes progress notifications as they are read, in order, before
/// the answer that follows them, and keeps them from rmcp. rmcp hands notifications to the handler on tasks of
/// their own, so the handler may see a call's last progress after its answer, or two
/// progress notifications swapped; read here, they cannot be.
pub(crate) struct Tap<T> {
    pub(crate) inner: T,
    pub(crate) shared: Arc<Shared>,
}

impl<T: Transport<RoleClient> + 'static> Transport<RoleClient> for Tap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if let JsonRpcMessage::Notification(n) = &message
                && let ServerNotification::ProgressNotification(p) = &n.notification
            {
                // Routed here, and not handed on: rmcp would start a task for each
                // notification, and a server flooding progress would grow the tasks
                // faster than they end (the handler does nothing with progress).
                self.shared.route_progress(&p.params);
                continue;
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}
