//! The free-disk guard (`toolshed serve --min-free-disk-mb`): the server watches the
//! filesystems it writes runs to (the SQLite journal's folder and the attachments' blob
//! folder) and refuses new runs with 503 `STORAGE_FULL` while one has less free space
//! than the floor, instead of failing halfway through a write when the disk is full.
//!
//! A background task reads `statvfs` every [`CHECK_INTERVAL`]; a request reads one
//! atomic. With PostgreSQL the journal's disk is the database server's, which this
//! process cannot see: only the blob folder is watched then (the start-up log says so).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often the free space is read.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// The default floor: 1 GiB.
pub const DEFAULT_MIN_FREE_MB: u64 = 1024;

/// What the guard watches, and the floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageSettings {
    /// Below this many free bytes on a watched filesystem, new runs are refused. `0`
    /// turns the guard off.
    pub min_free_bytes: u64,
}

impl Default for StorageSettings {
    fn default() -> Self {
        StorageSettings {
            min_free_bytes: DEFAULT_MIN_FREE_MB * 1024 * 1024,
        }
    }
}

/// The guard: the least free space seen on the watched folders at the last check.
#[derive(Debug)]
pub struct StorageGuard {
    folders: Vec<PathBuf>,
    min_free_bytes: u64,
    /// The least free bytes of the watched filesystems at the last check
    /// (`u64::MAX` before the first, or when none can be read).
    free: AtomicU64,
}

impl StorageGuard {
    /// A guard over `folders` (those that do not exist yet are watched through their
    /// nearest existing parent), checked once now.
    pub fn new(folders: Vec<PathBuf>, settings: &StorageSettings) -> Arc<StorageGuard> {
        let guard = Arc::new(StorageGuard {
            folders,
            min_free_bytes: settings.min_free_bytes,
            free: AtomicU64::new(u64::MAX),
        });
        guard.check();
        guard
    }

    /// Read the free space again.
    pub fn check(&self) {
        let least = self
            .folders
            .iter()
            .filter_map(|f| free_bytes(f))
            .min()
            .unwrap_or(u64::MAX);
        self.free.store(least, Ordering::Relaxed);
    }

    /// Check every [`CHECK_INTERVAL`] until the task is aborted.
    pub(crate) async fn watch(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(CHECK_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let me = self.clone();
            // statvfs is a blocking system call (a slow network filesystem may hang it).
            let _ = tokio::task::spawn_blocking(move || me.check()).await;
        }
    }

    /// `Err((free, floor))` while a watched filesystem is below the floor.
    pub fn admit(&self) -> Result<(), (u64, u64)> {
        let free = self.free.load(Ordering::Relaxed);
        if self.min_free_bytes > 0 && free < self.min_free_bytes {
            return Err((free, self.min_free_bytes));
        }
        Ok(())
    }

    /// The folders watched.
    pub fn folders(&self) -> &[PathBuf] {
        &self.folders
    }
}

/// Free bytes for unprivileged users on the filesystem of `path` (or of its nearest
/// existing parent).
fn free_bytes(path: &Path) -> Option<u64> {
    let mut at = Some(path);
    while let Some(p) = at {
        if let Ok(s) = rustix::fs::statvfs(p) {
            return Some(s.f_bavail.saturating_mul(s.f_frsize));
        }
        at = p.parent();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_above_the_free_space_refuses_and_zero_turns_it_off() {
        let dir = std::env::temp_dir();
        let free = free_bytes(&dir).unwrap();
        let open = StorageGuard::new(vec![dir.clone()], &StorageSettings { min_free_bytes: 1 });
        assert_eq!(open.admit(), Ok(()));
        let full = StorageGuard::new(
            vec![dir.join("not/yet/made")],
            &StorageSettings {
                min_free_bytes: free.saturating_mul(4),
            },
        );
        let (seen, floor) = full.admit().unwrap_err();
        assert!(seen < floor);
        let off = StorageGuard::new(vec![dir], &StorageSettings { min_free_bytes: 0 });
        assert_eq!(off.admit(), Ok(()));
    }
}
