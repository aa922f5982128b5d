//! The route handlers, one module per area; [`api`], the one list of routes that makes
//! both the router and the OpenAPI document; and the document's own route.

use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Json;
use crate::state::AppState;

pub mod auth;
pub mod meta;
pub mod registry;
pub mod runs;
pub mod sandbox;
pub mod session;

/// Every route, each with its OpenAPI operation (`#[utoipa::path]` on the handler). The
/// router serves what this lists and the document describes the same list, so the two
/// cannot differ.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(Info::openapi())
        .routes(routes!(meta::healthz))
        .routes(routes!(openapi))
        .routes(routes!(auth::login))
        .routes(routes!(auth::list_users, auth::add_user))
        .routes(routes!(auth::delete_user))
        .routes(routes!(registry::list_tools, registry::create_tool))
        .routes(routes!(
            registry::get_tool,
            registry::update_tool,
            registry::delete_tool
        ))
        .routes(routes!(registry::tool_versions))
        .routes(routes!(registry::tool_usage))
        .routes(routes!(registry::execute_tool))
        .routes(routes!(registry::list_agents, registry::register_agent))
        .routes(routes!(registry::get_agent))
        .routes(routes!(sandbox::execute))
        .routes(routes!(sandbox::list_executions))
        .routes(routes!(sandbox::get_execution))
        .routes(routes!(runs::list_runs))
        .routes(routes!(runs::get_run))
        .routes(routes!(runs::resume_run))
        .routes(routes!(runs::cancel_run))
        .routes(routes!(runs::list_approvals))
        .routes(routes!(runs::approve))
        .routes(routes!(runs::deny))
        .routes(routes!(runs::answer))
        .routes(routes!(session::refresh))
        .routes(routes!(session::me))
        .routes(routes!(session::change_password))
        .routes(routes!(session::update_user))
}

/// The OpenAPI document: the routes of [`api`] with their schemas, under the API's
/// title, description and bearer scheme.
pub struct ApiDoc;

impl OpenApi for ApiDoc {
    fn openapi() -> utoipa::openapi::OpenApi {
        api().into_openapi()
    }
}

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    static DOC: std::sync::OnceLock<utoipa::openapi::OpenApi> = std::sync::OnceLock::new();
    Json(DOC.get_or_init(ApiDoc::openapi).clone())
}

/// What the document says besides its routes.
#[derive(OpenApi)]
#[openapi(
    info(title = "toolshed registry API", description = "Tools and agents for the whole organisation: register, list, execute (as durable runs), approvals and answers; tool code tested in the sandbox. Every answer is `{\"data\": …}`; every error `{\"error\": {\"code\", \"message\", \"details\"}}`, its codes listed in `ApiCode` and in docs/errors.md."),
    components(schemas(toolshed_api::ErrorEnvelope)),
    modifiers(&BearerAuth),
)]
struct Info;

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
