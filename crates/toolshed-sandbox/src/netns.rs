//! Fresh network namespaces made ahead of the runs that use them: creating one (every
//! network subsystem's per-namespace state, loopback brought up) is the largest single
//! cost of starting a sandbox, and none of it depends on the run. The janitor thread
//! makes them; the spawner thread enters one right before it clones a sandbox (which
//! then inherits it instead of creating its own) and leaves it again. Each namespace
//! serves exactly one sandbox and is never shared.
//!
//! They are kept in a [`Stock`](crate::stock::Stock).

use std::os::fd::{AsFd, OwnedFd};

use rustix::thread::LinkNameSpaceType;

/// Creates a network namespace with its loopback up, on the calling thread, and puts
/// the thread back in its own namespace.
pub(crate) fn create() -> std::io::Result<OwnedFd> {
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
