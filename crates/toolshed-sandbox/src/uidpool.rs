//! Leases of the dedicated host uids: each running sandbox holds one alone, across every
//! supervisor process of the host. A lease is an exclusive `flock` on a file named after
//! the uid in the runtime folder, so it ends when its holder closes it or dies.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::fs::FlockOperation;

use crate::config::UidPool;
use crate::error::SandboxError;

/// The pool: where its lease files live and where the next search starts.
#[derive(Debug)]
pub(crate) struct Pool {
    pool: UidPool,
    dir: PathBuf,
    next: AtomicU32,
}

/// One leased uid (and the gid of the same number); released on drop.
#[derive(Debug)]
pub(crate) struct Lease {
    uid: u32,
    _lock: File,
}

impl Lease {
    /// The host uid and gid.
    pub(crate) fn id(&self) -> u32 {
        self.uid
    }
}

impl Pool {
    pub(crate) fn new(pool: UidPool, runtime_dir: &Path) -> Result<Pool, SandboxError> {
        let dir = runtime_dir.join("uids");
        std::fs::create_dir_all(&dir).map_err(|e| {
            SandboxError::io(
                format!("cannot create the uid lease folder {}", dir.display()),
                e,
            )
        })?;
        // Start each process at a different place, so supervisors rarely contend.
        let start = std::process::id() % pool.count;
        Ok(Pool {
            pool,
            dir,
            next: AtomicU32::new(start),
        })
    }

    /// Leases a free uid.
    pub(crate) fn lease(&self) -> Result<Lease, SandboxError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.pool.count {
            let offset = start.wrapping_add(i) % self.pool.count;
            let uid = self.pool.first + offset;
            let path = self.dir.join(uid.to_string());
            let file = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| {
                    SandboxError::io(format!("cannot open the uid lease {}", path.display()), e)
                })?;
            match rustix::fs::flock(file.as_fd(), FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    self.next.store(offset.wrapping_add(1), Ordering::Relaxed);
                    return Ok(Lease { uid, _lock: file });
                }
                Err(rustix::io::Errno::WOULDBLOCK) => continue,
                Err(e) => {
                    return Err(SandboxError::io(
                        format!("cannot lock the uid lease {}", path.display()),
                        e.into(),
                    ));
                }
            }
        }
        Err(SandboxError::UidPoolExhausted {
            first: self.pool.first,
            count: self.pool.count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leased_uid_is_not_leased_twice_until_released() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let pool = Pool::new(
            UidPool {
                first: 3_000_000_000,
                count: 2,
            },
            dir.path(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let a = pool.lease().unwrap_or_else(|e| panic!("{e}"));
        let b = pool.lease().unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(a.id(), b.id());
        let e = pool.lease().unwrap_err();
        assert!(matches!(e, SandboxError::UidPoolExhausted { .. }), "{e}");
        let freed = a.id();
        drop(a);
        assert_eq!(pool.lease().map(|l| l.id()).ok(), Some(freed));
    }
}
