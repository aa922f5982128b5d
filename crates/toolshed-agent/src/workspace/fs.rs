//! Beneath-only file operations on one workspace folder, for paths a model chose.
//!
//! Every path is checked first (relative, no `..`, no NUL; see [`check_path`]), then
//! opened from the workspace folder's fd with `openat2` and `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`: a symlink anywhere on
//! the path (one that bash planted pointing at `/etc/shadow`, say) fails the open
//! instead of being followed, and nothing resolves outside the folder. Walks (listing,
//! search) open each folder beneath its parent the same way and never descend into a
//! symlink. Files are opened `O_NONBLOCK` and checked to be regular before they are read
//! or written, so a FIFO or device node planted in the workspace cannot block a call.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::process::{Gid, Uid};

/// Why a workspace operation failed: the model's input (a field and what is wrong with
/// it), or the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FsError {
    /// The argument `field` is wrong; the message says how and what to do.
    Field {
        /// The argument's name, e.g. `path`.
        field: &'static str,
        /// What is wrong, and what would be right.
        message: String,
    },
    /// The host failed an operation the input was fine for.
    Io(String),
}

impl FsError {
    pub(crate) fn field(field: &'static str, message: impl Into<String>) -> FsError {
        FsError::Field {
            field,
            message: message.into(),
        }
    }
}

/// Longest path accepted, in bytes.
const MAX_PATH_BYTES: usize = 4096;
/// Deepest folder a walk enters (each level holds an fd).
pub(crate) const MAX_DEPTH: usize = 32;
/// The most components a path has: as deep as a `bash` call's changes are merged.
const MAX_PATH_DEPTH: usize = toolshed_sandbox::MAX_MERGE_DEPTH;
/// Where bash sees the workspace; the file tools accept paths under it too.
pub(crate) const INSIDE: &str = "/workspace";

/// Checks a path a model gave for argument `field`: relative to the workspace (or
/// absolute under `/workspace`, where bash sees it), without `..`, without NUL. `.` and
/// empty mean the workspace itself, allowed only when `folder_ok`. The result has only
/// normal components.
pub(crate) fn check_path(
    field: &'static str,
    raw: &str,
    folder_ok: bool,
) -> Result<PathBuf, FsError> {
    if raw.len() > MAX_PATH_BYTES {
        return Err(FsError::field(
            field,
            format!("is {} bytes long; at most {MAX_PATH_BYTES}", raw.len()),
        ));
    }
    if raw.contains('\0') {
        return Err(FsError::field(field, "contains a NUL byte"));
    }
    let mut path = Path::new(raw);
    if path.is_absolute() {
        match path.strip_prefix(INSIDE) {
            Ok(rest) => path = rest,
            Err(_) => {
                return Err(FsError::field(
                    field,
                    format!(
                        "`{raw}` is absolute; give a path relative to the workspace (e.g. `notes/todo.md`), or under {INSIDE}, where bash sees the workspace"
                    ),
                ));
            }
        }
    }
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(FsError::field(
                    field,
                    format!("`{raw}` has a `..` component; paths stay inside the workspace"),
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(FsError::field(
                    field,
                    format!("`{raw}` is not a relative path"),
                ));
            }
        }
    }
    let depth = clean.components().count();
    if depth > MAX_PATH_DEPTH {
        return Err(FsError::field(
            field,
            format!("has {depth} levels of folders; at most {MAX_PATH_DEPTH}"),
        ));
    }
    if clean.as_os_str().is_empty() && !folder_ok {
        return Err(FsError::field(
            field,
            "names the workspace folder itself; give a file's path, e.g. `notes/todo.md`",
        ));
    }
    Ok(clean)
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

/// `ENOTDIR` from opening a folder with `O_NOFOLLOW` means a symlink when the last
/// part of `rel` is one (checked without following it): reported as `ELOOP`, a symlink
/// on the path.
fn symlink_last(dir: BorrowedFd<'_>, rel: &Path, e: Errno) -> Errno {
    if e != Errno::NOTDIR {
        return e;
    }
    let link = rustix::fs::openat2(
        dir,
        rel,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )
    .and_then(|fd| rustix::fs::fstat(&fd));
    match link {
        Ok(st) if kind_of(st.st_mode) == Kind::Symlink => Errno::LOOP,
        _ => e,
    }
}

