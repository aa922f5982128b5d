//! `sandbox: true`: bash in the real sandbox and the workspace file tools on real files,
//! through the real pipeline. Files persist across the calls of one run and not across
//! runs; every escape (`..`, an absolute path, a symlink bash planted pointing outside)
//! is refused by each file tool, in a test of its own.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolshed_agent::{
    ImplementationError, Implementations, LoadedAgent, WORKSPACE_TOOLS, WorkspaceConfig,
    Workspaces, load_agent, load_agent_with_workspaces,
};
use toolshed_core::{ErrorCode, Handler, Pipeline, RunContext, Tool, ToolCall, ToolError};

/// No code files or endpoints here: the workspace tools are in-process.
struct NoImplementations;

#[async_trait]
impl Implementations for NoImplementations {
    async fn load_code_file(&self, path: &Path) -> Result<Tool, ImplementationError> {
        Err(ImplementationError::Unsupported(format!(
            "{} needs the dispatch layer",
            path.display()
        )))
    }
    fn handler_for(
        &self,
        e: &str,
        _: &toolshed_core::ToolSpec,
    ) -> Result<Arc<dyn Handler>, ImplementationError> {
        Err(ImplementationError::Unsupported(format!("no endpoint {e}")))
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// A project, its workspaces root, the loaded agent and a pipeline over its tools.
struct Agent {
    project: tempfile::TempDir,
    root: tempfile::TempDir,
    workspaces: Workspaces,
    loaded: LoadedAgent,
    pipeline: Pipeline,
}

async fn agent_with(yaml: &str, edit: impl FnOnce(&mut WorkspaceConfig)) -> Agent {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("agent.yaml"), yaml).unwrap();
    std::fs::write(project.path().join("secret.txt"), "project secret\n").unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut config = WorkspaceConfig::new(root.path().join("workspaces"));
    edit(&mut config);
    let workspaces = Workspaces::new(config);
    let loaded = load_agent_with_workspaces(
        project.path(),
        &NoImplementations,
        None,
        &no_env,
        Some(&workspaces),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let pipeline = Pipeline::builder(loaded.toolset.clone()).build();
    Agent {
        project,
        root,
        workspaces,
        loaded,
        pipeline,
    }
}

async fn agent() -> Agent {
    agent_with("name: coder\nsandbox: true\n", |_| {}).await
}

fn run(id: &str) -> RunContext {
    RunContext::builder().run_id(id).build()
}

impl Agent {
    async fn call(&self, run: &RunContext, tool: &str, args: Value) -> Result<Value, ToolError> {
        self.pipeline
            .call(run, ToolCall::new(tool, args))
            .await
            .result
    }

    async fn ok(&self, run: &RunContext, tool: &str, args: Value) -> Value {
        self.call(run, tool, args.clone())
            .await
            .unwrap_or_else(|e| panic!("{tool} {args} failed: {e}"))
    }

    async fn bash(&self, run: &RunContext, command: &str) -> Value {
        let out = self.ok(run, "bash", json!({ "command": command })).await;
        assert_eq!(out["exit_code"], 0, "bash {command:?}: {out}");
        out
    }

    fn folder(&self, run_id: &str) -> PathBuf {
        self.workspaces.folder(run_id).unwrap()
    }
}

/// Asserts a refusal: `INVALID_ARGS`, naming the field.
fn refused(r: Result<Value, ToolError>, field: &str, why: &str) -> ToolError {
    let e = match r {
        Ok(v) => panic!("accepted, answering {v}; expected a refusal of `{field}` ({why})"),
        Err(e) => e,
    };
    assert_eq!(e.code, ErrorCode::InvalidArgs, "{e}");
    assert!(e.message.contains(&format!("`{field}`")), "{why}: {e}");
    e
}

#[tokio::test]
async fn sandbox_true_grants_bash_and_the_five_file_tools() {
    let a = agent().await;
    let mut names: Vec<&str> = a.loaded.toolset.iter().map(|t| t.name()).collect();
    names.sort_unstable();
    let mut want = WORKSPACE_TOOLS.to_vec();
    want.sort_unstable();
    assert_eq!(names, want);
    for name in WORKSPACE_TOOLS {
        assert_eq!(
            a.loaded.origins.get(*name).map(String::as_str),
            Some("sandbox")
        );
    }
}

#[tokio::test]
async fn without_workspaces_sandbox_true_does_not_start() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("agent.yaml"),
        "name: coder\nsandbox: true\n",
    )
    .unwrap();
    let e = load_agent(project.path(), &NoImplementations, None, &no_env)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("`sandbox: true` needs the workspaces"), "{e}");
}

