-- Access tokens signed out before they expire. See the MySQL file.
CREATE TABLE IF NOT EXISTS signed_out_token (
    sign_in_hash               BLOB NOT NULL PRIMARY KEY,
    expires_at_utc             INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS ix_signed_out_token_expiry ON signed_out_token (expires_at_utc);
