//! # toolshed-agent
//!
//! `agent.yaml`: an agent's name, framework, tools (registry refs and inline
//! definitions), built-in tools, declared env, sandbox switch, limits and plugins; and
//! what turns it into a running toolset:
//!
//! - the **tools folder**: every `tools/*.{py,js,mjs,ts,yaml,yml,json}` file of the
//!   project is one of the agent's own tools, loaded automatically;
//! - the **resolver chain** for `ref: tools/<name>`, exactly as the seed orders it:
//!   the local file `<project>/tools/<snake_name>.(py|js|mjs|ts|yaml)` → the standard
//!   library → the registry;
//! - **start-up checks** that fail fast with everything wrong at once: every missing env
//!   var, a built-in colliding with an own tool, `bash` in `builtin_tools`;
//! - **MCP servers' tools** ([`mcp`]): `ref: mcp-servers/<name>`, bread's
//!   `plugins.mcp_client` and AgentBreeder's `mcp_servers`, started through an
//!   [`AgentMcp`]'s hub, their tools named `<server>__<tool>`;
//! - **background runs** ([`process`]): `run_process` / `check_run` / `stop_run` start
//!   the agent's named `processes:` in the sandbox under a detached supervisor, report
//!   on them and stop them, across restarts of whoever started them ([`Processes`]);
//! - the **workspace** of `sandbox: true`: `bash` run in the sandbox and the file tools
//!   (`read_file`, `write_file`, `edit_file`, `list_files`, `search_files`), all
//!   confined to one folder per run ([`Workspaces`]);
//! - the **project identity** ([`ProjectIdentity`]): the folder, the agent's name and
//!   each tool's revision by content hash ([`ToolRevision`]), recorded with a run so a
//!   resume can tell whether it would run the same code.
//!
//! Code files and endpoints are turned into tools by an [`Implementations`] (the
//! dispatch layer); registry lookups go through a [`RegistryLookup`].
//!
//! ```no_run
//! # async fn demo(implementations: &dyn toolshed_agent::Implementations) -> Result<(), toolshed_agent::AgentError> {
//! use toolshed_agent::{WorkspaceConfig, Workspaces, load_agent_with_workspaces};
//!
//! let workspaces = Workspaces::new(WorkspaceConfig::new("/var/lib/toolshed/workspaces"));
//! let lookup = |name: &str| std::env::var(name).ok();
//! let agent = load_agent_with_workspaces(
//!     std::path::Path::new("my-agent"),
//!     implementations,
//!     None,
//!     &lookup,
//!     Some(&workspaces),
//! )
//! .await?;
//! println!("{} tools", agent.toolset.iter().count());
//! # Ok(()) }
//! ```

mod dispatch;
mod file;
pub mod mcp;
pub mod process;
mod resolve;
mod revision;
mod workspace;

pub use dispatch::DispatchImplementations;
pub use file::{AgentFile, Limits, SandboxSettings, ToolEntry, parse_agent_file};
pub use mcp::{AgentMcp, LoadedMcpServer};
pub use process::{PROCESS_TOOLS, ProcessCaps, ProcessConfig, ProcessDef, Processes};
pub use resolve::{
    ImplementationError, Implementations, LoadOptions, LoadedAgent, RegistryLookup,
    RegistryLookupError, RegistryTool, load_agent, load_agent_with, load_agent_with_workspaces,
    snake_name,
};
pub use revision::{
    PROJECT_IDENTITY_VERSION, ProjectChanged, ProjectIdentity, ToolChange, ToolRevision,
};
pub use workspace::{WORKSPACE_TOOLS, WorkspaceCaps, WorkspaceConfig, Workspaces};

/// Everything that can stop an agent from starting. Messages say what to do instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// `agent.yaml` cannot be read or parsed, or a field is invalid.
    #[error("{0}")]
    File(String),
    /// Several problems, all reported at once.
    #[error("agent `{agent}` cannot start:\n- {}", .problems.join("\n- "))]
    Invalid {
        /// The agent's name.
        agent: String,
        /// Every problem found.
        problems: Vec<String>,
    },
    /// Declared env vars are missing.
    #[error("agent `{agent}`: {missing}")]
    MissingEnv {
        /// The agent.
        agent: String,
        /// The missing names.
        missing: toolshed_core::env::MissingEnv,
    },
}

impl AgentError {
    /// A stable code: `AGENT_FILE_INVALID`, `AGENT_INVALID`, `MISSING_ENV`.
    pub fn code(&self) -> AgentCode {
        match self {
            AgentError::File(_) => AgentCode::AgentFileInvalid,
            AgentError::Invalid { .. } => AgentCode::AgentInvalid,
            AgentError::MissingEnv { .. } => AgentCode::MissingEnv,
        }
    }
}

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of [`AgentError`], listed with what to do in `docs/errors.md`.
    #[non_exhaustive]
    pub enum AgentCode {
        /// `agent.yaml` cannot be read or parsed, or a field is invalid.
        AgentFileInvalid,
        /// The agent cannot start (every problem listed).
        AgentInvalid,
        /// Declared env vars are missing.
        MissingEnv,
        /// A tool file's path cannot be resolved (it vanished, or a folder is unreadable).
        PathUnresolved,
        /// The tool made from a file or endpoint is not a valid tool.
        InvalidTool,
        /// The implementation does not handle that kind of file or endpoint.
        Unsupported,
        /// The registry step of the resolver chain could not ask the registry, or it
        /// answered with an error.
        RegistryLookupFailed,
        /// The registry answered with a definition this resolver cannot use.
        InvalidRegistryAnswer,
        /// A registry tool has no endpoint, so nothing can run it.
        NoEndpoint,
        /// `runs resume` refused a run: a tool it still has to call changed since it
        /// started (each named); `--accept-changes` resumes with the new code.
        AgentProjectChanged,
    }
}
