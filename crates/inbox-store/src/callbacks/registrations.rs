//! Creating, reading, verifying, rotating and deleting callback registrations, with the
//! tenant's registration limits checked under the tenant row lock.

use inbox_core::{RecipientId, TenantId, UnixMillis};

use super::{
    CallbackLimits, CallbackRegistration, Callbacks, NewCallbackRegistration, RegistrationId,
    VerificationState, queries, registration_from_row, truncate,
};
use crate::Field;
use crate::StoreError;
use crate::db::{Arg, DbRow};
use crate::secrets::{Place, seal_for_storing};
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
            return Err(StoreError::invalid(Field::CallbackSecret, "must be 32 to 64 bytes"));
        }
        let id = RegistrationId::new(format!("cbreg_{}", hex::encode(crate::entropy::random_bytes::<12>())))
            .expect("cbreg_ and 24 hex digits make a registration id");
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
                queries::COUNT_OF_RECIPIENT,
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
        let for_tenant =
            count(conn.fetch_optional(queries::COUNT_OF_TENANT, &[Arg::Str(new.tenant_id.as_str())]).await?)?;
        if for_tenant >= limits.per_tenant_max {
            return Err(StoreError::LimitReached {
                what: "callback registration per tenant",
                limit: limits.per_tenant_max,
            });
        }
        let place = Place::callback_secret(new.tenant_id.as_str(), id.as_str(), new.key_id.as_str());
        let (sealed, sealed_by) = seal_for_storing(self.store, &mut conn, &place, &new.secret).await?;
        conn.execute(
            queries::INSERT_REGISTRATION,
            &[
                Arg::Str(id.as_str()),
                Arg::Str(new.tenant_id.as_str()),
                Arg::Str(new.recipient_id.as_str()),
                Arg::Str(&new.callback_url),
                Arg::Str(new.key_id.as_str()),
                Arg::I64(i64::from(new.replay_window_seconds)),
                Arg::I64(i64::from(new.max_rate_per_minute)),
                Arg::I64(now.get()),
                Arg::Bytes(&sealed),
                Arg::Str(&sealed_by),
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
            consecutive_failures: 0,
            failing_since: None,
            disabled: None,
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
                queries::REGISTRATION_BY_ID,
                &[Arg::Str(tenant_id.as_str()), Arg::Str(registration_id.as_str())],
            )
            .await?;
        row.as_ref().map(|row| registration_from_row(self.store, row)).transpose()
    }

    /// The tenant's registrations (of one recipient, when named), oldest first.
    pub async fn registrations(
        self,
        tenant_id: &TenantId,
        recipient_id: Option<&RecipientId>,
    ) -> Result<Vec<CallbackRegistration>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let (sql, args) = match recipient_id {
            Some(recipient_id) => (
                queries::REGISTRATIONS_OF_RECIPIENT,
                vec![Arg::Str(tenant_id.as_str()), Arg::Str(recipient_id.as_str())],
            ),
            None => (queries::REGISTRATIONS_OF_TENANT, vec![Arg::Str(tenant_id.as_str())]),
        };
        let rows = pooled.conn().fetch_all(sql, &args).await?;
        rows.iter().map(|row| registration_from_row(self.store, row)).collect()
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
                queries::DELETE_REGISTRATION,
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
                queries::MARK_VERIFIED,
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
                queries::RECORD_ERROR,
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
            return Err(StoreError::invalid(Field::CallbackSecret, "must be 32 to 64 bytes"));
        }
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        let place = Place::callback_secret(tenant_id.as_str(), registration_id.as_str(), key_id.as_str());
        let (sealed, sealed_by) = seal_for_storing(self.store, &mut conn, &place, secret).await?;
        let done = conn
            .execute(
                queries::ROTATE_SECRET,
                &[
                    Arg::I64(now.plus_ms(overlap_ms).get()),
                    Arg::Str(key_id.as_str()),
                    Arg::Bytes(&sealed),
                    Arg::Str(&sealed_by),
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
            return Err(StoreError::invalid(
                Field::CallbackSecretId,
                "is the current key id; name a new one",
            ));
        }
        Ok(current)
    }
}
