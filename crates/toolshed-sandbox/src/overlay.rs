//! Overlay binds ([`Bind::overlay`]): a run sees a host folder read-write, but every
//! change it makes lands in a fresh tmpfs *layer* (overlayfs's upper layer) whose size
//! and inodes are the room its caller grants, never in the folder. After the run the
//! caller merges the layer into the folder ([`Upper::merge`]) under a budget of its own:
//! the folder is only ever written by the supervisor, with beneath-only, no-symlink
//! operations, so nothing the run planted (a symlink to a host folder, a FIFO, a deep
//! tree) can redirect or block a write, and the folder never holds more than the budget.
//!
//! How a run's overlay is put together, and why in two steps: [`prepare`] (before the
//! start, in [`Sandbox::run`](crate::Sandbox::run)) mounts the layer (a detached tmpfs
//! with `upper` and `work`) and the overlay (`lowerdir+` the folder, `metacopy`,
//! `redirect_dir`, `index` and `xino` off: every change is a whole copy in the layer,
//! every deletion a whiteout, a renamed folder a copy and a deletion), and gives the run
//! a bind whose source is `/proc/self/fd/<the overlay's fd>`: the start's Landlock rule
//! is opened from the bind's source, and a rule on the folder itself would not cover an
//! overlay of it (Landlock ties rules to inodes, and an overlay has its own). Once the
//! run's pool uid is leased, [`mounts::prepare`](crate::mounts) gives the folder's tree
//! and the overlay's root to that uid and attaches the overlay at the bind's target.

use std::ffi::{CStr, CString, OsStr};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};
use rustix::process::{Gid, Uid};
use serde::Serialize;

use crate::check::Mechanism;
use crate::config::{Bind, OverlayRoom, RunSpec};
use crate::error::SandboxError;

/// Inodes of the layer's own structure: the tmpfs's root, `upper`, `work`, the
/// `work/work` overlayfs makes, and the one whiteout inode it links every deletion to.
const LAYER_INODES: u64 = 5;

/// The most components a path in a merged folder has: deeper entries of a layer are not
/// merged (and not counted by [`folder_usage`]); every walk holds one fd per level.
pub const MAX_MERGE_DEPTH: usize = 64;

/// How many refused entries a [`MergeReport`] lists by path (the rest are counted).
const LISTED_REFUSALS: usize = 32;

/// One overlay, mounted for one run before its start.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The folder (`O_PATH`, opened without following a symlink).
    lower: OwnedFd,
    /// Its path, for messages.
    lower_path: PathBuf,
    /// The overlay's detached mount.
    mount: OwnedFd,
}

/// A prepared overlay as a bind carries it (compared by identity).
#[derive(Debug, Clone)]
pub(crate) struct PreparedRef(Arc<Prepared>);

impl PartialEq for PreparedRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PreparedRef {}

impl PreparedRef {
    /// Gives the folder's tree and the overlay's root to the run's `uid`, and returns
    /// the overlay's mount for the child to attach.
    pub(crate) fn attach(&self, uid: u32) -> Result<OwnedFd, SandboxError> {
        let p = &self.0;
        let top = rustix::fs::openat(
            &p.lower,
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            SandboxError::io(format!("cannot open {}", p.lower_path.display()), e.into())
        })?;
        crate::mounts::own_folder(&p.lower_path, top, uid, 0)?;
        // Through the overlay, not on the layer's `upper`: the overlay keeps its root's
        // owner from when it was mounted.
        let root = rustix::fs::openat(
            &p.mount,
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| SandboxError::io("cannot open an overlay's root", e.into()))?;
        rustix::fs::fchown(&root, Some(Uid::from_raw(uid)), Some(Gid::from_raw(uid))).map_err(
            |e| SandboxError::io("cannot give an overlay's root to the run's uid", e.into()),
        )?;
        p.mount
            .try_clone()
            .map_err(|e| SandboxError::io("cannot duplicate an overlay's mount", e))
    }
}

