//! `toolshed sandbox …`: what this host's sandbox supports, and running a tool file in
//! it the way the seed's Sandbox Test does (`run(input)` in Python; also a shell script
//! or a Node module), printing the seed's result shape. The runners are
//! `toolshed_sandbox::snippet`'s and the answer `toolshed_server::sandbox::view`, the
//! server's `POST /api/v1/tools/sandbox/execute` runs code through the same two.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::Value;
use toolshed_sandbox::snippet::{Code, Language, Snippet};
use toolshed_sandbox::{
    HostSupport, LimitsRequest, Network, Sandbox, SandboxConfig, SandboxError, Status, Weakening,
};

use crate::output::{EXIT_INTERNAL, EXIT_TOOL_ERROR, Failure, print, print_json, table};

/// `toolshed sandbox` subcommands.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Print what this host supports, mechanism by mechanism, and try a sandboxed run
    /// (exit 0 when untrusted code can run here, else 3 with the fix).
    Check,
    /// Run a tool file in the sandbox: a `.py` file defining `run(input)`, a `.js` or
    /// `.mjs` module exporting `run(input)`, or a `.sh` script (input on stdin).
    Run(RunArgs),
    /// The detached supervisor of one background run (`run_process`): runs
    /// `DIR/spec.json` in the sandbox, in a session of its own, keeping its output and
    /// status in DIR. Started by the CLI itself, not by hand.
    #[command(hide = true)]
    Supervise {
        /// The run's state folder.
        dir: PathBuf,
    },
}

/// Arguments of `toolshed sandbox run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The tool file.
    file: PathBuf,
    /// The input, as JSON.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    input: String,
    /// Give the tool outbound network access (off by default).
    #[arg(long)]
    network: bool,
    /// Wall-clock timeout in seconds (default 30).
    #[arg(long, value_name = "S")]
    timeout: Option<u64>,
    /// Memory limit in MB, swap included (default 256).
    #[arg(long, value_name = "MB")]
    memory: Option<u64>,
}

/// Run a `sandbox` subcommand.
pub async fn run(cmd: SandboxCommand, json_out: bool) -> Result<(), Failure> {
    match cmd {
        SandboxCommand::Check => check(json_out).await,
        SandboxCommand::Run(args) => run_file(args, json_out).await,
        // Handled by `main` before the runtime starts (it runs a runtime of its own).
        SandboxCommand::Supervise { .. } => Err(Failure::bad_input(anyhow!(
            "`toolshed sandbox supervise` is started by `run_process`, not by hand"
        ))),
    }
}

/// The CLI's sandbox settings: the defaults, and the operator's opt-ins from the
/// environment: `TOOLSHED_SANDBOX_ALLOW_WEAKER` (comma-separated names: `landlock`,
/// `cgroup`) and `TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI`.
pub(crate) fn config() -> Result<SandboxConfig, Failure> {
    operator_config(SandboxConfig::default())
}

/// `config` with the operator's opt-ins from the environment (also `toolshed serve`'s).
pub fn operator_config(mut config: SandboxConfig) -> Result<SandboxConfig, Failure> {
    if let Ok(names) = std::env::var("TOOLSHED_SANDBOX_ALLOW_WEAKER") {
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let w: Weakening = name.parse().map_err(|_| {
                Failure::bad_input(anyhow!(
                    "TOOLSHED_SANDBOX_ALLOW_WEAKER: `{name}` is not a protection the sandbox can run without; use landlock or cgroup"
                ))
            })?;
            config.allow_weaker.push(w);
        }
    }
    if let Ok(abi) = std::env::var("TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI") {
        config.landlock_min_abi = abi.trim().parse().map_err(|_| {
            Failure::bad_input(anyhow!(
                "TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI: `{abi}` is not a Landlock ABI number"
            ))
        })?;
    }
    Ok(config)
}

async fn check(json_out: bool) -> Result<(), Failure> {
    let report = toolshed_sandbox::check(&config()?).await;
    if json_out {
        let mut v = serde_json::to_value(&report).unwrap_or(Value::Null);
        v["ready"] = Value::Bool(report.ready());
        print_json(&v);
    } else {
        print(&check_table(&report));
    }
    match report.first_missing() {
        None => {
            if !json_out {
                print("untrusted code can run in the sandbox on this host");
            }
            Ok(())
        }
        Some(m) => {
            eprintln!(
                "error: untrusted code cannot run here: {} is missing ({}); {}",
                m.mechanism,
                m.detail,
                m.fix.as_deref().unwrap_or("see the table")
            );
            Err(Failure::Reported(EXIT_INTERNAL))
        }
    }
}

