//! The `#[tool]` attribute macro: turns an `async fn` into a toolshed tool whose input
//! schema comes from its parameters, whose output schema comes from its return type and
//! whose description comes from its doc comment. See [`macro@tool`].

mod analyze;
mod attrs;
mod expand;
#[cfg(test)]
mod tests;

use proc_macro::TokenStream;

/// Turn an `async fn` into a tool.
///
/// The fn stays as written and callable (parameter doc comments and `#[serde]` /
/// `#[schemars]` attributes are taken off it), and next to it comes
/// `<fn name>_tool() -> toolshed_core::Tool`, with the fn's visibility, that builds the
/// tool once and hands out cheap clones.
///
/// ```
/// use serde::Serialize;
/// use serde_json::json;
/// use toolshed_core::{Pipeline, RunContext, ToolCall, ToolContext, ToolSet};
/// use toolshed_macros::tool;
///
/// #[derive(Serialize, schemars::JsonSchema)]
/// pub struct Ticket {
///     id: u32,
///     title: String,
/// }
///
/// fn default_limit() -> u32 {
///     10
/// }
///
/// /// Search the ticket index by free text.
/// ///
/// /// Results come back best match first.
/// #[tool(effects = "none", timeout_ms = 30000, retries = 1)]
/// pub async fn search_tickets(
///     /// Free-text query.
///     query: String,
///     /// How many results to return.
///     #[serde(default = "default_limit")]
///     limit: u32,
///     ctx: &ToolContext,
/// ) -> Result<Vec<Ticket>, std::io::Error> {
///     let _ = ctx.tool_call_id();
///     Ok((0..limit.min(2)).map(|id| Ticket { id, title: query.clone() }).collect())
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let tool = search_tickets_tool();
/// assert_eq!(tool.name(), "search_tickets");
/// assert_eq!(
///     tool.spec().description,
///     "Search the ticket index by free text.\n\nResults come back best match first."
/// );
/// assert_eq!(tool.spec().input_schema["required"], json!(["query"]));
/// assert_eq!(tool.spec().input_schema["properties"]["limit"]["default"], json!(10));
///
/// let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).unwrap()).build();
/// let call = ToolCall::new("search_tickets", json!({"query": "login"}));
/// let outcome = pipeline.call(&RunContext::ephemeral(), call).await;
/// assert_eq!(outcome.result.unwrap(), json!([{"id": 0, "title": "login"}, {"id": 1, "title": "login"}]));
///
/// // The fn itself is still there.
/// let direct = search_tickets("x".into(), 1, &ToolContext::detached("search_tickets")).await;
/// assert_eq!(direct.unwrap().len(), 1);
/// # });
/// ```
///
/// # Parameters
///
/// Every parameter except the context becomes a property of the input schema, through a
/// hidden `#[derive(Deserialize, JsonSchema)]` struct with `deny_unknown_fields`
/// (so the schema has `additionalProperties: false`):
///
/// - the parameter's name is the property name and must be a plain identifier;
/// - its type must be owned (`String`, not `&str`) and implement `Deserialize` and
///   `JsonSchema`; `Option<T>` parameters are optional;
/// - its doc comment is the property's description;
/// - `#[serde(...)]` and `#[schemars(...)]` attributes apply to the property, e.g.
///   `#[serde(default)]`, `#[serde(default = "f")]` (the default shows in the schema and
///   the property is not required), `#[serde(rename = "..")]`, `#[serde(flatten)]`.
///
/// A parameter of type `ToolContext`, `&ToolContext` or `&mut ToolContext` (recognised
/// by the last path segment) receives the call's context and is not in the schema.
///
/// # Return type
///
/// | return type            | result                    | output schema          |
/// |------------------------|---------------------------|------------------------|
/// | `()` or none           | `null`                    | none                   |
/// | `Result<T, E>`         | `T`, or `Err` → `HANDLER_ERROR` with `E`'s `Display` | schema of `T` |
/// | `Streaming<T>`         | the last item; earlier items are partial results | schema of `T` |
/// | `Result<Streaming<T>, E>` | as above               | schema of `T`          |
/// | `serde_json::Value`    | the value                 | none                   |
/// | any other `T`          | `T`                       | schema of `T`          |
///
/// `Result` and `Streaming` are recognised by the last path segment, so aliases such as
/// `anyhow::Result<T>` work. A `T` of `()` or `Value` inside them has no output schema
/// either. Streaming tools are marked `streaming` (never retried).
///
/// # Attribute keys
///
/// All optional: `#[tool]` alone uses the fn's name and doc comment.
///
/// | key | value | builder call |
/// |-----|-------|--------------|
/// | `name` | string matching `^[A-Za-z0-9_-]{1,64}$` (default: the fn name) | `Tool::builder(name)` |
/// | `description` | string (default: the fn's doc comment, lines joined, common indent removed, trimmed) | `.description(..)` |
/// | `effects` | `"none"`, `"sandbox"`, `"external"` | `.effects(..)` |
/// | `idempotency` | `"keyed"`, `"none"` | `.idempotency(..)` |
/// | `approval` | `"never"`, `"always"` | `.approval(..)` |
/// | `allow_unkeyed_external` | `true`/`false` (bare key = `true`) | `.allow_unkeyed_external()` |
/// | `timeout_ms` | integer > 0 | `.timeout(Duration::from_millis(..))` |
/// | `max_attempts` | integer ≥ 1 | `.max_attempts(..)` |
/// | `retries` | integer ≤ 100 | `.retry(RetryPolicy::retries(..))` |
/// | `credentials` | array of strings, e.g. `["API_KEY"]` | `.credentials([..])` |
/// | `output_schema` | `true`/`false`; `false` leaves the output schema out | — |
/// | `crate` | path of `toolshed-core` as a string, for re-exports (default `"::toolshed_core"`) | — |
///
/// ```
/// use toolshed_core::ToolContext;
/// use toolshed_macros::tool;
///
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Receipt {
///     invoice_id: String,
/// }
///
/// /// Pay an invoice. Asks a human first.
/// #[tool(
///     name = "pay_invoice",
///     effects = "external",
///     idempotency = "keyed",
///     approval = "always",
///     timeout_ms = 30000,
///     max_attempts = 2,
///     retries = 1,
///     credentials = ["PAYMENTS_API_KEY"],
/// )]
/// async fn pay(
///     /// The invoice to pay.
///     invoice_id: String,
///     ctx: &ToolContext,
/// ) -> Result<Receipt, String> {
///     let _key = ctx.idempotency_key();
///     Ok(Receipt { invoice_id })
/// }
///
/// let tool = pay_tool();
/// assert_eq!(tool.name(), "pay_invoice");
/// assert_eq!(tool.spec().max_attempts, Some(2));
/// assert_eq!(tool.spec().approval.describe(), "always");
/// ```
///
/// # Compile errors
///
/// Reported with the span of the offending code: an unknown key or a bad value (the
/// message lists what is allowed), a duplicate key, an invalid tool name, a missing
/// description ("add a doc comment: the model chooses tools by their description"),
/// `effects = "external"` without `idempotency = "keyed"` or `allow_unkeyed_external`,
/// a fn that is not `async`, is generic, takes `self`, or has a parameter that is a
/// pattern, a borrow or `impl Trait`.
///
/// The macro only works on free functions (not on methods inside `impl` blocks), and
/// the crate using it must depend on `toolshed-core` (or set `crate = "..."`).
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}
