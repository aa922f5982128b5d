//! Roles, password hashes and tokens, including the bad cases: wrong passwords,
//! tampered, foreign, expired and malformed tokens, weak passwords and secrets.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use toolshed_auth::{AuthError, Role, TokenKind, Tokens, hash_password, verify_password};

fn tokens() -> Tokens {
    Tokens::new(
        b"0123456789abcdef0123456789abcdef",
        "toolshed",
        Duration::from_secs(3600),
    )
    .unwrap()
}

#[test]
fn roles_are_ordered_and_parsed() {
    assert!(Role::Viewer < Role::Deployer && Role::Deployer < Role::Admin);
    assert!(
        Role::Admin < Role::Owner,
        "the organisation's owner is above every admin"
    );
    assert_eq!("Deployer".parse::<Role>().unwrap(), Role::Deployer);
    for role in [Role::Viewer, Role::Deployer, Role::Admin, Role::Owner] {
        assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        assert_eq!(role.to_string(), role.as_str());
    }
    let e = "root".parse::<Role>().unwrap_err();
    assert_eq!(e.code(), "INVALID_ROLE");
    assert!(e.to_string().contains("viewer, deployer, admin or owner"));
}

#[test]
fn passwords_are_hashed_with_argon2_and_salted() {
    let a = hash_password("correct horse battery").unwrap();
    let b = hash_password("correct horse battery").unwrap();
    assert!(a.starts_with("$argon2id$"), "{a}");
    assert_ne!(a, b, "every hash has its own salt");
    assert!(verify_password("correct horse battery", &a).unwrap());
    assert!(!verify_password("wrong horse battery", &a).unwrap());
    assert_eq!(hash_password("short").unwrap_err(), AuthError::WeakPassword);
    assert_eq!(
        verify_password("x", "not a hash").unwrap_err(),
        AuthError::BadHash
    );
}

#[test]
fn tokens_round_trip_with_principal_and_role() {
    let t = tokens();
    let token = t.issue("ana", Role::Deployer, Some("acme"), 1).unwrap();
    let claims = t.verify(&token).unwrap();
    assert_eq!(claims.sub, "ana");
    assert_eq!(claims.role, Role::Deployer);
    let p = claims.principal();
    assert_eq!(
        (p.iss.as_str(), p.sub.as_str(), p.tenant.as_deref()),
        ("toolshed", "ana", Some("acme"))
    );
    assert!(claims.require(Role::Viewer).is_ok());
    let e = claims.require(Role::Admin).unwrap_err();
    assert_eq!(e.code(), "FORBIDDEN");
    assert_eq!(e.to_string(), "this needs the admin role; you are deployer");
}

