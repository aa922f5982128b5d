//! Drivers: what executes a run's calls, recorded with the run so that
//! `toolshed runs resume ID` can continue any run the CLI started. A library program is
//! its own driver: it resumes a run by running again with the same run id.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolshed_core::{CallOutcome, ToolCall};
use toolshed_journal::RunRecord;

use crate::RuntimeError;
use crate::run::{CallStep, PendingGate, RunHandle};

/// One step of a plan: a call, or calls of one model turn that run concurrently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStep {
    /// One call.
    Call {
        /// The tool.
        tool: String,
        /// Its args.
        args: Value,
    },
    /// Several calls at once.
    Parallel(Vec<PlanStep>),
}

/// What drives a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Driver {
    /// `toolshed tools run NAME --args …`.
    Direct {
        /// The tool.
        tool: String,
        /// Its args.
        args: Value,
    },
    /// `toolshed runs start --plan FILE`: calls in order.
    Plan {
        /// The steps.
        steps: Vec<PlanStep>,
    },
    /// A program using the library drives it.
    Library,
}

impl Driver {
    /// Read a plan file: a JSON list whose items are `{"tool": NAME, "args": {…}}` or
    /// `{"parallel": [ {"tool": …, "args": …}, … ]}`. Errors name the item and the fix.
    pub fn parse_plan(text: &str) -> Result<Driver, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("the plan is not valid JSON: {e}"))?;
        let Value::Array(items) = value else {
            return Err(
                "the plan must be a JSON list of {\"tool\": NAME, \"args\": {…}} items".into(),
            );
        };
        if items.is_empty() {
            return Err(
                "the plan is empty: give at least one {\"tool\": NAME, \"args\": {…}}".into(),
            );
        }
        let steps = items
            .iter()
            .enumerate()
            .map(|(i, item)| parse_step(item, &format!("[{i}]"), true))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Driver::Plan { steps })
    }
}

fn parse_step(item: &Value, at: &str, allow_parallel: bool) -> Result<PlanStep, String> {
    let Value::Object(map) = item else {
        return Err(format!(
            "plan item {at} must be an object like {{\"tool\": NAME, \"args\": {{…}}}}"
        ));
    };
    if let Some(par) = map.get("parallel") {
        if !allow_parallel {
            return Err(format!("plan item {at}: `parallel` cannot be nested"));
        }
        if let Some(extra) = map.keys().find(|k| *k != "parallel") {
            return Err(format!(
                "plan item {at}: unknown field `{extra}` beside `parallel`"
            ));
        }
        let Value::Array(calls) = par else {
            return Err(format!("plan item {at}.parallel must be a list of calls"));
        };
        return calls
            .iter()
            .enumerate()
            .map(|(j, c)| parse_step(c, &format!("{at}.parallel[{j}]"), false))
            .collect::<Result<Vec<_>, _>>()
            .map(PlanStep::Parallel);
    }
    if let Some(extra) = map.keys().find(|k| *k != "tool" && *k != "args") {
        return Err(format!(
            "plan item {at}: unknown field `{extra}`; an item has `tool` and `args`"
        ));
    }
    let tool = match map.get("tool") {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        Some(_) => {
            return Err(format!(
                "plan item {at}.tool must be a tool name (a string)"
            ));
        }
        None => return Err(format!("plan item {at} has no `tool`")),
    };
    let args = match map.get("args") {
        None => Value::Object(Default::default()),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return Err(format!("plan item {at}.args must be a JSON object")),
    };
    Ok(PlanStep::Call { tool, args })
}

/// How a drive ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The run after the drive (completed or parked).
    pub run: RunRecord,
    /// The calls that have results, in order.
    pub outcomes: Vec<CallOutcome>,
    /// The calls waiting for a person.
    pub parked: Vec<PendingGate>,
}

/// Drive a run with a recorded driver until it completes or parks. Calls already in the
/// journal replay; a plan stops at the first step that parks (later steps may depend on
/// it) and continues from there on resume.
pub async fn drive(handle: &RunHandle, driver: &Driver) -> Result<RunOutcome, RuntimeError> {
    let steps = match driver {
        Driver::Direct { tool, args } => vec![PlanStep::Call {
            tool: tool.clone(),
            args: args.clone(),
        }],
        Driver::Plan { steps } => steps.clone(),
        Driver::Library => {
            return Err(RuntimeError::Startup(format!(
                "run {} is driven by a program using the library; resume it by running that program \
                 again with the same run id",
                handle.id()
            )));
        }
    };
    let mut outcomes = Vec::new();
    let mut ordinal = 0u32;
    let mut next_id = || {
        ordinal += 1;
        format!("call_{}", ordinal - 1)
    };
    let result = async {
        for step in steps {
            let parked = match step {
                PlanStep::Call { tool, args } => {
                    let call = ToolCall {
                        id: next_id(),
                        name: tool,
                        args,
                    };
                    match handle.call(call).await? {
                        CallStep::Done(o) => {
                            outcomes.push(o);
                            false
                        }
                        CallStep::Parked(_) => true,
                    }
                }
                PlanStep::Parallel(calls) => {
                    let calls = calls
                        .into_iter()
                        .filter_map(|s| match s {
                            PlanStep::Call { tool, args } => Some(ToolCall {
                                id: next_id(),
                                name: tool,
                                args,
                            }),
                            PlanStep::Parallel(_) => None,
                        })
                        .collect();
                    let mut any_parked = false;
                    for step in handle.call_many(calls).await? {
                        match step {
                            CallStep::Done(o) => outcomes.push(o),
                            CallStep::Parked(_) => any_parked = true,
                        }
                    }
                    any_parked
                }
            };
            if parked {
                break;
            }
        }
        Ok::<(), RuntimeError>(())
    }
    .await;
    if let Err(e) = result {
        if matches!(e, RuntimeError::NonDeterminism { .. }) {
            let _ = handle.fail(e.to_string()).await;
        }
        return Err(e);
    }
    let run = handle.finish().await?;
    Ok(RunOutcome {
        run,
        outcomes,
        parked: handle.parked(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_with_clear_errors() {
        let d = Driver::parse_plan(
            r#"[{"tool": "a", "args": {"x": 1}}, {"parallel": [{"tool": "b"}, {"tool": "c"}]}]"#,
        )
        .unwrap();
        let Driver::Plan { steps } = d else { panic!() };
        assert_eq!(steps.len(), 2);
        for (text, expect) in [
            ("{", "not valid JSON"),
            ("{}", "must be a JSON list"),
            ("[]", "empty"),
            ("[3]", "[0] must be an object"),
            (r#"[{"args": {}}]"#, "[0] has no `tool`"),
            (
                r#"[{"tool": "a", "args": []}]"#,
                "[0].args must be a JSON object",
            ),
            (r#"[{"tool": "a", "arg": {}}]"#, "unknown field `arg`"),
            (r#"[{"parallel": [{"parallel": []}]}]"#, "cannot be nested"),
        ] {
            let e = Driver::parse_plan(text).unwrap_err();
            assert!(e.contains(expect), "{text}: {e}");
        }
    }
}
