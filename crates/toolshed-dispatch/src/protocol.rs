//! The subprocess wire protocol (DESIGN.md, "Subprocess wire protocol"): the request
//! line the runtime writes and the validation of every line a tool writes back.
//!
//! ```text
//! runtime → tool  {"id", "tool", "args", "context", "credentials"}
//! tool → runtime  {"id", "partial": …}              zero or more
//!                 {"id", "ask": {"method", "params", "seq"?}}   zero or more, each answered:
//! runtime → tool  {"id", "seq", "answer": …} or {"id", "seq", "error": {"message", "code"}}
//! tool → runtime  {"id", "result": …}                exactly one of these three
//!                 {"id", "error": {"message", "code"?}}
//!                 {"id", "end": true}                after one partial or more
//! tool → runtime  {"id", "stdout": "text"}           zero or more, any time in a call
//! ```
//!
//! `stdout` is what the tool itself printed, relayed by toolshed's runners (which keep
//! the process's real stdout for the protocol): the diagnostics show it as the tool's
//! stdout, apart from its stderr.
//!
//! `end` closes a stream whose last partial is the result: a generator's values are
//! each sent the moment it yields them, and only its exhaustion says which was the
//! last. (A runner that held each value back until the next one came, to send the last
//! as `result`, delivered every partial one yield late.) A `result` after partials is
//! one more value: published as a partial too, and the result.
//!
//! An `ask` puts a question to the client of the call (see [`toolshed_core::ask`]):
//! `method` is `elicitation/create` or `sampling/createMessage`, `params` MCP's params
//! for it, and `seq` the tool's own number for the question, echoed in the answer (a
//! tool that asks several at once tells the answers apart by it). The runtime answers
//! one ask before it reads the next line. A one-shot `exec:` or `node:` tool gets
//! end-of-file right after its request (the Node runner's one-shot mode reads stdin
//! whole), so it cannot ask; `python:` tools, and every pooled worker, can.
//!
//! A request may also carry `once: true` (a one-shot process's only request: nothing
//! but answers to its questions follows, so it may exit after its final answer),
//! `env` (the run's declared env, Toren's `ctx.env`), and
//! `op` for what the Node runner's compatibility layer answers besides calls: `approval`
//! (a Toren tool's approval predicate over `args`: `{"result": true|false}`) and `hook`
//! (a bread tool's `hook` with `result`, `error` and `attempt`: `{"result":
//! {"decision", …}}`). Those carry no credentials.
//!
//! One JSON object per line, UTF-8, `\n`-terminated. `context` holds `agent_id`,
//! `run_id`, `session_id`, `tool_call_id`, `idempotency_key` (or null) and `principal`
//! (or null); `credentials` maps each declared credential the provider has to its
//! value. Unknown keys in a tool's line are ignored, so the protocol can grow.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshed_core::{Ask, AskError, AskKind, Principal, Secret, ToolContext};

use crate::error::excerpt;

/// The identity of one call, as sent to tools (`context` on the wire, in HTTP bodies).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallContext {
    /// The agent id.
    pub agent_id: String,
    /// The run id.
    pub run_id: String,
    /// The session id.
    pub session_id: String,
    /// The tool call id.
    pub tool_call_id: String,
    /// The idempotency key of a keyed call: pass it on to external APIs.
    pub idempotency_key: Option<String>,
    /// Who the run acts for.
    pub principal: Option<Principal>,
}

impl CallContext {
    /// Fresh ids, no key, no principal: for one-off calls and tests.
    pub fn ephemeral() -> Self {
        let fresh = || uuid::Uuid::now_v7().to_string();
        CallContext {
            agent_id: "default".into(),
            run_id: fresh(),
            session_id: fresh(),
            tool_call_id: format!("call_{}", uuid::Uuid::now_v7().simple()),
            idempotency_key: None,
            principal: None,
        }
    }

    /// The context of a call of `run` that has not started yet (its approval gate).
    pub fn from_run(run: &toolshed_core::RunContext, tool_call_id: &str) -> Self {
        CallContext {
            agent_id: run.agent_id().to_owned(),
            run_id: run.run_id().to_owned(),
            session_id: run.session_id().to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            idempotency_key: None,
            principal: run.principal().cloned(),
        }
    }

    /// The context of a call running in the pipeline.
    pub fn from_tool_context(ctx: &ToolContext) -> Self {
        CallContext {
            agent_id: ctx.agent_id().to_owned(),
            run_id: ctx.run_id().to_owned(),
            session_id: ctx.session_id().to_owned(),
            tool_call_id: ctx.tool_call_id().to_owned(),
            idempotency_key: ctx.idempotency_key().map(str::to_owned),
            principal: ctx.principal().cloned(),
        }
    }
}

