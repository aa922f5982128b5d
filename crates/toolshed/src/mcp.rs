//! `toolshed mcp serve`: toolshed as an MCP server on stdio, for a local client (Claude
//! Code, Cursor, VS Code, Claude Desktop), and `toolshed mcp config`: the snippet that
//! points each client at it.
//!
//! `serve` picks what to serve, in this order:
//! 1. `--agent DIR`: that agent project (below), whatever the environment says; a
//!    `TOOLSHED_URL` it leaves unused is named on stderr.
//! 2. `TOOLSHED_URL` set: a bridge to that server's `/mcp` under the caller's token
//!    (`TOOLSHED_API_TOKEN` or the `toolshed login` one): every JSON-RPC line from stdin
//!    is POSTed, every message of the answer written to stdout. An agent.yaml in the
//!    working folder is then not served, and stderr says so.
//! 3. An agent project (`--agent DIR`, else the working folder when it holds
//!    agent.yaml): its toolset, each call a durable run in the `--database-url`
//!    journal; its `mcp.yaml` (if any) the prompts and resources.
//! 4. Else the registry tools of the `--database-url` database, opened as `toolshed
//!    serve` opens it (the stdlib registered on first use), served to the local user
//!    as the registry's owner: whoever can open the database file owns it anyway.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use toolshed_core::{Approval, Crumb, CrumbKind, Effects, Idempotency, Principal, ToolCall};
use toolshed_journal::{Gate, JournalError};
use toolshed_mcp::server::{
    CallEvent, CallOptions, CallOutcome, Catalog, ExposedTool, Gateway, GatewayError, LogLevel,
    McpHandler, serve_stdio,
};
use toolshed_runtime::{CallStep, Driver, NewRunBuilder, Runtime};

use crate::db::Db;
use crate::output::{EXIT_BAD_INPUT, EXIT_INTERNAL, Failure, print_raw};

/// `toolshed mcp` subcommands.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve tools over MCP on stdin/stdout: `--agent DIR`; else, with `TOOLSHED_URL`, a
    /// bridge to that server; else the agent project here, or the `--database-url`
    /// registry.
    Serve(ServeArgs),
    /// Print the config snippet that points an MCP client at `toolshed mcp serve`.
    Config(ConfigArgs),
}

/// Arguments of `toolshed mcp serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The agent project to serve (default: the working folder, when it holds
    /// agent.yaml).
    #[arg(long, value_name = "DIR")]
    agent: Option<PathBuf>,
}

/// The MCP clients `mcp config` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClientKind {
    /// Claude Code (`.mcp.json`, or `claude mcp add`).
    ClaudeCode,
    /// Cursor (`.cursor/mcp.json`).
    Cursor,
    /// VS Code (`.vscode/mcp.json`).
    Vscode,
    /// Claude Desktop (`claude_desktop_config.json`).
    ClaudeDesktop,
}

/// Arguments of `toolshed mcp config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The client to configure.
    #[arg(long, value_enum)]
    client: ClientKind,
    /// The agent project the client should get (an absolute path is written).
    #[arg(long, value_name = "DIR")]
    agent: Option<PathBuf>,
    /// The server name in the client's config.
    #[arg(long, default_value = "toolshed")]
    name: String,
}

/// Run an `mcp` subcommand.
pub async fn run(cmd: McpCommand, db: &Db) -> Result<(), Failure> {
    match cmd {
        McpCommand::Serve(args) => serve(args, db).await,
        McpCommand::Config(args) => config(&args, db),
    }
}

fn internal(e: impl std::fmt::Display) -> Failure {
    Failure::Error {
        code: EXIT_INTERNAL,
        error: anyhow!("{e}"),
    }
}

