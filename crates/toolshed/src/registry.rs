//! `toolshed registry tool …`: push, list, show, run, delete tools in a registry server,
//! and see their versions and which agents use them.
//!
//! `push` detects what it is given: a `.py` file (schema inferred here from the
//! signature and docstring), a `.js`/`.mjs`/`.ts` module (schema read from what it
//! exports, or `--schema`), a `tool.yaml`/`.json` definition, or a module path naming a
//! standard-library tool (`engine.tools.standard.markdown_writer` → `builtin:markdown_writer`).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};
use toolshed_core::file::{FileFormat, ToolFile, parse_tool_file};
use toolshed_dispatch::{Dispatcher, DispatcherConfig, Endpoint, InferredTool};

use toolshed_api::code::{CodeFile, build_archive};
use toolshed_api::requests::{AnswerBody, ExecuteBody, ReasonBody};
use toolshed_api::views::{
    AnswerView, CodeDownload, DecisionView, ExecuteStatus, ExecuteView, Gate, ResumeView,
    ToolDetail, ToolSummary, UsageView,
};
use toolshed_api::{ApiCode, Data, Paged};

use crate::client::{Answer, Client};
use crate::output::{
    EXIT_INTERNAL, EXIT_PARKED, EXIT_TOOL_ERROR, Failure, print, print_json, table,
};

/// `toolshed registry` subcommands.
#[derive(Debug, Subcommand)]
pub enum RegistryCommand {
    /// Register, list, show, run and delete tools in the registry server.
    Tool {
        /// What to do.
        #[command(subcommand)]
        command: ToolCommand,
    },
    /// Approve a call a `tool run` parked (deployer); it runs when the run resumes.
    Approve {
        /// The call id `tool run` printed.
        call_id: String,
        /// Why (recorded with the decision).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny a parked call (deployer); on resume it becomes an error result.
    Deny {
        /// The call id `tool run` printed.
        call_id: String,
        /// Why (recorded, and shown in the error result).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Answer a human tool's parked call (deployer); the answer must match its schema.
    Answer {
        /// The call id `tool run` printed.
        call_id: String,
        /// The answer as JSON; `@FILE` reads it from a file, `-` from stdin.
        #[arg(long, value_name = "JSON")]
        answer: String,
    },
    /// Resume a parked run on the server once its calls are decided or answered.
    Resume {
        /// The run id `tool run` printed.
        run_id: String,
    },
    /// Register, list, show, test, discover and remove MCP servers in the registry.
    Mcp {
        /// What to do.
        #[command(subcommand)]
        command: crate::mcp_registry::McpCommand,
    },
}

/// `toolshed registry tool` subcommands.
#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Register a tool, or update it (a new revision) when the name is taken.
    Push(PushArgs),
    /// List the registered tools.
    List {
        /// Only this type: function, mcp or api.
        #[arg(long)]
        tool_type: Option<String>,
        /// Only this source: cli, manual, stdlib, …
        #[arg(long)]
        source: Option<String>,
        /// The page, from 1.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        page: u32,
        /// Tools per page, 1 to 500.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        per_page: u32,
    },
    /// Show a tool with its schemas.
    Show {
        /// The tool's name or id.
        name: String,
    },
    /// Execute a tool on the server (needs the deployer role); recorded as a run.
    Run {
        /// The tool's name or id.
        name: String,
        /// The arguments as a JSON object; `@FILE` reads them from a file, `-` from
        /// stdin.
        #[arg(long, default_value = "{}")]
        args: String,
    },
    /// List the agents using a tool.
    Usage {
        /// The tool's name or id.
        name: String,
    },
    /// Delete a tool (its revisions are kept).
    Delete {
        /// The tool's name or id.
        name: String,
    },
    /// List every revision of a tool, oldest first.
    Versions {
        /// The tool's name or id.
        name: String,
    },
    /// Fetch a tool's uploaded code back: one file, or a package's folder.
    Pull {
        /// The tool's name or id.
        name: String,
        /// Where to write it: the file (one-file code) or the folder (a package); by
        /// default the file's own name, or a folder named after the tool, here. An
        /// existing file or a non-empty folder is not overwritten.
        #[arg(long, value_name = "PATH")]
        output: Option<PathBuf>,
        /// The revision (default: the current one).
        #[arg(long)]
        revision: Option<u32>,
    },
}

/// Arguments of `toolshed registry tool push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// A `.py` file, a `.js`/`.mjs`/`.ts` module (`FILE:FUNCTION` picks a function or
    /// export), a `tool.yaml`/`.json` definition, or a module path of a standard-library
    /// tool (e.g. `engine.tools.standard.markdown_writer`).
    target: String,
    /// The tool's name (default: the function's, with `_` written `-`).
    #[arg(long)]
    name: Option<String>,
    /// The description (default: the docstring's first paragraph, or the declared one).
    #[arg(long)]
    description: Option<String>,
    /// A JSON (or YAML) file holding the input schema; wins over the inferred one.
    #[arg(long, value_name = "SCHEMA.json")]
    schema: Option<PathBuf>,
    /// Where the tool runs, instead of the derived endpoint (`python:…`, `node:…`,
    /// `exec:…`, `builtin:…`, `http(s)://…`).
    #[arg(long)]
    endpoint: Option<String>,
}

