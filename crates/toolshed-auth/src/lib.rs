//! # toolshed-auth
//!
//! Who may do what in the registry: four ordered [`Role`]s (viewer < deployer <
//! admin < owner), argon2 password hashes, and signed tokens (JWT, HS256) whose claims carry
//! the principal (issuer, subject, tenant) that reaches every tool call's context.
//!
//! A login gives two tokens ([`TokenKind`]): a short-lived access token sent with every
//! request, and a longer-lived refresh token that only buys new access tokens. Both
//! carry the user's token generation: the server refuses a token whose generation is
//! not the user's current one, so deleting a user, changing its role, tenant or
//! password ends every token it had. Both also carry their login's session id
//! ([`Claims::sid`]), shared by every token that login and its refreshes give: logging
//! out ends that session's tokens, and no other. A refresh token also carries an id of
//! its own ([`Claims::jti`], [`SessionTokens::refresh_id`]): the server records the one
//! live refresh token of each session, so a refresh token is good for one refresh, and
//! presenting a spent one ends its whole session (OAuth 2.1's reuse detection).
//!
//! ```
//! use std::time::Duration;
//! use toolshed_auth::{Role, Tokens, hash_password, verify_password};
//!
//! let hash = hash_password("correct horse battery").unwrap();
//! assert!(verify_password("correct horse battery", &hash).unwrap());
//!
//! let tokens = Tokens::new(&[7u8; 32], "toolshed", Duration::from_secs(3600)).unwrap();
//! let token = tokens.issue("ana", Role::Deployer, Some("acme"), 7).unwrap();
//! let claims = tokens.verify(&token).unwrap();
//! assert_eq!((claims.kind, claims.generation), (toolshed_auth::TokenKind::Access, 7));
//! assert!(claims.require(Role::Deployer).is_ok());
//! assert!(claims.require(Role::Admin).is_err());
//! assert_eq!(claims.principal().tenant.as_deref(), Some("acme"));
//!
//! // A login: an access and a refresh token of one session; a refresh continues it.
//! let login = tokens.issue_session("ana", Role::Deployer, Some("acme"), 7, None).unwrap();
//! let refreshed = tokens
//!     .issue_session("ana", Role::Deployer, Some("acme"), 7, Some(&login.session_id))
//!     .unwrap();
//! let sid = |t: &str| tokens.verify(t).unwrap().sid;
//! assert_eq!(sid(&login.refresh), Some(login.session_id.clone()));
//! assert_eq!(sid(&refreshed.access), Some(login.session_id));
//! // Each refresh token has an id of its own; access tokens have none.
//! let jti = |t: &str| tokens.verify(t).unwrap().jti;
//! assert_eq!(jti(&login.refresh), Some(login.refresh_id.clone()));
//! assert_ne!(login.refresh_id, refreshed.refresh_id);
//! assert_eq!(jti(&login.access), None);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use toolshed_core::Principal;

/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// The shortest signing secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;

/// A role. Ordered: a deployer can do everything a viewer can, an admin everything a
/// deployer can within its tenant, an owner everything in every tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads the registry.
    Viewer,
    /// Also executes tools and decides approvals.
    Deployer,
    /// Also manages the users of its own tenant.
    Admin,
    /// The organisation's role: manages every tenant (its users, tools and agents).
    Owner,
}

impl Role {
    /// The role as written: `viewer`, `deployer`, `admin`, `owner`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Deployer => "deployer",
            Role::Admin => "admin",
            Role::Owner => "owner",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "viewer" => Ok(Role::Viewer),
            "deployer" => Ok(Role::Deployer),
            "admin" => Ok(Role::Admin),
            "owner" => Ok(Role::Owner),
            _ => Err(AuthError::InvalidRole(s.to_owned())),
        }
    }
}

/// Why authentication or authorization failed. Messages never contain a password,
/// a hash or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No token, or a token that is malformed, tampered with or signed by someone else.
    #[error("invalid token: {0}; log in again (POST /api/v1/auth/login)")]
    InvalidToken(String),
    /// A token past its expiry.
    #[error("the token expired; log in again (POST /api/v1/auth/login)")]
    Expired,
    /// The role is too low for the action.
    #[error("this needs the {needed} role; you are {actual}")]
    Forbidden {
        /// What the action needs.
        needed: Role,
        /// What the caller has.
        actual: Role,
    },
    /// A password shorter than [`MIN_PASSWORD_CHARS`].
    #[error("the password is too short: use at least {MIN_PASSWORD_CHARS} characters")]
    WeakPassword,
    /// A role name that is not viewer, deployer, admin or owner.
    #[error("`{0}` is not a role; use viewer, deployer, admin or owner")]
    InvalidRole(String),
    /// A signing secret shorter than [`MIN_SECRET_BYTES`].
    #[error("the token signing secret must be at least {MIN_SECRET_BYTES} bytes")]
    WeakSecret,
    /// A stored hash that is not an argon2 hash.
    #[error("the stored password hash is not readable")]
    BadHash,
    /// Hashing or signing failed.
    #[error("{0}")]
    Internal(String),
}

