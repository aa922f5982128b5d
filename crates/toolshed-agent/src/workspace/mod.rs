//! The workspace of `sandbox: true`: one folder per run, where `bash` runs sandboxed
//! and the file tools (`read_file`, `write_file`, `edit_file`, `list_files`,
//! `search_files`) are confined.
//!
//! A run's workspace is `<root>/<run_id>`, created on its first call and kept while the
//! run lasts: every call of the run, a resumed one's too, sees what earlier calls left.
//! The CLI deletes it when the run ends ([`Workspaces::remove`]; a parked run keeps
//! it). Each `bash` call is one [`Sandbox::run`] with the folder as an *overlay* at
//! `/workspace` (its working folder): the call reads the folder and may change anything
//! in it, but its changes land in a tmpfs layer no larger than what the workspace's
//! budget (`workspace_mb`, `workspace_files`) leaves, and are merged into the folder by
//! the supervisor after the call, within the budget, never through a symlink. So the
//! folder stays a plain folder that background runs bind read-only, it is never written
//! by sandboxed code directly, and it never holds more than the budget, also during a
//! call. The file tools run in the supervisor, open paths beneath the folder only,
//! never following a symlink (see `fs.rs`), and refuse a write past the budget. Calls
//! on one workspace run one at a time.

mod fs;
mod tools;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use toolshed_core::{SpecError, Tool};
use toolshed_sandbox::{Sandbox, SandboxConfig, SandboxError, Usage};

use crate::file::SandboxSettings;

pub use tools::WORKSPACE_TOOLS;

const MIB: u64 = 1024 * 1024;

/// The caps of the workspace tools: whatever a model asks, no call reads, writes or
/// returns more than these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceCaps {
    /// The most of one file `read_file` reads, in bytes (a larger file is read up to
    /// it, and `truncated` is set).
    pub read_bytes: u64,
    /// The largest file `write_file` writes and `edit_file` edits, in bytes.
    pub write_bytes: u64,
    /// The most matches `search_files` returns.
    pub search_matches: usize,
    /// Files larger than this are skipped by `search_files`, in bytes.
    pub search_file_bytes: u64,
    /// The most files one `search_files` call looks into.
    pub search_files: usize,
    /// The most bytes one `search_files` call reads, over all its files.
    pub search_total_bytes: u64,
    /// The longest `search_files` pattern, in bytes.
    pub pattern_bytes: usize,
    /// The most memory a compiled pattern may take (the `regex` crate's size limits),
    /// in bytes. Matching is linear in the text whatever the pattern.
    pub regex_bytes: usize,
    /// The most entries `list_files` returns.
    pub list_entries: usize,
    /// The longest `bash` command, in bytes.
    pub command_bytes: usize,
    /// stdout and stderr kept of each `bash` call, in bytes each; a command writing
    /// more is stopped and the flags say so.
    pub output_bytes: u64,
}

impl Default for WorkspaceCaps {
    fn default() -> Self {
        WorkspaceCaps {
            read_bytes: MIB,
            write_bytes: 4 * MIB,
            search_matches: 200,
            search_file_bytes: 4 * MIB,
            search_files: 10_000,
            search_total_bytes: 64 * MIB,
            pattern_bytes: 1024,
            regex_bytes: MIB as usize,
            list_entries: 1000,
            command_bytes: 64 * 1024,
            output_bytes: 256 * 1024,
        }
    }
}

/// Where workspaces live, the sandbox `bash` runs in, and the tools' caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceConfig {
    /// The folder holding one workspace folder per run id (created mode 0700; a
    /// relative path is taken from the working folder).
    pub root: PathBuf,
    /// The sandbox's settings (used when no [`Sandbox`] is handed in).
    pub sandbox: SandboxConfig,
    /// The tools' caps.
    pub caps: WorkspaceCaps,
}

impl WorkspaceConfig {
    /// Workspaces under `root`, the sandbox's defaults, the default caps.
    pub fn new(root: impl Into<PathBuf>) -> WorkspaceConfig {
        WorkspaceConfig {
            root: root.into(),
            sandbox: SandboxConfig::default(),
            caps: WorkspaceCaps::default(),
        }
    }
}

