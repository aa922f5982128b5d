//! The sandbox's root filesystem.
//!
//! A *skeleton* is a folder in the runtime folder, built once per layout (the set of
//! bind targets) and shared read-only by every run: the mount points (`usr`, `proc`,
//! `dev/null`, `tmp`, `work`, the binds'), the lib and bin links as the host has them,
//! `/dev/shm` → `/tmp`, and a synthetic `/etc` (a `passwd` with the sandbox user, no real
//! user of the host; a copy of the loader's cache, so programs find their libraries at
//! once). Each run, the parent prepares *detached* mounts (new mount API):
//! a read-only clone of the skeleton, read-only clones of `/usr` and the binds (a
//! writable bind is a writable clone of one folder, given to the run's uid first), the three
//! device nodes, and two fresh size-limited tmpfs (`/tmp` and the scratch folder); an
//! overlay bind's overlay is mounted even earlier (`overlay.rs`) and only given to the
//! run's uid here. The child only attaches them in its own mount namespace and pivots
//! into the result.
//!
//! The parent keeps the scratch mount's fd: files the tool wrote are read back through
//! it with beneath-only, no-symlink opens, after the tool is gone.
//!
//! Each supervisor holds a shared `flock` on every skeleton it uses and marks it used
//! (its modification time); [`sweep`], run on the janitor thread at `Sandbox::new`,
//! removes the skeletons nobody holds that have gone unused for [`SKELETON_IDLE`].

use std::collections::HashMap;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, OpenTreeFlags};

use crate::child::INSIDE_ID;
use crate::config::{Bind, Limits};
use crate::error::SandboxError;
use crate::sys;

/// Bumped when the skeleton's contents change, so old skeletons are not reused.
const SKELETON_VERSION: u32 = 2;

/// The host's top-level links or folders the sandbox mirrors (merged /usr: links).
const TOP_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Where slirp4netns answers DNS.
const RESOLV_CONF: &str = "nameserver 10.0.2.3\n";

/// A prepared skeleton.
#[derive(Debug)]
pub(crate) struct Skeleton {
    /// Its host path.
    pub path: PathBuf,
    /// The same, for the child.
    pub cpath: CString,
    /// An `O_PATH` fd of it (the Landlock read rule).
    pub fd: OwnedFd,
    /// The folder opened and share-locked (`flock`) while this supervisor may use it,
    /// so that [`sweep`] never removes it.
    _in_use: OwnedFd,
    /// Top-level folders of the host (not links) that are bound read-only like `/usr`.
    pub top_dirs: Vec<&'static str>,
}

/// What a bind's mount point is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct MountPoint {
    pub target: PathBuf,
    pub dir: bool,
}

/// Skeletons by layout, built on first use.
#[derive(Debug, Default)]
pub(crate) struct Skeletons {
    built: Mutex<HashMap<Vec<MountPoint>, Arc<Skeleton>>>,
}

impl Skeletons {
    /// The skeleton for these bind mount points (sorted), building it once.
    pub(crate) fn get(
        &self,
        runtime_dir: &Path,
        points: Vec<MountPoint>,
    ) -> Result<Arc<Skeleton>, SandboxError> {
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = built.get(&points) {
            return Ok(s.clone());
        }
        let s = Arc::new(build(runtime_dir, &points)?);
        built.insert(points, s.clone());
        Ok(s)
    }
}

fn key(points: &[MountPoint]) -> String {
    use std::hash::{Hash, Hasher};
    // A stable, content-derived name (FNV-1a), the same in every supervisor process.
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 ^= u64::from(*b);
                self.0 = self.0.wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    SKELETON_VERSION.hash(&mut h);
    // A skeleton holds a copy of the loader's cache: a new cache (after `ldconfig`)
    // makes a new skeleton.
    if let Ok(m) = std::fs::metadata(LOADER_CACHE) {
        use std::os::unix::fs::MetadataExt;
        m.len().hash(&mut h);
        m.mtime().hash(&mut h);
        m.mtime_nsec().hash(&mut h);
        m.ino().hash(&mut h);
    }
    for p in points {
        p.target.as_os_str().as_bytes().hash(&mut h);
        p.dir.hash(&mut h);
    }
    format!("root-{:016x}", h.finish())
}

