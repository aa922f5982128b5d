//! An agent's MCP servers as tools: each server's name resolved (the agent's own
//! servers → `mcp-servers/NAME.(yaml|json)` in the project → the registry), the server
//! started through the hub under the agent's id, and its tools named, picked and
//! declared as agent.yaml says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use toolshed_core::file::{FileFormat, parse_tool_file};
use toolshed_core::{CredentialProvider, Principal, Tool, ToolName, ToolSpec};
use toolshed_mcp::{McpHub, McpServer, McpServerSpec, McpTool};

use super::config::{McpServerRef, McpToolOptions, ToolOverride, parse_server};
use crate::{AgentFile, RegistryLookup, RegistryLookupError, ToolEntry};

/// The largest `mcp-servers/NAME.(yaml|json)` file read.
const MAX_SERVER_FILE_BYTES: u64 = 256 * 1024;
/// How many of a server's tool names a "not offered" message lists.
const LISTED_NAMES: usize = 20;

/// What an agent's MCP servers are started with: the hub (its sandbox, caches, HTTP
/// guard and caps), and the credentials and principal their `${NAME}` values are
/// resolved for.
#[derive(Clone)]
pub struct AgentMcp {
    /// The connections; servers are started under the agent's id as the scope.
    pub hub: McpHub,
    /// Where `${NAME}` in a server's `env` and `headers` is read from.
    pub credentials: Arc<dyn CredentialProvider>,
    /// Who the servers are started for, when anyone in particular.
    pub principal: Option<Principal>,
}

impl std::fmt::Debug for AgentMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentMcp")
            .field("credentials", &self.credentials.describe())
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

/// One MCP server of a loaded agent.
#[derive(Clone)]
pub struct LoadedMcpServer {
    /// The server's name.
    pub name: String,
    /// Where its definition came from: `agent.yaml plugins.mcp_client`,
    /// `agent.yaml mcp_servers`, `mcp-servers/NAME.yaml`, `registry`.
    pub source: String,
    /// `stdio` or `streamable_http`.
    pub transport: &'static str,
    /// The names of its tools in the agent's toolset.
    pub tools: Vec<String>,
    /// The connection. Its `changes()` bumps on `notifications/tools/list_changed`:
    /// the toolset of a loaded agent is fixed, so the new list is seen by the next
    /// load (the hub has dropped its cached listing by then).
    pub server: Arc<McpServer>,
    /// The server's list changes as seen when its tools were listed, so a change
    /// between the load and a wait is not missed.
    changes: tokio::sync::watch::Receiver<u64>,
}

