//! Registry tools: turning an API body into a checked definition, and a stored
//! definition into a tool the runtime can execute (a dispatched tool's stdout, stderr
//! and exit code come back in the call's outcome, as its diagnostics).

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};
use toolshed_api::requests::CodeUpload;
use toolshed_api::{ApiCode, FieldProblem};
use toolshed_auth::{Claims, Role};
use toolshed_core::file::ToolFile;
use toolshed_core::{
    Handler, HandlerFuture, Pipeline, Reply, SpecError, Tool, ToolContext, ToolError, ToolSet,
};
use toolshed_dispatch::{Dispatcher, Endpoint};
use toolshed_registry::{NewTool, RegistryStore, ToolRecord};
use toolshed_runtime::{Runtime, RuntimeConfig};

use crate::code::{CodeCache, RunEnv, Upload};
use crate::error::ApiError;
use crate::state::AppState;

/// A registration (or update) body turned into a definition: the seed's fields
/// (`schema_definition`, `tool_type`, `source`) and every `tool.yaml` field.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The checked definition.
    pub file: ToolFile,
    /// Where it came from (`manual` by default).
    pub source: String,
    /// For updates: the revision the caller last saw.
    pub expected_revision: Option<u32>,
    /// The description is to come from the code's docstring.
    pub infer_description: bool,
    /// The uploaded code, as sent.
    pub code: Option<CodeUpload>,
    /// The uploaded code, checked (by `complete_registration`).
    pub upload: Option<Upload>,
    /// How the checked definition runs on this server (its code's folder, its
    /// dependencies), for the checks before it is stored.
    pub run_env: RunEnv,
}

/// The source of the tools the server registers itself (the stdlib's); no client may
/// claim it.
pub const STDLIB_SOURCE: &str = "stdlib";

/// The placeholder description of a tool whose description is inferred.
const INFERRED: &str = "(inferred from the code)";

/// Parse and check a registration body; every field problem is listed in `details`.
pub fn parse_registration(body: Value) -> Result<Registration, ApiError> {
    let Value::Object(mut map) = body else {
        return Err(ApiError::invalid_body(
            "the body must be a JSON object with at least `name` and `description`",
        ));
    };
    let source = match map.remove("source") {
        None | Some(Value::Null) => "manual".to_owned(),
        // The server's own tools are registered by the server alone: a client claiming
        // the source would pass its code off as built-in.
        Some(Value::String(s)) if s == STDLIB_SOURCE => {
            return Err(ApiError::field(
                "source",
                "`stdlib` is reserved for the tools the server registers itself; leave `source` out (it is `manual` then) or use another, e.g. `cli`",
            ));
        }
        Some(Value::String(s)) if valid_source(&s) => s,
        Some(other) => {
            return Err(ApiError::field(
                "source",
                format!(
                    "`{}` is not a source; use 1-32 lowercase letters, digits, `-` or `_` (e.g. `manual`, `cli`)",
                    short(&other)
                ),
            ));
        }
    };
    let expected_revision = match map.remove("expected_revision") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1 && n <= u32::MAX as u64) => {
            n.as_u64().map(|n| n as u32)
        }
        Some(other) => {
            return Err(ApiError::field(
                "expected_revision",
                format!(
                    "`{}` is not a revision; use a whole number from 1",
                    short(&other)
                ),
            ));
        }
    };
    let code = match map.remove("code") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_path_to_error::deserialize::<_, CodeUpload>(v).map_err(|e| {
                let path = e.path().to_string();
                let field = if path == "." || path.is_empty() {
                    "code".to_owned()
                } else {
                    format!("code.{path}")
                };
                ApiError::field(
                    &field,
                    format!(
                        "{}; send {{\"archive_base64\": \"<base64 of a tar>\", \"sha256\": \"<hex>\"}}",
                        e.into_inner()
                    ),
                )
            })?,
        ),
    };
    if map.contains_key("compat") {
        // What a bread or Toren file declares is read from its code here, never taken
        // from a client (which could claim a gated tool has no gate).
        return Err(ApiError::field(
            "compat",
            "set by the registry from the tool's code (a bread or Toren file's approval, hooks, human gate, retries); leave it out",
        ));
    }
    rename(&mut map, "schema_definition", "input_schema")?;
    // A Python or Node tool may leave its description to the docstring (filled in by
    // `complete_registration`); a placeholder lets the other fields be checked now.
    let inferable = map
        .get("endpoint")
        .and_then(Value::as_str)
        .is_some_and(|e| e.starts_with("python:") || e.starts_with("node:"));
    let blank = match map.get("description") {
        None | Some(Value::Null) => true,
        Some(Value::String(d)) => d.trim().is_empty(),
        Some(_) => false,
    };
    let infer_description = inferable && blank;
    if infer_description {
        map.insert("description".into(), Value::String(INFERRED.into()));
    }
    rename(&mut map, "tool_type", "type")?;
    map.entry("spec_version")
        .or_insert_with(|| Value::String("v1".into()));
    let file: ToolFile = serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        match crate::error::field_path(&path, &message) {
            Some(field) => ApiError::field(&seed_field(&field), message),
            None => ApiError::invalid_body(format!("invalid tool definition: {message}")),
        }
    })?;
    // Check every field now (the spec is rebuilt when the tool is executed).
    file.clone().into_spec().map_err(spec_error)?;
    // Endpoints naming a file are checked by `complete_registration`, which knows the
    // caller and the code: parsing one here would say whether a host path exists.
    if let Some(endpoint) = &file.endpoint
        && crate::code::split_kind(endpoint).is_none()
    {
        Endpoint::parse(endpoint).map_err(|e| ApiError::field("endpoint", e.to_string()))?;
    }
    Ok(Registration {
        file,
        source,
        expected_revision,
        infer_description,
        code,
        upload: None,
        run_env: RunEnv::default(),
    })
}

