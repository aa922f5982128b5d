//! A user's session after login: refresh (`POST /api/v1/auth/refresh`), who am I
//! (`GET /api/v1/auth/me`), logout (`POST /api/v1/auth/logout`), a password change
//! (`POST /api/v1/auth/change-password`), and an admin's change to a user
//! (`PATCH /api/v1/users/{username}`). Every change of a user bumps its token
//! generation, which ends the tokens it had: the answer to the user's own change
//! carries new ones. A logout ends one session (the tokens of one login and its
//! refreshes), and no other.

use axum::extract::{Path, State};
use toolshed_api::requests::{ChangePasswordBody, RefreshBody, UserChangeBody};
use toolshed_api::views::{LoggedOut, MeView, TokenView, UserView};
use toolshed_api::{ApiCode, Data, ErrorEnvelope};
use toolshed_auth::{Role, TokenKind};
use toolshed_registry::{TenantScope, UserChange, UserRecord};

use crate::error::ApiError;
use crate::extract::{Auth, Body, ClientAddr};
use crate::state::AppState;
use crate::{Json, views};

/// Exchange a refresh token for a new access token (and a new refresh token). Refused
/// once the user was removed or changed since the refresh token was issued.
#[utoipa::path(post, path = "/api/v1/auth/refresh", tag = "auth", request_body = RefreshBody,
    responses(
        (status = 200, description = "New tokens", body = Data<TokenView>),
        (status = 400, description = "The body is not JSON", body = ErrorEnvelope),
        (status = 401, description = "Not a valid, current refresh token", body = ErrorEnvelope),
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
    // The stamp matched: the role and tenant in the claims are the user's current ones.
    // The new tokens continue the refresh token's session, so a logout ends them too.
    let answer = tokens(
        &state,
        &claims.sub,
        claims.role,
        claims.tenant.as_deref().unwrap_or(crate::DEFAULT_TENANT),
        claims.generation,
        claims.sid.as_deref(),
    )?;
    Ok(Json(Data { data: answer }))
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
/// within seconds; the answer carries new ones. The current password is checked under
/// the login limits.
#[utoipa::path(post, path = "/api/v1/auth/change-password", tag = "auth",
    request_body = ChangePasswordBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "Changed; new tokens", body = Data<TokenView>),
        (status = 400, description = "The body is not JSON", body = ErrorEnvelope),
        (status = 401, description = "The current password is wrong, or the token is not valid", body = ErrorEnvelope),
        (status = 422, description = "A field is missing, or the new password is too short", body = ErrorEnvelope),
        (status = 429, description = "Too many attempts; see `Retry-After`", body = ErrorEnvelope),
    ))]
pub async fn change_password(
    State(state): State<AppState>,
    auth: Auth,
    ClientAddr(addr): ClientAddr,
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
    let Some(_user) = check_password(&state, &username, current, addr).await? else {
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
    let answer = tokens_for(&state, &user, auth.claims().sid.as_deref())?;
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
    auth: Auth,
    Path(username): Path<String>,
    Body(body): Body<UserChangeBody>,
) -> Result<Json<Data<UserView>>, ApiError> {
    let claims = auth.require(Role::Admin)?;
    let role = body.role.as_deref().map(str::parse::<Role>).transpose()?;
    let scope = crate::tenancy::scope_of(claims);
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
/// generation, in a new session (`None`) or continuing `session`.
pub(crate) fn tokens_for(
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
    tokens(
        state,
        &user.username,
        user.role,
        &user.tenant,
        generation,
        session,
    )
}

fn tokens(
    state: &AppState,
    username: &str,
    role: Role,
    tenant: &str,
    generation: u64,
    session: Option<&str>,
) -> Result<TokenView, ApiError> {
    let t = state.tokens();
    let issued = t.issue_session(username, role, Some(tenant), generation, session)?;
    Ok(TokenView {
        access_token: issued.access.clone(),
        token: issued.access,
        token_type: "bearer".into(),
        expires_in: t.ttl().as_secs().max(1),
        refresh_token: issued.refresh,
        refresh_expires_in: t.refresh_ttl().as_secs().max(1),
        role: views::role(role),
    })
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
