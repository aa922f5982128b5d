//! `toolshed mcp serve` over real stdio (JSON-RPC lines to a child process): an agent
//! project's tools (a Python tool whose partial results become progress, a gated
//! built-in answered with its pending approval, approved with the CLI, then completed
//! by the same idempotency key), its `mcp.yaml` prompts, the registry mode's seeded
//! stdlib; and `toolshed mcp config` for each client.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Served, serve_with};
use serde_json::{Value, json};

struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
}

impl Peer {
    fn start(dir: &Path, db: &str, args: &[&str]) -> Peer {
        Peer::start_with(dir, db, args, &[])
    }

    fn start_with(dir: &Path, db: &str, args: &[&str], env: &[(&str, &str)]) -> Peer {
        Peer::spawn(dir, db, args, env, json!({}))
    }

    fn spawn(
        dir: &Path,
        db: &str,
        args: &[&str],
        env: &[(&str, &str)],
        capabilities: Value,
    ) -> Peer {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolshed"));
        command
            .args(["mcp", "serve"])
            .args(args)
            .current_dir(dir)
            .env("TOOLSHED_DATABASE_URL", db)
            .env("TOOLSHED_CACHE_DIR", dir.join(".cache"))
            .env("TOOLSHED_CONFIG_DIR", dir.join(".config"))
            .env("TOOLSHED_UNSANDBOXED", "1")
            .env_remove("TOOLSHED_URL")
            .env_remove("TOOLSHED_API_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut p = Peer {
            child,
            stdin,
            lines: rx,
        };
        let init = p.request(0, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}})).0;
        assert_eq!(init["serverInfo"]["name"], "toolshed", "{init}");
        p.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        p
    }

    /// The next request the server sends with `method` (what comes before it is
    /// skipped).
    fn next_request(&mut self, method: &str) -> Value {
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("a {method} request within 60 s"));
            if v["method"] == method {
                return v;
            }
        }
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The answer to request `id` (its result or error) and the notifications before it.
    fn request(&mut self, id: u32, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut notes = Vec::new();
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("an answer within 60 s");
            if v["id"] == json!(id) {
                let r = v.get("result").or_else(|| v.get("error")).cloned().unwrap();
                return (r, notes);
            }
            notes.push(v);
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("tools")).unwrap();
    std::fs::write(
        p.join("agent.yaml"),
        "name: mcp-test\nlimits: {max_attempts_per_task: 3, max_wall_clock_min: 10}\ntools:\n  - ref: tools/count-up\n  - name: gated_time\n    description: The time, after an approval\n    endpoint: builtin:get_current_time\n    approval: always\n    schema: {type: object, properties: {utc_offset: {type: string}}}\n",
    )
    .unwrap();
    std::fs::write(
        p.join("tools/count_up.py"),
        "def count_up(n: int = 3):\n    \"\"\"Count to n, one partial result per step.\"\"\"\n    for i in range(n):\n        yield {\"progress\": i + 1, \"total\": n}\n    yield {\"counted\": n}\n",
    )
    .unwrap();
    std::fs::write(
        p.join("mcp.yaml"),
        "prompts:\n  - name: greet\n    description: Greet someone\n    arguments: [{name: who, required: true}]\n    messages:\n      - {role: user, content: {type: text, text: \"Say hello to {{who}}\"}}\n",
    )
    .unwrap();
    dir
}

