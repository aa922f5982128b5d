//! `/healthz` and `/api/v1/openapi.json`.

use axum::extract::State;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::Json;
use crate::error::{ApiError, ErrorBody, ErrorEnvelope};
use crate::state::AppState;
use crate::views::Health;

/// Liveness and readiness: answers 200 when the journal and the registry answer.
#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, body = Health), (status = 503, body = ErrorEnvelope)))]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state.registry().count_users().await?;
    state
        .journal()
        .list_runs(&toolshed_journal::RunFilter {
            limit: 1,
            ..Default::default()
        })
        .await?;
    Ok(Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }))
}

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The OpenAPI document, generated from the route annotations.
#[derive(OpenApi)]
#[openapi(
    info(title = "toolshed registry API", description = "Tools and agents for the whole organisation: register, list, execute (as durable runs), approvals and answers. Every answer is `{\"data\": …}`; every error `{\"error\": {\"code\", \"message\", \"details\"}}`."),
    paths(
        healthz, openapi,
        super::auth::login, super::auth::add_user, super::auth::list_users, super::auth::delete_user,
        super::registry::create_tool, super::registry::list_tools, super::registry::get_tool,
        super::registry::update_tool, super::registry::delete_tool, super::registry::tool_versions,
        super::registry::tool_usage, super::registry::execute_tool,
        super::registry::register_agent, super::registry::list_agents, super::registry::get_agent,
        super::runs::list_runs, super::runs::get_run, super::runs::resume_run, super::runs::cancel_run,
        super::runs::list_approvals, super::runs::approve, super::runs::deny, super::runs::answer,
    ),
    components(schemas(ErrorEnvelope, ErrorBody)),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}
