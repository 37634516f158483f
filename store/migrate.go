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

// Limits a task created before the token and output budgets existed gets:
// the configured caps' defaults (host/config), as it was never asked for
// less.
const (
	UnbudgetedModelTokens = 100_000_000
	UnbudgetedOutputBytes = 1 << 30
)

// schemaVersion is the schema version this binary writes and reads.
func schemaVersion() int { return len(sqliteMigrations()) }

// migrate applies, in order, every migration above the file's user_version up
// to and including target, each in its own transaction together with the
// user_version bump, so a crash leaves the file at some whole version. db
// must be a writer handle whose transactions begin IMMEDIATE: the version is
// re-read under the write lock, so two processes opening the same new file
// cannot both apply a migration.
func migrate(ctx context.Context, db *sql.DB, target int) error {
	return applyMigrations(ctx, db, sqliteMigrations(), target, applyMigration)
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
