//! `toolshed scan [--register] [--json]`: the MCP servers configured on this machine
//! (Claude Code, Claude Desktop, Cursor, VS Code), each started (stdio in the sandbox)
//! and its tools listed; with `--register`, registered with the registry server.
//!
//! Reading the files is `toolshed_mcp::discovery`'s; starting and listing is the client
//! hub's (`toolshed_mcp::McpHub`). This module prints, and registers through the CLI's
//! registry client.
//!
//! Secrets: a spec from discovery holds `${NAME}` references where the environment's
//! values sat in `env` and `headers`; the hub resolves them from this process's
//! environment when it starts the server. Values that came from the environment into
//! `command`, `args` or `url` are printed as `***`, and literal `env` and `headers`
//! values of the files are printed as `***` too (only references are shown).
//! `--register` refuses an entry holding either, one line per key saying what to write
//! instead: the registry would keep the value in clear for every reader.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use serde_json::{Value, json};
use toolshed_api::{ApiCode, Data};
use toolshed_mcp::discovery::{self, Discovered, Discovery, Places, Scope};
use toolshed_mcp::{
    ClientConfig, Launch, McpHub, McpServerSpec, McpTool, SandboxProfile, ServerInfo,
};

use crate::client::{Client, ClientError};
use crate::output::{EXIT_INTERNAL, Failure, print, print_json};

/// Exit code of `toolshed scan`: a config file or entry did not parse, a variable was
/// missing, a server did not start or list its tools, or a registration failed. Every
/// other server was still scanned (and registered).
pub const EXIT_SCAN_PROBLEMS: u8 = 5;

/// How many servers start at once.
const MAX_STARTING: usize = 8;

/// The scope the scan's servers run under in the hub (and their package caches).
const SCOPE: &str = "scan";

/// Arguments of `toolshed scan`.
#[derive(Debug, Args)]
#[command(after_help = "\
Files read (project folder, then home folder; the first server of a name wins):
  ~/.claude.json (its projects.<this folder>.mcpServers), ./.mcp.json, ./.cursor/mcp.json,
  ./.vscode/mcp.json (JSONC), then ~/.claude.json (mcpServers), ~/.cursor/mcp.json,
  ~/.config/Claude/claude_desktop_config.json and
  ~/Library/Application Support/Claude/claude_desktop_config.json.

Exit codes: 0 every file parsed and every server started and listed its tools (and
registered, with --register); 5 something did not (each problem is printed, the rest
was still scanned); 2 bad flags, or not logged in for --register; 3 the registry cannot
be reached.")]
pub struct ScanArgs {
    /// Register every server found with the registry server (`TOOLSHED_URL`, logged
    /// in). Servers of project files are registered disabled until an admin enables
    /// them: a cloned repository must not run code on the registry.
    #[arg(long)]
    register: bool,
    /// Print one machine-readable JSON document instead of the summary.
    #[arg(long)]
    json: bool,
    /// The project folder (default: the working folder).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// The home folder (default: `HOME`).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Only read the config files: start no server, list no tools.
    #[arg(long)]
    no_start: bool,
    /// How long one server may take to start and list its tools, in seconds (a
    /// package runner downloads the server on its first start).
    #[arg(long, value_name = "S", default_value_t = 120)]
    timeout: u64,
    /// Where the servers' package caches persist (default:
    /// `$XDG_CACHE_HOME/toolshed/mcp`, else `~/.cache/toolshed/mcp`).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Show a host folder to every stdio server, read-only (programs in it may run):
    /// `HOST` at the same path, or `HOST:TARGET` (targets under `/usr`, `/etc`, `/tmp`,
    /// `/work`, … are the sandbox's own). The sandbox sees only `/usr` and these, so a
    /// server pinned to a local path needs its folder here. Repeatable.
    #[arg(long, value_name = "HOST[:TARGET]")]
    bind: Vec<String>,
    /// A host name or address range (CIDR) a Streamable HTTP server may be at although
    /// it is not public (loopback, private, link-local and metadata addresses are
    /// refused otherwise, after DNS resolution), e.g. `127.0.0.1` for a server you run
    /// yourself. Repeatable.
    #[arg(long = "allow-http-host", value_name = "HOST|CIDR")]
    allow_http_host: Vec<toolshed_dispatch::HttpAllow>,
    /// Run stdio servers as plain child processes, without the sandbox: a developer's
    /// opt-in on a host without it. Never the default.
    #[arg(long)]
    unsandboxed: bool,
}

