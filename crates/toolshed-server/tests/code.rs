//! Uploaded code over real HTTP: code travels in the registration, is stored per
//! revision, runs from the server's own cache in the sandbox, downloads back byte for
//! byte; hostile archives are refused naming the entry; host-path endpoints are for
//! admins inside the operator's tool roots only, with one answer for missing and
//! forbidden paths.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use base64::Engine;
use common::TestServer;
use serde_json::{Value, json};
use sha2::Digest;

/// A deterministic tar of regular files, as the CLI builds it.
fn archive(files: &[(&str, &str)]) -> Vec<u8> {
    let files: Vec<toolshed_api::code::CodeFile> = files
        .iter()
        .map(|(p, t)| toolshed_api::code::CodeFile {
            path: (*p).to_owned(),
            content: t.as_bytes().to_vec(),
            executable: false,
        })
        .collect();
    toolshed_api::code::build_archive(&files).unwrap()
}

/// A tar with one raw entry: the name's bytes as given (no checks), its type, its data,
/// and a link target for links.
fn raw_entry(
    builder: &mut tar::Builder<Vec<u8>>,
    name: &[u8],
    kind: tar::EntryType,
    data: &[u8],
    link: Option<&str>,
) {
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    header.set_entry_type(kind);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    if let Some(l) = link {
        header.set_link_name(l).unwrap();
    }
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

/// One raw entry: its name's bytes, its type, its data, a link target.
type RawEntry<'a> = (&'a [u8], tar::EntryType, &'a [u8], Option<&'a str>);

fn raw_archive(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, kind, data, link) in entries {
        raw_entry(&mut builder, name, *kind, data, *link);
    }
    builder.into_inner().unwrap()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn code(bytes: &[u8]) -> Value {
    json!({"archive_base64": b64(bytes), "sha256": sha(bytes)})
}

const V1: &str = "def answer(x: int) -> int:\n    \"\"\"Add one.\"\"\"\n    return x + 1\n";
const V2: &str = "def answer(x: int) -> int:\n    \"\"\"Add two.\"\"\"\n    return x + 2\n";

async fn register(s: &TestServer, token: &str, body: Value) -> (u16, Value) {
    s.call("POST", "/api/v1/registry/tools", Some(token), Some(body))
        .await
}