#[test]
fn an_agent_project_is_served_on_stdio_with_progress_approvals_and_prompts() {
    let dir = agent_project();
    let db = format!("sqlite://{}/journal.db", dir.path().display());
    let mut peer = Peer::start(dir.path(), &db, &[]);
    let (listed, _) = peer.request(1, "tools/list", json!({}));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"count_up") && names.contains(&"gated_time"),
        "{listed}"
    );

    let (done, notes) = peer.request(
        2,
        "tools/call",
        json!({"name": "count_up", "arguments": {"n": 3}, "_meta": {"progressToken": "p1"}}),
    );
    assert_eq!(done["structuredContent"], json!({"counted": 3}), "{done}");
    let progress: Vec<f64> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| n["params"]["progress"].as_f64().unwrap())
        .collect();
    // Every yield is a partial as it comes (bread's rule), the last one the result too:
    // three steps and the final count.
    assert_eq!(progress, [1.0, 2.0, 3.0, 4.0], "{notes:?}");
    // The run says it came over MCP: which client, which era and version.
    let run_id = done["_meta"]["toolshed/run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["runs", "show", &run_id])
        .current_dir(dir.path())
        .env("TOOLSHED_DATABASE_URL", &db)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("via      MCP client t 1 (legacy 2025-11-25)"),
        "{shown}"
    );
    // agent.yaml's limits are the run's budgets (snake_case here; camelCase elsewhere).
    let shown = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["runs", "show", &run_id, "--json"])
        .current_dir(dir.path())
        .env("TOOLSHED_DATABASE_URL", &db)
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        shown["run"]["budgets"],
        json!({"max_attempts_per_task": 3, "max_wall_clock_min": 10}),
        "{shown}"
    );
    // No log messages until the client asks for them; then the run's events at or
    // above the level it set.
    assert!(
        !notes.iter().any(|n| n["method"] == "notifications/message"),
        "{notes:?}"
    );
    let (set, _) = peer.request(20, "logging/setLevel", json!({"level": "info"}));
    assert_eq!(set, json!({}));
    let (_, notes) = peer.request(
        21,
        "tools/call",
        json!({"name": "count_up", "arguments": {"n": 1}}),
    );
    let logs: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .collect();
    assert!(!logs.is_empty(), "{notes:?}");
    assert!(
        logs.iter().all(|l| l["params"]["level"] == "info"),
        "{logs:?}"
    );
    assert!(
        !notes
            .iter()
            .any(|n| n["method"] == "notifications/progress"),
        "no progress without a progress token: {notes:?}"
    );

    let (bad, _) = peer.request(
        3,
        "tools/call",
        json!({"name": "count_up", "arguments": {"n": "three"}}),
    );
    assert_eq!(bad["isError"], true);
    assert!(
        bad["content"][0]["text"].as_str().unwrap().contains('n'),
        "{bad}"
    );

    let gated = json!({"name": "gated_time", "arguments": {"utc_offset": "+05:00"}, "_meta": {"toolshed/idempotency_key": "k-1"}});
    let (pending, _) = peer.request(4, "tools/call", gated.clone());
    assert_eq!(pending["isError"], true, "{pending}");
    let call_id = pending["structuredContent"]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let approved = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["approvals", "approve", &call_id])
        .current_dir(dir.path())
        .env("TOOLSHED_DATABASE_URL", &db)
        .output()
        .unwrap();
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    let (done, _) = peer.request(5, "tools/call", gated);
    assert_eq!(done.get("isError"), None, "{done}");
    assert!(
        done["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("+05:00"),
        "{done}"
    );

    let (prompt, _) = peer.request(
        6,
        "prompts/get",
        json!({"name": "greet", "arguments": {"who": "Ada"}}),
    );
    assert_eq!(prompt["messages"][0]["content"]["text"], "Say hello to Ada");
    let (missing, _) = peer.request(7, "prompts/get", json!({"name": "greet", "arguments": {}}));
    assert!(
        missing["message"].as_str().unwrap().contains("who"),
        "{missing}"
    );
}

#[test]
fn without_an_agent_the_registry_database_is_served_with_its_stdlib() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/registry.db", dir.path().display());
    let mut peer = Peer::start(dir.path(), &db, &[]);
    let (listed, _) = peer.request(1, "tools/list", json!({}));
    let tools = listed["tools"].as_array().unwrap();
    assert!(
        tools.iter().any(|t| t["name"] == "get_current_time"),
        "{listed}"
    );
    let (done, _) = peer.request(
        2,
        "tools/call",
        json!({"name": "get_current_time", "arguments": {"utc_offset": "+00:00"}}),
    );
    assert_eq!(done.get("isError"), None, "{done}");
}

