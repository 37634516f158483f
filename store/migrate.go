package store

import (
	"context"
	"database/sql"
	"fmt"
)

// applicationID marks a SQLite file as a taskhost store ("tskh"), so Open can
// tell its own file from another application's database and refuse the latter
// instead of migrating tables into it.
const applicationID = 0x74736b68

// migration is one step of the schema history. Versions are 1, 2, 3, ... in
// order; PRAGMA user_version records the last one applied. A released
// migration is never edited: a change of schema is a new migration appended
// to the list — and its PostgreSQL spelling appended to pgMigrations, whose
// versions are numbered apart (TestPostgresMigrations and the store suite
// on both engines check they agree).
type migration struct {
	version int
	name    string
	stmts   []string
	// fill, if set, runs after stmts in the same transaction: a back-fill
	// that needs Go code rather than SQL.
	fill func(ctx context.Context, tx *sql.Tx) error
	// rebuildsTables: the migration drops and re-creates a table other
	// tables reference, which SQLite allows only with foreign keys off
	// on the connection (they cannot be switched inside a transaction);
	// the whole change is still one transaction, checked with
	// foreign_key_check before it commits.
	rebuildsTables bool
}

// migrations is the whole schema history, oldest first.
var migrations = []migration{
	{version: 1, name: "tasks, attempts, events", stmts: []string{
		// STRICT: a value of the wrong type is an error, not a silent
		// conversion. The used <= limit checks make an over-charge
		// impossible whatever the Go code does; wall time has no such check
		// because heartbeats may legitimately overshoot the limit a little
		// before the host notices and fails the task.
		`CREATE TABLE tasks (
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
		) STRICT`,
		`CREATE INDEX tasks_principal_seq ON tasks (principal_id, seq)`,
		// Recovery at start-up only looks at live tasks; a partial index
		// keeps that a small scan however many finished tasks there are.
		`CREATE INDEX tasks_live ON tasks (status) WHERE status IN ('running','waiting_approval')`,
		`CREATE TABLE attempts (
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
		) STRICT, WITHOUT ROWID`,
		// Running attempts are few (at most one per live task): claims and
		// recovery find them here without walking a task's history.
		`CREATE INDEX attempts_running ON attempts (task_id) WHERE status = 'running'`,
		`CREATE TABLE events (
			seq     INTEGER PRIMARY KEY AUTOINCREMENT,
			task_id TEXT    NOT NULL REFERENCES tasks (id),
			run_id  INTEGER NOT NULL CHECK (run_id >= 0),
			type    TEXT    NOT NULL CHECK (length(type) BETWEEN 1 AND 64),
			time_ns INTEGER NOT NULL,
			payload BLOB    NOT NULL
		) STRICT`,
		`CREATE INDEX events_task_seq ON events (task_id, seq)`,
		fmt.Sprintf(`PRAGMA application_id = %d`, applicationID),
	}},
	{version: 2, name: "effects, approvals", stmts: []string{
		// The effect ledger (DESIGN §6). result holds the observed result of
		// an effect only while its attempt is in flight, for replay by
		// (seq, fingerprint); it is dropped when an attempt's outcome
		// commits. Nothing else of a payload is stored.
		`CREATE TABLE effects (
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
		) STRICT, WITHOUT ROWID`,
		`CREATE INDEX effects_unsettled ON effects (status) WHERE status IN ('admitted','dispatching')`,
		`CREATE TABLE approvals (
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
		) STRICT`,
		`CREATE INDEX approvals_principal ON approvals (principal_id, created_ns)`,
		`CREATE INDEX approvals_task ON approvals (task_id, status)`,
		`CREATE INDEX approvals_pending ON approvals (status) WHERE status = 'pending'`,
	}},
	{version: 3, name: "checkpoint attempt", stmts: []string{
		// The attempt that wrote the task's current checkpoint, set in the
		// same statement that stores the checkpoint. The host refuses an
		// envelope sealed at any other attempt: an older envelope of the same
		// task written back into the row (a rollback) no longer verifies.
		// 0 means no checkpoint was ever written.
		`ALTER TABLE tasks ADD COLUMN checkpoint_attempt INTEGER NOT NULL DEFAULT 0 CHECK (checkpoint_attempt >= 0)`,
	}, fill: fillCheckpointAttempts},
	{version: 4, name: "finished tasks by age", stmts: []string{
		// The retention sweep looks for finished tasks oldest first; a
		// partial index keeps that a search however large the history.
		`CREATE INDEX tasks_finished ON tasks (updated_ns) WHERE status IN ('completed','failed','cancelled')`,
	}},
	{version: 5, name: "hosts, leases", stmts: []string{
		// One row per host of a fleet sharing this store (hosts.go): a host
		// whose heartbeat is older than the lease loses its running tasks.
		`CREATE TABLE hosts (
			id           TEXT    PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
			version      TEXT    NOT NULL DEFAULT '' CHECK (length(version) <= 64),
			started_ns   INTEGER NOT NULL,
			heartbeat_ns INTEGER NOT NULL
		) STRICT`,
		// The host holding the task's current run; '' for runs started
		// before fleets existed (or by an unnamed host). The run id is the
		// lease epoch.
		`ALTER TABLE tasks ADD COLUMN lease_host TEXT NOT NULL DEFAULT '' CHECK (length(lease_host) <= 64)`,
		// The sweep for lost hosts looks only at live tasks.
		`CREATE INDEX tasks_lease ON tasks (lease_host) WHERE status IN ('running','waiting_approval')`,
	}},
	{version: 6, name: "events counter", stmts: []string{
		// How many events the task holds, kept in the transaction of every
		// insert and trim of them, so that a writer knows whether to trim
		// without walking the task's events (events.go).
		`ALTER TABLE tasks ADD COLUMN events_stored INTEGER NOT NULL DEFAULT 0 CHECK (events_stored >= 0)`,
		qCountStoredEvents,
	}},
	{version: 7, name: "effect resolutions", stmts: []string{
		// An unsettled tool effect (DESIGN §6) stays so until it is resolved,
		// durably: retry_authorized (resolved_by is the approval's id, or
		// operator:<principal>) or abandoned (executor, or
		// operator:<principal>). '' is an effect that never needed one.
		`ALTER TABLE effects ADD COLUMN resolution TEXT NOT NULL DEFAULT '' CHECK (resolution IN ('','unsettled','retry_authorized','abandoned'))`,
		`ALTER TABLE effects ADD COLUMN resolved_by TEXT NOT NULL DEFAULT '' CHECK (length(resolved_by) <= 300)`,
		`ALTER TABLE effects ADD COLUMN resolved_ns INTEGER`,
		// The gate looks up a task's unresolved effects on every tool call.
		`CREATE INDEX effects_unresolved ON effects (task_id) WHERE resolution = 'unsettled'`,
		qMarkOldUnsettled,
	}},
	{version: 8, name: "queue", stmts: queueMigration("INTEGER")},
	{version: 9, name: "model usage", stmts: []string{qCreateUsage}},
	{version: 10, name: "task trees", stmts: treeMigration("INTEGER"), fill: rebuildTasksStatus, rebuildsTables: true},
	{version: 11, name: "token and output budgets, approval tiers", stmts: append(budgetColumns("INTEGER"), approvalTierColumns...)},
}

