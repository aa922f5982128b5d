//! The sandbox's typed errors and their stable codes.
//!
//! An error names the mechanism or the field, and says what to do: a missing kernel
//! mechanism is never silently skipped; the caller refuses to run untrusted code.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::check::Mechanism;

/// Stable, machine-readable codes of [`SandboxError`]. Every code is listed, with what to
/// do about it, in `docs/errors.md`.
///
/// The wire form (serde) and the text form (`Display`, [`as_str`](SandboxCode::as_str))
/// are the same `SCREAMING_SNAKE_CASE` name, derived from the variant by both (the shape
/// of every layer's code enum; this crate does not depend on `toolshed-core`, so the
/// `as_str` that `toolshed_core::code_enum!` would add is written out below).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumIter,
    strum::IntoStaticStr,
    strum::AsRefStr,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum SandboxCode {
    /// A kernel mechanism the sandbox needs is missing or refused (user namespaces, a
    /// cgroup controller, Landlock, seccomp, pidfds, the mount API).
    MechanismUnavailable,
    /// The supervisor lacks a privilege the sandbox needs (root, to map pool uids and
    /// create cgroups).
    PrivilegeRequired,
    /// Every uid of the pool is in use.
    UidPoolExhausted,
    /// A configuration value is invalid (the message names the field).
    InvalidConfig,
    /// A read-only bind's source does not exist on the host.
    BindSourceNotFound,
    /// The program to run does not exist or cannot be executed inside the sandbox.
    ProgramNotFound,
    /// The sandbox could not be set up (a step of the child's setup failed).
    SetupFailed,
    /// The network helper (slirp4netns) is missing or failed.
    NetworkUnavailable,
    /// A file of the scratch folder could not be read back (a symlink, not a regular
    /// file, outside the folder, or larger than the cap).
    FileRefused,
    /// A host file operation of the supervisor failed (cgroup files, the runtime folder).
    Io,
}

impl SandboxCode {
    /// The code as written on the wire and in messages, e.g. `SETUP_FAILED`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl PartialEq<str> for SandboxCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SandboxCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What can go wrong before or around a sandboxed run. A tool's own failure (an exit
/// code, a signal, a limit hit) is not an error: it is in the [`Outcome`](crate::Outcome).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The kernel refuses a mechanism; untrusted code is not run.
    #[error("the sandbox cannot run untrusted code: {mechanism} is unavailable ({detail}); {fix}")]
    MechanismUnavailable {
        /// Which mechanism.
        mechanism: Mechanism,
        /// What the host reported.
        detail: String,
        /// What to do about it.
        fix: String,
    },
    /// The supervisor is not privileged enough.
    #[error("the sandbox supervisor needs {what}; {fix}")]
    PrivilegeRequired {
        /// The missing privilege.
        what: String,
        /// What to do about it.
        fix: String,
    },
    /// No uid of the pool is free.
    #[error(
        "all {count} uids of the sandbox pool ({first}..{end}) are in use; raise `uid_pool.count` or run fewer sandboxes at once",
        end = u64::from(*first) + u64::from(*count)
    )]
    UidPoolExhausted {
        /// The first uid of the pool.
        first: u32,
        /// How many uids the pool has.
        count: u32,
    },
    /// A configuration value is invalid.
    #[error("invalid sandbox configuration: `{field}` {problem}")]
    InvalidConfig {
        /// The field, e.g. `binds[0].target`.
        field: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// A bind's source does not exist.
    #[error("bind source {} does not exist on the host ({source}); fix the path or create it", path.display())]
    BindSourceNotFound {
        /// The host path.
        path: PathBuf,
        /// The lookup's error.
        #[source]
        source: std::io::Error,
    },
    /// The program cannot be started inside the sandbox.
    #[error("cannot run {program} in the sandbox: {reason}")]
    ProgramNotFound {
        /// The program as given.
        program: String,
        /// Why.
        reason: String,
    },
    /// A step of the sandbox setup failed.
    #[error("sandbox setup failed at `{step}`")]
    SetupFailed {
        /// The step, e.g. `pivot_root`.
        step: &'static str,
        /// The kernel's error.
        #[source]
        source: std::io::Error,
    },
    /// The network helper is missing or failed.
    #[error("the sandbox network is unavailable: {reason}; {fix}")]
    NetworkUnavailable {
        /// What happened.
        reason: String,
        /// What to do.
        fix: String,
    },
    /// A scratch file could not be read back.
    #[error("refused to read {} from the scratch folder: {reason}", path.display())]
    FileRefused {
        /// The path relative to the scratch folder.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A scratch file is larger than the most that is read back of it (its size was
    /// read first; none of it was).
    #[error("refused to read {} from the scratch folder: it has {size} bytes, more than the cap of {max}", path.display())]
    FileTooLarge {
        /// The path relative to the scratch folder.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// A host file operation failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    /// This error's stable code.
    pub fn code(&self) -> SandboxCode {
        match self {
            SandboxError::MechanismUnavailable { .. } => SandboxCode::MechanismUnavailable,
            SandboxError::PrivilegeRequired { .. } => SandboxCode::PrivilegeRequired,
            SandboxError::UidPoolExhausted { .. } => SandboxCode::UidPoolExhausted,
            SandboxError::InvalidConfig { .. } => SandboxCode::InvalidConfig,
            SandboxError::BindSourceNotFound { .. } => SandboxCode::BindSourceNotFound,
            SandboxError::ProgramNotFound { .. } => SandboxCode::ProgramNotFound,
            SandboxError::SetupFailed { .. } => SandboxCode::SetupFailed,
            SandboxError::NetworkUnavailable { .. } => SandboxCode::NetworkUnavailable,
            SandboxError::FileRefused { .. } | SandboxError::FileTooLarge { .. } => {
                SandboxCode::FileRefused
            }
            SandboxError::Io { .. } => SandboxCode::Io,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> SandboxError {
        SandboxError::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn config(field: impl Into<String>, problem: impl Into<String>) -> SandboxError {
        SandboxError::InvalidConfig {
            field: field.into(),
            problem: problem.into(),
        }
    }
}
