//! Code run in the sandbox for `POST /api/v1/tools/sandbox/execute`: the server's
//! sandbox settings (defaults and ceilings), the one [`Sandbox`] it holds, turning a
//! registered tool's endpoint into a sandboxed command, and the seed's answer shape
//! ([`view`], which `toolshed sandbox run` prints too).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolshed_api::ApiCode;
use toolshed_api::views::{SandboxClamp, SandboxExecutionView, SandboxLimits};
use toolshed_core::file::ToolFile;
use toolshed_dispatch::{Dispatcher, Endpoint};
use toolshed_registry::ToolRecord;
use toolshed_sandbox::snippet::{Code, Entry, Language, Snippet, SnippetResult};
use toolshed_sandbox::{Bind, Limits, Network, Outcome, RunSpec, Sandbox, SandboxConfig};
use toolshed_sandbox::{SandboxCode, SandboxError};

use crate::code::RunEnv;
use crate::error::ApiError;

const MIB: u64 = 1024 * 1024;

/// The server's sandbox settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    /// The sandbox itself: the limits of a request that asks for none (the seed's:
    /// 256 MB, 30 s; the network off unless a request asks), the ceilings a request is
    /// lowered to (default 1024 MB and 300 s), whether the network may be given at all,
    /// and the operator's opt-ins to a weaker sandbox.
    pub config: SandboxConfig,
    /// The largest `code` accepted, in bytes (default 256 KiB); larger is a 413.
    pub max_code_bytes: usize,
    /// Inputs larger than this, as JSON, are recorded by their size only (default
    /// 16 KiB).
    pub record_input_bytes: usize,
    /// stdout and stderr are recorded up to this many bytes each (default 64 KiB); the
    /// answer itself carries what the sandbox kept.
    pub record_output_bytes: usize,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        let mut config = SandboxConfig::default();
        config.ceilings.memory_bytes = 1024 * MIB;
        config.ceilings.timeout_ms = 300_000;
        config.ceilings.cpu_time_ms = 300_000;
        SandboxSettings {
            config,
            max_code_bytes: 256 * 1024,
            record_input_bytes: 16 * 1024,
            record_output_bytes: 64 * 1024,
        }
    }
}

/// The server's sandbox, or why this host has none.
#[derive(Debug, Clone)]
pub enum SandboxHandle {
    /// Ready for untrusted code.
    Ready(Sandbox),
    /// The host cannot sandbox: the message names the mechanism and the fix.
    Unavailable(String),
}

impl SandboxHandle {
    /// Prepare the sandbox. A host that cannot sandbox is logged and remembered, and the
    /// server starts anyway: only the sandbox's routes answer 503.
    pub fn open(settings: &SandboxSettings) -> SandboxHandle {
        match Sandbox::new(settings.config.clone()) {
            Ok(sandbox) => {
                let c = sandbox.config();
                tracing::info!(
                    memory_mb = c.defaults.memory_bytes / MIB,
                    timeout_s = c.defaults.timeout_ms / 1000,
                    max_memory_mb = c.ceilings.memory_bytes / MIB,
                    max_timeout_s = c.ceilings.timeout_ms / 1000,
                    network_allowed = c.network_allowed,
                    weakened = ?sandbox.weakened(),
                    "sandbox ready for POST /api/v1/tools/sandbox/execute"
                );
                SandboxHandle::Ready(sandbox)
            }
            Err(e) => {
                let message = format!("{e} [{}]", e.code());
                tracing::warn!(
                    code = %e.code(),
                    "the sandbox is unavailable, so POST /api/v1/tools/sandbox/execute answers 503: {e}"
                );
                SandboxHandle::Unavailable(message)
            }
        }
    }

    /// The sandbox, or the 503 saying why there is none.
    pub fn get(&self) -> Result<&Sandbox, ApiError> {
        match self {
            SandboxHandle::Ready(s) => Ok(s),
            SandboxHandle::Unavailable(why) => Err(ApiError::new(
                ApiCode::SandboxUnavailable,
                format!("this server cannot run untrusted code: {why}"),
            )),
        }
    }
}

/// How a run's result is read.
#[derive(Debug, Clone)]
pub(crate) enum Runner {
    /// Code in a language (the seed's `run(input)`, or a registered function).
    Snippet(Snippet),
    /// A registered executable speaking the wire protocol: one request line on stdin,
    /// its `result` or `error` line on stdout.
    Exec,
}