/// Run a `registry` subcommand.
pub async fn run(cmd: RegistryCommand, json_out: bool) -> Result<(), Failure> {
    let command = match cmd {
        RegistryCommand::Tool { command } => command,
        RegistryCommand::Approve { call_id, reason } => {
            return decide(&call_id, "approve", reason, json_out).await;
        }
        RegistryCommand::Deny { call_id, reason } => {
            return decide(&call_id, "deny", reason, json_out).await;
        }
        RegistryCommand::Answer { call_id, answer } => {
            return answer_call(&call_id, &answer, json_out).await;
        }
        RegistryCommand::Resume { run_id } => return resume(&run_id, json_out).await,
        RegistryCommand::Mcp { command } => {
            return crate::mcp_registry::run(command, json_out).await;
        }
    };
    match command {
        ToolCommand::Push(args) => push(args, json_out).await,
        ToolCommand::List {
            tool_type,
            source,
            page,
            per_page,
        } => list(tool_type, source, page, per_page, json_out).await,
        ToolCommand::Show { name } => show(&name, json_out).await,
        ToolCommand::Run { name, args } => run_tool(&name, &args, json_out).await,
        ToolCommand::Usage { name } => usage(&name, json_out).await,
        ToolCommand::Delete { name } => delete(&name, json_out).await,
        ToolCommand::Versions { name } => versions(&name, json_out).await,
        ToolCommand::Pull {
            name,
            output,
            revision,
        } => pull(&name, output, revision, json_out).await,
    }
}

const TOOLS: [&str; 4] = ["api", "v1", "registry", "tools"];

fn tool_path<'a>(id: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut p = TOOLS.to_vec();
    p.push(id);
    p.extend_from_slice(rest);
    p
}

// ---------------------------------------------------------------------------- push

/// Extensions of Node modules the dispatcher runs.
const NODE_EXTENSIONS: &[&str] = &["js", "mjs", "cjs", "ts", "mts"];
/// Extensions of definition files.
const DEFINITION_EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

/// What `push` was given.
enum Target {
    /// A Python file, with the function named after a colon.
    Python(PathBuf, Option<String>),
    /// A Node module, with the export named after a colon.
    Node(PathBuf, Option<String>),
    /// A definition file.
    Definition(PathBuf),
    /// A standard-library tool named by a module path.
    Builtin(String),
}

fn extension(path: &str) -> String {
    Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

fn classify(target: &str) -> Result<Target, Failure> {
    // `FILE:FUNCTION` for code files.
    let (file, function) = match target.rsplit_once(':') {
        Some((f, func))
            if !func.contains('/')
                && (f.ends_with(".py")
                    || NODE_EXTENSIONS
                        .iter()
                        .any(|e| f.ends_with(&format!(".{e}")))) =>
        {
            (f, Some(func.to_owned()))
        }
        _ => (target, None),
    };
    if Path::new(file).is_dir() {
        for manifest in ["tool.yaml", "tool.yml", "tool.json"] {
            let path = Path::new(file).join(manifest);
            if path.is_file() {
                let abs = std::path::absolute(&path)
                    .with_context(|| format!("cannot make {} absolute", path.display()))
                    .map_err(Failure::bad_input)?;
                return Ok(Target::Definition(abs));
            }
        }
        return Err(Failure::bad_input(anyhow!(
            "{file} is a folder without a tool.yaml; a package needs one (name, description, implementation: {{language, entrypoint}}), or push one file of it"
        )));
    }
    let ext = extension(file);
    let is_code = ext == "py" || NODE_EXTENSIONS.contains(&ext.as_str());
    let is_definition = DEFINITION_EXTENSIONS.contains(&ext.as_str());
    if is_code || is_definition || Path::new(file).is_file() {
        let path = Path::new(file);
        if !path.is_file() {
            return Err(Failure::bad_input(anyhow!("{file}: no such file")));
        }
        let abs = std::path::absolute(path)
            .with_context(|| format!("cannot make {file} absolute"))
            .map_err(Failure::bad_input)?;
        return Ok(match ext.as_str() {
            "py" => Target::Python(abs, function),
            e if NODE_EXTENSIONS.contains(&e) => Target::Node(abs, function),
            e if DEFINITION_EXTENSIONS.contains(&e) => Target::Definition(abs),
            _ => {
                return Err(Failure::bad_input(anyhow!(
                    "{file}: cannot tell what kind of tool this is; push a .py, .js, .mjs or .ts file, a tool.yaml, or a standard-library module path"
                )));
            }
        });
    }
    let valid_module = !target.is_empty()
        && target.split('.').all(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    let last = target
        .rsplit('.')
        .next()
        .unwrap_or(target)
        .replace('-', "_");
    if valid_module && toolshed_stdlib::get(&last).is_some() {
        return Ok(Target::Builtin(last));
    }
    let builtins: Vec<String> = toolshed_stdlib::tools()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    Err(Failure::bad_input(anyhow!(
        "`{target}` is neither a file nor a standard-library tool; push a .py, .js, .mjs or .ts file, a tool.yaml, or one of the built-ins: {}",
        builtins.join(", ")
    )))
}

async fn infer(endpoint: &Endpoint) -> Result<InferredTool, Failure> {
    let dispatcher = Dispatcher::new(DispatcherConfig::default());
    let inferred = dispatcher.infer_schema(endpoint).await;
    dispatcher.shutdown();
    let inferred = inferred.map_err(|e| Failure::bad_input(anyhow!("{e} [{}]", e.code())))?;
    for w in &inferred.warnings {
        crate::output::eprint(&format!("warning: {w}"));
    }
    Ok(inferred)
}

/// [`infer`] for a Python file whose tool function is not named: the file's own.
async fn infer_file(path: &Path) -> Result<InferredTool, Failure> {
    let dispatcher = Dispatcher::new(DispatcherConfig::default());
    let inferred = dispatcher.infer_python_file(path, None).await;
    dispatcher.shutdown();
    let inferred = inferred.map_err(|e| Failure::bad_input(anyhow!("{e} [{}]", e.code())))?;
    for w in &inferred.warnings {
        crate::output::eprint(&format!("warning: {w}"));
    }
    Ok(inferred)
}

fn read_schema(path: &Path) -> Result<Value, Failure> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --schema {}", path.display()))
        .map_err(Failure::bad_input)?;
    let value: Value = if extension(&path.to_string_lossy()) == "json" {
        serde_json::from_str(&text).map_err(|e| anyhow!("{}: not JSON: {e}", path.display()))
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| anyhow!("{}: not YAML: {e}", path.display()))
    }
    .map_err(Failure::bad_input)?;
    if !value.is_object() {
        return Err(Failure::bad_input(anyhow!(
            "{}: a schema must be a JSON object, e.g. {{\"type\": \"object\", \"properties\": {{…}}}}",
            path.display()
        )));
    }
    Ok(value)
}

