//! Inside the sandbox: only fds 0, 1 and 2 are open, `/proc` shows only the sandbox's
//! own processes, no capability is left, no new privileges, seccomp is on.
#![allow(clippy::unwrap_used)]

mod common;

use common::{out, py, run, sandbox, sh, show};
use toolshed_sandbox::LimitsRequest;

#[tokio::test]
async fn only_fds_0_1_and_2_are_open() {
    let sb = sandbox();
    let o = run(
        &sb,
        py(
            r#"
import os
open_fds = []
for fd in range(3, 65536):
    try:
        os.fstat(fd)
        open_fds.append(fd)
    except OSError:
        pass
print(open_fds, [os.fstat(fd).st_mode != 0 for fd in (0, 1, 2)])
"#,
            LimitsRequest::default(),
        ),
    )
    .await;
    assert_eq!(out(&o).trim(), "[] [True, True, True]", "{}", show(&o));
}

#[tokio::test]
async fn proc_shows_only_the_sandboxs_own_processes() {
    let sb = sandbox();
    let o = run(
        &sb,
        sh(
            "sleep 1000 & ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; echo; cat /proc/1/cmdline | tr '\\0' ' '",
            LimitsRequest::default(),
        ),
    )
    .await;
    let text = out(&o);
    let mut lines = text.lines();
    let pids: Vec<u32> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // pid 1 (this shell), the sleep, and the pipeline's own processes: a handful, all
    // small numbers of a fresh namespace; the host has hundreds.
    assert!(pids.contains(&1), "{}", show(&o));
    assert!(
        pids.len() <= 8 && pids.iter().all(|p| *p < 32),
        "{}",
        show(&o)
    );
    assert!(
        lines.next().unwrap().starts_with("/bin/sh -c sleep 1000"),
        "{}",
        show(&o)
    );
}

#[tokio::test]
async fn no_capability_is_left_and_no_new_privileges_and_seccomp_are_set() {
    let sb = sandbox();
    let o = run(
        &sb,
        sh(
            "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status",
            LimitsRequest::default(),
        ),
    )
    .await;
    let text = out(&o);
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            text.contains(&format!("{cap}:\t0000000000000000")),
            "{cap} is not empty: {}",
            show(&o)
        );
    }
    assert!(text.contains("NoNewPrivs:\t1"), "{}", show(&o));
    assert!(text.contains("Seccomp:\t2"), "{}", show(&o));
}
