//! Per-tenant trust settings (whether agents must sign their critical calls), and the tenant
//! row lock that serializes a tenant's registrations so their limits hold exactly.

use inbox_core::{TenantId, UnixMillis};

use crate::db::{Arg, DbConnection};
use crate::store::with_retries;
use crate::{SqlStore, StoreError};

/// What a tenant has chosen. A tenant that never chose has the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantPolicy {
    /// Claim, acknowledge, release and heartbeat must carry a valid RFC 9421 signature.
    pub signatures_required: bool,
}

impl SqlStore {
    /// The tenant's policy (the default when it never set one).
    pub async fn tenant_policy(&self, tenant_id: &TenantId) -> Result<TenantPolicy, StoreError> {
        let mut pooled = self.pools().reader().await?;
        let row = pooled
            .conn()
            .fetch_optional(
                "SELECT signatures_required FROM tenant_policy WHERE tenant_id = ?",
                &[Arg::Str(tenant_id.as_str())],
            )
            .await?;
        Ok(match row {
            Some(row) => TenantPolicy { signatures_required: row.i64("signatures_required")? != 0 },
            None => TenantPolicy::default(),
        })
    }

    /// Replaces the tenant's policy.
    pub async fn set_tenant_policy(
        &self,
        tenant_id: &TenantId,
        policy: TenantPolicy,
    ) -> Result<(), StoreError> {
        with_retries!(self, self.set_policy_once(tenant_id, policy))
    }

    async fn set_policy_once(&self, tenant_id: &TenantId, policy: TenantPolicy) -> Result<(), StoreError> {
        let now = self.now();
        let mut tx = self.pools().begin().await?;
        let mut conn = tx.conn();
        lock_tenant(&mut conn, tenant_id, now).await?;
        conn.execute(
            "UPDATE tenant_policy SET signatures_required = ?, updated_at_utc = ? WHERE tenant_id = ?",
            &[
                Arg::I64(i64::from(policy.signatures_required)),
                Arg::I64(now.get()),
                Arg::Str(tenant_id.as_str()),
            ],
        )
        .await?;
        tx.commit().await
    }
}

/// Creates the tenant's policy row if missing and locks it until the transaction ends: the
/// one row every registration of the tenant passes through, so counting and inserting under
/// it cannot race (SQLite's write lock does the same by itself).
pub(crate) async fn lock_tenant(
    conn: &mut DbConnection<'_>,
    tenant_id: &TenantId,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO tenant_policy (tenant_id, signatures_required, updated_at_utc) VALUES (?, 0, ?){}",
        conn.dialect().on_conflict_keep("tenant_id")
    );
    conn.execute(&sql, &[Arg::Str(tenant_id.as_str()), Arg::I64(now.get())]).await?;
    let lock =
        format!("SELECT tenant_id FROM tenant_policy WHERE tenant_id = ?{}", conn.dialect().for_update());
    conn.fetch_optional(&lock, &[Arg::Str(tenant_id.as_str())]).await?;
    Ok(())
}
