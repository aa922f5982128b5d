//! How agent.yaml and a project's `mcp-servers/NAME.(yaml|json)` files name MCP
//! servers: bread's `plugins.mcp_client` (with the common `mcpServers` key as an alias),
//! AgentBreeder's top-level `mcp_servers`, and `ref: mcp-servers/NAME` with its options.
//! Parsing only: nothing here starts a server.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolshed_mcp::{HttpLaunch, Launch, McpError, McpServerSpec, StdioLaunch};

/// The keys of a server entry (or a `ref: mcp-servers/NAME`) that choose and shape its
/// tools rather than say how to reach it.
const OPTION_KEYS: &[&str] = &["prefix", "alias", "include", "exclude", "overrides"];

/// Which of a server's tools join the agent, how they are named, and what the agent's
/// owner declares about them over the server's annotations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolOptions {
    /// The prefix of its tools' names, `<prefix>__<tool>`: the server's name when
    /// absent; `""` gives the tools their bare names. (`alias` is accepted too.)
    #[serde(default, alias = "alias", skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Only these tools (as the server names them) join; all of them when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// These tools (as the server names them) do not join.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Per tool (as the server names it): declarations over the annotation defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, ToolOverride>,
}

impl McpToolOptions {
    /// Whether nothing is set.
    pub fn is_default(&self) -> bool {
        self == &McpToolOptions::default()
    }
}

/// What the agent's owner declares about one MCP tool, in the tool file's words; every
/// field absent keeps what the server's annotations gave (`McpTool::spec`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// `none`, `sandbox` or `external`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects: Option<toolshed_core::Effects>,
    /// `keyed` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<toolshed_core::Idempotency>,
    /// `never`, `always`, `{when: "<CEL over args>"}`, optionally with `four_eyes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
    /// Timeout in seconds.
    #[serde(default, alias = "timeout", skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// Timeout in milliseconds (finer; do not set both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Crash-window bound for keyed calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Opt out of "external effects need keyed idempotency".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_unkeyed_external: Option<bool>,
}

/// One MCP server the agent defines itself (in `plugins.mcp_client`, AgentBreeder's
/// `mcp_servers`, or a project file): how to reach it and which tools join.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpServerEntry {
    /// How to reach it, checked.
    pub spec: McpServerSpec,
    /// Which of its tools join and how.
    pub options: McpToolOptions,
}

/// One entry of AgentBreeder's `mcp_servers:`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum McpServerRef {
    /// `{ref: mcp/NAME}` without a `url`: resolved as `ref: mcp-servers/NAME` is.
    Named {
        /// The server's name.
        name: String,
    },
    /// `{ref: mcp/NAME, url: …}`: a Streamable HTTP server the entry defines.
    Defined(Box<McpServerEntry>),
    /// `{ref: mcp/NAME, image, port}` without a `url`: a sidecar container AgentBreeder
    /// deploys. Kept (the registry stores such agents as given); an agent using one does
    /// not start here, since toolshed runs no containers.
    Sidecar {
        /// The server's name.
        name: String,
    },
}

impl McpServerRef {
    /// The server's name.
    pub fn name(&self) -> &str {
        match self {
            McpServerRef::Named { name } | McpServerRef::Sidecar { name } => name,
            McpServerRef::Defined(e) => &e.spec.name,
        }
    }
}

/// The flat shape of a server everywhere agent.yaml or a project file writes one: the
/// shape of the clients' own config files (`command`/`args`/`env`, or `url`/`headers`),
/// plus `transport` (or `type`), `network`, `timeout_seconds` and `credentials`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlatServer {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, alias = "type")]
    transport: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    network: Option<bool>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default, alias = "timeout")]
    timeout_seconds: Option<u64>,
    #[serde(default)]
    credentials: Vec<String>,
}

/// `plugins.mcp_client`: `{servers: {NAME: {command, args, env} | {url, headers}}}`
/// (`mcpServers` is accepted for `servers`). Problems are pushed, each naming the field.
/// `servers` may also be a list of names (`servers: [zendesk, slack]`), each resolved
/// as `ref: mcp-servers/NAME` is; those names are the second part of the answer.
pub(crate) fn parse_mcp_client(
    cfg: &Value,
    problems: &mut Vec<String>,
) -> (BTreeMap<String, McpServerEntry>, Vec<String>) {
    let at = "plugins.mcp_client";
    let mut servers = BTreeMap::new();
    let mut names = Vec::new();
    let Value::Object(cfg) = cfg else {
        problems.push(format!(
            "field `{at}`: must be a mapping like `{{servers: {{NAME: {{command: npx, args: [-y, PACKAGE]}}}}}}`"
        ));
        return (servers, names);
    };
    for (key, value) in cfg {
        if key != "servers" && key != "mcpServers" {
            problems.push(format!(
                "field `{at}.{key}`: unknown; the servers go under `{at}.servers`"
            ));
            continue;
        }
        if let Value::Array(items) = value {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(n) if !names.contains(n) => names.push(n.clone()),
                    Value::String(n) => problems.push(format!(
                        "field `{at}.{key}[{i}]`: `{n}` is listed twice; keep one"
                    )),
                    _ => problems.push(format!(
                        "field `{at}.{key}[{i}]`: must be a server name (defined in mcp-servers/NAME.yaml or the registry)"
                    )),
                }
            }
            continue;
        }
        let Value::Object(map) = value else {
            problems.push(format!(
                "field `{at}.{key}`: must be a mapping of server name to `{{command, args, env}}` or `{{url, headers}}`, or a list of server names"
            ));
            continue;
        };
        for (name, entry) in map {
            let here = format!("{at}.{key}.{name}");
            if servers.contains_key(name) {
                problems.push(format!(
                    "field `{here}`: the server `{name}` is defined twice (under `servers` and `mcpServers`); keep one"
                ));
                continue;
            }
            match parse_server(name, entry, &here) {
                Ok(e) => {
                    servers.insert(name.clone(), e);
                }
                Err(e) => problems.push(e),
            }
        }
    }
    (servers, names)
}

