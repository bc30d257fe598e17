//! Per-tenant quotas (issue 31): the most events not yet acknowledged or parked, and the
//! inline payload bytes they hold, set in the tenant's policy (0: no limit). Every delivery
//! counts: a publish by its recipients, a room post by its members, a hand-off by its
//! follow-ups' recipients (less the event it acknowledges). A change that would pass a quota
//! is refused as one decision before anything of it commits (429 `tenant_pending_limit`,
//! 507 `tenant_storage_limit`, both with `Retry-After`), so nothing stored changes.
//!
//! Admission reserves before it commits: [`Quotas::admit`] adds the change to the tenant's
//! count as *reserved* and hands back a [`Reservation`], which the caller settles with what
//! committed (or cancels when nothing did). The counts come from the database at most once per
//! [`USAGE_TTL`] per tenant and node; that read waits until every change this node admitted
//! has settled, and admissions wait for it, so the database's answer and this node's
//! reservations never count a change twice or miss one. On one node a quota is therefore
//! exact under any concurrency; across nodes it may be passed by what the others admit within
//! their last second. Tenants without a quota cost one lookup of their cached policy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use inbox_api::time::format_utc;
use inbox_api::{ProblemCode, QuotaRefusalView, QuotaRefusalsResponse};
use inbox_core::{EventBody, TenantId, UnixMillis};
use inbox_store::{PublishReceipt, SqlStore, TenantPolicy, TenantUsage};
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use crate::error::ApiError;
use crate::metrics::Metrics;

/// How long a node trusts a tenant's counts read from the database.
pub const USAGE_TTL: Duration = Duration::from_secs(1);
/// Seconds a refused publisher is told to wait: about the time acknowledgements take to show.
const RETRY_AFTER_SECONDS: u64 = 2;
/// Tenants counted at most; past it the cache starts over.
const TENANTS_MAX: usize = 10_000;

/// Refusals kept per tenant for operators.
const RECENT_REFUSALS_MAX: usize = 20;

/// What a change adds to its tenant's pending events and stored bytes: what it would add, when
/// it is admitted, and what it did, when it is settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Change {
    /// New deliveries (one per recipient of each publish).
    pub events: u64,
    /// Pending events the same transaction acknowledges (a hand-off's own event).
    pub events_done: u64,
    /// Inline payload bytes of the new deliveries.
    pub bytes: u64,
}

impl Change {
    /// `deliveries` new events of `bytes_each` inline payload bytes each.
    pub fn deliveries(deliveries: usize, bytes_each: u64) -> Change {
        let events = deliveries as u64;
        Change { events, events_done: 0, bytes: bytes_each.saturating_mul(events) }
    }

    /// What a committed publish of `bytes_each` inline bytes added: its new deliveries (a
    /// deduplicated one adds nothing).
    pub fn committed(receipt: &PublishReceipt, bytes_each: u64) -> Change {
        let fresh = receipt.deliveries.iter().filter(|d| !d.deduplicated).count();
        Change::deliveries(fresh, bytes_each)
    }

    /// Both changes, as one.
    pub fn and(self, other: Change) -> Change {
        Change {
            events: self.events + other.events,
            events_done: self.events_done + other.events_done,
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }

    /// What the change reserves: the events it adds beyond those it acknowledges.
    fn reserved(self) -> TenantUsage {
        TenantUsage { pending_events: self.events.saturating_sub(self.events_done), stored_bytes: self.bytes }
    }
}

/// This node's counts of tenants with a quota, and its refusals.
#[derive(Debug, Default)]
pub struct Quotas {
    tenants: Mutex<HashMap<TenantId, Arc<TenantCount>>>,
    refusals: Mutex<HashMap<TenantId, QuotaRefusalsResponse>>,
}

/// One tenant's count on this node.
#[derive(Debug, Default)]
struct TenantCount {
    /// Held shared by every admitted change until it settles, and exclusively while the
    /// database's counts are read, so that read sees each admitted change committed or gone.
    gate: Arc<RwLock<()>>,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// When the database's counts were read; none before the first read.
    read_at: Option<Instant>,
    /// The database's counts then, plus what this node settled since.
    settled: TenantUsage,
    /// What admitted changes still in flight may add.
    reserved: TenantUsage,
}

impl Counts {
    fn fresh(&self) -> bool {
        self.read_at.is_some_and(|read| read.elapsed() < USAGE_TTL)
    }
}

/// An admitted change's place in its tenant's count, until it is settled or cancelled. A
/// reservation dropped unsettled (its request was abandoned mid-commit) counts as committed
/// until the next read of the database: a quota errs on the side of refusing.
#[derive(Debug)]
#[must_use = "settle the reservation with what committed, or cancel it"]
pub struct Reservation {
    held: Option<Held>,
}

#[derive(Debug)]
struct Held {
    count: Arc<TenantCount>,
    reserved: TenantUsage,
    _gate: OwnedRwLockReadGuard<()>,
}

impl Reservation {
    /// A change of a tenant without quotas: nothing to count.
    fn unlimited() -> Reservation {
        Reservation { held: None }
    }

