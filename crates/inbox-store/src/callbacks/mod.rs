//! The `callbacks` subsystem: callback registrations and their delivery state. A registration is
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

mod deliveries;
mod queries;
mod registrations;

use std::fmt;

use inbox_core::{IdError, InboxSeq, RecipientId, TenantId, UnixMillis};

use crate::db::DbRow;
use crate::secrets::{Place, SecretBytes};
use crate::signatures::KeyId;
use crate::{SqlStore, StoreError};

/// Longest error text kept on a registration or an attempt.
pub const CALLBACK_ERROR_BYTES_MAX: usize = 255;
/// Longest reason kept for a disabled registration.
pub const CALLBACK_DISABLED_REASON_BYTES_MAX: usize = 512;
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
    /// The hmac-sha256 shared secret deliveries are signed with (stored sealed).
    pub secret: SecretBytes,
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
    pub secret: SecretBytes,
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
    /// The current shared secret, opened from its sealed form.
    pub secret: SecretBytes,
    pub previous: Option<PreviousSecret>,
    pub replay_window_seconds: u32,
    pub max_rate_per_minute: u32,
    /// The newest head a delivery reached the receiver with (or was given up on).
    pub delivered_head_seq: u64,
    pub next_attempt_at: UnixMillis,
    /// Failed attempts in a row for the current head.
    pub failed_attempts: u32,
    /// Failed deliveries in a row across heads since the last success (the backoff's and
    /// the disabling bound's count), and when the first of them ended.
    pub consecutive_failures: u32,
    pub failing_since: Option<UnixMillis>,
    /// Set when the delivery worker gave up on the receiver: nothing is sent until an
    /// operator re-enables it.
    pub disabled: Option<Disabled>,
    pub last_error: Option<String>,
    pub created_at: UnixMillis,
    pub verified_at: Option<UnixMillis>,
}

/// Why and when a registration was disabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disabled {
    pub at: UnixMillis,
    pub reason: String,
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
            .field("consecutive_failures", &self.consecutive_failures)
            .field("disabled", &self.disabled)
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
    /// failure count starts over with the next head. With `disable`, the registration has
    /// failed past the bound and is disabled for that reason.
    Failed {
        error: String,
        next_attempt_at: UnixMillis,
        give_up_head: Option<InboxSeq>,
        disable: Option<String>,
    },
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
    /// `delivered`, `failed`, `abandoned`, `disabled` (failed, and the registration disabled),
    /// `verified` or `verification_failed`.
    pub outcome: String,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub created_at: UnixMillis,
}

/// The callbacks subsystem of one [`SqlStore`]: registrations, their due deliveries and the attempts made.
/// A borrowed view, free to make: `store.callbacks()`.
#[derive(Debug, Clone, Copy)]
pub struct Callbacks<'s> {
    pub(crate) store: &'s SqlStore,
}

impl SqlStore {
    /// Callback registrations, deliveries and attempts, see [`Callbacks`].
    pub fn callbacks(&self) -> Callbacks<'_> {
        Callbacks { store: self }
    }
}

fn truncate(text: &str) -> &str {
    truncate_to(text, CALLBACK_ERROR_BYTES_MAX)
}

fn truncate_to(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A registration read from its row, its secrets opened with the store's keys.
fn registration_from_row(store: &SqlStore, row: &DbRow) -> Result<CallbackRegistration, StoreError> {
    let corrupt = |e: IdError| StoreError::Corrupt(format!("callback_registration: {e}"));
    let tenant_id = row.string("tenant_id")?;
    let registration_id = row.string("registration_id")?;
    let open = |secret_id: &str, sealed: &[u8], sealed_by: Option<String>| {
        let place = Place::callback_secret(&tenant_id, &registration_id, secret_id);
        store.sealer().open(&place, sealed_by.as_deref(), sealed)
    };
    let previous = match (
        row.opt_string("previous_key_id")?,
        row.opt_bytes("previous_secret")?,
        row.opt_i64("previous_retires_at_utc")?,
    ) {
        (Some(key_id), Some(secret), Some(retires_at)) => Some(PreviousSecret {
            secret: open(&key_id, &secret, row.opt_string("previous_secret_sealed_by")?)?,
            key_id: KeyId::new(key_id).map_err(corrupt)?,
            retires_at: UnixMillis(retires_at),
        }),
        _ => None,
    };
    let key_id = row.string("key_id")?;
    let secret = match row.opt_bytes("secret")? {
        Some(sealed) => open(&key_id, &sealed, row.opt_string("secret_sealed_by")?)?,
        None => SecretBytes::default(),
    };
    let small = |col: &str| -> Result<u32, StoreError> {
        u32::try_from(row.i64(col)?).map_err(|_| StoreError::Corrupt(format!("callback_registration.{col}")))
    };
    Ok(CallbackRegistration {
        registration_id: RegistrationId::new(registration_id).map_err(corrupt)?,
        tenant_id: TenantId::new(tenant_id).map_err(corrupt)?,
        recipient_id: RecipientId::new(row.string("recipient_id")?).map_err(corrupt)?,
        callback_url: row.string("callback_url")?,
        state: VerificationState::parse(&row.string("verification_state")?)?,
        auth_mode: row.string("auth_mode")?,
        key_id: KeyId::new(key_id).map_err(corrupt)?,
        secret,
        previous,
        replay_window_seconds: small("replay_window_seconds")?,
        max_rate_per_minute: small("max_rate_per_minute")?,
        delivered_head_seq: row.i64("delivered_head_seq")?.max(0) as u64,
        next_attempt_at: UnixMillis(row.i64("next_attempt_at_utc")?),
        failed_attempts: small("failed_attempts")?,
        consecutive_failures: small("consecutive_failures")?,
        failing_since: row.opt_i64("failing_since_utc")?.map(UnixMillis),
        disabled: match (row.opt_i64("disabled_at_utc")?, row.opt_string("disabled_reason")?) {
            (Some(at), reason) => Some(Disabled { at: UnixMillis(at), reason: reason.unwrap_or_default() }),
            (None, _) => None,
        },
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