impl AuthError {
    /// The stable code: `UNAUTHENTICATED` for invalid or expired tokens, `FORBIDDEN`,
    /// `WEAK_PASSWORD`, `INVALID_ROLE`, `WEAK_SECRET`, `AUTH_ERROR`.
    pub fn code(&self) -> AuthCode {
        match self {
            AuthError::InvalidToken(_) | AuthError::Expired => AuthCode::Unauthenticated,
            AuthError::Forbidden { .. } => AuthCode::Forbidden,
            AuthError::WeakPassword => AuthCode::WeakPassword,
            AuthError::InvalidRole(_) => AuthCode::InvalidRole,
            AuthError::WeakSecret => AuthCode::WeakSecret,
            AuthError::BadHash | AuthError::Internal(_) => AuthCode::AuthError,
        }
    }
}

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of [`AuthError`], listed with what to do in `docs/errors.md`.
    #[non_exhaustive]
    pub enum AuthCode {
        /// No token, or an invalid or expired one.
        Unauthenticated,
        /// The role is too low for the action.
        Forbidden,
        /// The password is too short.
        WeakPassword,
        /// Not a role name.
        InvalidRole,
        /// The signing secret is too short.
        WeakSecret,
        /// Hashing, signing or a stored hash failed.
        AuthError,
    }
}

/// Hash a password with argon2id and a random salt (PHC string format).
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(AuthError::WeakPassword);
    }
    // 16 random bytes from the OS (through uuid's generator) as the salt.
    let salt_bytes = uuid::Uuid::new_v4().into_bytes();
    let salt =
        SaltString::encode_b64(&salt_bytes).map_err(|e| AuthError::Internal(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Internal(format!("cannot hash the password: {e}")))
}

/// Whether `password` matches a hash made by [`hash_password`].
pub fn verify_password(password: &str, hash: &str) -> Result<bool, AuthError> {
    let parsed = PasswordHash::new(hash).map_err(|_| AuthError::BadHash)?;
    Ok(Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok())
}

/// Which of a login's two tokens this is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// Sent with every request (`Authorization: Bearer`); short-lived.
    #[default]
    Access,
    /// Exchanged for a new access token (`POST /api/v1/auth/refresh`), and for nothing
    /// else; longer-lived.
    Refresh,
}

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The issuer.
    pub iss: String,
    /// The subject (user name).
    pub sub: String,
    /// The tenant, when the deployment has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The role.
    pub role: Role,
    /// Issued at (seconds since the epoch).
    pub iat: u64,
    /// Expires at (seconds since the epoch).
    pub exp: u64,
    /// The user's token generation when the token was issued. The server refuses a
    /// token whose generation is no longer the user's; a token without one (issued
    /// before generations existed) reads as 0, which no user has.
    #[serde(default, rename = "gen")]
    pub generation: u64,
    /// Access or refresh; a token without one is an access token.
    #[serde(default, rename = "typ")]
    pub kind: TokenKind,
    /// The login session the token belongs to: the same for the access and refresh
    /// tokens of a login and of every refresh that followed it, so logging out (which
    /// revokes the session id) ends all of them and no other session of the user. A
    /// token without one was issued before sessions existed; the server refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sid: Option<String>,
    /// A refresh token's own id, new with each one. The server keeps the id of each
    /// session's live refresh token: a refresh spends it, and a spent one presented
    /// again ends the session. Access tokens have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
}

impl Claims {
    /// The principal a run acts for.
    pub fn principal(&self) -> Principal {
        Principal {
            iss: self.iss.clone(),
            sub: self.sub.clone(),
            tenant: self.tenant.clone(),
        }
    }

    /// Fail with `FORBIDDEN` unless the role is at least `needed`.
    pub fn require(&self, needed: Role) -> Result<(), AuthError> {
        if self.role >= needed {
            Ok(())
        } else {
            Err(AuthError::Forbidden {
                needed,
                actual: self.role,
            })
        }
    }
}

/// The two tokens of a login (or of a refresh) and the session they belong to.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionTokens {
    /// The access token.
    pub access: String,
    /// The refresh token.
    pub refresh: String,
    /// The session id both carry ([`Claims::sid`]).
    pub session_id: String,
    /// The refresh token's own id ([`Claims::jti`]).
    pub refresh_id: String,
}

impl fmt::Debug for SessionTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The tokens are credentials: never in a log line.
        f.debug_struct("SessionTokens")
            .field("session_id", &self.session_id)
            .field("refresh_id", &self.refresh_id)
            .finish_non_exhaustive()
    }
}

