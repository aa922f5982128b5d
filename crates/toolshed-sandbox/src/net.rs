//! Outbound network for a sandbox that asks for it: slirp4netns, a user-mode TCP/IP
//! stack, attached to the sandbox's own network namespace (a tap device, 10.0.2.100/24,
//! DNS at 10.0.2.3). It runs outside the sandbox, confined by its own `--enable-sandbox`
//! and `--enable-seccomp`, and `--disable-host-loopback` refuses connections to the
//! host's 127.0.0.0/8 (including through the 10.0.2.2 gateway alias). Its lifetime is
//! the supervisor's: it reports readiness on one pipe and exits when the other closes.
//! It runs in a cgroup whose eBPF filter refuses the host's own addresses
//! ([`crate::hostnet`]).

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::error::SandboxError;
use crate::hostnet::HelperCgroup;
use crate::sys;

/// How long the helper may take to configure the namespace.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running network helper; dropping it ends it.
#[derive(Debug)]
pub(crate) struct NetHelper {
    child: tokio::process::Child,
    exit: Option<OwnedFd>,
    /// Declared after `child`: removed once the helper is gone.
    _cgroup: HelperCgroup,
}

fn fix() -> String {
    "install slirp4netns (Debian: `apt-get install slirp4netns`) or set `network_helper` to its path; or run the tool with the network off".into()
}

/// Starts the helper for the sandbox whose first process is `pid` and waits until its
/// interface is up.
pub(crate) async fn start(
    helper: &Path,
    pid: i32,
    cgroup2: Option<&Path>,
    parent: &str,
) -> Result<NetHelper, SandboxError> {
    let cgroup2 = cgroup2.ok_or_else(|| SandboxError::NetworkUnavailable {
        reason: "no cgroup v2 hierarchy is mounted, so the network helper cannot be kept from the host's own addresses".into(),
        fix: "mount cgroup2 (e.g. `mount -t cgroup2 none /sys/fs/cgroup/unified`), or run the tool with the network off".into(),
    })?;
    let cgroup = HelperCgroup::create(cgroup2, parent).map_err(|reason| {
        SandboxError::NetworkUnavailable {
            reason,
            fix: "run the supervisor as root on a kernel with cgroup v2 BPF (CONFIG_CGROUP_BPF), or run the tool with the network off".into(),
        }
    })?;
    let procs = cgroup
        .procs()
        .map_err(|reason| SandboxError::NetworkUnavailable {
            reason,
            fix: "check the cgroup v2 mount".into(),
        })?;
    let pipe = |what: &str| {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| SandboxError::io(format!("cannot create the {what} pipe"), e.into()))
    };
    let (ready_r, ready_w) = pipe("network ready")?;
    let (exit_r, exit_w) = pipe("network exit")?;
    let mut cmd = tokio::process::Command::new(helper);
    cmd.args([
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--ready-fd=3",
        "--exit-fd=4",
        "--enable-sandbox",
        "--enable-seccomp",
        // By path: slirp4netns then joins only the network namespace (as root it may),
        // not the sandbox's user namespace, where it would lose the right to join a
        // namespace made ahead (owned by the host's user namespace).
        "--netns-type=path",
    ])
    .arg(format!("/proc/{pid}/ns/net"))
    .arg("tap0")
    .env_clear()
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    sys::pass_fds(cmd.as_std_mut(), [ready_w, exit_r], Some(procs));
    let mut child = cmd.spawn().map_err(|e| SandboxError::NetworkUnavailable {
        reason: format!("cannot start {}: {e}", helper.display()),
        fix: fix(),
    })?;
    // The command holds this process's copies of the passed ends: close them.
    drop(cmd);
    let mut ready = tokio::net::unix::pipe::Receiver::from_owned_fd(ready_r)
        .map_err(|e| SandboxError::io("cannot watch the network ready pipe", e))?;
    let mut byte = [0u8; 1];
    let outcome = tokio::time::timeout(READY_TIMEOUT, async {
        tokio::select! {
            r = ready.read(&mut byte) => match r {
                Ok(1) => Ok(()),
                Ok(_) => Err("it exited before configuring the network".to_owned()),
                Err(e) => Err(format!("cannot read its ready pipe: {e}")),
            },
            status = child.wait() => Err(format!("it exited ({})", status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()))),
        }
    })
    .await;
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(reason)) => Some(reason),
        Err(_) => Some(format!("it was not ready within {READY_TIMEOUT:?}")),
    };
    if let Some(reason) = failure {
        let _ = child.start_kill();
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ =
                tokio::time::timeout(Duration::from_secs(1), e.read_to_string(&mut stderr)).await;
        }
        let _ = child.wait().await;
        return Err(SandboxError::NetworkUnavailable {
            reason: format!(
                "{} failed: {reason}; its stderr: {}",
                helper.display(),
                stderr.trim()
            ),
            fix: fix(),
        });
    }
    Ok(NetHelper {
        child,
        exit: Some(exit_w),
        _cgroup: cgroup,
    })
}

impl NetHelper {
    /// Ends the helper and reaps it.
    pub(crate) async fn stop(mut self) {
        self.exit.take();
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
