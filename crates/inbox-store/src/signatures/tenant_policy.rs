//! Per-tenant settings (whether agents must sign their critical calls, whether each agent may
//! have only one active session, whether claims are fair across sources, the tenant's quotas), and the tenant row lock that serializes a tenant's
//! registrations so their limits hold exactly.

use inbox_core::{TenantId, UnixMillis};

use super::{Signatures, queries};
use crate::StoreError;
use crate::db::{Arg, DbConnection, DbRow};
use crate::store::with_retries;

/// What a tenant has chosen. A tenant that never chose has the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantPolicy {
    /// Claim, acknowledge, release and heartbeat must carry a valid RFC 9421 signature.
    pub signatures_required: bool,
    /// Seed 001's concurrency policy: an agent's newest session supersedes its earlier ones,
    /// and only that session may take new work (see `sessions.rs`).
    pub single_active_session: bool,
    /// Fair claims (issue 31, `inbox/fairness.rs`): within one priority, claims interleave the
    /// fairness keys of the inbox's events, quiet keys first, instead of sequence order.
    pub fair_claims: bool,
    /// Quotas (0: none): the tenant's events not yet acknowledged or parked, and the inline
    /// payload bytes they hold. The server refuses publishes past them (`quotas.rs`).
    pub pending_events_max: u64,
    pub stored_bytes_max: u64,
}

impl TenantPolicy {
    /// Whether either quota is set.
    pub fn has_quota(&self) -> bool {
        self.pending_events_max > 0 || self.stored_bytes_max > 0
    }
}

/// A change to a tenant's policy: `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantPolicyChange {
    pub signatures_required: Option<bool>,
    pub single_active_session: Option<bool>,
    pub fair_claims: Option<bool>,
    pub pending_events_max: Option<u64>,
    pub stored_bytes_max: Option<u64>,
}

impl Signatures<'_> {
    /// The tenant's policy (the default when it never set one).
    pub async fn tenant_policy(self, tenant_id: &TenantId) -> Result<TenantPolicy, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let row =
            pooled.conn().fetch_optional(queries::POLICY_OF_TENANT, &[Arg::Str(tenant_id.as_str())]).await?;
        row.as_ref().map_or(Ok(TenantPolicy::default()), policy_from_row)
    }

    /// Replaces the tenant's policy.
    pub async fn set_tenant_policy(
        self,
        tenant_id: &TenantId,
        policy: TenantPolicy,
    ) -> Result<(), StoreError> {
        let change = TenantPolicyChange {
            signatures_required: Some(policy.signatures_required),
            single_active_session: Some(policy.single_active_session),
            fair_claims: Some(policy.fair_claims),
            pending_events_max: Some(policy.pending_events_max),
            stored_bytes_max: Some(policy.stored_bytes_max),
        };
        self.change_tenant_policy(tenant_id, change).await.map(drop)
    }

    /// Changes the settings `change` names and keeps the others, under the tenant's row lock so
    /// two operators changing different settings at once both take effect; returns the result.
    pub async fn change_tenant_policy(
        self,
        tenant_id: &TenantId,
        change: TenantPolicyChange,
    ) -> Result<TenantPolicy, StoreError> {
        with_retries!(self.store, self.change_policy_once(tenant_id, change))
    }

    async fn change_policy_once(
        self,
        tenant_id: &TenantId,
        change: TenantPolicyChange,
    ) -> Result<TenantPolicy, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        lock_tenant(&mut conn, tenant_id, now).await?;
        let current = conn
            .fetch_optional(queries::POLICY_OF_TENANT, &[Arg::Str(tenant_id.as_str())])
            .await?
            .as_ref()
            .map_or(Ok(TenantPolicy::default()), policy_from_row)?;
        let policy = TenantPolicy {
            signatures_required: change.signatures_required.unwrap_or(current.signatures_required),
            single_active_session: change.single_active_session.unwrap_or(current.single_active_session),
            fair_claims: change.fair_claims.unwrap_or(current.fair_claims),
            pending_events_max: change.pending_events_max.unwrap_or(current.pending_events_max),
            stored_bytes_max: change.stored_bytes_max.unwrap_or(current.stored_bytes_max),
        };
        conn.execute(
            queries::UPDATE_POLICY,
            &[
                Arg::I64(i64::from(policy.signatures_required)),
                Arg::I64(i64::from(policy.single_active_session)),
                Arg::I64(i64::from(policy.fair_claims)),
                Arg::I64(i64::try_from(policy.pending_events_max).unwrap_or(i64::MAX)),
                Arg::I64(i64::try_from(policy.stored_bytes_max).unwrap_or(i64::MAX)),
                Arg::I64(now.get()),
                Arg::Str(tenant_id.as_str()),
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(policy)
    }
}

fn policy_from_row(row: &DbRow) -> Result<TenantPolicy, StoreError> {
    Ok(TenantPolicy {
        signatures_required: row.i64("signatures_required")? != 0,
        single_active_session: row.i64("single_active_session")? != 0,
        fair_claims: row.i64("fair_claims")? != 0,
        pending_events_max: u64::try_from(row.i64("pending_events_max")?).unwrap_or(0),
        stored_bytes_max: u64::try_from(row.i64("stored_bytes_max")?).unwrap_or(0),
    })
}

/// Creates the tenant's policy row if missing and locks it until the transaction ends: the
/// one row every registration of the tenant passes through, so counting and inserting under
/// it cannot race (SQLite's write lock does the same by itself).
pub(crate) async fn lock_tenant(
    conn: &mut DbConnection<'_>,
    tenant_id: &TenantId,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let dialect = conn.dialect();
    conn.execute(
        queries::ENSURE_TENANT_ROW.text(dialect),
        &[Arg::Str(tenant_id.as_str()), Arg::I64(now.get())],
    )
    .await?;
    conn.fetch_optional(queries::LOCK_TENANT_ROW.text(dialect), &[Arg::Str(tenant_id.as_str())]).await?;
    Ok(())
}
