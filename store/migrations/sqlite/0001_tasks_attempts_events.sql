-- The tasks, their attempts and their events.
--
-- STRICT: a value of the wrong type is an error, not a silent conversion.
-- The used <= limit checks make an over-charge impossible whatever the Go
-- code does; wall time has no such check because heartbeats may
-- legitimately overshoot the limit a little before the host notices and
-- fails the task.

CREATE TABLE tasks (
			seq               INTEGER PRIMARY KEY AUTOINCREMENT,
			id                TEXT    NOT NULL UNIQUE CHECK (length(id) BETWEEN 1 AND 128),
			principal_id      TEXT    NOT NULL CHECK (length(principal_id) BETWEEN 1 AND 256),
			executor          TEXT    NOT NULL CHECK (length(executor) BETWEEN 1 AND 64),
			spec              BLOB    NOT NULL,
			status            TEXT    NOT NULL CHECK (status IN ('pending','running','waiting_approval','completed','failed','cancelled','interrupted')),
			reason            TEXT    NOT NULL DEFAULT '',
			message           TEXT    NOT NULL DEFAULT '',
			run_id            INTEGER NOT NULL DEFAULT 0 CHECK (run_id >= 0),
			steps_limit       INTEGER NOT NULL CHECK (steps_limit >= 0),
			steps_used        INTEGER NOT NULL DEFAULT 0 CHECK (steps_used >= 0 AND steps_used <= steps_limit),
			tool_calls_limit  INTEGER NOT NULL CHECK (tool_calls_limit >= 0),
			tool_calls_used   INTEGER NOT NULL DEFAULT 0 CHECK (tool_calls_used >= 0 AND tool_calls_used <= tool_calls_limit),
			model_calls_limit INTEGER NOT NULL CHECK (model_calls_limit >= 0),
			model_calls_used  INTEGER NOT NULL DEFAULT 0 CHECK (model_calls_used >= 0 AND model_calls_used <= model_calls_limit),
			depth_limit       INTEGER NOT NULL CHECK (depth_limit >= 0),
			depth_used        INTEGER NOT NULL DEFAULT 0 CHECK (depth_used >= 0 AND depth_used <= depth_limit),
			wall_ms_limit     INTEGER NOT NULL CHECK (wall_ms_limit >= 0),
			wall_ms_used      INTEGER NOT NULL DEFAULT 0 CHECK (wall_ms_used >= 0),
			checkpoint        BLOB,
			result            BLOB,
			created_ns        INTEGER NOT NULL,
			updated_ns        INTEGER NOT NULL
		) STRICT;

CREATE INDEX tasks_principal_seq ON tasks (principal_id, seq);

-- Recovery at start-up only looks at live tasks; a partial index keeps
-- that a small scan however many finished tasks there are.
CREATE INDEX tasks_live ON tasks (status) WHERE status IN ('running','waiting_approval');

CREATE TABLE attempts (
			task_id     TEXT    NOT NULL REFERENCES tasks (id),
			number      INTEGER NOT NULL CHECK (number >= 1),
			run_id      INTEGER NOT NULL CHECK (run_id >= 1),
			status      TEXT    NOT NULL CHECK (status IN ('running','completed','failed','interrupted','cancelled')),
			outcome     TEXT    NOT NULL DEFAULT '' CHECK (outcome IN ('','continue','complete','fail')),
			summary     TEXT    NOT NULL DEFAULT '',
			reason      TEXT    NOT NULL DEFAULT '',
			message     TEXT    NOT NULL DEFAULT '',
			started_ns  INTEGER NOT NULL,
			ended_ns    INTEGER,
			exit_code   INTEGER NOT NULL DEFAULT -1,
			exit_signal TEXT    NOT NULL DEFAULT '',
			stderr_tail TEXT    NOT NULL DEFAULT '',
			PRIMARY KEY (task_id, number),
			CHECK ((status = 'running') = (ended_ns IS NULL))
		) STRICT, WITHOUT ROWID;

-- Running attempts are few (at most one per live task): claims and
-- recovery find them here without walking a task's history.
CREATE INDEX attempts_running ON attempts (task_id) WHERE status = 'running';

CREATE TABLE events (
			seq     INTEGER PRIMARY KEY AUTOINCREMENT,
			task_id TEXT    NOT NULL REFERENCES tasks (id),
			run_id  INTEGER NOT NULL CHECK (run_id >= 0),
			type    TEXT    NOT NULL CHECK (length(type) BETWEEN 1 AND 64),
			time_ns INTEGER NOT NULL,
			payload BLOB    NOT NULL
		) STRICT;

CREATE INDEX events_task_seq ON events (task_id, seq);

-- Marks the file as a taskhost store ("tskh", applicationID in migrate.go).
PRAGMA application_id = 1953721192;
