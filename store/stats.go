package store

import (
	"context"
	"fmt"
)

// Stats are counts over the whole store, of every principal: what the
// daemon's metrics report. Each map is keyed by values of a closed set (the
// tables' CHECK constraints), so its size is bounded whatever is stored.
type Stats struct {
	Tasks map[Status]int64
	// Attempts counts attempts by status and outcome ("" while running or
	// when the step ended without one).
	Attempts         map[AttemptKey]int64
	PendingApprovals int64
}

// AttemptKey is an attempt's status and outcome.
type AttemptKey struct {
	Status  AttemptStatus
	Outcome string
}

// Stats counts tasks by status, attempts by status and outcome, and pending
// approvals, in one read transaction so that the counts agree. An error
// means the store did not answer a read.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	tx, err := s.r.BeginTx(ctx, s.d.readTx())
	if err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: %w", err))
	}
	defer func() { _ = tx.Rollback() }()
	st := Stats{Tasks: map[Status]int64{}, Attempts: map[AttemptKey]int64{}}
	rows, err := tx.QueryContext(ctx, `SELECT status, count(*) FROM tasks GROUP BY status`)
	if err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: tasks: %w", err))
	}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			rows.Close()
			return Stats{}, fmt.Errorf("store stats: tasks: %w", err)
		}
		st.Tasks[Status(status)] = n
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return Stats{}, s.dbErr(fmt.Errorf("store stats: tasks: %w", err))
	}
	if err := rows.Close(); err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: tasks: %w", err))
	}
	rows, err = tx.QueryContext(ctx, `SELECT status, outcome, count(*) FROM attempts GROUP BY status, outcome`)
	if err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: attempts: %w", err))
	}
	for rows.Next() {
		var status, outcome string
		var n int64
		if err := rows.Scan(&status, &outcome, &n); err != nil {
			rows.Close()
			return Stats{}, fmt.Errorf("store stats: attempts: %w", err)
		}
		st.Attempts[AttemptKey{AttemptStatus(status), outcome}] = n
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return Stats{}, s.dbErr(fmt.Errorf("store stats: attempts: %w", err))
	}
	if err := rows.Close(); err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: attempts: %w", err))
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE status = 'pending'`).Scan(&st.PendingApprovals); err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: approvals: %w", err))
	}
	return st, nil
}

// Ping reports whether the store answers a read.
func (s *Store) Ping(ctx context.Context) error {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM tasks LIMIT 1) AS one`).Scan(&n); err != nil {
		return s.dbErr(fmt.Errorf("store ping: %w", err))
	}
	return nil
}
