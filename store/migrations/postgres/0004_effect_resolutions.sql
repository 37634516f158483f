-- SQLite's v7.
--
-- An unsettled tool effect (DESIGN §6) stays so until it is resolved,
-- durably: retry_authorized (resolved_by is the approval's id, or
-- operator:<principal>) or abandoned (executor, or operator:<principal>).
-- '' is an effect that never needed one.

ALTER TABLE effects ADD COLUMN resolution TEXT NOT NULL DEFAULT '' CHECK (resolution IN ('','unsettled','retry_authorized','abandoned'));

ALTER TABLE effects ADD COLUMN resolved_by TEXT NOT NULL DEFAULT '' CHECK (length(resolved_by) <= 300);

ALTER TABLE effects ADD COLUMN resolved_ns BIGINT;

-- The gate looks up a task's unresolved effects on every tool call.
CREATE INDEX effects_unresolved ON effects (task_id) WHERE resolution = 'unsettled';

-- The tool effects an older binary left unsettled get their durable state:
-- every indeterminate one (an older gate re-admitted none for good, so none
-- is known to be settled), and those observed without a kept result in an
-- attempt after the task's last completed one — before it, a result can
-- have been dropped by that completion, and the older binary held them
-- settled.
UPDATE effects SET resolution = 'unsettled'
	WHERE kind = 'tool' AND (status = 'indeterminate' OR (status = 'observed' AND result IS NULL AND replayed = 0
		AND attempt > coalesce((SELECT max(a.number) FROM attempts a WHERE a.task_id = effects.task_id AND a.status = 'completed'), 0)));
