-- Credentials for browser streams (SSE, WebSocket), so no long-lived bearer token goes into a
-- URL. Stored as SHA-256 hashes, in the database so any node can redeem one minted on another.
-- purpose 'ticket': single use, redeemed atomically (used_at_utc set once), valid <= 60 s.
-- purpose 'cookie': the value of an HttpOnly cookie, reusable until it expires, so a browser's
-- EventSource can reconnect on its own.
CREATE TABLE IF NOT EXISTS stream_ticket (
    ticket_hash                BLOB NOT NULL PRIMARY KEY,
    purpose                    TEXT NOT NULL,
    tenant_id                  TEXT NOT NULL,
    subject                    TEXT NOT NULL,
    kind                       TEXT NOT NULL,
    scope                      TEXT NOT NULL,
    session_id                 TEXT NULL,
    created_at_utc             INTEGER NOT NULL,
    expires_at_utc             INTEGER NOT NULL,
    used_at_utc                INTEGER NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS ix_stream_ticket_expiry ON stream_ticket (expires_at_utc);
