//! `markdown_writer`: writes a Markdown file under the output folder.
//!
//! The folder is the run's declared `TOOLSHED_OUTPUT_DIR`, else the process's
//! `$TOOLSHED_OUTPUT_DIR`, else `./output`. A model picks the
//! file name, so the name is checked: no absolute paths, no `..`, no hidden files, and
//! a `.md` extension.

use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};
use toolshed_core::ToolContext;
use toolshed_macros::tool;

/// The env var naming the folder `markdown_writer` writes into.
pub const OUTPUT_DIR_ENV: &str = "TOOLSHED_OUTPUT_DIR";

/// What `markdown_writer` wrote.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WrittenFile {
    /// The file's path.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
    /// Hex SHA-256 of the content.
    pub sha256: String,
    /// The blob URI, when a blob store is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob_uri: Option<String>,
}

/// Write a Markdown document to a file in the output folder and return its path.
#[tool(effects = "sandbox", idempotency = "keyed", timeout_ms = 30000)]
pub async fn markdown_writer(
    /// File name relative to the output folder, e.g. `reports/summary.md`; must end in `.md`.
    filename: String,
    /// The Markdown body.
    content: String,
    /// An optional title, written as a level-1 heading above the content.
    #[serde(default)]
    title: Option<String>,
    /// Replace the file if it exists (otherwise an existing file is an error).
    #[serde(default)]
    overwrite: bool,
    ctx: &ToolContext,
) -> Result<WrittenFile, String> {
    // The run's declared env wins over the process environment, so one process can
    // serve runs with different output folders.
    let base = ctx
        .env(OUTPUT_DIR_ENV)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(OUTPUT_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("output"));
    let relative = check_filename(&filename)?;
    let path = base.join(relative);
    let mut text = String::new();
    if let Some(t) = title.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        text.push_str("# ");
        text.push_str(t);
        text.push_str("\n\n");
    }
    text.push_str(&content);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| format!("cannot create folder {}: {e}", parent.display()))?;
    }
    if !overwrite && tokio::fs::try_exists(&path).await.unwrap_or(false) {
        // A keyed re-run after a crash writes the same bytes: not an error.
        let same = tokio::fs::read(&path)
            .await
            .map(|b| b == text.as_bytes())
            .unwrap_or(false);
        if !same {
            return Err(format!(
                "{} exists; pass `overwrite: true` to replace it or choose another filename",
                path.display()
            ));
        }
    }
    // Write to a temporary file and rename, so a reader never sees half a file.
    let tmp = path.with_extension("md.tmp");
    tokio::fs::write(&tmp, text.as_bytes())
        .await
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    tokio::fs::rename(&tmp, &path)
        .await
        .map_err(|e| format!("cannot move {} into place: {e}", path.display()))?;
    let blob_uri = match ctx.blob_store() {
        Some(store) => Some(
            store
                .put(text.as_bytes(), Some("text/markdown"))
                .await
                .map_err(|e| format!("cannot store the file as a blob: {e}"))?
                .uri,
        ),
        None => None,
    };
    Ok(WrittenFile {
        path: path.display().to_string(),
        bytes: text.len() as u64,
        sha256: hex::encode(Sha256::digest(text.as_bytes())),
        blob_uri,
    })
}

fn check_filename(name: &str) -> Result<&Path, String> {
    let path = Path::new(name);
    if name.trim().is_empty() {
        return Err("filename must not be empty, e.g. `summary.md`".into());
    }
    if !name.ends_with(".md") {
        return Err(format!("filename {name:?} must end in `.md`"));
    }
    for c in path.components() {
        match c {
            Component::Normal(part) if !part.to_string_lossy().starts_with('.') => {}
            _ => {
                return Err(format!(
                    "filename {name:?} must be a relative path inside the output folder \
                     (no `/` at the start, no `..`, no hidden names)"
                ));
            }
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_are_confined() {
        assert!(check_filename("a.md").is_ok());
        assert!(check_filename("reports/2026/a.md").is_ok());
        for bad in [
            "",
            "a.txt",
            "/etc/x.md",
            "../x.md",
            "a/../../x.md",
            ".hidden.md",
            "a/.git/b.md",
        ] {
            assert!(check_filename(bad).is_err(), "{bad}");
        }
    }
}
