//! The filesystem: nothing outside the scratch folder and /tmp is writable; the host's
//! secrets are not visible; a symlink or FIFO planted in scratch is never followed when
//! the supervisor reads files back; files are owned by the pool uid, not root.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{out, run, sandbox, sh, show, unique};
use toolshed_sandbox::{Bind, FileKind, LimitsRequest, RunSpec};

#[tokio::test]
async fn writes_outside_scratch_and_tmp_fail() {
    let sb = sandbox();
    let n = unique();
    let script = format!(
        r#"
try() {{ if (echo x > "$1") 2>/dev/null; then echo "WROTE $1"; else echo "refused $1"; fi; }}
try /usr/pwned-{n}
try /usr/bin/pwned-{n}
try /proc/sys/kernel/hostname
try /proc/sys/vm/drop_caches
try /sys/pwned-{n}
try /dev/pwned-{n}
try /dev/null
try /etc/passwd
try /pwned-{n}
try /tmp/host-{n}
try /work/ok-{n}
mkdir /sys 2>/dev/null && echo "WROTE /sys" || echo "refused mkdir /sys"
"#
    );
    let o = run(&sb, sh(&script, LimitsRequest::default())).await;
    let text = out(&o);
    for refused in [
        "/usr/pwned",
        "/usr/bin/pwned",
        "/proc/sys/kernel/hostname",
        "/proc/sys/vm/drop_caches",
        "/sys/pwned",
        "/dev/pwned",
        "/etc/passwd",
        "/pwned",
        "mkdir /sys",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("refused ") && l.contains(refused)),
            "{refused} was not refused: {}",
            show(&o)
        );
    }
    // /dev/null takes writes; /tmp and /work are the sandbox's own.
    for written in ["/dev/null", "/tmp/host-", "/work/ok-"] {
        assert!(text.contains(&format!("WROTE {written}")), "{}", show(&o));
    }
    assert!(
        !Path::new(&format!("/tmp/host-{n}")).exists(),
        "the host's /tmp got the file"
    );
    assert!(!Path::new(&format!("/usr/pwned-{n}")).exists());
    assert!(!Path::new(&format!("/pwned-{n}")).exists());
}

#[tokio::test]
async fn the_hosts_secrets_are_not_readable() {
    let sb = sandbox();
    // A database file of the host, outside the sandbox.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("toolshed.db");
    std::fs::write(&db, "SECRET-DATABASE-CONTENT").unwrap();
    let script = format!(
        r#"
cat /etc/shadow 2>&1
ls /root 2>&1
ls /var/lib/postgresql 2>&1
cat {db} 2>&1
ls {dir} 2>&1
cat /proc/1/environ | tr '\0' '\n'
grep -c '^[^:]*:' /etc/passwd
"#,
        db = db.display(),
        dir = dir.path().display()
    );
    let o = run(&sb, sh(&script, LimitsRequest::default())).await;
    let text = out(&o);
    assert!(!text.contains("SECRET-DATABASE-CONTENT"), "{}", show(&o));
    assert!(
        !text.contains("root:$") && !text.contains("root:*"),
        "{}",
        show(&o)
    );
    assert!(text.contains("/etc/shadow: No such file"), "{}", show(&o));
    assert!(text.contains("/root': No such file"), "{}", show(&o));
    assert!(
        text.contains("/var/lib/postgresql': No such file"),
        "{}",
        show(&o)
    );
    // /proc/1 is the sandbox's own first process, whose environment is empty.
    assert!(
        !text.contains("PATH=") && !text.contains("CARGO"),
        "{}",
        show(&o)
    );
    // The synthetic passwd: root, the sandbox user, nobody; no real user of the host.
    assert_eq!(text.lines().last(), Some("3"), "{}", show(&o));
}

