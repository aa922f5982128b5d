//! Discovery: the MCP servers configured on this machine, read from the config files
//! of Claude Code, Claude Desktop, Cursor and VS Code (`toolshed scan`).
//!
//! Pure parsing: nothing here starts a server or reaches the network; the only I/O is
//! reading the files. Each entry becomes an [`McpServerSpec`] with its [`Source`].
//!
//! - A broken file or entry is a [`DiscoveryError`] naming the file, line, column and
//!   field; the other files and entries are still read.
//! - Variables are expanded ([`expand`]); a missing one skips that server with an
//!   error naming the file, the server and the variable. Secrets (variables in `env`
//!   and `headers`) stay `${NAME}` credential references.
//! - Duplicate names across files: the first one read wins, and each later one is
//!   reported as a [`Duplicate`] naming both files. Files are read project scope first
//!   (the project's own choice wins over the user's, as Claude Code's local > project >
//!   user precedence does): `~/.claude.json`'s entries for this project, `.mcp.json`,
//!   `.cursor/mcp.json`, `.vscode/mcp.json`, then `~/.claude.json`, `~/.cursor/mcp.json`
//!   and Claude Desktop's file. Why not keep both under new names: a renamed server's
//!   tools would get names no agent asked for, and the same server is often configured
//!   in two clients.

pub mod expand;
pub mod jsonc;
pub mod parse;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::McpCode;
use crate::spec::{DEFAULT_TIMEOUT, HttpLaunch, Launch, McpServerSpec, StdioLaunch};
use expand::{ExpandError, Expander, Position, VsCodeVars};
use parse::{Located, RawEntry, Shape};

/// The largest config file read (`~/.claude.json` keeps history and grows).
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// The most servers taken from one file.
pub const MAX_SERVERS_PER_FILE: usize = 512;

/// Which client's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientKind {
    /// Claude Code: `.mcp.json`, `~/.claude.json`.
    ClaudeCode,
    /// Claude Desktop: `claude_desktop_config.json`.
    ClaudeDesktop,
    /// Cursor: `.cursor/mcp.json`, `~/.cursor/mcp.json`.
    Cursor,
    /// VS Code: `.vscode/mcp.json`.
    Vscode,
}

/// Whose file: a project's (a cloned repository's: registered disabled) or the user's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The project folder's files, and `~/.claude.json`'s entries for the project.
    Project,
    /// The user's own files.
    User,
}

/// One config file scan may read.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigFile {
    /// Its path.
    pub path: PathBuf,
    /// How messages show it: `./.mcp.json`, `~/.claude.json`.
    pub display: String,
    /// The client.
    pub client: ClientKind,
    /// The scope of its entries (`~/.claude.json`'s project entries are project scope).
    pub scope: Scope,
    #[serde(skip)]
    shape: Shape,
}

/// Where a server came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// The file, as shown: `./.mcp.json`.
    pub file: String,
    /// The file's path.
    pub path: PathBuf,
    /// The client.
    pub client: ClientKind,
    /// The scope.
    pub scope: Scope,
    /// The entry in the file: `mcpServers.zendesk`.
    pub field: String,
}

