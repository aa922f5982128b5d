//! How each kind of endpoint is started: the command line of the Python and Node
//! runners, the interpreter probe, the child environment, the TypeScript transpile
//! cache, and short helper processes that print one JSON line (probe, inference).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::assets::{Assets, sha256_hex, write_atomically};
use crate::config::{ChildEnv, DispatcherConfig, Mode};
use crate::endpoint::{Endpoint, file_stem};
use crate::error::{DispatchError, excerpt, tail};
use crate::process::{LineRead, Proc, SpawnSpec, describe_status};

/// How long a helper (probe, inference, transpile) may run.
const HELPER_TIMEOUT: Duration = Duration::from_secs(60);
/// How much a helper may print.
const HELPER_CAP: usize = 8 * 1024 * 1024;

/// The resolved Python: the real executable (not a shim) and the `sys.path` a normal
/// start would have, handed to the runner so it can skip the `site` module.
#[derive(Debug)]
struct PythonEnv {
    executable: PathBuf,
    sys_path: String,
}

/// Starts tool processes. Shared by the dispatcher and its pools.
pub(crate) struct Launcher {
    pub config: DispatcherConfig,
    env: Option<Vec<(OsString, OsString)>>,
    assets: OnceCell<Assets>,
    python: OnceCell<PythonEnv>,
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
                let probe = "import sys, json; print(json.dumps([sys.executable, sys.path]))";
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
                let (exe, path): (String, Vec<String>) =
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
                let path: Vec<String> = path.into_iter().filter(|p| !p.is_empty()).collect();
                Ok(PythonEnv {
                    executable,
                    sys_path: serde_json::to_string(&path).unwrap_or_else(|_| "[]".into()),
                })
            })
            .await
    }

    /// The resolved Python executable (for benchmarks and diagnostics).
    pub async fn python_executable(&self, tool: &str) -> Result<PathBuf, DispatchError> {
        Ok(self.python(tool).await?.executable.clone())
    }

    /// How to start `endpoint`'s process for `mode`.
    pub async fn spawn_spec(
        &self,
        endpoint: &Endpoint,
        tool: &str,
        mode: Mode,
    ) -> Result<SpawnSpec, DispatchError> {
        let cwd = endpoint
            .path()
            .and_then(Path::parent)
            .map(Path::to_path_buf);
        let mut spec = SpawnSpec {
            program: PathBuf::new(),
            args: Vec::new(),
            cwd,
            env: self.env.clone(),
            extra_env: Vec::new(),
            watch: endpoint.path().map(Path::to_path_buf),
            marks_calls: !matches!(endpoint, Endpoint::Exec { .. }),
        };
        match endpoint {
            Endpoint::Python { path, function } => {
                let python = self.python(tool).await?;
                let assets = self.assets().await?;
                spec.program = python.executable.clone();
                spec.args = vec![
                    "-S".into(),
                    "-E".into(),
                    assets.runner_py().into(),
                    path.into(),
                    function.into(),
                ];
                spec.extra_env
                    .push(("TOOLSHED_SYS_PATH".into(), python.sys_path.clone().into()));
            }
            Endpoint::Node { path, export } => {
                let module = if endpoint.is_typescript() {
                    self.typescript(path).await?
                } else {
                    path.clone()
                };
                let assets = self.assets().await?;
                spec.program = self.config.node.clone();
                spec.args = vec![assets.runner_mjs().into()];
                if mode == Mode::OneShot {
                    spec.args.push("--once".into());
                }
                spec.args.extend([
                    module.into(),
                    export.clone().unwrap_or_default().into(),
                    file_stem(path).into(),
                ]);
            }
            Endpoint::Exec { path } => {
                spec.program = path.clone();
            }
            Endpoint::Builtin { .. } | Endpoint::Http { .. } => {
                return Err(DispatchError::InvalidEndpoint {
                    endpoint: endpoint.to_string(),
                    reason: "it does not run as a process".into(),
                });
            }
        }
        Ok(spec)
    }

    /// Start `endpoint`'s process for `mode`.
    pub async fn spawn(
        &self,
        endpoint: &Endpoint,
        tool: &str,
        mode: Mode,
    ) -> Result<Proc, DispatchError> {
        let spec = self.spawn_spec(endpoint, tool, mode).await?;
        Proc::spawn(&spec, self.config.stderr_cap).map_err(|source| DispatchError::Spawn {
            tool: tool.to_owned(),
            program: spec.program.display().to_string(),
            source,
        })
    }

    /// The transpiled entry of a TypeScript tool: from the cache when every source it
    /// was built from is unchanged, else transpiled now.
    pub async fn typescript(&self, source: &Path) -> Result<PathBuf, DispatchError> {
        let text = tokio::fs::read(source)
            .await
            .map_err(|e| DispatchError::Io {
                what: format!("cannot read {}", source.display()),
                source: e,
            })?;
        let assets = self.assets().await?;
        let mut keyed = Vec::with_capacity(text.len() + 256);
        keyed.extend_from_slice(assets.version.as_bytes());
        keyed.push(0);
        keyed.extend_from_slice(source.as_os_str().as_encoded_bytes());
        keyed.push(0);
        keyed.extend_from_slice(&text);
        let key = &sha256_hex(&keyed)[..32];
        let dir = self.config.cache_dir.join("typescript").join(key);
        if let Some(entry) = cached_entry(&dir).await {
            return Ok(entry);
        }
        // One transpile at a time in this process; the files are written atomically, so
        // another process transpiling the same source at once does no harm.
        let _guard = self.typescript.lock().await;
        if let Some(entry) = cached_entry(&dir).await {
            return Ok(entry);
        }
        let args = vec![
            OsString::from("--experimental-import-meta-resolve"),
            OsString::from("--no-warnings"),
            assets.transpile_mjs().into(),
            self.config.typescript_deps.clone().into(),
            source.into(),
            dir.clone().into(),
        ];
        let value = self
            .run_helper(&self.config.node, &args, source.parent())
            .await
            .map_err(|e| match e {
                HelperError::Spawn(err) => DispatchError::Spawn {
                    tool: file_stem(source),
                    program: self.config.node.display().to_string(),
                    source: err,
                },
                HelperError::Failed(message) => DispatchError::Transpile {
                    path: source.to_path_buf(),
                    message,
                },
            })?;
        if let Some(err) = value.get("error") {
            let message = err["message"]
                .as_str()
                .unwrap_or("unknown error")
                .to_owned();
            return Err(if err["code"] == "TranspilerNotInstalled" {
                DispatchError::TranspilerNotInstalled { message }
            } else {
                DispatchError::Transpile {
                    path: source.to_path_buf(),
                    message,
                }
            });
        }
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|e| DispatchError::Transpile {
                path: source.to_path_buf(),
                message: format!("unexpected answer from the transpile step: {e}"),
            })?;
        let entry = manifest.entry.clone();
        let bytes = serde_json::to_vec(&serde_json::json!({
            "entry": manifest.entry,
            "sources": manifest.sources.iter().map(|s| serde_json::json!({"path": s.path, "sha256": s.sha256})).collect::<Vec<_>>(),
        }))
        .unwrap_or_default();
        let manifest_path = dir.join("manifest.json");
        tokio::task::spawn_blocking(move || write_atomically(&manifest_path, &bytes))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r)
            .map_err(|e| DispatchError::Io {
                what: "cannot write the TypeScript cache manifest".into(),
                source: e,
            })?;
        Ok(entry)
    }

    /// Run a short helper that prints one JSON line on stdout, with the child
    /// environment, a timeout and an output cap.
    pub async fn run_helper(
        &self,
        program: &Path,
        args: &[OsString],
        cwd: Option<&Path>,
    ) -> Result<Value, HelperError> {
        let spec = SpawnSpec {
            program: program.to_path_buf(),
            args: args.to_vec(),
            cwd: cwd.map(Path::to_path_buf),
            env: self.env.clone(),
            extra_env: Vec::new(),
            watch: None,
            marks_calls: false,
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

#[derive(Debug, Deserialize)]
struct Manifest {
    entry: PathBuf,
    sources: Vec<ManifestSource>,
}

#[derive(Debug, Deserialize)]
struct ManifestSource {
    path: PathBuf,
    sha256: String,
}

/// The cached entry when the manifest exists and every source still hashes the same.
async fn cached_entry(dir: &Path) -> Option<PathBuf> {
    let bytes = tokio::fs::read(dir.join("manifest.json")).await.ok()?;
    let manifest: Manifest = serde_json::from_slice(&bytes).ok()?;
    for source in &manifest.sources {
        let text = tokio::fs::read(&source.path).await.ok()?;
        if sha256_hex(&text) != source.sha256 {
            return None;
        }
    }
    tokio::fs::metadata(&manifest.entry)
        .await
        .ok()
        .filter(|m| m.is_file())
        .map(|_| manifest.entry)
}
