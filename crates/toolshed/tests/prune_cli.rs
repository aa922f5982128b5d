//! `toolshed runs prune` and `toolshed runs vacuum` run as an operator would: what they
//! remove, what they never remove (running and parked runs), the dry run, `--json`, and
//! exit codes.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use serde_json::Value;

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
        Command::new(env!("CARGO_BIN_EXE_toolshed"))
            .args(args)
            .current_dir(self.dir.path())
            .env("TOOLSHED_DATABASE_URL", &self.url)
            .env("TOOLSHED_OUTPUT_DIR", self.dir.path().join("output"))
            .env("TOOLSHED_USER", "tester")
            .output()
            .unwrap()
    }

    /// Run and expect exit code `want`; the JSON on stdout.
    fn json(&self, args: &[&str], want: i32) -> Value {
        let o = self.run(args);
        assert_eq!(code(&o), want, "{args:?}: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}",
                String::from_utf8_lossy(&o.stdout)
            )
        })
    }

    /// The ids of the runs in the journal, with their statuses.
    fn runs(&self) -> Vec<(String, String)> {
        let v = self.json(&["runs", "list", "--json", "--limit", "500"], 0);
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_owned(),
                    r["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// A parked run (an approval-gated transfer); its run and call ids.
    fn park(&self) -> (String, String) {
        let v = self.json(
            &[
                "tools",
                "run",
                "transfer_funds",
                "--json",
                "--args",
                r#"{"amount": 500, "to": "ACME-001"}"#,
            ],
            4,
        );
        (
            v["run_id"].as_str().unwrap().to_owned(),
            v["waiting_for"][0]["call_id"].as_str().unwrap().to_owned(),
        )
    }
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

#[test]
fn prune_removes_finished_runs_and_never_parked_ones() {
    let env = Env::new();
    for _ in 0..3 {
        env.json(
            &["tools", "run", "get_current_time", "--json", "--args", "{}"],
            0,
        );
    }
    let (parked, call) = env.park();
    let (cancelled, _) = env.park();
    let o = env.run(&["runs", "cancel", &cancelled, "--reason", "not needed"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(env.runs().len(), 5);

    // The dry run counts and removes nothing.
    let v = env.json(
        &["runs", "prune", "--older-than", "0s", "--dry-run", "--json"],
        0,
    );
    assert_eq!(
        (v["dry_run"].as_bool(), v["runs"].as_u64()),
        (Some(true), Some(4))
    );
    assert_eq!(v["calls"], 4);
    let o = env.run(&["runs", "prune", "--older-than", "0s", "--dry-run"]);
    assert_eq!(code(&o), 0);
    assert!(
        stdout(&o).starts_with("would remove 4 runs and 4 calls"),
        "{}",
        stdout(&o)
    );
    assert_eq!(env.runs().len(), 5);

    // Runs younger than the age stay.
    let v = env.json(&["runs", "prune", "--older-than", "30d", "--json"], 0);
    assert_eq!(v["runs"], 0);
    assert_eq!(env.runs().len(), 5);

    // Only the cancelled one, by status.
    let o = env.run(&[
        "runs",
        "prune",
        "--older-than",
        "0s",
        "--status",
        "cancelled",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("removed 1 run and 1 call (cancelled runs"),
        "{}",
        stdout(&o)
    );
    assert!(!env.runs().iter().any(|(id, _)| *id == cancelled));

    // Everything finished: the three completed runs go, the parked run stays whole.
    let v = env.json(&["runs", "prune", "--older-than", "0s", "--json"], 0);
    assert_eq!(
        (v["runs"].as_u64(), v["calls"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(v["space"]["mode"], "incremental");
    assert_eq!(v["vacuum_needed"], false);
    assert_eq!(env.runs(), [(parked.clone(), "parked".to_owned())]);
    // …and can still be approved and resumed to its end.
    let o = env.run(&["approvals", "approve", &call]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = env.json(&["runs", "resume", &parked, "--json"], 0);
    assert_eq!(v["status"], "completed");
    let v = env.json(&["runs", "prune", "--older-than", "0s", "--json"], 0);
    assert_eq!(v["runs"], 1);
    assert!(env.runs().is_empty());
}

/// The blob files under the journal's `blobs` folder.
fn blob_files(env: &Env) -> usize {
    let root = env.dir.path().join("blobs").join("sha256");
    let Ok(folders) = std::fs::read_dir(root) else {
        return 0;
    };
    folders
        .map(|f| std::fs::read_dir(f.unwrap().path()).unwrap().count())
        .sum()
}

#[test]
fn prune_removes_attachments_and_their_files_unless_another_attachment_names_them() {
    let env = Env::new();
    let done = env.json(
        &["tools", "run", "get_current_time", "--json", "--args", "{}"],
        0,
    )["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (parked, call) = env.park();
    let file = |name: &str, text: &str| {
        let p = env.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let same = file("same.txt", "the same bytes twice\n");
    let own = file("own.md", "# only the finished run's\n");
    let lonely = file("lonely.txt", "a session with no run\n");
    for (path, flag, owner) in [
        (&same, "--run", &done),
        (&own, "--run", &done),
        (&same, "--run", &parked),
        (&lonely, "--session", &"no-run-yet".to_owned()),
    ] {
        env.json(&["attach", path, flag, owner, "--json"], 0);
    }
    // Three distinct files: `same.txt`'s bytes are stored once.
    assert_eq!(blob_files(&env), 3);

    let v = env.json(
        &["runs", "prune", "--older-than", "0s", "--dry-run", "--json"],
        0,
    );
    assert_eq!(
        (v["runs"].as_u64(), v["attachments"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(blob_files(&env), 3, "a dry run deletes nothing");

    // The finished run's two attachments and the run-less session's go; the parked
    // run's copy of `same.txt` keeps that file.
    let v = env.json(&["runs", "prune", "--older-than", "0s", "--json"], 0);
    assert_eq!(v["runs"], 1, "{v}");
    assert_eq!(v["attachments"], 3, "{v}");
    assert_eq!(v["attachment_files"], 2, "{v}");
    assert_eq!(blob_files(&env), 1);

    // Once the parked run ends and is pruned, its attachment and the last file go.
    let o = env.run(&["approvals", "approve", &call]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    env.json(&["runs", "resume", &parked, "--json"], 0);
    let o = env.run(&["runs", "prune", "--older-than", "0s"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1 attachment (1 file)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(blob_files(&env), 0);
}

#[test]
fn bad_flags_exit_2_and_name_the_fix() {
    let env = Env::new();
    for (args, says) in [
        (vec!["--older-than", "30x"], "unknown unit `x`"),
        (vec!["--older-than", "30"], "has no unit"),
        (
            vec!["--older-than", "1d", "--status", "parked"],
            "parked runs are never pruned",
        ),
        (
            vec!["--older-than", "1d", "--status", "completed,running"],
            "running runs are never pruned",
        ),
        (
            vec!["--older-than", "1d", "--status", "done"],
            "choose from completed, failed, cancelled",
        ),
        (vec!["--status", "failed"], "--older-than"),
        (vec!["--older-than", "1d", "--batch", "0"], "--batch"),
    ] {
        let mut full = vec!["runs", "prune"];
        full.extend(args.iter().copied());
        let o = env.run(&full);
        assert_eq!(code(&o), 2, "{full:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{full:?}: {}", stderr(&o));
    }
}

#[test]
fn an_unusable_journal_exits_3() {
    let env = Env::new();
    // A folder where the file should be.
    let folder = env.dir.path().join("a-folder.db");
    std::fs::create_dir(&folder).unwrap();
    let url = format!("sqlite://{}", folder.display());
    for command in [
        vec!["runs", "prune", "--older-than", "1d"],
        vec!["runs", "vacuum"],
    ] {
        let mut full = vec!["--database-url", url.as_str()];
        full.extend(command.iter().copied());
        let o = env.run(&full);
        assert_eq!(code(&o), 3, "{full:?}: {}", stderr(&o));
    }
}

#[test]
fn vacuum_on_a_current_journal_is_harmless() {
    let env = Env::new();
    env.json(
        &["tools", "run", "get_current_time", "--json", "--args", "{}"],
        0,
    );
    let v = env.json(&["runs", "vacuum", "--json"], 0);
    assert_eq!(v["after"]["mode"], "incremental");
    assert_eq!(v["after"]["free_bytes"], 0);
    assert_eq!(env.runs().len(), 1);
}
