//! An approval asked of the person at the client, by elicitation.
//!
//! - **In a session** (the `initialize` era), the server sends `elicitation/create` while
//!   the call waits ([`super::McpHandler::elicit_approval`]).
//! - **Session-less** (`2026-07-28`), a server sends no requests of its own: it answers
//!   the call with an `InputRequiredResult` (SEP-2322) holding the same form, and the
//!   client calls again with the person's answer in `inputResponses` and the
//!   `requestState` it was given.
//!
//! `requestState` comes back from the client, so it is only a handle: the run's id,
//! nothing the server trusts. The call made again continues that run, which the gateway
//! does only for the caller's tenant and the same tool and arguments; the decision then
//! goes to the call that run is parked on (found again, never read from the state), and
//! through the same check of the caller's role as any other decision.

use std::collections::BTreeMap;

use rmcp::ErrorData;
use rmcp::model::{ElicitRequestParams, InputRequest, InputRequiredResult, InputResponses};
use serde_json::{Map, Value, json};

/// The key of the approval's question in `inputRequests` and of its answer in
/// `inputResponses`.
pub const KEY: &str = "toolshed/approval";

/// What a `requestState` of ours starts with.
const STATE_PREFIX: &str = "toolshed-approval.v1:";

/// A run id in a state: toolshed's ids are UUIDs, and keyed runs' are hex digests.
const MAX_RUN_ID: usize = 128;

/// The form that asks: the tool, why it needs an approval, its arguments (the first
/// 500 characters), and a yes or no with an optional reason.
pub fn form(tool: &str, reason: &str, args: &Map<String, Value>) -> Value {
    let args_text = serde_json::to_string(args).unwrap_or_default();
    let args_text: String = args_text.chars().take(500).collect();
    json!({
        "mode": "form",
        "message": format!("toolshed: tool `{tool}` needs approval ({reason}). Arguments: {args_text}. Approve this call?"),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Approve", "description": "Run the call (true) or deny it (false)"},
                "reason": {"type": "string", "title": "Reason", "description": "Why (recorded with the decision)"}
            },
            "required": ["approve"]
        }
    })
}

/// The answer to a session-less call parked on its approval: ask, and call again.
pub fn input_required(
    tool: &str,
    reason: &str,
    args: &Map<String, Value>,
    run_id: &str,
) -> Result<InputRequiredResult, ErrorData> {
    let params: ElicitRequestParams =
        serde_json::from_value(form(tool, reason, args)).map_err(|e| {
            ErrorData::internal_error(format!("cannot build the approval form: {e}"), None)
        })?;
    let request = serde_json::from_value::<InputRequest>(json!({
        "method": "elicitation/create",
        "params": params,
    }))
    .map_err(|e| {
        ErrorData::internal_error(format!("cannot build the approval request: {e}"), None)
    })?;
    let requests = BTreeMap::from([(KEY.to_owned(), request)]);
    Ok(InputRequiredResult::new(
        Some(requests),
        Some(format!("{STATE_PREFIX}{run_id}")),
    ))
}

/// The run a `requestState` names; a state that is not ours is refused, naming it.
pub fn run_of(state: &str) -> Result<String, ErrorData> {
    let run = state
        .strip_prefix(STATE_PREFIX)
        .filter(|id| {
            !id.is_empty()
                && id.len() <= MAX_RUN_ID
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .ok_or_else(|| {
            ErrorData::invalid_params(
                "requestState: not one this server gave; send the requestState of its InputRequiredResult unchanged, or call without one",
                None,
            )
        })?;
    Ok(run.to_owned())
}

/// The person's decision in `inputResponses`: approve or deny with a reason, or `None`
/// when they dismissed the form (nobody decided; the call stays pending).
pub fn decision(responses: Option<&InputResponses>) -> Option<(bool, String)> {
    let answer = responses?.get(KEY)?;
    decision_of(
        answer.get("action").and_then(Value::as_str)?,
        answer.get("content"),
    )
}

/// A decision from an elicitation's action and content (both eras).
pub fn decision_of(action: &str, content: Option<&Value>) -> Option<(bool, String)> {
    match action {
        "accept" => {
            let content = content.unwrap_or(&Value::Null);
            let approve = content
                .get("approve")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let why = content
                .get("reason")
                .and_then(Value::as_str)
                .map(|s| s.chars().take(500).collect::<String>())
                .unwrap_or_else(|| "decided at the MCP client".into());
            Some((approve, why))
        }
        "decline" => Some((false, "declined at the MCP client".into())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_names_one_run_and_nothing_else_is_taken() {
        let r = input_required("t", "always", &Map::new(), "0193-ab_c").unwrap();
        let state = r.request_state.unwrap();
        assert_eq!(run_of(&state).unwrap(), "0193-ab_c");
        for forged in [
            "",
            "0193",
            "toolshed-approval.v1:",
            "toolshed-approval.v1:a/../b",
            "toolshed-approval.v1:a:b",
            &format!("toolshed-approval.v1:{}", "a".repeat(129)),
        ] {
            assert!(run_of(forged).is_err(), "{forged:?}");
        }
    }

    #[test]
    fn the_request_is_an_elicitation_under_its_key() {
        let r = input_required("refund", "amount > 100", &Map::new(), "r1").unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["resultType"], "input_required");
        assert_eq!(v["inputRequests"][KEY]["method"], "elicitation/create");
        assert!(
            v["inputRequests"][KEY]["params"]["message"]
                .as_str()
                .unwrap()
                .contains("`refund`")
        );
    }

    #[test]
    fn decisions_read_from_the_answer() {
        let yes = InputResponses::from([(
            KEY.to_owned(),
            json!({"action": "accept", "content": {"approve": true, "reason": "ok"}}),
        )]);
        assert_eq!(decision(Some(&yes)), Some((true, "ok".into())));
        let no = InputResponses::from([(KEY.to_owned(), json!({"action": "decline"}))]);
        assert_eq!(decision(Some(&no)).map(|d| d.0), Some(false));
        let dismissed = InputResponses::from([(KEY.to_owned(), json!({"action": "cancel"}))]);
        assert_eq!(decision(Some(&dismissed)), None);
        assert_eq!(decision(None), None);
    }
}
