//! `/healthz`: liveness and readiness.

use axum::extract::State;
use toolshed_api::ErrorEnvelope;
use toolshed_api::views::Health;

use crate::Json;
use crate::error::ApiError;
use crate::state::AppState;

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
