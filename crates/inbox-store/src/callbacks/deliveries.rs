//! Driving deliveries from the database: which registrations are due, taking one with a
//! compare-and-set, recording how it ended, and the log of attempts.

use inbox_core::{InboxSeq, TenantId, UnixMillis};

use super::{
    CALLBACK_ATTEMPTS_LIST_MAX, CALLBACK_DISABLED_REASON_BYTES_MAX, CallbackAttempt, Callbacks,
    DeliveryResult, DueDelivery, RegistrationId, attempt_from_row, queries, registration_from_row, truncate,
    truncate_to,
};
use crate::StoreError;
use crate::db::Arg;

impl Callbacks<'_> {
    /// Active, enabled registrations whose recipient's head is past what they were sent, and
    /// whose next attempt is due at `now`, soonest first (then by id), at most `limit`; with
    /// `after`, those that come after that (next attempt, registration) in the same order.
    pub async fn due_deliveries(
        self,
        now: UnixMillis,
        after: Option<(UnixMillis, &RegistrationId)>,
        limit: u32,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let mut pooled = self.store.pools().reader().await?;
        let limit = Arg::I64(i64::from(limit.clamp(1, 1_000)));
        let rows = match after {
            None => pooled.conn().fetch_all(queries::DUE_DELIVERIES, &[Arg::I64(now.get()), limit]).await?,
            Some((next_attempt_at, registration_id)) => {
                let args = [
                    Arg::I64(now.get()),
                    Arg::I64(next_attempt_at.get()),
                    Arg::I64(next_attempt_at.get()),
                    Arg::Str(registration_id.as_str()),
                    limit,
                ];
                pooled.conn().fetch_all(queries::DUE_DELIVERIES_AFTER, &args).await?
            }
        };
        rows.iter()
            .map(|row| {
                Ok(DueDelivery {
                    registration: registration_from_row(self.store, row)?,
                    head_seq: InboxSeq::new(row.i64("head_seq")?.max(0) as u64)
                        .map_err(|e| StoreError::Corrupt(format!("callback_delivery: {e}")))?,
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

    /// Records how a claimed delivery ended, if its lease (the `lease_until` it was claimed
    /// with) still holds; whether it did. A delivery that outlived its lease, or whose
    /// registration an operator re-enabled meanwhile, records nothing.
    pub async fn finish_delivery(
        self,
        registration_id: &RegistrationId,
        lease_until: UnixMillis,
        result: &DeliveryResult,
    ) -> Result<bool, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let mut conn = pooled.conn();
        let id = Arg::Str(registration_id.as_str());
        let lease = Arg::I64(lease_until.get());
        let done = match result {
            DeliveryResult::Delivered { head_seq, next_attempt_at } => {
                let head = head_seq.get() as i64;
                conn.execute(
                    queries::RECORD_DELIVERED,
                    &[
                        Arg::I64(head),
                        Arg::I64(head),
                        Arg::I64(next_attempt_at.get()),
                        Arg::I64(now.get()),
                        id,
                        lease,
                    ],
                )
                .await?
            }
            DeliveryResult::Failed { error, next_attempt_at, give_up_head, disable } => {
                let disabled_at = Arg::OptI64(disable.as_ref().map(|_| now.get()));
                let reason = Arg::OptStr(
                    disable.as_deref().map(|r| truncate_to(r, CALLBACK_DISABLED_REASON_BYTES_MAX)),
                );
                let failed = [
                    Arg::I64(next_attempt_at.get()),
                    Arg::Str(truncate(error)),
                    Arg::I64(now.get()),
                    disabled_at,
                    reason,
                    Arg::I64(now.get()),
                    id,
                    lease,
                ];
                match give_up_head {
                    None => conn.execute(queries::RECORD_FAILED, &failed).await?,
                    Some(head_seq) => {
                        let head = head_seq.get() as i64;
                        let mut args = vec![Arg::I64(head), Arg::I64(head)];
                        args.extend(failed);
                        conn.execute(queries::RECORD_GIVEN_UP, &args).await?
                    }
                }
            }
        };
        Ok(done.rows_affected == 1)
    }

    /// Re-enables a disabled registration (an operator's decision): its failure counts start
    /// over and its recipient's current head is delivered at once. Whether it was disabled.
    pub async fn enable(
        self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
    ) -> Result<bool, StoreError> {
        let now = self.store.now();
        let mut pooled = self.store.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                queries::ENABLE_REGISTRATION,
                &[Arg::I64(now.get()), Arg::Str(tenant_id.as_str()), Arg::Str(registration_id.as_str())],
            )
            .await?;
        Ok(done.rows_affected == 1)
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
