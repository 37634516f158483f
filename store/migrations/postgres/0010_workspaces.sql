-- Each task's workspace as of its last committed change (workspace.go):
-- one row of totals per task, and one row per file with its content. A
-- step's changed files are written with the step's outcome, in its
-- transaction. SQLite's v12.

CREATE TABLE workspaces (
	task_id TEXT    PRIMARY KEY REFERENCES tasks (id),
	attempt BIGINT NOT NULL CHECK (attempt >= 0),
	files   BIGINT NOT NULL CHECK (files >= 0),
	bytes   BIGINT NOT NULL CHECK (bytes >= 0)
);

CREATE TABLE workspace_files (
	task_id TEXT    NOT NULL REFERENCES tasks (id),
	path    TEXT    NOT NULL CHECK (length(path) BETWEEN 1 AND 4096),
	mode    BIGINT NOT NULL CHECK (mode >= 0),
	size    BIGINT NOT NULL CHECK (size >= 0),
	sha256  TEXT    NOT NULL CHECK (length(sha256) = 64),
	content BYTEA NOT NULL,
	attempt BIGINT NOT NULL CHECK (attempt >= 0),
	PRIMARY KEY (task_id, path)
);
