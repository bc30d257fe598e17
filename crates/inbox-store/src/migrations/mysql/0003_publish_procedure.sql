-- agent-inbox: single statement
-- agent_inbox_publish: the SQL contract for applications in other languages that share this
-- database. It publishes one event to one recipient inside the caller's open transaction, with
-- the semantics of the Rust store's publish for a single recipient; docs/sql-contract.md is
-- its manual. Runs on MySQL 8.0+ and MariaDB 10.6+: no CREATE OR REPLACE, no RETURNING, only
-- functions both servers have (RANDOM_BYTES, missing before MariaDB 10.10, has a fallback).
--
-- Identifiers arrive as utf8mb4 and are checked against the Rust store's alphabets before they
-- are copied into ascii_bin variables, so every query compares ascii_bin to ascii_bin (byte
-- for byte, using the indexes) and nothing the store cannot read back is ever written.
-- Parameters are wider than the columns so an over-long value is refused with a message
-- instead of being truncated into a valid-looking one.
CREATE PROCEDURE agent_inbox_publish(
    IN  p_tenant_id           VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_recipient_kind      VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_recipient_id        VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_event_type          VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_priority            INT,
    IN  p_available_at_utc    BIGINT,
    IN  p_expires_at_utc      BIGINT,
    IN  p_deduplication_key   VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_max_attempts        INT,
    IN  p_payload_json        LONGTEXT      CHARACTER SET utf8mb4,
    IN  p_payload_ref_type    VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_payload_ref_id      VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_company_id          VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_workspace_id        VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_project_id          VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_meeting_room_id     VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_message_id          VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_routing_decision_id VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_memory_update_id    VARCHAR(1024) CHARACTER SET utf8mb4,
    IN  p_assignment_id       VARCHAR(1024) CHARACTER SET utf8mb4,
    OUT p_event_id            BINARY(16),
    OUT p_inbox_seq           BIGINT,
    OUT p_deduplicated        TINYINT
)
MODIFIES SQL DATA
SQL SECURITY DEFINER
COMMENT 'Publishes one event to one recipient in the caller''s transaction; see docs/sql-contract.md'
BEGIN
    DECLARE v_tenant_id         VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_recipient_kind    VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_recipient_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_event_type        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_deduplication_key VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_now_ms            BIGINT;
    DECLARE v_available_at_utc  BIGINT;
    DECLARE v_priority          INT;
    DECLARE v_max_attempts      INT;
    DECLARE v_in_transaction    TINYINT DEFAULT 1;
    DECLARE v_head_seq          BIGINT;
    DECLARE v_snapshot_head_seq BIGINT;
    DECLARE v_existing_event_id BINARY(16);
    DECLARE v_existing_seq      BIGINT;
    DECLARE v_inbox_seq         BIGINT;
    DECLARE v_random            BINARY(10);
    DECLARE v_event_id          BINARY(16);

    SET p_event_id = NULL;
    SET p_inbox_seq = NULL;
    SET p_deduplicated = NULL;
    -- The database's clock in UTC milliseconds, independent of the session's time zone (which
    -- UNIX_TIMESTAMP(NOW(3)) is not during a daylight-saving fold).
    SET v_now_ms = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000;

    -- ---- validation: refuse before writing anything ----
    IF p_tenant_id IS NULL OR LENGTH(p_tenant_id) NOT BETWEEN 1 AND 64
        OR p_tenant_id COLLATE utf8mb4_bin REGEXP '[^A-Za-z0-9_.:-]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_tenant_id must be 1 to 64 characters from A-Z a-z 0-9 _ - . :';
    END IF;
    IF p_recipient_kind IS NULL OR LENGTH(p_recipient_kind) NOT BETWEEN 1 AND 32
        OR p_recipient_kind COLLATE utf8mb4_bin REGEXP '[^a-z0-9_-]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_recipient_kind must be 1 to 32 characters from a-z 0-9 _ -';
    END IF;
    IF p_recipient_id IS NULL OR LENGTH(p_recipient_id) NOT BETWEEN 1 AND 128
        OR p_recipient_id COLLATE utf8mb4_bin REGEXP '[^A-Za-z0-9_.:@-]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_recipient_id must be 1 to 128 characters from A-Z a-z 0-9 _ - . : @';
    END IF;
    IF p_event_type IS NULL OR LENGTH(p_event_type) NOT BETWEEN 1 AND 128
        OR p_event_type COLLATE utf8mb4_bin REGEXP '[^A-Za-z0-9_.:-]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_event_type must be 1 to 128 characters from A-Z a-z 0-9 _ - . :';
    END IF;
    IF p_priority IS NOT NULL AND p_priority NOT BETWEEN 0 AND 3 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_priority must be 0 (urgent), 1 (high), 2 (normal) or 3 (low)';
    END IF;
    IF p_deduplication_key IS NOT NULL AND (LENGTH(p_deduplication_key) NOT BETWEEN 1 AND 200
        OR p_deduplication_key COLLATE utf8mb4_bin REGEXP '[^!-~]') THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_deduplication_key must be NULL or 1 to 200 printable ASCII characters without spaces';
    END IF;
    IF p_max_attempts IS NOT NULL AND p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_max_attempts must be NULL or between 1 and 1000';
    END IF;
    IF p_payload_json IS NOT NULL AND (p_payload_ref_type IS NOT NULL OR p_payload_ref_id IS NOT NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: give p_payload_json or p_payload_ref_type with p_payload_ref_id, not both';
    END IF;
    IF LENGTH(p_payload_json) > 262144 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_payload_json is larger than 262144 bytes; pass a payload reference instead';
    END IF;
    IF p_payload_json IS NOT NULL AND NOT JSON_VALID(p_payload_json) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_payload_json is not valid JSON';
    END IF;
    IF (p_payload_ref_type IS NULL) <> (p_payload_ref_id IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_payload_ref_type and p_payload_ref_id must be given together';
    END IF;
    IF LENGTH(p_payload_ref_type) NOT BETWEEN 1 AND 64 OR p_payload_ref_type REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_payload_ref_type must be 1 to 64 bytes without control characters';
    END IF;
    IF LENGTH(p_payload_ref_id) NOT BETWEEN 1 AND 128 OR p_payload_ref_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_payload_ref_id must be 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_company_id) NOT BETWEEN 1 AND 128 OR p_company_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_company_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_workspace_id) NOT BETWEEN 1 AND 128 OR p_workspace_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_workspace_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_project_id) NOT BETWEEN 1 AND 128 OR p_project_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_project_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_meeting_room_id) NOT BETWEEN 1 AND 128 OR p_meeting_room_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_meeting_room_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_message_id) NOT BETWEEN 1 AND 128 OR p_message_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_message_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_routing_decision_id) NOT BETWEEN 1 AND 128 OR p_routing_decision_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_routing_decision_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_memory_update_id) NOT BETWEEN 1 AND 128 OR p_memory_update_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_memory_update_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    IF LENGTH(p_assignment_id) NOT BETWEEN 1 AND 128 OR p_assignment_id REGEXP '[[:cntrl:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_assignment_id must be NULL or 1 to 128 bytes without control characters';
    END IF;
    SET v_available_at_utc = COALESCE(p_available_at_utc, v_now_ms);
    IF p_available_at_utc IS NOT NULL AND p_expires_at_utc <= p_available_at_utc THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_expires_at_utc must be later than p_available_at_utc';
    END IF;
    IF p_expires_at_utc <= v_now_ms THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: p_expires_at_utc is already in the past';
    END IF;

    -- ---- the caller's transaction must be open ----
    -- Under autocommit every statement below would commit on its own: the head row would be
    -- unlocked before the event row exists, and a reader could page past a sequence number
    -- that commits later. A savepoint only survives the statement that set it inside a
    -- transaction, so rolling back to it fails (error 1305) exactly when there is none.
    BEGIN
        DECLARE EXIT HANDLER FOR 1305 SET v_in_transaction = 0;
        SAVEPOINT agent_inbox_publish_check;
        ROLLBACK TO SAVEPOINT agent_inbox_publish_check;
        RELEASE SAVEPOINT agent_inbox_publish_check;
    END;
    IF v_in_transaction = 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
            'agent_inbox_publish: call it inside a transaction (START TRANSACTION ... COMMIT)';
    END IF;

    SET v_tenant_id = p_tenant_id;
    SET v_recipient_kind = p_recipient_kind;
    SET v_recipient_id = p_recipient_id;
    SET v_event_type = p_event_type;
    SET v_deduplication_key = p_deduplication_key;
    SET v_priority = COALESCE(p_priority, 2);
    SET v_max_attempts = COALESCE(p_max_attempts, 10);

    -- ---- the recipient's head: create or lock it; it stays locked until the caller commits ----
    IF v_deduplication_key IS NULL THEN
        INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc)
            VALUES (v_tenant_id, v_recipient_kind, v_recipient_id, 1, 1, v_now_ms)
            ON DUPLICATE KEY UPDATE head_seq = head_seq + 1;
        SELECT head_seq INTO v_inbox_seq FROM inbox_head
            WHERE tenant_id = v_tenant_id AND recipient_kind = v_recipient_kind AND recipient_id = v_recipient_id
            FOR UPDATE;
    ELSE
        INSERT INTO inbox_head (tenant_id, recipient_kind, recipient_id, head_seq, oldest_available_seq, updated_at_utc)
            VALUES (v_tenant_id, v_recipient_kind, v_recipient_id, 0, 1, v_now_ms)
            ON DUPLICATE KEY UPDATE head_seq = head_seq;
        SELECT head_seq INTO v_head_seq FROM inbox_head
            WHERE tenant_id = v_tenant_id AND recipient_kind = v_recipient_kind AND recipient_id = v_recipient_id
            FOR UPDATE;
        -- With the head locked, every earlier publish to this recipient has committed. A
        -- plain read sees them all unless the caller's REPEATABLE READ snapshot predates one
        -- of them, which shows as a snapshot head behind the locked one; only then read the
        -- key with a lock, which sees the latest rows (a plain read would miss the row and
        -- the insert below would fail on the unique key).
        SELECT MAX(head_seq) INTO v_snapshot_head_seq FROM inbox_head
            WHERE tenant_id = v_tenant_id AND recipient_kind = v_recipient_kind AND recipient_id = v_recipient_id;
        IF v_snapshot_head_seq <=> v_head_seq THEN
            SELECT MAX(event_id), MAX(inbox_seq) INTO v_existing_event_id, v_existing_seq FROM agent_inbox
                WHERE tenant_id = v_tenant_id AND recipient_kind = v_recipient_kind
                  AND recipient_id = v_recipient_id AND deduplication_key = v_deduplication_key;
        ELSE
            SELECT MAX(event_id), MAX(inbox_seq) INTO v_existing_event_id, v_existing_seq FROM agent_inbox
                WHERE tenant_id = v_tenant_id AND recipient_kind = v_recipient_kind
                  AND recipient_id = v_recipient_id AND deduplication_key = v_deduplication_key
                LOCK IN SHARE MODE;
        END IF;
        IF v_existing_seq IS NOT NULL THEN
            -- The key is taken: return that event and write nothing.
            SET p_event_id = v_existing_event_id;
            SET p_inbox_seq = v_existing_seq;
            SET p_deduplicated = 1;
        ELSE
            UPDATE inbox_head SET head_seq = head_seq + 1, updated_at_utc = v_now_ms
                WHERE tenant_id = v_tenant_id AND recipient_kind = v_recipient_kind AND recipient_id = v_recipient_id;
            SET v_inbox_seq = v_head_seq + 1;
        END IF;
    END IF;

    IF p_deduplicated IS NULL THEN
        -- A UUIDv7: 48 bits of Unix milliseconds, version 7, 12 random bits, variant 10, 62
        -- random bits. RANDOM_BYTES arrived in MariaDB 10.10; before it, hash a UUID() (unique
        -- per server) with RAND() instead.
        BEGIN
            DECLARE EXIT HANDLER FOR 1305
                SET v_random = UNHEX(SUBSTRING(SHA2(CONCAT(UUID(), RAND(), CONNECTION_ID()), 256), 1, 20));
            SET v_random = RANDOM_BYTES(10);
        END;
        SET v_event_id = CONCAT(
            UNHEX(LPAD(HEX(v_now_ms), 12, '0')),
            CHAR(112 | (ASCII(SUBSTRING(v_random, 1, 1)) & 15)),
            SUBSTRING(v_random, 2, 1),
            CHAR(128 | (ASCII(SUBSTRING(v_random, 3, 1)) & 63)),
            SUBSTRING(v_random, 4, 7));

        INSERT INTO agent_inbox (tenant_id, recipient_kind, recipient_id, inbox_seq, event_id,
            event_type, priority, availability_at_utc, expires_at_utc, deduplication_key, ack_state,
            delivery_attempts, max_attempts, visibility_lease_until_utc, lease_token_hash,
            lease_owner_session_id, next_retry_at_utc, dead_letter_state, company_id, workspace_id,
            project_id, meeting_room_id, message_id, routing_decision_id, memory_update_id,
            assignment_id, payload_json, payload_ref_type, payload_ref_id, created_at_utc,
            acked_at_utc, updated_at_utc, terminal_at_utc, last_error)
        VALUES (v_tenant_id, v_recipient_kind, v_recipient_id, v_inbox_seq, v_event_id,
            v_event_type, v_priority, v_available_at_utc, p_expires_at_utc, v_deduplication_key, 'available',
            0, v_max_attempts, NULL, NULL,
            NULL, NULL, 'none', p_company_id, p_workspace_id,
            p_project_id, p_meeting_room_id, p_message_id, p_routing_decision_id, p_memory_update_id,
            p_assignment_id, p_payload_json, p_payload_ref_type, p_payload_ref_id, v_now_ms,
            NULL, v_now_ms, NULL, NULL);

        -- Identifiers were checked above, so none needs JSON escaping; the text matches what
        -- the Rust store writes: [["agent","alpha",42]].
        INSERT INTO outbox_signal (tenant_id, signal_type, recipient_heads, n_recipients, status,
            attempt_count, created_at_utc)
        VALUES (v_tenant_id, 'inbox.updated',
            CONCAT('[["', v_recipient_kind, '","', v_recipient_id, '",', v_inbox_seq, ']]'),
            1, 'pending', 0, v_now_ms);

        SET p_event_id = v_event_id;
        SET p_inbox_seq = v_inbox_seq;
        SET p_deduplicated = 0;
    END IF;
END
