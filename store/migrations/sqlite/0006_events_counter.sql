-- How many events the task holds, kept in the transaction of every insert
-- and trim of them, so that a writer knows whether to trim without walking
-- the task's events (events.go). Existing tasks are counted once here; a
-- task without events keeps the default 0.

ALTER TABLE tasks ADD COLUMN events_stored INTEGER NOT NULL DEFAULT 0 CHECK (events_stored >= 0);

UPDATE tasks SET events_stored = (SELECT count(*) FROM events WHERE events.task_id = tasks.id)
	WHERE id IN (SELECT task_id FROM events);