    /// Counts what committed.
    pub fn settle(self, committed: Change) {
        self.finish(Some(committed));
    }

    /// Nothing of the change committed.
    pub fn cancel(self) {
        self.finish(None);
    }

    fn finish(mut self, committed: Option<Change>) {
        let Some(held) = self.held.take() else { return };
        let mut counts = held.count.counts.lock().expect("quota counts");
        counts.reserved.pending_events -= held.reserved.pending_events;
        counts.reserved.stored_bytes -= held.reserved.stored_bytes;
        if let Some(change) = committed {
            let settled = &mut counts.settled;
            settled.pending_events =
                (settled.pending_events + change.events).saturating_sub(change.events_done);
            settled.stored_bytes = settled.stored_bytes.saturating_add(change.bytes);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            let reserved = held.reserved;
            let change =
                Change { events: reserved.pending_events, events_done: 0, bytes: reserved.stored_bytes };
            Reservation { held: Some(held) }.finish(Some(change));
        }
    }
}

impl Quotas {
    /// Admits `change` of `tenant_id` under `policy`, reserving it in the tenant's count, or
    /// refuses it when it would take the tenant past a quota.
    pub async fn admit(
        &self,
        store: &SqlStore,
        metrics: &Metrics,
        policy: &TenantPolicy,
        tenant_id: &TenantId,
        change: Change,
    ) -> Result<Reservation, ApiError> {
        if !policy.has_quota() {
            return Ok(Reservation::unlimited());
        }
        let count = self.count_of(tenant_id);
        loop {
            let gate = count.gate.clone().read_owned().await;
            {
                let mut counts = count.counts.lock().expect("quota counts");
                if counts.fresh() {
                    let pending = counts.settled.pending_events + counts.reserved.pending_events;
                    let stored = counts.settled.stored_bytes + counts.reserved.stored_bytes;
                    let usage = TenantUsage { pending_events: pending, stored_bytes: stored };
                    if let Some(refusal) = refusal(policy, tenant_id, usage, change) {
                        drop(counts);
                        return Err(self.refused(store, metrics, tenant_id, refusal));
                    }
                    let reserved = change.reserved();
                    counts.reserved.pending_events += reserved.pending_events;
                    counts.reserved.stored_bytes += reserved.stored_bytes;
                    return Ok(Reservation {
                        held: Some(Held { count: count.clone(), reserved, _gate: gate }),
                    });
                }
            }
            drop(gate);
            // Every change admitted before has settled once the gate is ours.
            let _gate = count.gate.write().await;
            if !count.counts.lock().expect("quota counts").fresh() {
                let usage = store.inbox().tenant_usage(tenant_id).await?;
                let mut counts = count.counts.lock().expect("quota counts");
                counts.settled = usage;
                counts.read_at = Some(Instant::now());
            }
        }
    }

    /// This node's refusals of `tenant_id`'s publishes, for operators.
    pub fn refusals(&self, tenant_id: &TenantId) -> QuotaRefusalsResponse {
        self.refusals.lock().expect("quota refusals").get(tenant_id).cloned().unwrap_or_default()
    }

    fn count_of(&self, tenant_id: &TenantId) -> Arc<TenantCount> {
        let mut tenants = self.tenants.lock().expect("quota counts");
        if !tenants.contains_key(tenant_id) && tenants.len() >= TENANTS_MAX {
            tenants.clear();
        }
        tenants.entry(tenant_id.clone()).or_default().clone()
    }

    /// Counts and remembers a refusal, and answers it.
    fn refused(
        &self,
        store: &SqlStore,
        metrics: &Metrics,
        tenant_id: &TenantId,
        refusal: Refusal,
    ) -> ApiError {
        let tenant = metrics.tenant_label(tenant_id.as_str());
        metrics.quota_refusals_total().add([tenant, refusal.limit.to_owned()], 1);
        self.remember_refusal(tenant_id, refusal.limit, &refusal.detail, store.now());
        ApiError::new(refusal.status, refusal.code, refusal.detail).retry_after(RETRY_AFTER_SECONDS)
    }

