//! MCP server entries on the server: a request body turned into a checked
//! [`McpServerSpec`] and a registry entry, a stored entry back into its spec and view,
//! the tools a discover found as registry tools (hints, then the owner's overrides), and
//! a registry tool of endpoint `mcp:<server>/<tool>` as the pipeline tool that calls it
//! through the server's one [`McpHub`](toolshed_mcp::McpHub).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use toolshed_api::ApiCode;
use toolshed_api::requests::{McpServerBody, McpToolOverride};
use toolshed_api::views::{McpDiscoveredTool, McpPendingView, McpServerView};
use toolshed_auth::{Claims, Role};
use toolshed_core::file::ToolFile;
use toolshed_core::{
    Chunk, Handler, HandlerFuture, McpCall, Principal, Reply, Tool, ToolContext, ToolOutput,
};
use toolshed_mcp::{HttpLaunch, Launch, McpServer, McpServerSpec, McpTool, StdioLaunch};
use toolshed_registry::{
    McpFound, McpPending, McpServerRecord, NewMcpServer, NewTool, RegistryStore, TenantScope,
    ToolRecord,
};

use crate::error::ApiError;
use crate::state::AppState;
use crate::tenancy::tenant_of;

/// The `tool_type` and `source` of the registry tools a discover writes.
pub const MCP_TOOL_TYPE: &str = "mcp";

/// The longest `description` of an entry, in bytes.
const MAX_DESCRIPTION: usize = 4096;

/// The most tags, and the longest one.
const MAX_TAGS: usize = 32;
const MAX_TAG: usize = 64;

/// The longest stdio command line, and the most arguments.
const MAX_COMMAND_LINE: usize = 8192;
const MAX_ARGS: usize = 256;

/// How much of a stdio server's stderr an unreachable answer quotes (its end).
const STDERR_QUOTE: usize = 800;

/// A registration or a change, checked: what the store keeps and the spec it holds.
#[derive(Debug)]
pub struct Entry {
    /// The store's form.
    pub new: NewMcpServer,
    /// The spec (also inside `new.spec`).
    pub spec: McpServerSpec,
}

