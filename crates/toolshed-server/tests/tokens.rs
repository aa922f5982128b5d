//! Tokens can be withdrawn, over real HTTP: a deleted, demoted or moved user's tokens,
//! the tokens of a user whose password changed, and a logged-out session's tokens, are
//! refused (on the server that made the change at once, on another server sharing the
//! database within seconds);
//! refresh tokens buy access tokens until the user is withdrawn; logins are limited
//! with 429 and `Retry-After`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{ADMIN_PASSWORD, SECRET, TestServer};
use serde_json::{Value, json};
use toolshed_server::{Server, ServerConfig};

/// A second server on the first one's database (no seeding happens: it has users).
struct Other {
    base: String,
    client: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Other {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Other {
    async fn on(s: &TestServer) -> Other {
        let url = format!("sqlite://{}", s.dir.path().join("toolshed.db").display());
        let mut config = ServerConfig::new(url);
        config.addr = "127.0.0.1:0".parse().unwrap();
        config.jwt_secret = Some(SECRET.into());
        config.dispatcher.cache_dir = s.dir.path().join("cache-other");
        let server = Server::open(config).await.unwrap();
        let base = format!("http://{}", server.local_addr());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = server
                .run(async {
                    let _ = rx.await;
                })
                .await;
        });
        Other {
            base,
            client: reqwest::Client::new(),
            shutdown: Some(tx),
        }
    }

