//! [`Sandbox`]: the supervisor's handle. Built once (host checks, cgroup folders, the
//! seccomp programs, the uid pool), cloned cheaply, used for every run.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::cgroup::{self, Cgroups};
use crate::check::{HostSupport, Mechanism, Scope, Status};
use crate::config::{Clamp, Limits, Network, RunSpec, SandboxConfig, Weakening};
use crate::error::SandboxError;
use crate::mounts::Skeletons;
use crate::stock::Stock;
use crate::uidpool::Pool;

/// Runs commands sandboxed. Cheap to clone; every clone shares one supervisor state.
///
/// ```no_run
/// # async fn demo() -> Result<(), toolshed_sandbox::SandboxError> {
/// use toolshed_sandbox::{RunSpec, Sandbox, SandboxConfig};
///
/// let sandbox = Sandbox::new(SandboxConfig::default())?;
/// let outcome = sandbox
///     .run(RunSpec::new("/bin/sh", ["-c", "id -u; cat"]), b"hello".to_vec())
///     .await?;
/// assert_eq!(outcome.exit_code(), Some(0));
/// println!("{}", String::from_utf8_lossy(&outcome.stdout));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub(crate) inner: Arc<Inner>,
}

/// The shared state.
#[derive(Debug)]
pub(crate) struct Inner {
    /// Sandboxes started ahead (first, so they are given up before `ahead` flushes the
    /// janitor when the last handle goes).
    pub ready: crate::ready::Ready,
    pub config: SandboxConfig,
    pub support: HostSupport,
    /// What is made ahead of the runs.
    pub ahead: Ahead,
    /// The cgroup v2 mount (for the network helper's host-address filter).
    pub cgroup2: Option<std::path::PathBuf>,
    pub landlock_abi: Option<i32>,
    pub seccomp: crate::seccomp::Programs,
    pub pool: Pool,
    pub skeletons: Skeletons,
    /// `O_PATH` fds of `/usr` and the top-level folders bound like it (Landlock rules).
    pub usr: OwnedFd,
    pub top_dirs: Vec<OwnedFd>,
    /// Protections running without, by the operator's opt-in.
    pub weakened: Vec<Weakening>,
}

/// What the janitor thread makes ahead of the runs: cgroups and network namespaces.
#[derive(Debug)]
pub(crate) struct Ahead {
    pub cgroups: Option<Arc<Cgroups>>,
    pub netns: Arc<Stock<OwnedFd>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // The last handle is gone (or `Sandbox::new` failed after starting them): finish
        // the queued work, remove what no run took.
        self.netns.close();
        if let Some(c) = &self.cgroups {
            c.close();
        }
        crate::janitor::flush();
        if let Some(c) = &self.cgroups {
            c.clear();
        }
        self.netns.clear(drop);
    }
}

fn unavailable(support: &HostSupport, m: Mechanism) -> Option<SandboxError> {
    let r = support.get(m)?;
    (r.status == Status::Missing).then(|| SandboxError::MechanismUnavailable {
        mechanism: m,
        detail: r.detail.clone(),
        fix: r.fix.clone().unwrap_or_default(),
    })
}

