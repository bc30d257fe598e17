//! Per-tenant quotas (issue 31): the most events not yet acknowledged or parked, and the
//! inline payload bytes they hold, set in the tenant's policy (0: no limit). A publish that
//! would pass one is refused before it touches the database (429 `tenant_pending_limit`,
//! 507 `tenant_storage_limit`, both with `Retry-After`), so nothing stored changes.
//!
//! The counts come from the database at most once per [`USAGE_TTL`] per tenant and node,
//! plus what this node published since: a quota is exact on one node within that second and,
//! across nodes, may be passed by what the others publish within it. Tenants without a quota
//! cost one lookup of their cached policy.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use inbox_api::time::format_utc;
use inbox_api::{ProblemCode, QuotaRefusalView, QuotaRefusalsResponse};
use inbox_core::{EventBody, TenantId, UnixMillis};
use inbox_store::{PublishReceipt, TenantPolicy, TenantUsage};

use crate::AppState;
use crate::error::ApiError;

/// How long a node trusts a tenant's counts read from the database.
pub const USAGE_TTL: Duration = Duration::from_secs(1);
/// Seconds a refused publisher is told to wait: about the time acknowledgements take to show.
const RETRY_AFTER_SECONDS: u64 = 2;
/// Tenants counted at most; past it the cache starts over.
const TENANTS_MAX: usize = 10_000;

/// Refusals kept per tenant for operators.
const RECENT_REFUSALS_MAX: usize = 20;

/// This node's counts of tenants with a quota, and its refusals.
#[derive(Debug, Default)]
pub struct Quotas {
    tenants: Mutex<HashMap<TenantId, (Instant, TenantUsage)>>,
    refusals: Mutex<HashMap<TenantId, QuotaRefusalsResponse>>,
}

impl Quotas {
    /// Refuses a publish of `events` new events of `bytes_each` inline payload bytes when it
    /// would take `tenant_id` past a quota of its `policy`. (A room post counts one event: its members are
    /// known only inside its transaction.)
    pub async fn admit(
        &self,
        state: &AppState,
        policy: &TenantPolicy,
        tenant_id: &TenantId,
        events: u64,
        bytes_each: u64,
    ) -> Result<(), ApiError> {
        if policy.pending_events_max == 0 && policy.stored_bytes_max == 0 {
            return Ok(());
        }
        let usage = self.usage(state, tenant_id).await?;
        let bytes = bytes_each * events;
        let refused = if policy.pending_events_max > 0
            && usage.pending_events + events > policy.pending_events_max
        {
            Some((
                StatusCode::TOO_MANY_REQUESTS,
                ProblemCode::TenantPendingLimit,
                "pending_events",
                format!(
                    "tenant {tenant_id} holds {} events not yet acknowledged and this publish adds {events}; its limit is {} (tenant policy pending_events_max): let its agents acknowledge work, or raise the limit",
                    usage.pending_events, policy.pending_events_max
                ),
            ))
        } else if policy.stored_bytes_max > 0 && usage.stored_bytes + bytes > policy.stored_bytes_max {
            Some((
                StatusCode::INSUFFICIENT_STORAGE,
                ProblemCode::TenantStorageLimit,
                "stored_bytes",
                format!(
                    "tenant {tenant_id}'s unacknowledged events hold {} payload bytes and this publish adds {bytes}; its limit is {} (tenant policy stored_bytes_max): let its agents acknowledge work, send a payload_ref instead of inline data, or raise the limit",
                    usage.stored_bytes, policy.stored_bytes_max
                ),
            ))
        } else {
            None
        };
        let Some((status, code, limit, detail)) = refused else { return Ok(()) };
        let tenant = state.metrics.tenant_label(tenant_id.as_str());
        state.metrics.quota_refusals_total().add([tenant, limit.to_owned()], 1);
        self.remember_refusal(tenant_id, limit, &detail, state.store.now());
        Err(ApiError::new(status, code, detail).retry_after(RETRY_AFTER_SECONDS))
    }

    /// This node's refusals of `tenant_id`'s publishes, for operators.
    pub fn refusals(&self, tenant_id: &TenantId) -> QuotaRefusalsResponse {
        self.refusals.lock().expect("quota refusals").get(tenant_id).cloned().unwrap_or_default()
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

    /// Counts what a publish of `tenant_id` (`bytes_each`: [`inline_bytes`] of its body) just
    /// committed on this node, for a tenant this node counts.
    pub fn published(&self, tenant_id: &TenantId, bytes_each: u64, receipt: &PublishReceipt) {
        let mut tenants = self.tenants.lock().expect("quota counts");
        if let Some((_, usage)) = tenants.get_mut(tenant_id) {
            let fresh = receipt.deliveries.iter().filter(|d| !d.deduplicated).count() as u64;
            usage.pending_events += fresh;
            usage.stored_bytes += bytes_each * fresh;
        }
    }

    /// The tenant's counts: this node's, while fresh; else the database's.
    async fn usage(&self, state: &AppState, tenant_id: &TenantId) -> Result<TenantUsage, ApiError> {
        if let Some((read, usage)) = self.tenants.lock().expect("quota counts").get(tenant_id) {
            if read.elapsed() < USAGE_TTL {
                return Ok(*usage);
            }
        }
        let usage = state.store.inbox().tenant_usage(tenant_id).await?;
        let mut tenants = self.tenants.lock().expect("quota counts");
        if tenants.len() >= TENANTS_MAX {
            tenants.clear();
        }
        tenants.insert(tenant_id.clone(), (Instant::now(), usage));
        Ok(usage)
    }
}

/// The bytes an event's inline payload takes (a reference takes none).
pub fn inline_bytes(body: &EventBody) -> u64 {
    match body {
        EventBody::Json(json) => json.len() as u64,
        _ => 0,
    }
}
