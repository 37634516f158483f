// Package storetest builds large stores fast, for benchmarks and load tests.
// It is not part of the store's API: nothing on a task's path uses it, and
// it writes rows straight into a SQLite store file, so it must be kept in
// step with the store's schema (its tests fail when it is not).
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the SQLite driver the store uses

	"github.com/taskhost/taskhost/store"
)

// MaxFill bounds Fill.Tasks: a million tasks is the largest store the
// bench's recovery rows build.
const MaxFill = 1_000_000

// Fill is a batch of synthetic tasks.
type Fill struct {
	Principal string
	Tasks     int // 0..MaxFill
	// Live of the Tasks (the first ones) are left running with a running
	// attempt, as a killed host leaves them; the rest are completed.
	Live   int
	Limits store.Budgets
}

// FillSQLite inserts f's tasks, ids t_fill00000000 onwards, into the SQLite
// store file at path in one transaction. It opens the store first, so the
// file is created or migrated to the current schema; the store must not be
// open elsewhere. Bad input is refused before the file is touched.
func FillSQLite(ctx context.Context, path string, f Fill) error {
	switch {
	case f.Principal == "":
		return fmt.Errorf("fill: principal is empty: %w", store.ErrInvalid)
	case f.Tasks < 0 || f.Tasks > MaxFill:
		return fmt.Errorf("fill: tasks is %d, want 0..%d: %w", f.Tasks, MaxFill, store.ErrInvalid)
	case f.Live < 0 || f.Live > f.Tasks:
		return fmt.Errorf("fill: live is %d, want 0..tasks (%d): %w", f.Live, f.Tasks, store.ErrInvalid)
	}
	st, err := store.Open(ctx, path, store.Options{Synchronous: "NORMAL"})
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	// The same escaping as the store's own DSN: SQLite parses "file:" names
	// as URIs.
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	db, err := sql.Open("sqlite", "file:"+esc+"?_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fill %s: %w", path, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := insert(ctx, tx, f); err != nil {
		return fmt.Errorf("fill %s: %w", path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fill %s: %w", path, err)
	}
	return nil
}

func insert(ctx context.Context, tx *sql.Tx, f Fill) error {
	task, err := tx.PrepareContext(ctx, `INSERT INTO tasks (id, principal_id, executor, spec, status, run_id,
			steps_limit, steps_used, tool_calls_limit, model_calls_limit, depth_limit, wall_ms_limit, created_ns, updated_ns)
		VALUES (?, ?, 'testexec', ?, ?, 1, ?, 1, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer task.Close()
	attempt, err := tx.PrepareContext(ctx, `INSERT INTO attempts (task_id, number, run_id, status, started_ns, ended_ns)
		VALUES (?, 1, 1, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer attempt.Close()
	now := time.Now().UnixNano()
	lim := f.Limits
	for i := range f.Tasks {
		id := fmt.Sprintf("t_fill%08d", i)
		status, attStatus, ended := store.StatusCompleted, store.AttemptCompleted, any(now)
		if i < f.Live {
			status, attStatus, ended = store.StatusRunning, store.AttemptRunning, nil
		}
		if _, err := task.ExecContext(ctx, id, f.Principal, []byte(`{"goal":"fill"}`), string(status), max(lim.Steps.Limit, 1),
			lim.ToolCalls.Limit, lim.ModelCalls.Limit, lim.Depth.Limit, lim.WallMillis.Limit, now, now); err != nil {
			return fmt.Errorf("task %s: %w", id, err)
		}
		if _, err := attempt.ExecContext(ctx, id, string(attStatus), now, ended); err != nil {
			return fmt.Errorf("task %s attempt 1: %w", id, err)
		}
	}
	return nil
}