async fn execute(s: &TestServer, name: &str, args: Value) -> Value {
    let (status, answer) = s
        .call(
            "POST",
            &format!("/api/v1/registry/tools/{name}/execute"),
            Some(&s.deployer),
            Some(json!({"args": args})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"]["error"].is_null(), "{answer}");
    answer["data"]["output"].clone()
}

/// The seed's "Test in Sandbox" of a registered tool (`tool_id`): its own code in a
/// fresh sandbox, as the registry runs it; the decoded output.
async fn sandbox_test(s: &TestServer, name: &str, input: Value) -> Value {
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/tools/sandbox/execute",
            Some(&s.deployer),
            Some(json!({"tool_id": name, "input_json": input})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"]["error"].is_null(), "{answer}");
    assert_ne!(answer["data"]["host_uid"], 0, "{answer}");
    answer["data"]["output_value"].clone()
}

#[tokio::test]
async fn uploaded_code_runs_from_the_servers_cache_with_no_shared_path() {
    let s = TestServer::start().await;
    let bytes = archive(&[("adder.py", V1)]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "adder", "description": "", "endpoint": "python:adder.py:answer", "code": code(&bytes)}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let d = &answer["data"];
    // The schema and description were inferred from the uploaded file, on the server.
    assert_eq!(d["description"], "Add one.");
    assert_eq!(d["schema_definition"]["required"], json!(["x"]));
    assert_eq!(d["endpoint"], "python:adder.py:answer");
    assert_eq!(d["code"]["sha256"], sha(&bytes));
    assert_eq!(d["code"]["size_bytes"], bytes.len());
    assert_eq!(d["code"]["files"], 1);
    // Nothing on the pusher's side exists on the server: the code came in the body.
    assert_eq!(execute(&s, "adder", json!({"x": 41})).await, json!(42));
    let (status, shown) = s
        .call("GET", "/api/v1/registry/tools/adder", Some(&s.viewer), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(shown["data"]["code"], d["code"]);
    s.stop().await;
}

#[tokio::test]
async fn each_revision_keeps_its_own_code_and_downloads_it_byte_for_byte() {
    let s = TestServer::start().await;
    let one = archive(&[("adder.py", V1)]);
    let two = archive(&[("adder.py", V2)]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "adder", "description": "adds", "endpoint": "python:adder.py:answer", "code": code(&one)}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(execute(&s, "adder", json!({"x": 1})).await, json!(2));
    let (status, answer) = s
        .call(
            "PUT",
            "/api/v1/registry/tools/adder",
            Some(&s.deployer),
            Some(json!({"name": "adder", "description": "adds", "endpoint": "python:adder.py:answer", "code": code(&two)})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["revision"], 2);
    assert_eq!(execute(&s, "adder", json!({"x": 1})).await, json!(3));

    for (revision, bytes) in [(Some(1), &one), (Some(2), &two), (None, &two)] {
        let path = match revision {
            Some(r) => format!("/api/v1/registry/tools/adder/code?revision={r}"),
            None => "/api/v1/registry/tools/adder/code".to_owned(),
        };
        let (status, got) = s.call("GET", &path, Some(&s.viewer), None).await;
        assert_eq!(status, 200, "{got}");
        let data = &got["data"];
        let back = base64::engine::general_purpose::STANDARD
            .decode(data["archive_base64"].as_str().unwrap())
            .unwrap();
        assert_eq!(&back, bytes, "revision {revision:?}");
        assert_eq!(data["sha256"], sha(bytes));
        assert_eq!(data["paths"], json!(["adder.py"]));
    }
    let (status, versions) = s
        .call(
            "GET",
            "/api/v1/registry/tools/adder/versions",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let shas: Vec<&Value> = versions["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["code"]["sha256"])
        .collect();
    assert_eq!(shas, [&json!(sha(&one)), &json!(sha(&two))]);
    let (status, none) = s
        .call(
            "GET",
            "/api/v1/registry/tools/adder/code?revision=9",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 404, "{none}");
    let (status, builtin) = s
        .call(
            "GET",
            "/api/v1/registry/tools/get_current_time/code",
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 404, "{builtin}");
    s.stop().await;
}

#[tokio::test]
async fn a_package_with_a_manifest_runs_with_its_own_modules() {
    let s = TestServer::start().await;
    let bytes = archive(&[
        ("tool.yaml", "name: greeter\n"),
        (
            "greeter/main.py",
            "from helpers.words import hello\n\ndef greet(name: str) -> str:\n    \"\"\"Greet.\"\"\"\n    return hello(name)\n",
        ),
        ("greeter/helpers/__init__.py", ""),
        (
            "greeter/helpers/words.py",
            "def hello(name):\n    return f\"hello, {name}\"\n",
        ),
    ]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "greeter", "description": "greets", "code": code(&bytes),
               "implementation": {"language": "python", "entrypoint": "greeter/main.py:greet"},
               "endpoint": "python:greeter/main.py:greet"}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["data"]["code"]["files"], 4);
    assert_eq!(
        execute(&s, "greeter", json!({"name": "ada"})).await,
        json!("hello, ada")
    );
    // Tested in the sandbox by id, its package's own modules import as well.
    assert_eq!(
        sandbox_test(&s, "greeter", json!({"name": "bo"})).await,
        json!("hello, bo")
    );
    // An endpoint naming a file the package does not hold is refused before anything runs.
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "missing-entry", "description": "x", "endpoint": "python:nope.py", "code": code(&bytes)}),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    let m = answer["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("endpoint") && m.contains("nope.py") && m.contains("greeter/main.py"),
        "{m}"
    );
    s.stop().await;
}

/// Register `bytes` as code; the 422's message.
async fn refused(s: &TestServer, body_code: Value) -> String {
    let (status, answer) = register(
        s,
        &s.deployer,
        json!({"name": "evil", "description": "x", "endpoint": "python:evil.py", "code": body_code}),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "INVALID_BODY");
    let (status, _) = s
        .call("GET", "/api/v1/registry/tools/evil", Some(&s.viewer), None)
        .await;
    assert_eq!(status, 404, "nothing was registered");
    answer["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_archive_with_path_traversal_is_refused_naming_the_entry() {
    let s = TestServer::start().await;
    let payload = b"def evil():\n    return 1\n";
    for name in [&b"../evil.py"[..], b"a/../../evil.py", b"/etc/evil.py"] {
        let bytes = raw_archive(&[(name, tar::EntryType::Regular, payload, None)]);
        let m = refused(&s, code(&bytes)).await;
        let shown = String::from_utf8_lossy(name);
        assert!(
            m.contains("code.archive_base64") && m.contains(&*shown),
            "{m}"
        );
        assert!(m.contains("relative") || m.contains(".."), "{m}");
    }
    // Nothing was written outside the code cache.
    assert!(!s.dir.path().join("cache/evil.py").exists());
    assert!(!s.dir.path().join("evil.py").exists());
    s.stop().await;
}

#[tokio::test]
async fn an_archive_with_a_symlink_hard_link_or_device_is_refused() {
    let s = TestServer::start().await;
    let cases: [(&[u8], tar::EntryType, Option<&str>, &str); 4] = [
        (
            b"evil.py",
            tar::EntryType::Symlink,
            Some("/etc/shadow"),
            "symlink",
        ),
        (
            b"evil.py",
            tar::EntryType::Link,
            Some("../../etc/passwd"),
            "hard link",
        ),
        (b"evil.py", tar::EntryType::Char, None, "character device"),
        (b"evil.py", tar::EntryType::Fifo, None, "FIFO"),
    ];
    for (name, kind, link, word) in cases {
        let bytes = raw_archive(&[
            (b"ok.py", tar::EntryType::Regular, b"x = 1\n", None),
            (name, kind, b"", link),
        ]);
        let m = refused(&s, code(&bytes)).await;
        assert!(m.contains("`evil.py`") && m.contains(word), "{word}: {m}");
    }
    s.stop().await;
}

#[tokio::test]
async fn oversized_archives_files_and_file_counts_are_refused() {
    let s = TestServer::start_with(|c| {
        c.code.limits.max_archive_bytes = 64 * 1024;
        c.code.limits.max_file_bytes = 8 * 1024;
        c.code.limits.max_files = 5;
    })
    .await;
    // The archive over the total cap (refused before it is decoded).
    let big = "#".repeat(7 * 1024);
    let many: Vec<(String, String)> = (0..12).map(|i| (format!("f{i}.py"), big.clone())).collect();
    let many_refs: Vec<(&str, &str)> = many.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let m = refused(&s, code(&archive(&many_refs))).await;
    assert!(m.contains("over this server's limit of 65536"), "{m}");
    // One file over the per-file cap.
    let huge = "#".repeat(9 * 1024);
    let m = refused(&s, code(&archive(&[("evil.py", &huge)]))).await;
    assert!(
        m.contains("`evil.py`") && m.contains("8192 per file"),
        "{m}"
    );
    // Too many files.
    let six: Vec<(String, &str)> = (0..6).map(|i| (format!("f{i}.py"), "x = 1\n")).collect();
    let six_refs: Vec<(&str, &str)> = six.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    let m = refused(&s, code(&archive(&six_refs))).await;
    assert!(m.contains("more than 5 files"), "{m}");
    s.stop().await;
}

#[tokio::test]
async fn duplicate_paths_a_wrong_hash_and_bad_base64_are_refused_naming_the_field() {
    let s = TestServer::start().await;
    let bytes = raw_archive(&[
        (b"evil.py", tar::EntryType::Regular, b"x = 1\n", None),
        (b"./evil.py", tar::EntryType::Regular, b"x = 2\n", None),
    ]);
    let m = refused(&s, code(&bytes)).await;
    assert!(m.contains("appears twice"), "{m}");

    let good = archive(&[("evil.py", V1)]);
    let m = refused(
        &s,
        json!({"archive_base64": b64(&good), "sha256": "0".repeat(64)}),
    )
    .await;
    assert!(m.contains("code.sha256") && m.contains(&sha(&good)), "{m}");

    let m = refused(&s, json!({"archive_base64": "not base64!!"})).await;
    assert!(
        m.contains("code.archive_base64") && m.contains("base64"),
        "{m}"
    );

    let m = refused(&s, json!({"archive": "x"})).await;
    assert!(m.contains("code"), "{m}");

    // Not a tar at all.
    let m = refused(&s, code(b"just some bytes that are not a tar archive")).await;
    assert!(m.contains("code.archive_base64"), "{m}");
    s.stop().await;
}

#[tokio::test]
async fn a_non_admin_host_path_endpoint_is_refused() {
    let s = TestServer::start_with(|c| {
        c.code.tool_roots = vec![std::env::temp_dir()];
    })
    .await;
    let py = s.write("host.py", V1);
    for token in [&s.deployer, &s.viewer] {
        let (status, answer) = register(
            &s,
            token,
            json!({"name": "host", "description": "x", "endpoint": format!("python:{py}:answer")}),
        )
        .await;
        assert_eq!(status, 403, "{answer}");
    }
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "host", "description": "x", "endpoint": format!("python:{py}:answer")}),
    )
    .await;
    assert_eq!(status, 403);
    let m = answer["error"]["message"].as_str().unwrap();
    assert!(m.contains("admin") && m.contains("upload the code"), "{m}");
    s.stop().await;
}

#[tokio::test]
async fn an_admin_host_path_outside_the_tool_roots_is_refused_like_a_missing_one() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root_path = root.path().to_path_buf();
    let s = TestServer::start_with(move |c| c.code.tool_roots = vec![root_path]).await;
    let inside = root.path().join("inside.py");
    std::fs::write(&inside, V1).unwrap();
    let out = outside.path().join("outside.py");
    std::fs::write(&out, V1).unwrap();
    let missing = root.path().join("missing.py");

    let message = |answer: &Value, path: &std::path::Path| {
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&path.display().to_string(), "PATH")
    };
    let (status, a_out) = register(
        &s,
        &s.admin,
        json!({"name": "out", "description": "x", "endpoint": format!("python:{}:answer", out.display())}),
    )
    .await;
    assert_eq!(status, 422, "{a_out}");
    let (status, a_missing) = register(
        &s,
        &s.admin,
        json!({"name": "missing", "description": "x", "endpoint": format!("python:{}:answer", missing.display())}),
    )
    .await;
    assert_eq!(status, 422, "{a_missing}");
    assert_eq!(message(&a_out, &out), message(&a_missing, &missing));
    assert_eq!(a_out["error"]["code"], a_missing["error"]["code"]);
    let m = message(&a_out, &out);
    assert!(m.contains("tool roots") && !m.contains("exist"), "{m}");

    // Inside a root, an admin's host path registers and runs.
    let (status, ok) = register(
        &s,
        &s.admin,
        json!({"name": "inside", "description": "x", "endpoint": format!("python:{}:answer", inside.display())}),
    )
    .await;
    assert_eq!(status, 201, "{ok}");
    assert_eq!(execute(&s, "inside", json!({"x": 1})).await, json!(2));
    s.stop().await;
}

