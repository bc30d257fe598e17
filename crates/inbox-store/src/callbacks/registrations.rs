//! Creating, reading, verifying, rotating and deleting callback registrations, with the
//! tenant's registration limits checked under the tenant row lock.

use inbox_core::{RecipientId, TenantId, UnixMillis};

use super::{
    CallbackLimits, CallbackRegistration, Callbacks, NewCallbackRegistration, REGISTRATION_COLUMNS,
    RegistrationId, VerificationState, registration_from_row, truncate,
};
use crate::StoreError;
use crate::db::{Arg, DbRow};
use crate::signatures::{KeyId, lock_tenant};
use crate::store::with_retries;

impl Callbacks<'_> {
    /// Creates a `pending_verification` registration with a fresh id, within `limits`
    /// ([`StoreError::LimitReached`] otherwise). The tenant row is locked while counting, so
    /// concurrent registrations cannot overshoot.
    pub async fn create_registration(
        self,
        new: &NewCallbackRegistration,
        limits: CallbackLimits,
    ) -> Result<CallbackRegistration, StoreError> {
        if new.secret.len() < 32 || new.secret.len() > 64 {
            return Err(StoreError::invalid("secret", "must be 32 to 64 bytes"));
        }
        let id = RegistrationId::new(format!("cbreg_{}", hex::encode(crate::entropy::random_bytes::<12>())))?;
        with_retries!(self.store, self.create_registration_once(&id, new, limits))
    }

    async fn create_registration_once(
        self,
        id: &RegistrationId,
        new: &NewCallbackRegistration,
        limits: CallbackLimits,
    ) -> Result<CallbackRegistration, StoreError> {
        let now = self.store.now();
        let mut tx = self.store.pools().begin().await?;
        let mut conn = tx.conn();
        lock_tenant(&mut conn, &new.tenant_id, now).await?;
        let count = |row: Option<DbRow>| row.map(|r| r.i64("n")).transpose().map(|n| n.unwrap_or(0) as u64);
        let for_recipient = count(
            conn.fetch_optional(
                "SELECT COUNT(*) AS n FROM callback_registration WHERE tenant_id = ? AND recipient_id = ?",
                &[Arg::Str(new.tenant_id.as_str()), Arg::Str(new.recipient_id.as_str())],
            )
            .await?,
        )?;
        if for_recipient >= limits.per_recipient_max {
            return Err(StoreError::LimitReached {
                what: "callback registration per recipient",
                limit: limits.per_recipient_max,
            });
        }
        let for_tenant = count(
            conn.fetch_optional(
                "SELECT COUNT(*) AS n FROM callback_registration WHERE tenant_id = ?",
                &[Arg::Str(new.tenant_id.as_str())],
            )
            .await?,
        )?;
        if for_tenant >= limits.per_tenant_max {
            return Err(StoreError::LimitReached {
                what: "callback registration per tenant",
                limit: limits.per_tenant_max,
            });
        }
        conn.execute(
            "INSERT INTO callback_registration (registration_id, tenant_id, recipient_id, callback_url, \
             verification_state, auth_mode, key_id, secret_hash, public_key, replay_window_seconds, \
             max_rate_per_minute, created_at_utc, rotates_after_utc, secret, delivered_head_seq, \
             next_attempt_at_utc, failed_attempts, updated_at_utc) \
             VALUES (?, ?, ?, ?, 'pending_verification', 'hmac-sha256', ?, NULL, NULL, ?, ?, ?, NULL, ?, 0, 0, 0, ?)",
            &[
                Arg::Str(id.as_str()),
                Arg::Str(new.tenant_id.as_str()),
                Arg::Str(new.recipient_id.as_str()),
                Arg::Str(&new.callback_url),
                Arg::Str(new.key_id.as_str()),
                Arg::I64(i64::from(new.replay_window_seconds)),
                Arg::I64(i64::from(new.max_rate_per_minute)),
                Arg::I64(now.get()),
                Arg::Bytes(&new.secret),
                Arg::I64(now.get()),
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(CallbackRegistration {
            registration_id: id.clone(),
            tenant_id: new.tenant_id.clone(),
            recipient_id: new.recipient_id.clone(),
            callback_url: new.callback_url.clone(),
            state: VerificationState::PendingVerification,
            auth_mode: "hmac-sha256".to_owned(),
            key_id: new.key_id.clone(),
            secret: new.secret.clone(),
            previous: None,
            replay_window_seconds: new.replay_window_seconds,
            max_rate_per_minute: new.max_rate_per_minute,
            delivered_head_seq: 0,
            next_attempt_at: UnixMillis(0),
            failed_attempts: 0,
            last_error: None,
            created_at: now,
            verified_at: None,
        })
    }

    /// One registration of the tenant.
    pub async fn registration(
        self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
    ) -> Result<Option<CallbackRegistration>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let row = pooled
            .conn()
            .fetch_optional(
                &format!(
                    "SELECT {REGISTRATION_COLUMNS} FROM callback_registration r \
                     WHERE r.tenant_id = ? AND r.registration_id = ?"
                ),
                &[Arg::Str(tenant_id.as_str()), Arg::Str(registration_id.as_str())],
            )
            .await?;
        row.as_ref().map(registration_from_row).transpose()
    }

    /// The tenant's registrations (of one recipient, when named), oldest first.
    pub async fn registrations(
        self,
        tenant_id: &TenantId,
        recipient_id: Option<&RecipientId>,
    ) -> Result<Vec<CallbackRegistration>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let mut sql =
            format!("SELECT {REGISTRATION_COLUMNS} FROM callback_registration r WHERE r.tenant_id = ?");
        let mut args = vec![Arg::Str(tenant_id.as_str())];
        if let Some(recipient_id) = recipient_id {
            sql.push_str(" AND r.recipient_id = ?");
            args.push(Arg::Str(recipient_id.as_str()));
        }
        sql.push_str(" ORDER BY r.created_at_utc, r.registration_id");
        let rows = pooled.conn().fetch_all(&sql, &args).await?;
        rows.iter().map(registration_from_row).collect()
    }

    /// Deletes a registration; its delivery log stays until retention. Whether it existed.
    pub async fn delete_registration(
        self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
    ) -> Result<bool, StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                "DELETE FROM callback_registration WHERE tenant_id = ? AND registration_id = ?",
                &[Arg::Str(tenant_id.as_str()), Arg::Str(registration_id.as_str())],
            )
            .await?;
        Ok(done.rows_affected > 0)
    }

    /// Marks a registration verified: it becomes `active` and due at once, so the receiver
    /// hears about work already waiting.
    pub async fn mark_verified(
        self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
    ) -> Result<bool, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                "UPDATE callback_registration SET verification_state = 'active', verified_at_utc = ?, \
                 failed_attempts = 0, last_error = NULL, next_attempt_at_utc = 0, updated_at_utc = ? \
                 WHERE tenant_id = ? AND registration_id = ?",
                &[
                    Arg::I64(now.get()),
                    Arg::I64(now.get()),
                    Arg::Str(tenant_id.as_str()),
                    Arg::Str(registration_id.as_str()),
                ],
            )
            .await?;
        Ok(done.rows_affected > 0)
    }

    /// Records why a challenge failed; the registration stays as it was.
    pub async fn record_error(
        self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
        error: &str,
    ) -> Result<(), StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        pooled
            .conn()
            .execute(
                "UPDATE callback_registration SET last_error = ?, updated_at_utc = ? \
                 WHERE tenant_id = ? AND registration_id = ?",
                &[
                    Arg::Str(truncate(error)),
                    Arg::I64(now.get()),
                    Arg::Str(tenant_id.as_str()),
                    Arg::Str(registration_id.as_str()),
                ],
            )
            .await?;
        Ok(())
    }

    /// Replaces the secret; the old one keeps signing (as a second signature) for
    /// `overlap_ms`, so a receiver can switch over without missing a delivery.
    pub async fn rotate_secret(
        self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
        key_id: &KeyId,
        secret: &[u8],
        overlap_ms: u64,
    ) -> Result<Option<CallbackRegistration>, StoreError> {
        if secret.len() < 32 || secret.len() > 64 {
            return Err(StoreError::invalid("secret", "must be 32 to 64 bytes"));
        }
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                "UPDATE callback_registration SET previous_key_id = key_id, previous_secret = secret, \
                 previous_retires_at_utc = ?, key_id = ?, secret = ?, updated_at_utc = ? \
                 WHERE tenant_id = ? AND registration_id = ? AND key_id <> ?",
                &[
                    Arg::I64(now.plus_ms(overlap_ms).get()),
                    Arg::Str(key_id.as_str()),
                    Arg::Bytes(secret),
                    Arg::I64(now.get()),
                    Arg::Str(tenant_id.as_str()),
                    Arg::Str(registration_id.as_str()),
                    Arg::Str(key_id.as_str()),
                ],
            )
            .await?;
        drop(pooled);
        let current = self.registration(tenant_id, registration_id).await?;
        if done.rows_affected == 0 && current.as_ref().is_some_and(|r| &r.key_id == key_id) {
            return Err(StoreError::invalid("secret_id", "is the current key id; name a new one"));
        }
        Ok(current)
    }
}
