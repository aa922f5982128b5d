//! # toolshed-api
//!
//! The registry API's contract as types: what the server answers and what a client
//! sends. The server serializes these, the CLI deserializes them, so neither can drift
//! from the other; the OpenAPI document is generated from them. No IO: serde and
//! `utoipa` schemas only.
//!
//! - [`envelope`]: `{"data": …}`, `{"data": [...], "meta": {...}}` and
//!   `{"error": {"code", "message", "details"}}`, with the one `details` shape per kind of
//!   problem ([`ErrorDetails`]).
//! - [`ApiCode`]: every code the server answers, with its HTTP status (listed, with what
//!   to do, in `docs/errors.md`).
//! - [`views`]: the resources (tools, agents, users, runs, calls, executions).
//! - [`requests`]: the request bodies.
//! - [`code`]: the archive of uploaded tool code, built and checked the same way on
//!   both sides.
//!
//! ```
//! use toolshed_api::{ApiCode, Data, ErrorEnvelope, views::Health};
//!
//! let ok: Data<Health> =
//!     serde_json::from_str(r#"{"data": {"status": "ok", "version": "0.1.0"}}"#).unwrap();
//! assert_eq!(ok.data.status, "ok");
//!
//! let err: ErrorEnvelope = serde_json::from_str(
//!     r#"{"error": {"code": "NOT_FOUND", "message": "no tool `x`", "details": null}}"#,
//! )
//! .unwrap();
//! assert_eq!(err.error.code, ApiCode::NotFound);
//! assert_eq!(err.error.code.status(), Some(404));
//! ```

pub mod code;
mod codes;
pub mod envelope;
pub mod requests;
pub mod schema;
pub mod views;

pub use codes::ApiCode;
pub use envelope::{Data, ErrorBody, ErrorDetails, ErrorEnvelope, FieldProblem, PageMeta, Paged};