#[tokio::test]
async fn a_host_that_cannot_sandbox_refuses_the_agent_naming_the_mechanism_and_fix() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("agent.yaml"),
        "name: coder\nsandbox: true\n",
    )
    .unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut config = WorkspaceConfig::new(root.path());
    // A Landlock ABI no kernel has: the host lacks a mechanism the sandbox requires.
    config.sandbox.landlock_min_abi = 99;
    let ws = Workspaces::new(config);
    let e =
        load_agent_with_workspaces(project.path(), &NoImplementations, None, &no_env, Some(&ws))
            .await
            .unwrap_err();
    assert_eq!(e.code(), toolshed_agent::AgentCode::AgentInvalid);
    let text = e.to_string();
    assert!(text.contains("landlock"), "{text}");
    assert!(text.contains("MECHANISM_UNAVAILABLE"), "{text}");
    assert!(text.contains("allow_weaker"), "the fix is named: {text}");
    assert!(text.contains("bash never runs unsandboxed"), "{text}");
}

#[tokio::test]
async fn bash_and_workspace_tools_cannot_be_listed_in_builtin_tools() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("agent.yaml"),
        "name: coder\nbuiltin_tools: [bash, read_file]\n",
    )
    .unwrap();
    let e = load_agent(project.path(), &NoImplementations, None, &no_env)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`bash` cannot be listed in builtin_tools: set `sandbox: true`"),
        "{e}"
    );
    assert!(
        e.contains("`read_file` cannot be listed in builtin_tools"),
        "{e}"
    );
    assert!(e.contains("`sandbox: true`"), "{e}");
}

#[tokio::test]
async fn files_persist_across_the_calls_of_one_run() {
    let a = agent().await;
    let r = run("run-persist");
    let w = a
        .ok(
            &r,
            "write_file",
            json!({"path": "notes/todo.md", "content": "buy milk\n"}),
        )
        .await;
    assert_eq!(w["created"], true, "{w}");
    let out = a.bash(&r, "cat notes/todo.md && pwd").await;
    assert_eq!(out["stdout"], "buy milk\n/workspace\n", "{out}");
    a.bash(
        &r,
        "echo from bash > made.txt && mkdir -p d && echo deep > d/x",
    )
    .await;
    let read = a.ok(&r, "read_file", json!({"path": "made.txt"})).await;
    assert_eq!(read["content"], "     1\tfrom bash", "{read}");
    assert_eq!(read["total_lines"], 1);
    // Nothing in the workspace is owned by root, whoever wrote it.
    let folder = a.folder("run-persist");
    for p in ["notes/todo.md", "notes", "made.txt", "d/x"] {
        let uid = std::fs::metadata(folder.join(p)).unwrap().uid();
        assert_ne!(uid, 0, "{p} is owned by root");
    }
    // A later call of the same run (a resumed run has the same id) sees it all.
    let listed = a.ok(&r, "list_files", json!({"recursive": true})).await;
    let paths: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["d", "d/x", "made.txt", "notes", "notes/todo.md"],
        "{listed}"
    );
}

#[tokio::test]
async fn two_runs_have_separate_workspaces() {
    let a = agent().await;
    let (one, two) = (run("run-one"), run("run-two"));
    a.ok(
        &one,
        "write_file",
        json!({"path": "mine.txt", "content": "one"}),
    )
    .await;
    let e = a.call(&two, "read_file", json!({"path": "mine.txt"})).await;
    refused(e, "path", "another run's file");
    let out = a
        .ok(
            &two,
            "bash",
            json!({"command": "ls -A /workspace; cat mine.txt"}),
        )
        .await;
    assert_eq!(out["stdout"], "", "{out}");
    assert_ne!(out["exit_code"], 0, "{out}");
    assert_ne!(a.folder("run-one"), a.folder("run-two"));
}

#[tokio::test]
async fn read_file_pages_by_line_numbers() {
    let a = agent().await;
    let r = run("run-page");
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    a.ok(
        &r,
        "write_file",
        json!({"path": "ten.txt", "content": text}),
    )
    .await;
    let page = a
        .ok(
            &r,
            "read_file",
            json!({"path": "ten.txt", "offset": 4, "limit": 2}),
        )
        .await;
    assert_eq!(page["content"], "     4\tline 4\n     5\tline 5", "{page}");
    assert_eq!(page["start_line"], 4);
    assert_eq!(page["end_line"], 5);
    assert_eq!(page["total_lines"], 10);
    let past = a
        .call(&r, "read_file", json!({"path": "ten.txt", "offset": 11}))
        .await;
    refused(past, "offset", "past the end");
}

