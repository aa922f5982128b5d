//! The six tools of `sandbox: true`: `bash`, `read_file`, `write_file`, `edit_file`,
//! `list_files` and `search_files`. Their argument names and result shapes are the
//! common ones of coding agents (`old_string`/`new_string`, 1-based `offset`/`limit`
//! lines); bash's result has the seed's sandbox fields (`stdout`, `stderr`,
//! `exit_code`, `timed_out`, `duration_ms`) plus the truncation and limit flags.

use std::future::Future;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use toolshed_core::{
    Diagnostics, Effects, ErrorCode, HandlerFuture, Idempotency, Reply, SpecError, Tool,
    ToolContext, ToolError, ToolOutput,
};
use toolshed_sandbox::{
    Bind, KillReason, LimitsRequest, MergeBudget, Network, OverlayRoom, RunSpec,
};

use super::fs::{FsError, INSIDE, Kind, WriteCost, check_path};
use super::{Budget, Opened, Workspaces};
use crate::file::SandboxSettings;

/// The names of the tools `sandbox: true` grants.
pub const WORKSPACE_TOOLS: &[&str] = &[
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "search_files",
];

/// Lines `read_file` returns when `limit` is not given.
const DEFAULT_LINES: u64 = 2000;
/// Characters of a matching line `search_files` returns.
const MATCH_CHARS: usize = 500;

/// Every tool, for this agent's settings.
pub(super) fn all(ws: &Workspaces, settings: &SandboxSettings) -> Result<Vec<Tool>, SpecError> {
    Ok(vec![
        bash(ws, settings)?,
        read_file(ws)?,
        write_file(ws, settings)?,
        edit_file(ws, settings)?,
        list_files(ws)?,
        search_files(ws)?,
    ])
}

/// A handler from an async fn of (workspaces, args, ctx) to a reply.
fn handler<A, F, Fut>(ws: &Workspaces, f: F) -> Arc<dyn toolshed_core::Handler>
where
    A: for<'de> Deserialize<'de> + Send + 'static,
    F: Fn(Workspaces, A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let ws = ws.clone();
    Arc::new(move |args: Value, ctx: ToolContext| -> HandlerFuture {
        match serde_json::from_value::<A>(args) {
            Ok(a) => Box::pin(f(ws.clone(), a, ctx)),
            Err(e) => {
                let err = ToolError::new(ErrorCode::InvalidArgs, format!("invalid arguments: {e}"));
                Box::pin(std::future::ready(Reply::new(Err(err))))
            }
        }
    })
}

fn value(r: Result<Value, ToolError>) -> Reply {
    Reply::new(r.map(ToolOutput::Value))
}

/// The model's error for a workspace failure: `INVALID_ARGS` naming the field (with
/// the pipeline's `violations` details shape), or `HANDLER_ERROR` for the host's.
fn tool_error(e: FsError, args: &Value) -> ToolError {
    match e {
        FsError::Field { field, message } => {
            ToolError::new(ErrorCode::InvalidArgs, format!("`{field}`: {message}")).with_details(
                json!({"violations": [{
                    "pointer": format!("/{field}"),
                    "keyword": "workspace",
                    "expected": message,
                    "given": args.get(field).cloned().unwrap_or(Value::Null),
                }]}),
            )
        }
        FsError::Io(m) => ToolError::handler(m),
    }
}

/// Runs blocking work on the opened workspace.
async fn blocking<T: Send + 'static>(
    opened: Opened,
    f: impl FnOnce(&Opened) -> Result<T, FsError> + Send + 'static,
) -> Result<T, FsError> {
    tokio::task::spawn_blocking(move || f(&opened))
        .await
        .map_err(|e| FsError::Io(format!("the workspace operation failed: {e}")))?
}

/// Opens the run's workspace and runs `f` on it, turning failures into the model's
/// errors.
async fn on_workspace<T: Send + 'static>(
    ws: &Workspaces,
    ctx: &ToolContext,
    given: Value,
    f: impl FnOnce(&Opened) -> Result<T, FsError> + Send + 'static,
) -> Result<T, ToolError> {
    let opened = ws
        .open(ctx.run_id())
        .await
        .map_err(|e| tool_error(e, &given))?;
    blocking(opened, f).await.map_err(|e| tool_error(e, &given))
}

