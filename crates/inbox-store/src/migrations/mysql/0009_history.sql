-- Each event's history, kept with its row so retention moves it to the archive with the
-- event: newline-terminated JSON objects, one per transition, appended in the statement that
-- makes the transition (see inbox/history.rs). NULL until the first transition.

ALTER TABLE agent_inbox ADD COLUMN history_json MEDIUMTEXT NULL;

ALTER TABLE agent_inbox_archive ADD COLUMN history_json MEDIUMTEXT NULL;
