//! Addresses the IANA special-purpose registries call not globally reachable are
//! refused like private ones, for HTTP tools (at the call, before any connection) and
//! for MCP server URLs (at registration): the documentation ranges (192.0.2/24,
//! 198.51.100/24, 203.0.113/24, 2001:db8::/32), benchmarking (198.18/15), shared
//! address space (100.64/10), each also in its IPv4-mapped IPv6 form.
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use serde_json::json;

/// Each address as a URL host, and the registry name its refusal carries.
const ADDRESSES: &[(&str, &str)] = &[
    ("192.0.2.1", "Documentation (TEST-NET-1)"),
    ("198.51.100.1", "Documentation (TEST-NET-2)"),
    ("203.0.113.1", "Documentation (TEST-NET-3)"),
    ("198.18.0.1", "Benchmarking"),
    ("100.64.0.1", "Shared Address Space"),
    ("[2001:db8::1]", "Documentation"),
    ("[::ffff:192.0.2.1]", "Documentation (TEST-NET-1)"),
    ("[::ffff:198.51.100.1]", "Documentation (TEST-NET-2)"),
    ("[::ffff:203.0.113.1]", "Documentation (TEST-NET-3)"),
    ("[::ffff:198.18.0.1]", "Benchmarking"),
    ("[::ffff:100.64.0.1]", "Shared Address Space"),
];

#[tokio::test]
async fn reserved_ranges_are_refused_for_http_tools_and_mcp_urls() {
    let s = TestServer::start_with(|c| {
        // A refused address must never be connected to; were it tried, this keeps the
        // test short rather than waiting on an unroutable address.
        c.dispatcher.http.connect_timeout = std::time::Duration::from_secs(2);
    })
    .await;
    for (i, (host, name)) in ADDRESSES.iter().enumerate() {
        // An MCP server at such a URL is refused at registration, naming `url`.
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/mcp-servers",
                Some(&s.deployer),
                Some(json!({"name": format!("r{i}"), "url": format!("http://{host}/mcp")})),
            )
            .await;
        assert_eq!(status, 422, "{host}: {answer}");
        assert_eq!(
            answer["error"]["details"]["fields"][0]["field"], "url",
            "{answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(name) && message.contains("SSRF"),
            "{host}: {message}"
        );

        // An HTTP tool at it registers, and its call is refused before any connection.
        let tool = format!("reserved-{i}");
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/registry/tools",
                Some(&s.deployer),
                Some(
                    json!({"name": tool, "description": "Reaches a reserved address.",
                    "endpoint": format!("http://{host}/echo")}),
                ),
            )
            .await;
        assert_eq!(status, 201, "{answer}");
        let (status, answer) = s
            .call(
                "POST",
                &format!("/api/v1/registry/tools/{tool}/execute"),
                Some(&s.deployer),
                Some(json!({"args": {}})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        let error = &answer["data"]["error"];
        assert_eq!(
            error["details"]["dispatch_code"], "HTTP_ADDRESS_REFUSED",
            "{host}: {error}"
        );
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(name), "{host}: {message}");
    }
}
