//! The API's error answer, `{"error": {"code", "message", "details"}}`, and how every
//! lower layer's error maps to an HTTP status and a stable code.
//!
//! The rule of the surface: a bad request is a 4xx that names the field and the fix; a
//! 500 only ever means a bug or a broken database, and its message says which without
//! leaking internals. Every code is an [`ApiCode`] (listed in `docs/errors.md`), and
//! lower errors are mapped by their kind, never by their code text.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use toolshed_api::{ApiCode, ErrorBody, ErrorDetails, ErrorEnvelope, FieldProblem};
use toolshed_auth::AuthError;
use toolshed_core::schema::Violation;
use toolshed_journal::JournalError;
use toolshed_registry::RegistryError;
use toolshed_runtime::RuntimeError;

/// An error answer: status, stable code, message for the client, optional details.
/// Only an [`ApiCode`] makes one, and the code decides the status (see
/// [`ApiCode::status`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    status: StatusCode,
    code: ApiCode,
    message: String,
    details: Option<ErrorDetails>,
    /// Seconds for the `Retry-After` header, when the client should wait.
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a code (which decides the status) and a message.
    /// [`ApiCode::RequestRejected`] has no status of its own: use
    /// [`rejected`](ApiError::rejected) for it (`new` answers it as a 400).
    pub fn new(code: ApiCode, message: impl Into<String>) -> Self {
        let status = code
            .status()
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::BAD_REQUEST);
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// The same error with a `Retry-After` header of `seconds` (at least 1).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    /// `REQUEST_REJECTED` with the status a layer answered (anything but the statuses
    /// that have a code of their own).
    pub fn rejected(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            ..ApiError::new(ApiCode::RequestRejected, message)
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code.
    pub fn code(&self) -> ApiCode {
        self.code
    }

    /// The message for the client.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The details, when there are any.
    pub fn details(&self) -> Option<&ErrorDetails> {
        self.details.as_ref()
    }

    /// The `Retry-After` seconds, when the answer has them.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// The same error listing these field problems.
    pub fn with_fields(mut self, fields: Vec<FieldProblem>) -> Self {
        self.details = Some(ErrorDetails::Fields(fields));
        self
    }

    /// The same error listing these schema violations.
    pub fn with_violations(mut self, violations: Vec<Violation>) -> Self {
        self.details = Some(ErrorDetails::Violations(violations));
        self
    }

    /// 400 `INVALID_JSON`: the body is not JSON.
    pub fn invalid_json(message: impl Into<String>) -> Self {
        ApiError::new(ApiCode::InvalidJson, message)
    }

    /// 422 `INVALID_BODY`: the body is JSON but wrong as a whole (no one field to name).
    pub fn invalid_body(message: impl Into<String>) -> Self {
        ApiError::new(ApiCode::InvalidBody, message)
    }

    /// 422 `INVALID_BODY` naming one field: ``field `x`: …``, with
    /// `{"fields": [{"field", "message"}]}` as details.
    pub fn field(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError::invalid_body(format!("field `{field}`: {message}"))
            .with_fields(vec![FieldProblem::new(field, message)])
    }

    /// 400 `INVALID_QUERY`: a query parameter is wrong.
    pub fn invalid_query(message: impl Into<String>) -> Self {
        ApiError::new(ApiCode::InvalidQuery, message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(ApiCode::NotFound, message)
    }

    /// 409 `CONFLICT`.
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::new(ApiCode::Conflict, message)
    }

    /// 500 `INTERNAL`: a bug or a broken store. The error is logged in full; the
    /// client gets a short message.
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        ApiError::new(
            ApiCode::Internal,
            format!("{context}; the server log has the details"),
        )
    }

    /// The wire form.
    pub fn to_envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope {
            error: ErrorBody {
                code: self.code,
                message: self.message.clone(),
                details: self.details.clone(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.to_envelope())).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        let code = match &e {
            AuthError::InvalidToken(_) | AuthError::Expired => ApiCode::Unauthenticated,
            AuthError::Forbidden { .. } => ApiCode::Forbidden,
            AuthError::WeakPassword => ApiCode::WeakPassword,
            AuthError::InvalidRole(_) => ApiCode::InvalidRole,
            _ => return ApiError::internal("authentication failed", e),
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        match &e {
            RegistryError::NotFound { .. } => ApiError::not_found(e.to_string()),
            RegistryError::Conflict(_) => ApiError::conflict(e.to_string()),
            RegistryError::NotOwner { .. } | RegistryError::OwnerOnly(_) => {
                ApiError::new(ApiCode::NotOwner, e.to_string())
            }
            RegistryError::Unavailable { .. } => ApiError::new(
                ApiCode::RegistryUnavailable,
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
            JournalError::Conflict(_) => ApiError::conflict(e.to_string()),
            JournalError::Unavailable { .. } => ApiError::new(
                ApiCode::JournalUnavailable,
                "the journal database is unavailable; try again",
            ),
            _ => ApiError::internal("the journal failed", e),
        }
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let code = match &e {
            RuntimeError::InvalidAnswer { .. } => Some(ApiCode::InvalidAnswer),
            RuntimeError::RunFinished { .. } => Some(ApiCode::RunFinished),
            RuntimeError::NonDeterminism { .. } => Some(ApiCode::NonDeterminism),
            RuntimeError::BudgetExhausted { .. } => Some(ApiCode::BudgetExhausted),
            RuntimeError::RevisionChanged { .. } => Some(ApiCode::RevisionChanged),
            RuntimeError::SelfApproval { .. } => Some(ApiCode::SelfApproval),
            // A registry tool whose stored definition the runtime refuses to run: the
            // same answer as a definition the server cannot build.
            RuntimeError::Startup(_) => Some(ApiCode::InvalidDefinition),
            // A journal failure maps as one; a failed call task is a bug.
            _ => None,
        };
        let Some(code) = code else {
            return match e {
                RuntimeError::Journal(j) => j.into(),
                other => ApiError::internal("the runtime failed", other),
            };
        };
        let error = ApiError::new(code, e.to_string());
        match e {
            RuntimeError::InvalidAnswer { violations, .. } if !violations.is_empty() => {
                error.with_violations(violations)
            }
            RuntimeError::RevisionChanged { changes, .. } => {
                let changes = changes
                    .into_iter()
                    .map(|c| toolshed_api::views::RevisionChangeView {
                        call_id: c.call_id,
                        tool: c.tool,
                        approved_revision: c.approved_revision,
                        current_revision: c.current_revision,
                        approved_by: c.approved_by,
                    })
                    .collect();
                ApiError {
                    details: Some(ErrorDetails::Changes(changes)),
                    ..error
                }
            }
            _ => error,
        }
    }
}

/// The field a deserialization error is about, from its path and message; `None` for
/// the body as a whole. A missing or unknown field is reported at the object holding
/// it, so its name is taken from the message.
pub fn field_path(path: &str, message: &str) -> Option<String> {
    let root = path.is_empty() || path == ".";
    match named_field(message) {
        Some(field) if root => Some(field.to_owned()),
        // The path already ends at the field (an unknown key the deserializer entered).
        Some(field) if path == field || path.ends_with(&format!(".{field}")) => {
            Some(path.to_owned())
        }
        Some(field) => Some(format!("{path}.{field}")),
        None if root => None,
        None => Some(path.to_owned()),
    }
}

/// The field serde names in a "missing field `x`" or "unknown field `x`, …" message.
fn named_field(message: &str) -> Option<&str> {
    let rest = message
        .strip_prefix("missing field `")
        .or_else(|| message.strip_prefix("unknown field `"))?;
    rest.split_once('`').map(|(field, _)| field)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use strum::IntoEnumIterator;

    use super::*;

    #[test]
    fn each_code_answers_its_own_status() {
        for code in ApiCode::iter() {
            let e = ApiError::new(code, "m");
            match code.status() {
                Some(s) => assert_eq!(e.status().as_u16(), s, "{code}"),
                None => assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{code}"),
            }
            assert_eq!(e.to_envelope().error.code, code);
        }
        let e = ApiError::rejected(StatusCode::URI_TOO_LONG, "too long");
        assert_eq!(e.status(), StatusCode::URI_TOO_LONG);
        assert_eq!(e.code(), ApiCode::RequestRejected);
    }

    #[test]
    fn a_failed_call_task_is_a_server_fault() {
        let e = ApiError::from(RuntimeError::TaskFailed("task 7 panicked".into()));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.code(), ApiCode::Internal);
        assert!(!e.message().contains("task 7"), "{}", e.message());
    }

    #[test]
    fn lower_errors_map_by_kind() {
        let e = ApiError::from(JournalError::NotFound {
            what: "run",
            id: "r1".into(),
        });
        assert_eq!(
            (e.status(), e.code()),
            (StatusCode::NOT_FOUND, ApiCode::NotFound)
        );
        let e = ApiError::from(RuntimeError::Journal(JournalError::Conflict(
            "twice".into(),
        )));
        assert_eq!(
            (e.status(), e.code()),
            (StatusCode::CONFLICT, ApiCode::Conflict)
        );
        let e = ApiError::from(RegistryError::Unavailable {
            target: "db".into(),
            message: "down".into(),
        });
        assert_eq!(e.code(), ApiCode::RegistryUnavailable);
        let e = ApiError::from(RegistryError::NotOwner {
            what: "tool",
            name: "lookup".into(),
            owner: "acme".into(),
        });
        assert_eq!(
            (e.status(), e.code()),
            (StatusCode::FORBIDDEN, ApiCode::NotOwner)
        );
        assert!(e.message().contains("tenant `acme`"), "{}", e.message());
        let e = ApiError::from(AuthError::Expired);
        assert_eq!(e.code(), ApiCode::Unauthenticated);
        let e = ApiError::from(RuntimeError::Startup("refused".into()));
        assert_eq!(
            (e.status(), e.code()),
            (StatusCode::CONFLICT, ApiCode::InvalidDefinition)
        );
    }

    #[test]
    fn a_wrong_answer_lists_its_violations() {
        let violations = vec![Violation {
            pointer: "/ok".into(),
            keyword: "type".into(),
            expected: "a boolean".into(),
            given: json!("yes"),
        }];
        let e = ApiError::from(RuntimeError::InvalidAnswer {
            call_id: "c1".into(),
            details: "invalid answer: /ok: a boolean".into(),
            violations: violations.clone(),
        });
        assert_eq!(e.code(), ApiCode::InvalidAnswer);
        assert_eq!(e.details(), Some(&ErrorDetails::Violations(violations)));
    }

    #[test]
    fn missing_and_unknown_fields_are_named() {
        assert_eq!(
            field_path(".", "missing field `password`").as_deref(),
            Some("password")
        );
        assert_eq!(
            field_path("retry", "unknown field `tries`, expected `max`").as_deref(),
            Some("retry.tries")
        );
        assert_eq!(
            field_path("args", "invalid type: sequence").as_deref(),
            Some("args")
        );
        assert_eq!(field_path("", "invalid type: sequence"), None);
        assert_eq!(
            field_path("command", "unknown field `command`, expected `code`").as_deref(),
            Some("command")
        );
        assert_eq!(
            field_path("retry.tries", "unknown field `tries`").as_deref(),
            Some("retry.tries")
        );
    }
}