#[test]
fn mcp_config_prints_each_clients_snippet() {
    let dir = agent_project();
    for (client, key) in [
        ("claude-code", "mcpServers"),
        ("cursor", "mcpServers"),
        ("claude-desktop", "mcpServers"),
        ("vscode", "servers"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(["mcp", "config", "--client", client, "--agent"])
            .arg(dir.path())
            .env_remove("TOOLSHED_URL")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let server = &v[key]["toolshed"];
        assert_eq!(server["args"][0], "mcp", "{v}");
        assert_eq!(server["args"][1], "serve");
        assert_eq!(
            server["args"][3],
            dir.path().canonicalize().unwrap().display().to_string()
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["mcp", "config", "--client", "emacs"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// A `toolshed serve` on a free port; its URL.
fn serve() -> Served {
    serve_with(&[])
}

/// `toolshed login` as the server's admin, the token kept under `config`.
fn login_admin(server: &Served, config: &str) {
    let login = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args([
            "login",
            "--username",
            "admin",
            "--password",
            common::ADMIN_PASSWORD,
        ])
        .env("TOOLSHED_URL", &server.url)
        .env("TOOLSHED_CONFIG_DIR", config)
        .env_remove("TOOLSHED_API_TOKEN")
        .output()
        .unwrap();
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );
}

#[test]
fn with_toolshed_url_it_bridges_to_the_servers_mcp_under_the_callers_token() {
    let server = serve();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config");
    let config = config.to_str().unwrap();
    let db = format!("sqlite://{}/unused.db", home.path().display());
    // No token: refused before anything is sent.
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["mcp", "serve"])
        .current_dir(home.path())
        .env("TOOLSHED_URL", &server.url)
        .env("TOOLSHED_CONFIG_DIR", config)
        .env_remove("TOOLSHED_API_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("toolshed login"));

    login_admin(&server, config);
    let mut peer = Peer::start_with(
        home.path(),
        &db,
        &[],
        &[
            ("TOOLSHED_URL", &server.url),
            ("TOOLSHED_CONFIG_DIR", config),
        ],
    );
    let (listed, _) = peer.request(1, "tools/list", json!({}));
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "get_current_time"),
        "{listed}"
    );
    let (done, _) = peer.request(
        2,
        "tools/call",
        json!({"name": "get_current_time", "arguments": {"utc_offset": "+00:00"}}),
    );
    assert_eq!(done.get("isError"), None, "{done}");
    assert!(
        done["_meta"]["toolshed/run_id"].is_string(),
        "a run on the server: {done}"
    );
    // A line that is not JSON is answered with a parse error, and the bridge goes on.
    writeln!(peer.stdin, "not json").unwrap();
    peer.stdin.flush().unwrap();
    let err = peer.lines.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(err["error"]["code"], -32700, "{err}");
    let (again, _) = peer.request(3, "tools/list", json!({}));
    assert!(again["tools"].is_array(), "{again}");
}

#[test]
fn serve_refuses_a_broken_mcp_catalog_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("mcp.yaml");
    std::fs::write(&catalog, "resources:\n  - uri: a://b\n    name: b\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["serve", "--addr", "127.0.0.1:0", "--mcp-catalog"])
        .arg(&catalog)
        .env(
            "TOOLSHED_DATABASE_URL",
            format!("sqlite://{}/t.db", dir.path().display()),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("resources[0]") && err.contains("mcp.yaml"),
        "{err}"
    );
}

/// A background run started through `toolshed mcp serve` outlives that server: the
/// server is SIGKILLed, and a new one finds the run and reports how it ended
/// (`run_process` / `check_run` of an agent project over MCP; real sandbox).
#[test]
fn a_background_run_survives_a_restart_of_the_mcp_server() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(
        p.join("agent.yaml"),
        "name: bg\nbuiltin_tools: [run_process, check_run]\nprocesses:\n  slow_job:\n    description: Prints, waits a little, prints, exits 3.\n    command: [/bin/sh, -c, \"echo started; sleep 1; echo finished; exit 3\"]\n",
    )
    .unwrap();
    let db = format!("sqlite://{}/journal.db", p.display());
    let processes = p.join("processes").display().to_string();
    let workspaces = p.join("workspaces").display().to_string();
    let env = [
        ("TOOLSHED_PROCESSES", processes.as_str()),
        ("TOOLSHED_WORKSPACES", workspaces.as_str()),
    ];
    let mut first = Peer::start_with(p, &db, &[], &env);
    let (started, _) = first.request(
        1,
        "tools/call",
        json!({"name": "run_process", "arguments": {"name": "slow_job"}}),
    );
    let run = started["structuredContent"].clone();
    assert_eq!(run["status"], "running", "{started}");
    let id = run["run_id"].as_str().unwrap().to_owned();
    // The server dies at once (SIGKILL); its background run goes on.
    drop(first);

    let mut second = Peer::start_with(p, &db, &[], &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut n = 10;
    let ended = loop {
        n += 1;
        let (checked, _) = second.request(
            n,
            "tools/call",
            json!({"name": "check_run", "arguments": {"run_id": id}}),
        );
        let v = checked["structuredContent"].clone();
        if v["status"] != "running" {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running after 30 s: {checked}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ended["status"], "exited", "{ended}");
    assert_eq!(ended["exit_code"], 3, "{ended}");
    let tail = ended["output_tail"].as_str().unwrap();
    assert!(
        tail.contains("started") && tail.contains("finished"),
        "{tail:?}"
    );
}

#[test]
fn a_tool_served_on_stdio_asks_the_person_at_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("tools")).unwrap();
    std::fs::write(
        p.join("agent.yaml"),
        "name: asking\ntools:\n  - ref: tools/pick-colour\n",
    )
    .unwrap();
    std::fs::write(
        p.join("tools/pick_colour.py"),
        "def pick_colour(ctx):\n    \"\"\"Ask the person for a colour.\"\"\"\n    form = ctx.elicit(\"Which colour?\", {\"type\": \"object\", \"properties\": {\"colour\": {\"type\": \"string\", \"enum\": [\"red\", \"blue\"]}}})\n    return {\"action\": form[\"action\"], \"colour\": (form.get(\"content\") or {}).get(\"colour\")}\n",
    )
    .unwrap();
    let db = format!("sqlite://{}/journal.db", p.display());
    let mut peer = Peer::spawn(p, &db, &[], &[], json!({"elicitation": {}}));
    peer.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pick_colour", "arguments": {}}}));
    // The server asks first: the tool's form, its message naming the tool.
    let asked = peer.next_request("elicitation/create");
    assert_eq!(
        asked["params"]["message"], "[tool pick_colour] Which colour?",
        "{asked}"
    );
    assert_eq!(
        asked["params"]["requestedSchema"]["properties"]["colour"]["enum"],
        json!(["red", "blue"])
    );
    peer.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"colour": "blue"}}}));
    let done = loop {
        let v = peer
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the answer within 60 s");
        if v["id"] == json!(1) {
            break v["result"].clone();
        }
    };
    assert_eq!(
        done["structuredContent"],
        json!({"action": "accept", "colour": "blue"}),
        "{done}"
    );
    // `runs show` lists the question and how it ended.
    let run_id = done["_meta"]["toolshed/run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["runs", "show", &run_id])
        .current_dir(p)
        .env("TOOLSHED_DATABASE_URL", &db)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("asked the client: elicitation/create -> accept"),
        "{text}"
    );
}

