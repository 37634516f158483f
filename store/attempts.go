package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// ClaimAttempt claims the next step attempt of a task running in runID and
// charges the step budget for it, in one transaction: the attempt row
// (Number = previous + 1, running) exists if and only if the step was
// charged. When the step budget is spent it returns a *BudgetError and
// writes nothing. A task that is not running in runID gives ErrNotFound or a
// *TransitionError; a task whose previous attempt is still running gives
// ErrConflict (close it first with FinishAttempt or AbandonAttempt).
func (s *Store) ClaimAttempt(ctx context.Context, principal, id string, runID int64, events ...NewEvent) (Attempt, Task, error) {
	if err := s.checkEvents(events); err != nil {
		return Attempt{}, Task{}, err
	}
	var a Attempt
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		var err error
		a, t, err = s.claim(ctx, tx, principal, id, runID, events)
		return err
	})
	if err != nil {
		return Attempt{}, Task{}, err
	}
	return a, t, nil
}

// claim is ClaimAttempt inside tx.
func (s *Store) claim(ctx context.Context, tx *txn, principal, id string, runID int64, events []NewEvent) (Attempt, Task, error) {
	now := nanos(s.now())
	var stored int64
	t, err := scanTask(tx.QueryRowContext(ctx, qClaimTask, now, len(events), id, principal, runID), &stored)
	if errors.Is(err, sql.ErrNoRows) {
		return Attempt{}, Task{}, claimRefused(ctx, tx, principal, id, runID)
	}
	if err != nil {
		return Attempt{}, Task{}, err
	}
	tx.wrote(id)
	var last int64
	var running sql.NullInt64
	if err := tx.QueryRowContext(ctx, tx.s.q.attemptsHead, id).Scan(&last, &running); err != nil {
		return Attempt{}, Task{}, err
	}
	if running.Valid {
		return Attempt{}, Task{}, fmt.Errorf("task %s: attempt %d is still running: %w", id, running.Int64, ErrConflict)
	}
	a, err := insertAttempt(ctx, tx, id, last+1, runID, now)
	if err != nil {
		return Attempt{}, Task{}, err
	}
	_, err = s.storeEvents(ctx, tx, id, t.RunID, stored, events)
	return a, t, err
}

const (
	qClaimTask = `UPDATE tasks SET steps_used = steps_used + 1, updated_ns = $1, events_stored = events_stored + $2
		WHERE id = $3 AND principal_id = $4 AND status = 'running' AND run_id = $5 AND steps_used < steps_limit
		RETURNING ` + taskCols + `, events_stored`
	qInsertAttempt = `INSERT INTO attempts (task_id, number, run_id, status, started_ns)
		VALUES ($1, $2, $3, 'running', $4)`
	qClaimRefused = `SELECT status, run_id, steps_used, steps_limit FROM tasks WHERE id = $1 AND principal_id = $2`
)

// insertAttempt inserts attempt number of task id, running since now. The
// row is all parameters and column defaults, so it is built here rather
// than read back: a RETURNING costs a row scan on the step path.
func insertAttempt(ctx context.Context, tx *txn, id string, number, runID, now int64) (Attempt, error) {
	if _, err := tx.ExecContext(ctx, qInsertAttempt, id, number, runID, now); err != nil {
		return Attempt{}, err
	}
	return Attempt{TaskID: id, Number: number, RunID: runID, Status: AttemptRunning, StartedAt: fromNanos(now), ExitCode: -1}, nil
}

// claimRefused explains a claim that matched no row.
func claimRefused(ctx context.Context, tx *txn, principal, id string, runID int64) error {
	var st Status
	var run, used, limit int64
	err := tx.QueryRowContext(ctx, qClaimRefused, id, principal).Scan(&st, &run, &used, &limit)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return notFound(id)
	case err != nil:
		return err
	case st != StatusRunning || run != runID:
		return &TransitionError{TaskID: id, Current: st, RunID: run, WantRunID: runID}
	}
	return &BudgetError{Budget: BudgetSteps, Limit: limit, Used: used}
}

