//! Fresh network namespaces made ahead of the runs that use them: creating one (every
//! network subsystem's per-namespace state, loopback brought up) is the largest single
//! cost of starting a sandbox, and none of it depends on the run. The janitor thread
//! makes them; the spawner thread enters one right before it clones a sandbox (which
//! then inherits it instead of creating its own) and leaves it again. Each namespace
//! serves exactly one sandbox and is never shared.
//!
//! The stock starts with one namespace (made while the supervisor prepares its first
//! run) and is refilled from the second run on, so a one-shot process (the CLI) makes
//! none it does not use.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::thread::LinkNameSpaceType;

/// The stock.
#[derive(Debug, Default)]
pub(crate) struct NetnsStock {
    ready: Mutex<Vec<OwnedFd>>,
    taken: AtomicU64,
    /// How many are kept ready (0: none).
    size: usize,
}

impl NetnsStock {
    pub(crate) fn new(size: usize) -> Arc<NetnsStock> {
        let stock = Arc::new(NetnsStock {
            size,
            ..NetnsStock::default()
        });
        stock.fill(size.min(1));
        stock
    }

    /// How many are ready now.
    pub(crate) fn ready(&self) -> usize {
        self.len()
    }

    fn fill(self: &Arc<Self>, target: usize) {
        if target == 0 {
            return;
        }
        let me = self.clone();
        crate::janitor::later(move || {
            while me.len() < target {
                match create() {
                    Ok(fd) => me.lock().push(fd),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot prepare a network namespace");
                        return;
                    }
                }
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<OwnedFd>> {
        self.ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    /// A fresh namespace, if one is ready (else the sandbox creates its own).
    pub(crate) fn take(self: &Arc<Self>) -> Option<OwnedFd> {
        let fd = self.lock().pop();
        if self.taken.fetch_add(1, Ordering::Relaxed) >= 1 {
            self.fill(self.size);
        }
        fd
    }

    /// Drops the stock (the supervisor is shutting down).
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}

/// Creates a network namespace with its loopback up, on the calling thread, and puts
/// the thread back in its own namespace.
fn create() -> std::io::Result<OwnedFd> {
    let own = open_thread_netns()?;
    crate::sys::unshare_net()?;
    let made = (|| {
        crate::sys::loopback_up()?;
        open_thread_netns()
    })();
    rustix::thread::move_into_link_name_space(own.as_fd(), Some(LinkNameSpaceType::Network))?;
    made
}

fn open_thread_netns() -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        "/proc/thread-self/ns/net",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// Enters `netns` on the calling thread for the duration of `f`.
pub(crate) fn within<T>(netns: &OwnedFd, f: impl FnOnce() -> T) -> std::io::Result<T> {
    let own = open_thread_netns()?;
    rustix::thread::move_into_link_name_space(netns.as_fd(), Some(LinkNameSpaceType::Network))?;
    let out = f();
    rustix::thread::move_into_link_name_space(own.as_fd(), Some(LinkNameSpaceType::Network))?;
    Ok(out)
}