/// AgentBreeder's `mcp_servers: [{ref: mcp/NAME, transport, url}]`.
pub(crate) fn parse_mcp_servers(v: Value, problems: &mut Vec<String>) -> Vec<McpServerRef> {
    let Value::Array(items) = v else {
        problems.push(
            "field `mcp_servers`: must be a list of `{ref: mcp/NAME}` (optionally with `url`)"
                .into(),
        );
        return Vec::new();
    };
    let mut out: Vec<McpServerRef> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("mcp_servers[{i}]");
        match parse_mcp_servers_item(item, &at) {
            Ok(r) if out.iter().any(|o| o.name() == r.name()) => problems.push(format!(
                "field `{at}.ref`: the server `{}` is listed twice; keep one",
                r.name()
            )),
            Ok(r) => out.push(r),
            Err(e) => problems.push(e),
        }
    }
    out
}

fn parse_mcp_servers_item(item: Value, at: &str) -> Result<McpServerRef, String> {
    let Value::Object(mut m) = item else {
        return Err(format!(
            "field `{at}`: must be a mapping like `{{ref: mcp/NAME}}`"
        ));
    };
    let name = match m.remove("ref") {
        Some(Value::String(r)) => match r.split_once('/') {
            Some(("mcp" | "mcp-servers", n)) if !n.is_empty() && !n.contains('/') => n.to_owned(),
            _ => {
                return Err(format!(
                    "field `{at}.ref`: `{r}` must be `mcp/NAME` (or `mcp-servers/NAME`)"
                ));
            }
        },
        Some(_) => {
            return Err(format!(
                "field `{at}.ref`: must be a string like `mcp/zendesk`"
            ));
        }
        None => {
            return Err(format!(
                "field `{at}.ref` is missing; e.g. `ref: mcp/zendesk`"
            ));
        }
    };
    // With a `url`, AgentBreeder forwards to it and the sidecar fields do not matter.
    if !m.contains_key("url") && (m.contains_key("image") || m.contains_key("port")) {
        return Ok(McpServerRef::Sidecar { name });
    }
    m.remove("image");
    m.remove("port");
    // AgentBreeder's `sse` is reached over Streamable HTTP, as the registry's entries are.
    if m.get("transport").and_then(Value::as_str) == Some("sse") {
        m.insert("transport".into(), Value::String("streamable_http".into()));
    }
    if m.is_empty() {
        return Ok(McpServerRef::Named { name });
    }
    if !m.contains_key("url") {
        let transport = m.get("transport").and_then(Value::as_str).unwrap_or("");
        if m.keys().all(|k| k == "transport") && transport == "stdio" {
            // `transport: stdio` is AgentBreeder's default: nothing to define.
            return Ok(McpServerRef::Named { name });
        }
        return Err(format!(
            "field `{at}`: only a `url` (a Streamable HTTP server) can be given here; define a stdio server under `plugins.mcp_client.servers.{name}` or in `mcp-servers/{name}.yaml`"
        ));
    }
    parse_server(&name, &Value::Object(m), at).map(|e| McpServerRef::Defined(Box::new(e)))
}

/// The options of a `ref: mcp-servers/NAME` entry: every other key of the entry.
pub(crate) fn parse_options(m: Map<String, Value>, at: &str) -> Result<McpToolOptions, String> {
    let options: McpToolOptions = deserialize(Value::Object(m), at)?;
    check_options(&options, at)?;
    Ok(options)
}

