//! `toolshed registry mcp …`: the MCP server entries of the caller's tenant in a
//! registry server (`/api/v1/mcp-servers`): add, list, show, remove, test, discover,
//! enable and disable, and the changes a server made to its tools: pending, accept.
//! Entries are named by their name (or id); a stdio server is `add NAME -- COMMAND
//! ARGS…` (the words as given, never through a shell), an HTTP one `add NAME --url URL
//! [--header K=V]`. A literal `--env`/`--header` value is refused here, before anything
//! is sent: values name credentials as `${NAME}`.

use std::collections::BTreeMap;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;
use toolshed_api::requests::{McpAcceptBody, McpServerBody};
use toolshed_api::views::{
    McpAcceptView, McpDeletedView, McpDiscoverView, McpPendingView, McpServerView, McpTestView,
};
use toolshed_api::{Data, Paged};

use crate::client::{Answer, Client};
use crate::output::{Failure, print, print_json, table};

/// `toolshed registry mcp` subcommands.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Register an MCP server: `add NAME -- COMMAND ARGS…` or `add NAME --url URL`.
    Add(AddArgs),
    /// List the tenant's MCP servers.
    List {
        /// The page, from 1.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        page: u32,
        /// Servers per page, 1 to 500.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        per_page: u32,
    },
    /// Show one MCP server.
    Show {
        /// Its name or id.
        name: String,
    },
    /// Remove an MCP server and its registry tools (admin).
    Remove {
        /// Its name or id.
        name: String,
    },
    /// Connect to an MCP server and finish the handshake (deployer).
    Test {
        /// Its name or id.
        name: String,
    },
    /// List an MCP server's tools and register them as `<server>__<tool>` (deployer).
    Discover {
        /// Its name or id.
        name: String,
    },
    /// Enable an MCP server registered disabled, e.g. from a project's config file
    /// (admin).
    Enable {
        /// Its name or id.
        name: String,
    },
    /// Disable an MCP server: its tools stop running until it is enabled again.
    Disable {
        /// Its name or id.
        name: String,
    },
    /// Show the changes an MCP server made to its tools since they were accepted: the
    /// accepted definition (what every client gets) beside the new one.
    Pending {
        /// Its name or id.
        name: String,
    },
    /// Accept an MCP server's changes to its tools (admin): each becomes the active
    /// revision, served to every client.
    Accept {
        /// Its name or id.
        name: String,
        /// Only this tool (as the server names it, or its registry name); repeatable.
        /// Every change waiting when left out.
        #[arg(long = "tool", value_name = "TOOL")]
        tools: Vec<String>,
    },
}

/// Arguments of `toolshed registry mcp add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The server's name: letters, digits, `_` and `-`, at most 30.
    name: String,
    /// A Streamable HTTP server's URL (instead of a command).
    #[arg(long, conflicts_with = "command")]
    url: Option<String>,
    /// A header sent to an HTTP server, `K=V` (repeatable); the value names credentials
    /// as `${NAME}` (`Authorization='Bearer ${GITHUB_TOKEN}'`): a literal is refused.
    #[arg(long = "header", value_name = "K=V", requires = "url")]
    headers: Vec<String>,
    /// A variable of a stdio server's environment, `K=V` (repeatable); the value names
    /// a credential as `${NAME}` (`OPENAI_API_KEY='${OPENAI_API_KEY}'`): a literal is
    /// refused.
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// A credential the env or headers name as `${NAME}` (repeatable); it must be in the
    /// server's credentials policy.
    #[arg(long = "credential", value_name = "NAME")]
    credentials: Vec<String>,
    /// How long one MCP request may take, 1 to 3600 seconds (default 30).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout_seconds: Option<u64>,
    /// What it is for.
    #[arg(long)]
    description: Option<String>,
    /// Let a stdio server reach the network (default: on for `npx`, `uvx` and other
    /// package runners, off otherwise).
    #[arg(long)]
    network: Option<bool>,
    /// Register it disabled (an admin enables it later).
    #[arg(long)]
    disabled: bool,
    /// Make a tool change a discover finds active at once, unreviewed (admin). By
    /// default a change waits until an admin accepts it (`registry mcp accept`).
    #[arg(long)]
    auto_accept: bool,
    /// The stdio server's command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Run a `registry mcp` subcommand.