/// One prepared run: the command, its stdin, what it runs (for the record).
#[derive(Debug)]
pub(crate) struct Prepared {
    pub runner: Runner,
    pub spec: RunSpec,
    pub stdin: Vec<u8>,
    /// `python`, `node`, `bash` or `exec`.
    pub language: &'static str,
    /// SHA-256 of the code (hex) and its size.
    pub code_sha256: String,
    pub code_bytes: u64,
    /// A registered tool's own limits (`timeout_seconds`/`timeout_ms`,
    /// `network_access`), used where the request sets none.
    pub tool_timeout_ms: Option<u64>,
    pub tool_network: bool,
}

impl Prepared {
    /// `code` in `language`, calling `run(input)`.
    pub(crate) fn code(
        language: Language,
        code: &str,
        input: &Value,
    ) -> Result<Prepared, ApiError> {
        let snippet = Snippet::new(language, Code::Inline(code.to_owned()));
        let spec = snippet.spec(input).map_err(sandbox_error)?;
        Ok(Prepared {
            stdin: snippet.stdin(input),
            runner: Runner::Snippet(snippet),
            spec,
            language: language.as_str(),
            code_sha256: sha256(code.as_bytes()),
            code_bytes: code.len() as u64,
            tool_timeout_ms: None,
            tool_network: false,
        })
    }

