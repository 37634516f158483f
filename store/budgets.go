package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Charge is what an observed effect costs of its task's token and output
// budgets.
type Charge struct {
	// Tokens are a model call's prompt and completion tokens; Estimated
	// says the provider did not report them and the host estimated them.
	Tokens    int64
	Estimated bool
	// OutputBytes are the bytes the effect hands back to the executor.
	OutputBytes int64
	// Usage, when its Calls is not 0, is added to the attempt's model
	// usage (AddModelUsage) in the same transaction.
	Usage ModelUsage
}

// qChargeObserved charges an observed effect. It checks no limit: the
// effect has run, and what it cost is counted in full whatever it leaves
// (the caller fails the task when a budget is passed), nor the task's
// status: a cancel that landed while the call ran does not make it free.
const qChargeObserved = `UPDATE tasks SET model_tokens_used = model_tokens_used + $1,
		model_tokens_estimated = model_tokens_estimated + $2, output_bytes_used = output_bytes_used + $3
	WHERE id = $4 AND principal_id = $5
	RETURNING ` + taskCols

func chargeQueries() []string { return []string{qChargeObserved} }

// ObserveEffect moves a dispatching effect to observed with its result,
// as MarkEffect does, and charges c to its task in the same transaction, so
// that an effect is never observed uncharged — a run that dies right after
// leaves its cost counted, and a resume does not reset it. It returns the
// effect and the task as charged. A count out of range is an error naming
// it, and nothing is written.
func (s *Store) ObserveEffect(ctx context.Context, m MarkEffect, c Charge) (Effect, Task, error) {
	if m.From != EffectDispatching || m.To != EffectObserved {
		return Effect{}, Task{}, invalidf("ObserveEffect records dispatching → observed, not %s → %s", m.From, m.To)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"tokens", c.Tokens}, {"output_bytes", c.OutputBytes}} {
		if f.v < 0 || f.v > maxUsageAdd {
			return Effect{}, Task{}, fmt.Errorf("effect charge %s = %d: must be 0..%d: %w", f.name, f.v, int64(maxUsageAdd), ErrInvalid)
		}
	}
	if c.Usage.Calls != 0 {
		if err := checkUsage(m.Attempt, c.Usage); err != nil {
			return Effect{}, Task{}, err
		}
	}
	if err := checkSize("effect result", len(m.Result), MaxEffectResult); err != nil {
		return Effect{}, Task{}, err
	}
	estimated := 0
	if c.Estimated {
		estimated = 1
	}
	var out Effect
	var t Task
	err := s.write(ctx, func(tx *txn) (err error) {
		if out, err = s.markEffect(ctx, tx, &m); err != nil {
			return err
		}
		t, err = scanTask(tx.QueryRowContext(ctx, qChargeObserved, c.Tokens, estimated, c.OutputBytes, m.TaskID, m.PrincipalID))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound(m.TaskID)
		}
		if err != nil || c.Usage.Calls == 0 {
			return err
		}
		return addUsage(ctx, tx, m.PrincipalID, m.TaskID, m.Attempt, c.Usage)
	})
	if err != nil {
		return Effect{}, Task{}, err
	}
	return out, t, nil
}

// Over is the first of the token and output budgets b has passed, if any:
// the budget whose reason fails the task.
func (b Budgets) Over() (BudgetKind, bool) {
	switch {
	case b.ModelTokens.Used > b.ModelTokens.Limit:
		return BudgetModelTokens, true
	case b.OutputBytes.Used > b.OutputBytes.Limit:
		return BudgetOutputBytes, true
	}
	return 0, false
}
