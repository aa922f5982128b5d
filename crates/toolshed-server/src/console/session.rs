//! The console's session: the access token in an HttpOnly, SameSite=Strict cookie, the
//! refresh token in another (sent to the console's session routes under `/console/`
//! only: refresh, and logout, which ends the session even after the access cookie
//! expired), and the CSRF token every changing request made with the cookie must send
//! back in `X-CSRF-Token`.
//!
//! The CSRF token is derived from the access token (a SHA-256 of it under a fixed
//! label), so it needs no storage and is the same on every server sharing the signing
//! secret: a page that can read the `toolshed_csrf` cookie (the console's own origin)
//! can send it; a forged cross-site request cannot know it, because it cannot read the
//! HttpOnly access token it was derived from. The `Origin` of a changing request is
//! checked too (it must be the server's own, or the operator's `--public-url`), and
//! SameSite=Strict keeps the browser from sending the cookie on a cross-site request in
//! the first place: three locks, any one of which stops the forgery.

use axum::http::header::{COOKIE, HOST, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, Method};
use sha2::{Digest, Sha256};
use toolshed_api::ApiCode;

use crate::error::ApiError;
use crate::public_url::PublicUrl;

/// The cookie holding the access token (HttpOnly).
pub const SESSION_COOKIE: &str = "toolshed_session";
/// The cookie holding the refresh token (HttpOnly, sent to `/console/refresh` only).
pub const REFRESH_COOKIE: &str = "toolshed_refresh";
/// The cookie holding the CSRF token (readable by the page).
pub const CSRF_COOKIE: &str = "toolshed_csrf";
/// The header a changing request sends the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The refresh route.
pub const REFRESH_PATH: &str = "/console/refresh";
/// The path of the refresh cookie: the console's session routes (login, refresh,
/// logout), never the API.
pub const REFRESH_COOKIE_PATH: &str = "/console";
/// Where the refresh cookie lived before logout needed it: cleared whenever cookies
/// are set, so a browser holding one from then does not send it first and fail.
const OLD_REFRESH_COOKIE_PATH: &str = "/console/refresh";

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
/// from another site. The console's own origins are `http(s)://` + the request's
/// `Host`, and the operator's public URL (`--public-url`); when that is `https://`, a
/// plain-HTTP origin of its host is refused (a downgraded page). A request with
/// neither header is a non-browser client or an old browser: the CSRF token (or the
/// absence of the cookie) decides.
pub fn check_origin(headers: &HeaderMap, public: Option<&PublicUrl>) -> Result<(), ApiError> {
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let own_host = !host.is_empty()
            && (origin == format!("http://{host}") || origin == format!("https://{host}"));
        let public_origin = public.is_some_and(|p| p.is_origin(origin));
        let downgraded = public.is_some_and(|p| p.is_downgrade_of(origin));
        if public_origin || (own_host && !downgraded) {
            return Ok(());
        }
        let expected = match public {
            Some(p) => format!("`{}` or `{host}`", p.origin()),
            None => format!("`{host}`"),
        };
        let why = if downgraded {
            " (plain HTTP, while the server's public URL is HTTPS)"
        } else {
            ""
        };
        return Err(rejected(format!(
            "this request came from origin `{origin}`{why}, not from the console's own ({expected}); changing requests with the session cookie are accepted from the console only"
        )));
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
pub fn check_csrf(
    headers: &HeaderMap,
    access_token: &str,
    public: Option<&PublicUrl>,
) -> Result<(), ApiError> {
    check_origin(headers, public)?;
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

/// Whether the session cookies get `Secure`: the operator's public URL is `https://`,
/// the request reached a proxy over HTTPS (`X-Forwarded-Proto: https`), or it came from
/// an `https://` page. A client can only make the cookie stricter this way, never
/// weaker.
pub fn secure(headers: &HeaderMap, public: Option<&PublicUrl>) -> bool {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let origin = headers
        .get(ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("https://"));
    public.is_some_and(PublicUrl::is_https) || forwarded || origin
}

/// The `Set-Cookie` headers of a session (or, with `None`, of a logout: every cookie
/// cleared). The refresh cookie of the old path is cleared either way.
pub fn set_cookies(headers: &mut HeaderMap, tokens: Option<(&str, u64, &str, u64)>, secure: bool) {
    let flag = if secure { "; Secure" } else { "" };
    let values = match tokens {
        Some((access, access_ttl, refresh, refresh_ttl)) => [
            format!(
                "{SESSION_COOKIE}={access}; Path=/; Max-Age={access_ttl}; HttpOnly; SameSite=Strict{flag}"
            ),
            format!(
                "{REFRESH_COOKIE}={refresh}; Path={REFRESH_COOKIE_PATH}; Max-Age={refresh_ttl}; HttpOnly; SameSite=Strict{flag}"
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
                "{REFRESH_COOKIE}=; Path={REFRESH_COOKIE_PATH}; Max-Age=0; HttpOnly; SameSite=Strict{flag}"
            ),
            format!("{CSRF_COOKIE}=; Path=/; Max-Age=0; SameSite=Strict{flag}"),
        ],
    };
    let old = format!(
        "{REFRESH_COOKIE}=; Path={OLD_REFRESH_COOKIE_PATH}; Max-Age=0; HttpOnly; SameSite=Strict{flag}"
    );
    for v in values.into_iter().chain([old]) {
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
        assert!(check_origin(&h, None).is_ok());
        h.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:8000"));
        assert!(check_origin(&h, None).is_ok());
        h.insert(ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(check_origin(&h, None).is_err());
        h.insert(ORIGIN, HeaderValue::from_static("null"));
        assert!(check_origin(&h, None).is_err());
        h.remove(ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(check_origin(&h, None).is_err());
    }

    #[test]
    fn the_public_url_is_an_origin_of_the_console_and_makes_cookies_secure() {
        let public = PublicUrl::parse("https://tools.example.com").expect("valid");
        let mut h = HeaderMap::new();
        // Behind the proxy the server hears its own address.
        h.insert(HOST, HeaderValue::from_static("127.0.0.1:8000"));
        h.insert(
            ORIGIN,
            HeaderValue::from_static("https://tools.example.com"),
        );
        assert!(check_origin(&h, None).is_err(), "unknown without the flag");
        assert!(check_origin(&h, Some(&public)).is_ok());
        for forged in [
            "https://evil.example",
            "https://tools.example.com.evil.example",
            "http://tools.example.com",
            "null",
        ] {
            h.insert(ORIGIN, HeaderValue::from_static(forged));
            let e = check_origin(&h, Some(&public)).expect_err(forged);
            assert!(
                e.message().contains("https://tools.example.com"),
                "{forged}: {e:?}"
            );
        }
        // A proxy that passes the Host on: the plain-HTTP page of the public host is
        // refused, the HTTPS one accepted.
        h.insert(HOST, HeaderValue::from_static("tools.example.com"));
        h.insert(ORIGIN, HeaderValue::from_static("http://tools.example.com"));
        assert!(check_origin(&h, Some(&public)).is_err());
        assert!(check_origin(&h, None).is_ok(), "as before without the flag");
        h.insert(
            ORIGIN,
            HeaderValue::from_static("https://tools.example.com"),
        );
        assert!(check_origin(&h, Some(&public)).is_ok());
        // Cookies: Secure with an https public URL, even over the proxy's plain hop.
        let plain = HeaderMap::new();
        assert!(!secure(&plain, None));
        assert!(secure(&plain, Some(&public)));
        let http_public = PublicUrl::parse("http://10.0.0.5:8000").expect("valid");
        assert!(!secure(&plain, Some(&http_public)));
    }
}
