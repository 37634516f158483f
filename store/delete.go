package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxSweepBatch bounds the tasks one DeleteFinishedBefore call removes, so
// that a sweep of a large backlog holds the writer for a short while at a
// time.
const MaxSweepBatch = 100

// The children go first: the schema's foreign keys are enforced.
const (
	qDeleteApprovals = `DELETE FROM approvals WHERE task_id = $1`
	qDeleteEffects   = `DELETE FROM effects WHERE task_id = $1`
	qDeleteEvents    = `DELETE FROM events WHERE task_id = $1`
	qDeleteAttempts  = `DELETE FROM attempts WHERE task_id = $1`
	qDeleteTask      = `DELETE FROM tasks WHERE id = $1 AND principal_id = $2 AND status IN ('completed','failed','cancelled')`
	qFinishedBefore  = `SELECT id, principal_id FROM tasks
		WHERE status IN ('completed','failed','cancelled') AND updated_ns < $1 ORDER BY updated_ns LIMIT $2`
)

// deleteQueries are prepared on the writer with the other write queries;
// qFinishedBefore runs on a reader but is listed so that the query plan
// test checks it is an index search.
func deleteQueries() []string {
	return []string{qDeleteApprovals, qDeleteEffects, qDeleteEvents, qDeleteAttempts, qDeleteTask, qFinishedBefore}
}

// DeleteTask removes principal's task id and everything recorded about it
// — attempts, events, effects, approvals, its stored workspace — in one
// transaction. Only a terminal task (completed, failed, cancelled) can be
// deleted: any other is ErrConflict naming its status, and nothing is
// removed. Another principal's task is ErrNotFound. The task's workspace
// directory on a host is the caller's to remove.
func (s *Store) DeleteTask(ctx context.Context, principal, id string) error {
	return s.write(ctx, func(tx *txn) error {
		if err := tx.lockTaskRow(ctx, id); err != nil {
			return err
		}
		st, _, err := taskState(ctx, tx, principal, id)
		if err != nil {
			return err
		}
		if !st.Terminal() {
			return fmt.Errorf("task %s is %s: only a completed, failed or cancelled task can be deleted (cancel it first): %w", id, st, ErrConflict)
		}
		return deleteRows(ctx, tx, principal, id)
	})
}

func deleteRows(ctx context.Context, tx *txn, principal, id string) error {
	// The task first, as every writer of its rows takes it: a late writer
	// of an event or an attempt waits for the delete, then finds no task.
	if err := tx.lockTaskRow(ctx, id); err != nil {
		return fmt.Errorf("delete task %s: %w", id, err)
	}
	for _, q := range []string{qDeleteApprovals, qDeleteEffects, qDeleteEvents, qDeleteUsage, qDeleteWorkspaceFiles, qDeleteWorkspace, qDeleteAttempts} {
		if _, err := tx.ExecContext(ctx, q, id); err != nil {
			return fmt.Errorf("delete task %s: %w", id, err)
		}
	}
	res, err := tx.ExecContext(ctx, qDeleteTask, id, principal)
	if err != nil {
		return fmt.Errorf("delete task %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("delete task %s: %d rows deleted, want 1: %w", id, n, ErrConflict)
	}
	return nil
}

// Deleted names a task DeleteFinishedBefore removed.
type Deleted struct {
	ID, PrincipalID string
}

// DeleteFinishedBefore removes, in one transaction, up to limit (at most
// MaxSweepBatch) terminal tasks last updated before cutoff, oldest first,
// with everything recorded about them, and returns which. skip is asked
// for each candidate first, outside the transaction (it may take the
// caller's locks): a task it reports true for (e.g. one whose run is still
// winding down in this host) is left alone.
func (s *Store) DeleteFinishedBefore(ctx context.Context, cutoff time.Time, limit int, skip func(id string) bool) ([]Deleted, error) {
	if limit <= 0 || limit > MaxSweepBatch {
		limit = MaxSweepBatch
	}
	rows, err := s.readRows(ctx, qFinishedBefore, nanos(cutoff), limit)
	if err != nil {
		return nil, err
	}
	var cands []Deleted
	for rows.Next() {
		var d Deleted
		if err := rows.Scan(&d.ID, &d.PrincipalID); err != nil {
			rows.Close()
			return nil, err
		}
		if skip == nil || !skip(d.ID) {
			cands = append(cands, d)
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, err
	}
	rows.Close()
	if len(cands) == 0 {
		return nil, nil
	}
	// A terminal task stays terminal, so every candidate is still one;
	// deleteRows checks it all the same. One another host's retention
	// deleted since the read is passed over.
	var done []Deleted
	if err := s.write(ctx, func(tx *txn) error {
		done = done[:0]
		for _, d := range cands {
			if err := tx.lockTaskRow(ctx, d.ID); err != nil {
				return err
			}
			if _, _, err := taskState(ctx, tx, d.PrincipalID, d.ID); errors.Is(err, ErrNotFound) {
				continue
			} else if err != nil {
				return err
			}
			if err := deleteRows(ctx, tx, d.PrincipalID, d.ID); err != nil {
				return err
			}
			done = append(done, d)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return done, nil
}
