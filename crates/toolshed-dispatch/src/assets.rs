//! The runner files shipped inside the crate, written to the cache folder on first use
//! under a folder named by their content hash (so an upgrade never runs stale runners).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::DispatchError;

/// The Python runner.
pub(crate) const RUNNER_PY: &str = include_str!("../runners/runner.py");
/// The Python runner's argument conversion, loaded by it only when a tool needs it.
pub(crate) const CONVERT_PY: &str = include_str!("../runners/convert.py");
/// The Node runner (also reads a module's declared schema).
pub(crate) const RUNNER_MJS: &str = include_str!("../runners/runner.mjs");
/// Python schema inference.
pub(crate) const INFER_PY: &str = include_str!("../runners/infer.py");
/// What the bread and Toren compatibility modules share (imported by the Node runner).
pub(crate) const COMPAT_MJS: &str = include_str!("../runners/compat.mjs");
/// `@breadai/core` as the Node runner resolves it.
pub(crate) const BREAD_MJS: &str = include_str!("../runners/bread.mjs");
/// `@toren-run/core` as the Node runner resolves it.
pub(crate) const TOREN_MJS: &str = include_str!("../runners/toren.mjs");
/// The Node runner's module resolve hooks (the two above, and toolshed's zod 4).
pub(crate) const RESOLVE_HOOKS_MJS: &str = include_str!("../runners/resolve-hooks.mjs");

const FILES: &[(&str, &str)] = &[
    ("runner.py", RUNNER_PY),
    ("convert.py", CONVERT_PY),
    ("runner.mjs", RUNNER_MJS),
    ("infer.py", INFER_PY),
    ("compat.mjs", COMPAT_MJS),
    ("bread.mjs", BREAD_MJS),
    ("toren.mjs", TOREN_MJS),
    ("resolve-hooks.mjs", RESOLVE_HOOKS_MJS),
];

/// Where the runners were written.
#[derive(Debug, Clone)]
pub(crate) struct Assets {
    pub dir: PathBuf,
    /// A short hash of every runner, part of the TypeScript cache key.
    pub version: String,
}

impl Assets {
    pub fn runner_py(&self) -> PathBuf {
        self.dir.join("runner.py")
    }
    pub fn runner_mjs(&self) -> PathBuf {
        self.dir.join("runner.mjs")
    }
    pub fn infer_py(&self) -> PathBuf {
        self.dir.join("infer.py")
    }

    /// Write the runners below `cache_dir` unless they are there already.
    pub fn materialize(cache_dir: &Path) -> Result<Assets, DispatchError> {
        let mut hasher = Sha256::new();
        for (name, text) in FILES {
            hasher.update(name.as_bytes());
            hasher.update([0]);
            hasher.update(text.as_bytes());
        }
        let version = hex::encode(hasher.finalize())[..16].to_owned();
        let dir = cache_dir.join(format!("runners-{version}"));
        for (name, text) in FILES {
            let path = dir.join(name);
            if std::fs::metadata(&path).is_ok_and(|m| m.len() == text.len() as u64) {
                continue;
            }
            write_atomically(&path, text.as_bytes()).map_err(|source| DispatchError::Io {
                what: format!("cannot write the runner {}", path.display()),
                source,
            })?;
        }
        Ok(Assets { dir, version })
    }
}

/// Write a file so readers never see it half-written: a unique temp file, then rename.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("a file path without a folder"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Lower-case hex SHA-256 of some bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_are_written_once_under_their_hash() {
        let dir = tempfile::tempdir().unwrap();
        let a = Assets::materialize(dir.path()).unwrap();
        assert!(a.dir.starts_with(dir.path()));
        assert_eq!(std::fs::read_to_string(a.runner_py()).unwrap(), RUNNER_PY);
        assert_eq!(std::fs::read_to_string(a.runner_mjs()).unwrap(), RUNNER_MJS);
        let b = Assets::materialize(dir.path()).unwrap();
        assert_eq!(a.dir, b.dir);
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
