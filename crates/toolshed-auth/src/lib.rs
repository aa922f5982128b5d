//! # toolshed-auth
//!
//! Who may do what in the registry: four ordered [`Role`]s (viewer < deployer <
//! admin < owner), argon2 password hashes, and signed tokens (JWT, HS256) whose claims carry
//! the principal (issuer, subject, tenant) that reaches every tool call's context.
//!
//! ```
//! use std::time::Duration;
//! use toolshed_auth::{Role, Tokens, hash_password, verify_password};
//!
//! let hash = hash_password("correct horse battery").unwrap();
//! assert!(verify_password("correct horse battery", &hash).unwrap());
//!
//! let tokens = Tokens::new(&[7u8; 32], "toolshed", Duration::from_secs(3600)).unwrap();
//! let token = tokens.issue("ana", Role::Deployer, Some("acme")).unwrap();
//! let claims = tokens.verify(&token).unwrap();
//! assert!(claims.require(Role::Deployer).is_ok());
//! assert!(claims.require(Role::Admin).is_err());
//! assert_eq!(claims.principal().tenant.as_deref(), Some("acme"));
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

/// Issues and verifies signed tokens.
#[derive(Clone)]
pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    issuer: String,
    ttl: Duration,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("issuer", &self.issuer)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// Tokens signed with `secret` (at least 32 bytes), issued by `issuer`, valid for `ttl`.
    pub fn new(secret: &[u8], issuer: &str, ttl: Duration) -> Result<Self, AuthError> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(AuthError::WeakSecret);
        }
        Ok(Tokens {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            issuer: issuer.to_owned(),
            ttl,
        })
    }

    /// A token for `sub` with `role` (and a tenant, if any).
    pub fn issue(&self, sub: &str, role: Role, tenant: Option<&str>) -> Result<String, AuthError> {
        let now = now_secs();
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: sub.to_owned(),
            tenant: tenant.map(str::to_owned),
            role,
            iat: now,
            exp: now + self.ttl.as_secs().max(1),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AuthError::Internal(format!("cannot sign the token: {e}")))
    }

    /// Check a token's signature, algorithm, issuer and expiry; return its claims.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[self.issuer.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        // Expiry is exact: a token is either valid or not.
        validation.leeway = 0;
        match jsonwebtoken::decode::<Claims>(token.trim(), &self.decoding, &validation) {
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
