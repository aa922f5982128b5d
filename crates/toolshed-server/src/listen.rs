//! The accept loop: HTTP/1 connections served by hyper under a connection cap, a
//! header-read timeout and an idle timeout, so slow or silent clients cannot hold the
//! server's file descriptors. `axum::serve` offers none of the three, hence this loop.
//!
//! - **Connection cap.** A connection holds a permit of a semaphore from accept to
//!   close. With every permit out, the loop *stops accepting*: new connections wait in
//!   the kernel's listen backlog (holding no descriptor of ours) and are served, in
//!   order, as permits come back. Accept-and-close would instead drop the newest
//!   connection, which is the honest client's as often as not, while the idle ones
//!   that filled the cap keep their places until their timeout.
//! - **Idle timeout.** A connection with no request in progress and no byte of a new
//!   one (a fresh connection, a kept-alive one between requests, or one whose client
//!   stopped reading the answer) is closed once it has moved no byte for this long.
//! - **Header timeout.** Once the first byte of a request arrives, its whole head must
//!   arrive within this long.
//!
//! A request in progress (its handler running) is bounded by the request timeout
//! instead. Answers are whole bodies (no route streams), so a request ends when its
//! handler does, and writing the answer out is then watched by the idle timeout.

use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::limits::ConnectionLimits;

/// Serve `app` on `listener` until `shutdown` completes; then stop accepting, let every
/// connection finish its request in progress, and return once all are closed.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let permits = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(permits));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        // A permit first: at the cap, the next connection stays in the backlog.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                // A streamed answer (an MCP tools/call's SSE events) is several small
                // writes: with Nagle on, the last one waits for the client's delayed
                // ACK (~40 ms). Failing to set it only costs latency.
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let stop = stop_rx.clone();
                tokio::spawn(async move {
                    connection(stream, peer, app, limits, stop).await;
                    drop(permit);
                });
            }
            Err(e) => accept_failed(e).await,
        }
    }
    drop(listener);
    // Every connection finishes its request in progress and closes; idle ones close now.
    let _ = stop_tx.send(true);
    let all = u32::try_from(permits).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// An accept error. A connection's own failure is skipped; anything else (out of file
/// descriptors, most likely) is logged and waited out for a second, as hyper 0.14 and
/// `axum::serve` do, instead of spinning.
async fn accept_failed(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Serve one connection until it closes, times out, or the server stops.
async fn connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            // The peer's address on every request, as `axum::serve` gives it: the login
            // limiter counts attempts per address.
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let request = RequestGuard::begin(activity.clone());
            let app = app.clone();
            async move {
                let answer = app.oneshot(req).await;
                drop(request);
                answer
            }
        })
    };
    let mut builder = Builder::new(TokioExecutor::new());
    // The timeouts are this module's (hyper's header timer would also run between
    // kept-alive requests, making it the idle timeout too).
    builder.http1().header_read_timeout(None);
    let mut conn = pin!(builder.serve_connection_with_upgrades(io, service));
    let mut check = pin!(tokio::time::sleep(limits.check_interval()));
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "connection ended with an error");
                }
                return;
            }
            changed = stop.changed(), if !stopping => {
                stopping = true;
                if changed.is_err() || *stop.borrow() {
                    conn.as_mut().graceful_shutdown();
                }
            }
            () = check.as_mut() => match activity.deadline(&limits) {
                Next::Expired(why) => {
                    tracing::debug!(reason = why, "closing a connection");
                    // Dropping the connection closes the socket.
                    return;
                }
                Next::CheckAt(at) => check.as_mut().reset(at),
            },
        }
    }
}

/// What a connection did last, for its timeouts: written by its socket and its
/// requests, read by its watchdog. Times are milliseconds since `start`.
struct Activity {
    start: Instant,
    /// The last byte read or written.
    last_io: AtomicU64,
    /// When the first byte of a request head arrived; `NONE` when no head is pending.
    head_started: AtomicU64,
    /// Requests whose handler is running.
    in_flight: AtomicUsize,
}

const NONE: u64 = u64::MAX;

/// When the watchdog looks next, or why the connection closes now.
enum Next {
    CheckAt(Instant),
    Expired(&'static str),
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_io: AtomicU64::new(0),
            head_started: AtomicU64::new(NONE),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn read(&self) {
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        // Bytes with no request running are the start of the next request's head.
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_started.load(Ordering::Relaxed) == NONE
        {
            self.head_started.store(now, Ordering::Relaxed);
        }
    }

    fn wrote(&self) {
        self.last_io.store(self.now(), Ordering::Relaxed);
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    /// Apply the timeouts as of now.
    fn deadline(&self, limits: &ConnectionLimits) -> Next {
        let now = self.now();
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Next::CheckAt(Instant::now() + limits.check_interval());
        }
        let (since, limit, why) = match self.head_started.load(Ordering::Relaxed) {
            NONE => (
                self.last_io.load(Ordering::Relaxed),
                limits.idle_timeout,
                "idle timeout",
            ),
            started => (started, limits.header_timeout, "header timeout"),
        };
        let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(NONE - 1);
        let expires = since.saturating_add(limit_ms);
        if now >= expires {
            Next::Expired(why)
        } else {
            Next::CheckAt(self.at(expires))
        }
    }
}

/// A request whose handler is running; its end restarts the idle clock.
struct RequestGuard(Arc<Activity>);

impl RequestGuard {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity.head_started.store(NONE, Ordering::Relaxed);
        RequestGuard(activity)
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.wrote();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A socket that tells its connection's [`Activity`] when bytes move.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
