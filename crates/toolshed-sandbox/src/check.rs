//! What this host supports, mechanism by mechanism, and what to do about what it lacks.
//! `Sandbox::new` refuses to start when a required mechanism is missing (unless the
//! operator opted into running without it, by name); [`check`] reports them all.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::cgroup::Discovery;
use crate::config::{SandboxConfig, Weakening};

/// A kernel mechanism (or privilege) the sandbox relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, strum::Display, strum::EnumIter)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Mechanism {
    /// New user, mount, pid, network, ipc, uts and cgroup namespaces.
    Namespaces,
    /// Root in the host's user namespace: mapping pool uids, cgroups, tmpfs mounts.
    Privileges,
    /// Memory (swap counted), pids and CPU limits, freezing and accounting.
    Cgroups,
    /// Landlock filesystem, TCP and scope rules.
    Landlock,
    /// Seccomp filters.
    Seccomp,
    /// pidfds (`pidfd_open`, waiting and signalling by fd).
    Pidfd,
    /// The mount API (`fsopen`, `open_tree`, `move_mount`, `mount_setattr`).
    MountApi,
    /// overlayfs through the mount API: the layer a `sandbox: true` workspace's `bash`
    /// call writes into (`Bind::overlay`). Optional: without it only that feature is
    /// refused.
    Overlay,
    /// `openat2` with `RESOLVE_BENEATH` (reading back the tool's files).
    Openat2,
    /// The user-mode network helper (slirp4netns), for tools with the network on.
    NetworkHelper,
    /// A whole sandboxed run of `true`.
    Trial,
}

/// How a mechanism stands on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Status {
    /// Works.
    Ok,
    /// Works with less than everything (the detail says what is missing).
    Partial,
    /// Missing, but the operator opted into running without it.
    Weakened,
    /// Missing; untrusted code is refused (or, for an optional mechanism, that feature).
    Missing,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct MechanismReport {
    /// Which mechanism.
    pub mechanism: Mechanism,
    /// How it stands.
    pub status: Status,
    /// Whether untrusted code is refused without it.
    pub required: bool,
    /// What the host reported.
    pub detail: String,
    /// What to do, when it is not `ok`.
    pub fix: Option<String>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct HostSupport {
    /// Every mechanism, in a fixed order.
    pub mechanisms: Vec<MechanismReport>,
}

impl HostSupport {
    /// Whether untrusted code can run: no required mechanism is missing.
    pub fn ready(&self) -> bool {
        !self
            .mechanisms
            .iter()
            .any(|m| m.required && m.status == Status::Missing)
    }

    /// The first required mechanism that is missing.
    pub fn first_missing(&self) -> Option<&MechanismReport> {
        self.mechanisms
            .iter()
            .find(|m| m.required && m.status == Status::Missing)
    }

    /// The report of one mechanism.
    pub fn get(&self, m: Mechanism) -> Option<&MechanismReport> {
        self.mechanisms.iter().find(|r| r.mechanism == m)
    }
}

fn report(
    mechanism: Mechanism,
    status: Status,
    required: bool,
    detail: impl Into<String>,
    fix: Option<&str>,
) -> MechanismReport {
    MechanismReport {
        mechanism,
        status,
        required,
        detail: detail.into(),
        fix: if status == Status::Ok {
            None
        } else {
            fix.map(str::to_owned)
        },
    }
}

/// The host facts `Sandbox::new` needs besides the report.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    pub landlock_abi: Option<i32>,
    pub cgroups: Option<Discovery>,
    /// The seccomp programs (built once, for the report and the runs).
    pub seccomp: Option<crate::seccomp::Programs>,
}

/// How much a probe looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The mechanisms every run needs (`Sandbox::new`). The optional ones are checked
    /// where they are used: overlayfs by a workspace's bash call, the network helper by
    /// a run with the network on; each refuses with its own clear error.
    Required,
    /// Everything, with the network helper's version (`toolshed sandbox check`).
    Full,
}

