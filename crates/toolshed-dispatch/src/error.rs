//! The dispatcher's typed errors, their stable codes, and how each becomes the
//! [`ToolError`] a model sees.

use std::path::PathBuf;

use serde_json::{Map, Value, json};
use toolshed_core::{CredentialError, ErrorCode, ToolError};

/// The endpoint forms [`crate::Endpoint::parse`] accepts, quoted in its errors.
pub const ENDPOINT_FORMS: &str = "builtin:<name>, python:</abs/path.py>[:function], \
     node:</abs/path.{js,mjs,cjs,ts,mts}>[:export], exec:</abs/path/to/executable>, \
     http://… or https://…";

/// Why a dispatch failed. Every variant has a stable [`code`](DispatchError::code);
/// messages name the tool and what to do, never a credential value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The endpoint string is malformed or names something unusable.
    #[error("invalid endpoint `{endpoint}`: {reason}; accepted forms: {forms}", forms = ENDPOINT_FORMS)]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The endpoint names a file that does not exist (or is not a file).
    #[error("endpoint `{endpoint}`: {path} {problem}")]
    EndpointFileNotFound {
        /// The endpoint as given.
        endpoint: String,
        /// The path it names.
        path: PathBuf,
        /// `does not exist`, `is not a file`, `is not executable`.
        problem: String,
    },
    /// A `builtin:` endpoint names no tool the dispatcher was given.
    #[error("unknown built-in tool `{name}`; the built-ins are {known}")]
    UnknownBuiltin {
        /// The name asked for.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
    /// The interpreter or executable could not be started.
    #[error("cannot start `{program}` for tool {tool}")]
    Spawn {
        /// The tool.
        tool: String,
        /// The program that failed to start.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox refused to start the tool: the host lacks a mechanism (the message
    /// names it and the fix), a bind or limit is invalid, or the uid pool is exhausted.
    /// Nothing ran, and nothing runs unsandboxed instead.
    #[error("cannot run tool {tool} in the sandbox")]
    Sandbox {
        /// The tool.
        tool: String,
        /// The sandbox's error (its own code is in `details.sandbox_code`).
        #[source]
        source: toolshed_sandbox::SandboxError,
    },
    /// The call ran past its timeout; the process was killed.
    #[error("tool {tool} timed out after {ms}ms")]
    Timeout {
        /// The tool.
        tool: String,
        /// The timeout in milliseconds.
        ms: u128,
    },
    /// The tool wrote more to stdout than the cap allows; it was killed.
    #[error(
        "tool {tool} wrote more than {cap} bytes to stdout and was killed; stdout carries only \
         protocol lines, so write logs to stderr and return large data as a blob"
    )]
    StdoutTooLarge {
        /// The tool.
        tool: String,
        /// The cap in bytes.
        cap: usize,
    },
    /// A line on the tool's stdout is not a valid protocol message.
    #[error(
        "tool {tool} broke the wire protocol: {problem}: `{excerpt}` (stdout must carry only \
         {{\"id\", \"partial\"|\"result\"|\"error\"|\"ask\"}} JSON lines; write logs to stderr)"
    )]
    Protocol {
        /// The tool.
        tool: String,
        /// What is wrong with the line.
        problem: String,
        /// The start of the offending line.
        excerpt: String,
    },
    /// The process ended without sending its answer.
    #[error("tool {tool} {status} without sending a result{}", stderr_suffix(.stderr_tail))]
    Exited {
        /// The tool.
        tool: String,
        /// `exited with code 3`, `was killed by signal 9`.
        status: String,
        /// The exit code, when it exited normally.
        exit_code: Option<i32>,
        /// The end of what it wrote to stderr.
        stderr_tail: String,
    },
    /// The tool answered with an error line: its own failure.
    #[error("{message}")]
    ToolFailed {
        /// The tool.
        tool: String,
        /// The tool's message.
        message: String,
        /// The tool's own code (e.g. the Python exception type), if it sent one.
        code: Option<String>,
    },
    /// An HTTP endpoint answered with a non-2xx status.
    #[error("HTTP endpoint {url} answered {status} for tool {tool}: {excerpt}")]
    HttpStatus {
        /// The tool.
        tool: String,
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The start of the response body.
        excerpt: String,
    },
    /// An HTTP request failed before an answer arrived (connection, TLS, timeout).
    #[error("HTTP endpoint {url} failed for tool {tool}")]
    Http {
        /// The tool.
        tool: String,
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// An HTTP endpoint answered 2xx with a body that is not JSON.
    #[error("HTTP endpoint {url} answered tool {tool} with a body that is not JSON: `{excerpt}`")]
    HttpNotJson {
        /// The tool.
        tool: String,
        /// The URL.
        url: String,
        /// The start of the body.
        excerpt: String,
    },
    /// An HTTP response body is larger than the cap.
    #[error("HTTP endpoint {url} answered tool {tool} with more than {cap} bytes")]
    HttpTooLarge {
        /// The tool.
        tool: String,
        /// The URL.
        url: String,
        /// The cap in bytes.
        cap: usize,
    },
    /// An HTTP endpoint's host is (or resolves to) an address tools may not reach.
    #[error(
        "HTTP endpoint {url} of tool {tool} is refused: its host is or resolves to {address}, {kind}; tools reach only public addresses unless the operator allowlists the host or its range (`toolshed serve --allow-http-host HOST|CIDR` or TOOLSHED_HTTP_ALLOW)"
    )]
    HttpAddressRefused {
        /// The tool.
        tool: String,
        /// The URL (naming the host).
        url: String,
        /// The address refused.
        address: std::net::IpAddr,
        /// What kind of address it is (`a loopback address`, …).
        kind: &'static str,
    },
    /// An HTTP endpoint answered with a redirect, which is never followed.
    #[error(
        "HTTP endpoint {url} answered tool {tool} with a redirect ({status}) to {location}; redirects are not followed: register the tool with the final URL"
    )]
    HttpRedirect {
        /// The tool.
        tool: String,
        /// The URL.
        url: String,
        /// The 3xx status.
        status: u16,
        /// The `Location` it named (an excerpt).
        location: String,
    },
    /// toolshed's Node helper package (zod 4, for bread and Toren tool files) is not
    /// installed where the dispatcher looks for it.
    #[error("{message}")]
    NodeDepsNotInstalled {
        /// What to install, and where.
        message: String,
    },
    /// A TypeScript source could not be transpiled.
    #[error("cannot transpile {path}: {message}")]
    Transpile {
        /// The source.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A schema could not be inferred from a Python function.
    #[error("cannot infer a schema {} in {}: {message}", inferred_function(.function), .path.display())]
    Inference {
        /// The module.
        path: PathBuf,
        /// The function; empty when none was named (the file's tool function is chosen).
        function: String,
        /// Why.
        message: String,
    },
    /// A Node module declares no schema beside its function.
    #[error("{message}")]
    SchemaNotFound {
        /// The module.
        path: PathBuf,
        /// What was looked for and how to declare it.
        message: String,
    },
    /// A bread or Toren tool file says something toolshed cannot map onto a tool
    /// spec; the message names the field and what to do.
    #[error("{message}")]
    CompatUnmappable {
        /// The tool file.
        path: PathBuf,
        /// The field and the fix.
        message: String,
    },
    /// A declared credential could not be read.
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// A local file operation failed (the runner cache, a probe).
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl DispatchError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> DispatchCode {
        match self {
            DispatchError::InvalidEndpoint { .. } => DispatchCode::InvalidEndpoint,
            DispatchError::EndpointFileNotFound { .. } => DispatchCode::EndpointFileNotFound,
            DispatchError::UnknownBuiltin { .. } => DispatchCode::UnknownBuiltin,
            DispatchError::Spawn { .. } => DispatchCode::SpawnFailed,
            DispatchError::Sandbox { .. } => DispatchCode::SandboxFailed,
            DispatchError::Timeout { .. } => DispatchCode::Timeout,
            DispatchError::StdoutTooLarge { .. } => DispatchCode::StdoutTooLarge,
            DispatchError::Protocol { .. } => DispatchCode::ProtocolViolation,
            DispatchError::Exited { .. } => DispatchCode::ToolExited,
            DispatchError::ToolFailed { .. } => DispatchCode::ToolError,
            DispatchError::HttpStatus { .. } => DispatchCode::HttpStatus,
            DispatchError::Http { .. } => DispatchCode::HttpError,
            DispatchError::HttpNotJson { .. } => DispatchCode::HttpNotJson,
            DispatchError::HttpTooLarge { .. } => DispatchCode::HttpResponseTooLarge,
            DispatchError::HttpAddressRefused { .. } => DispatchCode::HttpAddressRefused,
            DispatchError::HttpRedirect { .. } => DispatchCode::HttpRedirectRefused,
            DispatchError::NodeDepsNotInstalled { .. } => DispatchCode::NodeDepsNotInstalled,
            DispatchError::Transpile { .. } => DispatchCode::TranspileFailed,
            DispatchError::Inference { .. } => DispatchCode::SchemaInferenceFailed,
            DispatchError::SchemaNotFound { .. } => DispatchCode::SchemaNotFound,
            DispatchError::Credential(_) => DispatchCode::CredentialFailed,
            DispatchError::Io { .. } => DispatchCode::IoError,
            DispatchError::CompatUnmappable { .. } => DispatchCode::CompatUnmappable,
        }
    }

    /// The error result a model sees. The pipeline's code is `TIMEOUT` for timeouts,
    /// `RESULT_TOO_LARGE` for caps, the credential's own code for credentials (e.g.
    /// `CREDENTIAL_NOT_FOUND`), and `HANDLER_ERROR` otherwise; the dispatcher's code is in
    /// `details.dispatch_code`.
    pub fn to_tool_error(&self) -> ToolError {
        let code = match self {
            DispatchError::Timeout { .. } => ErrorCode::Timeout,
            DispatchError::StdoutTooLarge { .. } | DispatchError::HttpTooLarge { .. } => {
                ErrorCode::ResultTooLarge
            }
            DispatchError::Credential(e) => e.code,
            _ => ErrorCode::HandlerError,
        };
        let mut details = Map::new();
        details.insert("dispatch_code".into(), json!(self.code().as_str()));
        match self {
            DispatchError::ToolFailed { code: Some(c), .. } => {
                details.insert("tool_code".into(), json!(c));
            }
            DispatchError::Exited { exit_code, .. } => {
                details.insert("exit_code".into(), json!(exit_code));
            }
            DispatchError::HttpStatus { status, .. } => {
                details.insert("status".into(), json!(status));
            }
            DispatchError::HttpRedirect {
                status, location, ..
            } => {
                details.insert("status".into(), json!(status));
                details.insert("location".into(), json!(location));
            }
            DispatchError::HttpAddressRefused { address, .. } => {
                details.insert("address".into(), json!(address.to_string()));
            }
            DispatchError::Sandbox { source, .. } => {
                details.insert("sandbox_code".into(), json!(source.code().as_str()));
            }
            _ => {}
        }
        ToolError::new(code, self.message()).with_details(Value::Object(details))
    }

    /// The message with every cause appended, for places that show one line (an error
    /// result, an API answer) rather than walking the chain.
    pub fn message(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        text
    }
}

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of [`DispatchError`], listed with what to do in `docs/errors.md`.
    /// A model sees them as `details.dispatch_code` of its error result.
    #[non_exhaustive]
    pub enum DispatchCode {
        /// The endpoint string is malformed.
        InvalidEndpoint,
        /// The endpoint's file does not exist or is not usable.
        EndpointFileNotFound,
        /// No such built-in tool.
        UnknownBuiltin,
        /// The interpreter or executable could not be started.
        SpawnFailed,
        /// The sandbox refused to start the tool (`details.sandbox_code` says why).
        SandboxFailed,
        /// The call ran past its timeout.
        Timeout,
        /// The tool wrote more to stdout than the cap.
        StdoutTooLarge,
        /// A stdout line is not a protocol message.
        ProtocolViolation,
        /// The process ended without an answer.
        ToolExited,
        /// The tool answered with an error line.
        ToolError,
        /// An HTTP endpoint answered a non-2xx status.
        HttpStatus,
        /// An HTTP request failed before an answer arrived.
        HttpError,
        /// An HTTP endpoint answered a body that is not JSON.
        HttpNotJson,
        /// An HTTP response body is larger than the cap.
        HttpResponseTooLarge,
        /// An HTTP endpoint's host is, or resolves to, a loopback, private, link-local,
        /// metadata or other non-public address the operator has not allowlisted.
        HttpAddressRefused,
        /// An HTTP endpoint answered a redirect, which is not followed.
        HttpRedirectRefused,
        /// toolshed's Node helper package (zod 4) is not installed.
        NodeDepsNotInstalled,
        /// A TypeScript source could not be transpiled.
        TranspileFailed,
        /// A Python schema could not be inferred.
        SchemaInferenceFailed,
        /// A Node module declares no schema.
        SchemaNotFound,
        /// A declared credential could not be read (the error result carries the
        /// credential's own code).
        CredentialFailed,
        /// A local file operation failed.
        IoError,
        /// A bread or Toren tool file uses a field toolshed cannot map (named in the
        /// message).
        CompatUnmappable,
    }
}