// ---- escapes, tool by tool ----

/// A host file and folder outside every workspace, and a run whose bash planted links
/// to them (and to /etc/shadow) in its workspace.
struct Planted {
    a: Agent,
    run: RunContext,
    victim: PathBuf,
    victim_dir: PathBuf,
    _outside: tempfile::TempDir,
}

const VICTIM: &str = "host file: must stay unread and unchanged\n";

async fn planted() -> Planted {
    let a = agent().await;
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, VICTIM).unwrap();
    let victim_dir = outside.path().join("dir");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::write(victim_dir.join("inner.txt"), VICTIM).unwrap();
    let r = run("run-planted");
    a.bash(
        &r,
        &format!(
            "ln -s /etc/shadow shadow && ln -s {} victim && ln -s {} outdir && ln -s /etc etc",
            victim.display(),
            victim_dir.display()
        ),
    )
    .await;
    Planted {
        a,
        run: r,
        victim,
        victim_dir,
        _outside: outside,
    }
}

impl Planted {
    fn unchanged(&self) {
        assert_eq!(std::fs::read_to_string(&self.victim).unwrap(), VICTIM);
        assert_eq!(std::fs::metadata(&self.victim).unwrap().uid(), 0);
        let inner: Vec<_> = std::fs::read_dir(&self.victim_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(inner, ["inner.txt"]);
        assert_eq!(
            std::fs::read_to_string(self.victim_dir.join("inner.txt")).unwrap(),
            VICTIM
        );
    }
}

const ESCAPES: &[&str] = &[
    "../escape.txt",
    "a/../../escape.txt",
    "/etc/passwd",
    "/tmp/x",
];

#[tokio::test]
async fn read_file_refuses_dotdot_and_absolute_paths() {
    let a = agent().await;
    let r = run("run-esc-read");
    for p in ESCAPES {
        refused(
            a.call(&r, "read_file", json!({ "path": p })).await,
            "path",
            p,
        );
    }
}

#[tokio::test]
async fn read_file_never_follows_a_planted_symlink() {
    let p = planted().await;
    for path in ["shadow", "victim", "etc/passwd", "outdir/inner.txt"] {
        let e = refused(
            p.a.call(&p.run, "read_file", json!({ "path": path })).await,
            "path",
            path,
        );
        assert!(e.message.contains("symlink"), "{e}");
        assert!(!e.message.contains("host file"), "{e}");
    }
    p.unchanged();
}

#[tokio::test]
async fn write_file_refuses_dotdot_and_absolute_paths() {
    let a = agent().await;
    let r = run("run-esc-write");
    for p in ESCAPES {
        refused(
            a.call(&r, "write_file", json!({ "path": p, "content": "x" }))
                .await,
            "path",
            p,
        );
    }
    assert!(!a.root.path().join("workspaces/escape.txt").exists());
}

#[tokio::test]
async fn write_file_never_follows_a_planted_symlink() {
    let p = planted().await;
    for path in [
        "victim",
        "shadow",
        "outdir/new.txt",
        "outdir/inner.txt",
        "etc/evil",
    ] {
        let e = refused(
            p.a.call(
                &p.run,
                "write_file",
                json!({ "path": path, "content": "pwned" }),
            )
            .await,
            "path",
            path,
        );
        assert!(e.message.contains("symlink"), "{e}");
    }
    p.unchanged();
    assert!(!Path::new("/etc/evil").exists());
}

#[tokio::test]
async fn edit_file_refuses_dotdot_and_absolute_paths() {
    let a = agent().await;
    let r = run("run-esc-edit");
    for p in ESCAPES {
        refused(
            a.call(
                &r,
                "edit_file",
                json!({ "path": p, "old_string": "root", "new_string": "x" }),
            )
            .await,
            "path",
            p,
        );
    }
}

#[tokio::test]
async fn edit_file_never_follows_a_planted_symlink() {
    let p = planted().await;
    for path in ["victim", "outdir/inner.txt", "etc/passwd"] {
        let e = refused(
            p.a.call(
                &p.run,
                "edit_file",
                json!({ "path": path, "old_string": "host", "new_string": "pwned" }),
            )
            .await,
            "path",
            path,
        );
        assert!(e.message.contains("symlink"), "{e}");
    }
    p.unchanged();
}

#[tokio::test]
async fn list_files_refuses_dotdot_and_absolute_paths() {
    let a = agent().await;
    let r = run("run-esc-list");
    for p in ["..", "../..", "/etc", "a/../.."] {
        refused(
            a.call(&r, "list_files", json!({ "path": p })).await,
            "path",
            p,
        );
    }
}

#[tokio::test]
async fn list_files_never_follows_a_planted_symlink() {
    let p = planted().await;
    for path in ["outdir", "etc"] {
        let e = refused(
            p.a.call(&p.run, "list_files", json!({ "path": path }))
                .await,
            "path",
            path,
        );
        assert!(e.message.contains("symlink"), "{e}");
    }
    // Listed recursively, the links are entries of their own, never entered.
    let all =
        p.a.ok(&p.run, "list_files", json!({"recursive": true}))
            .await;
    let entries = all["entries"].as_array().unwrap();
    let paths: Vec<&str> = entries
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["etc", "outdir", "shadow", "victim"], "{all}");
    assert!(entries.iter().all(|e| e["kind"] == "symlink"), "{all}");
    p.unchanged();
}