async fn serve(args: ServeArgs, db: &Db) -> Result<(), Failure> {
    let url = std::env::var(crate::client::URL_VAR)
        .ok()
        .filter(|u| !u.trim().is_empty());
    let here = Path::new("agent.yaml").exists();
    // What was asked for on the command line wins over the environment, and the one
    // left out is named on stderr (stdout carries only JSON-RPC).
    match (&args.agent, &url) {
        (Some(dir), Some(url)) => eprintln!(
            "toolshed mcp serve: serving the agent project {}; {} ({url}) is not used (drop --agent to bridge to that server)",
            dir.display(),
            crate::client::URL_VAR
        ),
        (None, Some(url)) => {
            if here {
                eprintln!(
                    "toolshed mcp serve: bridging to {url} ({}); the agent.yaml here is not served (pass --agent . to serve it)",
                    crate::client::URL_VAR
                );
            }
            return bridge().await;
        }
        _ => {}
    }
    let dir = match args.agent {
        Some(dir) => Some(dir),
        None => here.then(|| PathBuf::from(".")),
    };
    match dir {
        Some(dir) => serve_agent(&dir, db).await,
        None => serve_registry(db).await,
    }
}

/// The local user, as the principal of the runs made over stdio.
fn local_principal() -> Principal {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".into());
    Principal {
        iss: "toolshed-cli".into(),
        sub: user,
        tenant: None,
    }
}

async fn serve_agent(dir: &Path, db: &Db) -> Result<(), Failure> {
    let project = crate::agent::load_project(dir).await?;
    let catalog_path = dir.join("mcp.yaml");
    let catalog = if catalog_path.exists() {
        Catalog::load(&catalog_path).map_err(|e| Failure::bad_input(anyhow!("{e}")))?
    } else {
        Catalog::default()
    };
    // The project's runtime: its declared env reaches handlers as `ctx.env`.
    let runtime = project.runtime(db).await?;
    let gateway = Arc::new(LocalGateway {
        runtime,
        catalog,
        budgets: project.budgets(),
    });
    let principal = local_principal();
    let served = serve_stdio(McpHandler::with_caller(gateway, principal)).await;
    project.shutdown().await;
    served.map_err(internal)
}

async fn serve_registry(db: &Db) -> Result<(), Failure> {
    let mut config = toolshed_server::ServerConfig::new(db.url());
    // Opened like `toolshed serve` (migrations, the stdlib registered on first use),
    // but nothing listens: the port is only bound until the state is taken.
    config.addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let server = toolshed_server::Server::open(config)
        .await
        .map_err(|e| internal(format!("cannot open the registry: {e:#}")))?;
    let state = server.state().clone();
    drop(server);
    let user = local_principal();
    let claims = toolshed_auth::Claims {
        iss: user.iss,
        sub: user.sub,
        tenant: None,
        role: toolshed_auth::Role::Owner,
        iat: 0,
        exp: u64::MAX,
        generation: 0,
        kind: toolshed_auth::TokenKind::Access,
        sid: None,
        jti: None,
    };
    let gateway = Arc::new(toolshed_server::mcp_gateway::RegistryGateway::new(
        state.clone(),
    ));
    let caller = toolshed_server::mcp_gateway::McpCaller(Arc::new(claims));
    let served = serve_stdio(McpHandler::with_caller(gateway, caller)).await;
    state.dispatcher().shutdown();
    served.map_err(internal)
}

/// An agent's toolset as a [`Gateway`]: each call a durable run of the local journal.
struct LocalGateway {
    runtime: Runtime,
    catalog: Catalog,
    /// The budgets of every run it starts (agent.yaml's `limits`; none for the CLI's
    /// own tools).
    budgets: toolshed_journal::Budgets,
}

fn exposed(t: &toolshed_core::Tool) -> ExposedTool {
    let s = t.spec();
    let read_only = s.effects == Effects::None;
    ExposedTool {
        name: s.name.to_string(),
        description: s.description.clone(),
        input_schema: s.input_schema.clone(),
        output_schema: s
            .output_schema
            .clone()
            .filter(|o| o.get("type").and_then(Value::as_str) == Some("object")),
        read_only,
        destructive: !read_only && !matches!(s.approval, Approval::Never),
        idempotent: s.idempotency != Idempotency::None,
    }
}

fn log_of(crumb: &Crumb) -> Option<CallEvent> {
    let (level, what) = match crumb.kind {
        CrumbKind::Partial => {
            return Some(CallEvent::Partial(
                crumb.payload.clone().unwrap_or(Value::Null),
            ));
        }
        CrumbKind::Call => (LogLevel::Info, "started"),
        CrumbKind::Result => (LogLevel::Info, "completed"),
        CrumbKind::Error => (LogLevel::Error, "failed"),
        _ => (LogLevel::Debug, crumb.kind.as_str()),
    };
    Some(CallEvent::Log {
        level,
        data: json!({"event": crumb.kind.as_str(), "message": format!("tool `{}` {what}", crumb.tool_name), "run_id": &*crumb.run_id}),
    })
}

