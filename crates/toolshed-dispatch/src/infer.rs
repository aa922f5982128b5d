//! Schema inference for the registry's `push` and the tools folder: a Python function's
//! schema from its signature, the dataclasses, `TypedDict`s and pydantic models of its
//! file, a module-level `SCHEMA` and its Google-style docstring (parsed with `ast`,
//! never imported), and a Node module's schema from what it exports beside the function
//! (imported). Both run in the sandbox like a call, unless the dispatcher is
//! unsandboxed (then Python runs isolated, `-I -S`, outside the tool's folder).

use std::ffi::OsString;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::DispatcherConfig;
use crate::endpoint::file_stem;
use crate::error::DispatchError;
use crate::launcher::{HelperError, Launcher};

/// What inference found: enough to register the tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InferredTool {
    /// The function (Python: the one named, or the one the file's tool is) or export
    /// (Node) name; the file stem for a default export.
    pub name: String,
    /// The tool description: the docstring's first paragraph, or the declared one.
    pub description: String,
    /// The input JSON Schema.
    pub input_schema: Value,
    /// The output JSON Schema, when the return annotation (or declaration) gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Annotations or defaults that could not be expressed, each a sentence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// For a tool file written for bread or Toren, the rest of its definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<crate::compat::CompatSpec>,
}

/// Infer a Python function's tool schema, with the default [`DispatcherConfig`].
///
/// Reads the module with `ast` and runs none of its code: `str`→string,
/// `int`→integer, `float`→number, `bool`→boolean, `list[T]`/`List[T]`→array,
/// `dict`→object, `Optional[T]`/`T | None`→nullable, `Literal[...]`→enum; a default
/// becomes `default` and makes the parameter optional; the docstring's `Args:` section
/// describes parameters and its first paragraph the tool. A parameter named `ctx`
/// (where the runner passes the call's context) is left out. A dataclass, `TypedDict`
/// or pydantic model defined in the same file becomes an object schema under `$defs`
/// (its fields' types, defaults, `Field(...)` constraints and docs), and the runner
/// builds the declared type from the call's args. A module-level `SCHEMA` (or `schema`)
/// dict literal replaces the schema inferred from the signature. `docs/tool-files.md`
/// has the whole list.
pub async fn infer_python_schema(
    path: &Path,
    function: &str,
) -> Result<InferredTool, DispatchError> {
    let launcher = Launcher::new(DispatcherConfig::default());
    python(&launcher, path, Some(function)).await
}

/// [`infer_python_schema`] for a file whose tool function may go unnamed (`None`): it
/// is then the function named like the file, else the file's only public (not
/// `_`-prefixed) top-level function; a file with several and none named like it is a
/// `SCHEMA_INFERENCE_FAILED` error listing them. [`InferredTool::name`] is the
/// function chosen, to put in the endpoint (`python:/abs/file.py:<name>`).
pub async fn infer_python_file(
    path: &Path,
    function: Option<&str>,
) -> Result<InferredTool, DispatchError> {
    let launcher = Launcher::new(DispatcherConfig::default());
    python(&launcher, path, function).await
}

/// Read a Node module's declared schema, with the default [`DispatcherConfig`]: the
/// function's `.schema` (or `.SCHEMA`) property, else `export const <export>Schema`,
/// else `export const schema`, else AgentBreeder's `export const SCHEMA`; for a
/// bread or Toren `defineTool` default export, its zod schemas converted by zod 4 and
/// the rest of its definition in [`InferredTool::compat`]. The schema is either an input schema or a definition
/// `{name?, description?, input_schema | inputSchema | parameters, output_schema?}`;
/// the description may also be exported as `description`. The module is imported
/// (TypeScript transpiled first), so its top-level code runs.
pub async fn infer_node_schema(
    path: &Path,
    export: Option<&str>,
) -> Result<InferredTool, DispatchError> {
    let launcher = Launcher::new(DispatcherConfig::default());
    node(&launcher, path, export).await
}