fn path_schema(what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "description": what})
}

fn build(
    name: &str,
    description: &str,
    schema: Value,
    effects: Effects,
    handler: Arc<dyn toolshed_core::Handler>,
) -> Result<Tool, SpecError> {
    let idempotency = if effects == Effects::None {
        Idempotency::None
    } else {
        Idempotency::Keyed
    };
    Tool::builder(name)
        .description(description)
        .input_schema(schema)
        .effects(effects)
        .idempotency(idempotency)
        .timeout(Duration::from_secs(60))
        .raw_handler(handler)
        .build()
}

// ---- read_file ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

fn read_file(ws: &Workspaces) -> Result<Tool, SpecError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "path": path_schema("The file, relative to the workspace (or under /workspace, as bash sees it)."),
            "offset": {"type": "integer", "minimum": 1, "description": "The first line to read, from 1 (default 1)."},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read (default 2000)."}
        },
        "required": ["path"],
        "additionalProperties": false
    });
    build(
        "read_file",
        "Read a text file of the workspace. Lines are numbered from 1 (`cat -n` style: the number, a tab, the line); pass `offset` and `limit` to page through a long file.",
        schema,
        Effects::None,
        handler(ws, |ws: Workspaces, a: ReadArgs, ctx| async move {
            let cap = ws.config().caps.read_bytes;
            let given = json!({"path": a.path, "offset": a.offset, "limit": a.limit});
            value(
                async {
                    let rel =
                        check_path("path", &a.path, false).map_err(|e| tool_error(e, &given))?;
                    let shown = rel.display().to_string();
                    let r = on_workspace(&ws, &ctx, given.clone(), move |o| {
                        o.folder.read("path", &rel, cap)
                    })
                    .await?;
                    let text = String::from_utf8_lossy(&r.bytes);
                    let lines: Vec<&str> = if text.is_empty() {
                        Vec::new()
                    } else {
                        text.strip_suffix('\n')
                            .unwrap_or(&text)
                            .split('\n')
                            .collect()
                    };
                    let total = lines.len() as u64;
                    let offset = a.offset.unwrap_or(1).max(1);
                    if offset > total && !(total == 0 && offset == 1) {
                        return Err(tool_error(
                            FsError::field(
                                "offset",
                                format!(
                                    "line {offset} is past the end: `{shown}` has {total} lines"
                                ),
                            ),
                            &given,
                        ));
                    }
                    let limit = a.limit.unwrap_or(DEFAULT_LINES).max(1);
                    let start = usize::try_from(offset - 1).unwrap_or(usize::MAX);
                    let take = usize::try_from(limit).unwrap_or(usize::MAX);
                    let mut content = String::new();
                    let mut end = offset.saturating_sub(1);
                    for (i, line) in lines.iter().enumerate().skip(start).take(take) {
                        if !content.is_empty() {
                            content.push('\n');
                        }
                        content.push_str(&format!("{:>6}\t{line}", i + 1));
                        end = i as u64 + 1;
                    }
                    Ok(json!({
                        "path": shown,
                        "content": content,
                        "start_line": offset,
                        "end_line": end,
                        "total_lines": total,
                        "size": r.size,
                        "truncated": r.size > cap,
                    }))
                }
                .await,
            )
        }),
    )
}

// ---- write_file ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