/// The run an idempotency key names, per caller and tool.
fn keyed_run_id(caller: &Principal, tool: &str, key: &str) -> String {
    let text = format!("{}\0{}\0{tool}\0{key}", caller.iss, caller.sub);
    format!("mcp-{}", toolshed_runtime::args_hash(&Value::String(text)))
}

#[async_trait]
impl Gateway for LocalGateway {
    type Caller = Principal;

    async fn list_tools(&self, _caller: &Principal) -> Result<Vec<ExposedTool>, GatewayError> {
        Ok(self
            .runtime
            .pipeline()
            .toolset()
            .iter()
            .map(exposed)
            .collect())
    }

    async fn call_tool(
        &self,
        caller: &Principal,
        name: &str,
        args: Map<String, Value>,
        options: CallOptions,
    ) -> Result<CallOutcome, GatewayError> {
        let pipeline = self.runtime.pipeline();
        let Some(tool) = pipeline.toolset().get(name) else {
            return Err(GatewayError::NotFound(format!(
                "no tool `{name}` in this agent; tools/list names them"
            )));
        };
        let args = Value::Object(args);
        let mut checked = args.clone();
        if let Err(violations) = tool.input_schema().validate_with_defaults(&mut checked) {
            return Ok(CallOutcome::InvalidArgs {
                message: toolshed_core::schema::describe_violations(
                    &format!("invalid arguments for tool `{name}`"),
                    &violations,
                ),
            });
        }
        let run_id = match (&options.continue_run, &options.idempotency_key) {
            (Some(id), _) => id.clone(),
            (None, Some(k)) => keyed_run_id(caller, name, k),
            (None, None) => uuid::Uuid::now_v7().to_string(),
        };
        let call = ToolCall {
            id: "call_0".into(),
            name: name.to_owned(),
            args: args.clone(),
        };
        let mut crumbs = pipeline.crumbs().subscribe();
        let attended = toolshed_runtime::Attended {
            asker: options.asker.clone(),
        };
        let fut = self.call_in(
            caller,
            run_id.clone(),
            call,
            // A continued run (approved by elicitation) exists: it is resumed, never
            // made again.
            options.idempotency_key.is_some() || options.continue_run.is_some(),
            options.via.as_ref(),
            &attended,
        );
        tokio::pin!(fut);
        let forward = |c: &Crumb| {
            if *c.run_id == *run_id
                && let (Some(tx), Some(e)) = (&options.events, log_of(c))
            {
                let _ = tx.send(e);
            }
        };
        let step = loop {
            tokio::select! {
                biased;
                c = crumbs.recv() => if let Ok(c) = c { forward(&c) },
                r = &mut fut => break r,
            }
        };
        while let Ok(c) = crumbs.try_recv() {
            forward(&c);
        }
        Ok(match step? {
            CallStep::Done(outcome) => CallOutcome::Done {
                run_id,
                result: outcome.result,
                content: outcome.diagnostics.content,
            },
            CallStep::Parked(gate) => match gate.gate {
                Gate::Approval {
                    reason, four_eyes, ..
                } => CallOutcome::PendingApproval {
                    run_id,
                    call_id: gate.call_id,
                    four_eyes,
                    reason,
                    idempotency_key: options.idempotency_key,
                },
                _ => CallOutcome::PendingAnswer {
                    run_id,
                    call_id: gate.call_id,
                    idempotency_key: options.idempotency_key,
                },
            },
        })
    }

    async fn decide(
        &self,
        caller: &Principal,
        call_id: &str,
        approve: bool,
        reason: String,
    ) -> Result<(), GatewayError> {
        let journal = self.runtime.journal().as_ref();
        let decided = if approve {
            toolshed_runtime::approve(journal, call_id, &caller.sub, Some(reason)).await
        } else {
            toolshed_runtime::deny(journal, call_id, &caller.sub, Some(reason)).await
        };
        decided
            .map(drop)
            .map_err(|e| GatewayError::Invalid(e.to_string()))
    }

    fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}

