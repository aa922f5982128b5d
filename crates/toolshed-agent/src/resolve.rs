//! From `agent.yaml` to a toolset: the tools folder, the resolver chain, built-ins and
//! the start-up checks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use toolshed_core::file::{FileFormat, ToolFile, parse_tool_file};
use toolshed_core::{Handler, Tool, ToolSet, ToolSource, ToolSpec};

use crate::mcp::{AgentMcp, LoadedMcpServer};
use crate::workspace::{WORKSPACE_TOOLS, Workspaces};
use crate::{AgentError, AgentFile, ToolEntry, parse_agent_file};

/// Code file extensions the tools folder loads, in the resolver's order.
const CODE_EXTENSIONS: &[&str] = &["py", "js", "mjs", "ts"];
/// Definition file extensions the tools folder loads.
const DEFINITION_EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

/// Turns code files and endpoints into tools: the dispatch layer implements it.
#[async_trait]
pub trait Implementations: Send + Sync {
    /// A tool from a code file of the tools folder (`.py`, `.js`, `.mjs`, `.ts`): its
    /// schema inferred or read beside it, its endpoint the file.
    async fn load_code_file(&self, path: &Path) -> Result<Tool, ImplementationError>;

    /// The handler behind an endpoint string (`builtin:…`, `python:…`, `node:…`,
    /// `exec:…`, `http(s)://…`) for the tool `spec` defines: its name, and what it
    /// declares of the sandbox it runs in (`network_access`).
    fn handler_for(
        &self,
        endpoint: &str,
        spec: &ToolSpec,
    ) -> Result<Arc<dyn Handler>, ImplementationError>;
}

/// Why an [`Implementations`] could not turn a code file or an endpoint into a tool.
/// The message is shown to the agent's author as one of the agent's problems, so it
/// says what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImplementationError {
    /// The code file's path cannot be resolved (it vanished, or a folder is unreadable).
    #[error("cannot resolve the path: {0}")]
    Path(std::io::Error),
    /// The dispatch layer refused the endpoint or could not read the tool's schema.
    #[error(transparent)]
    Dispatch(#[from] toolshed_dispatch::DispatchError),
    /// The tool made from the file or endpoint is not a valid tool.
    #[error(transparent)]
    Spec(#[from] toolshed_core::SpecError),
    /// This implementation does not handle that kind of file or endpoint; the message
    /// says which and what it handles.
    #[error("{0}")]
    Unsupported(String),
}

impl ImplementationError {
    /// The stable code: `PATH_UNRESOLVED`, the dispatch error's own code (e.g.
    /// `INVALID_ENDPOINT`, a `DispatchCode`), `INVALID_TOOL` or `UNSUPPORTED`.
    pub fn code(&self) -> &'static str {
        match self {
            ImplementationError::Path(_) => crate::AgentCode::PathUnresolved.as_str(),
            ImplementationError::Dispatch(e) => e.code().as_str(),
            ImplementationError::Spec(_) => crate::AgentCode::InvalidTool.as_str(),
            ImplementationError::Unsupported(_) => crate::AgentCode::Unsupported.as_str(),
        }
    }
}

/// A tool found in the registry: its definition in file form and its endpoint.
#[derive(Debug, Clone)]
pub struct RegistryTool {
    /// The definition.
    pub definition: ToolFile,
    /// Where it runs.
    pub endpoint: String,
}

/// The registry step of the resolver chain.
#[async_trait]
pub trait RegistryLookup: Send + Sync {
    /// The tool registered under `name` (as written in the ref, or its snake form);
    /// `None` when the registry has no such tool.
    async fn find_tool(&self, name: &str) -> Result<Option<RegistryTool>, RegistryLookupError>;

    /// The MCP server registered under `name` (`ref: mcp-servers/NAME` not defined by
    /// the agent or its project); `None` when the registry has no such server. The
    /// default answers `None`: a registry without MCP server entries.
    async fn find_mcp_server(
        &self,
        name: &str,
    ) -> Result<Option<toolshed_mcp::McpServerSpec>, RegistryLookupError> {
        let _ = name;
        Ok(None)
    }
}