/// One server found.
#[derive(Debug, Clone, Serialize)]
pub struct Discovered {
    /// Its spec: values expanded, secrets as `${NAME}` references.
    pub spec: McpServerSpec,
    /// Where it came from.
    pub source: Source,
    /// Its name in the file, when it had to be changed to fit the name rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
    /// The fields whose values came from the environment (e.g. `args[2]`, `url`): they
    /// are not printed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub from_env: Vec<String>,
    /// The file turns it off (`"disabled": true`): scan does not start it and registers
    /// it disabled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// Things to know (e.g. the legacy SSE transport).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A server name found in two files: the first was kept.
#[derive(Debug, Clone, Serialize)]
pub struct Duplicate {
    /// The name.
    pub name: String,
    /// The file whose entry was kept.
    pub kept: String,
    /// The file whose entry was dropped.
    pub dropped: String,
    /// Whether both entries are the same server.
    pub identical: bool,
}

/// Why a file or a server could not be read. Messages name the file, and the line,
/// column, field, server or variable; never a value from the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The file exists but cannot be read.
    #[error("{file}: cannot read: {reason}")]
    Unreadable {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// The file, or one server's entry in it, is not what the client's format says.
    #[error("{file}:{line}:{column}: {}{reason}", field_prefix(.field))]
    Invalid {
        /// The file.
        file: String,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column.
        column: usize,
        /// The field, e.g. `mcpServers.zendesk.args` (empty for a syntax error).
        field: String,
        /// The server the field belongs to, when it is in one server's entry.
        server: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// A variable is not set and has no default.
    #[error(
        "{file}: server `{server}`: {field}: ${{{variable}}} is not set; set it, or give a default as ${{{variable}:-DEFAULT}}"
    )]
    MissingVariable {
        /// The file.
        file: String,
        /// The server (it is skipped).
        server: String,
        /// Where the variable is, e.g. `env.API_KEY`.
        field: String,
        /// The variable.
        variable: String,
    },
    /// A server's entry is well-formed JSON but not a server toolshed can run.
    #[error("{file}: server `{server}`: {field}: {reason}")]
    InvalidServer {
        /// The file.
        file: String,
        /// The server (it is skipped).
        server: String,
        /// The field.
        field: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl DiscoveryError {
    /// The stable code.
    pub fn code(&self) -> McpCode {
        match self {
            DiscoveryError::Unreadable { .. } => McpCode::McpConfigUnreadable,
            DiscoveryError::Invalid { .. } => McpCode::McpConfigInvalid,
            DiscoveryError::MissingVariable { .. } => McpCode::McpConfigVariable,
            DiscoveryError::InvalidServer { .. } => McpCode::InvalidMcpSpec,
        }
    }

    /// The file it is about.
    pub fn file(&self) -> &str {
        match self {
            DiscoveryError::Unreadable { file, .. }
            | DiscoveryError::Invalid { file, .. }
            | DiscoveryError::MissingVariable { file, .. }
            | DiscoveryError::InvalidServer { file, .. } => file,
        }
    }

    /// The server it is about, if one.
    pub fn server(&self) -> Option<&str> {
        match self {
            DiscoveryError::Unreadable { .. } => None,
            DiscoveryError::Invalid { server, .. } => server.as_deref(),
            DiscoveryError::MissingVariable { server, .. }
            | DiscoveryError::InvalidServer { server, .. } => Some(server),
        }
    }
}

/// What one file gave.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// The file.
    #[serde(flatten)]
    pub file: ConfigFile,
    /// How many servers it configures (including skipped and duplicate ones).
    pub servers: usize,
    /// Whether it was read whole (no file-level error).
    pub ok: bool,
}

/// Everything discovery found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Discovery {
    /// The files that exist, in reading order.
    pub files: Vec<FileReport>,
    /// The servers, first of each name.
    pub servers: Vec<Discovered>,
    /// Files and servers that could not be read (printed by the caller, with codes).
    #[serde(skip)]
    pub errors: Vec<DiscoveryError>,
    /// Names found again in a later file.
    pub duplicates: Vec<Duplicate>,
}

/// Where to look, and the environment to expand from.
pub struct Places<'a> {
    /// The project (working) folder.
    pub project: PathBuf,
    /// The home folder.
    pub home: PathBuf,
    /// Reads one environment variable.
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// The config files scan reads, in reading order (existing or not).
pub fn config_files(project: &Path, home: &Path) -> Vec<ConfigFile> {
    let p = |rel: &str, client, shape| ConfigFile {
        path: project.join(rel),
        display: format!("./{rel}"),
        client,
        scope: Scope::Project,
        shape,
    };
    let h = |rel: &str, client, shape| ConfigFile {
        path: home.join(rel),
        display: format!("~/{rel}"),
        client,
        scope: Scope::User,
        shape,
    };
    vec![
        // `~/.claude.json` is read once, first: its project entries come first and its
        // user entries are read in user order below (see `discover`).
        h(".claude.json", ClientKind::ClaudeCode, Shape::ClaudeJson),
        p(".mcp.json", ClientKind::ClaudeCode, Shape::McpServers),
        p(".cursor/mcp.json", ClientKind::Cursor, Shape::McpServers),
        p(".vscode/mcp.json", ClientKind::Vscode, Shape::VsCode),
        h(".cursor/mcp.json", ClientKind::Cursor, Shape::McpServers),
        h(
            ".config/Claude/claude_desktop_config.json",
            ClientKind::ClaudeDesktop,
            Shape::McpServers,
        ),
        h(
            "Library/Application Support/Claude/claude_desktop_config.json",
            ClientKind::ClaudeDesktop,
            Shape::McpServers,
        ),
    ]
}