fn parse_endpoint(text: &str) -> Result<Endpoint, Failure> {
    Endpoint::parse(text).map_err(|e| Failure::bad_input(anyhow!("{e} [{}]", e.code())))
}

/// The registration body of a code file: schema inferred (or `--schema`), endpoint the
/// file.
async fn code_body(
    kind: &str,
    path: &Path,
    function: Option<String>,
    args: &PushArgs,
) -> Result<Map<String, Value>, Failure> {
    let given_schema = args.schema.as_deref().map(read_schema).transpose()?;
    // The file by its own path (no `..`, no links): what the sandbox shows of it, and
    // what the endpoint names.
    let path = &std::fs::canonicalize(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(Failure::bad_input)?;
    let mut function = function;
    let mut found = None;
    if kind == "python" && function.is_none() {
        // The file says which function is its tool: the one named like it, else its
        // only public one, which the endpoint then names.
        match infer_file(path).await {
            Ok(i) => {
                if i.name != file_stem(path) {
                    function = Some(i.name.clone());
                }
                found = Some(i);
            }
            Err(_) if given_schema.is_some() => {}
            Err(e) => return Err(e),
        }
    }
    let mut endpoint_text = format!("{kind}:{}", path.display());
    if let Some(f) = &function {
        endpoint_text.push(':');
        endpoint_text.push_str(f);
    }
    let endpoint = parse_endpoint(&endpoint_text)?;
    let inferred = match found {
        Some(i) => Some(i),
        None => match infer(&endpoint).await {
            Ok(i) => Some(i),
            // With --schema, a module that declares no schema is fine.
            Err(_) if given_schema.is_some() => None,
            Err(e) => return Err(e),
        },
    };
    let default_name = inferred
        .as_ref()
        .map(|i| i.name.clone())
        .or(function)
        .unwrap_or_else(|| file_stem(path));
    let name = args.name.clone().unwrap_or(default_name);
    let description = args
        .description
        .clone()
        .or_else(|| inferred.as_ref().map(|i| i.description.clone()))
        .unwrap_or_default();
    if description.trim().is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "{} has no description: give the function a docstring (or export `description`), or pass --description",
            path.display()
        )));
    }
    let input_schema = given_schema
        .or_else(|| inferred.as_ref().map(|i| i.input_schema.clone()))
        .unwrap_or_else(toolshed_core::schema::empty_object_schema);
    let mut body = Map::new();
    body.insert("name".into(), json!(name));
    body.insert("description".into(), json!(description));
    body.insert("tool_type".into(), json!("function"));
    body.insert("schema_definition".into(), input_schema);
    if let Some(out) = inferred.and_then(|i| i.output_schema) {
        body.insert("output_schema".into(), out);
    }
    match &args.endpoint {
        // An endpoint of the pusher's choosing (a path on the server, for admins).
        Some(ep) => {
            body.insert("endpoint".into(), json!(ep));
        }
        None => {
            let folder = path.parent().unwrap_or(Path::new("."));
            let file_name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
                Failure::bad_input(anyhow!("{}: not a file name", path.display()))
            })?;
            let mut relative = format!("{kind}:{file_name}");
            if let Some(f) = &function_part(&endpoint_text, kind) {
                relative.push(':');
                relative.push_str(f);
            }
            body.insert("endpoint".into(), json!(relative));
            let mut files = vec![local_file(path, file_name)?];
            // A manifest beside the file is its dependencies: it travels with it.
            for manifest in ["requirements.txt", "package.json"] {
                let m = folder.join(manifest);
                if m.is_file() {
                    files.push(local_file(&m, manifest)?);
                }
            }
            body.insert("code".into(), upload_body(&files)?);
        }
    }
    Ok(body)
}

/// The function or export an endpoint names after its file, if any.
fn function_part(endpoint: &str, kind: &str) -> Option<String> {
    let rest = endpoint.strip_prefix(kind)?.strip_prefix(':')?;
    let (file, f) = rest.rsplit_once(':')?;
    (!f.contains('/') && !file.is_empty()).then(|| f.to_owned())
}

/// One local file as a file of the upload.
fn local_file(path: &Path, inside: &str) -> Result<CodeFile, Failure> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(Failure::bad_input)?;
    if meta.file_type().is_symlink() {
        return Err(Failure::bad_input(anyhow!(
            "{} is a symlink; the server refuses links in uploaded code: copy the file itself there",
            path.display()
        )));
    }
    let content = std::fs::read(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(Failure::bad_input)?;
    Ok(CodeFile {
        path: inside.to_owned(),
        content,
        executable: meta.permissions().mode() & 0o111 != 0,
    })
}