/// Why the registry step of the resolver chain could not answer. The message is shown
/// to the agent's author as one of the agent's problems.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryLookupError {
    /// The registry could not be asked, or answered with an error; the message says
    /// which registry and what it answered.
    #[error("{0}")]
    Unavailable(String),
    /// The registry answered with something this resolver cannot use (no definition,
    /// or one it cannot read); the message says what.
    #[error("{0}")]
    InvalidAnswer(String),
    /// The tool is registered without an endpoint, so nothing can run it.
    #[error("`{name}` is registered without an endpoint, so it cannot run; register it with one")]
    NoEndpoint {
        /// The tool's name as asked.
        name: String,
    },
}

impl RegistryLookupError {
    /// The stable code: `REGISTRY_LOOKUP_FAILED`, `INVALID_REGISTRY_ANSWER` or
    /// `NO_ENDPOINT`.
    pub fn code(&self) -> crate::AgentCode {
        match self {
            RegistryLookupError::Unavailable(_) => crate::AgentCode::RegistryLookupFailed,
            RegistryLookupError::InvalidAnswer(_) => crate::AgentCode::InvalidRegistryAnswer,
            RegistryLookupError::NoEndpoint { .. } => crate::AgentCode::NoEndpoint,
        }
    }
}

/// An agent ready to run.
#[derive(Debug, Clone)]
pub struct LoadedAgent {
    /// The file as parsed.
    pub file: AgentFile,
    /// Every tool the agent sees.
    pub toolset: ToolSet,
    /// The declared env values, all present.
    pub env: BTreeMap<String, String>,
    /// Where each tool came from, by name, for listings (`tools/x.py`, `stdlib`,
    /// `registry`, `mcp-servers/NAME (agent.yaml plugins.mcp_client)`).
    pub origins: BTreeMap<String, String>,
    /// The agent's MCP servers, each with its tools' names. A loaded toolset is fixed:
    /// after a server's `notifications/tools/list_changed` (its `changes()`), the next
    /// load has the new list.
    pub mcp_servers: Vec<LoadedMcpServer>,
}

impl LoadedAgent {
    /// Resolves when any of the agent's MCP servers sends
    /// `notifications/tools/list_changed` after the load: the cue for a long-running
    /// caller to load the agent again (the hub has dropped that server's cached
    /// listing, so the new load lists afresh). Never resolves for an agent without MCP
    /// servers.
    pub async fn mcp_tools_changed(&self) {
        if self.mcp_servers.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.mcp_servers.iter().map(|s| Box::pin(s.tools_changed()));
        futures_util::future::select_all(waits).await;
    }
}

/// Everything [`load_agent_with`] may be given beside the project folder.
#[derive(Clone, Copy)]
pub struct LoadOptions<'a> {
    /// How code files and endpoints become tools.
    pub implementations: &'a dyn Implementations,
    /// The registry step of the resolver chain.
    pub registry: Option<&'a dyn RegistryLookup>,
    /// Reads a declared env var.
    pub lookup_env: &'a dyn Fn(&str) -> Option<String>,
    /// The workspaces `sandbox: true` takes its tools from.
    pub workspaces: Option<&'a Workspaces>,
    /// What the agent's MCP servers are started with; without it an agent naming an MCP
    /// server does not start.
    pub mcp: Option<&'a AgentMcp>,
    /// Where `run_process` / `check_run` keep and record background runs; without it an
    /// agent listing them does not start.
    pub processes: Option<&'a crate::Processes>,
}

/// `order-lookup` → `order_lookup`: how a ref names a file and a stdlib module.
pub fn snake_name(name: &str) -> String {
    name.replace('-', "_")
}

