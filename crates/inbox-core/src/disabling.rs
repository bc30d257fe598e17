//! When a callback that keeps failing is disabled: the bound is a count of failed deliveries
//! in a row *and* how long they have gone on, so neither a short outage of a busy receiver
//! (many failures in an hour) nor a rarely used receiver that failed twice a day apart is
//! disabled, but one that has failed every delivery for a day and many times over is.

use crate::UnixMillis;

/// The bound past which a failing callback registration is disabled. A zero
/// `failures_min` never disables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisablePolicy {
    /// Failed deliveries in a row, across heads, since the last success.
    pub failures_min: u32,
    /// Time since the first of them failed.
    pub failing_ms_min: u64,
}

impl DisablePolicy {
    /// Whether a registration whose `consecutive_failures`-th failure in a row (this one
    /// included) just ended at `now`, the first at `failing_since`, is to be disabled.
    pub fn disables(&self, consecutive_failures: u32, failing_since: UnixMillis, now: UnixMillis) -> bool {
        self.failures_min > 0
            && consecutive_failures >= self.failures_min
            && now.get().saturating_sub(failing_since.get())
                >= i64::try_from(self.failing_ms_min).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: u64 = 86_400_000;

    #[test]
    fn both_the_count_and_the_duration_must_be_reached() {
        let policy = DisablePolicy { failures_min: 50, failing_ms_min: DAY_MS };
        let start = UnixMillis(1_000);
        let a_day_later = start.plus_ms(DAY_MS);
        assert!(policy.disables(50, start, a_day_later));
        assert!(!policy.disables(49, start, a_day_later), "too few failures");
        assert!(!policy.disables(500, start, start.plus_ms(DAY_MS - 1)), "not for long enough");
    }

    #[test]
    fn a_zero_count_never_disables() {
        let policy = DisablePolicy { failures_min: 0, failing_ms_min: 0 };
        assert!(!policy.disables(u32::MAX, UnixMillis(0), UnixMillis(i64::MAX)));
    }
}