// FinishAttempt records the end of a running attempt. The attempt row, the
// checkpoint, the result, wall time and (when TaskTo is set) the task's
// status change commit together or not at all.
type FinishAttempt struct {
	PrincipalID, TaskID string
	RunID               int64
	Number              int64

	Status     AttemptStatus // completed, failed, interrupted or cancelled
	Outcome    string        // "continue", "complete", "fail" or ""
	Summary    string
	Reason     Reason
	Message    string
	ExitCode   int
	ExitSignal string
	StderrTail string

	Checkpoint     []byte // nil (or empty) keeps the stored checkpoint; else sealed at attempt Number
	Result         []byte // only with TaskTo completed
	WallMillisUsed int64  // absolute; stored as max(stored, this)

	TaskTo      Status // "" leaves the task's status as it is; else the target
	TaskReason  Reason
	TaskMessage string

	Events []NewEvent

	// Workspace is what the attempt changed in the task's workspace,
	// stored with its outcome (workspace.go); nil stores nothing.
	Workspace *WorkspaceChange
}

// liveStatuses are the task statuses in which an attempt may finish.
var liveStatuses = []Status{StatusRunning, StatusWaitingApproval}

// checkFinish validates f against the store's limits before anything is written.
// It returns the statuses the task may be in for the compare-and-set.
func (s *Store) checkFinish(f *FinishAttempt) ([]Status, error) {
	switch {
	case !f.Status.closed():
		return nil, invalidf("an attempt cannot finish as %q", f.Status)
	case !validOutcome(f.Outcome):
		return nil, invalidf("unknown outcome %q", f.Outcome)
	case f.WallMillisUsed < 0:
		return nil, invalidf("negative wall time")
	case f.Result != nil && f.TaskTo != StatusCompleted:
		return nil, invalidf("a result is only stored when the task completes")
	}
	for _, r := range []Reason{f.Reason, f.TaskReason} {
		if err := checkReason(r); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		field    string
		n, limit int
	}{
		{"summary", len(f.Summary), s.lim.Summary},
		{"message", len(f.Message), s.lim.Message},
		{"message", len(f.TaskMessage), s.lim.Message},
		{"stderr_tail", len(f.StderrTail), s.lim.StderrTail},
		{"checkpoint", len(f.Checkpoint), s.lim.Checkpoint},
		{"result", len(f.Result), s.lim.Result},
	} {
		if err := checkSize(c.field, c.n, c.limit); err != nil {
			return nil, err
		}
	}
	if err := s.checkEvents(f.Events); err != nil {
		return nil, err
	}
	if err := s.checkWorkspaceChange(f.TaskID, f.Workspace); err != nil {
		return nil, err
	}
	if f.TaskTo == "" {
		return liveStatuses, nil
	}
	if !f.TaskTo.valid() {
		return nil, invalidf("unknown status %q", f.TaskTo)
	}
	var from []Status
	for _, st := range liveStatuses {
		if Legal(st, f.TaskTo) {
			from = append(from, st)
		}
	}
	if len(from) == 0 {
		return nil, invalidf("a live task cannot become %s", f.TaskTo)
	}
	return from, nil
}