fn write_file(ws: &Workspaces, settings: &SandboxSettings) -> Result<Tool, SpecError> {
    let budget = Budget::of(settings);
    let schema = json!({
        "type": "object",
        "properties": {
            "path": path_schema("The file, relative to the workspace; its folders are created."),
            "content": {"type": "string", "description": "The whole new content of the file."}
        },
        "required": ["path", "content"],
        "additionalProperties": false
    });
    build(
        "write_file",
        "Write a file of the workspace, creating it (and its folders) or replacing its whole content.",
        schema,
        Effects::Sandbox,
        handler(ws, move |ws: Workspaces, a: WriteArgs, ctx| async move {
            let cap = ws.config().caps.write_bytes;
            let given = json!({"path": a.path});
            value(async {
                let rel = check_path("path", &a.path, false).map_err(|e| tool_error(e, &given))?;
                let bytes = a.content.len() as u64;
                if bytes > cap {
                    return Err(tool_error(FsError::field("content", format!("is {bytes} bytes; at most {cap} can be written in one call (build larger files with bash)")), &given));
                }
                let shown = rel.display().to_string();
                let content = a.content;
                let created = on_workspace(&ws, &ctx, given.clone(), move |o| {
                    let cost = o.folder.cost("path", &rel)?;
                    let after = budget.check_write(o.usage()?, cost, bytes, "content")?;
                    let written = o.folder.write("path", &rel, content.as_bytes());
                    o.set_usage(written.is_ok().then_some(after));
                    written
                })
                .await?;
                Ok(json!({"path": shown, "bytes": bytes, "created": created}))
            }
            .await)
        }),
    )
}

// ---- edit_file ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

fn edit_file(ws: &Workspaces, settings: &SandboxSettings) -> Result<Tool, SpecError> {
    let budget = Budget::of(settings);
    let schema = json!({
        "type": "object",
        "properties": {
            "path": path_schema("The file to edit, relative to the workspace."),
            "old_string": {"type": "string", "minLength": 1, "description": "The exact text to replace; it must occur exactly once unless `replace_all` is set (include surrounding lines to make it unique)."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {"type": "boolean", "default": false, "description": "Replace every occurrence instead of exactly one."}
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": false
    });
    build(
        "edit_file",
        "Replace exact text in a file of the workspace: `old_string` must occur exactly once (or set `replace_all`), and becomes `new_string`.",
        schema,
        Effects::Sandbox,
        handler(ws, move |ws: Workspaces, a: EditArgs, ctx| async move {
            let cap = ws.config().caps.write_bytes;
            let given =
                json!({"path": a.path, "old_string": a.old_string, "new_string": a.new_string});
            value(async {
                let rel = check_path("path", &a.path, false).map_err(|e| tool_error(e, &given))?;
                if a.old_string.is_empty() {
                    return Err(tool_error(FsError::field("old_string", "must not be empty; use write_file to create or replace a whole file"), &given));
                }
                if a.old_string == a.new_string {
                    return Err(tool_error(FsError::field("new_string", "is the same as `old_string`; nothing would change"), &given));
                }
                let shown = rel.display().to_string();
                on_workspace(&ws, &ctx, given.clone(), move |o| {
                    let r = o.folder.read("path", &rel, cap)?;
                    if r.size > cap {
                        return Err(FsError::field("path", format!("`{shown}` has {} bytes, more than the {cap} that can be edited; edit it with bash (e.g. sed)", r.size)));
                    }
                    let text = String::from_utf8(r.bytes).map_err(|_| FsError::field("path", format!("`{shown}` is not UTF-8 text; edit it with bash")))?;
                    let count = text.matches(a.old_string.as_str()).count();
                    if count == 0 {
                        return Err(FsError::field("old_string", format!("was not found in `{shown}`; it must match the file exactly, whitespace included (read_file shows it)")));
                    }
                    if count > 1 && !a.replace_all {
                        return Err(FsError::field("old_string", format!("occurs {count} times in `{shown}`; include more surrounding text to make it unique, or set `replace_all: true`")));
                    }
                    let new = if a.replace_all { text.replace(&a.old_string, &a.new_string) } else { text.replacen(&a.old_string, &a.new_string, 1) };
                    if new.len() as u64 > cap {
                        return Err(FsError::field("new_string", format!("the edited file would have {} bytes, more than the cap of {cap}", new.len())));
                    }
                    let cost = WriteCost { old_bytes: r.size, new_file: false, new_folders: 0 };
                    let after = budget.check_write(o.usage()?, cost, new.len() as u64, "new_string")?;
                    let written = o.folder.write("path", &rel, new.as_bytes());
                    o.set_usage(written.is_ok().then_some(after));
                    written?;
                    Ok(json!({"path": shown, "replacements": count, "bytes": new.len()}))
                })
                .await
            }
            .await)
        }),
    )
}

// ---- list_files ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    recursive: bool,
}

fn list_files(ws: &Workspaces) -> Result<Tool, SpecError> {
    let schema = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The folder, relative to the workspace (default: the workspace itself)."},
            "recursive": {"type": "boolean", "default": false, "description": "List the folders below too (symlinks are listed, never entered)."}
        },
        "additionalProperties": false
    });
    build(
        "list_files",
        "List a folder of the workspace: each entry's path (relative to the workspace), kind (file, dir, symlink, other) and size.",
        schema,
        Effects::None,
        handler(ws, |ws: Workspaces, a: ListArgs, ctx| async move {
            let cap = ws.config().caps.list_entries;
            let raw = a.path.unwrap_or_else(|| ".".into());
            let given = json!({"path": raw});
            value(
                async {
                    let rel = check_path("path", &raw, true).map_err(|e| tool_error(e, &given))?;
                    let shown = shown(&rel);
                    let (entries, truncated) = on_workspace(&ws, &ctx, given.clone(), move |o| {
                        let mut entries = Vec::new();
                        let mut truncated = false;
                        o.folder.walk("path", &rel, a.recursive, &mut |e, _| {
                            if entries.len() >= cap {
                                truncated = true;
                                return false;
                            }
                            entries.push(e.clone());
                            true
                        })?;
                        Ok((entries, truncated))
                    })
                    .await?;
                    Ok(json!({"path": shown, "entries": entries, "truncated": truncated}))
                }
                .await,
            )
        }),
    )
}

fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".into()
    } else {
        rel.display().to_string()
    }
}

// ---- search_files ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    max_matches: Option<u64>,
}

fn search_files(ws: &Workspaces) -> Result<Tool, SpecError> {
    let caps = ws.config().caps;
    let schema = json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "A regular expression (Rust `regex` syntax), matched against each line."},
            "path": {"type": "string", "description": "A folder (searched with the folders below it) or one file, relative to the workspace (default: the whole workspace)."},
            "case_insensitive": {"type": "boolean", "default": false},
            "max_matches": {"type": "integer", "minimum": 1, "maximum": caps.search_matches, "description": format!("Stop after this many matching lines (at most {}).", caps.search_matches)}
        },
        "required": ["pattern"],
        "additionalProperties": false
    });
    build(
        "search_files",
        "Search the workspace's text files for lines matching a regular expression; each match gives the file, the line number (from 1) and the line. Symlinks are not followed; binary and very large files are skipped.",
        schema,
        Effects::None,
        handler(ws, |ws: Workspaces, a: SearchArgs, ctx| async move {
            let caps = ws.config().caps;
            let raw = a.path.clone().unwrap_or_else(|| ".".into());
            let given = json!({"pattern": a.pattern, "path": raw});
            value(
                async {
                    if a.pattern.len() > caps.pattern_bytes {
                        return Err(tool_error(
                            FsError::field(
                                "pattern",
                                format!(
                                    "is {} bytes; at most {}",
                                    a.pattern.len(),
                                    caps.pattern_bytes
                                ),
                            ),
                            &given,
                        ));
                    }
                    let regex = regex::RegexBuilder::new(&a.pattern)
                        .case_insensitive(a.case_insensitive)
                        .size_limit(caps.regex_bytes)
                        .dfa_size_limit(caps.regex_bytes)
                        .build()
                        .map_err(|e| {
                            tool_error(
                                FsError::field(
                                    "pattern",
                                    format!("is not a valid regular expression: {e}"),
                                ),
                                &given,
                            )
                        })?;
                    let rel = check_path("path", &raw, true).map_err(|e| tool_error(e, &given))?;
                    let max = a.max_matches.map_or(caps.search_matches, |m| {
                        usize::try_from(m)
                            .unwrap_or(usize::MAX)
                            .min(caps.search_matches)
                    });
                    on_workspace(&ws, &ctx, given.clone(), move |o| {
                        search(o, &rel, &regex, max, &caps)
                    })
                    .await
                }
                .await,
            )
        }),
    )
}

