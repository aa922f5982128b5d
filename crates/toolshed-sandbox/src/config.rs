//! Typed configuration: the limits of one run, the server-wide defaults and ceilings a
//! tool's own request is clamped to, binds, network, environment and the operator's
//! opt-ins to a weaker sandbox.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

const MIB: u64 = 1024 * 1024;

/// The limits of one sandboxed run. [`Limits::default`] gives the seed's defaults:
/// 256 MB of memory, a 30-second timeout (and the network off, in [`RunSpec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory, swap included (cgroup), in bytes. Pages of `/tmp` and the scratch folder
    /// count too: they are memory.
    pub memory_bytes: u64,
    /// Processes and threads at once (cgroup `pids.max`, and `RLIMIT_NPROC`).
    pub pids: u32,
    /// CPU bandwidth in thousandths of a CPU (1000 = one full CPU; cgroup quota).
    pub cpu_millis: u32,
    /// CPU time in milliseconds over the whole run (`RLIMIT_CPU`, rounded up to seconds).
    pub cpu_time_ms: u64,
    /// Wall-clock time in milliseconds; past it everything is killed (`timed_out`).
    pub timeout_ms: u64,
    /// Largest file the tool may write (`RLIMIT_FSIZE`), in bytes.
    pub file_size_bytes: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u32,
    /// Size of the scratch folder (the working directory, `/work`), in bytes.
    pub scratch_bytes: u64,
    /// Files and folders the scratch folder may hold.
    pub scratch_inodes: u64,
    /// Size of `/tmp` (and `/dev/shm`, which points into it), in bytes.
    pub tmp_bytes: u64,
    /// stdout kept, in bytes; more sets `stdout_truncated`.
    pub stdout_bytes: u64,
    /// stderr kept, in bytes; more sets `stderr_truncated`.
    pub stderr_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 256 * MIB,
            pids: 64,
            cpu_millis: 1000,
            cpu_time_ms: 30_000,
            timeout_ms: 30_000,
            file_size_bytes: 64 * MIB,
            open_files: 256,
            scratch_bytes: 64 * MIB,
            scratch_inodes: 4096,
            tmp_bytes: 64 * MIB,
            stdout_bytes: MIB,
            stderr_bytes: MIB,
        }
    }
}

impl Limits {
    /// The wall-clock timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Every limit with its name and value, for clamping and reports.
    fn fields(&self) -> [(&'static str, u64); 12] {
        [
            ("memory_bytes", self.memory_bytes),
            ("pids", u64::from(self.pids)),
            ("cpu_millis", u64::from(self.cpu_millis)),
            ("cpu_time_ms", self.cpu_time_ms),
            ("timeout_ms", self.timeout_ms),
            ("file_size_bytes", self.file_size_bytes),
            ("open_files", u64::from(self.open_files)),
            ("scratch_bytes", self.scratch_bytes),
            ("scratch_inodes", self.scratch_inodes),
            ("tmp_bytes", self.tmp_bytes),
            ("stdout_bytes", self.stdout_bytes),
            ("stderr_bytes", self.stderr_bytes),
        ]
    }

    /// Checks that no limit is zero or absurdly small, naming the field.
    pub(crate) fn validate(&self, prefix: &str) -> Result<(), SandboxError> {
        let minimum: [(&str, u64); 12] = [
            ("memory_bytes", 8 * MIB),
            ("pids", 1),
            ("cpu_millis", 10),
            ("cpu_time_ms", 1),
            ("timeout_ms", 1),
            ("file_size_bytes", 1),
            ("open_files", 16),
            ("scratch_bytes", 64 * 1024),
            ("scratch_inodes", 16),
            ("tmp_bytes", 64 * 1024),
            ("stdout_bytes", 0),
            ("stderr_bytes", 0),
        ];
        for ((name, value), (_, min)) in self.fields().into_iter().zip(minimum) {
            if value < min {
                return Err(SandboxError::config(
                    format!("{prefix}.{name}"),
                    format!("is {value}; it must be at least {min}"),
                ));
            }
        }
        Ok(())
    }
}

/// A tool's own request: each limit it sets replaces the server's default, up to the
/// server's ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(
    missing_docs,
    reason = "the fields are those of `Limits`, documented there"
)]
pub struct LimitsRequest {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u32>,
    pub cpu_millis: Option<u32>,
    pub cpu_time_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub open_files: Option<u32>,
    pub scratch_bytes: Option<u64>,
    pub scratch_inodes: Option<u64>,
    pub tmp_bytes: Option<u64>,
    pub stdout_bytes: Option<u64>,
    pub stderr_bytes: Option<u64>,
}

