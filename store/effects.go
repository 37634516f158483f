package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// EffectKind is what an effect does.
type EffectKind string

const (
	EffectModel    EffectKind = "model"
	EffectTool     EffectKind = "tool"
	EffectApproval EffectKind = "approval"
)

// EffectStatus is an effect's place in the ledger: admitted → dispatching →
// observed | failed; dispatching becomes indeterminate when its host died.
type EffectStatus string

const (
	EffectAdmitted      EffectStatus = "admitted"
	EffectDispatching   EffectStatus = "dispatching"
	EffectObserved      EffectStatus = "observed"
	EffectFailed        EffectStatus = "failed"
	EffectIndeterminate EffectStatus = "indeterminate"
	// EffectObservedUnreplayable is how the store reports an effect that
	// was observed in an attempt that did not commit, but whose result
	// was too large to keep (over MaxEffectResult): a re-run of the step
	// cannot replay it, so, like an indeterminate one, it must not run
	// again without an approval. It is stored as observed without a
	// result, and reported so only while the step is unfinished.
	EffectObservedUnreplayable EffectStatus = "observed_unreplayable"
)

// Effect is one row of the effect ledger.
type Effect struct {
	TaskID         string
	Attempt, Seq   int64
	Kind           EffectKind
	Fingerprint    string
	IdempotencyKey string
	Status         EffectStatus
	Summary        string
	Depth          int64
	Replayed       bool
	Result         []byte // only while the attempt is in flight
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Effect bounds.
const (
	maxFingerprint = 128
	maxEffectKey   = 128
	maxEffectSum   = 256
	// MaxEffectResult bounds the result kept for replay.
	MaxEffectResult = 64 << 10
)

// NewEffect is an effect to admit.
type NewEffect struct {
	PrincipalID, TaskID string
	RunID, Attempt, Seq int64
	Kind                EffectKind
	Fingerprint         string
	IdempotencyKey      string
	Summary             string
	// Depth is the depth of a model call; its budget is the deepest call.
	Depth int64
	// Replay records an effect served from an earlier attempt's observed
	// result: it is stored observed with Result and charges nothing, since
	// the original was charged.
	Replay bool
	Result []byte
}

const effectCols = `task_id, attempt, seq, kind, fingerprint, idempotency_key, status, summary, depth, replayed, result, created_ns, updated_ns`

func scanEffect(sc scanner) (Effect, error) {
	var e Effect
	var created, updated int64
	var replayed int64
	err := sc.Scan(&e.TaskID, &e.Attempt, &e.Seq, &e.Kind, &e.Fingerprint, &e.IdempotencyKey, &e.Status,
		&e.Summary, &e.Depth, &replayed, &e.Result, &created, &updated)
	e.Replayed = replayed == 1
	e.CreatedAt, e.UpdatedAt = fromNanos(created), fromNanos(updated)
	return e, err
}

const (
	qChargeTool = `UPDATE tasks SET tool_calls_used = tool_calls_used + 1
		WHERE id = ? AND principal_id = ? AND run_id = ? AND status = 'running' AND tool_calls_used < tool_calls_limit
		RETURNING ` + taskCols
	qChargeModel = `UPDATE tasks SET model_calls_used = model_calls_used + 1, depth_used = max(depth_used, ?1)
		WHERE id = ?2 AND principal_id = ?3 AND run_id = ?4 AND status = 'running'
			AND model_calls_used < model_calls_limit AND ?1 <= depth_limit
		RETURNING ` + taskCols
	qLiveTask = `SELECT ` + taskCols + ` FROM tasks
		WHERE id = ? AND principal_id = ? AND run_id = ? AND status IN ('running','waiting_approval')`
	qInsertEffect = `INSERT INTO effects (` + effectCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING ` + effectCols
	qMarkEffect = `UPDATE effects SET status = ?1, result = ?2, updated_ns = ?3
		WHERE task_id = ?4 AND attempt = ?5 AND seq = ?6 AND status = ?7
			AND EXISTS (SELECT 1 FROM tasks WHERE id = ?4 AND principal_id = ?8)
		RETURNING ` + effectCols
	qReplayable = `SELECT ` + effectCols + ` FROM effects
		WHERE task_id = ? AND attempt < ? AND seq = ? AND fingerprint = ? AND status = 'observed' AND result IS NOT NULL
		ORDER BY attempt DESC LIMIT 1`
	// An effect of an attempt after the last completed one is unsettled
	// when it is indeterminate, or observed without the result a re-run
	// would replay.
	unsettledWhere = `task_id = ?1 AND (status = 'indeterminate' OR (status = 'observed' AND result IS NULL AND replayed = 0))
			AND attempt > coalesce((SELECT max(number) FROM attempts WHERE task_id = ?1 AND status = 'completed'), 0)`
	qIndeterminate = `SELECT ` + effectCols + ` FROM effects WHERE ` + unsettledWhere + `
		ORDER BY attempt, seq LIMIT 100`
	qUnsettled = `SELECT ` + effectCols + ` FROM effects WHERE ` + unsettledWhere + `
			AND attempt < ?2 AND kind = ?3 AND fingerprint = ?4
		ORDER BY attempt DESC, seq LIMIT 1`
	qListEffects = `SELECT ` + effectCols + ` FROM effects WHERE task_id = ? ORDER BY attempt, seq LIMIT 10000`
	// An attempt's outcome committed: no step re-runs it, so no result of
	// the task is kept for replay.
	qDropEffectResults = `UPDATE effects SET result = NULL WHERE task_id = ? AND result IS NOT NULL`
	// The unsettled effects of the tasks leased to host ?2 (or to no host).
	qSettleHostEffects = `UPDATE effects SET status = CASE status WHEN 'dispatching' THEN 'indeterminate' ELSE 'failed' END,
			updated_ns = ?1 WHERE status IN ('admitted','dispatching')
			AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = effects.task_id AND t.lease_host IN (?2, ''))`
	qSettleTaskEffects = `UPDATE effects SET status = CASE status WHEN 'dispatching' THEN 'indeterminate' ELSE 'failed' END,
			updated_ns = ?1 WHERE task_id = ?2 AND status IN ('admitted','dispatching')
			AND NOT EXISTS (SELECT 1 FROM attempts WHERE task_id = ?2 AND status = 'running')
			AND EXISTS (SELECT 1 FROM tasks WHERE id = ?2 AND principal_id = ?3)`
)

// effectQueries are the effect write statements, prepared at Open.
func effectQueries() []string {
	return []string{qChargeTool, qChargeModel, qLiveTask, qInsertEffect, qMarkEffect, qDropEffectResults, qSettleHostEffects, qSettleTaskEffects}
}

func (s *Store) checkEffect(e NewEffect) error {
	switch {
	case e.Kind != EffectModel && e.Kind != EffectTool && e.Kind != EffectApproval:
		return invalidf("unknown effect kind %q", e.Kind)
	case e.Fingerprint == "" || len(e.Fingerprint) > maxFingerprint:
		return invalidf("effect fingerprint must be 1..%d bytes", maxFingerprint)
	case e.Attempt < 1 || e.Seq < 1 || e.Depth < 0:
		return invalidf("effect attempt and seq must be positive, depth not negative")
	case e.Replay && e.Result == nil:
		return invalidf("a replayed effect needs its result")
	}
	for _, c := range []struct {
		field    string
		n, limit int
	}{
		{"effect idempotency_key", len(e.IdempotencyKey), maxEffectKey},
		{"effect summary", len(e.Summary), maxEffectSum},
		{"effect result", len(e.Result), MaxEffectResult},
	} {
		if err := checkSize(c.field, c.n, c.limit); err != nil {
			return err
		}
	}
	return nil
}

// AdmitEffect admits an effect of a running attempt in one transaction: the
// budget of its kind is charged (tool calls, or model calls and depth) and
// the ledger row is written admitted. An effect that would exceed a budget
// is refused with a *BudgetError and nothing is written. A replayed effect
// charges nothing and is written observed.
func (s *Store) AdmitEffect(ctx context.Context, e NewEffect, events ...NewEvent) (Effect, Task, error) {
	if err := s.checkEffect(e); err != nil {
		return Effect{}, Task{}, err
	}
	if err := s.checkEvents(events); err != nil {
		return Effect{}, Task{}, err
	}
	var out Effect
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		// The task first: the attempt read next, and the live-task read of
		// a replay or an approval, must hold until the effect's row is in.
		if err := tx.lockTaskRow(ctx, e.TaskID); err != nil {
			return err
		}
		if err := runningAttempt(ctx, tx, e.PrincipalID, e.TaskID, e.Attempt, e.RunID); err != nil {
			return err
		}
		var err error
		switch {
		case e.Replay || e.Kind == EffectApproval:
			t, err = scanTask(tx.QueryRowContext(ctx, qLiveTask, e.TaskID, e.PrincipalID, e.RunID))
		case e.Kind == EffectTool:
			t, err = scanTask(tx.QueryRowContext(ctx, qChargeTool, e.TaskID, e.PrincipalID, e.RunID))
		default:
			t, err = scanTask(tx.QueryRowContext(ctx, qChargeModel, e.Depth, e.TaskID, e.PrincipalID, e.RunID))
		}
		if errors.Is(err, sql.ErrNoRows) {
			return s.chargeRefused(ctx, tx, e)
		}
		if err != nil {
			return err
		}
		status, replayed := EffectAdmitted, 0
		if e.Replay {
			status, replayed = EffectObserved, 1
		}
		now := nanos(s.now())
		out, err = scanEffect(tx.QueryRowContext(ctx, qInsertEffect, e.TaskID, e.Attempt, e.Seq, string(e.Kind),
			e.Fingerprint, e.IdempotencyKey, string(status), e.Summary, e.Depth, replayed, e.Result, now, now))
		if s.d.constraint(err) {
			return fmt.Errorf("task %s attempt %d: effect %d already exists: %w", e.TaskID, e.Attempt, e.Seq, ErrConflict)
		}
		if err != nil {
			return err
		}
		_, err = s.appendEvents(ctx, tx, t.ID, t.RunID, events)
		return err
	})
	if err != nil {
		return Effect{}, Task{}, err
	}
	return out, t, nil
}

// chargeRefused explains an admission that matched no task row.
func (s *Store) chargeRefused(ctx context.Context, tx *txn, e NewEffect) error {
	t, err := scanTask(tx.QueryRowContext(ctx, qTaskByID, e.TaskID, e.PrincipalID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return notFound(e.TaskID)
	case err != nil:
		return err
	case t.Status != StatusRunning || t.RunID != e.RunID:
		return &TransitionError{TaskID: e.TaskID, Current: t.Status, RunID: t.RunID, WantRunID: e.RunID}
	case e.Kind == EffectTool:
		return &BudgetError{Budget: BudgetToolCalls, Limit: t.Budgets.ToolCalls.Limit, Used: t.Budgets.ToolCalls.Used}
	case e.Depth > t.Budgets.Depth.Limit:
		return &BudgetError{Budget: BudgetDepth, Limit: t.Budgets.Depth.Limit, Used: e.Depth}
	default:
		return &BudgetError{Budget: BudgetModelCalls, Limit: t.Budgets.ModelCalls.Limit, Used: t.Budgets.ModelCalls.Used}
	}
}

// MarkEffect is an effect's status change, by its (task, attempt, seq) key.
type MarkEffect struct {
	PrincipalID, TaskID string
	Attempt, Seq        int64
	From, To            EffectStatus
	Result              []byte // kept for replay until the attempt commits
}

// MarkEffect moves an effect from m.From to m.To, storing m.Result. It is a compare-and-set: an effect
// no longer in from gives ErrConflict. dispatching must be committed before
// the effect crosses its boundary.
func (s *Store) MarkEffect(ctx context.Context, m MarkEffect) (Effect, error) {
	principal, taskID, attempt, seq, from, to, result := m.PrincipalID, m.TaskID, m.Attempt, m.Seq, m.From, m.To, m.Result
	legal := (from == EffectAdmitted && (to == EffectDispatching || to == EffectFailed)) ||
		(from == EffectDispatching && (to == EffectObserved || to == EffectFailed || to == EffectIndeterminate))
	if !legal {
		return Effect{}, invalidf("effect %s → %s is not a legal change", from, to)
	}
	if err := checkSize("effect result", len(result), MaxEffectResult); err != nil {
		return Effect{}, err
	}
	var out Effect
	err := s.write(ctx, func(tx *txn) error {
		var err error
		out, err = scanEffect(tx.QueryRowContext(ctx, qMarkEffect, string(to), result, nanos(s.now()),
			taskID, attempt, seq, string(from), principal))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %s attempt %d effect %d is not %s: %w", taskID, attempt, seq, from, ErrConflict)
		}
		return err
	})
	return out, err
}

// SettleEffects does for one task what start-up recovery does for all: once
// no attempt of the task is running, an effect left dispatching becomes
// indeterminate and one left admitted failed. The runner calls it after an
// attempt ended without its effects' last writes (the store was failing).
func (s *Store) SettleEffects(ctx context.Context, principal, taskID string) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *txn) error {
		// The task first: no claim may start an attempt between the
		// check for a running one and the settling.
		if err := tx.lockTaskRow(ctx, taskID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, qSettleTaskEffects, nanos(s.now()), taskID, principal)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// Replayable finds the observed result of effect (seq, fingerprint) from an
// earlier attempt of the task whose outcome never committed, for a re-run of
// the same step to replay instead of repeating it.
func (s *Store) Replayable(ctx context.Context, principal, taskID string, attempt, seq int64, fingerprint string) (Effect, bool, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return Effect{}, false, err
	}
	e, err := scanEffect(s.readRow(ctx, qReplayable, taskID, attempt, seq, fingerprint))
	if errors.Is(err, sql.ErrNoRows) {
		return Effect{}, false, nil
	}
	return e, err == nil, err
}

// IndeterminateEffects lists the unsettled effects of the attempts since
// the task's last completed one: those that were dispatching when their
// attempt died (indeterminate) and those observed whose result was not kept
// (reported as EffectObservedUnreplayable).
func (s *Store) IndeterminateEffects(ctx context.Context, principal, taskID string) ([]Effect, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return nil, err
	}
	effs, err := s.effects(ctx, qIndeterminate, taskID)
	for i := range effs {
		effs[i] = unsettled(effs[i])
	}
	return effs, err
}

// UnsettledEffect finds an unsettled effect of kind with fingerprint from an
// attempt before attempt of the same unfinished step: running that effect
// again may repeat what it did.
func (s *Store) UnsettledEffect(ctx context.Context, principal, taskID string, attempt int64, kind EffectKind, fingerprint string) (Effect, bool, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return Effect{}, false, err
	}
	e, err := scanEffect(s.readRow(ctx, qUnsettled, taskID, attempt, string(kind), fingerprint))
	if errors.Is(err, sql.ErrNoRows) {
		return Effect{}, false, nil
	}
	return unsettled(e), err == nil, err
}

func unsettled(e Effect) Effect {
	if e.Status == EffectObserved {
		e.Status = EffectObservedUnreplayable
	}
	return e
}

// ListEffects returns a task's ledger in order (bounded).
func (s *Store) ListEffects(ctx context.Context, principal, taskID string) ([]Effect, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return nil, err
	}
	return s.effects(ctx, qListEffects, taskID)
}

func (s *Store) effects(ctx context.Context, q, taskID string) ([]Effect, error) {
	rows, err := s.readRows(ctx, q, taskID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Effect
	for rows.Next() {
		e, err := scanEffect(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
