//! The dispatcher's settings: interpreters, caps, pool rules, cache folder, what
//! environment a tool process sees, and its isolation (the sandbox by default).

use std::path::PathBuf;
use std::time::Duration;

use toolshed_sandbox::{Bind, LimitsRequest, Network, SandboxConfig};

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

/// How subprocess tools are isolated from the host. An operator's setting: no tool and
/// no call can choose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// Every `python:`, `node:` and `exec:` process runs in a [`toolshed_sandbox`]
    /// sandbox built from this configuration (once per dispatcher, on its first
    /// subprocess call). A host that cannot sandbox fails each call with the sandbox's
    /// error, naming the mechanism and the fix; nothing then runs unsandboxed.
    Sandbox(Box<SandboxConfig>),
    /// Tool processes run on the host as the runtime's own user, with only the
    /// environment allowlist between them and the host. For trusted set-ups only
    /// (`toolshed serve --unsandboxed`).
    Unsandboxed,
}

impl Default for Isolation {
    fn default() -> Self {
        Isolation::Sandbox(Box::default())
    }
}

impl Isolation {
    /// Whether tool processes run in the sandbox.
    pub fn is_sandboxed(&self) -> bool {
        matches!(self, Isolation::Sandbox(_))
    }
}

/// One tool's sandbox policy: its network, its limits (each clamped to the server's
/// ceilings, [`SandboxConfig::ceilings`]) and extra read-only binds (e.g. an agent
/// project's folder on a developer's machine). Given with
/// [`crate::Dispatcher::handler_with`] or [`crate::Request::policy`]; ignored when the
/// dispatcher is [`Isolation::Unsandboxed`].
///
/// `limits.timeout_ms` does not apply: a call's timeout is the pipeline's (or
/// [`crate::Request::timeout`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Outbound network access (off by default; clamped to off when the server's
    /// [`SandboxConfig::network_allowed`] is false).
    pub network: Network,
    /// Limits asked for; each unset one is the server's default.
    pub limits: LimitsRequest,
    /// Extra read-only binds, besides the tool's own folder and the runners.
    pub binds: Vec<Bind>,
    /// Folders of installed dependencies, shown read-only and searched before the
    /// interpreter's own: a Python tool's `sys.path` (after the tool's folder), a Node
    /// tool's `NODE_PATH` (a `node_modules` folder; `require` honours it, ESM `import`
    /// of a bare name does not).
    pub libraries: Vec<PathBuf>,
}

impl SandboxPolicy {
    /// The policy with this network setting.
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// The policy with one more read-only bind.
    pub fn bind(mut self, bind: Bind) -> Self {
        self.binds.push(bind);
        self
    }

    /// The policy with a project folder shown read-only at its own path (or under
    /// `/host` when its path is one the sandbox keeps for itself, e.g. `/tmp/p` as
    /// `/host/tmp/p`): a tool inside it then sees its project, and its own file keeps its
    /// path. For agent projects on a developer's machine.
    pub fn project(self, dir: impl Into<PathBuf>) -> Self {
        let source = dir.into();
        let target = crate::launcher::sandbox_target(&source);
        self.bind(Bind::read_only(source, target))
    }

    /// The policy with one more folder of installed dependencies (see
    /// [`SandboxPolicy::libraries`]).
    pub fn library(mut self, dir: impl Into<PathBuf>) -> Self {
        self.libraries.push(dir.into());
        self
    }

    /// A key that is equal for equal policies (pools are kept per policy).
    pub(crate) fn fingerprint(&self) -> String {
        format!("{self:?}")
    }
}

