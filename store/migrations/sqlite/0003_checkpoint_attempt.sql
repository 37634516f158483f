-- The attempt that wrote the task's current checkpoint, set in the same
-- statement that stores the checkpoint. The host refuses an envelope sealed
-- at any other attempt: an older envelope of the same task written back
-- into the row (a rollback) no longer verifies. 0 means no checkpoint was
-- ever written. Existing checkpoints are filled in by Go code after this
-- file (fillCheckpointAttempts, migrate_v3.go): the attempt is in the
-- envelope's header, which SQL cannot read.

ALTER TABLE tasks ADD COLUMN checkpoint_attempt INTEGER NOT NULL DEFAULT 0 CHECK (checkpoint_attempt >= 0);
