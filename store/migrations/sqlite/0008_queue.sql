-- The queue: when each pending task entered it (older pending tasks
-- entered it when they were created), and the host a task is held for.

ALTER TABLE tasks ADD COLUMN queued_ns INTEGER NOT NULL DEFAULT 0;

ALTER TABLE tasks ADD COLUMN queue_host TEXT NOT NULL DEFAULT '' CHECK (length(queue_host) <= 64);

UPDATE tasks SET queued_ns = created_ns WHERE status = 'pending';

-- Admission counts the queue and a free slot reads its head: a partial
-- index keeps both small however long the history.
CREATE INDEX tasks_queue ON tasks (queued_ns, seq) WHERE status = 'pending';
