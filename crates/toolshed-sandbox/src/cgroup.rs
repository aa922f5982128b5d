//! Cgroup limits and accounting for one run, written through cgroupfs: cgroup v2 where
//! a hierarchy with the memory, pids and cpu controllers exists, else v1 (memory with
//! swap counted through `memsw`, pids, cpu quota, cpuacct, freezer).
//!
//! The parent creates the run's cgroup with its limits; the child is born in it (v2) or
//! moves itself in as its first step (v1), before it runs anything of the tool. At the
//! end the parent freezes the cgroup, kills everything in it, reads the accounting and
//! removes it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::Limits;

/// The CPU quota period: 100 ms, the kernel's default.
const CPU_PERIOD_US: u64 = 100_000;

/// Which cgroup hierarchy the sandbox uses, with the folder under which each run gets
/// its own cgroup.
#[derive(Debug, Clone)]
pub(crate) enum Hierarchy {
    /// One unified hierarchy with the controllers enabled down to `parent`.
    V2 {
        /// `<mount>/<cgroup_parent>`.
        parent: PathBuf,
    },
    /// One hierarchy per controller; `cpu` and `cpuacct` may be one folder.
    V1 {
        memory: PathBuf,
        /// Whether swap is counted (`memory.memsw.*` exists).
        memsw: bool,
        pids: PathBuf,
        cpu: PathBuf,
        cpuacct: PathBuf,
        freezer: PathBuf,
    },
}

/// What the host's cgroup mounts offer, per mechanism, for `check()`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Discovery {
    /// A cgroup2 mount and the controllers it offers.
    pub v2: Option<(PathBuf, Vec<String>)>,
    /// v1 mounts by controller name.
    pub v1: Vec<(String, PathBuf)>,
}