pub async fn run(cmd: McpCommand, json_out: bool) -> Result<(), Failure> {
    let client = Client::from_env()?;
    match cmd {
        McpCommand::Add(args) => add(&client, args, json_out).await,
        McpCommand::List { page, per_page } => list(&client, page, per_page, json_out).await,
        McpCommand::Show { name } => {
            let entry = resolve(&client, &name).await?;
            show(&entry, json_out);
            Ok(())
        }
        McpCommand::Remove { name } => remove(&client, &name, json_out).await,
        McpCommand::Test { name } => test(&client, &name, json_out).await,
        McpCommand::Discover { name } => discover(&client, &name, json_out).await,
        McpCommand::Enable { name } => set_enabled(&client, &name, true, json_out).await,
        McpCommand::Disable { name } => set_enabled(&client, &name, false, json_out).await,
        McpCommand::Pending { name } => pending(&client, &name, json_out).await,
        McpCommand::Accept { name, tools } => accept(&client, &name, tools, json_out).await,
    }
}

/// Refuse literal `env`/`headers` values before anything leaves this machine: each key
/// named with the reference to write instead, never its value.
fn refuse_literals(name: &str, launch: toolshed_mcp::Launch) -> Result<(), Failure> {
    let spec = toolshed_mcp::McpServerSpec {
        name: name.to_owned(),
        launch,
        timeout: toolshed_mcp::spec::DEFAULT_TIMEOUT,
        credentials: Vec::new(),
    };
    let literals = spec.literal_values();
    if literals.is_empty() {
        return Ok(());
    }
    let flag = |l: &toolshed_mcp::spec::LiteralValue| {
        if l.field == "env" {
            "--env"
        } else {
            "--header"
        }
    };
    let lines: Vec<String> = literals
        .iter()
        .map(|l| format!("{} {}: {}", flag(l), l.key, l.fix()))
        .collect();
    Err(Failure::bad_input(anyhow!(
        "{} literal value{} refused, nothing was registered (the registry would keep {} in clear for every reader of the entry):\n  {}\n  e.g. --{} {}='{}' --credential {}",
        literals.len(),
        if literals.len() == 1 { " is" } else { "s are" },
        if literals.len() == 1 { "it" } else { "them" },
        lines.join("\n  "),
        flag(&literals[0]).trim_start_matches("--"),
        literals[0].key,
        literals[0].reference(),
        literals[0].credential(),
    )))
}

const SERVERS: [&str; 3] = ["api", "v1", "mcp-servers"];

fn path<'a>(id: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut p = SERVERS.to_vec();
    p.push(id);
    p.extend_from_slice(rest);
    p
}

