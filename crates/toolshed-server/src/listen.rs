//! The accept loop: HTTP/1 connections served by hyper under a connection cap, a cap per
//! client address, a header-read timeout, a body deadline and minimum body rate, and an
//! idle timeout, so slow or silent clients cannot hold the server's file descriptors or
//! its attention. `axum::serve` offers none of these, hence this loop.
//!
//! - **Connection cap.** A connection holds a permit of a semaphore from accept to
//!   close. With every permit out, the loop *stops accepting*: new connections wait in
//!   the kernel's listen backlog (holding no descriptor of ours) and are served, in
//!   order, as permits come back. Accept-and-close would instead drop the newest
//!   connection, which is the honest client's as often as not, while the idle ones
//!   that filled the cap keep their places until their timeout.
//! - **Cap per client address.** One address (an IPv6 client by its /64) holds at most
//!   `max_connections_per_address` of them, so one client cannot fill the global cap
//!   and leave everyone else in the backlog. A connection past it is answered `429
//!   TOO_MANY_CONNECTIONS` (once its request head arrives, within a second) and closed;
//!   it gives its permit back at once, and at most [`REFUSING`] are being answered at a
//!   time (past that, one is closed unanswered). Trusted proxies (`--trusted-proxy`)
//!   carry many clients and are not capped this way.
//! - **Idle timeout.** A connection with no request in progress and no byte of a new
//!   one (a fresh connection, a kept-alive one between requests, or one whose client
//!   stopped reading the answer) is closed once it has moved no byte for this long.
//! - **Header timeout.** Once the first byte of a request arrives, its whole head must
//!   arrive within this long.
//! - **Body deadline and minimum rate.** From its head's arrival, a request's body must
//!   be complete within the body timeout, and, once the grace period is over, must
//!   keep up with the minimum rate on average (`received >= rate × (elapsed − grace)`).
//!   A body that does not is answered `408 BODY_TIMEOUT` with `Connection: close`,
//!   whatever its handler was doing, and the connection is closed. A trickle of one
//!   byte every few seconds is cut a few seconds after the grace period.
//!
//! A request in progress (its handler running) is bounded by the request timeout
//! instead. Answers are whole bodies (no route streams), so a request ends when its
//! handler does, and writing the answer out is then watched by the idle timeout.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use toolshed_api::{ApiCode, ErrorBody, ErrorEnvelope};
use tower::ServiceExt;

use crate::client_addr::{TrustedProxy, is_trusted};
use crate::error::ApiError;
use crate::limits::ConnectionLimits;

/// Connections past their address's cap being answered at once, at most; past it, one
/// is closed unanswered.
const REFUSING: usize = 64;

/// How long a refused connection may take to send its request head, and then to read
/// the answer, before it is closed.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// The listen backlog asked for: connections the kernel holds completed for the accept
/// loop. A reconnect storm from one address (a slow-body flood whose connections are
/// cut together) arrives as a burst of handshakes; past a full backlog the kernel drops
/// a SYN, and that client, an honest one as often as not, retries only a second later.
/// Linux clamps this to `net.core.somaxconn` (4096 by default since 5.4).
const BACKLOG: u32 = 4096;

