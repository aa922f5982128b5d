//! The opt-in access log's request span (`TOOLSHED_LOG=info,tower_http=debug`): method,
//! URI and version, with every query parameter that may carry a credential written
//! `[REDACTED]`. A token sent as `?access_token=` (as some clients and the MCP
//! authorization flow do), an OAuth `code`, a password or an API key never reaches
//! the log; the other parameters are written as they came.

use axum::extract::Request;
use axum::http::Uri;

/// What replaces a redacted value.
pub const REDACTED: &str = "[REDACTED]";

/// The span of one request, at DEBUG, as tower-http's default but with the query
/// string redacted.
pub(crate) fn make_span(req: &Request) -> tracing::Span {
    tracing::debug_span!(
        "request",
        method = %req.method(),
        uri = %redacted_uri(req.uri()),
        version = ?req.version(),
    )
}

/// The path and query of `uri`, with credential-like parameters' values replaced.
pub fn redacted_uri(uri: &Uri) -> String {
    match uri.query() {
        Some(query) => format!("{}?{}", uri.path(), redacted_query(query)),
        None => uri.path().to_owned(),
    }
}

/// A query string with the value of every parameter whose name says it may hold a
/// credential, and of every value that looks like a signed token (a JWT), replaced by
/// [`REDACTED`]. Names are compared decoded and case-insensitively, `-` as `_`.
pub fn redacted_query(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        let (name, value) = match pair.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (pair, None),
        };
        let decoded = url::form_urlencoded::parse(pair.as_bytes()).next();
        let secret_name = decoded.as_ref().is_some_and(|(n, _)| is_secret_name(n));
        let looks_signed = decoded
            .as_ref()
            .is_some_and(|(n, v)| looks_like_jwt(v) || (value.is_none() && looks_like_jwt(n)));
        match value {
            Some(_) if secret_name || looks_signed => {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
            }
            None if looks_signed => out.push_str(REDACTED),
            _ => out.push_str(pair),
        }
    }
    out
}

/// Names of parameters that carry a credential, as they are (lowercase, `_`).
const SECRET_NAMES: &[&str] = &[
    "code",
    "auth",
    "authorization",
    "key",
    "sig",
    "jwt",
    "otp",
    "pin",
    "pwd",
    "pass",
    "session",
    "sessionid",
    "session_id",
    "sid",
    "csrf",
    "xsrf",
    "passphrase",
];

/// Parts of a name that make it a credential's: `access_token`, `client_secret`,
/// `api_key`, `x_api_key`, `new_password`, `aws_credentials`, `auth_code`, …
const SECRET_PARTS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "credential",
    "signature",
];

fn is_secret_name(name: &str) -> bool {
    let name = name
        .trim()
        .trim_end_matches("[]")
        .to_ascii_lowercase()
        .replace('-', "_");
    SECRET_NAMES.contains(&name.as_str())
        || SECRET_PARTS.iter().any(|part| name.contains(part))
        || name.ends_with("_key")
        || name.ends_with("_code")
        || name.ends_with("_sig")
}

/// A JWT: three base64url parts, the first a JSON object (`eyJ`).
fn looks_like_jwt(value: &str) -> bool {
    value.starts_with("eyJ") && value.split('.').count() == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(query: &str, expect: &str) {
        assert_eq!(redacted_query(query), expect, "{query}");
    }

    #[test]
    fn credential_parameters_are_redacted_and_the_rest_kept() {
        check("access_token=abc&page=2", "access_token=[REDACTED]&page=2");
        check(
            "Refresh_Token=abc&ID-TOKEN=d&token=e",
            "Refresh_Token=[REDACTED]&ID-TOKEN=[REDACTED]&token=[REDACTED]",
        );
        check(
            "code=x&state=s&client_secret=y",
            "code=[REDACTED]&state=s&client_secret=[REDACTED]",
        );
        check(
            "password=p&new_password=q&PASSWD=r&pwd=s",
            "password=[REDACTED]&new_password=[REDACTED]&PASSWD=[REDACTED]&pwd=[REDACTED]",
        );
        check(
            "key=k&api_key=k&apiKey=k&x-api-key=k&aws_access_key=k&keyword=rust",
            "key=[REDACTED]&api_key=[REDACTED]&apiKey=[REDACTED]&x-api-key=[REDACTED]&aws_access_key=[REDACTED]&keyword=rust",
        );
        check(
            "sig=1&signature=2&X-Amz-Signature=3&auth=4&Authorization=5&session=6",
            "sig=[REDACTED]&signature=[REDACTED]&X-Amz-Signature=[REDACTED]&auth=[REDACTED]&Authorization=[REDACTED]&session=[REDACTED]",
        );
        // Names are compared decoded.
        check(
            "access%5Ftoken=a&tok%65n=b",
            "access%5Ftoken=[REDACTED]&tok%65n=[REDACTED]",
        );
        // A signed token is redacted whatever its name, or with none.
        check(
            "t=eyJhbGc.eyJzdWI.sig&eyJhbGc.eyJzdWI.sig",
            "t=[REDACTED]&[REDACTED]",
        );
        // Nothing else changes: empty values, bare names, repeated and empty pairs.
        check(
            "q=tools&tag=a&tag=b&flag&&x=",
            "q=tools&tag=a&tag=b&flag&&x=",
        );
        check("secret", "secret");
        check("token=", "token=[REDACTED]");
        check("", "");
    }

    #[test]
    fn the_path_is_kept_and_the_query_redacted() {
        let uri: Uri = "/mcp?access_token=abc&x=1".parse().unwrap_or_default();
        assert_eq!(redacted_uri(&uri), "/mcp?access_token=[REDACTED]&x=1");
        let uri: Uri = "/healthz".parse().unwrap_or_default();
        assert_eq!(redacted_uri(&uri), "/healthz");
    }
}
