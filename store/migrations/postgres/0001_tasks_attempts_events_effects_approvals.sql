-- SQLite's v1..v4 at once (PostgreSQL support began there). Types are
-- SQLite's, spelled for PostgreSQL: 64-bit integers throughout (SQLite's
-- INTEGER), BYTEA for BLOB, identity columns for AUTOINCREMENT; every
-- CHECK is the same.
--
-- The two functions were for queries written in SQLite's text, where max
-- and min of two arguments are scalar functions; the statements now say
-- greatest and least, and v9 drops them (a released file is never
-- edited).

CREATE FUNCTION max(a BIGINT, b BIGINT) RETURNS BIGINT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT greatest(a, b)';

CREATE FUNCTION min(a BIGINT, b BIGINT) RETURNS BIGINT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT least(a, b)';

CREATE TABLE tasks (
			seq                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			id                 TEXT   NOT NULL UNIQUE CHECK (length(id) BETWEEN 1 AND 128),
			principal_id       TEXT   NOT NULL CHECK (length(principal_id) BETWEEN 1 AND 256),
			executor           TEXT   NOT NULL CHECK (length(executor) BETWEEN 1 AND 64),
			spec               BYTEA  NOT NULL,
			status             TEXT   NOT NULL CHECK (status IN ('pending','running','waiting_approval','completed','failed','cancelled','interrupted')),
			reason             TEXT   NOT NULL DEFAULT '',
			message            TEXT   NOT NULL DEFAULT '',
			run_id             BIGINT NOT NULL DEFAULT 0 CHECK (run_id >= 0),
			steps_limit        BIGINT NOT NULL CHECK (steps_limit >= 0),
			steps_used         BIGINT NOT NULL DEFAULT 0 CHECK (steps_used >= 0 AND steps_used <= steps_limit),
			tool_calls_limit   BIGINT NOT NULL CHECK (tool_calls_limit >= 0),
			tool_calls_used    BIGINT NOT NULL DEFAULT 0 CHECK (tool_calls_used >= 0 AND tool_calls_used <= tool_calls_limit),
			model_calls_limit  BIGINT NOT NULL CHECK (model_calls_limit >= 0),
			model_calls_used   BIGINT NOT NULL DEFAULT 0 CHECK (model_calls_used >= 0 AND model_calls_used <= model_calls_limit),
			depth_limit        BIGINT NOT NULL CHECK (depth_limit >= 0),
			depth_used         BIGINT NOT NULL DEFAULT 0 CHECK (depth_used >= 0 AND depth_used <= depth_limit),
			wall_ms_limit      BIGINT NOT NULL CHECK (wall_ms_limit >= 0),
			wall_ms_used       BIGINT NOT NULL DEFAULT 0 CHECK (wall_ms_used >= 0),
			checkpoint         BYTEA,
			result             BYTEA,
			created_ns         BIGINT NOT NULL,
			updated_ns         BIGINT NOT NULL,
			checkpoint_attempt BIGINT NOT NULL DEFAULT 0 CHECK (checkpoint_attempt >= 0)
		);

CREATE INDEX tasks_principal_seq ON tasks (principal_id, seq);

CREATE INDEX tasks_live ON tasks (status) WHERE status IN ('running','waiting_approval');

CREATE INDEX tasks_finished ON tasks (updated_ns) WHERE status IN ('completed','failed','cancelled');

CREATE TABLE attempts (
			task_id     TEXT   NOT NULL REFERENCES tasks (id),
			number      BIGINT NOT NULL CHECK (number >= 1),
			run_id      BIGINT NOT NULL CHECK (run_id >= 1),
			status      TEXT   NOT NULL CHECK (status IN ('running','completed','failed','interrupted','cancelled')),
			outcome     TEXT   NOT NULL DEFAULT '' CHECK (outcome IN ('','continue','complete','fail')),
			summary     TEXT   NOT NULL DEFAULT '',
			reason      TEXT   NOT NULL DEFAULT '',
			message     TEXT   NOT NULL DEFAULT '',
			started_ns  BIGINT NOT NULL,
			ended_ns    BIGINT,
			exit_code   BIGINT NOT NULL DEFAULT -1,
			exit_signal TEXT   NOT NULL DEFAULT '',
			stderr_tail TEXT   NOT NULL DEFAULT '',
			PRIMARY KEY (task_id, number),
			CHECK ((status = 'running') = (ended_ns IS NULL))
		);

CREATE INDEX attempts_running ON attempts (task_id) WHERE status = 'running';

CREATE TABLE events (
			seq     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			task_id TEXT   NOT NULL REFERENCES tasks (id),
			run_id  BIGINT NOT NULL CHECK (run_id >= 0),
			type    TEXT   NOT NULL CHECK (length(type) BETWEEN 1 AND 64),
			time_ns BIGINT NOT NULL,
			payload BYTEA  NOT NULL
		);

CREATE INDEX events_task_seq ON events (task_id, seq);

CREATE TABLE effects (
			task_id         TEXT   NOT NULL REFERENCES tasks (id),
			attempt         BIGINT NOT NULL CHECK (attempt >= 1),
			seq             BIGINT NOT NULL CHECK (seq >= 1),
			kind            TEXT   NOT NULL CHECK (kind IN ('model','tool','approval')),
			fingerprint     TEXT   NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 128),
			idempotency_key TEXT   NOT NULL DEFAULT '' CHECK (length(idempotency_key) <= 128),
			status          TEXT   NOT NULL CHECK (status IN ('admitted','dispatching','observed','failed','indeterminate')),
			summary         TEXT   NOT NULL DEFAULT '' CHECK (length(summary) <= 256),
			depth           BIGINT NOT NULL DEFAULT 0 CHECK (depth >= 0),
			replayed        BIGINT NOT NULL DEFAULT 0 CHECK (replayed IN (0, 1)),
			result          BYTEA,
			created_ns      BIGINT NOT NULL,
			updated_ns      BIGINT NOT NULL,
			PRIMARY KEY (task_id, attempt, seq)
		);

CREATE INDEX effects_unsettled ON effects (status) WHERE status IN ('admitted','dispatching');

CREATE TABLE approvals (
			id           TEXT   PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
			task_id      TEXT   NOT NULL REFERENCES tasks (id),
			principal_id TEXT   NOT NULL,
			run_id       BIGINT NOT NULL,
			attempt      BIGINT NOT NULL,
			seq          BIGINT NOT NULL,
			tool         TEXT   NOT NULL DEFAULT '',
			prompt       TEXT   NOT NULL DEFAULT '' CHECK (length(prompt) <= 2000),
			status       TEXT   NOT NULL CHECK (status IN ('pending','approved','rejected','expired','cancelled')),
			created_ns   BIGINT NOT NULL,
			expires_ns   BIGINT NOT NULL,
			resolved_ns  BIGINT
		);

CREATE INDEX approvals_principal ON approvals (principal_id, created_ns);

CREATE INDEX approvals_task ON approvals (task_id, status);

CREATE INDEX approvals_pending ON approvals (status) WHERE status = 'pending';
