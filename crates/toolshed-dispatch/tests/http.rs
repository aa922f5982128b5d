//! HTTP endpoints against a tiny HTTP/1.1 server started in the test on 127.0.0.1:0:
//! a JSON answer, a 500, a body that is not JSON, one too large, one too slow, a
//! redirect; and the address guard (loopback refused unless allowlisted, after DNS).
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolshed_core::{ErrorCode, RunContext, ToolCall};
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint, Mode, Request};

/// Serve until the test ends. Routes: `/echo` answers what it was sent, `/fail` a 500,
/// `/text` a 200 that is not JSON, `/big` 2 MiB, `/slow` nothing for a minute.
async fn serve() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream));
        }
    });
    addr
}

async fn answer(mut stream: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let idempotency = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("Idempotency-Key: ")
                .or_else(|| l.strip_prefix("idempotency-key: "))
        })
        .map(str::to_owned);
    let (status, content_type, reply) = match path.as_str() {
        "/echo" => {
            let sent: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            (
                "200 OK",
                "application/json",
                json!({"received": sent, "idempotency_key": idempotency}).to_string(),
            )
        }
        "/fail" => (
            "500 Internal Server Error",
            "text/plain",
            "database exploded at line 42".to_owned(),
        ),
        "/text" => (
            "200 OK",
            "text/html",
            "<html>not json at all</html>".to_owned(),
        ),
        "/big" => (
            "200 OK",
            "application/json",
            format!("\"{}\"", "x".repeat(2 << 20)),
        ),
        "/redirect" => ("302 Found", "text/plain", String::new()),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            ("200 OK", "application/json", "1".to_owned())
        }
        _ => ("404 Not Found", "text/plain", String::new()),
    };
    let location = if path == "/redirect" {
        "location: http://169.254.169.254/latest/meta-data/\r\n"
    } else {
        ""
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{location}connection: close\r\n\r\n{reply}",
        reply.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn url(addr: SocketAddr, path: &str) -> Endpoint {
    Endpoint::parse(&format!("http://{addr}{path}")).unwrap()
}

#[tokio::test]
async fn an_http_endpoint_gets_tool_args_and_context() {
    let addr = serve().await;
    let d = dispatcher(Mode::Pool);
    let mut request = Request::new("lookup", json!({"q": "x"}));
    request.context.idempotency_key = Some("run-1:3".into());
    let run = d.execute(&url(addr, "/echo"), request.clone()).await;
    let v = run.result.unwrap();
    assert_eq!(v["received"]["tool"], "lookup");
    assert_eq!(v["received"]["args"], json!({"q": "x"}));
    assert_eq!(
        v["received"]["context"]["run_id"],
        json!(request.context.run_id)
    );
    assert_eq!(v["received"]["context"]["idempotency_key"], "run-1:3");
    assert_eq!(v["idempotency_key"], "run-1:3");
    assert!(v["received"].get("credentials").is_none());

    // Through the pipeline.
    let pipeline = pipeline(vec![tool(
        &d,
        "lookup",
        url(addr, "/echo"),
        Duration::from_secs(10),
    )]);
    let outcome = pipeline
        .call(
            &RunContext::builder().run_id("r-http").build(),
            ToolCall::new("lookup", json!({"q": 1})),
        )
        .await;
    assert_eq!(
        outcome.result.unwrap()["received"]["context"]["run_id"],
        "r-http"
    );
}

#[tokio::test]
async fn http_failures_are_error_results() {
    let addr = serve().await;
    let d = Dispatcher::new(DispatcherConfig {
        http_response_cap: 1 << 20,
        ..config(Mode::Pool)
    });

    let err = d
        .execute(&url(addr, "/fail"), Request::new("lookup", json!({})))
        .await
        .result
        .unwrap_err();
    assert_eq!(dispatch_code(&err), "HTTP_STATUS");
    assert!(err.message.contains("answered 500"), "{err}");
    assert!(
        err.message.contains("database exploded at line 42"),
        "{err}"
    );
    assert_eq!(err.details.unwrap()["status"], 500);

    let err = d
        .execute(&url(addr, "/text"), Request::new("lookup", json!({})))
        .await
        .result
        .unwrap_err();
    assert_eq!(dispatch_code(&err), "HTTP_NOT_JSON");
    assert!(
        err.message.contains("`<html>not json at all</html>`"),
        "{err}"
    );

    let err = d
        .execute(&url(addr, "/big"), Request::new("lookup", json!({})))
        .await
        .result
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ResultTooLarge);
    assert!(err.message.contains("more than 1048576 bytes"), "{err}");

    let run = d
        .execute(
            &url(addr, "/slow"),
            Request::new("lookup", json!({})).timeout(Duration::from_millis(300)),
        )
        .await;
    let err = run.result.unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout);
    assert_eq!(err.message, "tool lookup timed out after 300ms");

    // Nobody listening.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let err = d
        .execute(&url(closed, "/echo"), Request::new("lookup", json!({})))
        .await
        .result
        .unwrap_err();
    assert_eq!(dispatch_code(&err), "HTTP_ERROR");
    assert!(err.message.contains(&closed.to_string()), "{err}");
}

