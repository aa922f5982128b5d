//! The console's session: the access token in an HttpOnly, SameSite=Strict cookie, the
//! refresh token in another (sent to the refresh route only), and the CSRF token every
//! changing request made with the cookie must send back in `X-CSRF-Token`.
//!
//! The CSRF token is derived from the access token (a SHA-256 of it under a fixed
//! label), so it needs no storage and is the same on every server sharing the signing
//! secret: a page that can read the `toolshed_csrf` cookie (the console's own origin)
//! can send it; a forged cross-site request cannot know it, because it cannot read the
//! HttpOnly access token it was derived from. The `Origin` of a changing request is
//! checked too (it must be the server's own), and SameSite=Strict keeps the browser from
//! sending the cookie on a cross-site request in the first place: three locks, any one
//! of which stops the forgery.

use axum::http::header::{COOKIE, HOST, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, Method};
use sha2::{Digest, Sha256};
use toolshed_api::ApiCode;

use crate::error::ApiError;

/// The cookie holding the access token (HttpOnly).
pub const SESSION_COOKIE: &str = "toolshed_session";
/// The cookie holding the refresh token (HttpOnly, sent to `/console/refresh` only).
pub const REFRESH_COOKIE: &str = "toolshed_refresh";
/// The cookie holding the CSRF token (readable by the page).
pub const CSRF_COOKIE: &str = "toolshed_csrf";
/// The header a changing request sends the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The path of the refresh cookie: the only route the refresh token is sent to.
pub const REFRESH_PATH: &str = "/console/refresh";

/// The CSRF token of a session: hex SHA-256 of the access token under a label.
pub fn csrf_token(access_token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"toolshed-console-csrf\0");
    h.update(access_token.as_bytes());
    hex::encode(h.finalize())
}

/// The value of cookie `name` in the request's `Cookie` headers, if any.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

/// Whether the method changes something (anything but GET, HEAD and OPTIONS).
pub fn is_changing(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Compare two byte strings in time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Refuse a request whose `Origin` (or, without one, `Sec-Fetch-Site`) says it came
/// from another site. A request with neither is a non-browser client or an old browser:
/// the CSRF token (or the absence of the cookie) decides.
pub fn check_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let own = !host.is_empty()
            && (origin == format!("http://{host}") || origin == format!("https://{host}"));
        if !own {
            return Err(rejected(format!(
                "this request came from origin `{origin}`, not from the console's own (`{host}`); changing requests with the session cookie are accepted from the console only"
            )));
        }
        return Ok(());
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(rejected(format!(
            "this request was sent by a {site} page; changing requests with the session cookie are accepted from the console only"
        )));
    }
    Ok(())
}

/// Check a changing request authenticated by the session cookie holding
/// `access_token`: the origin, then the CSRF header against the token's.
pub fn check_csrf(headers: &HeaderMap, access_token: &str) -> Result<(), ApiError> {
    check_origin(headers)?;
    let Some(sent) = headers.get(CSRF_HEADER) else {
        return Err(rejected(
            "no `X-CSRF-Token` header: a changing request with the session cookie must send the value of the `toolshed_csrf` cookie in it (reload the console), or use `Authorization: Bearer`".into(),
        ));
    };
    let expected = csrf_token(access_token);
    if !constant_time_eq(sent.as_bytes(), expected.as_bytes()) {
        return Err(rejected(
            "the `X-CSRF-Token` header is not this session's token: reload the console to read the current one from the `toolshed_csrf` cookie".into(),
        ));
    }
    Ok(())
}

fn rejected(message: String) -> ApiError {
    ApiError::new(ApiCode::CsrfRejected, message)
}

/// Whether the session cookies get `Secure`: the request reached a proxy over HTTPS
/// (`X-Forwarded-Proto: https`) or came from an `https://` page. A client can only make
/// the cookie stricter this way, never weaker.
pub fn secure(headers: &HeaderMap) -> bool {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let origin = headers
        .get(ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("https://"));
    forwarded || origin
}

/// The `Set-Cookie` headers of a session (or, with `None`, of a logout: every cookie
/// cleared).
pub fn set_cookies(headers: &mut HeaderMap, tokens: Option<(&str, u64, &str, u64)>, secure: bool) {
    let flag = if secure { "; Secure" } else { "" };
    let values = match tokens {
        Some((access, access_ttl, refresh, refresh_ttl)) => [
            format!(
                "{SESSION_COOKIE}={access}; Path=/; Max-Age={access_ttl}; HttpOnly; SameSite=Strict{flag}"
            ),
            format!(
                "{REFRESH_COOKIE}={refresh}; Path={REFRESH_PATH}; Max-Age={refresh_ttl}; HttpOnly; SameSite=Strict{flag}"
            ),
            // Readable by the page: it sends it back in `X-CSRF-Token`. It lives as long
            // as the refresh token, so the page can send it to the refresh route.
            format!(
                "{CSRF_COOKIE}={}; Path=/; Max-Age={refresh_ttl}; SameSite=Strict{flag}",
                csrf_token(access)
            ),
        ],
        None => [
            format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{flag}"),
            format!(
                "{REFRESH_COOKIE}=; Path={REFRESH_PATH}; Max-Age=0; HttpOnly; SameSite=Strict{flag}"
            ),
            format!("{CSRF_COOKIE}=; Path=/; Max-Age=0; SameSite=Strict{flag}"),
        ],
    };
    for v in values {
        if let Ok(v) = HeaderValue::from_str(&v) {
            headers.append(SET_COOKIE, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            COOKIE,
            HeaderValue::from_static("a=1; toolshed_session=tok; b=2"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("tok"));
        assert_eq!(cookie(&h, "toolshed"), None);
        assert_eq!(cookie(&h, "b"), Some("2"));
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn origins_are_checked() {
        let mut h = HeaderMap::new();
        h.insert(HOST, HeaderValue::from_static("127.0.0.1:8000"));
        assert!(check_origin(&h).is_ok());
        h.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:8000"));
        assert!(check_origin(&h).is_ok());
        h.insert(ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(check_origin(&h).is_err());
        h.insert(ORIGIN, HeaderValue::from_static("null"));
        assert!(check_origin(&h).is_err());
        h.remove(ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(check_origin(&h).is_err());
    }
}