/// The dynamic loader's cache of where each library is (`ldconfig`'s output).
const LOADER_CACHE: &str = "/etc/ld.so.cache";
/// A loader cache larger than this is not copied (a typical one is tens of KiB).
const LOADER_CACHE_MAX: u64 = 4 << 20;

/// Copies the host's loader cache into the skeleton's `/etc`. Without it the loader of
/// every dynamically linked program looks for each library in every hardware-capability
/// folder of every library path first (about forty failed lookups per library, each
/// checked by Landlock), which made up much of a sandboxed start. The cache names only
/// library paths under `/usr`, which the sandbox sees anyway. A missing, odd or huge
/// cache is skipped: programs then start the slow way.
fn copy_loader_cache(root: &Path) -> Result<(), SandboxError> {
    let host = Path::new(LOADER_CACHE);
    match std::fs::symlink_metadata(host) {
        Ok(m) if m.is_file() && m.len() <= LOADER_CACHE_MAX => {}
        _ => return Ok(()),
    }
    let Ok(bytes) = std::fs::read(host) else {
        return Ok(());
    };
    new_file(&root.join("etc/ld.so.cache"), &bytes)
}

/// Creates the file `p` (which must not exist yet), readable by all, with `contents`.
fn new_file(p: &Path, contents: &[u8]) -> Result<(), SandboxError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(p)
        .map_err(io_at(p, "create"))?;
    std::io::Write::write_all(&mut f, contents).map_err(io_at(p, "write"))
}

fn io_at(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> SandboxError {
    let what = format!("cannot {what} {}", path.display());
    move |e| SandboxError::io(what, e)
}

fn build(runtime_dir: &Path, points: &[MountPoint]) -> Result<Skeleton, SandboxError> {
    let roots = runtime_dir.join("roots");
    std::fs::create_dir_all(&roots).map_err(io_at(&roots, "create"))?;
    let final_path = roots.join(key(points));
    let mut top_dirs = Vec::new();
    for name in TOP_LINKS {
        let host = Path::new("/").join(name);
        if let Ok(meta) = std::fs::symlink_metadata(&host)
            && meta.is_dir()
        {
            top_dirs.push(*name);
        }
    }
    // Built unless it is there; then held. A sweep removing it between the two (it had
    // gone unused for a day) makes it built again.
    let mut attempt = 0;
    let in_use = loop {
        if !final_path.exists() {
            install(&roots, &final_path, points)?;
        }
        if let Some(fd) = lock_in_use(&final_path)? {
            break fd;
        }
        attempt += 1;
        if attempt == 3 {
            return Err(SandboxError::io(
                format!("cannot hold the root skeleton {}", final_path.display()),
                std::io::Error::other("it was removed each time it was built"),
            ));
        }
    };
    let fd = rustix::fs::open(
        &final_path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SandboxError::io(format!("cannot open {}", final_path.display()), e.into()))?;
    let cpath = CString::new(final_path.as_os_str().as_bytes())
        .map_err(|_| SandboxError::config("runtime_dir", "contains a NUL byte"))?;
    Ok(Skeleton {
        path: final_path,
        cpath,
        fd,
        top_dirs,
        _in_use: in_use,
    })
}

/// How long a skeleton may go unused (by every supervisor) before [`sweep`] removes it.
/// A new version, a new layout of bind targets or a new loader cache (`ldconfig`) each
/// make a new one (about 150 KiB), and the runtime folder is in `/run`, kept in memory
/// until the host restarts: a day of the test suites left 400 of them, 57 MiB. Building
/// one again costs a few milliseconds.
pub(crate) const SKELETON_IDLE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How often [`sweep`] looks at the skeletons (on one host, across supervisors).
pub(crate) const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Opens the skeleton at `path` and share-locks it for as long as the fd lives, then
/// marks it used now (its modification time). `None` when it is not there any more (a
/// sweep removed it between the build's check and this open): the caller builds again.
fn lock_in_use(path: &Path) -> Result<Option<OwnedFd>, SandboxError> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io_at(path, "open")(e.into())),
    };
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockShared)
        .map_err(|e| io_at(path, "lock")(e.into()))?;
    // A sweep holding the exclusive lock before ours renamed the folder away: the path
    // names another folder now, or none.
    let held = rustix::fs::fstat(&fd).map_err(|e| io_at(path, "read")(e.into()))?;
    match rustix::fs::stat(path) {
        Ok(now) if now.st_dev == held.st_dev && now.st_ino == held.st_ino => {}
        _ => return Ok(None),
    }
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    rustix::fs::futimens(
        &fd,
        &rustix::fs::Timestamps {
            last_access: now,
            last_modification: now,
        },
    )
    .map_err(|e| io_at(path, "mark as used")(e.into()))?;
    Ok(Some(fd))
}