/// `HOST[:TARGET]` of `--bind`.
fn parse_bind(raw: &str) -> Result<toolshed_sandbox::Bind, Failure> {
    let (host, target) = raw.split_once(':').unwrap_or((raw, raw));
    let host =
        std::path::absolute(host).map_err(|e| Failure::bad_input(anyhow!("--bind {raw}: {e}")))?;
    if !host.exists() {
        return Err(Failure::bad_input(anyhow!(
            "--bind {raw}: {} does not exist",
            host.display()
        )));
    }
    if !Path::new(target).is_absolute() {
        return Err(Failure::bad_input(anyhow!(
            "--bind {raw}: the target `{target}` must be an absolute path"
        )));
    }
    Ok(toolshed_sandbox::Bind::executable(host, target))
}

/// What happened to one server.
struct Outcome {
    found: Discovered,
    profile: Option<SandboxProfile>,
    listed: Option<Result<(ServerInfo, Vec<McpTool>), String>>,
    registered: Option<Result<Registered, String>>,
}

/// A registration's result.
struct Registered {
    id: Option<String>,
    enabled: bool,
    existed: bool,
}

/// Run `toolshed scan`.
pub async fn run(args: ScanArgs) -> Result<(), Failure> {
    let project = match &args.project {
        Some(p) => p.clone(),
        None => std::env::current_dir()
            .map_err(|e| Failure::bad_input(anyhow!("cannot read the working folder: {e}")))?,
    };
    let home = match &args.home {
        Some(h) => h.clone(),
        None => std::env::var_os("HOME").map(PathBuf::from).ok_or_else(|| {
            Failure::bad_input(anyhow!(
                "HOME is not set; give the home folder with --home DIR"
            ))
        })?,
    };
    let project = std::path::absolute(&project).unwrap_or(project);
    let home = std::path::absolute(&home).unwrap_or(home);
    let env = |name: &str| std::env::var(name).ok();
    let found = discovery::discover(&Places {
        project,
        home: home.clone(),
        env: &env,
    });
    let cache_root = args
        .cache_dir
        .clone()
        .unwrap_or_else(|| default_cache(&home));

    let mut outcomes: Vec<Outcome> = found
        .servers
        .iter()
        .map(|d| Outcome {
            profile: match &d.spec.launch {
                Launch::Stdio(l) => Some(SandboxProfile::of(l, &cache_root, SCOPE, &d.spec.name)),
                Launch::Http(_) => None,
            },
            found: d.clone(),
            listed: None,
            registered: None,
        })
        .collect();

    if !args.no_start && !outcomes.is_empty() {
        start_all(&args, &cache_root, &mut outcomes).await?;
    }
    if args.register && !outcomes.is_empty() {
        register_all(&mut outcomes).await?;
    }

    let problems = !found.errors.is_empty()
        || outcomes
            .iter()
            .any(|o| matches!(o.listed, Some(Err(_))) || matches!(o.registered, Some(Err(_))));
    if args.json {
        print_json(&document(&found, &outcomes, !problems));
    } else {
        report(&found, &outcomes);
    }
    if problems {
        Err(Failure::Reported(EXIT_SCAN_PROBLEMS))
    } else {
        Ok(())
    }
}

fn default_cache(home: &Path) -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x).join("toolshed/mcp"),
        None => home.join(".cache/toolshed/mcp"),
    }
}

