//! Test support: see `src/bin/crash_driver.rs` and `tests/crash.rs`, and [`rerun_alone`].
//!
//! The crash test needs a separate process it can kill with SIGKILL at any moment; this
//! crate builds that process so the test can find it through `CARGO_BIN_EXE_…`.

/// The tool the crash driver calls: keyed, with this many starts at most.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long the crash driver's handler works between its `start` and `end` ledger
/// lines, in milliseconds: long enough for the test to kill it there on purpose.
pub const HANDLER_WORK_MS: u64 = 10;

/// Run one test of the calling test binary again, alone, in a child process with `env`
/// added to its environment; answers whether the child succeeded and what it printed
/// (stdout, then stderr). For tests that need variables in the environment of the
/// process under test: setting one in this process would need `unsafe`, and would leak
/// into every other test of the binary. The child sees the variables and runs the
/// test's real work; the parent only checks the answer.
pub fn rerun_alone<K, V>(test: &str, env: impl IntoIterator<Item = (K, V)>) -> (bool, String)
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let exe = std::env::current_exe().expect("the test binary's own path");
    let out = std::process::Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .envs(env)
        .output()
        .expect("the test binary runs again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
