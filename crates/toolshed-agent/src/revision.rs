//! Which agent project a run ran, and which revision of each of its tools: the
//! project's folder, the agent's name and one content hash per tool, recorded with a
//! run so that a resume can tell whether it would run the same code.
//!
//! What a tool's hash covers depends on where it came from:
//!
//! | origin | hashed |
//! | --- | --- |
//! | a file of the tools folder (`tools/x.py`, `tools/x.yaml`) | the file's bytes, the bytes of the code file its endpoint names, and its definition |
//! | an inline definition | the definition, and the bytes of the code file behind it (`tools/<name>.py` …, or its endpoint's file) |
//! | `stdlib`, `builtin`, `sandbox` | the definition (the code ships with this binary) |
//! | `registry` | the definition with the registry's revision number |
//! | `mcp-servers/…` | the definition (the server's input schema), where the server was defined, and its launch (command, args, env, network; or URL and headers), listed in `files` as `mcp-servers/NAME launch` |
//!
//! The definition is the tool's file form (`ToolFile::from_spec`) with the project's
//! own folder written as `<project>`, so a project that moved to another folder keeps
//! its hashes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toolshed_core::Tool;
use toolshed_core::file::ToolFile;

use crate::LoadedAgent;

/// The version of [`ProjectIdentity`]'s stored form.
pub const PROJECT_IDENTITY_VERSION: u32 = 1;

/// One tool's revision: where it came from and the hash of what it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRevision {
    /// Where the tool came from (`tools/x.py`, `inline`, `stdlib`, `builtin`,
    /// `sandbox`, `registry`, `mcp-servers/NAME (…)`).
    pub origin: String,
    /// `sha256:` and 16 hex digits over everything below.
    pub hash: String,
    /// The hash of the tool's definition alone.
    pub spec_hash: String,
    /// The code files hashed, each (relative to the project when inside it) with the
    /// hash of its bytes; for an MCP server's tool, also `mcp-servers/NAME launch`
    /// with the hash of the server's launch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// The registry's revision number, for a registry tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_revision: Option<String>,
}

/// The agent project a run ran: recorded with the run (in its driver, under
/// `agent_project`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectIdentity {
    /// The stored form's version ([`PROJECT_IDENTITY_VERSION`]).
    pub version: u32,
    /// The project folder, absolute.
    pub dir: PathBuf,
    /// The agent's name (`name:` of agent.yaml).
    pub agent: String,
    /// Every tool of the agent's toolset, by name.
    pub tools: BTreeMap<String, ToolRevision>,
}

/// How one tool differs between two [`ProjectIdentity`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChange {
    /// The tool is there in both, with another hash.
    Changed {
        /// The tool.
        tool: String,
        /// Its revision when the run was recorded.
        was: ToolRevision,
        /// Its revision now.
        now: ToolRevision,
    },
    /// The tool is no longer in the agent's toolset.
    Removed {
        /// The tool.
        tool: String,
        /// Its revision when the run was recorded.
        was: ToolRevision,
    },
}

impl ToolChange {
    /// The tool's name.
    pub fn tool(&self) -> &str {
        match self {
            ToolChange::Changed { tool, .. } | ToolChange::Removed { tool, .. } => tool,
        }
    }

    /// One line saying what changed, e.g. ``tool `order_lookup` (tools/order_lookup.py)
    /// changed: tools/order_lookup.py sha256:… → sha256:…``.
    pub fn describe(&self) -> String {
        match self {
            ToolChange::Removed { tool, was } => format!(
                "tool `{tool}` ({}) is no longer in the agent's toolset",
                was.origin
            ),
            ToolChange::Changed { tool, was, now } => {
                let mut parts = Vec::new();
                for (file, hash) in &now.files {
                    match was.files.get(file) {
                        Some(old) if old == hash => {}
                        Some(old) => parts.push(format!("{file} {old} → {hash}")),
                        None => parts.push(format!("{file} is new")),
                    }
                }
                for file in was.files.keys().filter(|f| !now.files.contains_key(*f)) {
                    parts.push(format!("{file} is gone"));
                }
                if was.spec_hash != now.spec_hash {
                    parts.push(format!(
                        "its definition {} → {}",
                        was.spec_hash, now.spec_hash
                    ));
                }
                if was.registry_revision != now.registry_revision {
                    parts.push(format!(
                        "registry revision {} → {}",
                        was.registry_revision.as_deref().unwrap_or("-"),
                        now.registry_revision.as_deref().unwrap_or("-")
                    ));
                }
                if was.origin != now.origin {
                    parts.push(format!("it now comes from {}", now.origin));
                }
                if parts.is_empty() {
                    parts.push(format!("{} → {}", was.hash, now.hash));
                }
                format!(
                    "tool `{tool}` ({}) changed: {}",
                    was.origin,
                    parts.join(", ")
                )
            }
        }
    }
}

