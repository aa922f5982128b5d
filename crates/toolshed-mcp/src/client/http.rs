//! Streamable HTTP servers: rmcp's transport over our guarded reqwest client, with
//! header and bearer auth whose values come from credentials.
//!
//! The client is built like the dispatcher's HTTP client: no redirects, no proxies,
//! the SSRF guard's resolver (every address a name resolves to is checked, in the
//! resolver, so a rebinding cannot slip a private address through) and a literal
//! address in the URL checked here. There is no overall request timeout: an SSE answer
//! may stay open for as long as a call runs, and our own per-request timeout ends it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::ClientConfig;
use crate::error::McpError;

/// Headers the transport sets itself; a spec may not override them.
const RESERVED: &[&str] = &["accept", "mcp-session-id", "last-event-id", "content-type"];

/// The transport to `url`, with `headers` (credentials expanded).
///
/// The host is resolved and checked here too, before the handshake, so a refused
/// address is an error that says so (the resolver's refusal reaches us only as
/// "error sending request" through rmcp's transport); the resolver's own check, at
/// connection time, is still the one that counts.
pub(crate) async fn transport(
    config: &ClientConfig,
    server: &str,
    url: &str,
    headers: Vec<(String, String)>,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, McpError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| McpError::spec(server, "url", format!("`{url}` is not a URL: {e}")))?;
    // A literal address never reaches the resolver: check it here.
    let literal = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        _ => None,
    };
    if let (Some(ip), Some(host)) = (literal, parsed.host_str())
        && let Err(kind) = config.http_policy.check(host, ip)
    {
        return Err(McpError::AddressRefused {
            server: server.to_owned(),
            url: url.to_owned(),
            reason: format!("{ip} is {kind}"),
        });
    }
    if literal.is_none()
        && let Some(host) = parsed.host_str()
    {
        let port = parsed.port_or_known_default().unwrap_or(80);
        let addrs = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| McpError::Start {
                server: server.to_owned(),
                reason: format!("cannot resolve `{host}`: {e}"),
            })?;
        for a in addrs {
            if let Err(kind) = config.http_policy.check(host, a.ip()) {
                return Err(McpError::AddressRefused {
                    server: server.to_owned(),
                    url: url.to_owned(),
                    reason: format!("{host} resolves to {}, {kind}", a.ip()),
                });
            }
        }
    }
    let client = reqwest::Client::builder()
        .user_agent(concat!("toolshed-mcp/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(toolshed_dispatch::guard::resolver(&config.http_policy))
        .connect_timeout(config.http_policy.connect_timeout)
        .build()
        .map_err(|e| McpError::Start {
            server: server.to_owned(),
            reason: format!("cannot build the HTTP client: {e}"),
        })?;
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let field = format!("headers.{name}");
        if RESERVED.iter().any(|r| name.eq_ignore_ascii_case(r)) {
            return Err(McpError::spec(
                server,
                &field,
                "is set by the transport itself; remove it",
            ));
        }
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| McpError::spec(server, &field, "is not a valid header name"))?;
        // The value may hold a credential: the error never quotes it.
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            McpError::spec(
                server,
                &field,
                "its value has characters a header cannot carry (a newline or a control character)",
            )
        })?;
        value.set_sensitive(true);
        custom.insert(header, value);
    }
    let mut transport_config = StreamableHttpClientTransportConfig::with_uri(Arc::<str>::from(url))
        .custom_headers(custom)
        .max_json_response_size(config.limits.max_result_bytes.saturating_add(64 * 1024))
        .max_sse_event_size(config.limits.max_result_bytes.saturating_add(64 * 1024));
    // A session the server expired (its restart) is recovered by a new handshake.
    transport_config = transport_config.reinit_on_expired_session(true);
    Ok(StreamableHttpClientTransport::with_client(
        client,
        transport_config,
    ))
}

/// Whether `error`'s chain says the SSRF guard refused the address, and its message.
pub(crate) fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(error);
    while let Some(c) = cause {
        let text = c.to_string();
        if text.contains("which tools may not reach") {
            return Some(text);
        }
        cause = c.source();
    }
    None
}
