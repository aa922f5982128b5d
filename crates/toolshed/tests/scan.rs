//! `toolshed scan`, run as a user would: a project whose `.mcp.json` starts the real
//! `@modelcontextprotocol/server-everything` (from `tests/mcp`, after
//! `npm ci --prefix tests/mcp`) in the sandbox, its tools counted, as text and as
//! `--json`; broken files and missing variables (exit 5, the rest still scanned);
//! secrets never printed; `--register` against a real `toolshed serve` (project
//! servers disabled, references never values) and without a reachable registry.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// server-everything's entry point; the test fails (not skips) without it.
fn everything() -> PathBuf {
    let p = workspace()
        .join("tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        p.is_file(),
        "{} is missing: run `npm ci --prefix tests/mcp`",
        p.display()
    );
    std::fs::canonicalize(p).unwrap()
}

struct Folders {
    _dir: tempfile::TempDir,
    project: PathBuf,
    home: PathBuf,
    cache: PathBuf,
}

fn folders() -> Folders {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let home = dir.path().join("home");
    let cache = dir.path().join("cache");
    for d in [&project, &home, &cache] {
        std::fs::create_dir_all(d).unwrap();
    }
    Folders {
        _dir: dir,
        project,
        home,
        cache,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn scan(f: &Folders, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolshed"));
    cmd.arg("scan")
        .arg("--project")
        .arg(&f.project)
        .arg("--home")
        .arg(&f.home)
        .arg("--cache-dir")
        .arg(&f.cache)
        .args(extra)
        .current_dir(&f.project)
        .env_remove("TOOLSHED_API_TOKEN")
        .env("TOOLSHED_CONFIG_DIR", f.home.join(".config/toolshed"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)))
}

/// Where the test shows `tests/mcp/node_modules` inside the sandbox (`--bind`).
const MODULES: &str = "/mcp/node_modules";

/// `--bind` of the npm peers.
fn bind() -> String {
    let modules = everything()
        .ancestors()
        .nth(4)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    format!("{modules}:{MODULES}")
}

fn everything_project(f: &Folders) {
    assert!(everything().is_file());
    let config = serde_json::json!({
        "mcpServers": {
            "everything": {
                "command": "node",
                "args": [format!("{MODULES}/@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
                "env": {"EVERYTHING_TOKEN": "${SCAN_TEST_SECRET}"}
            }
        }
    });
    write(&f.project.join(".mcp.json"), &config.to_string());
}

const SECRET: &str = "scan-test-secret-value-5f2a";

#[test]
fn scan_starts_server_everything_and_counts_its_tools() {
    let f = folders();
    everything_project(&f);
    // A server the user turned off is not started (it would fail: exit 5).
    write(
        &f.home.join(".cursor/mcp.json"),
        r#"{"mcpServers": {"off": {"command": "/nonexistent/server", "disabled": true}}}"#,
    );

    let bind = bind();
    let o = scan(
        &f,
        &["--json", "--bind", &bind],
        &[("SCAN_TEST_SECRET", SECRET)],
    );
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    assert!(!stdout(&o).contains(SECRET) && !stderr(&o).contains(SECRET));
    let doc = json(&o);
    assert_eq!(doc["ok"], true);
    let servers = doc["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{doc:#}");
    assert_eq!(servers[1]["name"], "off");
    assert_eq!(servers[1]["status"], "not_started");
    let s = &servers[0];
    assert_eq!(s["name"], "everything");
    assert_eq!(s["transport"], "stdio");
    assert_eq!(s["status"], "ok", "{s:#}");
    assert_eq!(s["source"]["file"], "./.mcp.json");
    assert_eq!(s["source"]["scope"], "project");
    let tools: Vec<&str> = s["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let count = s["tool_count"].as_u64().unwrap() as usize;
    assert_eq!(count, tools.len());
    // server-everything 2026.8.31 lists 13 tools to a client without sampling or
    // elicitation, more to one with them.
    assert!(count >= 13, "{tools:?}");
    for t in ["echo", "get-sum", "get-structured-content"] {
        assert!(tools.contains(&t), "{t} not in {tools:?}");
    }
    assert_eq!(s["spec"]["env"]["EVERYTHING_TOKEN"], "${SCAN_TEST_SECRET}");
    assert_eq!(
        s["sandbox"]["network"], false,
        "a local server declares no network"
    );
    assert!(s["server_info"]["protocol_version"].is_string(), "{s:#}");

    // The seed's summary line, with the same count.
    let o = scan(&f, &["--bind", &bind], &[("SCAN_TEST_SECRET", SECRET)]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    // Columns are padded to the longest cell (here `~/.cursor/mcp.json`).
    assert!(
        text.lines()
            .any(|l| l == format!("everything  stdio  ./.mcp.json         ({count} tools)")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "off         stdio  ~/.cursor/mcp.json  (not started)"),
        "{text}"
    );
    assert!(text.contains("sandbox: network off"), "{text}");
    assert!(!text.contains(SECRET));
}

#[test]
fn a_server_that_cannot_start_is_listed_with_its_error_and_exit_5() {
    let f = folders();
    everything_project(&f);
    let config = serde_json::json!({
        "mcpServers": {
            "nonesuch": {"command": "/nonexistent/mcp-server"}
        }
    });
    write(&f.home.join(".cursor/mcp.json"), &config.to_string());
    let bind = bind();
    let o = scan(
        &f,
        &["--json", "--bind", &bind],
        &[("SCAN_TEST_SECRET", SECRET)],
    );
    assert_eq!(code(&o), 5, "{}\n{}", stdout(&o), stderr(&o));
    let doc = json(&o);
    assert_eq!(doc["ok"], false);
    let by_name = |n: &str| {
        doc["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        by_name("everything")["status"],
        "ok",
        "the rest still starts"
    );
    let bad = by_name("nonesuch");
    assert_eq!(bad["status"], "error");
    let error = bad["error"].as_str().unwrap();
    assert!(
        error.contains("hint: the sandbox shows a server only /usr and the --bind folders; `/nonexistent/mcp-server` is outside them"),
        "{error}"
    );
    assert_eq!(bad["source"]["scope"], "user");

    // Without the bind, the server's own file is not in the sandbox: the hint names it.
    let o = scan(&f, &["--json"], &[("SCAN_TEST_SECRET", SECRET)]);
    assert_eq!(code(&o), 5);
    let doc = json(&o);
    let error = doc["servers"][0]["error"].as_str().unwrap();
    assert!(error.contains("`/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js` is outside them"), "{error}");
}

#[test]
fn broken_files_name_file_line_and_field_and_the_rest_scans() {
    let f = folders();
    write(
        &f.project.join(".mcp.json"),
        "{\n  \"mcpServers\": {\n    \"zendesk\": {\"command\": \"npx\",\n      \"args\": \"-y zendesk-mcp\"},\n    \"needs\": {\"command\": \"x\", \"args\": [\"${SCAN_TEST_UNSET}\"]},\n    \"fine\": {\"command\": \"/opt/fine/server\"}\n  }\n}\n",
    );
    write(
        &f.project.join(".vscode/mcp.json"),
        "{\n  // comment\n  \"servers\": {\"vs\": {\"command\": \"/opt/vs/server\",},},\n}\n",
    );
    write(
        &f.home.join(".cursor/mcp.json"),
        "{\"mcpServers\": {\"cur\": {\"url\": \"https://example.com/mcp\"}} oops",
    );
    let o = scan(&f, &["--no-start"], &[]);
    assert_eq!(code(&o), 5, "{}\n{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("error: ./.mcp.json:4:30: mcpServers.zendesk.args: expected an array of strings, found string \"-y zendesk-mcp\" [MCP_CONFIG_INVALID]"),
        "{err}"
    );
    assert!(
        err.contains("./.mcp.json: server `needs`: args[0]: ${SCAN_TEST_UNSET} is not set")
            && err.contains("[MCP_CONFIG_VARIABLE]"),
        "{err}"
    );
    assert!(err.contains("error: ~/.cursor/mcp.json:1:"), "{err}");
    let out = stdout(&o);
    assert!(
        out.contains("fine  stdio  ./.mcp.json         (not started)"),
        "{out}"
    );
    assert!(
        out.contains("vs    stdio  ./.vscode/mcp.json  (not started)"),
        "{out}"
    );

    let doc = json(&scan(&f, &["--no-start", "--json"], &[]));
    let codes: Vec<&str> = doc["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes.len(), 3, "{doc:#}");
    assert!(codes.contains(&"MCP_CONFIG_INVALID") && codes.contains(&"MCP_CONFIG_VARIABLE"));
}

#[test]
fn secrets_are_references_never_values_and_literals_are_hidden() {
    let f = folders();
    write(
        &f.home.join(".claude.json"),
        &serde_json::json!({"mcpServers": {
            "gh": {"command": "/opt/gh/server", "args": ["--token", "${SCAN_TEST_SECRET}"],
                   "env": {"GITHUB_TOKEN": "${SCAN_TEST_SECRET}", "LITERAL": "sk-literal-in-file"}},
            "api": {"type": "http", "url": "https://example.com/mcp",
                    "headers": {"Authorization": "Bearer ${env:SCAN_TEST_SECRET}"}}
        }})
        .to_string(),
    );
    let o = scan(
        &f,
        &["--no-start", "--json"],
        &[("SCAN_TEST_SECRET", SECRET)],
    );
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(!all.contains(SECRET), "{all}");
    assert!(!all.contains("sk-literal-in-file"), "{all}");
    let doc = json(&o);
    let gh = &doc["servers"][1];
    assert_eq!(gh["name"], "gh");
    assert_eq!(gh["spec"]["env"]["GITHUB_TOKEN"], "${SCAN_TEST_SECRET}");
    assert_eq!(gh["spec"]["env"]["LITERAL"], "***");
    assert_eq!(
        gh["spec"]["args"][1], "***",
        "a value of the environment in args"
    );
    assert_eq!(gh["spec"]["credentials"][0], "SCAN_TEST_SECRET");
    let api = &doc["servers"][0];
    assert_eq!(
        api["spec"]["headers"]["Authorization"],
        "Bearer ${SCAN_TEST_SECRET}"
    );
}

#[test]
fn no_config_files_is_a_clean_empty_scan() {
    let f = folders();
    let o = scan(&f, &[], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("no MCP config files found"));
    let doc = json(&scan(&f, &["--json"], &[]));
    assert_eq!(doc["servers"], serde_json::json!([]));
    assert_eq!(doc["ok"], true);
}

#[test]
fn help_documents_the_exit_codes() {
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["scan", "--help"])
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(text.contains("--register") && text.contains("--json"));
    assert!(
        text.contains("Exit codes: 0") && text.contains("5 something did not"),
        "{text}"
    );
}

#[test]
fn register_without_a_reachable_registry_fails_whole_with_exit_3() {
    let f = folders();
    write(
        &f.project.join(".mcp.json"),
        "{\"mcpServers\": {\"fine\": {\"command\": \"/opt/fine/server\"}}}",
    );
    let o = scan(
        &f,
        &["--no-start", "--register"],
        &[
            ("TOOLSHED_URL", "http://127.0.0.1:1"),
            ("SCAN_TEST_SECRET", SECRET),
        ],
    );
    assert_eq!(code(&o), 3, "{}\n{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("cannot reach the toolshed registry"),
        "{}",
        stderr(&o)
    );
    assert!(!stdout(&o).contains(SECRET) && !stderr(&o).contains(SECRET));
}

/// A running `toolshed serve` on a free port over a temp SQLite file, killed when
/// dropped; an admin token for it.
struct Registry {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const ADMIN_PASSWORD: &str = "admin-password-1";

impl Registry {
    fn start() -> Registry {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        // The registry refuses credentials outside its policy; the scanned servers name
        // SCAN_TEST_SECRET.
        let policy = dir.path().join("credentials.yaml");
        std::fs::write(
            &policy,
            "default: {SCAN_TEST_SECRET: {provider: env, key: SCAN_TEST_SECRET}}\n",
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(["serve", "--addr", "127.0.0.1:0", "--credentials-policy"])
            .arg(&policy)
            .current_dir(dir.path())
            .env("TOOLSHED_CACHE_DIR", dir.path().join("cache"))
            .env("TOOLSHED_DATABASE_URL", &db)
            .env("TOOLSHED_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env_remove("TOOLSHED_JWT_SECRET")
            .env_remove("TOOLSHED_LOG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        // The first line says where it listens (it blocks until the server prints it).
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first
            .trim()
            .strip_prefix("toolshed registry listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "unexpected first line {first:?}: {}",
                    std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
                )
            })
            .to_owned();
        Registry {
            child,
            url,
            _dir: dir,
        }
    }

    /// Log in as the admin with a config folder under `home`.
    fn login(&self, home: &Path) {
        let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(["login", "--username", "admin", "--password", ADMIN_PASSWORD])
            .env("TOOLSHED_URL", &self.url)
            .env("TOOLSHED_CONFIG_DIR", home.join(".config/toolshed"))
            .env_remove("TOOLSHED_API_TOKEN")
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
}

#[test]
fn register_posts_every_server_project_ones_disabled_and_again_is_already_registered() {
    let f = folders();
    write(
        &f.project.join(".mcp.json"),
        &serde_json::json!({"mcpServers": {
            "proj": {"command": "/opt/proj/server", "args": ["--x"],
                     "env": {"PROJ_TOKEN": "${SCAN_TEST_SECRET}"}}
        }})
        .to_string(),
    );
    write(
        &f.home.join(".cursor/mcp.json"),
        &serde_json::json!({"mcpServers": {
            "mine": {"url": "https://mcp.example.com/mcp",
                     "headers": {"Authorization": "Bearer ${SCAN_TEST_SECRET}"}},
            "leaky": {"command": "/opt/leaky/server", "args": ["--token", "${SCAN_TEST_SECRET}"]}
        }})
        .to_string(),
    );
    let registry = Registry::start();
    registry.login(&f.home);
    let env = [
        ("TOOLSHED_URL", registry.url.as_str()),
        ("SCAN_TEST_SECRET", SECRET),
    ];

    let o = scan(&f, &["--no-start", "--register"], &env);
    assert_eq!(code(&o), 5, "{}\n{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(
        !text.contains(SECRET) && !stderr(&o).contains(SECRET),
        "{text}"
    );
    assert!(
        text.contains("not registered: args[1] holds a value of the environment"),
        "{text}"
    );
    assert!(
        text.contains(
            "disabled: it comes from a project file (./.mcp.json), so an admin must enable it"
        ),
        "{text}"
    );
    assert!(
        text.contains("registered") && text.contains(", enabled"),
        "{text}"
    );

    // What the registry stored: references, never the value; enabled as the scope says.
    let token = std::fs::read_to_string(f.home.join(".config/toolshed/token")).unwrap();
    let listing = http_get(
        &format!("{}/api/v1/mcp-servers", registry.url),
        token.trim(),
    );
    assert!(!listing.contains(SECRET), "{listing}");
    let listing: Value = serde_json::from_str(&listing).unwrap();
    let entry = |name: &str| {
        listing["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {listing:#}"))
    };
    assert_eq!(entry("proj")["enabled"], false);
    assert!(
        !listing["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "leaky"),
        "{listing:#}"
    );
    assert_eq!(entry("mine")["enabled"], true);
    let source = entry("proj")["source"].as_str().unwrap().to_owned();
    assert!(
        source.starts_with("scan:") && source.ends_with(".mcp.json"),
        "{source}"
    );

    // Scanning again does not fail on what is there (only `leaky` is still refused).
    let o = scan(&f, &["--no-start", "--register", "--json"], &env);
    assert_eq!(code(&o), 5, "{}\n{}", stdout(&o), stderr(&o));
    let doc = json(&o);
    let registered = |name: &str| {
        doc["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["registered"].clone())
            .unwrap()
    };
    assert_eq!(registered("proj")["already_registered"], true, "{doc:#}");
    assert_eq!(registered("mine")["already_registered"], true, "{doc:#}");
    assert!(registered("leaky")["error"].is_string(), "{doc:#}");
}

/// The attack: a Claude Desktop file holding API keys as literal values. `--register`
/// refuses that entry, naming each key and the `${NAME}` reference to write instead,
/// registers the rest, and no value reaches the registry, its answers or the output.
#[test]
fn register_refuses_literal_secrets_per_key_and_never_stores_them() {
    const OPENAI: &str = "sk-proj-Zq81mDw2LkT0bQ9nVf3x";
    const SLACK: &str = "xoxb-2231-8842-Hs7QpL0aVwq";
    let f = folders();
    write(
        &f.home.join(".config/Claude/claude_desktop_config.json"),
        &serde_json::json!({"mcpServers": {
            "slack": {"command": "/opt/slack/server",
                      "env": {"OPENAI_API_KEY": OPENAI, "SLACK_BOT_TOKEN": SLACK}},
            "hub": {"url": "https://mcp.example.com/mcp",
                    "headers": {"Authorization": format!("Bearer {OPENAI}")}},
            "clean": {"command": "/opt/clean/server", "env": {"TOKEN": "${SCAN_TEST_SECRET}"}}
        }})
        .to_string(),
    );
    let registry = Registry::start();
    registry.login(&f.home);
    let env = [
        ("TOOLSHED_URL", registry.url.as_str()),
        ("SCAN_TEST_SECRET", SECRET),
    ];
    let o = scan(&f, &["--no-start", "--register"], &env);
    assert_eq!(code(&o), 5, "{}\n{}", stdout(&o), stderr(&o));
    let text = format!("{}{}", stdout(&o), stderr(&o));
    for secret in [OPENAI, SLACK, SECRET] {
        assert!(!text.contains(secret), "{text}");
    }
    for needle in [
        "env.OPENAI_API_KEY: holds a literal value",
        "${OPENAI_API_KEY}",
        "env.SLACK_BOT_TOKEN: holds a literal value",
        "${SLACK_BOT_TOKEN}",
        "headers.Authorization: holds a literal value",
        "Bearer ${AUTHORIZATION}",
    ] {
        assert!(text.contains(needle), "{needle} in:\n{text}");
    }
    let token = std::fs::read_to_string(f.home.join(".config/toolshed/token")).unwrap();
    let listing = http_get(
        &format!("{}/api/v1/mcp-servers", registry.url),
        token.trim(),
    );
    for secret in [OPENAI, SLACK, SECRET] {
        assert!(!listing.contains(secret), "{listing}");
    }
    let listing: Value = serde_json::from_str(&listing).unwrap();
    let names: Vec<&str> = listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["clean"], "{listing:#}");
    // The JSON report says the same per server.
    let o = scan(&f, &["--no-start", "--register", "--json"], &env);
    let doc = json(&o);
    let slack = doc["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "slack")
        .unwrap();
    let error = slack["registered"]["error"].as_str().unwrap();
    assert!(error.contains("env.SLACK_BOT_TOKEN"), "{error}");
    assert!(!doc.to_string().contains(OPENAI), "{doc:#}");
}

/// A `GET` with a bearer token: a plain HTTP/1.0 request (so the answer is not
/// chunked) over a TCP stream to the local server.
fn http_get(url: &str, token: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(
        stream,
        "GET /{path} HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    body.to_owned()
}

/// server-everything over Streamable HTTP on a free port, killed when dropped.
struct HttpEverything {
    child: std::process::Child,
    port: u16,
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HttpEverything {
    fn start() -> HttpEverything {
        use std::io::BufRead;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("node")
            .arg(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // It says on stderr when it listens; read until then (the read blocks, no sleep).
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("listening on port") => break,
                Some(Ok(line)) => seen.push(line),
                _ => panic!("server-everything did not start: {seen:?}"),
            }
        }
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        HttpEverything { child, port }
    }
}

#[test]
fn an_http_server_is_listed_through_the_ssrf_guard() {
    let server = HttpEverything::start();
    let f = folders();
    write(
        &f.project.join(".cursor/mcp.json"),
        &serde_json::json!({"mcpServers": {
            "web": {"url": format!("http://127.0.0.1:{}/mcp", server.port)}
        }})
        .to_string(),
    );
    // Loopback is refused unless allowed: a cloned repository's config must not point
    // scan at the machine's own services.
    let o = scan(&f, &["--json"], &[]);
    assert_eq!(code(&o), 5, "{}\n{}", stdout(&o), stderr(&o));
    let doc = json(&o);
    assert_eq!(doc["servers"][0]["status"], "error");
    let error = doc["servers"][0]["error"].as_str().unwrap();
    assert!(error.contains("127.0.0.1"), "{error}");

    let o = scan(&f, &["--json", "--allow-http-host", "127.0.0.1"], &[]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let doc = json(&o);
    let s = &doc["servers"][0];
    assert_eq!(s["transport"], "streamable_http");
    assert_eq!(s["status"], "ok", "{s:#}");
    assert!(s["tool_count"].as_u64().unwrap() >= 13, "{s:#}");
    assert_eq!(
        s["sandbox"],
        Value::Null,
        "an HTTP server runs nowhere here"
    );
    let o = scan(&f, &["--allow-http-host", "127.0.0.1"], &[]);
    let count = s["tool_count"].as_u64().unwrap();
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l == format!("web  http   ./.cursor/mcp.json  ({count} tools)")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn unsandboxed_a_config_can_name_the_host_path_itself() {
    // The developer's opt-in: the server runs as a plain child, so the config names
    // tests/mcp/node_modules where npm put it.
    let f = folders();
    let config = serde_json::json!({
        "mcpServers": {"everything": {"command": "node", "args": [everything(), "stdio"]}}
    });
    write(&f.project.join(".mcp.json"), &config.to_string());
    let o = scan(&f, &["--json", "--unsandboxed"], &[]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let doc = json(&o);
    assert_eq!(doc["servers"][0]["status"], "ok", "{doc:#}");
    assert!(doc["servers"][0]["tool_count"].as_u64().unwrap() >= 13);
    assert_eq!(doc["servers"][0]["sandbox"], Value::Null);
    assert!(
        doc["servers"][0]["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("unsandboxed"),
        "{doc:#}"
    );
}