/// Starts every server, [`MAX_STARTING`] at a time (each within the timeout), lists its tools, shuts all
/// down. A progress bar on stderr when it is a terminal.
async fn start_all(
    args: &ScanArgs,
    cache_root: &Path,
    outcomes: &mut [Outcome],
) -> Result<(), Failure> {
    let mut config = ClientConfig::new(cache_root);
    config.unsandboxed = args.unsandboxed;
    config.http_policy.allow = args.allow_http_host.clone();
    config.binds = args
        .bind
        .iter()
        .map(|b| parse_bind(b))
        .collect::<Result<_, _>>()?;
    if !args.unsandboxed && outcomes.iter().any(|o| o.profile.is_some()) {
        // Stdio servers run in the sandbox; without one on this host each is listed
        // with the sandbox's error, and HTTP servers are still scanned.
        match crate::sandbox::config().map(toolshed_sandbox::Sandbox::new) {
            Ok(Ok(sandbox)) => config.sandbox = Some(sandbox),
            Ok(Err(e)) => {
                let why = format!("{e} [{}]; run `toolshed sandbox check`", e.code());
                for o in outcomes.iter_mut().filter(|o| o.profile.is_some()) {
                    o.listed = Some(Err(why.clone()));
                }
            }
            Err(f) => return Err(f),
        }
    }
    if args.unsandboxed {
        // No sandbox, so no sandbox profile to print: say what it is instead.
        for o in outcomes.iter_mut().filter(|o| o.profile.is_some()) {
            o.profile = None;
            o.found.notes.push(
                "unsandboxed (--unsandboxed): runs as a plain child process with your rights"
                    .into(),
            );
        }
    }
    let hub = McpHub::new(config);
    let bar = progress(
        outcomes
            .iter()
            .filter(|o| o.listed.is_none() && !o.found.disabled)
            .count(),
    );
    let timeout = Duration::from_secs(args.timeout.max(1));
    let credentials: Arc<dyn toolshed_core::CredentialProvider> =
        Arc::new(toolshed_core::EnvProvider);
    let jobs = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| o.listed.is_none() && !o.found.disabled)
        .map(|(i, o)| {
            let server = hub.server(SCOPE, &o.found.spec, credentials.clone(), None);
            let bar = bar.clone();
            async move {
                let listed = tokio::time::timeout(timeout, async {
                    let info = server
                        .connect()
                        .await
                        .map_err(|e| format!("{e} [{}]", e.code()))?;
                    let tools = server
                        .tools()
                        .await
                        .map_err(|e| format!("{e} [{}]", e.code()))?;
                    Ok::<_, String>((info, tools))
                })
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "did not start and list its tools within {} s (raise --timeout)",
                        timeout.as_secs()
                    ))
                });
                bar.inc(1);
                bar.set_message(server.name().to_owned());
                (i, listed, server.profile().cloned())
            }
        });
    // A few at a time: each may be a Node or Python process downloading its package.
    let results: Vec<_> = futures_util::StreamExt::collect(
        futures_util::StreamExt::buffer_unordered(futures_util::stream::iter(jobs), MAX_STARTING),
    )
    .await;
    bar.finish_and_clear();
    let sandboxed = !args.unsandboxed;
    let binds: Vec<PathBuf> = hub
        .config()
        .binds
        .iter()
        .map(|b| b.target.clone())
        .collect();
    for (i, listed, profile) in results {
        if let Some(o) = outcomes.get_mut(i) {
            let listed = match (listed, &o.found.spec.launch) {
                (Err(e), Launch::Stdio(l)) if sandboxed => Err(match unseen_path(l, &binds) {
                    Some(p) => format!(
                        "{e}\nhint: the sandbox shows a server only /usr and the --bind folders; `{p}` is outside them: add --bind HOST[:TARGET]"
                    ),
                    None => e,
                }),
                (listed, _) => listed,
            };
            o.listed = Some(listed);
            if profile.is_some() && sandboxed {
                o.profile = profile;
            }
        }
    }
    hub.shutdown().await;
    Ok(())
}

/// The first absolute path of a stdio server's command or args that the sandbox does
/// not show it (outside `/usr` and the binds' targets).
fn unseen_path(launch: &toolshed_mcp::StdioLaunch, binds: &[PathBuf]) -> Option<String> {
    std::iter::once(&launch.command)
        .chain(&launch.args)
        .filter(|a| a.starts_with('/'))
        .find(|a| {
            let p = Path::new(a.as_str());
            !p.starts_with("/usr")
                && !["/bin", "/sbin", "/lib", "/lib64"]
                    .iter()
                    .any(|l| p.starts_with(l))
                && !binds.iter().any(|b| p.starts_with(b))
        })
        .cloned()
}

fn progress(len: usize) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(len as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} starting MCP servers {pos}/{len} {wide_msg}",
    ) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Registers every server. An unreachable or refusing registry for the first one is
