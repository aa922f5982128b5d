//! The registry from the command line, with real processes: `toolshed serve` on a free
//! port over a temp SQLite file, and the `user`, `login`, `registry tool …` and
//! `agent register` commands run against it as a user would.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ADMIN_PASSWORD: &str = "admin-password-1";

/// A running `toolshed serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
    db: String,
    dir: tempfile::TempDir,
    /// Lines the server printed to stdout after the first one.
    stdout: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Start a server on a free port over a new database and wait for its first line.
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
        let stderr = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(["serve", "--addr", "127.0.0.1:0"])
            .current_dir(dir.path())
            .env("TOOLSHED_CACHE_DIR", dir.path().join("cache"))
            .env("TOOLSHED_DATABASE_URL", &db)
            .env("TOOLSHED_ADMIN_PASSWORD", ADMIN_PASSWORD)
            // toolshed's Node helper package (zod 4), as scripts/test installs it.
            .env(
                "TOOLSHED_NODE_DEPS",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-dispatch/node"),
            )
            .env_remove("TOOLSHED_JWT_SECRET")
            .env_remove("TOOLSHED_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            url: String::new(),
            db,
            dir,
            stdout: rx,
        };
        let first = server
            .stdout
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("no first line from the server ({e}):\n{}", server.log()));
        let url = first
            .strip_prefix("toolshed registry listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"));
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        server.url = url.to_owned();
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A user's shell: its own config folder (no saved token yet), pointed at this
    /// server.
    fn shell(&self) -> Shell {
        let home = tempfile::tempdir().unwrap();
        Shell {
            url: self.url.clone(),
            db: self.db.clone(),
            home,
            token: None,
        }
    }

    /// The next stdout line of the server, waiting at most `secs`.
    fn next_line(&self, secs: u64) -> Option<String> {
        self.stdout.recv_timeout(Duration::from_secs(secs)).ok()
    }
}

/// Where one user runs commands from.
struct Shell {
    url: String,
    db: String,
    home: tempfile::TempDir,
    token: Option<String>,
}