impl From<DispatchError> for ToolError {
    fn from(e: DispatchError) -> Self {
        e.to_tool_error()
    }
}

/// "for `f`", or "for the file's tool function" when none was named.
fn inferred_function(function: &str) -> String {
    if function.is_empty() {
        "for the file's tool function".into()
    } else {
        format!("for `{function}`")
    }
}

fn stderr_suffix(tail: &str) -> String {
    if tail.trim().is_empty() {
        "; it wrote nothing to stderr".into()
    } else {
        format!("; stderr ends with:\n{}", tail.trim_end())
    }
}

/// The start of `text`, at most `max` characters, with `…` when cut.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim_end_matches(['\n', '\r']);
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The end of `text`, at most `max` characters, with `…` when cut.
pub(crate) fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let skip = count - max;
    let start = text.char_indices().nth(skip).map(|(i, _)| i).unwrap_or(0);
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_cut_on_char_boundaries() {
        assert_eq!(excerpt("héllo wörld\n", 5), "héllo…");
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(tail("héllo wörld", 5), "…wörld");
        assert_eq!(tail("ok", 5), "ok");
    }

    #[test]
    fn timeouts_keep_the_pipeline_code_and_wording() {
        let e = DispatchError::Timeout {
            tool: "slow".into(),
            ms: 250,
        };
        let t = e.to_tool_error();
        assert_eq!(t.code, ErrorCode::Timeout);
        assert_eq!(t.message, "tool slow timed out after 250ms");
        assert_eq!(t.details.unwrap()["dispatch_code"], "TIMEOUT");
    }
}
