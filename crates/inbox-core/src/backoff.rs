//! When a released or abandoned event becomes claimable again. Exponential growth with a
//! ceiling, and "equal jitter" so that many events abandoned together do not return together.

use serde::{Deserialize, Serialize};

/// Retry delay after the n-th failed delivery attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffPolicy {
    pub base_ms: u64,
    pub ceiling_ms: u64,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self { base_ms: 1_000, ceiling_ms: 5 * 60 * 1_000 }
    }
}

impl BackoffPolicy {
    /// Delay before the next attempt after `attempts` deliveries, `jitter` in `[0, 1]` from the
    /// caller's random source. Half the delay is fixed, half is jittered; never above the ceiling.
    pub fn delay_ms(&self, attempts: u32, jitter: f64) -> u64 {
        let exponent = attempts.saturating_sub(1).min(32);
        let full = self.base_ms.saturating_mul(1u64 << exponent).min(self.ceiling_ms);
        let half = full / 2;
        let jitter = jitter.clamp(0.0, 1.0);
        // `half as f64 * jitter` is at most `half`, so the sum stays within `full`.
        half + ((full - half) as f64 * jitter) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn delays_double_up_to_the_ceiling() {
        let policy = BackoffPolicy { base_ms: 1_000, ceiling_ms: 10_000 };
        assert_eq!(policy.delay_ms(1, 1.0), 1_000);
        assert_eq!(policy.delay_ms(2, 1.0), 2_000);
        assert_eq!(policy.delay_ms(3, 1.0), 4_000);
        assert_eq!(policy.delay_ms(5, 1.0), 10_000);
        assert_eq!(policy.delay_ms(1_000, 1.0), 10_000);
        assert_eq!(policy.delay_ms(3, 0.0), 2_000);
    }

    proptest! {
        #[test]
        fn delay_is_within_half_and_whole_of_the_capped_exponential(
            base in 1u64..100_000, ceiling in 1u64..10_000_000, attempts in 0u32..200, jitter in 0.0f64..=1.0,
        ) {
            let policy = BackoffPolicy { base_ms: base, ceiling_ms: ceiling };
            let delay = policy.delay_ms(attempts, jitter);
            let full = base.saturating_mul(1u64 << attempts.saturating_sub(1).min(32)).min(ceiling);
            prop_assert!(delay <= full);
            prop_assert!(delay >= full / 2);
            prop_assert!(policy.delay_ms(attempts + 1, 1.0) >= policy.delay_ms(attempts, 1.0));
        }
    }
}
