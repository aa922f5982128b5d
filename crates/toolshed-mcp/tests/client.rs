//! The MCP client against real servers: server-everything (stdio in the sandbox, and
//! Streamable HTTP), server-filesystem, and a fixture server that misbehaves on
//! purpose (tests/fixtures/fixture_server.mjs).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use toolshed_core::{ErrorCode, ToolContext};
use toolshed_mcp::{ClientConfig, Era, McpCode, McpHub};
use toolshed_sandbox::Bind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_in_the_sandbox_lists_and_calls() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let s = server(&hub, &everything());

    let info = s
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{e}\nstderr: {}", s.stderr()));
    assert_eq!(info.era, Era::Legacy);
    assert_eq!(info.protocol_version, "2025-11-25");
    assert_eq!(info.server_name, "mcp-servers/everything");
    let profile = s.profile().unwrap();
    assert!(
        !profile.network,
        "a local `node` server has no network unless declared"
    );

    let tools = s.tools().await.unwrap();
    let echo = tools
        .iter()
        .find(|t| t.name == "echo")
        .expect("echo is listed");
    assert_eq!(echo.qualified_name, "everything__echo");
    assert_eq!(echo.endpoint(), "mcp:everything/echo");
    let long = tools
        .iter()
        .find(|t| t.name == "trigger-long-running-operation")
        .unwrap();
    assert_eq!(
        long.qualified_name,
        "everything__trigger-long-running-operation"
    );

    let c = call(&s, "echo", json!({"message": "hello"})).await;
    assert_eq!(c.result.unwrap(), json!("Echo: hello"));
    assert_eq!(c.diagnostics.content[0]["type"], "text");

    // Structured content is the result; the blocks are in the diagnostics.
    let c = call(
        &s,
        "get-structured-content",
        json!({"location": "New York"}),
    )
    .await;
    let v = c.result.unwrap();
    assert!(v["temperature"].is_number(), "{v}");
    assert!(!c.diagnostics.content.is_empty());

    // An image block.
    let c = call(&s, "get-tiny-image", json!({})).await;
    let v = c.result.unwrap();
    let blocks = v["content"].as_array().unwrap();
    assert!(blocks.iter().any(|b| b["type"] == "image"), "{v}");

    // Progress arrives as partial results before the result.
    let c = call(
        &s,
        "trigger-long-running-operation",
        json!({"duration": 1, "steps": 3}),
    )
    .await;
    assert_eq!(c.partials.len(), 3, "{:?}", c.partials);
    assert_eq!(c.partials[0]["progress"], 1.0);
    assert_eq!(c.partials[2]["total"], 3.0);
    assert!(c.result.unwrap().as_str().unwrap().contains("completed"));

    // A bad argument is the server's error result, with its text.
    let c = call(&s, "get-sum", json!({"a": "one"})).await;
    let e = c.result.unwrap_err();
    assert_eq!(e.code, ErrorCode::HandlerError);
    assert!(
        e.message.contains("everything") && e.message.contains("get-sum"),
        "{e:?}"
    );
    assert_eq!(e.details.as_ref().unwrap()["mcp_is_error"], true);

    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new("node")
        .arg(node_modules().join("@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let up = eventually(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    assert!(up, "server-everything did not listen on {port}");

    let cache = tempfile::tempdir().unwrap();
    let mut config = ClientConfig::new(cache.path());
    config.http_policy = toolshed_dispatch::HttpPolicy::default().with_loopback();
    let hub = McpHub::new(config);
    let s = server(
        &hub,
        &http("everything", &format!("http://127.0.0.1:{port}/mcp")),
    );
    let info = s.connect().await.unwrap();
    assert_eq!(info.era, Era::Legacy);
    assert!(s.profile().is_none());

    let tools = s.tools().await.unwrap();
    assert!(tools.iter().any(|t| t.qualified_name == "everything__echo"));
    let c = call(&s, "echo", json!({"message": "over http"})).await;
    assert_eq!(c.result.unwrap(), json!("Echo: over http"));
    let c = call(
        &s,
        "trigger-long-running-operation",
        json!({"duration": 1, "steps": 2}),
    )
    .await;
    assert_eq!(c.partials.len(), 2, "progress over SSE: {:?}", c.partials);
    assert!(c.result.is_ok());
    let c = call(&s, "get-structured-content", json!({"location": "Chicago"})).await;
    assert!(c.result.unwrap()["humidity"].is_number());

    hub.shutdown().await;
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_server_reads_and_reports_errors() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("note.txt"), "a note").unwrap();
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![Bind::read_only(data.path(), "/data")]);
    let spec = stdio(
        "fs",
        "node",
        &[
            &format!("{MODULES}/@modelcontextprotocol/server-filesystem/dist/index.js"),
            "/data",
        ],
    );
    let s = server(&hub, &spec);
    let tools = s
        .tools()
        .await
        .unwrap_or_else(|e| panic!("{e}\nstderr: {}", s.stderr()));
    let read = tools.iter().find(|t| t.name == "read_text_file").unwrap();
    assert_eq!(read.hints.read_only, Some(true));
    let spec = read.spec().unwrap();
    assert_eq!(spec.effects, toolshed_core::spec::Effects::None);

    let c = call(&s, "read_text_file", json!({"path": "/data/note.txt"})).await;
    assert_eq!(c.result.unwrap()["content"], "a note");
    let c = call(&s, "read_text_file", json!({"path": "/etc/passwd"})).await;
    let e = c.result.unwrap_err();
    assert!(
        e.message.contains("denied") || e.message.contains("outside"),
        "{e:?}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_progress_list_changed_and_cancellation() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let s = server(&hub, &fixture("fx", "paged"));
    let names =
        |tools: &[toolshed_mcp::McpTool]| tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    let tools = s
        .tools()
        .await
        .unwrap_or_else(|e| panic!("{e}\nstderr: {}", s.stderr()));
    assert_eq!(
        names(&tools),
        ["echo", "die", "change", "sleep", "progress"],
        "all three pages"
    );

    let c = call(&s, "echo", json!({"text": "x"})).await;
    assert_eq!(c.result.unwrap(), json!("echo: x"));

    let c = call(&s, "progress", json!({})).await;
    assert_eq!(
        c.partials,
        [
            json!({"progress": 1.0, "total": 2.0, "message": "half"}),
            json!({"progress": 2.0, "total": 2.0})
        ]
    );
    assert_eq!(c.result.unwrap(), json!({"done": true}));

    let mut changes = s.changes();
    assert_eq!(*changes.borrow_and_update(), 0);
    assert!(call(&s, "change", json!({})).await.result.is_ok());
    tokio::time::timeout(Duration::from_secs(5), changes.changed())
        .await
        .expect("list_changed bumps changes()")
        .unwrap();
    let tools = s.tools().await.unwrap();
    assert!(
        names(&tools).contains(&"added".to_owned()),
        "the list is read again"
    );

    // Our cancellation sends notifications/cancelled and ends the call.
    let ctx = ToolContext::detached("sleep");
    let token = ctx.cancellation().clone();
    let s2 = s.clone();
    let task = tokio::spawn(async move { drain(s2.call("sleep", json!({}), &ctx).await).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    token.cancel();
    let c = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.result.unwrap_err().code, ErrorCode::Cancelled);
    assert!(
        eventually(Duration::from_secs(5), || s.stderr().contains("cancelled")).await,
        "the server was told: {}",
        s.stderr()
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_timeout_cancels_the_request() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let mut spec = fixture("fx", "paged");
    spec.timeout = Duration::from_secs(2);
    let s = server(&hub, &spec);
    let c = call(&s, "sleep", json!({})).await;
    let e = c.result.unwrap_err();
    assert_eq!(e.code, ErrorCode::Timeout, "{e:?}");
    assert!(c.diagnostics.timed_out);
    assert!(
        eventually(Duration::from_secs(5), || s.stderr().contains("cancelled")).await,
        "{}",
        s.stderr()
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_is_an_error_result_and_restarts() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let s = server(&hub, &fixture("fx", "paged"));
    assert!(
        call(&s, "echo", json!({"text": "before"}))
            .await
            .result
            .is_ok()
    );

    let c = tokio::time::timeout(Duration::from_secs(10), call(&s, "die", json!({})))
        .await
        .expect("an in-flight call ends when its server dies");
    let e = c.result.unwrap_err();
    assert!(
        e.message.contains("`fx`") && e.message.contains("lost"),
        "{e:?}"
    );
    assert!(
        e.message.contains("about to crash"),
        "quotes its stderr: {e:?}"
    );
    assert!(e.is_retryable());

    // The next call restarts it.
    let c = call(&s, "echo", json!({"text": "after"})).await;
    assert_eq!(c.result.unwrap(), json!("echo: after"));
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_stdout_and_a_silent_server_are_clear_errors() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let s = server(&hub, &fixture("noisy", "garbage"));
    let e = s.connect().await.unwrap_err();
    assert_eq!(e.code(), McpCode::McpProtocolViolation);
    let m = e.to_string();
    assert!(
        m.contains("`noisy`") && m.contains("Server starting... listening on stdio"),
        "{m}"
    );

    let mut spec = fixture("mute", "silent");
    spec.timeout = Duration::from_secs(2);
    let s = server(&hub, &spec);
    let e = s.connect().await.unwrap_err();
    assert_eq!(e.code(), McpCode::McpHandshakeFailed);
    assert!(
        e.to_string().contains("`mute`") && e.to_string().contains("within 2 s"),
        "{e}"
    );
    // Backing off: the next try says so instead of waiting again.
    let e = s.connect().await.unwrap_err();
    assert_eq!(e.code(), McpCode::McpBackingOff, "{e}");
    assert!(
        e.to_string().contains("within 2 s"),
        "names the last failure: {e}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_loops_and_name_collisions_are_refused() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let e = server(&hub, &fixture("looper", "loop"))
        .tools()
        .await
        .unwrap_err();
    assert_eq!(e.code(), McpCode::McpToolListRejected);
    assert!(e.to_string().contains("twice"), "{e}");
    let e = server(&hub, &fixture("twins", "collide"))
        .tools()
        .await
        .unwrap_err();
    assert_eq!(e.code(), McpCode::McpToolNameCollision);
    assert!(
        e.to_string().contains("`a.b`") && e.to_string().contains("`a/b`"),
        "{e}"
    );
    hub.shutdown().await;

    // The caps on tools and pages (the fixture lists 5 tools on 3 pages).
    for (tools, pages, says) in [(3, 64, "more than 3 tools"), (512, 2, "more than 2 pages")] {
        let mut config = ClientConfig::new(cache.path());
        config.sandbox = Some(sandbox());
        config.binds = vec![Bind::executable(fixtures(), FIXTURES)];
        config.limits.max_tools = tools;
        config.limits.max_pages = pages;
        let hub = McpHub::new(config);
        let e = server(&hub, &fixture("fx", "paged"))
            .tools()
            .await
            .unwrap_err();
        assert_eq!(e.code(), McpCode::McpToolListRejected);
        assert!(e.to_string().contains(says), "{e}");
        hub.shutdown().await;
    }
}

#[tokio::test]
async fn stdio_without_a_sandbox_is_refused_and_metadata_urls_are_refused() {
    let cache = tempfile::tempdir().unwrap();
    let hub = McpHub::new(ClientConfig::new(cache.path()));
    let e = server(&hub, &everything()).connect().await.unwrap_err();
    assert_eq!(e.code(), McpCode::McpSandboxRequired, "{e}");

    // One server per (scope, name), reused while its spec is the same.
    let a = server(&hub, &everything());
    assert!(Arc::ptr_eq(&a, &server(&hub, &everything())));
    assert!(!Arc::ptr_eq(
        &a,
        &hub.server(
            "tenant-other",
            &everything(),
            Arc::new(toolshed_core::EnvProvider),
            None
        )
    ));
    let mut changed = everything();
    changed.timeout = Duration::from_secs(5);
    let b = server(&hub, &changed);
    assert!(!Arc::ptr_eq(&a, &b), "a changed spec replaces the server");
    assert_eq!(b.spec().timeout, Duration::from_secs(5));

    for url in [
        "http://169.254.169.254/mcp",
        "http://[::ffff:169.254.169.254]/mcp",
        "http://localhost:9/mcp",
        "http://10.0.0.1/mcp",
        // Documentation, benchmarking and shared ranges (IANA special-purpose).
        "http://192.0.2.1/mcp",
        "http://198.51.100.1/mcp",
        "http://203.0.113.1/mcp",
        "http://198.18.0.1/mcp",
        "http://100.64.0.1/mcp",
        "http://[2001:db8::1]/mcp",
        "http://[::ffff:203.0.113.1]/mcp",
    ] {
        let e = server(&hub, &http("meta", url))
            .connect()
            .await
            .unwrap_err();
        assert_eq!(e.code(), McpCode::McpAddressRefused, "{url}: {e}");
        assert!(e.to_string().contains("refused"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_reach_the_server_and_never_come_back() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let mut spec = everything();
    spec.name = "env".into();
    let toolshed_mcp::Launch::Stdio(l) = &mut spec.launch else {
        unreachable!()
    };
    l.env
        .insert("API_TOKEN".into(), "Bearer ${MCP_TEST_SECRET}".into());

    // Undeclared: refused, naming the credential and the field.
    let e = server(&hub, &spec).connect().await.unwrap_err();
    assert_eq!(e.code(), McpCode::McpCredentialFailed);
    assert!(
        e.to_string().contains("MCP_TEST_SECRET") && e.to_string().contains("env.API_TOKEN"),
        "{e}"
    );

    spec.credentials = vec!["MCP_TEST_SECRET".into()];
    let provider = Arc::new(Fixed("s3cr3t-value-0123456789".into()));
    let s = hub.server("tenant-b", &spec, provider, None);
    let c = call(&s, "get-env", json!({})).await;
    let text = c.result.unwrap().to_string();
    assert!(text.contains("API_TOKEN"), "{text}");
    assert!(
        !text.contains("s3cr3t-value-0123456789"),
        "scrubbed: {text}"
    );
    assert!(
        !serde_json::to_string(&c.diagnostics)
            .unwrap()
            .contains("s3cr3t-value-0123456789"),
        "scrubbed from the diagnostics"
    );
    hub.shutdown().await;
}

#[derive(Debug)]
struct Fixed(String);

impl toolshed_core::CredentialProvider for Fixed {
    fn describe(&self) -> String {
        "fixed".into()
    }
    fn get<'a>(
        &'a self,
        _name: &'a str,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<toolshed_core::Secret, toolshed_core::CredentialError>,
    > {
        Box::pin(async move { Ok(toolshed_core::Secret::new(self.0.as_str())) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_run_through_the_pipeline_with_partial_crumbs() {
    use toolshed_core::spec::Approval;
    use toolshed_core::{CrumbKind, MemorySink, Pipeline, RunContext, ToolCall, ToolSet};

    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let s = server(&hub, &fixture("fx", "paged"));
    let listed = s.tools().await.unwrap();
    let mut tools = Vec::new();
    for t in listed
        .iter()
        .filter(|t| t.name == "echo" || t.name == "progress")
    {
        let mut spec = t.spec().unwrap();
        if t.name == "progress" {
            // The fixture gives no hints: MCP's defaults make it destructive, gated.
            assert!(matches!(spec.approval, Approval::Always));
            spec.approval = Approval::Never;
        }
        tools.push(toolshed_mcp::tool(s.clone(), t, spec).unwrap());
    }
    let p = Pipeline::builder(ToolSet::from_tools(tools).unwrap()).build();
    let sink = MemorySink::new();
    p.crumbs().add_sink(Arc::new(sink.clone()));
    let run = RunContext::ephemeral();

    let out = p
        .call(&run, ToolCall::new("fx__echo", json!({"text": "x"})))
        .await;
    assert_eq!(
        out.result.unwrap_err().code,
        ErrorCode::ApprovalRequired,
        "a destructive-by-default MCP tool waits for a human"
    );

    let out = p.call(&run, ToolCall::new("fx__progress", json!({}))).await;
    assert_eq!(out.result.unwrap(), json!({"done": true}));
    assert_eq!(out.diagnostics.content[0]["text"], "done");
    let partials = sink
        .kinds()
        .into_iter()
        .filter(|k| *k == CrumbKind::Partial)
        .count();
    // Two progress notifications, then the result: each value of the stream is a
    // partial as it comes, the last one the result too.
    assert_eq!(partials, 3, "{:?}", sink.kinds());
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_initialize_is_asked_with_server_discover() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let s = server(&hub, &fixture("modern", "modern"));
    let info = s
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{e}\nstderr: {}", s.stderr()));
    assert_eq!(info.era, Era::Discover);
    assert_eq!(info.protocol_version, "2026-07-28");
    assert_eq!(info.server_name, "fixture-modern");
    let tools = s.tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"));
    let c = call(&s, "echo", json!({"text": "modern"})).await;
    assert_eq!(c.result.unwrap(), json!("echo: modern"));

    // A legacy server is legacy.
    let s = server(&hub, &fixture("legacy", "paged"));
    assert_eq!(s.connect().await.unwrap().era, Era::Legacy);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_a_server_that_ignores_stdin_and_sigterm() {
    // Unsandboxed (the developer opt-in), so the server's pid is a host pid to watch.
    let cache = tempfile::tempdir().unwrap();
    let mut config = ClientConfig::new(cache.path());
    config.unsandboxed = true;
    config.limits = limits();
    let hub = McpHub::new(config);
    let script = fixtures().join("fixture_server.mjs");
    let spec = stdio(
        "stubborn",
        "/usr/bin/node",
        &[script.to_str().unwrap(), "stubborn"],
    );
    let s = server(&hub, &spec);
    s.connect().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || s.stderr().contains("pid ")).await);
    let pid: u32 = s
        .stderr()
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
    assert!(proc.exists());
    hub.shutdown().await;
    assert!(
        s.stderr().contains("ignoring SIGTERM"),
        "SIGTERM came first: {}",
        s.stderr()
    );
    assert!(
        eventually(Duration::from_secs(5), || !proc.exists()).await,
        "SIGKILL ended it"
    );
}

#[tokio::test]
async fn headers_carry_credentials_that_never_appear_in_errors() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 16 * 1024];
        let n = c.read(&mut buf).unwrap();
        // An error page that echoes the request back, credential included.
        let body = String::from_utf8_lossy(&buf[..n]).into_owned();
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = c.write_all(answer.as_bytes());
        body
    });
    let cache = tempfile::tempdir().unwrap();
    let mut config = ClientConfig::new(cache.path());
    config.http_policy = toolshed_dispatch::HttpPolicy::default().with_loopback();
    let hub = McpHub::new(config);
    let mut spec = http("authed", &format!("http://127.0.0.1:{port}/mcp"));
    let toolshed_mcp::Launch::Http(h) = &mut spec.launch else {
        unreachable!()
    };
    h.headers
        .insert("Authorization".into(), "Bearer ${API_KEY}".into());
    h.headers.insert("X-Team".into(), "tools".into());
    spec.credentials = vec!["API_KEY".into()];
    let s = hub.server("t", &spec, Arc::new(Fixed("tok-9f8e7d6c5b4a".into())), None);
    let e = s.connect().await.unwrap_err();
    let request = seen.join().unwrap().to_ascii_lowercase();
    assert!(
        request.contains("authorization: bearer tok-9f8e7d6c5b4a"),
        "{request}"
    );
    assert!(request.contains("x-team: tools"), "{request}");
    assert!(
        request.contains("accept: ") && request.contains("text/event-stream"),
        "{request}"
    );
    assert!(!e.to_string().contains("tok-9f8e7d6c5b4a"), "{e}");
    assert!(!format!("{e:?}").contains("tok-9f8e7d6c5b4a"), "{e:?}");
}

/// The most common config: `npx -y PACKAGE`. npm downloads the server into the
/// server's own package cache over the sandbox's network, then runs it from there (the
/// cache is the one writable folder whose programs may run); the second start finds it
/// cached. Needs the npm registry, as the test command's `npm ci` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_npx_server_downloads_into_its_cache_and_runs_in_the_sandbox() {
    let cache = tempfile::tempdir().unwrap();
    let hub = sandboxed_hub(cache.path(), vec![]);
    let version = std::fs::read_to_string(
        node_modules().join("@modelcontextprotocol/server-everything/package.json"),
    )
    .unwrap();
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    let package = format!(
        "@modelcontextprotocol/server-everything@{}",
        version["version"].as_str().unwrap()
    );
    let mut spec = stdio("npxev", "npx", &["-y", &package, "stdio"]);
    spec.timeout = Duration::from_secs(180);
    let s = server(&hub, &spec);
    let profile = s.profile().unwrap();
    assert!(profile.network, "a package runner downloads: network on");
    let cache_dir = profile.cache.clone().expect("a package cache");
    assert!(cache_dir.starts_with(cache.path()), "{cache_dir:?}");

    s.connect()
        .await
        .unwrap_or_else(|e| panic!("{e}\nstderr: {}", s.stderr()));
    let c = call(&s, "echo", json!({"message": "from npx"})).await;
    assert_eq!(c.result.unwrap(), json!("Echo: from npx"));
    hub.shutdown().await;

    // The download stayed in the server's cache.
    assert!(
        std::fs::read_dir(&cache_dir).unwrap().count() > 0,
        "the package cache is empty: {cache_dir:?}"
    );

    // A second hub on the same cache starts from it.
    let hub = sandboxed_hub(cache.path(), vec![]);
    let s = server(&hub, &spec);
    s.connect()
        .await
        .unwrap_or_else(|e| panic!("{e}\nstderr: {}", s.stderr()));
    let c = call(&s, "echo", json!({"message": "again"})).await;
    assert_eq!(c.result.unwrap(), json!("Echo: again"));
    hub.shutdown().await;
}
