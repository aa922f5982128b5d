//! `toolshed`: the command-line interface.
//!
//! Exit codes (scripts rely on them; see README):
//! - 0: success;
//! - 1: the tool ran and returned an error result (handler error, timeout, bad output);
//! - 2: bad input: a usage error, an unknown tool, arguments that are not JSON or do
//!   not match the schema, an invalid definition file;
//! - 3: an internal error.

mod output;
mod tools;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::output::Failure;

/// toolshed: a durable tool runtime and tool registry for AI agents.
#[derive(Debug, Parser)]
#[command(name = "toolshed", version, about, propagate_version = true)]
struct Cli {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List, inspect, run, export and check tools.
    #[command(subcommand)]
    Tools(tools::ToolsCommand),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOOLSHED_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (2).
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Tools(cmd) => tools::run(cmd, cli.json).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Reported(code)) => ExitCode::from(code),
        Err(Failure::Error { code, error }) => {
            eprintln!("error: {error:#}");
            ExitCode::from(code)
        }
    }
}
