//! Uploaded tool code on the server: checking an upload, writing each archive once per
//! hash into the code cache (read-only to tools), installing its dependencies once per
//! hash, resolving an endpoint that names a file of the code, and the operator's tool
//! roots for host-path endpoints.
//!
//! Layout of the cache folder (`ServerConfig::code.dir`, by default `code/` in the
//! dispatcher's cache folder): `<sha256>/…` one folder per archive, `deps/<hash>/` one
//! folder per dependency set, and `deps/.users/<hash>/<sha256>` an empty file per code
//! that uses a dependency set. Each folder is written under a temporary name and renamed
//! into place, so a folder that exists is complete; the sandbox binds them read-only.
//! [`CodeCache::sweep`] removes the folders no current tool uses (after a delete, and
//! at start-up): both are caches, made again from the registry on the next use.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use toolshed_api::code::{CodeFile, CodeLimits, check_archive, check_sha256, decode_base64};
use toolshed_api::requests::CodeUpload;
use toolshed_api::{ApiCode, FieldProblem};
use toolshed_core::file::ToolFile;
use toolshed_registry::{CodeRef, NewCode, RegistryStore};

use crate::error::ApiError;

/// Settings of uploaded code and host-path tools.
#[derive(Debug, Clone, Default)]
pub struct CodeSettings {
    /// The code cache folder; `None`: `code/` in the dispatcher's cache folder.
    pub dir: Option<PathBuf>,
    /// How much code one upload may carry.
    pub limits: CodeLimits,
    /// The folders under which an admin may register `python:`/`node:`/`exec:`
    /// endpoints naming a server path (`toolshed serve --tool-root`,
    /// `TOOLSHED_TOOL_ROOTS`). Empty: no host path is accepted.
    pub tool_roots: Vec<PathBuf>,
    /// The `npm` program that installs Node dependencies (default `npm`).
    pub npm: Option<PathBuf>,
    /// How long one dependency install may take (default 5 minutes).
    pub install_timeout: Option<Duration>,
    /// How long a cache folder no tool uses any more is kept after its last change
    /// before the sweep removes it (default 10 minutes).
    pub sweep_grace: Option<Duration>,
}

/// The default [`CodeSettings::sweep_grace`].
const DEFAULT_SWEEP_GRACE: Duration = Duration::from_secs(600);

/// A checked upload: the archive, its hash and its files.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The archive's bytes.
    pub archive: Vec<u8>,
    /// Its SHA-256 (hex).
    pub sha256: String,
    /// Its files, sorted by path.
    pub files: Vec<CodeFile>,
}

impl Upload {
    /// The store's form.
    pub fn new_code(&self) -> NewCode {
        NewCode {
            sha256: self.sha256.clone(),
            files: u32::try_from(self.files.len()).unwrap_or(u32::MAX),
            archive: self.archive.clone(),
        }
    }
}

/// What a code tool needs to run: its endpoint with the code's folder in it, and the
/// folders of its installed dependencies.
#[derive(Debug, Clone, Default)]
pub struct RunEnv {
    /// The endpoint as the dispatcher takes it (absolute), when it differs from the
    /// stored one.
    pub endpoint: Option<String>,
    /// Folders of installed dependencies (see `SandboxPolicy::libraries`).
    pub libraries: Vec<PathBuf>,
    /// The folder of the uploaded code, shown read-only whole (a package's entry may
    /// import files outside its own folder).
    pub root: Option<PathBuf>,
}

/// The code cache, dependency installs and tool roots of one server.
pub struct CodeCache {
    dir: PathBuf,
    limits: CodeLimits,
    roots: Vec<PathBuf>,
    npm: PathBuf,
    install_timeout: Duration,
    /// One lock per folder being written, so two requests never install one hash twice.
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The `deps/.users` entries this process has written (`<key>/<sha256>`).
    noted: Mutex<HashSet<String>>,
    sweep_grace: Duration,
}

/// The folder under `deps/` of each dependency set's users.
const USERS: &str = ".users";

/// What [`CodeCache::sweep`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Code folders.
    pub code: usize,
    /// Dependency sets.
    pub dependencies: usize,
}

/// Whether a folder name is a SHA-256 in lower-case hex.
fn check_sha256_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The one answer for a host path that is refused, whether it is missing, outside the
/// tool roots or a link leading out: the same words, so an answer never says which.
fn host_path_refused(path: &str) -> ApiError {
    ApiError::field(
        "endpoint",
        format!(
            "`{path}` is not a file under one of this server's tool roots; upload the code instead (`toolshed registry tool push FILE` sends it), or ask the operator to add a tool root (`toolshed serve --tool-root DIR`)"
        ),
    )
}

