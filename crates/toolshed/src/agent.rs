//! `toolshed agent validate [DIR]`: load an agent project as it would start (agent.yaml,
//! the tools folder, the resolver chain local → stdlib → registry, built-ins, its MCP
//! servers and their tools, declared env) and report every problem at once. `toolshed agent register [DIR]`: record the
//! agent in the registry server, whose `tools/<name>` refs become usage edges.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;
use clap::Subcommand;
use serde_json::{Value, json};
use toolshed_agent::{
    AgentMcp, DispatchImplementations, LoadOptions, LoadedAgent, ProcessConfig, Processes,
    ProjectIdentity, RegistryLookup, ToolEntry, WorkspaceConfig, Workspaces, load_agent_with,
    parse_agent_file,
};
use toolshed_api::Data;
use toolshed_api::views::{AgentView, ToolDetail};
use toolshed_core::credentials::EnvProvider;
use toolshed_dispatch::{Dispatcher, DispatcherConfig};
use toolshed_mcp::{ClientConfig, McpHub};

use crate::client::{Answer, Client, HttpRegistry};
use crate::output::{EXIT_BAD_INPUT, Failure, print, print_json, table};

/// `toolshed agent` subcommands.
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Load the agent in DIR (default: the working folder) and list its tools, or every
    /// problem that would stop it from starting.
    Validate {
        /// The project folder holding agent.yaml.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Register the agent in DIR with the registry server (`TOOLSHED_URL`); its
    /// `tools/<name>` refs found there become the tools' usage edges.
    Register {
        /// The project folder holding agent.yaml.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
}

/// Run an `agent` subcommand.
pub async fn run(cmd: AgentCommand, json_out: bool) -> Result<(), Failure> {
    match cmd {
        AgentCommand::Validate { dir } => validate(&dir, json_out).await,
        AgentCommand::Register { dir } => register(&dir, json_out).await,
    }
}

/// Which agent project a command works on: `--agent DIR`, else the working folder when
/// it holds `agent.yaml`, else none (the CLI's own tools); `--no-agent` ignores the
/// working folder's `agent.yaml`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProjectArgs {
    /// The agent project in DIR (default: the working folder, when it holds
    /// agent.yaml): its tools folder, refs, inline tools, built-ins, `sandbox: true`
    /// tools and MCP servers' tools, instead of the CLI's own.
    #[arg(long, value_name = "DIR")]
    pub agent: Option<PathBuf>,
    /// Ignore agent.yaml in the working folder and use the CLI's own tools (e.g. while
    /// that agent.yaml is being written and does not load).
    #[arg(long, conflicts_with = "agent")]
    pub no_agent: bool,
}

/// Where a command's agent project was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProjectDir {
    /// Named by `--agent DIR`.
    Flag(PathBuf),
    /// agent.yaml in the working folder.
    WorkingFolder,
}

impl ProjectDir {
    /// The folder.
    pub fn path(&self) -> &Path {
        match self {
            ProjectDir::Flag(dir) => dir,
            ProjectDir::WorkingFolder => Path::new("."),
        }
    }
}

impl ProjectArgs {
    /// The project these flags pick, if any. A working folder's `agent.yaml` is picked
    /// even when it is a dangling link or unreadable, so that its problem is reported
    /// instead of silently running the CLI's own tools.
    pub fn pick(&self) -> Option<ProjectDir> {
        if self.no_agent {
            return None;
        }
        if let Some(dir) = &self.agent {
            return Some(ProjectDir::Flag(dir.clone()));
        }
        std::fs::symlink_metadata("agent.yaml")
            .is_ok()
            .then_some(ProjectDir::WorkingFolder)
    }

    /// Load the picked project (`None`: the CLI's own tools).
    pub async fn load(&self) -> Result<Option<Project>, Failure> {
        match self.pick() {
            None => Ok(None),
            Some(dir) => load_picked(&dir).await.map(Some),
        }
    }
}

/// Load a picked project; a working folder's agent.yaml that does not load says how to
/// get past it.
pub(crate) async fn load_picked(dir: &ProjectDir) -> Result<Project, Failure> {
    match (load_project(dir.path()).await, dir) {
        (Ok(p), _) => Ok(p),
        (Err(Failure::Error { code, error }), ProjectDir::WorkingFolder) => Err(Failure::Error {
            code,
            error: error.context(
                "the agent project in the working folder (./agent.yaml) does not load; fix it, or pass --no-agent to use the CLI's own tools",
            ),
        }),
        (Err(e), _) => Err(e),
    }
}