/// Turns an open's failure into the model's error (naming the field) or a host error.
fn open_error(field: &'static str, shown: &Path, e: Errno) -> FsError {
    let shown = shown.display();
    match e {
        Errno::LOOP => FsError::field(
            field,
            format!(
                "a symlink is on the path `{shown}`; the workspace tools never follow symlinks (look at it with `ls -l` in bash, or use the file it points to by its own path)"
            ),
        ),
        Errno::XDEV => FsError::field(field, format!("`{shown}` leaves the workspace")),
        Errno::NOENT => FsError::field(field, format!("`{shown}` does not exist in the workspace")),
        Errno::NOTDIR => FsError::field(field, format!("a part of `{shown}` is not a folder")),
        Errno::ISDIR => FsError::field(field, format!("`{shown}` is a folder, not a file")),
        Errno::NXIO | Errno::AGAIN => {
            FsError::field(field, format!("`{shown}` is not a regular file"))
        }
        Errno::NAMETOOLONG => FsError::field(field, format!("a name in `{shown}` is too long")),
        e => FsError::Io(format!("cannot open `{shown}` in the workspace: {e}")),
    }
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symlink (never followed).
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

fn kind_of(mode: u32) -> Kind {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// One entry found by a walk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Entry {
    /// Its path relative to the workspace.
    pub path: String,
    /// What it is.
    pub kind: Kind,
    /// Its size in bytes (of the link itself for a symlink).
    pub size: u64,
}

/// What a write would change in the workspace's count ([`Folder::cost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteCost {
    /// The size of the regular file it replaces (0 for a new file).
    pub old_bytes: u64,
    /// Whether the file is new.
    pub new_file: bool,
    /// Folders it makes on the way.
    pub new_folders: u64,
}

/// What a read returned.
#[derive(Debug)]
pub(crate) struct FileBytes {
    /// The bytes read (at most the cap).
    pub bytes: Vec<u8>,
    /// The file's size.
    pub size: u64,
}

/// What a walk calls with each entry and, for a regular file, a function opening it
/// for reading; it returns `false` to stop the walk.
pub(crate) type Visit<'a> = dyn FnMut(&Entry, &dyn Fn() -> Option<std::fs::File>) -> bool + 'a;

/// One workspace folder, opened.
#[derive(Debug)]
pub(crate) struct Folder {
    fd: OwnedFd,
    owner: Uid,
    group: Gid,
}

