//! Discovery over fixtures of every client's config format: Claude Code (`.mcp.json`,
//! `~/.claude.json` with per-project entries), Claude Desktop (Linux and macOS paths),
//! Cursor (project and user), VS Code (JSONC, `inputs`); variables, a missing one, a
//! broken file and entry, duplicates, and that no secret value gets into a spec.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toolshed_mcp::discovery::{ClientKind, Discovery, DiscoveryError, Places, Scope, discover};
use toolshed_mcp::{Launch, McpCode, McpServerSpec};

const SECRETS: &[&str] = &["zt-secret-value", "lin-secret-value", "ghp-secret-value"];

/// Copies a fixture (`project/` and `home/`) into a temp folder, writing the project's
/// path where `~/.claude.json` says `@PROJECT@`.
fn fixture(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/discovery")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let home = dir.path().join("home");
    copy(&src, dir.path(), &project);
    (dir, project, home)
}

fn copy(from: &Path, to: &Path, project: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy(&entry.path(), &target, project);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            std::fs::write(
                target,
                text.replace("@PROJECT@", &project.to_string_lossy()),
            )
            .unwrap();
        }
    }
}

fn scan(project: &Path, home: &Path, vars: &[(&str, &str)]) -> Discovery {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let env = move |name: &str| vars.get(name).cloned();
    discover(&Places {
        project: project.to_owned(),
        home: home.to_owned(),
        env: &env,
    })
}

fn server<'a>(d: &'a Discovery, name: &str) -> &'a McpServerSpec {
    &d.servers
        .iter()
        .find(|s| s.spec.name == name)
        .unwrap_or_else(|| panic!("no server {name}: {:?}", names(d)))
        .spec
}