/// Check a body and merge it over `current` (an update; `None` registers), for `claims`.
/// Every field problem is a 422 naming the field; a credential outside the policy a 422
/// `CREDENTIAL_NOT_ALLOWED`; a URL the SSRF guard refuses a 422 naming `url`; a literal
/// `env`/`headers` value the body brings (not a `${NAME}` reference) a 422 naming its
/// key, with the reference to write instead.
pub fn entry(
    state: &AppState,
    claims: &Claims,
    body: McpServerBody,
    current: Option<&McpServerRecord>,
) -> Result<Entry, ApiError> {
    let old_spec = current.map(spec_of).transpose()?;
    let name = match (&body.name, current) {
        (Some(n), _) => n.trim().to_owned(),
        (None, Some(c)) => c.server.name.clone(),
        (None, None) => {
            return Err(ApiError::field(
                "name",
                "required: the server's name, e.g. `everything` (its tools are registered as `<name>__<tool>`)",
            ));
        }
    };
    toolshed_mcp::spec::check_server_name(&name).map_err(|e| ApiError::field("name", reason(e)))?;
    let transport = match body.transport.as_deref().map(str::trim) {
        Some(t @ ("stdio" | "sse" | "streamable_http" | "http")) => t.to_owned(),
        Some(other) => {
            return Err(ApiError::field(
                "transport",
                format!(
                    "`{}` is not a transport; use `stdio` (a command), `streamable_http` (or `http`) or `sse` (a URL)",
                    clip(other, 40)
                ),
            ));
        }
        None => match (current, &body.url) {
            (Some(c), None) if body.command.is_none() && body.endpoint.is_none() => {
                c.server.transport.clone()
            }
            (_, Some(_)) => "streamable_http".to_owned(),
            _ => match (&body.endpoint, current) {
                (Some(e), _) if e.starts_with("http://") || e.starts_with("https://") => {
                    "streamable_http".to_owned()
                }
                (None, Some(c)) if body.command.is_none() => c.server.transport.clone(),
                _ => "stdio".to_owned(),
            },
        },
    };
    let launch = if transport == "stdio" {
        Launch::Stdio(stdio_launch(&body, old_spec.as_ref())?)
    } else {
        Launch::Http(http_launch(state, &body, old_spec.as_ref())?)
    };
    let timeout = match body.timeout_seconds {
        Some(s) if (1..=3600).contains(&s) => std::time::Duration::from_secs(s),
        Some(s) => {
            return Err(ApiError::field(
                "timeout_seconds",
                format!("{s} is out of range; use 1 to 3600 seconds"),
            ));
        }
        None => old_spec
            .as_ref()
            .map_or(toolshed_mcp::spec::DEFAULT_TIMEOUT, |s| s.timeout),
    };
    let credentials = body
        .credentials
        .clone()
        .or_else(|| old_spec.as_ref().map(|s| s.credentials.clone()))
        .unwrap_or_default();
    let spec = McpServerSpec {
        name: name.clone(),
        launch,
        timeout,
        credentials,
    };
    spec.validate().map_err(|e| match e {
        toolshed_mcp::McpError::InvalidSpec { field, reason, .. } => {
            ApiError::field(&field, reason)
        }
        other => ApiError::invalid_body(other.to_string()),
    })?;
    check_literals(&spec, old_spec.as_ref())?;
    check_named_credentials(&spec)?;
    state
        .credentials()
        .policy()
        .check_declared(tenant_of(claims), &spec.credentials)?;
    let endpoint = match (&spec.launch, &body.endpoint) {
        (Launch::Http(h), _) => h.url.clone(),
        (Launch::Stdio(_), Some(e)) => e.trim().to_owned(),
        (Launch::Stdio(s), None) => command_line(s),
    };
    let description = body
        .description
        .clone()
        .or_else(|| current.map(|c| c.server.description.clone()))
        .unwrap_or_default();
    if description.len() > MAX_DESCRIPTION {
        return Err(ApiError::field(
            "description",
            format!(
                "is {} bytes; the limit is {MAX_DESCRIPTION}",
                description.len()
            ),
        ));
    }
    let tags = body
        .tags
        .clone()
        .or_else(|| current.map(|c| c.server.tags.clone()))
        .unwrap_or_default();
    if tags.len() > MAX_TAGS || tags.iter().any(|t| t.is_empty() || t.len() > MAX_TAG) {
        return Err(ApiError::field(
            "tags",
            format!("give at most {MAX_TAGS} tags of 1 to {MAX_TAG} bytes each"),
        ));
    }
    let team = body
        .team
        .clone()
        .or_else(|| current.and_then(|c| c.server.team.clone()));
    let was_enabled = current.map(|c| c.server.enabled);
    let enabled = body.enabled.or(was_enabled).unwrap_or(true);
    if enabled && was_enabled == Some(false) && claims.role < Role::Admin {
        return Err(ApiError::new(
            ApiCode::Forbidden,
            format!(
                "MCP server `{name}` is disabled (it came from `{}`); enabling it runs its command on this server, which needs the admin role",
                current.map_or("?", |c| c.server.source.as_str())
            ),
        ));
    }
    let was_auto = current.map(|c| c.server.auto_accept);
    let auto_accept = body.auto_accept.or(was_auto).unwrap_or(false);
    if auto_accept && was_auto != Some(true) && claims.role < Role::Admin {
        return Err(ApiError::new(
            ApiCode::Forbidden,
            format!(
                "`auto_accept` makes every change MCP server `{name}` makes to its tools active without review, which needs the admin role"
            ),
        ));
    }
    let source = match (&body.source, current) {
        (Some(s), _) => check_source(s)?,
        (None, Some(c)) => c.server.source.clone(),
        (None, None) => "api".to_owned(),
    };
    let overrides = match &body.overrides {
        Some(o) => {
            for (tool, over) in o {
                check_override(tool, over)?;
            }
            serde_json::to_value(o)
                .map_err(|e| ApiError::internal("cannot serialize overrides", e))?
        }
        None => current.map_or_else(|| json!({}), |c| c.server.overrides.clone()),
    };
    let spec_json = serde_json::to_value(&spec)
        .map_err(|e| ApiError::internal("cannot serialize an MCP server spec", e))?;
    Ok(Entry {
        new: NewMcpServer {
            name,
            tenant: tenant_of(claims).to_owned(),
            spec: spec_json,
            transport,
            endpoint,
            description,
            tags,
            team,
            enabled,
            source,
            overrides,
            created_by: claims.sub.clone(),
            auto_accept,
        },
        spec,
    })
}

/// Refuse the literal `env`/`headers` values a body brings: every one of `spec`'s that
/// `old` (the stored entry) did not already hold under the same key. A literal stored
/// before literals were refused may stay while its key is untouched (it is masked in
/// every view and named at start-up), so such an entry can still be disabled.
fn check_literals(spec: &McpServerSpec, old: Option<&McpServerSpec>) -> Result<(), ApiError> {
    let value = |s: &McpServerSpec, key: &str| match &s.launch {
        Launch::Stdio(l) => l.env.get(key).cloned(),
        Launch::Http(h) => h.headers.get(key).cloned(),
    };
    let problems: Vec<toolshed_api::FieldProblem> = spec
        .literal_values()
        .into_iter()
        .filter(|l| {
            old.is_none_or(|o| {
                o.literal_values().iter().all(|ol| ol.path() != l.path())
                    || value(o, &l.key) != value(spec, &l.key)
            })
        })
        .map(|l| toolshed_api::FieldProblem::new(l.path(), l.fix()))
        .collect();
    match problems.as_slice() {
        [] => Ok(()),
        [one] => Err(ApiError::field(&one.field, one.message.clone())),
        many => Err(ApiError::invalid_body(format!(
            "{} hold literal values, which are never stored (every reader of the entry would see them): {}",
            many.iter()
                .map(|p| format!("`{}`", p.field))
                .collect::<Vec<_>>()
                .join(", "),
            many.iter()
                .map(|p| format!("field `{}`: {}", p.field, p.message))
                .collect::<Vec<_>>()
                .join("; ")
        ))
        .with_fields(many.to_vec())),
    }
}

