//! Webhook callback registrations and their delivery state. A registration is
//! `pending_verification` until its receiver answers a challenge, then `active`. Deliveries
//! are driven by the database, not by memory, so any node may send them and a restart loses
//! nothing: a registration is due when its recipient's `inbox_head` is past the head last
//! delivered and its `next_attempt_at` has come. A node takes a due registration with one
//! conditional UPDATE on `next_attempt_at` (compare-and-set), so of several nodes exactly
//! one sends; a node that dies mid-delivery leaves a lease that simply runs out.
//!
//! Consecutive publishes coalesce: a delivery always carries the newest head, so a receiver
//! gets at most one hint per rate interval however busy the inbox is. A failing callback
//! never touches the inbox: agents still recover by polling.

use std::fmt;

use inbox_core::{IdError, InboxSeq, RecipientId, TenantId, UnixMillis};

use crate::agent_keys::KeyId;
use crate::db::{Arg, DbRow};
use crate::store::with_retries;
use crate::tenant_policy::lock_tenant;
use crate::{SqlStore, StoreError};

/// Longest error text kept on a registration or an attempt.
pub const CALLBACK_ERROR_BYTES_MAX: usize = 255;
/// Attempts one listing returns at most.
pub const CALLBACK_ATTEMPTS_LIST_MAX: u32 = 200;

/// Defined by the core's id macro; re-exported where the store always had it.
pub use inbox_core::RegistrationId;

/// Where a registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerificationState {
    /// Registered, but the receiver has not yet proven it holds the secret: nothing but
    /// challenges is sent.
    PendingVerification,
    /// Verified: hints are delivered.
    Active,
}

impl VerificationState {
    pub fn as_str(self) -> &'static str {
        match self {
            VerificationState::PendingVerification => "pending_verification",
            VerificationState::Active => "active",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "pending_verification" => Ok(VerificationState::PendingVerification),
            "active" => Ok(VerificationState::Active),
            other => Err(StoreError::Corrupt(format!("callback_registration state {other:?}"))),
        }
    }
}

/// Caps on registrations, counted in every state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackLimits {
    pub per_recipient_max: u64,
    pub per_tenant_max: u64,
}

/// A registration to create.
#[derive(Clone)]
pub struct NewCallbackRegistration {
    pub tenant_id: TenantId,
    pub recipient_id: RecipientId,
    /// The canonical URL, already checked against the SSRF rules.
    pub callback_url: String,
    pub key_id: KeyId,
    /// The hmac-sha256 shared secret deliveries are signed with.
    pub secret: Vec<u8>,
    pub max_rate_per_minute: u32,
    pub replay_window_seconds: u32,
}

impl fmt::Debug for NewCallbackRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewCallbackRegistration")
            .field("tenant_id", &self.tenant_id)
            .field("recipient_id", &self.recipient_id)
            .field("callback_url", &self.callback_url)
            .finish_non_exhaustive()
    }
}

/// A secret still inside its rotation overlap.
#[derive(Clone, PartialEq, Eq)]
pub struct PreviousSecret {
    pub key_id: KeyId,
    pub secret: Vec<u8>,
    pub retires_at: UnixMillis,
}

impl fmt::Debug for PreviousSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreviousSecret")
            .field("key_id", &self.key_id)
            .field("retires_at", &self.retires_at)
            .finish_non_exhaustive()
    }
}

/// A stored registration. `Debug` hides the secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct CallbackRegistration {
    pub registration_id: RegistrationId,
    pub tenant_id: TenantId,
    pub recipient_id: RecipientId,
    pub callback_url: String,
    pub state: VerificationState,
    pub auth_mode: String,
    pub key_id: KeyId,
    pub secret: Vec<u8>,
    pub previous: Option<PreviousSecret>,
    pub replay_window_seconds: u32,
    pub max_rate_per_minute: u32,
    /// The newest head a delivery reached the receiver with (or was given up on).
    pub delivered_head_seq: u64,
    pub next_attempt_at: UnixMillis,
    /// Failed attempts in a row for the current head.
    pub failed_attempts: u32,
    pub last_error: Option<String>,
    pub created_at: UnixMillis,
    pub verified_at: Option<UnixMillis>,
}