#[tokio::test]
async fn etc_holds_the_synthetic_files_and_the_loaders_cache_only() {
    let sb = sandbox();
    let o = run(
        &sb,
        sh(
            "ls -A /etc | tr '\\n' ' '; echo; cmp -s /etc/ld.so.cache /etc/ld.so.cache && echo readable",
            LimitsRequest::default(),
        ),
    )
    .await;
    let text = out(&o);
    let mut expected = vec![
        "group",
        "hostname",
        "hosts",
        "nsswitch.conf",
        "passwd",
        "resolv.conf",
        "ssl",
    ];
    // The host's loader cache is copied in (programs then find their libraries without
    // trying every hardware-capability folder); a host without one has none.
    if Path::new("/etc/ld.so.cache").is_file() {
        expected.push("ld.so.cache");
        assert!(text.contains("readable"), "{}", show(&o));
    }
    expected.sort_unstable();
    let mut listed: Vec<&str> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, expected, "{}", show(&o));
}

#[tokio::test]
async fn a_planted_symlink_fifo_or_escape_is_never_followed_on_read_back() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "HOST-SECRET").unwrap();
    let script = format!(
        "ln -s {} /work/out.json; ln -s /etc /work/etc; ln -s .. /work/up; mkfifo /work/fifo; mkdir /work/d; echo ok > /work/d/real.txt",
        secret.display()
    );
    let mut spec = sh(&script, LimitsRequest::default());
    spec.collect = [
        "out.json",
        "etc/hostname",
        "up/x",
        "fifo",
        "d/real.txt",
        "d",
        "missing",
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    let o = run(&sb, spec).await;
    assert!(o.success(), "{}", show(&o));
    let by = |p: &str| {
        o.files
            .iter()
            .find(|f| f.path == Path::new(p))
            .unwrap()
            .contents
            .clone()
    };
    for (path, why) in [
        ("out.json", "symlink"),
        ("etc/hostname", "symlink"),
        ("up/x", "symlink"),
        ("fifo", "not a regular file"),
        ("d", "not a regular file"),
        ("missing", "no such file"),
    ] {
        let e = by(path).unwrap_err();
        assert!(e.contains(why), "{path}: {e}");
        assert!(!e.contains("HOST-SECRET"));
    }
    assert_eq!(by("d/real.txt").unwrap(), b"ok\n");
    // A path that leaves the folder is refused before any open.
    let e = sb
        .run(
            {
                let mut s = sh("true", LimitsRequest::default());
                s.collect = vec!["../../etc/passwd".into(), "/etc/passwd".into()];
                s
            },
            Vec::new(),
        )
        .await
        .unwrap();
    for f in &e.files {
        assert!(
            f.contents.as_ref().unwrap_err().contains("relative"),
            "{f:?}"
        );
    }
}

#[tokio::test]
async fn files_the_tool_creates_are_owned_by_its_unprivileged_pool_uid() {
    let sb = sandbox();
    let mut child = sb
        .spawn(RunSpec::new(
            "/bin/sh",
            [
                "-c",
                "echo hi > /work/made; mkdir /work/dir; ln -s made /work/link",
            ],
        ))
        .await
        .unwrap();
    let uid = child.host_uid();
    let report = child.wait().await;
    assert_eq!(report.exit, toolshed_sandbox::Exit::Code(0));
    assert_ne!(uid, 0);
    assert!(
        uid >= toolshed_sandbox::UidPool::default().first,
        "uid {uid} is not from the pool"
    );
    for (path, kind) in [
        ("made", FileKind::File),
        ("dir", FileKind::Dir),
        ("link", FileKind::Symlink),
    ] {
        let st = child.scratch().stat(Path::new(path)).unwrap();
        assert_eq!(st.kind, kind, "{path}");
        assert_eq!(
            (st.uid, st.gid),
            (uid, uid),
            "{path} is owned by {}:{}",
            st.uid,
            st.gid
        );
    }
    assert_eq!(
        child.scratch().read(Path::new("made"), 100).unwrap(),
        b"hi\n"
    );
}

#[tokio::test]
async fn a_read_only_bind_shows_a_file_but_takes_no_writes() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("code.py"), "print('from the bind')\n").unwrap();
    let spec = sh(
        "cat /tool/code.py; echo x >> /tool/code.py 2>/dev/null && echo WROTE || echo refused; ls /tool",
        LimitsRequest::default(),
    )
    .bind(Bind::read_only(dir.path(), "/tool"));
    let o = run(&sb, spec).await;
    assert_eq!(
        out(&o),
        "print('from the bind')\nrefused\ncode.py\n",
        "{}",
        show(&o)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("code.py")).unwrap(),
        "print('from the bind')\n"
    );
}
