//! The route handlers, one module per area; [`api`], the one list of routes that makes
//! both the router and the OpenAPI document; and the document's own route.

use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Json;
use crate::state::AppState;

pub mod attachments;
pub mod auth;
pub mod mcp_servers;
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
        .routes(routes!(auth::list_tenants))
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
        .routes(routes!(registry::tool_code))
        .routes(routes!(session::refresh))
        .routes(routes!(session::logout))
        .routes(routes!(session::me))
        .routes(routes!(session::change_password))
        .routes(routes!(session::update_user))
        .routes(routes!(
            mcp_servers::list_mcp_servers,
            mcp_servers::create_mcp_server
        ))
        .routes(routes!(mcp_servers::list_mcp_servers_alias))
        .routes(routes!(
            mcp_servers::get_mcp_server,
            mcp_servers::update_mcp_server,
            mcp_servers::delete_mcp_server
        ))
        .routes(routes!(mcp_servers::test_mcp_server))
        .routes(routes!(mcp_servers::discover_mcp_server))
        .routes(routes!(mcp_servers::pending_mcp_changes))
        .routes(routes!(mcp_servers::accept_mcp_changes))
        .routes(routes!(mcp_servers::execute_mcp_tool))
        .routes(routes!(attachments::create_attachment))
        .routes(routes!(attachments::get_attachment))
}

/// The OpenAPI document: the routes of [`api`] with their schemas, under the API's
/// title, description and bearer scheme.
pub struct ApiDoc;

impl OpenApi for ApiDoc {
    fn openapi() -> utoipa::openapi::OpenApi {
        let mut doc = api().into_openapi();
        // After the routes are in: `Info`'s own modifiers run before there are any.
        utoipa::Modify::modify(&CommonAnswers, &mut doc);
        doc
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
    modifiers(&BearerAuth, &CommonAnswers),
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

/// The answers every route of a kind can give, added where a route's own list leaves
/// them out, and a description for every answer (OpenAPI requires one):
/// - every route: 500 `INTERNAL` (the database is unreachable, say) and 503 (the
///   server's time limit, `REQUEST_TIMEOUT`);
/// - a route behind the bearer scheme: 401 (no, bad or expired token);
/// - a route with a body: 400 (not JSON), 413 (too large) and 422 (a field is wrong);
/// - a route with query or path parameters: 400 (a parameter is wrong, or the path
///   does not decode).
///
/// Written once here so a new route cannot forget one: the contract test checks every
/// answer the test suite provokes against this list.
struct CommonAnswers;

impl utoipa::Modify for CommonAnswers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{Ref, RefOr, ResponseBuilder};
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        utoipa::openapi::Content::new(Some(Ref::from_schema_name("ErrorEnvelope"))),
                    )
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            let item_has_params = item.parameters.as_ref().is_some_and(|p| !p.is_empty());
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
                let has_body = op.request_body.is_some();
                // Query or path parameters: a bad value, or a path that does not
                // decode, is a 400.
                let has_params =
                    item_has_params || op.parameters.as_ref().is_some_and(|ps| !ps.is_empty());
                let answers = &mut op.responses.responses;
                let mut add = |status: &str| {
                    answers
                        .entry(status.to_owned())
                        .or_insert_with(|| error(default_description(status)));
                };
                add("500");
                add("503");
                if secured {
                    add("401");
                }
                if has_body {
                    add("400");
                    add("413");
                    add("422");
                }
                if has_params {
                    add("400");
                }
                for (status, answer) in answers.iter_mut() {
                    if let RefOr::T(answer) = answer
                        && answer.description.is_empty()
                    {
                        answer.description = default_description(status).to_owned();
                    }
                }
            }
        }
    }
}

/// What an answer of this status means on this API, where a route says no more.
fn default_description(status: &str) -> &'static str {
    match status {
        "200" => "Done",
        "201" => "Created",
        "202" => "Accepted: the run is parked or still running",
        "400" => {
            "The body is not JSON, or a query parameter is wrong (`INVALID_JSON`, `INVALID_QUERY`)"
        }
        "401" => "No token, or a bad or expired one (`UNAUTHENTICATED`)",
        "403" => "The caller's role or tenant may not do this (`FORBIDDEN`)",
        "404" => "Not found, or not the caller's tenant's (`NOT_FOUND`)",
        "409" => "In conflict with the current state (`CONFLICT`)",
        "413" => "The body is larger than the server's limit (`PAYLOAD_TOO_LARGE`)",
        "422" => "A field is wrong; every problem is in `details` (`INVALID_BODY`, `INVALID_ARGS`)",
        "429" => "Too many requests: wait for the `Retry-After` header's seconds",
        "500" => "The server failed (`INTERNAL`); the request may be retried",
        "502" => "An MCP server could not be reached (`MCP_SERVER_UNREACHABLE`)",
        "503" => {
            "The request took longer than the server allows (`REQUEST_TIMEOUT`), or a service the route needs is unavailable"
        }
        _ => "See the error code",
    }
}
