-- Keys the service signs its own access tokens with, shared by every node through the
-- database. Several may be valid at once during a rotation.
CREATE TABLE IF NOT EXISTS signing_key (
    key_id         VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    purpose        VARCHAR(32)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    algorithm      VARCHAR(16)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    secret         VARBINARY(64) NOT NULL,
    created_at_utc BIGINT        NOT NULL,
    retires_at_utc BIGINT        NULL,
    PRIMARY KEY (key_id),
    KEY ix_signing_key_purpose (purpose, created_at_utc)
) ENGINE = InnoDB;

-- Rotating refresh tokens, stored as SHA-256 hashes. A family is one login; presenting a
-- token that was already used revokes the whole family.
CREATE TABLE IF NOT EXISTS refresh_token (
    token_hash     BINARY(32)   NOT NULL,
    family_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    tenant_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    subject        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind           VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    scope          VARCHAR(1024) NOT NULL,
    issued_at_utc  BIGINT       NOT NULL,
    expires_at_utc BIGINT       NOT NULL,
    used_at_utc    BIGINT       NULL,
    revoked_at_utc BIGINT       NULL,
    PRIMARY KEY (token_hash),
    KEY ix_refresh_token_family (family_id),
    KEY ix_refresh_token_expiry (expires_at_utc)
) ENGINE = InnoDB;