impl LocalGateway {
    /// Make the call in run `run_id`: continued when it `existing` (a keyed call, or one approved at the client), else new.
    async fn call_in(
        &self,
        caller: &Principal,
        run_id: String,
        call: ToolCall,
        existing: bool,
        via: Option<&toolshed_mcp::server::Inbound>,
        attended: &toolshed_runtime::Attended,
    ) -> Result<CallStep, GatewayError> {
        let run_id = run_id.as_str();
        let fail = |e: toolshed_runtime::RuntimeError| GatewayError::Internal(e.to_string());
        if existing {
            match self.runtime.journal().get_run(run_id).await {
                Ok(run) => {
                    let same = matches!(
                        serde_json::from_value::<Driver>(run.driver.clone()),
                        Ok(Driver::Direct { tool, args }) if tool == call.name && args == call.args
                    );
                    if !same {
                        return Err(GatewayError::Invalid(format!(
                            "the idempotency key is already used by another call (run `{run_id}`); use a new key for a new call"
                        )));
                    }
                    if run.status.is_final() {
                        let calls = self
                            .runtime
                            .journal()
                            .calls_of_run(run_id)
                            .await
                            .map_err(|e| GatewayError::Internal(e.to_string()))?;
                        let Some(rec) = calls.into_iter().find(|c| c.tool_call_id == call.id)
                        else {
                            return Err(GatewayError::Invalid(format!(
                                "run `{run_id}` ended without its call; use a new idempotency key"
                            )));
                        };
                        let result = match (rec.result, rec.error) {
                            (_, Some(e)) => Err(e),
                            (r, None) => Ok(r.unwrap_or(Value::Null)),
                        };
                        return Ok(CallStep::Done(toolshed_core::CallOutcome {
                            tool_call_id: Arc::from(call.id.as_str()),
                            tool_name: Arc::from(call.name.as_str()),
                            result,
                            duration: std::time::Duration::from_secs_f64(
                                rec.duration_ms.unwrap_or(0.0).max(0.0) / 1000.0,
                            ),
                            attempts: rec.attempts,
                            diagnostics: rec.diagnostics,
                        }));
                    }
                    let handle = self
                        .runtime
                        .resume_attended(run_id, attended)
                        .await
                        .map_err(fail)?;
                    let step = handle.call(call).await.map_err(fail);
                    let finished = handle.finish().await.map_err(fail);
                    crate::workspaces::run_ended(self.runtime.journal().as_ref(), run_id).await;
                    finished?;
                    return step;
                }
                Err(JournalError::NotFound { .. }) => {}
                Err(e) => return Err(GatewayError::Internal(e.to_string())),
            }
        }
        let driver = Driver::Direct {
            tool: call.name.clone(),
            args: call.args.clone(),
        };
        let mut driver = serde_json::to_value(&driver).unwrap_or_default();
        if let Some(via) = via {
            via.record_in(&mut driver);
        }
        let new = NewRunBuilder::new("mcp")
            .id(run_id)
            .principal(caller.clone())
            .driver(driver)
            .budgets(self.budgets)
            .build();
        let ran = self
            .runtime
            .run_once_attended(new, call, attended)
            .await
            .map_err(fail);
        crate::workspaces::run_ended(self.runtime.journal().as_ref(), run_id).await;
        let (_, step) = ran?;
        Ok(step)
    }
}

