//! The `agent.yaml` format: AgentBreeder's fields (kept as given where toolshed does not
//! use them) plus Toren's `builtin_tools`, `env`, `sandbox`, `limits` and `plugins`, and
//! `processes:` for `run_process` (parsed in `process/config.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolshed_journal::Budgets;

use crate::AgentError;
use crate::mcp::{McpServerEntry, McpServerRef, McpToolOptions};
use crate::process::ProcessDef;

/// Top-level keys of AgentBreeder's `agent.yaml` that toolshed keeps but does not
/// interpret (deployment, models, prompts…). Anything else unknown is a typo.
const KEPT_AS_GIVEN: &[&str] = &[
    "spec_version",
    "model",
    "models",
    "deploy",
    "prompts",
    "knowledge_bases",
    "guardrails",
    "subagents",
    "memory",
    "metadata",
];

/// Run limits (`limits:`), enforced by the runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Starts of a run after crashes before it fails.
    #[serde(default, alias = "maxAttemptsPerTask")]
    pub max_attempts_per_task: Option<u32>,
    /// Wall-clock minutes from the run's creation.
    #[serde(default, alias = "maxWallClockMin")]
    pub max_wall_clock_min: Option<u32>,
}

impl From<Limits> for Budgets {
    fn from(l: Limits) -> Self {
        Budgets {
            max_attempts_per_task: l.max_attempts_per_task,
            max_wall_clock_min: l.max_wall_clock_min,
        }
    }
}

/// `sandbox:` as a mapping: `sandbox: true` with settings for `bash`. Every field is
/// optional; the defaults are the seed's (256 MB, 30 s, network off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    /// Outbound network for `bash` (off by default; the host's own ports stay
    /// unreachable either way).
    #[serde(default, alias = "network_access")]
    pub network_enabled: bool,
    /// Memory of one `bash` call, swap included, in MB (default 256).
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// The longest a `bash` call may take, in seconds (default 30): a call's own
    /// `timeout_seconds` may ask for less, never more.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// The most a run's workspace may hold, in MiB of file contents (default 1024): the
    /// file tools refuse a write past it, and a `bash` call writes into a layer no
    /// larger than what is left (see `docs/agent-projects.md`).
    #[serde(default)]
    pub workspace_mb: Option<u64>,
    /// The most files, folders and symlinks a run's workspace may hold (default
    /// 100000).
    #[serde(default)]
    pub workspace_files: Option<u64>,
}

impl SandboxSettings {
    /// Memory of one `bash` call, in MB.
    pub fn memory_mb(&self) -> u64 {
        self.memory_mb.unwrap_or(256)
    }

    /// The longest a `bash` call may take, in seconds.
    pub fn timeout_seconds(&self) -> u64 {
        self.timeout_seconds.unwrap_or(30)
    }

    /// The most a workspace may hold, in MiB.
    pub fn workspace_mb(&self) -> u64 {
        self.workspace_mb.unwrap_or(1024)
    }

    /// The most entries a workspace may hold.
    pub fn workspace_files(&self) -> u64 {
        self.workspace_files.unwrap_or(100_000)
    }
}

/// One entry of `tools:`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ToolEntry {
    /// `ref: tools/<name>`: resolved local → stdlib → registry.
    Tool {
        /// The name after `tools/`.
        name: String,
        /// `network: true`: the project's own tool file runs in a sandbox with the
        /// network on (a bread or Toren file cannot declare it itself).
        network: bool,
    },
    /// `ref: mcp-servers/<name>`: an MCP server's tools, resolved from the agent's own
    /// `plugins.mcp_client` servers, then `mcp-servers/<name>.(yaml|json)` in the
    /// project, then the registry.
    McpServer {
        /// The server name.
        name: String,
        /// Which of its tools join and how they are named and declared.
        options: McpToolOptions,
    },
    /// An inline definition: `name`, `description`, `schema` (or `input_schema`), and
    /// optionally `type`, `output_schema`, `endpoint`.
    Inline {
        /// The tool's name.
        name: String,
        /// The definition as written.
        definition: Map<String, Value>,
    },
}

