//! # toolshed-core
//!
//! The model layer of toolshed: tool specs, schemas and validation, hooks, crumbs, the
//! handler context, credentials, toolsets, model-vendor formats, and the in-memory
//! call pipeline every call goes through. It knows nothing of storage, networks or
//! processes; the edges (journal, dispatch, providers) implement its traits.
//!
//! ```
//! use serde_json::json;
//! use toolshed_core::{Pipeline, RunContext, Tool, ToolCall, ToolSet};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let add = Tool::builder("add")
//!     .description("Add two integers.")
//!     .input_schema(json!({
//!         "type": "object",
//!         "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}},
//!         "required": ["a"]
//!     }))
//!     .handler(|args, _ctx| async move {
//!         Ok::<_, String>(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0))
//!     })
//!     .build()
//!     .unwrap();
//! let pipeline = Pipeline::builder(ToolSet::from_tools([add]).unwrap()).build();
//! let outcome = pipeline.call(&RunContext::ephemeral(), ToolCall::new("add", json!({"a": 41}))).await;
//! assert_eq!(outcome.result.unwrap(), json!(42));
//! # });
//! ```

pub mod ask;
pub mod attachment;
pub mod budget;
pub mod cel_limits;
pub mod context;
pub mod credentials;
pub mod crumbs;
pub mod diagnostics;
pub mod env;
pub mod error;
pub mod file;
pub mod formats;
pub mod hooks;
pub mod pipeline;
pub mod schema;
pub mod spec;
pub mod text;
pub mod tool;
pub mod toolset;

pub use ask::{Ask, AskCode, AskError, AskKind, AskRecord, Asker};
pub use attachment::{
    AttachmentPage, AttachmentReadError, AttachmentReader, AttachmentScope, NextPage, PageRequest,
};
pub use context::{
    BlobError, BlobRef, BlobStore, Principal, RunContext, RunContextBuilder, ToolContext,
};
pub use credentials::{CredentialError, CredentialProvider, Credentials, EnvProvider, Secret};
pub use crumbs::{Crumb, CrumbBus, CrumbKind, CrumbSink, MemorySink};
pub use diagnostics::{Diagnostics, DiagnosticsSink, McpCall};
pub use error::{ErrorCode, FieldError, SpecError, ToolError};
pub use hooks::{AfterRun, BeforeRun, Hook, HookCall, HookFns, OnError};
pub use pipeline::{CallOutcome, ExecuteOptions, Pipeline, PipelineConfig, PreparedCall, ToolCall};
pub use spec::{
    Approval, CelPredicate, Effects, Idempotency, RetryPolicy, ToolMeta, ToolName, ToolSpec,
};
pub use tool::{
    Chunk, Handler, HandlerFuture, Reply, Streaming, Tool, ToolBuilder, ToolOutput, human_tool,
    human_tool_with,
};
pub use toolset::{CollisionError, Plugin, PluginError, Skill, ToolSet, ToolSetError, ToolSource};

#[doc(hidden)]
pub use tool::__private;