/// A requested value that exceeded the server's ceiling and was lowered to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clamp {
    /// The limit, e.g. `memory_bytes` or `network`.
    pub limit: String,
    /// What the tool asked for.
    pub requested: u64,
    /// What it got.
    pub granted: u64,
}

impl std::fmt::Display for Clamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} exceeds the server's ceiling; {} granted",
            self.limit, self.requested, self.granted
        )
    }
}

impl LimitsRequest {
    /// The effective limits: each requested value or the default, at most the ceiling.
    /// Every value lowered to its ceiling is listed.
    pub fn resolve(&self, defaults: &Limits, ceilings: &Limits) -> (Limits, Vec<Clamp>) {
        let mut clamps = Vec::new();
        let mut pick = |name: &str, requested: Option<u64>, default: u64, ceiling: u64| -> u64 {
            let wanted = requested.unwrap_or(default);
            if wanted > ceiling {
                clamps.push(Clamp {
                    limit: name.to_owned(),
                    requested: wanted,
                    granted: ceiling,
                });
                ceiling
            } else {
                wanted
            }
        };
        let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let limits = Limits {
            memory_bytes: pick(
                "memory_bytes",
                self.memory_bytes,
                defaults.memory_bytes,
                ceilings.memory_bytes,
            ),
            pids: narrow(pick(
                "pids",
                self.pids.map(u64::from),
                u64::from(defaults.pids),
                u64::from(ceilings.pids),
            )),
            cpu_millis: narrow(pick(
                "cpu_millis",
                self.cpu_millis.map(u64::from),
                u64::from(defaults.cpu_millis),
                u64::from(ceilings.cpu_millis),
            )),
            cpu_time_ms: pick(
                "cpu_time_ms",
                self.cpu_time_ms,
                defaults.cpu_time_ms,
                ceilings.cpu_time_ms,
            ),
            timeout_ms: pick(
                "timeout_ms",
                self.timeout_ms,
                defaults.timeout_ms,
                ceilings.timeout_ms,
            ),
            file_size_bytes: pick(
                "file_size_bytes",
                self.file_size_bytes,
                defaults.file_size_bytes,
                ceilings.file_size_bytes,
            ),
            open_files: narrow(pick(
                "open_files",
                self.open_files.map(u64::from),
                u64::from(defaults.open_files),
                u64::from(ceilings.open_files),
            )),
            scratch_bytes: pick(
                "scratch_bytes",
                self.scratch_bytes,
                defaults.scratch_bytes,
                ceilings.scratch_bytes,
            ),
            scratch_inodes: pick(
                "scratch_inodes",
                self.scratch_inodes,
                defaults.scratch_inodes,
                ceilings.scratch_inodes,
            ),
            tmp_bytes: pick(
                "tmp_bytes",
                self.tmp_bytes,
                defaults.tmp_bytes,
                ceilings.tmp_bytes,
            ),
            stdout_bytes: pick(
                "stdout_bytes",
                self.stdout_bytes,
                defaults.stdout_bytes,
                ceilings.stdout_bytes,
            ),
            stderr_bytes: pick(
                "stderr_bytes",
                self.stderr_bytes,
                defaults.stderr_bytes,
                ceilings.stderr_bytes,
            ),
        };
        (limits, clamps)
    }
}

/// Whether the sandbox has outbound network access. Either way it has its own network
/// namespace: the host's loopback and its own ports are unreachable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Only the sandbox's own loopback (the seed's default).
    #[default]
    Off,
    /// Outbound access through a user-mode network stack (slirp4netns).
    On,
}

/// A host file or folder shown inside the sandbox: read-only for a tool's code, the
/// runners, a dependency cache, or (on a developer's own machine) the project folder;
/// read-write for a package cache ([`Bind::package_cache`]) or a folder the caller
/// trusts the run with ([`Bind::read_write`]); or a folder the run may change only
/// through a bounded layer of its own, merged back by the caller afterwards
/// ([`Bind::overlay`]: an agent's workspace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bind {
    /// The host path (absolute).
    pub source: PathBuf,
    /// Where it appears in the sandbox (absolute; not under `/usr`, `/proc`, `/dev`,
    /// `/etc`, `/tmp`, `/work` or the lib and bin links).
    pub target: PathBuf,
    /// Whether programs under it may be executed. A writable bind is not, so nothing
    /// the sandbox writes can be run as a program, except a package cache
    /// ([`Bind::package_cache`]), the one folder whose purpose is to hold programs the
    /// sandbox downloads and then runs.
    #[serde(default)]
    pub exec: bool,
    /// Whether the sandbox may write under it (a host folder only). Before each run the
    /// folder's tree is given to the run's pool uid, never following a symlink, so a
    /// run can change what earlier runs (with other pool uids) or the supervisor left;
    /// what it writes is owned by that uid, never root. Without [`Bind::overlay`],
    /// nothing limits its size but the host filesystem and the per-file limit
    /// (`file_size_bytes`).
    #[serde(default)]
    pub writable: bool,
    /// An overlay bind ([`Bind::overlay`]): the run sees the folder read-write, but
    /// what it changes lands in a fresh layer of at most this room, never in the
    /// folder; the caller merges the layer afterwards ([`Upper::merge`](crate::Upper::merge)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<OverlayRoom>,
    /// The overlay mounted for one run by [`Sandbox::run`](crate::Sandbox::run) before
    /// the start (never given by a caller).
    #[serde(skip)]
    pub(crate) prepared: Option<crate::overlay::PreparedRef>,
}

