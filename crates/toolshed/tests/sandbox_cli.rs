//! `toolshed sandbox check` and `toolshed sandbox run`, run as a user would: the seed's
//! result shape, each language, the limits flags, bad input, and exit codes.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn dir() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn write(name: &str, text: &str) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn toolshed(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolshed"));
    cmd.args(args)
        .current_dir(dir())
        .env_remove("TOOLSHED_SANDBOX_ALLOW_WEAKER")
        .env_remove("TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI");
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

fn run_json(file: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["sandbox", "run", file.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let o = toolshed(&args, &[]);
    (code(&o), json(&o))
}

#[test]
fn check_prints_every_mechanism_and_exits_0_where_untrusted_code_can_run() {
    let o = toolshed(&["sandbox", "check"], &[]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("MECHANISM"), "{text}");
    for m in [
        "namespaces",
        "privileges",
        "cgroups",
        "landlock",
        "seccomp",
        "overlay",
        "trial",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(m) && l.contains(" ok ")),
            "{m}: {text}"
        );
    }
    assert!(text.contains("untrusted code can run"), "{text}");

    let o = toolshed(&["sandbox", "check", "--json"], &[]);
    assert_eq!(code(&o), 0);
    let v = json(&o);
    assert_eq!(v["ready"], true);
    assert!(v["mechanisms"].as_array().unwrap().len() >= 10, "{v}");
}

