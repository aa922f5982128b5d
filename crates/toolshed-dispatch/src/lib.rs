//! # toolshed-dispatch
//!
//! Runs tools written in any language behind one [`toolshed_core::Handler`]:
//!
//! | endpoint | how it runs |
//! | --- | --- |
//! | `builtin:<name>` | a Rust [`toolshed_core::Tool`] given to [`Dispatcher::with_builtins`] |
//! | `python:<abs_path>[:fn]` | the embedded Python runner calls `fn(**args)` |
//! | `node:<abs_path>[:export]` | the embedded Node runner calls `export(args, ctx)`; `.ts` is transpiled once and cached |
//! | `exec:<abs_path>` | any executable speaking the wire protocol |
//! | `http(s)://…` | a JSON POST of `{"tool", "args", "context"}` |
//!
//! Subprocess tools speak newline-delimited JSON ([`protocol`]), either one process per
//! call ([`Mode::OneShot`]) or from a warm pool of long-lived workers ([`Mode::Pool`],
//! kept per endpoint, tenant and policy under the rules of [`PoolConfig`]). Every such
//! process runs in the sandbox of `toolshed-sandbox` ([`Isolation::Sandbox`], the
//! default), with its tool's [`SandboxPolicy`] (network, limits clamped to the server's
//! ceilings, extra read-only binds); it sees `/usr`, its own folder and the runners
//! read-only, a scratch `/work`, and an environment with no secret of the runtime's. A
//! host that cannot sandbox fails the call (`SANDBOX_FAILED`); running unsandboxed is the
//! operator's explicit [`Isolation::Unsandboxed`].
//! stdout and stderr are capped, a process that floods stdout, breaks the protocol or
//! outlives its timeout is killed with its whole process group and reaped, and every
//! failure is an error result, never a panic or a stuck caller. What the process left
//! (stdout, stderr, exit code, signal) comes back as the call's
//! [`toolshed_core::Diagnostics`], in the handler's [`toolshed_core::Reply`].
//!
//! ## Writing tools
//!
//! - **Python**: a plain function; the runner calls `fn(**args)`. `async def` works,
//!   and so do generators and async generators (every value yielded is a partial
//!   result as it is yielded, and the last is the result too). An exception becomes an error line (`"ValueError: …"`, code the
//!   exception's `code` attribute or its type name). A parameter named `ctx` receives
//!   the call's context (`ctx.run_id`, `ctx.idempotency_key`, `ctx.credentials["NAME"]`,
//!   …). `print()` and anything else written to stdout go to stderr (the tool's log);
//!   stdin is `/dev/null`. The runner starts with `-S -E` and the `sys.path` a normal
//!   start would have, so `site`'s `.pth` hooks do not run.
//! - **Node**: an exported function (the default export, else the export named like
//!   the file), called as `fn(args, ctx)`; sync, async, generator and async generator
//!   functions work the same way. `console.log` and `process.stdout` go to stderr.
//!   TypeScript is stripped of its types in this process (oxc) once per source
//!   version, relative imports of other `.ts` files inside the tool's folder included,
//!   then runs like `.mjs`; what it imports resolves as from the source, in the sandbox.
//! - **bread and Toren tool files**, unchanged: `import { defineTool } from
//!   '@breadai/core'` (or `defineHumanTool`) and `'@toren-run/core'` resolve to
//!   toolshed's compatibility modules, `zod` to toolshed's zod 4 (its Node helper
//!   package, [`DispatcherConfig::node_deps`]), whose schemas become
//!   JSON Schema; [`Dispatcher::tool_from_inferred`] maps the rest of the definition
//!   ([`CompatSpec`]) onto the tool. See `docs/compat.md`.
//! - **exec**: anything that reads request lines on stdin and writes protocol lines
//!   on stdout ([`protocol`]).
//!
//! ```
//! use serde_json::json;
//! use toolshed_core::{Pipeline, RunContext, Tool, ToolCall, ToolSet};
//! use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let echo = Tool::builder("echo")
//!     .description("Answer with the arguments.")
//!     .input_schema(json!({"type": "object"}))
//!     .handler(|args, _ctx| async move { Ok::<_, String>(args) })
//!     .build()
//!     .unwrap();
//! let dispatcher = Dispatcher::new(DispatcherConfig::default()).with_builtins(vec![echo]);
//!
//! // A registry entry pointing at the built-in, run through the pipeline like any tool.
//! let endpoint = Endpoint::parse("builtin:echo").unwrap();
//! let tool = Tool::builder("echo-again")
//!     .description("The built-in echo, by endpoint.")
//!     .input_schema(json!({"type": "object"}))
//!     .raw_handler(dispatcher.handler(endpoint, "echo-again"))
//!     .build()
//!     .unwrap();
//! let pipeline = Pipeline::builder(ToolSet::from_tools([tool]).unwrap()).build();
//! let outcome = pipeline
//!     .call(&RunContext::ephemeral(), ToolCall::new("echo-again", json!({"x": 1})))
//!     .await;
//! assert_eq!(outcome.result.unwrap(), json!({"x": 1}));
//! # });
//! ```

mod assets;
pub mod compat;
pub mod config;
mod conversation;
mod dispatcher;
pub mod endpoint;
pub mod error;
pub mod guard;
mod http;
pub mod infer;
mod launcher;
mod pool;
mod process;
pub mod protocol;
pub mod special_purpose;
mod typescript;

pub use compat::{CompatSpec, Framework};
pub use config::{ChildEnv, DispatcherConfig, Isolation, Mode, PoolConfig, SandboxPolicy};
pub use dispatcher::{Dispatcher, Execution, Request};
pub use endpoint::Endpoint;
pub use error::{DispatchCode, DispatchError};
pub use guard::{HttpAllow, HttpAllowError, HttpPolicy};
pub use infer::{InferredTool, infer_node_schema, infer_python_file, infer_python_schema};
pub use pool::PoolStats;
pub use protocol::CallContext;
