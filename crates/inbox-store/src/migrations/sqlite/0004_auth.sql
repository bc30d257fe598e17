-- Keys the service signs its own access tokens with. Several may be valid at once during a
-- rotation.
CREATE TABLE IF NOT EXISTS signing_key (
    key_id                     TEXT NOT NULL PRIMARY KEY,
    purpose                    TEXT NOT NULL,
    algorithm                  TEXT NOT NULL,
    secret                     BLOB NOT NULL,
    created_at_utc             INTEGER NOT NULL,
    retires_at_utc             INTEGER NULL
) STRICT, WITHOUT ROWID;

-- Rotating refresh tokens, stored as SHA-256 hashes. A family is one login; presenting a
-- token that was already used revokes the whole family.
CREATE TABLE IF NOT EXISTS refresh_token (
    token_hash                 BLOB NOT NULL PRIMARY KEY,
    family_id                  TEXT NOT NULL,
    tenant_id                  TEXT NOT NULL,
    subject                    TEXT NOT NULL,
    kind                       TEXT NOT NULL,
    scope                      TEXT NOT NULL,
    issued_at_utc              INTEGER NOT NULL,
    expires_at_utc             INTEGER NOT NULL,
    used_at_utc                INTEGER NULL,
    revoked_at_utc             INTEGER NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS ix_signing_key_purpose ON signing_key (purpose, created_at_utc);
CREATE INDEX IF NOT EXISTS ix_refresh_token_family ON refresh_token (family_id);
CREATE INDEX IF NOT EXISTS ix_refresh_token_expiry ON refresh_token (expires_at_utc);