#[tokio::test]
async fn search_files_refuses_dotdot_and_absolute_paths() {
    let a = agent().await;
    let r = run("run-esc-search");
    for p in ["..", "/etc", "../x", "/"] {
        refused(
            a.call(&r, "search_files", json!({ "pattern": "root", "path": p }))
                .await,
            "path",
            p,
        );
    }
}

#[tokio::test]
async fn search_files_never_follows_a_planted_symlink() {
    let p = planted().await;
    // The whole workspace: links are skipped, so the host files' text is never found.
    let found =
        p.a.ok(&p.run, "search_files", json!({"pattern": "host file|root"}))
            .await;
    assert_eq!(found["matches"], json!([]), "{found}");
    for path in ["outdir", "victim", "etc", "shadow"] {
        let e = refused(
            p.a.call(
                &p.run,
                "search_files",
                json!({ "pattern": ".", "path": path }),
            )
            .await,
            "path",
            path,
        );
        assert!(e.message.contains("symlink"), "{e}");
    }
    p.unchanged();
}

// ---- edits and searches ----

#[tokio::test]
async fn edit_file_with_a_non_unique_old_string_is_a_clear_error() {
    let a = agent().await;
    let r = run("run-edit");
    a.ok(
        &r,
        "write_file",
        json!({"path": "a.py", "content": "x = 1\ny = 1\n"}),
    )
    .await;
    let e = refused(
        a.call(
            &r,
            "edit_file",
            json!({"path": "a.py", "old_string": "= 1", "new_string": "= 2"}),
        )
        .await,
        "old_string",
        "two occurrences",
    );
    assert!(e.message.contains("2 times"), "{e}");
    assert!(e.message.contains("replace_all"), "{e}");
    let folder = a.folder("run-edit");
    assert_eq!(
        std::fs::read_to_string(folder.join("a.py")).unwrap(),
        "x = 1\ny = 1\n"
    );

    let one = a
        .ok(
            &r,
            "edit_file",
            json!({"path": "a.py", "old_string": "y = 1", "new_string": "y = 3"}),
        )
        .await;
    assert_eq!(one["replacements"], 1);
    let all = a
        .ok(
            &r,
            "edit_file",
            json!({"path": "a.py", "old_string": " = ", "new_string": "=", "replace_all": true}),
        )
        .await;
    assert_eq!(all["replacements"], 2);
    assert_eq!(
        std::fs::read_to_string(folder.join("a.py")).unwrap(),
        "x=1\ny=3\n"
    );
    let missing = refused(
        a.call(
            &r,
            "edit_file",
            json!({"path": "a.py", "old_string": "zzz", "new_string": "q"}),
        )
        .await,
        "old_string",
        "absent",
    );
    assert!(missing.message.contains("not found"), "{missing}");
}

#[tokio::test]
async fn search_files_caps_its_matches() {
    let a = agent_with("name: coder\nsandbox: true\n", |c| {
        c.caps.search_matches = 10
    })
    .await;
    let r = run("run-search");
    let text: String = (1..=50).map(|i| format!("match {i}\n")).collect();
    a.ok(
        &r,
        "write_file",
        json!({"path": "many.txt", "content": text}),
    )
    .await;
    a.ok(
        &r,
        "write_file",
        json!({"path": "sub/other.txt", "content": "no\nmatch here\n"}),
    )
    .await;
    let capped = a
        .ok(&r, "search_files", json!({"pattern": "^match \\d+$"}))
        .await;
    assert_eq!(capped["matches"].as_array().unwrap().len(), 10, "{capped}");
    assert_eq!(capped["truncated"], true);
    assert_eq!(
        capped["matches"][0],
        json!({"path": "many.txt", "line": 1, "text": "match 1"})
    );
    let fewer = a
        .ok(
            &r,
            "search_files",
            json!({"pattern": "match", "path": "sub", "max_matches": 5}),
        )
        .await;
    assert_eq!(
        fewer["matches"],
        json!([{"path": "sub/other.txt", "line": 2, "text": "match here"}])
    );
    assert_eq!(fewer["truncated"], false);
    // Asking for more than the cap is an argument error, naming the field.
    let over = a
        .call(
            &r,
            "search_files",
            json!({"pattern": "m", "max_matches": 11}),
        )
        .await;
    assert_eq!(over.unwrap_err().code, ErrorCode::InvalidArgs);
}