/// Removes from `runtime_dir/roots` the skeletons no supervisor holds that have gone
/// unused for `idle`, and the half-built ones of supervisors that died. A skeleton is
/// taken with an exclusive lock that fails while any supervisor holds its share lock,
/// and renamed away before it is removed, so a supervisor starting to use it meanwhile
/// finds it gone and builds its own. Best effort: what cannot be removed stays.
pub(crate) fn sweep(runtime_dir: &Path, idle: std::time::Duration) {
    let roots = runtime_dir.join("roots");
    let now = std::time::SystemTime::now();
    let age = |modified: std::io::Result<std::time::SystemTime>| {
        modified.ok().and_then(|m| now.duration_since(m).ok())
    };
    // Once an hour at most, whoever comes first: a one-shot process (the CLI) must not
    // pay a look at every skeleton at each start.
    let marker = roots.join(".last-sweep");
    let recent =
        age(std::fs::metadata(&marker).and_then(|m| m.modified())).is_some_and(|d| d < SWEEP_EVERY);
    if recent || std::fs::write(&marker, b"").is_err() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(&roots) else {
        return;
    };
    for (n, entry) in entries.flatten().enumerate() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let path = entry.path();
        if let Some(rest) = name
            .strip_prefix(".build-")
            .or(name.strip_prefix(".swept-"))
        {
            if crate::janitor::maker_gone(rest) == Some(true) {
                let _ = std::fs::remove_dir_all(&path);
            }
            continue;
        }
        if !name.starts_with("root-") {
            continue;
        }
        let Ok(fd) = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        if rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let modified = rustix::fs::fstat(&fd)
            .map_err(std::io::Error::from)
            .map(|st| {
                std::time::UNIX_EPOCH
                    + std::time::Duration::new(
                        u64::try_from(st.st_mtime).unwrap_or_default(),
                        u32::try_from(st.st_mtime_nsec).unwrap_or_default(),
                    )
            });
        if age(modified).is_none_or(|d| d < idle) {
            continue;
        }
        let away = roots.join(format!(".swept-{}-{n}", std::process::id()));
        if std::fs::rename(&path, &away).is_ok() {
            let _ = std::fs::remove_dir_all(&away);
        }
    }
}

/// Builds the skeleton for `points` in a temporary folder and renames it to `final_path`.
fn install(roots: &Path, final_path: &Path, points: &[MountPoint]) -> Result<(), SandboxError> {
    let tmp = roots.join(format!(
        ".build-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    populate(&tmp, points).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&tmp);
    })?;
    // Another supervisor may have built the same layout meanwhile: keep theirs.
    if std::fs::rename(&tmp, final_path).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        if !final_path.exists() {
            return Err(SandboxError::io(
                format!("cannot install the root skeleton {}", final_path.display()),
                std::io::Error::other("rename failed"),
            ));
        }
    }
    Ok(())
}