impl CallbackRegistration {
    /// The secrets a delivery is signed with at `now`, current first.
    pub fn signing_secrets(&self, now: UnixMillis) -> Vec<(&KeyId, &[u8])> {
        let mut secrets = vec![(&self.key_id, self.secret.as_slice())];
        if let Some(previous) = self.previous.as_ref().filter(|p| p.retires_at > now) {
            secrets.push((&previous.key_id, previous.secret.as_slice()));
        }
        secrets
    }
}

impl fmt::Debug for CallbackRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackRegistration")
            .field("registration_id", &self.registration_id)
            .field("tenant_id", &self.tenant_id)
            .field("recipient_id", &self.recipient_id)
            .field("callback_url", &self.callback_url)
            .field("state", &self.state)
            .field("key_id", &self.key_id)
            .field("delivered_head_seq", &self.delivered_head_seq)
            .field("failed_attempts", &self.failed_attempts)
            .finish_non_exhaustive()
    }
}

/// An active registration whose recipient's head is past what was delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDelivery {
    pub registration: CallbackRegistration,
    pub head_seq: InboxSeq,
}

/// How one delivery attempt ended, to record on its registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryResult {
    /// The receiver answered 2xx: `head_seq` is delivered; the next delivery waits until
    /// `next_attempt_at` (the rate limit).
    Delivered { head_seq: InboxSeq, next_attempt_at: UnixMillis },
    /// The attempt failed; retry at `next_attempt_at`. With `give_up_head`, the attempts for
    /// this head are exhausted: it counts as handled (the agent recovers by polling) and the
    /// failure count starts over with the next head.
    Failed { error: String, next_attempt_at: UnixMillis, give_up_head: Option<InboxSeq> },
}

/// One attempt in the delivery log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackAttempt {
    pub delivery_id: String,
    pub registration_id: RegistrationId,
    pub tenant_id: TenantId,
    /// `challenge` or `hint`.
    pub kind: String,
    pub head_seq: Option<u64>,
    /// 1 for the first attempt at a head (or a challenge), counting up while it fails.
    pub attempt: u32,
    /// `delivered`, `failed`, `abandoned`, `verified` or `verification_failed`.
    pub outcome: String,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub created_at: UnixMillis,
}

const REGISTRATION_COLUMNS: &str = "r.registration_id, r.tenant_id, r.recipient_id, r.callback_url, \
    r.verification_state, r.auth_mode, r.key_id, r.secret, r.previous_key_id, r.previous_secret, \
    r.previous_retires_at_utc, r.replay_window_seconds, r.max_rate_per_minute, r.delivered_head_seq, \
    r.next_attempt_at_utc, r.failed_attempts, r.last_error, r.created_at_utc, r.verified_at_utc";

const ATTEMPT_COLUMNS: &str = "delivery_id, registration_id, tenant_id, kind, head_seq, attempt, outcome, \
    http_status, error, duration_ms, created_at_utc";

impl SqlStore {
    /// Creates a `pending_verification` registration with a fresh id, within `limits`
    /// ([`StoreError::LimitReached`] otherwise). The tenant row is locked while counting, so
    /// concurrent registrations cannot overshoot.
    pub async fn create_callback_registration(
        &self,
        new: &NewCallbackRegistration,
        limits: CallbackLimits,
    ) -> Result<CallbackRegistration, StoreError> {
        if new.secret.len() < 32 || new.secret.len() > 64 {
            return Err(StoreError::invalid("secret", "must be 32 to 64 bytes"));
        }
        let id = RegistrationId::new(format!("cbreg_{}", hex::encode(crate::entropy::random_bytes::<12>())))?;
        with_retries!(self, self.create_registration_once(&id, new, limits))
    }