#[test]
fn the_bridge_relays_a_tools_question_at_once_and_resumes_a_stream_the_server_closed() {
    // The server closes a call's stream after a second (SEP-1699 polling); the tool
    // asks a question, then takes two seconds more.
    let server = serve_with(&["--mcp-sse-close-after", "1"]);
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config");
    let config = config.to_str().unwrap();
    login_admin(&server, config);
    let tool = home.path().join("slow_question.py");
    std::fs::write(
        &tool,
        "import time\n\ndef slow_question(ctx):\n    \"\"\"Ask, then think for two seconds.\"\"\"\n    form = ctx.elicit(\"Go on?\", {\"type\": \"object\", \"properties\": {\"go\": {\"type\": \"boolean\"}}})\n    time.sleep(2)\n    return {\"action\": form[\"action\"], \"go\": form[\"content\"][\"go\"]}\n",
    )
    .unwrap();
    let pushed = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["registry", "tool", "push"])
        .arg(&tool)
        .args(["--name", "slow_question"])
        .env("TOOLSHED_URL", &server.url)
        .env("TOOLSHED_CONFIG_DIR", config)
        .env_remove("TOOLSHED_API_TOKEN")
        .output()
        .unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let db = format!("sqlite://{}/unused.db", home.path().display());
    let mut peer = Peer::spawn(
        home.path(),
        &db,
        &[],
        &[
            ("TOOLSHED_URL", &server.url),
            ("TOOLSHED_CONFIG_DIR", config),
        ],
        json!({"elicitation": {}}),
    );
    peer.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow_question", "arguments": {}}}));
    // The question reaches the client while the call's stream is open.
    let asked = peer.next_request("elicitation/create");
    assert_eq!(
        asked["params"]["message"], "[tool slow_question] Go on?",
        "{asked}"
    );
    peer.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"go": true}}}));
    // The answer comes after the server closed the stream: on the resumed one, once.
    let mut answers = Vec::new();
    let started = std::time::Instant::now();
    while answers.is_empty() || started.elapsed() < Duration::from_secs(5) {
        match peer.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(v) if v["id"] == json!(7) => answers.push(v),
            Ok(_) => {}
            Err(_) => break,
        }
        if !answers.is_empty() {
            break;
        }
    }
    assert_eq!(answers.len(), 1, "{answers:?}");
    let done = &answers[0]["result"];
    assert_eq!(
        done["structuredContent"],
        json!({"action": "accept", "go": true}),
        "{answers:?}"
    );
    // Nothing is written twice: the next line is the answer to the next request.
    let (listed, notes) = peer.request(8, "tools/list", json!({}));
    assert!(listed["tools"].is_array(), "{listed}");
    assert!(notes.iter().all(|n| n["id"] != json!(7)), "{notes:?}");
}