/// An MCP server entry holding a literal `env`/`headers` value, stored before literals
/// were refused: named at start-up (never its value) so the operator replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLiteral {
    /// The entry's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its tenant.
    pub tenant: String,
    /// The entry: `env.KEY` or `headers.KEY`.
    pub key: String,
}

/// Every entry of every tenant holding literal values, one per key.
pub async fn stored_literals(
    registry: &dyn RegistryStore,
) -> Result<Vec<StoredLiteral>, toolshed_registry::RegistryError> {
    let mut out = Vec::new();
    let mut page = 1;
    loop {
        let got = registry
            .list_mcp_servers(&TenantScope::All, page, toolshed_registry::MAX_PER_PAGE)
            .await?;
        for record in &got.items {
            let Ok(spec) = spec_of(record) else { continue };
            for literal in spec.literal_values() {
                out.push(StoredLiteral {
                    id: record.id.clone(),
                    name: record.server.name.clone(),
                    tenant: record.server.tenant.clone(),
                    key: literal.path(),
                });
            }
        }
        if got.items.is_empty() || u64::from(page) * u64::from(got.per_page) >= got.total {
            return Ok(out);
        }
        page += 1;
    }
}

fn reason(e: toolshed_mcp::McpError) -> String {
    match e {
        toolshed_mcp::McpError::InvalidSpec { reason, .. } => reason,
        other => other.to_string(),
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// `api`, `cli` or `scan:<file>`.
fn check_source(s: &str) -> Result<String, ApiError> {
    let ok = matches!(s, "api" | "cli")
        || s.strip_prefix("scan:")
            .is_some_and(|f| !f.is_empty() && f.len() <= 512 && !f.chars().any(char::is_control));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(ApiError::field(
            "source",
            format!(
                "`{}` is not a source; use `api`, `cli` or `scan:<file>`",
                clip(s, 60)
            ),
        ))
    }
}

fn check_override(tool: &str, over: &McpToolOverride) -> Result<(), ApiError> {
    let field = |f: &str| format!("overrides.{tool}.{f}");
    if tool.is_empty() || tool.len() > 128 {
        return Err(ApiError::field(
            "overrides",
            "tool names are 1 to 128 bytes, as the server names them",
        ));
    }
    if let Some(e) = &over.effects
        && !matches!(e.as_str(), "none" | "sandbox" | "external")
    {
        return Err(ApiError::field(
            &field("effects"),
            format!(
                "`{}` is not one of `none`, `sandbox`, `external`",
                clip(e, 40)
            ),
        ));
    }
    if let Some(i) = &over.idempotency
        && !matches!(i.as_str(), "keyed" | "none")
    {
        return Err(ApiError::field(
            &field("idempotency"),
            format!("`{}` is not one of `keyed`, `none`", clip(i, 40)),
        ));
    }
    if let Some(approval) = &over.approval {
        // Checked the way a tool file's approval is: build a throwaway spec with it.
        let file = json!({"spec_version": "v1", "name": "override-check", "description": "x", "approval": approval});
        let parsed: Result<ToolFile, _> = serde_json::from_value(file);
        match parsed.map(ToolFile::into_spec) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(ApiError::field(&field("approval"), e.to_string())),
            Err(e) => return Err(ApiError::field(&field("approval"), e.to_string())),
        }
    }
    Ok(())
}

/// A stdio launch from the body (over the current one).
fn stdio_launch(
    body: &McpServerBody,
    old: Option<&McpServerSpec>,
) -> Result<StdioLaunch, ApiError> {
    if body.url.is_some() || body.headers.is_some() {
        return Err(ApiError::field(
            if body.url.is_some() { "url" } else { "headers" },
            "a stdio server takes `command` (and `args`, `env`), not a URL; set `transport` to `streamable_http` for an HTTP server",
        ));
    }
    let old = old.and_then(|s| match &s.launch {
        Launch::Stdio(l) => Some(l.clone()),
        Launch::Http(_) => None,
    });
    let (command, args) = match (&body.command, &body.args, &body.endpoint) {
        (Some(c), Some(a), _) => (c.clone(), a.clone()),
        (Some(line), None, _) => split_line("command", line)?,
        (None, Some(_), _) => {
            return Err(ApiError::field(
                "args",
                "`args` needs `command`, the program they are given to",
            ));
        }
        (None, None, Some(line)) => split_line("endpoint", line)?,
        (None, None, None) => match &old {
            Some(l) => (l.command.clone(), l.args.clone()),
            None => {
                return Err(ApiError::field(
                    "command",
                    "required for a stdio server: e.g. `npx -y @modelcontextprotocol/server-everything` (or `command` with `args`)",
                ));
            }
        },
    };
    if args.len() > MAX_ARGS || args.iter().any(|a| a.contains('\0')) || command.contains('\0') {
        return Err(ApiError::field(
            "args",
            format!("give at most {MAX_ARGS} arguments, none with a NUL byte"),
        ));
    }
    Ok(StdioLaunch {
        command,
        args,
        env: body
            .env
            .clone()
            .or_else(|| old.as_ref().map(|l| l.env.clone()))
            .unwrap_or_default(),
        network: body
            .network
            .or_else(|| old.as_ref().and_then(|l| l.network)),
    })
}

