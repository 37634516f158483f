-- SQLite's v6: each task's count of stored events (events.go).

ALTER TABLE tasks ADD COLUMN events_stored BIGINT NOT NULL DEFAULT 0 CHECK (events_stored >= 0);

UPDATE tasks SET events_stored = (SELECT count(*) FROM events WHERE events.task_id = tasks.id)
	WHERE id IN (SELECT task_id FROM events);