impl CodeCache {
    /// Open the cache folder (created 0755 if missing) and canonicalise the tool roots.
    /// A cache folder that others may write, or that is a link, is refused: what is in
    /// it runs.
    pub fn open(settings: &CodeSettings, dispatcher_cache: &Path) -> Result<CodeCache, String> {
        let dir = settings
            .dir
            .clone()
            .unwrap_or_else(|| dispatcher_cache.join("code"));
        create_private_dir(&dir)?;
        create_private_dir(&dir.join("deps"))?;
        let mut roots = Vec::new();
        for root in &settings.tool_roots {
            let canonical = std::fs::canonicalize(root)
                .map_err(|e| format!("tool root {} cannot be opened ({e})", root.display()))?;
            if !canonical.is_dir() {
                return Err(format!("tool root {} is not a folder", root.display()));
            }
            roots.push(canonical);
        }
        Ok(CodeCache {
            dir,
            limits: settings.limits,
            roots,
            npm: settings.npm.clone().unwrap_or_else(|| "npm".into()),
            install_timeout: settings.install_timeout.unwrap_or(Duration::from_secs(300)),
            busy: Mutex::new(HashMap::new()),
            noted: Mutex::new(HashSet::new()),
            sweep_grace: settings.sweep_grace.unwrap_or(DEFAULT_SWEEP_GRACE),
        })
    }

    /// The limits of one upload.
    pub fn limits(&self) -> &CodeLimits {
        &self.limits
    }

    /// Check an upload: decoded within the size cap, the claimed hash equal to the
    /// bytes', every entry a plain file or folder at a clean relative path.
    pub fn check(&self, upload: &CodeUpload) -> Result<Upload, ApiError> {
        let field = |p: toolshed_api::code::CodeProblem| ApiError::field(p.field, p.message);
        let archive =
            decode_base64(&upload.archive_base64, self.limits.max_archive_bytes).map_err(field)?;
        let sha256 = match &upload.sha256 {
            Some(claimed) => check_sha256(claimed, &archive).map_err(field)?,
            None => toolshed_api::code::sha256_hex(&archive),
        };
        let files = check_archive(&archive, &self.limits).map_err(field)?;
        Ok(Upload {
            archive,
            sha256,
            files,
        })
    }

    /// The folder of an archive, written now if it is not there yet.
    pub async fn materialise(&self, sha256: &str, files: &[CodeFile]) -> Result<PathBuf, ApiError> {
        let target = self.dir.join(sha256);
        if target.is_dir() {
            return Ok(target);
        }
        let lock = self.lock(sha256);
        let _guard = lock.lock().await;
        if target.is_dir() {
            return Ok(target);
        }
        let files = files.to_vec();
        let dir = self.dir.clone();
        let done = target.clone();
        tokio::task::spawn_blocking(move || write_tree(&dir, &done, &files))
            .await
            .map_err(|e| ApiError::internal("writing uploaded code panicked", e))?
            .map_err(|e| ApiError::internal("cannot write uploaded code to the code cache", e))?;
        Ok(target)
    }

    /// The folder of a stored revision's code: from the cache, or read from the store,
    /// checked again (its hash and its entries) and written.
    pub async fn load(
        &self,
        registry: &dyn RegistryStore,
        code: &CodeRef,
    ) -> Result<PathBuf, ApiError> {
        let target = self.dir.join(&code.sha256);
        if target.is_dir() {
            return Ok(target);
        }
        let archive = registry.code_archive(&code.sha256).await?;
        let stored = |what: String| {
            ApiError::new(
                ApiCode::InvalidDefinition,
                format!(
                    "the stored code {} {what}; push the tool again",
                    code.sha256
                ),
            )
        };
        check_sha256(&code.sha256, &archive)
            .map_err(|_| stored("does not match its hash".into()))?;
        // Stored code passed these limits once; a server with smaller ones still runs it.
        let limits = CodeLimits {
            max_archive_bytes: u64::MAX,
            max_file_bytes: u64::MAX,
            max_files: usize::MAX,
            max_path_bytes: usize::MAX,
        };
        let files = check_archive(&archive, &limits).map_err(|p| stored(p.message))?;
        self.materialise(&code.sha256, &files).await
    }

    fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.retain(|_, l| Arc::strong_count(l) > 1);
        busy.entry(key.to_owned()).or_default().clone()
    }

    /// Check a host-path endpoint against the tool roots: canonicalised (links resolved)
    /// it must be a regular file inside one. Returns the endpoint with the canonical
    /// path. Missing, outside and linked-out paths get the same answer.
    pub fn host_endpoint(&self, text: &str) -> Result<String, ApiError> {
        let (kind, rest) = split_kind(text).ok_or_else(|| host_path_refused(text))?;
        let (path, target) = split_target(kind, rest);
        let refused = || host_path_refused(path);
        if !path.starts_with('/') {
            return Err(ApiError::field(
                "endpoint",
                format!(
                    "`{path}` is relative: a relative path names a file of uploaded code, so send the code in `code` (`toolshed registry tool push FILE` does)"
                ),
            ));
        }
        let canonical = std::fs::canonicalize(path).map_err(|_| refused())?;
        if !self.roots.iter().any(|r| canonical.starts_with(r)) || !canonical.is_file() {
            return Err(refused());
        }
        let mut out = format!("{kind}:{}", canonical.display());
        if let Some(t) = target {
            out.push(':');
            out.push_str(t);
        }
        Ok(out)
    }

    /// Whether a stored host-path endpoint is (still) inside the tool roots.
    pub fn host_path_allowed(&self, path: &Path) -> bool {
        std::fs::canonicalize(path)
            .is_ok_and(|c| c.is_file() && c == path && self.roots.iter().any(|r| c.starts_with(r)))
    }

    /// Install a code tool's dependencies once per dependency set (from its definition's
    /// `implementation.dependencies` and the code's `requirements.txt` or
    /// `package.json`), returning the folders to put on its path.
    pub async fn dependencies(
        &self,
        python: Option<&Path>,
        file: &ToolFile,
        language: Language,
        root: &Path,
        entry_dir: &Path,
    ) -> Result<Vec<PathBuf>, ApiError> {
        let Some(set) = dependency_set(file, language, root, entry_dir)? else {
            return Ok(Vec::new());
        };
        let key = set.key();
        self.note_user(&key, root);
        let target = self.dir.join("deps").join(&key);
        let library = match language {
            Language::Python => target.clone(),
            Language::Node => target.join("node_modules"),
        };
        if target.is_dir() {
            return Ok(vec![library]);
        }
        let lock = self.lock(&key);
        let _guard = lock.lock().await;
        if target.is_dir() {
            return Ok(vec![library]);
        }
        let tmp = self
            .dir
            .join("deps")
            .join(format!(".tmp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&tmp)
            .map_err(|e| ApiError::internal("cannot create a dependency folder", e))?;
        let result = self.install(python, &set, &tmp).await;
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        make_read_only_tree(&tmp);
        std::fs::rename(&tmp, &target).map_err(|e| {
            let _ = std::fs::remove_dir_all(&tmp);
            ApiError::internal("cannot move installed dependencies into place", e)
        })?;
        tracing::info!(dependencies = ?set.packages, folder = %target.display(), "installed a tool's dependencies");
        Ok(vec![library])
    }

    /// Record that the uploaded code at `root` (`<cache>/<sha256>`) uses the dependency
    /// set `key`, once per process; host-path tools are not recorded (their folders are
    /// the operator's).
    fn note_user(&self, key: &str, root: &Path) {
        let Some(sha) = root
            .strip_prefix(&self.dir)
            .ok()
            .and_then(|r| r.to_str())
            .filter(|s| check_sha256_name(s))
        else {
            return;
        };
        let mut noted = self.noted.lock().unwrap_or_else(|p| p.into_inner());
        if !noted.insert(format!("{key}/{sha}")) {
            return;
        }
        let dir = self.dir.join("deps").join(USERS).join(key);
        if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(sha))
                .map(drop)
        }) {
            tracing::warn!(folder = %dir.display(), error = %e, "cannot record a dependency set's user; the sweep keeps the set");
        }
    }

    /// Remove the cache folders of code no current tool runs: `<sha256>` folders not in
    /// `in_use`, and dependency sets none of whose users is in `in_use` (a set with no
    /// recorded user is kept). Only folders untouched for `grace` go, so a run of a tool
    /// deleted a moment ago, or a push between materialising its code and recording
    /// its revision, keeps its folders.
    pub fn sweep(&self, in_use: &HashSet<String>, grace: Duration) -> Swept {
        let mut swept = Swept::default();
        let old = |p: &Path| {
            std::fs::symlink_metadata(p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= grace)
        };
        let names = |dir: &Path| -> Vec<String> {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        for name in names(&self.dir) {
            let path = self.dir.join(&name);
            if check_sha256_name(&name) && !in_use.contains(&name) && old(&path) {
                make_writable_tree(&path);
                if std::fs::remove_dir_all(&path).is_ok() {
                    swept.code += 1;
                }
            }
        }
        let deps = self.dir.join("deps");
        let users = deps.join(USERS);
        for key in names(&deps) {
            if key.starts_with('.') {
                continue;
            }
            let recorded = names(&users.join(&key));
            let path = deps.join(&key);
            if !recorded.is_empty() && !recorded.iter().any(|s| in_use.contains(s)) && old(&path) {
                make_writable_tree(&path);
                if std::fs::remove_dir_all(&path).is_ok() {
                    let _ = std::fs::remove_dir_all(users.join(&key));
                    swept.dependencies += 1;
                }
            }
        }
        let mut noted = self.noted.lock().unwrap_or_else(|p| p.into_inner());
        noted.retain(|n| {
            n.split_once('/')
                .is_some_and(|(_, sha)| in_use.contains(sha))
        });
        swept
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// [`CodeCache::sweep`] with the code every current tool of the registry runs (every
    /// tenant's), and the configured grace. A registry that cannot be listed sweeps
    /// nothing.
    pub async fn sweep_unused(
        self: &Arc<Self>,
        registry: &dyn RegistryStore,
    ) -> Result<Swept, ApiError> {
        let mut in_use = HashSet::new();
        let mut page = 1;
        loop {
            let listed = registry
                .list_tools(&toolshed_registry::ToolFilter {
                    page,
                    per_page: toolshed_registry::MAX_PER_PAGE,
                    skip_definitions: true,
                    ..Default::default()
                })
                .await?;
            in_use.extend(
                listed
                    .items
                    .iter()
                    .filter_map(|t| t.code.as_ref())
                    .map(|c| c.sha256.clone()),
            );
            if listed.items.is_empty()
                || u64::from(page) * u64::from(listed.per_page) >= listed.total
            {
                break;
            }
            page += 1;
        }
        let me = self.clone();
        let grace = self.sweep_grace;
        let swept = tokio::task::spawn_blocking(move || me.sweep(&in_use, grace))
            .await
            .unwrap_or_default();
        if swept != Swept::default() {
            tracing::info!(
                code = swept.code,
                dependencies = swept.dependencies,
                "removed the cache folders of code no tool runs"
            );
        }
        Ok(swept)
    }

    /// Run pip or npm into `dir`. The installer runs on the host with the network, and
    /// runs no package code: pip takes wheels only (`--only-binary=:all:`, so no
    /// `setup.py` runs), npm runs no install scripts (`--ignore-scripts`). Tools then
    /// see the folder read-only in the sandbox.
    async fn install(
        &self,
        python: Option<&Path>,
        set: &DependencySet,
        dir: &Path,
    ) -> Result<(), ApiError> {
        let mut cmd = match set.language {
            Language::Python => {
                let Some(python) = python else {
                    return Err(ApiError::new(
                        ApiCode::DependencyInstallFailed,
                        "no Python interpreter to run pip with",
                    ));
                };
                let mut c = tokio::process::Command::new(python);
                c.args([
                    "-m",
                    "pip",
                    "install",
                    "--no-input",
                    "--disable-pip-version-check",
                    "--no-cache-dir",
                    "--only-binary=:all:",
                    "--no-warn-script-location",
                    "--target",
                ])
                .arg(dir)
                .arg("--")
                .args(&set.packages);
                c
            }
            Language::Node => {
                let mut c = tokio::process::Command::new(&self.npm);
                c.args([
                    "install",
                    "--ignore-scripts",
                    "--no-audit",
                    "--no-fund",
                    "--omit=dev",
                    "--no-package-lock",
                    "--prefix",
                ])
                .arg(dir)
                .arg("--")
                .args(&set.packages);
                c
            }
        };
        cmd.current_dir(dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        // The server's own secrets stay out of the installer's environment.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("TOOLSHED_") {
                cmd.env_remove(k);
            }
        }
        let installer = set.language.installer();
        let failed = |why: String| {
            ApiError::new(
                ApiCode::DependencyInstallFailed,
                format!(
                    "installing {} with {installer} failed: {why}",
                    set.packages.join(", ")
                ),
            )
        };
        let output = tokio::time::timeout(self.install_timeout, cmd.output())
            .await
            .map_err(|_| {
                failed(format!(
                    "it took longer than {} s",
                    self.install_timeout.as_secs()
                ))
            })?
            .map_err(|e| failed(format!("{installer} could not be started ({e})")))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail = last_lines(&stderr, 6);
        let culprit = set
            .packages
            .iter()
            .find(|p| {
                let name = package_name(p);
                stderr.contains(&format!("requirement {p}"))
                    || stderr.contains(&format!("for {p}"))
                    || stderr.contains(&format!("'{name}'"))
                    || stderr.contains(&format!("{name}@"))
                    || stderr.contains(&format!("/{name} "))
            })
            .or(match set.packages.as_slice() {
                [one] => Some(one),
                _ => None,
            });
        Err(ApiError::new(
            ApiCode::DependencyInstallFailed,
            match culprit {
                Some(p) => format!(
                    "dependency `{p}` could not be installed with {installer}: check its name and version on {}; {installer} said: {tail}",
                    set.language.registry()
                ),
                None => format!(
                    "installing {} with {installer} failed; {installer} said: {tail}",
                    set.packages.join(", ")
                ),
            },
        ))
    }
}

