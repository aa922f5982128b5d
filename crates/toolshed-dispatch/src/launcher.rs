//! How each kind of endpoint is started: the command line of the Python and Node
//! runners, the interpreter probe, the child environment, the TypeScript cache (filled
//! in-process, see [`crate::typescript`]), and short helper processes that print one
//! JSON line (probe, inference).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::OnceCell;

use toolshed_sandbox::{Bind, RunSpec, Sandbox, SandboxConfig};

use crate::assets::{Assets, sha256_hex, write_atomically};
use crate::config::{ChildEnv, DispatcherConfig, Isolation, Mode, SandboxPolicy};
use crate::endpoint::{Endpoint, file_stem};
use crate::error::{DispatchError, excerpt, tail};
use crate::process::{LineRead, Proc, SpawnSpec, describe_status};
use crate::typescript::{self, Transpiled};

/// How long a helper (probe, inference) may run.
const HELPER_TIMEOUT: Duration = Duration::from_secs(60);
/// How much a helper may print.
const HELPER_CAP: usize = 8 * 1024 * 1024;

/// The resolved Python: the real executable (not a shim) and the `sys.path` a normal
/// start would have, handed to the runner so it can skip the `site` module.
#[derive(Debug)]
struct PythonEnv {
    executable: PathBuf,
    /// The `sys.path` entries.
    sys_path: Vec<String>,
    /// `sys.prefix` and `sys.base_prefix` (bound in the sandbox when the interpreter is
    /// not under `/usr`).
    prefixes: Vec<PathBuf>,
}

/// Starts tool processes. Shared by the dispatcher and its pools.
pub(crate) struct Launcher {
    pub config: DispatcherConfig,
    env: Option<Vec<(OsString, OsString)>>,
    assets: OnceCell<Assets>,
    python: OnceCell<PythonEnv>,
    node: OnceCell<PathBuf>,
    sandbox: OnceCell<Sandbox>,
    typescript: tokio::sync::Mutex<()>,
}

/// Why a helper process failed.
pub(crate) enum HelperError {
    /// It could not start.
    Spawn(std::io::Error),
    /// It ran but gave no JSON line: what happened, with its stderr.
    Failed(String),
}

impl Launcher {
    pub fn new(config: DispatcherConfig) -> Launcher {
        let env = match &config.env {
            ChildEnv::Inherit => None,
            ChildEnv::Allowlist(names) => Some(
                std::env::vars_os()
                    .filter(|(k, _)| {
                        let k = k.to_string_lossy();
                        names.iter().any(|n| match n.strip_suffix('*') {
                            Some(prefix) => k.starts_with(prefix),
                            None => *n == k,
                        })
                    })
                    .collect(),
            ),
        };
        Launcher {
            config,
            env,
            assets: OnceCell::new(),
            python: OnceCell::new(),
            node: OnceCell::new(),
            sandbox: OnceCell::new(),
            typescript: tokio::sync::Mutex::new(()),
        }
    }

    /// The runner files, written on first use.
    pub async fn assets(&self) -> Result<&Assets, DispatchError> {
        self.assets
            .get_or_try_init(|| async {
                let dir = self.config.cache_dir.clone();
                tokio::task::spawn_blocking(move || Assets::materialize(&dir))
                    .await
                    .map_err(|e| DispatchError::Io {
                        what: "cannot write the runners".into(),
                        source: std::io::Error::other(e.to_string()),
                    })?
            })
            .await
    }

    async fn python(&self, tool: &str) -> Result<&PythonEnv, DispatchError> {
        self.python
            .get_or_try_init(|| async {
                let program = self.config.python.clone();
                let probe = "import sys, json; print(json.dumps([sys.executable, sys.path, sys.prefix, sys.base_prefix]))";
                let value = self
                    .run_helper(&program, &[OsString::from("-c"), probe.into()], None)
                    .await
                    .map_err(|e| match e {
                        HelperError::Spawn(source) => DispatchError::Spawn {
                            tool: tool.to_owned(),
                            program: program.display().to_string(),
                            source,
                        },
                        HelperError::Failed(message) => DispatchError::Spawn {
                            tool: tool.to_owned(),
                            program: program.display().to_string(),
                            source: std::io::Error::other(message),
                        },
                    })?;
                let (exe, path, prefix, base_prefix): (String, Vec<String>, String, String) =
                    serde_json::from_value(value).map_err(|e| DispatchError::Spawn {
                        tool: tool.to_owned(),
                        program: program.display().to_string(),
                        source: std::io::Error::other(format!("unexpected probe answer: {e}")),
                    })?;
                let executable = if exe.is_empty() {
                    program.clone()
                } else {
                    PathBuf::from(exe)
                };
                let sys_path: Vec<String> = path.into_iter().filter(|p| !p.is_empty()).collect();
                let mut prefixes = vec![PathBuf::from(base_prefix)];
                if Path::new(&prefix) != prefixes[0] {
                    prefixes.push(PathBuf::from(prefix));
                }
                Ok(PythonEnv {
                    executable,
                    sys_path,
                    prefixes,
                })
            })
            .await
    }