/// What is never part of a tool's code, whatever the ignore files say: journals and
/// other SQLite files (a project's `toolshed.db` and its WAL), Python's bytecode,
/// installed packages (the server installs the declared dependencies itself).
const NEVER_PACKED: &[&str] = &[
    "!*.db",
    "!*.db-wal",
    "!*.db-shm",
    "!*.db-journal",
    "!*.sqlite",
    "!*.sqlite3",
    "!*.sqlite-wal",
    "!*.sqlite-shm",
    "!*.pyc",
    "!__pycache__/",
    "!node_modules/",
];

/// Every file of a package folder, as `git` would add them and then some: hidden
/// entries (`.git`, `.venv`, `.env`) and what [`NEVER_PACKED`] names are left out, and
/// so is what the folder's `.gitignore`, `.ignore` and `.toolshedignore` files exclude
/// (read by the `ignore` crate, in or out of a git checkout; the user's global git
/// excludes are not read: what is packed depends on the folder only). A symlink or a
/// special file is refused, as the server would. Says on stderr what is packed.
fn package_files(root: &Path) -> Result<Vec<CodeFile>, Failure> {
    let mut never = ignore::overrides::OverrideBuilder::new(root);
    for glob in NEVER_PACKED {
        never
            .add(glob)
            .map_err(|e| Failure::bad_input(anyhow!("{glob}: {e}")))?;
    }
    let never = never
        .build()
        .map_err(|e| Failure::bad_input(anyhow!("{e}")))?;
    let walk = ignore::WalkBuilder::new(root)
        .hidden(true)
        .parents(false)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .add_custom_ignore_filename(".toolshedignore")
        .overrides(never)
        .sort_by_file_name(std::ffi::OsStr::cmp)
        .build();
    let mut files = Vec::new();
    for entry in walk {
        let entry = entry
            .with_context(|| format!("cannot list {}", root.display()))
            .map_err(Failure::bad_input)?;
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path();
        let Some(inside) = path
            .strip_prefix(root)
            .ok()
            .and_then(Path::to_str)
            .map(str::to_owned)
        else {
            return Err(Failure::bad_input(anyhow!(
                "{}: a file name that is not UTF-8; rename it",
                path.display()
            )));
        };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            continue;
        } else if kind.is_file() {
            files.push(local_file(path, &inside)?);
        } else {
            return Err(Failure::bad_input(anyhow!(
                "{} is a {}; the server takes regular files and folders only: copy the file itself there, move it out of the package, or name it in .toolshedignore",
                path.display(),
                if kind.is_symlink() {
                    "symlink"
                } else {
                    "special file"
                }
            )));
        }
    }
    let bytes: usize = files.iter().map(|f| f.content.len()).sum();
    eprintln!(
        "packing {}: {} file{}, {bytes} bytes (hidden files, journals, .gitignore'd and .toolshedignore'd paths left out)",
        root.display(),
        files.len(),
        if files.len() == 1 { "" } else { "s" }
    );
    for f in &files {
        eprintln!("  {:>9}  {}", f.content.len(), f.path);
    }
    Ok(files)
}

/// The `code` field of a registration: the files as a tar, base64, with its hash.
fn upload_body(files: &[CodeFile]) -> Result<Value, Failure> {
    let archive = build_archive(files).map_err(|e| Failure::bad_input(anyhow!(e)))?;
    Ok(json!({
        "archive_base64": toolshed_api::code::encode_base64(&archive),
        "sha256": toolshed_api::code::sha256_hex(&archive),
    }))
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("tool")
        .to_owned()
}

/// The registration body of a tool.yaml: its fields, its endpoint made absolute (or
/// derived from `implementation`), its schema inferred when it has none.
async fn definition_body(path: &Path, args: &PushArgs) -> Result<Map<String, Value>, Failure> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {shown}"))
        .map_err(Failure::bad_input)?;
    let format = FileFormat::from_path(&shown);
    // The full check first: every problem of the file at once.
    parse_tool_file(&text, format, Some(&shown)).map_err(|e| Failure::bad_input(anyhow!("{e}")))?;
    let mut file: ToolFile = match format {
        FileFormat::Json => serde_json::from_str(&text).map_err(|e| anyhow!("{shown}: {e}")),
        FileFormat::Yaml => serde_yaml_ng::from_str(&text).map_err(|e| anyhow!("{shown}: {e}")),
    }
    .map_err(Failure::bad_input)?;
    let folder = path.parent().unwrap_or(Path::new("."));
    if let Some(ep) = &file.endpoint {
        file.endpoint = Some(absolute_endpoint(ep, folder));
    } else if let Some(imp) = &mut file.implementation {
        let (endpoint, entrypoint) =
            implementation_endpoint(&imp.language, &imp.entrypoint, folder)
                .map_err(|e| Failure::bad_input(anyhow!("{shown}: {e}")))?;
        imp.entrypoint = entrypoint;
        file.endpoint = Some(endpoint);
    }
    if let Some(ep) = &args.endpoint {
        file.endpoint = Some(ep.clone());
    }
    if let Some(n) = &args.name {
        file.name = n.clone();
    }
    if let Some(d) = &args.description {
        file.description = d.clone();
    }
    if let Some(s) = &args.schema {
        file.input_schema = Some(read_schema(s)?);
    }
    if file.input_schema.is_none()
        && let Some(ep) = &file.endpoint
        && (ep.starts_with("python:") || ep.starts_with("node:"))
    {
        let inferred = infer(&parse_endpoint(ep)?).await?;
        file.input_schema = Some(inferred.input_schema);
        if file.output_schema.is_none() {
            file.output_schema = inferred.output_schema;
        }
        if file.description.trim().is_empty() {
            file.description = inferred.description;
        }
    }
    // The folder of the definition is the package: an endpoint naming a file inside
    // it is sent relative, with the folder's files. One outside it names a path on the
    // server (admins only) and is sent as it is.
    let mut upload = None;
    if args.endpoint.is_none()
        && let Some(ep) = &file.endpoint
        && let Some(relative) = relative_endpoint(ep, folder)
    {
        file.endpoint = Some(relative);
        if let Some(imp) = &mut file.implementation
            && let Ok(rel) = Path::new(&imp.entrypoint).strip_prefix(folder)
        {
            imp.entrypoint = rel.display().to_string();
        }
        upload = Some(upload_body(&package_files(folder)?)?);
    }
    match serde_json::to_value(&file) {
        Ok(Value::Object(mut map)) => {
            if let Some(code) = upload {
                map.insert("code".into(), code);
            }
            Ok(map)
        }
        Ok(_) | Err(_) => Err(Failure::Error {
            code: EXIT_INTERNAL,
            error: anyhow!("cannot turn {shown} into JSON"),
        }),
    }
}

