//! `markdown_writer`: writes a Markdown file under the output folder, in the folder of
//! the run's tenant.
//!
//! The folder is the run's declared `TOOLSHED_OUTPUT_DIR`, else the process's
//! `$TOOLSHED_OUTPUT_DIR`, else `./output`; files go to `<folder>/<tenant>/…` (the
//! principal's tenant, `default` without one), so one tenant never reads or replaces
//! another's. A model picks the file name, so the name is checked: no absolute paths,
//! no `..`, no hidden files, and a `.md` extension; and every folder below the output
//! folder is opened without following symlinks, so a link planted there is refused.
//! A file holds at most [`MAX_FILE_BYTES`], a tenant's folder at most
//! [`MAX_TENANT_BYTES`].

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
    let tenant = ctx
        .principal()
        .and_then(|p| p.tenant.clone())
        .unwrap_or_else(|| DEFAULT_TENANT.to_owned());
    check_tenant(&tenant)?;
    let relative = check_filename(&filename)?.to_path_buf();
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
    if text.len() > MAX_FILE_BYTES {
        return Err(format!(
            "the document is {} bytes, more than the {MAX_FILE_BYTES} a file may hold; write it in several files",
            text.len()
        ));
    }
    let shown = base.join(&tenant).join(&relative);
    let bytes = text.clone().into_bytes();
    tokio::task::spawn_blocking(move || safe::write(&base, &tenant, &relative, &bytes, overwrite))
        .await
        .map_err(|e| format!("the write was interrupted: {e}"))??;
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
        path: shown.display().to_string(),
        bytes: text.len() as u64,
        sha256: hex::encode(Sha256::digest(text.as_bytes())),
        blob_uri,
    })
}

/// The folder of runs without a tenant.
pub const DEFAULT_TENANT: &str = "default";

/// The largest file `markdown_writer` writes, in bytes (1 MiB).
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

/// The most one tenant's folder may hold, in bytes (64 MiB): a write that would pass it
/// is refused.
pub const MAX_TENANT_BYTES: u64 = 64 * 1024 * 1024;

/// The most entries counted in a tenant's folder; past it, writes are refused too.
pub const MAX_TENANT_ENTRIES: usize = 10_000;

/// A tenant names a folder: it must be one plain path segment.
fn check_tenant(tenant: &str) -> Result<(), String> {
    let ok = !tenant.is_empty()
        && tenant.len() <= 128
        && !tenant.starts_with('.')
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' || b == b'@');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the run's tenant {tenant:?} cannot name a folder; markdown_writer writes only for tenants named with letters, digits, `-`, `_`, `.` and `@`"
        ))
    }
}

/// The file system side: every folder below the output root is opened beneath its
/// parent with `O_NOFOLLOW`, so a symlink planted anywhere in the path (the tenant's
/// folder, a subfolder, the file itself) is refused, never followed.
mod safe {
    use std::os::fd::OwnedFd;
    use std::path::{Component, Path};

    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;

    use super::{MAX_TENANT_BYTES, MAX_TENANT_ENTRIES};

    const DIR: OFlags = OFlags::RDONLY
        .union(OFlags::DIRECTORY)
        .union(OFlags::NOFOLLOW)
        .union(OFlags::CLOEXEC);