/// Bind `addr` for [`serve`], with [`BACKLOG`] (tokio's own `bind` asks for 1024).
pub(crate) fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As tokio's bind: a restarted server may take its port back from TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serve `app` on `listener` until `shutdown` completes; then stop accepting, let every
/// connection finish its request in progress, and return once all are closed.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    trusted: Arc<[TrustedProxy]>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let permits = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(permits));
    let per_address = Arc::new(PerAddress::new(
        limits.max_connections_per_address.clamp(1, permits),
    ));
    let refusing = Arc::new(Semaphore::new(REFUSING));
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
                let held = if is_trusted(peer.ip(), &trusted) {
                    None
                } else {
                    match per_address.enter(peer.ip()) {
                        Some(held) => Some(held),
                        None => {
                            // Past its address's cap: the permit goes back now.
                            drop(permit);
                            if let Ok(turn) = refusing.clone().try_acquire_owned() {
                                tokio::spawn(refuse(stream, per_address.cap, turn));
                            }
                            continue;
                        }
                    }
                };
                let app = app.clone();
                let stop = stop_rx.clone();
                tokio::spawn(async move {
                    connection(stream, peer, app, limits, stop).await;
                    drop(held);
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

/// The connections open per client address, for the cap per address. Its entries are
/// the addresses with a connection open: at most the global cap.
struct PerAddress {
    cap: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its address; dropping it closes the count.
struct AddressHeld {
    key: IpAddr,
    table: Arc<PerAddress>,
}

impl PerAddress {
    fn new(cap: usize) -> Self {
        PerAddress {
            cap,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Count one more connection from `ip`, or `None` at its cap.
    fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<AddressHeld> {
        let key = address_key(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(AddressHeld {
            key,
            table: self.clone(),
        })
    }
}

impl Drop for AddressHeld {
    fn drop(&mut self) {
        let mut open = self
            .table
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The key a client address is counted under: an IPv4 address (also mapped into
/// IPv6) as it is; an IPv6 one by its /64, the block one client usually holds whole.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// Answer a connection past its address's cap: wait (briefly) for its request head,
/// answer `429 TOO_MANY_CONNECTIONS`, half-close, and read what the client still sends
/// for a moment, so the close does not reset the connection before the answer is read.
async fn refuse(mut stream: TcpStream, cap: usize, _turn: OwnedSemaphorePermit) {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    let arrived = tokio::time::timeout(REFUSAL_LINGER, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if arrived != Ok(true) {
        return;
    }
    let body = serde_json::to_vec(&ErrorEnvelope {
        error: ErrorBody {
            code: ApiCode::TooManyConnections,
            message: format!(
                "this client address has {cap} connections open to the server, the most it may; reuse one (keep-alive), close one, or retry in a second"
            ),
            details: None,
        },
    })
    .unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let written = tokio::time::timeout(REFUSAL_LINGER, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    })
    .await;
    if matches!(written, Ok(Ok(()))) {
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        })
        .await;
    }
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
            let clock = Arc::new(BodyClock::new(req.body().is_end_stream()));
            let req = req.map(|inner| {
                axum::body::Body::new(Timed {
                    inner,
                    clock: clock.clone(),
                })
            });
            let app = app.clone();
            async move {
                let answer = tokio::select! {
                    biased;
                    answer = app.oneshot(req) => answer,
                    why = clock.expired(&limits) => Ok(body_timeout(why, &limits)),
                };
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

/// How a request's body is doing against its deadline and minimum rate: when its head
/// arrived, how many bytes of it the handler has read, and whether it is complete.
struct BodyClock {
    started: Instant,
    received: AtomicU64,
    complete: AtomicBool,
}

/// Why a body was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TooSlow {
    Deadline,
    Rate,
}

impl BodyClock {
    fn new(complete: bool) -> Self {
        BodyClock {
            started: Instant::now(),
            received: AtomicU64::new(0),
            complete: AtomicBool::new(complete),
        }
    }

    /// Completes when the body falls behind its deadline or its rate, and never once it
    /// is complete. It wakes only when the bytes read so far would fall behind, so a
    /// body arriving on time costs a few timer wake-ups, not one per chunk.
    async fn expired(&self, limits: &ConnectionLimits) -> TooSlow {
        loop {
            if self.complete.load(Ordering::Acquire) {
                return std::future::pending().await;
            }
            let elapsed = self.started.elapsed();
            if elapsed >= limits.body_timeout {
                return TooSlow::Deadline;
            }
            let mut next = limits.body_timeout;
            if limits.min_body_rate > 0 {
                // The bytes read so far cover the rate until this long after the head.
                let received = self.received.load(Ordering::Acquire);
                let covered =
                    Duration::from_secs_f64(received as f64 / f64::from(limits.min_body_rate));
                let behind = limits.body_rate_grace.saturating_add(covered);
                if elapsed >= behind {
                    return TooSlow::Rate;
                }
                next = next.min(behind);
            }
            tokio::time::sleep_until(self.started + next).await;
        }
    }
}

/// The `408 BODY_TIMEOUT` answer to a body cut for `why`; the connection closes after it.
fn body_timeout(why: TooSlow, limits: &ConnectionLimits) -> Response {
    tracing::debug!(reason = ?why, "answering a slow request body 408 and closing");
    let message = match why {
        TooSlow::Deadline => format!(
            "the request body was not complete within {} s; send it at once, or ask the operator for a longer --body-timeout-seconds",
            limits.body_timeout.as_secs()
        ),
        TooSlow::Rate => format!(
            "the request body arrived slower than {} bytes per second; send it at once, or ask the operator for a lower --min-body-bytes-per-second",
            limits.min_body_rate
        ),
    };
    let mut response = ApiError::new(ApiCode::BodyTimeout, message).into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that tells its [`BodyClock`] how much of it was read and when it
/// ended.
struct Timed {
    inner: Incoming,
    clock: Arc<BodyClock>,
}

impl hyper::body::Body for Timed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = u64::try_from(data.len()).unwrap_or(u64::MAX);
                    self.clock.received.fetch_add(n, Ordering::AcqRel);
                }
                if self.inner.is_end_stream() {
                    self.clock.complete.store(true, Ordering::Release);
                }
            }
            // Ended, or failed (the client went away): either way nothing more comes.
            Poll::Ready(_) => self.clock.complete.store(true, Ordering::Release),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
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