/// A server entry named `name` at `at` (for messages): the flat shape, or, in a
/// project file, the `McpServerSpec` shape with `launch:`.
pub(crate) fn parse_server(name: &str, v: &Value, at: &str) -> Result<McpServerEntry, String> {
    let Value::Object(map) = v else {
        return Err(format!(
            "field `{at}`: must be a mapping like `{{command: npx, args: [-y, PACKAGE]}}` or `{{url: https://…}}`"
        ));
    };
    let mut launch = Map::new();
    let mut options = Map::new();
    for (k, v) in map {
        if OPTION_KEYS.contains(&k.as_str()) {
            options.insert(k.clone(), v.clone());
        } else {
            launch.insert(k.clone(), v.clone());
        }
    }
    let options = parse_options(options, at)?;
    let spec = if launch.contains_key("launch") {
        // The registry's own shape, as `McpServerSpec` serializes.
        let mut spec: McpServerSpec = deserialize(Value::Object(launch), at)?;
        if spec.name != name {
            return Err(format!(
                "field `{at}.name`: `{}` differs from the server's name `{name}`; make them equal",
                spec.name
            ));
        }
        spec.name = name.to_owned();
        spec
    } else {
        let flat: FlatServer = deserialize(Value::Object(launch), at)?;
        flat_spec(name, flat, at)?
    };
    spec.validate().map_err(|e| spec_problem(&e, at))?;
    Ok(McpServerEntry { spec, options })
}

fn flat_spec(name: &str, f: FlatServer, at: &str) -> Result<McpServerSpec, String> {
    if let Some(n) = &f.name
        && n != name
    {
        return Err(format!(
            "field `{at}.name`: `{n}` differs from the server's name `{name}`; make them equal or leave `name` out"
        ));
    }
    let transport = match (f.transport.as_deref(), &f.command, &f.url) {
        (Some("stdio"), _, _) => "stdio",
        (Some("streamable_http" | "streamable-http" | "http"), _, _) => "http",
        (Some("sse"), _, _) => {
            return Err(format!(
                "field `{at}.transport`: the legacy HTTP+SSE transport is not supported; use a server's Streamable HTTP endpoint with `transport: streamable_http`"
            ));
        }
        (Some(other), _, _) => {
            return Err(format!(
                "field `{at}.transport`: `{other}` is not a transport; use `stdio` or `streamable_http`"
            ));
        }
        (None, Some(_), None) => "stdio",
        (None, None, Some(_)) => "http",
        (None, Some(_), Some(_)) => {
            return Err(format!(
                "field `{at}`: has both `command` and `url`; a server is either started (`command`) or reached (`url`)"
            ));
        }
        (None, None, None) => {
            return Err(format!(
                "field `{at}`: needs `command` (a stdio server, e.g. `command: npx` with `args: [-y, PACKAGE]`) or `url` (a Streamable HTTP server)"
            ));
        }
    };
    let launch = if transport == "stdio" {
        for (field, set) in [("url", f.url.is_some()), ("headers", !f.headers.is_empty())] {
            if set {
                return Err(format!(
                    "field `{at}.{field}`: a stdio server takes `command`, `args`, `env` and `network`, not `{field}`"
                ));
            }
        }
        let Some(command) = f.command else {
            return Err(format!(
                "field `{at}.command` is missing; a stdio server needs the program to start"
            ));
        };
        Launch::Stdio(StdioLaunch {
            command,
            args: f.args,
            env: f.env,
            network: f.network,
        })
    } else {
        for (field, set) in [
            ("command", f.command.is_some()),
            ("args", !f.args.is_empty()),
            ("env", !f.env.is_empty()),
            ("network", f.network.is_some()),
        ] {
            if set {
                return Err(format!(
                    "field `{at}.{field}`: a Streamable HTTP server takes `url` and `headers`, not `{field}`"
                ));
            }
        }
        let Some(url) = f.url else {
            return Err(format!(
                "field `{at}.url` is missing; a Streamable HTTP server needs its endpoint"
            ));
        };
        Launch::Http(HttpLaunch {
            url,
            headers: f.headers,
        })
    };
    Ok(McpServerSpec {
        name: name.to_owned(),
        launch,
        timeout: f
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(toolshed_mcp::spec::DEFAULT_TIMEOUT),
        credentials: f.credentials,
    })
}

fn check_options(o: &McpToolOptions, at: &str) -> Result<(), String> {
    if let Some(p) = &o.prefix
        && !p.is_empty()
    {
        toolshed_mcp::spec::check_server_name(p).map_err(|e| match e {
            McpError::InvalidSpec { reason, .. } => {
                format!("field `{at}.prefix`: `{p}` {reason}; or `\"\"` for the bare tool names")
            }
            other => format!("field `{at}.prefix`: {other}"),
        })?;
    }
    for (tool, o) in &o.overrides {
        if o.timeout_seconds.is_some() && o.timeout_ms.is_some() {
            return Err(format!(
                "field `{at}.overrides.{tool}`: set `timeout_seconds` or `timeout_ms`, not both"
            ));
        }
    }
    Ok(())
}

/// A spec's own check as a problem naming the field where agent.yaml wrote it.
fn spec_problem(e: &McpError, at: &str) -> String {
    match e {
        McpError::InvalidSpec { field, reason, .. } => format!("field `{at}.{field}`: {reason}"),
        other => format!("field `{at}`: {other}"),
    }
}

/// serde with the path of the failing field in the message.
fn deserialize<T: serde::de::DeserializeOwned>(v: Value, at: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            format!("field `{at}`: {inner}")
        } else {
            format!("field `{at}.{path}`: {inner}")
        }
    })
}