impl ProjectIdentity {
    /// The identity of `agent`, loaded from the project in `project`.
    pub fn of(project: &Path, agent: &LoadedAgent) -> ProjectIdentity {
        let dir = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
        // An MCP tool runs whatever its server's launch starts: the launch is hashed
        // with it, so a changed command, package, URL or env is a change.
        let mut launches: BTreeMap<&str, (String, String)> = BTreeMap::new();
        for server in &agent.mcp_servers {
            let spec = server.server.spec();
            let launch = serde_json::to_vec(&spec.launch).unwrap_or_default();
            let entry = (
                format!("mcp-servers/{} launch", server.name),
                short_hash(&launch),
            );
            for tool in &server.tools {
                launches.insert(tool.as_str(), entry.clone());
            }
        }
        let tools = agent
            .toolset
            .iter()
            .map(|t| {
                let origin = agent
                    .origins
                    .get(t.name())
                    .cloned()
                    .unwrap_or_else(|| "-".to_owned());
                let launch = launches.get(t.name()).cloned();
                (t.name().to_owned(), tool_revision(&dir, t, origin, launch))
            })
            .collect();
        ProjectIdentity {
            version: PROJECT_IDENTITY_VERSION,
            dir,
            agent: agent.file.name.clone(),
            tools,
        }
    }

    /// What differs in `now` for the tools named in `tools` (a tool added since is no
    /// change: nothing recorded calls it). In the order of `tools`, each tool once.
    pub fn changes<'a>(
        &self,
        now: &ProjectIdentity,
        tools: impl IntoIterator<Item = &'a str>,
    ) -> Vec<ToolChange> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for name in tools {
            if !seen.insert(name) {
                continue;
            }
            let Some(was) = self.tools.get(name) else {
                // Not in the recorded toolset: the run could not have called it, and
                // the resume reports an unknown tool as it would have then.
                continue;
            };
            match now.tools.get(name) {
                None => out.push(ToolChange::Removed {
                    tool: name.to_owned(),
                    was: was.clone(),
                }),
                Some(current) if current.hash != was.hash => out.push(ToolChange::Changed {
                    tool: name.to_owned(),
                    was: was.clone(),
                    now: current.clone(),
                }),
                Some(_) => {}
            }
        }
        out
    }
}

/// Why `toolshed runs resume` refused a run: a tool the run still has to call is not
/// the one it started with (or the agent is another). Nothing ran.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "run {run_id} was not resumed: the agent project it ran ({dir}) changed:\n- {}\nnothing ran and the run is as it was. Restore what changed to resume with the code the run started with, or resume with the new code: `toolshed runs resume {run_id} --accept-changes` (the calls already finished replay their recorded results)",
    .changes.join("\n- ")
)]
pub struct ProjectChanged {
    /// The run.
    pub run_id: String,
    /// The project folder recorded with the run.
    pub dir: String,
    /// One line per change ([`ToolChange::describe`], or the agent's new name).
    pub changes: Vec<String>,
}

impl ProjectChanged {
    /// The stable code: `AGENT_PROJECT_CHANGED`.
    pub fn code(&self) -> crate::AgentCode {
        crate::AgentCode::AgentProjectChanged
    }
}

impl ProjectIdentity {
    /// Whether run `run_id`, recorded with `self`, may resume over `now`: every tool in
    /// `pending` (the calls it still has to make) must have the recorded hash, and the
    /// agent its name.
    pub fn check_resume<'a>(
        &self,
        run_id: &str,
        now: &ProjectIdentity,
        pending: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ProjectChanged> {
        let mut changes = Vec::new();
        if self.agent != now.agent {
            changes.push(format!(
                "the agent was `{}` and is now `{}` ({})",
                self.agent,
                now.agent,
                now.dir.display()
            ));
        }
        changes.extend(self.changes(now, pending).iter().map(ToolChange::describe));
        if changes.is_empty() {
            return Ok(());
        }
        Err(ProjectChanged {
            run_id: run_id.to_owned(),
            dir: self.dir.display().to_string(),
            changes,
        })
    }
}

/// The revision of one tool of the project in `dir` (absolute), from `origin`.
/// `launch`: for an MCP server's tool, the server's launch (what it is called in
/// `files`, and its hash).
fn tool_revision(
    dir: &Path,
    tool: &Tool,
    origin: String,
    launch: Option<(String, String)>,
) -> ToolRevision {
    let spec = tool.spec();
    let mut files = BTreeMap::new();
    files.extend(launch);
    let mut hash_file = |path: &Path| {
        if let Some(hash) = file_hash(path) {
            files.insert(shown_path(dir, path), hash);
        }
    };
    if let Some(rel) = origin.strip_prefix("tools/") {
        hash_file(&dir.join("tools").join(rel));
    }
    if let Some(path) = spec
        .meta
        .endpoint
        .as_deref()
        .and_then(|e| endpoint_file(dir, e))
    {
        hash_file(&path);
    }
    if origin == "inline" && spec.meta.endpoint.is_none() {
        // An inline definition without an endpoint runs the tools folder's file of its
        // name (see `inline_tool`): that file is its code.
        let snake = crate::snake_name(spec.name.as_str());
        for ext in ["py", "js", "mjs", "ts"] {
            let path = dir.join("tools").join(format!("{snake}.{ext}"));
            if path.is_file() {
                hash_file(&path);
                break;
            }
        }
    }
    let spec_hash = spec_hash(dir, tool);
    let registry_revision = spec.meta.revision.clone();
    let mut all = Sha256::new();
    all.update(origin.as_bytes());
    all.update([0]);
    all.update(spec_hash.as_bytes());
    for (file, hash) in &files {
        all.update([0]);
        all.update(file.as_bytes());
        all.update([0]);
        all.update(hash.as_bytes());
    }
    if let Some(n) = &registry_revision {
        all.update([0]);
        all.update(n.as_bytes());
    }
    ToolRevision {
        origin,
        hash: short(&hex::encode(all.finalize())),
        spec_hash,
        files,
        registry_revision,
    }
}

