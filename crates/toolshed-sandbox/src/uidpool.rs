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

tokio::task_local! {
    /// The uid a start would rather lease (set by `Sandbox::run` and `Sandbox::spawn`
    /// around the start): the owner of its writable bind's folder, so that giving the
    /// folder's tree to the run's uid only stats, when that uid is free. Only a
    /// preference: a uid another sandbox holds is never leased twice.
    pub(crate) static PREFERRED: u32;
}

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

    /// Leases a free uid: the one [`PREFERRED`] names when it is in the pool and free,
    /// else the next free one.
    pub(crate) fn lease(&self) -> Result<Lease, SandboxError> {
        if let Ok(uid) = PREFERRED.try_with(|u| *u)
            && uid >= self.pool.first
            && u64::from(uid) < u64::from(self.pool.first) + u64::from(self.pool.count)
            && let Some(lease) = self.try_lease(uid)?
        {
            return Ok(lease);
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.pool.count {
            let offset = start.wrapping_add(i) % self.pool.count;
            let uid = self.pool.first + offset;
            if let Some(lease) = self.try_lease(uid)? {
                self.next.store(offset.wrapping_add(1), Ordering::Relaxed);
                return Ok(lease);
            }
        }
        Err(SandboxError::UidPoolExhausted {
            first: self.pool.first,
            count: self.pool.count,
        })
    }

    /// Leases `uid` if it is free.
    fn try_lease(&self, uid: u32) -> Result<Option<Lease>, SandboxError> {
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
            Ok(()) => Ok(Some(Lease { uid, _lock: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(SandboxError::io(
                format!("cannot lock the uid lease {}", path.display()),
                e.into(),
            )),
        }
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

    #[tokio::test]
    async fn a_preferred_uid_is_leased_when_free_and_only_then() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let first = 3_000_000_000;
        let pool =
            Pool::new(UidPool { first, count: 4 }, dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let lease = |uid| PREFERRED.sync_scope(uid, || pool.lease().map(|l| l.id()).ok());
        let held =
            PREFERRED.sync_scope(first + 2, || pool.lease().unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(held.id(), first + 2);
        // Held: another free uid instead, never the same one twice.
        assert_ne!(lease(first + 2), Some(first + 2));
        // Outside the pool: ignored.
        assert!(lease(7).is_some_and(|u| u >= first && u < first + 4));
        drop(held);
        assert_eq!(lease(first + 2), Some(first + 2));
    }
}