fn search(
    o: &Opened,
    rel: &Path,
    regex: &regex::Regex,
    max: usize,
    caps: &super::WorkspaceCaps,
) -> Result<Value, FsError> {
    let mut matches = Vec::new();
    let mut searched = 0usize;
    let mut skipped = 0usize;
    let mut truncated = false;
    let mut read = 0u64;
    let mut look = |path: &str, size: u64, file: Option<std::fs::File>| -> bool {
        if searched >= caps.search_files || read >= caps.search_total_bytes {
            truncated = true;
            return false;
        }
        let Some(file) = file else { return true };
        if size > caps.search_file_bytes {
            skipped += 1;
            return true;
        }
        let mut bytes = Vec::new();
        if file
            .take(caps.search_file_bytes)
            .read_to_end(&mut bytes)
            .is_err()
            || bytes.contains(&0)
        {
            skipped += 1;
            return true;
        }
        searched += 1;
        read += bytes.len() as u64;
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                if matches.len() >= max {
                    truncated = true;
                    return false;
                }
                let shown: String = line.chars().take(MATCH_CHARS).collect();
                matches.push(json!({"path": path, "line": i + 1, "text": shown}));
            }
        }
        true
    };
    match o.folder.kind("path", rel)? {
        (Kind::File, size) => {
            let file = o.folder.open_file("path", rel)?;
            look(&rel.display().to_string(), size, Some(file));
        }
        (Kind::Dir, _) => {
            o.folder.walk("path", rel, true, &mut |e, open| {
                if e.kind != Kind::File {
                    return true;
                }
                look(&e.path, e.size, open())
            })?;
        }
        (Kind::Symlink, _) => {
            return Err(FsError::field(
                "path",
                format!(
                    "`{}` is a symlink; the workspace tools never follow symlinks",
                    rel.display()
                ),
            ));
        }
        _ => {
            return Err(FsError::field(
                "path",
                format!("`{}` is neither a file nor a folder", rel.display()),
            ));
        }
    }
    Ok(json!({
        "matches": matches,
        "truncated": truncated,
        "files_searched": searched,
        "files_skipped": skipped,
    }))
}

// ---- bash ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArgs {
    command: String,
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

fn bash(ws: &Workspaces, settings: &SandboxSettings) -> Result<Tool, SpecError> {
    let max_timeout = settings.timeout_seconds();
    let memory_mb = settings.memory_mb();
    let network = if settings.network_enabled {
        Network::On
    } else {
        Network::Off
    };
    let schema = json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "A bash script, run in the workspace folder (/workspace)."},
            "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": max_timeout, "description": format!("Stop it after this many seconds (default and at most {max_timeout}).")}
        },
        "required": ["command"],
        "additionalProperties": false
    });
    let net = if network == Network::On {
        "with outbound network"
    } else {
        "without network"
    };
    let budget = Budget::of(settings);
    let description = format!(
        "Run a bash command in a sandbox: in the workspace folder /workspace, whose files persist across the calls of this run (the file tools see the same files), {net}, with {memory_mb} MB of memory and at most {max_timeout} s. The workspace holds at most {} MiB and {} files and folders; what one call writes is kept in memory until the call ends, so it also counts against the call's memory. Writes past either limit fail with \"No space left on device\"; deleting (`rm`) always works. Programs written to the workspace cannot be executed directly: run scripts as `bash x.sh` or `python3 x.py`. Returns stdout, stderr, exit_code, timed_out, truncation flags and what the workspace holds.",
        settings.workspace_mb(),
        settings.workspace_files()
    );
    let tool = Tool::builder("bash")
        .description(description)
        .input_schema(schema)
        .effects(Effects::Sandbox)
        .idempotency(Idempotency::Keyed)
        // The sandbox's own deadline comes first; this one only bounds a stuck supervisor.
        .timeout(Duration::from_secs(max_timeout + 30))
        .raw_handler(handler(
            ws,
            move |ws: Workspaces, a: BashArgs, ctx| async move {
                run_bash(
                    ws,
                    a,
                    ctx,
                    BashLimits {
                        max_timeout,
                        memory_mb,
                        network,
                        budget,
                    },
                )
                .await
            },
        ))
        .build()?;
    Ok(tool)
}

