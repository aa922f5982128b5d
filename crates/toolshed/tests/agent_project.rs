//! An agent project used from the CLI run in its folder, as a new user works: the
//! fixture `tests/fixtures/agent_project` (a Python tool, a bread TS tool, a Toren TS
//! tool, inline tools, two built-ins, `sandbox: true`, an approval-gated tool) listed,
//! shown, exported, run and planned with no `--agent`; a keyed call cut off by SIGKILL
//! of the CLI and resumed under the same key; a gated call parked, approved and
//! resumed, and the Toren tool's approval predicate parking a large call until it is
//! approved and resumed, all from the CLI; a changed tool file makes the resume refuse,
//! naming the tool and the file, until `--accept-changes`, which records the accepted
//! revisions so a later resume is not asked again; the declared env reaches Python and
//! Node tools as `ctx.env` and never as their process env; and a broken agent.yaml in
//! the working folder is an error naming the file, which `--no-agent` gets past.
//!
//! Every command is its own process of the real `toolshed` binary, over a real SQLite
//! journal, its tools running in the real sandbox.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The tools of the fixture, sorted. Add a tool to the fixture: add its name here.
const FIXTURE_TOOLS: &[&str] = &[
    "bash",
    "edit_file",
    "env_probe",
    "env_probe_js",
    "fetch_report",
    "get_current_time",
    "list_files",
    "markdown_writer",
    "order_lookup",
    "read_file",
    "refund_order",
    "search_files",
    "ship_order",
    "web_search",
    "write_file",
];

/// The credential the bread tool `web_search` declares, set in the CLI's environment
/// (the CLI's credential provider); the tool reports only its length.
const SEARCH_API_KEY: &str = "sk-search-0123456789";

/// A copy of the fixture project in a temp folder (so a test may change its files),
/// also the working folder of the commands and the home of their journal.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_project");
        copy_dir(&fixture, dir.path());
        Project { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        let path = self.path();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolshed"));
        cmd.args(args)
            .current_dir(path)
            .env(
                "TOOLSHED_DATABASE_URL",
                format!("sqlite://{}/journal.db", path.display()),
            )
            .env("TOOLSHED_CONFIG_DIR", path.join("config"))
            .env("TOOLSHED_OUTPUT_DIR", path.join("output"))
            .env("TOOLSHED_USER", "tester")
            // The agent declares ORDER_API_BASE; the other is the CLI's own and must
            // not reach any tool.
            .env("ORDER_API_BASE", "https://orders.example.test")
            .env("SEARCH_API_KEY", SEARCH_API_KEY)
            .env("TOOLSHED_TEST_UNDECLARED", "must-not-leak")
            // toolshed's Node helper package (zod 4), as scripts/test installs it.
            .env(
                "TOOLSHED_NODE_DEPS",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-dispatch/node"),
            )
            .env_remove("TOOLSHED_URL")
            .env_remove("TOOLSHED_API_TOKEN")
            .env_remove("TOOLSHED_MCP_UNSANDBOXED");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path().join(name), text).unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            stdout(o),
            stderr(o)
        )
    })
}