pub(crate) async fn python(
    launcher: &Launcher,
    path: &Path,
    function: Option<&str>,
) -> Result<InferredTool, DispatchError> {
    let fail = |message: String| DispatchError::Inference {
        path: path.to_path_buf(),
        function: function.unwrap_or_default().to_owned(),
        message,
    };
    if !path.is_absolute() {
        return Err(fail("the path must be absolute".into()));
    }
    if !path.is_file() {
        return Err(fail("the file does not exist".into()));
    }
    let assets = launcher.assets().await?;
    let cache = python_cache_file(launcher, &assets.version, path, function).await;
    if let Some(tool) = cache.as_deref().and_then(read_cached) {
        return Ok(tool);
    }
    let tool = function.map_or_else(|| file_stem(path), str::to_owned);
    // The file is only parsed, but by the interpreter: in the sandbox like a call.
    let mut view = launcher.view();
    let program = launcher.python_in(&tool, &mut view).await?;
    let shown = view.file_in_folder(path, false);
    let mut args: Vec<OsString> = vec![
        "-I".into(),
        "-S".into(),
        view.file_in_folder(&assets.infer_py(), false).into(),
        shown.clone().into(),
    ];
    if let Some(function) = function {
        args.push(function.into());
    }
    // The tool's path as the helper saw it is the host's in what it says.
    let host_path = |message: String| {
        if shown == path {
            message
        } else {
            message.replace(&shown.display().to_string(), &path.display().to_string())
        }
    };
    let value = launcher
        .run_tool_helper(
            &tool,
            view,
            program.clone(),
            args,
            Vec::new(),
            Some(&assets.dir),
        )
        .await
        .map_err(|e| match e {
            HelperError::Spawn(source) => DispatchError::Spawn {
                tool: tool.clone(),
                program: program.display().to_string(),
                source,
            },
            HelperError::Failed(message) => fail(host_path(message)),
        })?;
    if let Some(err) = value.get("error") {
        return Err(fail(host_path(
            err["message"]
                .as_str()
                .unwrap_or("inference failed")
                .to_owned(),
        )));
    }
    let tool: InferredTool = serde_json::from_value(value)
        .map_err(|e| fail(format!("unexpected answer from infer.py: {e}")))?;
    if !tool.input_schema.is_object() {
        return Err(fail(
            "infer.py answered an input schema that is not an object".into(),
        ));
    }
    if let (Some(file), Ok(bytes)) = (&cache, serde_json::to_vec(&tool)) {
        // A failure to keep it only costs the next command an inference.
        let _ = crate::assets::write_atomically(file, &bytes);
    }
    Ok(tool)
}

/// Where a Python file's inference is kept (`<cache_dir>/schemas/`): inference parses
/// that one file and imports nothing, so the file's text (with the path, the function,
/// the runners' version and the configured interpreter) is the whole key, and an agent
/// project's unchanged Python tools start no sandbox on the next command. Only
/// successes are kept. `None` when the file cannot be read whole (then inference says
/// why).
async fn python_cache_file(
    launcher: &Launcher,
    version: &str,
    path: &Path,
    function: Option<&str>,
) -> Option<std::path::PathBuf> {
    let file = path.to_path_buf();
    let text = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::fs::File::open(&file)
            .ok()?
            .take(CACHE_MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        (bytes.len() as u64 <= CACHE_MAX_BYTES).then_some(bytes)
    })
    .await
    .ok()??;
    let mut key = Vec::new();
    for part in [
        version.as_bytes(),
        b"python",
        launcher.config.python.as_os_str().as_encoded_bytes(),
        path.as_os_str().as_encoded_bytes(),
        function.unwrap_or_default().as_bytes(),
        crate::assets::sha256_hex(&text).as_bytes(),
    ] {
        key.extend_from_slice(part);
        key.push(0);
    }
    let name = &crate::assets::sha256_hex(&key)[..32];
    Some(
        launcher
            .config
            .cache_dir
            .join("schemas")
            .join(format!("py-{name}.json")),
    )
}