// FinishAttempt closes a running attempt and applies its effects on the
// task in one transaction. The attempt must be running in f.RunID (else
// ErrConflict or ErrNotFound). The task must still be live (running or
// waiting_approval) in f.RunID: if a concurrent change won — a Cancel, say —
// nothing is written and a *TransitionError is returned; the caller then
// closes the attempt with AbandonAttempt. Every size is checked first: a
// *LimitError naming the field means nothing was written.
func (s *Store) FinishAttempt(ctx context.Context, f FinishAttempt) (Task, error) {
	from, err := s.checkFinish(&f)
	if err != nil {
		return Task{}, err
	}
	var t Task
	err = s.write(ctx, func(tx *txn) error {
		var err error
		t, err = s.finish(ctx, tx, f, from)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// FinishAndClaim is FinishAttempt followed, in the same transaction, by
// ClaimAttempt of the next attempt when the task stays running: one commit
// per step instead of two. Each half keeps its own guarantees. When the step
// budget is spent the finish still commits, and next is nil with a
// *BudgetError in exhausted; any other refusal of the claim undoes both.
// On SQLite, steps of several tasks finishing at once share one commit
// (writeGrouped); once queued for one, the step is written whether or not
// ctx is cancelled, and the call returns its real result.
func (s *Store) FinishAndClaim(ctx context.Context, f FinishAttempt, nextEvents ...NewEvent) (t Task, next *Attempt, exhausted *BudgetError, err error) {
	if f.TaskTo != "" {
		return Task{}, nil, nil, invalidf("FinishAndClaim keeps the task running: TaskTo must be empty")
	}
	from, err := s.checkFinish(&f)
	if err != nil {
		return Task{}, nil, nil, err
	}
	if err := s.checkEvents(nextEvents); err != nil {
		return Task{}, nil, nil, err
	}
	// On PostgreSQL the common case is one round trip (pgStep).
	// pgStep trims only events older than the step's: a step of more
	// events than the limit takes finishAndClaimFast.
	_, pg := s.d.(pgDialect)
	// A step that changed its workspace takes the general path, whose
	// transaction stores the change with the outcome.
	pg = pg && f.Status != AttemptInterrupted && len(f.Events)+len(nextEvents) <= s.lim.EventsPerTask && f.Workspace == nil
	if pg {
		t, next, ok, err := s.pgStep(ctx, f, append(slices.Clip(f.Events), nextEvents...))
		if err != nil || ok {
			return t, next, nil, err
		}
	}
	err = s.writeGrouped(ctx, func(ctx context.Context, tx *txn) error {
		next, exhausted = nil, nil
		var err error
		var fast bool
		if !pg { // pgStep found the task outside the common case
			if t, next, fast, err = s.finishAndClaimFast(ctx, tx, f, nextEvents); err != nil {
				return err
			}
			if fast {
				return s.putWorkspace(ctx, tx, f.TaskID, f.Number, f.Workspace)
			}
		}
		if t, err = s.finish(ctx, tx, f, from); err != nil {
			return err
		}
		if t.Status != StatusRunning {
			return nil // waiting for an approval: nothing to claim yet
		}
		a, ct, err := s.claim(ctx, tx, f.PrincipalID, f.TaskID, f.RunID, nextEvents)
		if errors.As(err, &exhausted) {
			return nil
		}
		if err != nil {
			return err
		}
		t, next = ct, &a
		return nil
	})
	if err != nil {
		return Task{}, nil, nil, err
	}
	return t, next, exhausted, nil
}

// eventTrimSlack is how far past Limits.EventsPerTask the step path lets
// a task's events run before it trims them back to the limit: a long task
// then pays for a trim (two statements) once every eventTrimSlack/2 or so
// steps, not on every step past the limit; a task under its limit never
// does. Every other writer of events trims at once.
const eventTrimSlack = 32

// finishAndClaimFast is FinishAndClaim's common case — the task running in
// f.RunID with steps left, the attempt ending other than interrupted — in
// two statements beyond the attempt rows: one task update that records
// the outcome and charges the next step (and tells whether any effect
// result awaits dropping), and one insert of all the events. The attempt
// is checked by the update of its row (rows affected) instead of a read
// first, the next number is f.Number+1 (the running attempt is the last
// one: a claim refuses to start another while one runs), effect results
// are dropped only when some exist, and the task update counts the events
// (events_stored), which are trimmed only when that count passes the limit
// by more than eventTrimSlack.
//
// fast is false, with nothing written, when the task is not in that case;
// the caller then takes the general path, which explains any refusal. An
// attempt that is not running in f.RunID is reported as the general path
// would, and tx must then be rolled back.
func (s *Store) finishAndClaimFast(ctx context.Context, tx *txn, f FinishAttempt, nextEvents []NewEvent) (t Task, next *Attempt, fast bool, err error) {
	if f.Status == AttemptInterrupted {
		return Task{}, nil, false, nil
	}
	now := nanos(s.now())
	var checkpoint any // nil binds NULL: coalesce keeps the stored value
	newCheckpoint := 0
	if len(f.Checkpoint) > 0 {
		checkpoint, newCheckpoint = f.Checkpoint, 1
	}
	events := append(slices.Clip(f.Events), nextEvents...)
	var stored int64
	var results, observedUnsettled bool
	row := tx.QueryRowContext(ctx, qFinishClaimTask, f.WallMillisUsed, f.WallMillisUsed, checkpoint, newCheckpoint, f.Number, now,
		len(events), f.TaskID, f.PrincipalID, f.RunID, f.TaskID, f.TaskID, f.Number, f.TaskID, f.Number)
	t, err = scanTask(row, &stored, &results, &observedUnsettled)
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, nil, false, nil
	}
	if err != nil {
		return Task{}, nil, true, err
	}
	res, err := tx.ExecContext(ctx, qFinishRunningAttempt, string(f.Status), f.Outcome, f.Summary, string(f.Reason), f.Message, now,
		f.ExitCode, f.ExitSignal, f.StderrTail, f.TaskID, f.Number, f.RunID)
	if err != nil {
		return Task{}, nil, true, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err == nil {
			if err = runningAttempt(ctx, tx, f.PrincipalID, f.TaskID, f.Number, f.RunID); err == nil {
				err = fmt.Errorf("task %s: attempt %d was not closed: %w", f.TaskID, f.Number, ErrConflict)
			}
		}
		return Task{}, nil, true, err
	}
	if results {
		if _, err := tx.ExecContext(ctx, qDropEffectResults, f.TaskID); err != nil {
			return Task{}, nil, true, err
		}
	}
	if observedUnsettled {
		if _, err := tx.ExecContext(ctx, qSettleObserved, f.TaskID, f.Number); err != nil {
			return Task{}, nil, true, err
		}
	}
	a, err := insertAttempt(ctx, tx, f.TaskID, f.Number+1, f.RunID, now)
	if err != nil {
		return Task{}, nil, true, err
	}
	if err := s.insertEvents(ctx, tx, f.TaskID, t.RunID, now, events); err != nil {
		return Task{}, nil, true, err
	}
	if err := s.trimEvents(ctx, tx, f.TaskID, stored, eventTrimSlack); err != nil {
		return Task{}, nil, true, err
	}
	return t, &a, true, nil
}

const (
	// qFinishClaimTask: the outcome's task side (as finishTaskSQL, for a
	// task that stays running) and the next claim's charge in one
	// compare-and-set, counting the step's events; it returns the new
	// count, and the EXISTS says whether an effect result of an
	// attempt after the last completed one is left to drop. No function
	// of one engine only, so both run the same text.
	qFinishClaimTask = `UPDATE tasks SET
			wall_ms_used = CASE WHEN wall_ms_used < $1 THEN $2 ELSE wall_ms_used END,
			checkpoint = coalesce($3, checkpoint),
			checkpoint_attempt = CASE WHEN $4 = 1 THEN $5 ELSE checkpoint_attempt END,
			steps_used = steps_used + 1, updated_ns = $6, events_stored = events_stored + $7
		WHERE id = $8 AND principal_id = $9 AND run_id = $10 AND status = 'running' AND steps_used < steps_limit
		RETURNING ` + taskCols + `, events_stored, EXISTS (SELECT 1 FROM effects WHERE task_id = $11 AND result IS NOT NULL
			AND attempt > coalesce((SELECT number FROM attempts WHERE task_id = $12 AND number < $13 AND status = 'completed'
				ORDER BY number DESC LIMIT 1), 0)),
			EXISTS (SELECT 1 FROM effects WHERE task_id = $14 AND attempt = $15 AND resolution = 'unsettled' AND status = 'observed')`
	qFinishRunningAttempt = `UPDATE attempts SET status = $1, outcome = $2, summary = $3, reason = $4,
			message = $5, ended_ns = $6, exit_code = $7, exit_signal = $8, stderr_tail = $9
		WHERE task_id = $10 AND number = $11 AND run_id = $12 AND status = 'running'`
)

// finish is FinishAttempt inside tx, after checkFinish.
func (s *Store) finish(ctx context.Context, tx *txn, f FinishAttempt, from []Status) (Task, error) {
	var t Task
	err := func() error {
		// The task first: the attempt read next must hold until the
		// attempt's row is closed below.
		if err := tx.lockTaskRow(ctx, f.TaskID); err != nil {
			return err
		}
		if err := runningAttempt(ctx, tx, f.PrincipalID, f.TaskID, f.Number, f.RunID); err != nil {
			return err
		}
		now := nanos(s.now())
		var checkpoint, result any // nil binds NULL: coalesce keeps the stored value
		if len(f.Checkpoint) > 0 {
			checkpoint = f.Checkpoint
		}
		if f.Result != nil {
			result = f.Result
		}
		args := []any{f.WallMillisUsed, checkpoint, result, now, f.TaskID, f.PrincipalID, f.RunID, f.Number, len(f.Events)}
		if f.TaskTo != "" {
			args = append(args, string(f.TaskTo), string(f.TaskReason), f.TaskMessage)
		}
		for _, st := range from {
			args = append(args, string(st))
		}
		var err error
		var stored int64
		t, err = scanTask(tx.QueryRowContext(ctx, finishTaskSQL(tx.s.q, f.TaskTo != "", len(from)), args...), &stored)
		if errors.Is(err, sql.ErrNoRows) {
			cur, run, err := taskState(ctx, tx, f.PrincipalID, f.TaskID)
			if err != nil {
				return err
			}
			return &TransitionError{TaskID: f.TaskID, Current: cur, To: f.TaskTo, RunID: run, WantRunID: f.RunID}
		}
		if err != nil {
			return err
		}
		tx.wrote(f.TaskID)
		res, err := tx.ExecContext(ctx, qFinishAttemptRow, string(f.Status), f.Outcome, f.Summary, string(f.Reason), f.Message, now,
			f.ExitCode, f.ExitSignal, f.StderrTail, f.TaskID, f.Number)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			// runningAttempt saw it running under the task's lock, so this
			// is a writer that did not take the lock: refuse, not guess.
			return fmt.Errorf("task %s: attempt %d was not closed: %w", f.TaskID, f.Number, ErrConflict)
		}
		// A committed outcome ends the step: nothing of it will be re-run,
		// so no result is kept for replay. An interrupted attempt keeps
		// them for the attempt that re-runs its step.
		if f.Status != AttemptInterrupted {
			if _, err := tx.ExecContext(ctx, qDropEffectResults, f.TaskID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, qSettleObserved, f.TaskID, f.Number); err != nil {
				return err
			}
		}
		if err := s.settleApprovals(ctx, tx, t); err != nil {
			return err
		}
		if _, err = s.storeEvents(ctx, tx, t.ID, t.RunID, stored, f.Events); err != nil {
			return err
		}
		return s.putWorkspace(ctx, tx, f.TaskID, f.Number, f.Workspace)
	}()
	return t, err
}

// finishTaskSQL is the task side of FinishAttempt: wall time only grows, a
// nil checkpoint or result keeps the stored one, a new checkpoint records the
// finishing attempt ($8) as the one that wrote it, the outcome's events
// ($9 of them) are counted, and the status changes only when setStatus —
// all under the same compare-and-set on run and status. It returns the
// task and its new count of events.
func finishTaskSQL(q engineSQL, setStatus bool, n int) string {
	set, first := "", 10
	if setStatus {
		set, first = `, status = $10, reason = $11, message = $12`, 13
	}
	return `UPDATE tasks SET ` + q.finishTaskWall + `, checkpoint = coalesce($2, checkpoint),
			checkpoint_attempt = CASE WHEN $2 IS NULL THEN checkpoint_attempt ELSE $8 END,
			result = coalesce($3, result), updated_ns = $4, events_stored = events_stored + $9` + set + `
		WHERE id = $5 AND principal_id = $6 AND run_id = $7 AND status IN (` + numbered(first, n) + `)
		RETURNING ` + taskCols + `, events_stored`
}

const (
	qFinishAttemptRow = `UPDATE attempts SET status = $1, outcome = $2, summary = $3, reason = $4,
			message = $5, ended_ns = $6, exit_code = $7, exit_signal = $8, stderr_tail = $9
		WHERE task_id = $10 AND number = $11 AND status = 'running'`
	qRunningAttempt = `SELECT a.status, a.run_id FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE a.task_id = $1 AND a.number = $2 AND t.principal_id = $3`
	qAbandonAttempt = `UPDATE attempts SET status = $1, reason = $2, message = $3, ended_ns = $4
		WHERE task_id = $5 AND number = $6 AND status = 'running'`
	qAttemptStatus = `SELECT status FROM attempts WHERE task_id = $1 AND number = $2`
)

// runningAttempt checks, inside tx, that principal's task id has attempt
// number running in runID.
func runningAttempt(ctx context.Context, tx *txn, principal, id string, number, runID int64) error {
	var st AttemptStatus
	var run int64
	err := tx.QueryRowContext(ctx, qRunningAttempt, id, number, principal).Scan(&st, &run)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, _, err := taskState(ctx, tx, principal, id); err != nil {
			return err
		}
		return fmt.Errorf("task %s: attempt %d: %w", id, number, ErrNotFound)
	case err != nil:
		return err
	case st == AttemptRunning && run == runID:
		return nil
	}
	// A newer run owns the task: the caller's lease epoch is stale.
	if cur, taskRun, err := taskState(ctx, tx, principal, id); err != nil {
		return err
	} else if taskRun != runID {
		return &TransitionError{TaskID: id, Current: cur, RunID: taskRun, WantRunID: runID}
	}
	switch {
	case st != AttemptRunning:
		return fmt.Errorf("task %s: attempt %d is already %s: %w", id, number, st, ErrConflict)
	case run != runID:
		return fmt.Errorf("task %s: attempt %d belongs to run %d, not %d: %w", id, number, run, runID, ErrConflict)
	}
	return nil
}