    pub(super) fn write(
        base: &Path,
        tenant: &str,
        relative: &Path,
        bytes: &[u8],
        overwrite: bool,
    ) -> Result<(), String> {
        // The root is the operator's setting (it may itself be a link they made).
        std::fs::create_dir_all(base)
            .map_err(|e| format!("cannot create the output folder {}: {e}", base.display()))?;
        let root = rustix::fs::open(
            base,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open the output folder {}: {e}", base.display()))?;
        let mut shown = tenant.to_owned();
        let mut dir = child_dir(&root, tenant, &shown)?;
        let tenant_dir =
            rustix::io::dup(&dir).map_err(|e| format!("cannot use the tenant's folder: {e}"))?;
        let parts: Vec<&std::ffi::OsStr> = relative
            .components()
            .filter_map(|c| match c {
                Component::Normal(p) => Some(p),
                _ => None,
            })
            .collect();
        let Some((file, folders)) = parts.split_last() else {
            return Err("the filename names no file".into());
        };
        for folder in folders {
            shown.push('/');
            shown.push_str(&folder.to_string_lossy());
            dir = child_dir(&dir, *folder, &shown)?;
        }
        let name = file.to_string_lossy().into_owned();
        shown.push('/');
        shown.push_str(&name);
        let existing = match rustix::fs::openat(
            &dir,
            name.as_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Some(fd),
            Err(Errno::NOENT) => None,
            Err(Errno::LOOP) => {
                return Err(format!(
                    "{shown} is a symlink; markdown_writer never follows one"
                ));
            }
            Err(e) => return Err(format!("cannot open {shown}: {e}")),
        };
        let mut replaced = 0;
        if let Some(fd) = existing {
            let stat = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat {shown}: {e}"))?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Err(format!("{shown} exists and is not a regular file"));
            }
            replaced = u64::try_from(stat.st_size).unwrap_or(0);
            if !overwrite {
                // A keyed re-run after a crash writes the same bytes: not an error.
                let same =
                    replaced == bytes.len() as u64 && std::fs::File::from(fd).bytes_equal(bytes);
                if same {
                    return Ok(());
                }
                return Err(format!(
                    "{shown} exists; pass `overwrite: true` to replace it or choose another filename"
                ));
            }
        }
        let used = usage(&tenant_dir)?;
        if used
            .saturating_sub(replaced)
            .saturating_add(bytes.len() as u64)
            > MAX_TENANT_BYTES
        {
            return Err(format!(
                "the tenant's output folder holds {used} bytes; this file would take it past {MAX_TENANT_BYTES}: remove files or overwrite one"
            ));
        }
        // Write a temporary file beside it, then rename over: a reader never sees half a
        // file, and a rename replaces a name, never following what it was.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = format!(".{name}.{}-{n}.tmp", std::process::id());
        let fd = rustix::fs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| format!("cannot write {shown}: {e}"))?;
        let mut out = std::fs::File::from(fd);
        let written = std::io::Write::write_all(&mut out, bytes).and_then(|()| out.sync_all());
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(format!("cannot write {shown}: {e}"));
        }
        rustix::fs::renameat(&dir, tmp.as_str(), &dir, name.as_str())
            .map_err(|e| format!("cannot move {shown} into place: {e}"))
    }

    /// Open (creating it, 0700) the folder `name` beneath `parent`, refusing a symlink.
    fn child_dir(
        parent: &OwnedFd,
        name: impl rustix::path::Arg + Copy,
        shown: &str,
    ) -> Result<OwnedFd, String> {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(format!("cannot create the folder {shown}: {e}")),
        }
        rustix::fs::openat(parent, name, DIR, Mode::empty()).map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => {
                format!("{shown} is a symlink or not a folder; markdown_writer never follows one")
            }
            e => format!("cannot open the folder {shown}: {e}"),
        })
    }

    /// The bytes of regular files under `dir`, walked without following links.
    fn usage(dir: &OwnedFd) -> Result<u64, String> {
        let mut total = 0u64;
        let mut entries = 0usize;
        let mut stack = vec![
            rustix::io::dup(dir).map_err(|e| format!("cannot walk the tenant's folder: {e}"))?,
        ];
        while let Some(fd) = stack.pop() {
            let listing = rustix::fs::Dir::read_from(&fd)
                .map_err(|e| format!("cannot list the tenant's folder: {e}"))?;
            for entry in listing {
                let entry = entry.map_err(|e| format!("cannot list the tenant's folder: {e}"))?;
                let name = entry.file_name();
                if name.to_bytes() == b"." || name.to_bytes() == b".." {
                    continue;
                }
                entries += 1;
                if entries > MAX_TENANT_ENTRIES {
                    return Err(format!(
                        "the tenant's output folder has more than {MAX_TENANT_ENTRIES} entries; remove some"
                    ));
                }
                let Ok(stat) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                    continue;
                };
                match FileType::from_raw_mode(stat.st_mode) {
                    FileType::RegularFile => {
                        total = total.saturating_add(u64::try_from(stat.st_size).unwrap_or(0));
                    }
                    FileType::Directory => {
                        if let Ok(sub) = rustix::fs::openat(&fd, name, DIR, Mode::empty()) {
                            stack.push(sub);
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(total)
    }

    trait BytesEqual {
        fn bytes_equal(self, bytes: &[u8]) -> bool;
    }

    impl BytesEqual for std::fs::File {
        fn bytes_equal(mut self, bytes: &[u8]) -> bool {
            let mut have = Vec::with_capacity(bytes.len());
            std::io::Read::read_to_end(&mut self, &mut have).is_ok() && have == bytes
        }
    }
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
