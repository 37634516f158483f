package host

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// rawStore opens the data dir's store file directly, as anyone who can write
// it could.
func rawStore(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, datadir.StoreFile)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func execOne(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	res, err := db.Exec(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%s: %d rows affected, want 1", q, n)
	}
}

// A task checkpointed at attempts 1 and 3 (two runs) has its row's
// checkpoint rewritten with SQL: an older sealed envelope of the same task
// written back, or the checkpoint removed, is refused on resume with
// checkpoint_incompatible before any step runs; the latest envelope resumes.
func TestCheckpointRollbackRefused(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	h := openHost(t, dir, nil)
	db := rawStore(t, dir)
	cases := []struct {
		name   string
		tamper func(t *testing.T, id string, first []byte)
		status store.Status
		reason store.Reason
		msg    string
	}{
		{"latest envelope kept", func(*testing.T, string, []byte) {}, store.StatusCompleted, "", ""},
		{"first envelope written back", func(t *testing.T, id string, first []byte) {
			execOne(t, db, `UPDATE tasks SET checkpoint = ? WHERE id = ?`, first, id)
		}, store.StatusFailed, store.ReasonCheckpointIncompatible, "sealed at attempt 1, the task's latest checkpoint is from attempt 3"},
		{"checkpoint removed", func(t *testing.T, id string, _ []byte) {
			execOne(t, db, `UPDATE tasks SET checkpoint = NULL WHERE id = ?`, id)
		}, store.StatusFailed, store.ReasonCheckpointIncompatible, "checkpoint of attempt 3 is missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			// Run 1: attempt 1 checkpoints, attempt 2 crashes. Run 2:
			// attempt 3 checkpoints, attempt 4 is killed.
			task := create(t, h, alice, map[string]any{"steps": 5, "exit_at_attempt": 2, "kill_at_attempt": 4}, Limits{})
			run1 := waitEnd(t, h, alice, task.ID)
			wantStatus(t, run1, store.StatusInterrupted, store.ReasonExecutorCrashed)
			if run1.Checkpoint == nil || run1.CheckpointAttempt != 1 {
				t.Fatalf("after run 1: checkpoint of attempt %d (%d bytes), want attempt 1", run1.CheckpointAttempt, len(run1.Checkpoint))
			}
			first := bytes.Clone(run1.Checkpoint)
			if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
				t.Fatal(err)
			}
			run2 := waitEnd(t, h, alice, task.ID)
			wantStatus(t, run2, store.StatusInterrupted, store.ReasonExecutorCrashed)
			if run2.CheckpointAttempt != 3 || bytes.Equal(run2.Checkpoint, first) {
				t.Fatalf("after run 2: checkpoint of attempt %d, want a new one of attempt 3", run2.CheckpointAttempt)
			}

			tc.tamper(t, task.ID, first)
			before, err := h.Runner.Get(ctx, alice, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			attsBefore, err := h.Runner.Attempts(ctx, alice, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
				t.Fatal(err)
			}
			final := waitEnd(t, h, alice, task.ID)
			wantStatus(t, final, tc.status, tc.reason)
			if !strings.Contains(final.Message, tc.msg) {
				t.Errorf("message %q does not say %q", final.Message, tc.msg)
			}
			if tc.status == store.StatusCompleted {
				if string(final.Result) != `{"steps":5}` {
					t.Errorf("result %s, want {\"steps\":5}", final.Result)
				}
				return
			}
			// Refused before a step is charged: no attempt, no budget, the
			// row's checkpoint as the attacker left it.
			atts, err := h.Runner.Attempts(ctx, alice, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(atts, attsBefore) {
				t.Errorf("attempts changed:\n%+v\nwant\n%+v", atts, attsBefore)
			}
			// Wall time alone may grow: the refused run started a plugin.
			fb, bb := final.Budgets, before.Budgets
			fb.WallMillis, bb.WallMillis = store.Budget{}, store.Budget{}
			if fb != bb || !bytes.Equal(final.Checkpoint, before.Checkpoint) || final.CheckpointAttempt != 3 {
				t.Errorf("task changed beyond its status: budgets %+v (was %+v), checkpoint of attempt %d, same bytes %v",
					final.Budgets, before.Budgets, final.CheckpointAttempt, bytes.Equal(final.Checkpoint, before.Checkpoint))
			}
		})
	}
}