impl Folder {
    /// The folder behind an fd (opened without following symlinks by the caller); what
    /// the file tools create is given to the folder's owner.
    pub(crate) fn new(fd: OwnedFd) -> Result<Folder, FsError> {
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| FsError::Io(format!("cannot stat the workspace folder: {e}")))?;
        Ok(Folder {
            fd,
            owner: Uid::from_raw(st.st_uid),
            group: Gid::from_raw(st.st_gid),
        })
    }

    fn open(
        &self,
        field: &'static str,
        rel: &Path,
        flags: OFlags,
        mode: u32,
    ) -> Result<OwnedFd, FsError> {
        let at = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        // openat2 refuses O_PATH with any flag but a few.
        let extra = if flags.contains(OFlags::PATH) {
            OFlags::CLOEXEC
        } else {
            OFlags::CLOEXEC | OFlags::NOCTTY
        };
        rustix::fs::openat2(
            self.fd.as_fd(),
            at,
            flags | extra,
            Mode::from_raw_mode(mode),
            beneath(),
        )
        .map_err(|e| open_error(field, rel, symlink_last(self.fd.as_fd(), at, e)))
    }

    /// Reads at most `max` bytes of a regular file.
    pub(crate) fn read(
        &self,
        field: &'static str,
        rel: &Path,
        max: u64,
    ) -> Result<FileBytes, FsError> {
        let fd = self.open(
            field,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            0,
        )?;
        let size = regular_size(field, rel, &fd)?;
        let mut bytes = Vec::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
        std::fs::File::from(fd)
            .take(max)
            .read_to_end(&mut bytes)
            .map_err(|e| FsError::Io(format!("cannot read `{}`: {e}", rel.display())))?;
        Ok(FileBytes { bytes, size })
    }

    /// The folder's fd (for measuring it and merging into it).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What writing `rel` would change in the workspace's count: the bytes of the file
    /// it replaces, whether the file is new, and how many folders it makes.
    pub(crate) fn cost(&self, field: &'static str, rel: &Path) -> Result<WriteCost, FsError> {
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let parents: Vec<_> = rel
            .parent()
            .into_iter()
            .flat_map(Path::components)
            .collect();
        let mut cur = self
            .fd
            .try_clone()
            .map_err(|e| FsError::Io(format!("cannot duplicate the workspace fd: {e}")))?;
        let mut sofar = PathBuf::new();
        for (i, part) in parents.iter().enumerate() {
            sofar.push(part);
            match rustix::fs::openat2(
                cur.as_fd(),
                part.as_os_str(),
                dir_flags,
                Mode::empty(),
                beneath(),
            ) {
                Ok(fd) => cur = fd,
                Err(Errno::NOENT) => {
                    return Ok(WriteCost {
                        old_bytes: 0,
                        new_file: true,
                        new_folders: (parents.len() - i) as u64,
                    });
                }
                Err(e) => {
                    let e = symlink_last(cur.as_fd(), Path::new(part.as_os_str()), e);
                    return Err(open_error(field, &sofar, e));
                }
            }
        }
        let name = rel
            .file_name()
            .ok_or_else(|| FsError::field(field, "names no file"))?;
        match rustix::fs::statat(cur.as_fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(WriteCost {
                old_bytes: if kind_of(st.st_mode) == Kind::File {
                    u64::try_from(st.st_size).unwrap_or(0)
                } else {
                    0
                },
                new_file: false,
                new_folders: 0,
            }),
            Err(Errno::NOENT) => Ok(WriteCost {
                old_bytes: 0,
                new_file: true,
                new_folders: 0,
            }),
            Err(e) => Err(open_error(field, rel, e)),
        }
    }

    /// Writes a regular file (creating it and its folders), replacing its contents.
    /// Returns whether it was created.
    pub(crate) fn write(
        &self,
        field: &'static str,
        rel: &Path,
        contents: &[u8],
    ) -> Result<bool, FsError> {
        let (parent, name) = self.parent_of(field, rel, true)?;
        let flags =
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let (fd, created) = match rustix::fs::openat2(
            parent.as_fd(),
            &name,
            flags | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(0o644),
            beneath(),
        ) {
            Ok(fd) => {
                self.give(&fd, rel)?;
                (fd, true)
            }
            Err(Errno::EXIST) => {
                let fd =
                    rustix::fs::openat2(parent.as_fd(), &name, flags, Mode::empty(), beneath())
                        .map_err(|e| open_error(field, rel, e))?;
                (fd, false)
            }
            Err(e) => return Err(open_error(field, rel, e)),
        };
        regular_size(field, rel, &fd)?;
        let io = |e: std::io::Error| FsError::Io(format!("cannot write `{}`: {e}", rel.display()));
        rustix::fs::ftruncate(&fd, 0).map_err(|e| io(e.into()))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(contents).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(created)
    }

    /// The folder holding `rel` (created, with its parents, when `create`), opened
    /// beneath the workspace, and `rel`'s last name.
    fn parent_of(
        &self,
        field: &'static str,
        rel: &Path,
        create: bool,
    ) -> Result<(OwnedFd, PathBuf), FsError> {
        let name = rel
            .file_name()
            .map(PathBuf::from)
            .ok_or_else(|| FsError::field(field, "names no file"))?;
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut cur = self
            .fd
            .try_clone()
            .map_err(|e| FsError::Io(format!("cannot duplicate the workspace fd: {e}")))?;
        let mut sofar = PathBuf::new();
        for part in rel.parent().into_iter().flat_map(Path::components) {
            sofar.push(part);
            let next = match rustix::fs::openat2(
                cur.as_fd(),
                part.as_os_str(),
                dir_flags,
                Mode::empty(),
                beneath(),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(
                        cur.as_fd(),
                        part.as_os_str(),
                        Mode::from_raw_mode(0o755),
                    ) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(open_error(field, &sofar, e)),
                    }
                    let fd = rustix::fs::openat2(
                        cur.as_fd(),
                        part.as_os_str(),
                        dir_flags,
                        Mode::empty(),
                        beneath(),
                    )
                    .map_err(|e| {
                        let e = symlink_last(cur.as_fd(), Path::new(part.as_os_str()), e);
                        open_error(field, &sofar, e)
                    })?;
                    self.give(&fd, &sofar)?;
                    fd
                }
                Err(e) => {
                    let e = symlink_last(cur.as_fd(), Path::new(part.as_os_str()), e);
                    return Err(open_error(field, &sofar, e));
                }
            };
            cur = next;
        }
        Ok((cur, name))
    }

    /// Gives a created entry to the workspace folder's owner (the sandbox's uid, never
    /// root).
    fn give(&self, fd: &OwnedFd, rel: &Path) -> Result<(), FsError> {
        rustix::fs::fchown(fd, Some(self.owner), Some(self.group))
            .map_err(|e| FsError::Io(format!("cannot set the owner of `{}`: {e}", rel.display())))
    }

    /// What a path is (not following a symlink as its last part) and its size.
    pub(crate) fn kind(&self, field: &'static str, rel: &Path) -> Result<(Kind, u64), FsError> {
        let fd = self.open(field, rel, OFlags::PATH | OFlags::NOFOLLOW, 0)?;
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| FsError::Io(format!("cannot stat `{}`: {e}", shown(rel))))?;
        Ok((kind_of(st.st_mode), u64::try_from(st.st_size).unwrap_or(0)))
    }

    /// Opens a regular file for reading.
    pub(crate) fn open_file(
        &self,
        field: &'static str,
        rel: &Path,
    ) -> Result<std::fs::File, FsError> {
        let fd = self.open(
            field,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            0,
        )?;
        regular_size(field, rel, &fd)?;
        Ok(std::fs::File::from(fd))
    }

    /// Opens a folder of the workspace for a walk.
    pub(crate) fn open_dir(&self, field: &'static str, rel: &Path) -> Result<OwnedFd, FsError> {
        self.open(
            field,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            0,
        )
    }

    /// Walks the tree under `rel` depth-first in name order, never into a symlink,
    /// calling `visit` with each entry (and, for a regular file, a function opening it
    /// for reading). `visit` returns `false` to stop. Folders deeper than
    /// [`MAX_DEPTH`] are not entered.
    pub(crate) fn walk(
        &self,
        field: &'static str,
        rel: &Path,
        recursive: bool,
        visit: &mut Visit<'_>,
    ) -> Result<(), FsError> {
        let dir = self.open_dir(field, rel)?;
        walk_dir(dir.as_fd(), rel, 0, recursive, visit).map(|_| ())
    }
}

