-- The built-in meeting-room domain: rooms, their member agents, and posted messages. Posting
-- writes a meeting_room_message row and one agent_inbox row per member in one transaction,
-- the transactional-outbox promise shown with a real domain table.
--
-- The tables carry a meeting_ prefix so they never collide with a host application's own
-- room or room_message tables in a shared database (docs/sql-contract.md uses room_message
-- as its example of a host table).

-- One row per room. Its row lock serializes posts and membership changes in a room, so a
-- post sees exactly the members committed before it, and last_message_id (the id of the
-- newest message, 0 before the first) hands out message ids in commit order.
CREATE TABLE IF NOT EXISTS meeting_room (
    tenant_id       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    room_id         VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name            VARCHAR(200) NULL,
    last_message_id BIGINT       NOT NULL,
    created_at_utc  BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, room_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The agents of the room's tenant that get an inbox event for every post.
CREATE TABLE IF NOT EXISTS meeting_room_member (
    tenant_id    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    room_id      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_id     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    added_at_utc BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, room_id, agent_id)
) ENGINE = InnoDB;

-- The record of every post. deliveries_json is a JSON array of
-- [recipient_kind, recipient_id, event_id, inbox_seq], one per member the post reached, so a
-- repeated deduplication_key answers exactly what the first post did.
CREATE TABLE IF NOT EXISTS meeting_room_message (
    tenant_id         VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    room_id           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    message_id        BIGINT       NOT NULL,
    author            VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    body_json         MEDIUMTEXT   NOT NULL,
    deduplication_key VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NULL,
    deliveries_json   MEDIUMTEXT   NOT NULL,
    created_at_utc    BIGINT       NOT NULL,
    PRIMARY KEY (tenant_id, room_id, message_id),
    UNIQUE KEY uq_meeting_room_message_dedup (tenant_id, room_id, deduplication_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
