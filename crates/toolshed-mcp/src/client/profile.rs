//! How a stdio server runs in the sandbox, as data: `toolshed scan` prints it and the
//! client builds the sandbox's run spec from it.
//!
//! A package runner (`npx -y PACKAGE`, `uvx PACKAGE`, `pnpm dlx`, `bunx`, `pipx run`)
//! downloads the server on its first start, so it gets outbound network (the
//! sandbox's own user-mode stack: never the host's loopback or a metadata address) and
//! a package cache that persists between starts, one per scope and server. A server
//! pinned to a local path gets the network it declares (off unless it says on).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::spec::StdioLaunch;

/// Where the package cache appears inside the sandbox; it is also `HOME`.
pub const CACHE_TARGET: &str = "/cache";

/// The sandbox profile of one stdio server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProfile {
    /// The package runner the command names (`npx`, `uvx`, `pnpm dlx`, `bunx`,
    /// `pipx run`), or `None` for a server pinned to a local path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    /// Whether it has outbound network.
    pub network: bool,
    /// Why the network is on or off, for `scan`'s output.
    pub network_reason: String,
    /// The host folder of its persistent package cache (`HOME`, `npm_config_cache`,
    /// `UV_CACHE_DIR` inside), for a package runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<PathBuf>,
    /// Read-only binds besides the sandbox's own root (host path, sandbox path).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binds: Vec<(PathBuf, PathBuf)>,
}

/// The package runner a command is, judged by its file name (`/usr/bin/npx` is `npx`);
/// `pnpm` and `pipx` only with their running subcommand (`pnpm dlx`, `pipx run`).
pub fn package_runner(launch: &StdioLaunch) -> Option<String> {
    let file = Path::new(&launch.command)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or("");
    let first = launch.args.first().map(String::as_str);
    match (file, first) {
        ("npx" | "uvx" | "bunx", _) => Some(file.to_owned()),
        ("pnpm", Some("dlx")) => Some("pnpm dlx".into()),
        ("pipx", Some("run")) => Some("pipx run".into()),
        _ => None,
    }
}

impl SandboxProfile {
    /// The profile of `launch` for the server `server` under `scope`, with caches under
    /// `cache_root`.
    pub fn of(launch: &StdioLaunch, cache_root: &Path, scope: &str, server: &str) -> Self {
        let runner = package_runner(launch);
        let (network, network_reason) = match (launch.network, &runner) {
            (Some(on), _) => (on, format!("declared {}", if on { "on" } else { "off" })),
            (None, Some(r)) => (
                true,
                format!("on: `{r}` downloads the server on its first start"),
            ),
            (None, None) => (false, "off: a local server declares none".into()),
        };
        let cache = runner
            .as_ref()
            .map(|_| cache_root.join(cache_segment(scope)).join(server));
        SandboxProfile {
            runner,
            network,
            network_reason,
            cache,
            binds: Vec::new(),
        }
    }
}

impl std::fmt::Display for SandboxProfile {
    /// One line for `scan`'s output: `sandbox: network on (…), cache /var/…/srv`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sandbox: network {} ({})",
            if self.network { "on" } else { "off" },
            self.network_reason
        )?;
        if let Some(c) = &self.cache {
            write!(f, ", package cache {}", c.display())?;
        }
        Ok(())
    }
}

/// A scope as one path segment: tenant and agent ids are free text, so anything but
/// `[A-Za-z0-9_-]` is replaced and `.`/`..` cannot climb out of the cache root. A scope
/// that had to be changed also gets a hash of itself, so two scopes that read alike
/// after the change (`a/b`, `a_b`) never share a cache: one owner's downloads must not
/// be another's programs.
fn cache_segment(scope: &str) -> String {
    let s = safe_segment(scope);
    if s == scope {
        return s;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(scope.as_bytes());
    format!("{s}-{}", hex::encode(&digest[..8]))
}

fn safe_segment(scope: &str) -> String {
    let s: String = scope
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "_".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(command: &str, args: &[&str], network: Option<bool>) -> StdioLaunch {
        StdioLaunch {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Default::default(),
            network,
        }
    }

    #[test]
    fn package_runners_get_network_and_a_cache_local_paths_do_not() {
        let root = Path::new("/var/cache/mcp");
        let p = SandboxProfile::of(&launch("/usr/bin/npx", &["-y", "x"], None), root, "t1", "s");
        assert_eq!(p.runner.as_deref(), Some("npx"));
        assert!(p.network);
        assert_eq!(p.cache.as_deref(), Some(Path::new("/var/cache/mcp/t1/s")));
        assert_eq!(
            p.to_string(),
            "sandbox: network on (on: `npx` downloads the server on its first start), package cache /var/cache/mcp/t1/s"
        );
        let p = SandboxProfile::of(&launch("pnpm", &["dlx", "x"], None), root, "t", "s");
        assert_eq!(p.runner.as_deref(), Some("pnpm dlx"));
        let p = SandboxProfile::of(&launch("pnpm", &["install"], None), root, "t", "s");
        assert_eq!(p.runner, None);
        let p = SandboxProfile::of(&launch("/opt/srv/server", &[], None), root, "t", "s");
        assert!(!p.network && p.cache.is_none());
        let p = SandboxProfile::of(&launch("/opt/srv/server", &[], Some(true)), root, "t", "s");
        assert!(p.network);
        let p = SandboxProfile::of(&launch("uvx", &["x"], Some(false)), root, "../..", "s");
        assert!(!p.network);
        let dir = p.cache.unwrap();
        assert!(dir.starts_with("/var/cache/mcp/"), "{dir:?}");
        assert!(
            dir.to_str().unwrap().starts_with("/var/cache/mcp/_____-"),
            "{dir:?}"
        );
        // Two scopes that read alike once made safe keep apart.
        let a = SandboxProfile::of(&launch("npx", &["x"], None), root, "a/b", "s");
        let b = SandboxProfile::of(&launch("npx", &["x"], None), root, "a_b", "s");
        assert_ne!(a.cache, b.cache);
        assert_eq!(b.cache.as_deref(), Some(Path::new("/var/cache/mcp/a_b/s")));
    }
}
