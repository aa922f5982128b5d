//! Slow request bodies against a real server on loopback: a flood of connections each
//! sending a login body one byte every 4 s (the attack needs no account) leaves
//! `/healthz` answering within 100 ms, because one address holds at most its share of
//! the connections; and a slow body is answered 408 and closed, by its minimum rate
//! and by its deadline, each shown on its own.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The flood's address, and another client's.
const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const BYSTANDER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// An address whose every connection the test makes.
const CAPPED: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

/// The pace of the attack in the issue: one byte of the body every 4 s.
const TRICKLE: Duration = Duration::from_secs(4);

/// A login body, announced whole and sent one byte at a time.
const BODY: &[u8] = br#"{"username": "admin", "password": "not-the-password-0123456789"}"#;

/// Let this test hold its sockets: raise the soft descriptor limit toward the hard.
fn raise_fd_limit(need: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|soft| soft < need) {
        let mut raised = limit;
        raised.current = Some(match limit.maximum {
            Some(hard) => hard.min(need),
            None => need,
        });
        setrlimit(Resource::Nofile, raised).unwrap();
    }
}

/// A connection to `server` from `from` (any 127.0.0.0/8 address is this host's).
async fn connect(from: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(server).await
}

/// The head of a login whose body is [`BODY`].
fn login_head() -> Vec<u8> {
    format!(
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    )
    .into_bytes()
}

fn addr_of(s: &TestServer) -> SocketAddr {
    s.base.trim_start_matches("http://").parse().unwrap()
}

/// What the probes saw: how many, and the slowest answer.
#[derive(Debug, Default)]
struct Probes {
    count: usize,
    slowest: Duration,
    /// Every probe's time, in order.
    times: Vec<Duration>,
    failures: Vec<String>,
}

impl Probes {
    /// The time 95 % of the probes stayed within.
    fn p95(&self) -> Duration {
        let mut t = self.times.clone();
        t.sort();
        t.get((t.len() * 95).div_ceil(100).saturating_sub(1))
            .copied()
            .unwrap_or_default()
    }

    /// Whether `/healthz` kept answering within 100 ms: 95 % of the probes within it and
    /// none past a second. (One probe of a hundred may be delayed by the machine, not
    /// the flood: the builds and tests beside this one share two cores; the attack
    /// held `/healthz` past 5 s.)
    fn answered_in_time(&self) -> bool {
        self.p95() < Duration::from_millis(100) && self.slowest < Duration::from_secs(1)
    }
}

/// Ask `GET /healthz` from `from` on a fresh connection every 100 ms until `stop`,
/// each answer timed from connect to its last byte. Runs on a thread of its own, so
/// the flood's tasks do not delay the probe's own clock.
fn probe_healthz(from: IpAddr, server: SocketAddr, stop: Arc<AtomicBool>) -> Probes {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut probes = Probes::default();
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let answer = tokio::time::timeout(Duration::from_secs(5), async {
                let mut s = connect(from, server).await?;
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await?;
                let mut got = Vec::new();
                s.read_to_end(&mut got).await?;
                Ok::<_, std::io::Error>(got)
            })
            .await;
            let took = started.elapsed();
            probes.count += 1;
            probes.slowest = probes.slowest.max(took);
            probes.times.push(took);
            match answer {
                Ok(Ok(got)) if got.starts_with(b"HTTP/1.1 200") => {}
                Ok(Ok(got)) => probes
                    .failures
                    .push(String::from_utf8_lossy(&got).into_owned()),
                Ok(Err(e)) => probes.failures.push(e.to_string()),
                Err(_) => probes.failures.push(format!("no answer in {took:?}")),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        probes
    })
}

