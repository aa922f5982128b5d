//! `toolshed sandbox …`: what this host's sandbox supports, and running a tool file in
//! it the way the seed's Sandbox Test does (`run(input)` in Python; also a shell script
//! or a Node module), printing the seed's result shape.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use toolshed_sandbox::{
    Bind, Exit, HostSupport, KillReason, LimitsRequest, Network, Outcome, RunSpec, Sandbox,
    SandboxConfig, SandboxError, Status, Weakening,
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
    }
}

/// The CLI's sandbox settings: the defaults, and the operator's opt-ins from the
/// environment: `TOOLSHED_SANDBOX_ALLOW_WEAKER` (comma-separated names: `landlock`,
/// `cgroup`) and `TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI`.
pub(crate) fn config() -> Result<SandboxConfig, Failure> {
    let mut config = SandboxConfig::default();
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

/// How a tool file is run, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    Python,
    Node,
    Shell,
}

impl Language {
    fn of(file: &Path) -> Option<Language> {
        match file.extension().and_then(|e| e.to_str()) {
            Some("py") => Some(Language::Python),
            Some("js" | "mjs") => Some(Language::Node),
            Some("sh") => Some(Language::Shell),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Node => "node",
            Language::Shell => "bash",
        }
    }
}

/// Where the runners leave the JSON-encoded result (read back with beneath-only,
/// no-symlink opens).
const RESULT_FILE: &str = ".toolshed-output.json";

/// Loads the tool file, calls `run(input)` with the JSON from stdin, and writes the
/// JSON-encoded result to the result file and stdout (as the seed's sandbox does).
const PYTHON_RUNNER: &str = r#"
import importlib.util, json, sys
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("tool", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = getattr(module, "run", None)
if not callable(run):
    sys.exit(f"{path} defines no run(input) function")
result = json.dumps(run(json.load(sys.stdin)))
with open("/work/.toolshed-output.json", "w") as f:
    f.write(result)
print(result)
"#;

/// The same for a module exporting `run` (named, or on its default export).
const NODE_RUNNER: &str = r#"
import { readFileSync, writeFileSync } from "node:fs";
const path = process.argv[1];
const mod = await import(path);
const run = typeof mod.run === "function" ? mod.run
  : typeof mod.default === "function" ? mod.default
  : typeof mod.default?.run === "function" ? mod.default.run : undefined;
if (!run) { console.error(`${path} exports no run(input) function`); process.exit(1); }
const text = readFileSync(0, "utf8");
const result = JSON.stringify((await run(text.trim() ? JSON.parse(text) : null)) ?? null);
writeFileSync("/work/.toolshed-output.json", result);
console.log(result);
"#;

fn interpreter(name: &str, package: &str) -> Result<PathBuf, Failure> {
    let p = Path::new("/usr/bin").join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(Failure::Error {
            code: EXIT_INTERNAL,
            error: anyhow!(
                "{} is not installed; the sandbox runs the one under /usr (Debian: apt-get install {package})",
                p.display()
            ),
        })
    }
}

async fn run_file(args: RunArgs, json_out: bool) -> Result<(), Failure> {
    let language = Language::of(&args.file).ok_or_else(|| {
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
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tool".into());
    let inside = format!("/tool/{name}");
    let mut spec = match language {
        Language::Python => RunSpec::new(
            interpreter("python3", "python3")?,
            ["-I", "-c", PYTHON_RUNNER, inside.as_str()],
        ),
        Language::Node => RunSpec::new(
            interpreter("node", "nodejs")?,
            [
                "--experimental-detect-module",
                "--no-warnings",
                "--input-type=module",
                "-e",
                NODE_RUNNER,
                inside.as_str(),
            ],
        ),
        Language::Shell => {
            RunSpec::new("/bin/sh", [inside.as_str()]).env("TOOLSHED_INPUT", input.to_string())
        }
    };
    spec = spec.bind(Bind::read_only(&file, &inside));
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
    if language != Language::Shell {
        spec.collect = vec![RESULT_FILE.into()];
    }

    let sandbox = Sandbox::new(config()?).map_err(sandbox_failure)?;
    let outcome = sandbox
        .run(spec, input.to_string().into_bytes())
        .await
        .map_err(sandbox_failure)?;
    let answer = answer(&outcome, language);
    let failed = !answer["error"].is_null();
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

/// The seed's result shape (`output` as the JSON-encoded string, `stdout`, `stderr`,
/// `exit_code`, `duration_ms`, `timed_out`, `error`) plus the sandbox's own fields.
fn answer(o: &Outcome, language: Language) -> Value {
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let encoded: Option<String> = match language {
        Language::Shell => Some(match serde_json::from_str::<Value>(stdout.trim()) {
            Ok(v) => v.to_string(),
            Err(_) => Value::String(stdout.clone()).to_string(),
        })
        .filter(|_| o.success()),
        _ => o
            .file(RESULT_FILE)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .filter(|_| o.success()),
    };
    let value: Value = encoded
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let error = error(o, &stderr);
    json!({
        "output": encoded,
        "stdout": stdout,
        "stderr": stderr,
        "exit_code": o.exit_code(),
        "duration_ms": o.duration.as_millis() as u64,
        "timed_out": o.timed_out,
        "error": error,
        "output_value": value,
        "language": language.name(),
        "signal": o.signal(),
        "killed": o.killed.map(|k| k.to_string()),
        "oom_killed": o.oom_killed,
        "memory_peak_bytes": o.memory_peak_bytes,
        "cpu_time_ms": o.cpu_time.map(|t| t.as_millis() as u64),
        "stdout_truncated": o.stdout_truncated,
        "stderr_truncated": o.stderr_truncated,
        "network_enabled": o.network == Network::On,
        "limits": {
            "memory_bytes": o.limits.memory_bytes,
            "timeout_ms": o.limits.timeout_ms,
            "pids": o.limits.pids,
            "cpu_millis": o.limits.cpu_millis,
        },
        "clamped": o.clamped.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "weakened": o.weakened.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "host_uid": o.host_uid,
    })
}

fn error(o: &Outcome, stderr: &str) -> Option<String> {
    if o.success() {
        return None;
    }
    Some(match (o.killed, o.exit) {
        (Some(KillReason::Timeout), _) => format!(
            "the tool ran past its timeout of {} s and was killed",
            o.limits.timeout_ms.div_ceil(1000)
        ),
        (Some(KillReason::OutputCap), _) => {
            "the tool wrote more output than the cap and was killed".into()
        }
        _ if o.oom_killed => format!(
            "the tool ran out of memory (limit {} MB) and was killed",
            o.limits.memory_bytes / (1024 * 1024)
        ),
        (_, Exit::Signal(s)) => format!("the tool was killed by signal {s}"),
        (_, Exit::Code(c)) => {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            match last {
                Some(line) => format!("the tool exited with code {c}: {}", line.trim()),
                None => format!("the tool exited with code {c}"),
            }
        }
    })
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
            let items: Vec<String> = list
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
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
