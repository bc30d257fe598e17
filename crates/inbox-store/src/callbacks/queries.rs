//! Every SQL statement of the `callbacks` subsystem, by name: registrations (counted under the
//! tenant lock), the delivery cursor and its compare-and-set, and the attempt log.

use crate::dialect::placeholders;

/// Columns of `callback_registration r` read into a `CallbackRegistration`.
macro_rules! registration_columns {
    () => {
        "r.registration_id, r.tenant_id, r.recipient_id, r.callback_url, \
         r.verification_state, r.auth_mode, r.key_id, r.secret, r.secret_sealed_by, r.previous_key_id, \
         r.previous_secret, r.previous_secret_sealed_by, \
         r.previous_retires_at_utc, r.replay_window_seconds, r.max_rate_per_minute, r.delivered_head_seq, \
         r.next_attempt_at_utc, r.failed_attempts, r.consecutive_failures, r.failing_since_utc, \
         r.disabled_at_utc, r.disabled_reason, r.last_error, r.created_at_utc, r.verified_at_utc"
    };
}

/// Columns of `callback_delivery` read into a `CallbackAttempt`, also the columns one attempt
/// inserts.
macro_rules! attempt_columns {
    () => {
        "delivery_id, registration_id, tenant_id, kind, head_seq, attempt, outcome, \
         http_status, error, duration_ms, created_at_utc"
    };
}

// ---- registrations ----

/// The recipient's registrations in every state, counted (tenant, recipient).
pub(super) const COUNT_OF_RECIPIENT: &str =
    "SELECT COUNT(*) AS n FROM callback_registration WHERE tenant_id = ? AND recipient_id = ?";

/// The tenant's registrations in every state, counted (tenant).
pub(super) const COUNT_OF_TENANT: &str =
    "SELECT COUNT(*) AS n FROM callback_registration WHERE tenant_id = ?";

/// A new `pending_verification` registration, never yet delivered (id, tenant, recipient, url,
/// key id, replay window, max rate, created at, sealed secret, sealing key id, updated at).
pub(super) const INSERT_REGISTRATION: &str = "INSERT INTO callback_registration (registration_id, tenant_id, \
    recipient_id, callback_url, verification_state, auth_mode, key_id, secret_hash, public_key, \
    replay_window_seconds, max_rate_per_minute, created_at_utc, rotates_after_utc, secret, secret_sealed_by, \
    delivered_head_seq, next_attempt_at_utc, failed_attempts, updated_at_utc) \
    VALUES (?, ?, ?, ?, 'pending_verification', 'hmac-sha256', ?, NULL, NULL, ?, ?, ?, NULL, ?, ?, 0, 0, 0, ?)";

/// One registration of a tenant (tenant, registration).
pub(super) const REGISTRATION_BY_ID: &str = concat!(
    "SELECT ",
    registration_columns!(),
    " FROM callback_registration r WHERE r.tenant_id = ? AND r.registration_id = ?"
);

/// The tenant's registrations, oldest first (tenant).
pub(super) const REGISTRATIONS_OF_TENANT: &str = concat!(
    "SELECT ",
    registration_columns!(),
    " FROM callback_registration r WHERE r.tenant_id = ? ORDER BY r.created_at_utc, r.registration_id"
);

/// One recipient's registrations, oldest first (tenant, recipient).
pub(super) const REGISTRATIONS_OF_RECIPIENT: &str = concat!(
    "SELECT ",
    registration_columns!(),
    " FROM callback_registration r WHERE r.tenant_id = ? AND r.recipient_id = ? \
     ORDER BY r.created_at_utc, r.registration_id"
);

/// A registration, not its delivery log (tenant, registration).
pub(super) const DELETE_REGISTRATION: &str =
    "DELETE FROM callback_registration WHERE tenant_id = ? AND registration_id = ?";

/// Makes a registration `active` and due at once (verified at, updated at, tenant, registration).
pub(super) const MARK_VERIFIED: &str = "UPDATE callback_registration SET verification_state = 'active', \
    verified_at_utc = ?, failed_attempts = 0, last_error = NULL, next_attempt_at_utc = 0, updated_at_utc = ? \
    WHERE tenant_id = ? AND registration_id = ?";

/// Why a challenge failed (error, updated at, tenant, registration).
pub(super) const RECORD_ERROR: &str = "UPDATE callback_registration SET last_error = ?, updated_at_utc = ? \
    WHERE tenant_id = ? AND registration_id = ?";

/// The current secret becomes the previous one (still sealed for its own secret id, which moves
/// with it), retiring later, unless the new key id is the current one (retires at, key id,
/// sealed secret, sealing key id, updated at, tenant, registration, key id).
pub(super) const ROTATE_SECRET: &str = "UPDATE callback_registration SET previous_key_id = key_id, \
    previous_secret = secret, previous_secret_sealed_by = secret_sealed_by, previous_retires_at_utc = ?, \
    key_id = ?, secret = ?, secret_sealed_by = ?, updated_at_utc = ? \
    WHERE tenant_id = ? AND registration_id = ? AND key_id <> ?";

// ---- deliveries ----

/// What every due delivery's row satisfies: active, not disabled, past its next attempt
/// (now), and its recipient's head past what it was sent.
macro_rules! due_from {
    () => {
        " FROM callback_registration r \
         JOIN inbox_head h ON h.tenant_id = r.tenant_id AND h.recipient_kind = 'agent' \
         AND h.recipient_id = r.recipient_id \
         WHERE r.verification_state = 'active' AND r.disabled_at_utc IS NULL AND r.next_attempt_at_utc <= ? \
         AND h.head_seq > r.delivered_head_seq"
    };
}

