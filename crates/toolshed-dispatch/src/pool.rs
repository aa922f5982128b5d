//! Warm worker pools: up to N long-lived processes per endpoint, each serving one request
//! at a time. A worker that crashed, broke the protocol or timed out is killed and
//! replaced; workers started from an older version of the tool's file are retired.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Mode;
use crate::endpoint::Endpoint;
use crate::error::DispatchError;
use crate::launcher::Launcher;
use crate::process::{FileStamp, Proc};

/// The workers of one endpoint.
pub(crate) struct Pool {
    endpoint: Endpoint,
    launcher: Arc<Launcher>,
    size: usize,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Proc>>,
}

/// One worker, held by one call.
pub(crate) struct Lease {
    proc: Proc,
    pool: Arc<Pool>,
    permit: OwnedSemaphorePermit,
    /// Whether the worker was started for this call (not reused).
    pub fresh: bool,
}

impl Pool {
    pub fn new(endpoint: Endpoint, launcher: Arc<Launcher>, size: usize) -> Arc<Pool> {
        let size = size.max(1);
        Arc::new(Pool {
            endpoint,
            launcher,
            size,
            permits: Arc::new(Semaphore::new(size)),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Wait for a free slot, then reuse an idle worker or start one.
    pub async fn acquire(self: &Arc<Self>, tool: &str) -> Result<Lease, DispatchError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| DispatchError::Io {
                what: format!("the worker pool of tool {tool} is shut down"),
                source: std::io::Error::other("pool closed"),
            })?;
        if let Some(proc) = self.take_idle() {
            return Ok(Lease {
                proc,
                pool: self.clone(),
                permit,
                fresh: false,
            });
        }
        let proc = self
            .launcher
            .spawn(&self.endpoint, tool, Mode::Pool)
            .await?;
        Ok(Lease {
            proc,
            pool: self.clone(),
            permit,
            fresh: true,
        })
    }

    /// Start workers until the pool is full (or every slot is busy).
    pub async fn warm(self: &Arc<Self>, tool: &str) -> Result<usize, DispatchError> {
        let mut started = 0;
        loop {
            let idle = self.idle.lock().map(|i| i.len()).unwrap_or(self.size);
            if idle >= self.size {
                break;
            }
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                break;
            };
            let proc = self
                .launcher
                .spawn(&self.endpoint, tool, Mode::Pool)
                .await?;
            self.put(proc);
            drop(permit);
            started += 1;
        }
        Ok(started)
    }

    /// How many workers are idle.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map(|i| i.len()).unwrap_or(0)
    }

    fn take_idle(&self) -> Option<Proc> {
        let current = self.endpoint.path().and_then(FileStamp::of);
        let mut stale = Vec::new();
        let found = {
            let mut idle = self.idle.lock().ok()?;
            loop {
                let Some(mut proc) = idle.pop() else {
                    break None;
                };
                if proc.has_exited() || proc.stamp != current {
                    stale.push(proc);
                    continue;
                }
                break Some(proc);
            }
        };
        // Killed outside the lock.
        drop(stale);
        found
    }

    fn put(&self, mut proc: Proc) {
        if proc.has_exited() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.size
        {
            idle.push(proc);
        }
    }

    /// Start a replacement in the background, so the next call finds a warm worker.
    fn replenish(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.clone();
        handle.spawn(async move {
            let Ok(permit) = pool.permits.clone().try_acquire_owned() else {
                return;
            };
            if pool.idle_count() >= pool.size {
                return;
            }
            match pool
                .launcher
                .spawn(&pool.endpoint, "replacement", Mode::Pool)
                .await
            {
                Ok(proc) => pool.put(proc),
                Err(e) => tracing::warn!(
                    target: "toolshed::dispatch",
                    endpoint = %pool.endpoint,
                    error = %e.message(),
                    "cannot start a replacement worker"
                ),
            }
            drop(permit);
        });
    }
}

impl Lease {
    /// The worker.
    pub fn proc(&mut self) -> &mut Proc {
        &mut self.proc
    }

    /// Give a healthy worker back.
    pub fn release(self) {
        let Lease {
            proc, pool, permit, ..
        } = self;
        pool.put(proc);
        drop(permit);
    }

    /// Kill the worker and start a replacement.
    pub fn discard(self) {
        let Lease {
            proc, pool, permit, ..
        } = self;
        drop(proc);
        drop(permit);
        pool.replenish();
    }
}