/// `K=V` pairs, the flag named on a bad one.
fn pairs(flag: &str, items: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut out = BTreeMap::new();
    for item in items {
        let Some((k, v)) = item.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(Failure::bad_input(anyhow!(
                "--{flag} `{item}` is not K=V (e.g. --{flag} TOKEN='${{GITHUB_TOKEN}}')"
            )));
        };
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

async fn add(client: &Client, args: AddArgs, json_out: bool) -> Result<(), Failure> {
    let mut body = McpServerBody {
        name: Some(args.name.clone()),
        description: args.description,
        timeout_seconds: args.timeout_seconds,
        credentials: (!args.credentials.is_empty()).then_some(args.credentials),
        enabled: args.disabled.then_some(false),
        auto_accept: args.auto_accept.then_some(true),
        source: Some("cli".to_owned()),
        ..McpServerBody::default()
    };
    match (args.url, args.command.split_first()) {
        (Some(url), _) => {
            if !args.env.is_empty() {
                return Err(Failure::bad_input(anyhow!(
                    "--env is for stdio servers; an HTTP server takes --header"
                )));
            }
            let headers = pairs("header", &args.headers)?;
            refuse_literals(
                &args.name,
                toolshed_mcp::Launch::Http(toolshed_mcp::HttpLaunch {
                    url: url.clone(),
                    headers: headers.clone(),
                }),
            )?;
            body.transport = Some("streamable_http".to_owned());
            body.url = Some(url);
            body.headers = Some(headers);
        }
        (None, Some((command, rest))) => {
            body.transport = Some("stdio".to_owned());
            body.command = Some(command.clone());
            body.args = Some(rest.to_vec());
            let env = pairs("env", &args.env)?;
            refuse_literals(
                &args.name,
                toolshed_mcp::Launch::Stdio(toolshed_mcp::StdioLaunch {
                    command: command.clone(),
                    args: rest.to_vec(),
                    env: env.clone(),
                    network: args.network,
                }),
            )?;
            body.env = (!env.is_empty()).then_some(env);
            body.network = args.network;
        }
        (None, None) => {
            return Err(Failure::bad_input(anyhow!(
                "give the server's command after `--` (`toolshed registry mcp add {} -- npx -y @modelcontextprotocol/server-everything`) or --url URL",
                args.name
            )));
        }
    }
    let answer: Answer<Data<McpServerView>> = client.post(&SERVERS, &body).await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let s = &answer.body.data;
    print(&format!(
        "registered MCP server {} (id {}, {}{}); `toolshed registry mcp test {}` connects, `discover` registers its tools",
        s.name,
        s.id,
        s.transport,
        if s.enabled { "" } else { ", disabled" },
        s.name
    ));
    Ok(())
}

/// The tenant's entry named `name` (or with this id).
async fn resolve(client: &Client, name: &str) -> Result<McpServerView, Failure> {
    if is_uuid(name) {
        let answer: Answer<Data<McpServerView>> = client.get(&path(name, &[])).await?;
        return Ok(answer.body.data);
    }
    let mut page = 1u32;
    loop {
        let query = [("page", page.to_string()), ("per_page", "500".to_owned())];
        let answer: Answer<Paged<McpServerView>> = client
            .send(Method::GET, client.url(&SERVERS, &query), None::<&Value>)
            .await?;
        let Paged { data, meta } = answer.body;
        if let Some(found) = data.into_iter().find(|s| s.name == name) {
            return Ok(found);
        }
        if u64::from(page) * u64::from(meta.per_page) >= meta.total {
            return Err(Failure::bad_input(anyhow!(
                "no MCP server `{name}` in your tenant; `toolshed registry mcp list` shows them"
            )));
        }
        page += 1;
    }
}

/// Whether `s` is a UUID (8-4-4-4-12 hex digits): entry names cannot be one of those
/// and have no dashes in those places by chance often enough to matter.
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

async fn list(client: &Client, page: u32, per_page: u32, json_out: bool) -> Result<(), Failure> {
    let query = [
        ("page", page.to_string()),
        ("per_page", per_page.to_string()),
    ];
    let answer: Answer<Paged<McpServerView>> = client
        .send(Method::GET, client.url(&SERVERS, &query), None::<&Value>)
        .await?;
    if json_out {
        print_json(answer.json());
        return Ok(());
    }
    let Paged { data, meta } = &answer.body;
    let rows: Vec<Vec<String>> = data
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.transport.clone(),
                s.status.clone(),
                if s.enabled { "yes" } else { "no" }.to_owned(),
                s.tool_count.to_string(),
                s.endpoint.clone(),
            ]
        })
        .collect();
    let mut text = table(
        &[
            "NAME",
            "TRANSPORT",
            "STATUS",
            "ENABLED",
            "TOOLS",
            "ENDPOINT",
        ],
        &rows,
        70,
    );
    text.push_str(&format!(
        "\npage {} of {}, {} server{}",
        meta.page,
        meta.total.div_ceil(u64::from(meta.per_page.max(1))).max(1),
        meta.total,
        if meta.total == 1 { "" } else { "s" }
    ));
    print(&text);
    Ok(())
}

