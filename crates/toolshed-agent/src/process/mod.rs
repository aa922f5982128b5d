//! Background runs: `run_process` starts one of the agent's named `processes:` in the
//! sandbox and returns its run id at once; `check_run` reports its status, exit code
//! and the tail of its output; `stop_run` stops it (its supervisor kills the sandbox).
//!
//! Each run is held by a detached supervisor process
//! ([`toolshed_sandbox::detached`]) in its own session, so it outlives the CLI or
//! server that started it; its state folder (`<root>/<id>`: spec, status, output) and
//! its record in the journal's database ([`toolshed_journal::process_runs`]) are what
//! any later process reads. A supervisor that vanished without writing how the command
//! ended (its pid gone, or reused by another process: the recorded start time differs)
//! makes the run `lost`.
//!
//! What the command sees: `/work` (the sandbox's scratch folder, its working folder),
//! the run's workspace read-only at `/workspace` when the agent has workspaces, and
//! the project read-only at `/project` when the process says `project: true`. Nothing
//! else of the host, no network unless `network: true`, and only the environment the
//! process declares. Arguments become whole argv elements: no shell ever reads them.

mod config;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use toolshed_journal::process_runs::ProcessRuns;
use toolshed_sandbox::SandboxConfig;
use toolshed_sandbox::detached::Supervisor;

pub use config::{ArgDef, ArgType, CommandPart, ProcessDef, check_value, parse_processes, render};
pub(crate) use tools::builtin;

/// The names of the background-run built-ins.
pub const PROCESS_TOOLS: &[&str] = &["run_process", "check_run", "stop_run"];

/// The caps of the background-run tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessCaps {
    /// Bytes of output `check_run` returns when the call does not say.
    pub tail_bytes: u64,
    /// The most bytes of output one `check_run` returns.
    pub max_tail_bytes: u64,
    /// The most bytes one output file holds before it is rotated (a run's folder holds
    /// at most twice this).
    pub output_file_bytes: u64,
    /// How long `run_process` waits for the supervisor to report the sandbox started.
    pub start_wait: Duration,
    /// A process's longest life when it declares no `timeout_seconds`.
    pub default_timeout_seconds: u64,
    /// A process's memory when it declares no `memory_mb`.
    pub default_memory_mb: u64,
    /// How long a run may stay `starting` (its starter died before recording the
    /// supervisor) before `check_run` calls it lost.
    pub starting_grace: Duration,
    /// How long `stop_run` waits for the supervisor to report the command stopped.
    pub stop_wait: Duration,
}

impl Default for ProcessCaps {
    fn default() -> Self {
        ProcessCaps {
            tail_bytes: 4096,
            max_tail_bytes: 64 * 1024,
            output_file_bytes: 8 * 1024 * 1024,
            start_wait: Duration::from_secs(30),
            default_timeout_seconds: 3600,
            default_memory_mb: 256,
            starting_grace: Duration::from_secs(60),
            stop_wait: Duration::from_secs(15),
        }
    }
}

/// Where background runs keep their state, what records them, and who supervises them.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// The folder holding one state folder per background run (created mode 0700; a
    /// relative path is taken from the working folder).
    pub root: PathBuf,
    /// The journal's database, where the runs are recorded (`sqlite://…`,
    /// `postgres://…`); opened on first use.
    pub database_url: String,
    /// The supervisor binary; `None` finds `toolshed-sandbox-exec`
    /// ([`Supervisor::locate`]).
    pub supervisor: Option<Supervisor>,
    /// The sandbox's settings, handed to each supervisor.
    pub sandbox: SandboxConfig,
    /// The caps.
    pub caps: ProcessCaps,
}

impl ProcessConfig {
    /// Runs under `root`, recorded in the database at `database_url`, the default
    /// sandbox and caps, the supervisor found beside the executable.
    pub fn new(root: impl Into<PathBuf>, database_url: impl Into<String>) -> ProcessConfig {
        ProcessConfig {
            root: root.into(),
            database_url: database_url.into(),
            supervisor: None,
            sandbox: SandboxConfig::default(),
            caps: ProcessCaps::default(),
        }
    }
}