/// Probes the host (no process is started). `cgroups` is the cgroup discovery, read
/// by the caller (`Sandbox::new` reads it first, to start making cgroups while the rest
/// is probed).
pub(crate) fn probe(
    config: &SandboxConfig,
    scope: Scope,
    cgroups: io::Result<Discovery>,
) -> (HostSupport, Facts) {
    let mut facts = Facts::default();
    let mut out = Vec::new();

    // Namespaces: one read of /proc/self/ns rather than a lookup per namespace.
    let present: Vec<std::ffi::OsString> = std::fs::read_dir("/proc/self/ns")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let missing_ns: Vec<&str> = ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"]
        .into_iter()
        .filter(|ns| !present.iter().any(|p| p == ns))
        .collect();
    let max_userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    out.push(if !missing_ns.is_empty() {
        report(
            Mechanism::Namespaces,
            Status::Missing,
            true,
            format!("the kernel has no {} namespace", missing_ns.join(", ")),
            Some("use a kernel built with CONFIG_USER_NS, CONFIG_PID_NS, CONFIG_NET_NS, CONFIG_IPC_NS, CONFIG_UTS_NS and CONFIG_CGROUPS"),
        )
    } else if max_userns == Some(0) {
        report(
            Mechanism::Namespaces,
            Status::Missing,
            true,
            "user namespaces are disabled (user.max_user_namespaces = 0)",
            Some("enable them: sysctl -w user.max_user_namespaces=15000"),
        )
    } else {
        report(
            Mechanism::Namespaces,
            Status::Ok,
            true,
            format!(
                "user, mount, pid, net, ipc, uts, cgroup (max user namespaces {})",
                max_userns.map_or_else(|| "unknown".to_owned(), |n| n.to_string())
            ),
            None,
        )
    });

    // Privileges: root in the initial user namespace.
    let euid = rustix::process::geteuid();
    let init_userns = std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
        .unwrap_or(false);
    out.push(if euid.is_root() && init_userns {
        report(
            Mechanism::Privileges,
            Status::Ok,
            true,
            format!(
                "root in the host's user namespace; pool uids {}..{}",
                config.uid_pool.first,
                u64::from(config.uid_pool.first) + u64::from(config.uid_pool.count)
            ),
            None,
        )
    } else {
        report(
            Mechanism::Privileges,
            Status::Missing,
            true,
            if euid.is_root() {
                "root, but inside a user namespace: host uids of the pool cannot be mapped".to_owned()
            } else {
                format!("running as uid {}, not root", euid.as_raw())
            },
            Some("run the supervisor (the server, or the CLI) as root in the host's user namespace, e.g. as a systemd service"),
        )
    });

    // Cgroups.
    match cgroups {
        Ok(d) => {
            let weakened = config.allows(Weakening::Cgroup);
            let missing_status = if weakened {
                Status::Weakened
            } else {
                Status::Missing
            };
            let fix = "mount cgroup v2 with the memory, pids and cpu controllers (or the v1 memory, pids, cpu, cpuacct and freezer hierarchies) and run the supervisor as root; or opt in to `cgroup` to run with rlimits only";
            let line = if d.v2_usable() {
                let (mount, _) = d.v2.clone().unwrap_or_default();
                report(
                    Mechanism::Cgroups,
                    Status::Ok,
                    true,
                    format!("cgroup v2 at {} (memory, pids, cpu)", mount.display()),
                    None,
                )
            } else if d.v1_missing().is_empty() {
                let memsw = d
                    .v1_mount("memory")
                    .is_some_and(|m| m.join("memory.memsw.limit_in_bytes").exists());
                let v2_note = match &d.v2 {
                    Some((m, c)) if c.is_empty() => {
                        format!("; the cgroup2 mount at {} has no controllers", m.display())
                    }
                    _ => String::new(),
                };
                if memsw {
                    report(
                        Mechanism::Cgroups,
                        Status::Ok,
                        true,
                        format!(
                            "cgroup v1: memory (swap counted by memsw), pids, cpu, cpuacct, freezer{v2_note}"
                        ),
                        None,
                    )
                } else {
                    report(
                        Mechanism::Cgroups,
                        Status::Partial,
                        true,
                        format!(
                            "cgroup v1 without memory.memsw: swap is not counted in the memory limit{v2_note}"
                        ),
                        Some("boot with swapaccount=1 (or run without swap)"),
                    )
                }
            } else {
                report(
                    Mechanism::Cgroups,
                    missing_status,
                    true,
                    format!(
                        "no usable hierarchy: cgroup v2 {}; cgroup v1 lacks {}",
                        match &d.v2 {
                            Some((m, c)) => format!("at {} offers [{}]", m.display(), c.join(" ")),
                            None => "is not mounted".to_owned(),
                        },
                        d.v1_missing().join(", ")
                    ),
                    Some(fix),
                )
            };
            facts.cgroups = Some(d);
            out.push(line);
        }
        Err(e) => out.push(report(
            Mechanism::Cgroups,
            if config.allows(Weakening::Cgroup) {
                Status::Weakened
            } else {
                Status::Missing
            },
            true,
            format!("cannot read /proc/self/mountinfo: {e}"),
            Some("mount /proc"),
        )),
    }

    // Landlock.
    let landlock_missing = if config.allows(Weakening::Landlock) {
        Status::Weakened
    } else {
        Status::Missing
    };
    out.push(match crate::sys::landlock_abi() {
        Ok(abi) => {
            let lacking: Vec<&str> = crate::landlock::features(abi)
                .into_iter()
                .filter(|(_, has)| !has)
                .map(|(name, _)| name)
                .collect();
            if abi < i32::from(config.landlock_min_abi) {
                report(
                    Mechanism::Landlock,
                    landlock_missing,
                    true,
                    if lacking.is_empty() {
                        format!("ABI {abi}, older than the required {}", config.landlock_min_abi)
                    } else {
                        format!(
                            "ABI {abi}, older than the required {} (it lacks {})",
                            config.landlock_min_abi,
                            lacking.join(", ")
                        )
                    },
                    Some("upgrade the kernel (ABI 6 is Linux 6.12), lower `landlock_min_abi`, or opt in to `landlock` (`allow_weaker`)"),
                )
            } else {
                facts.landlock_abi = Some(abi);
                if lacking.is_empty() {
                    report(
                        Mechanism::Landlock,
                        Status::Ok,
                        true,
                        format!("ABI {abi}: filesystem, TCP, abstract unix socket and signal scoping"),
                        None,
                    )
                } else {
                    report(
                        Mechanism::Landlock,
                        Status::Partial,
                        true,
                        format!(
                            "ABI {abi}: without {} (the namespaces still isolate them)",
                            lacking.join(", ")
                        ),
                        Some("a newer kernel adds them (ABI 6: Linux 6.12)"),
                    )
                }
            }
        }
        Err(e) => report(
            Mechanism::Landlock,
            landlock_missing,
            true,
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => "built into the kernel but not enabled".to_owned(),
                _ => format!("not in the kernel ({e})"),
            },
            Some("enable it: add `landlock` to the lsm= boot parameter (CONFIG_SECURITY_LANDLOCK=y); or opt in to `landlock`"),
        ),
    });

    // Seccomp.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let has_seccomp = status.lines().any(|l| l.starts_with("Seccomp:"));
    let compiled = crate::seccomp::Programs::build();
    out.push(match (&compiled, has_seccomp) {
        (Ok(p), true) => report(
            Mechanism::Seccomp,
            Status::Ok,
            true,
            format!(
                "deny-list of {} system calls plus clone namespace flags, clone3, TIOCSTI and socket families but AF_UNIX (AF_INET and AF_INET6 with the network on) ({} BPF instructions)",
                crate::seccomp::DENIED.len(),
                p.on.instructions().len()
            ),
            None,
        ),
        (Err(e), _) => report(
            Mechanism::Seccomp,
            Status::Missing,
            true,
            e.clone(),
            Some("run on x86_64, aarch64 or riscv64"),
        ),
        (_, false) => report(
            Mechanism::Seccomp,
            Status::Missing,
            true,
            "the kernel has no seccomp",
            Some("use a kernel built with CONFIG_SECCOMP_FILTER"),
        ),
    });
    if has_seccomp {
        facts.seccomp = compiled.ok();
    }

    // pidfd.
    out.push(
        match rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        ) {
            Ok(_) => report(
                Mechanism::Pidfd,
                Status::Ok,
                true,
                "pidfd_open, waitid(P_PIDFD)",
                None,
            ),
            Err(e) => report(
                Mechanism::Pidfd,
                Status::Missing,
                true,
                format!("pidfd_open failed: {e}"),
                Some("use Linux 5.10 or newer"),
            ),
        },
    );

    // Mount API.
    out.push(
        match rustix::mount::fsopen(c"tmpfs", rustix::mount::FsOpenFlags::FSOPEN_CLOEXEC) {
            Ok(_) => report(
                Mechanism::MountApi,
                Status::Ok,
                true,
                "fsopen, fsmount, open_tree, move_mount, mount_setattr",
                None,
            ),
            Err(e) => report(
                Mechanism::MountApi,
                Status::Missing,
                true,
                format!("fsopen(tmpfs) failed: {e}"),
                Some("use Linux 5.12 or newer, and run the supervisor as root"),
            ),
        },
    );

    // openat2.
    out.push(
        match rustix::fs::openat2(
            rustix::fs::CWD,
            "/proc",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            rustix::fs::ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(_) => report(
                Mechanism::Openat2,
                Status::Ok,
                true,
                "RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS",
                None,
            ),
            Err(e) => report(
                Mechanism::Openat2,
                Status::Missing,
                true,
                format!("openat2 failed: {e}"),
                Some("use Linux 5.6 or newer"),
            ),
        },
    );

    if scope == Scope::Full {
        probe_optional(config, &facts, &mut out);
    }
    (HostSupport { mechanisms: out }, facts)
}

