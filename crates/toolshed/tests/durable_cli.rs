//! Durable runs from the command line, each step its own process: parking, approving in
//! another process, resuming in a third; plans; human answers; and bad input.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

struct Env {
    dir: tempfile::TempDir,
    url: String,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/journal.db", dir.path().display());
        Env { dir, url }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &self.url)
    }

    fn run_with(&self, args: &[&str], url: &str) -> Output {
        Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(args)
            .current_dir(self.dir.path())
            .env("TOOLSHED_DATABASE_URL", url)
            .env("TOOLSHED_OUTPUT_DIR", self.dir.path().join("output"))
            .env("TOOLSHED_USER", "tester")
            .output()
            .unwrap()
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn approval_across_three_processes() {
    let env = Env::new();
    // Process 1 parks the run and exits with 4.
    let o = env.run(&[
        "tools",
        "run",
        "transfer_funds",
        "--json",
        "--args",
        r#"{"amount": 500, "to": "ACME-001"}"#,
    ]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = stdout_json(&o);
    assert_eq!(parked["status"], "parked");
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Process 2 approves.
    let o = env.run(&[
        "approvals",
        "approve",
        &call_id,
        "--reason",
        "invoice checked",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Approving twice is refused and changes nothing.
    let o = env.run(&["approvals", "approve", &call_id]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("already approved by `tester`"),
        "{}",
        stderr(&o)
    );

    // Process 3 resumes and finishes.
    let o = env.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let done = stdout_json(&o);
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["calls"][0]["result"]["idempotency_key"],
        json!(format!("{run_id}:0"))
    );

    // The journal shows who approved and the timeline.
    let o = env.run(&["runs", "show", &run_id, "--json", "--crumbs"]);
    let shown = stdout_json(&o);
    assert_eq!(shown["calls"][0]["decision"]["by"], "tester");
    assert_eq!(shown["calls"][0]["decision"]["reason"], "invoice checked");
    let kinds: Vec<&str> = shown["crumbs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["crumb"]["type"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"tool:approval:requested") && kinds.contains(&"tool:approval:decided"),
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"run:completed"));
    // A completed run cannot be resumed.
    let o = env.run(&["runs", "resume", &run_id]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("completed and cannot be resumed"),
        "{}",
        stderr(&o)
    );
}

/// An approval given while the tool was at another revision (an older build of the
/// tool) is refused by `runs resume`: exit 4, the run stays parked, the call waits for
/// a new decision on the current revision, and `runs show` has the whole audit trail.
#[test]
fn resume_refuses_an_approval_given_for_another_revision() {
    let env = Env::new();
    let o = env.run(&[
        "tools",
        "run",
        "transfer_funds",
        "--json",
        "--args",
        r#"{"amount": 500, "to": "ACME-001"}"#,
    ]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = stdout_json(&o);
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let current = parked["waiting_for"][0]["gate"]["revision"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(current.starts_with("sha256:"), "{parked}");

    // Make the approval one given for another revision of the tool: approved, asked
    // again at a revision this build does not have, approved again there.
    let stale = "sha256:0000000000000000";
    let o = env.run(&["approvals", "approve", &call_id, "--by", "bob"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let journal = toolshed_journal::open(&env.url).await.unwrap();
        let gate = toolshed_journal::Gate::Approval {
            reason: "when amount > 100".into(),
            revision: Some(stale.into()),
            four_eyes: false,
            requested_by: None,
            requested_at_ms: None,
            superseded: vec![],
        };
        journal.regate(&call_id, gate).await.unwrap();
    });
    let o = env.run(&[
        "approvals",
        "approve",
        &call_id,
        "--by",
        "bob",
        "--reason",
        "old build",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let o = env.run(&["runs", "resume", &run_id]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("[REVISION_CHANGED]") && err.contains(stale) && err.contains(&current),
        "{err}"
    );
    let o = env.run(&["approvals", "list", "--json"]);
    let pending = stdout_json(&o);
    assert_eq!(pending[0]["call_id"], json!(call_id));
    assert_eq!(pending[0]["status"], "awaiting_approval");
    assert_eq!(pending[0]["gate"]["revision"], json!(current));
    let o = env.run(&["runs", "show", &run_id, "--json"]);
    assert_eq!(stdout_json(&o)["run"]["status"], "parked");
    let o = env.run(&["approvals", "list"]);
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        listed.contains("REVISION") && listed.contains("ASKED") && listed.contains(&current),
        "{listed}"
    );

    // Decided again, it runs.
    let o = env.run(&[
        "approvals",
        "approve",
        &call_id,
        "--reason",
        "checked again",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = env.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout_json(&o)["status"], "completed");
    let o = env.run(&["runs", "show", &run_id]);
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        shown.contains("approved by bob at")
            && shown.contains(&format!(
                "for revision {stale}: old build (no longer holds)"
            ))
            && shown.contains("approved by tester at")
            && shown.contains(&format!("for revision {current}: checked again")),
        "{shown}"
    );
}

#[test]
fn denial_becomes_an_error_result() {
    let env = Env::new();
    let o = env.run(&[
        "tools",
        "run",
        "transfer_funds",
        "--json",
        "--args",
        r#"{"amount": 900, "to": "X-1"}"#,
    ]);
    let parked = stdout_json(&o);
    let (run_id, call_id) = (
        parked["run_id"].as_str().unwrap().to_owned(),
        parked["waiting_for"][0]["call_id"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    let o = env.run(&[
        "approvals",
        "deny",
        &call_id,
        "--reason",
        "too much",
        "--by",
        "bob",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // A call that ended in an error result exits 1, as `tools run` does (the one code
    // every command that drives a run uses for it).
    let o = env.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let v = stdout_json(&o);
    assert_eq!(v["calls"][0]["error"]["code"], "APPROVAL_DENIED");
    let msg = v["calls"][0]["error"]["message"].as_str().unwrap();
    assert!(msg.contains("bob") && msg.contains("too much"), "{msg}");
}

#[test]
fn a_plan_with_a_human_tool_waits_for_a_valid_answer() {
    let env = Env::new();
    let plan = env.file(
        "plan.json",
        r#"[
            {"tool": "convert_temperature", "args": {"value": 20, "from": "celsius", "to": "kelvin"}},
            {"parallel": [{"tool": "roll_dice", "args": {"seed": 1}}, {"tool": "get_current_time"}]},
            {"tool": "approve_publish", "args": {"url": "https://example.com/post"}},
            {"tool": "markdown_writer", "args": {"filename": "post.md", "content": "published"}}
        ]"#,
    );
    let o = env.run(&["runs", "start", "--plan", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = stdout_json(&o);
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(parked["waiting_for"][0]["gate"]["kind"], "answer");
    assert!(
        !env.dir.path().join("output/default/post.md").exists(),
        "the plan stopped at the human tool"
    );

    let o = env.run(&["approvals", "list", "--json"]);
    assert_eq!(stdout_json(&o)[0]["tool"], "approve_publish");

    // A bad answer is refused with the violations; the run stays parked.
    let o = env.run(&[
        "answer",
        &call_id,
        "--json",
        r#"{"approved": "yes", "extra": 1}"#,
    ]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    assert!(err.contains("/approved") && err.contains("extra"), "{err}");
    let o = env.run(&["answer", &call_id, "--json", "{not json"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("not valid JSON"), "{}", stderr(&o));
    let o = env.run(&["runs", "show", &run_id, "--json"]);
    assert_eq!(stdout_json(&o)["run"]["status"], "parked");

    let o = env.run(&[
        "answer",
        &call_id,
        "--json",
        r#"{"approved": true, "note": "ship it"}"#,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = env.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = stdout_json(&o);
    let calls = v["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 5);
    assert_eq!(
        calls[3]["result"],
        json!({"approved": true, "note": "ship it"})
    );
    assert!(env.dir.path().join("output/default/post.md").exists());
    // Each call executed once: the journal holds 5 calls, each with one result.
    let o = env.run(&["runs", "show", &run_id, "--json"]);
    let shown = stdout_json(&o);
    assert_eq!(shown["calls"].as_array().unwrap().len(), 5);
    assert!(
        shown["calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "completed")
    );
}

#[test]
fn bad_input_is_a_clear_error_and_loses_nothing() {
    let env = Env::new();
    // A run to keep.
    let o = env.run(&["tools", "run", "get_current_time"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    for args in [
        vec!["runs", "show", "no-such-run"],
        vec!["runs", "resume", "no-such-run"],
        vec!["runs", "cancel", "no-such-run"],
        vec!["approvals", "approve", "no-such-call"],
        vec!["approvals", "deny", "no-such-call", "--reason", "x"],
        vec!["answer", "no-such-call", "--json", "{}"],
    ] {
        let o = env.run(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("not found"), "{args:?}: {}", stderr(&o));
    }
    // Answering a call that is not a human tool.
    let o = env.run(&[
        "tools",
        "run",
        "transfer_funds",
        "--json",
        "--args",
        r#"{"amount": 500, "to": "A-1"}"#,
    ]);
    let call_id = stdout_json(&o)["waiting_for"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let o = env.run(&["answer", &call_id, "--json", "{}"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("is not a human tool"), "{}", stderr(&o));

    // Plan files.
    for (text, expect) in [
        ("{", "not valid JSON"),
        ("[]", "empty"),
        (r#"[{"tool": "nope"}]"#, "unknown tool `nope`"),
        (r#"[{"tol": "x"}]"#, "unknown field `tol`"),
    ] {
        let plan = env.file("bad-plan.json", text);
        let o = env.run(&["runs", "start", "--plan", plan.to_str().unwrap()]);
        assert_eq!(code(&o), 2, "{text}");
        assert!(stderr(&o).contains(expect), "{text}: {}", stderr(&o));
    }
    let o = env.run(&["runs", "start", "--plan", "/no/such/plan.json"]);
    assert_eq!(code(&o), 2);
    let o = env.run(&["runs", "list", "--status", "sleeping"]);
    assert_eq!(code(&o), 2);

    // Nothing was lost: both runs are still there.
    let o = env.run(&["runs", "list", "--json"]);
    assert_eq!(stdout_json(&o).as_array().unwrap().len(), 2);
}

#[test]
fn a_journal_that_is_not_a_database_or_does_not_answer() {
    let env = Env::new();
    let text = env.file("notes.txt", "just some text, not a database\n");
    let o = env.run_with(&["runs", "list"], &format!("sqlite://{}", text.display()));
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("is not a toolshed journal"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "just some text, not a database\n",
        "the file is untouched"
    );

    let o = env.run_with(&["runs", "list"], "postgres://postgres@127.0.0.1:1/test");
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("JOURNAL_UNAVAILABLE"), "{}", stderr(&o));

    let o = env.run_with(&["runs", "list"], "mysql://localhost/x");
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("sqlite://PATH"), "{}", stderr(&o));
}

#[test]
fn the_default_journal_is_in_the_working_folder() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed"))
        .args(["tools", "run", "get_current_time"])
        .current_dir(dir.path())
        .env_remove("TOOLSHED_DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(Path::new(&dir.path().join("toolshed.db")).exists());
}

/// A real PDF made for the attachment tests (LibreOffice, three pages).
fn sample_pdf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-attachments/tests/fixtures/sample.pdf")
}

#[test]
fn a_run_in_a_session_reads_the_files_attached_to_it_and_a_resume_keeps_the_session() {
    let e = Env::new();
    let pdf = sample_pdf().display().to_string();
    // Attached to a session once; parsed now.
    let o = e.run(&["attach", &pdf, "--session", "support-42", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let attached = stdout_json(&o);
    assert_eq!(attached["kind"], "pdf", "{attached}");
    assert_eq!(attached["page_count"], 3, "{attached}");
    assert_eq!(attached["session_id"], "support-42", "{attached}");
    let id = attached["id"].as_str().unwrap().to_owned();
    let read = json!({"attachment_id": id, "page": 1}).to_string();

    // A run of that session reads it.
    let o = e.run(&[
        "tools",
        "run",
        "read_attachment",
        "--session",
        "support-42",
        "--json",
        "--args",
        &read,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let page = stdout_json(&o);
    assert!(
        page["result"]["text"]
            .as_str()
            .unwrap()
            .contains("Quarterly report"),
        "{page}"
    );
    assert_eq!(page["result"]["page_count"], 3, "{page}");
    assert_eq!(page["result"]["next"]["page"], 2, "{page}");
    let run_id = page["run_id"].as_str().unwrap();
    let shown = stdout_json(&e.run(&["runs", "show", run_id, "--json"]));
    assert_eq!(shown["run"]["session_id"], "support-42", "{shown}");

    // Another session's run, or a run of no session, is told it does not exist.
    for session in [&["--session", "support-43"][..], &[]] {
        let mut args = vec!["tools", "run", "read_attachment", "--json", "--args", &read];
        args.extend_from_slice(session);
        let o = e.run(&args);
        assert_eq!(code(&o), 1, "{session:?}: {}", stderr(&o));
        let refused = stdout_json(&o);
        assert_eq!(
            refused["error"]["code"], "ATTACHMENT_NOT_FOUND",
            "{refused}"
        );
        assert!(
            !refused.to_string().contains("Quarterly report"),
            "{refused}"
        );
    }

    // A plan in the session parks on an approval; its resume keeps the session, so the
    // read after the approval sees the session's file.
    let plan = e.file(
        "plan.json",
        &json!([
            {"tool": "transfer_funds", "args": {"amount": 500, "to": "ACME-001"}},
            {"tool": "read_attachment", "args": {"attachment_id": id, "page": 2}}
        ])
        .to_string(),
    );
    let plan = plan.display().to_string();
    let o = e.run(&[
        "runs",
        "start",
        "--plan",
        &plan,
        "--session",
        "support-42",
        "--json",
    ]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let parked = stdout_json(&o);
    let run_id = parked["run_id"].as_str().unwrap().to_owned();
    let call_id = parked["waiting_for"][0]["call_id"].as_str().unwrap();
    let o = e.run(&["approvals", "approve", call_id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = e.run(&["runs", "resume", &run_id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let done = stdout_json(&o);
    assert_eq!(done["calls"][1]["ok"], true, "{done}");
    assert_eq!(done["calls"][1]["result"]["page"], 2, "{done}");
}

#[test]
fn attach_and_session_flags_refuse_bad_input_with_exit_2() {
    let e = Env::new();
    let pdf = sample_pdf().display().to_string();
    let missing = e.dir.path().join("nowhere.pdf").display().to_string();
    let unknown = e
        .file("blob.bin", "\u{1}\u{2}binary\u{0}stuff\u{3}")
        .display()
        .to_string();
    let encrypted = sample_pdf()
        .with_file_name("encrypted.pdf")
        .display()
        .to_string();
    let long = "s".repeat(256);
    for (args, needle) in [
        (
            vec!["attach", missing.as_str(), "--session", "s"],
            "cannot read",
        ),
        (
            vec!["attach", unknown.as_str(), "--session", "s"],
            "ATTACHMENT_UNSUPPORTED",
        ),
        (
            vec!["attach", encrypted.as_str(), "--session", "s"],
            "ATTACHMENT_ENCRYPTED",
        ),
        (
            vec!["attach", pdf.as_str(), "--session", "bad\nid"],
            "--session must be 1 to 255 characters without control characters",
        ),
        (
            vec!["attach", pdf.as_str(), "--session", long.as_str()],
            "--session must be 1 to 255 characters",
        ),
        (
            vec!["attach", pdf.as_str(), "--session", ""],
            "--session must be 1 to 255 characters",
        ),
        (vec!["attach", pdf.as_str()], "--run"),
        (
            vec!["tools", "run", "get_current_time", "--session", "tab\there"],
            "--session must be 1 to 255 characters without control characters",
        ),
        (
            vec!["runs", "start", "--plan", "-", "--session", long.as_str()],
            "--session must be 1 to 255 characters",
        ),
    ] {
        let o = e.run(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    // Nothing was attached and no run was started.
    let runs = stdout_json(&e.run(&["runs", "list", "--json"]));
    assert_eq!(runs, json!([]), "{runs}");
}
