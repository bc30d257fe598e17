-- The built-in meeting-room domain: rooms, their member agents, and posted messages; the same
-- tables as on MySQL (see migrations/mysql/0005_rooms.sql for why each exists).

CREATE TABLE IF NOT EXISTS meeting_room (
    tenant_id                  TEXT NOT NULL,
    room_id                    TEXT NOT NULL,
    name                       TEXT NULL,
    last_message_id            INTEGER NOT NULL,
    created_at_utc             INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, room_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS meeting_room_member (
    tenant_id                  TEXT NOT NULL,
    room_id                    TEXT NOT NULL,
    agent_id                   TEXT NOT NULL,
    added_at_utc               INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, room_id, agent_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS meeting_room_message (
    tenant_id                  TEXT NOT NULL,
    room_id                    TEXT NOT NULL,
    message_id                 INTEGER NOT NULL,
    author                     TEXT NOT NULL,
    body_json                  TEXT NOT NULL,
    deduplication_key          TEXT NULL,
    deliveries_json            TEXT NOT NULL,
    created_at_utc             INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, room_id, message_id)
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX IF NOT EXISTS uq_meeting_room_message_dedup ON meeting_room_message (tenant_id, room_id, deduplication_key);
