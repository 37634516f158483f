-- The trees SettleTrees visits at every run's end (tree.go, qLiveTrees):
-- those with a child that has not ended or a task blocked on its children.
-- The partial index holds only those tasks, so finding them reads what is
-- live in trees, never the store's history of finished tasks.

CREATE INDEX tasks_tree_live ON tasks (root_task_id, principal_id)
	WHERE status NOT IN ('completed','failed','cancelled') AND (parent_task_id <> '' OR status = 'blocked');
