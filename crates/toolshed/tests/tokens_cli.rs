//! Tokens, passwords and login limits with the real `toolshed serve`: the first admin's
//! generated password never reaches stdout or the log; `toolshed user passwd` sets it
//! and ends the old tokens; a flood of 500 concurrent bad logins is answered 429 with
//! `Retry-After` in bounded memory; and AgentBreeder's own CLI (`agentbreeder`, from
//! PyPI) logs in, pushes, lists and runs a tool.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
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
    stdout: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Start on a free port over a new database; `admin_password` goes in
    /// `TOOLSHED_ADMIN_PASSWORD` when given. Stderr (the log) goes to `server.log`.
    fn start(admin_password: Option<&str>, args: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
        let stderr = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolshed"));
        cmd.args(["serve", "--addr", "127.0.0.1:0"])
            .args(args)
            .current_dir(dir.path())
            .env("TOOLSHED_DATABASE_URL", &db)
            // Everything the server logs at debug, to show the password is in none of it.
            .env("TOOLSHED_LOG", "debug")
            .env_remove("TOOLSHED_JWT_SECRET")
            .env_remove("TOOLSHED_ADMIN_PASSWORD_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        match admin_password {
            Some(p) => cmd.env("TOOLSHED_ADMIN_PASSWORD", p),
            None => cmd.env_remove("TOOLSHED_ADMIN_PASSWORD"),
        };
        let mut child = cmd.spawn().unwrap();
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
        server.url = url.to_owned();
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Stdout after the first line, up to the stdlib line.
    fn announcement(&self) -> String {
        let mut lines = Vec::new();
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(30)) {
            let done = line.starts_with("registered ");
            lines.push(line);
            if done {
                break;
            }
        }
        lines.join("\n")
    }

    /// The resident memory of the server process, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// `toolshed` with this server's database and URL, from `home`.
    fn toolshed(&self, home: &Path, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(args)
            .current_dir(home)
            .env("TOOLSHED_URL", &self.url)
            .env("TOOLSHED_CONFIG_DIR", home.join("config"))
            .env("TOOLSHED_DATABASE_URL", &self.db)
            .env_remove("TOOLSHED_API_TOKEN")
            .env_remove("TOOLSHED_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Log in over HTTP: status and body.
async fn login(client: &reqwest::Client, url: &str, user: &str, password: &str) -> (u16, Value) {
    let resp = client
        .post(format!("{url}/api/v1/auth/login"))
        .json(&json!({"username": user, "password": password}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn me(client: &reqwest::Client, url: &str, token: &str) -> u16 {
    client
        .get(format!("{url}/api/v1/auth/me"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn a_generated_admin_password_goes_to_the_named_file_only_and_user_passwd_replaces_it() {
    // Without a file and without a terminal: shown nowhere.
    let quiet = Server::start(None, &[]);
    let said = quiet.announcement();
    assert!(said.contains("toolshed user passwd admin"), "{said}");
    assert!(said.contains("not shown"), "{said}");
    drop(quiet);

    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("admin-password");
    let server = Server::start(None, &["--admin-password-file", file.to_str().unwrap()]);
    let said = server.announcement();
    assert!(said.contains("password written to"), "{said}");
    let password = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    assert!(password.len() >= 16, "a generated password: {password:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!said.contains(&password), "not on stdout: {said}");
    let home = tempfile::tempdir().unwrap();

    let rt = runtime();
    let client = reqwest::Client::new();
    let (status, body) = rt.block_on(login(&client, &server.url, "admin", &password));
    assert_eq!(status, 200, "{body}");
    let old = body["data"]["token"].as_str().unwrap().to_owned();

    // `toolshed user passwd` reads the new password from stdin (never argv), straight
    // into the database: the running server refuses the old token within seconds.
    let o = server.toolshed(home.path(), &["user", "passwd"], "a-new-admin-password\n");
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("a-new-admin-password"), "{}", text(&o));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = rt.block_on(me(&client, &server.url, &old));
        if status == 401 {
            break;
        }
        assert_eq!(status, 200);
        assert!(
            Instant::now() < deadline,
            "the old token still works after 15 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, _) = rt.block_on(login(&client, &server.url, "admin", &password));
    assert_eq!(status, 401, "the generated password is replaced");
    let (status, _) = rt.block_on(login(&client, &server.url, "admin", "a-new-admin-password"));
    assert_eq!(status, 200);
    // An unknown user is bad input, asked for no password.
    let o = server.toolshed(home.path(), &["user", "passwd", "ghost"], "x\n");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));

    // Neither password is anywhere in the log, at debug level.
    let log = server.log();
    assert!(log.contains("registry server started"), "{log}");
    for secret in [password.as_str(), "a-new-admin-password"] {
        assert!(!log.contains(secret), "a password in the log");
    }
}

#[test]
fn five_hundred_concurrent_bad_logins_cost_bounded_memory_and_get_429s() {
    // Every login on a connection of its own, from one address: past the cap per
    // address (128 by default) most would be refused before any password check, and
    // this test is about the checks.
    let server = Server::start(
        Some(ADMIN_PASSWORD),
        &["--max-connections-per-address", "1024"],
    );
    let _ = server.announcement();
    let rt = runtime();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    // One good login first, so the server's steady state (a hash done, its buffers
    // allocated) is what "before" measures.
    let (status, _) = rt.block_on(login(&client, &server.url, "admin", ADMIN_PASSWORD));
    assert_eq!(status, 200);
    let before = server.rss_kib();

    let answers: Vec<(u16, Option<String>)> = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..500 {
            let client = client.clone();
            let url = server.url.clone();
            tasks.push(tokio::spawn(async move {
                let resp = client
                    .post(format!("{url}/api/v1/auth/login"))
                    .timeout(Duration::from_secs(120))
                    .json(&json!({"username": format!("user-{}", i % 7), "password": "wrong-password"}))
                    .send()
                    .await
                    .unwrap();
                let retry = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                (resp.status().as_u16(), retry)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let after = server.rss_kib();

    let unauthorized = answers.iter().filter(|(s, _)| *s == 401).count();
    let limited: Vec<_> = answers.iter().filter(|(s, _)| *s == 429).collect();
    assert_eq!(
        unauthorized + limited.len(),
        500,
        "every answer is 401 or 429: {answers:?}"
    );
    assert!(
        limited.len() >= 400,
        "most of the flood is refused before hashing: {} of 500",
        limited.len()
    );
    for (_, retry) in &limited {
        let secs: u64 = retry.as_deref().unwrap_or("").parse().unwrap_or(0);
        assert!(
            (1..=60).contains(&secs),
            "a 429 without a usable Retry-After: {retry:?}"
        );
    }
    // An argon2 check takes ~19 MiB: 500 at once would be gigabytes. The server checks
    // a few at a time, so the flood costs at most a few of them.
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "RSS before {} MiB, after {} MiB; 401: {unauthorized}, 429: {}",
        before / 1024,
        after / 1024,
        limited.len()
    );
    assert!(
        grown_mib < 160,
        "the server grew by {grown_mib} MiB answering 500 bad logins"
    );
    // And it still answers.
    let fresh = reqwest::Client::new();
    let health = rt.block_on(async {
        fresh
            .get(format!("{}/healthz", server.url))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(health, 200);
}

/// The `agentbreeder` program: `AGENTBREEDER_BIN`, or a clear failure saying how to
/// install it.
fn agentbreeder_bin() -> String {
    match std::env::var("AGENTBREEDER_BIN") {
        Ok(b) if !b.trim().is_empty() && Path::new(&b).exists() => b,
        other => panic!(
            "this test runs AgentBreeder's own CLI: set AGENTBREEDER_BIN to its `agentbreeder` program \
             (got {other:?}). Install it with:\n  python3 -m venv /tmp/agentbreeder && \
             /tmp/agentbreeder/bin/pip install 'agentbreeder==2.7.*'\n  export AGENTBREEDER_BIN=/tmp/agentbreeder/bin/agentbreeder\n\
             (.ci/run does this)"
        ),
    }
}

/// A tool file as AgentBreeder's `registry tool push` reads it: a module with a
/// `SCHEMA` dict and a function named like the file.
const ORDER_LOOKUP: &str = r#""""Look up an order by its id."""

SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "include_tracking": {"type": "boolean"},
    },
    "required": ["order_id"],
}


def order_lookup(order_id: str, include_tracking: bool = False) -> dict:
    return {
        "order_id": order_id,
        "status": "shipped",
        "tracking": "1Z999" if include_tracking else None,
    }
"#;

#[test]
fn agentbreeders_own_cli_logs_in_pushes_lists_and_runs_against_toolshed() {
    let bin = agentbreeder_bin();
    // The user's project folder, elsewhere than the server's.
    let project = tempfile::tempdir().unwrap();
    // AgentBreeder's push registers `python:<absolute path>` rather than sending the code:
    // toolshed runs such a path only for an admin and only under an operator's tool root,
    // so this server (on the same machine) names the project as one. Against a remote
    // server the answer is a 422 saying to push with `toolshed registry tool push`.
    let root = project.path().canonicalize().unwrap();
    let root = root.to_str().unwrap();
    let server = Server::start(Some(ADMIN_PASSWORD), &["--tool-root", root]);
    let _ = server.announcement();
    std::fs::create_dir_all(project.path().join("tools")).unwrap();
    std::fs::write(project.path().join("tools/order_lookup.py"), ORDER_LOOKUP).unwrap();
    let home = project.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let ab = |args: &[&str], token: Option<&str>| -> Output {
        let mut c = Command::new(&bin);
        c.args(args)
            .current_dir(project.path())
            .env("AGENTBREEDER_URL", &server.url)
            .env("HOME", &home)
            .env("AGENTBREEDER_HOME", home.join(".agentbreeder"))
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200")
            .env_remove("AGENTBREEDER_API_URL")
            .env_remove("AGENTBREEDER_API_TOKEN")
            .stdin(Stdio::null());
        if let Some(t) = token {
            c.env("AGENTBREEDER_API_TOKEN", t);
        }
        c.output().unwrap()
    };

    // login: {"email", "password"} to /api/v1/auth/login, then GET /api/v1/auth/me.
    // Without an OS keychain (CI) it says so and tells to use AGENTBREEDER_API_TOKEN.
    let o = ab(
        &["login", "--email", "admin", "--password", ADMIN_PASSWORD],
        None,
    );
    assert!(o.status.success(), "agentbreeder login: {}", text(&o));
    assert!(
        text(&o).contains("Logged in as admin"),
        "agentbreeder login: {}",
        text(&o)
    );
    let o = ab(
        &["login", "--email", "admin", "--password", "wrong-password"],
        None,
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("Invalid email or password"),
        "{}",
        text(&o)
    );

    // The token the rest uses, the way a CI user sets it: from the same login route.
    let rt = runtime();
    let client = reqwest::Client::new();
    let (status, body) = rt.block_on(async {
        let r = client
            .post(format!("{}/api/v1/auth/login", server.url))
            .json(&json!({"email": "admin", "password": ADMIN_PASSWORD}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    assert_eq!(status, 200, "{body}");
    let token = body["data"]["access_token"].as_str().unwrap().to_owned();
    // `login --token` validates a pasted token against /api/v1/auth/me.
    let o = ab(&["login", "--token", &token], None);
    assert!(
        text(&o).contains("Logged in as admin"),
        "agentbreeder login --token: {}",
        text(&o)
    );

    let o = ab(&["whoami"], Some(&token));
    assert!(o.status.success(), "agentbreeder whoami: {}", text(&o));
    let shown = text(&o);
    assert!(
        shown.contains("admin") && shown.contains("default"),
        "{shown}"
    );
    let o = ab(&["whoami", "--json"], Some(&token));
    let who: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("whoami --json ({e}): {}", text(&o)));
    assert_eq!(
        (
            who["email"].as_str(),
            who["role"].as_str(),
            who["team"].as_str()
        ),
        (Some("admin"), Some("owner"), Some("default")),
        "{who}"
    );

    let o = ab(
        &["registry", "tool", "push", "tools/order_lookup.py"],
        Some(&token),
    );
    assert!(
        o.status.success(),
        "agentbreeder registry tool push: {}",
        text(&o)
    );
    assert!(text(&o).contains("order-lookup"), "{}", text(&o));

    let o = ab(&["registry", "tool", "list"], Some(&token));
    assert!(
        o.status.success(),
        "agentbreeder registry tool list: {}",
        text(&o)
    );
    assert!(text(&o).contains("order-lookup"), "{}", text(&o));

    let o = ab(
        &[
            "registry",
            "tool",
            "run",
            "order-lookup",
            "--args",
            r#"{"order_id": "ORD-123456", "include_tracking": true}"#,
        ],
        Some(&token),
    );
    assert!(
        o.status.success(),
        "agentbreeder registry tool run: {}",
        text(&o)
    );
    let shown = text(&o);
    assert!(
        shown.contains("ORD-123456") && shown.contains("shipped") && shown.contains("1Z999"),
        "{shown}"
    );

    // A withdrawn token is refused to AgentBreeder's CLI too: change the password
    // (AgentBreeder's own change-password body) and the old token stops working.
    let status = rt.block_on(async {
        client
            .post(format!("{}/api/v1/auth/change-password", server.url))
            .bearer_auth(&token)
            .json(&json!({"old_password": ADMIN_PASSWORD, "new_password": "another-password-1"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(status, 200);
    let o = ab(&["whoami"], Some(&token));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("Invalid or expired token"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_cli_refreshes_its_saved_token_when_the_access_token_ran_out() {
    // Access tokens of 3 s (expiry is in whole seconds: they live 2-3 s).
    let server = Server::start(Some(ADMIN_PASSWORD), &["--token-ttl-seconds", "3"]);
    let _ = server.announcement();
    let home = tempfile::tempdir().unwrap();
    let o = server.toolshed(
        home.path(),
        &["login", "--username", "admin", "--password", ADMIN_PASSWORD],
        "",
    );
    assert!(o.status.success(), "{}", text(&o));
    let saved = home.path().join("config/token");
    let first = std::fs::read_to_string(&saved).unwrap().trim().to_owned();
    assert!(home.path().join("config/refresh_token").exists());

    // Wait until the saved access token is refused.
    let rt = runtime();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while rt.block_on(me(&client, &server.url, &first)) != 401 {
        assert!(
            Instant::now() < deadline,
            "a 3 s token still valid after 15 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The CLI exchanges the saved refresh token and goes on.
    let o = server.toolshed(home.path(), &["registry", "tool", "list", "--json"], "");
    assert!(o.status.success(), "{}", text(&o));
    let renewed = std::fs::read_to_string(&saved).unwrap().trim().to_owned();
    assert_ne!(renewed, first, "the new access token is saved");

    // Once the user's tokens are withdrawn, the refresh token is refused too: the CLI
    // says to log in again.
    let o = server.toolshed(
        home.path(),
        &["user", "passwd", "admin"],
        "another-password-1\n",
    );
    assert!(o.status.success(), "{}", text(&o));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let o = server.toolshed(home.path(), &["registry", "tool", "list"], "");
        if !o.status.success() {
            assert!(text(&o).contains("toolshed login"), "{}", text(&o));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still logged in 15 s after passwd"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // `toolshed logout` ends the new login's session on the server and deletes the
    // saved tokens: a copy of them is refused from then on.
    let o = server.toolshed(
        home.path(),
        &[
            "login",
            "--username",
            "admin",
            "--password",
            "another-password-1",
        ],
        "",
    );
    assert!(o.status.success(), "{}", text(&o));
    let copied = std::fs::read_to_string(&saved).unwrap().trim().to_owned();
    assert_eq!(rt.block_on(me(&client, &server.url, &copied)), 200);
    let o = server.toolshed(home.path(), &["logout", "--json"], "");
    assert!(o.status.success(), "{}", text(&o));
    let answer: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(answer["session_ended"], true, "{answer}");
    assert_eq!(
        answer["deleted"].as_array().map(Vec::len),
        Some(2),
        "{answer}"
    );
    assert!(!saved.exists());
    assert!(!home.path().join("config/refresh_token").exists());
    assert_eq!(rt.block_on(me(&client, &server.url, &copied)), 401);
    // Again: nothing left to end, and it says so.
    let o = server.toolshed(home.path(), &["logout"], "");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no session to end"), "{}", text(&o));
}