fn valid_source(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn rename(map: &mut Map<String, Value>, seed: &str, ours: &str) -> Result<(), ApiError> {
    if let Some(v) = map.remove(seed) {
        if map.contains_key(ours) {
            return Err(ApiError::field(
                seed,
                format!("give `{seed}` or `{ours}`, not both"),
            ));
        }
        map.insert(ours.to_owned(), v);
    }
    Ok(())
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// A definition's field problems as a 422 listing every one, named as the seed's API
/// names them.
fn spec_error(e: SpecError) -> ApiError {
    match e {
        SpecError::Fields { errors, .. } => {
            let fields: Vec<FieldProblem> = errors
                .iter()
                .map(|f| FieldProblem::new(seed_field(&f.field), f.message.clone()))
                .collect();
            let text: Vec<String> = fields
                .iter()
                .map(|f| format!("field `{}`: {}", f.field, f.message))
                .collect();
            ApiError::invalid_body(format!("invalid tool definition: {}", text.join("; ")))
                .with_fields(fields)
        }
        other => ApiError::invalid_body(other.to_string()),
    }
}

fn seed_field(field: &str) -> String {
    if let Some(rest) = field.strip_prefix("input_schema") {
        format!("schema_definition{rest}")
    } else if field == "type" {
        "tool_type".into()
    } else {
        field.to_owned()
    }
}

/// Check a registration against this server: the endpoint's implementation exists, and
/// a Python or Node tool without a schema gets one inferred from its code.
pub async fn complete_registration(
    dispatcher: &Dispatcher,
    cache: &CodeCache,
    claims: &Claims,
    mut reg: Registration,
) -> Result<Registration, ApiError> {
    if reg.code.is_some() {
        resolve_upload(dispatcher, cache, &mut reg).await?;
    } else if reg
        .file
        .endpoint
        .as_deref()
        .and_then(crate::code::split_kind)
        .is_some()
    {
        host_path(cache, claims, &mut reg)?;
    }
    let Some(text) = reg
        .run_env
        .endpoint
        .clone()
        .or_else(|| reg.file.endpoint.clone())
    else {
        return Ok(reg);
    };
    let endpoint =
        Endpoint::parse(&text).map_err(|e| ApiError::field("endpoint", e.to_string()))?;
    match &endpoint {
        Endpoint::Builtin { name } if toolshed_stdlib::get(name).is_none() => {
            let known: Vec<String> = toolshed_stdlib::tools()
                .iter()
                .map(|t| t.name().to_owned())
                .collect();
            return Err(ApiError::field(
                "endpoint",
                format!(
                    "there is no built-in tool `{name}`; built-ins: {}",
                    known.join(", ")
                ),
            ));
        }
        // A Node file is always read (in the sandbox): a bread or Toren file declares
        // its contract in its code, and the registry carries all of it.
        Endpoint::Python { .. } | Endpoint::Node { .. }
            if reg.file.input_schema.is_none()
                || reg.infer_description
                || matches!(endpoint, Endpoint::Node { .. }) =>
        {
            let inferred = match dispatcher.infer_schema(&endpoint).await {
                Ok(inferred) => inferred,
                // A module that declares no schema of its own, registered with one: not a
                // bread or Toren file (those declare theirs), so nothing more to read.
                Err(_) if reg.file.input_schema.is_some() && !reg.infer_description => {
                    return Ok(reg);
                }
                Err(e) => {
                    return Err(ApiError::field(
                        "schema_definition",
                        format!("none given and inferring it failed: {e}"),
                    ));
                }
            };
            if let Some(compat) = &inferred.compat {
                reg.file.compat =
                    Some(serde_json::to_value(compat).map_err(|e| {
                        ApiError::internal("cannot record a tool file's contract", e)
                    })?);
            }
            if reg.file.input_schema.is_none() {
                reg.file.input_schema = Some(inferred.input_schema);
                if reg.file.output_schema.is_none() {
                    reg.file.output_schema = inferred.output_schema;
                }
            }
            if reg.infer_description {
                if inferred.description.trim().is_empty() {
                    return Err(ApiError::field(
                        "description",
                        "none given and the code has no docstring; give a description",
                    ));
                }
                reg.file.description = inferred.description;
                reg.infer_description = false;
            }
        }
        _ => {}
    }
    Ok(reg)
}

/// The store's form of a registration by `created_by` of `tenant` (the owner of a new
/// tool; an update keeps the stored owner).
pub fn new_tool(reg: &Registration, created_by: &str, tenant: &str) -> Result<NewTool, ApiError> {
    let definition = serde_json::to_value(&reg.file)
        .map_err(|e| ApiError::internal("cannot serialize a tool definition", e))?;
    Ok(NewTool {
        name: reg.file.name.clone(),
        description: reg.file.description.clone(),
        tool_type: reg
            .file
            .tool_type
            .clone()
            .unwrap_or_else(|| "function".into()),
        source: reg.source.clone(),
        endpoint: reg.file.endpoint.clone(),
        version: reg.file.version.clone(),
        definition,
        created_by: created_by.to_owned(),
        tenant: tenant.to_owned(),
        code: reg.upload.as_ref().map(Upload::new_code),
    })
}

/// Check an upload and its endpoint (a file of the code), write the code to the cache
/// and install its dependencies, so the checks that follow run what will be stored.
async fn resolve_upload(
    dispatcher: &Dispatcher,
    cache: &CodeCache,
    reg: &mut Registration,
) -> Result<(), ApiError> {
    let Some(upload) = reg.code.take() else {
        return Ok(());
    };
    let upload = cache.check(&upload)?;
    let Some(text) = reg.file.endpoint.clone() else {
        return Err(ApiError::field(
            "endpoint",
            "uploaded code needs an endpoint naming its entry file, e.g. `python:order_lookup.py:order_lookup`",
        ));
    };
    // The paths are checked against the files before anything is written.
    crate::code::code_endpoint(&text, Some(&upload.files), Path::new("/"))?;
    let root = cache.materialise(&upload.sha256, &upload.files).await?;
    reg.run_env = code_env(dispatcher, cache, &reg.file, &text, &root).await?;
    reg.upload = Some(upload);
    Ok(())
}

/// A host-path endpoint: admins only, inside a tool root; stored with its canonical
/// path.
fn host_path(cache: &CodeCache, claims: &Claims, reg: &mut Registration) -> Result<(), ApiError> {
    let Some(text) = reg.file.endpoint.clone() else {
        return Ok(());
    };
    if let Some((kind, rest)) = crate::code::split_kind(&text)
        && !rest.starts_with('/')
    {
        return Err(ApiError::field(
            "endpoint",
            format!(
                "`{}` names a relative path, which is a file of uploaded code: send the code in `code` (`toolshed registry tool push FILE` does), e.g. `{kind}:tool.py` with the tool's files",
                short(&Value::String(text.clone()))
            ),
        ));
    }
    if claims.role < Role::Admin {
        return Err(ApiError::new(
            ApiCode::Forbidden,
            format!(
                "registering an endpoint that names a path on the server (`{}`) needs the admin role; upload the code instead (`toolshed registry tool push FILE` sends it, or give `code`)",
                short(&Value::String(text))
            ),
        ));
    }
    reg.file.endpoint = Some(cache.host_endpoint(&text)?);
    Ok(())
}

/// How a code tool runs: its endpoint under the code's folder, its dependencies
/// installed.
async fn code_env(
    dispatcher: &Dispatcher,
    cache: &CodeCache,
    file: &ToolFile,
    text: &str,
    root: &Path,
) -> Result<RunEnv, ApiError> {
    let (endpoint, entry, language) = crate::code::code_endpoint(text, None, root)?;
    let mut libraries = Vec::new();
    if let Some(language) = language {
        let python = match language {
            crate::code::Language::Python => dispatcher.python_executable().await.ok(),
            crate::code::Language::Node => None,
        };
        let entry_dir = root
            .join(&entry)
            .parent()
            .map_or_else(|| root.to_path_buf(), Path::to_path_buf);
        libraries = cache
            .dependencies(python.as_deref(), file, language, root, &entry_dir)
            .await?;
    }
    Ok(RunEnv {
        endpoint: Some(endpoint),
        libraries,
        root: Some(root.to_path_buf()),
    })
}

/// How a stored tool runs on this server: its code loaded into the cache (uploaded
/// code) or its host path checked against the tool roots again.
pub async fn run_env(
    dispatcher: &Dispatcher,
    cache: &CodeCache,
    registry: &dyn RegistryStore,
    record: &ToolRecord,
) -> Result<RunEnv, ApiError> {
    let Some(text) = record.endpoint.as_deref() else {
        return Ok(RunEnv::default());
    };
    if let Some(code) = &record.code {
        let root = cache.load(registry, code).await?;
        let file: ToolFile = serde_json::from_value(record.definition.clone()).map_err(|e| {
            ApiError::internal(
                &format!("tool {} has an unreadable definition", record.id),
                e,
            )
        })?;
        return code_env(dispatcher, cache, &file, text, &root).await;
    }
    if let Some((_, rest)) = crate::code::split_kind(text) {
        let path = rest.split(':').next().unwrap_or(rest);
        if !cache.host_path_allowed(Path::new(path)) {
            return Err(ApiError::new(
                ApiCode::InvalidDefinition,
                format!(
                    "tool `{}` names a path on the server that is not a file under this server's tool roots; push its code (`toolshed registry tool push`) to update it",
                    record.name
                ),
            ));
        }
    }
    Ok(RunEnv::default())
}

/// The active tool with this id, or else with this name (or its `_`/`-` twin).
pub async fn find_tool(
    registry: &dyn RegistryStore,
    id_or_name: &str,
) -> Result<ToolRecord, ApiError> {
    match registry.get_tool(id_or_name).await {
        Ok(t) => return Ok(t),
        Err(toolshed_registry::RegistryError::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    find_by_name(registry, id_or_name).await?.ok_or_else(|| {
        ApiError::not_found(format!(
            "no tool with id or name `{id_or_name}`; list them with GET /api/v1/registry/tools"
        ))
    })
}

/// The active tool with this name or its `_`/`-` twin, if any.
pub async fn find_by_name(
    registry: &dyn RegistryStore,
    name: &str,
) -> Result<Option<ToolRecord>, ApiError> {
    for form in name_forms(name) {
        if let Some(t) = registry.find_tool_by_name(&form).await? {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// `order-lookup` and `order_lookup` name the same tool, as refs do.
fn name_forms(name: &str) -> Vec<String> {
    let mut forms = vec![name.to_owned()];
    for alt in [name.replace('-', "_"), name.replace('_', "-")] {
        if !forms.contains(&alt) {
            forms.push(alt);
        }
    }
    forms
}

/// Build the runtime executing one registry tool.
pub fn build_runtime(state: &AppState, tool: Tool) -> Result<Runtime, ApiError> {
    let set =
        ToolSet::from_tools([tool]).map_err(|e| ApiError::internal("cannot build a toolset", e))?;
    let pipeline = Pipeline::builder(set)
        .config(pipeline_config(state))
        .build();
    Runtime::new(pipeline, state.journal().clone(), runtime_config(state)).map_err(ApiError::from)
}

/// The pipeline settings of every runtime executing registry tools: the server's own
/// folders (the dispatcher's cache, where runners and transpiled code live; the code
/// cache; the tool roots) are shown to callers by name only (`<cache>`, `<code>`,
/// `<tool-root>`), never as paths on the server.
pub fn pipeline_config(state: &AppState) -> toolshed_core::PipelineConfig {
    let config = state.config();
    let mut aliases: Vec<(String, String)> = Vec::new();
    let mut alias = |path: &std::path::Path, name: &str| {
        for p in [Some(path.to_path_buf()), std::fs::canonicalize(path).ok()]
            .into_iter()
            .flatten()
        {
            let text = p.to_string_lossy().trim_end_matches('/').to_owned();
            if text.len() > 1 && !aliases.iter().any(|(t, _)| *t == text) {
                aliases.push((text, name.to_owned()));
            }
        }
    };
    if let Ok(code) = state.code() {
        alias(code.dir(), "<code>");
    }
    alias(&config.dispatcher.cache_dir, "<cache>");
    for root in &config.code.tool_roots {
        alias(root, "<tool-root>");
    }
    // Longest first: the code cache is inside the dispatcher's cache by default.
    aliases.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
    toolshed_core::PipelineConfig {
        path_aliases: aliases,
        ..toolshed_core::PipelineConfig::default()
    }
}

/// The settings of every runtime executing registry tools: credentials come from the
/// operator's policy for the run's tenant, never from whatever a tool declares.
pub fn runtime_config(state: &AppState) -> RuntimeConfig {
    let mut config = RuntimeConfig::default();
    let provider: Arc<dyn toolshed_core::CredentialProvider> = state.credentials().clone();
    config.credentials = Some(provider);
    if let Ok((attachments, _)) = state.attachments() {
        let reader: Arc<dyn toolshed_core::AttachmentReader> = attachments;
        config.attachments = Some(reader);
    }
    config
}

/// A stored definition as an executable tool; a definition this server refuses is a
/// 409 that says to replace it.
///
/// A `builtin:` tool reads the env the built-in declares (`TAVILY_API_KEY`,
/// `SQL_DATABASE_URL`, …) from `builtin_env`, the operator's credentials policy, for
/// the tenant of each run: one tenant's value never reaches another tenant's run.
pub fn build_tool(
    dispatcher: &Dispatcher,
    record: &ToolRecord,
    env: &RunEnv,
    builtin_env: Arc<dyn toolshed_core::CredentialProvider>,
) -> Result<Tool, ApiError> {
    let file: ToolFile = serde_json::from_value(record.definition.clone()).map_err(|e| {
        ApiError::internal(
            &format!("tool {} has an unreadable definition", record.id),
            e,
        )
    })?;
    // The registry's revision number goes into the tool's revision, which approvals are
    // bound to (`toolshed_runtime::tool_revision`).
    let revision = Some(record.revision.to_string());
    executable_at(dispatcher, file, env, revision, Some(builtin_env)).map_err(|reason| {
        ApiError::new(
            ApiCode::InvalidDefinition,
            format!("tool `{}` {reason}; update it with PUT", record.name),
        )
    })
}

/// A definition as the tool the runtime executes, or why it cannot be one.
pub fn executable(dispatcher: &Dispatcher, file: ToolFile, env: &RunEnv) -> Result<Tool, String> {
    executable_at(dispatcher, file, env, None, None)
}

/// [`executable`], marked with the registry revision it was stored as.
fn executable_at(
    dispatcher: &Dispatcher,
    file: ToolFile,
    env: &RunEnv,
    revision: Option<String>,
    builtin_env: Option<Arc<dyn toolshed_core::CredentialProvider>>,
) -> Result<Tool, String> {
    // A bread or Toren file's contract, as the registry read it from the code.
    let compat = match &file.compat {
        None => None,
        Some(v) => Some(
            serde_json::from_value::<toolshed_dispatch::CompatSpec>(v.clone())
                .map_err(|e| format!("has an unreadable tool-file contract ({e})"))?,
        ),
    };
    let mut spec = file
        .into_spec()
        .map_err(|e| format!("has a definition this server refuses ({e})"))?;
    spec.meta.revision = revision;
    let name = spec.name.as_str().to_owned();
    let endpoint_text = env.endpoint.clone().or_else(|| spec.meta.endpoint.clone());
    let handler: Arc<dyn Handler> = match endpoint_text.as_deref().map(Endpoint::parse) {
        None => Arc::new(NoEndpoint(name.clone())),
        Some(Err(e)) => return Err(format!("has an invalid endpoint ({e})")),
        Some(Ok(Endpoint::Builtin { name: builtin })) => {
            match (toolshed_stdlib::get(&builtin), builtin_env) {
                (Some(t), Some(source)) => {
                    toolshed_stdlib::with_env_from(t, source).handler().clone()
                }
                (Some(t), None) => t.handler().clone(),
                (None, _) => Arc::new(NoEndpoint(name.clone())),
            }
        }
        Some(Ok(endpoint)) => {
            // The pipeline owns the timeout; a tool that declares none gets the
            // dispatcher's.
            spec.timeout = Some(spec.timeout.unwrap_or(dispatcher.config().default_timeout));
            let policy = sandbox_policy(&spec, env);
            if let Some(compat) = &compat {
                // The file's own contract: its predicate and hooks in its worker.
                return dispatcher
                    .compat_tool(endpoint, spec, compat, policy)
                    .map_err(|e| format!("cannot be built ({e})"));
            }
            dispatcher.handler_with(endpoint, &name, policy)
        }
    };
    Tool::from_spec(spec, handler).map_err(|e| format!("cannot be built ({e})"))
}

/// The sandbox a registry tool runs in: the network only for a tool that declares it
/// (`network_access: true`, and only where the server allows it at all), its code's
/// folder and its installed dependencies.
fn sandbox_policy(
    spec: &toolshed_core::ToolSpec,
    env: &RunEnv,
) -> toolshed_dispatch::SandboxPolicy {
    let network = if spec.meta.network_access {
        toolshed_sandbox::Network::On
    } else {
        toolshed_sandbox::Network::Off
    };
    let mut policy = toolshed_dispatch::SandboxPolicy::default().network(network);
    if let Some(root) = &env.root {
        policy = policy.project(root.clone());
    }
    for lib in &env.libraries {
        policy = policy.library(lib.clone());
    }
    policy
}

/// A tool registered without an endpoint: metadata only.
struct NoEndpoint(String);

impl Handler for NoEndpoint {
    fn call(&self, _args: Value, _ctx: ToolContext) -> HandlerFuture {
        let message = format!(
            "tool `{}` has no endpoint to run; register it with one (builtin:, python:, node:, exec: or http(s)://)",
            self.0
        );
        Box::pin(async move {
            Reply::new(Err(ToolError::new(
                toolshed_core::ErrorCode::HandlerError,
                message,
            )))
        })
    }
}
