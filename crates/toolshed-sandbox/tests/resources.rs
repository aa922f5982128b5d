//! Resource exhaustion, each attack contained by a limit of its own: processes,
//! threads, memory (one block, increments), tmpfs and /dev/shm, scratch space and
//! inodes, CPU, file descriptors.
#![allow(clippy::unwrap_used)]

mod common;

use common::{err, out, py, run, sandbox, sh, show};
use toolshed_sandbox::{Exit, KillReason, LimitsRequest};

const MIB: u64 = 1024 * 1024;

#[tokio::test]
async fn a_fork_bomb_stops_at_the_pids_limit_and_leaves_nothing() {
    let sb = sandbox();
    // Forks until the kernel refuses; every child waits forever. The count is printed
    // once fork fails, then pid 1 exits and takes every child with it.
    let code = r#"
import os, signal
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(n, e.errno, flush=True)
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    n += 1
"#;
    let o = run(
        &sb,
        py(
            code,
            LimitsRequest {
                pids: Some(32),
                timeout_ms: Some(20_000),
                ..Default::default()
            },
        ),
    )
    .await;
    let text = out(&o);
    let mut parts = text.split_whitespace();
    let forks: u32 = parts
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", show(&o)));
    assert!(
        forks < 32,
        "{forks} forks with a limit of 32 processes: {}",
        show(&o)
    );
    assert_eq!(
        parts.next(),
        Some("11"),
        "fork failed with EAGAIN: {}",
        show(&o)
    );
    assert_eq!(o.exit, Exit::Code(0), "{}", show(&o));
    assert!(
        common::processes_of_uid(o.host_uid).is_empty(),
        "processes of the sandbox's uid {} are left",
        o.host_uid
    );
}

#[tokio::test]
async fn a_thread_bomb_stops_at_the_pids_limit() {
    let sb = sandbox();
    let code = r#"
import threading
stop = threading.Event()
n = 0
while True:
    try:
        threading.Thread(target=stop.wait, daemon=True).start()
    except RuntimeError as e:
        print(n, flush=True)
        break
    n += 1
"#;
    let o = run(
        &sb,
        py(
            code,
            LimitsRequest {
                pids: Some(24),
                timeout_ms: Some(20_000),
                ..Default::default()
            },
        ),
    )
    .await;
    let threads: u32 = out(&o)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", show(&o)));
    assert!(
        threads < 24,
        "{threads} threads with a limit of 24 tasks: {}",
        show(&o)
    );
    assert_eq!(o.exit, Exit::Code(0), "{}", show(&o));
}

#[tokio::test]
async fn a_memory_bomb_in_one_block_is_oom_killed() {
    let sb = sandbox();
    // 256 MiB filled at once, with a 64 MiB limit.
    let o = run(
        &sb,
        py(
            "b = b'\\x01' * (256 << 20)\nprint('survived', len(b))",
            LimitsRequest {
                memory_bytes: Some(64 * MIB),
                ..Default::default()
            },
        ),
    )
    .await;
    assert!(o.oom_killed, "{}", show(&o));
    assert_eq!(o.exit, Exit::Signal(9), "{}", show(&o));
    assert!(!out(&o).contains("survived"), "{}", show(&o));
    let peak = o
        .memory_peak_bytes
        .unwrap_or_else(|| panic!("no peak memory: {}", show(&o)));
    assert!(peak <= 64 * MIB, "peak {peak} above the 64 MiB limit");
}

#[tokio::test]
async fn a_memory_bomb_in_increments_is_oom_killed_at_the_limit() {
    let sb = sandbox();
    let code = r#"
chunks = []
while True:
    chunks.append(b'\x02' * (4 << 20))
    print(len(chunks) * 4, flush=True)
"#;
    let o = run(
        &sb,
        py(
            code,
            LimitsRequest {
                memory_bytes: Some(64 * MIB),
                ..Default::default()
            },
        ),
    )
    .await;
    assert!(o.oom_killed, "{}", show(&o));
    assert_eq!(o.exit, Exit::Signal(9), "{}", show(&o));
    let reached: u64 = out(&o)
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", show(&o)));
    assert!(reached < 64, "{reached} MiB allocated under a 64 MiB limit");
}

#[tokio::test]
async fn writes_to_tmp_stop_at_its_size() {
    let sb = sandbox();
    let o = run(
        &sb,
        sh(
            "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>/dev/null; echo dd=$?; wc -c < /tmp/fill",
            LimitsRequest {
                tmp_bytes: Some(4 * MIB),
                ..Default::default()
            },
        ),
    )
    .await;
    let text = out(&o);
    assert!(
        text.contains("dd=1"),
        "dd did not fail with ENOSPC: {}",
        show(&o)
    );
    let size: u64 = text.lines().last().unwrap().trim().parse().unwrap();
    assert!(size <= 4 * MIB, "/tmp holds {size} bytes with a 4 MiB size");
}