/// The request line the runtime writes.
#[derive(Serialize)]
struct WireRequest<'a> {
    id: &'a str,
    tool: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<&'a str>,
    args: &'a Value,
    context: &'a CallContext,
    credentials: BTreeMap<&'a str, &'a str>,
    /// The run's declared env (Toren's `ctx.env`), left out when empty.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: &'a BTreeMap<String, String>,
    /// An op's own fields (`hook`, `result`, `error`, `attempt`).
    #[serde(flatten)]
    fields: &'a serde_json::Map<String, Value>,
    /// A one-shot process's only request: after its final answer nothing more comes
    /// (its stdin stays open only for answers to its questions), so it may exit at once.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    once: bool,
}

/// What a request asks of a Node worker besides a call: the compatibility layer's
/// requests for bread and Toren tools (runners/runner.mjs), each answered by one
/// `result` or `error` line. They carry no credentials.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// Evaluate the tool's approval predicate over `args`; the result is a boolean.
    Approval,
    /// Run the tool's `hook` (beforeRun, afterRun, onError) with these fields
    /// (`result`, `error`, `attempt`); the result is `{"decision", …}`.
    Hook(serde_json::Map<String, Value>),
}

/// Encode one request line, `\n` included: a call, or an [`Op`]; `once` for a one-shot
/// process's only request.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_request_with(
    id: &str,
    tool: &str,
    op: Option<&Op>,
    args: &Value,
    context: &CallContext,
    credentials: &BTreeMap<String, Secret>,
    env: &BTreeMap<String, String>,
    once: bool,
) -> Vec<u8> {
    let empty = serde_json::Map::new();
    let (op, fields) = match op {
        None => (None, &empty),
        Some(Op::Approval) => (Some("approval"), &empty),
        Some(Op::Hook(fields)) => (Some("hook"), fields),
    };
    let wire = WireRequest {
        id,
        tool,
        op,
        args,
        context,
        credentials: credentials
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect(),
        env,
        fields,
        once,
    };
    // Serializing a struct of strings and `Value`s cannot fail.
    let mut line = serde_json::to_vec(&wire).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// Encode one call's request line, `\n` included.
#[cfg(test)]
pub(crate) fn encode_request(
    id: &str,
    tool: &str,
    args: &Value,
    context: &CallContext,
    credentials: &BTreeMap<String, Secret>,
) -> Vec<u8> {
    encode_request_with(
        id,
        tool,
        None,
        args,
        context,
        credentials,
        &BTreeMap::new(),
        false,
    )
}

/// One valid line from a tool.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    /// A partial result.
    Partial(Value),
    /// The final result.
    Result(Value),
    /// The stream is over; its last partial is the result.
    End,
    /// The tool's own failure.
    Error {
        /// What went wrong.
        message: String,
        /// The tool's code, if any.
        code: Option<String>,
    },
}

impl Message {
    pub(crate) fn is_final(&self) -> bool {
        !matches!(self, Message::Partial(_))
    }
}

/// One valid line: a message about the call, or a question for its client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line {
    /// A partial result, the result or the error.
    Said(Message),
    /// What the tool printed to its stdout, relayed by its runner.
    Stdout(String),
    /// A question for the client of the call.
    Ask {
        /// The tool's number for it, echoed in the answer.
        seq: Value,
        /// The question.
        ask: Ask,
    },
}

/// The answer line to an ask, `\n` included.
pub(crate) fn encode_answer(id: &str, seq: &Value, answer: &Result<Value, AskError>) -> Vec<u8> {
    let line = match answer {
        Ok(value) => serde_json::json!({"id": id, "seq": seq, "answer": value}),
        Err(e) => serde_json::json!({
            "id": id,
            "seq": seq,
            "error": {"message": e.to_string(), "code": e.code().as_str()}
        }),
    };
    // Serializing a `Value` cannot fail.
    let mut line = serde_json::to_vec(&line).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// Why a line is not a valid message: the problem and a short excerpt of the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadLine {
    pub problem: String,
    pub excerpt: String,
}

/// How much of a bad line an error quotes.
const EXCERPT_CHARS: usize = 200;