/// `python:/pkg/src/x.py:f` as `python:src/x.py:f` when the file is inside `folder`.
fn relative_endpoint(endpoint: &str, folder: &Path) -> Option<String> {
    let folder = std::path::absolute(folder).ok()?;
    for prefix in ["python:", "node:", "exec:"] {
        if let Some(rest) = endpoint.strip_prefix(prefix) {
            let rel = Path::new(rest).strip_prefix(&folder).ok()?;
            return Some(format!("{prefix}{}", rel.display()));
        }
    }
    None
}

/// `python:tools/x.py` in a file means the file beside it: make file endpoints
/// absolute against the definition's folder.
fn absolute_endpoint(endpoint: &str, folder: &Path) -> String {
    for prefix in ["python:", "node:", "exec:"] {
        if let Some(rest) = endpoint.strip_prefix(prefix)
            && !rest.starts_with('/')
        {
            return format!("{prefix}{}", folder.join(rest).display());
        }
    }
    endpoint.to_owned()
}

/// The endpoint an `implementation {language, entrypoint}` block names, and the
/// entrypoint with its path made absolute.
fn implementation_endpoint(
    language: &str,
    entrypoint: &str,
    folder: &Path,
) -> Result<(String, String), String> {
    let absolute = |e: &str| -> String {
        if e.starts_with('/') {
            e.to_owned()
        } else {
            folder.join(e).display().to_string()
        }
    };
    let prefix = match language {
        "python" => "python:",
        "node" | "javascript" | "typescript" => "node:",
        "exec" => "exec:",
        "builtin" => {
            let name = entrypoint.rsplit(['.', ':']).next().unwrap_or(entrypoint);
            return Ok((format!("builtin:{name}"), entrypoint.to_owned()));
        }
        "http" => return Ok((entrypoint.to_owned(), entrypoint.to_owned())),
        other => {
            return Err(format!(
                "implementation.language `{other}` has no endpoint; give `endpoint:` instead"
            ));
        }
    };
    let entry = absolute(entrypoint);
    Ok((format!("{prefix}{entry}"), entry))
}