#[test]
fn check_exits_3_naming_the_refused_mechanism_and_the_fix() {
    let env = [("TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI", "99")];
    let o = toolshed(&["sandbox", "check"], &env);
    assert_eq!(code(&o), 3, "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("untrusted code cannot run here: landlock"),
        "{err}"
    );
    assert!(err.contains("opt in to `landlock`"), "{err}");
    let o = toolshed(&["sandbox", "check", "--json"], &env);
    assert_eq!(code(&o), 3);
    assert_eq!(json(&o)["ready"], false);
    // And nothing runs.
    let py = write("refused.py", "def run(input):\n    return 1\n");
    let o = toolshed(&["sandbox", "run", py.to_str().unwrap()], &env);
    assert_eq!(code(&o), 3, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("[MECHANISM_UNAVAILABLE]"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn an_operator_opt_in_by_name_runs_without_the_refused_mechanism() {
    let py = write("weak.py", "def run(input):\n    return 'ran'\n");
    let o = toolshed(
        &["sandbox", "run", py.to_str().unwrap(), "--json"],
        &[
            ("TOOLSHED_SANDBOX_LANDLOCK_MIN_ABI", "99"),
            ("TOOLSHED_SANDBOX_ALLOW_WEAKER", "landlock"),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["output"], "\"ran\"");
    assert_eq!(v["weakened"], serde_json::json!(["landlock"]));
    let o = toolshed(
        &["sandbox", "check"],
        &[("TOOLSHED_SANDBOX_ALLOW_WEAKER", "seccomp")],
    );
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("use landlock or cgroup"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_seeds_python_example_gives_the_seeds_result_shape() {
    let py = write(
        "order.py",
        "def run(input):\n    return {\"order_id\": input[\"order_id\"], \"status\": \"shipped\"}",
    );
    let (code, v) = run_json(&py, &["--input", r#"{ "order_id": "ORD-123456" }"#]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["output"],
        r#"{"order_id": "ORD-123456", "status": "shipped"}"#
    );
    assert_eq!(
        v["stdout"],
        "{\"order_id\": \"ORD-123456\", \"status\": \"shipped\"}\n"
    );
    assert_eq!(v["stderr"], "");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["timed_out"], false);
    assert!(v["error"].is_null(), "{v}");
    assert!(v["duration_ms"].is_u64(), "{v}");
    // Our own fields beside the seed's.
    assert_eq!(v["output_value"]["status"], "shipped");
    assert_eq!(v["language"], "python");
    assert_eq!(v["network_enabled"], false);
    assert_eq!(v["limits"]["memory_bytes"], 256 * 1024 * 1024);
    assert_eq!(v["limits"]["timeout_ms"], 30_000);
    assert_ne!(v["host_uid"], 0);

    // The human form shows the same.
    let o = toolshed(
        &[
            "sandbox",
            "run",
            py.to_str().unwrap(),
            "--input",
            r#"{"order_id": "A"}"#,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(text.starts_with("FIELD"), "{text}");
    assert!(
        text.contains(r#"output             {"order_id": "A", "status": "shipped"}"#),
        "{text}"
    );
}

#[test]
fn shell_and_node_files_run_too() {
    let sh = write("echo.sh", "read input\necho \"{\\\"got\\\": $input}\"\n");
    let (code, v) = run_json(&sh, &["--input", r#"{"n": 1}"#]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["output"], r#"{"got":{"n":1}}"#);
    assert_eq!(v["language"], "bash");

    let text = write("text.sh", "echo plain words\n");
    let (_, v) = run_json(&text, &[]);
    assert_eq!(
        v["output"], r#""plain words\n""#,
        "not JSON: the text, JSON-encoded"
    );

    for (name, source) in [
        (
            "esm.js",
            "export function run(input) { return { doubled: input.n * 2 }; }\n",
        ),
        (
            "cjs.js",
            "module.exports.run = (input) => ({ doubled: input.n * 2 });\n",
        ),
        (
            "mod.mjs",
            "export default async function run(input) { return { doubled: input.n * 2 }; }\n",
        ),
    ] {
        let f = write(name, source);
        let (code, v) = run_json(&f, &["--input", r#"{"n": 21}"#]);
        assert_eq!(code, 0, "{name}: {v}");
        assert_eq!(v["output"], r#"{"doubled":42}"#, "{name}: {v}");
        assert_eq!(v["language"], "node");
    }
}

#[test]
fn a_failing_tool_is_exit_1_with_the_error() {
    let py = write("boom.py", "def run(input):\n    return 1 / 0\n");
    let (code, v) = run_json(&py, &[]);
    assert_eq!(code, 1, "{v}");
    assert!(v["output"].is_null(), "{v}");
    assert_eq!(v["exit_code"], 1);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("ZeroDivisionError: division by zero"),
        "{v}"
    );
    let none = write("norun.py", "x = 1\n");
    let (code, v) = run_json(&none, &[]);
    assert_eq!(code, 1);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("defines no run(input)"),
        "{v}"
    );
}

#[test]
fn the_timeout_memory_and_network_flags_apply() {
    let sleepy = write("sleepy.sh", "echo start\nexec sleep 600\n");
    let (code, v) = run_json(&sleepy, &["--timeout", "1"]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["timed_out"], true);
    assert_eq!(v["limits"]["timeout_ms"], 1000);
    assert!(
        v["error"].as_str().unwrap().contains("timeout of 1 s"),
        "{v}"
    );

    let hungry = write(
        "hungry.py",
        "def run(input):\n    return len(b'x' * (128 << 20))\n",
    );
    let (code, v) = run_json(&hungry, &["--memory", "32"]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["oom_killed"], true, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("out of memory (limit 32 MB)"),
        "{v}"
    );

    let ifaces = write(
        "ifaces.sh",
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '\n",
    );
    let (_, v) = run_json(&ifaces, &[]);
    assert_eq!(v["stdout"], "lo ", "{v}");
    assert_eq!(v["network_enabled"], false);
    for dir in ["/usr/bin", "/bin"] {
        if Path::new(dir).join("slirp4netns").is_file() {
            let (code, v) = run_json(&ifaces, &["--network"]);
            assert_eq!(code, 0, "{v}");
            assert_eq!(v["network_enabled"], true);
            assert!(v["stdout"].as_str().unwrap().contains("tap0"), "{v}");
            return;
        }
    }
    panic!(
        "--network needs slirp4netns: install it (Debian: apt-get install slirp4netns; scripts/test does)"
    );
}

#[test]
fn bad_input_is_exit_2_naming_the_problem() {
    let py = write("ok.py", "def run(input):\n    return input\n");
    let p = py.to_str().unwrap();
    let txt = write("notes.txt", "hello");
    for (args, needle) in [
        (
            vec!["sandbox", "run", txt.to_str().unwrap()],
            "must end in .py",
        ),
        (
            vec!["sandbox", "run", "missing.py"],
            "cannot read missing.py",
        ),
        (
            vec!["sandbox", "run", p, "--input", "{not json"],
            "--input is not JSON",
        ),
        (vec!["sandbox", "run", p, "--timeout", "0"], "--timeout"),
        (vec!["sandbox", "run", p, "--memory", "1"], "--memory"),
        (
            vec!["sandbox", "run", p, "--timeout", "soon"],
            "invalid value",
        ),
    ] {
        let o = toolshed(&args, &[]);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}
