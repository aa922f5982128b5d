//! A user's session after login: refresh (`POST /api/v1/auth/refresh`), who am I
//! (`GET /api/v1/auth/me`), logout (`POST /api/v1/auth/logout`), a password change
//! (`POST /api/v1/auth/change-password`), and an admin's change to a user
//! (`PATCH /api/v1/users/{username}`). Every change of a user bumps its token
//! generation, which ends the tokens it had: the answer to the user's own change
//! carries new ones. A logout ends one session (the tokens of one login and its
//! refreshes), and no other.
//!
//! A refresh token is good for one refresh: each session's live refresh token is
//! recorded in the registry (`record_refresh` at login and whenever the session gets new
//! tokens), and a refresh spends it for the next one (`spend_refresh`). A spent one
//! presented again means two holders: the user and a thief, in some order, so the whole
//! session ends (every token of its login and refreshes), as a logout would end it
//! (OAuth 2.1's refresh token reuse detection).

use axum::extract::{Path, State};
use toolshed_api::requests::{ChangePasswordBody, RefreshBody, UserChangeBody};
use toolshed_api::views::{LoggedOut, MeView, TokenView, UserView};
use toolshed_api::{ApiCode, Data, ErrorEnvelope};
use toolshed_auth::{Claims, Role, TokenKind};
use toolshed_registry::{
    RefreshSpent, SessionRefresh, SpendRefresh, TenantScope, UserChange, UserRecord,
};

use crate::error::ApiError;
use crate::extract::{Admin, Auth, Body};
use crate::login_limits::Attempt;
use crate::state::{AppState, epoch_ms_in};
use crate::{Json, views};

/// Exchange a refresh token for a new access token and a new refresh token. A refresh
/// token is good for one refresh: the one sent is spent, and sending it again ends its
/// whole session (every token of its login and refreshes: it was copied). Refused once
/// the user was removed or changed since the refresh token was issued.
#[utoipa::path(post, path = "/api/v1/auth/refresh", tag = "auth", request_body = RefreshBody,
    responses(
        (status = 200, description = "New tokens; the refresh token sent is spent", body = Data<TokenView>),
        (status = 400, description = "The body is not JSON", body = ErrorEnvelope),
        (status = 401, description = "Not a valid, current refresh token; or one spent already, which ends its session", body = ErrorEnvelope),
        (status = 422, description = "A field is missing or wrong", body = ErrorEnvelope),
    ))]
pub async fn refresh(
    State(state): State<AppState>,
    Body(body): Body<RefreshBody>,
) -> Result<Json<Data<TokenView>>, ApiError> {
    let claims = state.verify_token(&body.refresh_token)?;
    if claims.kind != TokenKind::Refresh {
        return Err(ApiError::new(
            ApiCode::Unauthenticated,
            "field `refresh_token`: this is an access token; send the `refresh_token` of a login",
        ));
    }
    state.check_current(&claims).await?;
    let answer = spend_refresh(&state, &claims).await?;
    Ok(Json(Data { data: answer }))
}

/// Spend the refresh token of `claims` (checked current by the caller) for the next
/// tokens of its session; a refresh token spent already ends the session: 401.
pub(crate) async fn spend_refresh(
    state: &AppState,
    claims: &Claims,
) -> Result<TokenView, ApiError> {
    // The stamp matched: the role and tenant in the claims are the user's current ones.
    // The new tokens continue the refresh token's session, so a logout ends them too.
    let (answer, issued) = tokens(
        state,
        &claims.sub,
        claims.role,
        claims.tenant.as_deref().unwrap_or(crate::DEFAULT_TENANT),
        claims.generation,
        claims.sid.as_deref(),
    )?;
    let spent = state
        .registry()
        .spend_refresh(SpendRefresh {
            session_id: issued.session_id,
            username: claims.sub.clone(),
            // A refresh token without an id is older than rotation: spent already.
            presented: claims.jti.clone().unwrap_or_default(),
            next: issued.refresh_id,
            expires_at_ms: epoch_ms_in(state.tokens().refresh_ttl()),
            revoked_until_ms: state.revoked_until_ms(claims),
        })
        .await?;
    match spent {
        RefreshSpent::Rotated => Ok(answer),
        RefreshSpent::SessionEnded => {
            // Its tokens are refused from the next request on (elsewhere within seconds).
            state.forget_user(&claims.sub);
            tracing::warn!(user = %claims.sub, "a spent refresh token was sent again; its session is ended");
            Err(ApiError::new(
                ApiCode::Unauthenticated,
                "this refresh token was already used: its session is ended, as a copied token's must be; log in again (POST /api/v1/auth/login)",
            ))
        }
    }
}