#[tokio::test]
async fn a_symlink_leading_out_of_a_tool_root_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root_path = root.path().to_path_buf();
    let s = TestServer::start_with(move |c| c.code.tool_roots = vec![root_path]).await;
    let target = outside.path().join("secret.py");
    std::fs::write(&target, V1).unwrap();
    let link = root.path().join("link.py");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let linked_dir = root.path().join("linked");
    std::os::unix::fs::symlink(outside.path(), &linked_dir).unwrap();
    let missing = root.path().join("missing.py");
    let (_, a_missing) = register(
        &s,
        &s.admin,
        json!({"name": "m", "description": "x", "endpoint": format!("python:{}:answer", missing.display())}),
    )
    .await;
    let expect = a_missing["error"]["message"]
        .as_str()
        .unwrap()
        .replace(&missing.display().to_string(), "PATH");
    for path in [link.clone(), linked_dir.join("secret.py")] {
        let (status, answer) = register(
            &s,
            &s.admin,
            json!({"name": "linked", "description": "x", "endpoint": format!("python:{}:answer", path.display())}),
        )
        .await;
        assert_eq!(status, 422, "{answer}");
        let m = answer["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&path.display().to_string(), "PATH");
        assert_eq!(m, expect);
    }
    s.stop().await;
}

#[tokio::test]
async fn dependencies_from_pypi_are_installed_once_per_hash_and_imported() {
    // Folders no tool uses are swept at once (after the grace, zero here).
    let s = TestServer::start_with(|c| c.code.sweep_grace = Some(Duration::ZERO)).await;
    let tool = "import six\n\ndef kind(x: str) -> str:\n    \"\"\"Say what six thinks.\"\"\"\n    return six.__version__ + ':' + str(isinstance(x, six.string_types))\n";
    // requirements.txt beside the code.
    let bytes = archive(&[
        ("kind.py", tool),
        ("requirements.txt", "# pinned\nsix==1.16.0\n"),
    ]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "kind", "description": "x", "endpoint": "python:kind.py:kind", "code": code(&bytes)}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        execute(&s, "kind", json!({"x": "a"})).await,
        json!("1.16.0:True")
    );
    let deps = s.dir.path().join("cache/code/deps");
    let installed = || {
        std::fs::read_dir(&deps)
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    };
    assert_eq!(installed(), 1);
    // The same set from implementation.dependencies: the same install, not a second.
    let plain = archive(&[("kind.py", tool)]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "kind2", "description": "x", "endpoint": "python:kind.py:kind", "code": code(&plain),
               "implementation": {"language": "python", "entrypoint": "kind.py:kind", "dependencies": ["six==1.16.0"]}}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        execute(&s, "kind2", json!({"x": "b"})).await,
        json!("1.16.0:True")
    );
    assert_eq!(installed(), 1);
    // Tested in the sandbox by id, it imports its installed dependency too.
    assert_eq!(
        sandbox_test(&s, "kind", json!({"x": "c"})).await,
        json!("1.16.0:True")
    );
    // Requirements that mean the same (PEP 503 names, `===`, a padded version) are the
    // same install.
    for (name, dep) in [("kind3", "Six===1.16.0"), ("kind4", "SIX == 1.16")] {
        let (status, answer) = register(
            &s,
            &s.deployer,
            json!({"name": name, "description": "x", "endpoint": "python:kind.py:kind", "code": code(&plain),
                   "implementation": {"language": "python", "entrypoint": "kind.py:kind", "dependencies": [dep]}}),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
        assert_eq!(
            execute(&s, name, json!({"x": "d"})).await,
            json!("1.16.0:True")
        );
        assert_eq!(installed(), 1, "{dep} was installed again");
    }
    // Deleted, a tool's code folder goes; the dependency set goes with its last user.
    let code_dir = s.dir.path().join("cache/code");
    let code_folders = || {
        std::fs::read_dir(&code_dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().len() == 64)
            .count()
    };
    assert_eq!(code_folders(), 2);
    let delete = |name: &'static str| {
        let s = &s;
        async move {
            let (status, answer) = s
                .call(
                    "DELETE",
                    &format!("/api/v1/registry/tools/{name}"),
                    Some(&s.deployer),
                    None,
                )
                .await;
            assert_eq!(status, 200, "{answer}");
        }
    };
    delete("kind").await;
    assert_eq!(code_folders(), 1, "the deleted tool's code folder stayed");
    assert_eq!(installed(), 1, "a set other tools use was removed");
    for name in ["kind2", "kind3", "kind4"] {
        delete(name).await;
    }
    assert_eq!(code_folders(), 0);
    assert_eq!(installed(), 0, "the last user's set stayed");
    s.stop().await;
}