/// The mechanisms only some runs need.
fn probe_optional(config: &SandboxConfig, facts: &Facts, out: &mut Vec<MechanismReport>) {
    // overlayfs (workspace overlays). `fsopen` loads the module when it is not loaded yet,
    // which a look at /proc/filesystems would not.
    out.push(
        match rustix::mount::fsopen(c"overlay", rustix::mount::FsOpenFlags::FSOPEN_CLOEXEC) {
            Ok(_) => report(
                Mechanism::Overlay,
                Status::Ok,
                false,
                "overlayfs (the layer of a workspace's bash calls)",
                None,
            ),
            Err(e) => report(
                Mechanism::Overlay,
                Status::Missing,
                false,
                format!("fsopen(overlay) failed: {e}; `sandbox: true` agents' bash calls are refused"),
                Some("load the overlay module (modprobe overlay), or use a kernel built with CONFIG_OVERLAY_FS"),
            ),
        },
    );

    // The network helper (only for tools with the network on), confined by a BPF filter
    // on a cgroup v2 folder.
    let cgroup2 = facts
        .cgroups
        .as_ref()
        .and_then(|d| d.v2.as_ref().map(|(m, _)| m.clone()));
    out.push(match (find_helper(&config.network_helper), cgroup2) {
        (Some(path), None) => report(
            Mechanism::NetworkHelper,
            Status::Missing,
            false,
            format!(
                "{} is installed, but no cgroup v2 hierarchy is mounted to keep it from the host's own addresses",
                path.display()
            ),
            Some("mount cgroup2 (e.g. `mount -t cgroup2 none /sys/fs/cgroup/unified`)"),
        ),
        (helper, cgroup2) => match helper {
        Some(path) => {
            let cgroup2 = cgroup2.unwrap_or_default();
            let version = std::process::Command::new(&path)
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            report(
                Mechanism::NetworkHelper,
                Status::Ok,
                false,
                format!(
                    "{} ({}); the host's own addresses filtered by BPF on the cgroup v2 at {}",
                    path.display(),
                    version.trim(),
                    cgroup2.display()
                ),
                None,
            )
        }
        None => report(
            Mechanism::NetworkHelper,
            Status::Missing,
            false,
            format!(
                "{} not found: tools asking for the network cannot run",
                config.network_helper.display()
            ),
            Some("install slirp4netns (Debian: apt-get install slirp4netns)"),
        ),
        },
    });
}

