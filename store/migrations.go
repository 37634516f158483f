package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// migrationFiles is each engine's schema history, one file a version:
// migrations/sqlite/NNNN_name.sql and migrations/postgres/NNNN_name.sql,
// each written in its engine's SQL. A released file is never edited: a
// change of schema is a new file after the last one of each engine it
// concerns, with the next version number of that engine (the two are
// numbered apart: PostgreSQL support began at SQLite's v4).
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFiles embed.FS

// migration is one step of the schema history. Versions are 1, 2, 3, ... in
// order; SQLite records the last one applied in PRAGMA user_version,
// PostgreSQL in pgVersionTable.
type migration struct {
	version int
	name    string
	stmts   []string
	goStep
}

// goStep is the part of a migration that is Go code rather than SQL: a
// back-fill that reads data SQL cannot parse (a checkpoint envelope's
// header), or a rebuild whose text depends on what the file holds. It is
// listed by the version of the file it completes, whose statements run
// first, in the same transaction.
type goStep struct {
	fill func(ctx context.Context, tx *sql.Tx) error
	// rebuildsTables: the migration drops and re-creates a table other
	// tables reference, which SQLite allows only with foreign keys off
	// on the connection (they cannot be switched inside a transaction);
	// the whole change is still one transaction, checked with
	// foreign_key_check before it commits.
	rebuildsTables bool
}

// sqliteGoSteps are SQLite's Go-coded steps by version: v3 reads each
// checkpoint's attempt from its envelope (migrate_v3.go), v10 widens the
// tasks table's status CHECK, which SQLite can only do by rebuilding the
// table from its own CREATE text (tree.go). PostgreSQL has none: its v1
// was created with checkpoint_attempt, and it alters a CHECK in place.
func sqliteGoSteps() map[int]goStep {
	return map[int]goStep{
		3:  {fill: fillCheckpointAttempts},
		10: {fill: rebuildTasksStatus, rebuildsTables: true},
	}
}

// sqliteMigrations and pgMigrations are each engine's whole history,
// oldest first.
func sqliteMigrations() []migration { return mustLoadMigrations("sqlite", sqliteGoSteps()) }
func pgMigrations() []migration     { return mustLoadMigrations("postgres", nil) }

// mustLoadMigrations is loadMigrations of the embedded files, which are
// part of the binary: a malformed one is a build that must not ship, and
// TestMigrationFiles loads both engines'.
func mustLoadMigrations(engine string, steps map[int]goStep) []migration {
	ms, err := loadMigrations(migrationFiles, path.Join("migrations", engine), steps)
	if err != nil {
		panic(fmt.Sprintf("store: embedded %s migrations: %v", engine, err))
	}
	return ms
}

// loadMigrations reads dir's NNNN_name.sql files in version order. The
// versions must be 1, 2, 3, ... without a gap, and every Go step must
// complete a file's version.
func loadMigrations(fsys fs.FS, dir string, steps map[int]goStep) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries { // ReadDir sorts by name, so by version
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 || name == "" || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("%s: a migration file is named NNNN_name.sql", e.Name())
		}
		if v != len(ms)+1 {
			return nil, fmt.Errorf("%s: version %d follows version %d", e.Name(), v, len(ms))
		}
		text, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		stmts, err := splitStatements(string(text))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: strings.ReplaceAll(name, "_", " "), stmts: stmts, goStep: steps[v]})
	}
	for v := range steps {
		if v < 1 || v > len(ms) {
			return nil, fmt.Errorf("a Go step is listed for version %d, which has no file", v)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%s holds no migration", dir)
	}
	return ms, nil
}

// splitStatements splits a migration file into its statements. The rule
// is the files' layout, not SQL's grammar: a line whose last character is
// ";" ends a statement, and lines starting with "--" are comments, kept
// out of the statements (SQLite stores a CREATE's text as given). A file
// whose text does not end a statement, or that holds none, is refused.
func splitStatements(text string) ([]string, error) {
	var stmts []string
	var cur []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		if len(cur) == 0 && strings.TrimSpace(line) == "" {
			continue
		}
		cur = append(cur, line)
		if trimmed := strings.TrimRight(line, " \t\r"); strings.HasSuffix(trimmed, ";") {
			stmt := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(strings.Join(cur, "\n")), ";"))
			if stmt == "" {
				return nil, fmt.Errorf("an empty statement")
			}
			stmts = append(stmts, stmt)
			cur = nil
		}
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("the last statement does not end with a line ending in \";\": %.80s", strings.Join(cur, "\n"))
	}
	if len(stmts) == 0 {
		return nil, fmt.Errorf("no statement")
	}
	return stmts, nil
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