impl LoadedMcpServer {
    /// Resolves when the server sends `notifications/tools/list_changed` after its
    /// tools were loaded (never, once the connection is gone for good).
    pub async fn tools_changed(&self) {
        let mut rx = self.changes.clone();
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl std::fmt::Debug for LoadedMcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedMcpServer")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("transport", &self.transport)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// One server the agent uses, resolved.
pub(crate) struct Wanted {
    spec: McpServerSpec,
    options: McpToolOptions,
    source: String,
}

impl Wanted {
    /// How the agent's tools name their origin: `mcp-servers/a (agent.yaml plugins.mcp_client)`.
    pub(crate) fn origin(&self) -> String {
        format!("mcp-servers/{} ({})", self.spec.name, self.source)
    }
}

/// Every MCP server the agent uses, each resolved to a spec; problems are pushed.
pub(crate) async fn resolve(
    file: &AgentFile,
    project: &Path,
    registry: Option<&dyn RegistryLookup>,
    problems: &mut Vec<String>,
) -> Vec<Wanted> {
    let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
    for (name, entry) in &file.mcp_client {
        wanted.insert(
            name.clone(),
            Wanted {
                spec: entry.spec.clone(),
                options: entry.options.clone(),
                source: "agent.yaml plugins.mcp_client".into(),
            },
        );
    }
    // Names to look up, in the order agent.yaml gives them, with their options.
    let mut pending: Vec<(String, McpToolOptions, String)> = file
        .mcp_client_names
        .iter()
        .filter(|n| !wanted.contains_key(*n))
        .map(|n| {
            (
                n.clone(),
                McpToolOptions::default(),
                format!("plugins.mcp_client server {n}"),
            )
        })
        .collect();
    for r in &file.mcp_servers {
        match r {
            McpServerRef::Defined(entry) => {
                if wanted.contains_key(&entry.spec.name) {
                    problems.push(format!(
                        "MCP server `{}` is defined twice: in plugins.mcp_client and in mcp_servers; keep one",
                        entry.spec.name
                    ));
                    continue;
                }
                wanted.insert(
                    entry.spec.name.clone(),
                    Wanted {
                        spec: entry.spec.clone(),
                        options: entry.options.clone(),
                        source: "agent.yaml mcp_servers".into(),
                    },
                );
            }
            McpServerRef::Sidecar { name } => problems.push(format!(
                "mcp_servers ref mcp/{name}: co-deployed sidecar containers (`image`, `port`) are not run by toolshed; give the server's `url`, or define it under `plugins.mcp_client.servers.{name}` with a `command`"
            )),
            McpServerRef::Named { name } => {
                if !wanted.contains_key(name) && !pending.iter().any(|(n, _, _)| n == name) {
                    pending.push((
                        name.clone(),
                        McpToolOptions::default(),
                        format!("mcp_servers ref mcp/{name}"),
                    ));
                }
            }
        }
    }
    for entry in &file.tools {
        let ToolEntry::McpServer { name, options } = entry else {
            continue;
        };
        let at = format!("ref mcp-servers/{name}");
        // A ref to a server defined above picks its options; options are given once.
        let existing = wanted.get_mut(name).map(|w| &mut w.options).or_else(|| {
            pending
                .iter_mut()
                .find(|(n, _, _)| n == name)
                .map(|(_, o, _)| o)
        });
        match existing {
            Some(_) if options.is_default() => {}
            Some(o) if o.is_default() => *o = options.clone(),
            Some(_) => problems.push(format!(
                "{at}: `prefix`/`include`/`exclude`/`overrides` are given both on the ref and where the server is defined; give them in one place"
            )),
            None => pending.push((name.clone(), options.clone(), at)),
        }
    }
    for (name, options, at) in pending {
        if let Err(e) = toolshed_mcp::spec::check_server_name(&name) {
            problems.push(format!("{at}: {e}"));
            continue;
        }
        match project_file(project, &name) {
            Err(e) => {
                problems.push(e);
                continue;
            }
            Ok(Some((entry, shown))) => {
                let options = if options.is_default() {
                    entry.options
                } else if entry.options.is_default() {
                    options
                } else {
                    problems.push(format!(
                        "{at}: `prefix`/`include`/`exclude`/`overrides` are given both on the ref and in {shown}; give them in one place"
                    ));
                    continue;
                };
                wanted.insert(
                    name,
                    Wanted {
                        spec: entry.spec,
                        options,
                        source: shown,
                    },
                );
                continue;
            }
            Ok(None) => {}
        }
        let looked =
            format!("agent.yaml's plugins.mcp_client servers, mcp-servers/{name}.(yaml|yml|json)");
        let Some(r) = registry else {
            problems.push(format!(
                "{at}: not found in {looked} (no registry configured)"
            ));
            continue;
        };
        match r.find_mcp_server(&name).await {
            Ok(Some(spec)) => match spec.validate() {
                Ok(()) => {
                    wanted.insert(
                        name,
                        Wanted {
                            spec,
                            options,
                            source: "registry".into(),
                        },
                    );
                }
                Err(e) => problems.push(format!("{at} (registry): {e}")),
            },
            Ok(None) => problems.push(format!("{at}: not found in {looked}, or the registry")),
            Err(e @ RegistryLookupError::Unavailable(_)) => problems.push(format!(
                "{at}: the registry could not be asked: {e} [{}]",
                e.code()
            )),
            Err(e) => problems.push(format!("{at} (registry): {e} [{}]", e.code())),
        }
    }
    wanted.into_values().collect()
}

/// `<project>/mcp-servers/NAME.(yaml|yml|json)`: the server's definition and the name
/// it is shown by, or `None` when there is no such file.
fn project_file(
    project: &Path,
    name: &str,
) -> Result<Option<(super::McpServerEntry, String)>, String> {
    let mut found = Vec::new();
    for ext in ["yaml", "yml", "json"] {
        let shown = format!("mcp-servers/{name}.{ext}");
        let path = project.join(&shown);
        if path.is_file() {
            found.push((path, shown));
        }
    }
    let (path, shown) = match found.len() {
        0 => return Ok(None),
        1 => found.remove(0),
        _ => {
            let names: Vec<&str> = found.iter().map(|(_, s)| s.as_str()).collect();
            return Err(format!(
                "{} all define the MCP server `{name}`; keep one",
                names.join(" and ")
            ));
        }
    };
    let size = std::fs::metadata(&path)
        .map_err(|e| format!("{shown}: cannot read: {e}"))?
        .len();
    if size > MAX_SERVER_FILE_BYTES {
        return Err(format!(
            "{shown}: {size} bytes is more than the {MAX_SERVER_FILE_BYTES} a server definition may be"
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let value: Value = if shown.ends_with(".json") {
        serde_json::from_str(&text).map_err(|e| format!("{shown}: not valid JSON: {e}"))?
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| format!("{shown}: not valid YAML: {e}"))?
    };
    // Fields are named within the file: `mcp-servers/x.yaml: field `command`: …`.
    let entry = parse_server(name, &value, &shown).map_err(|e| {
        let e = e
            .replacen(&format!("field `{shown}."), "field `", 1)
            .replacen(&format!("field `{shown}`: "), "", 1);
        format!("{shown}: {e}")
    })?;
    Ok(Some((entry, shown)))
}

/// Start every wanted server under `agent` and turn its tools into the agent's: the
/// tools with their origins, and one entry per server. Problems are pushed, each naming
/// the server and where it is defined.
pub(crate) async fn load(
    agent: &str,
    wanted: Vec<Wanted>,
    mcp: &AgentMcp,
    problems: &mut Vec<String>,
) -> (Vec<(Tool, String)>, Vec<LoadedMcpServer>) {
    // Servers start concurrently: `npx -y` downloads make one start take seconds.
    let listings = futures_util::future::join_all(wanted.into_iter().map(|w| async move {
        let server = mcp.hub.server(
            agent,
            &w.spec,
            mcp.credentials.clone(),
            mcp.principal.clone(),
        );
        // Watched from before the listing: a change during it is seen afterwards.
        let changes = server.changes();
        let listed = server.tools().await;
        (w, server, changes, listed)
    }))
    .await;
    let mut tools = Vec::new();
    let mut servers = Vec::new();
    for (w, server, changes, listed) in listings {
        let origin = w.origin();
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                problems.push(format!(
                    "{origin}: cannot list its tools: {e} [{}]",
                    e.code().as_str()
                ));
                continue;
            }
        };
        let mut names = Vec::new();
        for (tool, name) in pick(&w, &listed, problems) {
            match build(&server, tool, &name, w.options.overrides.get(&tool.name)) {
                Ok(t) => {
                    names.push(name);
                    tools.push((t, origin.clone()));
                }
                Err(e) => problems.push(format!("{origin}: tool `{}`: {e}", tool.name)),
            }
        }
        servers.push(LoadedMcpServer {
            name: w.spec.name.clone(),
            transport: match w.spec.launch {
                toolshed_mcp::Launch::Stdio(_) => "stdio",
                toolshed_mcp::Launch::Http(_) => "streamable_http",
            },
            source: w.source.clone(),
            tools: names,
            server,
            changes,
        });
    }
    (tools, servers)
}

/// The server's tools that join, each with its name in the agent's toolset. Names in
/// `include`, `exclude` or `overrides` the server does not offer are problems (a typo
/// would otherwise silently let a tool in or leave its override unapplied).
fn pick<'a>(
    w: &Wanted,
    listed: &'a [McpTool],
    problems: &mut Vec<String>,
) -> Vec<(&'a McpTool, String)> {
    let offered: BTreeSet<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    let named = w
        .options
        .include
        .iter()
        .flatten()
        .map(|n| ("include", n))
        .chain(w.options.exclude.iter().map(|n| ("exclude", n)))
        .chain(w.options.overrides.keys().map(|n| ("overrides", n)));
    for (field, n) in named {
        if !offered.contains(n.as_str()) {
            let mut shown: Vec<&str> = offered.iter().copied().take(LISTED_NAMES).collect();
            if offered.len() > LISTED_NAMES {
                shown.push("…");
            }
            problems.push(format!(
                "{}: `{field}` names `{n}`, which the server does not offer; it offers: {}",
                w.origin(),
                shown.join(", ")
            ));
        }
    }
    let prefix = w.options.prefix.as_deref();
    listed
        .iter()
        .filter(|t| {
            w.options
                .include
                .as_ref()
                .is_none_or(|inc| inc.contains(&t.name))
                && !w.options.exclude.contains(&t.name)
        })
        .map(|t| (t, agent_name(t, prefix)))
        .collect()
}

/// `<prefix>__<tool>`: the sanitised tool part of the qualified name, under the
/// agent's prefix (the server's name by default, none for `""`).
fn agent_name(tool: &McpTool, prefix: Option<&str>) -> String {
    let Some(prefix) = prefix else {
        return tool.qualified_name.clone();
    };
    let bare = tool
        .qualified_name
        .strip_prefix(&format!("{}__", tool.server))
        .unwrap_or(&tool.qualified_name);
    if prefix.is_empty() {
        bare.to_owned()
    } else {
        let mut name = format!("{prefix}__{bare}");
        // A longer prefix than the server's name may push it past the name rule's 64.
        name.truncate(64);
        name
    }
}

fn build(
    server: &Arc<McpServer>,
    tool: &McpTool,
    name: &str,
    over: Option<&ToolOverride>,
) -> Result<Tool, String> {
    let mut spec = tool.spec().map_err(|e| e.to_string())?;
    spec.name = ToolName::new(name).map_err(|e| e.to_string())?;
    if let Some(o) = over {
        apply(&mut spec, o)?;
    }
    toolshed_mcp::tool(server.clone(), tool, spec).map_err(|e| e.to_string())
}

/// The owner's declarations over the annotation defaults. They are read by the tool
/// file's own parser (a one-field definition), so `approval: {when: …}` and the
/// timeouts mean exactly what they mean in a tool.yaml.
fn apply(spec: &mut ToolSpec, o: &ToolOverride) -> Result<(), String> {
    let mut def = json!({
        "spec_version": "v1",
        "name": "override",
        "description": "override",
        // The consistency of the whole spec is checked when the tool is built.
        "allow_unkeyed_external": true,
    });
    let fields = serde_json::to_value(o).map_err(|e| e.to_string())?;
    if let (Some(def), Value::Object(fields)) = (def.as_object_mut(), fields) {
        for (k, v) in fields {
            if k != "allow_unkeyed_external" {
                def.insert(k, v);
            }
        }
    }
    let parsed = parse_tool_file(&def.to_string(), FileFormat::Json, Some("overrides"))
        .map_err(|e| format!("overrides: {e}"))?;
    if o.effects.is_some() {
        spec.effects = parsed.effects;
    }
    if o.idempotency.is_some() {
        spec.idempotency = parsed.idempotency;
    }
    if o.approval.is_some() {
        spec.approval = parsed.approval;
        spec.four_eyes = parsed.four_eyes;
    }
    if o.timeout_seconds.is_some() || o.timeout_ms.is_some() {
        spec.timeout = parsed.timeout;
    }
    if o.max_attempts.is_some() {
        spec.max_attempts = parsed.max_attempts;
    }
    if let Some(a) = o.allow_unkeyed_external {
        spec.allow_unkeyed_external = a;
    }
    Ok(())
}
