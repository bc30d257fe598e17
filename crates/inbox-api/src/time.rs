//! RFC 3339 timestamps on the wire, milliseconds since the epoch inside.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats epoch milliseconds as `2026-07-12T16:22:03.120Z`.
pub fn format_utc(epoch_ms: i64) -> String {
    let ms = u64::try_from(epoch_ms).unwrap_or(0);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Parses an RFC 3339 UTC timestamp (`Z` suffix) to epoch milliseconds.
pub fn parse_utc(text: &str) -> Result<i64, String> {
    let at = humantime::parse_rfc3339(text).map_err(|err| match err {
        // A well-formed time out of what a timestamp here can hold (such as year 0001).
        humantime::TimestampError::OutOfRange => {
            format!(
                "{text:?} is outside the times agent-inbox keeps (1970 to 9999); send a time in that range"
            )
        }
        _ => format!("{text:?} is not an RFC 3339 UTC time such as 2026-07-12T16:22:03Z"),
    })?;
    let ms = at.duration_since(UNIX_EPOCH).map_err(|_| format!("{text:?} is before 1970"))?.as_millis();
    i64::try_from(ms).map_err(|_| format!("{text:?} is too far in the future"))
}

/// Milliseconds since the epoch now, by this machine's clock.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_milliseconds() {
        assert_eq!(format_utc(1_752_337_323_120), "2025-07-12T16:22:03.120Z");
        assert_eq!(parse_utc("2025-07-12T16:22:03.120Z").unwrap(), 1_752_337_323_120);
        assert_eq!(parse_utc("2025-07-12T16:22:03Z").unwrap(), 1_752_337_323_000);
        assert!(parse_utc("yesterday").unwrap_err().contains("not an RFC 3339"));
        let early = parse_utc("0001-01-01T00:00:00Z").unwrap_err();
        assert!(early.contains("outside the times") && !early.contains("not an RFC 3339"), "{early}");
    }
}