// A store written at schema v2 (no checkpoint_attempt column) with an
// interrupted, checkpointed task opens on this host: migration v3 back-fills
// the column from the envelope, and the task resumes from its checkpoint.
func TestV2StoreTaskResumesAfterMigration(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	h := openHost(t, dir, nil)
	task := create(t, h, alice, map[string]any{"steps": 3, "exit_at_attempt": 2}, Limits{})
	run1 := waitEnd(t, h, alice, task.ID)
	wantStatus(t, run1, store.StatusInterrupted, store.ReasonExecutorCrashed)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Back to exactly v2: v13's index, v12's tables, v11's index and columns, v10's indexes and columns
	// (its wider status CHECK stays: the migration leaves a wide one be),
	// v9's table, v8's index and columns, v7's index and columns, v6's column, v5's table,
	// index and column, v4's index and v3's column go, the version says 2.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, datadir.StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP INDEX tasks_tree_live`, `DROP TABLE workspace_files`, `DROP TABLE workspaces`, `DROP INDEX approvals_grants`, `ALTER TABLE approvals DROP COLUMN fingerprint`, `ALTER TABLE approvals DROP COLUMN subject`,
		`ALTER TABLE approvals DROP COLUMN scope`, `ALTER TABLE approvals DROP COLUMN pattern`, `ALTER TABLE tasks DROP COLUMN model_tokens_limit`,
		`ALTER TABLE tasks DROP COLUMN model_tokens_used`, `ALTER TABLE tasks DROP COLUMN model_tokens_estimated`,
		`ALTER TABLE tasks DROP COLUMN output_bytes_limit`, `ALTER TABLE tasks DROP COLUMN output_bytes_used`,
		`DROP INDEX tasks_parent`, `DROP INDEX tasks_root`, `ALTER TABLE tasks DROP COLUMN tree_depth`,
		`ALTER TABLE tasks DROP COLUMN root_task_id`, `ALTER TABLE tasks DROP COLUMN parent_task_id`, `DROP TABLE model_usage`, `DROP INDEX tasks_queue`, `ALTER TABLE tasks DROP COLUMN queue_host`, `ALTER TABLE tasks DROP COLUMN queued_ns`, `DROP INDEX effects_unresolved`, `ALTER TABLE effects DROP COLUMN resolved_ns`, `ALTER TABLE effects DROP COLUMN resolved_by`,
		`ALTER TABLE effects DROP COLUMN resolution`, `ALTER TABLE tasks DROP COLUMN events_stored`, `DROP TABLE hosts`, `DROP INDEX tasks_lease`, `ALTER TABLE tasks DROP COLUMN lease_host`, `DROP INDEX tasks_finished`, `ALTER TABLE tasks DROP COLUMN checkpoint_attempt`, `PRAGMA user_version = 2`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var cols int
	if err := db.QueryRow(`SELECT count(*) FROM pragma_table_info('tasks') WHERE name = 'checkpoint_attempt'`).Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("downgrade to v2: column still there (%d, %v)", cols, err)
	}
	db.Close()

	h2 := openHost(t, dir, nil)
	got, err := h2.Runner.Get(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CheckpointAttempt != 1 || !bytes.Equal(got.Checkpoint, run1.Checkpoint) {
		t.Fatalf("after migration: checkpoint of attempt %d, want attempt 1 with the same envelope", got.CheckpointAttempt)
	}
	if _, err := h2.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	final := waitEnd(t, h2, alice, task.ID)
	wantStatus(t, final, store.StatusCompleted, "")
	// Resumed from done=1: attempts 3 and 4 finish the remaining two steps.
	if string(final.Result) != `{"steps":3}` || final.Budgets.Steps.Used != 4 {
		t.Errorf("result %s after %d steps, want {\"steps\":3} after 4", final.Result, final.Budgets.Steps.Used)
	}
}