#[tokio::test]
async fn writes_to_dev_shm_land_in_the_size_limited_tmp() {
    let sb = sandbox();
    let o = run(
        &sb,
        py(
            r#"
import os
fd = os.open('/dev/shm/bomb', os.O_RDWR | os.O_CREAT, 0o600)
try:
    os.posix_fallocate(fd, 0, 64 << 20)
    print('allocated')
except OSError as e:
    print('refused', e.errno)
print(os.path.realpath('/dev/shm/bomb'), os.fstat(fd).st_size)
"#,
            LimitsRequest {
                tmp_bytes: Some(4 * MIB),
                ..Default::default()
            },
        ),
    )
    .await;
    let text = out(&o);
    assert!(text.contains("refused 28"), "not ENOSPC: {}", show(&o));
    assert!(
        text.contains("/tmp/bomb"),
        "/dev/shm is not /tmp: {}",
        show(&o)
    );
    assert!(
        !std::path::Path::new("/dev/shm/bomb").exists(),
        "the host's /dev/shm got the file"
    );
}

#[tokio::test]
async fn filling_the_scratch_folder_stops_at_its_size() {
    let sb = sandbox();
    let o = run(
        &sb,
        sh(
            "dd if=/dev/zero of=/work/fill bs=1M count=64 2>/dev/null; echo dd=$?; wc -c < /work/fill",
            LimitsRequest {
                scratch_bytes: Some(4 * MIB),
                ..Default::default()
            },
        ),
    )
    .await;
    let text = out(&o);
    assert!(text.contains("dd=1"), "{}", show(&o));
    let size: u64 = text.lines().last().unwrap().trim().parse().unwrap();
    assert!(
        size <= 4 * MIB,
        "scratch holds {size} bytes with a 4 MiB size"
    );
}

#[tokio::test]
async fn inode_exhaustion_in_scratch_stops_at_its_inode_limit() {
    let sb = sandbox();
    let o = run(
        &sb,
        py(
            r#"
n = 0
try:
    while True:
        open(f'/work/f{n}', 'w').close()
        n += 1
except OSError as e:
    print(n, e.errno)
"#,
            LimitsRequest {
                scratch_inodes: Some(100),
                ..Default::default()
            },
        ),
    )
    .await;
    let text = out(&o);
    let mut parts = text.split_whitespace();
    let files: u64 = parts
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", show(&o)));
    assert!(files < 100, "{files} files with a limit of 100 inodes");
    assert_eq!(parts.next(), Some("28"), "not ENOSPC: {}", show(&o));
}

#[tokio::test]
async fn a_cpu_hog_that_ignores_sigterm_is_killed_at_the_deadline() {
    let sb = sandbox();
    let o = run(
        &sb,
        py(
            "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('spinning', flush=True)\nwhile True:\n    pass\n",
            LimitsRequest {
                timeout_ms: Some(1_500),
                ..Default::default()
            },
        ),
    )
    .await;
    assert!(o.timed_out, "{}", show(&o));
    assert_eq!(o.killed, Some(KillReason::Timeout));
    assert_eq!(o.exit, Exit::Signal(9), "{}", show(&o));
    assert!(out(&o).contains("spinning"), "{}", show(&o));
    assert!(
        o.cpu_time.is_some_and(|t| !t.is_zero()),
        "no CPU time: {:?}",
        o.cpu_time
    );
    assert!(common::processes_of_uid(o.host_uid).is_empty());
}

#[tokio::test]
async fn a_cpu_hog_is_stopped_by_its_cpu_time_limit() {
    let sb = sandbox();
    // RLIMIT_CPU: SIGXCPU at the soft limit (1 s), SIGKILL at the hard one.
    let o = run(
        &sb,
        py(
            "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n",
            LimitsRequest {
                cpu_time_ms: Some(1_000),
                timeout_ms: Some(60_000),
                ..Default::default()
            },
        ),
    )
    .await;
    assert!(!o.timed_out, "{}", show(&o));
    assert_eq!(o.exit, Exit::Signal(9), "{}", show(&o));
}

#[tokio::test]
async fn fd_exhaustion_stops_at_the_open_files_limit() {
    let sb = sandbox();
    let o = run(
        &sb,
        py(
            r#"
import os
fds = []
try:
    while True:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    print(len(fds), e.errno)
"#,
            LimitsRequest {
                open_files: Some(64),
                ..Default::default()
            },
        ),
    )
    .await;
    let text = out(&o);
    let mut parts = text.split_whitespace();
    let n: u32 = parts
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{} {}", show(&o), err(&o)));
    assert!(n < 64, "{n} fds open with a limit of 64");
    assert_eq!(parts.next(), Some("24"), "not EMFILE: {}", show(&o));
}