/// An agent project loaded as it would start, with what must be stopped after use: the
/// dispatcher's workers and the agent's MCP servers.
pub(crate) struct Project {
    /// The agent.
    pub agent: LoadedAgent,
    /// The project's folder, each tool's revision: recorded with the runs it starts.
    pub identity: ProjectIdentity,
    dispatcher: Dispatcher,
    hub: McpHub,
}

impl Project {
    /// The runtime over the agent's toolset, its declared env handed to handlers as
    /// `ctx.env` (never set in a tool process's environment).
    ///
    /// The secret parts of built-ins' env values (`TAVILY_API_KEY`, the password in
    /// `SQL_DATABASE_URL`) are scrubbed from every call's answer, whichever tool of the
    /// agent shows them; `read_attachment` reads the journal's attachments.
    pub async fn runtime(&self, db: &crate::db::Db) -> Result<toolshed_runtime::Runtime, Failure> {
        let config = toolshed_runtime::RuntimeConfig {
            env: self.agent.env.clone(),
            secrets: toolshed_stdlib::secrets_of_env(&self.agent.env),
            ..db.runtime_config().await?
        };
        db.runtime_of(self.agent.toolset.clone(), config).await
    }

    /// The budgets of every run of the project: agent.yaml's `limits`
    /// (`max_attempts_per_task`, `max_wall_clock_min`, or their camelCase forms).
    pub fn budgets(&self) -> toolshed_journal::Budgets {
        self.agent.file.limits.into()
    }

    /// A run's driver as recorded: the driver, and this project under `agent_project`.
    pub fn driver_value(&self, driver: &toolshed_runtime::Driver) -> Value {
        let mut value = serde_json::to_value(driver).unwrap_or_default();
        if let Some(obj) = value.as_object_mut() {
            obj.insert(
                DRIVER_PROJECT_KEY.into(),
                serde_json::to_value(&self.identity).unwrap_or_default(),
            );
        }
        value
    }

    /// Stop the agent's workers and MCP servers (stdin closed, SIGTERM, SIGKILL).
    pub async fn shutdown(self) {
        self.dispatcher.shutdown();
        self.hub.shutdown().await;
    }
}

/// The key of a run's driver JSON under which the agent project it ran is recorded.
pub(crate) const DRIVER_PROJECT_KEY: &str = "agent_project";

/// The agent project recorded with a run (`None` for a run of the CLI's own tools, or
/// one started before runs recorded it).
pub(crate) fn recorded_project(
    run_id: &str,
    driver: &Value,
) -> Result<Option<ProjectIdentity>, Failure> {
    match driver.get(DRIVER_PROJECT_KEY) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| {
            Failure::bad_input(anyhow!(
                "run {run_id} records an agent project this CLI cannot read ({e}); resume it with a newer toolshed"
            ))
        }),
    }
}

/// Load the agent in `dir` as it would start: agent.yaml, the tools folder, the
/// resolver chain local → stdlib → registry, built-ins, its MCP servers (started in the
/// sandbox under the agent's name), declared env. Every problem is one error.
pub(crate) async fn load_project(dir: &Path) -> Result<Project, Failure> {
    // On the user's own machine, HTTP tools may reach loopback (a service under
    // development at http://localhost:8080), nothing else that is not public.
    let http = toolshed_dispatch::HttpPolicy::default().with_loopback();
    let config = DispatcherConfig {
        http: http.clone(),
        ..DispatcherConfig::default()
    };
    let dispatcher = Dispatcher::new(config).with_builtins(toolshed_stdlib::tools());
    let implementations = DispatchImplementations::new(dispatcher.clone()).with_project(dir);
    let lookup = |name: &str| std::env::var(name).ok();
    // The registry step of the resolver chain, only when a server is configured.
    let registry = if Client::configured() {
        Some(HttpRegistry::new(Client::from_env()?))
    } else {
        None
    };
    // `sandbox: true` takes its tools from here; the sandbox itself is only built (and
    // the host checked) for an agent that asks for it.
    let sandbox_config = crate::sandbox::config()?;
    let workspaces = Workspaces::new(WorkspaceConfig {
        sandbox: sandbox_config.clone(),
        ..WorkspaceConfig::new(workspaces_root())
    });
    let processes = processes(sandbox_config.clone())?;
    let hub = McpHub::new(mcp_config(dir, sandbox_config, http)?);
    let mcp = AgentMcp {
        hub: hub.clone(),
        credentials: Arc::new(EnvProvider),
        principal: None,
    };
    let loaded = load_agent_with(
        dir,
        LoadOptions {
            implementations: &implementations,
            registry: registry.as_ref().map(|r| r as &dyn RegistryLookup),
            lookup_env: &lookup,
            workspaces: Some(&workspaces),
            mcp: Some(&mcp),
            processes: Some(&processes),
        },
    )
    .await;
    match loaded {
        Ok(agent) => Ok(Project {
            identity: ProjectIdentity::of(dir, &agent),
            agent,
            dispatcher,
            hub,
        }),
        Err(e) => {
            dispatcher.shutdown();
            hub.shutdown().await;
            Err(Failure::Error {
                code: EXIT_BAD_INPUT,
                error: anyhow!("{e} [{}]", e.code()),
            })
        }
    }
}

