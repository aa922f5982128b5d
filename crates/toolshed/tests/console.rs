//! The web console end to end, in headless Chromium: `toolshed serve` on a free port
//! over a database seeded with 10,000 tools, and `tests/console/console.test.mjs`
//! (playwright-core driving Debian's `/usr/bin/chromium`) logging in, searching,
//! running a tool from its generated form (a violation deep in nested arrays shown at
//! its field; the built-ins `get_current_time` and `web_search`, the latter against a
//! stand-in for Tavily; enums written as `oneOf` of consts, optional choices, objects,
//! maps and booleans, default items, the args as raw JSON), the runs list's pages and
//! its failed calls, testing pasted code and a registered tool's own code in the sandbox,
//! approving and denying parked calls (four-eyes: by another user), resuming and
//! cancelling runs, checking a viewer's page and forged requests, the tenants on the
//! admin page, a poisoned MCP tool description shown escaped and flagged and its
//! server's change accepted by an admin (a deployer's Accept is disabled), a logged-out session's cookie refused, and saving a screenshot of each
//! page under `target/console-screenshots/`.
//!
//! Needs Chromium (`apt-get install -y chromium`, or `CHROMIUM=/path`) and the script's
//! packages (`npm ci --prefix tests/console`); without them it fails saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../toolshed-stdlib/tests/common/tavily.rs"]
mod tavily;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const ADMIN_PASSWORD: &str = "admin-password-1";
/// The server's `--public-url` (through `TOOLSHED_PUBLIC_URL`): not where the test
/// reaches it, an extra origin the console accepts (the script checks both ways).
const PUBLIC_URL: &str = "http://console.toolshed.test";
/// Tools seeded besides the stdlib's.
const TOOLS: usize = 10_000;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Chromium and the script's packages, or a failure that says how to install them.
fn prerequisites() -> (PathBuf, PathBuf) {
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        chromium.exists(),
        "the console's browser tests need Chromium at {}: install it with `apt-get install -y chromium` (Debian), or set CHROMIUM=/path/to/chromium",
        chromium.display()
    );
    let scripts = workspace().join("tests/console");
    assert!(
        scripts
            .join("node_modules/playwright-core/package.json")
            .exists(),
        "the console's browser tests need playwright-core: run `npm ci --prefix tests/console` from the workspace root"
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "the console's browser tests need Node.js (`node` on PATH), e.g. `apt-get install -y nodejs`"
    );
    (chromium, scripts)
}

/// 10,000 tools in the registry before the server starts: a page of them is what the
/// tools list must show fast. Five are another tenant's `api` tools, for the filters.
async fn seed(url: &str) {
    let store = toolshed_registry::open(url).await.unwrap();
    for i in 0..TOOLS {
        let acme = i % 2000 == 7;
        let name = format!("bulk-{i:05}");
        store
            .create_tool(toolshed_registry::NewTool {
                name: name.clone(),
                description: format!("Seeded tool number {i} for the console's list"),
                tool_type: if acme { "api" } else { "function" }.into(),
                source: "seed".into(),
                endpoint: None,
                version: Some("1.0.0".into()),
                definition: serde_json::json!({"spec_version": "v1", "name": name, "description": "seeded"}),
                created_by: "seed".into(),
                tenant: if acme { "acme" } else { "default" }.into(),
                code: None,
            })
            .await
            .unwrap();
    }
}

#[test]
fn the_console_end_to_end_in_headless_chromium() {
    let (chromium, scripts) = prerequisites();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    // The stand-in for Tavily's paid API (see tavily.rs) runs on this runtime while the
    // browser test goes on; the built-in web_search reaches it through the policy.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(seed(&db));
    let (tavily_base, tavily_seen) = rt.block_on(tavily::stand_in());
    let policy = dir.path().join("credentials.yaml");
    std::fs::write(
        &policy,
        "'*':\n  TAVILY_API_KEY: {provider: env, key: CONSOLE_TAVILY_KEY}\n  TAVILY_BASE_URL: {provider: env, key: CONSOLE_TAVILY_BASE}\n",
    )
    .unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .arg("--tool-root")
        .arg(&tools)
        .arg("--credentials-policy")
        .arg(&policy)
        .current_dir(dir.path())
        .env("CONSOLE_TAVILY_KEY", tavily::KEY)
        .env("CONSOLE_TAVILY_BASE", &tavily_base)
        .env("TOOLSHED_DATABASE_URL", &db)
        .env("TOOLSHED_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("TOOLSHED_PUBLIC_URL", PUBLIC_URL)
        .env_remove("TOOLSHED_JWT_SECRET")
        .env_remove("TOOLSHED_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let _server = Killed(child);
    let base = first
        .trim()
        .strip_prefix("toolshed registry listening on ")
        .unwrap_or_else(|| {
            panic!(
                "unexpected first line {first:?}; server log:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            )
        })
        .to_owned();
    let screenshots = workspace().join("target/console-screenshots");
    let out = Command::new("node")
        .arg(scripts.join("console.test.mjs"))
        .current_dir(&scripts)
        .env("TOOLSHED_URL", &base)
        .env("TOOLSHED_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("TOOLSHED_TOOL_DIR", &tools)
        .env("TOOLSHED_PUBLIC_URL", PUBLIC_URL)
        .env("SCREENSHOTS", &screenshots)
        .env(
            "POISON_MCP",
            workspace().join("crates/toolshed-server/tests/fixtures/poison_mcp.mjs"),
        )
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The timing and the steps, for whoever runs the test with --nocapture.
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("CONSOLE_E2E_OK"),
        "the browser test failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server log\n{}",
        out.status,
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    // The search the form sent reached Tavily with the topic and time range chosen.
    let seen = tavily_seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].1["topic"], "news", "{seen:?}");
    assert_eq!(seen[0].1["time_range"], "week", "{seen:?}");
    for page in [
        "01-login",
        "03-tool",
        "05-try-it-result",
        "05b-try-it-nested-violation",
        "05c-try-it-form-cases",
        "10c-runs-failed",
        "07-sandbox",
        "07b-sandbox-tool-code",
        "09-run-after-approval",
        "09b-run-denied",
        "10b-run-resumed",
        "13-admin",
        "15-mcp-change-waiting",
        "15-mcp-change-accepted",
    ] {
        assert!(
            screenshots.join(format!("{page}.png")).exists(),
            "no screenshot {page}.png in {}",
            screenshots.display()
        );
    }
    println!(
        "CONSOLE_ASSET_BYTES={} (every file the console ships, uncompressed)",
        toolshed_server::console::assets::total_bytes()
    );
}