/// Load `<project>/agent.yaml`: parse it, load the tools folder, resolve every ref
/// (local → stdlib → registry), add built-ins, and check the env with `lookup_env`.
/// Every problem is reported at once. An agent with `sandbox: true` needs
/// [`load_agent_with_workspaces`].
pub async fn load_agent(
    project: &Path,
    implementations: &dyn Implementations,
    registry: Option<&dyn RegistryLookup>,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedAgent, AgentError> {
    load_agent_with_workspaces(project, implementations, registry, lookup_env, None).await
}

/// [`load_agent`], with the workspaces `sandbox: true` takes its tools from: `bash`
/// and the workspace file tools, confined to each run's folder under
/// `workspaces`' root. When the sandbox cannot run on this host, an agent with
/// `sandbox: true` does not start (the problem names the mechanism and the fix); bash
/// never runs unsandboxed.
pub async fn load_agent_with_workspaces(
    project: &Path,
    implementations: &dyn Implementations,
    registry: Option<&dyn RegistryLookup>,
    lookup_env: &dyn Fn(&str) -> Option<String>,
    workspaces: Option<&Workspaces>,
) -> Result<LoadedAgent, AgentError> {
    load_agent_with(
        project,
        LoadOptions {
            implementations,
            registry,
            lookup_env,
            workspaces,
            mcp: None,
            processes: None,
        },
    )
    .await
}

/// [`load_agent_with_workspaces`], with the MCP client the agent's MCP servers are
/// started through (`ref: mcp-servers/NAME`, `plugins.mcp_client`, `mcp_servers`):
/// under the agent's name as the scope, in the hub's sandbox. Each server's tools join
/// as `<server>__<tool>` (or as its options say); a name two sources give is a
/// start-up error naming both.
pub async fn load_agent_with(
    project: &Path,
    options: LoadOptions<'_>,
) -> Result<LoadedAgent, AgentError> {
    let LoadOptions {
        implementations,
        registry,
        lookup_env,
        workspaces,
        mcp,
        processes,
    } = options;
    let path = project.join("agent.yaml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| AgentError::File(format!("cannot read {}: {e}", path.display())))?;
    let file = parse_agent_file(&text, &path.display().to_string())?;
    let mut problems = Vec::new();
    let mut own: Vec<(Tool, String)> = Vec::new();

    // 1. The tools folder: every file is one of the agent's own tools.
    let folder = project.join("tools");
    let mut local: BTreeMap<String, (Tool, String)> = BTreeMap::new();
    if folder.is_dir() {
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(&folder) {
            Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) => {
                problems.push(format!("cannot read {}: {e}", folder.display()));
                Vec::new()
            }
        };
        entries.sort();
        for p in entries {
            let ext = p
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("")
                .to_ascii_lowercase();
            let stem = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_owned();
            if stem.starts_with('.')
                || stem.starts_with('_')
                || !(CODE_EXTENSIONS.contains(&ext.as_str())
                    || DEFINITION_EXTENSIONS.contains(&ext.as_str()))
            {
                continue;
            }
            let shown = format!(
                "tools/{}",
                p.file_name().and_then(|f| f.to_str()).unwrap_or("")
            );
            if local.contains_key(&stem) {
                problems.push(format!(
                    "{shown}: another file in tools/ already defines `{stem}`; keep one"
                ));
                continue;
            }
            match load_local(&p, &ext, implementations).await {
                Ok(tool) => {
                    local.insert(stem, (tool, shown));
                }
                Err(e) => problems.push(format!("{shown}: {e}")),
            }
        }
    }
    own.extend(local.values().cloned());

    // 2. tools: refs and inline definitions.
    let mut extra_env: Vec<String> = Vec::new();
    for entry in &file.tools {
        match entry {
            ToolEntry::Tool { name, network } => {
                let snake = snake_name(name);
                if let Some((t, shown)) = local.get(&snake) {
                    // The local file wins and is already loaded; granted the network,
                    // it is loaded again under a sandbox that has it.
                    if *network {
                        match with_network(t, implementations) {
                            Ok(granted) => {
                                if let Some(pos) =
                                    own.iter().position(|(o, _)| o.name() == t.name())
                                {
                                    own[pos] = (granted, shown.clone());
                                }
                            }
                            Err(e) => {
                                problems.push(format!("ref tools/{name} (network: true): {e}"))
                            }
                        }
                    }
                    continue;
                }
                if *network {
                    problems.push(format!(
                        "ref tools/{name}: `network: true` grants the network to a tool file of this project's tools/ folder, and there is no tools/{snake}.(py|js|mjs|ts); a standard-library tool has the network it needs, and a registry tool declares `network_access` in its own definition"
                    ));
                    continue;
                }
                if let Some(t) = toolshed_stdlib::get(&snake) {
                    own.push((t, "stdlib".into()));
                    continue;
                }
                match registry {
                    Some(r) => match r.find_tool(name).await {
                        Ok(Some(found)) => match registry_tool(found, implementations) {
                            Ok(t) => own.push((t, "registry".into())),
                            Err(e) => problems.push(format!("ref tools/{name} (registry): {e}")),
                        },
                        Ok(None) => problems.push(format!(
                            "ref tools/{name}: not found in tools/{snake}.(py|js|mjs|ts|yaml), the standard library, or the registry"
                        )),
                        Err(e) => problems.push(format!("ref tools/{name}: the registry could not be asked: {e}")),
                    },
                    None => problems.push(format!(
                        "ref tools/{name}: not found in tools/{snake}.(py|js|mjs|ts|yaml) or the standard library (no registry configured)"
                    )),
                }
            }
            // Resolved with the agent's other MCP servers below.
            ToolEntry::McpServer { .. } => {}
            ToolEntry::Inline { name, definition } => {
                match inline_tool(name, definition, &local, implementations) {
                    Ok(t) => {
                        // An inline definition of a local file's tool replaces its schema.
                        if let Some(pos) = own.iter().position(|(o, _)| o.name() == t.name()) {
                            own.remove(pos);
                        }
                        own.push((t, "inline".into()));
                    }
                    Err(e) => problems.push(format!("inline tool `{name}`: {e}")),
                }
            }
        }
    }

    // 2b. MCP servers: resolved, started, their tools named as the agent says.
    let wanted = crate::mcp::resolve(&file, project, registry, &mut problems).await;
    let mut mcp_names = std::collections::BTreeSet::new();
    let mut mcp_servers = Vec::new();
    if !wanted.is_empty() {
        match mcp {
            Some(mcp) => {
                let (tools, servers) =
                    crate::mcp::load(&file.name, wanted, mcp, &mut problems).await;
                for (t, origin) in tools {
                    mcp_names.insert(t.name().to_owned());
                    own.push((t, origin));
                }
                mcp_servers = servers;
            }
            None => {
                for w in &wanted {
                    problems.push(format!(
                        "{}: MCP servers need an MCP client, and this loader was given none; load the agent with `load_agent_with` and an `AgentMcp` (the CLI does)",
                        w.origin()
                    ));
                }
            }
        }
    }

    // 3. Built-ins.
    let mut builtins = Vec::new();
    let mut optional_env: Vec<&'static str> = Vec::new();
    for b in &file.builtin_tools {
        if b == "bash" {
            problems.push(
                "`bash` cannot be listed in builtin_tools: set `sandbox: true`, which grants bash together with the workspace file tools".into(),
            );
            continue;
        }
        if WORKSPACE_TOOLS.contains(&b.as_str()) {
            problems.push(format!(
                "`{b}` cannot be listed in builtin_tools: it is a workspace tool, granted with bash and the others by `sandbox: true`"
            ));
            continue;
        }
        // `web-search` names `web_search`: the collision is with the tool's own name.
        let name = toolshed_stdlib::canonical_name(b);
        if let Some((_, origin)) = own.iter().find(|(t, _)| t.name() == name) {
            problems.push(format!(
                "built-in `{b}` collides with the agent's own tool `{name}` ({origin}); rename your tool or remove `{b}` from builtin_tools"
            ));
            continue;
        }
        if crate::process::PROCESS_TOOLS.contains(&b.as_str()) {
            match crate::process::builtin(b, &file, project, processes, workspaces) {
                Ok(t) => builtins.push(t),
                Err(e) => problems.push(e),
            }
            continue;
        }
        match toolshed_stdlib::get(b) {
            Some(t) => {
                // What the built-in cannot run without is checked with the agent's
                // declared env (missing ones in the same start-up list); what it reads
                // when set is passed on when set.
                for var in toolshed_stdlib::required_env(name) {
                    if !file.env.iter().any(|e| e == var) && !extra_env.iter().any(|e| e == var) {
                        extra_env.push((*var).to_owned());
                    }
                }
                optional_env.extend(toolshed_stdlib::optional_env(name).iter().copied());
                builtins.push(t);
            }
            None => {
                let names: Vec<String> = toolshed_stdlib::tools()
                    .iter()
                    .map(|t| t.name().to_owned())
                    .chain(
                        crate::process::PROCESS_TOOLS
                            .iter()
                            .map(|n| (*n).to_owned()),
                    )
                    .collect();
                problems.push(format!(
                    "unknown built-in `{b}`; available: {}",
                    names.join(", ")
                ));
            }
        }
    }
    let mut sandboxed = Vec::new();
    if file.sandbox {
        match workspaces {
            None => problems.push(
                "`sandbox: true` needs the workspaces and the sandbox, and this loader was given none; load the agent with `load_agent_with_workspaces` (the CLI does)".into(),
            ),
            Some(ws) => match ws.sandbox() {
                Err(e) => problems.push(format!(
                    "`sandbox: true`: {e} [{}]; the agent does not start, and bash never runs unsandboxed",
                    e.code()
                )),
                Ok(_) => match ws.tools(&file.sandbox_settings) {
                    Ok(tools) => sandboxed = tools,
                    Err(e) => problems.push(format!("`sandbox: true`: {e}")),
                },
            },
        }
        for t in &sandboxed {
            if let Some((_, origin)) = own.iter().find(|(o, _)| o.name() == t.name()) {
                problems.push(format!(
                    "`sandbox: true` grants `{0}`, which collides with the agent's own tool `{0}` ({origin}); rename your tool",
                    t.name()
                ));
            }
        }
    }
    extra_env.sort();

    // 4. One toolset; a name defined twice is an error naming both places.
    let mut origins: BTreeMap<String, String> = BTreeMap::new();
    let mut b = ToolSet::builder();
    for (t, origin) in &own {
        if let Some(first) = origins.get(t.name()) {
            let hint = if first.starts_with("mcp-servers/") || origin.starts_with("mcp-servers/") {
                "rename one, or give the MCP server another `prefix`"
            } else {
                "rename one"
            };
            problems.push(format!(
                "tool `{}` is defined twice: by {first} and by {origin}; {hint}",
                t.name()
            ));
            continue;
        }
        origins.insert(t.name().to_owned(), origin.clone());
        let source = if mcp_names.contains(t.name()) {
            ToolSource::AgentPlugin("mcp_client".into())
        } else {
            ToolSource::Own
        };
        let _ = b.add(source, t.clone());
    }
    for t in builtins {
        origins.insert(t.name().to_owned(), "builtin".into());
        let _ = b.add(ToolSource::Builtin, t);
    }
    for t in sandboxed {
        if origins.contains_key(t.name()) {
            continue; // reported above as a collision
        }
        origins.insert(t.name().to_owned(), "sandbox".into());
        let _ = b.add(ToolSource::Builtin, t);
    }
    if !problems.is_empty() {
        return Err(AgentError::Invalid {
            agent: file.name.clone(),
            problems,
        });
    }

    // 5. Env, last: fail fast with the full list of what is missing.
    let declared: Vec<&str> = file
        .env
        .iter()
        .map(String::as_str)
        .chain(extra_env.iter().map(String::as_str))
        .collect();
    let mut env =
        toolshed_core::env::resolve_declared_env(declared, lookup_env).map_err(|missing| {
            AgentError::MissingEnv {
                agent: file.name.clone(),
                missing,
            }
        })?;
    for var in optional_env {
        if let Some(v) = lookup_env(var).filter(|v| !v.is_empty()) {
            env.entry(var.to_owned()).or_insert(v);
        }
    }
    Ok(LoadedAgent {
        toolset: b.build(),
        file,
        env,
        origins,
        mcp_servers,
    })
}

async fn load_local(
    path: &Path,
    ext: &str,
    implementations: &dyn Implementations,
) -> Result<Tool, String> {
    if DEFINITION_EXTENSIONS.contains(&ext) {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
        let shown = path.display().to_string();
        let spec = parse_tool_file(&text, FileFormat::from_path(&shown), Some(&shown))
            .map_err(|e| e.to_string())?;
        let endpoint = spec.meta.endpoint.clone().ok_or_else(|| {
            "has no `endpoint:`; say where the tool runs, e.g. `endpoint: python:/abs/path/tool.py:fn`".to_owned()
        })?;
        let handler = implementations
            .handler_for(&endpoint, &spec)
            .map_err(|e| e.to_string())?;
        Tool::from_spec(spec, handler).map_err(|e| e.to_string())
    } else {
        implementations
            .load_code_file(path)
            .await
            .map_err(|e| e.to_string())
    }
}

fn registry_tool(
    found: RegistryTool,
    implementations: &dyn Implementations,
) -> Result<Tool, String> {
    let spec = found.definition.into_spec().map_err(|e| e.to_string())?;
    let handler = implementations
        .handler_for(&found.endpoint, &spec)
        .map_err(|e| e.to_string())?;
    Tool::from_spec(spec, handler).map_err(|e| e.to_string())
}

/// A tool file's tool again, its sandbox with the network on (`network: true` on its
/// `ref` entry): the same spec with `network_access`, the same endpoint's handler made
/// anew under it.
fn with_network(tool: &Tool, implementations: &dyn Implementations) -> Result<Tool, String> {
    let mut spec = tool.spec().clone();
    spec.meta.network_access = true;
    let endpoint = spec.meta.endpoint.clone().ok_or_else(|| {
        "this tool runs in-process, with no sandbox to open the network of".to_owned()
    })?;
    let handler = implementations
        .handler_for(&endpoint, &spec)
        .map_err(|e| e.to_string())?;
    Tool::from_spec(spec, handler).map_err(|e| e.to_string())
}

fn inline_tool(
    name: &str,
    def: &serde_json::Map<String, Value>,
    local: &BTreeMap<String, (Tool, String)>,
    implementations: &dyn Implementations,
) -> Result<Tool, String> {
    let mut file = serde_json::Map::new();
    file.insert("spec_version".into(), Value::String("v1".into()));
    for (k, v) in def {
        // The seed writes `schema:`; the file format says `input_schema:`.
        let key = if k == "schema" {
            "input_schema"
        } else {
            k.as_str()
        };
        file.insert(key.to_owned(), v.clone());
    }
    let text = Value::Object(file).to_string();
    let spec = parse_tool_file(&text, FileFormat::Json, None).map_err(|e| e.to_string())?;
    let snake = snake_name(name);
    // The local file named like the tool, else the one whose function is the tool (a
    // Python file need not be named after its function).
    let own_file = local.get(&snake).or_else(|| {
        local
            .values()
            .find(|(t, _)| t.name() == name || t.name() == snake)
    });
    let handler = match (&spec.meta.endpoint, own_file, toolshed_stdlib::get(&snake)) {
        (Some(ep), _, _) => implementations
            .handler_for(ep, &spec)
            .map_err(|e| e.to_string())?,
        // The definition asks for the network its file's tool was not loaded with: the
        // file's endpoint again, under this definition.
        (None, Some((t, _)), _) if spec.meta.network_access => match &t.spec().meta.endpoint {
            Some(ep) => implementations
                .handler_for(ep, &spec)
                .map_err(|e| e.to_string())?,
            None => t.handler().clone(),
        },
        (None, Some((t, _)), _) => t.handler().clone(),
        (None, None, Some(t)) => t.handler().clone(),
        (None, None, None) => {
            return Err(format!(
                "no implementation: give it an `endpoint:`, or add tools/{snake}.py (or .js/.mjs/.ts), or name a standard-library tool"
            ));
        }
    };
    Tool::from_spec(spec, handler).map_err(|e| e.to_string())
}
