//! Overlay binds (an agent's workspace): a run changes the folder only through a
//! bounded tmpfs layer, never the folder itself; the layer stops a disk fill and an
//! inode exhaustion at its room; the merge applies new files, changes, deletions,
//! renames and replaced folders, keeps what a killed run wrote, stays within its budget,
//! and never writes through a symlink, not even one put in the folder after the run.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use common::{run, sandbox, sh, show};
use toolshed_sandbox::{
    Bind, LimitsRequest, MergeBudget, MergeReport, Outcome, OverlayRoom, Sandbox, Usage,
    folder_usage,
};

const MIB: u64 = 1024 * 1024;

fn open(dir: &Path) -> OwnedFd {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW,
        rustix::fs::Mode::empty(),
    )
    .unwrap()
}

fn usage(dir: &Path) -> Usage {
    folder_usage(open(dir).as_fd()).unwrap()
}

/// Runs `script` with `dir` as an overlay at /workspace (working folder), with `room`.
async fn call(
    sb: &Sandbox,
    dir: &Path,
    script: &str,
    room: OverlayRoom,
    timeout_ms: u64,
) -> Outcome {
    let limits = LimitsRequest {
        timeout_ms: Some(timeout_ms),
        ..LimitsRequest::default()
    };
    run(
        sb,
        sh(&format!("cd /workspace && {script}"), limits).bind(Bind::overlay(
            dir,
            "/workspace",
            room,
        )),
    )
    .await
}

/// Merges the run's layer into `dir` under `allowed`.
fn merge(o: &Outcome, dir: &Path, allowed: Usage) -> MergeReport {
    assert_eq!(o.uppers.len(), 1, "{}", show(o));
    let used = usage(dir);
    o.uppers[0]
        .merge(open(dir).as_fd(), MergeBudget { used, allowed })
        .unwrap()
}

const PLENTY: OverlayRoom = OverlayRoom {
    bytes: 64 * MIB,
    files: 10_000,
};
const NO_LIMIT: Usage = Usage {
    bytes: u64::MAX,
    files: u64::MAX,
};

fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[tokio::test]
async fn changes_reach_the_folder_only_through_the_merge_and_all_of_them_do() {
    let sb = sandbox();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (rel, text) in [
        ("keep.txt", "keep\n"),
        ("change.txt", "one\n"),
        ("gone.txt", "gone\n"),
        ("old-name.txt", "moved\n"),
        ("tree/a/b.txt", "b\n"),
        ("tree/c.txt", "c\n"),
        ("redo/old.txt", "old\n"),
        ("file-then-dir", "f\n"),
        ("dir-then-file/x", "x\n"),
    ] {
        std::fs::create_dir_all(dir.join(rel).parent().unwrap()).unwrap();
        std::fs::write(dir.join(rel), text).unwrap();
    }
    let before = usage(dir);
    let o = call(
        &sb,
        dir,
        "echo two >> change.txt && rm gone.txt && mv old-name.txt new-name.txt && rm -rf tree \
         && rm -rf redo && mkdir redo && echo new > redo/new.txt \
         && rm file-then-dir && mkdir file-then-dir && echo in > file-then-dir/in.txt \
         && rm -rf dir-then-file && echo now-a-file > dir-then-file \
         && mkdir -p made/deep && echo deep > made/deep/d.txt && ln -s /etc/passwd made/link \
         && mkfifo made/pipe && chmod 640 keep.txt && id -u",
        PLENTY,
        10_000,
    )
    .await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    // Nothing reached the folder while the run lasted.
    assert_eq!(usage(dir), before);
    assert!(dir.join("gone.txt").exists() && dir.join("tree/a/b.txt").exists());
    assert!(!dir.join("made").exists());

    let report = merge(&o, dir, NO_LIMIT);
    assert!(report.refused.is_empty(), "{report:?}");
    assert_eq!(
        report.usage,
        usage(dir),
        "the report counts as folder_usage does"
    );
    assert_eq!(read(dir, "keep.txt"), "keep\n");
    assert_eq!(
        std::fs::metadata(dir.join("keep.txt")).unwrap().mode() & 0o777,
        0o640
    );
    assert_eq!(read(dir, "change.txt"), "one\ntwo\n");
    assert!(!dir.join("gone.txt").exists());
    assert!(!dir.join("old-name.txt").exists());
    assert_eq!(read(dir, "new-name.txt"), "moved\n");
    assert!(!dir.join("tree").exists(), "an rm -rf of a folder merges");
    // A folder deleted and made again replaces the old one: its old files are gone.
    assert!(!dir.join("redo/old.txt").exists());
    assert_eq!(read(dir, "redo/new.txt"), "new\n");
    assert_eq!(read(dir, "file-then-dir/in.txt"), "in\n");
    assert_eq!(read(dir, "dir-then-file"), "now-a-file\n");
    assert_eq!(read(dir, "made/deep/d.txt"), "deep\n");
    let link = std::fs::symlink_metadata(dir.join("made/link")).unwrap();
    assert!(link.file_type().is_symlink(), "a symlink stays a symlink");
    assert_eq!(
        std::fs::read_link(dir.join("made/link")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert!(
        std::fs::symlink_metadata(dir.join("made/pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    // Owned by the run's uid, never root; no temporary names left.
    let uid = o.host_uid;
    assert_ne!(uid, 0);
    for rel in [
        "change.txt",
        "new-name.txt",
        "made",
        "made/deep/d.txt",
        "redo/new.txt",
    ] {
        assert_eq!(
            std::fs::symlink_metadata(dir.join(rel)).unwrap().uid(),
            uid,
            "{rel}"
        );
    }
    assert_eq!(link.uid(), uid);
    let names: Vec<String> = walk(dir);
    assert!(
        !names.iter().any(|n| n.contains(".toolshed-merge")),
        "{names:?}"
    );

    // A second run sees the merged folder and can change it.
    let o2 = call(
        &sb,
        dir,
        "cat redo/new.txt && rm -rf made && echo three >> change.txt",
        PLENTY,
        10_000,
    )
    .await;
    assert_eq!(o2.exit_code(), Some(0), "{}", show(&o2));
    merge(&o2, dir, NO_LIMIT);
    assert!(!dir.join("made").exists());
    assert_eq!(read(dir, "change.txt"), "one\ntwo\nthree\n");
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        out.push(e.path().display().to_string());
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

#[tokio::test]
async fn a_disk_fill_and_an_inode_exhaustion_stop_at_the_room() {
    let sb = sandbox();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let room = OverlayRoom {
        bytes: 4 * MIB,
        files: 50,
    };
    let fill = call(
        &sb,
        dir,
        "i=0; while [ $i -lt 100 ]; do head -c 1048576 /dev/zero > f$i 2>/dev/null; i=$((i+1)); done; echo done",
        room,
        20_000,
    )
    .await;
    assert_eq!(fill.exit_code(), Some(0), "{}", show(&fill));
    assert!(fill.uppers[0].ran_out());
    let allowed = Usage {
        bytes: 4 * MIB,
        files: 50,
    };
    let report = merge(&fill, dir, allowed);
    let after = usage(dir);
    assert!(after.bytes <= 4 * MIB, "{after:?} {report:?}");
    assert!(after.bytes >= 3 * MIB, "the room was used: {after:?}");
    assert!(after.files <= 50, "{after:?}");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let inodes = call(
        &sb,
        dir,
        "i=0; while [ $i -lt 500 ]; do touch n$i 2>/dev/null; i=$((i+1)); done; echo done",
        room,
        20_000,
    )
    .await;
    assert_eq!(inodes.exit_code(), Some(0), "{}", show(&inodes));
    assert!(inodes.uppers[0].ran_out());
    merge(&inodes, dir, allowed);
    let after = usage(dir);
    assert!(after.files <= 50 && after.files >= 45, "{after:?}");
}

#[tokio::test]
async fn what_a_killed_run_wrote_is_still_merged() {
    let sb = sandbox();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let o = call(
        &sb,
        dir,
        "echo before > kept.txt && sleep 60",
        PLENTY,
        1_000,
    )
    .await;
    assert!(o.timed_out, "{}", show(&o));
    merge(&o, dir, NO_LIMIT);
    assert_eq!(read(dir, "kept.txt"), "before\n");
}

#[tokio::test]
async fn the_merge_stays_within_its_budget_and_says_what_it_refused() {
    let sb = sandbox();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("old.txt"), "x".repeat(1000)).unwrap();
    // A sparse file takes no room in the layer, but counts its whole size in the folder.
    let o = call(
        &sb,
        dir,
        "rm old.txt && echo small > small.txt && truncate -s 10M sparse.bin",
        PLENTY,
        10_000,
    )
    .await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    let report = merge(
        &o,
        dir,
        Usage {
            bytes: 2000,
            files: 10,
        },
    );
    assert!(!dir.join("old.txt").exists(), "deletions go first");
    assert_eq!(read(dir, "small.txt"), "small\n");
    assert!(!dir.join("sparse.bin").exists());
    assert_eq!(report.refused_count, 1, "{report:?}");
    assert_eq!(report.refused[0].path, Path::new("sparse.bin"));
    assert!(
        report.refused[0]
            .reason
            .contains("more than the 2000 allowed"),
        "{report:?}"
    );
    assert!(report.refused[0].over_budget && report.over_budget);
    assert_eq!(report.usage, usage(dir));

    // A socket is not kept, whatever its name; the report serializes any name.
    let o = call(
        &sb,
        dir,
        r#"python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(b"sock\xff")'"#,
        PLENTY,
        10_000,
    )
    .await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    let report = merge(&o, dir, NO_LIMIT);
    assert_eq!(report.refused_count, 1, "{report:?}");
    assert!(!report.over_budget);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["refused"][0]["path"], "sock\u{fffd}", "{json}");
    assert_eq!(json["refused"][0]["reason"], "not kept: a socket");
}

#[tokio::test]
async fn a_symlink_in_the_folder_never_redirects_the_merge() {
    let sb = sandbox();
    let outside = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A symlink a run left, pointing at a host folder: replaced by a real folder.
    let o = call(
        &sb,
        dir,
        &format!("ln -s {} link", outside.path().display()),
        PLENTY,
        10_000,
    )
    .await;
    merge(&o, dir, NO_LIMIT);
    assert!(
        std::fs::symlink_metadata(dir.join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let o = call(
        &sb,
        dir,
        "rm link && mkdir link && echo pwned > link/f",
        PLENTY,
        10_000,
    )
    .await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    merge(&o, dir, NO_LIMIT);
    assert!(
        std::fs::symlink_metadata(dir.join("link"))
            .unwrap()
            .is_dir()
    );
    assert_eq!(read(dir, "link/f"), "pwned\n");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

    // A folder swapped for a symlink between the run and the merge: the merge replaces
    // the symlink by the folder the run saw, never writing through it.
    std::fs::create_dir(dir.join("sub")).unwrap();
    let o = call(
        &sb,
        dir,
        "echo pwned > sub/f && echo fine > top.txt",
        PLENTY,
        10_000,
    )
    .await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    std::fs::remove_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.join("sub")).unwrap();
    let report = merge(&o, dir, NO_LIMIT);
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "{report:?}"
    );
    assert_eq!(read(dir, "top.txt"), "fine\n");
    assert!(std::fs::symlink_metadata(dir.join("sub")).unwrap().is_dir());
    assert_eq!(read(dir, "sub/f"), "pwned\n");
}
