package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Stats are counts over the whole store, of every principal: what the
// daemon's metrics report. Each map is keyed by values of a closed set (the
// tables' CHECK constraints), so its size is bounded whatever is stored.
type Stats struct {
	Tasks map[Status]int64
	// Attempts counts attempts by status and outcome ("" while running or
	// when the step ended without one).
	Attempts map[AttemptKey]int64
	// Effects counts the effect ledger by kind and status.
	Effects map[EffectKey]int64
	// BudgetExhausted counts the tasks that ended on a budget, by the
	// budget that ran out (its reason: step_budget_exhausted, ...,
	// wall_clock_exceeded).
	BudgetExhausted  map[BudgetKind]int64
	PendingApprovals int64
}

// AttemptKey is an attempt's status and outcome.
type AttemptKey struct {
	Status  AttemptStatus
	Outcome string
}

// EffectKey is an effect's kind and status.
type EffectKey struct {
	Kind   EffectKind
	Status EffectStatus
}

// Stats counts tasks by status, attempts by status and outcome, effects by
// kind and status, tasks ended on a budget, and pending approvals, in one
// read transaction so that the counts agree. An error means the store did
// not answer a read.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	tx, err := s.r.BeginTx(ctx, s.d.readTx())
	if err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: %w", err))
	}
	defer func() { _ = tx.Rollback() }()
	// The counts are of durable commits only (walSync).
	defer s.sync.visible() //nolint:errcheck // a failed fsync is every later write's error
	st := Stats{Tasks: map[Status]int64{}, Attempts: map[AttemptKey]int64{}, Effects: map[EffectKey]int64{}, BudgetExhausted: map[BudgetKind]int64{}}
	var budget []any
	for _, k := range BudgetKinds() {
		budget = append(budget, string(k.Reason()))
	}
	counts := []struct {
		what, query string
		args        []any
		add         func(a, b string, n int64)
	}{
		{"tasks", `SELECT status, '', count(*) FROM tasks GROUP BY status`, nil,
			func(a, _ string, n int64) { st.Tasks[Status(a)] = n }},
		{"attempts", `SELECT status, outcome, count(*) FROM attempts GROUP BY status, outcome`, nil,
			func(a, b string, n int64) { st.Attempts[AttemptKey{AttemptStatus(a), b}] = n }},
		{"effects", `SELECT kind, status, count(*) FROM effects GROUP BY kind, status`, nil,
			func(a, b string, n int64) { st.Effects[EffectKey{EffectKind(a), EffectStatus(b)}] = n }},
		{"budgets", `SELECT reason, '', count(*) FROM tasks WHERE reason IN (` + numbered(1, len(budget)) + `) GROUP BY reason`, budget,
			func(a, _ string, n int64) {
				if k, ok := BudgetOf(Reason(a)); ok {
					st.BudgetExhausted[k] = n
				}
			}},
	}
	for _, c := range counts {
		if err := groupCount(ctx, tx, c.query, s.d.bind(c.args), c.add); err != nil {
			return Stats{}, s.dbErr(fmt.Errorf("store stats: %s: %w", c.what, err))
		}
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE status = 'pending'`).Scan(&st.PendingApprovals); err != nil {
		return Stats{}, s.dbErr(fmt.Errorf("store stats: approvals: %w", err))
	}
	return st, nil
}

// groupCount runs a query of two grouping columns and a count, and hands
// each row to add.
func groupCount(ctx context.Context, tx *sql.Tx, query string, args []any, add func(a, b string, n int64)) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b string
		var n int64
		if err := rows.Scan(&a, &b, &n); err != nil {
			return err
		}
		add(a, b, n)
	}
	return rows.Err()
}

// Ping reports whether the store answers a read.
func (s *Store) Ping(ctx context.Context) error {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM tasks LIMIT 1) AS one`).Scan(&n); err != nil {
		return s.dbErr(fmt.Errorf("store ping: %w", err))
	}
	return nil
}