    /// A registered tool's own code on `input`, run as the registry runs it: its code's
    /// folder bound read-only at `/tool` (the uploaded files, or the folder of its file on
    /// the server), so it imports the modules beside it, and its installed dependencies
    /// searched first. `python:` calls its function with the input's fields as keyword
    /// arguments, `node:` its export with `(input, ctx)` (a TypeScript file as the
    /// dispatcher transpiles it), `exec:` gets one wire-protocol request line. Its
    /// declared timeout and `network_access` apply unless the request sets them. `env` is
    /// how this server runs the tool ([`crate::tools::run_env`]).
    pub(crate) async fn tool(
        dispatcher: &Dispatcher,
        record: &ToolRecord,
        env: &RunEnv,
        input: &Value,
    ) -> Result<Prepared, ApiError> {
        let Some(text) = env.endpoint.as_deref().or(record.endpoint.as_deref()) else {
            return Err(not_sandboxable(record, "has no endpoint"));
        };
        let endpoint = Endpoint::parse(text).map_err(|e| {
            ApiError::new(
                ApiCode::InvalidDefinition,
                format!("tool `{}` cannot run: {e}", record.name),
            )
        })?;
        // The folder shown at /tool and the file's place in it.
        let in_folder = |path: &Path| -> Result<(PathBuf, PathBuf), ApiError> {
            let split = match &env.root {
                Some(root) => path
                    .strip_prefix(root)
                    .ok()
                    .map(|rel| (root.clone(), rel.to_path_buf())),
                None => None,
            }
            .or_else(|| {
                Some((
                    path.parent()?.to_path_buf(),
                    PathBuf::from(path.file_name()?),
                ))
            });
            split.ok_or_else(|| {
                ApiError::new(
                    ApiCode::InvalidDefinition,
                    format!(
                        "tool `{}` cannot run: its endpoint names no file ({text})",
                        record.name
                    ),
                )
            })
        };
        let (snippet, path) = match &endpoint {
            Endpoint::Python { path, function } => {
                let (folder, file) = in_folder(path)?;
                (
                    Some(
                        Snippet::new(Language::Python, Code::InFolder { folder, file })
                            .with_entry(Entry::Function(function.clone()))
                            .with_libraries(env.libraries.clone()),
                    ),
                    path,
                )
            }
            Endpoint::Node { path, export } => {
                let entry = Entry::Function(export.clone().unwrap_or_else(|| "default".into()));
                let code = if endpoint.is_typescript() {
                    // The JavaScript the dispatcher runs for it (transpiled once, cached):
                    // the file alone, so it may import packages, not sibling `.ts` files.
                    let js = dispatcher.typescript_output(path).await.map_err(|e| {
                        ApiError::new(
                            ApiCode::InvalidDefinition,
                            format!("tool `{}` cannot run: {e}", record.name),
                        )
                    })?;
                    Code::File(js)
                } else {
                    let (folder, file) = in_folder(path)?;
                    Code::InFolder { folder, file }
                };
                (
                    Some(
                        Snippet::new(Language::Node, code)
                            .with_entry(entry)
                            .with_libraries(env.libraries.clone()),
                    ),
                    path,
                )
            }
            Endpoint::Exec { path } => (None, path),
            Endpoint::Builtin { .. } | Endpoint::Http { .. } => {
                return Err(not_sandboxable(
                    record,
                    &format!(
                        "runs in the server or behind a URL (`{text}`), not as code the sandbox can run; only python:, node: and exec: tools can; run it with POST /api/v1/registry/tools/{{id}}/execute"
                    ),
                ));
            }
        };
        let code = std::fs::read(path).map_err(|e| {
            ApiError::new(
                ApiCode::InvalidDefinition,
                format!(
                    "tool `{}` cannot run: its file {} cannot be read ({e})",
                    record.name,
                    path.display()
                ),
            )
        })?;
        let (code_sha256, code_bytes) = (sha256(&code), code.len() as u64);
        // The definition was checked when it was stored; one this server cannot read
        // has no limits of its own.
        let file = serde_json::from_value::<ToolFile>(record.definition.clone()).ok();
        let tool_timeout_ms = file.as_ref().and_then(|f| {
            f.timeout_ms
                .or_else(|| f.timeout_seconds.map(|s| s.saturating_mul(1000)))
        });
        let tool_network = file.as_ref().is_some_and(|f| f.network_access);
        match snippet {
            Some(snippet) => {
                let spec = snippet.spec(input).map_err(sandbox_error)?;
                Ok(Prepared {
                    stdin: snippet.stdin(input),
                    language: snippet.language.as_str(),
                    runner: Runner::Snippet(snippet),
                    spec,
                    code_sha256,
                    code_bytes,
                    tool_timeout_ms,
                    tool_network,
                })
            }
            None => {
                let (folder, file) = in_folder(path)?;
                let inside = Path::new("/tool")
                    .join(&file)
                    .to_string_lossy()
                    .into_owned();
                let spec = RunSpec::new(inside, Vec::<String>::new())
                    .bind(Bind::executable(folder, "/tool"));
                let request = WireRequest {
                    id: "call_0",
                    tool: &record.name,
                    args: input,
                    context: json!({
                        "agent_id": "sandbox",
                        "run_id": "sandbox",
                        "session_id": "sandbox",
                        "tool_call_id": "call_0",
                        "idempotency_key": null,
                        "principal": null,
                    }),
                    credentials: BTreeMap::new(),
                };
                let mut stdin = serde_json::to_vec(&request)
                    .map_err(|e| ApiError::internal("cannot encode the request line", e))?;
                stdin.push(b'\n');
                Ok(Prepared {
                    runner: Runner::Exec,
                    spec,
                    stdin,
                    language: "exec",
                    code_sha256,
                    code_bytes,
                    tool_timeout_ms,
                    tool_network,
                })
            }
        }
    }
}

/// The wire protocol's request line, `id` first (as the runtime writes it: simple
/// tools find their id at the start of the line).
#[derive(serde::Serialize)]
struct WireRequest<'a> {
    id: &'a str,
    tool: &'a str,
    args: &'a Value,
    context: Value,
    credentials: BTreeMap<String, String>,
}

fn not_sandboxable(record: &ToolRecord, why: &str) -> ApiError {
    ApiError::new(
        ApiCode::NotSandboxable,
        format!("tool `{}` {why}", record.name),
    )
}

/// SHA-256 in hex.
pub(crate) fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The result of a finished run, read as its runner writes it.
pub(crate) fn read_result(runner: &Runner, o: &Outcome) -> SnippetResult {
    match runner {
        Runner::Snippet(s) => s.result(o),
        Runner::Exec => exec_result(o),
    }
}