/// Wait until `done` holds, asking again every 50 ms for at most a minute.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_working_folders_project_is_listed_shown_exported_run_and_planned() {
    let p = Project::new();
    // Listed with no --agent: the agent's whole toolset, each from where it came.
    let o = p.run(&["tools", "list", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let listed = json_of(&o);
    let mut names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, FIXTURE_TOOLS);
    // The CLI's own example tools are not the agent's.
    assert!(!names.contains(&"transfer_funds"), "{names:?}");

    // Shown: the inline definition's policy over the file's code.
    let o = p.run(&["tools", "show", "refund_order", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let shown = json_of(&o);
    assert_eq!(shown["approval"], "always", "{shown}");
    assert_eq!(shown["idempotency"], "keyed", "{shown}");
    let o = p.run(&["tools", "show", "order_lookup", "--format", "anthropic"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let anthropic = json_of(&o);
    assert_eq!(anthropic["name"], "order_lookup");
    assert_eq!(
        anthropic["input_schema"]["required"],
        json!(["order_id"]),
        "{anthropic}"
    );

    // Exported: the agent's tools, not the CLI's.
    let o = p.run(&["tools", "export", "--format", "openai"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let exported = json_of(&o);
    let mut exported: Vec<&str> = exported
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    exported.sort_unstable();
    assert_eq!(exported, FIXTURE_TOOLS);

    // Run: the Python tool, as a run of the agent that records the project.
    let o = p.run(&[
        "tools",
        "run",
        "order_lookup",
        "--json",
        "--args",
        r#"{"order_id": "ORD-000042", "include_tracking": true}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let ran = json_of(&o);
    assert_eq!(ran["result"]["order_id"], "ORD-000042", "{ran}");
    assert_eq!(ran["result"]["tracking"], "1Z999AA10123456784", "{ran}");
    let run_id = ran["run_id"].as_str().unwrap().to_owned();
    let o = p.run(&["runs", "show", &run_id, "--json"]);
    let run = json_of(&o)["run"].clone();
    assert_eq!(run["agent_id"], "support-agent");
    let project = &run["driver"]["agent_project"];
    assert_eq!(
        project["dir"],
        p.path().canonicalize().unwrap().display().to_string()
    );
    assert_eq!(project["agent"], "support-agent");
    let lookup = &project["tools"]["order_lookup"];
    assert_eq!(lookup["origin"], "tools/order_lookup.py", "{project}");
    let file_hash = lookup["files"]["tools/order_lookup.py"].as_str().unwrap();
    assert!(file_hash.starts_with("sha256:"), "{lookup}");
    // The inline tool's revision covers the file that is its code.
    assert!(
        project["tools"]["refund_order"]["files"]["tools/refund_order.py"].is_string(),
        "{project}"
    );
    // `runs show` prints the project and the revisions.
    let o = p.run(&["runs", "show", &run_id]);
    let text = stdout(&o);
    assert!(text.contains("(agent support-agent)"), "{text}");
    assert!(
        text.contains(&format!("tools/order_lookup.py {file_hash}")),
        "{text}"
    );

    // A built-in of the agent runs too.
    let o = p.run(&["tools", "run", "get_current_time", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // The bread and Toren TS files, loaded as their manuals write them: specs mapped.
    let o = p.run(&["tools", "show", "web_search", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let bread = json_of(&o);
    assert_eq!(bread["credentials"], json!(["SEARCH_API_KEY"]), "{bread}");
    assert_eq!(bread["retry"]["attempts"], 2, "{bread}");
    let o = p.run(&["tools", "show", "fetch_report", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let toren = json_of(&o);
    assert_eq!(toren["effects"], "external", "{toren}");
    assert_eq!(toren["idempotency"], "keyed", "{toren}");
    assert_eq!(toren["max_attempts"], 2, "{toren}");
    // Run: the bread tool reads its credential through the allowlist (the CLI's
    // environment), and its onError hook turns a failing search into empty results.
    let o = p.run(&[
        "tools",
        "run",
        "web_search",
        "--json",
        "--args",
        r#"{"query": "order status", "limit": 2}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let found = json_of(&o);
    let results = found["result"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{found}");
    assert_eq!(
        results[0]["title"],
        format!("order status #1 (key {} chars)", SEARCH_API_KEY.len()),
        "{found}"
    );
    let o = p.run(&[
        "tools",
        "run",
        "web_search",
        "--json",
        "--args",
        r#"{"query": "fail"}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_of(&o)["result"], json!([]), "{}", stdout(&o));
    // The Toren tool: a small report passes its approval predicate and runs at once,
    // under the call's idempotency key.
    let o = p.run(&[
        "tools",
        "run",
        "fetch_report",
        "--json",
        "--args",
        r#"{"report": "q1", "amount": 5}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let ran = json_of(&o);
    let report: Value = serde_json::from_str(ran["result"].as_str().unwrap()).unwrap();
    assert_eq!(report["amount"], 5, "{ran}");
    assert_eq!(
        report["idempotency_key"],
        format!("{}:0", ran["run_id"].as_str().unwrap()),
        "{ran}"
    );

    // Planned: the agent's own tools, its built-ins and its workspace, one run.
    p.write(
        "plan.json",
        r##"[
            {"tool": "order_lookup", "args": {"order_id": "ORD-000001"}},
            {"parallel": [
                {"tool": "get_current_time", "args": {}},
                {"tool": "markdown_writer", "args": {"filename": "note.md", "content": "# shipped"}},
                {"tool": "web_search", "args": {"query": "carrier", "limit": 1}},
                {"tool": "fetch_report", "args": {"report": "q3", "amount": 50}}
            ]},
            {"tool": "write_file", "args": {"path": "notes.md", "content": "shipped"}},
            {"tool": "bash", "args": {"command": "cat notes.md"}}
        ]"##,
    );
    let o = p.run(&["runs", "start", "--plan", "plan.json", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let planned = json_of(&o);
    assert_eq!(planned["status"], "completed", "{planned}");
    let calls = planned["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 7, "{planned}");
    assert!(calls.iter().all(|c| c["ok"] == true), "{planned}");
    assert_eq!(calls[0]["result"]["order_id"], "ORD-000001");
    assert_eq!(
        calls[3]["result"][0]["url"],
        "https://example.com/carrier/1"
    );
    assert!(
        calls[4]["result"]
            .as_str()
            .unwrap()
            .contains(r#""report":"q3""#),
        "{planned}"
    );
    assert_eq!(calls[6]["result"]["stdout"], "shipped", "{planned}");
    // The run completed: the workspace it wrote is deleted.
    let run_id = planned["run_id"].as_str().unwrap();
    assert!(!p.path().join(".toolshed/workspaces").join(run_id).exists());
    // A plan naming a tool the agent lacks is refused before any run, with the
    // nearest name; the CLI's own tools are not the agent's.
    p.write(
        "bad_plan.json",
        r#"[{"tool": "order_lookpu", "args": {}}, {"tool": "transfer_funds", "args": {}}]"#,
    );
    let o = p.run(&["runs", "start", "--plan", "bad_plan.json"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("order_lookup"), "{}", stderr(&o));
}

#[test]
fn another_folder_is_picked_with_agent_dir_and_the_cli_tools_with_no_agent() {
    let p = Project::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let dir = p.path().display().to_string();
    let mut cmd = p.command(&["tools", "list", "--json", "--agent", &dir]);
    let o = cmd.current_dir(elsewhere.path()).output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_of(&o).as_array().unwrap().len(), FIXTURE_TOOLS.len());
    // Without a project the CLI works as it did: its own tools.
    let mut cmd = p.command(&["tools", "list", "--json"]);
    let o = cmd.current_dir(elsewhere.path()).output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let names: Vec<String> = json_of(&o)
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.iter().any(|n| n == "transfer_funds"), "{names:?}");
    // --no-agent in the project's folder: the CLI's own tools too.
    let o = p.run(&["tools", "list", "--json", "--no-agent"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("transfer_funds"));
    // --agent and --no-agent contradict each other.
    let o = p.run(&["tools", "list", "--no-agent", "--agent", "."]);
    assert_eq!(code(&o), 2);
}

#[test]
fn a_broken_agent_yaml_in_the_working_folder_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(args)
            .current_dir(dir.path())
            .env(
                "TOOLSHED_DATABASE_URL",
                format!("sqlite://{}/journal.db", dir.path().display()),
            )
            .env("TOOLSHED_CONFIG_DIR", dir.path().join("config"))
            .env_remove("TOOLSHED_URL")
            .output()
            .unwrap()
    };
    for (text, problem) in [
        ("name: [not, a, name\n", "agent.yaml"),
        ("name: a\ntools: 7\n", "tools"),
        (
            "name: a\ntools:\n  - ref: tools/nowhere\n",
            "ref tools/nowhere: not found",
        ),
    ] {
        std::fs::write(dir.path().join("agent.yaml"), text).unwrap();
        for args in [
            &["tools", "list"][..],
            &["tools", "run", "roll_dice", "--args", "{}"],
            &["tools", "export"],
        ] {
            let o = run(args);
            assert_eq!(code(&o), 2, "{args:?} {text}: {}", stderr(&o));
            let e = stderr(&o);
            assert!(e.contains("./agent.yaml"), "{args:?} {text}: {e}");
            assert!(e.contains(problem), "{args:?} {text}: {e}");
            assert!(e.contains("--no-agent"), "{args:?} {text}: {e}");
        }
        let o = run(&["tools", "run", "get_current_time", "--no-agent"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    // An agent.yaml that is a dangling link is reported, not skipped.
    std::fs::remove_file(dir.path().join("agent.yaml")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone.yaml"), dir.path().join("agent.yaml"))
        .unwrap();
    let o = run(&["tools", "list"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("agent.yaml"), "{}", stderr(&o));
}

#[test]
fn the_declared_env_reaches_python_and_node_tools_as_ctx_env_only() {
    let p = Project::new();
    for tool in ["env_probe", "env_probe_js"] {
        let o = p.run(&["tools", "run", tool, "--json"]);
        assert_eq!(code(&o), 0, "{tool}: {}", stderr(&o));
        let result = &json_of(&o)["result"];
        assert_eq!(
            result["ctx_env"],
            json!({"ORDER_API_BASE": "https://orders.example.test"}),
            "{tool}: {result}"
        );
        let environ = result["environ"].as_object().unwrap();
        assert!(
            !environ.contains_key("TOOLSHED_TEST_UNDECLARED"),
            "{tool}: the CLI's undeclared variable leaked: {result}"
        );
        assert!(
            !environ.contains_key("ORDER_API_BASE"),
            "{tool}: the declared value must be ctx.env, not process env: {result}"
        );
        // Nor the CLI's own settings (TOOLSHED_SYS_PATH is the runner's, set by us).
        for name in [
            "TOOLSHED_DATABASE_URL",
            "TOOLSHED_CONFIG_DIR",
            "TOOLSHED_OUTPUT_DIR",
            "TOOLSHED_USER",
        ] {
            assert!(
                !environ.contains_key(name),
                "{tool}: {name} leaked: {result}"
            );
        }
        assert!(
            !environ
                .values()
                .any(|v| v.as_str() == Some("must-not-leak")),
            "{tool}: {result}"
        );
    }
    // A declared variable missing at start-up stops the agent, naming it.
    let o = p
        .command(&["tools", "list"])
        .env_remove("ORDER_API_BASE")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("ORDER_API_BASE"), "{}", stderr(&o));
}

#[test]
fn a_keyed_call_cut_off_by_sigkill_is_resumed_under_the_same_key() {
    let p = Project::new();
    p.write("hold", "");
    let mut child = p
        .command(&[
            "tools",
            "run",
            "ship_order",
            "--json",
            "--args",
            r#"{"order_id": "ORD-000007"}"#,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The call is recorded as started (durably, before its handler runs) and holds.
    let mut run_id = String::new();
    wait_until("the keyed call to be started", || {
        let o = p.run(&["runs", "list", "--json", "--status", "running"]);
        let Some(id) = serde_json::from_slice::<Value>(&o.stdout)
            .ok()
            .and_then(|v| v[0]["id"].as_str().map(str::to_owned))
        else {
            return false;
        };
        let shown: Value = serde_json::from_slice(&p.run(&["runs", "show", &id, "--json"]).stdout)
            .unwrap_or(Value::Null);
        run_id = id;
        shown["calls"][0]["status"] == "started"
    });
    child.kill().unwrap(); // SIGKILL: nothing of the CLI runs after this
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    std::fs::remove_file(p.path().join("hold")).unwrap();

    // Resumed with no flags: the recorded project, the call run again under its key.
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let done = json_of(&o);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["calls"][0]["result"]["shipped"], true, "{done}");
    assert_eq!(
        done["calls"][0]["result"]["idempotency_key"],
        json!(format!("{run_id}:0")),
        "{done}"
    );
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(shown["calls"][0]["attempts"], 2, "{shown}");
    assert_eq!(shown["calls"][0]["status"], "completed", "{shown}");
}

#[test]
fn a_gated_call_is_parked_approved_and_resumed_and_a_changed_file_is_refused() {
    let p = Project::new();
    let park = || {
        let o = p.run(&[
            "tools",
            "run",
            "refund_order",
            "--json",
            "--args",
            r#"{"order_id": "ORD-000009", "amount": 12.5}"#,
        ]);
        assert_eq!(code(&o), 4, "{}", stderr(&o));
        let parked = json_of(&o);
        assert_eq!(parked["status"], "parked", "{parked}");
        (
            parked["run_id"].as_str().unwrap().to_owned(),
            parked["waiting_for"][0]["call_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        )
    };

    // Parked, approved in another process, resumed in a third: the refund runs.
    let (run_id, call_id) = park();
    let o = p.run(&["approvals", "list", "--json"]);
    assert!(stdout(&o).contains(&call_id), "{}", stdout(&o));
    let o = p.run(&[
        "approvals",
        "approve",
        &call_id,
        "--reason",
        "receipt checked",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let done = json_of(&o);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["calls"][0]["result"]["refunded"], 12.5, "{done}");

    // Parked and approved again, then the tool's code changes: the resume refuses,
    // naming the tool and the file, and nothing runs.
    let (run_id, call_id) = park();
    let o = p.run(&["approvals", "approve", &call_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let code_file = p.path().join("tools/refund_order.py");
    let original = std::fs::read_to_string(&code_file).unwrap();
    std::fs::write(
        &code_file,
        original.replace("\"refunded\": amount", "\"refunded\": amount * 2"),
    )
    .unwrap();
    let o = p.run(&["runs", "resume", &run_id]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("[AGENT_PROJECT_CHANGED]"), "{e}");
    assert!(e.contains("tool `refund_order`"), "{e}");
    assert!(e.contains("tools/refund_order.py sha256:"), "{e}");
    assert!(e.contains("--accept-changes"), "{e}");
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(shown["run"]["status"], "parked", "{shown}");
    assert!(shown["calls"][0]["result"].is_null(), "{shown}");
    // The same with --agent naming the folder.
    let dir = p.path().display().to_string();
    let o = p.run(&["runs", "resume", &run_id, "--agent", &dir]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("[AGENT_PROJECT_CHANGED]"));

    // Restored, the resume goes on as recorded.
    std::fs::write(&code_file, &original).unwrap();
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_of(&o)["calls"][0]["result"]["refunded"], 12.5);

    // Changed again on a third parked run: --accept-changes runs the new code and
    // says what it accepted.
    let (run_id, call_id) = park();
    let o = p.run(&["approvals", "approve", &call_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    std::fs::write(
        &code_file,
        original.replace("\"refunded\": amount", "\"refunded\": amount * 2"),
    )
    .unwrap();
    let o = p.run(&["runs", "resume", &run_id, "--json", "--accept-changes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_of(&o)["calls"][0]["result"]["refunded"], 25.0);
    assert!(stderr(&o).contains("tool `refund_order`"), "{}", stderr(&o));

    // Accepted changes are recorded: a run that parks again after a resume with
    // --accept-changes is resumed later without the flag, and is not asked again.
    std::fs::write(&code_file, &original).unwrap();
    p.write(
        "two_refunds.json",
        r#"[
            {"tool": "refund_order", "args": {"order_id": "ORD-000011", "amount": 1}},
            {"tool": "refund_order", "args": {"order_id": "ORD-000012", "amount": 2}}
        ]"#,
    );
    let o = p.run(&["runs", "start", "--plan", "two_refunds.json", "--json"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = json_of(&o);
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let first = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let o = p.run(&["approvals", "approve", &first]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let recorded_hash = |p: &Project| {
        let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
        shown["run"]["driver"]["agent_project"]["tools"]["refund_order"]["files"]
            ["tools/refund_order.py"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = recorded_hash(&p);
    std::fs::write(
        &code_file,
        original.replace("\"refunded\": amount", "\"refunded\": amount * 3"),
    )
    .unwrap();
    let o = p.run(&["runs", "resume", &run_id, "--json", "--accept-changes"]);
    assert_eq!(code(&o), 4, "the second refund parks: {}", stderr(&o));
    let parked = json_of(&o);
    let second = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let after = recorded_hash(&p);
    assert_ne!(before, after, "the accepted revision is recorded");
    let o = p.run(&["approvals", "approve", &second]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "not asked again: {}", stderr(&o));
    let done = json_of(&o);
    assert_eq!(done["calls"][0]["result"]["refunded"], 3.0, "{done}");
    assert_eq!(done["calls"][1]["result"]["refunded"], 6.0, "{done}");
}

#[test]
fn a_change_to_a_tool_the_run_no_longer_calls_does_not_stop_its_resume() {
    let p = Project::new();
    // A plan whose first call finishes and whose second parks.
    p.write(
        "plan.json",
        r#"[
            {"tool": "order_lookup", "args": {"order_id": "ORD-000003"}},
            {"tool": "refund_order", "args": {"order_id": "ORD-000003", "amount": 1}}
        ]"#,
    );
    let o = p.run(&["runs", "start", "--plan", "plan.json", "--json"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = json_of(&o);
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let o = p.run(&["approvals", "approve", &call_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // order_lookup already ran: its change does not matter (its result replays).
    let lookup = p.path().join("tools/order_lookup.py");
    let text = std::fs::read_to_string(&lookup).unwrap();
    std::fs::write(&lookup, text.replace("\"shipped\"", "\"lost\"")).unwrap();
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let done = json_of(&o);
    assert_eq!(done["calls"][0]["result"]["status"], "shipped", "{done}");
    assert_eq!(done["calls"][1]["result"]["refunded"], 1.0, "{done}");
}

#[test]
fn a_project_that_moved_is_resumed_with_agent_dir() {
    let p = Project::new();
    let (run_id, call_id) = {
        let o = p.run(&[
            "tools",
            "run",
            "refund_order",
            "--json",
            "--args",
            r#"{"order_id": "ORD-000010", "amount": 3}"#,
        ]);
        assert_eq!(code(&o), 4, "{}", stderr(&o));
        let v = json_of(&o);
        (
            v["run_id"].as_str().unwrap().to_owned(),
            v["waiting_for"][0]["call_id"].as_str().unwrap().to_owned(),
        )
    };
    let o = p.run(&["approvals", "approve", &call_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The project moves; the journal stays where it was.
    let moved: PathBuf = p.path().join("moved");
    std::fs::create_dir(&moved).unwrap();
    std::fs::rename(p.path().join("agent.yaml"), moved.join("agent.yaml")).unwrap();
    std::fs::rename(p.path().join("tools"), moved.join("tools")).unwrap();
    // Its recorded folder no longer holds it: the error says how to go on.
    let o = p.run(&["runs", "resume", &run_id]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--agent DIR"), "{}", stderr(&o));
    // Named where it is now, with the same code, it resumes.
    let o = p.run(&["runs", "resume", &run_id, "--json", "--agent", "moved"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_of(&o)["calls"][0]["result"]["refunded"], 3.0);
}

#[test]
fn a_runs_workspace_goes_when_the_run_ends_and_stays_while_it_is_parked() {
    let p = Project::new();
    let workspace = |run_id: &str| p.path().join(".toolshed/workspaces").join(run_id);
    // (A completed run's is gone at once: the planned run of the first test.)
    // Parked: it keeps its workspace until its resume completes it.
    p.write(
        "gated.json",
        r#"[{"tool": "write_file", "args": {"path": "draft.md", "content": "refund?"}},
            {"tool": "refund_order", "args": {"order_id": "ORD-000007", "amount": 1}}]"#,
    );
    let o = p.run(&["runs", "start", "--plan", "gated.json", "--json"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = json_of(&o);
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    assert!(workspace(&run_id).join("draft.md").is_file());

    // A prune sweeps the workspace of a run that is gone, never a parked run's.
    std::fs::create_dir_all(workspace("run-gone-long-ago").join("sub")).unwrap();
    let o = p.run(&["runs", "prune", "--older-than", "0s", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_of(&o)["workspaces"], 1, "{}", stdout(&o));
    assert!(!workspace("run-gone-long-ago").exists());
    assert!(workspace(&run_id).join("draft.md").is_file());

    let call_id = parked["waiting_for"][0]["call_id"].as_str().unwrap();
    let o = p.run(&["approvals", "approve", call_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_of(&o)["status"], "completed");
    assert!(!workspace(&run_id).exists());
}

/// An agent's own tools get the network exactly as their definitions declare it
/// (`network_access: true`), a tool.yaml of the tools folder and an inline definition
/// over a code file alike, or as agent.yaml grants it (`network: true` on a `ref`);
/// every other tool sees only its sandbox's loopback.
#[test]
fn an_agent_tool_gets_the_network_only_when_its_definition_declares_it() {
    let p = Project::new();
    let interfaces = "def interfaces() -> dict:\n    \"\"\"The network interfaces this process sees.\"\"\"\n    with open('/proc/net/dev') as f:\n        lines = f.read().splitlines()[2:]\n    return {'interfaces': sorted(l.split(':')[0].strip() for l in lines)}\n";
    for name in ["net_inline", "net_plain", "net_ref"] {
        p.write(
            &format!("tools/{name}.py"),
            &interfaces.replace("def interfaces", &format!("def {name}")),
        );
    }
    p.write("tools/interfaces.py", interfaces);
    let code_file = p.path().join("tools/interfaces.py");
    p.write(
        "tools/net_yaml.yaml",
        &format!(
            "spec_version: v1\nname: net_yaml\ndescription: The interfaces, with the network.\nendpoint: python:{}:interfaces\nnetwork_access: true\ninput_schema: {{type: object}}\n",
            code_file.display()
        ),
    );
    let agent = std::fs::read_to_string(p.path().join("agent.yaml")).unwrap();
    let agent = agent.replace(
        "builtin_tools:",
        "  - name: net_inline\n    description: The interfaces, with the network.\n    network_access: true\n    schema: {type: object}\n  - ref: tools/net-ref\n    network: true\nbuiltin_tools:",
    );
    p.write("agent.yaml", &agent);

    let seen = |tool: &str| -> Vec<String> {
        let o = p.run(&["tools", "run", tool, "--json", "--args", "{}"]);
        assert_eq!(code(&o), 0, "{tool}: {}", stderr(&o));
        let v = json_of(&o);
        v["result"]["interfaces"]
            .as_array()
            .unwrap_or_else(|| panic!("{tool}: no interfaces in {v}"))
            .iter()
            .map(|i| i.as_str().unwrap().to_owned())
            .collect()
    };
    // `network: true` on a file's `ref` entry grants it too (a bread or Toren file
    // cannot declare it in the file).
    for tool in ["net_yaml", "net_inline", "net_ref"] {
        let on = seen(tool);
        assert!(on.iter().any(|i| i == "lo"), "{tool}: {on:?}");
        assert!(
            on.len() > 1,
            "{tool} declares network_access: true, so it has an outbound interface: {on:?}"
        );
    }
    for tool in ["net_plain", "interfaces"] {
        assert_eq!(seen(tool), vec!["lo".to_owned()], "{tool}");
    }
    // Without it, a connection fails with an error that says why and names the setting.
    p.write(
        "tools/fetch_page.py",
        "import urllib.request\n\ndef fetch_page() -> dict:\n    \"\"\"Fetch a page.\"\"\"\n    with urllib.request.urlopen('http://example.com/', timeout=5) as r:\n        return {'status': r.status}\n",
    );
    let o = p.run(&["tools", "run", "fetch_page", "--json", "--args", "{}"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let message = json_of(&o)["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("this tool's sandbox has no network")
            && message.contains("`network: true`"),
        "{message}"
    );
}

#[test]
fn the_toren_tools_predicate_parks_a_large_report_until_it_is_approved_from_the_cli() {
    let p = Project::new();
    // The predicate runs in the tool's own worker: 500 > 100, so the call parks.
    let o = p.run(&[
        "tools",
        "run",
        "fetch_report",
        "--json",
        "--args",
        r#"{"report": "annual", "amount": 500}"#,
    ]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = json_of(&o);
    assert_eq!(parked["status"], "parked", "{parked}");
    assert_eq!(parked["waiting_for"][0]["tool"], "fetch_report", "{parked}");
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Nothing ran: the call waits, listed for approval.
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(shown["calls"][0]["status"], "awaiting_approval", "{shown}");
    assert!(shown["calls"][0]["result"].is_null(), "{shown}");
    let o = p.run(&["approvals", "list", "--json"]);
    assert!(stdout(&o).contains(&call_id), "{}", stdout(&o));
    // Approved in one process, resumed in another: the report is fetched, once, under
    // the call's key.
    let o = p.run(&[
        "approvals",
        "approve",
        &call_id,
        "--reason",
        "budget signed off",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let done = json_of(&o);
    assert_eq!(done["status"], "completed", "{done}");
    let report: Value = serde_json::from_str(done["calls"][0]["result"].as_str().unwrap()).unwrap();
    assert_eq!(report["report"], "annual", "{done}");
    assert_eq!(report["amount"], 500, "{done}");
    assert_eq!(report["idempotency_key"], format!("{run_id}:0"), "{done}");
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(shown["calls"][0]["status"], "completed", "{shown}");
    assert_eq!(shown["calls"][0]["attempts"], 1, "{shown}");
    assert_eq!(
        shown["calls"][0]["decision"]["reason"], "budget signed off",
        "{shown}"
    );
    // A finished run is not resumed again.
    let o = p.run(&["runs", "resume", &run_id]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

/// The fixture project with agent.yaml's `limits` (in Toren's camelCase) added.
fn limited_project(limits: &str) -> Project {
    let p = Project::new();
    let yaml = std::fs::read_to_string(p.path().join("agent.yaml")).unwrap();
    p.write("agent.yaml", &format!("{yaml}limits:\n{limits}"));
    p
}

#[test]
fn agent_yaml_max_attempts_ends_a_run_started_again_after_a_sigkill() {
    let p = limited_project("  maxAttemptsPerTask: 1\n");
    p.write("hold", "");
    let mut child = p
        .command(&[
            "tools",
            "run",
            "ship_order",
            "--json",
            "--args",
            r#"{"order_id": "ORD-000011"}"#,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut run_id = String::new();
    wait_until("the keyed call to be started", || {
        let o = p.run(&["runs", "list", "--json", "--status", "running"]);
        let Some(id) = serde_json::from_slice::<Value>(&o.stdout)
            .ok()
            .and_then(|v| v[0]["id"].as_str().map(str::to_owned))
        else {
            return false;
        };
        let shown: Value = serde_json::from_slice(&p.run(&["runs", "show", &id, "--json"]).stdout)
            .unwrap_or(Value::Null);
        run_id = id;
        shown["calls"][0]["status"] == "started"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_file(p.path().join("hold")).unwrap();
    // The run records the project's budget.
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(
        shown["run"]["budgets"]["max_attempts_per_task"], 1,
        "{shown}"
    );
    // A second start is one more than the budget: the run fails, naming it, and the
    // call is not executed again.
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 1, "{}\n{}", stdout(&o), stderr(&o));
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("max_attempts_per_task is 1"), "{text}");
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(shown["run"]["status"], "failed", "{shown}");
    assert_eq!(shown["calls"][0]["attempts"], 1, "{shown}");
    assert_ne!(shown["calls"][0]["status"], "completed", "{shown}");
}

#[test]
fn agent_yaml_max_wall_clock_ends_a_parked_run_resumed_too_late_and_holds_for_plans() {
    let p = limited_project("  maxWallClockMin: 1\n");
    let o = p.run(&[
        "tools",
        "run",
        "refund_order",
        "--json",
        "--args",
        r#"{"order_id": "ORD-000012", "amount": 3}"#,
    ]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = json_of(&o);
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(shown["run"]["budgets"]["max_wall_clock_min"], 1, "{shown}");
    let o = p.run(&["approvals", "approve", &call_id, "--reason", "ok"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Two minutes pass (the run's creation is moved back in the journal: the wall clock
    // is the run's creation to now, parked time included).
    let db = rusqlite::Connection::open(p.path().join("journal.db")).unwrap();
    let moved = db
        .execute(
            "UPDATE runs SET created_at_ms = created_at_ms - 120000 WHERE id = ?1",
            [&run_id],
        )
        .unwrap();
    assert_eq!(moved, 1);
    drop(db);
    let o = p.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 1, "{}\n{}", stdout(&o), stderr(&o));
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("max_wall_clock_min is 1"), "{text}");
    let shown = json_of(&p.run(&["runs", "show", &run_id, "--json"]));
    assert_eq!(shown["run"]["status"], "failed", "{shown}");
    assert_ne!(shown["calls"][0]["status"], "completed", "{shown}");

    // `runs start --plan` holds the project's budgets; a flag overrides its own.
    p.write("plan.json", r#"[{"tool": "get_current_time", "args": {}}]"#);
    let o = p.run(&["runs", "start", "--plan", "plan.json", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let planned = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    let shown = json_of(&p.run(&["runs", "show", &planned, "--json"]));
    assert_eq!(shown["run"]["budgets"]["max_wall_clock_min"], 1, "{shown}");
    let o = p.run(&[
        "runs",
        "start",
        "--plan",
        "plan.json",
        "--max-wall-clock-min",
        "5",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let planned = json_of(&o)["run_id"].as_str().unwrap().to_owned();
    let shown = json_of(&p.run(&["runs", "show", &planned, "--json"]));
    assert_eq!(shown["run"]["budgets"]["max_wall_clock_min"], 5, "{shown}");
}

/// A declared env value named like a secret (Toren's `TICKETS_API_KEY`) is scrubbed
/// from what a tool answers, as a credential is: never in the result, the journal or
/// `runs show`.
#[test]
fn a_secret_declared_in_env_never_comes_back_in_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("tools")).unwrap();
    std::fs::write(
        d.join("agent.yaml"),
        "name: tickets\nenv: [TICKETS_API_KEY]\ntools:\n  - ref: tools/echo-env\n",
    )
    .unwrap();
    std::fs::write(
        d.join("tools/echo_env.py"),
        "def echo_env(ctx) -> dict:\n    \"\"\"Answers with its env, as a careless tool would.\"\"\"\n    return {'env': dict(ctx.env)}\n",
    )
    .unwrap();
    const VALUE: &str = "tk-live-5f2a9c";
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(args)
            .current_dir(d)
            .env(
                "TOOLSHED_DATABASE_URL",
                format!("sqlite://{}/journal.db", d.display()),
            )
            .env("TOOLSHED_CONFIG_DIR", d.join("config"))
            .env("TOOLSHED_CACHE_DIR", d.join("cache"))
            .env("TICKETS_API_KEY", VALUE)
            .env_remove("TOOLSHED_URL")
            .output()
            .unwrap()
    };
    let o = run(&["tools", "run", "echo_env", "--json", "--args", "{}"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let answer = json_of(&o);
    assert_eq!(
        answer["result"]["env"]["TICKETS_API_KEY"], "[REDACTED]",
        "{answer}"
    );
    let run_id = answer["run_id"].as_str().unwrap().to_owned();
    let shown = run(&["runs", "show", &run_id, "--json"]);
    assert!(!stdout(&shown).contains(VALUE), "{}", stdout(&shown));
    for file in ["journal.db", "journal.db-wal"] {
        let bytes = std::fs::read(d.join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
            "the value is in {file}"
        );
    }
}