fn populate(root: &Path, points: &[MountPoint]) -> Result<(), SandboxError> {
    let dir = |rel: &str| -> Result<(), SandboxError> {
        let p = root.join(rel);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&p)
            .map_err(io_at(&p, "create"))
    };
    let file = |rel: &str, contents: &str| new_file(&root.join(rel), contents.as_bytes());
    let link = |target: &str, rel: &str| -> Result<(), SandboxError> {
        let p = root.join(rel);
        std::os::unix::fs::symlink(target, &p).map_err(io_at(&p, "create"))
    };
    dir("")?;
    for d in ["usr", "proc", "dev", "tmp", "work", "etc/ssl/certs"] {
        dir(d)?;
    }
    for name in TOP_LINKS {
        let host = Path::new("/").join(name);
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&host).map_err(io_at(&host, "read"))?;
                let p = root.join(name);
                std::os::unix::fs::symlink(&target, &p).map_err(io_at(&p, "create"))?;
            }
            Ok(m) if m.is_dir() => dir(name)?,
            _ => {}
        }
    }
    for node in ["null", "zero", "urandom"] {
        file(&format!("dev/{node}"), "")?;
    }
    link("urandom", "dev/random")?;
    link("/proc/self/fd", "dev/fd")?;
    link("/proc/self/fd/0", "dev/stdin")?;
    link("/proc/self/fd/1", "dev/stdout")?;
    link("/proc/self/fd/2", "dev/stderr")?;
    // POSIX shared memory lands in the size-limited /tmp.
    link("/tmp", "dev/shm")?;
    file(
        "etc/passwd",
        &format!(
            "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n\
             sandbox:x:{INSIDE_ID}:{INSIDE_ID}:sandbox:/work:/bin/sh\n\
             nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
    )?;
    file(
        "etc/group",
        &format!("root:x:0:\nsandbox:x:{INSIDE_ID}:\nnogroup:x:65534:\n"),
    )?;
    file("etc/hosts", "127.0.0.1 localhost sandbox\n::1 localhost\n")?;
    file("etc/hostname", "sandbox\n")?;
    file(
        "etc/nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files dns\n",
    )?;
    file("etc/resolv.conf", RESOLV_CONF)?;
    copy_loader_cache(root)?;
    for p in points {
        let rel = p.target.strip_prefix("/").unwrap_or(&p.target);
        let full = root.join(rel);
        if let Some(parent) = full.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(io_at(parent, "create"))?;
        }
        if p.dir {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&full)
                .map_err(io_at(&full, "create"))?;
        } else if !full.exists() {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&full)
                .map_err(io_at(&full, "create"))?;
        }
    }
    Ok(())
}

/// One run's prepared, detached mounts.
#[derive(Debug)]
pub(crate) struct RunMounts {
    /// The read-only clone of the skeleton.
    pub root: OwnedFd,
    /// Mounts and their targets relative to the root, in attach order.
    pub mounts: Vec<(OwnedFd, CString)>,
    /// The scratch tmpfs (also in `mounts`, as `work`), kept for read-back.
    pub scratch: Arc<OwnedFd>,
    /// The `/tmp` tmpfs's mount (for the Landlock rule).
    pub tmp: Arc<OwnedFd>,
    /// `/dev/null`, `/dev/zero`, `/dev/urandom` clones (for the Landlock rule).
    pub devices: Vec<Arc<OwnedFd>>,
}

const RO: u64 = libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;

fn clone_tree(source: &Path, recursive: bool, what: &'static str) -> Result<OwnedFd, SandboxError> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    rustix::mount::open_tree(CWD, source, flags).map_err(|e| SandboxError::SetupFailed {
        step: what,
        source: e.into(),
    })
}

fn setattr(
    fd: &OwnedFd,
    set: u64,
    clear: u64,
    recursive: bool,
    what: &'static str,
) -> Result<(), SandboxError> {
    sys::mount_setattr(fd.as_fd(), set, clear, recursive)
        .map_err(|source| SandboxError::SetupFailed { step: what, source })
}

