package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// pgVersionTable records, one row per migration, the PostgreSQL schema's
// history (SQLite keeps its version in PRAGMA user_version instead). Its
// name marks the database as a taskhost store.
const pgVersionTable = "taskhost_schema_version"

// pgMigrationLock is the advisory lock key under which a host migrates
// ("tskh"): two hosts opening a new database at once apply each migration
// once.
const pgMigrationLock = 0x74736b68

// pgMigrations is the PostgreSQL schema history, oldest first; like
// migrations, a released one is never edited. Version 1 is SQLite's v1..v4
// at once (PostgreSQL support began there). Types are SQLite's, spelled for
// PostgreSQL: 64-bit integers throughout (SQLite's INTEGER), BYTEA for BLOB,
// identity columns for AUTOINCREMENT; every CHECK is the same.
var pgMigrations = []migration{
	{version: 1, name: "tasks, attempts, events, effects, approvals", stmts: []string{
		// The queries are SQLite's text, in which max and min with two
		// arguments are scalar functions; these give the same text the
		// same meaning here (the planner inlines them).
		`CREATE FUNCTION max(a BIGINT, b BIGINT) RETURNS BIGINT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT greatest(a, b)'`,
		`CREATE FUNCTION min(a BIGINT, b BIGINT) RETURNS BIGINT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT least(a, b)'`,
		`CREATE TABLE tasks (
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
		)`,
		`CREATE INDEX tasks_principal_seq ON tasks (principal_id, seq)`,
		`CREATE INDEX tasks_live ON tasks (status) WHERE status IN ('running','waiting_approval')`,
		`CREATE INDEX tasks_finished ON tasks (updated_ns) WHERE status IN ('completed','failed','cancelled')`,
		`CREATE TABLE attempts (
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
		)`,
		`CREATE INDEX attempts_running ON attempts (task_id) WHERE status = 'running'`,
		`CREATE TABLE events (
			seq     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			task_id TEXT   NOT NULL REFERENCES tasks (id),
			run_id  BIGINT NOT NULL CHECK (run_id >= 0),
			type    TEXT   NOT NULL CHECK (length(type) BETWEEN 1 AND 64),
			time_ns BIGINT NOT NULL,
			payload BYTEA  NOT NULL
		)`,
		`CREATE INDEX events_task_seq ON events (task_id, seq)`,
		`CREATE TABLE effects (
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
		)`,
		`CREATE INDEX effects_unsettled ON effects (status) WHERE status IN ('admitted','dispatching')`,
		`CREATE TABLE approvals (
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
		)`,
		`CREATE INDEX approvals_principal ON approvals (principal_id, created_ns)`,
		`CREATE INDEX approvals_task ON approvals (task_id, status)`,
		`CREATE INDEX approvals_pending ON approvals (status) WHERE status = 'pending'`,
	}},
	{version: 2, name: "hosts, leases", stmts: []string{
		// SQLite's v5: the fleet's hosts and each run's lease (hosts.go).
		`CREATE TABLE hosts (
			id           TEXT   PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
			version      TEXT   NOT NULL DEFAULT '' CHECK (length(version) <= 64),
			started_ns   BIGINT NOT NULL,
			heartbeat_ns BIGINT NOT NULL
		)`,
		`ALTER TABLE tasks ADD COLUMN lease_host TEXT NOT NULL DEFAULT '' CHECK (length(lease_host) <= 64)`,
		`CREATE INDEX tasks_lease ON tasks (lease_host) WHERE status IN ('running','waiting_approval')`,
	}},
	{version: 3, name: "events counter", stmts: []string{
		// SQLite's v6: each task's count of stored events (events.go).
		`ALTER TABLE tasks ADD COLUMN events_stored BIGINT NOT NULL DEFAULT 0 CHECK (events_stored >= 0)`,
		qCountStoredEvents,
	}},
	{version: 4, name: "effect resolutions", stmts: []string{
		// SQLite's v7: each unsettled tool effect's durable resolution
		// (effects.go).
		`ALTER TABLE effects ADD COLUMN resolution TEXT NOT NULL DEFAULT '' CHECK (resolution IN ('','unsettled','retry_authorized','abandoned'))`,
		`ALTER TABLE effects ADD COLUMN resolved_by TEXT NOT NULL DEFAULT '' CHECK (length(resolved_by) <= 300)`,
		`ALTER TABLE effects ADD COLUMN resolved_ns BIGINT`,
		`CREATE INDEX effects_unresolved ON effects (task_id) WHERE resolution = 'unsettled'`,
		qMarkOldUnsettled,
	}},
	{version: 5, name: "queue", stmts: queueMigration("BIGINT")},
	// SQLite's v9: the model calls' usage by attempt (usage.go).
	{version: 6, name: "model usage", stmts: []string{qCreateUsage}},
	{version: 7, name: "task trees", stmts: append([]string{
		`ALTER TABLE tasks DROP CONSTRAINT tasks_status_check`,
		`ALTER TABLE tasks ADD CONSTRAINT tasks_status_check CHECK (status IN (` + taskStatusList + `))`,
	}, treeMigration("BIGINT")...)},
	// SQLite's v11: the token and output budgets (budgets.go).
	{version: 8, name: "token and output budgets, approval tiers", stmts: append(budgetColumns("BIGINT"), approvalTierColumns...)},
}

// pgSchemaVersion is the PostgreSQL schema version this binary writes and
// reads.
func pgSchemaVersion() int { return pgMigrations[len(pgMigrations)-1].version }

// migratePG applies, in order, every PostgreSQL migration above the
// database's version up to and including target, each in its own
// transaction with its row in pgVersionTable, so a crash leaves the
// database at some whole version.
func migratePG(ctx context.Context, db *sql.DB, target int) error {
	return applyMigrations(ctx, db, pgMigrations, target, applyPGMigration)
}

func applyPGMigration(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// Held to the end of the transaction: the version is read under it, so
	// two hosts cannot both apply m.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgMigrationLock)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgVersionTable+` (
			version    INTEGER PRIMARY KEY CHECK (version >= 1),
			name       TEXT    NOT NULL,
			applied_ns BIGINT  NOT NULL
		)`); err != nil {
		return err
	}
	var cur int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+pgVersionTable).Scan(&cur); err != nil {
		return err
	}
	if cur >= m.version {
		return nil
	}
	if cur != m.version-1 {
		return fmt.Errorf("database is at schema version %d, expected %d", cur, m.version-1)
	}
	for _, stmt := range m.stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	if m.fill != nil {
		if err := m.fill(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+pgVersionTable+` (version, name, applied_ns) VALUES ($1, $2, $3)`,
		m.version, m.name, nanos(time.Now())); err != nil {
		return err
	}
	return tx.Commit()
}
