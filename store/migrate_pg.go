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

// pgSchemaVersion is the PostgreSQL schema version this binary writes and
// reads.
func pgSchemaVersion() int { return len(pgMigrations()) }

// migratePG applies, in order, every PostgreSQL migration above the
// database's version up to and including target, each in its own
// transaction with its row in pgVersionTable, so a crash leaves the
// database at some whole version.
func migratePG(ctx context.Context, db *sql.DB, target int) error {
	return applyMigrations(ctx, db, pgMigrations(), target, applyPGMigration)
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