/// Bridge stdio to `TOOLSHED_URL`'s `/mcp`: each line from stdin is one JSON-RPC
/// message, POSTed with the caller's token (and the session id the server gave);
/// every message of the answer goes to stdout, one per line.
async fn bridge() -> Result<(), Failure> {
    let client = crate::client::Client::from_env()?;
    let url = client.url(&["mcp"], &[]);
    let token = crate::client::find_token()
        .map_err(Failure::bad_input)?
        .map(|(t, _)| t)
        .ok_or_else(|| {
            Failure::bad_input(anyhow!(
                "no token for {}: run `toolshed login` or set {}",
                client.base(),
                crate::client::TOKEN_VAR
            ))
        })?;
    let http = reqwest::Client::new();
    let session: Arc<tokio::sync::Mutex<Option<String>>> = Arc::default();
    let stdout = Arc::new(tokio::sync::Mutex::new(tokio::io::stdout()));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(line) = lines.next_line().await.map_err(internal)? {
        if line.trim().is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                write_line(&stdout, &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": format!("not JSON: {e}")}})).await;
                continue;
            }
        };
        let is_init = message.get("method").and_then(Value::as_str) == Some("initialize");
        let (http, url, token, session, stdout) = (
            http.clone(),
            url.clone(),
            token.clone(),
            session.clone(),
            stdout.clone(),
        );
        let send = async move {
            let mut req = http
                .post(url.clone())
                .bearer_auth(&token)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json");
            if let Some(id) = session.lock().await.clone() {
                req = req.header("mcp-session-id", id);
            }
            let answer = match req.body(message.to_string()).send().await {
                Ok(a) => a,
                Err(e) => {
                    if let Some(id) = message.get("id") {
                        write_line(&stdout, &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": format!("toolshed server unreachable: {e}")}})).await;
                    }
                    return;
                }
            };
            if is_init
                && let Some(id) = answer
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
            {
                *session.lock().await = Some(id.to_owned());
            }
            let status = answer.status();
            let is_sse = answer
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            if !status.is_success() || !is_sse {
                let text = answer.text().await.unwrap_or_default();
                if !status.is_success() {
                    if let Some(id) = message.get("id") {
                        let why: String = text.chars().take(500).collect();
                        write_line(&stdout, &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32001, "message": format!("toolshed server answered {status}: {why}")}})).await;
                    }
                } else if let Ok(v) = serde_json::from_str::<Value>(&text) {
                    write_line(&stdout, &v).await;
                }
                return;
            }
            // A request's answer comes on an SSE stream, after whatever the server sends
            // first (progress, logs, its own requests such as an elicitation, which the
            // client must see before the answer can come): each event goes out as it
            // arrives. A stream the server closed before the answer (SEP-1699 polling) is
            // resumed with `Last-Event-ID`.
            let waits_for = message.get("method").and(message.get("id")).cloned();
            let mut seen = std::collections::HashSet::new();
            let mut relayed = relay_sse(answer, &stdout, waits_for.as_ref(), &mut seen).await;
            let Some(request_id) = waits_for else { return };
            let mut resumes = 0;
            while !relayed.answered {
                let Some(last) = relayed.last_event_id.clone() else {
                    write_line(&stdout, &json!({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32001, "message": "the toolshed server ended the answer's stream without the answer"}})).await;
                    return;
                };
                if resumes == MAX_RESUMES {
                    write_line(&stdout, &json!({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32001, "message": format!("no answer after {MAX_RESUMES} resumed streams")}})).await;
                    return;
                }
                resumes += 1;
                let wait = relayed.retry.unwrap_or(Duration::from_millis(500));
                tokio::time::sleep(wait.min(Duration::from_secs(30))).await;
                let mut get = http
                    .get(url.clone())
                    .bearer_auth(&token)
                    .header("accept", "text/event-stream")
                    .header("last-event-id", &last);
                if let Some(id) = session.lock().await.clone() {
                    get = get.header("mcp-session-id", id);
                }
                match get.send().await {
                    Ok(a) if a.status().is_success() => {
                        let next = relay_sse(a, &stdout, Some(&request_id), &mut seen).await;
                        relayed = Relayed {
                            answered: next.answered,
                            last_event_id: next.last_event_id.or(Some(last)),
                            retry: next.retry.or(relayed.retry),
                        };
                    }
                    Ok(a) => {
                        let status = a.status();
                        write_line(&stdout, &json!({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32001, "message": format!("the answer's stream could not be resumed: the toolshed server answered {status}")}})).await;
                        return;
                    }
                    Err(e) => {
                        write_line(&stdout, &json!({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": format!("toolshed server unreachable: {e}")}})).await;
                        return;
                    }
                }
            }
        };
        // The handshake is answered before anything else is sent (it sets the session).
        if is_init {
            send.await;
        } else {
            tasks.spawn(send);
        }
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// How many times the bridge resumes one answer's stream before it gives up.
const MAX_RESUMES: usize = 1000;

/// The longest SSE line the bridge holds (an answer's `data:` line included).
const MAX_SSE_LINE: usize = 64 << 20;

/// What one SSE stream from the server carried.
#[derive(Debug, Default)]
struct Relayed {
    /// The answer to the request the stream was opened for came.
    answered: bool,
    /// The id of the last event with one: where a resumed stream starts.
    last_event_id: Option<String>,
    /// How long the server asks a client to wait before it reconnects.
    retry: Option<Duration>,
}

