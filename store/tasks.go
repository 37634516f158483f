package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// NewTask is what CreateTask needs; the store fills in the rest.
type NewTask struct {
	ID          string  // host-generated, unguessable; 1..128 bytes
	PrincipalID string  // from the authenticated caller; 1..256 bytes
	Executor    string  // executor kind; 1..64 bytes
	Spec        []byte  // JSON, at most Limits.Spec bytes
	Limits      Budgets // only each Budget's Limit is read; Used starts at 0
	// Workspace is the files the task starts with (workspace.go), stored
	// as attempt 0's; nil stores none: a task of no stored workspace.
	Workspace *WorkspaceChange
}

const qInsertTask = `INSERT INTO tasks (id, principal_id, executor, spec, status,
		steps_limit, tool_calls_limit, model_calls_limit, depth_limit, wall_ms_limit, created_ns, updated_ns, events_stored,
		model_tokens_limit, output_bytes_limit)
	VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING ` + taskCols

// CreateTask stores a new pending task (RunID 0, nothing used) and its
// events in one transaction.
func (s *Store) CreateTask(ctx context.Context, nt NewTask, events ...NewEvent) (Task, error) {
	if err := s.checkNewTask(nt, events); err != nil {
		return Task{}, err
	}
	var t Task
	err := s.write(ctx, func(tx *txn) (err error) {
		t, err = s.insertTask(ctx, tx, nt, nanos(s.now()), events)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// insertTask inserts new pending task nt created at now, and its events,
// inside tx.
func (s *Store) insertTask(ctx context.Context, tx *txn, nt NewTask, now int64, events []NewEvent) (Task, error) {
	if err := s.checkWorkspaceChange(nt.ID, nt.Workspace); err != nil {
		return Task{}, err
	}
	l := nt.Limits
	t, err := scanTask(tx.QueryRowContext(ctx, qInsertTask, nt.ID, nt.PrincipalID, nt.Executor, nt.Spec,
		l.Steps.Limit, l.ToolCalls.Limit, l.ModelCalls.Limit, l.Depth.Limit, l.WallMillis.Limit, now, now, len(events),
		l.ModelTokens.Limit, l.OutputBytes.Limit))
	if s.d.constraint(err) {
		return Task{}, fmt.Errorf("task %s already exists: %w (%w)", nt.ID, ErrConflict, err)
	}
	if err != nil {
		return Task{}, err
	}
	if _, err = s.storeEvents(ctx, tx, t.ID, t.RunID, int64(len(events)), events); err != nil {
		return Task{}, err
	}
	return t, s.putWorkspace(ctx, tx, t.ID, 0, nt.Workspace)
}

// checkNewTask validates a new task and its events before a transaction
// begins.
func (s *Store) checkNewTask(nt NewTask, events []NewEvent) error {
	switch {
	case nt.ID == "" || len(nt.ID) > 128:
		return invalidf("task id must be 1..128 bytes")
	case nt.PrincipalID == "" || len(nt.PrincipalID) > 256:
		return invalidf("principal id must be 1..256 bytes")
	case nt.Executor == "" || len(nt.Executor) > 64:
		return invalidf("executor must be 1..64 bytes")
	}
	if err := checkSize("spec", len(nt.Spec), s.lim.Spec); err != nil {
		return err
	}
	if !json.Valid(nt.Spec) {
		return invalidf("spec is not valid JSON")
	}
	l := nt.Limits
	for i, b := range l.limits() {
		if b.Limit < 0 {
			return invalidf("budget %s limit is %d: must not be negative", BudgetKinds()[i], b.Limit)
		}
	}
	return s.checkEvents(events)
}

const qTaskByID = `SELECT ` + taskCols + ` FROM tasks WHERE id = $1 AND principal_id = $2`

// GetTask returns principal's task id, or ErrNotFound — also when the task
// exists but belongs to another principal.
func (s *Store) GetTask(ctx context.Context, principal, id string) (Task, error) {
	t, err := scanTask(s.readRow(ctx, qTaskByID, id, principal))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, notFound(id)
	}
	return t, err
}

const qTaskOwner = `SELECT principal_id FROM tasks WHERE id = $1`

// TaskOwner returns the principal of task id, whoever asks: for an admin
// acting on another principal's task. ErrNotFound when there is none.
func (s *Store) TaskOwner(ctx context.Context, id string) (string, error) {
	var p string
	err := s.readRow(ctx, qTaskOwner, id).Scan(&p)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound(id)
	}
	return p, err
}

// ListQuery selects a page of a principal's tasks.
type ListQuery struct {
	Status []Status // any of these; empty = all
	// Executor, when set, keeps only the tasks of that executor kind (at
	// most MaxExecutorBytes).
	Executor string
	// Since, when not zero, keeps only the tasks created at or after it.
	Since time.Time
	// Order is the order of the listing; the zero value is creation order.
	Order ListOrder
	// AfterSeq and AfterStatus are the cursor: the Seq (and, for
	// OrderStatus, the Status) of the last task of the previous page; a
	// zero AfterSeq is the first page.
	AfterSeq    int64
	AfterStatus Status
	Limit       int // default 100, at most 1000
	// AllPrincipals lists every principal's tasks, for an admin; the
	// principal argument is then ignored.
	AllPrincipals bool
}

// ListOrder is the order of a task listing. Every order ends in Seq, so it
// is total and a cursor never skips nor repeats a task.
type ListOrder int

// The orders of ListTasks.
const (
	// OrderCreated is creation order, oldest first (Seq ascending).
	OrderCreated ListOrder = iota
	// OrderNewest is newest first (Seq descending).
	OrderNewest
	// OrderStatus groups by status name (ascending), newest first within
	// a status.
	OrderStatus
)

// MaxExecutorBytes bounds an executor kind, as the tasks table does.
const MaxExecutorBytes = 64

// listWhere is the WHERE clause and its arguments of q's filters, without
// the cursor.
func listWhere(principal string, q ListQuery) (string, *argList, error) {
	args := &argList{}
	where := `TRUE`
	if !q.AllPrincipals {
		where = `principal_id = ` + args.add(principal)
	}
	if len(q.Status) > 0 {
		sts := uniq(q.Status)
		marks := make([]string, len(sts))
		for i, st := range sts {
			if !st.valid() {
				return "", nil, invalidf("unknown status %q", st)
			}
			marks[i] = args.add(string(st))
		}
		where += ` AND status IN (` + strings.Join(marks, ", ") + `)`
	}
	if q.Executor != "" {
		if len(q.Executor) > MaxExecutorBytes {
			return "", nil, invalidf("executor is %d bytes, at most %d", len(q.Executor), MaxExecutorBytes)
		}
		where += ` AND executor = ` + args.add(q.Executor)
	}
	if !q.Since.IsZero() {
		where += ` AND created_ns >= ` + args.add(q.Since.UnixNano())
	}
	return where, args, nil
}

// ListTasks returns a page of principal's tasks in q.Order. Listed tasks
// carry no Checkpoint (it can be hundreds of KiB each); GetTask returns it.
func (s *Store) ListTasks(ctx context.Context, principal string, q ListQuery) ([]Task, error) {
	where, args, err := listWhere(principal, q)
	if err != nil {
		return nil, err
	}
	var order string
	switch q.Order {
	case OrderCreated:
		where += ` AND seq > ` + args.add(q.AfterSeq)
		order = `seq`
	case OrderNewest:
		if q.AfterSeq > 0 {
			where += ` AND seq < ` + args.add(q.AfterSeq)
		}
		order = `seq DESC`
	case OrderStatus:
		if q.AfterSeq > 0 {
			st := args.add(string(q.AfterStatus))
			where += ` AND (status > ` + st + ` OR (status = ` + st + ` AND seq < ` + args.add(q.AfterSeq) + `))`
		}
		order = `status, seq DESC`
	default:
		return nil, invalidf("unknown list order %d", q.Order)
	}
	limit := args.add(pageSize(q.Limit))
	return s.queryTasks(ctx, `SELECT `+taskListCols+` FROM tasks WHERE `+where+` ORDER BY `+order+` LIMIT `+limit, args.values...)
}

// CountTasks counts the tasks ListTasks would list over all its pages: q's
// filters, not its cursor, order or limit.
func (s *Store) CountTasks(ctx context.Context, principal string, q ListQuery) (int64, error) {
	where, args, err := listWhere(principal, q)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.readRow(ctx, `SELECT count(*) FROM tasks WHERE `+where, args.values...).Scan(&n); err != nil {
		return 0, s.dbErr(fmt.Errorf("store: count tasks: %w", err))
	}
	return n, nil
}

// queryTasks reads the tasks a SELECT of taskCols or taskListCols returns.
func (s *Store) queryTasks(ctx context.Context, query string, args ...any) ([]Task, error) {
	rows, err := s.readRows(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// StartRun starts (from pending) or resumes (from interrupted) a task: one
// compare-and-set to running that bumps RunID and clears Reason and Message.
// Budgets are untouched: a resume continues with what is left.
func (s *Store) StartRun(ctx context.Context, principal, id string, from Status, events ...NewEvent) (Task, error) {
	if from != StatusPending && from != StatusInterrupted {
		return Task{}, invalidf("a run starts from pending or interrupted, not %q", from)
	}
	return s.Transition(ctx, Transition{PrincipalID: principal, TaskID: id, From: []Status{from}, To: StatusRunning, Events: events})
}

// Transition is a task's status change from any of From to To.
type Transition struct {
	PrincipalID, TaskID string
	From                []Status
	To                  Status
	Reason              Reason
	Message             string
	Events              []NewEvent
}

// Transition moves a task from any of tr.From to tr.To, setting its reason
// and message, with its events, in one transaction. The change is one compare-and-set
// UPDATE, so of two racing transitions exactly one wins. Every from→to pair
// must be Legal, or nothing is touched. On a miss the error is ErrNotFound
// when principal has no such task, else a *TransitionError with the current
// status.
//
// Entering running from pending or interrupted starts a new run (RunID+1),
// whichever method asked for it: a resume can never continue an old run.
// Entering it from waiting_approval continues the same run.
func (s *Store) Transition(ctx context.Context, tr Transition) (Task, error) {
	principal, id, from, to, reason, message, events := tr.PrincipalID, tr.TaskID, tr.From, tr.To, tr.Reason, tr.Message, tr.Events
	if !to.valid() {
		return Task{}, invalidf("unknown status %q", to)
	}
	if len(from) == 0 {
		return Task{}, invalidf("no from status")
	}
	for _, f := range from {
		if !Legal(f, to) {
			return Task{}, invalidf("%s → %s is not a legal transition", f, to)
		}
	}
	if err := checkReason(reason); err != nil {
		return Task{}, err
	}
	if err := checkSize("message", len(message), s.lim.Message); err != nil {
		return Task{}, err
	}
	if err := s.checkEvents(events); err != nil {
		return Task{}, err
	}
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		var err error
		var stored int64
		if t, stored, err = s.transition(ctx, tx, &transitionParams{PrincipalID: principal, TaskID: id, From: uniq(from), To: to,
			Reason: reason, Message: message, Events: len(events)}); err != nil {
			return err
		}
		_, err = s.storeEvents(ctx, tx, t.ID, t.RunID, stored, events)
		return err
	})
	if err != nil {
		return Task{}, err
	}
	return t, nil
}

// transitionSQL is the compare-and-set of a status change from one of n
// statuses. run_id grows when running is entered from pending or
// interrupted (SET expressions see the row as it was).
//
// A new run is leased to the host that starts it (the last argument, after
// the n statuses); the new run id is its lease epoch. The events stored
// with the change are counted (the argument after the host) and the new
// count returned.
func transitionSQL(n int) string {
	return `UPDATE tasks SET status = $1, reason = $2, message = $3, updated_ns = $4,
			events_stored = events_stored + $` + strconv.Itoa(8+n) + `,
			run_id = run_id + CASE WHEN $1 = 'running' AND status IN ('pending', 'interrupted') THEN 1 ELSE 0 END,
			lease_host = CASE WHEN $1 = 'running' AND status IN ('pending', 'interrupted') THEN $` + strconv.Itoa(7+n) + ` ELSE lease_host END
		WHERE id = $5 AND principal_id = $6 AND status IN (` + numbered(7, n) + `)
		RETURNING ` + taskCols + `, events_stored`
}

// transitionParams is one status change: principal's task moves from any
// of From to To, with Reason and Message, and Events events the caller
// stores with the change (storeEvents) are counted.
type transitionParams struct {
	PrincipalID string
	TaskID      string
	From        []Status // validated and deduplicated by the caller
	To          Status
	Reason      Reason
	Message     string
	Events      int
}

// transition is the compare-and-set behind every status change. It
// returns the task and its new count of events.
func (s *Store) transition(ctx context.Context, tx *txn, p *transitionParams) (Task, int64, error) {
	args := []any{string(p.To), string(p.Reason), p.Message, nanos(s.now()), p.TaskID, p.PrincipalID}
	for _, f := range p.From {
		args = append(args, string(f))
	}
	args = append(args, s.host, p.Events)
	var stored int64
	t, err := scanTask(tx.QueryRowContext(ctx, transitionSQL(len(p.From)), args...), &stored)
	if errors.Is(err, sql.ErrNoRows) {
		cur, _, err := taskState(ctx, tx, p.PrincipalID, p.TaskID)
		if err != nil {
			return Task{}, 0, err
		}
		return Task{}, 0, &TransitionError{TaskID: p.TaskID, Current: cur, To: p.To}
	}
	if err == nil {
		tx.wrote(p.TaskID)
		err = s.settleApprovals(ctx, tx, t)
	}
	return t, stored, err
}

// settleApprovals cancels the pending approvals of a task that has left
// running and waiting_approval: nothing is left to wait for them, and an
// approval must never be approvable for a step that is gone.
func (s *Store) settleApprovals(ctx context.Context, tx *txn, t Task) error {
	if t.Status == StatusRunning || t.Status == StatusWaitingApproval || t.Status == StatusPending {
		return nil
	}
	_, err := tx.ExecContext(ctx, qCancelApprovals, nanos(s.now()), t.ID)
	return err
}

// cancellable are the statuses Cancel moves to cancelled.
var cancellable = []Status{StatusPending, StatusRunning, StatusWaitingApproval, StatusInterrupted, StatusBlocked}

// Cancel moves any non-terminal task to cancelled (user_cancelled) with its
// events. Cancelling a cancelled task returns it with a nil error and writes
// nothing, so a retried cancel is harmless; a completed or failed task gives
// a *TransitionError. A running attempt is left for its runner to close
// (AbandonAttempt) once the step's context is cancelled.
func (s *Store) Cancel(ctx context.Context, principal, id string, events ...NewEvent) (Task, error) {
	return s.CancelFor(ctx, principal, id, ReasonUserCancelled, events...)
}

// CancelFor is Cancel with the reason the task is cancelled for
// (user_cancelled, or user_stop_all for a cancel of all of a principal's
// tasks).
func (s *Store) CancelFor(ctx context.Context, principal, id string, reason Reason, events ...NewEvent) (Task, error) {
	// A cancelled task's approval can no longer be approved.
	cancelApprovals := func(tx *txn, t Task) error {
		_, err := tx.ExecContext(ctx, qCancelApprovals, nanos(s.now()), t.ID)
		return err
	}
	return s.moveOnce(ctx, &moveParams{PrincipalID: principal, TaskID: id, From: cancellable, To: StatusCancelled,
		Reason: reason, Events: events, Also: cancelApprovals})
}

// Heartbeat records the wall time used so far by a live run. Wall time only
// grows: the stored value becomes max(stored, wallMillisUsed), so a late or
// reordered heartbeat can never hand time back. It is refused (ErrNotFound or
// *TransitionError) unless the task is running or waiting_approval in runID.
// UpdatedAt is left alone: it tells when the task's state last changed.
func (s *Store) Heartbeat(ctx context.Context, principal, id string, runID int64, wallMillisUsed int64) error {
	if wallMillisUsed < 0 {
		return invalidf("negative wall time")
	}
	return s.write(ctx, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, tx.s.q.heartbeat, wallMillisUsed, id, principal, runID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		return staleRun(ctx, tx, principal, id, runID)
	})
}

// staleRun explains why a task is not live in runID.
func staleRun(ctx context.Context, tx *txn, principal, id string, runID int64) error {
	cur, run, err := taskState(ctx, tx, principal, id)
	if err != nil {
		return err
	}
	return &TransitionError{TaskID: id, Current: cur, RunID: run, WantRunID: runID}
}

// numbered returns "$first, $first+1, ..." with n marks.
func numbered(first, n int) string {
	marks := make([]string, n)
	for i := range marks {
		marks[i] = "$" + strconv.Itoa(first+i)
	}
	return strings.Join(marks, ", ")
}

// argList collects a statement's arguments as its text is built and
// gives each one its placeholder, "$1", "$2", ... in the order added.
type argList struct{ values []any }

func (a *argList) add(v any) string {
	a.values = append(a.values, v)
	return "$" + strconv.Itoa(len(a.values))
}