/// A parsed `agent.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentFile {
    /// The agent's name.
    pub name: String,
    /// The framework it is built with (informative).
    pub framework: Option<String>,
    /// Its tools.
    pub tools: Vec<ToolEntry>,
    /// Built-in tools by name.
    pub builtin_tools: Vec<String>,
    /// Declared env var names, checked at start-up.
    pub env: Vec<String>,
    /// Whether the agent gets the sandbox (bash and workspace files).
    pub sandbox: bool,
    /// `bash`'s settings when `sandbox:` is a mapping (the defaults for `sandbox: true`).
    pub sandbox_settings: SandboxSettings,
    /// Run limits.
    pub limits: Limits,
    /// Per-plugin configuration (`plugins.<name>`).
    pub plugins: Map<String, Value>,
    /// The MCP servers the agent defines itself: `plugins.mcp_client.servers` (or its
    /// alias `mcpServers`), by name.
    pub mcp_client: BTreeMap<String, McpServerEntry>,
    /// `plugins.mcp_client.servers: [NAME, …]`: servers named, not defined, resolved as
    /// `ref: mcp-servers/NAME` is.
    pub mcp_client_names: Vec<String>,
    /// AgentBreeder's top-level `mcp_servers: [{ref: mcp/NAME, transport, url}]`.
    pub mcp_servers: Vec<McpServerRef>,
    /// The named commands `run_process` may start (`processes:`).
    pub processes: Vec<ProcessDef>,
    /// AgentBreeder fields kept as given.
    pub other: BTreeMap<String, Value>,
}

/// Parse `agent.yaml` text. Every field problem is reported at once, each naming the
/// field and the fix; `origin` (a path) is put in the message.
pub fn parse_agent_file(text: &str, origin: &str) -> Result<AgentFile, AgentError> {
    let value: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| AgentError::File(format!("{origin}: not valid YAML: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(AgentError::File(format!(
            "{origin}: must be a mapping with at least `name:`"
        )));
    };
    let mut problems = Vec::new();
    let name = match map.remove("name") {
        Some(Value::String(n)) if valid_agent_name(&n) => n,
        Some(Value::String(n)) => {
            problems.push(format!(
                "field `name`: `{n}` must be 1–64 letters, digits, `-` or `_`, starting with a letter or digit"
            ));
            n
        }
        Some(other) => {
            problems.push(format!(
                "field `name`: must be a string, got {}",
                toolshed_core::schema::kind_of(&other)
            ));
            String::new()
        }
        None => {
            problems.push("field `name` is missing".into());
            String::new()
        }
    };
    let framework = take_string(&mut map, "framework", &mut problems);
    let builtin_tools = take_string_list(&mut map, "builtin_tools", &mut problems);
    let env = match map.remove("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::String(s) if !s.trim().is_empty() => Some(s),
                _ => {
                    problems.push(format!("field `env[{i}]`: must be a variable name"));
                    None
                }
            })
            .collect(),
        // `env: {NAME: description}` is accepted too: the keys are the names.
        Some(Value::Object(m)) => m.keys().cloned().collect(),
        Some(_) => {
            problems.push("field `env`: must be a list of variable names".into());
            Vec::new()
        }
    };
    let (sandbox, sandbox_settings) = match map.remove("sandbox") {
        None | Some(Value::Null) => (false, SandboxSettings::default()),
        Some(Value::Bool(b)) => (b, SandboxSettings::default()),
        // A mapping grants the sandbox with settings for bash.
        Some(v @ Value::Object(_)) => match serde_json::from_value::<SandboxSettings>(v) {
            Ok(s) => {
                for (name, value, max) in [
                    ("memory_mb", s.memory_mb, 1_048_576),
                    ("timeout_seconds", s.timeout_seconds, 86_400),
                    ("workspace_mb", s.workspace_mb, 1_048_576),
                    ("workspace_files", s.workspace_files, 100_000_000),
                ] {
                    if let Some(v) = value
                        && (v == 0 || v > max)
                    {
                        problems.push(format!(
                            "field `sandbox.{name}`: {v} must be between 1 and {max}"
                        ));
                    }
                }
                (true, s)
            }
            Err(e) => {
                problems.push(format!("field `sandbox`: {e}"));
                (false, SandboxSettings::default())
            }
        },
        Some(_) => {
            problems.push(
                "field `sandbox`: must be true, false, or a mapping like `{network_enabled: true, memory_mb: 512, timeout_seconds: 60, workspace_mb: 1024, workspace_files: 100000}`".into(),
            );
            (false, SandboxSettings::default())
        }
    };
    let limits = match map.remove("limits") {
        None | Some(Value::Null) => Limits::default(),
        Some(v) => serde_json::from_value::<Limits>(v).unwrap_or_else(|e| {
            problems.push(format!("field `limits`: {e}"));
            Limits::default()
        }),
    };
    let plugins = match map.remove("plugins") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            problems.push("field `plugins`: must be a mapping of plugin name to its config".into());
            Map::new()
        }
    };
    let (mcp_client, mcp_client_names) = plugins
        .get("mcp_client")
        .map(|cfg| crate::mcp::parse_mcp_client(cfg, &mut problems))
        .unwrap_or_default();
    let mcp_servers = match map.remove("mcp_servers") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => crate::mcp::parse_mcp_servers(v, &mut problems),
    };
    let processes = match map.remove("processes") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => crate::process::parse_processes(v, &mut problems),
    };
    let tools = match map.remove("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| parse_entry(v, i).map_err(|e| problems.push(e)).ok())
            .collect(),
        Some(_) => {
            problems.push(
                "field `tools`: must be a list of `{ref: tools/NAME}` or inline definitions".into(),
            );
            Vec::new()
        }
    };
    let mut other = BTreeMap::new();
    for (k, v) in map {
        if KEPT_AS_GIVEN.contains(&k.as_str())
            || ["version", "description", "team", "owner", "tags"].contains(&k.as_str())
        {
            other.insert(k, v);
        } else {
            problems.push(format!("unknown field `{k}`{}", suggest(&k)));
        }
    }
    if !problems.is_empty() {
        return Err(AgentError::File(format!(
            "{origin}:\n- {}",
            problems.join("\n- ")
        )));
    }
    Ok(AgentFile {
        name,
        framework,
        tools,
        builtin_tools,
        env,
        sandbox,
        sandbox_settings,
        limits,
        plugins,
        mcp_client,
        mcp_client_names,
        mcp_servers,
        processes,
        other,
    })
}

