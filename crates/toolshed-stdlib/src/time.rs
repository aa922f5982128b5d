//! `get_current_time`: the current time, in UTC or at a fixed offset.

use chrono::{FixedOffset, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::Serialize;
use toolshed_macros::tool;

/// The answer of `get_current_time`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CurrentTime {
    /// The time as ISO 8601 / RFC 3339, at the requested offset.
    pub iso8601: String,
    /// Seconds since the Unix epoch.
    pub unix: i64,
    /// The offset used, e.g. `+00:00`.
    pub offset: String,
}

/// Return the current time as ISO 8601 (RFC 3339), in UTC unless an offset is given.
#[tool(effects = "none")]
pub async fn get_current_time(
    /// A fixed UTC offset such as `+02:00` or `-05:30`; UTC when left out.
    #[serde(default)]
    utc_offset: Option<String>,
) -> Result<CurrentTime, String> {
    let now = Utc::now();
    let offset = match utc_offset.as_deref() {
        None | Some("Z") | Some("z") => FixedOffset::east_opt(0),
        Some(text) => parse_offset(text),
    }
    .ok_or_else(|| {
        format!(
            "utc_offset {:?} is not an offset like `+02:00` or `-05:30` (between -23:59 and +23:59)",
            utc_offset.unwrap_or_default()
        )
    })?;
    let local = now.with_timezone(&offset);
    Ok(CurrentTime {
        iso8601: local.to_rfc3339_opts(SecondsFormat::Millis, offset.local_minus_utc() == 0),
        unix: now.timestamp(),
        offset: offset.to_string(),
    })
}

fn parse_offset(text: &str) -> Option<FixedOffset> {
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let h: i32 = h.parse().ok()?;
    let m: i32 = m.parse().ok()?;
    if h > 23 || m > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn utc_and_offsets() {
        let t = get_current_time(None).await.unwrap();
        assert!(t.iso8601.ends_with('Z'), "{}", t.iso8601);
        let t = get_current_time(Some("+02:00".into())).await.unwrap();
        assert!(t.iso8601.ends_with("+02:00"), "{}", t.iso8601);
        for bad in ["2", "+2:00", "+24:00", "EST", "+02:60", ""] {
            let e = get_current_time(Some(bad.into())).await.unwrap_err();
            assert!(e.contains("utc_offset"), "{e}");
        }
    }
}
