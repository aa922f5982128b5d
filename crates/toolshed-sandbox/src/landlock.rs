//! The Landlock ruleset of one run, created by the parent (with the `landlock` crate)
//! and enforced by the child right before it execs: read everywhere in the sandbox's
//! root, read and execute under `/usr` and the executable binds, read and write (no
//! execute) only in the scratch folder, `/tmp` and the writable binds (a package cache
//! is also executable: it is in both lists), the three device nodes; no TCP with
//! the network off and no TCP `bind` with it on; abstract unix sockets and signals scoped
//! to the sandbox. What the running kernel's ABI lacks is dropped (best effort above the
//! configured floor, which `Sandbox::new` checks).

use std::os::fd::{BorrowedFd, OwnedFd};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

use crate::config::Network;

/// The newest ABI this crate asks for; the kernel's own level decides what applies.
const WANTED: ABI = ABI::V6;

/// The folders and files a run's rules name.
pub(crate) struct Paths<'a> {
    /// The root skeleton: read.
    pub root: BorrowedFd<'a>,
    /// `/usr` and the other read-only trees whose programs may run.
    pub exec: Vec<BorrowedFd<'a>>,
    /// Read-only trees whose programs may not run.
    pub read: Vec<BorrowedFd<'a>>,
    /// Scratch, `/tmp` and the writable binds: read and write.
    pub write: Vec<BorrowedFd<'a>>,
    /// Device nodes: read and write.
    pub devices: Vec<BorrowedFd<'a>>,
}

/// Builds the ruleset; its fd is what the child enforces.
pub(crate) fn ruleset(paths: &Paths<'_>, network: Network) -> Result<OwnedFd, String> {
    let all = AccessFs::from_all(WANTED);
    let read: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
    let exec = read | AccessFs::Execute;
    let write = all & !BitFlags::from(AccessFs::Execute);
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let net: BitFlags<AccessNet> = match network {
        Network::Off => AccessNet::BindTcp | AccessNet::ConnectTcp,
        Network::On => AccessNet::BindTcp.into(),
    };
    let err = |e: landlock::RulesetError| format!("cannot build the Landlock ruleset: {e}");
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err)?
        .handle_access(net)
        .map_err(err)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(err)?
        .create()
        .map_err(err)?;
    rs = rs
        .add_rule(PathBeneath::new(paths.root, read))
        .map_err(err)?;
    for fd in &paths.exec {
        rs = rs.add_rule(PathBeneath::new(*fd, exec)).map_err(err)?;
    }
    for fd in &paths.read {
        rs = rs.add_rule(PathBeneath::new(*fd, read)).map_err(err)?;
    }
    for fd in &paths.write {
        rs = rs.add_rule(PathBeneath::new(*fd, write)).map_err(err)?;
    }
    for fd in &paths.devices {
        rs = rs.add_rule(PathBeneath::new(*fd, device)).map_err(err)?;
    }
    let fd: Option<OwnedFd> = rs.into();
    fd.ok_or_else(|| "the kernel does not support Landlock".to_owned())
}

/// What the kernel's ABI covers, for `check()`.
pub(crate) fn features(abi: i32) -> Vec<(&'static str, bool)> {
    vec![
        ("filesystem rules", abi >= 1),
        ("rename and link across folders (refer)", abi >= 2),
        ("truncate", abi >= 3),
        ("TCP bind and connect", abi >= 4),
        ("device ioctls", abi >= 5),
        ("abstract unix sockets and signals scoped", abi >= 6),
    ]
}
