//! Every SQL statement of the `tokens` subsystem, by name: signing keys and refresh tokens.

use crate::dialect::Sql;

/// A signing key, signing at once or from its activation (key id, purpose, algorithm, sealed
/// secret, sealing key id, public key, created at, activates at).
pub(super) const INSERT_SIGNING_KEY: &str = "INSERT INTO signing_key (key_id, purpose, algorithm, secret, \
    secret_sealed_by, public_key, created_at_utc, retires_at_utc, activates_at_utc) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)";

/// The purpose's unretired keys, newest first (purpose, now).
pub(super) const LIVE_SIGNING_KEYS: &str = "SELECT key_id, algorithm, secret, secret_sealed_by, public_key, \
    created_at_utc, retires_at_utc, activates_at_utc FROM signing_key \
    WHERE purpose = ? AND (retires_at_utc IS NULL OR retires_at_utc > ?) \
    ORDER BY created_at_utc DESC, key_id DESC";

/// When the purpose's newest key was created (purpose).
pub(super) const NEWEST_SIGNING_KEY: &str =
    "SELECT MAX(created_at_utc) AS n FROM signing_key WHERE purpose = ?";

/// Retires the purpose's keys unless they retire sooner (retire at, purpose, retire at).
pub(super) const RETIRE_SIGNING_KEYS: &str = "UPDATE signing_key SET retires_at_utc = ? WHERE purpose = ? \
    AND (retires_at_utc IS NULL OR retires_at_utc > ?)";

/// A fresh refresh token (hash, family, tenant, subject, kind, scope, issued at, expires at).
pub(super) const INSERT_REFRESH_TOKEN: &str = "INSERT INTO refresh_token (token_hash, family_id, tenant_id, subject, kind, scope, issued_at_utc, \
    expires_at_utc, used_at_utc, revoked_at_utc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)";

/// Revokes a reused token's whole family (now, family).
pub(super) const REVOKE_REFRESH_FAMILY: &str =
    "UPDATE refresh_token SET revoked_at_utc = ? WHERE family_id = ? AND revoked_at_utc IS NULL";

/// Marks a presented token used (now, hash).
pub(super) const SPEND_REFRESH_TOKEN: &str = "UPDATE refresh_token SET used_at_utc = ? WHERE token_hash = ?";

/// A presented refresh token, locked until the transaction ends (hash).
pub(super) const LOCK_REFRESH_TOKEN: Sql = Sql {
    mysql: "SELECT family_id, tenant_id, subject, kind, scope, expires_at_utc, used_at_utc, revoked_at_utc \
            FROM refresh_token WHERE token_hash = ? FOR UPDATE",
    sqlite: "SELECT family_id, tenant_id, subject, kind, scope, expires_at_utc, used_at_utc, revoked_at_utc \
             FROM refresh_token WHERE token_hash = ?",
};

/// Lists a sign-in as signed out until its token expires (sign-in hash, expires at); a repeat
/// keeps the first row.
pub(super) const INSERT_SIGNED_OUT: Sql = Sql {
    mysql: "INSERT INTO signed_out_token (sign_in_hash, expires_at_utc) VALUES (?, ?) \
            ON DUPLICATE KEY UPDATE sign_in_hash = sign_in_hash",
    sqlite: "INSERT INTO signed_out_token (sign_in_hash, expires_at_utc) VALUES (?, ?) \
             ON CONFLICT (sign_in_hash) DO NOTHING",
};

/// Whether a sign-in was signed out (sign-in hash).
pub(super) const IS_SIGNED_OUT: &str = "SELECT 1 AS one FROM signed_out_token WHERE sign_in_hash = ?";

/// Sign-outs whose tokens have expired (cutoff).
pub(super) const DELETE_EXPIRED_SIGN_OUTS: &str = "DELETE FROM signed_out_token WHERE expires_at_utc < ?";