/// How much one run may write through an overlay bind: the size and the inodes of the
/// layer its changes land in (a tmpfs, so its pages are also memory of the run's
/// cgroup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayRoom {
    /// Bytes, counted by the tmpfs in whole pages: rounded down to a page, and at least
    /// one page (a tmpfs cannot be smaller). A file changed in place is copied whole
    /// into the layer first.
    pub bytes: u64,
    /// New entries (files, folders, symlinks; a folder holding a change or a deletion
    /// is one too). A few more inodes are added for the layer's own structure.
    pub files: u64,
}

impl Bind {
    fn with(
        source: impl Into<PathBuf>,
        target: impl Into<PathBuf>,
        exec: bool,
        writable: bool,
    ) -> Bind {
        Bind {
            source: source.into(),
            target: target.into(),
            exec,
            writable,
            overlay: None,
            prepared: None,
        }
    }

    /// A read-only bind of `source` at `target`, not executable.
    pub fn read_only(source: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Bind {
        Bind::with(source, target, false, false)
    }

    /// A read-only bind whose programs may be executed.
    pub fn executable(source: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Bind {
        Bind::with(source, target, true, false)
    }

    /// A package cache: a read-write bind whose programs may also be executed (what
    /// `npx -y PACKAGE` or `uvx PACKAGE` downloads and then runs). Why this is safe
    /// enough: the code in it runs inside the same sandbox that downloaded it, and a
    /// cache belongs to one server of one scope (a tenant, an agent), so what one run
    /// leaves there can only change later runs of the same server for the same owner.
    /// Its tree is given to the run's pool uid before the run, as for
    /// [`Bind::read_write`].
    pub fn package_cache(source: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Bind {
        Bind::with(source, target, true, true)
    }

    /// A read-write bind of the host folder `source` at `target`, not executable: its
    /// tree is given to the run's pool uid before the run (see [`Bind::writable`]).
    pub fn read_write(source: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Bind {
        Bind::with(source, target, false, true)
    }

    /// The host folder `source` at `target` as an overlay, for one-shot runs
    /// ([`Sandbox::run`](crate::Sandbox::run)): the run reads the folder and may change
    /// anything in it, but every change (a new or changed file, a deletion, a rename)
    /// lands in a fresh tmpfs layer limited to `room`, and the folder itself is never
    /// written while the run lasts, so a run can never fill the host's disk or inodes
    /// through it. The layer comes back in [`Outcome::uppers`](crate::Outcome::uppers)
    /// for the caller to merge into the folder under its own budget
    /// ([`Upper::merge`](crate::Upper::merge)), also after a run that was killed. Not
    /// executable, never set-uid or devices; the folder's tree is given to the run's
    /// pool uid first, as for [`Bind::read_write`].
    pub fn overlay(
        source: impl Into<PathBuf>,
        target: impl Into<PathBuf>,
        room: OverlayRoom,
    ) -> Bind {
        Bind {
            overlay: Some(room),
            ..Bind::with(source, target, false, true)
        }
    }
}

/// The sandbox paths a bind may not cover: the root's own parts.
pub(crate) const RESERVED_TARGETS: &[&str] = &[
    "/usr", "/proc", "/dev", "/etc", "/tmp", "/work", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32",
];

/// Checks a bind target: absolute, normal components only, outside the reserved paths.
pub(crate) fn check_target(field: &str, target: &Path) -> Result<(), SandboxError> {
    use std::path::Component;
    if !target.is_absolute() {
        return Err(SandboxError::config(
            field,
            format!("{} is not absolute", target.display()),
        ));
    }
    let mut depth = 0;
    for c in target.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(_) => depth += 1,
            _ => {
                return Err(SandboxError::config(
                    field,
                    format!("{} has `.` or `..` components", target.display()),
                ));
            }
        }
    }
    if depth == 0 {
        return Err(SandboxError::config(field, "cannot be `/`"));
    }
    for reserved in RESERVED_TARGETS {
        if target.starts_with(reserved) {
            return Err(SandboxError::config(
                field,
                format!(
                    "{} is under {reserved}, which the sandbox's root provides; choose another place, e.g. /tool or /project",
                    target.display()
                ),
            ));
        }
    }
    Ok(())
}

/// One command to run in the sandbox.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// The program: an absolute path inside the sandbox, or a name looked up in
    /// `/usr/local/bin`, `/usr/bin` and `/bin`.
    pub program: OsString,
    /// Its arguments (without the program itself).
    pub args: Vec<OsString>,
    /// The whole environment: nothing else of the supervisor's is passed.
    pub env: Vec<(OsString, OsString)>,
    /// Binds: read-only, or read-write ([`Bind::read_write`]).
    pub binds: Vec<Bind>,
    /// The tool's own limits, clamped to the server's ceilings.
    pub limits: LimitsRequest,
    /// Network access.
    pub network: Network,
    /// Files written into the scratch folder before the start (path relative to it,
    /// contents), owned by the sandbox's user.
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// Files read back from the scratch folder after a one-shot run (relative paths),
    /// with no-follow, beneath-only opens; into [`Outcome::files`](crate::Outcome::files).
    pub collect: Vec<PathBuf>,
    /// The most bytes read back of each collected file; a larger one is refused by its
    /// size before any of it is read. `None`: the run's file size limit.
    pub collect_max_bytes: Option<u64>,
}

impl RunSpec {
    /// A spec running `program` with `args`, with the defaults for everything else.
    pub fn new<I, S>(program: impl Into<OsString>, args: I) -> RunSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        RunSpec {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..RunSpec::default()
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> RunSpec {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Adds a bind.
    pub fn bind(mut self, bind: Bind) -> RunSpec {
        self.binds.push(bind);
        self
    }
}

/// A protection the operator may turn off, by name, on a host that cannot provide it.
/// Without the opt-in, a missing mechanism is an error and nothing runs.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Weakening {
    /// Run without Landlock, or with an ABI older than the sandbox requires.
    Landlock,
    /// Run without cgroup limits (memory, pids, CPU quota) when no usable cgroup
    /// hierarchy exists: rlimits and the pid namespace still apply.
    Cgroup,
}

/// A range of dedicated, unprivileged host uids (and the gids of the same numbers):
/// each running sandbox holds one of them alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UidPool {
    /// The first host uid.
    pub first: u32,
    /// How many uids follow it.
    pub count: u32,
}

impl Default for UidPool {
    fn default() -> Self {
        // Far above distribution and container subuid ranges (100000 + 65536 * n).
        UidPool {
            first: 2_100_000_000,
            count: 4096,
        }
    }
}

/// The supervisor's settings: shared by every run of one server or CLI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// The limits of a tool that asks for nothing.
    pub defaults: Limits,
    /// The most a tool may ask for; larger requests are clamped and reported.
    pub ceilings: Limits,
    /// Whether tools may have the network at all (a request is clamped to off).
    pub network_allowed: bool,
    /// Host uids given to sandboxes.
    pub uid_pool: UidPool,
    /// The cgroup under which each run gets its own (created in every hierarchy used).
    pub cgroup_parent: String,
    /// The supervisor's own folder: uid leases and the prepared root skeletons.
    pub runtime_dir: PathBuf,
    /// The user-mode network helper.
    pub network_helper: PathBuf,
    /// Network namespaces (and cgroups) made ahead of the runs, on a thread of their own
    /// (0: each sandbox creates its own as it starts).
    pub prepared_ahead: usize,
    /// Sandboxes started ahead of their command for one-shot runs without binds and
    /// with the network off: each waits locked down in its namespaces and cgroup, and a
    /// run then pays for its command's exec only (0: every run starts its own). Each
    /// waiting sandbox holds a pool uid, a cgroup and a copy-on-write view of the
    /// supervisor's memory until a run takes it. At most 64.
    pub started_ahead: usize,
    /// The oldest Landlock ABI accepted (newer features apply where the kernel has
    /// them). An older kernel is refused unless `landlock` is in `allow_weaker`.
    pub landlock_min_abi: u8,
    /// Protections the operator turned off, by name.
    pub allow_weaker: Vec<Weakening>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            defaults: Limits::default(),
            ceilings: Limits {
                memory_bytes: 4096 * MIB,
                pids: 1024,
                cpu_millis: 4000,
                cpu_time_ms: 600_000,
                timeout_ms: 600_000,
                file_size_bytes: 1024 * MIB,
                open_files: 4096,
                scratch_bytes: 1024 * MIB,
                scratch_inodes: 65_536,
                tmp_bytes: 1024 * MIB,
                stdout_bytes: 64 * MIB,
                stderr_bytes: 64 * MIB,
            },
            network_allowed: true,
            uid_pool: UidPool::default(),
            cgroup_parent: "toolshed-sandbox".into(),
            runtime_dir: PathBuf::from("/run/toolshed-sandbox"),
            network_helper: PathBuf::from("slirp4netns"),
            prepared_ahead: 4,
            started_ahead: 1,
            landlock_min_abi: 1,
            allow_weaker: Vec::new(),
        }
    }
}