/// Write each message of an SSE stream to stdout as it arrives, each event once
/// (`seen` holds the event ids already written: a resumed stream replays from the last
/// one). Whether `request_id`'s answer was among them.
async fn relay_sse(
    mut answer: reqwest::Response,
    stdout: &tokio::sync::Mutex<tokio::io::Stdout>,
    request_id: Option<&Value>,
    seen: &mut std::collections::HashSet<String>,
) -> Relayed {
    let mut out = Relayed::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut data = String::new();
    let mut event_id: Option<String> = None;
    let mut dispatch =
        async |data: &mut String, event_id: &mut Option<String>, out: &mut Relayed| {
            let id = event_id.take();
            let fresh = id.as_ref().is_none_or(|i| seen.insert(i.clone()));
            if let Some(i) = id {
                out.last_event_id = Some(i);
            }
            if fresh && let Ok(v) = serde_json::from_str::<Value>(data.trim()) {
                if request_id.is_some_and(|r| v.get("id") == Some(r))
                    && (v.get("result").is_some() || v.get("error").is_some())
                {
                    out.answered = true;
                }
                write_line(stdout, &v).await;
            }
            data.clear();
        };
    loop {
        let chunk = match answer.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) | Err(_) => break,
        };
        pending.extend_from_slice(&chunk);
        while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
            let raw: Vec<u8> = pending.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                dispatch(&mut data, &mut event_id, &mut out).await;
            } else if let Some(v) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            } else if let Some(v) = line.strip_prefix("id:") {
                event_id = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("retry:") {
                out.retry = v.trim().parse().ok().map(Duration::from_millis);
            }
        }
        if pending.len() > MAX_SSE_LINE || data.len() > MAX_SSE_LINE {
            break;
        }
    }
    if !data.is_empty() {
        dispatch(&mut data, &mut event_id, &mut out).await;
    }
    out
}

async fn write_line(stdout: &tokio::sync::Mutex<tokio::io::Stdout>, v: &Value) {
    let mut out = stdout.lock().await;
    let mut line = v.to_string();
    line.push('\n');
    // A client that went away ends the bridge when stdin closes.
    let _ = out.write_all(line.as_bytes()).await;
    let _ = out.flush().await;
}

fn config(args: &ConfigArgs, db: &Db) -> Result<(), Failure> {
    let exe = std::env::current_exe()
        .ok()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "toolshed".into());
    let mut serve_args = vec!["mcp".to_owned(), "serve".to_owned()];
    if let Some(dir) = &args.agent {
        let abs = std::fs::canonicalize(dir)
            .map_err(|e| Failure::bad_input(anyhow!("--agent {}: {e}", dir.display())))?;
        serve_args.push("--agent".into());
        serve_args.push(abs.display().to_string());
    }
    let mut env = Map::new();
    env.insert("TOOLSHED_DATABASE_URL".into(), json!(db.url()));
    if let Ok(url) = std::env::var(crate::client::URL_VAR)
        && !url.trim().is_empty()
    {
        env.insert(crate::client::URL_VAR.into(), json!(url));
    }
    let server = json!({"command": exe, "args": serve_args, "env": env});
    let name = &args.name;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Failure::Error {
            code: EXIT_BAD_INPUT,
            error: anyhow!("--name: use letters, digits, `-` and `_`"),
        });
    }
    let (file, snippet) = match args.client {
        ClientKind::ClaudeCode => (".mcp.json", json!({"mcpServers": {name: server}})),
        ClientKind::Cursor => (
            ".cursor/mcp.json or ~/.cursor/mcp.json",
            json!({"mcpServers": {name: server}}),
        ),
        ClientKind::ClaudeDesktop => (
            "claude_desktop_config.json (~/.config/Claude/ or ~/Library/Application Support/Claude/)",
            json!({"mcpServers": {name: server}}),
        ),
        ClientKind::Vscode => {
            let mut s = server;
            s["type"] = json!("stdio");
            (".vscode/mcp.json", json!({"servers": {name: s}}))
        }
    };
    eprintln!("# add to {file}");
    print_raw(&serde_json::to_string_pretty(&snippet).unwrap_or_default());
    Ok(())
}