fn names(d: &Discovery) -> Vec<&str> {
    d.servers.iter().map(|s| s.spec.name.as_str()).collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn map(v: &[(&str, &str)]) -> BTreeMap<String, String> {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn all() -> (tempfile::TempDir, PathBuf, PathBuf, Discovery) {
    let (dir, project, home) = fixture("all");
    let d = scan(
        &project,
        &home,
        &[
            ("ZENDESK_TOKEN", SECRETS[0]),
            ("LINEAR_KEY", SECRETS[1]),
            ("GITHUB_TOKEN", SECRETS[2]),
            ("REMOTE_HOST", "mcp.example.com"),
            ("LOG_LEVEL", "debug"),
        ],
    );
    (dir, project, home, d)
}

#[test]
fn every_clients_file_is_read_project_scope_first() {
    let (_dir, _p, _h, d) = all();
    assert_eq!(
        names(&d),
        [
            "local-db",
            "remote",
            "zendesk",
            "linear",
            "legacy",
            "perplexity",
            "github",
            "my-server-name",
            "filesystem",
            "notes"
        ]
    );
    let files: Vec<(&str, ClientKind, Scope)> = d
        .files
        .iter()
        .map(|f| (f.file.display.as_str(), f.file.client, f.file.scope))
        .collect();
    assert_eq!(
        files,
        [
            ("~/.claude.json", ClientKind::ClaudeCode, Scope::User),
            ("./.mcp.json", ClientKind::ClaudeCode, Scope::Project),
            ("./.cursor/mcp.json", ClientKind::Cursor, Scope::Project),
            ("./.vscode/mcp.json", ClientKind::Vscode, Scope::Project),
            ("~/.cursor/mcp.json", ClientKind::Cursor, Scope::User),
            (
                "~/.config/Claude/claude_desktop_config.json",
                ClientKind::ClaudeDesktop,
                Scope::User
            ),
            (
                "~/Library/Application Support/Claude/claude_desktop_config.json",
                ClientKind::ClaudeDesktop,
                Scope::User
            ),
        ]
    );
    let scope = |name: &str| {
        d.servers
            .iter()
            .find(|s| s.spec.name == name)
            .unwrap()
            .source
            .clone()
    };
    // `~/.claude.json`'s entries for this project are project scope; its own are the user's.
    assert_eq!(scope("local-db").scope, Scope::Project);
    assert_eq!(
        scope("local-db").field,
        format!("projects.{}.mcpServers.local-db", _p.display())
    );
    assert_eq!(scope("github").scope, Scope::User);
    assert_eq!(scope("zendesk").file, "./.mcp.json");
    assert_eq!(scope("notes").client, ClientKind::ClaudeDesktop);
}

#[test]
fn claude_code_stdio_with_a_default_and_a_secret_reference() {
    let (_dir, _p, _h, d) = all();
    let s = server(&d, "zendesk");
    let Launch::Stdio(l) = &s.launch else {
        panic!("{s:?}")
    };
    assert_eq!(l.command, "npx");
    assert_eq!(
        l.args,
        strings(&["-y", "zendesk-mcp", "--root", "/srv/docs"])
    );
    assert_eq!(
        l.env,
        map(&[
            ("ZENDESK_SUBDOMAIN", "acme"),
            ("ZENDESK_TOKEN", "${ZENDESK_TOKEN}")
        ])
    );
    assert_eq!(s.credentials, strings(&["ZENDESK_TOKEN"]));
    assert_eq!(l.network, None, "the client decides by the kind of command");
}

#[test]
fn http_servers_with_headers() {
    let (_dir, _p, _h, d) = all();
    let remote = server(&d, "remote");
    let Launch::Http(h) = &remote.launch else {
        panic!()
    };
    assert_eq!(h.url, "https://mcp.example.com/mcp");
    assert_eq!(
        h.headers,
        map(&[("Authorization", "Bearer anonymous")]),
        "the default"
    );
    assert!(remote.credentials.is_empty());
    let found = d.servers.iter().find(|s| s.spec.name == "remote").unwrap();
    assert_eq!(
        found.from_env,
        strings(&["url"]),
        "a value from the environment is marked"
    );

    let linear = server(&d, "linear");
    let Launch::Http(h) = &linear.launch else {
        panic!()
    };
    assert_eq!(h.headers, map(&[("Authorization", "Bearer ${LINEAR_KEY}")]));
    assert_eq!(linear.credentials, strings(&["LINEAR_KEY"]));
}

#[test]
fn vscode_jsonc_with_inputs_and_its_own_variables() {
    let (_dir, project, home, d) = all();
    let s = server(&d, "perplexity");
    let Launch::Stdio(l) = &s.launch else {
        panic!()
    };
    assert_eq!(
        l.command,
        format!("{}/bin/perplexity-mcp", project.display())
    );
    assert_eq!(
        l.args,
        strings(&[
            "--home",
            &home.to_string_lossy(),
            "--url",
            "https://api.perplexity.ai//v1"
        ])
    );
    assert_eq!(
        l.env,
        map(&[
            ("LOG", "${LOG_LEVEL}"),
            ("PERPLEXITY_API_KEY", "${perplexity-key}")
        ])
    );
    assert_eq!(s.credentials, strings(&["LOG_LEVEL", "perplexity-key"]));
    let legacy = d.servers.iter().find(|s| s.spec.name == "legacy").unwrap();
    assert!(matches!(legacy.spec.launch, Launch::Http(_)));
    assert!(
        legacy.notes.iter().any(|n| n.contains("SSE")),
        "{:?}",
        legacy.notes
    );
}

#[test]
fn a_missing_variable_skips_only_its_server() {
    let (_dir, _p, _h, d) = all();
    assert_eq!(d.errors.len(), 1, "{:?}", d.errors);
    let e = &d.errors[0];
    assert_eq!(
        e,
        &DiscoveryError::MissingVariable {
            file: "./.mcp.json".into(),
            server: "needs-var".into(),
            field: "args[2]".into(),
            variable: "NOT_SET_ANYWHERE".into(),
        }
    );
    assert_eq!(e.code(), McpCode::McpConfigVariable);
    let message = e.to_string();
    assert!(
        message.contains("./.mcp.json")
            && message.contains("needs-var")
            && message.contains("NOT_SET_ANYWHERE"),
        "{message}"
    );
}

#[test]
fn a_secret_of_the_environment_is_never_in_a_spec() {
    let (_dir, _p, _h, d) = all();
    let text = serde_json::to_string(&d).unwrap();
    for secret in SECRETS {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    let errors: String = d.errors.iter().map(|e| e.to_string()).collect();
    for secret in SECRETS {
        assert!(!errors.contains(secret));
    }
    assert_eq!(server(&d, "github").credentials, strings(&["GITHUB_TOKEN"]));
}

#[test]
fn duplicates_keep_the_first_and_name_both_files() {
    let (_dir, _p, _h, d) = all();
    let dups: Vec<(&str, &str, &str, bool)> = d
        .duplicates
        .iter()
        .map(|x| {
            (
                x.name.as_str(),
                x.kept.as_str(),
                x.dropped.as_str(),
                x.identical,
            )
        })
        .collect();
    assert_eq!(
        dups,
        [
            ("zendesk", "./.mcp.json", "~/.cursor/mcp.json", false),
            (
                "filesystem",
                "~/.config/Claude/claude_desktop_config.json",
                "~/Library/Application Support/Claude/claude_desktop_config.json",
                true
            ),
        ]
    );
    let Launch::Stdio(l) = &server(&d, "zendesk").launch else {
        panic!()
    };
    assert_eq!(l.args[1], "zendesk-mcp", "the project's entry won");
}

#[test]
fn a_name_outside_the_rule_is_renamed_and_said_so() {
    let (_dir, _p, _h, d) = all();
    let s = d
        .servers
        .iter()
        .find(|s| s.spec.name == "my-server-name")
        .unwrap();
    assert_eq!(s.renamed_from.as_deref(), Some("my.server name"));
    assert!(s.disabled, "Cursor's `disabled: true` is kept");
    assert!(
        !d.servers
            .iter()
            .find(|s| s.spec.name == "notes")
            .unwrap()
            .disabled
    );
    assert!(s.notes.iter().any(|n| n.contains("renamed")));
}

#[test]
fn a_broken_file_and_broken_entries_name_file_line_and_field_and_the_rest_scans() {
    let (_dir, project, home) = fixture("broken");
    let d = scan(&project, &home, &[]);
    assert_eq!(names(&d), ["fine", "still-read"], "{:?}", d.errors);
    let messages: Vec<String> = d.errors.iter().map(ToString::to_string).collect();
    assert_eq!(d.errors.len(), 4, "{messages:#?}");

    // The entry whose `args` is a string: file, line, column, field and the fix.
    let args = d
        .errors
        .iter()
        .find(|e| e.server() == Some("zendesk"))
        .unwrap();
    let DiscoveryError::Invalid {
        file,
        line,
        field,
        reason,
        ..
    } = args
    else {
        panic!("{args:?}")
    };
    assert_eq!(
        (file.as_str(), *line, field.as_str()),
        ("./.mcp.json", 6, "mcpServers.zendesk.args")
    );
    assert!(
        reason.starts_with("expected an array of strings"),
        "{reason}"
    );
    assert_eq!(args.code(), McpCode::McpConfigInvalid);
    assert!(
        args.to_string().starts_with(
            "./.mcp.json:6:30: mcpServers.zendesk.args: expected an array of strings, found string"
        ),
        "{args}"
    );

    // The file that is not JSON at all: the whole file, with its line.
    let syntax = d
        .errors
        .iter()
        .find(|e| e.file() == "./.cursor/mcp.json")
        .unwrap();
    let DiscoveryError::Invalid { line, column, .. } = syntax else {
        panic!("{syntax:?}")
    };
    assert_eq!(*line, 3);
    assert!(*column > 0);
    assert!(
        d.files
            .iter()
            .any(|f| f.file.display == "./.cursor/mcp.json" && !f.ok)
    );

    // Well-formed entries that are not servers.
    let nothing = d
        .errors
        .iter()
        .find(|e| e.server() == Some("nothing"))
        .unwrap();
    assert!(
        nothing
            .to_string()
            .contains("needs `command` (stdio) or `url`"),
        "{nothing}"
    );
    let badtype = d
        .errors
        .iter()
        .find(|e| e.server() == Some("badtype"))
        .unwrap();
    assert!(
        badtype
            .to_string()
            .contains("type: `websocket` is not a transport"),
        "{badtype}"
    );
    assert_eq!(badtype.code(), McpCode::InvalidMcpSpec);
}

#[test]
fn no_files_is_an_empty_scan() {
    let dir = tempfile::tempdir().unwrap();
    let d = scan(dir.path(), dir.path(), &[]);
    assert!(d.servers.is_empty() && d.errors.is_empty() && d.files.is_empty());
}

#[test]
fn an_unreadable_or_oversized_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // A folder where a file should be.
    std::fs::create_dir_all(dir.path().join(".mcp.json")).unwrap();
    std::fs::write(dir.path().join(".claude.json"), [0xff, 0xfe, b'{']).unwrap();
    let d = scan(dir.path(), dir.path(), &[]);
    let messages: Vec<String> = d.errors.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("./.mcp.json: cannot read: not a regular file")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("~/.claude.json: cannot read: not UTF-8")),
        "{messages:?}"
    );
    assert!(
        d.errors
            .iter()
            .all(|e| e.code() == McpCode::McpConfigUnreadable)
    );
}