/// End the caller's session: its access token, and every token of the same login
/// (its refresh token, and the tokens of every refresh since), are refused from now
/// on, here at once and on every server sharing the database within seconds. The
/// user's other sessions go on.
#[utoipa::path(post, path = "/api/v1/auth/logout", tag = "auth", security(("bearer" = [])),
    responses(
        (status = 200, description = "The session is ended", body = Data<LoggedOut>),
        (status = 401, description = "No valid, current token (nothing to end)", body = ErrorEnvelope),
        (status = 403, description = "With the console's cookie: no or a wrong CSRF token, or another origin (`CSRF_REJECTED`)", body = ErrorEnvelope),
    ))]
pub async fn logout(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<Data<LoggedOut>>, ApiError> {
    let ended = state.revoke_session(auth.claims()).await?;
    tracing::info!(user = %auth.claims().sub, "logged out; the session's tokens are revoked");
    Ok(Json(Data {
        data: LoggedOut {
            logged_out: true,
            session_ended: ended,
        },
    }))
}

/// The caller: user name, role, tenant (also under AgentBreeder's names).
#[utoipa::path(get, path = "/api/v1/auth/me", tag = "auth", security(("bearer" = [])),
    responses(
        (status = 200, body = Data<MeView>),
        (status = 401, body = ErrorEnvelope),
    ))]
pub async fn me(State(state): State<AppState>, auth: Auth) -> Result<Json<Data<MeView>>, ApiError> {
    let claims = auth.claims();
    let Some(user) = state.registry().get_user(&claims.sub).await? else {
        // Removed between the token check and now.
        state.forget_user(&claims.sub);
        return Err(ApiError::new(
            ApiCode::Unauthenticated,
            "the user was removed; log in again",
        ));
    };
    let expires = i64::try_from(claims.exp)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000);
    Ok(Json(Data {
        data: MeView {
            email: user.username.clone(),
            name: user.username.clone(),
            id: user.username.clone(),
            team: user.tenant.clone(),
            role: views::role(user.role),
            created_at: views::time(user.created_at_ms),
            token_expires_at: views::time(expires),
            tenant: user.tenant,
            username: user.username,
            must_change_password: false,
        },
    }))
}

/// Change the caller's own password. Every token of the user ends, on every server
/// within seconds; the answer carries new ones. Wrong current passwords are limited per
/// session (5 a minute by default), never against the user's logins: a token's holder
/// cannot lock its user out of logging in.
#[utoipa::path(post, path = "/api/v1/auth/change-password", tag = "auth",
    request_body = ChangePasswordBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "Changed; new tokens", body = Data<TokenView>),
        (status = 400, description = "The body is not JSON", body = ErrorEnvelope),
        (status = 401, description = "The current password is wrong, or the token is not valid", body = ErrorEnvelope),
        (status = 422, description = "A field is missing, or the new password is too short", body = ErrorEnvelope),
        (status = 429, description = "Too many wrong current passwords in this session, or the server is busy checking passwords; see `Retry-After`", body = ErrorEnvelope),
    ))]
