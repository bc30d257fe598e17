-- Each event's history, kept with its row. See the MySQL file for the reasons.

ALTER TABLE agent_inbox ADD COLUMN history_json TEXT NULL;

ALTER TABLE agent_inbox_archive ADD COLUMN history_json TEXT NULL;