fn check_table(report: &HostSupport) -> String {
    let rows: Vec<Vec<String>> = report
        .mechanisms
        .iter()
        .map(|m| {
            let mut detail = m.detail.clone();
            if let Some(fix) = &m.fix
                && m.status != Status::Ok
            {
                detail.push_str(" — fix: ");
                detail.push_str(fix);
            }
            vec![
                m.mechanism.to_string(),
                m.status.to_string(),
                if m.required { "yes" } else { "optional" }.to_owned(),
                detail,
            ]
        })
        .collect();
    table(&["MECHANISM", "STATUS", "REQUIRED", "DETAIL"], &rows, 400)
}

async fn run_file(args: RunArgs, json_out: bool) -> Result<(), Failure> {
    let language = Language::of_path(&args.file).ok_or_else(|| {
        Failure::bad_input(anyhow!(
            "{}: the file must end in .py (defining run(input)), .js or .mjs (exporting run), or .sh",
            args.file.display()
        ))
    })?;
    let file = std::fs::canonicalize(&args.file)
        .map_err(|e| Failure::bad_input(anyhow!("cannot read {}: {e}", args.file.display())))?;
    if !file.is_file() {
        return Err(Failure::bad_input(anyhow!(
            "{} is not a file",
            args.file.display()
        )));
    }
    let input: Value = serde_json::from_str(&args.input)
        .map_err(|e| Failure::bad_input(anyhow!("--input is not JSON: {e}")))?;
    if args.timeout == Some(0) {
        return Err(Failure::bad_input(anyhow!(
            "--timeout must be at least 1 second"
        )));
    }
    if args.memory.is_some_and(|m| m < 8) {
        return Err(Failure::bad_input(anyhow!(
            "--memory must be at least 8 MB"
        )));
    }
    let snippet = Snippet::new(language, Code::File(file));
    // A missing interpreter is this host's problem, not the caller's.
    let mut spec = snippet.spec(&input).map_err(|e| Failure::Error {
        code: EXIT_INTERNAL,
        error: anyhow!("{e} [{}]", e.code()),
    })?;
    spec.limits = LimitsRequest {
        timeout_ms: args.timeout.map(|s| s.saturating_mul(1000)),
        memory_bytes: args.memory.map(|m| m.saturating_mul(1024 * 1024)),
        ..LimitsRequest::default()
    };
    spec.network = if args.network {
        Network::On
    } else {
        Network::Off
    };

    let sandbox = Sandbox::new(config()?).map_err(sandbox_failure)?;
    let outcome = sandbox
        .run(spec, snippet.stdin(&input))
        .await
        .map_err(sandbox_failure)?;
    let result = snippet.result(&outcome);
    let answer = toolshed_server::sandbox::view(&outcome, language.as_str(), &result);
    let failed = answer.error.is_some();
    let answer = serde_json::to_value(&answer).unwrap_or(Value::Null);
    if json_out {
        print_json(&answer);
    } else {
        print(&human(&answer));
    }
    if failed {
        Err(Failure::Reported(EXIT_TOOL_ERROR))
    } else {
        Ok(())
    }
}

fn sandbox_failure(e: SandboxError) -> Failure {
    use toolshed_sandbox::SandboxCode as C;
    let code = match e.code() {
        C::InvalidConfig | C::BindSourceNotFound | C::ProgramNotFound => {
            crate::output::EXIT_BAD_INPUT
        }
        _ => EXIT_INTERNAL,
    };
    Failure::Error {
        code,
        error: anyhow!("{e} [{}]", e.code()),
    }
}

fn human(v: &Value) -> String {
    let cell = |k: &str| match &v[k] {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut rows: Vec<Vec<String>> = [
        "output",
        "exit_code",
        "duration_ms",
        "timed_out",
        "error",
        "signal",
        "killed",
        "oom_killed",
        "memory_peak_bytes",
        "cpu_time_ms",
        "network_enabled",
        "host_uid",
    ]
    .iter()
    .map(|k| vec![(*k).to_owned(), cell(k)])
    .collect();
    for (k, label) in [("clamped", "clamped"), ("weakened", "weakened")] {
        if let Some(list) = v[k].as_array().filter(|l| !l.is_empty()) {
            // A clamp is an object with its sentence in `message`; a weakening a name.
            let items: Vec<String> = list
                .iter()
                .filter_map(|x| x["message"].as_str().or(x.as_str()).map(str::to_owned))
                .collect();
            rows.push(vec![label.to_owned(), items.join("; ")]);
        }
    }
    let mut text = table(&["FIELD", "VALUE"], &rows, 200);
    for (k, truncated) in [
        ("stdout", "stdout_truncated"),
        ("stderr", "stderr_truncated"),
    ] {
        let s = v[k].as_str().unwrap_or("");
        if s.is_empty() {
            continue;
        }
        text.push_str(&format!(
            "\n{k}{}:\n{}",
            if v[truncated] == true {
                " (truncated)"
            } else {
                ""
            },
            s.trim_end()
        ));
        text.push('\n');
    }
    text
}