/// The workspaces of every run of one process, and the sandbox their `bash` runs in.
/// Cheap to clone. The sandbox is built when an agent with `sandbox: true` first loads
/// (never for one without), unless one is handed in.
#[derive(Clone)]
pub struct Workspaces {
    inner: Arc<Inner>,
}

struct Inner {
    config: WorkspaceConfig,
    sandbox: OnceLock<Result<Sandbox, SandboxError>>,
    /// One lock per run id in use: a workspace's calls run one at a time.
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// What each workspace holds, as this process last counted it. Only this process's
    /// merges and file tools change a workspace (sandboxed code writes a layer, never
    /// the folder; background runs see it read-only; a run is driven by one process at
    /// a time), and each of them updates its count, so a workspace is walked once per
    /// process, not before every write.
    usage: Mutex<HashMap<String, Usage>>,
}

impl std::fmt::Debug for Workspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspaces")
            .field("root", &self.inner.config.root)
            .finish_non_exhaustive()
    }
}

impl Workspaces {
    /// Workspaces as configured; the sandbox is built from `config.sandbox` on first
    /// need.
    pub fn new(mut config: WorkspaceConfig) -> Workspaces {
        // The sandbox binds absolute host paths; a relative root is the working folder's.
        if let Ok(abs) = std::path::absolute(&config.root) {
            config.root = abs;
        }
        Workspaces {
            inner: Arc::new(Inner {
                config,
                sandbox: OnceLock::new(),
                locks: Mutex::new(HashMap::new()),
                usage: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Workspaces whose `bash` runs in this sandbox (shared with other users of it).
    pub fn with_sandbox(config: WorkspaceConfig, sandbox: Sandbox) -> Workspaces {
        let ws = Workspaces::new(config);
        let _ = ws.inner.sandbox.set(Ok(sandbox));
        ws
    }

    /// The configuration.
    pub fn config(&self) -> &WorkspaceConfig {
        &self.inner.config
    }

    /// The sandbox, built on first call; its error names the missing mechanism and the
    /// fix, and then no agent with `sandbox: true` starts.
    pub fn sandbox(&self) -> Result<&Sandbox, &SandboxError> {
        self.inner
            .sandbox
            .get_or_init(|| Sandbox::new(self.inner.config.sandbox.clone()))
            .as_ref()
    }

    /// The host folder of a run's workspace (it exists once the run made a call), or
    /// why the run id cannot name one.
    pub fn folder(&self, run_id: &str) -> Result<PathBuf, String> {
        check_run_id(run_id)?;
        Ok(self.inner.config.root.join(run_id))
    }

    /// The run ids that have a workspace folder here (names that are not run ids are
    /// left out).
    pub fn run_ids(&self) -> Result<Vec<String>, String> {
        let root = &self.inner.config.root;
        let entries = match std::fs::read_dir(root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(format!(
                    "cannot list the workspaces folder {}: {e}",
                    root.display()
                ));
            }
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| {
                format!("cannot list the workspaces folder {}: {e}", root.display())
            })?;
            if let Some(name) = entry.file_name().to_str()
                && check_run_id(name).is_ok()
                && entry.file_type().is_ok_and(|t| t.is_dir())
            {
                ids.push(name.to_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Deletes the run's workspace folder with everything in it, once no call of this
    /// process is using it. `Ok(false)` when there was none. Nothing is followed: a
    /// symlink in the folder is removed, never its target.
    pub async fn remove(&self, run_id: &str) -> Result<bool, String> {
        let folder = self.folder(run_id)?;
        let lock = self.lock(run_id);
        let _guard = lock.lock_owned().await;
        self.set_usage(run_id, None);
        let shown = folder.display().to_string();
        tokio::task::spawn_blocking(move || match std::fs::symlink_metadata(&folder) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("cannot delete the workspace {shown}: {e}")),
            // std's remove_dir_all opens each folder beneath its parent without
            // following symlinks (and removes a symlink itself, not its target).
            Ok(_) => std::fs::remove_dir_all(&folder)
                .map(|()| true)
                .map_err(|e| format!("cannot delete the workspace {shown}: {e}")),
        })
        .await
        .map_err(|e| format!("the workspace deletion failed: {e}"))?
    }

    /// The six tools `sandbox: true` grants, with the agent's sandbox settings.
    pub fn tools(&self, settings: &SandboxSettings) -> Result<Vec<Tool>, SpecError> {
        tools::all(self, settings)
    }

    /// The host folder of the run's workspace, created (owned by the sandbox's uid) on
    /// first use: background runs see it read-only.
    pub(crate) async fn ensure(&self, run_id: &str) -> Result<PathBuf, String> {
        let opened = self.open(run_id).await.map_err(|e| match e {
            fs::FsError::Io(m) | fs::FsError::Field { message: m, .. } => m,
        })?;
        Ok(opened.path.clone())
    }

    /// Waits for the run's workspace to be free, then opens it (creating it on first
    /// use). The guard keeps other calls on it waiting.
    async fn open(&self, run_id: &str) -> Result<Opened, fs::FsError> {
        let folder = self.folder(run_id).map_err(fs::FsError::Io)?;
        let lock = self.lock(run_id);
        let guard = lock.lock_owned().await;
        let root = self.inner.config.root.clone();
        let owner = match self.sandbox() {
            Ok(s) => s.config().uid_pool.first,
            Err(_) => self.inner.config.sandbox.uid_pool.first,
        };
        let name = run_id.to_owned();
        let fd = tokio::task::spawn_blocking(move || open_folder(&root, &name, owner))
            .await
            .map_err(|e| fs::FsError::Io(format!("the workspace could not be opened: {e}")))??;
        Ok(Opened {
            ws: self.clone(),
            run_id: run_id.to_owned(),
            folder: fs::Folder::new(fd)?,
            path: folder,
            _guard: guard,
        })
    }

    fn set_usage(&self, run_id: &str, usage: Option<Usage>) {
        let mut cache = self
            .inner
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match usage {
            Some(u) => cache.insert(run_id.to_owned(), u),
            None => cache.remove(run_id),
        };
    }

    fn cached_usage(&self, run_id: &str) -> Option<Usage> {
        self.inner
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(run_id)
            .copied()
    }

    fn lock(&self, run_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .inner
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = locks.get(run_id).and_then(Weak::upgrade) {
            return l;
        }
        locks.retain(|_, w| w.strong_count() > 0);
        let l = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(run_id.to_owned(), Arc::downgrade(&l));
        l
    }
}

/// A workspace's budget: the most it may hold, from agent.yaml's `sandbox:`
/// (`workspace_mb`, `workspace_files`), counted as [`toolshed_sandbox::folder_usage`]
/// counts (file contents and symlink targets; every entry one file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    mb: u64,
    files: u64,
}

impl Budget {
    pub(crate) fn of(settings: &SandboxSettings) -> Budget {
        Budget {
            mb: settings.workspace_mb(),
            files: settings.workspace_files(),
        }
    }

    /// The most the workspace may hold.
    pub(crate) fn allowed(&self) -> Usage {
        Usage {
            bytes: self.mb.saturating_mul(MIB),
            files: self.files,
        }
    }

    /// Whether the workspace holds all it may, in bytes or in files.
    pub(crate) fn full(&self, used: Usage) -> bool {
        let allowed = self.allowed();
        used.bytes >= allowed.bytes || used.files >= allowed.files
    }

    /// What the workspace holds against what it may, in a sentence.
    pub(crate) fn describe(&self, used: Usage) -> String {
        let allowed = self.allowed();
        format!(
            "it holds {} of the {} bytes allowed (`workspace_mb`: {}) and {} of the {} files and folders allowed (`workspace_files`)",
            used.bytes, allowed.bytes, self.mb, used.files, allowed.files
        )
    }

    /// The budget and what the workspace holds, as the tools answer it.
    pub(crate) fn view(&self, used: Usage) -> serde_json::Value {
        let allowed = self.allowed();
        serde_json::json!({
            "bytes": used.bytes,
            "bytes_allowed": allowed.bytes,
            "files": used.files,
            "files_allowed": allowed.files,
        })
    }

    /// Checks that writing `new_bytes` at a path costing `cost` keeps the workspace
    /// within the budget, and returns what it will then hold; else the error names the
    /// argument (`bytes_field` for the content, `path` for new entries) and the setting.
    pub(crate) fn check_write(
        &self,
        used: Usage,
        cost: fs::WriteCost,
        new_bytes: u64,
        bytes_field: &'static str,
    ) -> Result<Usage, fs::FsError> {
        let allowed = self.allowed();
        let after = used
            .bytes
            .saturating_sub(cost.old_bytes)
            .saturating_add(new_bytes);
        if new_bytes > cost.old_bytes && after > allowed.bytes {
            return Err(fs::FsError::field(
                bytes_field,
                format!(
                    "writing it would make the workspace hold {after} bytes, more than the {} allowed (`workspace_mb`: {}); {}. Delete files with bash (`rm`) or write less, or raise `sandbox.workspace_mb` in agent.yaml",
                    allowed.bytes,
                    self.mb,
                    self.describe(used)
                ),
            ));
        }
        let added = u64::from(cost.new_file) + cost.new_folders;
        if added > 0 && used.files.saturating_add(added) > allowed.files {
            return Err(fs::FsError::field(
                "path",
                format!(
                    "writing it would add {added} files and folders, past the {} allowed (`workspace_files`); {}. Delete some with bash (`rm`), or raise `sandbox.workspace_files` in agent.yaml",
                    allowed.files,
                    self.describe(used)
                ),
            ));
        }
        Ok(Usage {
            bytes: after,
            files: used.files.saturating_add(added),
        })
    }
}

/// A run's workspace, open and held.
struct Opened {
    ws: Workspaces,
    run_id: String,
    folder: fs::Folder,
    path: PathBuf,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Opened {
    /// What the workspace holds: as this process last counted it, else a walk of the
    /// folder.
    fn usage(&self) -> Result<Usage, fs::FsError> {
        if let Some(u) = self.ws.cached_usage(&self.run_id) {
            return Ok(u);
        }
        let u = toolshed_sandbox::folder_usage(self.folder.fd())
            .map_err(|e| fs::FsError::Io(format!("cannot measure the workspace: {e}")))?;
        self.ws.set_usage(&self.run_id, Some(u));
        Ok(u)
    }

    /// Records what the workspace holds after a change (`None`: unknown, a change
    /// failed half-way; the next use walks it again).
    fn set_usage(&self, usage: Option<Usage>) {
        self.ws.set_usage(&self.run_id, usage);
    }
}

/// A run id names a folder: 1–128 letters, digits, `-`, `_` or `.`, not starting with `.`.
fn check_run_id(run_id: &str) -> Result<(), String> {
    let ok = !run_id.is_empty()
        && run_id.len() <= 128
        && !run_id.starts_with('.')
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the run id {run_id:?} cannot name a workspace folder (1–128 letters, digits, `-`, `_` or `.`)"
        ))
    }
}

/// Opens `<root>/<name>` without following a symlink, creating it (owned by `owner`)
/// and `root` (mode 0700) on first use.
fn open_folder(root: &Path, name: &str, owner: u32) -> Result<OwnedFd, fs::FsError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let io = |what: String| move |e: std::io::Error| fs::FsError::Io(format!("{what}: {e}"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(io(format!(
            "cannot create the workspaces folder {}",
            root.display()
        )))?;
    let root_fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        io(format!(
            "cannot open the workspaces folder {}",
            root.display()
        ))(e.into())
    })?;
    let created = match rustix::fs::mkdirat(&root_fd, name, Mode::from_raw_mode(0o755)) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(io(format!("cannot create the workspace {name}"))(e.into())),
    };
    let fd = rustix::fs::openat2(
        &root_fd,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| io(format!("cannot open the workspace {name}"))(e.into()))?;
    if created {
        let (uid, gid) = (
            rustix::process::Uid::from_raw(owner),
            rustix::process::Gid::from_raw(owner),
        );
        rustix::fs::fchown(&fd, Some(uid), Some(gid)).map_err(|e| {
            io(format!(
                "cannot give the workspace {name} to the sandbox's uid"
            ))(e.into())
        })?;
    }
    Ok(fd)
}