/// Checks that an opened fd is a regular file and returns its size.
fn regular_size(field: &'static str, rel: &Path, fd: &OwnedFd) -> Result<u64, FsError> {
    let st = rustix::fs::fstat(fd)
        .map_err(|e| FsError::Io(format!("cannot stat `{}`: {e}", rel.display())))?;
    match kind_of(st.st_mode) {
        Kind::File => Ok(u64::try_from(st.st_size).unwrap_or(0)),
        Kind::Dir => Err(FsError::field(
            field,
            format!("`{}` is a folder, not a file", rel.display()),
        )),
        _ => Err(FsError::field(
            field,
            format!("`{}` is not a regular file", rel.display()),
        )),
    }
}

/// One folder of a walk; `Ok(false)` when `visit` asked to stop.
fn walk_dir(
    dir: BorrowedFd<'_>,
    rel: &Path,
    depth: usize,
    recursive: bool,
    visit: &mut Visit<'_>,
) -> Result<bool, FsError> {
    let io = |e: Errno| FsError::Io(format!("cannot list `{}`: {e}", shown(rel)));
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    names.sort();
    for name in names {
        let Ok(text) = name.to_str() else {
            // A name that is not UTF-8 cannot be shown or passed back; it is skipped.
            continue;
        };
        let st =
            match rustix::fs::statat(dir, name.as_c_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(io(e)),
            };
        let path = rel.join(text);
        let entry = Entry {
            path: path.to_string_lossy().into_owned(),
            kind: kind_of(st.st_mode),
            size: u64::try_from(st.st_size).unwrap_or(0),
        };
        let open_file = || -> Option<std::fs::File> {
            let fd = rustix::fs::openat2(
                dir,
                name.as_c_str(),
                OFlags::RDONLY
                    | OFlags::NOFOLLOW
                    | OFlags::NONBLOCK
                    | OFlags::CLOEXEC
                    | OFlags::NOCTTY,
                Mode::empty(),
                beneath(),
            )
            .ok()?;
            let st = rustix::fs::fstat(&fd).ok()?;
            (kind_of(st.st_mode) == Kind::File).then(|| std::fs::File::from(fd))
        };
        if !visit(&entry, &open_file) {
            return Ok(false);
        }
        if recursive && entry.kind == Kind::Dir && depth + 1 < MAX_DEPTH {
            let sub = match rustix::fs::openat2(
                dir,
                name.as_c_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                beneath(),
            ) {
                Ok(fd) => fd,
                // Replaced by a symlink or removed since the stat: not entered.
                Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => continue,
                Err(e) => return Err(io(e)),
            };
            if !walk_dir(sub.as_fd(), &path, depth + 1, recursive, visit)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".into()
    } else {
        rel.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_workspace() {
        for (raw, want) in [
            ("a.txt", "a.txt"),
            ("./notes/b.md", "notes/b.md"),
            ("/workspace/x/y", "x/y"),
            ("a//b/./c", "a/b/c"),
        ] {
            assert_eq!(
                check_path("path", raw, false),
                Ok(PathBuf::from(want)),
                "{raw}"
            );
        }
        assert_eq!(check_path("path", ".", true), Ok(PathBuf::new()));
        for bad in [
            "",
            ".",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "/workspace/../etc",
            "a\0b",
            "/workspacex/a",
        ] {
            match check_path("path", bad, false) {
                Err(FsError::Field { field, .. }) => assert_eq!(field, "path"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }
}