#[test]
fn serve_refuses_an_sse_close_after_out_of_its_range_naming_the_flag() {
    for bad in ["0", "soon", "86401"] {
        let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--mcp-sse-close-after",
                bad,
            ])
            .env_remove("TOOLSHED_MCP_SSE_CLOSE_AFTER")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--mcp-sse-close-after"), "{bad}: {stderr}");
    }
}

#[test]
fn agent_wins_over_an_exported_toolshed_url_and_stderr_names_the_url_not_used() {
    let dir = agent_project();
    let p = dir.path();
    let db = format!("sqlite://{}/journal.db", p.display());
    // A server nobody runs: a bridge to it would answer no tools/list.
    let unused = "http://127.0.0.1:9";
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["mcp", "serve", "--agent"])
        .arg(p)
        .current_dir(p)
        .env("TOOLSHED_DATABASE_URL", &db)
        .env("TOOLSHED_CACHE_DIR", p.join(".cache"))
        .env("TOOLSHED_CONFIG_DIR", p.join(".config"))
        .env("TOOLSHED_URL", unused)
        .env_remove("TOOLSHED_API_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listed = loop {
        let v: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if v["id"] == json!(1) {
            break v;
        }
    };
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"count_up"), "the project's tools: {listed}");
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("TOOLSHED_URL (http://127.0.0.1:9) is not used"),
        "{stderr}"
    );
}
