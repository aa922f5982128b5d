//! Questions a running tool puts to whoever made the call: MCP's elicitation (ask the
//! person at the client for input) and sampling (ask the client's model for a
//! completion).
//!
//! A tool asks through [`ToolContext::ask`](crate::ToolContext::ask); the run's
//! [`Asker`], set by the surface the call came in on, carries the question to the
//! client and brings the answer back. Only an MCP client can answer today (`/mcp` and
//! `toolshed mcp serve` give a call an asker when the client declared the capability);
//! a call made over REST, by an agent run or from the CLI has none, and an ask fails
//! with [`AskError::NoClient`], which the tool can catch.
//!
//! Why not durable: an answer is an input from a person or a model at that moment, not
//! a side effect. A call that completed keeps its result in the journal and is never
//! executed again, so its questions are never asked again either; a call re-executed
//! after a crash asks again. Each ask is recorded with the call
//! ([`Diagnostics::asks`](crate::Diagnostics::asks)): what was asked and how it ended,
//! never the answer's content.

use std::fmt;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool may ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AskKind {
    /// `elicitation/create`: input from the person at the client, in a form described
    /// by a JSON Schema (`message`, `requestedSchema`). Answered with `{"action":
    /// "accept" | "decline" | "cancel", "content"?}`.
    #[serde(rename = "elicitation/create")]
    Elicit,
    /// `sampling/createMessage`: a completion from the client's model (`messages`,
    /// `maxTokens`, …). Answered with `{"role", "content", "model", "stopReason"?}`.
    #[serde(rename = "sampling/createMessage")]
    Sample,
}

impl AskKind {
    /// The MCP method name, which is also the wire protocol's `ask.method`.
    pub fn method(self) -> &'static str {
        match self {
            AskKind::Elicit => "elicitation/create",
            AskKind::Sample => "sampling/createMessage",
        }
    }

    /// The kind named by an MCP method name.
    pub fn from_method(method: &str) -> Option<AskKind> {
        match method {
            "elicitation/create" => Some(AskKind::Elicit),
            "sampling/createMessage" => Some(AskKind::Sample),
            _ => None,
        }
    }

    /// What the client must have declared to be asked this (`initialize`'s
    /// `capabilities`).
    pub fn capability(self) -> &'static str {
        match self {
            AskKind::Elicit => "elicitation",
            AskKind::Sample => "sampling",
        }
    }
}

impl fmt::Display for AskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.method())
    }
}

/// One question: its kind and MCP's params for it, as the tool wrote them.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Elicitation or sampling.
    pub kind: AskKind,
    /// The request's params (`message` and `requestedSchema`; `messages` and
    /// `maxTokens`): checked by the asker against MCP's schema before anything is sent.
    pub params: Value,
}

/// Why a question got no answer. The tool sees the code and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// Nobody can answer: the call did not come from an MCP client (REST, an agent
    /// run, the CLI).
    #[error(
        "nobody can answer {kind}: the call did not come from an MCP client (only calls made through /mcp or `toolshed mcp serve` can ask)"
    )]
    NoClient {
        /// What was asked.
        kind: AskKind,
    },
    /// The client did not declare the capability, or its protocol era has no
    /// server-to-client requests.
    #[error("the MCP client cannot answer {kind}: {why}")]
    Unsupported {
        /// What was asked.
        kind: AskKind,
        /// Why not, for the tool's author.
        why: String,
    },
    /// The question is not what MCP accepts (a field missing or of the wrong type).
    #[error("the {kind} request is invalid: {problem}")]
    Invalid {
        /// What was asked.
        kind: AskKind,
        /// The field and the fix.
        problem: String,
    },
    /// The client answered with an error, went away, or the call was cancelled.
    #[error("{kind} failed: {message}")]
    Failed {
        /// What was asked.
        kind: AskKind,
        /// What the client or the transport said.
        message: String,
    },
}

crate::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// Why a tool's question got no answer: the code the tool sees (its `AskError`'s
    /// `code` in Python and Node), listed in `docs/errors.md`.
    pub enum AskCode {
        /// The call did not come from a client that can answer.
        AskNoClient,
        /// The client cannot answer this kind of question.
        AskUnsupported,
        /// The question is not what MCP accepts.
        AskInvalid,
        /// The client failed to answer, or the call ended meanwhile.
        AskFailed,
    }
}

impl AskError {
    /// The stable code, as the tool sees it.
    pub fn code(&self) -> AskCode {
        match self {
            AskError::NoClient { .. } => AskCode::AskNoClient,
            AskError::Unsupported { .. } => AskCode::AskUnsupported,
            AskError::Invalid { .. } => AskCode::AskInvalid,
            AskError::Failed { .. } => AskCode::AskFailed,
        }
    }
}

/// Carries a tool's questions to the client of the call and its answers back. Set on
/// the run's context by the surface the call came in on
/// ([`RunContextBuilder::asker`](crate::RunContextBuilder::asker)).
pub trait Asker: Send + Sync {
    /// Ask, on behalf of `tool`, and wait for the answer (MCP's result object).
    fn ask<'a>(&'a self, tool: &'a str, ask: Ask) -> BoxFuture<'a, Result<Value, AskError>>;
}

/// What [`Diagnostics::asks`](crate::Diagnostics::asks) records of one question: what
/// was asked and how it ended, never the answer's content (a person's input, or a
/// model's text, is the tool's to keep or not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskRecord {
    /// Elicitation or sampling.
    pub kind: AskKind,
    /// `accept`, `decline` or `cancel` (elicitation), `answered` (sampling), or the
    /// [`AskError`] code.
    pub outcome: String,
    /// How long the answer took, in milliseconds.
    pub ms: f64,
}

impl AskRecord {
    /// The record of an ask that ended with `answer`.
    pub fn of(kind: AskKind, answer: &Result<Value, AskError>, ms: f64) -> AskRecord {
        let outcome = match answer {
            Ok(v) => match (kind, v.get("action").and_then(Value::as_str)) {
                (AskKind::Elicit, Some(action)) => action.chars().take(20).collect(),
                _ => "answered".to_owned(),
            },
            Err(e) => e.code().as_str().to_owned(),
        };
        AskRecord { kind, outcome, ms }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kinds_are_named_by_their_mcp_method() {
        for kind in [AskKind::Elicit, AskKind::Sample] {
            assert_eq!(AskKind::from_method(kind.method()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                json!(kind.method()),
                "{kind}"
            );
        }
        assert_eq!(AskKind::from_method("roots/list"), None);
    }

    #[test]
    fn a_record_keeps_the_action_never_the_content() {
        let answer = Ok(json!({"action": "accept", "content": {"password": "hunter2"}}));
        let record = AskRecord::of(AskKind::Elicit, &answer, 3.0);
        assert_eq!(record.outcome, "accept");
        assert!(!serde_json::to_string(&record).unwrap().contains("hunter2"));
        let sampled = Ok(json!({"role": "assistant", "content": {"type": "text", "text": "hi"}}));
        assert_eq!(
            AskRecord::of(AskKind::Sample, &sampled, 1.0).outcome,
            "answered"
        );
        let failed = Err(AskError::NoClient {
            kind: AskKind::Sample,
        });
        assert_eq!(
            AskRecord::of(AskKind::Sample, &failed, 0.0).outcome,
            "ASK_NO_CLIENT"
        );
    }
}