/// The flood: `connections` tasks from `from`, each sending a login's head and then one
/// byte of its body every [`TRICKLE`]; a connection the server ends is opened again at
/// the next beat, as an attacker would. `opened` counts connections made.
fn flood(
    from: IpAddr,
    server: SocketAddr,
    connections: usize,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let (stop, opened) = (stop.clone(), opened.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) = connect(from, server).await {
                        opened.fetch_add(1, Ordering::Relaxed);
                        let mut sent = s.write_all(&login_head()).await.is_ok();
                        let mut at = 0;
                        while sent && at < BODY.len() && !stop.load(Ordering::Relaxed) {
                            tokio::time::sleep(TRICKLE).await;
                            sent = s.write_all(&BODY[at..=at]).await.is_ok();
                            at += 1;
                        }
                    }
                    tokio::time::sleep(TRICKLE).await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_flood_from_one_address_leaves_healthz_answering_within_100ms() {
    const CONNECTIONS: usize = 1100;
    raise_fd_limit(8192);
    // The server's defaults: the attack needs no setting to be answered.
    let s = TestServer::start().await;
    let server = addr_of(&s);
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let (stop, opened) = (stop.clone(), opened.clone());
        std::thread::spawn(move || flood(ATTACKER, server, CONNECTIONS, stop, opened))
    };
    // Probe once the flood is in place (each of its connections made at least once).
    let deadline = Instant::now() + Duration::from_secs(60);
    while opened.load(Ordering::Relaxed) < CONNECTIONS {
        assert!(
            Instant::now() < deadline,
            "the flood made {} of its connections in 60 s",
            opened.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let probing = Arc::new(AtomicBool::new(false));
    let prober = {
        let probing = probing.clone();
        std::thread::spawn(move || probe_healthz(BYSTANDER, server, probing))
    };
    // Three beats of the flood, past the bodies' grace period: the slow bodies are cut
    // and the attacker's connections come back, while the probes go on.
    tokio::time::sleep(TRICKLE * 3).await;
    probing.store(true, Ordering::Relaxed);
    let probes = tokio::task::spawn_blocking(move || prober.join().unwrap())
        .await
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    eprintln!(
        "{} connections opened by the flood; {} probes, the slowest {:?}",
        opened.load(Ordering::Relaxed),
        probes.count,
        probes.slowest
    );
    assert!(probes.count >= 50, "{probes:?}");
    assert!(probes.failures.is_empty(), "{probes:?}");
    assert!(
        probes.answered_in_time(),
        "/healthz took {:?} (95 % within {:?}) during the flood: {probes:?}",
        probes.slowest,
        probes.p95()
    );
    tokio::task::spawn_blocking(move || attacker.join().unwrap())
        .await
        .unwrap();
    s.stop().await;
}

/// What one slow body's connection got: the answer's bytes, and when it was closed.
struct Cut {
    answer: Vec<u8>,
    after: Duration,
}

/// Send a login's head from `from`, then its body one byte every [`TRICKLE`], reading
/// at the same time until the server closes the connection (or `limit` passes).
async fn trickle_until_closed(from: IpAddr, server: SocketAddr, limit: Duration) -> Option<Cut> {
    let started = Instant::now();
    let s = connect(from, server).await.ok()?;
    let (mut read, mut write) = s.into_split();
    write.write_all(&login_head()).await.ok()?;
    let reader = async {
        let mut answer = Vec::new();
        let _ = read.read_to_end(&mut answer).await;
        answer
    };
    let writer = async {
        for at in 0..BODY.len() {
            tokio::time::sleep(TRICKLE).await;
            if write.write_all(&BODY[at..=at]).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await;
    };
    tokio::time::timeout(limit, async {
        tokio::select! {
            answer = reader => Cut { answer, after: started.elapsed() },
            () = writer => unreachable!(),
        }
    })
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_under_the_address_cap_are_answered_408_and_closed() {
    // Fewer than one address may hold, so only the bodies' own limits end them.
    const CONNECTIONS: usize = 100;
    raise_fd_limit(4096);
    let s = TestServer::start().await;
    let server = addr_of(&s);
    let probing = Arc::new(AtomicBool::new(false));
    let prober = {
        let probing = probing.clone();
        // From the attacker's own address: it is under its cap.
        std::thread::spawn(move || probe_healthz(ATTACKER, server, probing))
    };
    let cuts: Vec<Option<Cut>> = futures_util::future::join_all(
        (0..CONNECTIONS).map(|_| trickle_until_closed(ATTACKER, server, Duration::from_secs(60))),
    )
    .await;
    probing.store(true, Ordering::Relaxed);
    let probes = tokio::task::spawn_blocking(move || prober.join().unwrap())
        .await
        .unwrap();
    let mut latest = Duration::ZERO;
    for cut in &cuts {
        let Some(cut) = cut else {
            panic!("a slow body was not cut within 60 s");
        };
        let answer = String::from_utf8_lossy(&cut.answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"BODY_TIMEOUT\""), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        latest = latest.max(cut.after);
    }
    eprintln!(
        "every slow body cut within {latest:?}; {} probes, the slowest {:?}",
        probes.count, probes.slowest
    );
    // The default minimum rate cuts a body that is 5 s in and behind it.
    assert!(latest < Duration::from_secs(15), "{latest:?}");
    assert!(probes.failures.is_empty(), "{probes:?}");
    assert!(
        probes.answered_in_time(),
        "/healthz took {:?} (95 % within {:?}): {probes:?}",
        probes.slowest,
        probes.p95()
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_its_deadline_is_answered_408_even_at_a_good_rate() {
    let s = TestServer::start_with(|c| {
        c.limits.connections.body_timeout = Duration::from_secs(2);
    })
    .await;
    let server = addr_of(&s);
    const LENGTH: usize = 1_500_000;
    let head = format!(
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {LENGTH}\r\n\r\n"
    );
    // 16 KiB every 100 ms: 160 KiB/s, far above the minimum rate, and 9 s to finish.
    let started = Instant::now();
    let stream = connect(ATTACKER, server).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    write.write_all(head.as_bytes()).await.unwrap();
    let writer = async {
        let chunk = vec![b' '; 16 * 1024];
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if write.write_all(&chunk).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    let reader = async {
        let mut answer = Vec::new();
        let _ = read.read_to_end(&mut answer).await;
        answer
    };
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            answer = reader => answer,
            () = writer => unreachable!(),
        }
    })
    .await
    .expect("the body was not cut within 30 s");
    let took = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"BODY_TIMEOUT\""), "{answer}");
    assert!(answer.contains("within 2 s"), "{answer}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "cut after {took:?}"
    );
    // The same body sent at once gets the route's own answer (it is not JSON).
    let mut fast = connect(ATTACKER, server).await.unwrap();
    fast.write_all(
        head.replace("HTTP/1.1\r\n", "HTTP/1.1\r\nConnection: close\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    fast.write_all(&vec![b'x'; LENGTH]).await.unwrap();
    let mut answer = Vec::new();
    fast.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    s.stop().await;
}

/// Send `GET /healthz` on a kept-alive connection and read one whole answer (its head,
/// then `Content-Length` bytes); `None` when the connection ends first.
async fn healthz_on(stream: &mut TcpStream) -> Option<String> {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return Some(String::from_utf8_lossy(&got).into_owned());
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return (!got.is_empty()).then(|| String::from_utf8_lossy(&got).into_owned());
        }
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_past_its_connection_cap_gets_429_and_other_addresses_are_served() {
    let s = TestServer::start_with(|c| {
        c.limits.connections.max_connections_per_address = 4;
    })
    .await;
    let server = addr_of(&s);
    // Four connections, each answered once and kept alive: the address's cap. (From an
    // address of its own: the test client keeps connections from 127.0.0.1.)
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = connect(CAPPED, server).await.unwrap();
        let answer = healthz_on(&mut c).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(c);
    }
    // A fifth is answered 429 and closed.
    let mut fifth = connect(CAPPED, server).await.unwrap();
    fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), fifth.read_to_end(&mut answer))
        .await
        .expect("the refused connection was closed")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("\"TOO_MANY_CONNECTIONS\""), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("4 connections"), "{answer}");
    // The held ones still work, and another address is served.
    let answer = healthz_on(&mut held[0]).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut other = connect(BYSTANDER, server).await.unwrap();
    let answer = healthz_on(&mut other).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // One closed, the address gets its place back.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = connect(CAPPED, server).await.unwrap();
        let answer = healthz_on(&mut again).await.unwrap_or_default();
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {answer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.stop().await;

    // A trusted proxy carries many clients: it is not capped per address.
    let s = TestServer::start_with(|c| {
        c.limits.connections.max_connections_per_address = 4;
        c.trusted_proxies = vec!["127.0.0.3".parse().unwrap()];
    })
    .await;
    let server = addr_of(&s);
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut c = connect(CAPPED, server).await.unwrap();
        let answer = healthz_on(&mut c).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(c);
    }
    s.stop().await;
}