#[test]
fn hostile_entries_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    for text in [
        "",
        "[]",
        "null",
        r#"{"mcpServers": []}"#,
        r#"{"mcpServers": {"a": null}}"#,
        r#"{"mcpServers": {"": {"command": "x"}}}"#,
        r#"{"mcpServers": {"a": {"command": "x", "env": {"=": "${"}}}}"#,
        r#"{"mcpServers": {"a": {"command": "${${${}}}"}}}"#,
        r#"{"mcpServers": {"a": {"url": "ftp://x"}}} trailing"#,
        "{\"mcpServers\": {\"\u{2603}\": {\"command\": \"x\"}}}",
    ] {
        std::fs::write(dir.path().join(".mcp.json"), text).unwrap();
        let d = scan(dir.path(), dir.path(), &[]);
        assert!(
            d.servers.is_empty() || text.contains('\u{2603}'),
            "{text}: {:?}",
            names(&d)
        );
        assert!(!d.errors.is_empty() || text.contains('\u{2603}'), "{text}");
    }
}

#[test]
fn a_scan_in_the_home_folder_reads_each_file_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".cursor")).unwrap();
    std::fs::write(
        dir.path().join(".cursor/mcp.json"),
        r#"{"mcpServers": {"a": {"command": "/opt/a"}}}"#,
    )
    .unwrap();
    let d = scan(dir.path(), dir.path(), &[]);
    assert_eq!(names(&d), ["a"]);
    assert!(d.duplicates.is_empty(), "{:?}", d.duplicates);
    assert_eq!(d.files.len(), 1);
    assert_eq!(
        d.servers[0].source.scope,
        Scope::Project,
        "the stricter scope"
    );
}
