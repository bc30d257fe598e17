//! Driving deliveries from the database: which registrations are due, taking one with a
//! compare-and-set, recording how it ended, and the log of attempts.

use inbox_core::{InboxSeq, TenantId, UnixMillis};

use super::{
    CALLBACK_ATTEMPTS_LIST_MAX, CallbackAttempt, Callbacks, DeliveryResult, DueDelivery, RegistrationId,
    attempt_from_row, queries, registration_from_row, truncate,
};
use crate::StoreError;
use crate::db::Arg;

impl Callbacks<'_> {
    /// Active registrations whose recipient's head is past what they were sent, and whose
    /// next attempt is due at `now`, soonest first, at most `limit`.
    pub async fn due_deliveries(self, now: UnixMillis, limit: u32) -> Result<Vec<DueDelivery>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(
                queries::DUE_DELIVERIES,
                &[Arg::I64(now.get()), Arg::I64(i64::from(limit.clamp(1, 1_000)))],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(DueDelivery {
                    registration: registration_from_row(self.store, row)?,
                    head_seq: InboxSeq::new(row.i64("head_seq")?.max(0) as u64)?,
                })
            })
            .collect()
    }

    /// Takes a due registration for one delivery: succeeds for exactly one caller among
    /// nodes that read the same `next_attempt_at`, and holds it until `lease_until` (when a
    /// node that died mid-delivery is presumed gone).
    pub async fn claim_delivery(
        self,
        registration_id: &RegistrationId,
        seen_next_attempt_at: UnixMillis,
        lease_until: UnixMillis,
    ) -> Result<bool, StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                queries::CLAIM_DELIVERY,
                &[
                    Arg::I64(lease_until.get()),
                    Arg::Str(registration_id.as_str()),
                    Arg::I64(seen_next_attempt_at.get()),
                ],
            )
            .await?;
        Ok(done.rows_affected == 1)
    }

    /// Records how a claimed delivery ended.
    pub async fn finish_delivery(
        self,
        registration_id: &RegistrationId,
        result: &DeliveryResult,
    ) -> Result<(), StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        match result {
            DeliveryResult::Delivered { head_seq, next_attempt_at } => {
                let head = head_seq.get() as i64;
                conn.execute(
                    queries::RECORD_DELIVERED,
                    &[
                        Arg::I64(head),
                        Arg::I64(head),
                        Arg::I64(next_attempt_at.get()),
                        Arg::I64(now.get()),
                        Arg::Str(registration_id.as_str()),
                    ],
                )
                .await?;
            }
            DeliveryResult::Failed { error, next_attempt_at, give_up_head: None } => {
                conn.execute(
                    queries::RECORD_FAILED,
                    &[
                        Arg::I64(next_attempt_at.get()),
                        Arg::Str(truncate(error)),
                        Arg::I64(now.get()),
                        Arg::Str(registration_id.as_str()),
                    ],
                )
                .await?;
            }
            DeliveryResult::Failed { error, next_attempt_at, give_up_head: Some(head_seq) } => {
                let head = head_seq.get() as i64;
                conn.execute(
                    queries::RECORD_GIVEN_UP,
                    &[
                        Arg::I64(head),
                        Arg::I64(head),
                        Arg::I64(next_attempt_at.get()),
                        Arg::Str(truncate(error)),
                        Arg::I64(now.get()),
                        Arg::Str(registration_id.as_str()),
                    ],
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Appends an attempt to the delivery log.
    pub async fn record_attempt(self, attempt: &CallbackAttempt) -> Result<(), StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        pooled
            .conn()
            .execute(
                queries::INSERT_ATTEMPT,
                &[
                    Arg::Str(&attempt.delivery_id),
                    Arg::Str(attempt.registration_id.as_str()),
                    Arg::Str(attempt.tenant_id.as_str()),
                    Arg::Str(&attempt.kind),
                    Arg::OptI64(attempt.head_seq.map(|h| h as i64)),
                    Arg::I64(i64::from(attempt.attempt)),
                    Arg::Str(&attempt.outcome),
                    Arg::OptI64(attempt.http_status.map(i64::from)),
                    Arg::OptStr(attempt.error.as_deref().map(truncate)),
                    Arg::I64(attempt.duration_ms as i64),
                    Arg::I64(attempt.created_at.get()),
                ],
            )
            .await?;
        Ok(())
    }

    /// The newest attempts of a registration, newest first, at most `limit`.
    pub async fn attempts(
        self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
        limit: u32,
    ) -> Result<Vec<CallbackAttempt>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(
                queries::ATTEMPTS_OF_REGISTRATION,
                &[
                    Arg::Str(tenant_id.as_str()),
                    Arg::Str(registration_id.as_str()),
                    Arg::I64(i64::from(limit.clamp(1, CALLBACK_ATTEMPTS_LIST_MAX))),
                ],
            )
            .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    /// Deletes up to `limit` log entries older than `cutoff`; returns how many.
    pub async fn delete_attempts_before(self, cutoff: UnixMillis, limit: u32) -> Result<u64, StoreError> {
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        let ids: Vec<String> = conn
            .fetch_all(
                queries::ATTEMPTS_BEFORE,
                &[Arg::I64(cutoff.get()), Arg::I64(i64::from(limit.clamp(1, 1_000)))],
            )
            .await?
            .iter()
            .map(|row| row.string("delivery_id"))
            .collect::<Result<_, _>>()?;
        if ids.is_empty() {
            return Ok(0);
        }
        let args: Vec<Arg> = ids.iter().map(|id| Arg::Str(id)).collect();
        let done = conn.execute(&queries::delete_attempts(ids.len()), &args).await?;
        Ok(done.rows_affected)
    }
}
