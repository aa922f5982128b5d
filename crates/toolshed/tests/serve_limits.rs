//! `toolshed serve` under 2,000 idle half-open connections: the connection cap keeps
//! the server's open file descriptors bounded, the header and idle timeouts close the
//! silent ones, and `/healthz` still answers.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const CAP: usize = 200;
const CONNECTIONS: usize = 2000;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Let this test hold its 2,000 sockets: raise the soft descriptor limit toward the hard.
fn raise_fd_limit(need: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|soft| soft < need) {
        let mut raised = limit;
        raised.current = Some(match limit.maximum {
            Some(hard) => hard.min(need.max(4096)),
            None => need.max(4096),
        });
        setrlimit(Resource::Nofile, raised).unwrap();
    }
}

#[test]
fn two_thousand_idle_connections_leave_fds_bounded_and_healthz_answering() {
    raise_fd_limit(CONNECTIONS as u64 + 512);
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(["--max-connections", &CAP.to_string()])
        // The flood comes from one address: let it reach the global cap, which is what
        // this test is about (the cap per address is `slow_bodies.rs`'s).
        .args(["--max-connections-per-address", &CAP.to_string()])
        .args([
            "--header-timeout-seconds",
            "1",
            "--idle-timeout-seconds",
            "1",
        ])
        .current_dir(dir.path())
        .env("TOOLSHED_DATABASE_URL", &db)
        .env("TOOLSHED_ADMIN_PASSWORD", "admin-password-1")
        .env_remove("TOOLSHED_JWT_SECRET")
        .env_remove("TOOLSHED_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let server = Killed(child);
    let pid = server.0.id();
    let addr: SocketAddr = first
        .trim()
        .strip_prefix("toolshed registry listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .parse()
        .unwrap();
    let baseline = open_fds(pid);
    assert!(baseline > 0, "cannot read /proc/{pid}/fd");

    // Watch the server's descriptors for the whole flood.
    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(baseline));
    let watcher = {
        let (done, most) = (done.clone(), most.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                most.fetch_max(open_fds(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    // 2,000 connections from 20 threads: half send nothing, half half a head. Past the
    // cap they wait in the backlog (connect may take its SYN retries), so the connect
    // deadline is generous.
    let held: Vec<TcpStream> = (0..20)
        .map(|t| {
            std::thread::spawn(move || {
                (0..CONNECTIONS / 20)
                    .filter_map(|i| {
                        let mut s =
                            TcpStream::connect_timeout(&addr, Duration::from_secs(120)).ok()?;
                        if (t + i) % 2 == 1 {
                            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ");
                        }
                        Some(s)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(held.len(), CONNECTIONS, "every connection was made");

    // The server still answers: one more connection, behind the flood in the backlog.
    let mut probe = TcpStream::connect_timeout(&addr, Duration::from_secs(120)).unwrap();
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    probe
        .set_read_timeout(Some(Duration::from_secs(180)))
        .unwrap();
    let mut answer = String::new();
    probe.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let most = most.load(Ordering::Relaxed);
    // The cap, plus a margin for the server's own files (database, WAL, logs, epoll).
    assert!(
        most <= baseline + CAP + 32,
        "the server held {most} descriptors (baseline {baseline}, cap {CAP})"
    );
    drop(held);
}

/// `toolshed serve ARGS` that must exit at once (bad flags): its output.
fn serve_refused(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir.path())
        .env(
            "TOOLSHED_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("t.db").display()),
        )
        .env_remove("TOOLSHED_RETAIN_RUNS")
        .env_remove("TOOLSHED_RUN_QUOTA")
        .env_remove("TOOLSHED_MIN_FREE_DISK_MB")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn retention_the_run_quota_and_the_disk_floor_are_on_by_default_and_said_in_help() {
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for expect in [
        "--retain-runs <AGE|off>",
        "default `30d`), or `off`",
        "--run-quota <RUNS/AGE|off>",
        "`100000/1d` (the default",
        "--min-free-disk-mb <MB>",
        "(default 1024",
    ] {
        assert!(help.contains(expect), "`{expect}` is not in:\n{help}");
    }
    for (args, needle) in [
        (
            &["--retain-runs", "0s"][..],
            "would remove every finished run",
        ),
        (&["--retain-runs", "soon"][..], "--retain-runs"),
        (&["--run-quota", "5"][..], "is not a quota"),
        (&["--run-quota", "0/1d"][..], "is not a number of runs"),
        (&["--run-quota", "5/0s"][..], "is zero"),
        (&["--min-free-disk-mb", "lots"][..], "--min-free-disk-mb"),
        (
            &["--retain-runs", "off", "--prune-every", "1m"][..],
            "--prune-every needs retention",
        ),
    ] {
        let o = serve_refused(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