/// the whole command's error (exit 3 or 2); later failures are per server.
async fn register_all(outcomes: &mut [Outcome]) -> Result<(), Failure> {
    let client = Client::from_env()?;
    for o in outcomes.iter_mut() {
        if let Some(field) = o.found.from_env.first() {
            // The registry would store the value itself; only `env` and `headers` can
            // hold credential references.
            o.registered = Some(Err(format!(
                "{field} holds a value of the environment, which the registry would store as it is; \
                 move it into `env` or `headers` (as ${{NAME}}), or write it into the file"
            )));
            continue;
        }
        let literals = o.found.spec.literal_values();
        if !literals.is_empty() {
            // The registry would keep them in clear for every reader of the entry: the
            // entry is refused, each key named with the reference to write instead.
            o.registered = Some(Err(format!(
                "{} literal value{} in {} (the registry would keep {} in clear for every reader):\n{}",
                literals.len(),
                if literals.len() == 1 { "" } else { "s" },
                o.found.source.file,
                if literals.len() == 1 { "it" } else { "them" },
                literals
                    .iter()
                    .map(|l| format!("    {}: {}", l.path(), l.fix()))
                    .collect::<Vec<_>>()
                    .join("\n")
            )));
            continue;
        }
        let body = registration(&o.found);
        let answer = client
            .post::<Data<Value>>(&["api", "v1", "mcp-servers"], &body)
            .await;
        o.registered = Some(match answer {
            Ok(a) => Ok(Registered {
                id: a.body.data.get("id").and_then(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                }),
                enabled: body["enabled"].as_bool().unwrap_or(false),
                existed: false,
            }),
            // Scanning again must not fail on what the last scan registered.
            Err(e) if e.code() == Some(ApiCode::Conflict) => Ok(Registered {
                id: None,
                enabled: body["enabled"].as_bool().unwrap_or(false),
                existed: true,
            }),
            // Nothing will register: an unreachable server, or not logged in.
            Err(e @ (ClientError::Unreachable { .. } | ClientError::Protocol { .. })) => {
                return Err(Failure::Error {
                    code: EXIT_INTERNAL,
                    error: anyhow!("{}", e.describe()),
                });
            }
            Err(e) if e.status() == Some(reqwest::StatusCode::UNAUTHORIZED) => {
                return Err(e.into());
            }
            Err(e) => Err(e.describe()),
        });
    }
    Ok(())
}

/// The `POST /api/v1/mcp-servers` body of a discovered server: its spec's fields
/// (secrets as `${NAME}` references, their names in `credentials`), `enabled` false for
/// project-scoped files, and where it came from.
pub fn registration(d: &Discovered) -> Value {
    let spec = &d.spec;
    let mut body = json!({
        "name": spec.name,
        "timeout_seconds": spec.timeout.as_secs(),
        "credentials": spec.credentials,
        "enabled": d.source.scope == Scope::User && !d.disabled,
        "source": format!("scan:{}", d.source.path.display()),
    });
    match &spec.launch {
        Launch::Stdio(l) => {
            body["transport"] = json!("stdio");
            body["command"] = json!(l.command);
            body["args"] = json!(l.args);
            body["env"] = json!(l.env);
        }
        Launch::Http(h) => {
            body["transport"] = json!("streamable_http");
            body["url"] = json!(h.url);
            body["headers"] = json!(h.headers);
        }
    }
    body
}

/// A spec as printed, in the registration's flat shape (`transport`, `command`,
/// `args`, `env`, `url`, `headers`, `credentials`, `timeout_seconds`): values from the
/// environment and literal `env`/`headers` values as `***`; `${NAME}` references as
/// they are.
fn shown_spec(d: &Discovered) -> Value {
    let mut spec = registration(d);
    if let Value::Object(map) = &mut spec {
        map.remove("enabled");
        map.remove("source");
        for key in ["env", "headers"] {
            if let Some(Value::Object(values)) = map.get_mut(key) {
                for value in values.values_mut() {
                    if !value
                        .as_str()
                        .is_some_and(toolshed_mcp::spec::is_reference_form)
                    {
                        *value = json!(toolshed_mcp::spec::MASK);
                    }
                }
            }
        }
        for field in &d.from_env {
            let slot = match field
                .strip_prefix("args[")
                .and_then(|r| r.strip_suffix(']'))
            {
                Some(i) => i
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| map.get_mut("args").and_then(|a| a.get_mut(i))),
                None => map.get_mut(field.as_str()),
            };
            if let Some(slot) = slot {
                *slot = json!("***");
            }
        }
    }
    spec
}

fn transport(spec: &McpServerSpec) -> &'static str {
    match spec.launch {
        Launch::Stdio(_) => "stdio",
        Launch::Http(_) => "http",
    }
}