/// The language a code tool's dependencies are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// pip.
    Python,
    /// npm.
    Node,
}

impl Language {
    fn installer(self) -> &'static str {
        match self {
            Language::Python => "pip",
            Language::Node => "npm",
        }
    }

    fn registry(self) -> &'static str {
        match self {
            Language::Python => "PyPI",
            Language::Node => "the npm registry",
        }
    }
}

/// The packages of one install, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DependencySet {
    language: Language,
    packages: Vec<String>,
}

impl DependencySet {
    /// The install's folder name: a hash of the installer and the sorted packages.
    fn key(&self) -> String {
        let mut text = String::from(self.language.installer());
        for p in &self.packages {
            text.push('\n');
            text.push_str(p);
        }
        toolshed_api::code::sha256_hex(text.as_bytes())
    }
}

/// The dependencies of a code tool, checked: names and versions only (no options, URLs,
/// paths or git references, which would fetch from elsewhere than the registry).
fn dependency_set(
    file: &ToolFile,
    language: Language,
    root: &Path,
    entry_dir: &Path,
) -> Result<Option<DependencySet>, ApiError> {
    let mut packages = Vec::new();
    let mut problems = Vec::new();
    if let Some(imp) = &file.implementation {
        for (i, dep) in imp.dependencies.iter().enumerate() {
            let field = format!("implementation.dependencies[{i}]");
            match check_package(language, dep.trim()) {
                Ok(p) => packages.push(p),
                Err(why) => problems.push(FieldProblem::new(field, why)),
            }
        }
    }
    let manifest = match language {
        Language::Python => "requirements.txt",
        Language::Node => "package.json",
    };
    let mut dirs = vec![root.to_path_buf()];
    if entry_dir != root {
        dirs.push(entry_dir.to_path_buf());
    }
    for dir in dirs {
        let path = dir.join(manifest);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let shown = path
            .strip_prefix(root)
            .map_or_else(|_| manifest.to_owned(), |p| p.display().to_string());
        match language {
            Language::Python => {
                for (n, line) in text.lines().enumerate() {
                    let line = line.split('#').next().unwrap_or("").trim();
                    if line.is_empty() {
                        continue;
                    }
                    match check_package(language, line) {
                        Ok(p) => packages.push(p),
                        Err(why) => {
                            problems.push(FieldProblem::new(format!("code.{shown}:{}", n + 1), why))
                        }
                    }
                }
            }
            Language::Node => match serde_json::from_str::<Value>(&text) {
                Ok(v) => {
                    if let Some(deps) = v.get("dependencies").and_then(Value::as_object) {
                        for (name, spec) in deps {
                            let spec = spec.as_str().unwrap_or("");
                            let text = format!("{name}@{spec}");
                            match check_package(language, &text) {
                                Ok(p) => packages.push(p),
                                Err(why) => problems.push(FieldProblem::new(
                                    format!("code.{shown}.dependencies.{name}"),
                                    why,
                                )),
                            }
                        }
                    }
                }
                Err(e) => problems.push(FieldProblem::new(
                    format!("code.{shown}"),
                    format!("not JSON ({e})"),
                )),
            },
        }
    }
    if !problems.is_empty() {
        let text: Vec<String> = problems
            .iter()
            .map(|f| format!("field `{}`: {}", f.field, f.message))
            .collect();
        return Err(ApiError::invalid_body(text.join("; ")).with_fields(problems));
    }
    if packages.is_empty() {
        return Ok(None);
    }
    packages.sort();
    packages.dedup();
    Ok(Some(DependencySet { language, packages }))
}

