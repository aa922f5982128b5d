//! The dispatcher's settings: interpreters, caps, pool size, cache folder, and what
//! environment a tool process sees.

use std::path::PathBuf;
use std::time::Duration;

/// How a subprocess tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Cold: one process per call, which gets one request and then end-of-file.
    OneShot,
    /// Warm: long-lived workers per endpoint, one request at a time each.
    Pool,
}

/// What environment a tool process sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildEnv {
    /// Only these variables of the runtime's environment; a name ending in `*` is a
    /// prefix. Credentials reach a tool through the protocol, never the environment,
    /// so the runtime's own secrets (database URLs, tokens) stay out of tools.
    Allowlist(Vec<String>),
    /// The runtime's whole environment (for trusted set-ups).
    Inherit,
}

impl Default for ChildEnv {
    fn default() -> Self {
        ChildEnv::Allowlist(
            DEFAULT_ENV_ALLOWLIST
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        )
    }
}

/// The variables a tool sees by default: locale, paths, interpreter and proxy settings.
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "TERM",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYENV_*",
    "NODE_PATH",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// Settings of a [`crate::Dispatcher`].
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// The Python interpreter (a name on `PATH` or a path). It is resolved once to the
    /// real executable, so version-manager shims cost nothing per call.
    pub python: PathBuf,
    /// The Node interpreter.
    pub node: PathBuf,
    /// Where the embedded runners and transpiled TypeScript are written.
    pub cache_dir: PathBuf,
    /// The folder holding the npm packages that run TypeScript tools (`sucrase`,
    /// `es-module-lexer`), installed by `npm ci --prefix <folder>`.
    pub typescript_deps: PathBuf,
    /// How Python and Node tools run unless a call says otherwise.
    pub mode: Mode,
    /// How `exec:` tools run unless a call says otherwise. One-shot by default: a script
    /// usually answers one request and exits.
    pub exec_mode: Mode,
    /// Workers per endpoint in pool mode.
    pub pool_size: usize,
    /// Bytes a call may write to stdout before it is killed.
    pub stdout_cap: usize,
    /// Bytes of stderr kept per call (the tail; older bytes are dropped and counted).
    pub stderr_cap: usize,
    /// Bytes an HTTP endpoint may answer.
    pub http_response_cap: usize,
    /// The timeout of [`crate::Dispatcher::execute`] when the request sets none. Calls
    /// through the pipeline use the tool's (the pipeline's) timeout instead.
    pub default_timeout: Duration,
    /// How long a one-shot process may take to exit after its answer before it is
    /// killed (its exit code is then unknown).
    pub exit_grace: Duration,
    /// The environment of tool processes.
    pub env: ChildEnv,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            python: "python3".into(),
            node: "node".into(),
            cache_dir: default_cache_dir(),
            typescript_deps: default_typescript_deps(),
            mode: Mode::Pool,
            exec_mode: Mode::OneShot,
            pool_size: 2,
            stdout_cap: 1024 * 1024,
            stderr_cap: 64 * 1024,
            http_response_cap: 1024 * 1024,
            default_timeout: Duration::from_secs(30),
            exit_grace: Duration::from_secs(2),
            env: ChildEnv::default(),
        }
    }
}

/// `$TOOLSHED_CACHE_DIR`, else `$XDG_CACHE_HOME/toolshed`, else `~/.cache/toolshed`,
/// else the temp folder; with `dispatch/` appended to the last three.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = non_empty_env("TOOLSHED_CACHE_DIR") {
        return PathBuf::from(dir).join("dispatch");
    }
    if let Some(dir) = non_empty_env("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("toolshed").join("dispatch");
    }
    if let Some(home) = non_empty_env("HOME") {
        return PathBuf::from(home)
            .join(".cache")
            .join("toolshed")
            .join("dispatch");
    }
    std::env::temp_dir().join("toolshed").join("dispatch")
}

/// `$TOOLSHED_TYPESCRIPT_DEPS`, else this crate's own `node/` folder.
pub fn default_typescript_deps() -> PathBuf {
    match non_empty_env("TOOLSHED_TYPESCRIPT_DEPS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/node")),
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}
