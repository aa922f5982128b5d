//! The questions a tool asks while `/mcp` or `toolshed mcp serve` runs it
//! ([`toolshed_core::ask`]), put to the client that made the call: `elicitation/create`
//! and `sampling/createMessage` over the same session.
//!
//! The tool is untrusted: its params are checked against MCP's schema (rmcp's types)
//! before anything is sent, so the client never gets a malformed request from us, and
//! an elicitation's message names the tool that asks (a gateway serves many tools; the
//! person answering should know which one wants their input).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{CreateMessageRequestParams, ElicitRequestParams};
use rmcp::service::Peer;
use serde_json::Value;
use toolshed_core::{Ask, AskError, AskKind, Asker};

/// How long a question may wait for its answer. The call's own timeout usually ends
/// it sooner; this bounds a call that has none.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// The client of one `tools/call` (of a session: a session-less request gets
/// [`SESSIONLESS`]), as the asker of its tool.
pub(crate) struct PeerAsker {
    peer: Peer<RoleServer>,
}

impl PeerAsker {
    async fn put(&self, tool: &str, ask: Ask) -> Result<Value, AskError> {
        let kind = ask.kind;
        let info = self.peer.peer_info();
        let caps = info.as_ref().map(|info| &info.capabilities);
        let declared = match kind {
            AskKind::Elicit => caps.is_some_and(|c| c.elicitation.is_some()),
            AskKind::Sample => caps.is_some_and(|c| c.sampling.is_some()),
        };
        if !declared {
            return Err(AskError::Unsupported {
                kind,
                why: format!("it did not declare the `{}` capability", kind.capability()),
            });
        }
        let invalid = |e: serde_json::Error| AskError::Invalid {
            kind,
            problem: e.to_string(),
        };
        let answer = match kind {
            AskKind::Elicit => {
                let params = elicitation(tool, ask.params)?;
                answered(kind, self.peer.create_elicitation(params)).await?
            }
            AskKind::Sample => {
                let params: CreateMessageRequestParams =
                    serde_json::from_value(ask.params).map_err(invalid)?;
                answered(kind, self.peer.create_message(params)).await?
            }
        };
        Ok(answer)
    }
}

/// The client's answer to one question, within [`ANSWER_TIMEOUT`], as JSON.
async fn answered<T: serde::Serialize>(
    kind: AskKind,
    asked: impl Future<Output = Result<T, rmcp::ServiceError>>,
) -> Result<Value, AskError> {
    let failed = |message: String| AskError::Failed { kind, message };
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, asked)
        .await
        .map_err(|_| {
            failed(format!(
                "no answer within {} seconds",
                ANSWER_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| failed(e.to_string()))?;
    serde_json::to_value(answer)
        .map_err(|e| failed(format!("the client's answer cannot be read back: {e}")))
}

/// A tool's elicitation as the client will get it: its message prefixed with the
/// tool's name (a gateway serves many tools; the person answering should know which one
/// asks), and a URL-mode elicitation only to an `https://` address (a tool must not
/// send a person to a plain-HTTP page, or to a `javascript:` or `file:` one).
fn elicitation(tool: &str, mut params: Value) -> Result<ElicitRequestParams, AskError> {
    let kind = AskKind::Elicit;
    let invalid = |problem: String| AskError::Invalid { kind, problem };
    if let Some(Value::String(message)) = params.get_mut("message") {
        *message = format!("[tool {tool}] {message}");
    }
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        let url = params
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let https = url::Url::parse(url).is_ok_and(|u| u.scheme() == "https" && u.host().is_some());
        if !https {
            return Err(invalid(format!(
                "`url` must be an https:// address to send a person to, not {:?}",
                url.chars().take(100).collect::<String>()
            )));
        }
    }
    serde_json::from_value(params).map_err(|e| invalid(e.to_string()))
}

/// An asker that answers every question with why this client cannot: for a client that
/// declared neither capability, or a request of the session-less era. Shared, so the
/// calls of such clients (most of them) allocate nothing for questions never asked.
struct Unable {
    why: &'static str,
}

impl Asker for Unable {
    fn ask<'a>(&'a self, _tool: &'a str, ask: Ask) -> BoxFuture<'a, Result<Value, AskError>> {
        Box::pin(std::future::ready(Err(AskError::Unsupported {
            kind: ask.kind,
            why: self.why.to_owned(),
        })))
    }
}

static SESSIONLESS: LazyLock<Arc<dyn Asker>> = LazyLock::new(|| {
    Arc::new(Unable {
        why: "it speaks protocol 2026-07-28, which has no requests from server to client",
    })
});

static UNDECLARED: LazyLock<Arc<dyn Asker>> = LazyLock::new(|| {
    Arc::new(Unable {
        why: "it declared neither the `elicitation` nor the `sampling` capability",
    })
});

/// The asker of every session-less request's call: nobody can answer.
pub(crate) fn sessionless() -> Arc<dyn Asker> {
    SESSIONLESS.clone()
}

/// The asker of a call in a session whose client declared neither capability.
pub(crate) fn undeclared() -> Arc<dyn Asker> {
    UNDECLARED.clone()
}

/// Who answers the questions of a call from `peer` (`sessionless`: a `2026-07-28`
/// request): the client itself when it declared a capability to answer with.
pub(crate) fn asker_for(peer: &Peer<RoleServer>, sessionless: bool) -> Arc<dyn Asker> {
    if sessionless {
        return self::sessionless();
    }
    let able = peer.peer_info().is_some_and(|info| {
        info.capabilities.elicitation.is_some() || info.capabilities.sampling.is_some()
    });
    if able {
        Arc::new(PeerAsker { peer: peer.clone() })
    } else {
        undeclared()
    }
}

impl Asker for PeerAsker {
    fn ask<'a>(&'a self, tool: &'a str, ask: Ask) -> BoxFuture<'a, Result<Value, AskError>> {
        Box::pin(self.put(tool, ask))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_elicitation_names_its_tool_and_sends_people_only_to_https() {
        let form = json!({"message": "Your name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}});
        let Ok(ElicitRequestParams::FormElicitationParams { message, .. }) =
            elicitation("greet", form)
        else {
            panic!("a form elicitation is accepted");
        };
        assert_eq!(message, "[tool greet] Your name?");
        for url in [
            "http://example.com/login",
            "javascript:alert(1)",
            "file:///etc/passwd",
            "",
            "https://",
        ] {
            let asked =
                json!({"mode": "url", "message": "Sign in", "url": url, "elicitationId": "e1"});
            let err = elicitation("greet", asked).unwrap_err();
            assert!(matches!(err, AskError::Invalid { .. }), "{url}: {err}");
            assert!(err.to_string().contains("https://"), "{err}");
        }
        let ok = json!({"mode": "url", "message": "Sign in", "url": "https://example.com/login", "elicitationId": "e1"});
        assert!(elicitation("greet", ok).is_ok());
        // Not what MCP accepts: the field is named.
        let err = elicitation(
            "greet",
            json!({"message": "x", "requestedSchema": {"type": "array"}}),
        )
        .unwrap_err();
        assert!(matches!(err, AskError::Invalid { .. }), "{err}");
    }
}
