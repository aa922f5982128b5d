//! `toolshed agent validate [DIR]`: load an agent project as it would start (agent.yaml,
//! the tools folder, the resolver chain local → stdlib → registry, built-ins, declared
//! env) and report every problem at once. `toolshed agent register [DIR]`: record the
//! agent in the registry server, whose `tools/<name>` refs become usage edges.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Subcommand;
use serde_json::{Value, json};
use toolshed_agent::{
    DispatchImplementations, RegistryLookup, WorkspaceConfig, Workspaces,
    load_agent_with_workspaces, parse_agent_file,
};
use toolshed_api::Data;
use toolshed_api::views::{AgentView, ToolDetail};
use toolshed_dispatch::{Dispatcher, DispatcherConfig};

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

/// Load the agent project in `dir` as `validate` does (the resolver chain, built-ins,
/// declared env, workspaces), with the dispatcher its tools run on: shut it down when
/// done.
pub async fn load(dir: &Path) -> Result<(toolshed_agent::LoadedAgent, Dispatcher), Failure> {
    // On the user's own machine, HTTP tools may reach loopback (a service under
    // development at http://localhost:8080), nothing else that is not public.
    let config = DispatcherConfig {
        http: toolshed_dispatch::HttpPolicy::default().with_loopback(),
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
    let workspaces = Workspaces::new(WorkspaceConfig {
        sandbox: crate::sandbox::config()?,
        ..WorkspaceConfig::new(workspaces_root())
    });
    let loaded = load_agent_with_workspaces(
        dir,
        &implementations,
        registry.as_ref().map(|r| r as &dyn RegistryLookup),
        &lookup,
        Some(&workspaces),
    )
    .await;
    match loaded {
        Ok(agent) => Ok((agent, dispatcher)),
        Err(e) => {
            dispatcher.shutdown();
            Err(Failure::Error {
                code: EXIT_BAD_INPUT,
                error: anyhow!("{e} [{}]", e.code()),
            })
        }
    }
}

/// The toolset of the agent project in `dir`, and the dispatcher its tools run on.
pub async fn load_toolset(dir: &Path) -> Result<(toolshed_core::ToolSet, Dispatcher), Failure> {
    let (agent, dispatcher) = load(dir).await?;
    Ok((agent.toolset, dispatcher))
}

async fn validate(dir: &Path, json_out: bool) -> Result<(), Failure> {
    let (agent, dispatcher) = load(dir).await?;
    dispatcher.shutdown();
    if json_out {
        let tools: Vec<_> = agent
            .toolset
            .iter()
            .map(|t| json!({"name": t.name(), "origin": agent.origins.get(t.name()), "description": t.spec().description}))
            .collect();
        print_json(
            &json!({"agent": agent.file.name, "ok": true, "tools": tools, "env": agent.env.keys().collect::<Vec<_>>()}),
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
        print(&format!(
            "agent {} is valid\n\n{}",
            agent.file.name,
            table(&["TOOL", "FROM", "DESCRIPTION"], &rows, 70)
        ));
    }
    Ok(())
}

/// Where the runs' workspaces live: `TOOLSHED_WORKSPACES`, else `.toolshed/workspaces`
/// in the working folder (beside the default `toolshed.db`).
fn workspaces_root() -> PathBuf {
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