fn show(s: &McpServerView, json_out: bool) {
    if json_out {
        print_json(&serde_json::to_value(s).unwrap_or_default());
        return;
    }
    let mut lines = vec![
        format!("name:        {}", s.name),
        format!("id:          {}", s.id),
        format!("transport:   {}", s.transport),
        format!("endpoint:    {}", s.endpoint),
        format!(
            "status:      {}{}",
            s.status,
            s.last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ),
        format!("enabled:     {}", if s.enabled { "yes" } else { "no" }),
        format!("source:      {}", s.source),
        format!("tools:       {}", s.tool_count),
        format!("timeout:     {} s", s.timeout_seconds),
        format!(
            "last ping:   {}",
            s.last_ping_at.as_deref().unwrap_or("never")
        ),
        format!("tenant:      {}", s.tenant),
        format!("revision:    {}", s.revision),
        format!(
            "changes:     {}",
            if s.auto_accept {
                "taken at once (auto_accept)"
            } else {
                "wait for an admin (`toolshed registry mcp pending`)"
            }
        ),
    ];
    if s.pending_changes > 0 {
        lines.push(format!(
            "waiting:     {} tool change{}: `toolshed registry mcp pending {}`",
            s.pending_changes,
            if s.pending_changes == 1 { "" } else { "s" },
            s.name
        ));
    }
    if !s.description.is_empty() {
        lines.push(format!("description: {}", s.description));
    }
    if !s.credentials.is_empty() {
        lines.push(format!("credentials: {}", s.credentials.join(", ")));
    }
    for (k, v) in s.env.iter().chain(&s.headers) {
        lines.push(format!("  {k}={v}"));
    }
    print(&lines.join("\n"));
    for key in &s.literal_values {
        crate::output::eprint(&format!(
            "warning: {key} holds a literal value stored before literals were refused (shown as ***); replace it with a ${{NAME}} credential reference"
        ));
    }
}

async fn remove(client: &Client, name: &str, json_out: bool) -> Result<(), Failure> {
    let entry = resolve(client, name).await?;
    let answer: Answer<Data<McpDeletedView>> = client
        .send(
            Method::DELETE,
            client.url(&path(&entry.id, &[]), &[]),
            None::<&Value>,
        )
        .await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let d = &answer.body.data;
    print(&format!(
        "removed MCP server {} (id {}) and its {} tool{}",
        d.name,
        d.id,
        d.tools_removed,
        if d.tools_removed == 1 { "" } else { "s" }
    ));
    Ok(())
}

async fn test(client: &Client, name: &str, json_out: bool) -> Result<(), Failure> {
    let entry = resolve(client, name).await?;
    let answer: Answer<Data<McpTestView>> = client
        .post(&path(&entry.id, &["test"]), &Value::Null)
        .await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let t = &answer.body.data;
    print(&format!(
        "{} is up: {} {} ({} era, protocol {}), {} ms",
        entry.name, t.server_name, t.server_version, t.era, t.protocol_version, t.latency_ms
    ));
    Ok(())
}