    fn remember_refusal(&self, tenant_id: &TenantId, limit: &str, detail: &str, now: UnixMillis) {
        let mut refusals = self.refusals.lock().expect("quota refusals");
        if !refusals.contains_key(tenant_id) && refusals.len() >= TENANTS_MAX {
            refusals.clear();
        }
        let log = refusals.entry(tenant_id.clone()).or_default();
        match limit {
            "pending_events" => log.pending_events_refused += 1,
            _ => log.stored_bytes_refused += 1,
        }
        log.recent.insert(
            0,
            QuotaRefusalView {
                refused_at_utc: format_utc(now.get()),
                limit: limit.to_owned(),
                detail: detail.to_owned(),
            },
        );
        log.recent.truncate(RECENT_REFUSALS_MAX);
    }
}

/// Why a change may not be admitted.
struct Refusal {
    status: StatusCode,
    code: ProblemCode,
    /// The metric's label and the operators' view's name for the quota.
    limit: &'static str,
    detail: String,
}

/// The quota `change` would pass with `usage` counted already, if any.
fn refusal(
    policy: &TenantPolicy,
    tenant_id: &TenantId,
    usage: TenantUsage,
    change: Change,
) -> Option<Refusal> {
    let adds = change.reserved();
    if policy.pending_events_max > 0 && usage.pending_events + adds.pending_events > policy.pending_events_max
    {
        return Some(Refusal {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: ProblemCode::TenantPendingLimit,
            limit: "pending_events",
            detail: format!(
                "tenant {tenant_id} holds {} events not yet acknowledged and this change adds {}; its limit is {} (tenant policy pending_events_max): let its agents acknowledge work, or raise the limit",
                usage.pending_events, adds.pending_events, policy.pending_events_max
            ),
        });
    }
    if policy.stored_bytes_max > 0 && usage.stored_bytes + adds.stored_bytes > policy.stored_bytes_max {
        return Some(Refusal {
            status: StatusCode::INSUFFICIENT_STORAGE,
            code: ProblemCode::TenantStorageLimit,
            limit: "stored_bytes",
            detail: format!(
                "tenant {tenant_id}'s unacknowledged events hold {} payload bytes and this change adds {}; its limit is {} (tenant policy stored_bytes_max): let its agents acknowledge work, send a payload_ref instead of inline data, or raise the limit",
                usage.stored_bytes, adds.stored_bytes, policy.stored_bytes_max
            ),
        });
    }
    None
}

/// The bytes an event's inline payload takes (a reference takes none).
pub fn inline_bytes(body: &EventBody) -> u64 {
    match body {
        EventBody::Json(json) => json.len() as u64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(pending_events_max: u64, stored_bytes_max: u64) -> TenantPolicy {
        TenantPolicy { pending_events_max, stored_bytes_max, ..TenantPolicy::default() }
    }

    fn usage(pending_events: u64, stored_bytes: u64) -> TenantUsage {
        TenantUsage { pending_events, stored_bytes }
    }

    #[test]
    fn a_change_is_refused_only_past_a_quota() {
        let tenant = TenantId::new("t1").unwrap();
        let fits = Change::deliveries(2, 10);
        assert!(refusal(&policy(5, 100), &tenant, usage(3, 80), fits).is_none(), "exactly at both limits");
        let past = refusal(&policy(5, 100), &tenant, usage(4, 0), fits).expect("one event too many");
        assert_eq!((past.code, past.limit), (ProblemCode::TenantPendingLimit, "pending_events"));
        let past = refusal(&policy(5, 100), &tenant, usage(0, 81), fits).expect("one byte too many");
        assert_eq!((past.code, past.limit), (ProblemCode::TenantStorageLimit, "stored_bytes"));
        assert!(refusal(&policy(0, 0), &tenant, usage(u64::MAX / 2, 0), fits).is_none(), "0 is no limit");
    }

    #[test]
    fn a_hand_off_is_credited_the_event_it_acknowledges() {
        let tenant = TenantId::new("t1").unwrap();
        let one_for_one = Change { events: 1, events_done: 1, bytes: 0 };
        assert!(
            refusal(&policy(5, 0), &tenant, usage(5, 0), one_for_one).is_none(),
            "a full chain still moves"
        );
        let fan_out = Change { events: 3, events_done: 1, bytes: 0 };
        let past = refusal(&policy(5, 0), &tenant, usage(4, 0), fan_out).expect("adds two");
        assert!(past.detail.contains("this change adds 2"), "{}", past.detail);
    }
}
