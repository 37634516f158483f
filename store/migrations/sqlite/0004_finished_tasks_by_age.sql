-- The retention sweep looks for finished tasks oldest first; a partial
-- index keeps that a search however large the history.

CREATE INDEX tasks_finished ON tasks (updated_ns) WHERE status IN ('completed','failed','cancelled');