async fn discover(client: &Client, name: &str, json_out: bool) -> Result<(), Failure> {
    let entry = resolve(client, name).await?;
    let answer: Answer<Data<McpDiscoverView>> = client
        .post(&path(&entry.id, &["discover"]), &Value::Null)
        .await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let d = &answer.body.data;
    let rows: Vec<Vec<String>> = d
        .tools
        .iter()
        .map(|t| {
            vec![
                t.registry_name.clone(),
                t.effects.clone(),
                match &t.approval {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                t.description.clone(),
            ]
        })
        .collect();
    let mut text = table(&["TOOL", "EFFECTS", "APPROVAL", "DESCRIPTION"], &rows, 60);
    text.push_str(&format!(
        "\n{} tool{} ({} added, {} changed, {} removed, {} waiting for an admin)",
        d.total,
        if d.total == 1 { "" } else { "s" },
        d.added.len(),
        d.changed.len(),
        d.removed.len(),
        d.pending.len()
    ));
    print(&text);
    for t in d.tools.iter().filter(|t| !t.hidden_characters.is_empty()) {
        crate::output::eprint(&format!(
            "warning: {} hides characters a reader does not see ({}); shown escaped",
            t.registry_name,
            t.hidden_characters
                .iter()
                .map(|h| format!("{}: {} {}", h.field, h.count, h.kind))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !d.pending.is_empty() {
        crate::output::eprint(&format!(
            "warning: {} changed {} since {} accepted; every client keeps the accepted definition: review with `toolshed registry mcp pending {}`, then `toolshed registry mcp accept {}` (admin)",
            entry.name,
            d.pending.join(", "),
            if d.pending.len() == 1 {
                "it was"
            } else {
                "they were"
            },
            entry.name,
            entry.name
        ));
    }
    Ok(())
}

async fn pending(client: &Client, name: &str, json_out: bool) -> Result<(), Failure> {
    let entry = resolve(client, name).await?;
    let answer: Answer<Data<Vec<McpPendingView>>> =
        client.get(&path(&entry.id, &["pending"])).await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let changes = &answer.body.data;
    if changes.is_empty() {
        print(&format!("{}: no tool change waits", entry.name));
        return Ok(());
    }
    let mut out = String::new();
    for p in changes {
        out.push_str(&format!(
            "{} (revision {} in force; changed {})\n  accepted:  {}\n  now:       {}\n",
            p.registry_name,
            p.revision,
            p.since,
            p.description.replace('\n', "\n             "),
            p.pending_description.replace('\n', "\n             "),
        ));
        if p.schema_definition != p.pending_schema_definition {
            out.push_str(&format!(
                "  input schema accepted:\n    {}\n  input schema now:\n    {}\n",
                serde_json::to_string(&p.schema_definition).unwrap_or_default(),
                serde_json::to_string(&p.pending_schema_definition).unwrap_or_default(),
            ));
        }
        for h in &p.hidden_characters {
            out.push_str(&format!(
                "  hidden: {}: {} {} character{} (shown as \\u{{…}})\n",
                h.field,
                h.count,
                h.kind.replace('_', "-"),
                if h.count == 1 { "" } else { "s" }
            ));
        }
    }
    out.push_str(&format!(
        "\naccept with `toolshed registry mcp accept {}` (all) or `--tool NAME` (admin)",
        entry.name
    ));
    print(&out);
    Ok(())
}

async fn accept(
    client: &Client,
    name: &str,
    tools: Vec<String>,
    json_out: bool,
) -> Result<(), Failure> {
    let entry = resolve(client, name).await?;
    let body = McpAcceptBody {
        tools: (!tools.is_empty()).then_some(tools),
    };
    let answer: Answer<Data<McpAcceptView>> =
        client.post(&path(&entry.id, &["accept"]), &body).await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    let a = &answer.body.data;
    print(&if a.accepted.is_empty() {
        format!("{}: no tool change waited", entry.name)
    } else {
        format!(
            "accepted: {} (now served to every client)",
            a.accepted.join(", ")
        )
    });
    Ok(())
}

async fn set_enabled(
    client: &Client,
    name: &str,
    enabled: bool,
    json_out: bool,
) -> Result<(), Failure> {
    let entry = resolve(client, name).await?;
    let body = McpServerBody {
        enabled: Some(enabled),
        ..McpServerBody::default()
    };
    let answer: Answer<Data<McpServerView>> = client
        .send(
            Method::PUT,
            client.url(&path(&entry.id, &[]), &[]),
            Some(&body),
        )
        .await?;
    if json_out {
        print_json(answer.data_json());
        return Ok(());
    }
    print(&format!(
        "MCP server {} is {}",
        entry.name,
        if enabled { "enabled" } else { "disabled" }
    ));
    Ok(())
}
