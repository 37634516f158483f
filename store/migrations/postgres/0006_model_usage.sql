-- SQLite's v9: the model calls' usage by attempt (usage.go).

CREATE TABLE model_usage (
	task_id           TEXT   NOT NULL REFERENCES tasks (id),
	attempt           BIGINT NOT NULL CHECK (attempt >= 1),
	calls             BIGINT NOT NULL DEFAULT 0 CHECK (calls >= 0),
	prompt_tokens     BIGINT NOT NULL DEFAULT 0 CHECK (prompt_tokens >= 0),
	completion_tokens BIGINT NOT NULL DEFAULT 0 CHECK (completion_tokens >= 0),
	model_ms          BIGINT NOT NULL DEFAULT 0 CHECK (model_ms >= 0),
	PRIMARY KEY (task_id, attempt)
);
