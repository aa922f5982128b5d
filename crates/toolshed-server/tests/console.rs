//! The console's server side: its embedded files (types, CSP, caching), the cookie
//! session (flags, refresh, logout, expiry) and the attacks on it: a forged changing
//! request without or with a wrong CSRF token, from another origin, a forged login; a
//! logged-out session's tokens reused (as cookies or bearer tokens); the operator's
//! public URL (`Secure` cookies, its origin accepted, forged ones refused).
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use reqwest::header::{HeaderMap, SET_COOKIE};
use serde_json::{Value, json};

struct Session {
    cookie: String,
    csrf: String,
    refresh: String,
    set_cookies: Vec<String>,
}

fn set_cookies(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

fn cookie_value(set: &[String], name: &str) -> String {
    set.iter()
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .map(|rest| rest.split(';').next().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no {name} cookie in {set:?}"))
}

async fn login(s: &TestServer, user: &str, password: &str, extra: &[(&str, &str)]) -> Session {
    let mut req = s
        .client
        .post(format!("{}/console/session", s.base))
        .header("content-type", "application/json")
        .header("origin", &s.base)
        .body(json!({"username": user, "password": password}).to_string());
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let set = set_cookies(resp.headers());
    let body: Value = resp.json().await.unwrap();
    // The tokens are in the cookies only, never in the body the page can read.
    let text = body.to_string();
    let session = cookie_value(&set, "toolshed_session");
    assert!(!text.contains(&session), "{text}");
    let csrf = cookie_value(&set, "toolshed_csrf");
    assert_eq!(body["data"]["csrf_token"], csrf);
    Session {
        cookie: format!("toolshed_session={session}"),
        refresh: format!(
            "toolshed_refresh={}",
            cookie_value(&set, "toolshed_refresh")
        ),
        csrf,
        set_cookies: set,
    }
}

/// A request with the session cookie and the given headers; status and JSON body.
async fn with_cookie(
    s: &TestServer,
    method: &str,
    path: &str,
    cookie: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = s
        .client
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", s.base),
        )
        .header("cookie", cookie);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn the_console_is_served_embedded_with_a_strict_policy() {
    let s = TestServer::start().await;
    for path in [
        "/",
        "/tools",
        "/tools/some-id",
        "/runs/r1",
        "/approvals",
        "/login",
        "/admin",
    ] {
        let resp = s
            .client
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers().clone();
        assert_eq!(h["content-type"], "text/html; charset=utf-8", "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        let page = resp.text().await.unwrap();
        assert!(
            page.contains("<script type=\"module\" src=\"/assets/js/app.js\">"),
            "{page}"
        );
    }
    let resp = s
        .client
        .get(format!("{}/assets/js/app.js", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(resp.headers()["cache-control"], "no-cache");
    let etag = resp.headers()["etag"].to_str().unwrap().to_owned();
    // The browser's copy is current: a 304 without a body.
    let again = s
        .client
        .get(format!("{}/assets/js/app.js", s.base))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    let css = s
        .client
        .get(format!("{}/assets/console.css", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    // Unknown files and path tricks are a 404 envelope, never a file of the host.
    for path in [
        "/assets/nope.js",
        "/assets/../Cargo.toml",
        "/assets/%2e%2e/lib.rs",
    ] {
        let resp = s
            .client
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "NOT_FOUND", "{path}");
    }
    // The API's own 404 is unchanged.
    let (status, body) = s.call("GET", "/api/v1/nope", None, None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("NOT_FOUND"))
    );
    assert!(toolshed_server::console::assets::total_bytes() > 1000);
    s.stop().await;
}

#[tokio::test]
async fn login_sets_strict_http_only_cookies_that_the_api_accepts() {
    let s = TestServer::start().await;
    let session = login(&s, "admin", common::ADMIN_PASSWORD, &[]).await;
    let access = session
        .set_cookies
        .iter()
        .find(|c| c.starts_with("toolshed_session="))
        .unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(access.contains(flag), "{access}");
    }
    assert!(!access.contains("Secure"), "plain HTTP: {access}");
    let refresh = session
        .set_cookies
        .iter()
        .find(|c| c.starts_with("toolshed_refresh=") && !c.contains("Max-Age=0"))
        .unwrap();
    // Sent to the console's session routes (refresh, logout), never to the API.
    assert!(
        refresh.contains("HttpOnly") && refresh.contains("Path=/console;"),
        "{refresh}"
    );
    // The cookie of the path it had before is cleared, so it cannot shadow this one.
    assert!(
        session
            .set_cookies
            .iter()
            .any(|c| c.starts_with("toolshed_refresh=;")
                && c.contains("Path=/console/refresh")
                && c.contains("Max-Age=0")),
        "{:?}",
        session.set_cookies
    );
    let csrf = session
        .set_cookies
        .iter()
        .find(|c| c.starts_with("toolshed_csrf="))
        .unwrap();
    // The page reads this one.
    assert!(
        !csrf.contains("HttpOnly") && csrf.contains("SameSite=Strict"),
        "{csrf}"
    );

    // Behind a TLS proxy the cookies are Secure.
    let tls = login(
        &s,
        "admin",
        common::ADMIN_PASSWORD,
        &[("x-forwarded-proto", "https")],
    )
    .await;
    assert!(
        tls.set_cookies.iter().all(|c| c.contains("; Secure")),
        "{:?}",
        tls.set_cookies
    );

    // The cookie authenticates reads.
    let (status, me) = with_cookie(&s, "GET", "/api/v1/auth/me", &session.cookie, &[], None).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["data"]["username"], "admin");

    // A wrong password is a 401 and sets nothing.
    let resp = s
        .client
        .post(format!("{}/console/session", s.base))
        .header("content-type", "application/json")
        .body(json!({"username": "admin", "password": "wrong-password"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(set_cookies(resp.headers()).is_empty());

    // An expired or tampered cookie is a 401: the console shows its login page.
    for bad in [
        common::expired_token(),
        common::tampered(&session.cookie["toolshed_session=".len()..]),
    ] {
        let (status, body) = with_cookie(
            &s,
            "GET",
            "/api/v1/auth/me",
            &format!("toolshed_session={bad}"),
            &[],
            None,
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some("UNAUTHENTICATED")),
            "{body}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn a_changing_request_with_the_cookie_needs_the_csrf_token_and_the_origin() {
    let s = TestServer::start().await;
    let session = login(&s, "admin", common::ADMIN_PASSWORD, &[]).await;
    let new_user =
        |name: &str| json!({"username": name, "password": "password-123", "role": "viewer"});
    let origin = s.base.clone();

    // No token at all: refused, nothing done.
    let (status, body) = with_cookie(
        &s,
        "POST",
        "/api/v1/users",
        &session.cookie,
        &[("origin", &origin)],
        Some(new_user("eve1")),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("CSRF_REJECTED")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("X-CSRF-Token"),
        "{body}"
    );

    // A wrong token, and another session's token: refused.
    let other = login(&s, "dee", "password-123", &[]).await;
    for wrong in ["0000", other.csrf.as_str(), ""] {
        let (status, body) = with_cookie(
            &s,
            "POST",
            "/api/v1/users",
            &session.cookie,
            &[("origin", &origin), ("x-csrf-token", wrong)],
            Some(new_user("eve2")),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("CSRF_REJECTED")),
            "{wrong}: {body}"
        );
    }

    // The right token from another origin, or sent by a cross-site page: refused.
    for headers in [
        vec![
            ("origin", "http://evil.example"),
            ("x-csrf-token", session.csrf.as_str()),
        ],
        vec![("origin", "null"), ("x-csrf-token", session.csrf.as_str())],
        vec![
            ("sec-fetch-site", "cross-site"),
            ("x-csrf-token", session.csrf.as_str()),
        ],
    ] {
        let (status, body) = with_cookie(
            &s,
            "POST",
            "/api/v1/users",
            &session.cookie,
            &headers,
            Some(new_user("eve3")),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("CSRF_REJECTED")),
            "{headers:?}: {body}"
        );
    }
    // DELETE and PATCH are checked too.
    for method in ["DELETE", "PATCH"] {
        let (status, body) = with_cookie(
            &s,
            method,
            "/api/v1/users/vic",
            &session.cookie,
            &[],
            Some(json!({"role": "admin"})),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("CSRF_REJECTED")),
            "{method}: {body}"
        );
    }
    // None of it did anything.
    let (_, users) = s.call("GET", "/api/v1/users", Some(&s.admin), None).await;
    let names: Vec<&str> = users["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("eve")), "{names:?}");
    assert_eq!(
        users["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["username"] == "vic")
            .unwrap()["role"],
        "viewer"
    );

    // The console's own request: same origin, the session's token.
    let (status, body) = with_cookie(
        &s,
        "POST",
        "/api/v1/users",
        &session.cookie,
        &[("origin", &origin), ("x-csrf-token", &session.csrf)],
        Some(new_user("carol")),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // A bearer token needs no CSRF token (a browser never sends it on its own).
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(new_user("dave")),
        )
        .await;
    assert_eq!(status, 201, "{body}");

    // A viewer's cookie with a valid token is still only a viewer: the role decides.
    let viewer = login(&s, "vic", "password-123", &[]).await;
    let (status, body) = with_cookie(
        &s,
        "POST",
        "/api/v1/approvals/some-call/approve",
        &viewer.cookie,
        &[("origin", &origin), ("x-csrf-token", &viewer.csrf)],
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("FORBIDDEN")),
        "{body}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_forged_login_refresh_and_logout() {
    let s = TestServer::start().await;
    // A cross-site page cannot log the victim in (as the attacker).
    let resp = s
        .client
        .post(format!("{}/console/session", s.base))
        .header("content-type", "application/json")
        .header("origin", "http://evil.example")
        .body(json!({"username": "admin", "password": common::ADMIN_PASSWORD}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert!(set_cookies(resp.headers()).is_empty());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "CSRF_REJECTED");

    let session = login(&s, "admin", common::ADMIN_PASSWORD, &[]).await;
    // Refresh: new cookies from the refresh cookie (same origin only).
    let (status, body) = with_cookie(
        &s,
        "POST",
        "/console/refresh",
        &session.refresh,
        &[("origin", "http://evil.example")],
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("CSRF_REJECTED"))
    );
    let resp = s
        .client
        .post(format!("{}/console/refresh", s.base))
        .header("cookie", &session.refresh)
        .header("origin", &s.base)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let renewed = set_cookies(resp.headers());
    let fresh = format!(
        "toolshed_session={}",
        cookie_value(&renewed, "toolshed_session")
    );
    let (status, _) = with_cookie(&s, "GET", "/api/v1/auth/me", &fresh, &[], None).await;
    assert_eq!(status, 200);
    // An access token is not a refresh token, and garbage is nothing.
    for bad in [
        format!(
            "toolshed_refresh={}",
            &session.cookie["toolshed_session=".len()..]
        ),
        "toolshed_refresh=garbage".to_owned(),
    ] {
        let (status, body) = with_cookie(&s, "POST", "/console/refresh", &bad, &[], None).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some("UNAUTHENTICATED")),
            "{body}"
        );
    }

    // Another login of the same user: a session of its own, which the logout below
    // leaves alone (as it leaves the API's bearer token alone).
    let other = login(&s, "admin", common::ADMIN_PASSWORD, &[]).await;

    // Logout needs the CSRF token too, and clears every cookie.
    let (status, body) =
        with_cookie(&s, "POST", "/console/logout", &session.cookie, &[], None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("CSRF_REJECTED"))
    );
    // A forged logout changed nothing: the session still works.
    let (status, _) = with_cookie(&s, "GET", "/api/v1/auth/me", &session.cookie, &[], None).await;
    assert_eq!(status, 200);
    let resp = s
        .client
        .post(format!("{}/console/logout", s.base))
        .header("cookie", format!("{}; {}", session.cookie, session.refresh))
        .header("origin", &s.base)
        .header("x-csrf-token", &session.csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let cleared = set_cookies(resp.headers());
    assert_eq!(cleared.len(), 4, "{cleared:?}");
    assert!(
        cleared.iter().all(|c| c.contains("Max-Age=0")),
        "{cleared:?}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["data"]["session_ended"], true, "{body}");

    // The attack: copies of the logged-out session's tokens, reused at once.
    let access = &session.cookie["toolshed_session=".len()..];
    let refresh = &session.refresh["toolshed_refresh=".len()..];
    for (what, cookie) in [
        ("the session cookie", session.cookie.clone()),
        ("the cookie of a refresh since", fresh.clone()),
    ] {
        let (status, body) = with_cookie(&s, "GET", "/api/v1/auth/me", &cookie, &[], None).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some("UNAUTHENTICATED")),
            "{what}: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("logged out"),
            "{body}"
        );
    }
    let (status, body) = s.call("GET", "/api/v1/auth/me", Some(access), None).await;
    assert_eq!(status, 401, "the cookie's token as a bearer token: {body}");
    let (status, body) =
        with_cookie(&s, "POST", "/console/refresh", &session.refresh, &[], None).await;
    assert_eq!(status, 401, "the refresh cookie: {body}");
    let (status, body) = s
        .call(
            "POST",
            "/api/v1/auth/refresh",
            None,
            Some(json!({"refresh_token": refresh})),
        )
        .await;
    assert_eq!(status, 401, "the refresh token at the API: {body}");
    // ... and with a CSRF token a page could still hold, nothing changes.
    let (status, _) = with_cookie(
        &s,
        "POST",
        "/api/v1/users",
        &session.cookie,
        &[("origin", &s.base), ("x-csrf-token", &session.csrf)],
        Some(json!({"username": "mallory", "password": "password-123", "role": "viewer"})),
    )
    .await;
    assert_eq!(status, 401);

    // The user's other sessions go on: another console login, the API's bearer token.
    let (status, _) = with_cookie(&s, "GET", "/api/v1/auth/me", &other.cookie, &[], None).await;
    assert_eq!(status, 200, "another console session");
    let (status, _) = s.call("GET", "/api/v1/auth/me", Some(&s.admin), None).await;
    assert_eq!(status, 200, "an API session");

    // With the access cookie gone (expired), the refresh cookie still names the
    // session: logout ends it too, and its access token with it.
    let resp = s
        .client
        .post(format!("{}/console/logout", s.base))
        .header("cookie", &other.refresh)
        .header("origin", &s.base)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["data"]["session_ended"], true, "{body}");
    let (status, _) = with_cookie(&s, "GET", "/api/v1/auth/me", &other.cookie, &[], None).await;
    assert_eq!(status, 401);
    // Without any cookie there is nothing to end; the answer still clears the cookies.
    let resp = s
        .client
        .post(format!("{}/console/logout", s.base))
        .header("origin", &s.base)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["data"]["session_ended"], false, "{body}");

    // The API's own logout ends a bearer session the same way, and only it.
    let second = s.login("admin", common::ADMIN_PASSWORD).await;
    let (status, body) = s
        .call("POST", "/api/v1/auth/logout", Some(&second), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["logged_out"], true);
    let (status, _) = s.call("GET", "/api/v1/auth/me", Some(&second), None).await;
    assert_eq!(status, 401);
    let (status, _) = s
        .call("POST", "/api/v1/auth/logout", Some(&second), None)
        .await;
    assert_eq!(status, 401, "a second logout with the ended token");
    let (status, _) = s.call("GET", "/api/v1/auth/me", Some(&s.admin), None).await;
    assert_eq!(status, 200);
    // A token from before sessions existed (no `sid`), current in every other way, is
    // refused: no logout could end it.
    let key = jsonwebtoken::DecodingKey::from_secret(common::SECRET.as_bytes());
    let mut validation = jsonwebtoken::Validation::default();
    validation.set_issuer(&["toolshed"]);
    let mut claims = jsonwebtoken::decode::<Value>(&s.admin, &key, &validation)
        .unwrap()
        .claims;
    assert!(claims["sid"].is_string(), "{claims}");
    claims.as_object_mut().unwrap().remove("sid");
    let sessionless = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(common::SECRET.as_bytes()),
    )
    .unwrap();
    let (status, body) = s
        .call("GET", "/api/v1/auth/me", Some(&sessionless), None)
        .await;
    assert_eq!(status, 401, "{body}");
    // A logout by cookie without the CSRF token is refused like any change.
    let third = login(&s, "admin", common::ADMIN_PASSWORD, &[]).await;
    let (status, body) = with_cookie(
        &s,
        "POST",
        "/api/v1/auth/logout",
        &third.cookie,
        &[("origin", "http://evil.example")],
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("CSRF_REJECTED"))
    );
    let (status, _) = with_cookie(&s, "GET", "/api/v1/auth/me", &third.cookie, &[], None).await;
    assert_eq!(status, 200, "the forged logout ended nothing");
    s.stop().await;
}