async fn push(args: PushArgs, json_out: bool) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let mut body = match classify(&args.target)? {
        Target::Python(path, function) => code_body("python", &path, function, &args).await?,
        Target::Node(path, export) => code_body("node", &path, export, &args).await?,
        Target::Definition(path) => definition_body(&path, &args).await?,
        Target::Builtin(name) => {
            let tool = toolshed_stdlib::get(&name).ok_or_else(|| Failure::Error {
                code: EXIT_INTERNAL,
                error: anyhow!("the built-in `{name}` vanished"),
            })?;
            let mut file = ToolFile::from_spec(tool.spec());
            file.endpoint = Some(args.endpoint.clone().unwrap_or(format!("builtin:{name}")));
            if let Some(n) = &args.name {
                file.name = n.clone();
            }
            if let Some(d) = &args.description {
                file.description = d.clone();
            }
            if let Some(s) = &args.schema {
                file.input_schema = Some(read_schema(s)?);
            }
            match serde_json::to_value(&file) {
                Ok(Value::Object(map)) => map,
                _ => {
                    return Err(Failure::Error {
                        code: EXIT_INTERNAL,
                        error: anyhow!("cannot turn `{name}` into JSON"),
                    });
                }
            }
        }
    };
    body.insert("source".into(), json!("cli"));
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let body = Value::Object(body);
    let (answer, updated): (Answer<Data<ToolDetail>>, bool) = match client.post(&TOOLS, &body).await
    {
        Ok(a) => (a, false),
        Err(e)
            if e.status() == Some(StatusCode::CONFLICT) && e.code() == Some(ApiCode::Conflict) =>
        {
            let url = client.url(&tool_path(&name, &[]), &[]);
            (client.send(Method::PUT, url, Some(&body)).await?, true)
        }
        Err(e) => return Err(e.into()),
    };
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let tool = &answer.body.data.summary;
    let endpoint = tool.endpoint.as_deref().unwrap_or("-");
    if updated {
        print(&format!(
            "updated {} to revision {} (endpoint {endpoint})",
            tool.name, tool.revision
        ));
    } else {
        print(&format!(
            "registered {} (id {}, endpoint {endpoint})",
            tool.name, tool.id
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ other commands

async fn pull(
    name: &str,
    output: Option<PathBuf>,
    revision: Option<u32>,
    json_out: bool,
) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let query: Vec<(&str, String)> = revision
        .map(|r| vec![("revision", r.to_string())])
        .unwrap_or_default();
    let url = client.url(&tool_path(name, &["code"]), &query);
    let answer: Answer<Data<CodeDownload>> = client.send(Method::GET, url, None::<&Value>).await?;
    let d = &answer.body.data;
    let bad_answer = |why: String| Failure::Error {
        code: EXIT_INTERNAL,
        error: anyhow!("{} answered code for `{name}` that {why}", client.base()),
    };
    // The server is checked like any upload: a hostile one cannot write outside the
    // output folder.
    let archive = toolshed_api::code::decode_base64(&d.archive_base64, u64::MAX / 2)
        .map_err(|e| bad_answer(e.to_string()))?;
    toolshed_api::code::check_sha256(&d.code.sha256, &archive)
        .map_err(|_| bad_answer("does not match its hash".into()))?;
    let unlimited = toolshed_api::code::CodeLimits {
        max_archive_bytes: u64::MAX,
        max_file_bytes: u64::MAX,
        max_files: usize::MAX,
        max_path_bytes: 4096,
    };
    let files = toolshed_api::code::check_archive(&archive, &unlimited)
        .map_err(|e| bad_answer(e.to_string()))?;
    let written = match files.as_slice() {
        [one] if !one.path.contains('/') => {
            let target = output.unwrap_or_else(|| PathBuf::from(&one.path));
            let target = if target.is_dir() {
                target.join(&one.path)
            } else {
                target
            };
            write_new(&target, one)?;
            target
        }
        _ => {
            let folder = output.unwrap_or_else(|| PathBuf::from(name));
            if folder.exists()
                && std::fs::read_dir(&folder).map_or(true, |mut d| d.next().is_some())
            {
                return Err(Failure::bad_input(anyhow!(
                    "{} exists and is not an empty folder; choose another with --output",
                    folder.display()
                )));
            }
            for f in &files {
                write_new(&folder.join(&f.path), f)?;
            }
            folder
        }
    };
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    print(&format!(
        "wrote revision {} of {name} to {} ({} file{}, {} bytes, sha256 {})",
        d.revision,
        written.display(),
        d.code.files,
        if d.code.files == 1 { "" } else { "s" },
        d.code.size_bytes,
        d.code.sha256
    ));
    Ok(())
}

/// Write a pulled file where nothing is yet.
fn write_new(path: &Path, file: &CodeFile) -> Result<(), Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))
            .map_err(Failure::bad_input)?;
    }
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if file.executable { 0o755 } else { 0o644 })
        .open(path)
        .with_context(|| {
            format!(
                "cannot write {} (an existing file is not overwritten; choose another with --output)",
                path.display()
            )
        })
        .map_err(Failure::bad_input)?;
    out.write_all(&file.content)
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(Failure::bad_input)?;
    Ok(())
}

async fn list(
    tool_type: Option<String>,
    source: Option<String>,
    page: u32,
    per_page: u32,
    json_out: bool,
) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let mut query = vec![
        ("page", page.to_string()),
        ("per_page", per_page.to_string()),
    ];
    if let Some(t) = tool_type {
        query.push(("tool_type", t));
    }
    if let Some(s) = source {
        query.push(("source", s));
    }
    let answer: Answer<Paged<ToolSummary>> = client
        .send(Method::GET, client.url(&TOOLS, &query), None::<&Value>)
        .await?;
    if json_out {
        print_json(answer.json());
        return Ok(());
    }
    let Paged { data, meta } = &answer.body;
    let rows: Vec<Vec<String>> = data
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.tool_type.clone(),
                t.source.clone(),
                t.endpoint.clone().unwrap_or_else(|| "-".into()),
                t.description.clone(),
            ]
        })
        .collect();
    let mut text = table(
        &["NAME", "TYPE", "SOURCE", "ENDPOINT", "DESCRIPTION"],
        &rows,
        60,
    );
    text.push_str(&format!(
        "\npage {} of {}, {} tool{}",
        meta.page,
        meta.pages(),
        meta.total,
        if meta.total == 1 { "" } else { "s" }
    ));
    print(&text);
    for t in data.iter().filter(|t| !t.hidden_characters.is_empty()) {
        crate::output::eprint(&format!(
            "warning: {} hides characters a reader does not see; `toolshed registry tool show {}` shows them escaped",
            t.name, t.name
        ));
    }
    Ok(())
}

