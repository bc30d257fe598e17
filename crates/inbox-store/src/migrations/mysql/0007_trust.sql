-- Trust: agents' request-signing keys, remembered signature nonces, per-tenant policy,
-- webhook delivery state with its delivery log, and activation times for token keys.

-- Keys agents sign their critical calls with: an ed25519 public key (32 bytes) or an
-- hmac-sha256 shared secret (32 bytes). A key id is unique within its tenant.
CREATE TABLE IF NOT EXISTS agent_signing_key (
    tenant_id      VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    key_id         VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_id       VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    algorithm      VARCHAR(16)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    key_material   VARBINARY(64) NOT NULL,
    created_at_utc BIGINT        NOT NULL,
    retired_at_utc BIGINT        NULL,
    PRIMARY KEY (tenant_id, key_id),
    KEY ix_agent_signing_key_agent (tenant_id, agent_id)
) ENGINE = InnoDB;

-- Nonces of verified signatures, remembered until the signature could no longer verify,
-- so a replay on any node is refused. The key is SHA-256 of (tenant, key id, nonce).
CREATE TABLE IF NOT EXISTS signature_nonce (
    nonce_hash     BINARY(32) NOT NULL,
    expires_at_utc BIGINT     NOT NULL,
    PRIMARY KEY (nonce_hash),
    KEY ix_signature_nonce_expiry (expires_at_utc)
) ENGINE = InnoDB;

-- Per-tenant trust settings. The row is also what serializes a tenant's registrations, so
-- registration limits hold exactly under concurrency.
CREATE TABLE IF NOT EXISTS tenant_policy (
    tenant_id           VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    signatures_required BIGINT      NOT NULL,
    updated_at_utc      BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id)
) ENGINE = InnoDB;

-- Webhook state on the registration: the shared secret (the service signs with it, so it
-- is kept, not only its hash), the previous secret during a rotation overlap, and the
-- delivery cursor: the head last delivered, when the next attempt may start, failures.
ALTER TABLE callback_registration
    ADD COLUMN secret                  VARBINARY(64) NULL,
    ADD COLUMN previous_key_id         VARCHAR(64)   NULL,
    ADD COLUMN previous_secret         VARBINARY(64) NULL,
    ADD COLUMN previous_retires_at_utc BIGINT        NULL,
    ADD COLUMN delivered_head_seq      BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at_utc     BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN failed_attempts         BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN last_error              VARCHAR(255)  NULL,
    ADD COLUMN verified_at_utc         BIGINT        NULL,
    ADD COLUMN updated_at_utc          BIGINT        NOT NULL DEFAULT 0,
    ADD KEY ix_callback_registration_due (verification_state, next_attempt_at_utc);

-- Every delivery attempt (challenges and hints), for operators and the tenant.
CREATE TABLE IF NOT EXISTS callback_delivery (
    delivery_id     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    registration_id VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    tenant_id       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind            VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    head_seq        BIGINT       NULL,
    attempt         BIGINT       NOT NULL,
    outcome         VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    http_status     BIGINT       NULL,
    error           VARCHAR(255) NULL,
    duration_ms     BIGINT       NOT NULL,
    created_at_utc  BIGINT       NOT NULL,
    PRIMARY KEY (delivery_id),
    KEY ix_callback_delivery_registration (registration_id, created_at_utc),
    KEY ix_callback_delivery_created (created_at_utc)
) ENGINE = InnoDB;

-- A rotated-in token key signs only from this time on, once every node has had the chance
-- to load it; until then the previous key keeps signing.
ALTER TABLE signing_key ADD COLUMN activates_at_utc BIGINT NULL;
