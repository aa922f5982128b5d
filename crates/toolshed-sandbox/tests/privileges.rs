//! Privileges: setuid binaries gain nothing, nested user namespaces fail, every
//! system call of the deny-list fails, and sockets open only in the allowed families.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{out, py, run, sandbox, sh, show};
use toolshed_sandbox::{Bind, LimitsRequest, Network};

#[tokio::test]
async fn setuid_binaries_gain_nothing() {
    let sb = sandbox();
    // A setuid-root copy of `id`, owned by root (the tests run as root), bound
    // executable; and the host's own setuid `su`.
    let dir = tempfile::tempdir().unwrap();
    let id = dir.path().join("id");
    std::fs::copy("/usr/bin/id", &id).unwrap();
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert_eq!(
        std::fs::metadata(&id).unwrap().permissions().mode() & 0o4000,
        0o4000
    );
    let spec = sh(
        "/tool/id; /tool/id -u; su -c 'id -u' root </dev/null 2>&1; echo su=$?",
        LimitsRequest::default(),
    )
    .bind(Bind::executable(dir.path(), "/tool"));
    let o = run(&sb, spec).await;
    let text = out(&o);
    let mut lines = text.lines();
    let id_line = lines.next().unwrap();
    assert!(id_line.starts_with("uid=1000(sandbox)"), "{}", show(&o));
    assert!(
        !id_line.contains("euid=0"),
        "the setuid bit took effect: {}",
        show(&o)
    );
    assert_eq!(lines.next(), Some("1000"), "{}", show(&o));
    assert!(!text.contains("\n0\n"), "su gave uid 0: {}", show(&o));
    assert!(!text.contains("su=0"), "su succeeded: {}", show(&o));
}

#[tokio::test]
async fn nested_user_namespaces_fail() {
    let sb = sandbox();
    let o = run(
        &sb,
        sh(
            "unshare -U -r id -u 2>&1; echo unshare=$?; unshare -m true 2>&1; echo mount=$?",
            LimitsRequest::default(),
        ),
    )
    .await;
    let text = out(&o);
    assert!(text.contains("unshare=1"), "{}", show(&o));
    assert!(text.contains("mount=1"), "{}", show(&o));
    assert!(text.contains("Operation not permitted"), "{}", show(&o));
}

const SYSCALLS: &str = r#"
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
spec = json.loads(sys.argv[1])
result = {}
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
    if r == 0 and nr == spec["clone"]:
        os._exit(0)  # the filter failed and this is a forked child
    return r, ctypes.get_errno()
for name, nr in spec["denied"]:
    result[name] = call(nr, 0, 0, 0, 0, 0, 0)
for name, flag in spec["clone_flags"]:
    result["clone " + name] = call(spec["clone"], flag | 17, 0, 0, 0, 0)  # 17: SIGCHLD
result["clone3"] = call(spec["clone3"], 0, 0)
result["ioctl TIOCSTI"] = call(spec["ioctl"], 0, 0x5412, 0)
# The kernel reads the request as 32 bits: high bits must not get it past the filter.
result["ioctl TIOCSTI with high bits"] = call(spec["ioctl"], 0, (1 << 32) | 0x5412, 0)
if spec["x32_mount"] is not None:
    result["x32 mount"] = call(spec["x32_mount"], 0, 0, 0, 0, 0, 0)
result["plain clone (fork)"] = None
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
result["plain clone (fork)"] = "ok"
print(json.dumps(result))
"#;

