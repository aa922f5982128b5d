//! Runs untrusted tool code isolated by the kernel's own mechanisms, without Docker, in
//! milliseconds.
//!
//! Each run gets, before it runs anything: its own cgroup (memory with swap counted,
//! pids, CPU quota) and rlimits (CPU time, file size, open files, no core dumps); new
//! user, mount, pid, network, ipc, uts and cgroup namespaces, mapped to a dedicated
//! unprivileged host uid from a pool (never host root); a minimal root (read-only
//! `/usr`, a fresh `/proc`, `/dev/null`, `/dev/zero`, `/dev/urandom`, size-limited
//! `/tmp` and scratch folder `/work`, a synthetic `/etc`, read-only binds the caller
//! names); then no capabilities, no new privileges, Landlock and a seccomp deny-list;
//! no inherited fd but 0, 1 and 2, and only the environment the caller passes. The
//! tool is pid 1 of its namespace: when it ends, or its supervisor dies, everything it
//! started dies with it.
//!
//! Read [`Sandbox`] first (its `run` and `spawn`), then [`config`](SandboxConfig) for the
//! limits and their ceilings, and [`check`] for what the host supports.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolshed_sandbox::SandboxError> {
//! use toolshed_sandbox::{Bind, RunSpec, Sandbox, SandboxConfig};
//!
//! let sandbox = Sandbox::new(SandboxConfig::default())?;
//! let spec = RunSpec::new("/usr/bin/python3", ["/tool/hello.py"])
//!     .bind(Bind::read_only("/srv/tools/hello.py", "/tool/hello.py"));
//! let outcome = sandbox.run(spec, Vec::new()).await?;
//! println!("exit {:?}, {} bytes of stdout", outcome.exit, outcome.stdout.len());
//! # Ok(()) }
//! ```

mod cgroup;
mod check;
mod child;
mod config;
pub mod detached;
mod error;
mod hostnet;
mod janitor;
mod landlock;
mod mounts;
mod net;
mod netns;
mod overlay;
mod ready;
mod run;
mod sandbox;
mod seccomp;
pub mod snippet;
mod spawn;
mod stock;
mod sys;
mod uidpool;

pub use check::{HostSupport, Mechanism, MechanismReport, Status, check};
pub use config::{
    Bind, Clamp, Limits, LimitsRequest, Network, OverlayRoom, RunSpec, SandboxConfig, UidPool,
    Weakening,
};
pub use error::{SandboxCode, SandboxError};
pub use mounts::{FileKind, FileStat, Scratch};
pub use overlay::{MAX_MERGE_DEPTH, MergeBudget, MergeReport, Refused, Upper, Usage, folder_usage};
pub use run::{
    Accounting, ChildStderr, ChildStdin, ChildStdout, CollectedFile, ExitReport, KillReason,
    Outcome, SandboxedChild,
};
pub use sandbox::Sandbox;
pub use seccomp::{DENIED as DENIED_SYSCALLS, NAMESPACE_FLAGS as DENIED_CLONE_FLAGS};
pub use spawn::Exit;