fn page() -> u64 {
    rustix::param::page_size() as u64
}

/// Mounts the layer and the overlay of every overlay bind of `spec`. Returns the spec
/// the run starts with (each overlay bind's source the overlay's fd, which these binds
/// keep open) and the layers, in the order of the binds; `None` when there is none.
pub(crate) fn prepare(spec: &RunSpec) -> Result<Option<(RunSpec, Vec<Upper>)>, SandboxError> {
    if spec.binds.iter().all(|b| b.overlay.is_none()) {
        return Ok(None);
    }
    let mut spec = spec.clone();
    let mut uppers = Vec::new();
    for (i, b) in spec.binds.iter_mut().enumerate() {
        let Some(room) = b.overlay else { continue };
        let (prepared, upper) = mount(i, b, room)?;
        b.source = PathBuf::from(format!("/proc/self/fd/{}", prepared.mount.as_raw_fd()));
        b.writable = true;
        b.exec = false;
        b.prepared = Some(PreparedRef(Arc::new(prepared)));
        uppers.push(upper);
    }
    Ok(Some((spec, uppers)))
}

fn mount(i: usize, b: &Bind, room: OverlayRoom) -> Result<(Prepared, Upper), SandboxError> {
    if !b.source.is_absolute() {
        return Err(SandboxError::config(
            format!("binds[{i}].source"),
            format!("{} is not absolute", b.source.display()),
        ));
    }
    let lower = rustix::fs::open(
        &b.source,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SandboxError::BindSourceNotFound {
        path: b.source.clone(),
        source: e.into(),
    })?;
    let bytes = (room.bytes / page() * page()).max(page());
    let inodes = room.files.saturating_add(LAYER_INODES);
    let layer = Arc::new(crate::mounts::tmpfs(
        bytes,
        inodes,
        0,
        "mount an overlay's layer",
    )?);
    let step = |step: &'static str| {
        move |e: Errno| SandboxError::SetupFailed {
            step,
            source: e.into(),
        }
    };
    rustix::fs::mkdirat(&*layer, c"upper", Mode::from_raw_mode(0o755))
        .map_err(step("make an overlay's upper folder"))?;
    rustix::fs::mkdirat(&*layer, c"work", Mode::from_raw_mode(0o700))
        .map_err(step("make an overlay's work folder"))?;
    let fs = rustix::mount::fsopen(c"overlay", FsOpenFlags::FSOPEN_CLOEXEC).map_err(|e| {
        SandboxError::MechanismUnavailable {
            mechanism: Mechanism::MountApi,
            detail: format!("overlayfs cannot be mounted ({e}), and a workspace's bash needs it"),
            fix: "load overlayfs (`modprobe overlay`; Linux 6.8 or newer)".into(),
        }
    })?;
    let layer_fd = layer.as_raw_fd();
    let options = [
        ("lowerdir+", format!("/proc/self/fd/{}", lower.as_raw_fd())),
        ("upperdir", format!("/proc/self/fd/{layer_fd}/upper")),
        ("workdir", format!("/proc/self/fd/{layer_fd}/work")),
        ("metacopy", "off".to_owned()),
        ("redirect_dir", "off".to_owned()),
        ("index", "off".to_owned()),
        ("xino", "off".to_owned()),
    ];
    for (key, value) in options {
        rustix::mount::fsconfig_set_string(fs.as_fd(), key, value.as_str())
            .map_err(step("configure an overlay"))?;
    }
    rustix::mount::fsconfig_create(fs.as_fd()).map_err(step("create an overlay"))?;
    let mount = rustix::mount::fsmount(
        fs.as_fd(),
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )
    .map_err(step("mount an overlay"))?;
    let upper = Upper {
        target: b.target.clone(),
        layer,
        room,
    };
    Ok((
        Prepared {
            lower,
            lower_path: b.source.clone(),
            mount,
        },
        upper,
    ))
}