#[derive(Clone, Copy)]
struct BashLimits {
    max_timeout: u64,
    memory_mb: u64,
    network: Network,
    budget: Budget,
}

/// New entries a call may make in a workspace that holds all the files it may: room
/// for the folders a deletion in a sub-folder copies into the call's layer (what else
/// the call makes is not kept).
const FULL_ROOM_FILES: u64 = 64;

/// Runs `f` on the opened workspace on a blocking thread, and hands it back.
async fn keeping<T: Send + 'static>(
    opened: Opened,
    f: impl FnOnce(&Opened) -> T + Send + 'static,
) -> Result<(Opened, T), ToolError> {
    tokio::task::spawn_blocking(move || {
        let t = f(&opened);
        (opened, t)
    })
    .await
    .map_err(|e| ToolError::handler(format!("the workspace operation failed: {e}")))
}

async fn run_bash(ws: Workspaces, a: BashArgs, ctx: ToolContext, limits: BashLimits) -> Reply {
    let caps = ws.config().caps;
    let given = json!({"command": a.command, "timeout_seconds": a.timeout_seconds});
    if a.command.len() > caps.command_bytes {
        return value(Err(tool_error(
            FsError::field(
                "command",
                format!(
                    "is {} bytes; at most {} (write a long script to a file with write_file and run `bash script.sh`)",
                    a.command.len(),
                    caps.command_bytes
                ),
            ),
            &given,
        )));
    }
    if a.command.contains('\0') {
        return value(Err(tool_error(
            FsError::field("command", "contains a NUL byte"),
            &given,
        )));
    }
    let timeout = a
        .timeout_seconds
        .unwrap_or(limits.max_timeout)
        .clamp(1, limits.max_timeout);
    let sandbox = match ws.sandbox() {
        Ok(s) => s.clone(),
        Err(e) => {
            return value(Err(ToolError::handler(format!(
                "bash cannot run: {e} [{}]",
                e.code()
            ))));
        }
    };
    let opened = match ws.open(ctx.run_id()).await {
        Ok(o) => o,
        Err(e) => return value(Err(tool_error(e, &given))),
    };
    // What the workspace holds bounds what this call may write: its layer gets what is
    // left (when nothing is, room for deletions only).
    let (opened, used) = match keeping(opened, Opened::usage).await {
        Ok((o, Ok(used))) => (o, used),
        Ok((_, Err(e))) => return value(Err(tool_error(e, &given))),
        Err(e) => return value(Err(e)),
    };
    let allowed = limits.budget.allowed();
    let room = OverlayRoom {
        bytes: allowed.bytes.saturating_sub(used.bytes),
        files: match allowed.files.saturating_sub(used.files) {
            0 => FULL_ROOM_FILES,
            left => left,
        },
    };
    let program = if Path::new("/bin/bash").is_file() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let mut spec = RunSpec::new(
        program,
        [
            "-c".to_owned(),
            format!("cd {INSIDE} || exit 125\n{}", a.command),
        ],
    )
    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
    .env("HOME", INSIDE)
    .env("PWD", INSIDE)
    .env("LANG", "C.UTF-8")
    .env("TERM", "dumb")
    .bind(Bind::overlay(&opened.path, INSIDE, room));
    spec.network = limits.network;
    spec.limits = LimitsRequest {
        memory_bytes: Some(limits.memory_mb.saturating_mul(1024 * 1024)),
        timeout_ms: Some(timeout.saturating_mul(1000)),
        cpu_time_ms: Some(timeout.saturating_mul(1000)),
        stdout_bytes: Some(caps.output_bytes),
        stderr_bytes: Some(caps.output_bytes),
        ..LimitsRequest::default()
    };
    let outcome = sandbox.run(spec, Vec::new()).await;
    let mut o = match outcome {
        Ok(o) => o,
        Err(e) => {
            return value(Err(ToolError::handler(format!(
                "bash could not run in the sandbox: {e} [{}]",
                e.code()
            ))
            .with_details(json!({"sandbox_code": e.code().as_str()}))));
        }
    };
    // What the call changed goes into the folder now, within the budget; also after a
    // timeout or an OOM kill.
    let upper = o.uppers.pop();
    let merged = match upper {
        Some(upper) => {
            let ran_out = upper.ran_out();
            let budget = MergeBudget { used, allowed };
            let merged = keeping(opened, move |op| {
                let merged = upper.merge(op.folder.fd(), budget);
                op.set_usage(merged.as_ref().ok().map(|r| r.usage));
                merged
            });
            match merged.await {
                Ok((_, Ok(report))) => Ok((report, ran_out)),
                Ok((_, Err(e))) => Err(format!("{e} [{}]", e.code())),
                Err(e) => Err(e.message),
            }
        }
        None => Err("the sandbox returned no layer for the workspace".to_owned()),
    };
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let cpu_time_ms = o
        .cpu_time
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut result = json!({
        "stdout": stdout,
        "stderr": stderr,
        "exit_code": o.exit_code(),
        "signal": o.signal(),
        "timed_out": o.timed_out,
        "oom_killed": o.oom_killed,
        "stdout_truncated": o.stdout_truncated,
        "stderr_truncated": o.stderr_truncated,
        "output_capped": o.killed == Some(KillReason::OutputCap),
        "duration_ms": u64::try_from(o.duration.as_millis()).unwrap_or(u64::MAX),
    });
    let diagnostics = Diagnostics {
        stdout,
        stderr,
        exit_code: o.exit_code(),
        signal: o.signal(),
        timed_out: o.timed_out,
        stdout_truncated: o.stdout_truncated,
        stderr_truncated: o.stderr_truncated,
        peak_memory_bytes: o.memory_peak_bytes,
        cpu_time_ms,
        oom_killed: o.oom_killed,
        ..Diagnostics::default()
    };
    let budget = limits.budget;
    let (report, ran_out) = match merged {
        Ok(m) => m,
        Err(e) => {
            let e = ToolError::handler(format!(
                "the command ran, but what it changed in the workspace could not be kept: {e}"
            ))
            .with_details(result);
            return Reply::new(Err(e)).with_diagnostics(diagnostics);
        }
    };
    let full = ran_out || report.over_budget || budget.full(report.usage);
    let mut workspace = budget.view(report.usage);
    workspace["full"] = json!(full);
    if full {
        workspace["message"] = json!(format!(
            "the workspace is full: {}; writes past that fail with \"No space left on device\". Delete files (`rm` works even when it is full) to make room",
            budget.describe(report.usage)
        ));
    }
    result["workspace"] = workspace;
    if report.refused_count > 0 {
        result["not_kept"] = json!(report.refused);
    }
    if report.over_budget {
        // The call wrote into a workspace that had no room for it: say so as an error,
        // with the command's output alongside.
        let listed: Vec<String> = report
            .refused
            .iter()
            .filter(|r| r.over_budget)
            .take(5)
            .map(|r| format!("`{}`", r.path.display()))
            .collect();
        let e = ToolError::handler(format!(
            "the workspace is full: {} of the entries the command wrote were not kept ({}{}); {}. Delete files with `rm` (that works even when the workspace is full) and run it again",
            report.refused_count,
            listed.join(", "),
            if report.refused_count > listed.len() as u64 { ", …" } else { "" },
            budget.describe(report.usage)
        ))
        .with_details(result);
        return Reply::new(Err(e)).with_diagnostics(diagnostics);
    }
    Reply::new(Ok(ToolOutput::Value(result))).with_diagnostics(diagnostics)
}