/// A package requirement as the installer takes it, or why it is refused: in one
/// canonical form, so requirements that mean the same install once (`six==1.16.0`,
/// `Six==1.16`, `six===1.16.0`).
fn check_package(language: Language, text: &str) -> Result<String, String> {
    let canonical = match language {
        Language::Python if text.len() <= 200 => python_requirement(text),
        Language::Node if text.len() <= 200 => npm_requirement(text),
        _ => None,
    };
    canonical.ok_or_else(|| match language {
        Language::Python => format!(
            "`{}` is not a package requirement this server installs; write a PyPI name with an optional version, e.g. `six==1.16.0` or `requests>=2,<3` (no options, URLs or paths)",
            short(text)
        ),
        Language::Node => format!(
            "`{}` is not a package this server installs; write an npm name with an optional version range, e.g. `left-pad@1.3.0` or `left-pad@>=1.0.0 <2` (no URLs, git or file references)",
            short(text)
        ),
    })
}

fn short(s: &str) -> String {
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// A PEP 508 requirement with a name and version specifiers (and markers), no URL, in
/// canonical form (read by `pep508_rs`): the name normalised as PEP 503 says, extras
/// sorted, `===` read as `==`, trailing zeros of an exact version dropped (PEP 440 pads
/// them back), the specifiers sorted.
fn python_requirement(text: &str) -> Option<String> {
    use pep508_rs::pep440_rs::{Operator, VersionSpecifier};
    // Options (`-e`, `--index-url`) are not requirements; PEP 508 has no leading `-`.
    if text.starts_with('-') {
        return None;
    }
    let req = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(text).ok()?;
    let specifiers = match &req.version_or_url {
        None => Vec::new(),
        Some(pep508_rs::VersionOrUrl::Url(_)) => return None,
        Some(pep508_rs::VersionOrUrl::VersionSpecifier(v)) => v.iter().cloned().collect(),
    };
    let mut specs: Vec<String> = specifiers
        .into_iter()
        .map(|s: VersionSpecifier| {
            let operator = match s.operator() {
                Operator::ExactEqual => Operator::Equal,
                o => *o,
            };
            let mut version = s.version().clone();
            if matches!(operator, Operator::Equal | Operator::NotEqual) {
                let mut release = version.release().to_vec();
                while release.len() > 1 && release.last() == Some(&0) {
                    release.pop();
                }
                version = version.with_release(release);
            }
            VersionSpecifier::from_version(operator, version)
                .map_or_else(|_| s.to_string(), |v| v.to_string())
        })
        .collect();
    specs.sort();
    specs.dedup();
    let mut extras: Vec<String> = req.extras.iter().map(ToString::to_string).collect();
    extras.sort();
    extras.dedup();
    let mut out = req.name.to_string();
    if !extras.is_empty() {
        out.push_str(&format!("[{}]", extras.join(",")));
    }
    out.push_str(&specs.join(","));
    if let Some(marker) = req.marker.contents() {
        out.push_str(&format!("; {marker}"));
    }
    Some(out)
}

/// `(@scope/)name(@range)` with npm's name characters and a plain version range, in
/// canonical form: the range's words separated by one space (`>=1.0.0 <2` is two
/// comparators npm intersects; they are not run together).
fn npm_requirement(text: &str) -> Option<String> {
    let (scope, rest) = match text.strip_prefix('@') {
        Some(r) => match r.split_once('/') {
            Some((s, rest)) => (Some(s), rest),
            None => return None,
        },
        None => (None, text),
    };
    let (name, range) = match rest.split_once('@') {
        Some((n, r)) => (n, Some(r)),
        None => (rest, None),
    };
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
    };
    if scope.is_some_and(|s| !name_ok(s)) || !name_ok(name) {
        return None;
    }
    let full = match scope {
        Some(s) => format!("@{s}/{name}"),
        None => name.to_owned(),
    };
    let Some(range) = range else {
        return Some(full);
    };
    let words: Vec<&str> = range.split_whitespace().collect();
    let range_ok = !words.is_empty()
        && !range.contains("://")
        && !range.contains(':')
        && !range.contains('/')
        && range
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".^~<>=*|+- ".contains(c));
    range_ok.then(|| format!("{full}@{}", words.join(" ")))
}