impl Discovery {
    /// Reads `/proc/self/mountinfo`.
    pub(crate) fn read() -> io::Result<Discovery> {
        let text = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mut d = Discovery::default();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split(' ').nth(4).map(unescape);
            let mut r = right.split(' ');
            let fstype = r.next().unwrap_or("");
            let _source = r.next();
            let options = r.next().unwrap_or("");
            let Some(mount_point) = mount_point else {
                continue;
            };
            match fstype {
                "cgroup2" if d.v2.is_none() => {
                    let controllers =
                        std::fs::read_to_string(Path::new(&mount_point).join("cgroup.controllers"))
                            .unwrap_or_default();
                    d.v2 = Some((
                        PathBuf::from(&mount_point),
                        controllers.split_whitespace().map(str::to_owned).collect(),
                    ));
                }
                "cgroup" => {
                    for opt in options.split(',') {
                        if matches!(opt, "memory" | "pids" | "cpu" | "cpuacct" | "freezer")
                            && !d.v1.iter().any(|(c, _)| c == opt)
                        {
                            d.v1.push((opt.to_owned(), PathBuf::from(&mount_point)));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(d)
    }

    /// Whether the v2 mount offers every controller the sandbox sets.
    pub(crate) fn v2_usable(&self) -> bool {
        self.v2.as_ref().is_some_and(|(_, c)| {
            ["memory", "pids", "cpu"]
                .iter()
                .all(|want| c.iter().any(|have| have == want))
        })
    }

    /// The v1 mount of one controller.
    pub(crate) fn v1_mount(&self, controller: &str) -> Option<&Path> {
        self.v1
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, p)| p.as_path())
    }

    /// The v1 controllers the sandbox needs that are not mounted.
    pub(crate) fn v1_missing(&self) -> Vec<&'static str> {
        ["memory", "pids", "cpu", "cpuacct", "freezer"]
            .into_iter()
            .filter(|c| self.v1_mount(c).is_none())
            .collect()
    }

    /// The hierarchy to use with `parent_name` as the sandboxes' folder: v2 when usable,
    /// else v1 with every controller. Creates the folders and enables the controllers.
    pub(crate) fn prepare(&self, parent_name: &str) -> Result<Hierarchy, String> {
        if self.v2_usable() {
            let Some((mount, _)) = &self.v2 else {
                return Err("no cgroup2 mount".into());
            };
            let parent = mount.join(parent_name);
            enable_v2(mount).map_err(|e| {
                format!(
                    "cannot enable the memory, pids and cpu controllers in {}/cgroup.subtree_control: {e}",
                    mount.display()
                )
            })?;
            make_dir(&parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            enable_v2(&parent).map_err(|e| {
                format!(
                    "cannot enable the controllers in {}/cgroup.subtree_control: {e}",
                    parent.display()
                )
            })?;
            return Ok(Hierarchy::V2 { parent });
        }
        let missing = self.v1_missing();
        if !missing.is_empty() {
            return Err(format!(
                "no cgroup v2 hierarchy offers memory, pids and cpu, and the cgroup v1 controllers {} are not mounted",
                missing.join(", ")
            ));
        }
        let dir = |c: &str| -> Result<PathBuf, String> {
            let mount = self
                .v1_mount(c)
                .ok_or_else(|| format!("the {c} controller is not mounted"))?;
            let p = mount.join(parent_name);
            make_dir(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
            Ok(p)
        };
        let memory = dir("memory")?;
        let memsw = memory.join("memory.memsw.limit_in_bytes").exists();
        Ok(Hierarchy::V1 {
            memory,
            memsw,
            pids: dir("pids")?,
            cpu: dir("cpu")?,
            cpuacct: dir("cpuacct")?,
            freezer: dir("freezer")?,
        })
    }
}

fn unescape(s: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as octal.
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn make_dir(p: &Path) -> io::Result<()> {
    match std::fs::create_dir(p) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn enable_v2(dir: &Path) -> io::Result<()> {
    let current = std::fs::read_to_string(dir.join("cgroup.subtree_control"))?;
    let want: Vec<&str> = ["memory", "pids", "cpu"]
        .into_iter()
        .filter(|c| !current.split_whitespace().any(|have| have == *c))
        .collect();
    if want.is_empty() {
        return Ok(());
    }
    let line: Vec<String> = want.iter().map(|c| format!("+{c}")).collect();
    write(&dir.join("cgroup.subtree_control"), &line.join(" "))
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed file (`memory.events`, `cpu.stat`,
/// `memory.oom_control`).
fn read_key(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// What the cgroup measured over a run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub memory_peak_bytes: Option<u64>,
    pub cpu_time: Option<Duration>,
    pub oom_killed: bool,
}

/// One run's cgroup (one folder per v1 controller).
#[derive(Debug, Clone)]
pub(crate) struct RunCgroup {
    hierarchy: Arc<Hierarchy>,
    name: String,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The hierarchy and a stock of fresh cgroups, made off the callers' path (a cgroup
/// v1 `mkdir` per controller costs tens of microseconds each).
#[derive(Debug)]
pub(crate) struct Cgroups {
    hierarchy: Arc<Hierarchy>,
    stock: Arc<crate::stock::Stock<String>>,
}

fn fresh(hierarchy: &Arc<Hierarchy>) -> io::Result<RunCgroup> {
    let cg = RunCgroup {
        hierarchy: hierarchy.clone(),
        name: format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ),
    };
    for dir in cg.dirs() {
        if let Err(e) = make_dir(&dir) {
            cg.remove_now();
            return Err(e);
        }
    }
    Ok(cg)
}

impl Cgroups {
    /// The hierarchy, with `ahead` cgroups kept ready.
    pub(crate) fn new(hierarchy: Hierarchy, ahead: usize) -> Arc<Cgroups> {
        let hierarchy = Arc::new(hierarchy);
        let h = hierarchy.clone();
        Arc::new(Cgroups {
            stock: crate::stock::Stock::new("cgroup", ahead, move || fresh(&h).map(|c| c.name)),
            hierarchy,
        })
    }

    /// A fresh cgroup for one run, with its limits written.
    pub(crate) async fn take(&self, limits: &Limits) -> io::Result<RunCgroup> {
        let cg = match self.stock.take().await {
            Some(name) => RunCgroup {
                hierarchy: self.hierarchy.clone(),
                name,
            },
            None => fresh(&self.hierarchy)?,
        };
        if let Err(e) = cg.set_limits(limits) {
            cg.remove_now();
            return Err(e);
        }
        Ok(cg)
    }

    /// Removes a finished run's cgroup, on the janitor thread.
    pub(crate) fn recycle(&self, used: RunCgroup) {
        used.remove_later();
    }

    /// Makes no more cgroups ahead (the supervisor is shutting down).
    pub(crate) fn close(&self) {
        self.stock.close();
    }

    /// Removes the stock's cgroups (the supervisor is shutting down).
    pub(crate) fn clear(&self) {
        let hierarchy = self.hierarchy.clone();
        self.stock.clear(|name| {
            RunCgroup {
                hierarchy: hierarchy.clone(),
                name,
            }
            .remove_now();
        });
    }
}

impl RunCgroup {
    /// Every folder of this cgroup (v1: one per controller, without repeats).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = match &*self.hierarchy {
            Hierarchy::V2 { parent } => vec![parent.join(&self.name)],
            Hierarchy::V1 {
                memory,
                pids,
                cpu,
                cpuacct,
                freezer,
                ..
            } => [memory, pids, cpu, cpuacct, freezer]
                .into_iter()
                .map(|p| p.join(&self.name))
                .collect(),
        };
        dirs.dedup();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    fn dir(&self, controller: &str) -> PathBuf {
        match &*self.hierarchy {
            Hierarchy::V2 { parent } => parent.join(&self.name),
            Hierarchy::V1 {
                memory,
                pids,
                cpu,
                cpuacct,
                freezer,
                ..
            } => match controller {
                "memory" => memory,
                "pids" => pids,
                "cpu" => cpu,
                "cpuacct" => cpuacct,
                _ => freezer,
            }
            .join(&self.name),
        }
    }

    fn set_limits(&self, limits: &Limits) -> io::Result<()> {
        let quota = u64::from(limits.cpu_millis) * CPU_PERIOD_US / 1000;
        match &*self.hierarchy {
            Hierarchy::V2 { .. } => {
                let d = self.dir("memory");
                write(&d.join("memory.max"), &limits.memory_bytes.to_string())?;
                // Swap counted: none allowed, so memory plus swap stays within the limit.
                if d.join("memory.swap.max").exists() {
                    write(&d.join("memory.swap.max"), "0")?;
                }
                // An OOM kill takes the whole sandbox, not one process of it.
                if d.join("memory.oom.group").exists() {
                    write(&d.join("memory.oom.group"), "1")?;
                }
                write(&d.join("pids.max"), &limits.pids.to_string())?;
                write(&d.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
            }
            Hierarchy::V1 { memsw, .. } => {
                let m = self.dir("memory");
                let bytes = limits.memory_bytes.to_string();
                write(&m.join("memory.limit_in_bytes"), &bytes)?;
                // memsw (memory + swap) may not be below the memory limit: set after it.
                if *memsw {
                    write(&m.join("memory.memsw.limit_in_bytes"), &bytes)?;
                }
                write(&self.dir("pids").join("pids.max"), &limits.pids.to_string())?;
                let cpu = self.dir("cpu");
                if read_u64(&cpu.join("cpu.cfs_period_us")) != Some(CPU_PERIOD_US) {
                    write(&cpu.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                }
                write(&cpu.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        Ok(())
    }

    /// The cgroup v2 folder, for `CLONE_INTO_CGROUP` (v1 has no such thing).
    pub(crate) fn v2_dir(&self) -> Option<PathBuf> {
        matches!(*self.hierarchy, Hierarchy::V2 { .. }).then(|| self.dir("memory"))
    }

    /// cgroup v1: the `tasks` file of each of this cgroup's folders, opened for writing,
    /// through which the child moves itself in (see `child::setup_and_exec`). Empty
    /// under v2, where the child is born in its cgroup (`CLONE_INTO_CGROUP`).
    pub(crate) fn v1_tasks(&self) -> io::Result<Vec<std::os::fd::OwnedFd>> {
        if matches!(*self.hierarchy, Hierarchy::V2 { .. }) {
            return Ok(Vec::new());
        }
        self.dirs()
            .into_iter()
            .map(|dir| {
                rustix::fs::open(
                    dir.join("tasks"),
                    rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(io::Error::from)
            })
            .collect()
    }

    /// The host pids in the cgroup.
    pub(crate) fn procs(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir("freezer").join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Freezes everything in the cgroup (so nothing forks while it is being killed),
    /// kills it all, thaws (a frozen v1 task dies only once thawed). Blocking, short.
    pub(crate) fn kill_all(&self) {
        let dir = self.dir("freezer");
        match &*self.hierarchy {
            Hierarchy::V2 { .. } => {
                if write(&dir.join("cgroup.kill"), "1").is_ok() {
                    return;
                }
                let _ = write(&dir.join("cgroup.freeze"), "1");
                wait_until(Duration::from_millis(200), || {
                    read_key(&dir.join("cgroup.events"), "frozen") == Some(1)
                });
                self.signal_all();
                let _ = write(&dir.join("cgroup.freeze"), "0");
            }
            Hierarchy::V1 { .. } => {
                let state = dir.join("freezer.state");
                let _ = write(&state, "FROZEN");
                wait_until(Duration::from_millis(200), || {
                    std::fs::read_to_string(&state).is_ok_and(|s| s.trim() == "FROZEN")
                });
                self.signal_all();
                let _ = write(&state, "THAWED");
            }
        }
    }

    fn signal_all(&self) {
        for pid in self.procs() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }

    /// What the kernel measured.
    pub(crate) fn usage(&self) -> Usage {
        match &*self.hierarchy {
            Hierarchy::V2 { .. } => {
                let d = self.dir("memory");
                Usage {
                    memory_peak_bytes: read_u64(&d.join("memory.peak")),
                    cpu_time: read_key(&d.join("cpu.stat"), "usage_usec")
                        .map(Duration::from_micros),
                    oom_killed: read_key(&d.join("memory.events"), "oom_kill")
                        .is_some_and(|n| n > 0),
                }
            }
            Hierarchy::V1 { memsw, .. } => {
                let m = self.dir("memory");
                let peak = if *memsw {
                    read_u64(&m.join("memory.memsw.max_usage_in_bytes"))
                } else {
                    read_u64(&m.join("memory.max_usage_in_bytes"))
                };
                Usage {
                    memory_peak_bytes: peak,
                    cpu_time: read_u64(&self.dir("cpuacct").join("cpuacct.usage"))
                        .map(Duration::from_nanos),
                    oom_killed: read_key(&m.join("memory.oom_control"), "oom_kill")
                        .is_some_and(|n| n > 0),
                }
            }
        }
    }

    /// Removes the (empty) cgroup on the janitor thread.
    pub(crate) fn remove_later(self) {
        crate::janitor::later(move || self.remove());
    }

    /// Removes the (empty) cgroup, waiting briefly for exiting tasks to leave it.
    pub(crate) fn remove(self) {
        let dirs = self.dirs();
        let deadline = Instant::now() + Duration::from_secs(2);
        for dir in dirs {
            loop {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => {
                        tracing::warn!(cgroup = %dir.display(), error = %e, "cannot remove a sandbox cgroup; it is swept on the next start");
                        break;
                    }
                }
            }
        }
    }

    fn remove_now(&self) {
        for dir in self.dirs() {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// Polls `cond` (cgroupfs offers no notification for these) until it holds or
/// `limit` has passed.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() && Instant::now() < deadline {
        std::thread::yield_now();
    }
}

/// Removes the cgroups left by supervisors that died (named `<pid>-<n>`, the pid no
/// longer alive), killing anything still in them first.
pub(crate) fn sweep(hierarchy: &Hierarchy) {
    let parents: Vec<&PathBuf> = match hierarchy {
        Hierarchy::V2 { parent } => vec![parent],
        Hierarchy::V1 {
            memory,
            pids,
            cpu,
            cpuacct,
            freezer,
            ..
        } => vec![freezer, memory, pids, cpu, cpuacct],
    };
    let Ok(entries) = std::fs::read_dir(parents[0]) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if crate::janitor::maker_gone(&name) != Some(true) {
            continue;
        }
        let cg = RunCgroup {
            hierarchy: Arc::new(hierarchy.clone()),
            name,
        };
        if !cg.procs().is_empty() {
            cg.kill_all();
        }
        cg.remove();
    }
}