    /// The resolved Python executable as `view` shows it (its prefixes bound when it
    /// is not under `/usr`).
    pub async fn python_in(&self, tool: &str, view: &mut View) -> Result<PathBuf, DispatchError> {
        let python = self.python(tool).await?;
        if view.sandboxed && !View::visible(&python.executable) {
            for prefix in &python.prefixes {
                view.folder(prefix, true);
            }
        }
        Ok(view.path(&python.executable))
    }

    /// The resolved Python executable (for benchmarks and diagnostics).
    pub async fn python_executable(&self, tool: &str) -> Result<PathBuf, DispatchError> {
        Ok(self.python(tool).await?.executable.clone())
    }

    /// Use this sandbox rather than building one (see `Dispatcher::with_sandbox`).
    pub fn share_sandbox(&self, sandbox: Sandbox) {
        // Already set means already built or shared: the first one stays.
        let _ = self.sandbox.set(sandbox);
    }

    /// The sandbox, built on the first sandboxed start (unless one was shared); `None`
    /// when unsandboxed.
    async fn sandbox(&self, tool: &str) -> Result<Option<&Sandbox>, DispatchError> {
        let Isolation::Sandbox(config) = &self.config.isolation else {
            return Ok(None);
        };
        self.sandbox
            .get_or_try_init(|| async {
                let config = SandboxConfig::clone(config);
                tokio::task::spawn_blocking(move || Sandbox::new(config))
                    .await
                    .map_err(|e| DispatchError::Io {
                        what: "cannot start the sandbox supervisor".into(),
                        source: std::io::Error::other(e.to_string()),
                    })?
                    .map_err(|source| DispatchError::Sandbox {
                        tool: tool.to_owned(),
                        source,
                    })
            })
            .await
            .map(Some)
    }

    /// The Node executable: the configured path, or the name found on `PATH`.
    pub async fn node(&self) -> &Path {
        self.node
            .get_or_init(|| async {
                let node = self.config.node.clone();
                tokio::task::spawn_blocking(move || find_program(&node).unwrap_or(node))
                    .await
                    .unwrap_or_else(|_| self.config.node.clone())
            })
            .await
    }

