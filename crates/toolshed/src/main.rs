//! `toolshed`: the command-line interface.
//!
//! Exit codes (scripts rely on them; see README):
//! - 0: success;
//! - 1: the tool ran and returned an error result (handler error, timeout, bad output),
//!   locally or on the registry server;
//! - 2: bad input: a usage error, an unknown tool, arguments that are not JSON or do
//!   not match the schema, an invalid definition file, a weak password; and every 4xx
//!   answer of the registry server (not logged in, forbidden, not found, conflict);
//! - 3: an internal error, the journal cannot be reached, the registry server cannot be
//!   reached or answers 5xx, the sandbox cannot run untrusted code on this host;
//! - 4: the run parked: it waits for a person (approve, deny or answer, then resume);
//! - 5: `toolshed scan` found problems: a config file or entry that did not parse, a
//!   missing variable, a server that did not start or list its tools, a failed
//!   registration (each printed; the rest was scanned).

mod agent;
mod approvals;
mod attach;
mod client;
mod db;
mod mcp;
mod mcp_registry;
mod output;
mod prompt;
mod registry;
mod retention;
mod runs;
mod sandbox;
mod scan;
mod serve;
mod serve_limits;
mod tools;
mod user;
mod workspaces;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::output::Failure;

/// mimalloc instead of the system allocator: the server allocates many small, short-lived
/// buffers per request (JSON, tokens, crumbs) and glibc malloc took a third of its CPU
/// under load (BENCHMARKS.md, "Registry server").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// toolshed: a durable tool runtime and tool registry for AI agents.
#[derive(Debug, Parser)]
#[command(name = "toolshed", version, about, propagate_version = true)]
struct Cli {
    /// The journal: `sqlite://PATH` or `postgres://…` (default: `sqlite://toolshed.db` in
    /// the working folder).
    #[arg(long, global = true, env = "TOOLSHED_DATABASE_URL", value_name = "URL")]
    database_url: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List, inspect, run, export and check tools.
    Tools(Group<tools::ToolsCommand>),
    /// Start, list, inspect, resume, cancel and prune durable runs.
    Runs(Group<runs::RunsCommand>),
    /// List calls waiting for approval; approve or deny them.
    Approvals(Group<approvals::ApprovalsCommand>),
    /// Answer a human tool's call; the answer must match the tool's schema.
    Answer(approvals::AnswerArgs),
    /// Check an agent project (agent.yaml and its tools folder), or register it with
    /// the registry server.
    Agent(Group<agent::AgentCommand>),
    /// Run the registry server (REST API) on the `--database-url` database.
    Serve(Box<serve::ServeArgs>),
    /// Add and list registry users, directly in the `--database-url` database.
    User(Group<user::UserCommand>),
    /// Log in to the registry server (`TOOLSHED_URL`) and save the token.
    Login(client::LoginArgs),
    /// End the saved login's session on the registry server and delete its tokens.
    Logout(client::LogoutArgs),
    /// Work with the registry server (`TOOLSHED_URL`, logged in): its tools, and the runs
    /// their executions park.
    Registry(Group<registry::RegistryCommand>),
    /// Check what this host's sandbox supports, or run a tool file in the sandbox.
    Sandbox(Group<sandbox::SandboxCommand>),
    /// Serve tools over MCP on stdio (`mcp serve`), or print a client's config for it
    /// (`mcp config --client claude-code|cursor|vscode|claude-desktop`).
    Mcp {
        #[command(subcommand)]
        command: mcp::McpCommand,
    },
    /// Find the MCP servers configured on this machine (Claude Code, Claude Desktop,
    /// Cursor, VS Code), start each in the sandbox and list its tools; `--register`
    /// registers them.
    Scan(scan::ScanArgs),
    /// Attach a file to a run or a session (parsed once now); `read_attachment` reads it.
    Attach(attach::AttachArgs),
}

/// A command group with the `--json` output switch shared by all its commands.
///
/// Why not a global flag on the root: `toolshed answer CALL_ID --json '{…}'` uses
/// `--json` for the answer itself.
#[derive(Debug, clap::Args)]
struct Group<C: Subcommand> {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: C,
}

/// Send `tracing` events to stderr: the filter from `TOOLSHED_LOG` (else `default`),
/// JSON lines when `TOOLSHED_LOG_FORMAT=json`.
fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLSHED_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let json = std::env::var("TOOLSHED_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    if json {
        builder.json().with_current_span(false).init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (2).
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    // The detached supervisor of a background run (`run_process`): it runs its own
    // runtime for as long as the run lives, outliving the command that started it.
    if let Command::Sandbox(Group {
        command: sandbox::SandboxCommand::Supervise { dir },
        ..
    }) = &cli.command
    {
        return toolshed_sandbox::detached::supervise(dir);
    }
    // A server reports what it does; a one-shot command only its errors.
    init_logging(if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "error"
    });
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = std::env::var("TOOLSHED_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        builder.worker_threads(n);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let result = runtime.block_on(async {
        let db = db::Db::new(cli.database_url);
        db::remember_url(db.url());
        match cli.command {
            Command::Tools(g) => tools::run(g.command, &db, g.json).await,
            Command::Runs(g) => runs::run(g.command, &db, g.json).await,
            Command::Approvals(g) => approvals::run(g.command, &db, g.json).await,
            Command::Answer(args) => approvals::answer(args, &db).await,
            Command::Agent(g) => agent::run(g.command, g.json).await,
            Command::Serve(args) => serve::run(*args, db.url()).await,
            Command::User(g) => user::run(g.command, db.url(), g.json).await,
            Command::Login(args) => client::login(args).await,
            Command::Logout(args) => client::logout(args).await,
            Command::Registry(g) => registry::run(g.command, g.json).await,
            Command::Sandbox(g) => sandbox::run(g.command, g.json).await,
            Command::Mcp { command } => mcp::run(command, &db).await,
            Command::Scan(args) => scan::run(args).await,
            Command::Attach(args) => attach::run(args, &db).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Reported(code)) => ExitCode::from(code),
        Err(Failure::Error { code, error }) => {
            // The chain may quote a server or a tool: shown safely.
            output::eprint(&format!("error: {error:#}"));
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        // clap checks names, conflicts and defaults of every subcommand here.
        super::Cli::command().debug_assert();
    }
}