/// Due deliveries with their heads, soonest first (now, limit).
pub(super) const DUE_DELIVERIES: &str = concat!(
    "SELECT ",
    registration_columns!(),
    ", h.head_seq",
    due_from!(),
    " ORDER BY r.next_attempt_at_utc, r.registration_id LIMIT ?"
);

/// The next page of due deliveries, after the last one of the page before: the worker reads
/// on past deliveries it had to defer, so they cannot hide the rest (now, next attempt at,
/// next attempt at, registration, limit).
pub(super) const DUE_DELIVERIES_AFTER: &str = concat!(
    "SELECT ",
    registration_columns!(),
    ", h.head_seq",
    due_from!(),
    " AND (r.next_attempt_at_utc > ? OR (r.next_attempt_at_utc = ? AND r.registration_id > ?)) \
     ORDER BY r.next_attempt_at_utc, r.registration_id LIMIT ?"
);

/// Takes a due registration, the compare-and-set on the `next_attempt_at` the caller read
/// (lease until, registration, seen next attempt at).
pub(super) const CLAIM_DELIVERY: &str = "UPDATE callback_registration SET next_attempt_at_utc = ? \
    WHERE registration_id = ? AND next_attempt_at_utc = ? AND verification_state = 'active' \
    AND disabled_at_utc IS NULL";

// Each way a delivery ends is recorded only while the delivery's lease holds (the last bind,
// the `next_attempt_at_utc` its claim set): an operator's re-enable, or another node that took
// the registration after the lease ran out, has moved it, and then the outcome is stale.

/// A delivered head, never moving the cursor back; the failure counts start over (head, head,
/// next attempt at, updated at, registration, lease).
pub(super) const RECORD_DELIVERED: &str = "UPDATE callback_registration SET delivered_head_seq = \
    CASE WHEN delivered_head_seq < ? THEN ? ELSE delivered_head_seq END, next_attempt_at_utc = ?, \
    failed_attempts = 0, consecutive_failures = 0, failing_since_utc = NULL, last_error = NULL, \
    updated_at_utc = ? WHERE registration_id = ? AND next_attempt_at_utc = ?";

/// One more failed attempt at the current head, disabled when past the bound (next attempt at,
/// error, failed at, disabled at, reason, updated at, registration, lease).
pub(super) const RECORD_FAILED: &str = "UPDATE callback_registration SET failed_attempts = failed_attempts + 1, \
    consecutive_failures = consecutive_failures + 1, next_attempt_at_utc = ?, last_error = ?, \
    failing_since_utc = COALESCE(failing_since_utc, ?), disabled_at_utc = ?, disabled_reason = ?, \
    updated_at_utc = ? WHERE registration_id = ? AND next_attempt_at_utc = ?";

/// A head given up on counts as delivered, with the error kept; the registration's failures
/// in a row go on counting (head, head, next attempt at, error, failed at, disabled at, reason,
/// updated at, registration, lease).
pub(super) const RECORD_GIVEN_UP: &str = "UPDATE callback_registration SET delivered_head_seq = \
    CASE WHEN delivered_head_seq < ? THEN ? ELSE delivered_head_seq END, failed_attempts = 0, \
    consecutive_failures = consecutive_failures + 1, next_attempt_at_utc = ?, last_error = ?, \
    failing_since_utc = COALESCE(failing_since_utc, ?), disabled_at_utc = ?, disabled_reason = ?, \
    updated_at_utc = ? WHERE registration_id = ? AND next_attempt_at_utc = ?";

/// Re-enables a disabled registration: the failure counts start over and the cursor goes back
/// to 0, so the current head is delivered at once (updated at, tenant, registration).
pub(super) const ENABLE_REGISTRATION: &str = "UPDATE callback_registration SET disabled_at_utc = NULL, \
    disabled_reason = NULL, consecutive_failures = 0, failing_since_utc = NULL, failed_attempts = 0, \
    delivered_head_seq = 0, next_attempt_at_utc = 0, updated_at_utc = ? \
    WHERE tenant_id = ? AND registration_id = ? AND disabled_at_utc IS NOT NULL";

// ---- the attempt log ----

/// One attempt (its columns in order).
pub(super) const INSERT_ATTEMPT: &str = concat!(
    "INSERT INTO callback_delivery (",
    attempt_columns!(),
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
);

/// A registration's attempts, newest first (tenant, registration, limit).
pub(super) const ATTEMPTS_OF_REGISTRATION: &str = concat!(
    "SELECT ",
    attempt_columns!(),
    " FROM callback_delivery WHERE tenant_id = ? AND registration_id = ? \
     ORDER BY created_at_utc DESC, delivery_id DESC LIMIT ?"
);

/// Up to a limit of attempts older than a cutoff (cutoff, limit). MySQL refuses LIMIT inside
/// an IN subquery, so the ids are read first and deleted with [`delete_attempts`].
pub(super) const ATTEMPTS_BEFORE: &str =
    "SELECT delivery_id FROM callback_delivery WHERE created_at_utc < ? LIMIT ?";

/// Deletes `n` attempts read by [`ATTEMPTS_BEFORE`] (id per attempt).
pub(super) fn delete_attempts(n: usize) -> String {
    format!("DELETE FROM callback_delivery WHERE delivery_id IN ({})", placeholders(n))
}