#[tokio::test]
async fn a_bad_pattern_is_refused_naming_the_field() {
    let a = agent().await;
    let r = run("run-pattern");
    let e = refused(
        a.call(&r, "search_files", json!({"pattern": "(unclosed"}))
            .await,
        "pattern",
        "syntax",
    );
    assert!(e.message.contains("regular expression"), "{e}");
    // A pattern whose compiled form is huge is refused, not built.
    let huge = refused(
        a.call(&r, "search_files", json!({"pattern": "\\w{1000}\\w{1000}"}))
            .await,
        "pattern",
        "size limit",
    );
    assert!(
        huge.message.contains("size limit") || huge.message.contains("regular expression"),
        "{huge}"
    );
}

// ---- bash's confinement ----

#[tokio::test]
async fn bash_is_not_root_and_sees_no_project_or_host_files() {
    let a = agent().await;
    let r = run("run-id");
    let project = a.project.path().display().to_string();
    let out = a
        .ok(
            &r,
            "bash",
            json!({"command": format!(
                "id -u; cat {project}/secret.txt 2>&1; ls {project} 2>&1; cat /etc/shadow 2>&1; ls /root 2>&1; ls / | tr '\\n' ' '"
            )}),
        )
        .await;
    let stdout = out["stdout"].as_str().unwrap();
    let uid: u32 = stdout.lines().next().unwrap().trim().parse().unwrap();
    assert_ne!(uid, 0, "{out}");
    assert!(!stdout.contains("project secret"), "{out}");
    assert!(stdout.contains("No such file"), "{out}");
    assert!(!stdout.contains("root:"), "{out}");
    let _ = &a.project;
}

#[tokio::test]
async fn bash_cannot_reach_the_network_when_it_is_off() {
    let a = agent().await;
    let r = run("run-net");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = a
        .ok(
            &r,
            "bash",
            json!({"command": format!(
                "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo LOOPBACK; (exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo OUTSIDE; echo done"
            )}),
        )
        .await;
    assert_eq!(out["stdout"], "done\n", "{out}");
}

#[tokio::test]
async fn bash_reports_a_timeout_and_a_failing_exit() {
    let a = agent_with("name: coder\nsandbox: {timeout_seconds: 5}\n", |_| {}).await;
    let r = run("run-timeout");
    let slow = a
        .ok(
            &r,
            "bash",
            json!({"command": "sleep 30", "timeout_seconds": 1}),
        )
        .await;
    assert_eq!(slow["timed_out"], true, "{slow}");
    let failed = a
        .ok(&r, "bash", json!({"command": "echo oops >&2; exit 3"}))
        .await;
    assert_eq!(failed["exit_code"], 3, "{failed}");
    assert_eq!(failed["stderr"], "oops\n");
    assert_eq!(failed["timed_out"], false);
    // More than the agent's own ceiling is an argument error.
    let over = a
        .call(&r, "bash", json!({"command": "true", "timeout_seconds": 6}))
        .await;
    assert_eq!(over.unwrap_err().code, ErrorCode::InvalidArgs);
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_naming_the_field() {
    let a = agent().await;
    let r = run("run-bad");
    refused(
        a.call(&r, "write_file", json!({"path": ".", "content": "x"}))
            .await,
        "path",
        "the folder",
    );
    refused(
        a.call(
            &r,
            "edit_file",
            json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
        )
        .await,
        "path",
        "missing file",
    );
    refused(
        a.call(&r, "read_file", json!({"path": "a\u{0}b"})).await,
        "path",
        "NUL",
    );
    a.bash(&r, "mkdir folder && mkfifo pipe").await;
    refused(
        a.call(&r, "read_file", json!({"path": "folder"})).await,
        "path",
        "a folder",
    );
    // A FIFO bash made does not block the supervisor.
    refused(
        a.call(&r, "read_file", json!({"path": "pipe"})).await,
        "path",
        "a FIFO",
    );
    refused(
        a.call(&r, "write_file", json!({"path": "pipe", "content": "x"}))
            .await,
        "path",
        "a FIFO",
    );
    // The schema's own checks name the field too.
    let e = a
        .call(&r, "read_file", json!({"path": "x", "offset": 0}))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgs);
    assert!(e.message.contains("offset"), "{e}");
}