/// The helper's path: as configured when it has a `/`, else looked up in `PATH` and the
/// usual folders.
pub(crate) fn find_helper(configured: &Path) -> Option<PathBuf> {
    if configured.as_os_str().to_string_lossy().contains('/') {
        return configured.is_file().then(|| configured.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|d| d.join(configured))
        .find(|p| p.is_file())
}

/// Reports what this host supports, mechanism by mechanism, ending with a trial run of
/// `true` in a sandbox (when nothing required is missing).
pub async fn check(config: &SandboxConfig) -> HostSupport {
    let (mut support, _) = probe(config, Scope::Full, Discovery::read());
    let trial = if support.ready() {
        let started = Instant::now();
        match crate::Sandbox::new(config.clone()) {
            Ok(sandbox) => match sandbox
                .run(
                    crate::RunSpec::new("true", Vec::<String>::new()),
                    Vec::new(),
                )
                .await
            {
                Ok(o) if o.exit == crate::Exit::Code(0) => report(
                    Mechanism::Trial,
                    Status::Ok,
                    true,
                    format!(
                        "`true` ran sandboxed as host uid {} in {:.1} ms",
                        o.host_uid,
                        started.elapsed().as_secs_f64() * 1000.0
                    ),
                    None,
                ),
                Ok(o) => report(
                    Mechanism::Trial,
                    Status::Missing,
                    true,
                    format!(
                        "`true` ended with {:?}: {}",
                        o.exit,
                        String::from_utf8_lossy(&o.stderr)
                    ),
                    Some(
                        "read the detail; report it with the output of `toolshed sandbox check --json`",
                    ),
                ),
                Err(e) => report(
                    Mechanism::Trial,
                    Status::Missing,
                    true,
                    e.to_string(),
                    Some("fix what the detail names"),
                ),
            },
            Err(e) => report(
                Mechanism::Trial,
                Status::Missing,
                true,
                e.to_string(),
                Some("fix what the detail names"),
            ),
        }
    } else {
        report(
            Mechanism::Trial,
            Status::Missing,
            true,
            "not attempted: a required mechanism is missing",
            Some("fix the missing mechanisms above first"),
        )
    };
    support.mechanisms.push(trial);
    support
}