/// An executable's answer: its `{"id": "call_0", "result"}` or `{"error"}` line.
fn exec_result(o: &Outcome) -> SnippetResult {
    let stdout = String::from_utf8_lossy(&o.stdout);
    let mut output = None;
    let mut error = None;
    for line in stdout.lines() {
        let Ok(Value::Object(m)) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if m.get("id").and_then(Value::as_str) != Some("call_0") {
            continue;
        }
        if let Some(r) = m.get("result") {
            output = Some(r.to_string());
            break;
        }
        if let Some(e) = m.get("error") {
            let message = e
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| e.to_string());
            error = Some(match e.get("code").and_then(Value::as_str) {
                Some(code) => format!("the tool answered an error ({code}): {message}"),
                None => format!("the tool answered an error: {message}"),
            });
            break;
        }
    }
    if let Some(failed) = toolshed_sandbox::snippet::failure(o) {
        return SnippetResult {
            output: None,
            error: Some(failed),
        };
    }
    if output.is_none() && error.is_none() {
        error = Some(
            "the tool exited without a `result` or `error` line for call_0 on stdout (the wire protocol)"
                .into(),
        );
    }
    SnippetResult { output, error }
}

/// A sandbox failure (the run could not start) as an answer: the host's lack is a 503
/// naming the fix; a tool file that vanished is the stored definition's problem.
pub(crate) fn sandbox_error(e: SandboxError) -> ApiError {
    match e.code() {
        SandboxCode::BindSourceNotFound => ApiError::new(
            ApiCode::InvalidDefinition,
            format!("the tool cannot run: {e}"),
        ),
        SandboxCode::InvalidConfig | SandboxCode::FileRefused => {
            ApiError::internal("the sandboxed run was set up wrong", e)
        }
        _ => ApiError::new(
            ApiCode::SandboxUnavailable,
            format!("the sandbox cannot run this now: {e} [{}]", e.code()),
        ),
    }
}

/// The seed's result shape (`output` as the JSON-encoded string, `stdout`, `stderr`,
/// `exit_code`, `duration_ms`, `timed_out`, `error`) plus what the sandbox measured. No
/// `execution_id`: the caller that records the run sets it.
pub fn view(o: &Outcome, language: &str, result: &SnippetResult) -> SandboxExecutionView {
    let output_value = result
        .output
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let Limits {
        memory_bytes,
        timeout_ms,
        pids,
        cpu_millis,
        ..
    } = o.limits;
    SandboxExecutionView {
        execution_id: None,
        output: result.output.clone(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        exit_code: o.exit_code(),
        duration_ms: u64::try_from(o.duration.as_millis()).unwrap_or(u64::MAX),
        timed_out: o.timed_out,
        error: result.error.clone(),
        output_value,
        language: language.to_owned(),
        signal: o.signal(),
        killed: o.killed.map(|k| k.to_string()),
        oom_killed: o.oom_killed,
        memory_peak_bytes: o.memory_peak_bytes,
        cpu_time_ms: o
            .cpu_time
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        stdout_truncated: o.stdout_truncated,
        stderr_truncated: o.stderr_truncated,
        network_enabled: o.network == Network::On,
        limits: SandboxLimits {
            memory_bytes,
            timeout_ms,
            pids,
            cpu_millis,
        },
        clamped: o
            .clamped
            .iter()
            .map(|c| SandboxClamp {
                limit: c.limit.clone(),
                requested: c.requested,
                granted: c.granted,
                message: c.to_string(),
            })
            .collect(),
        weakened: o.weakened.iter().map(ToString::to_string).collect(),
        host_uid: o.host_uid,
        tool_id: None,
        code_sha256: None,
        created_by: None,
        created_at_ms: None,
    }
}

/// `s` cut to at most `max` bytes on a character boundary; whether it was cut.
pub(crate) fn cap(s: &str, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s.to_owned(), false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (s[..end].to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_cuts_on_a_character_boundary() {
        assert_eq!(cap("abc", 5), ("abc".into(), false));
        assert_eq!(cap("héllo", 2), ("h".into(), true));
        assert_eq!(cap("héllo", 3), ("hé".into(), true));
    }

    #[test]
    fn the_default_settings_are_the_seeds_under_server_ceilings() {
        let s = SandboxSettings::default();
        assert_eq!(s.config.defaults.memory_bytes, 256 * MIB);
        assert_eq!(s.config.defaults.timeout_ms, 30_000);
        assert_eq!(s.config.ceilings.timeout_ms, 300_000);
        s.config.validate().unwrap_or_else(|e| panic!("{e}"));
    }
}