// AbandonAttempt is the closing of a running attempt whose step's outcome
// is discarded.
type AbandonAttempt struct {
	PrincipalID, TaskID string
	Number              int64

	Status         AttemptStatus // completed, failed, interrupted or cancelled
	Reason         Reason
	Message        string
	WallMillisUsed int64 // absolute; stored as max(stored, this)

	Events []NewEvent
}

// AbandonAttempt closes a running attempt whatever its task's status — the
// task was cancelled or interrupted under it, so FinishAttempt refused — and
// charges wall time as max(stored, a.WallMillisUsed): the time was spent
// even though the step's outcome is discarded.
func (s *Store) AbandonAttempt(ctx context.Context, a AbandonAttempt) error {
	principal, id, number, status, reason, message, wallMillisUsed, events :=
		a.PrincipalID, a.TaskID, a.Number, a.Status, a.Reason, a.Message, a.WallMillisUsed, a.Events
	switch {
	case !status.closed():
		return invalidf("an attempt cannot end as %q", status)
	case wallMillisUsed < 0:
		return invalidf("negative wall time")
	}
	if err := checkReason(reason); err != nil {
		return err
	}
	if err := checkSize("message", len(message), s.lim.Message); err != nil {
		return err
	}
	if err := s.checkEvents(events); err != nil {
		return err
	}
	return s.write(ctx, func(tx *txn) error {
		// The task first, as every writer of attempts takes it: the
		// closing must not interleave with a claim, a finish or a sweep.
		if err := tx.lockTaskRow(ctx, id); err != nil {
			return err
		}
		_, run, err := taskState(ctx, tx, principal, id)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, qAbandonAttempt, string(status), string(reason), message, nanos(s.now()), id, number)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			var st AttemptStatus
			err := tx.QueryRowContext(ctx, qAttemptStatus, id, number).Scan(&st)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("task %s: attempt %d: %w", id, number, ErrNotFound)
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("task %s: attempt %d is already %s: %w", id, number, st, ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, tx.s.q.chargeWall, wallMillisUsed, id); err != nil {
			return err
		}
		_, err = s.appendEvents(ctx, tx, id, run, events)
		return err
	})
}