    /// How to start `endpoint`'s process for `mode`, with the paths and binds (the
    /// policy's included) a sandboxed process sees when `sandboxed`.
    pub async fn spawn_spec(
        &self,
        endpoint: &Endpoint,
        tool: &str,
        mode: Mode,
        sandboxed: bool,
        policy: &SandboxPolicy,
    ) -> Result<SpawnSpec, DispatchError> {
        let mut view = View::new(sandboxed, &policy.binds);
        let cwd = if sandboxed {
            None
        } else {
            endpoint
                .path()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
        };
        let mut spec = SpawnSpec {
            program: PathBuf::new(),
            args: Vec::new(),
            cwd,
            env: self.env.clone(),
            extra_env: Vec::new(),
            watch: endpoint.path().map(Path::to_path_buf),
            marks_calls: !matches!(endpoint, Endpoint::Exec { .. }),
            binds: Vec::new(),
        };
        let libraries: Vec<PathBuf> = policy
            .libraries
            .iter()
            .map(|dir| view.folder(dir, false))
            .collect();
        match endpoint {
            Endpoint::Python { path, function } => {
                spec.program = self.python_in(tool, &mut view).await?;
                let python = self.python(tool).await?;
                let assets = self.assets().await?;
                let runner = view.file_in_folder(&assets.runner_py(), false);
                let module = view.file_in_folder(path, false);
                spec.args = vec![
                    "-S".into(),
                    "-E".into(),
                    runner.into(),
                    module.into(),
                    function.into(),
                ];
                let sys_path: Vec<PathBuf> = libraries
                    .iter()
                    .cloned()
                    .chain(python.sys_path.iter().map(|p| view.path(Path::new(p))))
                    .collect();
                let sys_path = serde_json::to_string(&sys_path).unwrap_or_else(|_| "[]".into());
                spec.extra_env
                    .push(("TOOLSHED_SYS_PATH".into(), sys_path.into()));
            }
            Endpoint::Node { path, export } => {
                let assets = self.assets().await?;
                spec.program = self.node_in(&mut view).await;
                spec.args = vec![view.file_in_folder(&assets.runner_mjs(), false).into()];
                if mode == Mode::OneShot {
                    spec.args.push("--once".into());
                }
                if let Ok(node_path) = std::env::join_paths(&libraries)
                    && !libraries.is_empty()
                {
                    spec.extra_env.push(("NODE_PATH".into(), node_path));
                }
                let module = self
                    .node_module_in(path, &mut view, &mut spec.extra_env)
                    .await?;
                spec.args.extend([
                    module.into(),
                    export.clone().unwrap_or_default().into(),
                    file_stem(path).into(),
                ]);
            }
            Endpoint::Exec { path } => {
                spec.program = view.file_in_folder(path, true);
            }
            Endpoint::Builtin { .. } | Endpoint::Http { .. } => {
                return Err(DispatchError::InvalidEndpoint {
                    endpoint: endpoint.to_string(),
                    reason: "it does not run as a process".into(),
                });
            }
        }
        if sandboxed {
            spec.env = Some(sandbox_env(spec.env.take()));
        }
        spec.binds = view.into_binds();
        Ok(spec)
    }

    /// Start `endpoint`'s process for `mode`: in the sandbox, with `policy`, unless the
    /// dispatcher is unsandboxed.
    pub async fn spawn(
        &self,
        endpoint: &Endpoint,
        tool: &str,
        mode: Mode,
        policy: &SandboxPolicy,
    ) -> Result<Proc, DispatchError> {
        let sandbox = self.sandbox(tool).await?;
        let spec = self
            .spawn_spec(endpoint, tool, mode, sandbox.is_some(), policy)
            .await?;
        let spawn_failed = |source| DispatchError::Spawn {
            tool: tool.to_owned(),
            program: spec.program.display().to_string(),
            source,
        };
        let Some(sandbox) = sandbox else {
            return Proc::spawn(&spec, self.config.stderr_cap).map_err(spawn_failed);
        };
        let mut run = RunSpec::new(spec.program.clone(), spec.args.clone());
        run.env = spec.env.clone().unwrap_or_default();
        run.env.extend(spec.extra_env.iter().cloned());
        run.binds = spec.binds.clone();
        run.network = policy.network;
        run.limits = policy.limits;
        let child = sandbox
            .spawn(run)
            .await
            .map_err(|source| DispatchError::Sandbox {
                tool: tool.to_owned(),
                source,
            })?;
        Proc::sandboxed(
            child,
            spec.watch.as_deref(),
            spec.marks_calls,
            self.config.stderr_cap,
        )
        .map_err(spawn_failed)
    }

    /// The transpiled entry of a TypeScript tool (see [`Launcher::typescript_modules`]).
    pub async fn typescript(&self, source: &Path) -> Result<PathBuf, DispatchError> {
        Ok(self.typescript_modules(source).await?.entry)
    }

