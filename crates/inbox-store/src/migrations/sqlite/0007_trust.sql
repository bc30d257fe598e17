-- Trust: agents' request-signing keys, remembered signature nonces, per-tenant policy,
-- webhook delivery state with its delivery log, and activation times for token keys.
-- See the MySQL file for the reasons behind each column.

CREATE TABLE IF NOT EXISTS agent_signing_key (
    tenant_id                  TEXT NOT NULL,
    key_id                     TEXT NOT NULL,
    agent_id                   TEXT NOT NULL,
    algorithm                  TEXT NOT NULL,
    key_material               BLOB NOT NULL,
    created_at_utc             INTEGER NOT NULL,
    retired_at_utc             INTEGER NULL,
    PRIMARY KEY (tenant_id, key_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS signature_nonce (
    nonce_hash                 BLOB NOT NULL PRIMARY KEY,
    expires_at_utc             INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS tenant_policy (
    tenant_id                  TEXT NOT NULL PRIMARY KEY,
    signatures_required        INTEGER NOT NULL,
    updated_at_utc             INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

ALTER TABLE callback_registration ADD COLUMN secret BLOB NULL;
ALTER TABLE callback_registration ADD COLUMN previous_key_id TEXT NULL;
ALTER TABLE callback_registration ADD COLUMN previous_secret BLOB NULL;
ALTER TABLE callback_registration ADD COLUMN previous_retires_at_utc INTEGER NULL;
ALTER TABLE callback_registration ADD COLUMN delivered_head_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE callback_registration ADD COLUMN next_attempt_at_utc INTEGER NOT NULL DEFAULT 0;
ALTER TABLE callback_registration ADD COLUMN failed_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE callback_registration ADD COLUMN last_error TEXT NULL;
ALTER TABLE callback_registration ADD COLUMN verified_at_utc INTEGER NULL;
ALTER TABLE callback_registration ADD COLUMN updated_at_utc INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS callback_delivery (
    delivery_id                TEXT NOT NULL PRIMARY KEY,
    registration_id            TEXT NOT NULL,
    tenant_id                  TEXT NOT NULL,
    kind                       TEXT NOT NULL,
    head_seq                   INTEGER NULL,
    attempt                    INTEGER NOT NULL,
    outcome                    TEXT NOT NULL,
    http_status                INTEGER NULL,
    error                      TEXT NULL,
    duration_ms                INTEGER NOT NULL,
    created_at_utc             INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

ALTER TABLE signing_key ADD COLUMN activates_at_utc INTEGER NULL;

CREATE INDEX IF NOT EXISTS ix_agent_signing_key_agent ON agent_signing_key (tenant_id, agent_id);
CREATE INDEX IF NOT EXISTS ix_signature_nonce_expiry ON signature_nonce (expires_at_utc);
CREATE INDEX IF NOT EXISTS ix_callback_registration_due ON callback_registration (verification_state, next_attempt_at_utc);
CREATE INDEX IF NOT EXISTS ix_callback_delivery_registration ON callback_delivery (registration_id, created_at_utc);
CREATE INDEX IF NOT EXISTS ix_callback_delivery_created ON callback_delivery (created_at_utc);
