//! `toolshed agent validate [DIR]`: load an agent project as it would start (agent.yaml,
//! the tools folder, the resolver chain, built-ins, declared env) and report every
//! problem at once.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Subcommand;
use serde_json::json;
use toolshed_agent::{DispatchImplementations, load_agent};
use toolshed_dispatch::{Dispatcher, DispatcherConfig};

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
}

/// Run an `agent` subcommand.
pub async fn run(cmd: AgentCommand, json_out: bool) -> Result<(), Failure> {
    let AgentCommand::Validate { dir } = cmd;
    let dispatcher =
        Dispatcher::new(DispatcherConfig::default()).with_builtins(toolshed_stdlib::tools());
    let implementations = DispatchImplementations::new(dispatcher.clone());
    let lookup = |name: &str| std::env::var(name).ok();
    let loaded = load_agent(&dir, &implementations, None, &lookup).await;
    dispatcher.shutdown();
    let agent = loaded.map_err(|e| Failure::Error {
        code: EXIT_BAD_INPUT,
        error: anyhow!("{e} [{}]", e.code()),
    })?;
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
