//! The `toolshed` binary, run as a user would: output, `--json`, and exit codes.
#![allow(clippy::unwrap_used)]

#[path = "../../toolshed-stdlib/tests/common/tavily.rs"]
mod tavily;

use std::process::{Command, Output};

use serde_json::{Value, json};

/// One scratch folder for this test binary, so `tools run` never writes into the
/// source tree.
fn scratch() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn toolshed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(args)
        .current_dir(scratch())
        .env(
            "TOOLSHED_DATABASE_URL",
            format!("sqlite://{}/journal.db", scratch().display()),
        )
        .env("TOOLSHED_OUTPUT_DIR", scratch().join("output"))
        // No saved login or server from the machine running the tests.
        .env("TOOLSHED_CONFIG_DIR", scratch().join("config"))
        .env_remove("TOOLSHED_URL")
        .env_remove("TOOLSHED_API_TOKEN")
        .output()
        .unwrap()
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
fn list_shows_a_table_and_json() {
    let o = toolshed(&["tools", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("NAME"), "{text}");
    for name in [
        "get_current_time",
        "markdown_writer",
        "convert_temperature",
        "countdown",
        "roll_dice",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    let o = toolshed(&["tools", "list", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mw = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "markdown_writer")
        .unwrap();
    assert_eq!(mw["source"], "builtin");
    assert_eq!(mw["idempotency"], "keyed");
}

#[test]
fn show_prints_the_definition() {
    let o = toolshed(&["tools", "show", "convert_temperature"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("input schema:"));
    let o = toolshed(&["tools", "show", "convert_temperature", "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["input_schema"]["properties"]["precision"]["default"], 1);
    let o = toolshed(&[
        "tools",
        "show",
        "convert_temperature",
        "--format",
        "openai-strict",
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["function"]["strict"], true);
    let o = toolshed(&["tools", "show", "convert_temperature", "--format", "cobol"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--format"), "{}", stderr(&o));
}

#[test]
fn run_prints_the_result() {
    let o = toolshed(&[
        "tools",
        "run",
        "convert_temperature",
        "--args",
        r#"{"value": 100, "from": "celsius", "to": "fahrenheit"}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"value": 212.0, "scale": "fahrenheit"})
    );
    let o = toolshed(&[
        "tools",
        "run",
        "roll_dice",
        "--args",
        r#"{"seed": 7, "count": 2}"#,
        "--json",
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["result"]["rolls"].as_array().unwrap().len(), 2);
    assert!(v["duration_ms"].as_f64().is_some());
}

#[test]
fn run_reads_args_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("args.json");
    std::fs::write(&path, r#"{"from": 2}"#).unwrap();
    let o = toolshed(&[
        "tools",
        "run",
        "countdown",
        "--args",
        &format!("@{}", path.display()),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["status"], "liftoff");
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let o = toolshed(&["tools", "run", "convert_temprature", "--args", "{}"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("did you mean `convert_temperature`"),
        "{}",
        stderr(&o)
    );

    let o = toolshed(&["tools", "run", "roll_dice", "--args", "{seed: 1}"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("--args is not valid JSON"),
        "{}",
        stderr(&o)
    );

    let o = toolshed(&["tools", "run", "roll_dice", "--args", "[1, 2]"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("must be a JSON object"),
        "{}",
        stderr(&o)
    );

    let o = toolshed(&[
        "tools",
        "run",
        "roll_dice",
        "--args",
        r#"{"seed": "one", "sides": 7}"#,
    ]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    assert!(err.contains("INVALID_ARGS"), "{err}");
    assert!(err.contains("/seed") && err.contains("/sides"), "{err}");

    let o = toolshed(&[
        "tools",
        "run",
        "roll_dice",
        "--args",
        "@/nonexistent/args.json",
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("cannot read --args file"),
        "{}",
        stderr(&o)
    );

    let o = toolshed(&["tools", "frobnicate"]);
    assert_eq!(code(&o), 2);
    let o = toolshed(&["tools", "run"]);
    assert_eq!(code(&o), 2);
}

#[test]
fn a_failing_tool_exits_1() {
    let o = toolshed(&[
        "tools",
        "run",
        "convert_temperature",
        "--args",
        r#"{"value": -500, "from": "celsius", "to": "kelvin"}"#,
    ]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("below absolute zero"), "{}", stderr(&o));
    let o = toolshed(&[
        "tools",
        "run",
        "convert_temperature",
        "--json",
        "--args",
        r#"{"value": -500, "from": "celsius", "to": "kelvin"}"#,
    ]);
    assert_eq!(code(&o), 1);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["error"]["code"], "HANDLER_ERROR");
}

#[test]
fn export_each_vendor() {
    for (fmt, check) in [
        ("openai", "/0/function/name"),
        ("openai-strict", "/0/function/strict"),
        ("anthropic", "/0/input_schema"),
        ("gemini", "/functionDeclarations/0/parameters"),
    ] {
        let o = toolshed(&["tools", "export", "--format", fmt]);
        assert_eq!(code(&o), 0, "{fmt}: {}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert!(v.pointer(check).is_some(), "{fmt}: {v}");
    }
}

#[test]
fn validate_checks_files_and_lists_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("tool.yaml");
    std::fs::write(&good, "spec_version: v1\nname: order-lookup\ndescription: Look up an order\ninput_schema:\n  type: object\n  properties:\n    order_id: {type: string}\n").unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "spec_version: v1\nname: 'bad name'\ndescription: ''\ntimeout_seconds: 0\n",
    )
    .unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"spec_version\": ").unwrap();

    let o = toolshed(&["tools", "validate", good.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("ok"));

    let o = toolshed(&[
        "tools",
        "validate",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
        broken.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    assert!(
        err.contains("field `name`")
            && err.contains("field `timeout_seconds`")
            && err.contains("field `description`"),
        "{err}"
    );
    assert!(err.contains("broken.json"), "{err}");
    let o = toolshed(&["tools", "validate", "--json", bad.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v[0]["ok"], false);
}

#[test]
fn agent_validate_with_sandbox_true_lists_bash_and_the_workspace_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "name: coder\nsandbox: true\n",
    )
    .unwrap();
    let o = toolshed(&["agent", "validate", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mut tools: Vec<(&str, &str)> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["origin"].as_str().unwrap()))
        .collect();
    tools.sort_unstable();
    assert_eq!(
        tools,
        [
            ("bash", "sandbox"),
            ("edit_file", "sandbox"),
            ("list_files", "sandbox"),
            ("read_file", "sandbox"),
            ("search_files", "sandbox"),
            ("write_file", "sandbox")
        ]
    );
}

#[test]
fn agent_validate_loads_the_project_and_lists_every_missing_env_var() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tools")).unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "name: support-agent\nenv: [TICKETS_API_KEY, REGION, SLACK_TOKEN]\ntools:\n  - ref: tools/order-lookup\nbuiltin_tools: [get_current_time]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("tools/order_lookup.py"),
        "def order_lookup(order_id: str, include_tracking: bool = False) -> dict:\n    \"\"\"Look up an order by ID.\n\n    Args:\n        order_id: The order ID\n    \"\"\"\n    return {\"order_id\": order_id}\n",
    )
    .unwrap();
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_toolshed"));
        c.args(["agent", "validate", dir.path().to_str().unwrap(), "--json"])
            .env_remove("TICKETS_API_KEY")
            .env_remove("REGION")
            .env_remove("SLACK_TOKEN")
            .env("TOOLSHED_CACHE_DIR", scratch().join("cache"))
            .env("TOOLSHED_CONFIG_DIR", scratch().join("config"))
            .env_remove("TOOLSHED_URL")
            .env_remove("TOOLSHED_API_TOKEN");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let o = run(&[("REGION", "eu")]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("missing environment variables: TICKETS_API_KEY, SLACK_TOKEN"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        ("REGION", "eu"),
        ("TICKETS_API_KEY", "k"),
        ("SLACK_TOKEN", "t"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["order_lookup", "get_current_time"]);
}

#[test]
fn serve_refuses_a_credentials_policy_serving_a_toolshed_name_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "acme:\n  TOOLSHED_JWT_SECRET: {provider: env}\n").unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["--database-url", &db, "serve", "--addr", "127.0.0.1:0"])
        .arg("--credentials-policy")
        .arg(&policy)
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("TOOLSHED_JWT_SECRET")
            && err.contains("never served")
            && err.contains("policy.yaml"),
        "{err}"
    );
}

/// Everything the CLI wrote to the journal at `dir/journal.db` (the database, its WAL
/// and shared memory), as text: where a leaked value would be found.
fn journal_bytes(dir: &std::path::Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("journal.db") {
            all.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    all
}

#[test]
fn built_ins_outside_an_agent_project_read_exactly_their_env_and_never_show_a_secret() {
    // The stand-in for Tavily's paid API (see tavily.rs), on a runtime of this test.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = rt.block_on(tavily::stand_in());
    let dir = tempfile::tempdir().unwrap();
    let shop = dir.path().join("shop.db");
    rusqlite::Connection::open(&shop)
        .unwrap()
        .execute_batch(
            "CREATE TABLE orders (id TEXT, total REAL);
             INSERT INTO orders VALUES ('ORD-1', 12.5), ('ORD-2', 7.0);",
        )
        .unwrap();
    let shop_url = format!("sqlite://{}", shop.display());
    let run = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(args)
            .current_dir(dir.path())
            .env(
                "TOOLSHED_DATABASE_URL",
                format!("sqlite://{}/journal.db", dir.path().display()),
            )
            .env("TOOLSHED_CONFIG_DIR", dir.path().join("config"))
            .env_remove("TOOLSHED_URL")
            .env_remove("TOOLSHED_API_TOKEN")
            .env_remove("TAVILY_API_KEY")
            .env_remove("TAVILY_BASE_URL")
            .env_remove("SQL_DATABASE_URL")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let json_of = |o: &Output| -> Value {
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
    };
    let all = [
        ("TAVILY_API_KEY", tavily::KEY),
        ("TAVILY_BASE_URL", base.as_str()),
        ("SQL_DATABASE_URL", shop_url.as_str()),
    ];

    // No agent project here: each built-in reads its own names from the CLI's
    // environment.
    let o = run(
        &[
            "tools",
            "run",
            "web_search",
            "--json",
            "--args",
            r#"{"query": "messi", "max_results": 2}"#,
        ],
        &all,
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let found = json_of(&o);
    assert_eq!(
        found["result"]["results"][0]["url"], "https://www.britannica.com/facts/Lionel-Messi",
        "{found}"
    );
    assert_eq!(
        seen.0.lock().unwrap()[0].0.as_deref(),
        Some(format!("Bearer {}", tavily::KEY).as_str())
    );
    let o = run(
        &[
            "tools",
            "run",
            "sql_query",
            "--json",
            "--args",
            r#"{"query": "SELECT id, total FROM orders ORDER BY id"}"#,
        ],
        &all,
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rows = json_of(&o);
    assert_eq!(
        rows["result"]["rows"],
        json!([["ORD-1", 12.5], ["ORD-2", 7.0]]),
        "{rows}"
    );
    // Without its variable, the built-in says which one and where it is read from.
    let o = run(
        &[
            "tools",
            "run",
            "web_search",
            "--json",
            "--args",
            r#"{"query": "messi"}"#,
        ],
        &all[1..],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let refused = json_of(&o);
    assert_eq!(
        refused["error"]["details"]["kind"], "not_configured",
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("web_search needs TAVILY_API_KEY")
            && message.contains("not set in toolshed's environment"),
        "{message}"
    );

    // Secret values never show: a key Tavily refuses (the stand-in echoes it in its
    // 401), a database password in a URL that cannot be connected to.
    const WRONG_KEY: &str = "tvly-wrong-secret-5555";
    const PASSWORD: &str = "s3cret-pw-4711";
    let pg = format!("postgres://reader:{PASSWORD}@127.0.0.1:1/shop");
    let o = run(
        &[
            "tools",
            "run",
            "web_search",
            "--json",
            "--args",
            r#"{"query": "messi"}"#,
        ],
        &[
            ("TAVILY_API_KEY", WRONG_KEY),
            ("TAVILY_BASE_URL", base.as_str()),
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let unauthorized = json_of(&o);
    assert_eq!(
        unauthorized["error"]["details"]["kind"], "unauthorized",
        "{unauthorized}"
    );
    let o2 = run(
        &[
            "tools",
            "run",
            "sql_query",
            "--json",
            "--args",
            r#"{"query": "SELECT 1"}"#,
        ],
        &[("SQL_DATABASE_URL", pg.as_str())],
    );
    assert_eq!(code(&o2), 1, "{}", stderr(&o2));
    // An agent's own tool that shows a built-in's env value (the agent lists sql_query,
    // so the URL is in its declared env): the password is scrubbed there too.
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::write(
        agent.join("agent.yaml"),
        "name: leaky\nbuiltin_tools: [sql_query]\n",
    )
    .unwrap();
    std::fs::write(
        agent.join("tools/echo_env.py"),
        "import sys\n\n\ndef echo_env(ctx) -> dict:\n    \"\"\"Show the database URL.\"\"\"\n    url = ctx.env[\"SQL_DATABASE_URL\"]\n    print(\"connecting to \" + url, file=sys.stderr)\n    return {\"url\": url}\n",
    )
    .unwrap();
    let agent_dir = agent.display().to_string();
    let o3 = run(
        &["tools", "run", "echo_env", "--agent", &agent_dir, "--json"],
        // The tool's stderr is logged too (scrubbed): ask for that log.
        &[
            ("SQL_DATABASE_URL", pg.as_str()),
            ("TOOLSHED_LOG", "toolshed::dispatch=info"),
        ],
    );
    assert_eq!(code(&o3), 0, "{}", stderr(&o3));
    assert!(
        stderr(&o3).contains("connecting to postgres://reader:[REDACTED]@127.0.0.1:1/shop"),
        "the tool's stderr was not logged, scrubbed: {}",
        stderr(&o3)
    );
    assert_eq!(
        json_of(&o3)["result"]["url"],
        "postgres://reader:[REDACTED]@127.0.0.1:1/shop",
        "{}",
        stdout(&o3)
    );
    let mut shown = String::new();
    for o in [&o, &o2, &o3] {
        shown.push_str(&stdout(o));
        shown.push_str(&stderr(o));
        let run_id = json_of(o)["run_id"].as_str().unwrap().to_owned();
        let r = run(&["runs", "show", &run_id, "--crumbs", "--json"], &[]);
        assert_eq!(code(&r), 0, "{}", stderr(&r));
        shown.push_str(&stdout(&r));
        let r = run(&["runs", "show", &run_id, "--crumbs"], &[]);
        shown.push_str(&stdout(&r));
    }
    assert!(shown.contains("[REDACTED]"), "{shown}");
    for secret in [WRONG_KEY, PASSWORD] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
        assert!(
            !journal_bytes(dir.path()).contains(secret),
            "{secret} is in the journal"
        );
    }
    drop(rt);
}