/// The hash of a tool's file form, the project's folder written as `<project>`.
fn spec_hash(dir: &Path, tool: &Tool) -> String {
    let file = ToolFile::from_spec(tool.spec());
    let text = serde_json::to_string(&file).unwrap_or_default();
    let text = text.replace(&*dir.to_string_lossy(), "<project>");
    short_hash(text.as_bytes())
}

/// The code file an endpoint names (`python:PATH[:fn]`, `node:PATH[:export]`,
/// `exec:PATH`), relative paths read in `dir`; `None` for other endpoints or a path
/// that is not a file.
fn endpoint_file(dir: &Path, endpoint: &str) -> Option<PathBuf> {
    let rest = ["python:", "node:", "exec:"]
        .iter()
        .find_map(|p| endpoint.strip_prefix(p))?;
    let at = |p: &str| {
        let path = dir.join(p);
        path.is_file().then_some(path)
    };
    // The path itself may hold a `:`; try it whole first, then without `:fn`.
    at(rest).or_else(|| rest.rsplit_once(':').and_then(|(p, _)| at(p)))
}

fn shown_path(dir: &Path, path: &Path) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match abs.strip_prefix(dir) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => abs.display().to_string(),
    }
}

/// The hash of a file's bytes, streamed (an `exec:` endpoint may name a large
/// program); `None` when it cannot be read, which then shows as a change of its own.
fn file_hash(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(short(&hex::encode(hasher.finalize())))
}

fn short_hash(bytes: &[u8]) -> String {
    short(&hex::encode(Sha256::digest(bytes)))
}

fn short(hex: &str) -> String {
    format!("sha256:{}", hex.get(..16).unwrap_or(hex))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(origin: &str, hash: &str) -> ToolRevision {
        ToolRevision {
            origin: origin.into(),
            hash: hash.into(),
            spec_hash: "sha256:0".into(),
            files: BTreeMap::new(),
            registry_revision: None,
        }
    }

    fn identity(tools: &[(&str, &str)]) -> ProjectIdentity {
        ProjectIdentity {
            version: PROJECT_IDENTITY_VERSION,
            dir: "/p".into(),
            agent: "a".into(),
            tools: tools
                .iter()
                .map(|(n, h)| ((*n).to_owned(), revision("tools/x.py", h)))
                .collect(),
        }
    }

    #[test]
    fn only_the_named_tools_that_changed_or_went_are_changes() {
        let was = identity(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let now = identity(&[("a", "1"), ("b", "9"), ("d", "4")]);
        let changes = was.changes(&now, ["a", "b", "c", "b", "d"]);
        let names: Vec<&str> = changes.iter().map(ToolChange::tool).collect();
        assert_eq!(names, ["b", "c"]);
        assert!(matches!(changes[1], ToolChange::Removed { .. }));
        assert!(was.changes(&now, ["a"]).is_empty());
    }

    #[test]
    fn a_changed_file_is_named_with_both_hashes() {
        let mut was = revision("tools/x.py", "1");
        was.files.insert("tools/x.py".into(), "sha256:aa".into());
        let mut now = was.clone();
        now.hash = "2".into();
        now.files.insert("tools/x.py".into(), "sha256:bb".into());
        let text = ToolChange::Changed {
            tool: "x".into(),
            was,
            now,
        }
        .describe();
        assert!(text.contains("tools/x.py sha256:aa → sha256:bb"), "{text}");
    }

    #[test]
    fn endpoint_files_are_found_with_or_without_a_function() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.py"), "def t(): pass").unwrap();
        let path = dir.path().join("t.py");
        let shown = path.display().to_string();
        assert_eq!(
            endpoint_file(dir.path(), &format!("python:{shown}")),
            Some(path.clone())
        );
        assert_eq!(
            endpoint_file(dir.path(), &format!("python:{shown}:t")),
            Some(path.clone())
        );
        assert_eq!(endpoint_file(dir.path(), "python:t.py:t"), Some(path));
        assert_eq!(endpoint_file(dir.path(), "builtin:echo"), None);
        assert_eq!(endpoint_file(dir.path(), "python:missing.py"), None);
    }
}