fn package_name(requirement: &str) -> &str {
    let end = requirement
        .char_indices()
        .skip(1)
        .find(|(_, c)| "@[=<>~! ".contains(*c))
        .map_or(requirement.len(), |(i, _)| i);
    &requirement[..end]
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// `python`, `node` or `exec` and the rest of an endpoint naming a file.
pub fn split_kind(text: &str) -> Option<(&str, &str)> {
    ["python", "node", "exec"].into_iter().find_map(|kind| {
        text.strip_prefix(kind)
            .and_then(|r| r.strip_prefix(':'))
            .map(|rest| (kind, rest))
    })
}

/// The file and the function (or export) of an endpoint's rest; `exec:` has none.
fn split_target<'a>(kind: &str, rest: &'a str) -> (&'a str, Option<&'a str>) {
    if kind == "exec" {
        return (rest, None);
    }
    match rest.rsplit_once(':') {
        Some((path, target)) if !target.contains('/') && !target.is_empty() => (path, Some(target)),
        _ => (rest, None),
    }
}

/// An endpoint naming a file of uploaded code (`python:tool.py:fn`), checked against
/// the code's files, and made absolute under `root`. Returns the absolute endpoint,
/// the entry file's relative path and the language.
pub fn code_endpoint(
    text: &str,
    files: Option<&[CodeFile]>,
    root: &Path,
) -> Result<(String, String, Option<Language>), ApiError> {
    let Some((kind, rest)) = split_kind(text) else {
        return Err(ApiError::field(
            "endpoint",
            format!(
                "`{}` does not name a file of the uploaded code; with `code`, use python:PATH[:function], node:PATH[:export] or exec:PATH, PATH relative to the code's folder",
                short(text)
            ),
        ));
    };
    let (path, target) = split_target(kind, rest);
    let clean = path.trim_start_matches("./");
    if path.starts_with('/') || clean.split('/').any(|p| p == ".." || p.is_empty()) {
        return Err(ApiError::field(
            "endpoint",
            format!(
                "`{path}` must be a path relative to the uploaded code's folder, e.g. `{kind}:tool.py`"
            ),
        ));
    }
    if let Some(files) = files
        && !files.iter().any(|f| f.path == clean)
    {
        let names: Vec<&str> = files.iter().take(10).map(|f| f.path.as_str()).collect();
        return Err(ApiError::field(
            "endpoint",
            format!(
                "`{clean}` is not a file of the uploaded code (it holds {}); name one of its files",
                names.join(", ")
            ),
        ));
    }
    let mut out = format!("{kind}:{}", root.join(clean).display());
    if let Some(t) = target {
        out.push(':');
        out.push_str(t);
    }
    let language = match kind {
        "python" => Some(Language::Python),
        "node" => Some(Language::Node),
        _ => None,
    };
    Ok((out, clean.to_owned(), language))
}