// Limits a task created before the token and output budgets existed gets:
// the configured caps' defaults (host/config), as it was never asked for
// less.
const (
	UnbudgetedModelTokens = 100_000_000
	UnbudgetedOutputBytes = 1 << 30
)

// approvalTierColumns bind an approval to the effect it gates (its
// fingerprint, and the subject an allow-for-task pattern matches: a
// shell.run command, a tool's arguments as the approver saw them) and say
// its tier: once, or for the rest of its task for the same tool and a
// declared pattern (” = the same subject).
var approvalTierColumns = []string{
	`ALTER TABLE approvals ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '' CHECK (length(fingerprint) <= 128)`,
	`ALTER TABLE approvals ADD COLUMN subject TEXT NOT NULL DEFAULT '' CHECK (length(subject) <= 2000)`,
	`ALTER TABLE approvals ADD COLUMN scope TEXT NOT NULL DEFAULT 'once' CHECK (scope IN ('once','task'))`,
	`ALTER TABLE approvals ADD COLUMN pattern TEXT NOT NULL DEFAULT '' CHECK (length(pattern) <= 256)`,
	`CREATE INDEX approvals_grants ON approvals (task_id, tool) WHERE scope = 'task' AND status = 'approved'`,
}

// budgetColumns are the token and output budgets' columns (budgets.go),
// with the integer type of either engine. Unlike the call budgets, used may
// pass limit: a call is charged as observed, in full, and the one that
// crossed the limit fails the task (as wall time may overshoot).
// model_tokens_estimated counts the calls whose tokens the host estimated.
func budgetColumns(integer string) []string {
	return []string{
		fmt.Sprintf(`ALTER TABLE tasks ADD COLUMN model_tokens_limit %s NOT NULL DEFAULT %d CHECK (model_tokens_limit >= 0)`, integer, UnbudgetedModelTokens),
		fmt.Sprintf(`ALTER TABLE tasks ADD COLUMN model_tokens_used %s NOT NULL DEFAULT 0 CHECK (model_tokens_used >= 0)`, integer),
		fmt.Sprintf(`ALTER TABLE tasks ADD COLUMN model_tokens_estimated %s NOT NULL DEFAULT 0 CHECK (model_tokens_estimated >= 0)`, integer),
		fmt.Sprintf(`ALTER TABLE tasks ADD COLUMN output_bytes_limit %s NOT NULL DEFAULT %d CHECK (output_bytes_limit >= 0)`, integer, UnbudgetedOutputBytes),
		fmt.Sprintf(`ALTER TABLE tasks ADD COLUMN output_bytes_used %s NOT NULL DEFAULT 0 CHECK (output_bytes_used >= 0)`, integer),
	}
}