/// A fresh tmpfs, owned by the sandbox's host uid, limited in size and inodes.
pub(crate) fn tmpfs(
    bytes: u64,
    inodes: u64,
    uid: u32,
    what: &'static str,
) -> Result<OwnedFd, SandboxError> {
    let err = |e: rustix::io::Errno| SandboxError::SetupFailed {
        step: what,
        source: e.into(),
    };
    let fs = rustix::mount::fsopen(c"tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).map_err(err)?;
    let uid = uid.to_string();
    for (k, v) in [
        ("size", bytes.to_string()),
        ("nr_inodes", inodes.to_string()),
        ("mode", "755".to_owned()),
        ("uid", uid.clone()),
        ("gid", uid),
    ] {
        rustix::mount::fsconfig_set_string(fs.as_fd(), k, v.as_str()).map_err(err)?;
    }
    rustix::mount::fsconfig_create(fs.as_fd()).map_err(err)?;
    rustix::mount::fsmount(
        fs.as_fd(),
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
    .map_err(err)
}

fn rel(target: &str) -> CString {
    // Targets are built here from checked paths: no NUL byte can occur.
    CString::new(target.trim_start_matches('/')).unwrap_or_default()
}

/// Prepares one run's mounts.
pub(crate) fn prepare(
    skeleton: &Skeleton,
    binds: &[Bind],
    certs: bool,
    limits: &Limits,
    uid: u32,
) -> Result<RunMounts, SandboxError> {
    let root = clone_tree(&skeleton.path, false, "clone the root skeleton")?;
    setattr(
        &root,
        RO | libc::MOUNT_ATTR_NOEXEC,
        0,
        false,
        "make the root read-only",
    )?;
    let mut mounts = Vec::with_capacity(8 + binds.len());

    let usr = clone_tree(Path::new("/usr"), true, "clone /usr")?;
    setattr(&usr, RO, 0, true, "make /usr read-only")?;
    mounts.push((usr, rel("usr")));
    for name in &skeleton.top_dirs {
        let d = clone_tree(&Path::new("/").join(name), true, "clone a top-level folder")?;
        setattr(&d, RO, 0, true, "make a top-level folder read-only")?;
        mounts.push((d, rel(name)));
    }

    let mut devices = Vec::with_capacity(3);
    for node in ["null", "zero", "urandom"] {
        let host = Path::new("/dev").join(node);
        let d = clone_tree(&host, false, "clone a device node")?;
        // Writable device nodes (writing /dev/null changes no filesystem); no suid, no exec.
        setattr(
            &d,
            libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC,
            libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_RDONLY,
            false,
            "set the device nodes' flags",
        )?;
        let d = Arc::new(d);
        devices.push(d.clone());
        mounts.push((dup(&d)?, rel(&format!("dev/{node}"))));
    }

    let tmp = Arc::new(tmpfs(
        limits.tmp_bytes,
        limits.scratch_inodes,
        uid,
        "mount /tmp",
    )?);
    mounts.push((dup(&tmp)?, rel("tmp")));
    let scratch = Arc::new(tmpfs(
        limits.scratch_bytes,
        limits.scratch_inodes,
        uid,
        "mount the scratch folder",
    )?);
    mounts.push((dup(&scratch)?, rel("work")));

    for (i, b) in binds.iter().enumerate() {
        if b.overlay.is_some() {
            // Mounted before the start (`overlay::prepare`): given to the run's uid now.
            let Some(prepared) = &b.prepared else {
                return Err(SandboxError::config(
                    format!("binds[{i}]"),
                    "an overlay bind is for one-shot runs (`Sandbox::run`), whose caller merges its layer",
                ));
            };
            mounts.push((prepared.attach(uid)?, rel(&b.target.to_string_lossy())));
            continue;
        }
        if b.writable {
            own_tree(&b.source, uid)?;
            // One folder, not the mounts below it; writable, and executable only for a
            // package cache (`Bind::package_cache`); never set-uid, never devices.
            let m = clone_tree(&b.source, false, "clone a writable bind")?;
            let mut set = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
            let mut clear = libc::MOUNT_ATTR_RDONLY;
            if b.exec {
                clear |= libc::MOUNT_ATTR_NOEXEC;
            } else {
                set |= libc::MOUNT_ATTR_NOEXEC;
            }
            setattr(&m, set, clear, false, "set a writable bind's flags")?;
            mounts.push((m, rel(&b.target.to_string_lossy())));
            continue;
        }
        let m = clone_tree(&b.source, true, "clone a bind")?;
        let mut set = RO;
        if !b.exec {
            set |= libc::MOUNT_ATTR_NOEXEC;
        }
        setattr(&m, set, 0, true, "make a bind read-only")?;
        mounts.push((m, rel(&b.target.to_string_lossy())));
    }
    if certs && Path::new("/etc/ssl/certs").is_dir() {
        let m = clone_tree(Path::new("/etc/ssl/certs"), true, "clone /etc/ssl/certs")?;
        setattr(
            &m,
            RO | libc::MOUNT_ATTR_NOEXEC,
            0,
            true,
            "make /etc/ssl/certs read-only",
        )?;
        mounts.push((m, rel("etc/ssl/certs")));
    }
    Ok(RunMounts {
        root,
        mounts,
        scratch,
        tmp,
        devices,
    })
}

/// Folders below a writable bind deeper than this are not re-owned (each level holds
/// an fd while the tree is walked).
const MAX_WRITABLE_DEPTH: usize = 64;

/// Gives a writable bind's tree to the run's uid (and the gid of that number), so the
/// sandbox may change what earlier runs, with other pool uids, or the supervisor left
/// there. Never follows a symlink: folders are opened beneath their parent with
/// `O_NOFOLLOW`, and a symlink is re-owned itself (`AT_SYMLINK_NOFOLLOW`), never its
/// target. An entry that changes while it is walked (another run of the same folder)
/// is skipped, not followed.
fn own_tree(source: &Path, uid: u32) -> Result<(), SandboxError> {
    let top = rustix::fs::open(
        source,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SandboxError::BindSourceNotFound {
        path: source.to_owned(),
        source: std::io::Error::from(e),
    })?;
    own_folder(source, top, uid, 0)
}

pub(crate) fn own_folder(
    source: &Path,
    dir: OwnedFd,
    uid: u32,
    depth: usize,
) -> Result<(), SandboxError> {
    use rustix::fs::{AtFlags, FileType};
    let io = |what: &str, e: rustix::io::Errno| {
        SandboxError::io(
            format!("cannot {what} in the writable bind {}", source.display()),
            e.into(),
        )
    };
    if depth > MAX_WRITABLE_DEPTH {
        // Left as it is rather than failing every later run of the folder: the run
        // cannot change what lies this deep, and nothing is followed.
        return Ok(());
    }
    let owner = Some(rustix::process::Uid::from_raw(uid));
    let group = Some(rustix::process::Gid::from_raw(uid));
    let st = rustix::fs::fstat(&dir).map_err(|e| io("stat a folder", e))?;
    if st.st_uid != uid || st.st_gid != uid {
        rustix::fs::fchown(&dir, owner, group).map_err(|e| io("re-own a folder", e))?;
    }
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir).map_err(|e| io("list a folder", e))? {
        let entry = entry.map_err(|e| io("list a folder", e))?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    for name in names {
        let st = match rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(io("stat an entry", e)),
        };
        if st.st_uid != uid || st.st_gid != uid {
            match rustix::fs::chownat(
                &dir,
                name.as_c_str(),
                owner,
                group,
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(io("re-own an entry", e)),
            }
        }
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            match rustix::fs::openat(
                &dir,
                name.as_c_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(sub) => own_folder(source, sub, uid, depth + 1)?,
                // Replaced by a symlink or a file, or removed, since the stat: skipped.
                Err(
                    rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NOENT,
                ) => {}
                Err(e) => return Err(io("open a folder", e)),
            }
        }
    }
    Ok(())
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, SandboxError> {
    fd.try_clone()
        .map_err(|e| SandboxError::io("cannot duplicate a mount fd", e))
}

/// What a scratch path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symlink (never followed).
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

/// A scratch path's kind, size and host owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Its kind.
    pub kind: FileKind,
    /// Its size in bytes.
    pub size: u64,
    /// The host uid owning it.
    pub uid: u32,
    /// The host gid owning it.
    pub gid: u32,
}