impl Sandbox {
    /// Checks the host and prepares the supervisor. A missing mechanism is an error
    /// naming it and the fix, unless the operator allowed running without it
    /// ([`SandboxConfig::allow_weaker`]).
    pub fn new(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        config.validate()?;
        // The slowest preparations of a first run, a network namespace and the cgroup
        // folders, are started on the janitor thread before the host is checked, so a
        // one-shot process (the CLI) finds them ready, or makes what the janitor has not
        // begun itself, instead of waiting. Only root can make them; without root the
        // checks below refuse anyway.
        let root = rustix::process::geteuid().is_root();
        let ahead_size = if root { config.prepared_ahead } else { 0 };
        let netns = Stock::new("network namespace", ahead_size, crate::netns::create);
        let discovery = cgroup::Discovery::read();
        let hierarchy = match &discovery {
            Ok(d) => d.prepare(&config.cgroup_parent),
            Err(_) => Err("cannot read the cgroup mounts".to_owned()),
        };
        let ahead = Ahead {
            cgroups: hierarchy.as_ref().ok().map(|h| {
                let cgroups = Cgroups::new(h.clone(), ahead_size);
                if root {
                    // Folders of supervisors that died without removing them.
                    let sweep = h.clone();
                    crate::janitor::later(move || cgroup::sweep(&sweep));
                }
                cgroups
            }),
            netns,
        };

        let (support, facts) = crate::check::probe(&config, Scope::Required, discovery);
        if let Some(r) = support.get(Mechanism::Privileges)
            && r.status == Status::Missing
        {
            return Err(SandboxError::PrivilegeRequired {
                what: format!("root in the host's user namespace ({})", r.detail),
                fix: r.fix.clone().unwrap_or_default(),
            });
        }
        for m in [
            Mechanism::Namespaces,
            Mechanism::Seccomp,
            Mechanism::Pidfd,
            Mechanism::MountApi,
            Mechanism::Openat2,
            Mechanism::Landlock,
            Mechanism::Cgroups,
        ] {
            if let Some(e) = unavailable(&support, m) {
                return Err(e);
            }
        }
        let mut weakened = Vec::new();
        let landlock_abi = facts.landlock_abi;
        if landlock_abi.is_none() {
            weakened.push(Weakening::Landlock);
        }
        let cgroup2 = facts
            .cgroups
            .as_ref()
            .and_then(|d| d.v2.as_ref().map(|(m, _)| m.clone()));
        if let Err(detail) = hierarchy {
            if !config.allows(Weakening::Cgroup) {
                return Err(SandboxError::MechanismUnavailable {
                    mechanism: Mechanism::Cgroups,
                    detail,
                    fix: "run the supervisor as root with the cgroup hierarchies mounted read-write; or opt in to `cgroup`".into(),
                });
            }
            weakened.push(Weakening::Cgroup);
        }
        let seccomp = match facts.seccomp {
            Some(program) => program,
            None => crate::seccomp::Programs::build().map_err(|detail| {
                SandboxError::MechanismUnavailable {
                    mechanism: Mechanism::Seccomp,
                    detail,
                    fix: "run on x86_64, aarch64 or riscv64".into(),
                }
            })?,
        };
        std::fs::create_dir_all(&config.runtime_dir).map_err(|e| {
            SandboxError::io(
                format!(
                    "cannot create the runtime folder {}",
                    config.runtime_dir.display()
                ),
                e,
            )
        })?;
        let pool = Pool::new(config.uid_pool, &config.runtime_dir)?;
        if root {
            // Root skeletons no supervisor has used for a day (older versions, older
            // loader caches, layouts of binds no tool has any more).
            let runtime_dir = config.runtime_dir.clone();
            crate::janitor::later(move || {
                crate::mounts::sweep(&runtime_dir, crate::mounts::SKELETON_IDLE);
            });
        }
        let open = |p: &std::path::Path| {
            rustix::fs::open(
                p,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| SandboxError::io(format!("cannot open {}", p.display()), e.into()))
        };
        let usr = open(std::path::Path::new("/usr"))?;
        let mut top_dirs = Vec::new();
        for name in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let p = std::path::Path::new("/").join(name);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                top_dirs.push(open(&p)?);
            }
        }
        if !weakened.is_empty() {
            tracing::warn!(weakened = ?weakened, "the sandbox runs without protections the operator opted out of");
        }
        Ok(Sandbox {
            inner: Arc::new(Inner {
                ready: crate::ready::Ready::default(),
                config,
                support,
                ahead,
                cgroup2,
                landlock_abi,
                seccomp,
                pool,
                skeletons: Skeletons::default(),
                usr,
                top_dirs,
                weakened,
            }),
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// What the host supports (without the trial run of [`check`](crate::check)).
    pub fn support(&self) -> &HostSupport {
        &self.inner.support
    }

    /// How many network namespaces made ahead are ready (for diagnostics and tests).
    pub fn ready_network_namespaces(&self) -> usize {
        self.inner.ahead.netns.ready()
    }

    /// How many sandboxes started ahead wait for a run now
    /// ([`SandboxConfig::started_ahead`]; for diagnostics and tests).
    pub fn ready_sandboxes(&self) -> usize {
        self.inner.ready.waiting()
    }

    /// How many runs a sandbox started ahead has served
    /// ([`SandboxConfig::started_ahead`]).
    pub fn runs_started_ahead(&self) -> u64 {
        self.inner.ready.served()
    }

    /// Protections this sandbox runs without (by the operator's opt-in).
    pub fn weakened(&self) -> &[Weakening] {
        &self.inner.weakened
    }

    /// The effective limits and network of a spec, and every value clamped to a
    /// ceiling.
    pub fn resolve(&self, spec: &RunSpec) -> (Limits, Network, Vec<Clamp>) {
        let c = &self.inner.config;
        let (limits, mut clamps) = spec.limits.resolve(&c.defaults, &c.ceilings);
        let network = if spec.network == Network::On && !c.network_allowed {
            clamps.push(Clamp {
                limit: "network".into(),
                requested: 1,
                granted: 0,
            });
            Network::Off
        } else {
            spec.network
        };
        for clamp in &clamps {
            tracing::warn!(%clamp, "a sandbox limit was clamped to the server's ceiling");
        }
        (limits, network, clamps)
    }
}
