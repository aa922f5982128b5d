//! `toolshed registry mcp …` with real processes: `toolshed serve` on a free port over a
//! temp SQLite file, and a real `@modelcontextprotocol/server-everything` (tests/mcp,
//! `npm ci --prefix tests/mcp`) registered, listed, shown, tested, discovered, disabled,
//! enabled and removed from the command line, as tables and as `--json`, with the exit
//! codes of the other registry commands.
//!
//! The server runs with `TOOLSHED_UNSANDBOXED=1` (the operator's explicit choice), so
//! the stdio server is a plain child that sees the npm peers where npm put them; the
//! sandboxed start is covered by `toolshed-server/tests/mcp_servers.rs`.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

const ADMIN_PASSWORD: &str = "admin-password-1";

struct Server {
    child: Child,
    url: String,
    db: String,
    dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn everything_js() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        p.is_file(),
        "the MCP test peers are not installed: run `npm ci --prefix tests/mcp`"
    );
    p.canonicalize().unwrap()
}

impl Server {
    fn start() -> Server {
        Server::start_in(tempfile::tempdir().unwrap())
    }

    /// The server over `dir/toolshed.db` (which may exist already), with a credentials
    /// policy serving `GITHUB_TOKEN` from the environment.
    fn start_in(dir: tempfile::TempDir) -> Server {
        let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
        let stderr = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let policy = dir.path().join("credentials.yaml");
        std::fs::write(&policy, "default: {GITHUB_TOKEN: {provider: env}}\n").unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(["serve", "--addr", "127.0.0.1:0", "--credentials-policy"])
            .arg(&policy)
            .current_dir(dir.path())
            .env("TOOLSHED_CACHE_DIR", dir.path().join("cache"))
            .env("TOOLSHED_DATABASE_URL", &db)
            .env("TOOLSHED_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("TOOLSHED_UNSANDBOXED", "1")
            .env_remove("TOOLSHED_JWT_SECRET")
            .env_remove("TOOLSHED_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("no first line from the server: {e}"));
        let url = first
            .strip_prefix("toolshed registry listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_owned();
        Server {
            child,
            url,
            db,
            dir,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_toolshed"));
        c.args(args)
            .current_dir(self.dir.path())
            .env("TOOLSHED_URL", &self.url)
            .env("TOOLSHED_CONFIG_DIR", self.dir.path().join("config"))
            .env("TOOLSHED_DATABASE_URL", &self.db)
            .env_remove("TOOLSHED_API_TOKEN")
            .env_remove("TOOLSHED_LOG")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(code(&o), 0, "{args:?}: {}{}", stdout(&o), stderr(&o));
        stdout(&o)
    }

    fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {text}"))
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

#[test]
fn registry_mcp_add_list_show_test_discover_and_remove() {
    let s = Server::start();
    let js = everything_js();
    s.ok(&["login", "--username", "admin", "--password", ADMIN_PASSWORD]);

    let text = s.ok(&[
        "registry",
        "mcp",
        "add",
        "everything",
        "--timeout-seconds",
        "60",
        "--description",
        "The reference server",
        "--",
        "node",
        js.to_str().unwrap(),
        "stdio",
    ]);
    assert!(text.contains("registered MCP server everything"), "{text}");
    let added = s.json(&[
        "registry",
        "mcp",
        "--json",
        "add",
        "remote",
        "--url",
        "https://mcp.example.com/mcp",
        "--header",
        "Authorization=Bearer ${GITHUB_TOKEN}",
        "--credential",
        "GITHUB_TOKEN",
        "--disabled",
    ]);
    assert_eq!(
        (&added["enabled"], &added["source"]),
        (&Value::Bool(false), &Value::from("cli")),
        "{added}"
    );
    assert_eq!(added["headers"]["Authorization"], "Bearer ${GITHUB_TOKEN}");

    let table = s.ok(&["registry", "mcp", "list"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("everything") && table.contains("stdio"),
        "{table}"
    );
    let listed = s.json(&["registry", "mcp", "--json", "list"]);
    assert_eq!(listed["meta"]["total"], 2, "{listed}");

    let shown = s.json(&["registry", "mcp", "--json", "show", "everything"]);
    assert_eq!(shown["command"], "node");
    assert_eq!(shown["args"][1], "stdio");
    assert_eq!(shown["timeout_seconds"], 60);
    let text = s.ok(&["registry", "mcp", "show", "everything"]);
    assert!(text.contains("status:      registered"), "{text}");

    let tested = s.json(&["registry", "mcp", "--json", "test", "everything"]);
    assert_eq!(
        (&tested["success"], &tested["era"]),
        (&Value::Bool(true), &Value::from("legacy")),
        "{tested}"
    );
    let text = s.ok(&["registry", "mcp", "test", "everything"]);
    assert!(
        text.contains("everything is up") && text.contains("2025-11-25"),
        "{text}"
    );

    let found = s.json(&["registry", "mcp", "--json", "discover", "everything"]);
    assert!(
        found["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["registry_name"] == "everything__echo"),
        "{found}"
    );
    let text = s.ok(&[
        "registry",
        "tool",
        "run",
        "everything__echo",
        "--args",
        r#"{"message": "cli"}"#,
    ]);
    assert!(text.contains("Echo: cli"), "{text}");
    // The run, read from the journal, names the server, the tool and the era.
    let ran = s.json(&[
        "registry",
        "tool",
        "--json",
        "run",
        "everything__echo",
        "--args",
        r#"{"message": "audit"}"#,
    ]);
    let run_id = ran["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{ran}"))
        .to_owned();
    let shown = s.ok(&["runs", "show", &run_id]);
    assert!(
        shown.contains("mcp everything/echo (legacy 2025-11-25)"),
        "{shown}"
    );

    // A disabled entry's test is refused (exit 2, the server's 409 named), until enabled.
    let o = s.run(&["registry", "mcp", "test", "remote"]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("MCP_SERVER_DISABLED") || stderr(&o).contains("disabled"),
        "{}",
        stderr(&o)
    );
    s.ok(&["registry", "mcp", "disable", "everything"]);
    assert_eq!(
        s.json(&["registry", "mcp", "--json", "show", "everything"])["enabled"],
        false
    );
    s.ok(&["registry", "mcp", "enable", "everything"]);

    // An unknown name is bad input (exit 2); an unreachable server is an error.
    let o = s.run(&["registry", "mcp", "show", "nope"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no MCP server `nope`"),
        "{}",
        stderr(&o)
    );
    let o = s.run(&["registry", "mcp", "add", "nocommand"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let broken = s.run(&[
        "registry",
        "mcp",
        "add",
        "broken",
        "--",
        "node",
        "/nonexistent/x.js",
    ]);
    assert_eq!(code(&broken), 0, "{}", stderr(&broken));
    let o = s.run(&["registry", "mcp", "test", "broken"]);
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("MCP_SERVER_UNREACHABLE") || stderr(&o).contains("unreachable"),
        "{}",
        stderr(&o)
    );

    let text = s.ok(&["registry", "mcp", "remove", "everything"]);
    assert!(text.contains("removed MCP server everything"), "{text}");
    let o = s.run(&["registry", "tool", "show", "everything__echo"]);
    assert_ne!(code(&o), 0, "its tools are gone");
    let listed = s.json(&["registry", "mcp", "--json", "list"]);
    assert_eq!(listed["meta"]["total"], 2, "{listed}");
}

const OPENAI: &str = "sk-proj-Zq81mDw2LkT0bQ9nVf3x";
const SLACK: &str = "xoxb-2231-8842-Hs7QpL0aVwq";

#[track_caller]
fn assert_no_secret(text: &str) {
    for secret in [OPENAI, SLACK] {
        assert!(!text.contains(secret), "a secret is in:\n{text}");
    }
}

/// The attack: `registry mcp add --env K=V` / `--header K=V` with an API key as the
/// value. Refused before anything is sent, naming each key and the reference to write.
#[test]
fn literal_env_and_header_values_are_refused_before_anything_is_sent() {
    let s = Server::start();
    s.ok(&["login", "--username", "admin", "--password", ADMIN_PASSWORD]);
    let env_openai = format!("OPENAI_API_KEY={OPENAI}");
    let env_slack = format!("SLACK_BOT_TOKEN={SLACK}");
    let o = s.run(&[
        "registry",
        "mcp",
        "add",
        "slack",
        "--env",
        &env_openai,
        "--env",
        &env_slack,
        "--",
        "npx",
        "-y",
        "@x/slack",
    ]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert_no_secret(&format!("{}{err}", stdout(&o)));
    for needle in [
        "--env OPENAI_API_KEY",
        "${OPENAI_API_KEY}",
        "--env SLACK_BOT_TOKEN",
        "${SLACK_BOT_TOKEN}",
        "nothing was registered",
    ] {
        assert!(err.contains(needle), "{needle} in:\n{err}");
    }
    let header = format!("Authorization=Bearer {OPENAI}");
    let o = s.run(&[
        "registry",
        "mcp",
        "add",
        "hub",
        "--url",
        "https://mcp.example.com/mcp",
        "--header",
        &header,
    ]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert_no_secret(&format!("{}{}", stdout(&o), stderr(&o)));
    assert!(
        stderr(&o).contains("--header Authorization")
            && stderr(&o).contains("Bearer ${AUTHORIZATION}"),
        "{}",
        stderr(&o)
    );
    let listed = s.json(&["registry", "mcp", "--json", "list"]);
    assert_eq!(listed["meta"]["total"], 0, "{listed}");
    assert_no_secret(&std::fs::read_to_string(s.dir.path().join("server.log")).unwrap());
}

/// An entry stored with literal values before they were refused (inserted through the
/// store): the server names each key (never the value) in a warning when it starts, and
/// `registry mcp show`/`list` (tables and JSON) never print a value.
#[test]
fn a_literal_stored_before_is_warned_of_at_start_and_masked_in_every_view() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    let id = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = toolshed_registry::open(&db).await.unwrap();
            let entry: toolshed_registry::NewMcpServer =
                serde_json::from_value(serde_json::json!({
                "name": "leaky", "tenant": "default",
                "spec": {"name": "leaky", "launch": {"transport": "stdio", "command": "npx",
                    "env": {"OPENAI_API_KEY": OPENAI, "SLACK_BOT_TOKEN": SLACK}}},
                "transport": "stdio", "endpoint": "npx", "description": "", "tags": [],
                "team": null, "enabled": true,
                "source": "scan:/home/u/.config/Claude/claude_desktop_config.json",
                "overrides": {}, "created_by": "admin"}))
                .unwrap();
            store.create_mcp_server(entry).await.unwrap().id
        });
    let s = Server::start_in(dir);
    s.ok(&["login", "--username", "admin", "--password", ADMIN_PASSWORD]);
    for args in [
        &["registry", "mcp", "show", "leaky"][..],
        &["registry", "mcp", "--json", "show", "leaky"],
        &["registry", "mcp", "list"],
        &["registry", "mcp", "--json", "list"],
    ] {
        let o = s.run(args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert_no_secret(&format!("{}{}", stdout(&o), stderr(&o)));
    }
    let o = s.run(&["registry", "mcp", "show", "leaky"]);
    assert!(stdout(&o).contains("OPENAI_API_KEY=***"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("warning: env.OPENAI_API_KEY holds a literal value"),
        "{}",
        stderr(&o)
    );
    // And the server named each key when it started.
    let log = std::fs::read_to_string(s.dir.path().join("server.log")).unwrap();
    assert_no_secret(&log);
    for key in ["env.OPENAI_API_KEY", "env.SLACK_BOT_TOKEN"] {
        let line = log
            .lines()
            .find(|l| l.contains("WARN") && l.contains(key))
            .unwrap_or_else(|| panic!("no start-up warning naming {key}:\n{log}"));
        assert!(line.contains(&id) && line.contains("leaky"), "{line}");
    }
}

fn poison_js() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../toolshed-server/tests/fixtures/poison_mcp.mjs")
        .canonicalize()
        .unwrap()
}

/// A server that poisons and then changes its tool, from the command line: discover
/// shows the description escaped and flagged, the change waits (`pending` shows both),
/// only an admin's `accept` puts it in force.
#[test]
fn a_servers_change_waits_for_registry_mcp_accept() {
    let s = Server::start();
    s.ok(&["login", "--username", "admin", "--password", ADMIN_PASSWORD]);
    let js = poison_js();
    s.ok(&[
        "registry",
        "mcp",
        "add",
        "poison",
        "--",
        "node",
        js.to_str().unwrap(),
    ]);
    let o = s.run(&["registry", "mcp", "discover", "poison"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        !out.contains('\u{1b}') && !err.contains('\u{1b}'),
        "{out}{err}"
    );
    assert!(out.contains("\\u{1b}[8m"), "{out}");
    assert!(err.contains("poison__read_file hides characters"), "{err}");
    let o = s.run(&["registry", "tool", "show", "poison__read_file"]);
    assert!(!stdout(&o).contains('\u{1b}') && !stdout(&o).contains('\u{202e}'));
    assert!(stderr(&o).contains("tag"), "{}", stderr(&o));

    // The rug pull: the server changes read_file and says so.
    s.ok(&["registry", "tool", "run", "poison__rug"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let found = loop {
        let found = s.json(&["registry", "mcp", "--json", "discover", "poison"]);
        if !found["pending"].as_array().unwrap().is_empty() {
            break found;
        }
        assert!(std::time::Instant::now() < deadline, "never seen: {found}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(found["changed"], serde_json::json!([]), "{found}");
    let text = s.ok(&["registry", "mcp", "pending", "poison"]);
    assert!(
        text.contains("poison__read_file (revision 1 in force") && text.contains("Version two"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
    let shown = s.json(&["registry", "tool", "--json", "show", "poison__read_file"]);
    assert_eq!(shown["revision"], 1, "{shown}");

    // The admin accepts it: now it is in force.
    let text = s.ok(&["registry", "mcp", "accept", "poison", "--tool", "read_file"]);
    assert!(text.contains("accepted: poison__read_file"), "{text}");
    let shown = s.json(&["registry", "tool", "--json", "show", "poison__read_file"]);
    assert_eq!(shown["revision"], 2, "{shown}");
    assert!(
        shown["description"]
            .as_str()
            .unwrap()
            .contains("Version two")
    );
    let text = s.ok(&["registry", "mcp", "pending", "poison"]);
    assert!(text.contains("no tool change waits"), "{text}");
}

/// The `agentbreeder` program: `AGENTBREEDER_BIN`, or a clear failure saying how to
/// install it (as `tokens_cli.rs` does).
fn agentbreeder_bin() -> String {
    match std::env::var("AGENTBREEDER_BIN") {
        Ok(b) if !b.trim().is_empty() && Path::new(&b).exists() => b,
        other => panic!(
            "this test runs AgentBreeder's own CLI: set AGENTBREEDER_BIN to its `agentbreeder` program \
             (got {other:?}). Install it with:\n  python3 -m venv /tmp/agentbreeder && \
             /tmp/agentbreeder/bin/pip install 'agentbreeder==2.7.*'\n  export AGENTBREEDER_BIN=/tmp/agentbreeder/bin/agentbreeder"
        ),
    }
}

#[test]
fn agentbreeders_own_cli_lists_our_mcp_servers() {
    let bin = agentbreeder_bin();
    let s = Server::start();
    s.ok(&["login", "--username", "admin", "--password", ADMIN_PASSWORD]);
    s.ok(&[
        "registry",
        "mcp",
        "add",
        "mcp-memory",
        "--",
        "npx",
        "@modelcontextprotocol/server-memory",
    ]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let token = rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{}/api/v1/auth/login", s.url))
            .json(&serde_json::json!({"email": "admin", "password": ADMIN_PASSWORD}))
            .send()
            .await
            .unwrap();
        let body: Value = r.json().await.unwrap();
        body["data"]["access_token"].as_str().unwrap().to_owned()
    });
    let home = s.dir.path().join("ab-home");
    std::fs::create_dir_all(&home).unwrap();
    let ab = |args: &[&str]| -> Output {
        Command::new(&bin)
            .args(args)
            .current_dir(s.dir.path())
            .env("AGENTBREEDER_URL", &s.url)
            .env("AGENTBREEDER_API_TOKEN", &token)
            .env("HOME", &home)
            .env("AGENTBREEDER_HOME", home.join(".agentbreeder"))
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200")
            .env_remove("AGENTBREEDER_API_URL")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = ab(&["list", "mcp_servers", "--json"]);
    assert!(
        o.status.success(),
        "agentbreeder list: {}{}",
        stdout(&o),
        stderr(&o)
    );
    let items: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(&o)));
    assert_eq!(items[0]["name"], "mcp-memory", "{items}");
    assert_eq!(items[0]["transport"], "stdio");
    assert_eq!(
        items[0]["endpoint"],
        "npx @modelcontextprotocol/server-memory"
    );
    let o = ab(&["list", "mcp_servers"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let table = stdout(&o);
    assert!(
        table.contains("mcp-memory") && table.contains("registered"),
        "{table}"
    );
}