/// The background runs of one process (the CLI, a server). Cheap to clone; the store
/// is opened when a tool first needs it.
#[derive(Clone)]
pub struct Processes {
    inner: Arc<Inner>,
}

struct Inner {
    config: ProcessConfig,
    store: tokio::sync::OnceCell<Arc<ProcessRuns>>,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes")
            .field("root", &self.inner.config.root)
            .finish_non_exhaustive()
    }
}

impl Processes {
    /// Background runs as configured.
    pub fn new(mut config: ProcessConfig) -> Processes {
        // The sandbox binds absolute host paths; a relative root is the working folder's.
        if let Ok(abs) = std::path::absolute(&config.root) {
            config.root = abs;
        }
        Processes {
            inner: Arc::new(Inner {
                config,
                store: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// Background runs recorded in a store the caller opened.
    pub fn with_store(config: ProcessConfig, store: Arc<ProcessRuns>) -> Processes {
        let p = Processes::new(config);
        let _ = p.inner.store.set(store);
        p
    }

    /// The configuration.
    pub fn config(&self) -> &ProcessConfig {
        &self.inner.config
    }

    /// How many background runs that run `run_id` started are still going (its
    /// workspace is bound into them): each one recorded as not ended is checked first,
    /// as `check_run` does, so one whose supervisor vanished becomes `lost` and is not
    /// counted.
    pub async fn still_running(&self, run_id: &str) -> Result<usize, String> {
        let store = self.store().await?;
        let records = store
            .unfinished_of_run(run_id)
            .await
            .map_err(|e| format!("the background runs' journal cannot be read: {e}"))?;
        let mut running = 0;
        for r in records {
            let r = tools::settle(&store, r, self.inner.config.caps)
                .await
                .map_err(|e| e.message)?;
            running += usize::from(!r.status.is_final());
        }
        Ok(running)
    }

    /// Delete the state folders (the output and the supervisor's files) of background
    /// runs no longer recorded: a prune removed the records of ended ones (the
    /// journal's `prune`). With `dry_run`, only says which. Returns their ids.
    ///
    /// Only entries of the root named as a background run id are looked at; a symlink
    /// there is removed itself, never followed. A folder is made after its record, so a
    /// folder without one is a pruned run's, not one being started.
    pub async fn sweep_state(&self, dry_run: bool) -> Result<Vec<String>, String> {
        let root = &self.inner.config.root;
        let entries = match std::fs::read_dir(root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot list {}: {e}", root.display())),
        };
        let store = self.store().await?;
        let mut swept = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot list {}: {e}", root.display()))?;
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !tools::valid_run_id(&id) {
                continue;
            }
            let recorded = store
                .recorded(&id)
                .await
                .map_err(|e| format!("the background runs' journal cannot be read: {e}"))?;
            if recorded {
                continue;
            }
            if !dry_run {
                let path = entry.path();
                let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
                // `remove_dir_all` does not follow symlinks inside the folder.
                let removed = if is_dir {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                match removed {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("cannot delete {}: {e}", path.display())),
                }
            }
            swept.push(id);
        }
        swept.sort();
        Ok(swept)
    }

    /// The store, opened on first use.
    async fn store(&self) -> Result<Arc<ProcessRuns>, String> {
        self.inner
            .store
            .get_or_try_init(|| async {
                ProcessRuns::open(&self.inner.config.database_url)
                    .await
                    .map(Arc::new)
                    .map_err(|e| format!("the background runs' journal cannot be opened: {e}"))
            })
            .await
            .cloned()
    }

    fn supervisor(&self) -> Result<Supervisor, String> {
        match &self.inner.config.supervisor {
            Some(s) => Ok(s.clone()),
            None => Supervisor::locate().map_err(|e| e.message),
        }
    }
}