    /// The transpiled modules of a TypeScript tool: from the cache when every source
    /// they were made from is unchanged, else transpiled now, in this process
    /// ([`crate::typescript`]; nothing is run).
    pub async fn typescript_modules(&self, source: &Path) -> Result<Transpiled, DispatchError> {
        let assets = self.assets().await?;
        let entry = source.to_path_buf();
        let text = tokio::task::spawn_blocking(move || typescript::entry_text(&entry))
            .await
            .map_err(|e| DispatchError::Io {
                what: "cannot read a TypeScript source".into(),
                source: std::io::Error::other(e.to_string()),
            })??;
        let mut keyed = Vec::with_capacity(text.len() + 256);
        for part in [
            assets.version.as_bytes(),
            typescript::TRANSPILER_VERSION.as_bytes(),
            source.as_os_str().as_encoded_bytes(),
        ] {
            keyed.extend_from_slice(part);
            keyed.push(0);
        }
        keyed.extend_from_slice(text.as_bytes());
        let key = &sha256_hex(&keyed)[..32];
        let dir = self.config.cache_dir.join("typescript").join(key);
        if let Some(cached) = cached_modules(&dir).await {
            return Ok(cached);
        }
        // One transpile at a time in this process; the files are written atomically, so
        // another process transpiling the same source at once does no harm.
        let _guard = self.typescript.lock().await;
        if let Some(cached) = cached_modules(&dir).await {
            return Ok(cached);
        }
        let entry = source.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let transpiled = typescript::transpile(&entry, &dir)?;
            let bytes = serde_json::to_vec(&transpiled).unwrap_or_default();
            write_atomically(&dir.join("manifest.json"), &bytes).map_err(|e| {
                DispatchError::Io {
                    what: "cannot write the TypeScript cache manifest".into(),
                    source: e,
                }
            })?;
            Ok(transpiled)
        })
        .await
        .map_err(|e| DispatchError::Io {
            what: "cannot transpile a TypeScript source".into(),
            source: std::io::Error::other(e.to_string()),
        })?
    }

    /// The module a Node process loads for the tool file `path`, as `view` shows it,
    /// with what the runner needs beside it in `env`: for TypeScript, the transpiled
    /// entry, its source's folder bound too, and (when a module leaves specifiers for
    /// the runner) the output → source map `TOOLSHED_MODULE_SOURCES` the runner resolves
    /// them with, as if imported from the source; and toolshed's Node helper package
    /// (`TOOLSHED_NODE_DEPS`), or what to install when it is missing
    /// (`TOOLSHED_NODE_DEPS_MISSING`).
    pub async fn node_module_in(
        &self,
        path: &Path,
        view: &mut View,
        env: &mut Vec<(OsString, OsString)>,
    ) -> Result<PathBuf, DispatchError> {
        let module = if crate::endpoint::is_typescript_path(path) {
            let transpiled = self.typescript_modules(path).await?;
            if let Some(folder) = path.parent() {
                view.folder(folder, false);
            }
            let module = view.file_in_folder(&transpiled.entry, false);
            if transpiled.resolves {
                let map: serde_json::Map<String, Value> = transpiled
                    .modules
                    .iter()
                    .map(|m| {
                        (
                            view.path(&m.output).display().to_string(),
                            Value::String(view.path(&m.source).display().to_string()),
                        )
                    })
                    .collect();
                env.push((
                    "TOOLSHED_MODULE_SOURCES".into(),
                    Value::Object(map).to_string().into(),
                ));
            }
            module
        } else {
            view.file_in_folder(path, false)
        };
        match self.node_deps_in(view) {
            Some(deps) => env.push(("TOOLSHED_NODE_DEPS".into(), deps.into_os_string())),
            None => env.push((
                "TOOLSHED_NODE_DEPS_MISSING".into(),
                crate::config::node_deps_install_hint(self.config.node_deps.as_deref()).into(),
            )),
        }
        Ok(module)
    }

    /// What a helper running a tool's own code sees (see [`Launcher::run_tool_helper`]).
    pub fn view(&self) -> View {
        View::new(self.config.isolation.is_sandboxed(), &[])
    }

    /// Run a short helper over a tool's own files (reading a Node module's declared
    /// schema imports it; Python inference parses it) that prints one JSON line: in the
    /// sandbox unless unsandboxed, with what `view` binds (the program and arguments are
    /// named through it). Unsandboxed, it runs in `host_cwd`.
    pub async fn run_tool_helper(
        &self,
        tool: &str,
        view: View,
        program: PathBuf,
        args: Vec<OsString>,
        extra_env: Vec<(OsString, OsString)>,
        host_cwd: Option<&Path>,
    ) -> Result<Value, HelperError> {
        let sandbox = self
            .sandbox(tool)
            .await
            .map_err(|e| HelperError::Failed(e.message()))?;
        let Some(sandbox) = sandbox else {
            return self
                .run_helper_with_env(&program, &args, host_cwd, extra_env)
                .await;
        };
        let mut run = RunSpec::new(program.clone(), args);
        run.env = sandbox_env(self.env.clone());
        run.env.extend(extra_env);
        run.binds = view.into_binds();
        run.limits.timeout_ms = Some(u64::try_from(HELPER_TIMEOUT.as_millis()).unwrap_or(60_000));
        run.limits.stdout_bytes = Some(HELPER_CAP as u64);
        let outcome = sandbox
            .run(run, Vec::new())
            .await
            .map_err(|e| HelperError::Failed(format!("cannot run it in the sandbox: {e}")))?;
        let line = outcome
            .stdout
            .split(|b| *b == b'\n')
            .next()
            .unwrap_or_default();
        let stderr = tail(String::from_utf8_lossy(&outcome.stderr).trim(), 1500);
        serde_json::from_slice(line).map_err(|_| {
            let what = if outcome.timed_out {
                format!("did not finish within {}s", HELPER_TIMEOUT.as_secs())
            } else if line.is_empty() {
                "printed nothing".to_owned()
            } else {
                format!(
                    "printed something that is not JSON: `{}`",
                    excerpt(&String::from_utf8_lossy(line), 200)
                )
            };
            HelperError::Failed(if stderr.is_empty() {
                format!("`{}` {what}", program.display())
            } else {
                format!("`{}` {what}; stderr: {stderr}", program.display())
            })
        })
    }

    /// The Node executable and, in a view, where it appears (its prefix bound when it
    /// is not under `/usr`).
    pub async fn node_in(&self, view: &mut View) -> PathBuf {
        let node = self.node().await.to_path_buf();
        if view.sandboxed
            && !View::visible(&node)
            && let Some(prefix) = node.parent().and_then(Path::parent)
        {
            view.folder(prefix, true);
        }
        view.path(&node)
    }

    /// toolshed's Node helper package ([`DispatcherConfig::node_deps`]), shown
    /// read-only in `view`, and where it appears there: the zod 4 that bread and Toren
    /// tool files import comes from it (see runners/resolve-hooks.mjs). `None` when zod
    /// is not installed there.
    pub fn node_deps_in(&self, view: &mut View) -> Option<PathBuf> {
        let deps = std::fs::canonicalize(self.config.node_deps.as_ref()?).ok()?;
        if !deps.join("node_modules/zod/package.json").is_file() {
            return None;
        }
        Some(view.folder(&deps, false))
    }

    /// Run a short helper that prints one JSON line on stdout, with the child
    /// environment, a timeout and an output cap.
    pub async fn run_helper(
        &self,
        program: &Path,
        args: &[OsString],
        cwd: Option<&Path>,
    ) -> Result<Value, HelperError> {
        self.run_helper_with_env(program, args, cwd, Vec::new())
            .await
    }

    /// [`Launcher::run_helper`] with more environment variables.
    async fn run_helper_with_env(
        &self,
        program: &Path,
        args: &[OsString],
        cwd: Option<&Path>,
        extra_env: Vec<(OsString, OsString)>,
    ) -> Result<Value, HelperError> {
        let spec = SpawnSpec {
            program: program.to_path_buf(),
            args: args.to_vec(),
            cwd: cwd.map(Path::to_path_buf),
            env: self.env.clone(),
            extra_env,
            watch: None,
            marks_calls: false,
            binds: Vec::new(),
        };
        let mut proc = Proc::spawn(&spec, self.config.stderr_cap).map_err(HelperError::Spawn)?;
        drop(proc.take_stdin());
        let mut line = Vec::new();
        let read =
            tokio::time::timeout(HELPER_TIMEOUT, proc.read_line(&mut line, HELPER_CAP)).await;
        let outcome = match read {
            Ok(Ok(LineRead::Line)) => Ok(()),
            Ok(Ok(LineRead::TooLong)) => Err(format!("printed more than {HELPER_CAP} bytes")),
            Ok(Ok(LineRead::Eof)) => Err("printed nothing".to_owned()),
            Ok(Err(e)) => Err(format!("cannot read its output: {e}")),
            Err(_) => Err(format!(
                "did not finish within {}s",
                HELPER_TIMEOUT.as_secs()
            )),
        };
        let status = match outcome {
            Ok(()) => proc.wait_exit(Duration::from_secs(5)).await,
            Err(_) => {
                let status = proc.wait_exit(Duration::from_millis(500)).await;
                if status.is_none() {
                    proc.kill().await;
                }
                status
            }
        };
        if status.is_none() {
            proc.kill().await;
        }
        proc.drain_stderr().await;
        let (stderr, _) = proc.take_stderr();
        let fail = |what: String| {
            let stderr = tail(stderr.trim(), 1500);
            HelperError::Failed(if stderr.is_empty() {
                format!("`{}` {what}", program.display())
            } else {
                format!("`{}` {what}; stderr: {stderr}", program.display())
            })
        };
        match outcome {
            Err(what) => Err(fail(format!("{what} ({})", describe_status(status)))),
            Ok(()) => serde_json::from_slice(&line).map_err(|_| {
                fail(format!(
                    "printed something that is not JSON: `{}`",
                    excerpt(&String::from_utf8_lossy(&line), 200)
                ))
            }),
        }
    }
}

