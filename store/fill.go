package store

import (
	"context"
	"fmt"
)

// Fill inserts n synthetic tasks of principal in one transaction, for load
// tests and the bench: the first live of them running with a running
// attempt, as a killed host leaves them, the rest completed. It exists to
// build a large store fast; nothing on a task's path calls it.
func (s *Store) Fill(ctx context.Context, principal string, n, live int, limits Budgets) error {
	if n < 0 || live < 0 || live > n {
		return invalidf("fill: want 0 <= live <= n")
	}
	return s.write(ctx, func(tx *txn) error {
		now := nanos(s.now())
		for i := range n {
			id := fmt.Sprintf("t_fill%08d", i)
			status, run, used := StatusCompleted, 1, 1
			if i < live {
				status = StatusRunning
			}
			if _, err := tx.exec(ctx, `INSERT INTO tasks (id, principal_id, executor, spec, status, run_id,
					steps_limit, steps_used, tool_calls_limit, model_calls_limit, depth_limit, wall_ms_limit, created_ns, updated_ns)
				VALUES (?, ?, 'testexec', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				id, principal, []byte(`{"goal":"fill"}`), string(status), run, max(limits.Steps.Limit, 1), used, limits.ToolCalls.Limit,
				limits.ModelCalls.Limit, limits.Depth.Limit, limits.WallMillis.Limit, now, now); err != nil {
				return err
			}
			attempt := "completed"
			var ended any = now
			if i < live {
				attempt, ended = "running", nil
			}
			if _, err := tx.exec(ctx, `INSERT INTO attempts (task_id, number, run_id, status, started_ns, ended_ns)
				VALUES (?, 1, 1, ?, ?, ?)`, id, attempt, now, ended); err != nil {
				return err
			}
		}
		return nil
	})
}
