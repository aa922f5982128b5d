//! Test support: see `src/bin/crash_driver.rs` and `tests/crash.rs`.
//!
//! The crash test needs a separate process it can kill with SIGKILL at any moment; this
//! crate builds that process so the test can find it through `CARGO_BIN_EXE_…`.

/// The tool the crash driver calls: keyed, with this many starts at most.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long the crash driver's handler works between its `start` and `end` ledger
/// lines, in milliseconds: long enough for the test to kill it there on purpose.
pub const HANDLER_WORK_MS: u64 = 10;
