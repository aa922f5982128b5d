//! `toolshed-sandbox-exec`: runs one command in the sandbox, as a whole process (the
//! benchmark's subject, and the supervisor the tests SIGKILL).
//!
//! ```text
//! toolshed-sandbox-exec [--network] [--timeout-ms N] [--memory-mb N]
//!                       [--bind SRC:DST] [--hold] -- PROGRAM [ARGS…]
//! toolshed-sandbox-exec --supervise STATE_DIR
//! ```
//!
//! stdin is passed to the command; its stdout and stderr are written out as they were
//! kept; the exit code is the command's (128 + signal when a signal ended it, 124 when it
//! timed out, 125 when the sandbox could not run it). With `--hold` the command is
//! started as a long-lived child: `sandbox-pid PID` is printed on stderr and the
//! supervisor waits for it without a deadline.
//!
//! With `--supervise STATE_DIR` it is the detached supervisor of one background run
//! (`toolshed_sandbox::detached`): it runs `STATE_DIR/spec.json` and keeps its output
//! and status in that folder, in a session of its own.

use std::io::{Read, Write};
use std::process::ExitCode;

use toolshed_sandbox::{Bind, Exit, LimitsRequest, Network, RunSpec, Sandbox, SandboxConfig};

fn usage(problem: &str) -> ExitCode {
    eprintln!(
        "toolshed-sandbox-exec: {problem}\nusage: toolshed-sandbox-exec [--network] [--timeout-ms N] [--memory-mb N] [--bind SRC:DST] [--hold] -- PROGRAM [ARGS…]\n       toolshed-sandbox-exec --supervise STATE_DIR"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "--supervise")
    {
        return match std::env::args_os().nth(2) {
            Some(dir) => toolshed_sandbox::detached::supervise(std::path::Path::new(&dir)),
            None => usage("--supervise needs the state folder"),
        };
    }
    let mut spec = RunSpec::default();
    let mut limits = LimitsRequest::default();
    let mut hold = false;
    let mut command = Vec::new();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            return usage("arguments before `--` must be UTF-8");
        };
        let mut value = |name: &str| -> Result<u64, ExitCode> {
            args.next()
                .and_then(|v| v.to_str().and_then(|v| v.parse().ok()))
                .ok_or_else(|| usage(&format!("{name} needs a number")))
        };
        match text {
            "--network" => spec.network = Network::On,
            "--hold" => hold = true,
            "--timeout-ms" => match value("--timeout-ms") {
                Ok(v) => limits.timeout_ms = Some(v),
                Err(e) => return e,
            },
            "--memory-mb" => match value("--memory-mb") {
                Ok(v) => limits.memory_bytes = Some(v * 1024 * 1024),
                Err(e) => return e,
            },
            "--bind" => {
                let Some((src, dst)) = args
                    .next()
                    .and_then(|v| v.to_str().map(str::to_owned))
                    .and_then(|v| v.split_once(':').map(|(a, b)| (a.to_owned(), b.to_owned())))
                else {
                    return usage("--bind needs SRC:DST");
                };
                spec.binds.push(Bind::read_only(src, dst));
            }
            "--" => {
                command.extend(args.by_ref());
                break;
            }
            other => return usage(&format!("unknown option {other}")),
        }
    }
    let mut command = command.into_iter();
    let Some(program) = command.next() else {
        return usage("no command given");
    };
    spec.program = program;
    spec.args = command.collect();
    spec.limits = limits;

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolshed-sandbox-exec: cannot start the runtime: {e}");
            return ExitCode::from(125);
        }
    };
    runtime.block_on(async move {
        let sandbox = match Sandbox::new(SandboxConfig::default()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("toolshed-sandbox-exec: {e} [{}]", e.code());
                return ExitCode::from(125);
            }
        };
        if hold {
            let mut child = match sandbox.spawn(spec).await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("toolshed-sandbox-exec: {e} [{}]", e.code());
                    return ExitCode::from(125);
                }
            };
            eprintln!("sandbox-pid {}", child.id());
            let report = child.wait().await;
            return code(report.exit, false);
        }
        let mut input = Vec::new();
        if let Err(e) = std::io::stdin().read_to_end(&mut input) {
            eprintln!("toolshed-sandbox-exec: cannot read stdin: {e}");
            return ExitCode::from(125);
        }
        match sandbox.run(spec, input).await {
            Ok(o) => {
                let _ = std::io::stdout().write_all(&o.stdout);
                let _ = std::io::stderr().write_all(&o.stderr);
                code(o.exit, o.timed_out)
            }
            Err(e) => {
                eprintln!("toolshed-sandbox-exec: {e} [{}]", e.code());
                ExitCode::from(125)
            }
        }
    })
}

fn code(exit: Exit, timed_out: bool) -> ExitCode {
    if timed_out {
        return ExitCode::from(124);
    }
    match exit {
        Exit::Code(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        Exit::Signal(s) => ExitCode::from(u8::try_from(128 + s).unwrap_or(255)),
    }
}
