//! Output floods against the call's output budget (`toolshed_core::budget`), each with
//! the peak memory of the process under attack in the test's report (run with
//! `--nocapture` to see it):
//! - a sandboxed snippet whose result file is a 60 MB sparse file, through
//!   `toolshed serve`'s `POST /api/v1/tools/sandbox/execute`;
//! - an MCP server answering `isError` with 100,000 small text blocks, and one sending
//!   100,000 progress notifications, through the CLI's `tools run --agent`.
//!
//! The MCP server is the test fixture `crates/toolshed-mcp/tests/fixtures/fixture_server.mjs`
//! in its `flood` mode, run by the machine's Node in the real sandbox.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

const ADMIN_PASSWORD: &str = "admin-password-1";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A kernel figure of `/proc/<pid>/status` (e.g. `VmHWM`), in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn files_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_sparse_result_file_is_refused_by_its_size_and_costs_the_server_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env("TOOLSHED_DATABASE_URL", &db)
        .env("TOOLSHED_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env_remove("TOOLSHED_JWT_SECRET")
        .env_remove("TOOLSHED_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let server = Killed(child);
    let pid = server.0.id();
    let addr: SocketAddr = first
        .trim()
        .strip_prefix("toolshed registry listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .parse()
        .unwrap();
    let url = format!("http://{addr}");
    let client = reqwest::Client::new();
    let rt = runtime();
    let token = rt.block_on(async {
        let r = client
            .post(format!("{url}/api/v1/auth/login"))
            .json(&json!({"username": "admin", "password": ADMIN_PASSWORD}))
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        v["data"]["access_token"].as_str().unwrap().to_owned()
    });
    let execute = |code: &str| {
        rt.block_on(async {
            let r = client
                .post(format!("{url}/api/v1/tools/sandbox/execute"))
                .bearer_auth(&token)
                .json(&json!({"code": code, "input_json": {}}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let bytes = r.bytes().await.unwrap();
            (
                status,
                bytes.len(),
                serde_json::from_slice::<Value>(&bytes).unwrap(),
            )
        })
    };
    // A first, ordinary run: the server's memory after it is the baseline.
    let (status, _, v) = execute("def run(input):\n    return 'hello'\n");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["output"], "\"hello\"", "{v}");
    let before = status_kib(pid, "VmHWM");
    let stored_before = files_bytes(dir.path());

    // The runner writes the result, then the tool's exit handler makes the result file
    // a 60 MB sparse file: it costs the sandbox nothing.
    let code = "import atexit, os\n\
                def run(input):\n    \
                    atexit.register(lambda: os.truncate('/work/.toolshed-output.json', 60_000_000))\n    \
                    return 'small'\n";
    let (status, answer_bytes, v) = execute(code);
    assert_eq!(status, 200, "{v}");
    let error = v["data"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("RESULT_TOO_LARGE: the result is 60000000 bytes"),
        "{v}"
    );
    assert_eq!(v["data"]["output"], Value::Null, "{v}");
    let after = status_kib(pid, "VmHWM");
    let stored = files_bytes(dir.path()).saturating_sub(stored_before);
    println!(
        "sparse result file: server peak RSS {before} KiB before, {after} KiB after; answer {answer_bytes} bytes; database and WAL grew {stored} bytes"
    );
    assert!(
        answer_bytes < 64 * 1024,
        "the answer is {answer_bytes} bytes"
    );
    // Before the budget: a 1.77 GB peak, a 377 MB answer, 378 MB + 381 MB on disk.
    assert!(
        after.saturating_sub(before) < 32 * 1024,
        "the server's peak RSS grew from {before} KiB to {after} KiB"
    );
    assert!(stored < 8 * 1024 * 1024, "the database grew {stored} bytes");
    drop(server);
}

/// The fixture MCP server's folder, shown in the sandbox at `/fixtures`.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../toolshed-mcp/tests/fixtures")
        .canonicalize()
        .unwrap()
}

/// An agent project with the fixture server in its flood mode.
fn flood_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "name: flooded\ntools:\n  - ref: mcp-servers/flood\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("mcp-servers")).unwrap();
    std::fs::write(
        dir.path().join("mcp-servers/flood.yaml"),
        "command: /usr/bin/node\nargs: [/fixtures/fixture_server.mjs, flood]\n",
    )
    .unwrap();
    dir
}

/// `toolshed ARGS` in `dir`, under a Python parent that reports the CLI's own peak RSS
/// (`VmHWM`, which only grows, read every 5 ms until the process ends; the sandboxed
/// MCP server's memory is not counted, as `ru_maxrss` of the children would count it):
/// (exit code, stdout, peak KiB).
fn cli_with_peak(dir: &Path, args: &[&str]) -> (i32, String, u64) {
    const WRAPPER: &str = r#"
import subprocess, sys, threading, time
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
out = []
reader = threading.Thread(target=lambda: out.append(p.stdout.read()))
reader.start()
peak = 0
while p.poll() is None:
    try:
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]))
    except OSError:
        pass
    time.sleep(0.005)