impl Shell {
    fn config_dir(&self) -> PathBuf {
        self.home.path().join("config")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_toolshed"));
        c.args(args)
            .current_dir(self.home.path())
            .env("TOOLSHED_URL", &self.url)
            .env("TOOLSHED_CONFIG_DIR", self.config_dir())
            .env("TOOLSHED_DATABASE_URL", &self.db)
            .env(
                "TOOLSHED_NODE_DEPS",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-dispatch/node"),
            )
            .env_remove("TOOLSHED_API_TOKEN")
            .env_remove("TOOLSHED_LOG");
        if let Some(t) = &self.token {
            c.env("TOOLSHED_API_TOKEN", t);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    fn run_with_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Run and expect success; the parsed JSON of stdout.
    fn json(&self, args: &[&str]) -> Value {
        let o = self.run(args);
        assert_eq!(code(&o), 0, "{args:?}: {}{}", stdout(&o), stderr(&o));
        serde_json::from_str(&stdout(&o))
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", stdout(&o)))
    }

    fn login_admin(&self) {
        let o = self.run(&["login", "--username", "admin", "--password", ADMIN_PASSWORD]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
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

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn executable(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = write(dir, name, text);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The seed's tool, with a Google-style docstring.
const ORDER_LOOKUP_PY: &str = r#"
def order_lookup(order_id: str, include_tracking: bool = False) -> dict:
    """
    Look up an order by ID.

    Args:
        order_id: The order ID (format: ORD-XXXXXX)
        include_tracking: Whether to include shipping tracking info

    Returns:
        dict with order status, items, and optionally tracking
    """
    return {
        "order_id": order_id,
        "status": "shipped",
        "items": ["Widget A", "Widget B"],
        "tracking": "1Z999AA10123456784" if include_tracking else None,
    }
"#;

/// A Node tool whose schema is exported beside the function.
const GREET_MJS: &str = r#"
export const schema = {
  type: 'object',
  properties: { name: { type: 'string', description: 'Who to greet' } },
  required: ['name'],
};
export const description = 'Greet someone by name.';

export default async function greet({ name }) {
  console.log('a log line must not break the protocol');
  return { greeting: `hello ${name}` };
}
"#;

#[test]
fn serve_prints_how_to_log_in_and_stops_on_sigterm() {
    let mut server = Server::start();
    let mut lines = Vec::new();
    while let Some(line) = server.next_line(30) {
        let done = line.starts_with("registered ");
        lines.push(line);
        if done {
            break;
        }
    }
    let text = lines.join("\n");
    assert!(text.contains("user admin, password"), "{text}");
    assert!(
        !text.contains(ADMIN_PASSWORD),
        "a password from the env is not echoed: {text}"
    );
    assert!(text.contains("toolshed login --username admin"), "{text}");
    assert!(
        text.contains(&format!("export TOOLSHED_URL={}", server.url)),
        "{text}"
    );
    assert!(text.contains("standard-library tools"), "{text}");

    // SIGTERM: a graceful stop, exit code 0.
    let pid = server.child.id().to_string();
    let k = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(k.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{}", server.log());
    let log = server.log();
    assert!(log.contains("registry server started"), "{log}");
    assert!(log.contains("registry server stopped"), "{log}");
}

#[test]
fn users_are_added_offline_and_roles_are_enforced() {
    let server = Server::start();
    let admin = server.shell();

    // `user add` writes into the database directly.
    let o = admin.run(&[
        "user",
        "add",
        "vera",
        "--role",
        "viewer",
        "--password",
        "short",
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("at least 8 characters"),
        "{}",
        stderr(&o)
    );
    let o = admin.run(&[
        "user",
        "add",
        "vera",
        "--role",
        "boss",
        "--password",
        "long-enough",
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("`boss` is not a role"),
        "{}",
        stderr(&o)
    );
    let o = admin.run(&["user", "add", "bad name", "--role", "viewer"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("is not a user name"), "{}", stderr(&o));
    // No --password and stdin not a terminal: one line of stdin.
    let o = admin.run_with_stdin(
        &["user", "add", "vera", "--role", "viewer"],
        "long-enough\n",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("added user vera (role viewer"),
        "{}",
        stdout(&o)
    );
    let o = admin.run(&[
        "user",
        "add",
        "vera",
        "--role",
        "admin",
        "--password",
        "long-enough",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    let users = admin.json(&["user", "list", "--json"]);
    let names: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "vera"]);
    assert!(users[1].get("password_hash").is_none());
    // The seeded first account is the organisation's owner; `--role owner` adds another.
    assert_eq!(users[0]["role"], "owner", "{users}");
    let o = admin.run(&[
        "user",
        "add",
        "olga",
        "--role",
        "owner",
        "--tenant",
        "acme",
        "--password",
        "long-enough",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("added user olga (role owner, tenant acme)"),
        "{}",
        stdout(&o)
    );

    // Not logged in: exit 2 and a hint.
    let nobody = server.shell();
    let o = nobody.run(&["registry", "tool", "list"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("UNAUTHENTICATED"), "{}", stderr(&o));
    assert!(stderr(&o).contains("toolshed login"), "{}", stderr(&o));

    // A wrong password is refused.
    let o = nobody.run(&[
        "login",
        "--username",
        "vera",
        "--password",
        "wrong-password",
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("wrong user name or password"),
        "{}",
        stderr(&o)
    );
    assert!(!nobody.config_dir().join("token").exists());

    // The viewer logs in (password from stdin) and can read but not run.
    let viewer = server.shell();
    let o = viewer.run_with_stdin(&["login", "--username", "vera"], "long-enough\n");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("as vera (role viewer)"),
        "{}",
        stdout(&o)
    );
    let token_file = viewer.config_dir().join("token");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&token_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let o = viewer.run(&["registry", "tool", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("markdown_writer"), "{}", stdout(&o));
    let o = viewer.run(&["registry", "tool", "run", "get_current_time"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("FORBIDDEN"), "{}", stderr(&o));

    // A token from the environment wins over the saved one; a bad one says so.
    let mut forged = server.shell();
    forged.token = Some("not-a-token".into());
    let o = forged.run(&["registry", "tool", "list"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("TOOLSHED_API_TOKEN"), "{}", stderr(&o));
}

#[test]
fn an_unreachable_server_is_exit_3() {
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["registry", "tool", "list"])
        .current_dir(home.path())
        .env("TOOLSHED_URL", "http://127.0.0.1:9")
        .env("TOOLSHED_CONFIG_DIR", home.path())
        .env("TOOLSHED_API_TOKEN", "whatever")
        .output()
        .unwrap();
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("http://127.0.0.1:9"), "{err}");
    assert!(err.contains("toolshed serve"), "{err}");
    assert!(err.contains("TOOLSHED_URL"), "{err}");

    // An agent whose ref needs the registry names the URL it could not reach.
    write(
        home.path(),
        "agent/agent.yaml",
        "name: support\ntools:\n  - ref: tools/order_lookup\n",
    );
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["agent", "validate", "agent"])
        .current_dir(home.path())
        .env("TOOLSHED_URL", "http://127.0.0.1:9")
        .env("TOOLSHED_CONFIG_DIR", home.path())
        .env_remove("TOOLSHED_API_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("http://127.0.0.1:9"), "{}", stderr(&o));
}

#[test]
fn python_and_node_tools_are_pushed_inferred_and_run() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let src = sh.home.path().join("src");
    let py = write(&src, "order_lookup.py", ORDER_LOOKUP_PY);
    let py = py.to_str().unwrap();

    let o = sh.run(&["registry", "tool", "push", py]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("registered order_lookup (id "),
        "{}",
        stdout(&o)
    );

    let tool = sh.json(&["registry", "tool", "show", "order_lookup", "--json"]);
    // The code was uploaded: the endpoint names the file inside it, not this machine's
    // path, and the detail carries the code's hash and size.
    assert_eq!(tool["endpoint"], "python:order_lookup.py");
    assert_eq!(tool["code"]["files"], 1);
    assert_eq!(
        tool["code"]["size_bytes"].as_u64().map(|n| n > 0),
        Some(true)
    );
    assert_eq!(tool["source"], "cli");
    assert_eq!(tool["description"], "Look up an order by ID.");
    let schema = &tool["schema_definition"];
    assert_eq!(schema["required"], json!(["order_id"]));
    assert_eq!(schema["properties"]["order_id"]["type"], "string");
    assert_eq!(
        schema["properties"]["order_id"]["description"],
        "The order ID (format: ORD-XXXXXX)"
    );
    assert_eq!(schema["properties"]["include_tracking"]["type"], "boolean");
    assert_eq!(schema["properties"]["include_tracking"]["default"], false);
    let o = sh.run(&["registry", "tool", "show", "order_lookup"]);
    assert!(stdout(&o).contains("input schema:"), "{}", stdout(&o));

    // Run it: stdout is the output, as JSON.
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "order_lookup",
        "--args",
        r#"{"order_id": "ORD-123456", "include_tracking": true}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out["order_id"], "ORD-123456");
    assert_eq!(out["tracking"], "1Z999AA10123456784");
    assert!(stderr(&o).contains("run "), "{}", stderr(&o));
    let run = sh.json(&[
        "registry",
        "tool",
        "run",
        "order_lookup",
        "--args",
        r#"{"order_id": "ORD-1"}"#,
        "--json",
    ]);
    assert_eq!(run["status"], "completed");
    assert_eq!(run["output"]["tracking"], Value::Null);
    assert!(run["run_id"].as_str().is_some_and(|r| !r.is_empty()));

    // Bad args: exit 2, every violation named.
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "order_lookup",
        "--args",
        r#"{"include_tracking": "yes"}"#,
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("INVALID_ARGS"), "{err}");
    assert!(err.contains("order_id"), "{err}");
    assert!(err.contains("/include_tracking"), "{err}");
    let o = sh.run(&["registry", "tool", "run", "order_lookup", "--args", "[1]"]);
    assert_eq!(code(&o), 2);

    // Pushing again is an update: a new revision.
    let o = sh.run(&[
        "registry",
        "tool",
        "push",
        py,
        "--description",
        "Look up an order, v2",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim_end().split(" (").next().unwrap(),
        "updated order_lookup to revision 2"
    );
    let versions = sh.json(&["registry", "tool", "versions", "order_lookup", "--json"]);
    let revs: Vec<u64> = versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(revs, [1, 2]);

    // A Node module with its schema exported beside the function.
    let mjs = write(&src, "greet.mjs", GREET_MJS);
    let o = sh.run(&["registry", "tool", "push", mjs.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("registered greet "),
        "{}",
        stdout(&o)
    );
    let tool = sh.json(&["registry", "tool", "show", "greet", "--json"]);
    assert_eq!(tool["endpoint"], "node:greet.mjs");
    assert_eq!(tool["description"], "Greet someone by name.");
    assert_eq!(tool["schema_definition"]["required"], json!(["name"]));
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "greet",
        "--args",
        r#"{"name": "Ada"}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out, json!({"greeting": "hello Ada"}));
    let o = sh.run(&["registry", "tool", "run", "greet", "--args", "{}"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));

    // A module declaring no schema takes --schema, with its own name and description.
    let shout = write(
        &src,
        "shout.mjs",
        "export function shout({ text }) { return text.toUpperCase(); }\n",
    );
    let schema = write(
        &src,
        "shout.schema.json",
        r#"{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}"#,
    );
    let target = format!("{}:shout", shout.display());
    let o = sh.run(&["registry", "tool", "push", &target]);
    assert_eq!(code(&o), 2, "no schema and no --schema: {}", stderr(&o));
    let o = sh.run(&[
        "registry",
        "tool",
        "push",
        &target,
        "--schema",
        schema.to_str().unwrap(),
        "--description",
        "Shout a text.",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "shout",
        "--args",
        r#"{"text": "hi"}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "HI");

    // A module path names a standard-library tool (already seeded: an update).
    let o = sh.run(&[
        "registry",
        "tool",
        "push",
        "engine.tools.standard.markdown_writer",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("updated markdown_writer to revision 2"),
        "{}",
        stdout(&o)
    );
    let o = sh.run(&[
        "registry",
        "tool",
        "push",
        "engine.tools.standard.no_such_tool",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("get_current_time"), "{}", stderr(&o));
    let o = sh.run(&["registry", "tool", "push", "missing.py"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("no such file"), "{}", stderr(&o));

    // The listing: a table with a footer, and JSON with the page facts.
    let o = sh.run(&["registry", "tool", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("NAME"), "{text}");
    for name in ["order_lookup", "greet", "shout", "markdown_writer"] {
        assert!(text.contains(name), "{name}: {text}");
    }
    assert!(text.trim_end().ends_with("page 1 of 1, 8 tools"), "{text}");
    let page = sh.json(&[
        "registry",
        "tool",
        "list",
        "--source",
        "cli",
        "--per-page",
        "2",
        "--page",
        "2",
        "--json",
    ]);
    assert_eq!(page["meta"], json!({"page": 2, "per_page": 2, "total": 4}));
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    let o = sh.run(&["registry", "tool", "list", "--per-page", "2", "--page", "2"]);
    assert!(
        stdout(&o).trim_end().ends_with("page 2 of 4, 8 tools"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn failing_tools_exit_1_and_the_server_keeps_answering() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let src = sh.home.path().join("src");
    // Sleeps past a short timeout (pushed as a tool.yaml with an implementation block).
    write(
        &src,
        "slow.py",
        "import time\n\ndef slow_down(seconds: float = 60) -> dict:\n    \"\"\"Sleep for a while.\"\"\"\n    time.sleep(seconds)\n    return {\"slept\": seconds}\n",
    );
    let slow = write(
        &src,
        "slow.yaml",
        "spec_version: v1\nname: slow-down\ndescription: Sleeps past its timeout.\ntimeout_ms: 500\nimplementation:\n  language: python\n  entrypoint: slow.py:slow_down\n",
    );
    // Exits non-zero from inside the function.
    let exit3 = write(
        &src,
        "bail_out.py",
        "import sys\n\ndef bail_out(reason: str = \"none\") -> dict:\n    \"\"\"Give up.\"\"\"\n    sys.stderr.write(f\"giving up: {reason}\\n\")\n    sys.exit(3)\n",
    );
    // Prints garbage where the protocol's answer belongs.
    executable(
        &src,
        "garbage.sh",
        "#!/bin/sh\nread -r line\necho \"hello, I am not JSON\"\n",
    );
    let garbage = write(
        &src,
        "garbage.yaml",
        "spec_version: v1\nname: garbage\ndescription: Prints garbage.\nimplementation:\n  language: exec\n  entrypoint: garbage.sh\n",
    );
    // Floods stdout with one endless line.
    executable(
        &src,
        "flood.sh",
        "#!/bin/sh\nread -r line\nexec yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | tr -d '\\n'\n",
    );
    let flood = write(
        &src,
        "flood.yaml",
        "spec_version: v1\nname: flood\ndescription: Floods stdout.\nimplementation:\n  language: exec\n  entrypoint: flood.sh\n",
    );
    for file in [&slow, &exit3, &garbage, &flood] {
        let o = sh.run(&["registry", "tool", "push", file.to_str().unwrap()]);
        assert_eq!(code(&o), 0, "{}: {}", file.display(), stderr(&o));
    }
    let tool = sh.json(&["registry", "tool", "show", "slow-down", "--json"]);
    // The definition's folder was uploaded as a package: the endpoint names its file.
    assert_eq!(tool["endpoint"], "python:slow.py:slow_down");
    assert_eq!(tool["definition"]["timeout_ms"], 500);
    assert_eq!(
        tool["schema_definition"]["properties"]["seconds"]["type"],
        "number"
    );
    let tool = sh.json(&["registry", "tool", "show", "garbage", "--json"]);
    assert_eq!(tool["endpoint"], "exec:garbage.sh");

    let cases: [(&str, &[&str]); 4] = [
        ("slow-down", &["TIMEOUT"]),
        ("bail_out", &["sys.exit(3)", "giving up: none"]),
        ("garbage", &["not JSON", "hello, I am not JSON"]),
        ("flood", &["stdout"]),
    ];
    for (name, expected) in cases {
        let started = Instant::now();
        let o = sh.run(&["registry", "tool", "run", name]);
        assert_eq!(code(&o), 1, "{name}: {}{}", stdout(&o), stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with("error "), "{name}: {err}");
        for e in expected {
            assert!(err.contains(e), "{name}: `{e}` missing from {err}");
        }
        assert!(err.contains("run "), "{name}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name} took {:?}",
            started.elapsed()
        );
        // The server is still there and answers.
        let o = sh.run(&["registry", "tool", "run", "get_current_time"]);
        assert_eq!(
            code(&o),
            0,
            "after {name}: {}\n{}",
            stderr(&o),
            server.log()
        );
    }
    // --json prints the whole answer, with the same exit code.
    let o = sh.run(&["registry", "tool", "run", "bail_out", "--json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let run: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(run["status"], "completed");
    assert_eq!(run["stderr"], "giving up: none\n");
    assert!(
        run["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sys.exit(3)")
    );
    // What the call printed is recorded with it: `runs show` on the server's journal
    // prints it, and the run's JSON carries it.
    let run_id = run["run_id"].as_str().unwrap();
    let o = sh.run(&["runs", "show", run_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let shown = stdout(&o);
    assert!(shown.contains("call 0 (bail_out)"), "{shown}");
    assert!(shown.contains("  stderr:\n    giving up: none"), "{shown}");
    let show = sh.json(&["runs", "show", run_id, "--json"]);
    assert_eq!(
        show["calls"][0]["diagnostics"]["stderr"],
        "giving up: none\n"
    );
    // The tool printed nothing: no stdout is recorded (the runner's protocol line
    // with its error is not the tool's output; the error itself is the call's).
    assert!(
        show["calls"][0]["diagnostics"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{show}"
    );
    assert!(
        show["calls"][0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sys.exit(3)"),
        "{show}"
    );
}

#[test]
fn agents_register_usage_edges_and_tools_are_deleted() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let src = sh.home.path().join("src");
    let py = write(&src, "order_lookup.py", ORDER_LOOKUP_PY);
    let o = sh.run(&["registry", "tool", "push", py.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = sh.run(&["registry", "tool", "usage", "order_lookup"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("no registered agent uses"),
        "{}",
        stdout(&o)
    );

    let project = sh.home.path().join("support");
    write(
        &project,
        "agent.yaml",
        "name: support-agent\nframework: langgraph\ntools:\n  - ref: tools/order_lookup\n  - ref: tools/markdown-writer\n",
    );
    // The registry step of the resolver chain finds the pushed tool.
    let v = sh.json(&["agent", "validate", project.to_str().unwrap(), "--json"]);
    let origin = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "order_lookup")
        .map(|t| t["origin"].clone());
    assert_eq!(origin, Some(json!("registry")), "{v}");

    let o = sh.run(&["agent", "register", project.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with("registered agent support-agent (id "),
        "{text}"
    );
    assert!(text.contains("order_lookup ("), "{text}");
    let usage = sh.json(&["registry", "tool", "usage", "order_lookup", "--json"]);
    assert_eq!(usage.as_array().unwrap().len(), 1, "{usage}");
    assert_eq!(usage[0]["agent_name"], "support-agent");
    let o = sh.run(&["registry", "tool", "usage", "order_lookup"]);
    assert!(stdout(&o).contains("support-agent"), "{}", stdout(&o));

    // A project whose agent.yaml is wrong is refused before anything is sent.
    let bad = sh.home.path().join("bad");
    write(&bad, "agent.yaml", "name: 'bad name'\ntools: 3\n");
    let o = sh.run(&["agent", "register", bad.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));

    // Delete: gone from show and list, its revisions kept.
    let tool = sh.json(&["registry", "tool", "show", "order_lookup", "--json"]);
    let id = tool["id"].as_str().unwrap().to_owned();
    let o = sh.run(&["registry", "tool", "delete", "order_lookup"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("deleted order_lookup"),
        "{}",
        stdout(&o)
    );
    let o = sh.run(&["registry", "tool", "show", "order_lookup"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("NOT_FOUND"), "{}", stderr(&o));
    let o = sh.run(&["registry", "tool", "list"]);
    assert!(!stdout(&o).contains("order_lookup"), "{}", stdout(&o));
    let versions = sh.json(&["registry", "tool", "versions", &id, "--json"]);
    assert_eq!(versions[0]["status"], "deleted", "{versions}");
    let o = sh.run(&["registry", "tool", "delete", "order_lookup"]);
    assert_eq!(code(&o), 2);
}

#[test]
fn a_parked_call_exits_4_and_is_decided_and_resumed_on_the_server() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let file = write(
        sh.home.path(),
        "guarded.yaml",
        "spec_version: v1\nname: guarded-time\ndescription: The time, after a person agrees.\napproval: always\nendpoint: builtin:get_current_time\n",
    );
    let o = sh.run(&["registry", "tool", "push", file.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let call_and_run = |o: &Output| {
        let err = stderr(o);
        let call = err
            .split_whitespace()
            .skip_while(|w| *w != "call")
            .nth(1)
            .unwrap_or_else(|| panic!("no call id in {err}"))
            .to_owned();
        let run = err
            .split_whitespace()
            .skip_while(|w| *w != "run")
            .nth(1)
            .unwrap_or_else(|| panic!("no run id in {err}"))
            .to_owned();
        (call, run)
    };

    // Approved: the resumed run completes with the tool's output.
    let o = sh.run(&["registry", "tool", "run", "guarded-time"]);
    assert_eq!(code(&o), 4, "{}{}", stdout(&o), stderr(&o));
    let (call, run) = call_and_run(&o);
    assert!(
        stderr(&o).contains(&format!("toolshed registry approve {call}")),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(&format!("toolshed registry resume {run}")),
        "{}",
        stderr(&o)
    );
    let o = sh.run(&["registry", "resume", &run]);
    assert_eq!(code(&o), 4, "still undecided: {}", stderr(&o));
    let o = sh.run(&["registry", "approve", &call, "--reason", "checked"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = sh.run(&["registry", "approve", &call]);
    assert_eq!(code(&o), 2, "deciding twice: {}", stderr(&o));
    assert!(stderr(&o).contains("CONFLICT"), "{}", stderr(&o));
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    let before = unix_now();
    let o = sh.run(&["registry", "resume", &run]);
    let after = unix_now();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The output is get_current_time's answer, taken while the run resumed.
    let time: Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("not the tool's JSON output ({e}): {}", stdout(&o)));
    let iso = time["iso8601"].as_str().unwrap_or_default();
    let parsed = chrono::DateTime::parse_from_rfc3339(iso)
        .unwrap_or_else(|e| panic!("not an RFC 3339 timestamp ({e}): {time}"));
    assert_eq!(Some(parsed.timestamp()), time["unix"].as_i64(), "{time}");
    assert!(
        (before..=after).contains(&parsed.timestamp()),
        "{iso} is not a time between the resume's start ({before}) and end ({after})"
    );
    assert_eq!(time["offset"], "+00:00", "{time}");

    // Denied: the resumed run ends with an error result.
    let o = sh.run(&["registry", "tool", "run", "guarded-time", "--json"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(parked["status"], "parked");
    let call = parked["call_id"].as_str().unwrap();
    let run = parked["run_id"].as_str().unwrap();
    let o = sh.run(&["registry", "deny", call, "--reason", "not now"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = sh.run(&["registry", "resume", run]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("not now"), "{}", stderr(&o));
}

// ---- uploaded code (issue 10) ----

const ADDER_V1: &str = "def adder(x: int) -> int:\n    \"\"\"Add one.\"\"\"\n    return x + 1\n";
const ADDER_V2: &str = "def adder(x: int) -> int:\n    \"\"\"Add two.\"\"\"\n    return x + 2\n";

fn run_output(sh: &Shell, name: &str, args: &str) -> String {
    let o = sh.run(&["registry", "tool", "run", name, "--args", args]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    stdout(&o).trim().to_owned()
}

#[test]
fn push_from_a_second_folder_runs_on_a_server_started_elsewhere() {
    // The server runs in its own folder; the pusher works in another one, and the file
    // is gone from it before the tool runs: nothing but the upload reaches the server.
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let work = tempfile::tempdir().unwrap();
    let py = write(work.path(), "adder.py", ADDER_V1);
    let o = sh.run(&["registry", "tool", "push", py.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    drop(work);
    assert!(!py.exists());
    assert_eq!(run_output(&sh, "adder", r#"{"x": 41}"#), "42");
    let tool = sh.json(&["registry", "tool", "show", "adder", "--json"]);
    assert_eq!(tool["endpoint"], "python:adder.py");
    assert!(
        !tool.to_string().contains(&py.display().to_string()),
        "the pusher's path is nowhere in the tool: {tool}"
    );
    let o = sh.run(&["registry", "tool", "show", "adder"]);
    assert!(
        stdout(&o).contains("code         sha256 "),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_new_push_is_a_new_revision_and_the_old_one_keeps_its_code() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let work = sh.home.path().join("work");
    let py = write(&work, "adder.py", ADDER_V1);
    let o = sh.run(&["registry", "tool", "push", py.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(run_output(&sh, "adder", r#"{"x": 1}"#), "2");
    write(&work, "adder.py", ADDER_V2);
    let o = sh.run(&["registry", "tool", "push", py.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("updated adder to revision 2"),
        "{}",
        stdout(&o)
    );
    assert_eq!(run_output(&sh, "adder", r#"{"x": 1}"#), "3");
    let versions = sh.json(&["registry", "tool", "versions", "adder", "--json"]);
    let shas: Vec<String> = versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["code"]["sha256"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shas.len(), 2);
    assert_ne!(shas[0], shas[1]);
    let old = sh.home.path().join("old.py");
    let o = sh.run(&[
        "registry",
        "tool",
        "pull",
        "adder",
        "--revision",
        "1",
        "--output",
        old.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&old).unwrap(), ADDER_V1);
}

#[test]
fn pull_returns_the_exact_bytes() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let work = sh.home.path().join("work");
    // CRLF line ends, non-ASCII text, trailing blanks, no final newline: kept as sent.
    let body =
        "def odd():\r\n    \"\"\"Odd: \u{e9} \u{fc} \u{6f22}.\"\"\"\r\n    return 1   \r\n# end\t"
            .as_bytes()
            .to_vec();
    let py = work.join("odd.py");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(&py, &body).unwrap();
    let o = sh.run(&["registry", "tool", "push", py.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = sh.home.path().join("pulled.py");
    let answer = sh.json(&[
        "registry",
        "tool",
        "pull",
        "odd",
        "--output",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(std::fs::read(&out).unwrap(), body);
    assert_eq!(answer["paths"], json!(["odd.py"]));
    // Pulling again does not overwrite.
    let o = sh.run(&[
        "registry",
        "tool",
        "pull",
        "odd",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("not overwritten"), "{}", stderr(&o));
}

#[test]
fn a_package_folder_with_a_manifest_and_a_pypi_dependency_is_pushed_run_and_pulled() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let pkg = sh.home.path().join("pkg");
    write(
        &pkg,
        "tool.yaml",
        "spec_version: v1\nname: six-kind\ndescription: Says what six thinks.\nimplementation:\n  language: python\n  entrypoint: src/main.py:kind\n",
    );
    write(
        &pkg,
        "src/main.py",
        "import six\nfrom helpers import label\n\ndef kind(x: str) -> str:\n    \"\"\"Say what six thinks.\"\"\"\n    return label(six.__version__, isinstance(x, six.string_types))\n",
    );
    write(
        &pkg,
        "src/helpers.py",
        "def label(v, ok):\n    return f\"six {v}: {ok}\"\n",
    );
    write(&pkg, "requirements.txt", "six==1.16.0\n");
    // Never part of a package: hidden folders and caches, a journal and its WAL, and
    // what the folder's .gitignore and .toolshedignore exclude.
    write(&pkg, ".git/config", "[core]\n");
    write(&pkg, "src/__pycache__/main.cpython-312.pyc", "junk");
    write(&pkg, "toolshed.db", "SQLite format 3\0");
    write(&pkg, "toolshed.db-wal", "wal");
    write(
        &pkg,
        "node_modules/left-pad/index.js",
        "module.exports = 1;\n",
    );
    write(&pkg, ".gitignore", "secrets.txt\n/build/\n");
    write(&pkg, "secrets.txt", "sk-do-not-upload");
    write(&pkg, "build/out.bin", "artifact");
    write(&pkg, ".toolshedignore", "notes/\n");
    write(&pkg, "notes/draft.md", "draft");
    let o = sh.run(&["registry", "tool", "push", pkg.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // It says what it uploads.
    let said = stderr(&o);
    assert!(said.contains("4 files,"), "{said}");
    for f in [
        "tool.yaml",
        "src/main.py",
        "src/helpers.py",
        "requirements.txt",
    ] {
        assert!(said.contains(f), "{f} is not listed: {said}");
    }
    assert!(
        !said.contains("toolshed.db") && !said.contains("secrets.txt"),
        "{said}"
    );
    let tool = sh.json(&["registry", "tool", "show", "six-kind", "--json"]);
    assert_eq!(tool["endpoint"], "python:src/main.py:kind");
    assert_eq!(tool["code"]["files"], 4);
    assert_eq!(
        run_output(&sh, "six-kind", r#"{"x": "a"}"#),
        "six 1.16.0: True"
    );

    let out = sh.home.path().join("pulled");
    let o = sh.run(&[
        "registry",
        "tool",
        "pull",
        "six-kind",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for f in [
        "tool.yaml",
        "src/main.py",
        "src/helpers.py",
        "requirements.txt",
    ] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(pkg.join(f)).unwrap(),
            "{f}"
        );
    }
    assert!(!out.join(".git").exists());

    // A symlink in a package is refused before anything is sent.
    std::os::unix::fs::symlink("/etc/passwd", pkg.join("src/passwd")).unwrap();
    let o = sh.run(&["registry", "tool", "push", pkg.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("symlink"), "{}", stderr(&o));
}

#[test]
fn a_python_file_named_unlike_its_one_function_is_pushed_and_run() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let src = sh.home.path().join("src");
    let py = write(
        &src,
        "orders.py",
        "from dataclasses import dataclass\n\n@dataclass\nclass Line:\n    sku: str\n    qty: int = 1\n\ndef _fmt(n):\n    return n\n\ndef count_lines(lines: list[Line]) -> dict:\n    \"\"\"Count an order's items.\"\"\"\n    return {\"kind\": type(lines[0]).__name__, \"total\": _fmt(sum(l.qty for l in lines))}\n",
    );
    let o = sh.run(&["registry", "tool", "push", py.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let tool = sh.json(&["registry", "tool", "show", "count-lines", "--json"]);
    assert_eq!(tool["endpoint"], "python:orders.py:count_lines");
    assert_eq!(
        tool["schema_definition"]["properties"]["lines"]["items"],
        json!({"$ref": "#/$defs/Line"})
    );
    let run = sh.json(&[
        "registry",
        "tool",
        "run",
        "count-lines",
        "--args",
        r#"{"lines": [{"sku": "A", "qty": 2}, {"sku": "B"}]}"#,
        "--json",
    ]);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], json!({"kind": "Line", "total": 3}));

    // Two public functions and none named like the file: refused, both named.
    let two = write(
        &src,
        "helpers.py",
        "def alpha(x: int) -> int:\n    \"\"\"A.\"\"\"\n    return x\n\ndef beta(y: str) -> str:\n    \"\"\"B.\"\"\"\n    return y\n",
    );
    let o = sh.run(&["registry", "tool", "push", two.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("defines 2 public functions (`alpha`, `beta`)"),
        "{}",
        stderr(&o)
    );
}

// ---- bread and Toren files pushed to the registry keep their contract (issue 28) ----

const COMPAT_FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolshed-dispatch/tests/fixtures/compat"
);

/// A sessionless `2026-07-28` `tools/call` on the server's `/mcp`, as `curl` sends it:
/// the JSON-RPC answer.
fn mcp_call(server: &Server, token: &str, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": args,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let o = Command::new("curl")
        .args(["-sS", "-X", "POST", &format!("{}/mcp", server.url)])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", "Accept: application/json, text/event-stream"])
        .args(["-H", "MCP-Protocol-Version: 2026-07-28"])
        .args(["-H", "Mcp-Method: tools/call"])
        .args(["-H", &format!("Mcp-Name: {tool}")])
        .args(["--data-binary", &body.to_string()])
        .output()
        .unwrap();
    let text = stdout(&o);
    // One JSON body, or an event stream whose data line is the answer.
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {text}"))
}

fn admin_token(server: &Server) -> String {
    let o = Command::new("curl")
        .args([
            "-sS",
            "-X",
            "POST",
            &format!("{}/api/v1/auth/login", server.url),
        ])
        .args(["-H", "Content-Type: application/json"])
        .args([
            "--data-binary",
            &json!({"username": "admin", "password": ADMIN_PASSWORD}).to_string(),
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["data"]["token"].as_str().unwrap().to_owned()
}

#[test]
fn a_pushed_toren_file_keeps_its_approval_predicate_over_rest_and_mcp() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let file = format!("{COMPAT_FIXTURES}/fetch_report.ts");
    let o = sh.run(&["registry", "tool", "push", &file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The name as the file writes it, and the contract the registry read from the code.
    let shown = sh.json(&["registry", "tool", "show", "fetch_report", "--json"]);
    let compat = &shown["definition"]["compat"];
    assert_eq!(compat["approval"], "predicate", "{shown}");
    assert_eq!(compat["effects"], "external", "{shown}");
    assert_eq!(compat["max_attempts"], 2, "{shown}");
    // 500 > 100: the predicate, run in the tool's worker, parks the call.
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "fetch_report",
        "--args",
        r#"{"report": "annual", "amount": 500}"#,
    ]);
    assert_eq!(
        code(&o),
        4,
        "parked for approval: {}{}",
        stdout(&o),
        stderr(&o)
    );
    // 50: no approval needed, it runs.
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "fetch_report",
        "--args",
        r#"{"report": "q1", "amount": 50}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("q1"), "{}", stdout(&o));
    // Over /mcp the same gate holds.
    let token = admin_token(&server);
    let answer = mcp_call(
        &server,
        &token,
        "fetch_report",
        json!({"report": "annual", "amount": 500}),
    );
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["status"], "pending_approval",
        "{answer}"
    );
    // A bread file's onError hook runs in its worker on the server: a failed search
    // recovers with empty results. The name is kept as given, underscore and all.
    let file = format!("{COMPAT_FIXTURES}/web_search.ts");
    let o = sh.run(&["registry", "tool", "push", &file, "--name", "hooked_search"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let shown = sh.json(&["registry", "tool", "show", "hooked_search", "--json"]);
    assert_eq!(
        shown["definition"]["compat"]["hooks"],
        json!(["onError"]),
        "{shown}"
    );
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "hooked_search",
        "--args",
        r#"{"query": "fail"}"#,
    ]);
    assert_eq!(code(&o), 0, "recovered by its onError hook: {}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "[]", "{}", stdout(&o));
    // A client cannot claim a file's contract for it.
    let claimed = write(
        sh.home.path(),
        "claimed.yaml",
        "spec_version: v1\nname: claimed\ndescription: d\nendpoint: builtin:get_current_time\ncompat: {approval: never}\n",
    );
    let o = sh.run(&["registry", "tool", "push", claimed.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("compat"), "{}", stderr(&o));
}

#[test]
fn a_pushed_bread_human_tool_parks_its_run_for_an_answer() {
    let server = Server::start();
    let sh = server.shell();
    sh.login_admin();
    let file = format!("{COMPAT_FIXTURES}/approve.ts");
    let o = sh.run(&["registry", "tool", "push", &file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = sh.run(&[
        "registry",
        "tool",
        "run",
        "approve_publish",
        "--json",
        "--args",
        r#"{"url": "https://example.com/post"}"#,
    ]);
    assert_eq!(
        code(&o),
        4,
        "parked for an answer: {}{}",
        stdout(&o),
        stderr(&o)
    );
    let parked: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let call = parked["call_id"].as_str().unwrap().to_owned();
    let run = parked["run_id"].as_str().unwrap().to_owned();
    let o = sh.run(&[
        "registry",
        "answer",
        &call,
        "--answer",
        r#"{"approved": true}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = sh.run(&["registry", "resume", &run]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("approved"), "{}", stdout(&o));
}
