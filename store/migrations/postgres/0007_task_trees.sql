-- SQLite's v10, with the status CHECK altered in place.
--
-- Task trees (tree.go): each task's parent, root and depth. Children are
-- read by parent, trees by root; roots are most tasks, so only children are
-- indexed.

ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;

ALTER TABLE tasks ADD CONSTRAINT tasks_status_check CHECK (status IN ('pending','running','waiting_approval','completed','failed','cancelled','interrupted','blocked'));

ALTER TABLE tasks ADD COLUMN parent_task_id TEXT NOT NULL DEFAULT '' CHECK (length(parent_task_id) <= 128);

ALTER TABLE tasks ADD COLUMN root_task_id TEXT NOT NULL DEFAULT '' CHECK (length(root_task_id) <= 128);

ALTER TABLE tasks ADD COLUMN tree_depth BIGINT NOT NULL DEFAULT 0 CHECK (tree_depth >= 0 AND tree_depth <= 8);

CREATE INDEX tasks_parent ON tasks (parent_task_id) WHERE parent_task_id <> '';

CREATE INDEX tasks_root ON tasks (root_task_id) WHERE root_task_id <> '';