reader.join()
sys.stderr.write(f"peak_kib={peak}\n")
sys.stdout.buffer.write(out[0])
sys.exit(p.returncode)
"#;
    let o = Command::new("python3")
        .arg("-c")
        .arg(WRAPPER)
        .arg(env!("CARGO_BIN_EXE_toolshed"))
        .args(args)
        .current_dir(dir)
        .env(
            "TOOLSHED_DATABASE_URL",
            format!("sqlite://{}/journal.db", dir.display()),
        )
        .env("TOOLSHED_CONFIG_DIR", dir.join("config"))
        .env("TOOLSHED_MCP_CACHE", dir.join("mcp-cache"))
        .env(
            "TOOLSHED_MCP_BINDS",
            format!("{}:/fixtures", fixtures().display()),
        )
        .env_remove("TOOLSHED_URL")
        .env_remove("TOOLSHED_MCP_UNSANDBOXED")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let peak = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak_kib="))
        .unwrap_or_else(|| panic!("no peak in: {stderr}"))
        .parse()
        .unwrap();
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        peak,
    )
}

/// The journal's crumbs and recorded call of `run_id`, as `runs show --json --crumbs`.
fn shown(dir: &Path, run_id: &str) -> (Value, usize) {
    let (code, out, _) = cli_with_peak(dir, &["runs", "show", run_id, "--json", "--crumbs"]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let compact = v.to_string().len();
    (v, compact)
}

#[test]
fn an_mcp_error_with_100000_blocks_stays_within_the_budget() {
    let p = flood_project();
    // The CLI's own peak for a call of one block: the baseline.
    let (_, _, baseline) = cli_with_peak(
        p.path(),
        &[
            "tools",
            "run",
            "flood__error_flood",
            "--agent",
            ".",
            "--args",
            r#"{"blocks": 1}"#,
            "--json",
        ],
    );
    println!("isError with 1 block: CLI peak RSS {baseline} KiB");
    // Under the line cap and over the budget: refused as too large, nothing recorded
    // of its blocks. (100,000 blocks, about 3.5 MB, is over the stdio line cap, so a
    // smaller flood is what reaches the budget.)
    for (blocks, expect) in [(40_000, "RESULT_TOO_LARGE"), (100_000, "max_line_bytes")] {
        let args = json!({"blocks": blocks}).to_string();
        let (code, out, peak) = cli_with_peak(
            p.path(),
            &[
                "tools",
                "run",
                "flood__error_flood",
                "--agent",
                ".",
                "--args",
                &args,
                "--json",
            ],
        );
        println!("isError with {blocks} blocks: CLI peak RSS {peak} KiB");
        assert_eq!(code, 1, "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let text = v.to_string();
        assert!(text.contains(expect), "{blocks}: {text}");
        assert!(text.len() < 64 * 1024, "{} bytes", text.len());
        // Before the budget: 400 MB for one call of 100,000 blocks.
        assert!(
            peak < baseline + 64 * 1024,
            "the CLI peaked at {peak} KiB, against {baseline} KiB for one block"
        );
        let (_, recorded) = shown(p.path(), v["run_id"].as_str().unwrap());
        assert!(recorded < 64 * 1024, "runs show is {recorded} bytes");
    }
    // Under the budget: the error is recorded once, its blocks once (in the
    // diagnostics), and not again in the error's details or its crumb.
    let (code, out, _) = cli_with_peak(
        p.path(),
        &[
            "tools",
            "run",
            "flood__error_flood",
            "--agent",
            ".",
            "--args",
            r#"{"blocks": 20000}"#,
            "--json",
        ],
    );
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let (shown, bytes) = shown(p.path(), v["run_id"].as_str().unwrap());
    let block_bytes = 20_000
        * json!({"type": "text", "text": "0123456789"})
            .to_string()
            .len();
    assert!(
        bytes < block_bytes + block_bytes / 2,
        "runs show is {bytes} bytes for {block_bytes} bytes of blocks: {}",
        &shown.to_string()[..2000]
    );
}

#[test]
fn one_hundred_thousand_progress_notifications_publish_a_bounded_number_of_partials() {
    let p = flood_project();
    let run = |count: u32| {
        let args = json!({"count": count}).to_string();
        cli_with_peak(
            p.path(),
            &[
                "tools",
                "run",
                "flood__progress_flood",
                "--agent",
                ".",
                "--args",
                &args,
                "--json",
            ],
        )
    };
    let (_, _, baseline) = run(1);
    let (code, out, peak) = run(100_000);
    println!(
        "100,000 progress notifications: CLI peak RSS {peak} KiB, against {baseline} KiB for one"
    );
    assert!(
        peak < baseline + 64 * 1024,
        "the CLI peaked at {peak} KiB, against {baseline} KiB for one notification"
    );
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["result"], "flooded", "{v}");
    let (shown, bytes) = shown(p.path(), v["run_id"].as_str().unwrap());
    let text = shown.to_string();
    let partials = text.matches("tool:result:partial").count();
    println!("recorded {partials} partial crumbs, runs show {bytes} bytes");
    assert!((100..=1000).contains(&partials), "{partials} partials");
    assert!(
        text.contains("\"partials_dropped\":"),
        "the dropped partials are counted: {}",
        &text[..text.len().min(3000)]
    );
    // Before the budget: 21–25 MB of crumbs for this call.
    assert!(bytes < 2 * 1024 * 1024, "runs show is {bytes} bytes");
}
