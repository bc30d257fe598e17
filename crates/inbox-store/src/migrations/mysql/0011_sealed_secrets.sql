-- Secrets sealed with a key the database never holds (the secrets key file): each sealed
-- value is a random nonce, the XChaCha20-Poly1305 ciphertext and its tag, bound to its row;
-- `*_sealed_by` names the key that sealed it (NULL: still in clear, as written by an older
-- version; a node seals those when it starts). Sealed values are 40 bytes longer than the
-- secret, so the columns widen.
ALTER TABLE signing_key
    MODIFY COLUMN secret VARBINARY(255) NOT NULL,
    ADD COLUMN secret_sealed_by VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN public_key VARBINARY(64) NULL;

ALTER TABLE callback_registration
    MODIFY COLUMN secret VARBINARY(255) NULL,
    MODIFY COLUMN previous_secret VARBINARY(255) NULL,
    ADD COLUMN secret_sealed_by VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN previous_secret_sealed_by VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL;

-- Only hmac-sha256 material is sealed; an ed25519 public key stays as it is.
ALTER TABLE agent_signing_key
    MODIFY COLUMN key_material VARBINARY(255) NOT NULL,
    ADD COLUMN key_material_sealed_by VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL;

-- Which key of the key file seals new secrets, the same for every node: the first key of the
-- file that started the first node, then whichever `agent-inbox keys rewrap` names. One row.
CREATE TABLE IF NOT EXISTS secrets_sealing_key (
    singleton      INT         NOT NULL,
    key_id         VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    updated_at_utc BIGINT      NOT NULL,
    PRIMARY KEY (singleton)
) ENGINE = InnoDB;
