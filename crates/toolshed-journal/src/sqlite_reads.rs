//! Read connections to one SQLite file, shared by the journal and the registry store:
//! at most a fixed number of reads at once, each on a pooled read-only connection with
//! its statement cache, run on tokio's blocking threads (no SQLite call ever runs on a
//! worker thread). More concurrent reads than connections would only open and close
//! connections and blocking threads that the cores cannot run anyway.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

/// Why a read did not run its closure to the end.
#[derive(Debug)]
pub enum ReadFailure {
    /// A read connection could not be opened.
    Open {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The pool is closed.
    Closed,
    /// The blocking task panicked or was cancelled.
    Crashed(String),
}

/// The read side of one SQLite file. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    busy_timeout: Duration,
    statement_cache: usize,
}

impl Readers {
    /// At most `max` reads of `path` at once; connections wait `busy_timeout` for a lock
    /// and cache up to `statement_cache` prepared statements.
    pub fn new(path: &Path, max: usize, busy_timeout: Duration, statement_cache: usize) -> Self {
        Readers {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::with_capacity(max)),
            permits: Arc::new(Semaphore::new(max.max(1))),
            busy_timeout,
            statement_cache,
        }
    }

    /// Run `f` on a read connection (read-only: `PRAGMA query_only`).
    pub async fn read<T, E, F>(self: &Arc<Self>, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<ReadFailure> + Send + 'static,
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
    {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| ReadFailure::Closed)?;
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let conn = pool.take().map_err(E::from)?;
            let result = f(&conn);
            pool.put(conn);
            drop(permit);
            result
        })
        .await
        .map_err(|e| ReadFailure::Crashed(e.to_string()))?
    }

    fn take(&self) -> Result<Connection, ReadFailure> {
        if let Some(conn) = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Ok(conn);
        }
        let open = || -> rusqlite::Result<Connection> {
            let conn = Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(self.busy_timeout)?;
            conn.set_prepared_statement_cache_capacity(self.statement_cache);
            conn.execute_batch("PRAGMA query_only = ON")?;
            Ok(conn)
        };
        open().map_err(|source| ReadFailure::Open {
            path: self.path.clone(),
            source,
        })
    }

    fn put(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // The permits bound the connections in use, so the idle list never outgrows them.
        idle.push(conn);
    }
}
