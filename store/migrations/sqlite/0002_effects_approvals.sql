-- The effect ledger (DESIGN §6) and the approvals. An effect's result is
-- held only while its attempt is in flight, for replay by (seq,
-- fingerprint); it is dropped when an attempt's outcome commits. Nothing
-- else of a payload is stored.

CREATE TABLE effects (
			task_id         TEXT    NOT NULL REFERENCES tasks (id),
			attempt         INTEGER NOT NULL CHECK (attempt >= 1),
			seq             INTEGER NOT NULL CHECK (seq >= 1),
			kind            TEXT    NOT NULL CHECK (kind IN ('model','tool','approval')),
			fingerprint     TEXT    NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 128),
			idempotency_key TEXT    NOT NULL DEFAULT '' CHECK (length(idempotency_key) <= 128),
			status          TEXT    NOT NULL CHECK (status IN ('admitted','dispatching','observed','failed','indeterminate')),
			summary         TEXT    NOT NULL DEFAULT '' CHECK (length(summary) <= 256),
			depth           INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
			replayed        INTEGER NOT NULL DEFAULT 0 CHECK (replayed IN (0, 1)),
			result          BLOB,
			created_ns      INTEGER NOT NULL,
			updated_ns      INTEGER NOT NULL,
			PRIMARY KEY (task_id, attempt, seq)
		) STRICT, WITHOUT ROWID;

CREATE INDEX effects_unsettled ON effects (status) WHERE status IN ('admitted','dispatching');

CREATE TABLE approvals (
			id           TEXT    PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
			task_id      TEXT    NOT NULL REFERENCES tasks (id),
			principal_id TEXT    NOT NULL,
			run_id       INTEGER NOT NULL,
			attempt      INTEGER NOT NULL,
			seq          INTEGER NOT NULL,
			tool         TEXT    NOT NULL DEFAULT '',
			prompt       TEXT    NOT NULL DEFAULT '' CHECK (length(prompt) <= 2000),
			status       TEXT    NOT NULL CHECK (status IN ('pending','approved','rejected','expired','cancelled')),
			created_ns   INTEGER NOT NULL,
			expires_ns   INTEGER NOT NULL,
			resolved_ns  INTEGER
		) STRICT;

CREATE INDEX approvals_principal ON approvals (principal_id, created_ns);

CREATE INDEX approvals_task ON approvals (task_id, status);

CREATE INDEX approvals_pending ON approvals (status) WHERE status = 'pending';
