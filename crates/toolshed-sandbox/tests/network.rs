//! The network: the host's loopback listeners, its abstract unix sockets, its
//! PostgreSQL port and its own (non-loopback) addresses are unreachable, with the
//! network off and with it on.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use common::{out, py, require, run, sandbox, show, unique};
use toolshed_sandbox::{LimitsRequest, Network, RunSpec};

const PROBE: &str = r#"
import json, socket, sys
targets = json.loads(sys.argv[1])
result = {}
for name, (host, port) in targets["tcp"].items():
    s = None
    try:
        # With the network off, the socket itself is refused (EAFNOSUPPORT).
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect((host, port))
        result[name] = "connected"
        if name.startswith("gateway_"):
            # With the host's loopback disabled in the helper, 10.0.2.2 is an outside
            # address like any other, and the network is on: a machine whose egress
            # accepts every connection answers it. Only a PostgreSQL server answers its
            # SSLRequest with `N` or `S`.
            try:
                s.sendall(bytes([0, 0, 0, 8, 4, 210, 22, 47]))
                reply = s.recv(1)
            except OSError as e:
                reply = repr(e).encode()
            if reply not in (b"N", b"S"):
                result[name] = f"connected, not PostgreSQL: {reply!r}"
    except OSError as e:
        result[name] = f"refused {e.errno or type(e).__name__}"
    finally:
        if s is not None:
            s.close()
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    u.connect("\0" + targets["abstract"])
    result["abstract"] = "connected"
except OSError as e:
    result["abstract"] = f"refused {e.errno}"
# The interfaces of the sandbox's network namespace, from /proc (netlink, which
# `socket.if_nameindex()` would use, is a socket family the sandbox refuses).
with open("/proc/net/dev") as f:
    result["interfaces"] = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
print(json.dumps(result))
"#;

/// Host listeners the sandbox must not reach, each checked to be reachable from the
/// host first (so a refusal means something), with that check's connections accepted:
/// after the probe, a connection waiting on either means the sandbox reached it.
struct Targets {
    tcp: TcpListener,
    any: TcpListener,
    _unix: UnixListener,
    json: String,
}

fn targets() -> Targets {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.accept().unwrap();
    TcpStream::connect(("127.0.0.1", 5432)).unwrap_or_else(|e| {
        panic!(
            "the host's PostgreSQL must listen on 127.0.0.1:5432 for this test (it checks the sandbox cannot reach it): {e}; start it (scripts/test does)"
        )
    });
    // A listener on every address: reachable through the host's own addresses.
    let any = TcpListener::bind("0.0.0.0:0").unwrap();
    let any_port = any.local_addr().unwrap().port();
    let mut tcp_targets = serde_json::json!({
        "loopback_listener": ["127.0.0.1", port],
        "postgres": ["127.0.0.1", 5432],
        "gateway_listener": ["10.0.2.2", port],
        "gateway_postgres": ["10.0.2.2", 5432],
        "any_on_loopback": ["127.0.0.1", any_port],
    });
    for addr in own_addresses() {
        TcpStream::connect((addr.as_str(), any_port)).unwrap();
        any.accept().unwrap();
        tcp_targets[format!("host_address {addr}")] = serde_json::json!([addr, any_port]);
    }
    let name = format!("toolshed-sandbox-test-{}", unique());
    let unix =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    std::os::unix::net::UnixStream::connect_addr(
        &SocketAddr::from_abstract_name(name.as_bytes()).unwrap(),
    )
    .unwrap();
    let json = serde_json::json!({
        "tcp": tcp_targets,
        "abstract": name,
    })
    .to_string();
    Targets {
        tcp,
        any,
        _unix: unix,
        json,
    }
}

/// The host's own IPv4 addresses other than loopback (its `LOCAL` routes).
fn own_addresses() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/fib_trie").unwrap();
    let mut out = Vec::new();
    let mut last = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = Some(a.to_owned());
        } else if t.contains("/32 host LOCAL")
            && let Some(a) = &last
            && !a.starts_with("127.")
            && !out.contains(a)
        {
            out.push(a.clone());
        }
    }
    out
}

async fn probe(network: Network) -> serde_json::Value {
    probe_in(&sandbox(), network).await
}

async fn probe_in(sb: &toolshed_sandbox::Sandbox, network: Network) -> serde_json::Value {
    let t = targets();
    let mut spec: RunSpec = py(PROBE, LimitsRequest::default());
    spec.args.push(t.json.clone().into());
    spec.network = network;
    let o = run(sb, spec).await;
    assert!(o.success(), "{}", show(&o));
    assert_eq!(o.network, network);
    for (name, listener) in [("loopback", &t.tcp), ("every address", &t.any)] {
        listener.set_nonblocking(true).unwrap();
        let waiting = listener.accept();
        assert!(
            waiting
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the host's {name} listener was reached: {waiting:?}, {}",
            show(&o)
        );
    }
    serde_json::from_str(out(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", show(&o)))
}

fn assert_refused(v: &serde_json::Value) {
    let mut checked = 0;
    for (name, r) in v.as_object().unwrap() {
        if name == "interfaces" {
            continue;
        }
        let r = r.as_str().unwrap();
        let outside = name.starts_with("gateway_") && r.starts_with("connected, not PostgreSQL");
        assert!(
            r.starts_with("refused") || outside,
            "{name} was reached: {v}"
        );
        checked += 1;
    }
    assert!(checked >= 6, "too few targets probed: {v}");
}

#[tokio::test]
async fn with_the_network_off_nothing_of_the_host_is_reachable() {
    let v = probe(Network::Off).await;
    assert_refused(&v);
    assert_eq!(v["interfaces"], serde_json::json!(["lo"]), "{v}");
}

#[tokio::test]
async fn with_the_network_on_the_hosts_loopback_postgres_abstract_sockets_and_own_addresses_stay_unreachable()
 {
    require("slirp4netns", "slirp4netns");
    let v = probe(Network::On).await;
    assert_refused(&v);
    // The network is really on: the user-mode stack's interface is there.
    assert_eq!(v["interfaces"], serde_json::json!(["lo", "tap0"]), "{v}");
}

#[tokio::test]
async fn both_kinds_of_network_namespace_isolate_alike_with_the_network_on_and_off() {
    require("slirp4netns", "slirp4netns");
    // A namespace made ahead (owned by the host's user namespace) and one the clone
    // creates (owned by the sandbox's): the same isolation, the helper attaches to both.
    let ahead = toolshed_sandbox::Sandbox::new(toolshed_sandbox::SandboxConfig::default()).unwrap();
    let fresh = toolshed_sandbox::Sandbox::new(toolshed_sandbox::SandboxConfig {
        prepared_ahead: 0,
        ..toolshed_sandbox::SandboxConfig::default()
    })
    .unwrap();
    for network in [Network::Off, Network::On] {
        common::wait_for(10, "a network namespace made ahead", || {
            ahead.ready_network_namespaces() > 0
        });
        let v = probe_in(&ahead, network).await;
        assert_refused(&v);
        assert_eq!(fresh.ready_network_namespaces(), 0);
        let w = probe_in(&fresh, network).await;
        assert_refused(&w);
        assert_eq!(v["interfaces"], w["interfaces"], "{v} {w}");
        // The stock is refilled from a supervisor's second run on.
        run(&ahead, common::sh("true", LimitsRequest::default())).await;
    }
}
