-- The token and output budgets (budgets.go). Unlike the call budgets,
-- used may pass limit: a call is charged as observed, in full, and the one
-- that crossed the limit fails the task (as wall time may overshoot).
-- model_tokens_estimated counts the calls whose tokens the host estimated.
-- A task created before them gets the configured caps' defaults
-- (UnbudgetedModelTokens, UnbudgetedOutputBytes in migrate.go).
--
-- Approval tiers: an approval is bound to the effect it gates (its
-- fingerprint, and the subject an allow-for-task pattern matches: a
-- shell.run command, a tool's arguments as the approver saw them) and says
-- its tier: once, or for the rest of its task for the same tool and a
-- declared pattern ('' = the same subject).

ALTER TABLE tasks ADD COLUMN model_tokens_limit INTEGER NOT NULL DEFAULT 100000000 CHECK (model_tokens_limit >= 0);

ALTER TABLE tasks ADD COLUMN model_tokens_used INTEGER NOT NULL DEFAULT 0 CHECK (model_tokens_used >= 0);

ALTER TABLE tasks ADD COLUMN model_tokens_estimated INTEGER NOT NULL DEFAULT 0 CHECK (model_tokens_estimated >= 0);

ALTER TABLE tasks ADD COLUMN output_bytes_limit INTEGER NOT NULL DEFAULT 1073741824 CHECK (output_bytes_limit >= 0);

ALTER TABLE tasks ADD COLUMN output_bytes_used INTEGER NOT NULL DEFAULT 0 CHECK (output_bytes_used >= 0);

ALTER TABLE approvals ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '' CHECK (length(fingerprint) <= 128);

ALTER TABLE approvals ADD COLUMN subject TEXT NOT NULL DEFAULT '' CHECK (length(subject) <= 2000);

ALTER TABLE approvals ADD COLUMN scope TEXT NOT NULL DEFAULT 'once' CHECK (scope IN ('once','task'));

ALTER TABLE approvals ADD COLUMN pattern TEXT NOT NULL DEFAULT '' CHECK (length(pattern) <= 256);

CREATE INDEX approvals_grants ON approvals (task_id, tool) WHERE scope = 'task' AND status = 'approved';