pub async fn change_password(
    State(state): State<AppState>,
    auth: Auth,
    Body(body): Body<ChangePasswordBody>,
) -> Result<Json<Data<TokenView>>, ApiError> {
    let current = match (body.current_password, body.old_password) {
        (Some(p), None) | (None, Some(p)) => p,
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "current_password",
                "give `current_password` or `old_password`, not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::field(
                "current_password",
                "missing: send the current password as `current_password`",
            ));
        }
    };
    let username = auth.claims().sub.clone();
    // `Auth` refuses a token without a session.
    let session = auth.claims().sid.as_deref().unwrap_or_default();
    let attempt = state.logins().admit_in_session(session).await?;
    let Some(_user) = verify_password(&state, &username, current, attempt).await? else {
        return Err(ApiError::new(
            ApiCode::Unauthenticated,
            "the current password is wrong",
        ));
    };
    let hash = hash(&state, body.new_password)
        .await
        .map_err(|e| rename_weak(e, "new_password"))?;
    let user = state
        .registry()
        .update_user(
            &username,
            UserChange {
                password_hash: Some(hash),
                ..UserChange::default()
            },
            // Your own password: its check above is the authority.
            &TenantScope::All,
        )
        .await?;
    state.forget_user(&username);
    tracing::info!(user = %username, "password changed; the user's earlier tokens are withdrawn");
    // The caller's session goes on with the new tokens; every other one has ended.
    let answer = tokens_for(&state, &user, auth.claims().sid.as_deref()).await?;
    Ok(Json(Data { data: answer }))
}

/// Change a user's role, tenant and/or password (admin). Every token of the user ends,
/// on every server within seconds. You cannot lower your own role.
#[utoipa::path(patch, path = "/api/v1/users/{username}", tag = "auth",
    request_body = UserChangeBody, security(("bearer" = [])),
    params(("username" = String, Path, description = "The user name")),
    responses(
        (status = 200, description = "Changed", body = Data<UserView>),
        (status = 400, description = "The body is not JSON", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope), (status = 409, body = ErrorEnvelope),
        (status = 422, body = ErrorEnvelope),
        (status = 429, description = "Every password hashing slot is busy", body = ErrorEnvelope),
    ))]
pub async fn update_user(
    State(state): State<AppState>,
    Admin(claims): Admin,
    Path(username): Path<String>,
    Body(body): Body<UserChangeBody>,
) -> Result<Json<Data<UserView>>, ApiError> {
    let role = body.role.as_deref().map(str::parse::<Role>).transpose()?;
    let scope = crate::tenancy::scope_of(&claims);
    if let Some(tenant) = &body.tenant {
        super::auth::check_username(tenant).map_err(|m| ApiError::field("tenant", m))?;
        // Moving a user between tenants touches two tenants: the organisation's owner's.
        if scope != TenantScope::All {
            return Err(super::auth::refused(
                "tenant",
                "only an organisation owner moves a user to another tenant".to_owned(),
            ));
        }
    }
    if let Some(role) = role
        && role > claims.role
    {
        return Err(super::auth::refused(
            "role",
            format!(
                "you are {}: you cannot give a user the higher role {role}",
                claims.role
            ),
        ));
    }
    if claims.sub == username && role.is_some_and(|r| r < claims.role) {
        return Err(ApiError::conflict(
            "you cannot lower your own role; another admin can",
        ));
    }
    let password_hash = match body.password {
        Some(p) => Some(
            hash(&state, p)
                .await
                .map_err(|e| rename_weak(e, "password"))?,
        ),
        None => None,
    };
    let change = UserChange {
        password_hash,
        role,
        tenant: body.tenant,
    };
    if change.is_empty() {
        return Err(ApiError::invalid_body(
            "nothing to change: send `role`, `tenant` and/or `password`",
        ));
    }
    let user = state
        .registry()
        .update_user(&username, change, &scope)
        .await?;
    state.forget_user(&username);
    tracing::info!(user = %username, by = %claims.sub, "user changed; its earlier tokens are withdrawn");
    Ok(Json(Data {
        data: views::user(user),
    }))
}