#[tokio::test]
async fn sandbox_settings_are_parsed_and_bad_ones_named() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("agent.yaml"),
        "name: coder\nsandbox: {network_enabled: true, memory_mb: 0, colour: red}\n",
    )
    .unwrap();
    let e = load_agent(project.path(), &NoImplementations, None, &no_env)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("field `sandbox`"), "{e}");
    let file = toolshed_agent::parse_agent_file(
        "name: coder\nsandbox: {network_enabled: true, memory_mb: 512, timeout_seconds: 60}\n",
        "agent.yaml",
    )
    .unwrap();
    assert!(file.sandbox);
    assert!(file.sandbox_settings.network_enabled);
    assert_eq!(file.sandbox_settings.memory_mb(), 512);
    assert_eq!(file.sandbox_settings.timeout_seconds(), 60);
}

#[tokio::test]
async fn reads_writes_and_listings_are_capped() {
    let a = agent_with("name: coder\nsandbox: true\n", |c| {
        c.caps.read_bytes = 64;
        c.caps.write_bytes = 100;
        c.caps.list_entries = 3;
    })
    .await;
    let r = run("run-caps");
    let big = "x".repeat(101);
    let e = refused(
        a.call(&r, "write_file", json!({"path": "big.txt", "content": big}))
            .await,
        "content",
        "over the write cap",
    );
    assert!(e.message.contains("at most 100"), "{e}");
    // bash can make a larger file; read_file reads up to its cap and says so.
    a.bash(
        &r,
        "for i in $(seq 1 50); do echo line$i; done > long.txt && touch a b c",
    )
    .await;
    let read = a.ok(&r, "read_file", json!({"path": "long.txt"})).await;
    assert_eq!(read["truncated"], true, "{read}");
    assert!(read["content"].as_str().unwrap().len() < 200, "{read}");
    // edit_file refuses a file over the cap rather than cutting it.
    refused(
        a.call(
            &r,
            "edit_file",
            json!({"path": "long.txt", "old_string": "line1\n", "new_string": "x"}),
        )
        .await,
        "path",
        "over the edit cap",
    );
    let listed = a.ok(&r, "list_files", json!({})).await;
    assert_eq!(listed["entries"].as_array().unwrap().len(), 3, "{listed}");
    assert_eq!(listed["truncated"], true);
}

#[tokio::test]
async fn parallel_calls_of_one_run_take_turns_on_its_workspace() {
    let a = agent().await;
    let r = run("run-parallel");
    let calls = (0..4)
        .map(|i| ToolCall::new("bash", json!({"command": format!("echo {i} >> log.txt")})))
        .chain([ToolCall::new(
            "write_file",
            json!({"path": "w.txt", "content": "w"}),
        )])
        .collect();
    for out in a.pipeline.call_many(&r, calls).await {
        let v = out.result.unwrap_or_else(|e| panic!("{e}"));
        if let Some(code) = v.get("exit_code") {
            assert_eq!(code, 0, "{v}");
        }
    }
    let log = std::fs::read_to_string(a.folder("run-parallel").join("log.txt")).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["0", "1", "2", "3"]);
}

