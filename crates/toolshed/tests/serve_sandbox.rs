//! `toolshed serve`'s sandbox settings: flags and their `TOOLSHED_SANDBOX_*` variables,
//! a default above its ceiling refused at start (exit 2) naming what to change.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output, Stdio};

fn serve(args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolshed"));
    cmd.args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir.path())
        .env("TOOLSHED_DATABASE_URL", &db)
        .env_remove("TOOLSHED_SANDBOX_MEMORY_MB")
        .env_remove("TOOLSHED_SANDBOX_MAX_MEMORY_MB")
        .env_remove("TOOLSHED_SANDBOX_TIMEOUT_SECONDS")
        .env_remove("TOOLSHED_SANDBOX_MAX_TIMEOUT_SECONDS")
        .env_remove("TOOLSHED_SANDBOX_ALLOW_WEAKER")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn a_default_above_its_ceiling_is_refused_at_start_by_flag_or_variable() {
    for (args, env, needle) in [
        (
            vec!["--sandbox-memory-mb", "2048"],
            vec![],
            "default memory of a sandboxed run (2048 MB) is above its ceiling (1024 MB): lower --sandbox-memory-mb",
        ),
        (
            vec![],
            vec![("TOOLSHED_SANDBOX_MAX_MEMORY_MB", "100")],
            "(256 MB) is above its ceiling (100 MB)",
        ),
        (
            vec!["--sandbox-max-timeout-seconds", "10"],
            vec![],
            "default timeout of a sandboxed run (30 s) is above its ceiling (10 s)",
        ),
    ] {
        let o = serve(&args, &env);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert!(err.contains(needle), "{args:?} {env:?}: {err}");
        assert!(err.contains("above its ceiling"), "{err}");
        // Nothing listened.
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("listening"),
            "{args:?}"
        );
    }
}

#[test]
fn out_of_range_sandbox_flags_are_exit_2() {
    for args in [
        ["--sandbox-timeout-seconds", "0"],
        ["--sandbox-memory-mb", "1"],
        ["--sandbox-max-timeout-seconds", "soon"],
    ] {
        let o = serve(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(args[0]), "{args:?}: {err}");
    }
}
