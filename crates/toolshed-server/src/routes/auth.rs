//! `POST /api/v1/auth/login` and user management: an admin manages its own tenant's
//! users (another tenant's are not listed, and removing one is a 404 as for an unknown
//! name; adding one there is a 403), the organisation's owner every tenant's; the
//! tenants list, in the same scope. The rest
//! of a session (refresh, me, password changes, user changes) is in `session`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use toolshed_api::requests::{LoginBody, NewUserBody};
use toolshed_api::views::{DeletedUser, TenantView, TokenView, UserView};
use toolshed_api::{ApiCode, Data, ErrorEnvelope, FieldProblem};
use toolshed_auth::Role;
use toolshed_registry::NewUser;

use crate::Json;
use crate::error::ApiError;
use crate::extract::{Admin, Auth, Body, ClientAddr};
use crate::state::AppState;
use crate::tenancy::{scope_of, tenant_of};

/// Exchange a user name (as `username`, or `email`) and password for an access token
/// and a refresh token. Failed attempts are limited per user name from one client
/// address, per user name, and per address by user names tried (a user's attempts from
/// an address it logged in from before take only from the first), and checks by the
/// server's password hashing slots: past them, 429 with `Retry-After`.
#[utoipa::path(post, path = "/api/v1/auth/login", tag = "auth", request_body = LoginBody,
    responses(
        (status = 200, description = "Tokens", body = Data<TokenView>),
        (status = 400, description = "The body is not JSON", body = ErrorEnvelope),
        (status = 401, description = "Wrong user name or password", body = ErrorEnvelope),
        (status = 422, description = "A field is missing or wrong", body = ErrorEnvelope),
        (status = 429, description = "Too many attempts, or the server is busy checking passwords; see `Retry-After`", body = ErrorEnvelope),
    ))]
pub async fn login(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    Body(body): Body<LoginBody>,
) -> Result<Json<Data<TokenView>>, ApiError> {
    let username = match (body.username, body.email) {
        (Some(name), None) | (None, Some(name)) => name,
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "username",
                "give `username` or `email`, not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::field(
                "username",
                "missing: send the user name as `username` (or `email`)",
            ));
        }
    };
    let user = super::session::check_password(&state, &username, body.password, addr).await?;
    let Some(user) = user else {
        return Err(ApiError::new(
            ApiCode::Unauthenticated,
            "wrong user name or password",
        ));
    };
    Ok(Json(Data {
        data: super::session::tokens_for(&state, &user, None).await?,
    }))
}

/// Check a user name: what the CLI and the API accept.
pub fn check_username(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a user name; use 1-64 letters, digits, `.`, `_`, `-` or `@`"
        ))
    }
}

/// Add a user (admin: to its own tenant; owner: to any tenant, and owners too).
#[utoipa::path(post, path = "/api/v1/users", tag = "auth", request_body = NewUserBody,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Added", body = Data<UserView>),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "The role is too low, or the tenant or role is beyond the caller's (an admin adds users to its own tenant only, and no owner)", body = ErrorEnvelope),
        (status = 409, description = "The name is taken", body = ErrorEnvelope),
        (status = 422, body = ErrorEnvelope),
    ))]
pub async fn add_user(
    State(state): State<AppState>,
    Admin(claims): Admin,
    Body(body): Body<NewUserBody>,
) -> Result<(StatusCode, Json<Data<UserView>>), ApiError> {
    check_username(&body.username).map_err(|m| ApiError::field("username", m))?;
    let role: Role = body.role.parse()?;
    let own = tenant_of(&claims);
    let tenant = body.tenant.unwrap_or_else(|| own.to_owned());
    check_username(&tenant).map_err(|m| ApiError::field("tenant", m))?;
    if !scope_of(&claims).allows(&tenant) {
        return Err(refused(
            "tenant",
            format!(
                "an admin adds users to its own tenant (`{own}`) only, not to `{tenant}`; leave `tenant` out, or ask an organisation owner"
            ),
        ));
    }
    if role > claims.role {
        return Err(refused(
            "role",
            format!(
                "you are {}: you cannot add a user with the higher role {role}",
                claims.role
            ),
        ));
    }
    let password = body.password;
    let hash = tokio::task::spawn_blocking(move || toolshed_auth::hash_password(&password))
        .await
        .map_err(|e| ApiError::internal("password hashing failed", e))??;
    let user = state
        .registry()
        .create_user(NewUser {
            username: body.username,
            password_hash: hash,
            role,
            tenant,
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(Data {
            data: crate::views::user(user),
        }),
    ))
}

/// List users (admin: its own tenant's; owner: every tenant's).
#[utoipa::path(get, path = "/api/v1/users", tag = "auth", security(("bearer" = [])),
    responses(
        (status = 200, body = Data<Vec<UserView>>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
    ))]
pub async fn list_users(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<Data<Vec<UserView>>>, ApiError> {
    let claims = auth.require(Role::Admin)?;
    let users = state.registry().list_users(&scope_of(claims)).await?;
    Ok(Json(Data {
        data: users.into_iter().map(crate::views::user).collect(),
    }))
}

/// List the tenants (admin: its own; owner: every tenant), by name, each with its
/// user count, its admins, and how many tools, agents and MCP server entries it owns.
/// A tenant is every name something belongs to; a new one comes with its first user
/// (`POST /api/v1/users` with `tenant`, by an owner).
#[utoipa::path(get, path = "/api/v1/tenants", tag = "auth", security(("bearer" = [])),
    responses(
        (status = 200, body = Data<Vec<TenantView>>),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Below the admin role", body = ErrorEnvelope),
    ))]
pub async fn list_tenants(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<Data<Vec<TenantView>>>, ApiError> {
    let claims = auth.require(Role::Admin)?;
    let tenants = state.registry().list_tenants(&scope_of(claims)).await?;
    Ok(Json(Data {
        data: tenants.into_iter().map(crate::views::tenant).collect(),
    }))
}

/// Remove a user (admin: of its own tenant, another tenant's is a 404 as if unknown,
/// and never an owner; owner: anyone). You cannot remove yourself.
#[utoipa::path(delete, path = "/api/v1/users/{username}", tag = "auth", security(("bearer" = [])),
    params(("username" = String, Path, description = "The user name")),
    responses(
        (status = 200, body = Data<DeletedUser>),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "The role is too low, or the user is an organisation owner and you are not", body = ErrorEnvelope),
        (status = 404, description = "No such user in your tenant", body = ErrorEnvelope),
        (status = 409, body = ErrorEnvelope),
    ))]
pub async fn delete_user(
    State(state): State<AppState>,
    auth: Auth,
    Path(username): Path<String>,
) -> Result<Json<Data<DeletedUser>>, ApiError> {
    let claims = auth.require(Role::Admin)?;
    if claims.sub == username {
        return Err(ApiError::conflict(
            "you cannot remove yourself; another admin can",
        ));
    }
    state
        .registry()
        .delete_user(&username, &scope_of(claims))
        .await?;
    // Its tokens are refused from the next request on (other servers: within seconds).
    state.forget_user(&username);
    Ok(Json(Data {
        data: DeletedUser {
            username,
            deleted: true,
        },
    }))
}

/// A 403 naming the field that asks for more than the caller may give.
pub(crate) fn refused(field: &str, message: String) -> ApiError {
    ApiError::new(ApiCode::Forbidden, message.clone())
        .with_fields(vec![FieldProblem::new(field, message)])
}