#[tokio::test]
async fn loopback_and_metadata_are_refused_unless_allowlisted_and_redirects_are_not_followed() {
    let addr = serve().await;
    let guarded = Dispatcher::new(DispatcherConfig {
        http: toolshed_dispatch::HttpPolicy::default(),
        ..config(Mode::Pool)
    });
    let port = addr.port();
    // A literal address, a name resolving to loopback (checked after resolution), the
    // IPv4-mapped form, and the metadata address: all refused before any connection.
    for (endpoint, kind) in [
        (
            format!("http://127.0.0.1:{port}/echo"),
            "a loopback address",
        ),
        (
            format!("http://localhost:{port}/echo"),
            "a loopback address",
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/echo"),
            "a loopback address",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "a cloud metadata address",
        ),
        (
            "http://[fd00:ec2::254]/".to_owned(),
            "a cloud metadata address",
        ),
        ("http://10.0.0.1:9/".to_owned(), "a private address"),
    ] {
        let err = guarded
            .execute(
                &Endpoint::parse(&endpoint).unwrap(),
                Request::new("lookup", json!({})),
            )
            .await
            .result
            .unwrap_err();
        assert_eq!(
            dispatch_code(&err),
            "HTTP_ADDRESS_REFUSED",
            "{endpoint}: {err}"
        );
        assert!(err.message.contains(kind), "{endpoint}: {err}");
        assert!(err.message.contains("--allow-http-host"), "{err}");
    }

    // Allowlisted by name: the same server answers.
    let by_name = Dispatcher::new(DispatcherConfig {
        http: toolshed_dispatch::HttpPolicy {
            allow: vec!["localhost".parse().unwrap()],
            ..Default::default()
        },
        ..config(Mode::Pool)
    });
    let url = Endpoint::parse(&format!("http://localhost:{port}/echo")).unwrap();
    let v = by_name
        .execute(&url, Request::new("lookup", json!({})))
        .await
        .result
        .unwrap();
    assert_eq!(v["received"]["tool"], "lookup");

    // A redirect (here to the metadata address) is an error naming its Location.
    let allowed = dispatcher(Mode::Pool);
    let err = allowed
        .execute(
            &self::url(addr, "/redirect"),
            Request::new("lookup", json!({})),
        )
        .await
        .result
        .unwrap_err();
    assert_eq!(dispatch_code(&err), "HTTP_REDIRECT_REFUSED", "{err}");
    assert!(
        err.message.contains("302")
            && err
                .message
                .contains("http://169.254.169.254/latest/meta-data/"),
        "{err}"
    );
    assert_eq!(
        err.details.unwrap()["location"],
        "http://169.254.169.254/latest/meta-data/"
    );
}
