//! Example tools, shown by `toolshed tools list` and run by `examples/quickstart.rs`:
//!
//! - [`convert_temperature`]: a `#[tool]` async fn with a struct result, a default, an
//!   enum argument and doc comments that become the schema's descriptions;
//! - [`countdown`]: a streaming `#[tool]` whose partial values become
//!   `tool:result:partial` crumbs;
//! - [`dice_tool`]: a tool built at run time from a JSON Schema and a closure.

use std::time::Duration;

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolshed_core::{Streaming, Tool};
use toolshed_macros::tool;

/// A temperature scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Degrees Celsius.
    Celsius,
    /// Degrees Fahrenheit.
    Fahrenheit,
    /// Kelvin.
    Kelvin,
}

/// The result of a conversion.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Converted {
    /// The converted value, rounded to `precision` decimals.
    pub value: f64,
    /// The scale of `value`.
    pub scale: Scale,
}

fn default_precision() -> u32 {
    1
}

/// Convert a temperature from one scale to another.
#[tool]
pub async fn convert_temperature(
    /// The temperature to convert.
    value: f64,
    /// The scale `value` is in.
    from: Scale,
    /// The scale to convert to.
    to: Scale,
    /// Decimal places in the answer.
    #[serde(default = "default_precision")]
    precision: u32,
) -> Result<Converted, String> {
    let kelvin = match from {
        Scale::Celsius => value + 273.15,
        Scale::Fahrenheit => (value - 32.0) * 5.0 / 9.0 + 273.15,
        Scale::Kelvin => value,
    };
    if kelvin < 0.0 {
        return Err(format!("{value} {from:?} is below absolute zero"));
    }
    let out = match to {
        Scale::Celsius => kelvin - 273.15,
        Scale::Fahrenheit => (kelvin - 273.15) * 9.0 / 5.0 + 32.0,
        Scale::Kelvin => kelvin,
    };
    let factor = 10f64.powi(precision.min(10) as i32);
    Ok(Converted {
        value: (out * factor).round() / factor,
        scale: to,
    })
}

/// One step of a countdown.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Tick {
    /// Seconds left.
    pub remaining: u32,
    /// `counting` until the last tick, then `liftoff`.
    pub status: String,
}

/// Count down from `from` to zero, one partial result per step, then report liftoff.
#[tool(timeout_ms = 60000)]
pub async fn countdown(
    /// Where to start (at most 20).
    from: u32,
    /// Milliseconds between steps.
    #[serde(default)]
    interval_ms: u64,
) -> Streaming<Tick> {
    let from = from.min(20);
    let interval = Duration::from_millis(interval_ms.min(1000));
    Streaming::new(
        futures_util::stream::iter((0..=from).rev()).then(move |remaining| async move {
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
            Tick {
                remaining,
                status: if remaining == 0 {
                    "liftoff"
                } else {
                    "counting"
                }
                .to_owned(),
            }
        }),
    )
}

/// A tool built at run time: a JSON Schema and a closure, no macro.
pub fn dice_tool() -> Tool {
    Tool::builder("roll_dice")
        .description("Roll `count` dice with `sides` sides each, deterministically from `seed`.")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 100, "default": 1,
                          "description": "How many dice."},
                "sides": {"type": "integer", "enum": [4, 6, 8, 10, 12, 20], "default": 6,
                          "description": "Sides per die."},
                "seed": {"type": "integer", "minimum": 0, "description": "Seed for the roll."}
            },
            "required": ["seed"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {"rolls": {"type": "array", "items": {"type": "integer"}}, "total": {"type": "integer"}},
            "required": ["rolls", "total"]
        }))
        .handler(|args, _ctx| async move {
            // Validated before we get here: these are present and in range.
            let count = args["count"].as_u64().ok_or("count missing")?;
            let sides = args["sides"].as_u64().ok_or("sides missing")?;
            let mut state = args["seed"].as_u64().ok_or("seed missing")?.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let rolls: Vec<u64> = (0..count)
                .map(|_| {
                    // splitmix64: small, deterministic, good enough for dice.
                    state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut z = state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    (z ^ (z >> 31)) % sides + 1
                })
                .collect();
            let total: u64 = rolls.iter().sum();
            Ok::<_, &str>(json!({"rolls": rolls, "total": total}))
        })
        .build()
        .expect("the dice tool's definition is valid")
}

/// What `transfer_funds` did.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Transfer {
    /// The amount moved.
    pub amount: f64,
    /// The receiving account.
    pub to: String,
    /// The idempotency key the transfer was sent with: a re-run after a crash sends the
    /// same key, so the (imaginary) bank applies it once.
    pub idempotency_key: Option<String>,
}

/// Move money to an account. Amounts over 100 wait for a person's approval.
///
/// An example of an external side effect: keyed, so a resumed run never repeats it, and
/// gated by a Rust predicate (see [`gated_transfer_tool`]).
#[tool(effects = "external", idempotency = "keyed", max_attempts = 3)]
pub async fn transfer_funds(
    /// The amount, in the account's currency.
    amount: f64,
    /// The receiving account, e.g. `ACME-001`.
    to: String,
    ctx: &toolshed_core::ToolContext,
) -> Result<Transfer, String> {
    if amount <= 0.0 {
        return Err(format!("amount must be positive, got {amount}"));
    }
    Ok(Transfer {
        amount,
        to,
        idempotency_key: ctx.idempotency_key().map(str::to_owned),
    })
}

/// `transfer_funds`, gated: amounts over 100 need an approval.
pub fn gated_transfer_tool() -> Tool {
    let t = transfer_funds_tool();
    let mut spec = t.spec().clone();
    spec.approval =
        toolshed_core::Approval::when(|args| args["amount"].as_f64().unwrap_or(0.0) > 100.0);
    Tool::from_spec(spec, t.handler().clone()).expect("the transfer tool's definition is valid")
}

/// A human tool: the run waits until a person answers whether to publish.
pub fn approve_publish_tool() -> Tool {
    toolshed_core::human_tool_with(
        "approve_publish",
        "Ask an editor whether a post may be published. The run waits for their answer.",
        json!({"type": "object", "properties": {"url": {"type": "string", "description": "The post to review."}}, "required": ["url"]}),
        json!({
            "type": "object",
            "properties": {
                "approved": {"type": "boolean", "description": "Whether the post may go out."},
                "note": {"type": "string", "description": "A note for the author."}
            },
            "required": ["approved"],
            "additionalProperties": false
        }),
    )
    .expect("the approve_publish definition is valid")
}

/// Every example tool.
pub fn tools() -> Vec<Tool> {
    vec![
        convert_temperature_tool(),
        countdown_tool(),
        dice_tool(),
        gated_transfer_tool(),
        approve_publish_tool(),
    ]
}
