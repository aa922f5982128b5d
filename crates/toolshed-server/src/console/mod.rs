//! The web console served at `/`: its files, embedded in the binary (no CDN, nothing
//! fetched at run time), every client-side route answered with the app's page, and the
//! cookie session (login, refresh, logout) that the console uses instead of a bearer
//! header. How it is built and why: `docs/design/console.md`.

pub mod assets;
pub mod hidden;
pub mod session;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use toolshed_api::{ApiCode, Data};
use toolshed_auth::TokenKind;

use crate::Json;
use crate::error::ApiError;
use crate::extract::{Body, ClientAddr};
use crate::state::AppState;

/// The client-side routes: each answers the app's page, which draws the view.
const PAGES: &[&str] = &[
    "/",
    "/login",
    "/tools",
    "/tools/{*rest}",
    "/sandbox",
    "/approvals",
    "/runs",
    "/runs/{*rest}",
    "/agents",
    "/agents/{*rest}",
    "/mcp-servers",
    "/mcp-servers/{*rest}",
    "/admin",
];

/// The console's routes: its pages, its files under `/assets/`, and the session under
/// `/console/` (kept out of the OpenAPI document: they are the browser's, a script logs
/// in with `POST /api/v1/auth/login` and sends a bearer token).
pub fn routes() -> Router<AppState> {
    let mut router = Router::new()
        .route("/assets/{*path}", get(asset))
        .route("/console/session", post(login))
        .route(session::REFRESH_PATH, post(refresh))
        .route("/console/logout", post(logout));
    for page in PAGES {
        router = router.route(page, get(index));
    }
    router
}

/// The security headers of every console answer: a strict Content-Security-Policy (the
/// console's own scripts and styles only, no inline script, no framing), no sniffing,
/// no referrer.
fn secure_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// The app's page, for every client-side route.
async fn index(headers: HeaderMap) -> Response {
    serve(&assets::INDEX, &headers)
}

/// One embedded file, or a 404.
async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match assets::find(&path) {
        Some(a) => serve(a, &headers),
        None => ApiError::not_found(format!(
            "the console has no file `/assets/{path}`; reload the console"
        ))
        .into_response(),
    }
}

/// Answer a file with its type, its ETag and `no-cache` (the browser keeps it and asks
/// whether it changed: a new binary's files are seen at once, an unchanged one costs a
/// 304), or a 304 when the browser's copy is current.
fn serve(asset: &assets::Asset, request: &HeaderMap) -> Response {
    let etag = asset.etag();
    let current = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if current {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.bytes,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    secure_headers(headers);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, v);
    }
    response
}

/// The console's login body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    username: String,
    password: String,
}

/// Who is logged in, as the console's session answers it (the tokens are in cookies).
#[derive(Debug, Serialize)]
struct SessionView {
    username: String,
    role: String,
    tenant: String,
    /// The CSRF token (also in the `toolshed_csrf` cookie).
    csrf_token: String,
    /// Seconds the access cookie lives.
    expires_in: u64,
}

/// `POST /console/session`: log in with a user name and password (under the login
/// limits, as `POST /api/v1/auth/login`); the tokens go into cookies, never into the
/// answer's body.
async fn login(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    headers: HeaderMap,
    Body(body): Body<LoginBody>,
) -> Result<Response, ApiError> {
    // A forged login would sign the victim in as the attacker.
    let public = state.config().public_url.as_ref();
    session::check_origin(&headers, public)?;
    let user =
        crate::routes::session::check_password(&state, &body.username, body.password, addr).await?;
    let Some(user) = user else {
        return Err(ApiError::new(
            ApiCode::Unauthenticated,
            "wrong user name or password",
        ));
    };
    let tokens = crate::routes::session::tokens_for(&state, &user, None).await?;
    Ok(session_answer(
        &headers,
        &tokens,
        user.username,
        user.role.to_string(),
        user.tenant,
        public,
    ))
}

/// `POST /console/refresh`: new cookies from the refresh cookie, in the same session,
/// while the user is unchanged (a password, role or tenant change ends the session)
/// and the session was not logged out.
async fn refresh(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let public = state.config().public_url.as_ref();
    session::check_origin(&headers, public)?;
    let ended = || ApiError::new(ApiCode::Unauthenticated, "the session ended; log in again");
    let token = session::cookie(&headers, session::REFRESH_COOKIE).ok_or_else(ended)?;
    let claims = state.verify_token(token).map_err(|_| ended())?;
    if claims.kind != TokenKind::Refresh {
        return Err(ended());
    }
    state.check_current(&claims).await?;
    let Some(user) = state.registry().get_user(&claims.sub).await? else {
        return Err(ended());
    };
    // The refresh cookie is spent: sent again, it ends the session.
    let tokens = crate::routes::session::spend_refresh(&state, &claims).await?;
    Ok(session_answer(
        &headers,
        &tokens,
        user.username,
        user.role.to_string(),
        user.tenant,
        public,
    ))
}

fn session_answer(
    request: &HeaderMap,
    tokens: &toolshed_api::views::TokenView,
    username: String,
    role: String,
    tenant: String,
    public: Option<&crate::public_url::PublicUrl>,
) -> Response {
    let view = SessionView {
        username,
        role,
        tenant,
        csrf_token: session::csrf_token(&tokens.access_token),
        expires_in: tokens.expires_in,
    };
    let mut response = Json(Data { data: view }).into_response();
    session::set_cookies(
        response.headers_mut(),
        Some((
            &tokens.access_token,
            tokens.expires_in,
            &tokens.refresh_token,
            tokens.refresh_expires_in,
        )),
        session::secure(request, public),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /console/logout`: end the session server-side and clear its cookies. The
/// session is found from the access cookie, or, when that has expired, from the refresh
/// cookie (sent to `/console/…`); its id is revoked, so the access and refresh tokens of
/// this login and of every refresh since are refused from now on, here and on every
/// server sharing the database, whoever holds a copy. The user's other sessions go on.
/// With a session cookie the request must carry its CSRF token (a forged logout is a
/// nuisance, not a breach, but it is refused like any other changing request).
///
/// The cookies are cleared even when the revocation cannot be stored (the database is
/// down): the answer is then the error, so the page can say that the session still
/// lives until it expires.
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let public = state.config().public_url.as_ref();
    let access = session::cookie(&headers, session::SESSION_COOKIE);
    match access {
        Some(token) => session::check_csrf(&headers, token, public)?,
        None => session::check_origin(&headers, public)?,
    }
    // Any valid token of the session names it; an expired, tampered or foreign one
    // names nothing (and a withdrawn user's tokens are refused anyway).
    let claims = access
        .into_iter()
        .chain(session::cookie(&headers, session::REFRESH_COOKIE))
        .find_map(|t| state.verify_token(t).ok());
    let ended = match &claims {
        Some(claims) => state.revoke_session(claims).await.inspect(|_| {
            tracing::info!(user = %claims.sub, "logged out of the console; the session's tokens are revoked");
        }),
        None => Ok(false),
    };
    let mut response = match ended {
        Ok(ended) => Json(Data {
            data: toolshed_api::views::LoggedOut {
                logged_out: true,
                session_ended: ended,
            },
        })
        .into_response(),
        Err(e) => e.into_response(),
    };
    session::set_cookies(
        response.headers_mut(),
        None,
        session::secure(&headers, public),
    );
    Ok(response)
}
