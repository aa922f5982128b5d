//! Uploaded tool code: the archive `registry tool push` sends and `registry tool pull`
//! gets back, an uncompressed tar of regular files (and the folders holding them),
//! built deterministically, and the one check of a hostile archive that both the server
//! (on upload) and the CLI (on pull) run. No IO: bytes in, files in memory out.
//!
//! Why a tar inside the JSON body: a package is a folder, a tar keeps its paths and
//! executable bits, and one format is checked in one place. It is not compressed, so its
//! size bounds what it holds (no decompression bomb).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;

use base64::Engine;
use sha2::{Digest, Sha256};

/// How much code one upload may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeLimits {
    /// The archive's size in bytes (decoded, not base64).
    pub max_archive_bytes: u64,
    /// One file's size in bytes.
    pub max_file_bytes: u64,
    /// How many files.
    pub max_files: usize,
    /// The longest path, in bytes.
    pub max_path_bytes: usize,
}

impl Default for CodeLimits {
    /// 1 MiB of archive (it travels base64-encoded in a body of at most 2 MiB by
    /// default), 512 KiB per file, 256 files, paths of 255 bytes.
    fn default() -> Self {
        CodeLimits {
            max_archive_bytes: 1024 * 1024,
            max_file_bytes: 512 * 1024,
            max_files: 256,
            max_path_bytes: 255,
        }
    }
}

/// One file of uploaded code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeFile {
    /// Its path inside the code, relative, `/`-separated, without `.` or `..`.
    pub path: String,
    /// Its bytes.
    pub content: Vec<u8>,
    /// Whether it is executable (an `exec:` tool's program).
    pub executable: bool,
}

/// Why an archive was refused; the message names the entry and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeProblem {
    /// The request field at fault: `code.archive_base64` or `code.sha256`.
    pub field: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for CodeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for CodeProblem {}

/// The field holding the archive.
pub const ARCHIVE_FIELD: &str = "code.archive_base64";
/// The field holding the claimed hash.
pub const SHA256_FIELD: &str = "code.sha256";

fn problem(message: impl Into<String>) -> CodeProblem {
    CodeProblem {
        field: ARCHIVE_FIELD,
        message: message.into(),
    }
}