// ListAttempts returns all of a task's attempts, oldest first.
func (s *Store) ListAttempts(ctx context.Context, principal, id string) ([]Attempt, error) {
	return s.attempts(ctx, principal, id, `SELECT `+attemptCols+` FROM attempts
		WHERE task_id = $1 AND EXISTS (SELECT 1 FROM tasks WHERE id = $1 AND principal_id = $2)
		ORDER BY number`)
}

// RecentSummaries returns the last n completed attempts whose outcome is
// continue or complete — the step summaries an executor is shown — oldest
// first.
func (s *Store) RecentSummaries(ctx context.Context, principal, id string, n int) ([]Attempt, error) {
	n = min(max(n, 0), 1000)
	out, err := s.attempts(ctx, principal, id, `SELECT `+attemptCols+` FROM attempts
		WHERE task_id = $1 AND EXISTS (SELECT 1 FROM tasks WHERE id = $1 AND principal_id = $2)
			AND status = 'completed' AND outcome IN ('continue', 'complete')
		ORDER BY number DESC LIMIT $3`, n)
	slices.Reverse(out)
	return out, err
}

// attempts runs an attempts query whose $1 is the task id and $2 the
// principal; an empty answer is told apart from a missing task.
func (s *Store) attempts(ctx context.Context, principal, id, query string, extra ...any) ([]Attempt, error) {
	rows, err := s.readRows(ctx, query, append([]any{id, principal}, extra...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if err := s.taskExists(ctx, principal, id); err != nil {
			return nil, err
		}
	}
	return out, nil
}