/// Validate one line (without its `\n`) against the request id.
pub(crate) fn parse_line(line: &[u8], expected_id: &str) -> Result<Line, BadLine> {
    let text = String::from_utf8_lossy(line);
    let bad = |problem: String| BadLine {
        problem,
        excerpt: excerpt(&text, EXCERPT_CHARS),
    };
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) if std::str::from_utf8(line).is_err() => {
            return Err(bad(format!("a line is not UTF-8 ({e})")));
        }
        Err(_) => return Err(bad("a line is not JSON".into())),
    };
    let Value::Object(mut obj) = value else {
        return Err(bad("a line is JSON but not an object".into()));
    };
    match obj.get("id") {
        None => return Err(bad("a line has no `id`".into())),
        Some(Value::String(id)) if id == expected_id => {}
        Some(other) => {
            return Err(bad(format!(
                "a line answers request id {other} but the request in flight is \"{expected_id}\""
            )));
        }
    }
    let present: Vec<&str> = ["partial", "result", "error", "ask", "end", "stdout"]
        .into_iter()
        .filter(|k| obj.contains_key(*k))
        .collect();
    match present.as_slice() {
        [] => Err(bad(
            "a line has none of the keys `partial`, `result`, `error`, `ask`, `end`".into(),
        )),
        ["stdout"] => match obj.remove("stdout") {
            Some(Value::String(text)) => Ok(Line::Stdout(text)),
            _ => Err(bad("a stdout line's `stdout` is not a string".into())),
        },
        ["end"] => match obj.remove("end") {
            Some(Value::Bool(true)) => Ok(Line::Said(Message::End)),
            _ => Err(bad("an end line's `end` is not `true`".into())),
        },
        ["ask"] => parse_ask(obj.remove("ask").unwrap_or_default()).map_err(bad),
        ["partial"] => Ok(Line::Said(Message::Partial(
            obj.remove("partial").unwrap_or_default(),
        ))),
        ["result"] => Ok(Line::Said(Message::Result(
            obj.remove("result").unwrap_or_default(),
        ))),
        ["error"] => match obj.remove("error") {
            Some(Value::Object(mut err)) => {
                let message = match err.remove("message") {
                    Some(Value::String(m)) => m,
                    _ => {
                        return Err(bad("an error line has no string `error.message`".into()));
                    }
                };
                let code = match err.remove("code") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(c)) => Some(c),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    Some(_) => {
                        return Err(bad(
                            "an error line's `error.code` is neither a string nor a number".into(),
                        ));
                    }
                };
                Ok(Line::Said(Message::Error { message, code }))
            }
            _ => Err(bad(
                "an error line's `error` is not an object {\"message\", \"code\"?}".into(),
            )),
        },
        _ => Err(bad(format!(
            "a line has more than one of the keys {}",
            present
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The `ask` of a line: `{"method", "params", "seq"?}`.
fn parse_ask(ask: Value) -> Result<Line, String> {
    let Value::Object(mut ask) = ask else {
        return Err(
            "an ask line's `ask` is not an object {\"method\", \"params\", \"seq\"?}".into(),
        );
    };
    let kind = match ask.remove("method") {
        Some(Value::String(m)) => AskKind::from_method(&m).ok_or_else(|| {
            format!(
                "an ask line's `ask.method` is {m:?}: use \"elicitation/create\" or \"sampling/createMessage\""
            )
        })?,
        _ => return Err("an ask line has no string `ask.method`".into()),
    };
    let params = match ask.remove("params") {
        Some(p @ Value::Object(_)) => p,
        _ => return Err("an ask line's `ask.params` is not an object".into()),
    };
    let seq = match ask.remove("seq") {
        None => Value::Null,
        Some(s @ (Value::Null | Value::Number(_) | Value::String(_))) => s,
        Some(_) => return Err("an ask line's `ask.seq` is neither a number nor a string".into()),
    };
    Ok(Line::Ask {
        seq,
        ask: Ask { kind, params },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(line: &str) -> Result<Line, String> {
        parse_line(line.as_bytes(), "r1").map_err(|b| format!("{} | {}", b.problem, b.excerpt))
    }

    fn said(message: Message) -> Result<Line, String> {
        Ok(Line::Said(message))
    }

    #[test]
    fn stdout_and_end_lines_take_only_their_own_shape() {
        assert_eq!(
            check(r#"{"id":"r1","stdout":"hi\n"}"#),
            Ok(Line::Stdout("hi\n".into()))
        );
        assert_eq!(check(r#"{"id":"r1","end":true}"#), said(Message::End));
        // A hostile tool's variations are bad lines, never a result.
        for bad in [
            r#"{"id":"r1","stdout":5}"#,
            r#"{"id":"r1","stdout":{"result":1}}"#,
            r#"{"id":"r1","end":false}"#,
            r#"{"id":"r1","end":"true"}"#,
            r#"{"id":"r1","end":true,"result":1}"#,
            r#"{"id":"r1","stdout":"x","partial":1}"#,
            r#"{"id":"r2","stdout":"another call's"}"#,
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn valid_lines() {
        assert_eq!(
            check(r#"{"id":"r1","result":{"a":1}}"#),
            said(Message::Result(json!({"a": 1})))
        );
        assert_eq!(
            check(r#"{"id":"r1","partial":2,"extra":true}"#),
            said(Message::Partial(json!(2)))
        );
        assert_eq!(
            check(r#"{"id":"r1","result":null}"#),
            said(Message::Result(Value::Null))
        );
        assert_eq!(
            check(r#"{"id":"r1","error":{"message":"boom","code":"E1"}}"#),
            said(Message::Error {
                message: "boom".into(),
                code: Some("E1".into())
            })
        );
    }

    #[test]
    fn asks_are_read_and_answered_with_their_seq() {
        assert_eq!(
            check(
                r#"{"id":"r1","ask":{"method":"elicitation/create","params":{"message":"m"},"seq":3}}"#
            ),
            Ok(Line::Ask {
                seq: json!(3),
                ask: Ask {
                    kind: AskKind::Elicit,
                    params: json!({"message": "m"})
                }
            })
        );
        for (line, problem) in [
            (r#"{"id":"r1","ask":1}"#, "not an object"),
            (
                r#"{"id":"r1","ask":{"params":{}}}"#,
                "no string `ask.method`",
            ),
            (
                r#"{"id":"r1","ask":{"method":"roots/list","params":{}}}"#,
                "\"roots/list\"",
            ),
            (
                r#"{"id":"r1","ask":{"method":"sampling/createMessage"}}"#,
                "`ask.params`",
            ),
            (
                r#"{"id":"r1","ask":{"method":"sampling/createMessage","params":{},"seq":[]}}"#,
                "`ask.seq`",
            ),
        ] {
            let err = check(line).unwrap_err();
            assert!(err.contains(problem), "{line}: {err}");
        }
        let answer = encode_answer("r1", &json!(3), &Ok(json!({"action": "decline"})));
        let v: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            v,
            json!({"id": "r1", "seq": 3, "answer": {"action": "decline"}})
        );
        let failed = encode_answer(
            "r1",
            &Value::Null,
            &Err(AskError::NoClient {
                kind: AskKind::Sample,
            }),
        );
        let v: Value = serde_json::from_slice(&failed).unwrap();
        assert_eq!(v["error"]["code"], "ASK_NO_CLIENT");
    }

    #[test]
    fn invalid_lines_are_quoted() {
        assert_eq!(
            check("hello world").unwrap_err(),
            "a line is not JSON | hello world"
        );
        assert!(
            check("[1]")
                .unwrap_err()
                .starts_with("a line is JSON but not an object")
        );
        assert!(
            check(r#"{"result":1}"#)
                .unwrap_err()
                .starts_with("a line has no `id`")
        );
        assert!(
            check(r#"{"id":"r0","result":1}"#)
                .unwrap_err()
                .contains("answers request id \"r0\"")
        );
        assert!(
            check(r#"{"id":"r1"}"#)
                .unwrap_err()
                .contains("none of the keys")
        );
        assert!(
            check(r#"{"id":"r1","result":1,"error":{"message":"x"}}"#)
                .unwrap_err()
                .contains("more than one")
        );
        assert!(
            check(r#"{"id":"r1","error":"x"}"#)
                .unwrap_err()
                .contains("not an object")
        );
        assert!(
            check(r#"{"id":"r1","error":{}}"#)
                .unwrap_err()
                .contains("error.message")
        );
        let long = "x".repeat(1000);
        let quoted = check(&long).unwrap_err();
        assert!(quoted.len() < 300, "{quoted}");
        assert!(quoted.ends_with('…'));
    }

    #[test]
    fn requests_carry_only_the_given_credentials() {
        let ctx = CallContext::ephemeral();
        let mut creds = BTreeMap::new();
        creds.insert("API_KEY".to_string(), Secret::new("k-123"));
        let line = encode_request("r1", "t", &json!({"a": 1}), &ctx, &creds);
        assert_eq!(line.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["credentials"], json!({"API_KEY": "k-123"}));
        assert_eq!(v["context"]["idempotency_key"], Value::Null);
        assert_eq!(v["context"]["principal"], Value::Null);
        assert_eq!(v["args"], json!({"a": 1}));
        // No declared env: no `env` key; a pooled request has no `once`.
        assert!(v.get("env").is_none(), "{v}");
        assert!(v.get("once").is_none(), "{v}");
        let once = encode_request_with(
            "r1",
            "t",
            None,
            &json!({}),
            &ctx,
            &creds,
            &BTreeMap::new(),
            true,
        );
        let v: Value = serde_json::from_slice(&once).unwrap();
        assert_eq!(v["once"], true, "a one-shot process's only request says so");
    }

    #[test]
    fn the_declared_env_travels_beside_the_context() {
        let ctx = CallContext::ephemeral();
        let env = BTreeMap::from([("REGION".to_owned(), "eu".to_owned())]);
        let line = encode_request_with(
            "r1",
            "t",
            None,
            &json!({}),
            &ctx,
            &BTreeMap::new(),
            &env,
            false,
        );
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["env"], json!({"REGION": "eu"}));
        assert!(v["context"].get("env").is_none(), "{v}");
    }
}