/// The API's `hidden_characters` as warning lines for people.
fn hidden_lines(tool: &str, list: &[toolshed_api::views::HiddenCharactersView]) -> String {
    list.iter()
        .map(|h| {
            format!(
                "warning: {tool}: {}: {} {} character{} a reader does not see (shown as \\u{{…}})",
                h.field,
                h.count,
                h.kind.replace('_', "-"),
                if h.count == 1 { "" } else { "s" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The wire name of a setting (`external`, `keyed`), as a tool.yaml writes it.
fn wire_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// A tool's definition as the tool.yaml it is.
fn definition_of(tool: &ToolDetail) -> Result<ToolFile, Failure> {
    serde_json::from_value(tool.definition.clone()).map_err(|e| Failure::Error {
        code: EXIT_INTERNAL,
        error: anyhow!(
            "the registry's definition of `{}` is not a tool.yaml this CLI reads: {e}",
            tool.summary.name
        ),
    })
}

async fn show(name: &str, json_out: bool) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let answer: Answer<Data<ToolDetail>> = client.get(&tool_path(name, &[])).await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let tool = &answer.body.data;
    let t = &tool.summary;
    if !t.hidden_characters.is_empty() {
        crate::output::eprint(&hidden_lines(&t.name, &t.hidden_characters));
    }
    let def = definition_of(tool)?;
    let timeout = match (def.timeout_ms, def.timeout_seconds) {
        (Some(ms), _) => format!("{ms}ms"),
        (None, Some(s)) => format!("{s}s"),
        (None, None) => "default".into(),
    };
    let mut out = format!(
        "{}\n  {}\n\n  id           {}\n  type         {}\n  source       {}\n  endpoint     {}\n  revision     {}\n  version      {}\n  effects      {}\n  idempotency  {}\n  timeout      {timeout}\n  updated      {} by {}\n",
        t.name,
        t.description.replace('\n', "\n  "),
        t.id,
        t.tool_type,
        t.source,
        t.endpoint.as_deref().unwrap_or("-"),
        t.revision,
        t.version.as_deref().unwrap_or("-"),
        def.effects.map_or("default".into(), |e| wire_name(&e)),
        def.idempotency.map_or("default".into(), |i| wire_name(&i)),
        t.updated_at,
        tool.created_by,
    );
    if let Some(c) = &tool.code {
        out.push_str(&format!(
            "  code         sha256 {} ({} bytes, {} file{}; `toolshed registry tool pull {}`)\n",
            c.sha256,
            c.size_bytes,
            c.files,
            if c.files == 1 { "" } else { "s" },
            t.name
        ));
    }
    out.push_str("\ninput schema:\n");
    out.push_str(&serde_json::to_string_pretty(&tool.schema_definition).unwrap_or_default());
    if !tool.output_schema.is_null() {
        out.push_str("\n\noutput schema:\n");
        out.push_str(&serde_json::to_string_pretty(&tool.output_schema).unwrap_or_default());
    }
    print(&out);
    Ok(())
}

/// A tool's output as printed: a string as it is, anything else as pretty JSON.
fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

async fn run_tool(name: &str, raw_args: &str, json_out: bool) -> Result<(), Failure> {
    let args = crate::tools::read_args(raw_args)?;
    let client = Client::from_env()?;
    let answer: Answer<Data<ExecuteView>> = client
        .post(
            &tool_path(name, &["execute"]),
            &ExecuteBody { args: Some(args) },
        )
        .await?;
    let d = &answer.body.data;
    let parked = d.status == ExecuteStatus::Parked;
    if json_out {
        print_json(answer.data_json());
    } else if parked {
        let (Some(call), Some(gate)) = (&d.call_id, &d.gate) else {
            return Err(Failure::Error {
                code: EXIT_INTERNAL,
                error: anyhow!(
                    "{} answered `parked` for run {} without the call and what it waits for",
                    client.base(),
                    d.run_id
                ),
            });
        };
        eprintln!("{}", parked_hint(&d.run_id, call, gate));
    } else if let Some(e) = &d.error {
        let mut text = format!("error {}: {}", e.code, e.message);
        let stderr = d.stderr.trim();
        if !stderr.is_empty() && !e.message.contains(stderr) {
            text.push_str("\n  the tool's stderr (tail):\n    ");
            text.push_str(&tail(stderr, 20).replace('\n', "\n    "));
        }
        text.push_str(&format!("\n  run {}", d.run_id));
        crate::output::eprint(&text);
    } else {
        print(&output_text(&d.output));
        eprintln!("run {} ({:.0} ms)", d.run_id, d.duration_ms);
    }
    if parked {
        Err(Failure::Reported(EXIT_PARKED))
    } else if d.error.is_some() {
        Err(Failure::Reported(EXIT_TOOL_ERROR))
    } else {
        Ok(())
    }
}

/// What to do about a parked call: decide or answer it, then resume the run.
fn parked_hint(run_id: &str, call: &str, gate: &Gate) -> String {
    match gate {
        Gate::Answer { schema } => format!(
            "run {run_id} parked: call {call} waits for an answer matching {schema}\n  answer:  toolshed registry answer {call} --answer '{{…}}'\n  then:    toolshed registry resume {run_id}"
        ),
        Gate::Approval {
            reason,
            revision,
            four_eyes,
            ..
        } => format!(
            "run {run_id} parked: call {call} needs an approval ({reason}{}{})\n  decide:  toolshed registry approve {call} [--reason TEXT]   or   toolshed registry deny {call} --reason TEXT\n  then:    toolshed registry resume {run_id}",
            revision
                .as_deref()
                .map(|r| format!("; tool revision {r}"))
                .unwrap_or_default(),
            if *four_eyes {
                "; four-eyes: another user must approve"
            } else {
                ""
            }
        ),
    }
}

async fn decide(
    call_id: &str,
    verb: &str,
    reason: Option<String>,
    json_out: bool,
) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let answer: Answer<Data<DecisionView>> = client
        .post(
            &["api", "v1", "approvals", call_id, verb],
            &ReasonBody { reason },
        )
        .await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let done = if verb == "approve" {
        "approved"
    } else {
        "denied"
    };
    print(&format!(
        "{done} call {call_id}; continue with `toolshed registry resume {}`",
        answer.body.data.run_id
    ));
    Ok(())
}

async fn answer_call(call_id: &str, raw: &str, json_out: bool) -> Result<(), Failure> {
    let value = read_json(raw, "--answer")?;
    let client = Client::from_env()?;
    let answer: Answer<Data<AnswerView>> = client
        .post(
            &["api", "v1", "answers", call_id],
            &AnswerBody { answer: value },
        )
        .await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    print(&format!(
        "answered call {call_id}; continue with `toolshed registry resume {}`",
        answer.body.data.run_id
    ));
    Ok(())
}

async fn resume(run_id: &str, json_out: bool) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let answer: Answer<Data<ResumeView>> = client
        .post(&["api", "v1", "runs", run_id, "resume"], &json!({}))
        .await?;
    let d = &answer.body.data;
    let failed = d.outcomes.iter().any(|o| o.error.is_some());
    if json_out {
        print_json(answer.data_json());
    } else {
        for p in &d.parked {
            eprintln!("{}", parked_hint(run_id, &p.call_id, &p.gate));
        }
        if d.parked.is_empty() {
            for o in &d.outcomes {
                match &o.error {
                    Some(e) => crate::output::eprint(&format!(
                        "error {}: {} ({})",
                        e.code, e.message, o.tool
                    )),
                    None => print(&output_text(o.output.as_ref().unwrap_or(&Value::Null))),
                }
            }
            eprintln!("run {run_id} {}", d.run.status);
        }
    }
    if !d.parked.is_empty() {
        Err(Failure::Reported(EXIT_PARKED))
    } else if failed {
        Err(Failure::Reported(EXIT_TOOL_ERROR))
    } else {
        Ok(())
    }
}

/// A JSON value given on the command line, `@FILE`, or `-` for stdin.
fn read_json(raw: &str, flag: &str) -> Result<Value, Failure> {
    let text = if raw == "-" {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
            .with_context(|| format!("cannot read {flag} from stdin"))
            .map_err(Failure::bad_input)?;
        buf
    } else if let Some(path) = raw.strip_prefix('@') {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {flag} file {path}"))
            .map_err(Failure::bad_input)?
    } else {
        raw.to_owned()
    };
    serde_json::from_str(&text).map_err(|e| {
        Failure::bad_input(anyhow!(
            "{flag} is not valid JSON ({e}); e.g. {flag} '{{\"approved\": true}}'"
        ))
    })
}

/// The last `n` lines of a text.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

async fn usage(name: &str, json_out: bool) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let answer: Answer<Data<Vec<UsageView>>> = client.get(&tool_path(name, &["usage"])).await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let items = &answer.body.data;
    if items.is_empty() {
        print(&format!("no registered agent uses {name}"));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|u| {
            vec![
                u.agent_name.clone(),
                u.agent_status.to_string(),
                u.agent_id.clone(),
            ]
        })
        .collect();
    print(&table(&["AGENT", "STATUS", "ID"], &rows, 40));
    Ok(())
}

async fn delete(name: &str, json_out: bool) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let url = client.url(&tool_path(name, &[]), &[]);
    let answer: Answer<Data<ToolSummary>> =
        client.send(Method::DELETE, url, None::<&Value>).await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let t = &answer.body.data;
    print(&format!(
        "deleted {} (id {}); its revisions are kept (`toolshed registry tool versions {}`)",
        t.name, t.id, t.id
    ));
    Ok(())
}

