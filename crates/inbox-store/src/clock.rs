//! The store's sense of "now". Leases are compared across nodes, so every node must agree on
//! time even when their system clocks drift: [`DatabaseClock`] is the system clock corrected by
//! the offset to the database server's clock, measured at connect and again by the scavenger.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use inbox_core::{Clock, UnixMillis};

/// This machine's clock, unadjusted.
pub fn system_now() -> UnixMillis {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    UnixMillis(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// The system clock plus the last measured offset to the database's clock.
#[derive(Debug, Default)]
pub struct DatabaseClock {
    offset_ms: AtomicI64,
}

impl DatabaseClock {
    /// Records a measurement: the database read `db_now` while the local clock moved from
    /// `sent` to `received`. The midpoint cancels symmetric network delay.
    pub fn record(&self, sent: UnixMillis, db_now: UnixMillis, received: UnixMillis) {
        let midpoint = sent.get() + (received.get() - sent.get()) / 2;
        self.offset_ms.store(db_now.get() - midpoint, Ordering::Relaxed);
    }

    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }
}

impl Clock for DatabaseClock {
    fn now(&self) -> UnixMillis {
        UnixMillis(system_now().get().saturating_add(self.offset_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_uses_the_midpoint_of_the_round_trip() {
        let clock = DatabaseClock::default();
        clock.record(UnixMillis(1_000), UnixMillis(6_020), UnixMillis(1_040));
        assert_eq!(clock.offset_ms(), 5_000);
    }
}
