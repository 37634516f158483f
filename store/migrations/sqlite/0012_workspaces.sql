-- Each task's workspace as of its last committed change (workspace.go):
-- one row of totals per task, and one row per file with its content. A
-- step's changed files are written with the step's outcome, in its
-- transaction.

CREATE TABLE workspaces (
	task_id TEXT    PRIMARY KEY REFERENCES tasks (id),
	attempt INTEGER NOT NULL CHECK (attempt >= 0),
	files   INTEGER NOT NULL CHECK (files >= 0),
	bytes   INTEGER NOT NULL CHECK (bytes >= 0)
) STRICT;

CREATE TABLE workspace_files (
	task_id TEXT    NOT NULL REFERENCES tasks (id),
	path    TEXT    NOT NULL CHECK (length(path) BETWEEN 1 AND 4096),
	mode    INTEGER NOT NULL CHECK (mode >= 0),
	size    INTEGER NOT NULL CHECK (size >= 0),
	sha256  TEXT    NOT NULL CHECK (length(sha256) = 64),
	content BLOB NOT NULL,
	attempt INTEGER NOT NULL CHECK (attempt >= 0),
	PRIMARY KEY (task_id, path)
) STRICT;