fn split_line(field: &str, line: &str) -> Result<(String, Vec<String>), ApiError> {
    if line.len() > MAX_COMMAND_LINE {
        return Err(ApiError::field(
            field,
            format!("is {} bytes; the limit is {MAX_COMMAND_LINE}", line.len()),
        ));
    }
    let mut words = split_words(line).map_err(|why| ApiError::field(field, why))?;
    if words.is_empty() {
        return Err(ApiError::field(
            field,
            "is empty; give the server's command line, e.g. `npx -y @modelcontextprotocol/server-everything`",
        ));
    }
    let command = words.remove(0);
    Ok((command, words))
}

/// Split a command line into words as a POSIX shell would, without running one: blanks
/// separate words, `'…'` keeps everything literally, `"…"` keeps everything but `\"`
/// and `\\`, and a backslash outside quotes escapes the next character. Nothing else is
/// special: `;`, `|`, `&`, `$(…)` and globs are characters of a word.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("has an unclosed `'` quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("has an unclosed `\"` quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("has an unclosed `\"` quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err("ends with a lone backslash".into()),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// A stdio launch as one command line (quoted where a word needs it), for the
/// `endpoint` AgentBreeder's clients show.
fn command_line(l: &StdioLaunch) -> String {
    std::iter::once(&l.command)
        .chain(&l.args)
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./@:=+,%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An HTTP launch from the body (over the current one); a URL the SSRF guard refuses
/// by its literal address (loopback, private, link-local such as the metadata service)
/// is refused now, a name when the client resolves it.
fn http_launch(
    state: &AppState,
    body: &McpServerBody,
    old: Option<&McpServerSpec>,
) -> Result<HttpLaunch, ApiError> {
    if body.command.is_some() || body.args.is_some() || body.env.is_some() {
        let field = if body.command.is_some() {
            "command"
        } else if body.args.is_some() {
            "args"
        } else {
            "env"
        };
        return Err(ApiError::field(
            field,
            "an HTTP server takes `url` (and `headers`), not a command; set `transport` to `stdio` for a command",
        ));
    }
    let old = old.and_then(|s| match &s.launch {
        Launch::Http(h) => Some(h.clone()),
        Launch::Stdio(_) => None,
    });
    let (field, url) = match (&body.url, &body.endpoint) {
        (Some(u), _) => ("url", u.trim().to_owned()),
        (None, Some(e)) => ("endpoint", e.trim().to_owned()),
        (None, None) => match &old {
            Some(h) => ("url", h.url.clone()),
            None => {
                return Err(ApiError::field(
                    "url",
                    "required for an HTTP server: e.g. `https://mcp.example.com/mcp`",
                ));
            }
        },
    };
    check_url_target(&state.config().dispatcher.http, field, &url)?;
    Ok(HttpLaunch {
        url,
        headers: body
            .headers
            .clone()
            .or_else(|| old.as_ref().map(|h| h.headers.clone()))
            .unwrap_or_default(),
    })
}

/// Refuse a URL whose host is an address (or `localhost`) the SSRF guard refuses.
pub fn check_url_target(
    policy: &toolshed_dispatch::HttpPolicy,
    field: &str,
    url: &str,
) -> Result<(), ApiError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(ApiError::field(
            field,
            format!("`{}` is not an http:// or https:// URL", clip(url, 80)),
        ));
    };
    if scheme != "http" && scheme != "https" {
        return Err(ApiError::field(
            field,
            format!("`{}` is not an http:// or https:// URL", clip(url, 80)),
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err(ApiError::field(field, "the URL has no host"));
    }
    let lower = host.to_ascii_lowercase();
    let ip = if lower == "localhost" || lower.ends_with(".localhost") {
        Some(std::net::IpAddr::from([127, 0, 0, 1]))
    } else {
        host.parse::<std::net::IpAddr>().ok()
    };
    if let Some(ip) = ip
        && let Err(why) = policy.check(host, ip)
    {
        return Err(ApiError::field(
            field,
            format!(
                "`{host}` is {why}, which this server does not connect to (the SSRF guard); use a public address, or ask the operator to allow it"
            ),
        ));
    }
    Ok(())
}

/// Every `${NAME}` in `env` and `headers` must be one of the spec's `credentials`.
fn check_named_credentials(spec: &McpServerSpec) -> Result<(), ApiError> {
    let (kind, values): (&str, Vec<(&String, &String)>) = match &spec.launch {
        Launch::Stdio(s) => ("env", s.env.iter().collect()),
        Launch::Http(h) => ("headers", h.headers.iter().collect()),
    };
    for (key, value) in values {
        for name in named_credentials(value) {
            if !spec.credentials.iter().any(|c| c == name) {
                return Err(ApiError::field(
                    &format!("{kind}.{key}"),
                    format!(
                        "names `${{{name}}}`, which is not in `credentials`; add `{name}` to `credentials` (it must be in the server's credentials policy) or remove it"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The names a value refers to as `${NAME}`.
fn named_credentials(value: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        names.push(&after[..end]);
        rest = &after[end + 1..];
    }
    names
}

/// The spec a stored entry holds.
pub fn spec_of(record: &McpServerRecord) -> Result<McpServerSpec, ApiError> {
    serde_json::from_value(record.server.spec.clone()).map_err(|e| {
        ApiError::new(
            ApiCode::InvalidDefinition,
            format!(
                "MCP server `{}` has a stored spec this server cannot read ({e}); replace it with PUT /api/v1/mcp-servers/{}",
                record.server.name, record.id
            ),
        )
    })
}

/// The entry as the API shows it: literal `env`/`headers` values masked and named.
pub fn view(record: &McpServerRecord) -> McpServerView {
    let stored = spec_of(record).ok();
    let literal_values = stored
        .as_ref()
        .map(|s| {
            s.literal_values()
                .iter()
                .map(toolshed_mcp::spec::LiteralValue::path)
                .collect()
        })
        .unwrap_or_default();
    // A literal value is never shown, to any role.
    let spec = stored.map(|s| s.masked());
    let (command, args, env, url, headers, network) = match spec.as_ref().map(|s| &s.launch) {
        Some(Launch::Stdio(s)) => (
            Some(s.command.clone()),
            s.args.clone(),
            s.env.clone(),
            None,
            BTreeMap::new(),
            s.network,
        ),
        Some(Launch::Http(h)) => (
            None,
            Vec::new(),
            BTreeMap::new(),
            Some(h.url.clone()),
            h.headers.clone(),
            None,
        ),
        None => (
            None,
            Vec::new(),
            BTreeMap::new(),
            None,
            BTreeMap::new(),
            None,
        ),
    };
    let s = &record.server;
    McpServerView {
        id: record.id.clone(),
        name: s.name.clone(),
        endpoint: s.endpoint.clone(),
        transport: s.transport.clone(),
        status: record.status.as_str().to_owned(),
        tool_count: record.tool_count,
        last_ping_at: record.last_ping_at_ms.map(crate::views::time),
        created_at: crate::views::time(record.created_at_ms),
        updated_at: crate::views::time(record.updated_at_ms),
        timeout_seconds: spec
            .as_ref()
            .map_or(toolshed_mcp::spec::DEFAULT_TIMEOUT.as_secs(), |s| {
                s.timeout.as_secs()
            }),
        description: s.description.clone(),
        tags: s.tags.clone(),
        team: s.team.clone(),
        enabled: s.enabled,
        source: s.source.clone(),
        tenant: s.tenant.clone(),
        revision: record.revision,
        command,
        args,
        env,
        url,
        headers,
        credentials: spec.map(|s| s.credentials).unwrap_or_default(),
        literal_values,
        network,
        last_error: record.last_error.clone(),
        overrides: s.overrides.clone(),
        created_by: s.created_by.clone(),
        auto_accept: s.auto_accept,
        pending_changes: record.pending_changes,
    }
}

/// The principal an entry's connection resolves its credentials for: the entry's
/// tenant (one connection serves every caller of the tenant).
pub fn connection_principal(state: &AppState, record: &McpServerRecord) -> Principal {
    Principal {
        iss: state.config().issuer.clone(),
        sub: format!("mcp-server:{}", record.server.name),
        tenant: Some(record.server.tenant.clone()),
    }
}

/// The hub's connection for an entry, refusing a disabled one.
pub fn connection(state: &AppState, record: &McpServerRecord) -> Result<Arc<McpServer>, ApiError> {
    if !record.server.enabled {
        return Err(ApiError::new(
            ApiCode::McpServerDisabled,
            format!(
                "MCP server `{}` is disabled (registered from `{}`): an admin reviews and enables it first (PUT /api/v1/mcp-servers/{} with {{\"enabled\": true}}, or `toolshed registry mcp enable {}`)",
                record.server.name, record.server.source, record.id, record.server.name
            ),
        ));
    }
    let spec = spec_of(record)?;
    let credentials: Arc<dyn toolshed_core::CredentialProvider> = state.credentials().clone();
    Ok(state.mcp().server(
        &record.server.tenant,
        &spec,
        credentials,
        Some(connection_principal(state, record)),
    ))
}

/// End an entry's connection, if it has one (after a delete, or when it was disabled):
/// its process stops now rather than at the server's shutdown.
pub async fn stop(state: &AppState, record: &McpServerRecord) {
    let Ok(spec) = spec_of(record) else { return };
    let credentials: Arc<dyn toolshed_core::CredentialProvider> = state.credentials().clone();
    state
        .mcp()
        .server(
            &record.server.tenant,
            &spec,
            credentials,
            Some(connection_principal(state, record)),
        )
        .shutdown()
        .await;
}

/// A client failure as the 502 `MCP_SERVER_UNREACHABLE`, quoting the end of a stdio
/// server's stderr.
pub fn unreachable(
    record: &McpServerRecord,
    server: &McpServer,
    e: &toolshed_mcp::McpError,
) -> ApiError {
    let stderr = server.stderr();
    let tail: String = {
        let t = stderr.trim_end();
        let start = t.len().saturating_sub(STDERR_QUOTE);
        let start = (start..=t.len())
            .find(|i| t.is_char_boundary(*i))
            .unwrap_or(t.len());
        t[start..].to_owned()
    };
    let mut message = format!(
        "MCP server `{}` is unreachable: {e} [{}]",
        record.server.name,
        e.code()
    );
    if !tail.is_empty() {
        message.push_str(&format!("; the end of its stderr: {tail}"));
    }
    ApiError::new(ApiCode::McpServerUnreachable, message)
}

/// The registry tools of a discover: each tool's default spec from its hints, the
/// owner's overrides over it, the entry's timeout; each with what its server sent (the
/// sanitised `McpTool`), which the store compares with what was accepted.
pub fn registry_tools(
    record: &McpServerRecord,
    spec: &McpServerSpec,
    tools: &[McpTool],
    created_by: &str,
) -> Result<Vec<McpFound>, ApiError> {
    let overrides: BTreeMap<String, McpToolOverride> =
        serde_json::from_value(record.server.overrides.clone()).unwrap_or_default();
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let mut tool_spec = tool.spec().map_err(|e| {
            ApiError::new(
                ApiCode::McpServerUnreachable,
                format!(
                    "MCP server `{}` lists tool `{}`, which cannot be registered: {e}",
                    record.server.name,
                    clip(&tool.name, 80)
                ),
            )
        })?;
        tool_spec.timeout = Some(spec.timeout);
        let mut file = ToolFile::from_spec(&tool_spec);
        file.tool_type = Some(MCP_TOOL_TYPE.to_owned());
        file.endpoint = Some(tool.endpoint());
        file.team = record.server.team.clone();
        if let Some(over) = overrides.get(&tool.name) {
            apply_override(&mut file, &tool.name, over)?;
        }
        // The stored definition must build, or the tool could never run.
        file.clone().into_spec().map_err(|e| {
            ApiError::field(
                &format!("overrides.{}", tool.name),
                format!("the tool's spec with these overrides is refused: {e}"),
            )
        })?;
        let definition = serde_json::to_value(&file)
            .map_err(|e| ApiError::internal("cannot serialize a tool definition", e))?;
        let sent = serde_json::to_value(tool)
            .map_err(|e| ApiError::internal("cannot serialize an MCP tool", e))?;
        out.push(McpFound {
            tool: NewTool {
                name: tool.qualified_name.clone(),
                description: tool.description.clone(),
                tool_type: MCP_TOOL_TYPE.to_owned(),
                source: MCP_TOOL_TYPE.to_owned(),
                endpoint: Some(tool.endpoint()),
                version: None,
                definition,
                created_by: created_by.to_owned(),
                tenant: record.server.tenant.clone(),
                code: None,
            },
            sent,
        });
    }
    Ok(out)
}

fn apply_override(file: &mut ToolFile, tool: &str, over: &McpToolOverride) -> Result<(), ApiError> {
    fn parse<T: serde::de::DeserializeOwned>(field: &str, v: &str) -> Result<T, ApiError> {
        serde_json::from_value(Value::String(v.to_owned()))
            .map_err(|e| ApiError::field(field, e.to_string()))
    }
    if let Some(e) = &over.effects {
        file.effects = Some(parse(&format!("overrides.{tool}.effects"), e)?);
    }
    if let Some(i) = &over.idempotency {
        file.idempotency = Some(parse(&format!("overrides.{tool}.idempotency"), i)?);
        // Keyed replaces the hint's "a repeat is not the same call".
        file.allow_unkeyed_external = i != "keyed";
    }
    if let Some(a) = &over.approval {
        file.approval = Some(a.clone());
    }
    Ok(())
}

/// A discovered tool as the discover answer shows it.
pub fn discovered(record: &ToolRecord) -> McpDiscoveredTool {
    let file: Option<ToolFile> = serde_json::from_value(record.definition.clone()).ok();
    let endpoint = record.endpoint.clone().unwrap_or_default();
    let name = toolshed_mcp::parse_endpoint(&endpoint)
        .map(|(_, tool)| tool)
        .unwrap_or_else(|_| record.name.clone());
    McpDiscoveredTool {
        name,
        description: record.description.clone(),
        schema_definition: file
            .as_ref()
            .and_then(|f| f.input_schema.clone())
            .unwrap_or_else(|| json!({"type": "object"})),
        tool_id: record.id.clone(),
        registry_name: record.name.clone(),
        endpoint,
        effects: file.as_ref().and_then(|f| f.effects).map_or_else(
            || "none".to_owned(),
            |e| {
                serde_json::to_value(e)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            },
        ),
        approval: file
            .and_then(|f| f.approval)
            .unwrap_or_else(|| Value::String("never".into())),
        hidden_characters: crate::views::hidden_characters(&record.description, &record.definition),
    }
}

/// A held-back change as the API shows it: the accepted definition beside what the
/// server sends now. `None` when what was stored is not an MCP tool this server reads.
pub fn pending_view(p: &McpPending) -> Option<McpPendingView> {
    let sent: McpTool = serde_json::from_value(p.sent.clone()).ok()?;
    let accepted = discovered(&p.tool);
    let mut hidden = Vec::new();
    toolshed_core::text::hidden_in_text("description", &sent.description, &mut hidden);
    toolshed_core::text::hidden_in_json("input_schema", &sent.input_schema, &mut hidden);
    if let Some(o) = &sent.output_schema {
        toolshed_core::text::hidden_in_json("output_schema", o, &mut hidden);
    }
    if let Some(t) = &sent.hints.title {
        toolshed_core::text::hidden_in_text("title", t, &mut hidden);
    }
    hidden.truncate(64);
    Some(McpPendingView {
        name: sent.name.clone(),
        registry_name: p.tool.name.clone(),
        tool_id: p.tool.id.clone(),
        revision: p.tool.revision,
        description: accepted.description,
        schema_definition: accepted.schema_definition,
        pending_description: sent.description.clone(),
        pending_schema_definition: sent.input_schema.clone(),
        pending_output_schema: sent.output_schema.clone(),
        pending_hints: serde_json::to_value(&sent.hints).unwrap_or_else(|_| json!({})),
        since: crate::views::time(p.since_ms),
        hidden_characters: hidden
            .into_iter()
            .map(|h| toolshed_api::views::HiddenCharactersView {
                field: h.field,
                kind: h.kind.as_str().to_owned(),
                count: h.count,
            })
            .collect(),
    })
}

/// A registry tool of endpoint `mcp:<server>/<tool>` as the pipeline tool that calls
/// it: the entry of its tenant named `<server>` (enabled), its connection from the hub,
/// the stored definition as the spec, every call's diagnostics naming the server, the
/// tool and the era.
pub async fn runnable(
    state: &AppState,
    record: &ToolRecord,
    endpoint: &str,
) -> Result<Tool, ApiError> {
    let (server_name, tool_name) = toolshed_mcp::parse_endpoint(endpoint).map_err(|e| {
        ApiError::new(
            ApiCode::InvalidDefinition,
            format!("tool `{}` has an invalid MCP endpoint: {e}", record.name),
        )
    })?;
    let entry = state
        .registry()
        .find_mcp_server(&record.tenant, &server_name)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                ApiCode::InvalidDefinition,
                format!(
                    "tool `{}` calls MCP server `{server_name}`, which tenant `{}` no longer has; register it again and discover its tools",
                    record.name, record.tenant
                ),
            )
        })?;
    let server = connection(state, &entry)?;
    let file: ToolFile = serde_json::from_value(record.definition.clone()).map_err(|e| {
        ApiError::internal(
            &format!("tool {} has an unreadable definition", record.id),
            e,
        )
    })?;
    let mut spec = file.clone().into_spec().map_err(|e| {
        ApiError::new(
            ApiCode::InvalidDefinition,
            format!(
                "tool `{}` has a definition this server refuses ({e}); discover its server again",
                record.name
            ),
        )
    })?;
    spec.meta.revision = Some(record.revision.to_string());
    let tool = McpTool {
        server: server_name.clone(),
        name: tool_name.clone(),
        qualified_name: record.name.clone(),
        description: record.description.clone(),
        input_schema: file
            .input_schema
            .clone()
            .unwrap_or_else(|| json!({"type": "object"})),
        output_schema: file.output_schema.clone(),
        hints: toolshed_mcp::ToolHints::default(),
    };
    let built = toolshed_mcp::tool(server.clone(), &tool, spec.clone()).map_err(|e| {
        ApiError::new(
            ApiCode::InvalidDefinition,
            format!("tool `{}` cannot be built ({e})", record.name),
        )
    })?;
    let audited = Audited {
        inner: built.handler().clone(),
        server,
        tool: tool_name,
    };
    Tool::from_spec(spec, Arc::new(audited)).map_err(|e| {
        ApiError::new(
            ApiCode::InvalidDefinition,
            format!("tool `{}` cannot be built ({e})", record.name),
        )
    })
}

/// A handler that leaves the MCP side of every call in its diagnostics (`mcp`: server,
/// tool, era, protocol version), where `runs show` finds it.
struct Audited {
    inner: Arc<dyn Handler>,
    server: Arc<McpServer>,
    tool: String,
}

impl Audited {
    fn stamp(&self, diagnostics: &mut toolshed_core::Diagnostics) {
        if diagnostics.mcp.is_none() {
            let info = self.server.info();
            diagnostics.mcp = Some(Box::new(McpCall {
                server: self.server.name().to_owned(),
                tool: self.tool.clone(),
                era: info
                    .as_ref()
                    .map(|i| i.era.as_str().to_owned())
                    .unwrap_or_default(),
                protocol_version: info.map(|i| i.protocol_version).unwrap_or_default(),
            }));
        }
    }
}

impl Handler for Audited {
    fn call(&self, args: Value, ctx: ToolContext) -> HandlerFuture {
        let inner = self.inner.clone();
        let me = Audited {
            inner: self.inner.clone(),
            server: self.server.clone(),
            tool: self.tool.clone(),
        };
        Box::pin(async move {
            let mut reply: Reply = inner.call(args, ctx).await;
            me.stamp(&mut reply.diagnostics);
            if let Ok(ToolOutput::Stream(stream)) = reply.output {
                use futures_util::StreamExt;
                let me = Arc::new(me);
                let stamped = stream.map(move |item| match item {
                    Ok(Chunk::Diagnostics(mut d)) => {
                        me.stamp(&mut d);
                        Ok(Chunk::Diagnostics(d))
                    }
                    other => other,
                });
                reply.output = Ok(ToolOutput::Stream(stamped.boxed()));
            }
            reply
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell_and_nothing_runs() {
        let ok = |line: &str| split_words(line).expect(line);
        assert_eq!(
            ok("npx @modelcontextprotocol/server-filesystem /workspace"),
            [
                "npx",
                "@modelcontextprotocol/server-filesystem",
                "/workspace"
            ]
        );
        assert_eq!(
            ok(r#"node "my server.js" 'a b' c\ d"#),
            ["node", "my server.js", "a b", "c d"]
        );
        assert_eq!(
            ok(r#"echo "say \"hi\"" '$HOME'"#),
            ["echo", r#"say "hi""#, "$HOME"]
        );
        // Metacharacters are just characters of a word.
        assert_eq!(
            ok("srv; rm -rf / | cat $(id) &"),
            ["srv;", "rm", "-rf", "/", "|", "cat", "$(id)", "&"]
        );
        assert_eq!(ok("  a   ''  b "), ["a", "", "b"]);
        assert!(ok("   ").is_empty());
        for bad in ["a 'b", "a \"b", "a \\"] {
            assert!(split_words(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_command_line_round_trips_through_its_quoting() {
        let l = StdioLaunch {
            command: "node".into(),
            args: vec![
                "my server.js".into(),
                "it's".into(),
                "-y".into(),
                String::new(),
            ],
            env: BTreeMap::new(),
            network: None,
        };
        let line = command_line(&l);
        let mut words = split_words(&line).expect("quoted");
        assert_eq!(words.remove(0), "node");
        assert_eq!(words, l.args);
    }

    #[test]
    fn named_credentials_are_found() {
        assert_eq!(
            named_credentials("Bearer ${GITHUB_TOKEN}"),
            ["GITHUB_TOKEN"]
        );
        assert_eq!(named_credentials("${A}-${B} ${unclosed"), ["A", "B"]);
        assert!(named_credentials("plain").is_empty());
    }

    #[test]
    fn literal_loopback_and_metadata_addresses_are_refused() {
        let policy = toolshed_dispatch::HttpPolicy::default();
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://localhost/mcp",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]:3000/mcp",
            "http://user@10.0.0.5/mcp",
        ] {
            let e = check_url_target(&policy, "url", url).expect_err(url);
            assert_eq!(e.code(), ApiCode::InvalidBody, "{url}");
            assert!(e.message().contains("SSRF"), "{url}: {}", e.message());
        }
        check_url_target(&policy, "url", "https://mcp.example.com/mcp").expect("a public name");
        assert!(check_url_target(&policy, "url", "ftp://x").is_err());
    }
}
