//! Every SQL statement of the `secrets` subsystem, by name: which key seals new secrets, how
//! many secrets each key sealed, and, per sealed column, the rows not yet under the sealing key
//! and the compare-and-set that reseals one.

use crate::dialect::Sql;

// ---- the sealing key ----

/// The key new secrets are sealed with.
pub(super) const SEALING_KEY: &str = "SELECT key_id FROM secrets_sealing_key WHERE singleton = 1";

/// Records the first sealing key unless one is recorded (key id, updated at).
pub(super) const INSERT_SEALING_KEY: Sql = Sql {
    mysql: "INSERT INTO secrets_sealing_key (singleton, key_id, updated_at_utc) VALUES (1, ?, ?) \
            ON DUPLICATE KEY UPDATE singleton = singleton",
    sqlite: "INSERT INTO secrets_sealing_key (singleton, key_id, updated_at_utc) VALUES (1, ?, ?) \
             ON CONFLICT (singleton) DO NOTHING",
};

/// Names another sealing key (key id, updated at).
pub(super) const UPDATE_SEALING_KEY: &str =
    "UPDATE secrets_sealing_key SET key_id = ?, updated_at_utc = ? WHERE singleton = 1";

// ---- signing_key.secret ----

/// Token keys per sealing key (a NULL key id: in clear).
pub(super) const SIGNING_KEY_CENSUS: &str =
    "SELECT secret_sealed_by AS key_id, COUNT(*) AS n FROM signing_key GROUP BY secret_sealed_by";

/// Token keys not under a key (key id, limit).
pub(super) const SIGNING_KEYS_NOT_UNDER: &str = "SELECT key_id, purpose, algorithm, secret AS value, \
    secret_sealed_by AS sealed_by FROM signing_key \
    WHERE secret_sealed_by IS NULL OR secret_sealed_by <> ? LIMIT ?";

/// Reseals a token key unless it changed since it was read (value, key id, row's key id,
/// purpose, old value, old key id or '').
pub(super) const RESEAL_SIGNING_KEY: &str = "UPDATE signing_key SET secret = ?, secret_sealed_by = ? \
    WHERE key_id = ? AND purpose = ? AND secret = ? AND COALESCE(secret_sealed_by, '') = ?";

// ---- callback_registration.secret and .previous_secret ----

/// Current callback secrets per sealing key.
pub(super) const CALLBACK_SECRET_CENSUS: &str = "SELECT secret_sealed_by AS key_id, COUNT(*) AS n \
    FROM callback_registration WHERE secret IS NOT NULL GROUP BY secret_sealed_by";

/// Current callback secrets not under a key (key id, limit).
pub(super) const CALLBACK_SECRETS_NOT_UNDER: &str = "SELECT tenant_id, registration_id, key_id AS secret_id, \
    secret AS value, secret_sealed_by AS sealed_by FROM callback_registration \
    WHERE secret IS NOT NULL AND (secret_sealed_by IS NULL OR secret_sealed_by <> ?) LIMIT ?";

/// Reseals a current callback secret unless it changed or rotated since it was read (value,
/// key id, registration, secret id, old value, old key id or '').
pub(super) const RESEAL_CALLBACK_SECRET: &str = "UPDATE callback_registration SET secret = ?, \
    secret_sealed_by = ? WHERE registration_id = ? AND key_id = ? AND secret = ? \
    AND COALESCE(secret_sealed_by, '') = ?";

/// Previous callback secrets per sealing key.
pub(super) const CALLBACK_PREVIOUS_CENSUS: &str = "SELECT previous_secret_sealed_by AS key_id, COUNT(*) AS n \
    FROM callback_registration WHERE previous_secret IS NOT NULL GROUP BY previous_secret_sealed_by";

/// Previous callback secrets not under a key (key id, limit).
pub(super) const CALLBACK_PREVIOUS_NOT_UNDER: &str = "SELECT tenant_id, registration_id, \
    previous_key_id AS secret_id, previous_secret AS value, previous_secret_sealed_by AS sealed_by \
    FROM callback_registration WHERE previous_secret IS NOT NULL \
    AND (previous_secret_sealed_by IS NULL OR previous_secret_sealed_by <> ?) LIMIT ?";

/// Reseals a previous callback secret unless it changed since it was read (value, key id,
/// registration, secret id, old value, old key id or '').
pub(super) const RESEAL_CALLBACK_PREVIOUS: &str = "UPDATE callback_registration SET previous_secret = ?, \
    previous_secret_sealed_by = ? WHERE registration_id = ? AND previous_key_id = ? AND previous_secret = ? \
    AND COALESCE(previous_secret_sealed_by, '') = ?";

// ---- agent_signing_key.key_material (hmac-sha256 only: ed25519 keys are public) ----

/// Agents' shared secrets per sealing key.
pub(super) const AGENT_KEY_CENSUS: &str = "SELECT key_material_sealed_by AS key_id, COUNT(*) AS n \
    FROM agent_signing_key WHERE algorithm = 'hmac-sha256' GROUP BY key_material_sealed_by";

/// Agents' shared secrets not under a key (key id, limit).
pub(super) const AGENT_KEYS_NOT_UNDER: &str = "SELECT tenant_id, key_id, agent_id, algorithm, \
    key_material AS value, key_material_sealed_by AS sealed_by FROM agent_signing_key \
    WHERE algorithm = 'hmac-sha256' AND (key_material_sealed_by IS NULL OR key_material_sealed_by <> ?) LIMIT ?";

/// Reseals an agent's shared secret unless it changed since it was read (value, key id,
/// tenant, key id, old value, old key id or '').
pub(super) const RESEAL_AGENT_KEY: &str = "UPDATE agent_signing_key SET key_material = ?, \
    key_material_sealed_by = ? WHERE tenant_id = ? AND key_id = ? AND key_material = ? \
    AND COALESCE(key_material_sealed_by, '') = ?";

// ---- a2a_push_config.secret (an A2A webhook's token and credentials) ----

/// A2A push secrets per sealing key.
pub(super) const A2A_PUSH_CENSUS: &str =
    "SELECT secret_sealed_by AS key_id, COUNT(*) AS n FROM a2a_push_config GROUP BY secret_sealed_by";

/// A2A push secrets not under a key (key id, limit).
pub(super) const A2A_PUSH_NOT_UNDER: &str = "SELECT tenant_id, task_id, config_id, secret AS value, \
    secret_sealed_by AS sealed_by FROM a2a_push_config \
    WHERE secret_sealed_by IS NULL OR secret_sealed_by <> ? LIMIT ?";

/// Reseals an A2A push secret unless it changed since it was read (value, key id, task id,
/// config id, old value, old key id or ''); task ids are unique across tenants.
pub(super) const RESEAL_A2A_PUSH: &str = "UPDATE a2a_push_config SET secret = ?, secret_sealed_by = ? \
    WHERE task_id = ? AND config_id = ? AND secret = ? AND COALESCE(secret_sealed_by, '') = ?";
