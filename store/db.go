package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Primary SQLite result codes the store reacts to.
const (
	sqliteReadOnly   = sqlite3.SQLITE_READONLY
	sqliteCorrupt    = sqlite3.SQLITE_CORRUPT
	sqliteNotADB     = sqlite3.SQLITE_NOTADB
	sqliteCantOpen   = sqlite3.SQLITE_CANTOPEN
	sqliteConstraint = sqlite3.SQLITE_CONSTRAINT
	sqliteFull       = sqlite3.SQLITE_FULL
	sqliteIOErr      = sqlite3.SQLITE_IOERR
)

// sqliteCode is the primary result code of a SQLite error in err's chain, or
// 0. The driver enables extended codes; the low byte is the primary one.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// txn is a write transaction whose statements were prepared once, at Open:
// parsing and planning costs more than executing these small statements, and
// the runner issues the same few on every step. (They cannot be prepared
// lazily: preparing needs the writer's only connection, which the
// transaction holds.)
type txn struct {
	tx *sql.Tx
	s  *Store
	// written holds the tasks whose row this transaction has updated, and
	// so holds locked until it ends (appendEvents need not lock them again).
	written map[string]bool
}

// wrote records that the transaction updated task id's row.
func (t *txn) wrote(id string) {
	if t.written == nil {
		t.written = make(map[string]bool)
	}
	t.written[id] = true
}

func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	t.s.statements.Add(1)
	args = t.s.d.bind(args)
	if st := t.s.prepared[query]; st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	t.s.unprepared.Add(1)
	return t.tx.QueryRowContext(ctx, query, args...)
}

func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	t.s.statements.Add(1)
	args = t.s.d.bind(args)
	if st := t.s.prepared[query]; st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	t.s.unprepared.Add(1)
	return t.tx.QueryContext(ctx, query, args...)
}

func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	t.s.statements.Add(1)
	args = t.s.d.bind(args)
	if st := t.s.prepared[query]; st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	t.s.unprepared.Add(1)
	return t.tx.ExecContext(ctx, query, args...)
}

// exec runs a statement that is not worth preparing (a bulk fill), in the
// engine's text.
func (t *txn) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, t.s.d.bind(args)...)
}

// query is exec for a query that returns rows.
func (t *txn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, t.s.d.bind(args)...)
}

// lockTaskRow locks task id's row until tx ends, where the engine locks
// rows, unless tx already holds it. A write path that reads a task's other
// rows before its first change of the task row takes it first, so that
// what it read cannot change before it commits (see pgDialect).
func (t *txn) lockTaskRow(ctx context.Context, id string) error {
	q := t.s.d.lockTask()
	if q == "" || t.written[id] {
		return nil
	}
	if _, err := t.exec(ctx, q, id); err != nil {
		return err
	}
	t.wrote(id)
	return nil
}

// writeQueries is every statement the write paths run. A query missing here
// still works, unprepared (and counted in Store.unprepared, which the tests
// check stays zero).
func writeQueries(e engineSQL) []string {
	qs := []string{
		qInsertTask, qTaskByID, qTaskState, e.heartbeat,
		qInsertEvent, qTrimEvents, qCountEvents, qUncountEvents, qCountRunEvents,
		qClaimTask, qClaimRefused, e.attemptsHead, qInsertAttempt,
		qRunningAttempt, qFinishAttemptRow, qAbandonAttempt, qAttemptStatus, e.chargeWall, e.chargeModel,
		qFinishClaimTask, qFinishRunningAttempt, qCloseRunAttempt, qCloseLostAttempts,
		e.interruptTasks, qInterruptAttempts,
	}
	qs = append(qs, effectQueries()...)
	qs = append(qs, approvalQueries()...)
	qs = append(qs, deleteQueries()...)
	qs = append(qs, usageQueries()...)
	qs = append(qs, workspaceQueries()...)
	qs = append(qs, chargeQueries()...)
	qs = append(qs, hostQueries()...)
	// The status lists of a compare-and-set are deduplicated and every
	// status in them is a legal predecessor, so these are all the shapes.
	most := 0
	for _, from := range legalFrom {
		most = max(most, len(from))
	}
	for n := 1; n <= most; n++ {
		qs = append(qs, transitionSQL(n))
	}
	for n := 1; n <= len(liveStatuses); n++ {
		qs = append(qs, finishTaskSQL(e, false, n), finishTaskSQL(e, true, n))
	}
	for n := 1; n <= maxEventRows; n++ {
		qs = append(qs, insertEventsSQL(n))
	}
	return qs
}

