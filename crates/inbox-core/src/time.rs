//! Time as a value. The core never asks what time it is; callers pass a [`UnixMillis`] read
//! from a [`Clock`], and tests use a [`ManualClock`] to move time instead of sleeping.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, UTC. The unit every timestamp column stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnixMillis(pub i64);

impl UnixMillis {
    pub fn get(self) -> i64 {
        self.0
    }

    /// Adds a duration in milliseconds, saturating instead of overflowing.
    pub fn plus_ms(self, ms: u64) -> UnixMillis {
        UnixMillis(self.0.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)))
    }

    pub fn minus_ms(self, ms: u64) -> UnixMillis {
        UnixMillis(self.0.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)))
    }

    /// Milliseconds from `earlier` to `self`, or zero if `earlier` is later.
    pub fn ms_since(self, earlier: UnixMillis) -> u64 {
        u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0)
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// The one source of "now" for everything that stores or compares time.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> UnixMillis;
}

/// A clock that only moves when told to: for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    pub fn new(start: UnixMillis) -> Self {
        Self { now_ms: AtomicI64::new(start.0) }
    }

    pub fn advance_ms(&self, ms: u64) {
        self.now_ms.fetch_add(i64::try_from(ms).unwrap_or(i64::MAX), Ordering::SeqCst);
    }

    pub fn set(&self, now: UnixMillis) {
        self.now_ms.store(now.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixMillis {
        UnixMillis(self.now_ms.load(Ordering::SeqCst))
    }
}