/// The rules of the warm worker pools (see [`Mode::Pool`]). A pool is kept per endpoint,
/// tenant and sandbox policy; its workers are never shared with another pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Workers [`crate::Dispatcher::warm`] starts ahead of the first call.
    pub warm: usize,
    /// The most workers (idle or busy) one pool may have: a call finding them all
    /// busy waits for one.
    pub max_per_tool: usize,
    /// The most workers all pools together may have: a pool at this cap takes the
    /// slot of another pool's idle worker (retiring it), or waits.
    pub max_total: usize,
    /// A worker is retired after serving this many calls.
    pub max_calls: u64,
    /// A worker idle this long is retired (pools shrink when idle).
    pub idle_timeout: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            warm: 2,
            max_per_tool: 8,
            max_total: 64,
            max_calls: 10_000,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

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
    /// The folder of toolshed's Node helper package: the zod 4 (`node_modules/zod`)
    /// that bread and Toren tool files import, shown read-only to their processes. Never
    /// the tool's own folder, and never loaded on the host. See [`default_node_deps`];
    /// `None` when no folder is known. A tool that needs it while it is missing is
    /// refused with what to install and where ([`node_deps_install_hint`]).
    pub node_deps: Option<PathBuf>,
    /// How Python and Node tools run unless a call says otherwise.
    pub mode: Mode,
    /// How `exec:` tools run unless a call says otherwise. One-shot by default: a script
    /// usually answers one request and exits.
    pub exec_mode: Mode,
    /// The rules of the warm worker pools.
    pub pool: PoolConfig,
    /// How tool processes are isolated: the sandbox unless the operator says otherwise.
    pub isolation: Isolation,
    /// Bytes a call may write to stdout before it is killed (1 MiB, the default output
    /// budget of a call: see `toolshed_core::budget`).
    pub stdout_cap: usize,
    /// Bytes of stderr kept per call (the tail; older bytes are dropped and counted).
    pub stderr_cap: usize,
    /// Bytes an HTTP endpoint may answer (read as it streams; the call fails at the cap,
    /// or at the call's output budget plus its framing when that is lower).
    pub http_response_cap: usize,
    /// Where HTTP endpoints may connect (public addresses only unless allowlisted, after
    /// DNS resolution; no redirects followed) and their time caps.
    pub http: crate::guard::HttpPolicy,
    /// The timeout of [`crate::Dispatcher::execute`] when the request sets none. Calls
    /// through the pipeline use the tool's (the pipeline's) timeout instead.
    pub default_timeout: Duration,
    /// How long a one-shot process may take to exit after its answer before it is
    /// killed (its exit code is then unknown).
    pub exit_grace: Duration,
    /// The environment of tool processes. In the sandbox, host variables naming host
    /// paths (`PATH`, `HOME`, `TMPDIR`, …) are replaced by the sandbox's own, and a tool
    /// sees nothing else of the runtime's environment.
    pub env: ChildEnv,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            python: "python3".into(),
            node: "node".into(),
            cache_dir: default_cache_dir(),
            node_deps: default_node_deps(),
            mode: Mode::Pool,
            exec_mode: Mode::OneShot,
            pool: PoolConfig::default(),
            isolation: Isolation::default(),
            stdout_cap: 1024 * 1024,
            stderr_cap: 64 * 1024,
            http_response_cap: 1024 * 1024,
            http: crate::guard::HttpPolicy::default(),
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

/// The zod version toolshed's Node helper package pins (its `node/package.json`).
pub const NODE_HELPER_ZOD: &str = "4.6.7";

/// Where toolshed's Node helper package is looked for: `$TOOLSHED_NODE_DEPS`, else
/// `lib/toolshed/node` under the parent of the running binary's folder (for
/// `/usr/local/bin/toolshed`, `/usr/local/lib/toolshed/node`). Never a folder the binary
/// was built in, never a tool's folder. `None` when the binary's location is unknown.
pub fn default_node_deps() -> Option<PathBuf> {
    if let Some(dir) = non_empty_env("TOOLSHED_NODE_DEPS") {
        let dir = PathBuf::from(dir);
        return Some(std::path::absolute(&dir).unwrap_or(dir));
    }
    let exe = std::env::current_exe().ok()?;
    Some(
        exe.parent()?
            .parent()?
            .join("lib")
            .join("toolshed")
            .join("node"),
    )
}

/// What to install, and where, when toolshed's Node helper package is missing from
/// `dir` (see [`DispatcherConfig::node_deps`]).
pub fn node_deps_install_hint(dir: Option<&std::path::Path>) -> String {
    let why = "bread and Toren tool files import zod 4 from toolshed's Node helper package, never from the tool's own folder";
    match dir {
        Some(dir) => format!(
            "toolshed's Node helper package is not installed in {dir}: {why}; install it with `npm install --prefix {dir} zod@{NODE_HELPER_ZOD}` (or set TOOLSHED_NODE_DEPS to a folder holding node_modules/zod)",
            dir = dir.display()
        ),
        None => format!(
            "toolshed's Node helper package cannot be found (the location of the toolshed binary is unknown): {why}; install it with `npm install --prefix DIR zod@{NODE_HELPER_ZOD}` and set TOOLSHED_NODE_DEPS=DIR"
        ),
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_zod_is_the_helper_packages() {
        let manifest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/node/package.json"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(manifest["dependencies"]["zod"], NODE_HELPER_ZOD);
        assert_eq!(
            manifest["dependencies"].as_object().unwrap().len(),
            1,
            "the helper package holds zod alone: {manifest}"
        );
    }

    #[test]
    fn the_helper_package_is_looked_for_beside_the_binary() {
        let hint = node_deps_install_hint(Some(std::path::Path::new("/opt/t/lib/toolshed/node")));
        assert!(
            hint.contains("npm install --prefix /opt/t/lib/toolshed/node zod@4.6.7"),
            "{hint}"
        );
        assert!(node_deps_install_hint(None).contains("TOOLSHED_NODE_DEPS"));
    }
}