#[tokio::test]
async fn every_denied_system_call_fails() {
    let sb = sandbox();
    let spec = serde_json::json!({
        "denied": toolshed_sandbox::DENIED_SYSCALLS,
        "clone_flags": toolshed_sandbox::DENIED_CLONE_FLAGS,
        "clone": libc::SYS_clone,
        "clone3": libc::SYS_clone3,
        "ioctl": libc::SYS_ioctl,
        // x86_64: the x32 entry point of mount (the x32 bit set on its number).
        "x32_mount": cfg!(target_arch = "x86_64").then_some(0x4000_0000 | libc::SYS_mount),
    });
    let mut run_spec = py(SYSCALLS, LimitsRequest::default());
    run_spec.args.push(spec.to_string().into());
    let o = run(&sb, run_spec).await;
    assert!(o.success(), "{}", show(&o));
    let v: serde_json::Value = serde_json::from_str(out(&o).trim()).unwrap();
    let eperm = serde_json::json!([-1, libc::EPERM]);
    for (name, _) in toolshed_sandbox::DENIED_SYSCALLS {
        assert_eq!(v[*name], eperm, "{name}: {v}");
    }
    for (name, _) in toolshed_sandbox::DENIED_CLONE_FLAGS {
        assert_eq!(v[format!("clone {name}")], eperm, "clone {name}: {v}");
    }
    assert_eq!(v["clone3"], serde_json::json!([-1, libc::ENOSYS]), "{v}");
    assert_eq!(v["ioctl TIOCSTI"], eperm, "{v}");
    assert_eq!(v["ioctl TIOCSTI with high bits"], eperm, "{v}");
    if cfg!(target_arch = "x86_64") {
        assert_eq!(v["x32 mount"], serde_json::json!([-1, libc::ENOSYS]), "{v}");
    }
    // Not a blanket refusal: an ordinary fork still works.
    assert_eq!(v["plain clone (fork)"], "ok", "{v}");
}

/// Every address family number, with `socket` and `socketpair` of three types each:
/// `[family, call, type, result, errno]` rows.
const SOCKETS: &str = r#"
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
rows = []
pair = (ctypes.c_int * 2)()
for family in range(0, 64):
    for kind in (1, 2, 3):  # SOCK_STREAM, SOCK_DGRAM, SOCK_RAW
        ctypes.set_errno(0)
        fd = libc.socket(family, kind, 0)
        rows.append([family, "socket", kind, fd, ctypes.get_errno()])
        if fd >= 0:
            libc.close(fd)
        ctypes.set_errno(0)
        r = libc.socketpair(family, kind, 0, pair)
        rows.append([family, "socketpair", kind, r, ctypes.get_errno()])
        if r == 0:
            libc.close(pair[0]); libc.close(pair[1])
print(json.dumps(rows))
"#;

#[tokio::test]
async fn sockets_open_only_in_the_allowed_families_with_the_network_off_and_on() {
    let sb = sandbox();
    for network in [Network::Off, Network::On] {
        if network == Network::On {
            common::require("slirp4netns", "slirp4netns");
        }
        let mut spec = py(SOCKETS, LimitsRequest::default());
        spec.network = network;
        let o = run(&sb, spec).await;
        assert!(o.success(), "{}", show(&o));
        let rows: Vec<(i32, String, i32, i64, i32)> =
            serde_json::from_str(out(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
        assert_eq!(rows.len(), 64 * 3 * 2);
        let on = network == Network::On;
        for (family, call, kind, result, errno) in &rows {
            let allowed = *family == libc::AF_UNIX
                || (on && (*family == libc::AF_INET || *family == libc::AF_INET6));
            if allowed {
                assert_ne!(
                    *errno,
                    libc::EAFNOSUPPORT,
                    "{call}({family}, {kind}) with the network {network:?} was refused"
                );
            } else {
                assert_eq!(
                    (*result, *errno),
                    (-1, libc::EAFNOSUPPORT),
                    "{call}({family}, {kind}) with the network {network:?} was not refused as unsupported"
                );
            }
        }
        // The allowed families work: a Unix stream socket and pair, and with the network
        // on an IPv4 and IPv6 stream socket.
        let ok = |family: i32, call: &str| {
            rows.iter().any(|(f, c, k, r, _)| {
                *f == family && c == call && *k == libc::SOCK_STREAM && *r >= 0
            })
        };
        assert!(
            ok(libc::AF_UNIX, "socket") && ok(libc::AF_UNIX, "socketpair"),
            "{rows:?}"
        );
        assert_eq!(ok(libc::AF_INET, "socket"), on, "{rows:?}");
        assert_eq!(ok(libc::AF_INET6, "socket"), on, "{rows:?}");
        assert!(!ok(libc::AF_VSOCK, "socket"), "{rows:?}");
    }
}
