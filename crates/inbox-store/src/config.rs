//! The limits and policies a store enforces. Every number has a bound; units end each name.

use inbox_core::BackoffPolicy;
use inbox_core::limits::{BATCH_EVENTS_MAX, FANOUT_RECIPIENTS_MAX, LEASE_SECONDS_MAX_DEFAULT};

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Lease length when a claim does not ask for one.
    pub lease_ms_default: u64,
    /// Longest lease a claim or heartbeat may ask for.
    pub lease_ms_max: u64,
    /// Delivery attempts before an event is dead-lettered, unless its publisher set another.
    pub max_attempts_default: u32,
    /// Largest inline JSON payload, in bytes.
    pub payload_bytes_limit: usize,
    /// How long terminal events stay in `agent_inbox` before the archive takes them.
    pub retention_ms: u64,
    /// How long archived events stay in `agent_inbox_archive` before the scavenger prunes them
    /// (export them first: `agent-inbox archive export`).
    pub archive_retention_ms: u64,
    /// Delay before an event whose lease expired is claimable again.
    pub backoff: BackoffPolicy,
    /// Largest number of events one poll, claim, ack or heartbeat may name or return.
    pub batch_events_max: u32,
    /// Largest number of recipients one publish may fan out to.
    pub fanout_recipients_max: usize,
    /// Retries of a transaction chosen as a deadlock victim or timed out waiting for a lock.
    pub contention_retries_max: u32,
    /// Whether each event's history (claims, acknowledgements, releases, expiries,
    /// quarantines, requeues) is recorded with its row. Operators may turn it off.
    pub record_history: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            lease_ms_default: 120_000,
            lease_ms_max: LEASE_SECONDS_MAX_DEFAULT * 1_000,
            max_attempts_default: 10,
            payload_bytes_limit: 256 * 1024,
            retention_ms: 30 * 24 * 3_600_000,
            archive_retention_ms: 90 * 24 * 3_600_000,
            backoff: BackoffPolicy::default(),
            batch_events_max: BATCH_EVENTS_MAX,
            fanout_recipients_max: FANOUT_RECIPIENTS_MAX,
            contention_retries_max: 8,
            record_history: true,
        }
    }
}
