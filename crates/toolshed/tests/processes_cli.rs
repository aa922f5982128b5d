//! Background runs from the command line (`run_process` / `check_run` of an agent
//! project), each step its own `toolshed` process: a run started by one CLI process is
//! found running and then exited, with its output, by later ones; `stop_run` in another
//! process stops one (its supervisor and sandbox gone, the run `stopped`); a SIGKILLed
//! supervisor makes it `lost`; bad inputs, another agent's run id, and hostile argument
//! values that stay single literal argv elements. Real sandboxes, real processes, one
//! SQLite journal.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const AGENT: &str = r#"
name: bg-agent
builtin_tools: [run_process, check_run, stop_run]
processes:
  wait_for_go:
    description: Prints, waits until the workspace holds `go`, then exits 7.
    command: [/bin/sh, -c, "echo started; echo \"label=$1\"; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo finished; exit 7", sh, "{label}"]
    args:
      label: {type: string, description: A label to print.}
  echo_args:
    command: [/usr/bin/printf, "%s|\n", "{a}", "{b}", "{n}"]
    args:
      a: string
      b: string
      n: {type: integer, minimum: 1, maximum: 9, default: 3}
"#;

struct Env {
    dir: tempfile::TempDir,
    url: String,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/journal.db", dir.path().display());
        let env = Env { dir, url };
        env.project("agent", AGENT);
        env
    }

    fn project(&self, name: &str, yaml: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("agent.yaml"), yaml).unwrap();
        p
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(args)
            .current_dir(self.dir.path())
            .env("TOOLSHED_DATABASE_URL", &self.url)
            .env("TOOLSHED_WORKSPACES", self.dir.path().join("workspaces"))
            .env("TOOLSHED_PROCESSES", self.dir.path().join("processes"))
            .env_remove("TOOLSHED_SANDBOX_EXEC")
            .output()
            .unwrap()
    }

    /// `toolshed tools run TOOL --agent DIR --json --args ARGS`.
    fn tool(&self, agent: &str, tool: &str, args: &Value) -> Output {
        let dir = self.dir.path().join(agent);
        self.run(&[
            "tools",
            "run",
            tool,
            "--agent",
            dir.to_str().unwrap(),
            "--json",
            "--args",
            &args.to_string(),
        ])
    }

    /// Starts a background run in its own CLI process; returns (CLI run id, run id).
    fn start(&self, process: &str, args: Value) -> (String, String) {
        let o = self.tool(
            "agent",
            "run_process",
            &json!({"name": process, "args": args}),
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let v = stdout_json(&o);
        assert_eq!(v["result"]["status"], "running", "{v}");
        (
            v["run_id"].as_str().unwrap().to_owned(),
            v["result"]["run_id"].as_str().unwrap().to_owned(),
        )
    }

    /// `check_run` in a new CLI process.
    fn check(&self, agent: &str, run_id: &str) -> Output {
        self.tool(agent, "check_run", &json!({"run_id": run_id}))
    }

    fn checked(&self, run_id: &str) -> Value {
        let o = self.check("agent", run_id);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        stdout_json(&o)["result"].clone()
    }

    /// Checks (each time in a new process) until `done` holds.
    fn check_until(&self, run_id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.checked(run_id);
            if done(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {v}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn state(&self, run_id: &str) -> PathBuf {
        self.dir.path().join("processes").join(run_id)
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}

fn supervisor_pid(state: &Path) -> i32 {
    let s: Value =
        serde_json::from_slice(&std::fs::read(state.join("status.json")).unwrap()).unwrap();
    i32::try_from(s["supervisor_pid"].as_u64().unwrap()).unwrap()
}

/// SIGKILLs `pid` and waits until it is gone (a zombie counts as gone).
fn kill_and_wait(pid: i32) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the supervisor {pid} did not die"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_owned()))
        .is_some_and(|r| !r.starts_with('Z'))
}

#[test]
fn a_run_started_by_one_cli_process_is_reported_running_then_exited_by_later_ones() {
    let env = Env::new();
    let (cli_run, id) = env.start("wait_for_go", json!({"label": "first"}));
    // The starting CLI process has exited; its supervisor goes on.
    let running = env.check_until(&id, "the first output", |v| {
        v["output_tail"]
            .as_str()
            .unwrap_or("")
            .contains("label=first")
    });
    assert_eq!(running["status"], "running", "{running}");
    assert_eq!(running["exit_code"], Value::Null);
    assert_eq!(running["process"], "wait_for_go");
    assert_eq!(running["args"], json!({"label": "first"}));

    // The process sees its run's workspace (read-only), kept although that run has
    // completed; `go` there lets it finish.
    std::fs::write(
        env.dir.path().join("workspaces").join(&cli_run).join("go"),
        "",
    )
    .unwrap();
    let exited = env.check_until(&id, "the run to exit", |v| v["status"] != "running");
    assert_eq!(exited["status"], "exited", "{exited}");
    assert_eq!(exited["exit_code"], 7);
    let tail = exited["output_tail"].as_str().unwrap();
    assert!(
        tail.contains("started") && tail.contains("finished"),
        "{tail:?}"
    );
    assert_eq!(exited["output_truncated"], false);
    assert!(exited["ended_at_ms"].as_i64().unwrap() >= exited["started_at_ms"].as_i64().unwrap());
    // Now that no background run sees it, a prune deletes the ended run's workspace.
    let o = env.run(&["runs", "prune", "--older-than", "1d", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout_json(&o)["workspaces"], 1);
    assert!(!env.dir.path().join("workspaces").join(&cli_run).exists());

    // A final status stays as it is, and the tail can be asked for shorter.
    let o = env.tool(
        "agent",
        "check_run",
        &json!({"run_id": id, "tail_bytes": 9}),
    );
    let short = stdout_json(&o)["result"].clone();
    assert_eq!(short["status"], "exited");
    assert_eq!(short["output_tail"], "finished\n");
    assert_eq!(short["output_truncated"], true);

    // Pruning the run that started it removes the ended background run's record and
    // its state folder; `check_run` then says it does not know the id.
    assert!(env.state(&id).is_dir());
    let o = env.run(&["runs", "prune", "--older-than", "0s", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let pruned = stdout_json(&o);
    assert_eq!(pruned["process_runs"], 1, "{pruned}");
    assert_eq!(pruned["process_folders"], 1, "{pruned}");
    assert!(!env.state(&id).exists());
    let o = env.check("agent", &id);
    let gone = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        gone.contains(&format!("no background run `{id}` of this agent")),
        "{gone}"
    );
}

/// The only entry of `dir`, once there is one.
fn only_entry(dir: &Path, what: &str) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(rd) = std::fs::read_dir(dir) {
            let entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            assert!(entries.len() <= 1, "{entries:?}");
            if let Some(e) = entries.into_iter().next() {
                return e;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_run_whose_starting_cli_is_sigkilled_is_still_found_running_then_exited() {
    let env = Env::new();
    let agent = env.dir.path().join("agent");
    let mut cli = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args([
            "tools",
            "run",
            "run_process",
            "--agent",
            agent.to_str().unwrap(),
            "--json",
        ])
        .args([
            "--args",
            &json!({"name": "wait_for_go", "args": {"label": "orphan"}}).to_string(),
        ])
        .current_dir(env.dir.path())
        .env("TOOLSHED_DATABASE_URL", &env.url)
        .env("TOOLSHED_WORKSPACES", env.dir.path().join("workspaces"))
        .env("TOOLSHED_PROCESSES", env.dir.path().join("processes"))
        .env_remove("TOOLSHED_SANDBOX_EXEC")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // SIGKILL the CLI as soon as the supervisor says the sandbox runs: the CLI may or may
    // not have recorded that yet; either way the run must be found.
    let state = only_entry(&env.dir.path().join("processes"), "the run's state folder");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !state.join("status.json").exists() {
        assert!(
            Instant::now() < deadline,
            "the supervisor never wrote its status"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    cli.kill().unwrap();
    cli.wait().unwrap();
    let id = state.file_name().unwrap().to_str().unwrap().to_owned();
    let running = env.check_until(&id, "the orphan's output", |v| {
        v["output_tail"]
            .as_str()
            .unwrap_or("")
            .contains("label=orphan")
    });
    assert_eq!(running["status"], "running", "{running}");
    let workspace = only_entry(&env.dir.path().join("workspaces"), "the run's workspace");
    std::fs::write(workspace.join("go"), "").unwrap();
    let exited = env.check_until(&id, "the run to exit", |v| v["status"] != "running");
    assert_eq!(exited["status"], "exited", "{exited}");
    assert_eq!(exited["exit_code"], 7);
}

#[test]
fn stop_run_in_another_process_kills_the_sandbox_and_the_run_reports_stopped() {
    let env = Env::new();
    let (_, id) = env.start("wait_for_go", json!({"label": "stoppable"}));
    env.check_until(&id, "its first output", |v| {
        v["output_tail"]
            .as_str()
            .unwrap_or("")
            .contains("label=stoppable")
    });
    let state = env.state(&id);
    let supervisor = supervisor_pid(&state);
    let status: Value =
        serde_json::from_slice(&std::fs::read(state.join("status.json")).unwrap()).unwrap();
    let sandbox = i32::try_from(status["sandbox_pid"].as_i64().unwrap()).unwrap();
    assert!(alive(supervisor) && alive(sandbox));

    // Stopped from a CLI process of its own (not the one that started it).
    let o = env.tool("agent", "stop_run", &json!({"run_id": id}));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let stopped = stdout_json(&o)["result"].clone();
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    assert!(
        stopped["message"].as_str().unwrap().contains("stop_run"),
        "{stopped}"
    );
    let tail = stopped["output_tail"].as_str().unwrap();
    assert!(
        tail.contains("started") && !tail.contains("finished"),
        "{tail:?}"
    );
    assert!(stopped["ended_at_ms"].is_i64(), "{stopped}");
    // Its sandbox is dead, and its supervisor exits.
    assert!(!alive(sandbox), "the sandbox {sandbox} outlived the stop");
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(supervisor) {
        assert!(
            Instant::now() < deadline,
            "the supervisor {supervisor} did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Recorded: later checks and a second stop report the same.
    assert_eq!(env.checked(&id)["status"], "stopped");
    let o = env.tool("agent", "stop_run", &json!({"run_id": id}));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout_json(&o)["result"]["status"], "stopped");
    // A run that ended by itself is not changed by a stop.
    let (_, done) = env.start("echo_args", json!({"a": "x", "b": "y"}));
    env.check_until(&done, "the run to exit", |v| v["status"] != "running");
    let o = env.tool("agent", "stop_run", &json!({"run_id": done}));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout_json(&o)["result"]["status"], "exited");
    // An id that is not one of this agent's runs is refused like an unknown one.
    for bad in ["proc_nope", "proc_0123456789abcdef0123456789abcdef"] {
        let o = env.tool("agent", "stop_run", &json!({"run_id": bad}));
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("no background run"),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

#[test]
fn a_sigkilled_supervisor_makes_the_run_lost_with_a_clear_message() {
    let env = Env::new();
    let (_, id) = env.start("wait_for_go", json!({"label": "doomed"}));
    let state = env.state(&id);
    let pid = supervisor_pid(&state);
    assert!(alive(pid));
    kill_and_wait(pid);
    let lost = env.checked(&id);
    assert_eq!(lost["status"], "lost", "{lost}");
    let message = lost["message"].as_str().unwrap();
    assert!(
        message.contains("supervisor") && message.contains("run_process"),
        "{message}"
    );
    // It is recorded: the next check says the same without looking again.
    assert_eq!(env.checked(&id)["status"], "lost");
}

/// Sets the machine a background run is recorded on, as another machine sharing the
/// database (or this one in an earlier boot) would have recorded it.
fn record_machine(env: &Env, id: &str, host: &str, boot_id: &str) {
    let db = rusqlite::Connection::open(env.dir.path().join("journal.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE process_runs SET host = ?1, boot_id = ?2 WHERE id = ?3",
            (host, boot_id, id),
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[test]
fn a_run_on_another_machine_is_never_judged_here_and_a_restart_makes_it_lost() {
    let env = Env::new();
    let (_, id) = env.start("wait_for_go", json!({"label": "far"}));
    let this_host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(env.checked(&id)["host"], this_host.trim());
    let state = env.state(&id);
    let pid = supervisor_pid(&state);
    // Recorded by another machine sharing the journal: its supervisor's pid means
    // nothing here, so even with that pid dead here the run is not called lost.
    record_machine(&env, &id, "another-machine", "its-boot");
    kill_and_wait(pid);
    let far = env.checked(&id);
    assert_eq!(far["status"], "running", "{far}");
    assert_eq!(far["host"], "another-machine", "{far}");
    assert!(
        far["message"]
            .as_str()
            .unwrap()
            .contains("runs on host `another-machine`"),
        "{far}"
    );
    let o = env.tool("agent", "stop_run", &json!({"run_id": id}));
    let refused = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        refused.contains("only toolshed on that machine can stop it"),
        "{refused}"
    );
    // This machine, but a boot before the current one: the supervisor is gone.
    record_machine(&env, &id, this_host.trim(), "an-earlier-boot");
    let lost = env.checked(&id);
    assert_eq!(lost["status"], "lost", "{lost}");
    assert!(
        lost["message"].as_str().unwrap().contains("restarted"),
        "{lost}"
    );
}

#[test]
fn hostile_argument_values_stay_single_literal_argv_elements() {
    let env = Env::new();
    let a = "$(id)";
    let b = "; rm -rf / `touch /tmp/pwned` && echo \"x\" *";
    let (_, id) = env.start("echo_args", json!({"a": a, "b": b}));
    let done = env.check_until(&id, "the run to exit", |v| v["status"] != "running");
    assert_eq!(done["status"], "exited", "{done}");
    assert_eq!(done["exit_code"], 0);
    // printf prints each argv element it was given, whole; the default of `n` too.
    assert_eq!(done["output_tail"], format!("{a}|\n{b}|\n3|\n"));
    assert_eq!(done["args"], json!({"a": a, "b": b, "n": 3}));
}

#[test]
fn bad_inputs_are_clear_errors_and_another_agents_run_is_unknown() {
    let env = Env::new();
    // An unknown process name.
    let o = env.tool("agent", "run_process", &json!({"name": "rm_everything"}));
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let v = stdout_json(&o);
    assert_eq!(v["error"]["code"], "INVALID_ARGS", "{v}");
    // A wrong argument type, a missing argument and an unknown one.
    for (args, field) in [
        (json!({"a": 5, "b": "x"}), "/args/a"),
        (json!({"a": "x"}), "/args"),
        (json!({"a": "x", "b": "y", "c": "z"}), "/args"),
        (json!({"a": "x", "b": "y", "n": 99}), "/args/n"),
    ] {
        let o = env.tool(
            "agent",
            "run_process",
            &json!({"name": "echo_args", "args": args}),
        );
        assert_eq!(code(&o), 2, "{args}: {}", stderr(&o));
        let v = stdout_json(&o);
        assert_eq!(v["error"]["code"], "INVALID_ARGS", "{v}");
        assert!(v["error"].to_string().contains(field), "{args}: {v}");
    }
    // Unknown and malformed run ids.
    for id in [
        "proc_00000000000000000000000000000000",
        "../../etc/passwd",
        "",
    ] {
        let o = env.check("agent", id);
        assert_eq!(code(&o), 2, "{id}: {}", stderr(&o));
        assert_eq!(stdout_json(&o)["error"]["code"], "INVALID_ARGS");
    }
    // Another agent (same tenant, same journal) cannot see this agent's run.
    let (_, id) = env.start("echo_args", json!({"a": "x", "b": "y"}));
    env.project("other", "name: other-agent\nbuiltin_tools: [check_run]\n");
    let o = env.check("other", &id);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let v = stdout_json(&o);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no background run"),
        "{v}"
    );
    assert_eq!(env.checked(&id)["run_id"], id.as_str());
}

#[test]
fn run_process_without_processes_and_bad_process_definitions_are_start_up_errors() {
    let env = Env::new();
    let dir = env.project("bare", "name: bare\nbuiltin_tools: [run_process]\n");
    let o = env.run(&["agent", "validate", dir.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`run_process` needs `processes:`"),
        "{}",
        stderr(&o)
    );

    let dir = env.project(
        "shell",
        "name: shell\nbuiltin_tools: [run_process]\nprocesses:\n  p:\n    command: \"sh -c {x}\"\n",
    );
    let o = env.run(&["agent", "validate", dir.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("processes.p.command`: must be a list (argv), not a shell string"),
        "{}",
        stderr(&o)
    );
}
