-- Credentials for browser streams (SSE, WebSocket), so no long-lived bearer token goes into a
-- URL. Stored as SHA-256 hashes, in the database so any node can redeem one minted on another.
-- purpose 'ticket': single use, redeemed atomically (used_at_utc set once), valid <= 60 s.
-- purpose 'cookie': the value of an HttpOnly cookie, reusable until it expires, so a browser's
-- EventSource can reconnect on its own.
CREATE TABLE IF NOT EXISTS stream_ticket (
    ticket_hash    BINARY(32)    NOT NULL,
    purpose        VARCHAR(16)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    tenant_id      VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    subject        VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind           VARCHAR(16)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    scope          VARCHAR(1024) NOT NULL,
    session_id     VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NULL,
    created_at_utc BIGINT        NOT NULL,
    expires_at_utc BIGINT        NOT NULL,
    used_at_utc    BIGINT        NULL,
    PRIMARY KEY (ticket_hash),
    KEY ix_stream_ticket_expiry (expires_at_utc)
) ENGINE = InnoDB;