#[tokio::test]
async fn the_public_url_makes_cookies_secure_and_is_the_only_other_origin() {
    let s = TestServer::start_with(|c| {
        c.public_url = Some(
            toolshed_server::public_url::PublicUrl::parse("https://tools.example.com").unwrap(),
        );
    })
    .await;
    let public = "https://tools.example.com";
    // Through the proxy: the page's origin is the public URL, the server hears its own
    // address over plain HTTP, and no X-Forwarded-Proto says so: the cookies are Secure.
    let session = login(&s, "admin", common::ADMIN_PASSWORD, &[("origin", public)]).await;
    assert!(
        session.set_cookies.iter().all(|c| c.contains("; Secure")),
        "{:?}",
        session.set_cookies
    );
    // The console's own request from the public origin.
    let (status, body) = with_cookie(
        &s,
        "POST",
        "/api/v1/users",
        &session.cookie,
        &[("origin", public), ("x-csrf-token", &session.csrf)],
        Some(json!({"username": "carol", "password": "password-123", "role": "viewer"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Forged origins, each with the right CSRF token: refused, nothing done.
    for forged in [
        "https://evil.example",
        "https://tools.example.com.evil.example",
        "https://evil.example/https://tools.example.com",
        "http://tools.example.com",
        "null",
    ] {
        let (status, body) = with_cookie(
            &s,
            "POST",
            "/api/v1/users",
            &session.cookie,
            &[("origin", forged), ("x-csrf-token", &session.csrf)],
            Some(json!({"username": "eve", "password": "password-123", "role": "admin"})),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("CSRF_REJECTED")),
            "{forged}: {body}"
        );
        assert!(
            body["error"]["message"].as_str().unwrap().contains(public),
            "the message names the accepted origin: {body}"
        );
        // A forged login from there is refused too.
        let resp = s
            .client
            .post(format!("{}/console/session", s.base))
            .header("content-type", "application/json")
            .header("origin", forged)
            .body(json!({"username": "admin", "password": common::ADMIN_PASSWORD}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{forged}");
        assert!(set_cookies(resp.headers()).is_empty());
    }
    // The plain-HTTP page of the public host is refused even when a proxy passes that
    // Host on (the Host rule alone would take it).
    let (status, body) = with_cookie(
        &s,
        "POST",
        "/api/v1/users",
        &session.cookie,
        &[
            ("origin", "http://tools.example.com"),
            ("host", "tools.example.com"),
            ("x-csrf-token", &session.csrf),
        ],
        Some(json!({"username": "eve", "password": "password-123", "role": "admin"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (_, users) = s.call("GET", "/api/v1/users", Some(&s.admin), None).await;
    assert!(
        !users["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["username"] == "eve"),
        "{users}"
    );
    // The server's own address is still an origin of the console (an operator on the
    // host, past the proxy); its cookies are Secure all the same.
    let direct = login(&s, "vic", "password-123", &[]).await;
    assert!(direct.set_cookies.iter().all(|c| c.contains("; Secure")));
    s.stop().await;
}
