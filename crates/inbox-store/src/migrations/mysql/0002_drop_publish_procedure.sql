-- Clears the way for 0003, which creates agent_inbox_publish. MySQL 8.0 has no
-- CREATE OR REPLACE PROCEDURE, so a routine is replaced by dropping it in a migration of its
-- own (a routine's file holds exactly one statement) and creating it in the next.
DROP PROCEDURE IF EXISTS agent_inbox_publish;
