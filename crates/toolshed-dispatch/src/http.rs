//! HTTP endpoints: the call is a JSON POST of `{"tool", "args", "context"}`; a 2xx JSON
//! answer is the result, anything else an error result quoting what came back. Only
//! addresses the [`HttpPolicy`] allows are connected to (checked after resolution, in
//! the client's resolver), redirects are never followed, and the answer is read up to
//! the cap.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{DispatchError, excerpt};
use crate::guard::{GuardedResolver, HttpPolicy, Refused};
use crate::protocol::CallContext;

/// How much of a bad body an error quotes.
const EXCERPT_CHARS: usize = 300;

/// The HTTP client of a dispatcher and the policy its resolver enforces.
#[derive(Clone)]
pub(crate) struct Http {
    /// `Err` when the client could not be built (no TLS backend): every call fails
    /// with it, rather than falling back to a client without the guard.
    client: Result<reqwest::Client, String>,
    policy: Arc<HttpPolicy>,
}

/// The guarded client: no redirects, no proxies (a proxy would connect to whatever
/// address it resolves, unchecked), the policy's resolver and time caps.
pub(crate) fn client(policy: &HttpPolicy) -> Http {
    let policy = Arc::new(policy.clone());
    let client = reqwest::Client::builder()
        .user_agent(concat!("toolshed-dispatch/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver {
            policy: policy.clone(),
        }))
        .connect_timeout(policy.connect_timeout)
        .timeout(policy.timeout)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"));
    Http { client, policy }
}

/// POST one call. Credentials are not sent: an HTTP service holds its own.
pub(crate) async fn post(
    http: &Http,
    url: &str,
    tool: &str,
    args: &Value,
    context: &CallContext,
    timeout: Option<Duration>,
    cap: usize,
) -> Result<Value, DispatchError> {
    let client = http.client.as_ref().map_err(|message| DispatchError::Io {
        what: message.clone(),
        source: std::io::Error::other("no HTTP client"),
    })?;
    // A literal address is never handed to the resolver: check it here.
    if let Ok(parsed) = reqwest::Url::parse(url) {
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let (Some(ip), Some(host)) = (literal, parsed.host_str())
            && let Err(kind) = http.policy.check(host, ip)
        {
            return Err(refused(
                tool,
                url,
                &Refused {
                    host: host.to_owned(),
                    address: ip,
                    kind,
                },
            ));
        }
    }
    let body = json!({"tool": tool, "args": args, "context": context});
    let mut request = client
        .post(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .json(&body);
    if let Some(key) = &context.idempotency_key {
        request = request.header("Idempotency-Key", key);
    }
    if let Some(t) = timeout {
        request = request.timeout(t);
    }
    let transport = |source: reqwest::Error| {
        if source.is_timeout() {
            DispatchError::Timeout {
                tool: tool.to_owned(),
                ms: timeout.map(|t| t.as_millis()).unwrap_or_default(),
            }
        } else if let Some(r) = refusal(&source) {
            refused(tool, url, r)
        } else {
            DispatchError::Http {
                tool: tool.to_owned(),
                url: url.to_owned(),
                source,
            }
        }
    };
    let mut response = request.send().await.map_err(transport)?;
    let too_large = || DispatchError::HttpTooLarge {
        tool: tool.to_owned(),
        url: url.to_owned(),
        cap,
    };
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .map(|v| excerpt(&String::from_utf8_lossy(v.as_bytes()), EXCERPT_CHARS))
            .unwrap_or_else(|| "(no Location header)".into());
        return Err(DispatchError::HttpRedirect {
            tool: tool.to_owned(),
            url: url.to_owned(),
            status: status.as_u16(),
            location,
        });
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if bytes.len() + chunk.len() > cap {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    let text = || excerpt(&String::from_utf8_lossy(&bytes), EXCERPT_CHARS);
    if !status.is_success() {
        let body = text();
        return Err(DispatchError::HttpStatus {
            tool: tool.to_owned(),
            url: url.to_owned(),
            status: status.as_u16(),
            excerpt: if body.trim().is_empty() {
                "(empty body)".into()
            } else {
                body
            },
        });
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|_| DispatchError::HttpNotJson {
        tool: tool.to_owned(),
        url: url.to_owned(),
        excerpt: text(),
    })
}

/// The guard's refusal, if it is what failed this request.
fn refusal(error: &reqwest::Error) -> Option<&Refused> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<Refused>() {
            return Some(r);
        }
        cause = c.source();
    }
    None
}

fn refused(tool: &str, url: &str, r: &Refused) -> DispatchError {
    DispatchError::HttpAddressRefused {
        tool: tool.to_owned(),
        url: url.to_owned(),
        address: r.address,
        kind: r.kind,
    }
}