/// The background runs of `run_process`: state folders under `TOOLSHED_PROCESSES`
/// (else `.toolshed/processes`), recorded in the journal's database, each supervised by
/// this very binary (`toolshed sandbox supervise DIR`, detached), or by the
/// `toolshed-sandbox-exec` that `TOOLSHED_SANDBOX_EXEC` names.
fn processes(sandbox: toolshed_sandbox::SandboxConfig) -> Result<Processes, Failure> {
    let mut config = ProcessConfig::new(processes_root(), crate::db::remembered_url());
    config.sandbox = sandbox;
    config.supervisor = if std::env::var_os(toolshed_sandbox::detached::SUPERVISOR_ENV)
        .is_some_and(|v| !v.is_empty())
    {
        None
    } else {
        let exe = std::env::current_exe().map_err(|e| Failure::Error {
            code: crate::output::EXIT_INTERNAL,
            error: anyhow!("cannot find this executable, the background runs' supervisor: {e}"),
        })?;
        Some(toolshed_sandbox::detached::Supervisor::new(
            exe,
            ["sandbox", "supervise"],
        ))
    };
    Ok(Processes::new(config))
}

fn processes_root() -> PathBuf {
    std::env::var_os("TOOLSHED_PROCESSES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".toolshed/processes"))
}

/// The background runs as `processes` records them, only to ask whether a run's are
/// still going (which needs neither the sandbox nor a supervisor).
pub(crate) fn processes_for_cleanup() -> Processes {
    Processes::new(ProcessConfig::new(
        processes_root(),
        crate::db::remembered_url(),
    ))
}

/// The MCP client of the CLI: stdio servers in the sandbox (built only when the agent
/// names an MCP server, so other agents never pay for the host check), their package
/// caches under `TOOLSHED_MCP_CACHE` (else `.toolshed/mcp-cache`), HTTP servers on
/// public addresses and loopback. `TOOLSHED_MCP_BINDS` shows host folders read-only
/// (with their programs runnable) to every stdio server: `HOST[:TARGET]` separated by
/// commas, e.g. a folder of locally installed servers at `/mcp`; nothing of the host
/// is shown otherwise (not even the project: a downloaded server never reads it).
/// `TOOLSHED_MCP_UNSANDBOXED=1` is a developer's opt-in to run stdio servers as plain
/// processes on a host without the sandbox.
fn mcp_config(
    dir: &Path,
    sandbox: toolshed_sandbox::SandboxConfig,
    http: toolshed_dispatch::HttpPolicy,
) -> Result<ClientConfig, Failure> {
    let cache_root = std::env::var_os("TOOLSHED_MCP_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".toolshed/mcp-cache"));
    let mut config = ClientConfig::new(cache_root);
    config.http_policy = http;
    config.unsandboxed = std::env::var("TOOLSHED_MCP_UNSANDBOXED").is_ok_and(|v| v == "1");
    if let Ok(binds) = std::env::var("TOOLSHED_MCP_BINDS") {
        // `HOST[:TARGET]`, as `toolshed scan --bind` takes them.
        for raw in binds.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (host, target) = raw.split_once(':').unwrap_or((raw, raw));
            let host = std::fs::canonicalize(host).map_err(|e| {
                Failure::bad_input(anyhow!("TOOLSHED_MCP_BINDS: cannot resolve `{host}`: {e}"))
            })?;
            if !Path::new(target).is_absolute() {
                return Err(Failure::bad_input(anyhow!(
                    "TOOLSHED_MCP_BINDS: the target `{target}` of `{raw}` must be an absolute path, e.g. /opt/mcp-servers:/mcp"
                )));
            }
            config
                .binds
                .push(toolshed_sandbox::Bind::executable(host, target));
        }
    }
    if !config.unsandboxed && names_mcp_servers(dir) {
        // A host that cannot sandbox leaves `sandbox` unset: the client then refuses
        // stdio servers with the reason, and HTTP servers still work.
        match toolshed_sandbox::Sandbox::new(sandbox) {
            Ok(s) => config.sandbox = Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "the sandbox cannot run here; stdio MCP servers are refused")
            }
        }
    }
    Ok(config)
}

