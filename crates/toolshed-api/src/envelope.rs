//! The envelopes every answer comes in: `{"data": …}`, a page of items with its
//! `meta`, and the error answer with its one `details` shape per kind of problem.

use serde::{Deserialize, Serialize};
use toolshed_core::schema::Violation;
use utoipa::ToSchema;

use crate::ApiCode;

/// `{"data": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Data<T> {
    /// The answer.
    pub data: T,
}

/// `{"data": [...], "meta": {...}}` for paginated listings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Paged<T> {
    /// This page's items.
    pub data: Vec<T>,
    /// Where this page is.
    pub meta: PageMeta,
}

/// Pagination facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PageMeta {
    /// The page, from 1.
    pub page: u32,
    /// Items per page.
    pub per_page: u32,
    /// Items matching in all.
    pub total: u64,
}

impl PageMeta {
    /// How many pages the listing has (at least 1).
    pub fn pages(&self) -> u64 {
        self.total.div_ceil(u64::from(self.per_page.max(1))).max(1)
    }
}

/// The wire form of an error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// The body of an error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code scripts can match on (every one is listed in `docs/errors.md`).
    pub code: ApiCode,
    /// What went wrong and how to fix it.
    pub message: String,
    /// The problems one by one, when there are several of a kind; null otherwise.
    pub details: Option<ErrorDetails>,
}

/// The `details` of an error answer: one shape per kind of problem.
///
/// - field problems of a body (422 `INVALID_BODY`): `{"fields": [{"field", "message"}]}`;
/// - schema violations of args or an answer (422 `INVALID_ARGS`):
///   `{"violations": [{"pointer", "keyword", "expected", "given"}]}`, the shape a tool's
///   own error result uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorDetails {
    /// Every field problem found.
    Fields(Vec<FieldProblem>),
    /// Every schema violation found.
    #[schema(value_type = Vec<crate::schema::ViolationSchema>)]
    Violations(Vec<Violation>),
    /// Every approved call whose tool changed since its approval (`REVISION_CHANGED`).
    Changes(Vec<crate::views::RevisionChangeView>),
}

impl ErrorDetails {
    /// The problems as lines, e.g. ``field `name`: too long`` or `/limit: maximum 10`.
    pub fn lines(&self) -> Vec<String> {
        match self {
            ErrorDetails::Fields(fields) => fields
                .iter()
                .map(|f| format!("field `{}`: {}", f.field, f.message))
                .collect(),
            ErrorDetails::Violations(violations) => violations
                .iter()
                .map(|v| {
                    let at = if v.pointer.is_empty() {
                        "(root)"
                    } else {
                        v.pointer.as_str()
                    };
                    format!("{at}: {}", v.expected)
                })
                .collect(),
            ErrorDetails::Changes(changes) => changes
                .iter()
                .map(|c| {
                    format!(
                        "call {} ({}): approved for {}, now {}",
                        c.call_id, c.tool, c.approved_revision, c.current_revision
                    )
                })
                .collect(),
        }
    }
}

/// One field of a body that is wrong, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FieldProblem {
    /// The field's path, e.g. `schema_definition.properties.limit` or `name`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl FieldProblem {
    /// A field problem.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldProblem {
            field: field.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn details_have_one_shape_per_kind() {
        let fields = ErrorDetails::Fields(vec![FieldProblem::new("name", "too long")]);
        assert_eq!(
            serde_json::to_value(&fields).unwrap(),
            json!({"fields": [{"field": "name", "message": "too long"}]})
        );
        let violations = ErrorDetails::Violations(vec![Violation {
            pointer: "/limit".into(),
            keyword: "maximum".into(),
            expected: "at most 10".into(),
            given: json!(11),
        }]);
        assert_eq!(
            serde_json::to_value(&violations).unwrap(),
            json!({"violations": [{"pointer": "/limit", "keyword": "maximum", "expected": "at most 10", "given": 11}]})
        );
        assert_eq!(violations.lines(), ["/limit: at most 10"]);
        let back: ErrorDetails =
            serde_json::from_value(serde_json::to_value(&fields).unwrap()).unwrap();
        assert_eq!(back, fields);
    }

    #[test]
    fn an_error_answer_without_details_reads_as_none() {
        let e: ErrorEnvelope = serde_json::from_value(
            json!({"error": {"code": "FORBIDDEN", "message": "no", "details": null}}),
        )
        .unwrap();
        assert_eq!(e.error.details, None);
        assert_eq!(e.error.code, ApiCode::Forbidden);
    }
}