// prepare prepares writeQueries on the writer, in the engine's text.
func (s *Store) prepare(ctx context.Context) error {
	s.prepared = make(map[string]*sql.Stmt)
	for _, q := range writeQueries(s.q) {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		s.prepared[q] = st
	}
	return nil
}

// readRow and readRows run a query on the reader pool through a lazily
// filled statement cache (readers hold no transaction, so a prepare can
// always get a connection).
//
// A read that meets a lost connection (the server ended the session: a
// failover, a restart, an operator) runs again on another one, at most
// maxReadTries times: it holds nothing, so running it again is the same
// read. Whatever error remains goes through dbErr, so a server that stays
// gone is ErrUnavailable, as for writes, and never an untyped error.
//
// What they return is durable: a row waits once scanned, and rows once
// closed, for the fsync of every commit they could have seen (walSync).
func (s *Store) readRow(ctx context.Context, query string, args ...any) visibleRow {
	return visibleRow{s: s, ctx: ctx, query: query, args: s.d.bind(args)}
}

// maxReadTries bounds how often one read runs again after a lost
// connection: database/sql's pool may hand out several dead connections
// in a row after the server ended every session.
const maxReadTries = 4

// queryRow runs query once on a cached statement (or directly, where the
// prepare failed: the query then reports the same error).
func (s *Store) queryRow(ctx context.Context, query string, args []any) *sql.Row {
	st, err := s.readStmts.get(ctx, s.r, query)
	if err != nil {
		return s.r.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// rereadable reports a read's error that another connection may not meet.
func (s *Store) rereadable(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && s.d.connLost(err)
}

func (s *Store) readRows(ctx context.Context, query string, args ...any) (visibleRows, error) {
	args = s.d.bind(args)
	var err error
	for range maxReadTries {
		var st *sql.Stmt
		var rows *sql.Rows
		if st, err = s.readStmts.get(ctx, s.r, query); err == nil {
			if rows, err = st.QueryContext(ctx, args...); err == nil {
				return visibleRows{rows, s}, nil
			}
		}
		if !s.rereadable(ctx, err) {
			break
		}
		s.observeRetry(retryCode(err))
	}
	return visibleRows{}, s.dbErr(err)
}

// stmtCache holds prepared statements by query text (as written, before
// rebind). Reader queries are
// constants or vary only in the placeholder count of a deduplicated status
// list and in which of the task listing's fixed filters and orders are used,
// so it stays small (a few hundred statements at most).
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = make(map[string]*sql.Stmt)
	}
	c.m[query] = st
	return st, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

// dbErr makes an engine's refusal to write recognisable: read-only
// (errors.Is ErrReadOnly) or unavailable — a full disk, an I/O error, a lost
// server — as an *UnavailableError (errors.Is ErrUnavailable), which the
// runner retries. Other errors pass unchanged.
func (s *Store) dbErr(err error) error {
	if err == nil || errors.Is(err, ErrReadOnly) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return s.d.classify(s.path, err)
}

// nanos is how times are stored: unix nanoseconds, so order and sub-second
// precision survive.
func nanos(t time.Time) int64 { return t.UnixNano() }

// fromNanos is the inverse of nanos; 0 (or NULL) is the zero time.
func fromNanos(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// taskCols are the columns scanTask reads, in order.
const taskCols = `seq, id, principal_id, executor, spec, status, reason, message, run_id,
	steps_limit, steps_used, tool_calls_limit, tool_calls_used, model_calls_limit, model_calls_used,
	depth_limit, depth_used, wall_ms_limit, wall_ms_used, checkpoint, checkpoint_attempt, result, created_ns, updated_ns,
	parent_task_id, root_task_id, tree_depth,
	model_tokens_limit, model_tokens_used, model_tokens_estimated, output_bytes_limit, output_bytes_used`

// taskListCols is taskCols without the checkpoint, which listings leave out:
// it can be hundreds of KiB per task.
const taskListCols = `seq, id, principal_id, executor, spec, status, reason, message, run_id,
	steps_limit, steps_used, tool_calls_limit, tool_calls_used, model_calls_limit, model_calls_used,
	depth_limit, depth_used, wall_ms_limit, wall_ms_used, NULL, checkpoint_attempt, result, created_ns, updated_ns,
	parent_task_id, root_task_id, tree_depth,
	model_tokens_limit, model_tokens_used, model_tokens_estimated, output_bytes_limit, output_bytes_used`

// scanTask scans taskCols, then any extra columns into extra.
func scanTask(sc scanner, extra ...any) (Task, error) {
	var t Task
	var created, updated int64
	b := &t.Budgets
	err := sc.Scan(append([]any{&t.Seq, &t.ID, &t.PrincipalID, &t.Executor, &t.Spec, &t.Status, &t.Reason, &t.Message, &t.RunID,
		&b.Steps.Limit, &b.Steps.Used, &b.ToolCalls.Limit, &b.ToolCalls.Used, &b.ModelCalls.Limit, &b.ModelCalls.Used,
		&b.Depth.Limit, &b.Depth.Used, &b.WallMillis.Limit, &b.WallMillis.Used, &t.Checkpoint, &t.CheckpointAttempt, &t.Result,
		&created, &updated, &t.ParentID, &t.RootID, &t.TreeDepth, &b.ModelTokens.Limit, &b.ModelTokens.Used, &b.TokensEstimated,
		&b.OutputBytes.Limit, &b.OutputBytes.Used}, extra...)...)
	t.CreatedAt, t.UpdatedAt = fromNanos(created), fromNanos(updated)
	return t, err
}

const attemptCols = `task_id, number, run_id, status, outcome, summary, reason, message,
	started_ns, ended_ns, exit_code, exit_signal, stderr_tail`

func scanAttempt(sc scanner) (Attempt, error) {
	var a Attempt
	var started int64
	var ended sql.NullInt64
	err := sc.Scan(&a.TaskID, &a.Number, &a.RunID, &a.Status, &a.Outcome, &a.Summary, &a.Reason, &a.Message,
		&started, &ended, &a.ExitCode, &a.ExitSignal, &a.StderrTail)
	a.StartedAt, a.EndedAt = fromNanos(started), fromNanos(ended.Int64)
	return a, err
}

// taskState reads the status and run of a task inside tx, to explain a
// compare-and-set that matched no row: ErrNotFound when the principal has no
// such task (another principal's task looks exactly like a missing one).
func taskState(ctx context.Context, tx *txn, principal, id string) (Status, int64, error) {
	var st Status
	var run int64
	err := tx.QueryRowContext(ctx, qTaskState, id, principal).Scan(&st, &run)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, notFound(id)
	}
	return st, run, err
}

const qTaskState = `SELECT status, run_id FROM tasks WHERE id = $1 AND principal_id = $2`

func notFound(id string) error { return fmt.Errorf("task %s: %w", id, ErrNotFound) }

func sortBySeq(ts []Task) {
	slices.SortFunc(ts, func(a, b Task) int { return cmp.Compare(a.Seq, b.Seq) })
}

// uniq returns statuses without repeats, in first-seen order, so a query's
// shape depends only on the set asked for.
func uniq(sts []Status) []Status {
	out := make([]Status, 0, len(sts))
	for _, st := range sts {
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return out
}
