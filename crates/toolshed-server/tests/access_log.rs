//! The opt-in access log (`TOOLSHED_LOG=info,tower_http=debug`) against a real server:
//! a token, a code or a password sent in the query string is written `[REDACTED]`,
//! and the other parameters as they came.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::TestServer;

/// Everything the subscriber writes.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Log {
    type Writer = Log;
    fn make_writer(&'a self) -> Log {
        self.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_redacts_token_like_query_parameters() {
    let log = Log::default();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,tower_http=debug,toolshed_server=debug",
        ))
        .with_writer(log.clone())
        .with_ansi(false)
        .init();
    let s = TestServer::start().await;
    let paths = [
        "/healthz?access_token=SECRET-1&page=2&Code=SECRET-2&api_key=SECRET-3",
        "/healthz?REFRESH_TOKEN=SECRET-4&password=SECRET-5&client_secret=SECRET-6&q=tools",
        "/healthz?token=SECRET-7&key=SECRET-8&x-api-key=SECRET-9&id_token=SECRET-10&jwt=SECRET-11",
        "/healthz?access%5Ftoken=SECRET-12&sig=SECRET-13&auth=SECRET-14&secret&per_page=5",
        "/api/v1/no-such-route?access_token=SECRET-15",
    ];
    for path in paths {
        let resp = s
            .client
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert!(resp.status().as_u16() < 500, "{path}");
    }
    s.stop().await;
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    for path in paths {
        let (route, _) = path.split_once('?').unwrap();
        assert!(
            text.contains(route),
            "no access log line for {route}:\n{text}"
        );
    }
    assert!(
        !text.contains("SECRET"),
        "a secret from a query string is in the log:\n{text}"
    );
    for kept in [
        "access_token=[REDACTED]",
        "page=2",
        "Code=[REDACTED]",
        "REFRESH_TOKEN=[REDACTED]",
        "q=tools",
        "per_page=5",
    ] {
        assert!(text.contains(kept), "`{kept}` is not in the log:\n{text}");
    }
}