/// The sandbox's own folders: a bind may not cover them, so a host folder under one is
/// shown under `/host` instead (e.g. `/tmp/x` as `/host/tmp/x`).
const RESERVED: &[&str] = &[
    "/usr", "/proc", "/dev", "/etc", "/tmp", "/work", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32",
];
/// Where host folders under a reserved one are shown.
const HOST_MOUNT: &str = "/host";
/// What the sandbox already shows: `/usr` and the bin and lib links into it.
const VISIBLE: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// What a process sees of the host: the identity on the host, read-only binds in the
/// sandbox. Every path a spec names goes through [`View::path`].
pub(crate) struct View {
    sandboxed: bool,
    /// The binds it adds.
    binds: Vec<Bind>,
    /// The policy's own binds: paths inside them are shown through them (an executable
    /// inside one makes it executable).
    given: Vec<Bind>,
}

/// Where a host folder appears in the sandbox when bound (see [`View::target`]).
pub(crate) fn sandbox_target(dir: &Path) -> PathBuf {
    View::target(dir)
}

impl View {
    fn new(sandboxed: bool, given: &[Bind]) -> View {
        View {
            sandboxed,
            binds: Vec::new(),
            given: given.to_vec(),
        }
    }

    /// Every bind: its own and the policy's.
    fn into_binds(self) -> Vec<Bind> {
        let mut all = self.binds;
        all.extend(self.given);
        all
    }