async fn versions(name: &str, json_out: bool) -> Result<(), Failure> {
    let client = Client::from_env()?;
    let answer: Answer<Data<Vec<ToolDetail>>> = client.get(&tool_path(name, &["versions"])).await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let rows: Vec<Vec<String>> = answer
        .body
        .data
        .iter()
        .map(|v| {
            let t = &v.summary;
            vec![
                t.revision.to_string(),
                t.status.to_string(),
                t.updated_at.clone(),
                v.created_by.clone(),
                t.endpoint.clone().unwrap_or_else(|| "-".into()),
                t.description.clone(),
            ]
        })
        .collect();
    print(&table(
        &[
            "REVISION",
            "STATUS",
            "UPDATED",
            "BY",
            "ENDPOINT",
            "DESCRIPTION",
        ],
        &rows,
        50,
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::EXIT_BAD_INPUT;

    #[test]
    fn implementation_blocks_become_endpoints() {
        let folder = Path::new("/srv/tools");
        let cases = [
            ("python", "slow.py:slow", "python:/srv/tools/slow.py:slow"),
            ("node", "greet.mjs", "node:/srv/tools/greet.mjs"),
            ("typescript", "/abs/x.ts", "node:/abs/x.ts"),
            ("exec", "bin/tool.sh", "exec:/srv/tools/bin/tool.sh"),
            (
                "builtin",
                "engine.tools.standard.markdown_writer",
                "builtin:markdown_writer",
            ),
            (
                "http",
                "https://example.invalid/x",
                "https://example.invalid/x",
            ),
        ];
        for (language, entry, expect) in cases {
            let got = implementation_endpoint(language, entry, folder).map(|(e, _)| e);
            assert_eq!(got.as_deref(), Ok(expect), "{language} {entry}");
        }
    }

    #[test]
    fn relative_file_endpoints_are_made_absolute() {
        let folder = Path::new("/srv/tools");
        assert_eq!(
            absolute_endpoint("python:x.py:f", folder),
            "python:/srv/tools/x.py:f"
        );
        assert_eq!(
            absolute_endpoint("python:/a/x.py", folder),
            "python:/a/x.py"
        );
        assert_eq!(absolute_endpoint("builtin:x", folder), "builtin:x");
    }

    #[test]
    fn module_paths_name_builtins() {
        assert!(matches!(
            classify("engine.tools.standard.markdown_writer"),
            Ok(Target::Builtin(n)) if n == "markdown_writer"
        ));
        match classify("engine.tools.standard.no_such_tool") {
            Err(Failure::Error { code, error }) => {
                assert_eq!(code, EXIT_BAD_INPUT);
                assert!(error.to_string().contains("markdown_writer"), "{error}");
            }
            _ => panic!("no_such_tool is not a built-in"),
        }
    }
}