/// The SHA-256 of `bytes`, as lowercase hex: the code's content address.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Standard base64 with padding, as the body carries it.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decode the body's base64, refusing more than `max` decoded bytes before decoding.
pub fn decode_base64(text: &str, max: u64) -> Result<Vec<u8>, CodeProblem> {
    // 4 characters carry 3 bytes: refuse by length first, so an oversized upload is
    // never decoded.
    let decoded_len = (text.len() as u64 / 4) * 3;
    if decoded_len > max.saturating_add(3) {
        return Err(problem(format!(
            "the archive is about {decoded_len} bytes, over this server's limit of {max}; push less code (leave out build output, virtualenvs and node_modules: dependencies are installed by the server)"
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| problem(format!("not standard base64 ({e}); encode the tar archive with padding, e.g. `base64 -w0 code.tar`")))?;
    if bytes.len() as u64 > max {
        return Err(problem(format!(
            "the archive is {} bytes, over this server's limit of {max}; push less code",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Check that a claimed hash is the archive's.
pub fn check_sha256(claimed: &str, bytes: &[u8]) -> Result<String, CodeProblem> {
    let actual = sha256_hex(bytes);
    if !claimed.eq_ignore_ascii_case(&actual) {
        return Err(CodeProblem {
            field: SHA256_FIELD,
            message: format!(
                "`{}` is not the SHA-256 of the archive sent ({actual}); send the hex SHA-256 of the decoded archive bytes, or leave `sha256` out",
                short(claimed)
            ),
        });
    }
    Ok(actual)
}

fn short(s: &str) -> String {
    if s.chars().count() > 70 {
        format!("{}…", s.chars().take(70).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// Build the archive of `files`: sorted by path, modes 0644 or 0755, no owner, time 0,
/// so the same files always give the same bytes (and the same hash).
pub fn build_archive(files: &[CodeFile]) -> Result<Vec<u8>, String> {
    let mut sorted: Vec<&CodeFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut builder = tar::Builder::new(Vec::new());
    for f in sorted {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(f.content.len() as u64);
        header.set_mode(if f.executable { 0o755 } else { 0o644 });
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        builder
            .append_data(&mut header, &f.path, f.content.as_slice())
            .map_err(|e| format!("cannot add {} to the archive: {e}", f.path))?;
    }
    builder
        .into_inner()
        .map_err(|e| format!("cannot finish the archive: {e}"))
}

/// Check an archive and return its files, sorted by path. Refused, each naming the
/// entry: anything but regular files and folders (symlinks, hard links, devices,
/// FIFOs), absolute paths, `..`, empty or non-UTF-8 paths, a path given twice (or a
/// file where a folder is needed), and anything over `limits`.
pub fn check_archive(bytes: &[u8], limits: &CodeLimits) -> Result<Vec<CodeFile>, CodeProblem> {
    if bytes.len() as u64 > limits.max_archive_bytes {
        return Err(problem(format!(
            "the archive is {} bytes, over this server's limit of {}; push less code",
            bytes.len(),
            limits.max_archive_bytes
        )));
    }
    let mut archive = tar::Archive::new(bytes);
    let entries = archive
        .entries()
        .map_err(|e| problem(format!("not a tar archive ({e}); send an uncompressed tar")))?;
    let mut files: BTreeMap<String, CodeFile> = BTreeMap::new();
    let mut folders: BTreeSet<String> = BTreeSet::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| {
            problem(format!(
                "not a valid tar archive ({e}); send an uncompressed tar"
            ))
        })?;
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        // `./`, the folder itself, as `tar -C DIR .` writes it first.
        if kind == tar::EntryType::Directory
            && raw.split(|b| *b == b'/').all(|p| p.is_empty() || p == b".")
        {
            continue;
        }
        let path = clean_path(&raw, limits)?;
        match kind {
            tar::EntryType::Directory => {
                if files.contains_key(&path) {
                    return Err(duplicate(&shown));
                }
                folders.insert(path);
                continue;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            tar::EntryType::Symlink | tar::EntryType::Link => {
                return Err(problem(format!(
                    "`{shown}` is a {}link; links are refused (one could point outside the code): put the file itself in the archive",
                    if kind == tar::EntryType::Link {
                        "hard "
                    } else {
                        "sym"
                    }
                )));
            }
            other => {
                return Err(problem(format!(
                    "`{shown}` is a {}, not a regular file; only regular files and folders may be uploaded",
                    kind_name(other)
                )));
            }
        }
        let size = entry.size();
        if size > limits.max_file_bytes {
            return Err(problem(format!(
                "`{shown}` is {size} bytes, over this server's limit of {} per file; leave it out or make it smaller",
                limits.max_file_bytes
            )));
        }
        if files.len() >= limits.max_files {
            return Err(problem(format!(
                "more than {} files; push fewer (leave out tests, build output and dependencies)",
                limits.max_files
            )));
        }
        if files.contains_key(&path) || folders.contains(&path) {
            return Err(duplicate(&shown));
        }
        let executable = entry.header().mode().is_ok_and(|m| m & 0o111 != 0);
        let mut content = Vec::with_capacity(size as usize);
        entry
            .by_ref()
            .take(limits.max_file_bytes.saturating_add(1))
            .read_to_end(&mut content)
            .map_err(|e| problem(format!("cannot read `{shown}` from the archive ({e})")))?;
        files.insert(
            path.clone(),
            CodeFile {
                path,
                content,
                executable,
            },
        );
    }
    if files.is_empty() {
        return Err(problem(
            "the archive holds no file; put the tool's code in it",
        ));
    }
    // A file may not be where another entry needs a folder (`a` a file and `a/b` too).
    for path in files.keys() {
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() && files.contains_key(&prefix) {
                return Err(duplicate(&prefix));
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
        }
    }
    Ok(files.into_values().collect())
}

fn duplicate(shown: &str) -> CodeProblem {
    problem(format!(
        "`{shown}` appears twice in the archive (or as both a file and a folder); give each path once"
    ))
}

fn kind_name(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Char => "character device",
        tar::EntryType::Block => "block device",
        tar::EntryType::Fifo => "FIFO",
        _ => "special entry",
    }
}

/// A path as stored: relative, `/`-separated, without `.` parts; refused when absolute,
/// with `..`, a NUL, a backslash, empty, not UTF-8 or too long.
fn clean_path(raw: &[u8], limits: &CodeLimits) -> Result<String, CodeProblem> {
    let shown = String::from_utf8_lossy(raw);
    let text = std::str::from_utf8(raw)
        .map_err(|_| problem(format!("`{shown}` is not a UTF-8 path; rename it")))?;
    if text.starts_with('/') {
        return Err(problem(format!(
            "`{shown}` is an absolute path; paths in the archive must be relative to the code's folder"
        )));
    }
    if text.contains('\0') || text.contains('\\') {
        return Err(problem(format!(
            "`{shown}` holds a NUL or a backslash; use plain `/`-separated relative paths"
        )));
    }
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(problem(format!(
                    "`{shown}` leaves the code's folder (`..`); paths must stay inside it"
                )));
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(problem(format!("`{shown}` names no file")));
    }
    let path = parts.join("/");
    if path.len() > limits.max_path_bytes {
        return Err(problem(format!(
            "`{}…` is longer than {} bytes; use a shorter path",
            path.chars().take(40).collect::<String>(),
            limits.max_path_bytes
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> CodeFile {
        CodeFile {
            path: path.into(),
            content: text.as_bytes().to_vec(),
            executable: false,
        }
    }

    #[test]
    fn an_archive_round_trips_and_is_deterministic() {
        let files = vec![file("b/x.py", "x = 1\n"), file("a.py", "def a(): pass\n")];
        let one = build_archive(&files).unwrap();
        let two = build_archive(&[files[1].clone(), files[0].clone()]).unwrap();
        assert_eq!(sha256_hex(&one), sha256_hex(&two));
        let back = check_archive(&one, &CodeLimits::default()).unwrap();
        assert_eq!(back, vec![files[1].clone(), files[0].clone()]);
    }

    #[test]
    fn a_leading_dot_folder_is_the_code_itself() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_size(0);
        builder.append_data(&mut dir, "./", &[][..]).unwrap();
        let mut f = tar::Header::new_gnu();
        f.set_size(2);
        builder.append_data(&mut f, "./a.py", &b"x\n"[..]).unwrap();
        let files = check_archive(&builder.into_inner().unwrap(), &CodeLimits::default()).unwrap();
        assert_eq!(files[0].path, "a.py");
    }

    #[test]
    fn a_wrong_claimed_hash_names_the_field() {
        let e = check_sha256("00", b"abc").unwrap_err();
        assert_eq!(e.field, SHA256_FIELD);
    }
}
