//! What every way of publishing shares (a publish, a room post, a hand-off's follow-ups): the
//! fairness key an event carries under the tenant's policy, and what follows a commit on this
//! node (the counters, the head cache, the hints).

use inbox_core::{FairnessKey, RecipientKey, TenantId};
use inbox_store::{PublishReceipt, TenantPolicy};

use crate::caller::Caller;
use crate::node::AppState;

/// The fairness key a publish carries under `policy`: with fair claims the one requested, else
/// `default`; without, none, so the store ranks nothing and pays nothing.
pub(in crate::ops) fn fairness_key(
    policy: &TenantPolicy,
    requested: Option<FairnessKey>,
    default: impl FnOnce() -> FairnessKey,
) -> Option<FairnessKey> {
    policy.fair_claims.then(|| requested.unwrap_or_else(default))
}

/// The caller's subject as a fairness key: what a publish is fair to by default.
pub(in crate::ops) fn subject_key(caller: &Caller) -> FairnessKey {
    FairnessKey::new(caller.subject.as_str()).expect("a recipient id is a valid fairness key")
}

/// Counts a committed publish and hints its recipients' waiters on this node.
pub(in crate::ops) fn record_published(state: &AppState, tenant_id: &TenantId, receipt: &PublishReceipt) {
    let tenant = state.metrics.tenant_label(tenant_id.as_str());
    let fresh = receipt.deliveries.iter().filter(|d| !d.deduplicated).count() as u64;
    state.metrics.events_published_total().add([tenant.clone()], fresh);
    state.metrics.events_deduplicated_total().add([tenant], receipt.deliveries.len() as u64 - fresh);
    for d in receipt.deliveries.iter().filter(|d| !d.deduplicated) {
        let inbox = RecipientKey { tenant_id: tenant_id.clone(), recipient: d.recipient.clone() };
        state.head_cache.advanced(&inbox, d.inbox_seq);
        state.hints.advanced(&inbox, d.inbox_seq);
    }
}
