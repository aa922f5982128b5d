//! Writable binds (an agent's workspace folder): what a run writes persists on the host,
//! owned by the run's pool uid and never root; a later run (another pool uid) can change
//! it; nothing written there can be executed; giving the tree to the run's uid never
//! follows a symlink a run planted.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{err, out, run, sandbox, sh, show};
use toolshed_sandbox::{Bind, LimitsRequest};

#[tokio::test]
async fn what_a_run_writes_persists_owned_by_its_pool_uid() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    // Left by the supervisor (root): the run may still append to it.
    std::fs::write(dir.path().join("seed.txt"), "seed\n").unwrap();
    let spec = sh(
        "cat /workspace/seed.txt && echo more >> /workspace/seed.txt && echo one > /workspace/one.txt \
         && mkdir -p /workspace/d/e && echo deep > /workspace/d/e/f && id -u",
        LimitsRequest::default(),
    )
    .bind(Bind::read_write(dir.path(), "/workspace"));
    let o = run(&sb, spec).await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    assert!(out(&o).starts_with("seed\n"), "{}", show(&o));
    assert_ne!(o.host_uid, 0);
    for (path, text) in [
        ("seed.txt", "seed\nmore\n"),
        ("one.txt", "one\n"),
        ("d/e/f", "deep\n"),
    ] {
        let p = dir.path().join(path);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), text, "{path}");
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(
            meta.uid(),
            o.host_uid,
            "{path} is not owned by the run's uid"
        );
        assert_ne!(meta.uid(), 0, "{path} is owned by root");
    }

    // A second run, whatever pool uid it gets, can change and remove the first one's files.
    let spec = sh(
        "echo two >> /workspace/one.txt && rm /workspace/d/e/f && rmdir /workspace/d/e",
        LimitsRequest::default(),
    )
    .bind(Bind::read_write(dir.path(), "/workspace"));
    let o2 = run(&sb, spec).await;
    assert_eq!(o2.exit_code(), Some(0), "{}", show(&o2));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("one.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!dir.path().join("d/e").exists());
}

#[tokio::test]
async fn nothing_written_to_a_writable_bind_can_be_executed() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    let spec = sh(
        "printf '#!/bin/sh\\necho RAN\\n' > /workspace/x.sh && chmod +x /workspace/x.sh && /workspace/x.sh",
        LimitsRequest::default(),
    )
    .bind(Bind::read_write(dir.path(), "/workspace"));
    let o = run(&sb, spec).await;
    assert!(!out(&o).contains("RAN"), "{}", show(&o));
    assert_ne!(o.exit_code(), Some(0), "{}", show(&o));
    assert!(err(&o).contains("Permission denied"), "{}", show(&o));
    // The file itself was written.
    let mode = std::fs::metadata(dir.path().join("x.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o100, 0);
}

/// A package cache is the one writable bind whose programs may run (what `npx -y`
/// downloads): written, executed, and still never set-uid.
#[tokio::test]
async fn a_package_cache_is_writable_and_executable_but_never_setuid() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    let spec = sh(
        "printf '#!/bin/sh\\necho RAN\\n' > /cache/x.sh && chmod +x /cache/x.sh && /cache/x.sh \
         && grep ' /cache ' /proc/self/mounts",
        LimitsRequest::default(),
    )
    .bind(Bind::package_cache(dir.path(), "/cache"));
    let o = run(&sb, spec).await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    assert!(out(&o).starts_with("RAN\n"), "{}", show(&o));
    let mount = out(&o).lines().nth(1).unwrap_or_default().to_owned();
    assert!(
        mount.contains("nosuid") && mount.contains("nodev"),
        "{mount}"
    );
    assert!(!mount.contains("noexec"), "{mount}");
    assert!(dir.path().join("x.sh").is_file());
}

#[tokio::test]
async fn giving_the_tree_to_the_run_never_follows_a_planted_symlink() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    // Host files outside the bind, owned by root: what a planted link points at.
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "host secret\n").unwrap();
    let victim_dir = outside.path().join("folder");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::write(victim_dir.join("inner"), "x").unwrap();
    let plant = format!(
        "ln -s {} /workspace/file-link && ln -s {} /workspace/dir-link && ln -s /etc/shadow /workspace/shadow",
        victim.display(),
        victim_dir.display()
    );
    let o = run(
        &sb,
        sh(&plant, LimitsRequest::default()).bind(Bind::read_write(dir.path(), "/workspace")),
    )
    .await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    // Left to root (as the supervisor might), so the next run, whatever uid it gets
    // (it would rather have the folder's owner's), re-owns the tree: the links
    // themselves, never their targets.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::os::unix::fs::lchown(entry.unwrap().path(), Some(0), Some(0)).unwrap();
    }
    std::os::unix::fs::lchown(dir.path(), Some(0), Some(0)).unwrap();
    let o2 = run(
        &sb,
        sh("ls -la /workspace", LimitsRequest::default())
            .bind(Bind::read_write(dir.path(), "/workspace")),
    )
    .await;
    assert_eq!(o2.exit_code(), Some(0), "{}", show(&o2));
    for p in [&victim, &victim_dir, &victim_dir.join("inner")] {
        assert_eq!(
            std::fs::metadata(p).unwrap().uid(),
            0,
            "{} was re-owned through a planted symlink",
            p.display()
        );
    }
    assert_eq!(std::fs::metadata("/etc/shadow").unwrap().uid(), 0);
    let link = std::fs::symlink_metadata(dir.path().join("file-link")).unwrap();
    assert!(link.file_type().is_symlink());
    assert_eq!(link.uid(), o2.host_uid);
}

#[tokio::test]
async fn a_tree_too_deep_to_re_own_does_not_stop_later_runs() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    let deep = "d/".repeat(80);
    let o = run(
        &sb,
        sh(
            &format!("mkdir -p /workspace/{deep}"),
            LimitsRequest::default(),
        )
        .bind(Bind::read_write(dir.path(), "/workspace")),
    )
    .await;
    assert_eq!(o.exit_code(), Some(0), "{}", show(&o));
    let o2 = run(
        &sb,
        sh("echo still > /workspace/top.txt", LimitsRequest::default())
            .bind(Bind::read_write(dir.path(), "/workspace")),
    )
    .await;
    assert_eq!(o2.exit_code(), Some(0), "{}", show(&o2));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("top.txt")).unwrap(),
        "still\n"
    );
}
