//! Request extractors whose rejections are API errors: the bearer token, a JSON body
//! (bad JSON → 400, a wrong field → 422 naming it, too large → 413) and the query
//! string (400 naming the parameter).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use toolshed_api::ApiCode;
use toolshed_auth::{Claims, Role, TokenKind};

use crate::error::ApiError;
use crate::state::AppState;

/// The caller, from `Authorization: Bearer TOKEN` or the console's session cookie
/// (a changing request with the cookie must pass the CSRF check: 403 `CSRF_REJECTED`).
/// Missing, malformed, tampered, expired, a refresh token, withdrawn (its user removed
/// or changed since) or logged out (its session revoked) → 401.
#[derive(Debug, Clone)]
pub struct Auth(pub Claims);

impl Auth {
    /// Refuse with 403 unless the caller has at least `role`.
    pub fn require(&self, role: Role) -> Result<&Claims, ApiError> {
        self.0.require(role)?;
        Ok(&self.0)
    }

    /// The caller's claims.
    pub fn claims(&self) -> &Claims {
        &self.0
    }
}

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let unauthenticated =
            |message: &str| ApiError::new(ApiCode::Unauthenticated, message.to_owned());
        let token = match parts.headers.get(axum::http::header::AUTHORIZATION) {
            Some(header) => header
                .to_str()
                .ok()
                .and_then(|h| {
                    h.strip_prefix("Bearer ")
                        .or_else(|| h.strip_prefix("bearer "))
                })
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    unauthenticated("the Authorization header must be `Bearer TOKEN`")
                })?,
            // The console's session cookie: a browser sends it on its own, so a
            // changing request must also prove it comes from the console (CSRF).
            None => {
                let Some(token) = crate::console::session::cookie(
                    &parts.headers,
                    crate::console::session::SESSION_COOKIE,
                ) else {
                    return Err(unauthenticated(
                        "no token: log in with POST /api/v1/auth/login and send `Authorization: Bearer TOKEN`",
                    ));
                };
                if crate::console::session::is_changing(&parts.method) {
                    crate::console::session::check_csrf(
                        &parts.headers,
                        token,
                        state.config().public_url.as_ref(),
                    )?;
                }
                token
            }
        };
        let claims = state.verify_token(token)?;
        if claims.kind != TokenKind::Access {
            return Err(unauthenticated(
                "this is a refresh token: exchange it at POST /api/v1/auth/refresh and send the access token it gives",
            ));
        }
        // Checked on every request, so a withdrawn token stops working within the
        // stamp cache's lifetime (see `AppState::check_current`).
        state.check_current(&claims).await?;
        Ok(Auth(claims))
    }
}

/// The caller, refused with 403 `FORBIDDEN` unless it has at least the deployer role.
/// It reads only the request's head, so a handler that takes it before its body
/// refuses a caller below the role before the body is read: such a caller learns
/// nothing of the body's contract from a 400 or 422 (axum runs the body extractor
/// last).
#[derive(Debug, Clone)]
pub struct Deployer(pub Claims);

impl FromRequestParts<AppState> for Deployer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        with_role(parts, state, Role::Deployer).await.map(Deployer)
    }
}

/// The caller, refused with 403 `FORBIDDEN` unless it has at least the admin role;
/// before the body is read, as [`Deployer`].
#[derive(Debug, Clone)]
pub struct Admin(pub Claims);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        with_role(parts, state, Role::Admin).await.map(Admin)
    }
}

/// The caller's claims if it has at least `role`: [`Auth`]'s 401s, then
/// [`Auth::require`]'s 403.
async fn with_role(parts: &mut Parts, state: &AppState, role: Role) -> Result<Claims, ApiError> {
    let auth = Auth::from_request_parts(parts, state).await?;
    auth.require(role)?;
    Ok(auth.0)
}

/// The client's address, when the server was started with connection info (as
/// [`Server::run`](crate::Server::run) does): the socket's peer, or, behind a trusted
/// proxy, the client its forwarding headers name ([`crate::client_addr`]); `None`
/// otherwise (a router served some other way).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<std::net::IpAddr>);

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| {
                    crate::client_addr::client_address(
                        c.0.ip(),
                        &parts.headers,
                        &state.config().trusted_proxies,
                    )
                }),
        ))
    }
}

/// A JSON body deserialized with field paths in its errors.
#[derive(Debug, Clone)]
pub struct Body<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                too_large(state.config().max_body_bytes)
            } else {
                ApiError::invalid_json(format!("cannot read the body: {}", rejection.body_text()))
            }
        })?;
        parse_body(&bytes).map(Body)
    }
}

/// The 413 answer.
pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        ApiCode::PayloadTooLarge,
        format!("the body is larger than the server's limit of {limit} bytes"),
    )
}

/// Parse a JSON body: syntax errors are `INVALID_JSON` (400) with line and column, type
/// and field errors `INVALID_BODY` (422) naming the field, in the message and as
/// `{"fields": [{"field", "message"}]}`.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // An empty body reads as `{}`: routes whose fields are all optional need none, and
    // the others name the first missing field.
    let value: serde_json::Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(Default::default())
    } else {
        // Syntax first, so "not JSON" and "wrong field" get different codes.
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::invalid_json(format!("the body is not valid JSON: {e}")))?
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        match crate::error::field_path(&path, &message) {
            Some(field) => ApiError::field(&field, message),
            None => ApiError::invalid_body(format!("invalid body: {message}")),
        }
    })
}

/// The query string, with a 400 naming the parameter on a bad value.
#[derive(Debug, Clone)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| {
                ApiError::invalid_query(format!("invalid query string: {}", e.body_text()))
            })
    }
}

/// A bounded integer query parameter: absent → `default`; outside `min..=max` → 400
/// `INVALID_QUERY` naming the parameter and its range. Out-of-range values are refused
/// rather than clamped, so a script asking for `per_page=100000` learns the limit
/// instead of silently getting 500 items (the document declares the same bounds).
pub fn bounded(
    name: &str,
    value: Option<u32>,
    default: u32,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, ApiError> {
    match value {
        None => Ok(default),
        Some(v) if range.contains(&v) => Ok(v),
        Some(v) => Err(ApiError::invalid_query(format!(
            "`{name}={v}` is out of range: give {name} from {} to {} (default {default})",
            range.start(),
            range.end()
        ))),
    }
}