/// The network interfaces bash sees (from `/proc/net/dev`).
async fn interfaces(a: &Agent, r: &RunContext) -> Vec<String> {
    let out = a
        .bash(r, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        .await;
    let mut names: Vec<String> = out["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn the_network_is_off_unless_the_agent_declares_it() {
    let off = agent().await;
    assert_eq!(interfaces(&off, &run("run-net-off")).await, ["lo"]);
    let on = agent_with("name: coder\nsandbox: {network_enabled: true}\n", |_| {}).await;
    let r = run("run-net-on");
    // The user-mode stack's interface is there; the host's loopback stays unreachable.
    assert_eq!(interfaces(&on, &r).await, ["lo", "tap0"]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = on
        .bash(
            &r,
            &format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo LOOPBACK; echo done"),
        )
        .await;
    assert_eq!(out["stdout"], "done\n", "{out}");
}

#[tokio::test]
async fn search_files_stops_at_its_byte_and_file_budgets() {
    let a = agent_with("name: coder\nsandbox: true\n", |c| {
        c.caps.search_total_bytes = 100;
        c.caps.search_file_bytes = 1000;
    })
    .await;
    let r = run("run-search-budget");
    a.bash(
        &r,
        "for i in 1 2 3 4 5; do printf 'needle %060d\\n' $i > f$i.txt; done; head -c 2000 /dev/zero | tr '\\0' n > a-huge.txt; printf 'needle\\0bin' > bin.dat",
    )
    .await;
    let found = a.ok(&r, "search_files", json!({"pattern": "needle"})).await;
    // Two 68-byte files reach the 100-byte budget; the rest is not read.
    assert_eq!(found["matches"].as_array().unwrap().len(), 2, "{found}");
    assert_eq!(found["truncated"], true, "{found}");
    // The binary file is skipped, and the file over the per-file size too.
    assert_eq!(found["files_skipped"], 2, "{found}");
}

// ---- the workspace's budget and bash's changes ----

/// What the host folder of a run's workspace holds: (bytes of files and symlink
/// targets, entries), counted as the budget counts.
fn held(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut files = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        files += 1;
        if meta.is_dir() {
            let (b, f) = held(&e.path());
            bytes += b;
            files += f;
        } else if meta.is_file() || meta.file_type().is_symlink() {
            bytes += meta.len();
        }
    }
    (bytes, files)
}

#[tokio::test]
async fn a_disk_fill_and_an_inode_exhaustion_in_bash_stop_at_the_workspaces_cap() {
    let a = agent_with(
        "name: coder\nsandbox: {workspace_mb: 4, workspace_files: 60}\n",
        |_| {},
    )
    .await;
    let r = run("run-fill");
    let fill = a
        .ok(
            &r,
            "bash",
            json!({"command": "for i in $(seq 1 100); do head -c 1048576 /dev/zero > f$i; done; echo done"}),
        )
        .await;
    assert_eq!(fill["stdout"], "done\n", "{fill}");
    assert!(
        fill["stderr"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{fill}"
    );
    assert_eq!(fill["workspace"]["full"], true, "{fill}");
    assert_eq!(fill["workspace"]["bytes_allowed"], 4 * 1024 * 1024);
    assert!(
        fill["workspace"]["message"]
            .as_str()
            .unwrap()
            .contains("`workspace_mb`: 4"),
        "{fill}"
    );
    let (bytes, _) = held(&a.folder("run-fill"));
    assert!(bytes <= 4 * 1024 * 1024, "{bytes}");
    assert!(bytes >= 3 * 1024 * 1024, "the room was used: {bytes}");
    assert_eq!(fill["workspace"]["bytes"], bytes);

    // A full workspace still lets bash read and delete; what it writes is an error.
    let over = a
        .call(
            &r,
            "bash",
            json!({"command": "echo more > more.txt; ls | wc -l"}),
        )
        .await
        .unwrap_err();
    assert!(over.message.contains("the workspace is full"), "{over}");
    assert!(over.message.contains("`more.txt`"), "{over}");
    assert!(!a.folder("run-fill").join("more.txt").exists());
    let freed = a.bash(&r, "rm f1 f2 && ls | wc -l").await;
    assert_eq!(freed["workspace"]["full"], false, "{freed}");
    assert!(!a.folder("run-fill").join("f1").exists());

    let inodes = a
        .ok(
            &r,
            "bash",
            json!({"command": "for i in $(seq 1 200); do touch n$i 2>/dev/null; done; echo done"}),
        )
        .await;
    assert_eq!(inodes["workspace"]["full"], true, "{inodes}");
    let (_, files) = held(&a.folder("run-fill"));
    assert!(files <= 60, "{files}");
    assert_eq!(files, 60, "the room was used");
}

#[tokio::test]
async fn what_a_killed_bash_call_wrote_is_kept() {
    let a = agent().await;
    let r = run("run-killed");
    let out = a
        .ok(
            &r,
            "bash",
            json!({"command": "echo before > kept.txt; sleep 30", "timeout_seconds": 1}),
        )
        .await;
    assert_eq!(out["timed_out"], true, "{out}");
    let read = a.ok(&r, "read_file", json!({"path": "kept.txt"})).await;
    assert_eq!(read["content"], "     1\tbefore", "{read}");
}

#[tokio::test]
async fn deletions_renames_and_replaced_folders_carry_across_calls() {
    let a = agent().await;
    let r = run("run-changes");
    a.ok(
        &r,
        "write_file",
        json!({"path": "tree/a/b.txt", "content": "b"}),
    )
    .await;
    a.bash(
        &r,
        "echo gone > gone.txt && echo moved > old.txt && mkdir -p redo && echo old > redo/old.txt",
    )
    .await;
    a.bash(
        &r,
        "rm gone.txt && mv old.txt new.txt && rm -rf tree && rm -rf redo && mkdir redo && echo new > redo/new.txt",
    )
    .await;
    let listed = a.ok(&r, "list_files", json!({"recursive": true})).await;
    let paths: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["new.txt", "redo", "redo/new.txt"], "{listed}");
    let out = a.bash(&r, "cat new.txt redo/new.txt").await;
    assert_eq!(out["stdout"], "moved\nnew\n", "{out}");
}

#[tokio::test]
async fn a_planted_symlink_never_redirects_what_bash_wrote() {
    let p = planted().await;
    // The symlink to a host folder, replaced by a real folder in the next call.
    p.a.bash(
        &p.run,
        "rm outdir && mkdir outdir && echo pwned > outdir/inner.txt && echo pwned > outdir/new.txt",
    )
    .await;
    p.unchanged();
    let folder = p.a.folder("run-planted");
    assert!(
        std::fs::symlink_metadata(folder.join("outdir"))
            .unwrap()
            .is_dir()
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("outdir/new.txt")).unwrap(),
        "pwned\n"
    );
    // Writing through the symlink inside the sandbox reaches nothing of the host.
    let through =
        p.a.ok(&p.run, "bash", json!({"command": "echo pwned > victim"}))
            .await;
    assert_ne!(through["exit_code"], 0, "{through}");
    p.unchanged();
    assert!(
        std::fs::symlink_metadata(folder.join("victim"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn write_file_and_edit_file_refuse_a_write_past_the_budget() {
    let a = agent_with(
        "name: coder\nsandbox: {workspace_mb: 1, workspace_files: 4}\n",
        |c| c.caps.write_bytes = 2 * 1024 * 1024,
    )
    .await;
    let r = run("run-budget");
    let half = "x".repeat(600 * 1024);
    a.ok(&r, "write_file", json!({"path": "a.txt", "content": half}))
        .await;
    let e = refused(
        a.call(&r, "write_file", json!({"path": "b.txt", "content": half}))
            .await,
        "content",
        "past workspace_mb",
    );
    assert!(e.message.contains("`workspace_mb`: 1"), "{e}");
    assert!(
        e.message.contains("it holds 614400 of the 1048576 bytes"),
        "{e}"
    );
    assert!(!a.folder("run-budget").join("b.txt").exists());
    // Replacing a file counts only the difference.
    let bigger = format!("START\n{}", "x".repeat(1000 * 1024));
    a.ok(
        &r,
        "write_file",
        json!({"path": "a.txt", "content": bigger}),
    )
    .await;
    let e = refused(
        a.call(
            &r,
            "edit_file",
            json!({"path": "a.txt", "old_string": "START", "new_string": "y".repeat(100_000)}),
        )
        .await,
        "new_string",
        "an edit past workspace_mb",
    );
    assert!(e.message.contains("`workspace_mb`"), "{e}");
    // New files and their folders count against workspace_files.
    let e = refused(
        a.call(
            &r,
            "write_file",
            json!({"path": "d/e/f/g.txt", "content": "g"}),
        )
        .await,
        "path",
        "past workspace_files",
    );
    assert!(e.message.contains("`workspace_files`"), "{e}");
    assert!(e.message.contains("would add 4"), "{e}");
    a.ok(&r, "write_file", json!({"path": "d/g.txt", "content": "g"}))
        .await;
    assert_eq!(held(&a.folder("run-budget")).1, 3);
}

#[tokio::test]
async fn a_workspace_is_deleted_on_demand_and_listed_by_run_id() {
    let a = agent().await;
    a.ok(
        &run("run-a"),
        "write_file",
        json!({"path": "x", "content": "x"}),
    )
    .await;
    a.bash(&run("run-b"), "ln -s / root-link && mkdir -p d/e")
        .await;
    std::fs::create_dir_all(a.root.path().join("workspaces/.not-a-run")).unwrap();
    assert_eq!(a.workspaces.run_ids().unwrap(), ["run-a", "run-b"]);
    assert!(a.workspaces.remove("run-b").await.unwrap());
    assert!(!a.folder("run-b").exists());
    assert!(!a.workspaces.remove("run-b").await.unwrap());
    assert!(
        Path::new("/usr").exists(),
        "the symlink was removed, not followed"
    );
    assert_eq!(a.workspaces.run_ids().unwrap(), ["run-a"]);
}
