//! The `unsafe` exception stays an exception: the workspace forbids `unsafe`, every other
//! crate inherits that, this crate repeats the workspace's lints with `unsafe_code`
//! denied (not allowed), and only `src/sys.rs` lifts it, with every block documented.
#![allow(clippy::unwrap_used)]

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
}

/// The `key = "value"` lines of a `[section]` of a TOML file.
fn section(text: &str, name: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == format!("[{name}]");
            continue;
        }
        if inside && let Some((k, v)) = t.split_once('=') {
            out.push((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()));
        }
    }
    out
}

#[test]
fn unsafe_stays_forbidden_everywhere_but_in_this_crates_sys_module() {
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let ws_rust = section(&workspace, "workspace.lints.rust");
    let ws_clippy = section(&workspace, "workspace.lints.clippy");
    assert!(
        ws_rust.contains(&("unsafe_code".into(), "forbid".into())),
        "the workspace must forbid unsafe: {ws_rust:?}"
    );

    for entry in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let manifest = entry.path().join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "toolshed-sandbox" {
            continue;
        }
        assert!(
            section(&text, "lints").contains(&("workspace".into(), "true".into())),
            "{} must inherit the workspace lints (`[lints] workspace = true`)",
            manifest.display()
        );
    }

    let own =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let rust = section(&own, "lints.rust");
    let clippy = section(&own, "lints.clippy");
    for (k, v) in &ws_rust {
        let expected = if k == "unsafe_code" {
            "deny"
        } else {
            v.as_str()
        };
        assert!(
            rust.contains(&(k.clone(), expected.to_owned())),
            "this crate's [lints.rust] must have {k} = {expected:?}: {rust:?}"
        );
    }
    for pair in &ws_clippy {
        assert!(
            clippy.contains(pair),
            "this crate's [lints.clippy] lacks {pair:?}"
        );
    }
    assert!(clippy.contains(&("undocumented_unsafe_blocks".into(), "deny".into())));

    // Only sys.rs lifts the lint, and every unsafe block there says why it is sound
    // (clippy's undocumented_unsafe_blocks checks the comments).
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let lifts =
                text.contains("expect(\n    unsafe_code") || text.contains("allow(unsafe_code");
            if p.ends_with("sys.rs") {
                assert!(lifts, "sys.rs should carry the one `expect(unsafe_code)`");
            } else {
                assert!(!lifts, "{} lifts the unsafe lint", p.display());
                assert!(
                    !text.contains("unsafe {"),
                    "{} has an unsafe block",
                    p.display()
                );
            }
        }
    }
}