    async fn status(&self, path: &str, token: &str) -> u16 {
        self.client
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}

/// Wait until `probe` answers `want`, polling; panics after 15 s with the last answer.
async fn until<F, Fut>(what: &str, want: u16, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = u16>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = probe().await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {got} after 15 s, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn login_body(s: &TestServer, body: Value) -> (u16, Value) {
    s.call("POST", "/api/v1/auth/login", None, Some(body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_users_token_is_refused_here_at_once_and_on_another_server_within_seconds() {
    let s = TestServer::start().await;
    let other = Other::on(&s).await;
    // The other server has seen the token (and remembers the user as current).
    assert_eq!(
        other.status("/api/v1/registry/tools", &s.deployer).await,
        200
    );
    let (status, _) = s
        .call("GET", "/api/v1/registry/tools", Some(&s.deployer), None)
        .await;
    assert_eq!(status, 200);

    let (status, answer) = s
        .call("DELETE", "/api/v1/users/dee", Some(&s.admin), None)
        .await;
    assert_eq!(status, 200, "{answer}");

    // Here: at once.
    let (status, answer) = s
        .call("GET", "/api/v1/registry/tools", Some(&s.deployer), None)
        .await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["error"]["code"], "UNAUTHENTICATED");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("withdrawn"),
        "{answer}"
    );
    // There: once its short cache runs out.
    until("the deleted user's token on the other server", 401, || {
        other.status("/api/v1/registry/tools", &s.deployer)
    })
    .await;

    // A new user under the same name does not bring the old token back.
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": "dee", "password": "password-123", "role": "deployer"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, _) = s
        .call("GET", "/api/v1/registry/tools", Some(&s.deployer), None)
        .await;
    assert_eq!(status, 401);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_or_moved_users_token_is_refused() {
    let s = TestServer::start().await;
    let other = Other::on(&s).await;
    assert_eq!(other.status("/api/v1/runs", &s.deployer).await, 200);

    // A logout ends one session on both servers; the user's other session goes on.
    let (status, first) =
        login_body(&s, json!({"username": "vic", "password": "password-123"})).await;
    assert_eq!(status, 200);
    let gone = first["data"]["token"].as_str().unwrap().to_owned();
    let gone_refresh = first["data"]["refresh_token"].as_str().unwrap().to_owned();
    // Both servers have seen the token and remember the user as it is.
    assert_eq!(other.status("/api/v1/auth/me", &gone).await, 200);
    assert_eq!(other.status("/api/v1/auth/me", &s.viewer).await, 200);
    let (status, answer) = s
        .call("POST", "/api/v1/auth/logout", Some(&gone), None)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["session_ended"], true);
    let (status, answer) = s.call("GET", "/api/v1/auth/me", Some(&gone), None).await;
    assert_eq!(status, 401, "here: at once; {answer}");
    until("the logged-out token on the other server", 401, || {
        other.status("/api/v1/auth/me", &gone)
    })
    .await;
    // Its refresh token is refused there too: no new tokens for the ended session.
    let refreshed = other
        .client
        .post(format!("{}/api/v1/auth/refresh", other.base))
        .json(&json!({"refresh_token": gone_refresh}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(refreshed, 401);
    assert_eq!(other.status("/api/v1/auth/me", &s.viewer).await, 200);
    let (status, _) = s
        .call("GET", "/api/v1/auth/me", Some(&s.viewer), None)
        .await;
    assert_eq!(status, 200, "vic's other session");

    let (status, user) = s
        .call(
            "PATCH",
            "/api/v1/users/dee",
            Some(&s.admin),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(status, 200, "{user}");
    assert_eq!(user["data"]["role"], "viewer");
    let (status, _) = s.call("GET", "/api/v1/runs", Some(&s.deployer), None).await;
    assert_eq!(status, 401, "the deployer token of a viewer");
    until("the demoted user's token on the other server", 401, || {
        other.status("/api/v1/runs", &s.deployer)
    })
    .await;
    // Logging in again gives the new role.
    let viewer = s.login("dee", "password-123").await;
    let (_, me) = s.call("GET", "/api/v1/auth/me", Some(&viewer), None).await;
    assert_eq!(me["data"]["role"], "viewer", "{me}");

    // A move to another tenant ends the tokens too.
    let (status, _) = s
        .call(
            "PATCH",
            "/api/v1/users/dee",
            Some(&s.admin),
            Some(json!({"tenant": "acme"})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = s.call("GET", "/api/v1/auth/me", Some(&viewer), None).await;
    assert_eq!(status, 401);
    let moved = s.login("dee", "password-123").await;
    let (_, me) = s.call("GET", "/api/v1/auth/me", Some(&moved), None).await;
    assert_eq!(
        (me["data"]["tenant"].as_str(), me["data"]["team"].as_str()),
        (Some("acme"), Some("acme"))
    );

    // Bad changes are clear 4xx.
    for (body, code) in [
        (json!({}), "INVALID_BODY"),
        (json!({"role": "boss"}), "INVALID_ROLE"),
        (json!({"password": "short"}), "WEAK_PASSWORD"),
        (json!({"tenant": "no spaces"}), "INVALID_BODY"),
        (json!({"colour": "red"}), "INVALID_BODY"),
    ] {
        let (status, answer) = s
            .call("PATCH", "/api/v1/users/dee", Some(&s.admin), Some(body))
            .await;
        assert_eq!(answer["error"]["code"], code, "{status} {answer}");
    }
    let (status, _) = s
        .call(
            "PATCH",
            "/api/v1/users/ghost",
            Some(&s.admin),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = s
        .call(
            "PATCH",
            "/api/v1/users/vic",
            Some(&s.viewer),
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(status, 403, "only admins change users");
    let (status, _) = s
        .call(
            "PATCH",
            "/api/v1/users/admin",
            Some(&s.admin),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(status, 409, "an admin cannot demote itself");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_password_ends_the_old_tokens() {
    let s = TestServer::start().await;
    let (status, first) =
        login_body(&s, json!({"username": "dee", "password": "password-123"})).await;
    assert_eq!(status, 200);
    let old_refresh = first["data"]["refresh_token"].as_str().unwrap().to_owned();

    // The wrong current password changes nothing.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/auth/change-password",
            Some(&s.deployer),
            Some(json!({"current_password": "not-the-password", "new_password": "new-password-1"})),
        )
        .await;
    assert_eq!(status, 401, "{answer}");
    let (status, _) = s
        .call("GET", "/api/v1/auth/me", Some(&s.deployer), None)
        .await;
    assert_eq!(status, 200);

    // AgentBreeder's field name for the current password.
    let (status, changed) = s
        .call(
            "POST",
            "/api/v1/auth/change-password",
            Some(&s.deployer),
            Some(json!({"old_password": "password-123", "new_password": "new-password-1"})),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    for token in [&s.deployer, first["data"]["token"].as_str().unwrap()] {
        let (status, _) = s.call("GET", "/api/v1/auth/me", Some(token), None).await;
        assert_eq!(status, 401, "a token from before the change");
    }
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/auth/refresh",
            None,
            Some(json!({"refresh_token": old_refresh})),
        )
        .await;
    assert_eq!(status, 401, "a refresh token from before the change");
    let fresh = changed["data"]["token"].as_str().unwrap();
    let (status, me) = s.call("GET", "/api/v1/auth/me", Some(fresh), None).await;
    assert_eq!(status, 200, "the answer's token works: {me}");
    let (status, _) = login_body(&s, json!({"username": "dee", "password": "password-123"})).await;
    assert_eq!(status, 401, "the old password");
    s.login("dee", "new-password-1").await;

    // Bad bodies name the field.
    for (body, field) in [
        (
            json!({"new_password": "new-password-2"}),
            "current_password",
        ),
        (
            json!({"current_password": "a", "old_password": "b", "new_password": "new-password-2"}),
            "current_password",
        ),
        (
            json!({"current_password": "new-password-1"}),
            "new_password",
        ),
    ] {
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/auth/change-password",
                Some(fresh),
                Some(body),
            )
            .await;
        assert_eq!(status, 422, "{answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(field),
            "{answer}"
        );
    }
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/auth/change-password",
            Some(fresh),
            Some(json!({"current_password": "new-password-1", "new_password": "short"})),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (422, &json!("WEAK_PASSWORD"))
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("new_password"),
        "{answer}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_buys_access_tokens_until_the_user_is_deleted() {
    // Three seconds: a token's expiry is in whole seconds, so it lives 2-3 s, long
    // enough to use a renewed one at once.
    let s = TestServer::start_with(|c| c.token_ttl = Duration::from_secs(3)).await;
    let (status, login) = login_body(&s, json!({"email": "dee", "password": "password-123"})).await;
    assert_eq!(
        status, 200,
        "`email` is another name for `username`: {login}"
    );
    let data = &login["data"];
    assert_eq!(data["token"], data["access_token"]);
    assert_eq!(data["token_type"], "bearer");
    assert_eq!(data["expires_in"], 3);
    assert_eq!(data["refresh_expires_in"], 12 * 3600);
    let access = data["token"].as_str().unwrap().to_owned();
    let refresh = data["refresh_token"].as_str().unwrap().to_owned();

    // A refresh token is not an access token, and the other way round.
    let (status, answer) = s.call("GET", "/api/v1/auth/me", Some(&refresh), None).await;
    assert_eq!(status, 401);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refresh token"),
        "{answer}"
    );
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/auth/refresh",
            None,
            Some(json!({"refresh_token": access})),
        )
        .await;
    assert_eq!(status, 401);

    // The access token runs out; the refresh token buys a new one.
    until("the three-second access token", 401, || async {
        s.call("GET", "/api/v1/auth/me", Some(&access), None)
            .await
            .0
    })
    .await;
    let (status, renewed) = s
        .call(
            "POST",
            "/api/v1/auth/refresh",
            None,
            Some(json!({"refresh_token": refresh})),
        )
        .await;
    assert_eq!(status, 200, "{renewed}");
    let renewed_access = renewed["data"]["token"].as_str().unwrap().to_owned();
    let (status, me) = s
        .call("GET", "/api/v1/auth/me", Some(&renewed_access), None)
        .await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["data"]["username"], "dee");
    assert_eq!(me["data"]["email"], "dee");

    // Deleted: the refresh token is refused. (The admin's first token ran out too.)
    let admin = s.login("admin", ADMIN_PASSWORD).await;
    let (status, _) = s
        .call("DELETE", "/api/v1/users/dee", Some(&admin), None)
        .await;
    assert_eq!(status, 200);
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/auth/refresh",
            None,
            Some(json!({"refresh_token": refresh})),
        )
        .await;
    assert_eq!(status, 401, "{answer}");
    for body in [
        json!({}),
        json!({"refresh_token": "x.y.z"}),
        json!({"token": "x"}),
    ] {
        let (status, _) = s
            .call("POST", "/api/v1/auth/refresh", None, Some(body))
            .await;
        assert!(status == 401 || status == 422, "{status}");
    }
    // `username` and `email` together, or neither, are refused naming the field.
    for body in [
        json!({"username": "vic", "email": "vic", "password": "password-123"}),
        json!({"password": "password-123"}),
    ] {
        let (status, answer) = login_body(&s, body).await;
        assert_eq!(status, 422, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("username"),
            "{answer}"
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_logins_are_limited_with_429_and_retry_after() {
    let s = TestServer::start_with(|c| {
        c.login.per_address_user = 3;
        c.login.per_user = 100;
        c.login.per_address = 4;
    })
    .await;
    let bad = |user: &str| json!({"username": user, "password": "wrong-password"});
    for _ in 0..3 {
        let (status, _) = login_body(&s, bad("vic")).await;
        assert_eq!(status, 401);
    }
    // vic's allowance from this address is spent: even the right password waits.
    let resp = s
        .client
        .post(format!("{}/api/v1/auth/login", s.base))
        .json(&json!({"username": "vic", "password": "password-123"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // One attempt comes back every 60 s / 3.
    assert!((1..=20).contains(&retry), "{retry}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "TOO_MANY_ATTEMPTS");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("for this user from this address"),
        "{body}"
    );
    // Another user still logs in; successes do not count.
    for _ in 0..5 {
        s.login("dee", "password-123").await;
    }
    // Each user name failed from the address takes one of its 4; vic's first failure
    // was from an address vic had logged in from, which takes none.
    for name in ["ghost-1", "ghost-2", "ghost-3", "ghost-4"] {
        let (status, _) = login_body(&s, bad(name)).await;
        assert_eq!(status, 401);
    }
    let (status, answer) = login_body(&s, bad("ghost-5")).await;
    assert_eq!(status, 429, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("from this address"),
        "{answer}"
    );
    // A user who logged in from here before is not held back by the spray.
    s.login("admin", ADMIN_PASSWORD).await;
    s.stop().await;
}

/// A bad login for `user` sent with `headers`; its status.
async fn bad_login_with(s: &TestServer, user: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = s
        .client
        .post(format!("{}/api/v1/auth/login", s.base))
        .json(&json!({"username": user, "password": "wrong-password"}));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_name_the_client_only_behind_a_trusted_proxy() {
    // Three bad logins for one user, each claiming another client.
    let claims: [&[(&str, &str)]; 3] = [
        &[("x-forwarded-for", "203.0.113.1")],
        &[("forwarded", "for=203.0.113.2;proto=https")],
        &[("x-forwarded-for", "198.51.100.9, 203.0.113.3")],
    ];
    for trusted in [false, true] {
        let s = TestServer::start_with(|c| {
            c.login.per_address_user = 2;
            c.login.per_user = 100;
            c.login.per_address = 100;
            if trusted {
                c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
            }
        })
        .await;
        let mut statuses = Vec::new();
        for headers in claims {
            statuses.push(bad_login_with(&s, "vic", headers).await);
        }
        if trusted {
            // Three clients: none used up its two attempts.
            assert_eq!(statuses, [401, 401, 401], "behind a trusted proxy");
            // The rightmost hop no trusted proxy wrote is the client, whatever the
            // client wrote left of it: these three are one client, 203.0.113.7.
            let mut statuses = Vec::new();
            for spoof in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
                let chain = format!("{spoof}, 203.0.113.7, 127.0.0.9");
                statuses.push(bad_login_with(&s, "vic", &[("x-forwarded-for", &chain)]).await);
            }
            assert_eq!(statuses, [401, 401, 429], "the rightmost untrusted hop");
            // `Forwarded` names the same client the same way, an IPv6 one too.
            let mut statuses = Vec::new();
            for _ in 0..3 {
                statuses.push(
                    bad_login_with(&s, "vic", &[("forwarded", r#"for="[2001:db8::7]:4711""#)])
                        .await,
                );
            }
            assert_eq!(statuses, [401, 401, 429], "Forwarded");
        } else {
            // The headers are anyone's to write: all three are this connection's peer.
            assert_eq!(statuses, [401, 401, 429], "without a trusted proxy");
        }
        s.stop().await;
    }
}

async fn refresh_with(s: &TestServer, refresh: &str) -> (u16, Value) {
    s.call(
        "POST",
        "/api/v1/auth/refresh",
        None,
        Some(json!({"refresh_token": refresh})),
    )
    .await
}

async fn me(s: &TestServer, token: &str) -> u16 {
    s.call("GET", "/api/v1/auth/me", Some(token), None).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_token_is_spent_by_its_refresh() {
    let s = TestServer::start().await;
    let (status, login) =
        login_body(&s, json!({"username": "dee", "password": "password-123"})).await;
    assert_eq!(status, 200, "{login}");
    let first = login["data"]["refresh_token"].as_str().unwrap().to_owned();
    let (status, renewed) = refresh_with(&s, &first).await;
    assert_eq!(status, 200, "{renewed}");
    let second = renewed["data"]["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(first, second, "a refresh gives a new refresh token");
    // The first one is spent: it buys nothing more.
    let (status, answer) = refresh_with(&s, &first).await;
    assert_eq!(
        status, 401,
        "a spent refresh token bought tokens again: {answer}"
    );
    assert_eq!(answer["error"]["code"], "UNAUTHENTICATED");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already used"),
        "{answer}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reusing_a_spent_refresh_token_ends_the_whole_session() {
    let s = TestServer::start().await;
    let tokens = |v: &Value| {
        (
            v["data"]["token"].as_str().unwrap().to_owned(),
            v["data"]["refresh_token"].as_str().unwrap().to_owned(),
        )
    };
    // Two logins of one user: two sessions.
    let (_, login) = login_body(&s, json!({"username": "dee", "password": "password-123"})).await;
    let (access_1, refresh_1) = tokens(&login);
    let (_, other) = login_body(&s, json!({"username": "dee", "password": "password-123"})).await;
    let (other_access, other_refresh) = tokens(&other);
    // The user refreshes; a thief who copied the first refresh token replays it.
    let (status, renewed) = refresh_with(&s, &refresh_1).await;
    assert_eq!(status, 200, "{renewed}");
    let (access_2, refresh_2) = tokens(&renewed);
    assert_eq!(me(&s, &access_2).await, 200);
    let (status, answer) = refresh_with(&s, &refresh_1).await;
    assert_eq!(
        status, 401,
        "the replayed refresh token was accepted: {answer}"
    );
    // The whole session is ended: every token of the login and of its refresh.
    assert_eq!(me(&s, &access_1).await, 401, "the login's access token");
    assert_eq!(me(&s, &access_2).await, 401, "the refreshed access token");
    let (status, answer) = refresh_with(&s, &refresh_2).await;
    assert_eq!(status, 401, "the refreshed refresh token: {answer}");
    // The user's other session goes on.
    assert_eq!(me(&s, &other_access).await, 200);
    let (status, answer) = refresh_with(&s, &other_refresh).await;
    assert_eq!(status, 200, "{answer}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_flood_against_some_accounts_leaves_other_users_logging_in() {
    // The server's defaults: what a deployment gets.
    let s = TestServer::start().await;
    // A user who has never logged in from anywhere.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": "bea", "password": "password-123", "role": "viewer"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    // 500 bad logins from this address against five accounts, fifty at a time.
    let targets = ["dee", "vic", "ghost-1", "ghost-2", "ghost-3"];
    let mut limited = 0;
    for round in 0..10 {
        let answers = futures_util::future::join_all((0..50).map(|i| {
            let user = targets[(round * 50 + i) % targets.len()];
            login_body(&s, json!({"username": user, "password": "wrong-password"}))
        }))
        .await;
        for (status, answer) in answers {
            assert!(status == 401 || status == 429, "{status}: {answer}");
            limited += usize::from(status == 429);
        }
    }
    assert!(
        limited >= 400,
        "the flood was not limited: {limited} of 500"
    );
    // Right after it, from the same address: a bystander's right password works, and
    // so does one of a user who logged in from here before.
    let started = Instant::now();
    let (status, answer) =
        login_body(&s, json!({"username": "bea", "password": "password-123"})).await;
    assert_eq!(status, 200, "the bystander was refused: {answer}");
    let (status, answer) =
        login_body(&s, json!({"username": "admin", "password": ADMIN_PASSWORD})).await;
    assert_eq!(status, 200, "a known user was refused: {answer}");
    assert!(started.elapsed() < Duration::from_secs(3));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_current_passwords_do_not_lock_the_user_out_of_login() {
    let s = TestServer::start().await;
    // Whoever holds dee's token tries passwords on change-password.
    let mut statuses = Vec::new();
    for i in 0..20 {
        let (status, answer) = s
            .call(
                "POST",
                "/api/v1/auth/change-password",
                Some(&s.deployer),
                Some(json!({"current_password": format!("guess-{i}-xx"), "new_password": "another-password-1"})),
            )
            .await;
        assert!(status == 401 || status == 429, "{status}: {answer}");
        statuses.push(status);
    }
    // The guesses are limited…
    assert!(statuses.contains(&429), "{statuses:?}");
    // …and dee still logs in, from the same address.
    let (status, answer) =
        login_body(&s, json!({"username": "dee", "password": "password-123"})).await;
    assert_eq!(
        status, 200,
        "dee was locked out by guesses made with a token: {answer}"
    );
    s.stop().await;
}
