//! Time as the stores keep it: milliseconds since the Unix epoch, shown as RFC 3339.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 for a clock before it, `i64::MAX` far after it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// An epoch-milliseconds time as RFC 3339 UTC, for messages.
pub fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ms} ms since the epoch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_ms_is_rfc3339() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        assert!(now_ms() > 1_700_000_000_000);
    }
}