/// What a folder holds, as overlay budgets count it: every entry below it (file,
/// folder, symlink, FIFO…) is one file; bytes are the sizes of its regular files (as
/// `ls -l` shows them, holes included) and the lengths of its symlinks' targets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Bytes.
    pub bytes: u64,
    /// Entries.
    pub files: u64,
}

impl Usage {
    fn add(&mut self, st: &Stat) {
        self.files += 1;
        self.bytes += counted_bytes(st);
    }
}

/// The bytes an entry counts for.
fn counted_bytes(st: &Stat) -> u64 {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile | FileType::Symlink => u64::try_from(st.st_size).unwrap_or(0),
        _ => 0,
    }
}

/// What a merge may let the folder hold: what it holds before, and the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeBudget {
    /// What the folder holds now ([`folder_usage`]).
    pub used: Usage,
    /// The most it may hold.
    pub allowed: Usage,
}

/// An entry of the layer that was not merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// Its path, relative to the folder (serialized lossily: a name need not be UTF-8).
    #[serde(serialize_with = "lossy")]
    pub path: PathBuf,
    /// Why, in a sentence.
    pub reason: String,
    /// Whether it was refused because the folder would hold more than its budget (not
    /// for what it is: a socket, a device, too deep, a host error).
    pub over_budget: bool,
}

fn lossy<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

/// Why one entry is not merged.
struct Refusal {
    reason: String,
    over_budget: bool,
}

impl From<String> for Refusal {
    fn from(reason: String) -> Self {
        Refusal {
            reason,
            over_budget: false,
        }
    }
}

impl From<&str> for Refusal {
    fn from(reason: &str) -> Self {
        Refusal::from(reason.to_owned())
    }
}

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MergeReport {
    /// What the folder holds after it.
    pub usage: Usage,
    /// Entries created or replaced.
    pub written: u64,
    /// Entries deleted (whiteouts, the old contents of a replaced folder).
    pub deleted: u64,
    /// Entries not merged (the first few, by path).
    pub refused: Vec<Refused>,
    /// How many entries were not merged in all.
    pub refused_count: u64,
    /// Whether any was refused because of the budget.
    pub over_budget: bool,
}

/// The layer of one overlay bind after its run: what the run changed, until it is
/// merged ([`Upper::merge`]) or dropped (then the changes are gone).
#[derive(Debug, Clone)]
pub struct Upper {
    target: PathBuf,
    layer: Arc<OwnedFd>,
    room: OverlayRoom,
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

/// Opens the folder `name` of `dir`, never through a symlink.
fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )
}