/// Create a folder the server alone may write (0755), or check an existing one is a
/// folder (not a link) that no one else may write.
fn create_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => {
            if !meta.is_dir() {
                return Err(format!(
                    "the code cache {} is not a folder (a link is refused)",
                    dir.display()
                ));
            }
            if meta.permissions().mode() & 0o022 != 0 {
                return Err(format!(
                    "the code cache {} may be written by other users; `chmod go-w` it",
                    dir.display()
                ));
            }
            Ok(())
        }
        Err(_) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| format!("cannot create the code cache {} ({e})", dir.display())),
    }
}

/// Write `files` under a temporary folder of `dir`, then rename it to `target`: a
/// folder that exists is complete. Files are 0444 (0555 when executable), folders 0555.
fn write_tree(dir: &Path, target: &Path, files: &[CodeFile]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    let tmp = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&tmp)?;
    let result = (|| {
        for f in files {
            // The paths were checked (relative, no `..`, no links in the archive), and
            // the folder is new, so nothing on the way is a link; `create_new` (O_EXCL)
            // never follows one at the end either.
            let path = tmp.join(&f.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(if f.executable { 0o755 } else { 0o644 })
                .open(&path)?;
            out.write_all(&f.content)?;
            out.sync_all()?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    make_read_only_tree(&tmp);
    match std::fs::rename(&tmp, target) {
        Ok(()) => Ok(()),
        // Written meanwhile by another server sharing the folder: theirs is the same.
        Err(_) if target.is_dir() => {
            make_writable_tree(&tmp);
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(())
        }
        Err(e) => {
            make_writable_tree(&tmp);
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// Drop the write bits of a tree (tools see it read-only anyway; this keeps the
/// server's own mistakes from changing stored code).
fn make_read_only_tree(root: &Path) {
    set_tree_mode(root, |mode| mode & !0o222);
}

fn make_writable_tree(root: &Path) {
    set_tree_mode(root, |mode| mode | 0o200);
}

fn set_tree_mode(root: &Path, change: fn(u32) -> u32) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return;
    };
    if meta.file_type().is_symlink() {
        return;
    }
    if meta.is_dir() {
        // Children first, while the folder is still writable.
        if let Ok(entries) = std::fs::read_dir(root) {
            for e in entries.flatten() {
                set_tree_mode(&e.path(), change);
            }
        }
    }
    let mode = change(meta.permissions().mode());
    let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_names_and_versions_only() {
        for ok in ["six", "six==1.16.0", "requests>=2,<3", "a_b.c-d[x,y]~=1.0"] {
            assert!(python_requirement(ok).is_some(), "{ok}");
        }
        for bad in [
            "--index-url=http://x",
            "-e .",
            "git+https://x/y",
            "./local",
            "x @ https://e/x.whl",
            "x==",
        ] {
            assert!(python_requirement(bad).is_none(), "{bad}");
        }
        for ok in ["left-pad", "left-pad@1.3.0", "@scope/pkg@^1.2.0"] {
            assert!(npm_requirement(ok).is_some(), "{ok}");
        }
        for bad in [
            "git+ssh://x",
            "x@file:../y",
            "x@github:a/b",
            "X",
            "x@http://e",
        ] {
            assert!(npm_requirement(bad).is_none(), "{bad}");
        }
        assert_eq!(package_name("six==1.16.0"), "six");
        assert_eq!(package_name("@s/p@1"), "@s/p");
    }

    #[test]
    fn requirements_that_mean_the_same_install_once() {
        let one = |texts: &[&str]| {
            let forms: Vec<String> = texts
                .iter()
                .map(|t| check_package(Language::Python, t).unwrap())
                .collect();
            assert!(forms.windows(2).all(|w| w[0] == w[1]), "{forms:?}");
            forms[0].clone()
        };
        assert_eq!(
            one(&[
                "six==1.16.0",
                "Six==1.16.0",
                "six===1.16.0",
                "SIX == 1.16",
                "six==1.16.0.0"
            ]),
            "six==1.16"
        );
        assert_eq!(
            one(&["Foo_Bar.baz[b,a]>=2,<3", "foo-bar-baz[a,b] <3, >=2"]),
            "foo-bar-baz[a,b]<3,>=2"
        );
        // Different versions stay different.
        assert_ne!(
            check_package(Language::Python, "six==1.16.0"),
            check_package(Language::Python, "six==1.15.0")
        );
        // npm: a range of two comparators keeps the space between them.
        assert_eq!(
            check_package(Language::Node, "left-pad@>=1.0.0   <2").unwrap(),
            "left-pad@>=1.0.0 <2"
        );
        assert_ne!(
            check_package(Language::Node, "left-pad@>=1.0.0 <2").unwrap(),
            "left-pad@>=1.0.0<2"
        );
    }

    #[test]
    fn code_endpoints_stay_inside_the_code() {
        let root = Path::new("/cache/abc");
        let files = vec![CodeFile {
            path: "pkg/tool.py".into(),
            content: vec![],
            executable: false,
        }];
        let (ep, rel, _) = code_endpoint("python:pkg/tool.py:run", Some(&files), root).unwrap();
        assert_eq!(ep, "python:/cache/abc/pkg/tool.py:run");
        assert_eq!(rel, "pkg/tool.py");
        for bad in [
            "python:/etc/x.py",
            "python:../x.py",
            "python:other.py",
            "builtin:x",
        ] {
            assert!(code_endpoint(bad, Some(&files), root).is_err(), "{bad}");
        }
    }
}