    /// Whether the sandbox shows `path` without a bind.
    fn visible(path: &Path) -> bool {
        VISIBLE.iter().any(|v| path.starts_with(v))
    }

    /// Where a host folder appears when bound: its own path, or under `/host` when that
    /// path is one of the sandbox's own. The same rule for a folder and its subfolders,
    /// so a path stays valid when its bind is replaced by one of a parent folder.
    fn target(dir: &Path) -> PathBuf {
        if RESERVED.iter().any(|r| dir.starts_with(r)) {
            Path::new(HOST_MOUNT).join(dir.strip_prefix("/").unwrap_or(dir))
        } else {
            dir.to_path_buf()
        }
    }

    /// Bind a host folder read-only (`exec`: its programs may run) and return where it
    /// appears. A folder inside a bound one is shown through it; a folder holding bound
    /// ones replaces them (the sandbox refuses nested binds).
    fn folder(&mut self, dir: &Path, exec: bool) -> PathBuf {
        if !self.sandboxed || Self::visible(dir) {
            return dir.to_path_buf();
        }
        if let Some(bind) = self.given.iter_mut().find(|b| dir.starts_with(&b.source)) {
            bind.exec |= exec;
            return self.path(dir);
        }
        if let Some(bind) = self.binds.iter_mut().find(|b| dir.starts_with(&b.source)) {
            bind.exec |= exec;
            return self.path(dir);
        }
        let mut exec = exec;
        self.binds.retain(|b| {
            let inside = b.source.starts_with(dir);
            exec |= inside && b.exec;
            !inside
        });
        let target = Self::target(dir);
        self.binds.push(if exec {
            Bind::executable(dir, target.clone())
        } else {
            Bind::read_only(dir, target.clone())
        });
        target
    }

    /// Bind a file's folder (or the file alone, for a file at the root) and return
    /// where the file appears.
    pub(crate) fn file_in_folder(&mut self, file: &Path, exec: bool) -> PathBuf {
        if !self.sandboxed || Self::visible(file) {
            return file.to_path_buf();
        }
        match file.parent() {
            Some(dir) if dir != Path::new("/") && !dir.as_os_str().is_empty() => {
                self.folder(dir, exec);
                self.path(file)
            }
            _ => self.folder(file, exec),
        }
    }