/// The scratch folder of a run, readable after the run with beneath-only opens.
#[derive(Debug, Clone)]
pub struct Scratch {
    fd: Arc<OwnedFd>,
}

fn check_relative(path: &Path) -> Result<(), SandboxError> {
    use std::path::Component;
    let ok = !path.as_os_str().is_empty()
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(())
    } else {
        Err(SandboxError::FileRefused {
            path: path.to_owned(),
            reason: "the path must be relative to the scratch folder, without `.` or `..`".into(),
        })
    }
}

fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

impl Scratch {
    pub(crate) fn new(fd: Arc<OwnedFd>) -> Scratch {
        Scratch { fd }
    }

    /// Reads a regular file the tool wrote, at most `max_bytes`. A symlink anywhere on
    /// the path, a path leaving the folder, a FIFO, device or folder, and a file larger
    /// than the cap are refused: nothing the tool planted makes the supervisor read a
    /// host file or block.
    pub fn read(&self, path: &Path, max_bytes: u64) -> Result<Vec<u8>, SandboxError> {
        check_relative(path)?;
        let refused = |reason: String| SandboxError::FileRefused {
            path: path.to_owned(),
            reason,
        };
        let fd = rustix::fs::openat2(
            self.fd.as_fd(),
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
            resolve(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => refused("a symlink is on the path".into()),
            rustix::io::Errno::XDEV => refused("the path leaves the scratch folder".into()),
            rustix::io::Errno::NOENT => refused("no such file".into()),
            e => refused(format!("cannot open it: {e}")),
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| refused(format!("cannot stat it: {e}")))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(refused("it is not a regular file".into()));
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size > max_bytes {
            return Err(SandboxError::FileTooLarge {
                path: path.to_owned(),
                size,
                max: max_bytes,
            });
        }
        let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        std::fs::File::from(fd)
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| refused(format!("cannot read it: {e}")))?;
        if out.len() as u64 > max_bytes {
            return Err(refused(format!(
                "it grew past the cap of {max_bytes} bytes"
            )));
        }
        Ok(out)
    }