/// Check `password` for `username` under the login limits: `Ok(Some(user))` when it is
/// right, `Ok(None)` when the user is unknown or the password wrong (the two take as
/// long), 429 when the limits refuse the attempt.
pub(crate) async fn check_password(
    state: &AppState,
    username: &str,
    password: String,
    addr: Option<std::net::IpAddr>,
) -> Result<Option<UserRecord>, ApiError> {
    let attempt = state.logins().admit(username, addr).await?;
    verify_password(state, username, password, attempt).await
}

/// Check `password` for `username` in an admitted attempt, which counts unless the
/// password is right.
async fn verify_password(
    state: &AppState,
    username: &str,
    password: String,
    attempt: Attempt,
) -> Result<Option<UserRecord>, ApiError> {
    let user = state.registry().get_user(username).await?;
    // Verify against a fixed hash when the user is unknown, so both answers take as long.
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    let ok = tokio::task::spawn_blocking(move || {
        let hash = hash.as_deref().unwrap_or(crate::dummy_hash());
        toolshed_auth::verify_password(&password, hash)
    })
    .await
    .map_err(|e| ApiError::internal("password check failed", e))?
    .unwrap_or(false);
    match user.filter(|_| ok) {
        Some(user) => {
            attempt.succeeded();
            Ok(Some(user))
        }
        // Dropping the attempt counts it against the user and the address.
        None => Ok(None),
    }
}

/// A login's answer for `user`: an access and a refresh token at its current
/// generation, in a new session (`None`) or continuing `session`; the refresh token is
/// recorded as the session's live one.
pub(crate) async fn tokens_for(
    state: &AppState,
    user: &UserRecord,
    session: Option<&str>,
) -> Result<TokenView, ApiError> {
    let generation = u64::try_from(user.token_generation).map_err(|_| {
        ApiError::internal(
            "the user's token generation is negative",
            user.token_generation,
        )
    })?;
    let (answer, issued) = tokens(
        state,
        &user.username,
        user.role,
        &user.tenant,
        generation,
        session,
    )?;
    state
        .registry()
        .record_refresh(SessionRefresh {
            session_id: issued.session_id,
            username: user.username.clone(),
            refresh_id: issued.refresh_id,
            expires_at_ms: epoch_ms_in(state.tokens().refresh_ttl()),
        })
        .await?;
    Ok(answer)
}

/// The ids of tokens issued, for the session's record.
struct Issued {
    session_id: String,
    refresh_id: String,
}

fn tokens(
    state: &AppState,
    username: &str,
    role: Role,
    tenant: &str,
    generation: u64,
    session: Option<&str>,
) -> Result<(TokenView, Issued), ApiError> {
    let t = state.tokens();
    let issued = t.issue_session(username, role, Some(tenant), generation, session)?;
    let view = TokenView {
        access_token: issued.access.clone(),
        token: issued.access,
        token_type: "bearer".into(),
        expires_in: t.ttl().as_secs().max(1),
        refresh_token: issued.refresh,
        refresh_expires_in: t.refresh_ttl().as_secs().max(1),
        role: views::role(role),
    };
    Ok((
        view,
        Issued {
            session_id: issued.session_id,
            refresh_id: issued.refresh_id,
        },
    ))
}

/// Hash a new password in a hashing slot.
async fn hash(state: &AppState, password: String) -> Result<String, ApiError> {
    let _slot = state.logins().hash_slot().await?;
    Ok(
        tokio::task::spawn_blocking(move || toolshed_auth::hash_password(&password))
            .await
            .map_err(|e| ApiError::internal("password hashing failed", e))??,
    )
}

/// A weak password's 422, naming the field it came in.
fn rename_weak(e: ApiError, field: &str) -> ApiError {
    if e.code() == ApiCode::WeakPassword {
        ApiError::new(
            ApiCode::WeakPassword,
            format!("field `{field}`: {}", e.message()),
        )
    } else {
        e
    }
}
