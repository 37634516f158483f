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

// EffectResolution is where an unsettled tool effect stands (DESIGN §6):
// an effect that is indeterminate, or observed without a kept result in an
// attempt that did not complete, is unsettled until it is resolved,
// durably, retry_authorized or abandoned. Until then no later attempt, run
// or host of the task re-admits the same effect (same fingerprint, or same
// non-empty idempotency key).
type EffectResolution string

const (
	// ResolutionNone is an effect that never was unsettled, or an
	// observed one its own attempt's completion settled.
	ResolutionNone      EffectResolution = ""
	ResolutionUnsettled EffectResolution = "unsettled"
	// ResolutionRetryAuthorized: an approval bound to the effect (its id
	// is ResolvedBy) or an operator allowed the call to run again.
	ResolutionRetryAuthorized EffectResolution = "retry_authorized"
	// ResolutionAbandoned: the executor or an operator gave the effect
	// up. A later call with the same fingerprint is a new call.
	ResolutionAbandoned EffectResolution = "abandoned"
)

// Resolvers recorded in ResolvedBy besides an approval's id.
const (
	ResolvedByExecutor = "executor"
	// ResolvedByOperatorPrefix precedes the principal who resolved it.
	ResolvedByOperatorPrefix = "operator:"
)

// maxResolvedBy bounds ResolvedBy: an operator's principal (256) and its
// prefix.
const maxResolvedBy = 300

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
	// Resolution is the effect's place in the gate; ResolvedBy and
	// ResolvedAt say who resolved it and when (zero while unresolved).
	Resolution EffectResolution
	ResolvedBy string
	ResolvedAt time.Time
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
	// Tokens is what a model call is known to need of the token budget
	// before it runs (its prompt's estimate): it is admitted only when the
	// tokens used so far and these fit max_model_tokens. Nothing is
	// charged here; the call's tokens are charged as it is observed
	// (ObserveEffect).
	Tokens int64
	// Replay records an effect served from an earlier attempt's observed
	// result: it is stored observed with Result and charges nothing, since
	// the original was charged.
	Replay bool
	Result []byte
}

const (
	effectInsertCols = `task_id, attempt, seq, kind, fingerprint, idempotency_key, status, summary, depth, replayed, result, created_ns, updated_ns`
	effectCols       = effectInsertCols + `, resolution, resolved_by, resolved_ns`
)

func scanEffect(sc scanner) (Effect, error) {
	var e Effect
	var created, updated int64
	var replayed int64
	var resolved sql.NullInt64
	err := sc.Scan(&e.TaskID, &e.Attempt, &e.Seq, &e.Kind, &e.Fingerprint, &e.IdempotencyKey, &e.Status,
		&e.Summary, &e.Depth, &replayed, &e.Result, &created, &updated, &e.Resolution, &e.ResolvedBy, &resolved)
	e.Replayed = replayed == 1
	e.CreatedAt, e.UpdatedAt = fromNanos(created), fromNanos(updated)
	if resolved.Valid {
		e.ResolvedAt = fromNanos(resolved.Int64)
	}
	return e, err
}

