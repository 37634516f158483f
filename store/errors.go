package store

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrNotFound: no such task for this principal. A task of another
	// principal is indistinguishable from a missing one.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the task is not in a state that allows the change.
	ErrConflict = errors.New("conflict")
	// ErrBudgetExhausted: the charge would exceed a budget.
	ErrBudgetExhausted = errors.New("budget exhausted")
	// ErrTooLarge: a value is past its limit.
	ErrTooLarge = errors.New("too large")
	// ErrInvalid: an argument is malformed (unknown status, illegal
	// transition pair, empty id, payload that is not a JSON object, ...).
	// Nothing was written.
	ErrInvalid = errors.New("invalid argument")
	// ErrReadOnly: a write was asked of a store opened with
	// Options.ReadOnly, or SQLite refused to write to the file.
	ErrReadOnly = errors.New("store is read-only")
	// ErrUnavailable: SQLite could not write (the disk is full, an I/O
	// error). Nothing was written; the same write may succeed later. It is
	// always an *UnavailableError, which names the class of the cause.
	ErrUnavailable = errors.New("store unavailable")
	// ErrFenced: a write carried a stale lease epoch (run id): the task has
	// been taken over by a newer run, on this host or another. Nothing was
	// written; the writer's run must stop without touching the task. It is
	// always a *TransitionError (which also matches ErrConflict).
	ErrFenced = errors.New("lease lost: the run was superseded")
	// ErrNoNotify: the store's engine has no notifications (SQLite).
	ErrNoNotify = errors.New("the store delivers no notifications (SQLite): hosts poll")
)

// UnavailableError is a write the store could not make for a cause outside
// the request: Class is "disk full" or "I/O error", for clients and logs.
type UnavailableError struct {
	Class string
	Err   error
}

func (e *UnavailableError) Error() string {
	return "store unavailable: " + e.Class + ": " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// OpenError is a refusal to open a store file. Open fails closed: any doubt
// about the file (location, permissions, format, integrity, schema version)
// is an OpenError that names the file or directory and says what to do next.
type OpenError struct {
	Path string // the store file
	// Op names the check that failed: "options", "data dir", "file",
	// "read-only", "format", "integrity", "schema", "migrate" or "sqlite".
	Op   string
	Err  error  // what is wrong; names the file or directory
	Hint string // what the operator should do next
}

func (e *OpenError) Error() string {
	if e.Hint == "" {
		return fmt.Sprintf("open store %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("open store %s: %v; %s", e.Path, e.Err, e.Hint)
}

func (e *OpenError) Unwrap() error { return e.Err }

// sentinelErr is a message that matches a sentinel with errors.Is without
// repeating the sentinel's text.
type sentinelErr struct {
	msg string
	is  error
}

func (e *sentinelErr) Error() string { return e.msg }
func (e *sentinelErr) Unwrap() error { return e.is }

// TransitionError is a refused state change. It matches ErrConflict.
type TransitionError struct {
	TaskID  string
	Current Status
	To      Status // "" when the refusal is about the run, not a target status
	// WantRunID, when non-zero, is the run the caller acted for; RunID is the
	// task's current run. They differ when the caller's run is over (the task
	// was resumed since) — a stale writer must not touch the new run.
	RunID     int64
	WantRunID int64
}

func (e *TransitionError) Error() string {
	if e.WantRunID != 0 && e.RunID != e.WantRunID {
		return fmt.Sprintf("task %s is %s in run %d: run %d is over", e.TaskID, e.Current, e.RunID, e.WantRunID)
	}
	if e.To == "" {
		return fmt.Sprintf("task %s is %s", e.TaskID, e.Current)
	}
	return fmt.Sprintf("task %s is %s: cannot become %s", e.TaskID, e.Current, e.To)
}

// Is matches ErrConflict, and ErrFenced when the caller's run is over: its
// lease epoch (the run id) is stale, so the write came from a run that has
// been superseded.
func (e *TransitionError) Is(target error) bool {
	return target == ErrConflict || (target == ErrFenced && e.WantRunID != 0 && e.RunID != e.WantRunID)
}

// BudgetError names the exhausted budget. It matches ErrBudgetExhausted.
type BudgetError struct {
	Budget BudgetKind
	Limit  int64
	Used   int64
	// Need is what the refused effect was known to need of the budget in
	// advance (a model call's estimated prompt tokens); 0 when nothing.
	Need int64
}

func (e *BudgetError) Error() string {
	if e.Need > 0 {
		return fmt.Sprintf("%s budget exhausted (%d/%d; the call needs about %d more)", e.Budget, e.Used, e.Limit, e.Need)
	}
	return fmt.Sprintf("%s budget exhausted (%d/%d)", e.Budget, e.Used, e.Limit)
}

func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExhausted }

// LimitError names a field, its limit and the offending size. It matches
// ErrTooLarge.
type LimitError struct {
	Field string
	Limit int
	Got   int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is %d bytes, limit %d", e.Field, e.Got, e.Limit)
}

func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }

// ApprovalResolvedError: the approval already left pending. It matches
// ErrConflict.
type ApprovalResolvedError struct {
	ID      string
	Current ApprovalStatus
}

func (e *ApprovalResolvedError) Error() string {
	return fmt.Sprintf("approval %s is already %s", e.ID, e.Current)
}

func (e *ApprovalResolvedError) Is(target error) bool { return target == ErrConflict }