/// The summary for people: one line per server (`zendesk  stdio  ./.mcp.json  (3
/// tools)`), its sandbox profile and notes under it; problems on stderr.
fn report(found: &Discovery, outcomes: &[Outcome]) {
    for e in &found.errors {
        eprintln!("error: {e} [{}]", e.code());
    }
    for d in &found.duplicates {
        eprintln!(
            "warning: server `{}` is in {} and in {}{}; the first is used",
            d.name,
            d.kept,
            d.dropped,
            if d.identical {
                " (the same server)"
            } else {
                ""
            }
        );
    }
    if outcomes.is_empty() {
        let files: Vec<&str> = found
            .files
            .iter()
            .map(|f| f.file.display.as_str())
            .collect();
        if files.is_empty() {
            eprintln!(
                "no MCP config files found (see `toolshed scan --help` for where scan looks)"
            );
        } else {
            eprintln!("no MCP servers in {}", files.join(", "));
        }
        return;
    }
    let name_w = outcomes
        .iter()
        .map(|o| o.found.spec.name.len())
        .max()
        .unwrap_or(0);
    let file_w = outcomes
        .iter()
        .map(|o| o.found.source.file.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for o in outcomes {
        let status = match &o.listed {
            None => "(not started)".to_owned(),
            Some(Ok((_, tools))) => {
                format!(
                    "({} tool{})",
                    tools.len(),
                    if tools.len() == 1 { "" } else { "s" }
                )
            }
            // The first line on the server's line, the rest (a server's stderr, a
            // hint) indented under it.
            Some(Err(e)) => {
                let mut lines = e.lines();
                let mut text = format!("error: {}", lines.next().unwrap_or(""));
                for line in lines.filter(|l| !l.trim().is_empty()) {
                    text.push_str("\n    ");
                    text.push_str(line);
                }
                text
            }
        };
        out.push_str(&format!(
            "{:<name_w$}  {:<5}  {:<file_w$}  {status}\n",
            o.found.spec.name,
            transport(&o.found.spec),
            o.found.source.file,
        ));
        if let Some(p) = &o.profile {
            out.push_str(&format!("  {p}\n"));
        }
        for note in &o.found.notes {
            out.push_str(&format!("  note: {note}\n"));
        }
        match &o.registered {
            None => {}
            Some(Ok(r)) => {
                let what = if r.existed {
                    "already registered"
                } else {
                    "registered"
                };
                let id =
                    r.id.as_deref()
                        .map(|id| format!(" as {id}"))
                        .unwrap_or_default();
                if r.enabled {
                    out.push_str(&format!("  {what}{id}, enabled\n"));
                } else if o.found.disabled && o.found.source.scope == Scope::User {
                    out.push_str(&format!("  {what}{id}, disabled as in the file\n"));
                } else {
                    out.push_str(&format!(
                        "  {what}{id}, disabled: it comes from a project file ({}), so an admin must enable it \
                         (PUT /api/v1/mcp-servers/{} with {{\"enabled\": true}})\n",
                        o.found.source.file,
                        r.id.as_deref().unwrap_or("ID"),
                    ));
                }
            }
            Some(Err(e)) => out.push_str(&format!("  not registered: {e}\n")),
        }
    }
    print(&out);
}

/// The `--json` document.
fn document(found: &Discovery, outcomes: &[Outcome], ok: bool) -> Value {
    let servers: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            let mut v = json!({
                "name": o.found.spec.name,
                "transport": match o.found.spec.launch { Launch::Stdio(_) => "stdio", Launch::Http(_) => "streamable_http" },
                "source": o.found.source,
                "spec": shown_spec(&o.found),
                "sandbox": o.profile,
                "notes": o.found.notes,
            });
            if let Some(old) = &o.found.renamed_from {
                v["renamed_from"] = json!(old);
            }
            match &o.listed {
                None => v["status"] = json!("not_started"),
                Some(Ok((info, tools))) => {
                    v["status"] = json!("ok");
                    v["server_info"] = json!(info);
                    v["tool_count"] = json!(tools.len());
                    v["tools"] = tools
                        .iter()
                        .map(|t| json!({"name": t.name, "qualified_name": t.qualified_name, "description": t.description, "hints": t.hints}))
                        .collect();
                }
                Some(Err(e)) => {
                    v["status"] = json!("error");
                    v["error"] = json!(e);
                }
            }
            match &o.registered {
                None => {}
                Some(Ok(r)) => {
                    v["registered"] = json!({"id": r.id, "enabled": r.enabled, "already_registered": r.existed});
                }
                Some(Err(e)) => v["registered"] = json!({"error": e}),
            }
            v
        })
        .collect();
    let errors: Vec<Value> = found
        .errors
        .iter()
        .map(|e| json!({"code": e.code(), "file": e.file(), "server": e.server(), "message": e.to_string()}))
        .collect();
    json!({
        "ok": ok,
        "files": found.files,
        "servers": servers,
        "errors": errors,
        "duplicates": found.duplicates,
    })
}