/// Whether the agent in `dir` names any MCP server (a cheap look before the sandbox is
/// built; the loader reports the file's problems itself).
fn names_mcp_servers(dir: &Path) -> bool {
    let path = dir.join("agent.yaml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return false;
    };
    let Ok(file) = parse_agent_file(&text, &path.display().to_string()) else {
        return false;
    };
    !file.mcp_client.is_empty()
        || !file.mcp_client_names.is_empty()
        || !file.mcp_servers.is_empty()
        || file
            .tools
            .iter()
            .any(|t| matches!(t, ToolEntry::McpServer { .. }))
}

async fn validate(dir: &Path, json_out: bool) -> Result<(), Failure> {
    let project = load_project(dir).await?;
    let agent = &project.agent;
    if json_out {
        let tools: Vec<_> = agent
            .toolset
            .iter()
            .map(|t| json!({"name": t.name(), "origin": agent.origins.get(t.name()), "description": t.spec().description}))
            .collect();
        let servers: Vec<_> = agent
            .mcp_servers
            .iter()
            .map(|s| json!({"name": s.name, "transport": s.transport, "source": s.source, "tool_count": s.tools.len(), "tools": s.tools}))
            .collect();
        print_json(
            &json!({"agent": agent.file.name, "ok": true, "tools": tools, "mcp_servers": servers, "env": agent.env.keys().collect::<Vec<_>>()}),
        );
    } else {
        let rows: Vec<Vec<String>> = agent
            .toolset
            .iter()
            .map(|t| {
                vec![
                    t.name().to_owned(),
                    agent.origins.get(t.name()).cloned().unwrap_or_default(),
                    t.spec().description.clone(),
                ]
            })
            .collect();
        let mut text = format!(
            "agent {} is valid\n\n{}",
            agent.file.name,
            table(&["TOOL", "FROM", "DESCRIPTION"], &rows, 70)
        );
        if !agent.mcp_servers.is_empty() {
            let rows: Vec<Vec<String>> = agent
                .mcp_servers
                .iter()
                .map(|s| {
                    vec![
                        s.name.clone(),
                        s.transport.to_owned(),
                        s.source.clone(),
                        format!("{} tools", s.tools.len()),
                    ]
                })
                .collect();
            text.push_str("\n\n");
            text.push_str(&table(
                &["MCP SERVER", "TRANSPORT", "FROM", "TOOLS"],
                &rows,
                70,
            ));
        }
        print(&text);
    }
    project.shutdown().await;
    Ok(())
}

/// Where the runs' workspaces live: `TOOLSHED_WORKSPACES`, else `.toolshed/workspaces`
/// in the working folder (beside the default `toolshed.db`).
pub(crate) fn workspaces_root() -> PathBuf {
    std::env::var_os("TOOLSHED_WORKSPACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".toolshed/workspaces"))
}

async fn register(dir: &Path, json_out: bool) -> Result<(), Failure> {
    let path = dir.join("agent.yaml");
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Failure::bad_input(anyhow!("cannot read {shown}: {e}")))?;
    let file = parse_agent_file(&text, &shown)
        .map_err(|e| Failure::bad_input(anyhow!("{e} [{}]", e.code())))?;
    let body: Value = serde_yaml_ng::from_str(&text)
        .map_err(|e| Failure::bad_input(anyhow!("{shown} cannot be sent as JSON: {e}")))?;
    let client = Client::from_env()?;
    let answer: Answer<Data<AgentView>> = client
        .post(&["api", "v1", "registry", "agents"], &body)
        .await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let agent = &answer.body.data;
    let mut text = format!("registered agent {} (id {})", file.name, agent.id);
    if agent.tool_ids.is_empty() {
        text.push_str("\nit uses no registry tools (refs resolved locally or in the standard library are not edges)");
    } else {
        text.push_str("\nuses registry tools:");
        for tool_id in &agent.tool_ids {
            // Names read better than ids; an id the server cannot show is printed as is.
            let tool: Option<Answer<Data<ToolDetail>>> = client
                .get(&["api", "v1", "registry", "tools", tool_id])
                .await
                .ok();
            match tool {
                Some(t) => text.push_str(&format!("\n  {} ({tool_id})", t.body.data.summary.name)),
                None => text.push_str(&format!("\n  {tool_id}")),
            }
        }
    }
    print(&text);
    Ok(())
}
