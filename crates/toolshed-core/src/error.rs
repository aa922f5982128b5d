//! Error codes and the error result a model sees when a call fails.
//!
//! Two kinds of failure exist (see ARCHITECTURE.md, "Errors"):
//! - a *tool failure* (bad args, timeout, thrown error, panic) becomes a [`ToolError`]
//!   inside the call's result: the model sees it and the run goes on;
//! - a *definition failure* (an invalid name, schema or file) is a [`SpecError`],
//!   raised when a tool is built or loaded, long before any call.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Declare an enum written on the wire by name: its serde form, its `Display`, its
/// `FromStr` and its [`as_str`] text are the same name in the given case, derived from the
/// variant once (never a hand-written table), and its variants can be listed
/// (`strum::IntoEnumIterator`). Every layer's error codes (`case = "SCREAMING_SNAKE_CASE"`)
/// and every stored or sent status use it. The enum may carry more attributes (docs,
/// `#[non_exhaustive]`, further derives); the crate using it depends on `serde` and
/// `strum`.
///
/// ```
/// toolshed_core::wire_enum! {
///     case = "snake_case";
///     /// Where a light is.
///     pub enum Light {
///         /// Stop.
///         Red,
///         /// Go.
///         GreenArrow,
///     }
/// }
/// assert_eq!(Light::GreenArrow.as_str(), "green_arrow");
/// assert_eq!("red".parse::<Light>().ok(), Some(Light::Red));
/// assert_eq!(serde_json::to_value(Light::Red).unwrap(), "red");
/// ```
///
/// [`as_str`]: ErrorCode::as_str
#[macro_export]
macro_rules! wire_enum {
    (
        case = $case:tt;
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug,
            Clone,
            Copy,
            PartialEq,
            Eq,
            Hash,
            ::serde::Serialize,
            ::serde::Deserialize,
            ::strum::Display,
            ::strum::EnumString,
            ::strum::EnumIter,
            ::strum::IntoStaticStr,
        )]
        #[serde(rename_all = $case)]
        #[strum(serialize_all = $case)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),*
        }

        impl $name {
            /// The name as written on the wire and in messages.
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        impl ::core::cmp::PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl ::core::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

crate::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// Stable, machine-readable error codes of a tool call. Scripts and clients match on
    /// these; the wording of messages may change, the codes may not. Every code is listed,
    /// with what to do about it, in `docs/errors.md`.
    ///
    /// The wire form (serde) and the text form (`Display`, [`as_str`](ErrorCode::as_str))
    /// are the same `SCREAMING_SNAKE_CASE` name, derived from the variant by both.
    #[non_exhaustive]
    pub enum ErrorCode {
        /// The tool name is not in the toolset.
        UnknownTool,
        /// The arguments do not match the input schema.
        InvalidArgs,
        /// The result does not match the output schema.
        InvalidOutput,
        /// The handler returned an error.
        HandlerError,
        /// The handler panicked.
        HandlerPanic,
        /// The handler ran longer than the tool's timeout.
        Timeout,
        /// The run or call was cancelled.
        Cancelled,
        /// A hook returned an error or a replacement error.
        HookError,
        /// A hook panicked.
        HookPanic,
        /// A hook ran longer than the pipeline's hook timeout.
        HookTimeout,
        /// The call needs a human approval that this pipeline cannot ask for.
        ApprovalRequired,
        /// A human denied the call.
        ApprovalDenied,
        /// An approval predicate could not be evaluated.
        ApprovalPredicateError,
        /// A credential was asked for that the tool did not declare.
        CredentialNotDeclared,
        /// A credential name is not `^[A-Za-z][A-Za-z0-9_-]*$`.
        InvalidCredentialName,
        /// A Vault mount is not `^[A-Za-z][A-Za-z0-9_-]*$`.
        InvalidVaultMount,
        /// The credential provider has no value under that name.
        CredentialNotFound,
        /// The credential provider failed (unreachable, forbidden, malformed answer).
        CredentialProviderError,
        /// A streaming handler ended without yielding a result.
        EmptyStream,
        /// The result is larger than the configured cap.
        ResultTooLarge,
        /// A blob store operation failed.
        BlobError,
        /// The call is a human tool: a person must answer it, which only the durable
        /// runtime can wait for.
        AnswerRequired,
        /// A keyed call was started `max_attempts` times without completing (crashes);
        /// it fails closed instead of running again.
        AttemptsExhausted,
        /// The operator's credentials policy does not serve this credential to the run's
        /// tenant (or it is a `TOOLSHED_*` name, never served).
        CredentialNotAllowed,
        /// No attachment with that id for this run (none, or another tenant's, run's or
        /// session's).
        AttachmentNotFound,
    }
}

impl ErrorCode {
    /// Whether a failure with this code may succeed when tried again unchanged.
    /// Validation failures never will: retrying them only burns attempts.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::HandlerError
                | ErrorCode::HandlerPanic
                | ErrorCode::Timeout
                | ErrorCode::CredentialProviderError
                | ErrorCode::BlobError
        )
    }
}

/// The error result of a failed call: what the model (and every crumb subscriber) sees.
///
/// The message is written for a model to act on: it names what was wrong and, where it
/// can, what would be right.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// The stable code.
    pub code: ErrorCode,
    /// A human- and model-readable explanation.
    pub message: String,
    /// Structured details, e.g. the list of schema violations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ToolError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// An error a handler returns: the usual way for tool code to fail.
    pub fn handler(message: impl Into<String>) -> Self {
        ToolError::new(ErrorCode::HandlerError, message)
    }

    /// Attach structured details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Whether trying again unchanged may succeed (see [`ErrorCode::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.code.is_retryable()
    }

    /// The text handed to a model as the tool's result.
    pub fn to_model_text(&self) -> String {
        format!("error {}: {}", self.code, self.message)
    }
}

/// What a spec field failed on: the field's dotted path and a sentence with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct FieldError {
    /// The field's path, e.g. `input_schema.properties.limit` or `name`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl FieldError {
    /// A new field error.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A tool definition that cannot be used: raised when a tool is built or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// One or more fields are invalid. Every problem found is listed, not only the first.
    #[error("invalid tool definition{}: {}", origin_suffix(.origin), join_fields(.errors))]
    Fields {
        /// Where the definition came from (a file path), when known.
        origin: Option<String>,
        /// Every field problem found.
        errors: Vec<FieldError>,
    },
    /// The file could not be parsed at all (malformed YAML or JSON).
    #[error("cannot parse tool definition{}: {message}", origin_suffix(.origin))]
    Parse {
        /// Where the definition came from (a file path), when known.
        origin: Option<String>,
        /// The parser's message, with the field path and location when known.
        message: String,
    },
}

impl SpecError {
    /// A single field error.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError::Fields {
            origin: None,
            errors: vec![FieldError::new(field, message)],
        }
    }

    /// Name the file the definition came from in the message.
    pub fn with_origin(self, name: impl Into<String>) -> Self {
        let name = Some(name.into());
        match self {
            SpecError::Fields { errors, .. } => SpecError::Fields {
                origin: name,
                errors,
            },
            SpecError::Parse { message, .. } => SpecError::Parse {
                origin: name,
                message,
            },
        }
    }

    /// The field errors, empty for a parse error.
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            SpecError::Fields { errors, .. } => errors,
            SpecError::Parse { .. } => &[],
        }
    }
}

fn origin_suffix(origin: &Option<String>) -> String {
    origin
        .as_deref()
        .map(|o| format!(" in {o}"))
        .unwrap_or_default()
}

fn join_fields(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