    /// Where a host path appears: inside a bind, mapped; anywhere else, unchanged (and
    /// absent in the sandbox unless the sandbox shows it).
    fn path(&self, host: &Path) -> PathBuf {
        self.binds
            .iter()
            .chain(&self.given)
            .find_map(|b| {
                host.strip_prefix(&b.source).ok().map(|rest| {
                    if rest.as_os_str().is_empty() {
                        b.target.clone()
                    } else {
                        b.target.join(rest)
                    }
                })
            })
            .unwrap_or_else(|| host.to_path_buf())
    }
}

/// Host variables that name host paths or the host's user: replaced by the sandbox's.
const HOST_SPECIFIC: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "TEMP",
    "TMP",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "NODE_PATH",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
];

/// The environment of a sandboxed process: the sandbox's paths and user, then the
/// passed host variables that name no host path (locale, time zone, proxies). With
/// [`ChildEnv::Inherit`] (`None`) the runtime's whole environment is the source.
fn sandbox_env(passed: Option<Vec<(OsString, OsString)>>) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/work"),
        ("USER", "sandbox"),
        ("LOGNAME", "sandbox"),
        ("TMPDIR", "/tmp"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    let source = passed.unwrap_or_else(|| std::env::vars_os().collect());
    env.extend(source.into_iter().filter(|(k, _)| {
        let k = k.to_string_lossy();
        !HOST_SPECIFIC.contains(&k.as_ref()) && !k.starts_with("PYENV_")
    }));
    env
}

/// `program` as a path: itself when it has a slash, else the first match on `PATH`.
fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return Some(program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
}

/// The cached modules when the manifest exists and every source still hashes the same.
async fn cached_modules(dir: &Path) -> Option<Transpiled> {
    let bytes = tokio::fs::read(dir.join("manifest.json")).await.ok()?;
    let transpiled: Transpiled = serde_json::from_slice(&bytes).ok()?;
    tokio::task::spawn_blocking(move || typescript::unchanged(&transpiled).then_some(transpiled))
        .await
        .ok()?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_view_binds_each_folder_once_and_keeps_paths_valid() {
        let mut view = View::new(true, &[]);
        let runner = view.file_in_folder(Path::new("/tmp/x/cache/runners/runner.py"), false);
        assert_eq!(runner, Path::new("/host/tmp/x/cache/runners/runner.py"));
        // A parent folder replaces the bind inside it; the path handed out stays valid.
        let tool = view.file_in_folder(Path::new("/tmp/x/tool.py"), false);
        assert_eq!(tool, Path::new("/host/tmp/x/tool.py"));
        assert_eq!(
            view.path(Path::new("/tmp/x/cache/runners/runner.py")),
            runner
        );
        assert_eq!(view.binds.len(), 1, "{:?}", view.binds);
        // What the sandbox shows needs no bind; other folders keep their own path.
        assert_eq!(
            view.file_in_folder(Path::new("/bin/sh"), true),
            Path::new("/bin/sh")
        );
        assert_eq!(
            view.folder(Path::new("/opt/python"), true),
            Path::new("/opt/python")
        );
        assert_eq!(view.binds.len(), 2);
    }

    #[test]
    fn a_tool_inside_a_policy_bind_is_shown_through_it() {
        let given = [Bind::read_only("/srv/project", "/project")];
        let mut view = View::new(true, &given);
        let script = view.file_in_folder(Path::new("/srv/project/tools/run.sh"), true);
        assert_eq!(script, Path::new("/project/tools/run.sh"));
        let binds = view.into_binds();
        assert_eq!(binds.len(), 1, "{binds:?}");
        assert!(binds[0].exec, "an executable inside makes it executable");
    }

    #[test]
    fn host_paths_and_secrets_stay_out_of_a_sandboxed_env() {
        let passed = vec![
            ("PATH".into(), "/root/.pyenv/shims:/usr/bin".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("PYENV_ROOT".into(), "/root/.pyenv".into()),
        ];
        let env = sandbox_env(Some(passed));
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("PATH").as_deref(), Some("/usr/local/bin:/usr/bin:/bin"));
        assert_eq!(get("HOME").as_deref(), Some("/work"));
        assert_eq!(get("LANG").as_deref(), Some("C.UTF-8"));
        assert_eq!(get("PYENV_ROOT"), None);
        assert_eq!(env.iter().filter(|(k, _)| k == "PATH").count(), 1);
    }
}