// qCreateUsage is the model_usage table (usage.go), in the text of either
// engine.
const qCreateUsage = `CREATE TABLE model_usage (
	task_id           TEXT   NOT NULL REFERENCES tasks (id),
	attempt           BIGINT NOT NULL CHECK (attempt >= 1),
	calls             BIGINT NOT NULL DEFAULT 0 CHECK (calls >= 0),
	prompt_tokens     BIGINT NOT NULL DEFAULT 0 CHECK (prompt_tokens >= 0),
	completion_tokens BIGINT NOT NULL DEFAULT 0 CHECK (completion_tokens >= 0),
	model_ms          BIGINT NOT NULL DEFAULT 0 CHECK (model_ms >= 0),
	PRIMARY KEY (task_id, attempt)
)`

// qMarkOldUnsettled gives the tool effects an older binary left unsettled
// their durable state, in the text of either engine: every indeterminate
// one (an older gate re-admitted none for good, so none is known to be
// settled), and those observed without a kept result in an attempt after
// the task's last completed one — before it, a result can have been
// dropped by that completion, and the older binary held them settled.
const qMarkOldUnsettled = `UPDATE effects SET resolution = 'unsettled'
	WHERE kind = 'tool' AND (status = 'indeterminate' OR (status = 'observed' AND result IS NULL AND replayed = 0
		AND attempt > coalesce((SELECT max(a.number) FROM attempts a WHERE a.task_id = effects.task_id AND a.status = 'completed'), 0)))`

// qCountStoredEvents sets every task's events_stored to the events it
// holds, in the text of either engine; a task without events keeps the
// default 0.
const qCountStoredEvents = `UPDATE tasks SET events_stored = (SELECT count(*) FROM events WHERE events.task_id = tasks.id)
	WHERE id IN (SELECT task_id FROM events)`

// schemaVersion is the schema version this binary writes and reads.
func schemaVersion() int { return migrations[len(migrations)-1].version }

// migrate applies, in order, every migration above the file's user_version up
// to and including target, each in its own transaction together with the
// user_version bump, so a crash leaves the file at some whole version. db
// must be a writer handle whose transactions begin IMMEDIATE: the version is
// re-read under the write lock, so two processes opening the same new file
// cannot both apply a migration.
func migrate(ctx context.Context, db *sql.DB, target int) error {
	return applyMigrations(ctx, db, migrations, target, applyMigration)
}

// applyMigrations applies, in order, every migration of list up to and
// including target with apply, which skips one the store already has.
func applyMigrations(ctx context.Context, db *sql.DB, list []migration, target int, apply func(context.Context, *sql.DB, migration) error) error {
	for _, m := range list {
		if m.version > target {
			break
		}
		if err := apply(ctx, db, m); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
	}
	return nil
}

func applyMigration(ctx context.Context, db *sql.DB, m migration) error {
	var tx *sql.Tx
	if m.rebuildsTables {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
			return err
		}
		// The pool's connections keep foreign keys on.
		defer conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA foreign_keys = ON`) //nolint:errcheck // a failure closes the connection below
		if tx, err = conn.BeginTx(ctx, nil); err != nil {
			return err
		}
	} else {
		var err error
		if tx, err = db.BeginTx(ctx, nil); err != nil {
			return err
		}
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var cur int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&cur); err != nil {
		return err
	}
	if cur >= m.version {
		return nil
	}
	if cur != m.version-1 {
		return fmt.Errorf("file is at schema version %d, expected %d", cur, m.version-1)
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
	if m.rebuildsTables {
		if err := foreignKeysHold(ctx, tx); err != nil {
			return err
		}
	}
	// PRAGMA takes no bound parameters; the version is an int from the table
	// above, never input.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, m.version)); err != nil {
		return err
	}
	return tx.Commit()
}
