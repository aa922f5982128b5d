//! When the host or the request is not right: a missing or too old mechanism is a
//! typed error naming it and the fix (nothing runs), unless the operator opted into
//! running without it by name; `check()` reports every mechanism; bad specs and
//! requests above the ceilings are errors or clamps that say so.
#![allow(clippy::unwrap_used)]

mod common;

use common::{out, run, sandbox, sh, show};
use toolshed_sandbox::{
    Bind, LimitsRequest, Mechanism, Network, RunSpec, Sandbox, SandboxCode, SandboxConfig,
    SandboxError, Status, Weakening,
};

#[test]
fn a_landlock_abi_older_than_required_is_refused_naming_it_and_the_fix() {
    let config = SandboxConfig {
        landlock_min_abi: 99,
        ..SandboxConfig::default()
    };
    let e = Sandbox::new(config).unwrap_err();
    assert_eq!(e.code(), SandboxCode::MechanismUnavailable);
    let SandboxError::MechanismUnavailable { mechanism, .. } = &e else {
        panic!("{e}");
    };
    assert_eq!(*mechanism, Mechanism::Landlock);
    let text = e.to_string();
    assert!(text.contains("landlock"), "{text}");
    assert!(text.contains("older than the required 99"), "{text}");
    assert!(text.contains("opt in to `landlock`"), "{text}");
}

#[tokio::test]
async fn the_operator_can_run_without_landlock_by_naming_it() {
    let config = SandboxConfig {
        landlock_min_abi: 99,
        allow_weaker: vec![Weakening::Landlock],
        ..SandboxConfig::default()
    };
    let sb = Sandbox::new(config).unwrap();
    assert_eq!(sb.weakened(), [Weakening::Landlock]);
    let o = run(&sb, sh("id -u", LimitsRequest::default())).await;
    assert_eq!(out(&o), "1000\n", "{}", show(&o));
    assert_eq!(o.weakened, [Weakening::Landlock]);
    assert_eq!(
        sb.support().get(Mechanism::Landlock).unwrap().status,
        Status::Weakened
    );
}

#[tokio::test]
async fn check_reports_every_mechanism_and_a_trial_run() {
    let report = toolshed_sandbox::check(&SandboxConfig::default()).await;
    use strum::IntoEnumIterator;
    for m in Mechanism::iter() {
        let r = report
            .get(m)
            .unwrap_or_else(|| panic!("{m} is not reported"));
        assert!(!r.detail.is_empty(), "{m}");
    }
    assert!(report.ready(), "{report:?}");
    // Workspace overlays are optional, and this host has them.
    let overlay = report.get(Mechanism::Overlay).unwrap();
    assert!(!overlay.required, "{overlay:?}");
    assert_eq!(overlay.status, Status::Ok, "{overlay:?}");
    let trial = report.get(Mechanism::Trial).unwrap();
    assert_eq!(trial.status, Status::Ok, "{trial:?}");
    assert!(trial.detail.contains("host uid"), "{trial:?}");
    // The report is what `toolshed sandbox check --json` prints.
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["mechanisms"][0]["mechanism"], "namespaces");
}

#[test]
fn a_config_with_a_default_above_its_ceiling_is_refused_naming_the_field() {
    let mut config = SandboxConfig::default();
    config.defaults.memory_bytes = config.ceilings.memory_bytes * 2;
    let e = Sandbox::new(config).unwrap_err();
    assert_eq!(e.code(), SandboxCode::InvalidConfig);
    assert!(e.to_string().contains("defaults.memory_bytes"), "{e}");
}

#[tokio::test]
async fn requests_above_the_ceilings_are_clamped_and_reported() {
    let mut config = SandboxConfig::default();
    config.ceilings.memory_bytes = 128 << 20;
    config.defaults.memory_bytes = 64 << 20;
    config.network_allowed = false;
    let sb = Sandbox::new(config).unwrap();
    let mut spec = sh(
        "true",
        LimitsRequest {
            memory_bytes: Some(1 << 40),
            ..Default::default()
        },
    );
    spec.network = Network::On;
    let o = run(&sb, spec).await;
    assert_eq!(o.limits.memory_bytes, 128 << 20);
    assert_eq!(o.network, Network::Off, "the server forbids the network");
    let limits: Vec<&str> = o.clamped.iter().map(|c| c.limit.as_str()).collect();
    assert_eq!(limits, ["memory_bytes", "network"]);
    assert!(
        o.clamped[0].to_string().contains("ceiling"),
        "{}",
        o.clamped[0]
    );
}

#[tokio::test]
async fn bad_specs_are_typed_errors_naming_what_is_wrong() {
    let sb = sandbox();
    let cases: Vec<(RunSpec, SandboxCode, &str)> = vec![
        (
            RunSpec::new("no-such-program", Vec::<String>::new()),
            SandboxCode::ProgramNotFound,
            "not found",
        ),
        (
            RunSpec::new("/etc/passwd", Vec::<String>::new()),
            SandboxCode::ProgramNotFound,
            "/usr",
        ),
        (
            RunSpec::new("relative/prog", Vec::<String>::new()),
            SandboxCode::ProgramNotFound,
            "absolute",
        ),
        (
            sh("true", LimitsRequest::default()).bind(Bind::read_only("/usr/bin", "tool")),
            SandboxCode::InvalidConfig,
            "binds[0].target",
        ),
        (
            sh("true", LimitsRequest::default()).bind(Bind::read_only("/usr/bin", "/proc/x")),
            SandboxCode::InvalidConfig,
            "binds[0].target",
        ),
        (
            sh("true", LimitsRequest::default())
                .bind(Bind::read_only("/nonexistent-source-for-a-test", "/tool")),
            SandboxCode::BindSourceNotFound,
            "/nonexistent-source-for-a-test",
        ),
        (
            sh("true", LimitsRequest::default()).env("A=B", "c"),
            SandboxCode::InvalidConfig,
            "env[0]",
        ),
        (
            {
                let mut s = sh("true", LimitsRequest::default());
                s.files.push(("../x".into(), Vec::new()));
                s
            },
            SandboxCode::InvalidConfig,
            "files[0]",
        ),
    ];
    for (spec, code, needle) in cases {
        let e = sb.run(spec, Vec::new()).await.unwrap_err();
        assert_eq!(e.code(), code, "{e}");
        assert!(e.to_string().contains(needle), "{needle} not in: {e}");
    }
    // A program that exists on the host but not in the sandbox's view.
    let e = sb
        .run(
            RunSpec::new("/root/anything", Vec::<String>::new()),
            Vec::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), SandboxCode::ProgramNotFound, "{e}");
}

#[tokio::test]
async fn an_exec_failure_inside_the_sandbox_is_program_not_found() {
    let sb = sandbox();
    // A file that exists and is not executable: the child's execve fails; the failure
    // comes back from the child as a typed error.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.txt"), "not a program").unwrap();
    let spec = RunSpec::new("/tool/data.txt", Vec::<String>::new())
        .bind(Bind::executable(dir.path(), "/tool"));
    let e = sb.run(spec, Vec::new()).await.unwrap_err();
    assert_eq!(e.code(), SandboxCode::ProgramNotFound, "{e}");
    assert!(e.to_string().contains("execve"), "{e}");
}
