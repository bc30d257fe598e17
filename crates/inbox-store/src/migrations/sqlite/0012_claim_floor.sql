-- The claim floor of an inbox (see the MySQL file). SQLite removes an index entry at once, so
-- its claim index stays as it was; the floor still spares a claim the settled start of the inbox.
CREATE TABLE IF NOT EXISTS inbox_claim_floor (
    tenant_id      TEXT    NOT NULL,
    recipient_kind TEXT    NOT NULL,
    recipient_id   TEXT    NOT NULL,
    floor_seq      INTEGER NOT NULL,
    wake_seq       INTEGER NULL,
    wake_at_utc    INTEGER NULL,
    reopened       INTEGER NOT NULL,
    updated_at_utc INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, recipient_kind, recipient_id)
);