fn parse_entry(v: Value, i: usize) -> Result<ToolEntry, String> {
    let Value::Object(mut m) = v else {
        return Err(format!(
            "field `tools[{i}]`: must be `{{ref: tools/NAME}}` or an inline definition"
        ));
    };
    if let Some(r) = m.remove("ref") {
        let Value::String(r) = r else {
            return Err(format!(
                "field `tools[{i}].ref`: must be a string like `tools/order-lookup`"
            ));
        };
        if let Some(("mcp-servers", n)) = r.split_once('/')
            && !n.is_empty()
            && !n.contains('/')
        {
            // A server's ref may say which of its tools join and how (`prefix`,
            // `include`, `exclude`, `overrides`).
            let options = crate::mcp::parse_options(m, &format!("tools[{i}]"))?;
            return Ok(ToolEntry::McpServer {
                name: n.to_owned(),
                options,
            });
        }
        let network = match m.remove("network").or_else(|| m.remove("network_access")) {
            None => false,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                return Err(format!(
                    "field `tools[{i}].network`: must be true or false (true runs the tool file in a sandbox with the network on)"
                ));
            }
        };
        if let Some(extra) = m.keys().next() {
            return Err(format!(
                "field `tools[{i}].{extra}`: a `ref: tools/NAME` entry has only `network` besides `ref`"
            ));
        }
        return match r.split_once('/') {
            Some(("tools", n)) if !n.is_empty() && !n.contains('/') => Ok(ToolEntry::Tool {
                name: n.to_owned(),
                network,
            }),
            _ => Err(format!(
                "field `tools[{i}].ref`: `{r}` must be `tools/NAME` or `mcp-servers/NAME`"
            )),
        };
    }
    match m.get("name") {
        Some(Value::String(n)) => {
            let n = n.clone();
            Ok(ToolEntry::Inline {
                name: n,
                definition: m,
            })
        }
        _ => Err(format!(
            "field `tools[{i}]`: an inline tool needs a `name` (or use `ref: tools/NAME`)"
        )),
    }
}

fn take_string(
    map: &mut Map<String, Value>,
    key: &str,
    problems: &mut Vec<String>,
) -> Option<String> {
    match map.remove(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            problems.push(format!("field `{key}`: must be a string"));
            None
        }
    }
}

fn take_string_list(
    map: &mut Map<String, Value>,
    key: &str,
    problems: &mut Vec<String>,
) -> Vec<String> {
    match map.remove(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::String(s) => Some(s),
                _ => {
                    problems.push(format!("field `{key}[{i}]`: must be a string"));
                    None
                }
            })
            .collect(),
        Some(_) => {
            problems.push(format!("field `{key}`: must be a list of names"));
            Vec::new()
        }
    }
}

fn valid_agent_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn suggest(key: &str) -> String {
    const FIELDS: &[&str] = &[
        "name",
        "framework",
        "tools",
        "builtin_tools",
        "env",
        "sandbox",
        "limits",
        "plugins",
        "mcp_servers",
        "processes",
    ];
    FIELDS
        .iter()
        .find(|f| toolshed_core::toolset::edit_distance(f, key) <= 2)
        .map(|f| format!("; did you mean `{f}`?"))
        .unwrap_or_default()
}
