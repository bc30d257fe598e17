//! Every SQL statement of the `signatures` subsystem, by name: agent keys, nonces and the
//! tenant-policy row (whose lock serializes a tenant's registrations).

use crate::dialect::{Sql, placeholders, push_repeated};

/// Columns of `agent_signing_key` read into an `AgentKey`, in schema order.
macro_rules! key_columns {
    () => {
        "tenant_id, key_id, agent_id, algorithm, key_material, key_material_sealed_by, created_at_utc, retired_at_utc"
    };
}

/// Columns of `tenant_policy` read into a `TenantPolicy`.
macro_rules! policy_columns {
    () => {
        "signatures_required, single_active_session, fair_claims, pending_events_max, stored_bytes_max"
    };
}

// ---- agent keys ----

/// The agent's live keys, counted (tenant, agent, now).
pub(super) const COUNT_LIVE_KEYS: &str = "SELECT COUNT(*) AS n FROM agent_signing_key \
    WHERE tenant_id = ? AND agent_id = ? AND (retired_at_utc IS NULL OR retired_at_utc > ?)";

/// One new, unretired key (tenant, key id, agent, algorithm, material, sealing key id or NULL
/// for a public key, created at).
pub(super) const INSERT_KEY: &str =
    concat!("INSERT INTO agent_signing_key (", key_columns!(), ") VALUES (?, ?, ?, ?, ?, ?, ?, NULL)");

/// A key by id, live or retired (tenant, key id).
pub(super) const KEY_BY_ID: &str =
    concat!("SELECT ", key_columns!(), " FROM agent_signing_key WHERE tenant_id = ? AND key_id = ?");

/// The agent's live keys, oldest first (tenant, agent, now).
pub(super) const LIVE_KEYS_OF_AGENT: &str = concat!(
    "SELECT ",
    key_columns!(),
    " FROM agent_signing_key WHERE tenant_id = ? AND agent_id = ? \
     AND (retired_at_utc IS NULL OR retired_at_utc > ?) ORDER BY created_at_utc, key_id"
);

/// Every key of a tenant, live and retired, by agent then age (tenant, limit).
pub(super) const KEYS_OF_TENANT: &str = concat!(
    "SELECT ",
    key_columns!(),
    " FROM agent_signing_key WHERE tenant_id = ? ORDER BY agent_id, created_at_utc, key_id LIMIT ?"
);

/// Sets a live key's retirement unless it already retires sooner (retire at, tenant, agent,
/// key id, retire at).
pub(super) const RETIRE_KEY: &str = "UPDATE agent_signing_key SET retired_at_utc = ? \
    WHERE tenant_id = ? AND agent_id = ? AND key_id = ? AND (retired_at_utc IS NULL OR retired_at_utc > ?)";

// ---- nonces ----

/// One nonce (hash, until); a duplicate key means it is remembered already.
pub(super) const INSERT_NONCE: &str =
    "INSERT INTO signature_nonce (nonce_hash, expires_at_utc) VALUES (?, ?)";

/// `n` nonces in one statement (hash, until per nonce).
pub(super) fn insert_nonces(n: usize) -> String {
    let mut sql = String::from("INSERT INTO signature_nonce (nonce_hash, expires_at_utc) VALUES ");
    push_repeated(&mut sql, n, "(?, ?)");
    sql
}

/// A nonce row left from a window that has passed (hash, now).
pub(super) const DELETE_STALE_NONCE: &str =
    "DELETE FROM signature_nonce WHERE nonce_hash = ? AND expires_at_utc < ?";

/// Up to a limit of nonces whose window ended (cutoff, limit). MySQL refuses LIMIT inside an
/// IN subquery, so the keys are read first and deleted with [`delete_expired_nonces`].
pub(super) const EXPIRED_NONCES: &str =
    "SELECT nonce_hash FROM signature_nonce WHERE expires_at_utc < ? LIMIT ?";

/// Deletes `n` nonces read by [`EXPIRED_NONCES`] (hash per nonce, cutoff).
pub(super) fn delete_expired_nonces(n: usize) -> String {
    format!("DELETE FROM signature_nonce WHERE nonce_hash IN ({}) AND expires_at_utc < ?", placeholders(n))
}

// ---- tenant policy ----

/// The tenant's policy row (tenant).
pub(super) const POLICY_OF_TENANT: &str =
    concat!("SELECT ", policy_columns!(), " FROM tenant_policy WHERE tenant_id = ?");

/// Every setting (signatures required, single active session, fair claims, pending events max,
/// stored bytes max, updated at, tenant).
pub(super) const UPDATE_POLICY: &str = "UPDATE tenant_policy SET signatures_required = ?, \
    single_active_session = ?, fair_claims = ?, pending_events_max = ?, stored_bytes_max = ?, \
    updated_at_utc = ? WHERE tenant_id = ?";

/// Creates the tenant's policy row if missing, keeping an existing one (tenant, updated at).
pub(super) const ENSURE_TENANT_ROW: Sql = Sql {
    mysql: "INSERT INTO tenant_policy (tenant_id, signatures_required, updated_at_utc) VALUES (?, 0, ?) \
            ON DUPLICATE KEY UPDATE tenant_id = tenant_id",
    sqlite: "INSERT INTO tenant_policy (tenant_id, signatures_required, updated_at_utc) VALUES (?, 0, ?) \
             ON CONFLICT (tenant_id) DO NOTHING",
};

/// Locks the tenant's policy row until the transaction ends (tenant). SQLite's
/// `BEGIN IMMEDIATE` already holds the only write lock.
pub(super) const LOCK_TENANT_ROW: Sql = Sql {
    mysql: "SELECT tenant_id FROM tenant_policy WHERE tenant_id = ? FOR UPDATE",
    sqlite: "SELECT tenant_id FROM tenant_policy WHERE tenant_id = ?",
};