#[test]
fn tampered_foreign_expired_and_malformed_tokens_are_refused() {
    let t = tokens();
    let token = t.issue("ana", Role::Viewer, None, 1).unwrap();
    // Tampered: swap the payload for one claiming admin, keep the signature.
    let parts: Vec<&str> = token.split('.').collect();
    let forged_payload = {
        let other = t.issue("ana", Role::Admin, None, 1).unwrap();
        other.split('.').nth(1).unwrap().to_owned()
    };
    let forged = format!("{}.{}.{}", parts[0], forged_payload, parts[2]);
    assert_eq!(t.verify(&forged).unwrap_err().code(), "UNAUTHENTICATED");
    // Signed with another secret.
    let other = Tokens::new(&[9u8; 32], "toolshed", Duration::from_secs(60)).unwrap();
    let foreign = other.issue("ana", Role::Admin, None, 1).unwrap();
    assert!(matches!(
        t.verify(&foreign).unwrap_err(),
        AuthError::InvalidToken(_)
    ));
    // Another issuer with the same secret.
    let elsewhere = Tokens::new(
        b"0123456789abcdef0123456789abcdef",
        "elsewhere",
        Duration::from_secs(60),
    )
    .unwrap();
    let e = t
        .verify(&elsewhere.issue("ana", Role::Admin, None, 1).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("issued by someone else"), "{e}");
    // Expired: issued with a lifetime already over (ttl is at least one second).
    let short = Tokens::new(
        b"0123456789abcdef0123456789abcdef",
        "toolshed",
        Duration::ZERO,
    )
    .unwrap();
    let old = short.issue("ana", Role::Admin, None, 1).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let expired = loop {
        match t.verify(&old) {
            Err(e) => break e,
            Ok(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Ok(_) => panic!("a one-second token was still valid after 5 s"),
        }
    };
    assert_eq!(expired, AuthError::Expired);
    // Malformed.
    for bad in ["", "abc", "a.b.c", "Bearer x"] {
        assert_eq!(
            t.verify(bad).unwrap_err().code(),
            "UNAUTHENTICATED",
            "{bad}"
        );
    }
    // Messages never carry the token.
    assert!(
        !t.verify(&forged)
            .unwrap_err()
            .to_string()
            .contains(parts[2])
    );
}

#[test]
fn weak_secrets_are_refused() {
    assert_eq!(
        Tokens::new(b"short", "toolshed", Duration::from_secs(60)).unwrap_err(),
        AuthError::WeakSecret
    );
    let dbg = format!("{:?}", tokens());
    assert!(!dbg.contains("0123456789abcdef"), "{dbg}");
}

#[test]
fn access_and_refresh_tokens_carry_kind_and_generation() {
    let t = tokens().with_refresh_ttl(Duration::from_secs(7200));
    let access = t
        .verify(&t.issue("ana", Role::Viewer, None, 42).unwrap())
        .unwrap();
    let refresh = t
        .verify(&t.issue_refresh("ana", Role::Viewer, None, 42).unwrap())
        .unwrap();
    assert_eq!((access.kind, access.generation), (TokenKind::Access, 42));
    assert_eq!((refresh.kind, refresh.generation), (TokenKind::Refresh, 42));
    assert!(refresh.exp - refresh.iat >= 7200);
    assert!(access.exp - access.iat < 7200);
    // A token from before generations existed reads as generation 0, an access token.
    #[derive(serde::Serialize)]
    struct Old {
        iss: &'static str,
        sub: &'static str,
        role: &'static str,
        iat: u64,
        exp: u64,
    }
    let old = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &Old {
            iss: "toolshed",
            sub: "ana",
            role: "viewer",
            iat: 1,
            exp: 4_000_000_000,
        },
        &jsonwebtoken::EncodingKey::from_secret(b"0123456789abcdef0123456789abcdef"),
    )
    .unwrap();
    let claims = t.verify(&old).unwrap();
    assert_eq!((claims.kind, claims.generation), (TokenKind::Access, 0));
    // ... and has no session (the server refuses it).
    assert_eq!(claims.sid, None);
}

#[test]
fn a_logins_tokens_share_one_session_and_a_refresh_continues_it() {
    let t = tokens();
    let sid = |token: &str| t.verify(token).unwrap().sid.unwrap();
    let login = t
        .issue_session("ana", Role::Viewer, Some("acme"), 3, None)
        .unwrap();
    assert_eq!(sid(&login.access), login.session_id);
    assert_eq!(sid(&login.refresh), login.session_id);
    assert_eq!(t.verify(&login.refresh).unwrap().kind, TokenKind::Refresh);
    let refreshed = t
        .issue_session(
            "ana",
            Role::Viewer,
            Some("acme"),
            3,
            Some(&login.session_id),
        )
        .unwrap();
    assert_eq!(sid(&refreshed.access), login.session_id);
    // Another login is another session, and so is a lone token.
    let other = t
        .issue_session("ana", Role::Viewer, Some("acme"), 3, None)
        .unwrap();
    assert_ne!(other.session_id, login.session_id);
    let lone = t.issue("ana", Role::Viewer, None, 3).unwrap();
    assert_ne!(sid(&lone), login.session_id);
    assert_eq!(login.session_id.len(), 32);
    // The tokens never show in a debug line.
    let shown = format!("{login:?}");
    assert!(
        !shown.contains(&login.access) && !shown.contains(&login.refresh),
        "{shown}"
    );
}

#[test]
fn every_refresh_token_has_an_id_of_its_own_and_access_tokens_none() {
    let t = tokens();
    let jti = |token: &str| t.verify(token).unwrap().jti;
    let login = t
        .issue_session("ana", Role::Viewer, Some("acme"), 3, None)
        .unwrap();
    assert_eq!(jti(&login.refresh), Some(login.refresh_id.clone()));
    assert_eq!(jti(&login.access), None);
    assert_eq!(login.refresh_id.len(), 32);
    // A refresh in the same session, in the same second, is still another token: the
    // server can tell the spent one from its successor.
    let refreshed = t
        .issue_session(
            "ana",
            Role::Viewer,
            Some("acme"),
            3,
            Some(&login.session_id),
        )
        .unwrap();
    assert_ne!(refreshed.refresh_id, login.refresh_id);
    assert_ne!(refreshed.refresh, login.refresh);
    assert_eq!(jti(&refreshed.refresh), Some(refreshed.refresh_id.clone()));
    let lone = t.issue_refresh("ana", Role::Viewer, None, 3).unwrap();
    assert!(jti(&lone).is_some_and(|id| id != login.refresh_id));
}
