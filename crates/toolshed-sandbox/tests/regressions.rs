//! The two attacks that opened the sandbox issue, as regression tests: a shell run as
//! a tool was root and saw the project; a tool read the server's secrets from its
//! environment.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{out, run, sandbox, sh, show, unique};
use toolshed_sandbox::LimitsRequest;

#[tokio::test]
async fn sh_reports_a_uid_that_is_not_0_and_sees_no_project_files() {
    let sb = sandbox();
    let project = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf();
    assert!(
        project.join("Cargo.toml").is_file(),
        "{}",
        project.display()
    );
    let script = format!(
        "id -u; id; test -e {p} && echo visible || echo hidden; ls {p}/Cargo.toml 2>&1; ls / | tr '\\n' ' '",
        p = project.display()
    );
    let o = run(&sb, sh(&script, LimitsRequest::default())).await;
    let text = out(&o);
    let mut lines = text.lines();
    let uid: u32 = lines.next().unwrap().parse().unwrap();
    assert_ne!(uid, 0, "{}", show(&o));
    assert!(!lines.next().unwrap().contains("root"), "{}", show(&o));
    assert_eq!(lines.next(), Some("hidden"), "{}", show(&o));
    assert!(
        lines.next().unwrap().contains("No such file"),
        "{}",
        show(&o)
    );
    assert_eq!(
        lines.next().unwrap().trim(),
        "bin dev etc lib lib64 proc sbin tmp usr work",
        "{}",
        show(&o)
    );
}

#[test]
fn a_tool_cannot_read_the_supervisors_environment_secrets() {
    let secret = format!("hunter2-{}", unique());
    // The supervisor (a process of its own) holds the secret in its environment, as a
    // server holds TOOLSHED_ADMIN_PASSWORD; the tool looks everywhere it could be.
    let script = "env; cat /proc/1/environ; for f in /proc/[0-9]*/environ; do cat \"$f\"; done; grep -rs 'hunte[r]2' /etc /work /tmp /proc/1/environ /proc/self/environ; true";
    let o = Command::new(env!("CARGO_BIN_EXE_toolshed-sandbox-exec"))
        .args(["--", "/bin/sh", "-c", script])
        .env("TOOLSHED_ADMIN_PASSWORD", &secret)
        .env("TOOLSHED_TOKEN_SECRET", &secret)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(&secret) && !stderr.contains(&secret),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("TOOLSHED_"), "{stdout}");
    // The environment is what the caller passed (nothing) plus what sh sets itself.
    assert!(stdout.starts_with("PWD=/work\n"), "{stdout}");
}