/// A kept inference, if it is there and readable.
fn read_cached(file: &Path) -> Option<InferredTool> {
    serde_json::from_slice(&std::fs::read(file).ok()?).ok()
}

pub(crate) async fn node(
    launcher: &Launcher,
    path: &Path,
    export: Option<&str>,
) -> Result<InferredTool, DispatchError> {
    let not_found = |message: String| DispatchError::SchemaNotFound {
        path: path.to_path_buf(),
        message,
    };
    if !path.is_absolute() || !path.is_file() {
        return Err(not_found(format!(
            "{} is not an absolute path to an existing file",
            path.display()
        )));
    }
    let is_ts = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("ts" | "mts")
    );
    let cache = NodeSchemaCache::new(launcher, path, export).await;
    if let Some(tool) = cache.as_ref().and_then(NodeSchemaCache::get) {
        return Ok(tool);
    }
    let assets = launcher.assets().await?;
    let runner = assets.runner_mjs();
    let node = launcher.node().await.to_path_buf();
    let stem = file_stem(path);
    // Importing the module runs its top-level code: in the sandbox, like a call.
    let mut view = launcher.view();
    let program = launcher.node_in(&mut view).await;
    let runner = view.file_in_folder(&runner, false);
    let mut extra_env = Vec::new();
    let module = launcher
        .node_module_in(path, &mut view, &mut extra_env)
        .await?;
    let args: Vec<OsString> = vec![
        runner.into(),
        "--schema".into(),
        module.into(),
        export.unwrap_or_default().into(),
        stem.clone().into(),
    ];
    let value = launcher
        .run_tool_helper(&stem, view, program, args, extra_env, None)
        .await
        .map_err(|e| match e {
            HelperError::Spawn(source) => DispatchError::Spawn {
                tool: file_stem(path),
                program: node.display().to_string(),
                source,
            },
            HelperError::Failed(message) => not_found(message),
        })?;
    if let Some(err) = value.get("error") {
        let message = err["message"].as_str().unwrap_or("no schema").to_owned();
        // The runner names the module it loaded; for TypeScript that is the cache file.
        let message = if is_ts {
            format!("{} (transpiled from {})", message, path.display())
        } else {
            message
        };
        if err["code"] == "NODE_DEPS_NOT_INSTALLED" {
            return Err(DispatchError::NodeDepsNotInstalled {
                message: crate::config::node_deps_install_hint(
                    launcher.config.node_deps.as_deref(),
                ),
            });
        }
        if err["code"] == "COMPAT_UNMAPPABLE" {
            return Err(DispatchError::CompatUnmappable {
                path: path.to_path_buf(),
                message,
            });
        }
        return Err(not_found(message));
    }
    let mut tool: InferredTool = serde_json::from_value(value)
        .map_err(|e| not_found(format!("the declared schema is not usable: {e}")))?;
    if !tool.input_schema.is_object() {
        return Err(not_found(format!(
            "the declared input schema of {} is not a JSON object",
            path.display()
        )));
    }
    if tool.output_schema.as_ref().is_some_and(Value::is_null) {
        tool.output_schema = None;
    }
    if let Some(cache) = &cache {
        cache.put(&tool);
    }
    Ok(tool)
}

/// What a Node module's inference found, kept under `<cache_dir>/schemas/` so that a
/// command loading an agent project does not start Node (in the sandbox) again for every
/// `.js`/`.ts` tool file whose code did not change: for a bread or Toren TypeScript tool
/// that is a second or more per command. Inference imports the module, so its schema
/// may come from any file beside it: the entry names the hash of every script and JSON
/// file of the tool's folder (and below it, `node_modules` aside), and of the installed
/// runtime packages' lockfile, and is used only while all of them still hash the same.
/// Only successes are kept: an error is found again, and said again, every time.
struct NodeSchemaCache {
    file: std::path::PathBuf,
    sources: Vec<(std::path::PathBuf, String)>,
}

