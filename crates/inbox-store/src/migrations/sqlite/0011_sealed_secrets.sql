-- Secrets sealed with a key the database never holds. See the MySQL file for the reasons.
ALTER TABLE signing_key ADD COLUMN secret_sealed_by TEXT NULL;
ALTER TABLE signing_key ADD COLUMN public_key BLOB NULL;
ALTER TABLE callback_registration ADD COLUMN secret_sealed_by TEXT NULL;
ALTER TABLE callback_registration ADD COLUMN previous_secret_sealed_by TEXT NULL;
ALTER TABLE agent_signing_key ADD COLUMN key_material_sealed_by TEXT NULL;

CREATE TABLE IF NOT EXISTS secrets_sealing_key (
    singleton                  INTEGER NOT NULL PRIMARY KEY,
    key_id                     TEXT NOT NULL,
    updated_at_utc             INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