#[tokio::test]
async fn a_dependency_that_cannot_be_installed_is_named() {
    let s = TestServer::start().await;
    let bytes = archive(&[
        ("t.py", V1),
        (
            "requirements.txt",
            "six==1.16.0\nno-such-package-toolshed-test-0x7f==9.9.9\n",
        ),
    ]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "t", "description": "x", "endpoint": "python:t.py:answer", "code": code(&bytes)}),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "DEPENDENCY_INSTALL_FAILED");
    let m = answer["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("no-such-package-toolshed-test-0x7f==9.9.9"),
        "{m}"
    );
    // A requirement that would fetch from elsewhere is refused before any install.
    let bytes = archive(&[
        ("t.py", V1),
        (
            "requirements.txt",
            "--index-url http://evil.invalid/simple\nsix\n",
        ),
    ]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "t", "description": "x", "endpoint": "python:t.py:answer", "code": code(&bytes)}),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    let m = answer["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("requirements.txt:1") && m.contains("--index-url"),
        "{m}"
    );
    s.stop().await;
}

#[tokio::test]
async fn node_dependencies_from_package_json_are_installed_from_npm_and_required() {
    let s = TestServer::start().await;
    let tool = "const leftPad = require('left-pad');\nmodule.exports = function pad({ text }) { return leftPad(text, 5, '*'); };\n";
    let bytes = archive(&[
        ("pad.cjs", tool),
        (
            "package.json",
            r#"{"name": "pad", "dependencies": {"left-pad": "1.3.0"}}"#,
        ),
    ]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "pad", "description": "pads", "endpoint": "node:pad.cjs", "code": code(&bytes),
               "schema_definition": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        execute(&s, "pad", json!({"text": "ab"})).await,
        json!("***ab")
    );
    assert_eq!(
        sandbox_test(&s, "pad", json!({"text": "cd"})).await,
        json!("***cd")
    );
    // A dependency that would come from elsewhere than the registry is refused.
    let bytes = archive(&[
        ("pad.cjs", tool),
        (
            "package.json",
            r#"{"dependencies": {"left-pad": "git+https://evil.invalid/x.git"}}"#,
        ),
    ]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "pad2", "description": "pads", "endpoint": "node:pad.cjs", "code": code(&bytes),
               "schema_definition": {"type": "object"}}),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    let m = answer["error"]["message"].as_str().unwrap();
    assert!(m.contains("code.package.json.dependencies.left-pad"), "{m}");
    s.stop().await;
}