/// Reads every config file under `places` into servers, errors and duplicates.
pub fn discover(places: &Places<'_>) -> Discovery {
    let mut out = Discovery::default();
    // Every spelling `~/.claude.json` may use for the project: as given and canonical.
    let mut project_keys = vec![places.project.to_string_lossy().into_owned()];
    if let Ok(canonical) = std::fs::canonicalize(&places.project) {
        project_keys.push(canonical.to_string_lossy().into_owned());
    }
    // (name, file) of each server taken, and its spec, for duplicates.
    let mut taken: BTreeMap<String, (String, McpServerSpec)> = BTreeMap::new();
    let mut batches: Vec<(ConfigFile, Scope, Vec<parse::Entry>, Vec<String>)> = Vec::new();
    // Scanning in the home folder makes `./.cursor/mcp.json` and `~/.cursor/mcp.json`
    // one file: read once, in its first (project) place.
    let mut seen: Vec<PathBuf> = Vec::new();
    for file in config_files(&places.project, &places.home) {
        if let Ok(canonical) = std::fs::canonicalize(&file.path) {
            if seen.contains(&canonical) {
                continue;
            }
            seen.push(canonical);
        }
        let text = match read_file(&file.path) {
            Ok(None) => continue,
            Ok(Some(text)) => text,
            Err(reason) => {
                out.errors.push(DiscoveryError::Unreadable {
                    file: file.display.clone(),
                    reason,
                });
                out.files.push(FileReport {
                    file,
                    servers: 0,
                    ok: false,
                });
                continue;
            }
        };
        let text = if file.shape == Shape::VsCode {
            jsonc::strip(&text)
        } else {
            text
        };
        match parse::read(&text, file.shape, &project_keys) {
            Err(l) => {
                out.errors.push(invalid(&file.display, None, l));
                out.files.push(FileReport {
                    file,
                    servers: 0,
                    ok: false,
                });
            }
            Ok(entries) => {
                let mut user = entries.entries;
                let mut project = entries.project_entries;
                user.truncate(MAX_SERVERS_PER_FILE);
                project.truncate(MAX_SERVERS_PER_FILE);
                out.files.push(FileReport {
                    file: file.clone(),
                    servers: user.len() + project.len(),
                    ok: true,
                });
                if file.shape == Shape::ClaudeJson {
                    batches.push((file.clone(), Scope::Project, project, Vec::new()));
                    batches.push((file, Scope::User, user, Vec::new()));
                } else {
                    batches.push((file.clone(), file.scope, user, entries.inputs));
                }
            }
        }
    }
    // Project scope first; a stable sort keeps the files' order within a scope, so
    // `~/.claude.json`'s entries lead each scope.
    batches.sort_by_key(|(_, scope, ..)| *scope != Scope::Project);
    for (file, scope, entries, inputs) in batches {
        let vscode = (file.shape == Shape::VsCode).then(|| VsCodeVars {
            workspace_folder: places.project.clone(),
            user_home: places.home.clone(),
            inputs,
        });
        let expander = Expander {
            env: places.env,
            vscode: vscode.as_ref(),
        };
        for (name, field, entry) in entries {
            let source = Source {
                file: file.display.clone(),
                path: file.path.clone(),
                client: file.client,
                scope,
                field,
            };
            let entry = match entry {
                Ok(entry) => entry,
                Err(l) => {
                    out.errors.push(invalid(&file.display, Some(&name), l));
                    continue;
                }
            };
            match convert(&name, &entry, &expander, source) {
                Err(e) => out.errors.push(e),
                Ok(found) => match taken.get(&found.spec.name) {
                    Some((kept, spec)) => out.duplicates.push(Duplicate {
                        name: found.spec.name.clone(),
                        kept: kept.clone(),
                        dropped: found.source.file.clone(),
                        identical: *spec == found.spec,
                    }),
                    None => {
                        taken.insert(
                            found.spec.name.clone(),
                            (found.source.file.clone(), found.spec.clone()),
                        );
                        out.servers.push(found);
                    }
                },
            }
        }
    }
    out
}

/// The file's text; `None` when it does not exist.
fn read_file(path: &Path) -> Result<Option<String>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_FILE_BYTES} read",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()))
}

fn invalid(file: &str, server: Option<&str>, l: Located) -> DiscoveryError {
    DiscoveryError::Invalid {
        file: file.to_owned(),
        line: l.line,
        column: l.column,
        field: l.field,
        server: server.map(str::to_owned),
        reason: l.reason,
    }
}

/// A config name made to fit the server name rule: other characters become `-`,
/// `__` becomes `_`, cut to [`crate::spec::MAX_SERVER_NAME`].
pub fn sanitise_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    out.chars().take(crate::spec::MAX_SERVER_NAME).collect()
}