    async fn create_registration_once(
        &self,
        id: &RegistrationId,
        new: &NewCallbackRegistration,
        limits: CallbackLimits,
    ) -> Result<CallbackRegistration, StoreError> {
        let now = self.now();
        let mut tx = self.pools().begin().await?;
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
    pub async fn callback_registration(
        &self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
    ) -> Result<Option<CallbackRegistration>, StoreError> {
        let mut pooled = self.pools().reader().await?;
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
    pub async fn callback_registrations(
        &self,
        tenant_id: &TenantId,
        recipient_id: Option<&RecipientId>,
    ) -> Result<Vec<CallbackRegistration>, StoreError> {
        let mut pooled = self.pools().reader().await?;
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
    pub async fn delete_callback_registration(
        &self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
    ) -> Result<bool, StoreError> {
        let mut pooled = self.pools().writer().await?;
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
    pub async fn mark_callback_verified(
        &self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        let mut pooled = self.pools().writer().await?;
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
    pub async fn record_callback_error(
        &self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
        error: &str,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let mut pooled = self.pools().writer().await?;
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
    pub async fn rotate_callback_secret(
        &self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
        key_id: &KeyId,
        secret: &[u8],
        overlap_ms: u64,
    ) -> Result<Option<CallbackRegistration>, StoreError> {
        if secret.len() < 32 || secret.len() > 64 {
            return Err(StoreError::invalid("secret", "must be 32 to 64 bytes"));
        }
        let now = self.now();
        let mut pooled = self.pools().writer().await?;
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
        let current = self.callback_registration(tenant_id, registration_id).await?;
        if done.rows_affected == 0 && current.as_ref().is_some_and(|r| &r.key_id == key_id) {
            return Err(StoreError::invalid("secret_id", "is the current key id; name a new one"));
        }
        Ok(current)
    }

    /// Active registrations whose recipient's head is past what they were sent, and whose
    /// next attempt is due at `now`, soonest first, at most `limit`.
    pub async fn due_callback_deliveries(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let mut pooled = self.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(
                &format!(
                    "SELECT {REGISTRATION_COLUMNS}, h.head_seq FROM callback_registration r \
                     JOIN inbox_head h ON h.tenant_id = r.tenant_id AND h.recipient_kind = 'agent' \
                     AND h.recipient_id = r.recipient_id \
                     WHERE r.verification_state = 'active' AND r.next_attempt_at_utc <= ? \
                     AND h.head_seq > r.delivered_head_seq \
                     ORDER BY r.next_attempt_at_utc LIMIT ?"
                ),
                &[Arg::I64(now.get()), Arg::I64(i64::from(limit.clamp(1, 1_000)))],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(DueDelivery {
                    registration: registration_from_row(row)?,
                    head_seq: InboxSeq::new(row.i64("head_seq")?.max(0) as u64)?,
                })
            })
            .collect()
    }

    /// Takes a due registration for one delivery: succeeds for exactly one caller among
    /// nodes that read the same `next_attempt_at`, and holds it until `lease_until` (when a
    /// node that died mid-delivery is presumed gone).
    pub async fn claim_callback_delivery(
        &self,
        registration_id: &RegistrationId,
        seen_next_attempt_at: UnixMillis,
        lease_until: UnixMillis,
    ) -> Result<bool, StoreError> {
        let mut pooled = self.pools().writer().await?;
        let done = pooled
            .conn()
            .execute(
                "UPDATE callback_registration SET next_attempt_at_utc = ? \
                 WHERE registration_id = ? AND next_attempt_at_utc = ? AND verification_state = 'active'",
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
    pub async fn finish_callback_delivery(
        &self,
        registration_id: &RegistrationId,
        result: &DeliveryResult,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let mut pooled = self.pools().writer().await?;
        let mut conn = pooled.conn();
        match result {
            DeliveryResult::Delivered { head_seq, next_attempt_at } => {
                let head = head_seq.get() as i64;
                conn.execute(
                    "UPDATE callback_registration SET delivered_head_seq = CASE WHEN delivered_head_seq < ? \
                     THEN ? ELSE delivered_head_seq END, next_attempt_at_utc = ?, failed_attempts = 0, \
                     last_error = NULL, updated_at_utc = ? WHERE registration_id = ?",
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
                    "UPDATE callback_registration SET failed_attempts = failed_attempts + 1, \
                     next_attempt_at_utc = ?, last_error = ?, updated_at_utc = ? WHERE registration_id = ?",
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
                    "UPDATE callback_registration SET delivered_head_seq = CASE WHEN delivered_head_seq < ? \
                     THEN ? ELSE delivered_head_seq END, failed_attempts = 0, next_attempt_at_utc = ?, \
                     last_error = ?, updated_at_utc = ? WHERE registration_id = ?",
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
    pub async fn record_callback_attempt(&self, attempt: &CallbackAttempt) -> Result<(), StoreError> {
        let mut pooled = self.pools().writer().await?;
        pooled
            .conn()
            .execute(
                &format!("INSERT INTO callback_delivery ({ATTEMPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
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
    pub async fn callback_attempts(
        &self,
        tenant_id: &TenantId,
        registration_id: &RegistrationId,
        limit: u32,
    ) -> Result<Vec<CallbackAttempt>, StoreError> {
        let mut pooled = self.pools().reader().await?;
        let rows = pooled
            .conn()
            .fetch_all(
                &format!(
                    "SELECT {ATTEMPT_COLUMNS} FROM callback_delivery WHERE tenant_id = ? AND registration_id = ? \
                     ORDER BY created_at_utc DESC, delivery_id DESC LIMIT ?"
                ),
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
    pub async fn delete_callback_attempts_before(
        &self,
        cutoff: UnixMillis,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut pooled = self.pools().writer().await?;
        let mut conn = pooled.conn();
        let ids: Vec<String> = conn
            .fetch_all(
                "SELECT delivery_id FROM callback_delivery WHERE created_at_utc < ? LIMIT ?",
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
        let done = conn
            .execute(
                &format!(
                    "DELETE FROM callback_delivery WHERE delivery_id IN ({})",
                    crate::dialect::placeholders(ids.len())
                ),
                &args,
            )
            .await?;
        Ok(done.rows_affected)
    }
}

fn truncate(text: &str) -> &str {
    if text.len() <= CALLBACK_ERROR_BYTES_MAX {
        return text;
    }
    let mut end = CALLBACK_ERROR_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn registration_from_row(row: &DbRow) -> Result<CallbackRegistration, StoreError> {
    let corrupt = |e: IdError| StoreError::Corrupt(format!("callback_registration: {e}"));
    let previous = match (
        row.opt_string("previous_key_id")?,
        row.opt_bytes("previous_secret")?,
        row.opt_i64("previous_retires_at_utc")?,
    ) {
        (Some(key_id), Some(secret), Some(retires_at)) => Some(PreviousSecret {
            key_id: KeyId::new(key_id).map_err(corrupt)?,
            secret,
            retires_at: UnixMillis(retires_at),
        }),
        _ => None,
    };
    let small = |col: &str| -> Result<u32, StoreError> {
        u32::try_from(row.i64(col)?).map_err(|_| StoreError::Corrupt(format!("callback_registration.{col}")))
    };
    Ok(CallbackRegistration {
        registration_id: RegistrationId::new(row.string("registration_id")?).map_err(corrupt)?,
        tenant_id: TenantId::new(row.string("tenant_id")?).map_err(corrupt)?,
        recipient_id: RecipientId::new(row.string("recipient_id")?).map_err(corrupt)?,
        callback_url: row.string("callback_url")?,
        state: VerificationState::parse(&row.string("verification_state")?)?,
        auth_mode: row.string("auth_mode")?,
        key_id: KeyId::new(row.string("key_id")?).map_err(corrupt)?,
        secret: row.opt_bytes("secret")?.unwrap_or_default(),
        previous,
        replay_window_seconds: small("replay_window_seconds")?,
        max_rate_per_minute: small("max_rate_per_minute")?,
        delivered_head_seq: row.i64("delivered_head_seq")?.max(0) as u64,
        next_attempt_at: UnixMillis(row.i64("next_attempt_at_utc")?),
        failed_attempts: small("failed_attempts")?,
        last_error: row.opt_string("last_error")?,
        created_at: UnixMillis(row.i64("created_at_utc")?),
        verified_at: row.opt_i64("verified_at_utc")?.map(UnixMillis),
    })
}

fn attempt_from_row(row: &DbRow) -> Result<CallbackAttempt, StoreError> {
    let corrupt = |e: IdError| StoreError::Corrupt(format!("callback_delivery: {e}"));
    Ok(CallbackAttempt {
        delivery_id: row.string("delivery_id")?,
        registration_id: RegistrationId::new(row.string("registration_id")?).map_err(corrupt)?,
        tenant_id: TenantId::new(row.string("tenant_id")?).map_err(corrupt)?,
        kind: row.string("kind")?,
        head_seq: row.opt_i64("head_seq")?.map(|h| h.max(0) as u64),
        attempt: row.i64("attempt")?.clamp(0, i64::from(u32::MAX)) as u32,
        outcome: row.string("outcome")?,
        http_status: row.opt_i64("http_status")?.and_then(|s| u16::try_from(s).ok()),
        error: row.opt_string("error")?,
        duration_ms: row.i64("duration_ms")?.max(0) as u64,
        created_at: UnixMillis(row.i64("created_at_utc")?),
    })
}
