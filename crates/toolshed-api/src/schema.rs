//! OpenAPI schemas of the core types the API carries as they are (a tool's error
//! result, a schema violation, a principal). The core crate has no OpenAPI knowledge,
//! so their documented shapes live here; a test serializes the real types and checks
//! that they match, so the two cannot drift.

use std::borrow::Cow;

use strum::IntoEnumIterator;
use toolshed_core::ErrorCode;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

/// The codes of a tool's error result (core's `ErrorCode`), generated from the enum.
pub struct ToolErrorCode;

impl PartialSchema for ToolErrorCode {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "The stable code of a tool's error result; every one is listed in docs/errors.md.",
            ))
            .enum_values(Some(ErrorCode::iter().map(ErrorCode::as_str)))
            .build()
            .into()
    }
}

impl ToSchema for ToolErrorCode {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ToolErrorCode")
    }
}

/// A tool's error result (`toolshed_core::ToolError`): what the model saw.
#[derive(ToSchema)]
#[schema(as = ToolError)]
#[allow(dead_code)]
pub struct ToolErrorSchema {
    /// The stable code.
    code: ToolErrorCode,
    /// What went wrong, for a person or a model to act on.
    message: String,
    /// Structured details (e.g. `{"violations": [...]}`, `{"dispatch_code": …}`); left
    /// out when there are none.
    #[schema(value_type = Option<Object>)]
    details: Option<serde_json::Value>,
}

/// One way a value failed its schema (`toolshed_core::schema::Violation`).
#[derive(ToSchema)]
#[schema(as = Violation)]
#[allow(dead_code)]
pub struct ViolationSchema {
    /// JSON pointer to the offending value (`""` is the whole value).
    pointer: String,
    /// The schema keyword that failed (`type`, `required`, `maximum`, …).
    keyword: String,
    /// What was expected.
    expected: String,
    /// The value found at `pointer`.
    #[schema(value_type = Value)]
    given: serde_json::Value,
}

/// Who a run acts for (`toolshed_core::Principal`): the token's issuer, subject and
/// tenant.
#[derive(ToSchema)]
#[schema(as = Principal)]
#[allow(dead_code)]
pub struct PrincipalSchema {
    /// The token issuer.
    iss: String,
    /// The subject (user or service).
    sub: String,
    /// The tenant; left out when none.
    tenant: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use toolshed_core::schema::Violation;
    use toolshed_core::{Principal, ToolError};

    use super::*;

    /// The property names of a documented object schema.
    fn properties<T: ToSchema>() -> Vec<String> {
        let schema = serde_json::to_value(T::schema()).unwrap();
        let mut names: Vec<String> = schema["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    fn keys(value: Value) -> Vec<String> {
        let mut names: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        names.sort();
        names
    }

    #[test]
    fn documented_core_shapes_match_the_real_ones() {
        let error = ToolError::new(ErrorCode::Timeout, "slow").with_details(json!({"a": 1}));
        assert_eq!(
            keys(serde_json::to_value(&error).unwrap()),
            properties::<ToolErrorSchema>()
        );
        let violation = Violation {
            pointer: "/a".into(),
            keyword: "type".into(),
            expected: "a string".into(),
            given: json!(1),
        };
        assert_eq!(
            keys(serde_json::to_value(&violation).unwrap()),
            properties::<ViolationSchema>()
        );
        let principal = Principal {
            iss: "toolshed".into(),
            sub: "dee".into(),
            tenant: Some("default".into()),
        };
        assert_eq!(
            keys(serde_json::to_value(&principal).unwrap()),
            properties::<PrincipalSchema>()
        );
    }

    #[test]
    fn the_tool_error_codes_are_every_core_code() {
        let schema = serde_json::to_value(ToolErrorCode::schema()).unwrap();
        let listed: Vec<&str> = schema["enum"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let all: Vec<&str> = ErrorCode::iter().map(ErrorCode::as_str).collect();
        assert_eq!(listed, all);
    }
}
