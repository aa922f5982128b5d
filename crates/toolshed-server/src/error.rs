//! The API's error answer, `{"error": {"code", "message", "details"}}`, and how every
//! lower layer's error maps to an HTTP status and a stable code.
//!
//! The rule of the surface: a bad request is a 4xx that names the field and the fix; a
//! 500 only ever means a bug or a broken database, and its message says which without
//! leaking internals.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use toolshed_auth::AuthError;
use toolshed_journal::JournalError;
use toolshed_registry::RegistryError;
use toolshed_runtime::RuntimeError;

/// An error answer: status, stable code, message for the client, optional details.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code (`INVALID_BODY`, `NOT_FOUND`, `UNAUTHENTICATED`, …).
    pub code: &'static str,
    /// What went wrong and what to do.
    pub message: String,
    /// Structured details (e.g. the list of schema violations).
    pub details: Option<Value>,
}

/// The wire form of an error answer (documented in the OpenAPI document).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// The body of an error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A stable code scripts can match on.
    pub code: String,
    /// What went wrong and how to fix it.
    pub message: String,
    /// Structured details, when there are any.
    #[schema(value_type = Object)]
    pub details: Value,
}

impl ApiError {
    /// An error with a status, a code and a message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The same error with details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400 `INVALID_JSON`: the body is not JSON.
    pub fn invalid_json(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "INVALID_JSON", message)
    }

    /// 422 `INVALID_BODY`: the body is JSON but a field is wrong.
    pub fn invalid_body(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "INVALID_BODY", message)
    }

    /// 400 `INVALID_QUERY`: a query parameter is wrong.
    pub fn invalid_query(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "INVALID_QUERY", message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// 500 `INTERNAL`: a bug or a broken store. The message is logged in full; the
    /// client gets a short one.
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            format!("{context}; the server log has the details"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "code": self.code,
                "message": self.message,
                "details": self.details.unwrap_or(Value::Null),
            }
        });
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        let status = match &e {
            AuthError::InvalidToken(_) | AuthError::Expired => StatusCode::UNAUTHORIZED,
            AuthError::Forbidden { .. } => StatusCode::FORBIDDEN,
            AuthError::WeakPassword | AuthError::InvalidRole(_) => StatusCode::UNPROCESSABLE_ENTITY,
            _ => return ApiError::internal("authentication failed", e),
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        match &e {
            RegistryError::NotFound { .. } => ApiError::not_found(e.to_string()),
            RegistryError::Conflict(_) => {
                ApiError::new(StatusCode::CONFLICT, "CONFLICT", e.to_string())
            }
            RegistryError::Unavailable { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "REGISTRY_UNAVAILABLE",
                "the registry database is unavailable; try again",
            ),
            _ => ApiError::internal("the registry store failed", e),
        }
    }
}

impl From<JournalError> for ApiError {
    fn from(e: JournalError) -> Self {
        match &e {
            JournalError::NotFound { .. } => ApiError::not_found(e.to_string()),
            JournalError::Conflict(_) => {
                ApiError::new(StatusCode::CONFLICT, "CONFLICT", e.to_string())
            }
            JournalError::Unavailable { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "JOURNAL_UNAVAILABLE",
                "the journal database is unavailable; try again",
            ),
            _ => ApiError::internal("the journal failed", e),
        }
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Journal(j) => j.into(),
            other => {
                let status = match other.code() {
                    "INVALID_ANSWER" => StatusCode::UNPROCESSABLE_ENTITY,
                    "RUN_FINISHED" | "NON_DETERMINISM" | "BUDGET_EXHAUSTED" => StatusCode::CONFLICT,
                    "STARTUP" => StatusCode::UNPROCESSABLE_ENTITY,
                    _ => return ApiError::internal("the runtime failed", other),
                };
                ApiError::new(status, other.code(), other.to_string())
            }
        }
    }
}