/// A new session or refresh token id: 122 random bits from the OS (a UUID v4), as 32
/// hex digits.
fn new_session_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Issues and verifies signed tokens.
#[derive(Clone)]
pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    issuer: String,
    ttl: Duration,
    refresh_ttl: Duration,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("issuer", &self.issuer)
            .field("ttl", &self.ttl)
            .field("refresh_ttl", &self.refresh_ttl)
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// Tokens signed with `secret` (at least 32 bytes), issued by `issuer`; access
    /// tokens valid for `ttl`, refresh tokens for 12 hours unless
    /// [`with_refresh_ttl`](Self::with_refresh_ttl) says otherwise.
    pub fn new(secret: &[u8], issuer: &str, ttl: Duration) -> Result<Self, AuthError> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(AuthError::WeakSecret);
        }
        Ok(Tokens {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            issuer: issuer.to_owned(),
            ttl,
            refresh_ttl: Duration::from_secs(12 * 3600),
        })
    }

    /// The same, with refresh tokens valid for `ttl`.
    #[must_use]
    pub fn with_refresh_ttl(mut self, ttl: Duration) -> Self {
        self.refresh_ttl = ttl;
        self
    }

    /// How long an access token is valid.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long a refresh token is valid.
    pub fn refresh_ttl(&self) -> Duration {
        self.refresh_ttl
    }

    /// An access token for `sub` with `role` (and a tenant, if any), at the user's
    /// token `generation`, in a session of its own.
    pub fn issue(
        &self,
        sub: &str,
        role: Role,
        tenant: Option<&str>,
        generation: u64,
    ) -> Result<String, AuthError> {
        let session = new_session_id();
        self.sign(
            TokenKind::Access,
            sub,
            role,
            tenant,
            generation,
            &session,
            None,
        )
    }

    /// A refresh token for the same, in a session of its own.
    pub fn issue_refresh(
        &self,
        sub: &str,
        role: Role,
        tenant: Option<&str>,
        generation: u64,
    ) -> Result<String, AuthError> {
        let session = new_session_id();
        let id = new_session_id();
        self.sign(
            TokenKind::Refresh,
            sub,
            role,
            tenant,
            generation,
            &session,
            Some(&id),
        )
    }

    /// A login's access and refresh tokens: in a new session when `session` is `None`,
    /// else in that one (a refresh continues the session it was given). The refresh
    /// token gets a new id either way.
    pub fn issue_session(
        &self,
        sub: &str,
        role: Role,
        tenant: Option<&str>,
        generation: u64,
        session: Option<&str>,
    ) -> Result<SessionTokens, AuthError> {
        let session_id = session.map_or_else(new_session_id, str::to_owned);
        let refresh_id = new_session_id();
        Ok(SessionTokens {
            access: self.sign(
                TokenKind::Access,
                sub,
                role,
                tenant,
                generation,
                &session_id,
                None,
            )?,
            refresh: self.sign(
                TokenKind::Refresh,
                sub,
                role,
                tenant,
                generation,
                &session_id,
                Some(&refresh_id),
            )?,
            session_id,
            refresh_id,
        })
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the claims of one token, each a field; callers are this file's"
    )]
    fn sign(
        &self,
        kind: TokenKind,
        sub: &str,
        role: Role,
        tenant: Option<&str>,
        generation: u64,
        session: &str,
        id: Option<&str>,
    ) -> Result<String, AuthError> {
        let now = now_secs();
        let ttl = match kind {
            TokenKind::Access => self.ttl,
            TokenKind::Refresh => self.refresh_ttl,
        };
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: sub.to_owned(),
            tenant: tenant.map(str::to_owned),
            role,
            iat: now,
            exp: now + ttl.as_secs().max(1),
            generation,
            kind,
            sid: Some(session.to_owned()),
            jti: id.map(str::to_owned),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AuthError::Internal(format!("cannot sign the token: {e}")))
    }

    /// Check a token's signature, algorithm, issuer and expiry; return its claims, of
    /// either kind (the caller checks [`Claims::kind`]).
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[self.issuer.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        // Expiry is exact: a token is either valid or not.
        validation.leeway = 0;
        match jsonwebtoken::decode::<Claims>(token.trim(), &self.decoding, &validation) {
            // The library accepts a token in its last second (`exp == now`); a cache
            // of verified tokens refuses it then, so both say the same, here too.
            Ok(data) if data.claims.exp <= now_secs() => Err(AuthError::Expired),
            Ok(data) => Ok(data.claims),
            Err(e) => Err(match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => AuthError::Expired,
                jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                    AuthError::InvalidToken("the signature does not match".into())
                }
                jsonwebtoken::errors::ErrorKind::InvalidIssuer => {
                    AuthError::InvalidToken("issued by someone else".into())
                }
                jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => {
                    AuthError::InvalidToken("signed with another algorithm".into())
                }
                _ => AuthError::InvalidToken("malformed".into()),
            }),
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
