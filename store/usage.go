package store

import (
	"context"
	"fmt"
)

// ModelUsage is what model calls cost: how many returned a reply, their
// tokens as the endpoint reported them, and their duration.
type ModelUsage struct {
	Calls            int64
	PromptTokens     int64
	CompletionTokens int64
	Millis           int64
}

// Add returns the sum of u and v.
func (u ModelUsage) Add(v ModelUsage) ModelUsage {
	return ModelUsage{Calls: u.Calls + v.Calls, PromptTokens: u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens, Millis: u.Millis + v.Millis}
}

// maxUsageAdd bounds one addition, so no sum can overflow in any number of
// calls a task can make (each count is far below it).
const maxUsageAdd = 1 << 40

// One row per attempt that called a model, summed as its calls return: a
// table of its own, so recording usage touches no row the step path
// writes.
const (
	qAddUsage = `INSERT INTO model_usage (task_id, attempt, calls, prompt_tokens, completion_tokens, model_ms)
		SELECT id, $1, $2, $3, $4, $5 FROM tasks WHERE id = $6 AND principal_id = $7
		ON CONFLICT (task_id, attempt) DO UPDATE SET calls = model_usage.calls + excluded.calls,
			prompt_tokens = model_usage.prompt_tokens + excluded.prompt_tokens,
			completion_tokens = model_usage.completion_tokens + excluded.completion_tokens,
			model_ms = model_usage.model_ms + excluded.model_ms`
	qUsageByAttempt = `SELECT u.attempt, u.calls, u.prompt_tokens, u.completion_tokens, u.model_ms
		FROM model_usage u JOIN tasks t ON t.id = u.task_id
		WHERE u.task_id = $1 AND t.principal_id = $2 ORDER BY u.attempt`
	qDeleteUsage = `DELETE FROM model_usage WHERE task_id = $1`
)

func usageQueries() []string { return []string{qAddUsage, qDeleteUsage} }

// AddModelUsage adds u to attempt's usage of principal's task. A negative
// or out-of-range count is an error naming it, and nothing is written; a
// task of another principal is ErrNotFound.
func (s *Store) AddModelUsage(ctx context.Context, principal, id string, attempt int64, u ModelUsage) error {
	if err := checkUsage(attempt, u); err != nil {
		return err
	}
	return s.write(ctx, func(tx *txn) error { return addUsage(ctx, tx, principal, id, attempt, u) })
}

// checkUsage refuses a usage AddModelUsage would not store.
func checkUsage(attempt int64, u ModelUsage) error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"calls", u.Calls}, {"prompt_tokens", u.PromptTokens}, {"completion_tokens", u.CompletionTokens}, {"model_ms", u.Millis}} {
		if f.v < 0 || f.v > maxUsageAdd {
			return fmt.Errorf("model usage %s = %d: must be 0..%d: %w", f.name, f.v, int64(maxUsageAdd), ErrInvalid)
		}
	}
	if attempt < 1 {
		return fmt.Errorf("model usage attempt = %d: must be at least 1: %w", attempt, ErrInvalid)
	}
	return nil
}

// addUsage is AddModelUsage's write inside tx.
func addUsage(ctx context.Context, tx *txn, principal, id string, attempt int64, u ModelUsage) error {
	res, err := tx.ExecContext(ctx, qAddUsage, attempt, u.Calls, u.PromptTokens, u.CompletionTokens, u.Millis, id, principal)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return notFound(id)
	}
	return err
}

// TaskModelUsage returns the usage of principal's task, in all and by
// attempt (attempts that made no model call are absent).
func (s *Store) TaskModelUsage(ctx context.Context, principal, id string) (ModelUsage, map[int64]ModelUsage, error) {
	rows, err := s.readRows(ctx, qUsageByAttempt, id, principal)
	if err != nil {
		return ModelUsage{}, nil, err
	}
	defer rows.Close()
	var total ModelUsage
	by := map[int64]ModelUsage{}
	for rows.Next() {
		var a int64
		var u ModelUsage
		if err := rows.Scan(&a, &u.Calls, &u.PromptTokens, &u.CompletionTokens, &u.Millis); err != nil {
			return ModelUsage{}, nil, err
		}
		by[a] = u
		total = total.Add(u)
	}
	if err := rows.Err(); err != nil {
		return ModelUsage{}, nil, err
	}
	if len(by) == 0 {
		if err := s.taskExists(ctx, principal, id); err != nil {
			return ModelUsage{}, nil, err
		}
	}
	return total, by, nil
}