#[derive(Serialize, Deserialize)]
struct CachedSchema {
    sources: Vec<(std::path::PathBuf, String)>,
    tool: InferredTool,
}

/// The most files, and bytes, hashed for one entry; a bigger folder is not cached.
const CACHE_MAX_FILES: usize = 500;
const CACHE_MAX_BYTES: u64 = 8 * 1024 * 1024;

impl NodeSchemaCache {
    /// The entry for `path`'s module (`export`), or `None` when its folder is too large
    /// to fingerprint (it is then inferred every time).
    async fn new(launcher: &Launcher, path: &Path, export: Option<&str>) -> Option<Self> {
        let assets = launcher.assets().await.ok()?;
        let deps_lock = launcher
            .config
            .node_deps
            .as_ref()
            .map(|d| d.join("node_modules/.package-lock.json"));
        let folder = path.parent()?.to_path_buf();
        let tool_path = path.to_path_buf();
        let path = path.to_path_buf();
        let sources = tokio::task::spawn_blocking(move || {
            let mut files = Vec::new();
            collect_scripts(&folder, 0, &mut files)?;
            files.push(path);
            if let Some(lock) = deps_lock.filter(|l| l.is_file()) {
                files.push(lock);
            }
            files.sort();
            files.dedup();
            let mut total = 0u64;
            let mut sources = Vec::with_capacity(files.len());
            for f in files {
                let bytes = std::fs::read(&f).ok()?;
                total += bytes.len() as u64;
                if total > CACHE_MAX_BYTES {
                    return None;
                }
                sources.push((f, crate::assets::sha256_hex(&bytes)));
            }
            Some(sources)
        })
        .await
        .ok()??;
        // What the import sees differs in and out of the sandbox (a module may read
        // its surroundings), so the two never share an entry.
        let isolation = if launcher.config.isolation.is_sandboxed() {
            "sandboxed"
        } else {
            "unsandboxed"
        };
        let mut key = Vec::new();
        for part in [
            assets.version.as_str(),
            isolation,
            &tool_path.display().to_string(),
            export.unwrap_or_default(),
        ] {
            key.extend_from_slice(part.as_bytes());
            key.push(0);
        }
        for (f, sha) in &sources {
            key.extend_from_slice(f.as_os_str().as_encoded_bytes());
            key.extend_from_slice(sha.as_bytes());
        }
        let name = &crate::assets::sha256_hex(&key)[..32];
        Some(NodeSchemaCache {
            file: launcher
                .config
                .cache_dir
                .join("schemas")
                .join(format!("{name}.json")),
            sources,
        })
    }

    /// The kept schema, when every source still hashes as it did.
    fn get(&self) -> Option<InferredTool> {
        let bytes = std::fs::read(&self.file).ok()?;
        let kept: CachedSchema = serde_json::from_slice(&bytes).ok()?;
        (kept.sources == self.sources).then_some(kept.tool)
    }

    /// Keeps a schema (a failure to write only costs the next command an inference).
    fn put(&self, tool: &InferredTool) {
        let kept = CachedSchema {
            sources: self.sources.clone(),
            tool: tool.clone(),
        };
        if let Ok(bytes) = serde_json::to_vec(&kept) {
            let _ = crate::assets::write_atomically(&self.file, &bytes);
        }
    }
}

/// Every script and JSON file under `dir` (two levels down at most, `node_modules` and
/// dot folders left out); `None` past [`CACHE_MAX_FILES`].
fn collect_scripts(dir: &Path, depth: usize, out: &mut Vec<std::path::PathBuf>) -> Option<()> {
    let entries = std::fs::read_dir(dir).ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            if depth < 2 && name != "node_modules" && !name.starts_with('.') {
                collect_scripts(&path, depth + 1, out)?;
            }
        } else if kind.is_file()
            && matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("js" | "mjs" | "cjs" | "ts" | "mts" | "cts" | "json")
            )
        {
            out.push(path);
            if out.len() > CACHE_MAX_FILES {
                return None;
            }
        }
    }
    Some(())
}