    /// What a path of the scratch folder is, without following a symlink on it (a
    /// symlink as the last component is reported as one).
    pub fn stat(&self, path: &Path) -> Result<FileStat, SandboxError> {
        check_relative(path)?;
        let fd = rustix::fs::openat2(
            self.fd.as_fd(),
            path,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )
        .map_err(|e| SandboxError::FileRefused {
            path: path.to_owned(),
            reason: match e {
                rustix::io::Errno::LOOP => "a symlink is on the path".into(),
                rustix::io::Errno::NOENT => "no such file".into(),
                e => format!("cannot open it: {e}"),
            },
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| SandboxError::FileRefused {
            path: path.to_owned(),
            reason: format!("cannot stat it: {e}"),
        })?;
        let kind = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::RegularFile => FileKind::File,
            rustix::fs::FileType::Directory => FileKind::Dir,
            rustix::fs::FileType::Symlink => FileKind::Symlink,
            _ => FileKind::Other,
        };
        Ok(FileStat {
            size: u64::try_from(st.st_size).unwrap_or(0),
            uid: st.st_uid,
            gid: st.st_gid,
            kind,
        })
    }

    /// Writes a file before the run (its folders created), owned by the sandbox's uid.
    pub(crate) fn write(&self, path: &Path, contents: &[u8], uid: u32) -> Result<(), SandboxError> {
        check_relative(path)?;
        let io = |e: rustix::io::Errno| {
            SandboxError::io(
                format!("cannot write {} into the scratch folder", path.display()),
                e.into(),
            )
        };
        let owner = Some(rustix::process::Uid::from_raw(uid));
        let group = Some(rustix::process::Gid::from_raw(uid));
        let mut sofar = PathBuf::new();
        let parents: Vec<_> = path
            .parent()
            .into_iter()
            .flat_map(|p| p.components())
            .collect();
        for c in parents {
            sofar.push(c);
            match rustix::fs::mkdirat(self.fd.as_fd(), &sofar, Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    let d = rustix::fs::openat2(
                        self.fd.as_fd(),
                        &sofar,
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                        Mode::empty(),
                        resolve(),
                    )
                    .map_err(io)?;
                    rustix::fs::chownat(&d, c"", owner, group, rustix::fs::AtFlags::EMPTY_PATH)
                        .map_err(io)?;
                }
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io(e)),
            }
        }
        let fd = rustix::fs::openat2(
            self.fd.as_fd(),
            path,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
            resolve(),
        )
        .map_err(io)?;
        rustix::fs::fchown(&fd, owner, group).map_err(io)?;
        std::io::Write::write_all(&mut std::fs::File::from(fd), contents).map_err(|e| {
            SandboxError::io(
                format!("cannot write {} into the scratch folder", path.display()),
                e,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(path: &Path, days: u64) {
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 24 * 3600);
        let secs = then
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let ts = rustix::fs::Timespec {
            tv_sec: i64::try_from(secs).unwrap_or_default(),
            tv_nsec: 0,
        };
        rustix::fs::utimensat(
            CWD,
            path,
            &rustix::fs::Timestamps {
                last_access: ts,
                last_modification: ts,
            },
            rustix::fs::AtFlags::empty(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_sweep_removes_skeletons_unused_for_the_idle_time_and_dead_builds_only() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let roots = dir.path().join("roots");
        let make = |name: &str| {
            let p = roots.join(name);
            std::fs::create_dir_all(p.join("etc")).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(p.join("etc/passwd"), "x").unwrap_or_else(|e| panic!("{e}"));
            p
        };
        let old = make("root-old");
        let held = make("root-held");
        let recent = make("root-recent");
        // A build left by a process that is gone, and one by this live process.
        let mut child = std::process::Command::new("true")
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let dead_pid = child.id();
        child.wait().unwrap_or_else(|e| panic!("{e}"));
        let dead_build = make(&format!(".build-{dead_pid}-1"));
        let live_build = make(&format!(".build-{}-2", std::process::id()));
        for p in [&old, &held] {
            age(p, 30);
        }
        // Another supervisor holds `root-held` (as `lock_in_use` does).
        let holder = rustix::fs::open(
            &held,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        rustix::fs::flock(&holder, rustix::fs::FlockOperation::LockShared)
            .unwrap_or_else(|e| panic!("{e}"));

        sweep(dir.path(), SKELETON_IDLE);
        assert!(!old.exists(), "an unused month-old skeleton stayed");
        assert!(held.exists(), "a held skeleton was removed");
        assert!(recent.exists(), "a recently used skeleton was removed");
        assert!(!dead_build.exists(), "a dead process's build stayed");
        assert!(live_build.exists(), "a live process's build was removed");
        let left: Vec<_> = std::fs::read_dir(&roots)
            .unwrap_or_else(|e| panic!("{e}"))
            .flatten()
            .map(|e| e.file_name())
            .collect();
        // The three kept, and the sweep's marker.
        assert_eq!(left.len(), 4, "{left:?}");

        // Once released, held and old, it goes too; a use marks a skeleton recent.
        drop(holder);
        let kept = lock_in_use(&recent)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("the recent skeleton was not there"));
        age(&recent, 30);
        // Within the hour a sweep does nothing; an hour later it looks again.
        sweep(dir.path(), SKELETON_IDLE);
        assert!(held.exists(), "a second sweep within the hour looked again");
        age(&roots.join(".last-sweep"), 1);
        sweep(dir.path(), SKELETON_IDLE);
        assert!(!held.exists());
        assert!(recent.exists(), "a skeleton in use was removed");
        drop(kept);
        let used = lock_in_use(&recent)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("the recent skeleton was not there"));
        drop(used);
        age(&roots.join(".last-sweep"), 1);
        sweep(dir.path(), SKELETON_IDLE);
        assert!(recent.exists(), "a skeleton just used was removed");
    }
}