const (
	// An effect is admitted only while output is left: what it hands
	// back is known only once it ran.
	qChargeTool = `UPDATE tasks SET tool_calls_used = tool_calls_used + 1
		WHERE id = $1 AND principal_id = $2 AND run_id = $3 AND status = 'running' AND tool_calls_used < tool_calls_limit
			AND output_bytes_used < output_bytes_limit
		RETURNING ` + taskCols
	qLiveTask = `SELECT ` + taskCols + ` FROM tasks
		WHERE id = $1 AND principal_id = $2 AND run_id = $3 AND status IN ('running','waiting_approval')`
	qInsertEffect = `INSERT INTO effects (` + effectInsertCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		RETURNING ` + effectCols
	// A tool effect becomes unsettled as it becomes indeterminate, or
	// observed without a result a re-run could replay ($9 = 1: no result;
	// a parameter of its own, as PostgreSQL cannot type "$2 IS NULL").
	qMarkEffect = `UPDATE effects SET status = $1, result = $2, updated_ns = $3,
			resolution = CASE WHEN kind = 'tool' AND ($1 = 'indeterminate' OR ($1 = 'observed' AND $9 = 1 AND replayed = 0))
				THEN 'unsettled' ELSE resolution END
		WHERE task_id = $4 AND attempt = $5 AND seq = $6 AND status = $7
			AND EXISTS (SELECT 1 FROM tasks WHERE id = $4 AND principal_id = $8)
		RETURNING ` + effectCols
	qReplayable = `SELECT ` + effectCols + ` FROM effects
		WHERE task_id = $1 AND attempt < $2 AND seq = $3 AND fingerprint = $4 AND status = 'observed' AND result IS NOT NULL
		ORDER BY attempt DESC LIMIT 1`
	// The effects' own runs (not replays) with a kept result, from the
	// attempts before $2 (results are kept only while no attempt of the
	// task committed: the step's), in recorded order. Approvals keep to
	// their place.
	qReplayCandidates = `SELECT fingerprint, attempt, seq FROM effects
		WHERE task_id = $1 AND attempt < $2 AND kind <> 'approval' AND status = 'observed' AND result IS NOT NULL AND replayed = 0
		ORDER BY attempt, seq LIMIT ` + maxReplayCandidates
	qReplayableAt = `SELECT ` + effectCols + ` FROM effects
		WHERE task_id = $1 AND attempt = $2 AND seq = $3 AND status = 'observed' AND result IS NOT NULL`
	// What a step is told: the task's unresolved tool effects, whatever
	// attempt left them, and the model and approval effects left
	// indeterminate since the last completed attempt (those are not
	// gated: a model call re-runs at a charge, an approval is asked
	// again).
	qIndeterminate = `SELECT ` + effectCols + ` FROM effects WHERE task_id = $1 AND (resolution = 'unsettled'
			OR (kind <> 'tool' AND status = 'indeterminate'
				AND attempt > coalesce((SELECT max(number) FROM attempts WHERE task_id = $1 AND status = 'completed'), 0)))
		ORDER BY attempt, seq LIMIT ` + maxUnsettledListed
	// The gate: the unresolved tool effects a call with fingerprint $2 or
	// idempotency key $3 would re-admit. An observed one of the attempt
	// in flight ($4) is that attempt's own, which its executor saw.
	qUnsettled = `SELECT ` + effectCols + ` FROM effects WHERE task_id = $1 AND resolution = 'unsettled' AND kind = 'tool'
			AND (fingerprint = $2 OR ($3 <> '' AND idempotency_key = $3)) AND (status = 'indeterminate' OR attempt < $4)
		ORDER BY attempt DESC, seq LIMIT ` + maxUnsettledListed
	// Every effect that was unsettled, newest first, as status shows them.
	qUnsettledHistory = `SELECT ` + effectCols + ` FROM effects WHERE task_id = $1 AND resolution <> ''
		ORDER BY attempt DESC, seq DESC LIMIT ` + maxUnsettledListed
	qResolveEffect = `UPDATE effects SET resolution = $1, resolved_by = $2, resolved_ns = $3
		WHERE task_id = $4 AND attempt = $5 AND seq = $6 AND resolution = 'unsettled'
		RETURNING ` + effectCols
	qEffectByKey = `SELECT ` + effectCols + ` FROM effects WHERE task_id = $1 AND attempt = $2 AND seq = $3`
	// An attempt whose outcome committed settles what it observed: its
	// executor saw those results, and no step re-runs it.
	qSettleObserved = `UPDATE effects SET resolution = ''
		WHERE task_id = $1 AND attempt = $2 AND status = 'observed' AND resolution = 'unsettled'`
	qListEffects = `SELECT ` + effectCols + ` FROM effects WHERE task_id = $1 ORDER BY attempt, seq LIMIT 10000`
	// An attempt's outcome committed: no step re-runs it, so no result of
	// the task is kept for replay.
	qDropEffectResults = `UPDATE effects SET result = NULL WHERE task_id = $1 AND result IS NOT NULL`
	// The unsettled effects of the tasks leased to host $2 (or to no host).
	qSettleHostEffects = `UPDATE effects SET status = CASE status WHEN 'dispatching' THEN 'indeterminate' ELSE 'failed' END,
			resolution = CASE WHEN status = 'dispatching' AND kind = 'tool' THEN 'unsettled' ELSE resolution END,
			updated_ns = $1 WHERE status IN ('admitted','dispatching')
			AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = effects.task_id AND t.lease_host IN ($2, ''))`
	qSettleTaskEffects = `UPDATE effects SET status = CASE status WHEN 'dispatching' THEN 'indeterminate' ELSE 'failed' END,
			resolution = CASE WHEN status = 'dispatching' AND kind = 'tool' THEN 'unsettled' ELSE resolution END,
			updated_ns = $1 WHERE task_id = $2 AND status IN ('admitted','dispatching')
			AND NOT EXISTS (SELECT 1 FROM attempts WHERE task_id = $2 AND status = 'running')
			AND EXISTS (SELECT 1 FROM tasks WHERE id = $2 AND principal_id = $3)`
)

// effectQueries are the effect write statements, prepared at Open.
func effectQueries() []string {
	return []string{qChargeTool, qLiveTask, qInsertEffect, qMarkEffect, qDropEffectResults, qSettleHostEffects, qSettleTaskEffects,
		qResolveEffect, qSettleObserved}
}

func (s *Store) checkEffect(e NewEffect) error {
	switch {
	case e.Kind != EffectModel && e.Kind != EffectTool && e.Kind != EffectApproval:
		return invalidf("unknown effect kind %q", e.Kind)
	case e.Fingerprint == "" || len(e.Fingerprint) > maxFingerprint:
		return invalidf("effect fingerprint must be 1..%d bytes", maxFingerprint)
	case e.Attempt < 1 || e.Seq < 1 || e.Depth < 0 || e.Tokens < 0:
		return invalidf("effect attempt and seq must be positive, depth and tokens not negative")
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
			t, err = scanTask(tx.QueryRowContext(ctx, tx.s.q.chargeModel, e.Depth, e.TaskID, e.PrincipalID, e.RunID, modelNeed(e)))
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
	}
	b := t.Budgets
	switch {
	case e.Kind == EffectTool && b.ToolCalls.Used >= b.ToolCalls.Limit:
		return &BudgetError{Budget: BudgetToolCalls, Limit: b.ToolCalls.Limit, Used: b.ToolCalls.Used}
	case e.Kind == EffectModel && e.Depth > b.Depth.Limit:
		return &BudgetError{Budget: BudgetDepth, Limit: b.Depth.Limit, Used: e.Depth}
	case e.Kind == EffectModel && b.ModelCalls.Used >= b.ModelCalls.Limit:
		return &BudgetError{Budget: BudgetModelCalls, Limit: b.ModelCalls.Limit, Used: b.ModelCalls.Used}
	case e.Kind == EffectModel && b.ModelTokens.Used+modelNeed(e) > b.ModelTokens.Limit:
		return &BudgetError{Budget: BudgetModelTokens, Limit: b.ModelTokens.Limit, Used: b.ModelTokens.Used, Need: modelNeed(e)}
	default:
		return &BudgetError{Budget: BudgetOutputBytes, Limit: b.OutputBytes.Limit, Used: b.OutputBytes.Used}
	}
}

// modelNeed is what a model call must find left of the token budget: its
// prompt's estimate, and at least one token, so that a spent budget
// refuses every call.
func modelNeed(e NewEffect) int64 { return max(e.Tokens, 1) }

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
	from, to := m.From, m.To
	legal := (from == EffectAdmitted && (to == EffectDispatching || to == EffectFailed)) ||
		(from == EffectDispatching && (to == EffectObserved || to == EffectFailed || to == EffectIndeterminate))
	if !legal {
		return Effect{}, invalidf("effect %s → %s is not a legal change", from, to)
	}
	if err := checkSize("effect result", len(m.Result), MaxEffectResult); err != nil {
		return Effect{}, err
	}
	var out Effect
	err := s.write(ctx, func(tx *txn) (err error) {
		out, err = s.markEffect(ctx, tx, &m)
		return err
	})
	return out, err
}

// markEffect is MarkEffect's compare-and-set inside tx.
func (s *Store) markEffect(ctx context.Context, tx *txn, m *MarkEffect) (Effect, error) {
	noResult := 0
	if m.Result == nil {
		noResult = 1
	}
	out, err := scanEffect(tx.QueryRowContext(ctx, qMarkEffect, string(m.To), m.Result, nanos(s.now()),
		m.TaskID, m.Attempt, m.Seq, string(m.From), m.PrincipalID, noResult))
	if errors.Is(err, sql.ErrNoRows) {
		return Effect{}, fmt.Errorf("task %s attempt %d effect %d is not %s: %w", m.TaskID, m.Attempt, m.Seq, m.From, ErrConflict)
	}
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

// maxReplayCandidates bounds the earlier runs a re-run of a step may
// replay out of place, as ListEffects bounds a ledger; only their keys are
// read, the result of each when it is replayed.
const maxReplayCandidates = "10000"

// EffectRef names one effect of a task.
type EffectRef struct{ Attempt, Seq int64 }

// ReplayCandidates lists the model and tool effects that earlier attempts
// of the task, whose outcome never committed, ran themselves (a replay is
// not among them: it repeats one of these) and kept the result of, oldest
// first (at most 10000), by fingerprint. A re-run of the step whose call
// does not match its place may replay one of them, each at most once.
func (s *Store) ReplayCandidates(ctx context.Context, principal, taskID string, attempt int64) (map[string][]EffectRef, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return nil, err
	}
	rows, err := s.readRows(ctx, qReplayCandidates, taskID, attempt)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]EffectRef{}
	for rows.Next() {
		var fp string
		var r EffectRef
		if err := rows.Scan(&fp, &r.Attempt, &r.Seq); err != nil {
			return nil, err
		}
		out[fp] = append(out[fp], r)
	}
	return out, rows.Err()
}

// ReplayableAt is the observed effect ref with its kept result, for a
// re-run to replay; false when it has none (any more).
func (s *Store) ReplayableAt(ctx context.Context, principal, taskID string, ref EffectRef) (Effect, bool, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return Effect{}, false, err
	}
	e, err := scanEffect(s.readRow(ctx, qReplayableAt, taskID, ref.Attempt, ref.Seq))
	if errors.Is(err, sql.ErrNoRows) {
		return Effect{}, false, nil
	}
	return e, err == nil, err
}

// maxUnsettledListed bounds every list of unsettled effects: a step's
// StepRequest.Indeterminate, the gate's matches, and status.
const maxUnsettledListed = "100"

// IndeterminateEffects lists what a step is told is unsettled: the task's
// unresolved tool effects from any earlier attempt — indeterminate, and
// observed without a kept result (reported as EffectObservedUnreplayable)
// — and its model and approval effects left indeterminate since its last
// completed attempt; at most 100, oldest first.
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

// UnsettledEffects finds the unresolved tool effects of the task that a
// tool call with fingerprint, or with the non-empty idempotency key, would
// run again, newest first (at most 100). An observed one of attempt, the
// attempt in flight, is not among them: its executor saw the result.
func (s *Store) UnsettledEffects(ctx context.Context, principal, taskID string, attempt int64, fingerprint, key string) ([]Effect, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return nil, err
	}
	rows, err := s.readRows(ctx, qUnsettled, taskID, fingerprint, key, attempt)
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
		out = append(out, unsettled(e))
	}
	return out, rows.Err()
}

// UnsettledHistory lists every effect of the task that was unsettled,
// resolved or not, newest first (at most 100): what status shows.
func (s *Store) UnsettledHistory(ctx context.Context, principal, taskID string) ([]Effect, error) {
	if _, err := s.GetTask(ctx, principal, taskID); err != nil {
		return nil, err
	}
	effs, err := s.effects(ctx, qUnsettledHistory, taskID)
	for i := range effs {
		if effs[i].Resolution == ResolutionUnsettled {
			effs[i] = unsettled(effs[i])
		}
	}
	return effs, err
}

// ResolveEffect is a resolution of one unsettled effect.
type ResolveEffect struct {
	PrincipalID, TaskID string
	Attempt, Seq        int64
	To                  EffectResolution // retry_authorized or abandoned
	// By is who resolved it: the approval's id, ResolvedByExecutor, or
	// ResolvedByOperatorPrefix and the principal.
	By string
}

// ResolveEffect resolves an unsettled effect, with events, in one
// transaction. It is a compare-and-set: an effect that is not (or no
// longer) unsettled gives ErrConflict, one the task does not have
// ErrNotFound.
func (s *Store) ResolveEffect(ctx context.Context, r ResolveEffect, events ...NewEvent) (Effect, error) {
	switch {
	case r.To != ResolutionRetryAuthorized && r.To != ResolutionAbandoned:
		return Effect{}, invalidf("effect resolution %q is not retry_authorized or abandoned", r.To)
	case r.By == "" || len(r.By) > maxResolvedBy:
		return Effect{}, invalidf("effect resolved_by must be 1..%d bytes, got %d", maxResolvedBy, len(r.By))
	case r.Attempt < 1 || r.Seq < 1:
		return Effect{}, invalidf("effect attempt and seq must be positive, got %d and %d", r.Attempt, r.Seq)
	}
	if err := s.checkEvents(events); err != nil {
		return Effect{}, err
	}
	var out Effect
	err := s.write(ctx, func(tx *txn) error {
		t, err := scanTask(tx.QueryRowContext(ctx, qTaskByID, r.TaskID, r.PrincipalID))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound(r.TaskID)
		}
		if err != nil {
			return err
		}
		out, err = scanEffect(tx.QueryRowContext(ctx, qResolveEffect, string(r.To), r.By, nanos(s.now()), r.TaskID, r.Attempt, r.Seq))
		if errors.Is(err, sql.ErrNoRows) {
			cur, err := scanEffect(tx.QueryRowContext(ctx, qEffectByKey, r.TaskID, r.Attempt, r.Seq))
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("task %s has no effect %d/%d: %w", r.TaskID, r.Attempt, r.Seq, ErrNotFound)
			case err != nil:
				return err
			case cur.Resolution == ResolutionNone:
				return fmt.Errorf("task %s effect %d/%d (%s) is not unsettled: %w", r.TaskID, r.Attempt, r.Seq, cur.Status, ErrConflict)
			}
			return fmt.Errorf("task %s effect %d/%d is already %s by %s: %w", r.TaskID, r.Attempt, r.Seq, cur.Resolution, cur.ResolvedBy, ErrConflict)
		}
		if err != nil {
			return err
		}
		_, err = s.appendEvents(ctx, tx, t.ID, t.RunID, events)
		return err
	})
	return out, err
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
