//! Shared helpers of the attack tests: one sandbox per test, scripts in sh and Python,
//! the host's process table, the tools a test needs (a clear failure when missing).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use toolshed_sandbox::{LimitsRequest, Outcome, RunSpec, Sandbox, SandboxConfig};

/// A sandbox with the default configuration.
pub fn sandbox() -> Sandbox {
    Sandbox::new(SandboxConfig::default())
        .unwrap_or_else(|e| panic!("the sandbox cannot start on this host: {e} [{}]", e.code()))
}

/// Fails the test, saying what to install, when `program` is missing.
pub fn require(program: &str, package: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/local/bin"] {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "this test needs `{program}` under /usr/bin: install it (Debian: `apt-get install {package}`; scripts/test does)"
    );
}

/// `/bin/sh -c script` with these limits.
pub fn sh(script: &str, limits: LimitsRequest) -> RunSpec {
    let mut spec = RunSpec::new("/bin/sh", ["-c", script]);
    spec.limits = limits;
    spec
}

/// `python3 -c code` with these limits.
pub fn py(code: &str, limits: LimitsRequest) -> RunSpec {
    require("python3", "python3");
    let mut spec = RunSpec::new("/usr/bin/python3", ["-c", code]);
    spec.limits = limits;
    spec
}

/// Runs a spec, failing the test on a sandbox error.
pub async fn run(sb: &Sandbox, spec: RunSpec) -> Outcome {
    sb.run(spec, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("the sandbox failed: {e} [{}]", e.code()))
}

/// stdout as text.
pub fn out(o: &Outcome) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn err(o: &Outcome) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A description of an outcome for assertion messages.
pub fn show(o: &Outcome) -> String {
    format!(
        "exit {:?}, killed {:?}, oom {}, stdout {:?}, stderr {:?}",
        o.exit,
        o.killed,
        o.oom_killed,
        truncate(&out(o)),
        truncate(&err(o))
    )
}

fn truncate(s: &str) -> String {
    if s.len() > 2000 {
        format!("{}…", &s[..2000])
    } else {
        s.to_owned()
    }
}

/// A number no other test of this process uses (markers in command lines).
pub fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    u64::from(std::process::id()) * 1000 + NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Host pids running `sleep SECONDS` exactly (the escapees' marker).
pub fn sleeping(seconds: u64) -> Vec<u32> {
    let want = format!("sleep\0{seconds}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Host pids whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Host pids running as `uid` (real uid).
pub fn processes_of_uid(uid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let real = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse::<u32>().ok());
        if real == Some(uid) {
            found.push(pid);
        }
    }
    found
}

/// Polls `cond` until it holds or `secs` pass; the condition, not a sleep, decides.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