/// One entry into a server.
fn convert(
    name: &str,
    entry: &RawEntry,
    x: &Expander<'_>,
    source: Source,
) -> Result<Discovered, DiscoveryError> {
    let file = source.file.clone();
    let server_err = |field: &str, reason: String| DiscoveryError::InvalidServer {
        file: file.clone(),
        server: name.to_owned(),
        field: field.to_owned(),
        reason,
    };
    let expand_err = |field: &str, e: ExpandError| match e {
        ExpandError::Missing(variable) => DiscoveryError::MissingVariable {
            file: file.clone(),
            server: name.to_owned(),
            field: field.to_owned(),
            variable,
        },
        ExpandError::Unsupported(form) => server_err(
            field,
            format!(
                "{form} is not a variable toolshed can expand; use ${{VAR}}, ${{VAR:-default}} or ${{env:VAR}}"
            ),
        ),
        ExpandError::BadCredentialName(var) => server_err(
            field,
            format!(
                "${{{var}}} would become a credential reference, and credential names must match ^[A-Za-z][A-Za-z0-9_-]*$"
            ),
        ),
        ExpandError::Input(id) => server_err(
            field,
            format!(
                "${{input:{id}}} names no entry of `inputs`, or sits outside `env` and `headers`"
            ),
        ),
    };
    let mut notes = Vec::new();
    let mut from_env = Vec::new();
    let mut credentials = Vec::new();
    let plain = |field: &str, text: &str, from_env: &mut Vec<String>| {
        let e = x
            .expand(text, Position::Plain)
            .map_err(|e| expand_err(field, e))?;
        if e.from_env {
            from_env.push(field.to_owned());
        }
        Ok::<String, DiscoveryError>(e.value)
    };
    let secret_map = |field: &str,
                      map: &Option<BTreeMap<String, String>>,
                      credentials: &mut Vec<String>|
     -> Result<BTreeMap<String, String>, DiscoveryError> {
        let mut out = BTreeMap::new();
        for (k, v) in map.iter().flatten() {
            let e = x
                .expand(v, Position::Secret)
                .map_err(|e| expand_err(&format!("{field}.{k}"), e))?;
            credentials.extend(e.credentials);
            out.insert(k.clone(), e.value);
        }
        Ok(out)
    };
    let kind = entry.kind.as_deref().map(str::to_ascii_lowercase);
    let is_http = match kind.as_deref() {
        Some("stdio") => false,
        Some("http" | "streamable-http" | "streamablehttp" | "streamable_http") => true,
        Some("sse") => {
            notes.push("configured as the legacy SSE transport; toolshed speaks Streamable HTTP to its url".into());
            true
        }
        Some(other) => {
            return Err(server_err(
                "type",
                format!(
                    "`{other}` is not a transport; use `stdio`, `http`, `streamable-http` or `sse`"
                ),
            ));
        }
        None => match (&entry.command, &entry.url) {
            (Some(_), _) => false,
            (None, Some(_)) => true,
            (None, None) => {
                return Err(server_err(
                    "command",
                    "a server needs `command` (stdio) or `url` (HTTP)".into(),
                ));
            }
        },
    };
    let launch = if is_http {
        let Some(url) = &entry.url else {
            return Err(server_err("url", "an HTTP server needs `url`".into()));
        };
        Launch::Http(HttpLaunch {
            url: plain("url", url, &mut from_env)?,
            headers: secret_map("headers", &entry.headers, &mut credentials)?,
        })
    } else {
        let Some(command) = &entry.command else {
            return Err(server_err(
                "command",
                "a stdio server needs `command`".into(),
            ));
        };
        let command = plain("command", command, &mut from_env)?;
        let mut args = Vec::new();
        for (i, a) in entry.args.iter().flatten().enumerate() {
            args.push(plain(&format!("args[{i}]"), a, &mut from_env)?);
        }
        Launch::Stdio(StdioLaunch {
            command,
            args,
            env: secret_map("env", &entry.env, &mut credentials)?,
            network: None,
        })
    };
    credentials.sort();
    credentials.dedup();
    let clean = sanitise_name(name);
    let renamed_from = (clean != name).then(|| name.to_owned());
    if let Some(old) = &renamed_from {
        notes.push(format!(
            "renamed from `{old}` to fit the server name rule ^[A-Za-z0-9_-]{{1,30}}$"
        ));
    }
    let spec = McpServerSpec {
        name: clean,
        launch,
        timeout: DEFAULT_TIMEOUT,
        credentials,
    };
    // Why `allow`: `McpError` is one enum for the whole crate and gains variants; a
    // spec's validation answers only `InvalidSpec` today.
    #[allow(unreachable_patterns)]
    spec.validate().map_err(|e| match e {
        crate::McpError::InvalidSpec { field, reason, .. } => server_err(&field, reason),
        other => server_err("spec", other.to_string()),
    })?;
    let disabled = entry.disabled == Some(true);
    if disabled {
        notes.push("disabled in the file: not started, registered disabled".into());
    }
    Ok(Discovered {
        spec,
        source,
        renamed_from,
        from_env,
        disabled,
        notes,
    })
}