impl SandboxConfig {
    /// Checks every field, naming the first wrong one.
    pub fn validate(&self) -> Result<(), SandboxError> {
        self.defaults.validate("defaults")?;
        self.ceilings.validate("ceilings")?;
        for ((name, default), (_, ceiling)) in self
            .defaults
            .fields()
            .into_iter()
            .zip(self.ceilings.fields())
        {
            if default > ceiling {
                return Err(SandboxError::config(
                    format!("defaults.{name}"),
                    format!(
                        "is {default}, above its ceiling {ceiling}; lower it or raise `ceilings.{name}`"
                    ),
                ));
            }
        }
        if self.uid_pool.count == 0 {
            return Err(SandboxError::config("uid_pool.count", "must be at least 1"));
        }
        if self.uid_pool.first == 0
            || u64::from(self.uid_pool.first) + u64::from(self.uid_pool.count)
                > u64::from(u32::MAX - 1)
        {
            return Err(SandboxError::config(
                "uid_pool.first",
                "the pool must lie within 1..4294967294 (never uid 0)",
            ));
        }
        if self.cgroup_parent.is_empty()
            || !self
                .cgroup_parent
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(SandboxError::config(
                "cgroup_parent",
                "must be one name of letters, digits, `-` or `_`",
            ));
        }
        if !self.runtime_dir.is_absolute() {
            return Err(SandboxError::config("runtime_dir", "must be absolute"));
        }
        if self.started_ahead > 64 {
            return Err(SandboxError::config(
                "started_ahead",
                format!("is {}, more than 64; lower it", self.started_ahead),
            ));
        }
        Ok(())
    }

    /// Whether the operator turned `w` off.
    pub fn allows(&self, w: Weakening) -> bool {
        self.allow_weaker.contains(&w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_above_the_ceiling_are_clamped_and_listed() {
        let config = SandboxConfig::default();
        let request = LimitsRequest {
            memory_bytes: Some(64 * 1024 * MIB),
            timeout_ms: Some(1_000),
            ..LimitsRequest::default()
        };
        let (limits, clamps) = request.resolve(&config.defaults, &config.ceilings);
        assert_eq!(limits.memory_bytes, config.ceilings.memory_bytes);
        assert_eq!(limits.timeout_ms, 1_000);
        assert_eq!(limits.pids, config.defaults.pids);
        assert_eq!(clamps.len(), 1);
        assert_eq!(clamps[0].limit, "memory_bytes");
        assert!(clamps[0].to_string().contains("ceiling"), "{}", clamps[0]);
    }

    #[test]
    fn the_defaults_are_the_seeds() {
        let l = Limits::default();
        assert_eq!(l.memory_bytes, 256 * MIB);
        assert_eq!(l.timeout_ms, 30_000);
        assert_eq!(RunSpec::default().network, Network::Off);
        SandboxConfig::default()
            .validate()
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_default_above_its_ceiling_names_the_field() {
        let mut config = SandboxConfig::default();
        config.defaults.pids = config.ceilings.pids + 1;
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("defaults.pids"), "{e}");
    }

    #[test]
    fn bind_targets_stay_out_of_the_roots_own_parts() {
        for bad in [
            "relative", "/", "/usr/x", "/proc", "/work/a", "/a/../b", "/tmp",
        ] {
            assert!(
                check_target("binds[0].target", Path::new(bad)).is_err(),
                "{bad} was accepted"
            );
        }
        check_target("t", Path::new("/tool/code.py")).unwrap_or_else(|e| panic!("{e}"));
        check_target("t", Path::new("/project")).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn weakenings_are_named() {
        assert_eq!(
            "landlock".parse::<Weakening>().ok(),
            Some(Weakening::Landlock)
        );
        assert_eq!(Weakening::Cgroup.to_string(), "cgroup");
    }
}