/// The names in a folder (without `.` and `..`), sorted.
fn names(dir: BorrowedFd<'_>) -> rustix::io::Result<Vec<CString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<Option<Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// overlayfs's whiteout: a character device 0:0 (the sandbox cannot make one through
/// the overlay, which refuses it).
fn is_whiteout(st: &Stat) -> bool {
    kind(st) == FileType::CharacterDevice && st.st_rdev == 0
}

/// Whether a folder of the layer hides the folder's own one (`trusted.overlay.opaque`,
/// which only the supervisor's overlayfs can set).
fn is_opaque(dir: BorrowedFd<'_>) -> bool {
    let mut value = [0u8; 4];
    matches!(
        rustix::fs::fgetxattr(dir, c"trusted.overlay.opaque", &mut value[..]),
        Ok(1) if value[0] == b'y'
    )
}

/// Counts a folder's tree (see [`Usage`]), never through a symlink; entries deeper than
/// [`MAX_MERGE_DEPTH`] are not counted.
pub fn folder_usage(dir: BorrowedFd<'_>) -> Result<Usage, SandboxError> {
    let mut usage = Usage::default();
    measure_in(dir, 1, &mut usage)
        .map_err(|e| SandboxError::io("cannot measure a folder", e.into()))?;
    Ok(usage)
}

fn measure_in(dir: BorrowedFd<'_>, depth: usize, usage: &mut Usage) -> rustix::io::Result<()> {
    for name in names(dir)? {
        let Some(st) = stat_at(dir, &name)? else {
            continue;
        };
        usage.add(&st);
        if kind(&st) == FileType::Directory && depth < MAX_MERGE_DEPTH {
            match open_dir(dir, &name) {
                Ok(sub) => measure_in(sub.as_fd(), depth + 1, usage)?,
                Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// One merge in progress.
struct Merge {
    used: Usage,
    allowed: Usage,
    report: MergeReport,
    temp: u64,
}

impl Upper {
    /// The bind's target inside the sandbox.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The room the run had.
    pub fn room(&self) -> OverlayRoom {
        self.room
    }

    /// Whether the run used up its room (its writes then failed with "No space left on
    /// device").
    pub fn ran_out(&self) -> bool {
        rustix::fs::fstatfs(&*self.layer).is_ok_and(|s| s.f_bfree == 0 || s.f_ffree == 0)
    }

    /// Merges the run's changes into the folder `into` (an fd of the bind's source,
    /// opened by the caller without following a symlink): new and changed files are
    /// copied and replace the folder's atomically (a rename), with their mode (never
    /// set-uid or set-gid), owner (the run's uid) and times; folders are made; symlinks
    /// and FIFOs are recreated as they are, never followed; deletions delete; a folder
    /// the run deleted and made again replaces the folder's. Deletions go first, so what
    /// they free counts. Every operation on the folder opens beneath `into` and through
    /// no symlink: a symlink the run left in the folder can never redirect a write.
    ///
    /// Nothing is added that would make the folder hold more than `budget.allowed`
    /// (checked entry by entry, from `budget.used`); such entries, sockets, devices and
    /// paths deeper than [`MAX_MERGE_DEPTH`] are refused and listed in the report, and the
    /// rest is merged. An error means the layer or the folder could not be read at all.
    pub fn merge(
        &self,
        into: BorrowedFd<'_>,
        budget: MergeBudget,
    ) -> Result<MergeReport, SandboxError> {
        let upper = open_dir(self.layer.as_fd(), c"upper")
            .map_err(|e| SandboxError::io("cannot open an overlay's layer", e.into()))?;
        let mut m = Merge {
            used: budget.used,
            allowed: budget.allowed,
            report: MergeReport::default(),
            temp: 0,
        };
        m.deletions(upper.as_fd(), Some(into), Path::new(""), 1)
            .map_err(|e| SandboxError::io("cannot apply an overlay's deletions", e.into()))?;
        m.additions(upper.as_fd(), into, Path::new(""), 1)
            .map_err(|e| SandboxError::io("cannot merge an overlay's layer", e.into()))?;
        m.report.usage = m.used;
        Ok(m.report)
    }
}

fn join(rel: &Path, name: &CStr) -> PathBuf {
    rel.join(OsStr::from_bytes(name.to_bytes()))
}

impl Merge {
    fn refuse(&mut self, path: PathBuf, why: impl Into<Refusal>) {
        let why = why.into();
        self.report.refused_count += 1;
        self.report.over_budget |= why.over_budget;
        if self.report.refused.len() < LISTED_REFUSALS {
            self.report.refused.push(Refused {
                path,
                reason: why.reason,
                over_budget: why.over_budget,
            });
        }
    }

    /// Removes `name` of `dir` (a folder with everything in it), counting what it frees.
    fn remove(&mut self, dir: BorrowedFd<'_>, name: &CStr, depth: usize) -> rustix::io::Result<()> {
        let Some(st) = stat_at(dir, name)? else {
            return Ok(());
        };
        if kind(&st) == FileType::Directory {
            // Deeper than anything a merge makes: a folder the supervisor did not write.
            if depth > 2 * MAX_MERGE_DEPTH {
                return Err(Errno::LOOP);
            }
            let sub = open_dir(dir, name)?;
            self.clear(sub.as_fd(), depth)?;
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
        } else {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
        }
        self.used.files = self.used.files.saturating_sub(1);
        self.used.bytes = self.used.bytes.saturating_sub(counted_bytes(&st));
        self.report.deleted += 1;
        Ok(())
    }

    /// Removes everything in a folder of the host.
    fn clear(&mut self, dir: BorrowedFd<'_>, depth: usize) -> rustix::io::Result<()> {
        for name in names(dir)? {
            self.remove(dir, &name, depth + 1)?;
        }
        Ok(())
    }

    /// First pass: whiteouts delete, a folder that replaces the folder's own (opaque)
    /// empties it, anything else that replaces a folder removes it.
    fn deletions(
        &mut self,
        upper: BorrowedFd<'_>,
        host: Option<BorrowedFd<'_>>,
        rel: &Path,
        depth: usize,
    ) -> rustix::io::Result<()> {
        let Some(host) = host else { return Ok(()) };
        for name in names(upper)? {
            let path = join(rel, &name);
            let Some(st) = stat_at(upper, &name)? else {
                continue;
            };
            let Some(there) = stat_at(host, &name)? else {
                continue;
            };
            let failed = |e: Errno| format!("could not delete the old entry: {e}");
            if is_whiteout(&st) {
                if let Err(e) = self.remove(host, &name, depth) {
                    self.refuse(path, failed(e));
                }
                continue;
            }
            let upper_dir = kind(&st) == FileType::Directory;
            let host_dir = kind(&there) == FileType::Directory;
            if !upper_dir {
                if host_dir && let Err(e) = self.remove(host, &name, depth) {
                    self.refuse(path, failed(e));
                }
                continue;
            }
            if !host_dir {
                if let Err(e) = self.remove(host, &name, depth) {
                    self.refuse(path, failed(e));
                }
                continue;
            }
            if depth >= MAX_MERGE_DEPTH {
                continue;
            }
            let sub = open_dir(upper, &name)?;
            let there = match open_dir(host, &name) {
                Ok(fd) => fd,
                Err(e) => {
                    self.refuse(path, failed(e));
                    continue;
                }
            };
            if is_opaque(sub.as_fd())
                && let Err(e) = self.clear(there.as_fd(), depth)
            {
                self.refuse(path.clone(), failed(e));
            }
            self.deletions(sub.as_fd(), Some(there.as_fd()), &path, depth + 1)?;
        }
        Ok(())
    }

    /// Whether adding `bytes` and `files` (after freeing `freed_bytes`) stays within the
    /// budget; the reason when not.
    fn fits(&self, freed_bytes: u64, bytes: u64, files: u64) -> Result<(), Refusal> {
        let after_bytes = self
            .used
            .bytes
            .saturating_sub(freed_bytes)
            .saturating_add(bytes);
        if after_bytes > self.allowed.bytes {
            return Err(Refusal {
                reason: format!(
                    "not kept: the folder would hold {after_bytes} bytes, more than the {} allowed",
                    self.allowed.bytes
                ),
                over_budget: true,
            });
        }
        if self.used.files.saturating_add(files) > self.allowed.files {
            return Err(Refusal {
                reason: format!(
                    "not kept: the folder would hold {} entries, more than the {} allowed",
                    self.used.files + files,
                    self.allowed.files
                ),
                over_budget: true,
            });
        }
        Ok(())
    }

    /// A fresh name for a temporary entry, with `make` creating it.
    fn temp<T>(
        &mut self,
        mut make: impl FnMut(&CStr) -> rustix::io::Result<T>,
    ) -> rustix::io::Result<(CString, T)> {
        loop {
            self.temp += 1;
            let name = CString::new(format!(
                ".toolshed-merge-{}-{}",
                std::process::id(),
                self.temp
            ))
            .map_err(|_| Errno::INVAL)?;
            match make(&name) {
                Ok(t) => return Ok((name, t)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Second pass: everything else of the layer, parents before children.
    fn additions(
        &mut self,
        upper: BorrowedFd<'_>,
        host: BorrowedFd<'_>,
        rel: &Path,
        depth: usize,
    ) -> rustix::io::Result<()> {
        for name in names(upper)? {
            let path = join(rel, &name);
            let Some(st) = stat_at(upper, &name)? else {
                continue;
            };
            if is_whiteout(&st) {
                continue;
            }
            if depth > MAX_MERGE_DEPTH {
                self.refuse(
                    path,
                    format!("not kept: deeper than {MAX_MERGE_DEPTH} folders"),
                );
                continue;
            }
            let there = stat_at(host, &name)?;
            let result = match kind(&st) {
                FileType::Directory => {
                    self.folder(upper, host, &name, &st, there.as_ref(), &path, depth)
                }
                FileType::RegularFile | FileType::Symlink | FileType::Fifo => {
                    self.entry(upper, host, &name, &st, there.as_ref())
                }
                FileType::Socket => Err("not kept: a socket".into()),
                _ => Err("not kept: a device node".into()),
            };
            if let Err(reason) = result {
                self.refuse(path, reason);
            }
        }
        Ok(())
    }

    /// A folder of the layer: made in the host folder when missing, merged into, then
    /// given its mode, owner and times.
    #[allow(clippy::too_many_arguments, reason = "one recursive step of the walk")]
    fn folder(
        &mut self,
        upper: BorrowedFd<'_>,
        host: BorrowedFd<'_>,
        name: &CStr,
        st: &Stat,
        there: Option<&Stat>,
        path: &Path,
        depth: usize,
    ) -> Result<(), Refusal> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |e: Errno| format!("not kept: {what}: {e}")
        };
        match there {
            Some(t) if kind(t) == FileType::Directory => {}
            Some(_) => {
                // Replaced by a folder after the first pass looked (cannot happen while the
                // caller holds the folder): removed now.
                self.remove(host, name, depth)
                    .map_err(io("cannot remove the old entry"))?;
                self.fits(0, 0, 1)?;
                rustix::fs::mkdirat(host, name, Mode::from_raw_mode(0o700))
                    .map_err(io("cannot make the folder"))?;
                self.used.files += 1;
            }
            None => {
                self.fits(0, 0, 1)?;
                rustix::fs::mkdirat(host, name, Mode::from_raw_mode(0o700))
                    .map_err(io("cannot make the folder"))?;
                self.used.files += 1;
            }
        }
        let sub_upper = open_dir(upper, name).map_err(io("cannot open the layer's folder"))?;
        let sub_host = open_dir(host, name).map_err(io("cannot open the folder"))?;
        self.report.written += u64::from(there.is_none());
        self.additions(sub_upper.as_fd(), sub_host.as_fd(), path, depth + 1)
            .map_err(io("cannot read the layer's folder"))?;
        // Mode, owner and times last: adding entries changed the folder's times.
        let mode = Mode::from_raw_mode(st.st_mode & 0o1777);
        rustix::fs::fchmod(&sub_host, mode).map_err(io("cannot set the folder's mode"))?;
        rustix::fs::fchown(
            &sub_host,
            Some(Uid::from_raw(st.st_uid)),
            Some(Gid::from_raw(st.st_gid)),
        )
        .map_err(io("cannot set the folder's owner"))?;
        rustix::fs::futimens(&sub_host, &times(st)).map_err(io("cannot set the folder's times"))?;
        Ok(())
    }

    /// A file, symlink or FIFO of the layer: made under a temporary name in the host
    /// folder, then renamed over the old entry (a folder there was removed by the first
    /// pass).
    fn entry(
        &mut self,
        upper: BorrowedFd<'_>,
        host: BorrowedFd<'_>,
        name: &CStr,
        st: &Stat,
        there: Option<&Stat>,
    ) -> Result<(), Refusal> {
        if there.is_some_and(|t| kind(t) == FileType::Directory) {
            return Err("not kept: a folder is in its place".into());
        }
        let freed = there.map_or(0, counted_bytes);
        let new_entry = u64::from(there.is_none());
        let bytes = counted_bytes(st);
        self.fits(freed, bytes, new_entry)?;
        let owner = (
            Some(Uid::from_raw(st.st_uid)),
            Some(Gid::from_raw(st.st_gid)),
        );
        let io = |what: &'static str| move |e: Errno| format!("not kept: {what}: {e}");
        let mode = Mode::from_raw_mode(st.st_mode & 0o777);
        let (temp, written) = match kind(st) {
            FileType::RegularFile => {
                let source = rustix::fs::openat2(
                    upper,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                    beneath(),
                )
                .map_err(io("cannot open it in the layer"))?;
                let (temp, fd) = self
                    .temp(|n| {
                        rustix::fs::openat2(
                            host,
                            n,
                            OFlags::WRONLY
                                | OFlags::CREATE
                                | OFlags::EXCL
                                | OFlags::NOFOLLOW
                                | OFlags::CLOEXEC,
                            Mode::from_raw_mode(0o600),
                            beneath(),
                        )
                    })
                    .map_err(io("cannot create it"))?;
                let copied = copy(source, &fd, bytes).and_then(|n| {
                    rustix::fs::fchmod(&fd, mode)?;
                    rustix::fs::fchown(&fd, owner.0, owner.1)?;
                    rustix::fs::futimens(&fd, &times(st))?;
                    Ok(n)
                });
                match copied {
                    Ok(n) => (temp, n),
                    Err(e) => {
                        let _ = rustix::fs::unlinkat(host, &temp, AtFlags::empty());
                        return Err(format!("not kept: cannot write it: {e}").into());
                    }
                }
            }
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(upper, name, Vec::new())
                    .map_err(io("cannot read it in the layer"))?;
                let (temp, ()) = self
                    .temp(|n| rustix::fs::symlinkat(target.as_c_str(), host, n))
                    .map_err(io("cannot create it"))?;
                let set =
                    rustix::fs::chownat(host, &temp, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW)
                        .and_then(|()| {
                            rustix::fs::utimensat(
                                host,
                                &temp,
                                &times(st),
                                AtFlags::SYMLINK_NOFOLLOW,
                            )
                        });
                if let Err(e) = set {
                    let _ = rustix::fs::unlinkat(host, &temp, AtFlags::empty());
                    return Err(format!("not kept: cannot set its owner: {e}").into());
                }
                (temp, target.as_bytes().len() as u64)
            }
            _ => {
                let (temp, ()) = self
                    .temp(|n| rustix::fs::mknodat(host, n, FileType::Fifo, mode, 0))
                    .map_err(io("cannot create it"))?;
                if let Err(e) =
                    rustix::fs::chownat(host, &temp, owner.0, owner.1, AtFlags::SYMLINK_NOFOLLOW)
                {
                    let _ = rustix::fs::unlinkat(host, &temp, AtFlags::empty());
                    return Err(format!("not kept: cannot set its owner: {e}").into());
                }
                (temp, 0)
            }
        };
        if let Err(e) = rustix::fs::renameat(host, &temp, host, name) {
            let _ = rustix::fs::unlinkat(host, &temp, AtFlags::empty());
            return Err(format!("not kept: cannot put it in place: {e}").into());
        }
        self.used.bytes = self
            .used
            .bytes
            .saturating_sub(freed)
            .saturating_add(written);
        self.used.files += new_entry;
        self.report.written += 1;
        Ok(())
    }
}

/// Copies at most `len` bytes of `source` into `dest`; the count copied.
fn copy(source: OwnedFd, dest: &OwnedFd, len: u64) -> rustix::io::Result<u64> {
    let mut from = std::fs::File::from(source).take(len);
    let mut to = std::fs::File::from(dest.try_clone().map_err(|_| Errno::MFILE)?);
    std::io::copy(&mut from, &mut to).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
}

fn times(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: st.st_atime as _,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: st.st_mtime as _,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}
