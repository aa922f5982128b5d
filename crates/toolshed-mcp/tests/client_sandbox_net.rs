//! The network a package runner's server gets in the sandbox (slirp4netns) reaches
//! neither the host's loopback nor the cloud metadata address: the issue's "outbound
//! network, never loopback or metadata addresses", checked from inside the sandbox.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use toolshed_sandbox::{Network, RunSpec};

/// A Node one-liner that connects to `host:port` and prints `connected`, or the error.
fn probe(host: &str, port: u16) -> RunSpec {
    let code = format!(
        "const s=require('net').connect({{host:'{host}',port:{port}}});\
         s.setTimeout(3000,()=>{{console.log('timeout');process.exit(0)}});\
         s.on('connect',()=>{{console.log('connected');process.exit(0)}});\
         s.on('error',e=>{{console.log('error '+e.code);process.exit(0)}});"
    );
    let mut spec = RunSpec::new("node", ["-e", code.as_str()]);
    spec.network = Network::On;
    spec.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_runners_network_reaches_neither_host_loopback_nor_metadata() {
    let sandbox = common::sandbox();
    // A service on the host's loopback, and slirp4netns's host alias for it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let _ = s.write_all(b"hello");
            let _ = s.read(&mut [0u8; 1]);
        }
    });
    for (host, port) in [("10.0.2.2", port), ("169.254.169.254", 80)] {
        let out = sandbox.run(probe(host, port), Vec::new()).await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            !text.contains("connected"),
            "a sandboxed server with the network on reached {host}:{port}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.trim().is_empty(),
            "the probe ran: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