#[tokio::test]
async fn an_uploaded_typescript_tool_is_tested_in_the_sandbox_by_id() {
    let s = TestServer::start().await;
    let bytes = archive(&[(
        "shout.ts",
        "export function shout(input: { text: string }): string {\n  const loud: string = input.text.toUpperCase();\n  return loud + '!';\n}\n",
    )]);
    let (status, answer) = register(
        &s,
        &s.deployer,
        json!({"name": "shout", "description": "shouts", "endpoint": "node:shout.ts:shout", "code": code(&bytes),
               "schema_definition": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        execute(&s, "shout", json!({"text": "hey"})).await,
        json!("HEY!")
    );
    // The same transpiled module, in a fresh sandbox of its own.
    assert_eq!(
        sandbox_test(&s, "shout", json!({"text": "ho"})).await,
        json!("HO!")
    );
    s.stop().await;
}

#[tokio::test]
async fn a_failing_tools_stack_trace_shows_no_path_of_the_server() {
    let s = TestServer::start().await;
    let cache = s.dir.path().join("cache");
    let cache = cache.canonicalize().unwrap_or(cache);
    for (name, file, endpoint, text) in [
        (
            "boom-js",
            "boom.mjs",
            "node:boom.mjs:boom",
            "export function boom(input) {\n  throw new Error('boom in js');\n}\n",
        ),
        (
            "boom-py",
            "boom.py",
            "python:boom.py:boom",
            "def boom(x: int = 1) -> int:\n    \"\"\"Fail.\"\"\"\n    raise RuntimeError('boom in py')\n",
        ),
    ] {
        let bytes = archive(&[(file, text)]);
        let (status, answer) = register(
            &s,
            &s.deployer,
            json!({"name": name, "description": "fails", "endpoint": endpoint, "code": code(&bytes),
                   "input_schema": {"type": "object"}}),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
        let (status, answer) = s
            .call(
                "POST",
                &format!("/api/v1/registry/tools/{name}/execute"),
                Some(&s.deployer),
                Some(json!({"args": {}})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        let error = answer["data"]["error"].to_string();
        assert!(error.contains("boom in"), "{answer}");
        let text = answer.to_string();
        assert!(
            !text.contains(&*cache.to_string_lossy())
                && !text.contains(&*s.dir.path().to_string_lossy()),
            "{name}: the answer shows the server's folders: {text}"
        );
        // The trace still names the file, under its alias.
        assert!(
            text.contains("<code>/") || text.contains("<cache>/"),
            "{text}"
        );
        // The journal keeps the same.
        let run_id = answer["data"]["run_id"].as_str().unwrap();
        let (_, run) = s
            .call(
                "GET",
                &format!("/api/v1/runs/{run_id}"),
                Some(&s.deployer),
                None,
            )
            .await;
        assert!(
            !run.to_string().contains(&*s.dir.path().to_string_lossy()),
            "{run}"
        );
    }
    s.stop().await;
}
