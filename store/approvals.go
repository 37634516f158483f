package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ApprovalStatus is an approval's state; it leaves pending exactly once.
type ApprovalStatus string

const (
	ApprovalPending   ApprovalStatus = "pending"
	ApprovalApproved  ApprovalStatus = "approved"
	ApprovalRejected  ApprovalStatus = "rejected"
	ApprovalExpired   ApprovalStatus = "expired"
	ApprovalCancelled ApprovalStatus = "cancelled"
)

// Approval is one row of the approvals table.
type Approval struct {
	ID, TaskID, PrincipalID string
	RunID, Attempt, Seq     int64
	Tool                    string // the gated tool, or "" for an explicit request
	Prompt                  string // bounded and redacted by the host
	Status                  ApprovalStatus
	CreatedAt, ExpiresAt    time.Time
	ResolvedAt              time.Time // zero while pending
	// Fingerprint is the gated effect's ledger fingerprint ("" for an
	// executor's question); Subject what of it an allow-for-task pattern
	// matches.
	Fingerprint, Subject string
	// Scope is ScopeOnce, or ScopeTask for an approval that also allows,
	// for the rest of its task, the calls of the same tool whose subject
	// matches Pattern ("" = the same subject).
	Scope   ApprovalScope
	Pattern string
}

// ApprovalScope is an approval's tier: what its yes allows.
type ApprovalScope string

const (
	ScopeOnce ApprovalScope = "once"
	ScopeTask ApprovalScope = "task"
)

// Approval bounds.
const (
	maxApprovalPrompt = 2000
	// MaxGrantPattern bounds an allow-for-task pattern.
	MaxGrantPattern = 256
	// MaxTaskGrants bounds a task's allow-for-task approvals: each call of
	// a gated tool is matched against all of them.
	MaxTaskGrants = 32
)

// NewApproval is an approval to request.
type NewApproval struct {
	ID, PrincipalID, TaskID string
	RunID, Attempt, Seq     int64
	Tool, Prompt            string
	ExpiresAt               time.Time
	// Fingerprint and Subject bind a tool approval to its effect.
	Fingerprint, Subject string
}

const approvalCols = `id, task_id, principal_id, run_id, attempt, seq, tool, prompt, status, created_ns, expires_ns, resolved_ns,
	fingerprint, subject, scope, pattern`

func scanApproval(sc scanner) (Approval, error) {
	var a Approval
	var created, expires int64
	var resolved sql.NullInt64
	err := sc.Scan(&a.ID, &a.TaskID, &a.PrincipalID, &a.RunID, &a.Attempt, &a.Seq, &a.Tool, &a.Prompt, &a.Status,
		&created, &expires, &resolved, &a.Fingerprint, &a.Subject, &a.Scope, &a.Pattern)
	a.CreatedAt, a.ExpiresAt = fromNanos(created), fromNanos(expires)
	if resolved.Valid {
		a.ResolvedAt = fromNanos(resolved.Int64)
	}
	return a, err
}

const (
	qInsertApproval = `INSERT INTO approvals (` + approvalCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10, NULL, $11, $12, 'once', '')
		RETURNING ` + approvalCols
	qResolveApproval = `UPDATE approvals SET status = $1, resolved_ns = $2, scope = $3, pattern = $4
		WHERE id = $5 AND principal_id = $6 AND status = 'pending' RETURNING ` + approvalCols
	qCountGrants = `SELECT count(*) FROM approvals WHERE task_id = $1 AND scope = 'task' AND status = 'approved'`
	// The principal is checked on the task: with principal_id in its own
	// WHERE, SQLite's planner read every approval of the principal
	// (approvals_principal) instead of the task's grants (approvals_grants).
	qTaskGrants = `SELECT ` + approvalCols + ` FROM approvals
		WHERE task_id = $1 AND tool = $3 AND scope = 'task' AND status = 'approved'
			AND EXISTS (SELECT 1 FROM tasks WHERE id = $1 AND principal_id = $2)
		ORDER BY created_ns, id LIMIT ` + maxTaskGrantsSQL
	qApprovalByID    = `SELECT ` + approvalCols + ` FROM approvals WHERE id = $1 AND principal_id = $2`
	qApprovalTask    = `SELECT task_id FROM approvals WHERE id = $1 AND principal_id = $2`
	qCancelApprovals = `UPDATE approvals SET status = 'cancelled', resolved_ns = $1 WHERE task_id = $2 AND status = 'pending'`
	// The pending approvals of the tasks leased to host $2 (or to no host).
	qCancelHostPending = `UPDATE approvals SET status = 'cancelled', resolved_ns = $1 WHERE status = 'pending'
		AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = approvals.task_id AND t.lease_host IN ($2, ''))`
	qListApprovals     = `SELECT ` + approvalCols + ` FROM approvals WHERE principal_id = $1 ORDER BY created_ns, id LIMIT 1000`
	qListApprovalsStat = `SELECT ` + approvalCols + ` FROM approvals WHERE principal_id = $1 AND status = $2 ORDER BY created_ns, id LIMIT 1000`
)

// maxTaskGrantsSQL is MaxTaskGrants in a query's text.
const maxTaskGrantsSQL = "32"

func approvalQueries() []string {
	return []string{qInsertApproval, qResolveApproval, qApprovalByID, qApprovalTask, qCancelApprovals, qCancelHostPending}
}

// RequestApproval creates a pending approval and moves the task from
// running to waiting_approval, in one transaction.
func (s *Store) RequestApproval(ctx context.Context, a NewApproval, events ...NewEvent) (Approval, Task, error) {
	switch {
	case a.ID == "" || len(a.ID) > 64:
		return Approval{}, Task{}, invalidf("approval id must be 1..64 bytes")
	case len(a.Tool) > 64:
		return Approval{}, Task{}, invalidf("approval tool must be at most 64 bytes")
	case len(a.Fingerprint) > maxFingerprint:
		return Approval{}, Task{}, invalidf("approval fingerprint must be at most %d bytes", maxFingerprint)
	}
	if err := checkSize("approval subject", len(a.Subject), maxApprovalPrompt); err != nil {
		return Approval{}, Task{}, err
	}
	if err := checkSize("approval prompt", len(a.Prompt), maxApprovalPrompt); err != nil {
		return Approval{}, Task{}, err
	}
	if err := s.checkEvents(events); err != nil {
		return Approval{}, Task{}, err
	}
	var out Approval
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		if err := tx.lockTaskRow(ctx, a.TaskID); err != nil {
			return err
		}
		if err := runningAttempt(ctx, tx, a.PrincipalID, a.TaskID, a.Attempt, a.RunID); err != nil {
			return err
		}
		var err error
		var stored int64
		t, stored, err = s.transition(ctx, tx, &transitionParams{PrincipalID: a.PrincipalID, TaskID: a.TaskID,
			From: []Status{StatusRunning}, To: StatusWaitingApproval, Events: len(events)})
		if err != nil {
			return err
		}
		if t.RunID != a.RunID {
			return &TransitionError{TaskID: a.TaskID, Current: t.Status, RunID: t.RunID, WantRunID: a.RunID}
		}
		now := nanos(s.now())
		out, err = scanApproval(tx.QueryRowContext(ctx, qInsertApproval, a.ID, a.TaskID, a.PrincipalID, a.RunID,
			a.Attempt, a.Seq, a.Tool, a.Prompt, now, nanos(a.ExpiresAt), a.Fingerprint, a.Subject))
		if err != nil {
			return err
		}
		_, err = s.storeEvents(ctx, tx, t.ID, t.RunID, stored, events)
		return err
	})
	if err != nil {
		return Approval{}, Task{}, err
	}
	return out, t, nil
}

// ResolveApproval resolves a pending approval exactly once, by
// compare-and-set, together with its task: approved → the task runs again;
// rejected → it fails (approval_rejected); expired → it fails
// (approval_timeout). If the task is no longer waiting (a cancel committed
// first) nothing is written and a *TransitionError is returned; an approval
// already resolved gives an *ApprovalResolvedError. Both match ErrConflict.
func (s *Store) ResolveApproval(ctx context.Context, principal, id string, to ApprovalStatus, events ...NewEvent) (Approval, Task, error) {
	return s.resolveApproval(ctx, &resolveParams{PrincipalID: principal, ID: id, To: to, Events: events})
}

// GrantApproval approves a pending tool approval as ResolveApproval does,
// and for the rest of its task: a later call of the same tool whose
// subject matches pattern ("" = the same subject) needs no approval of its
// own (TaskGrants). An approval that gates no tool effect, a pattern over
// MaxGrantPattern bytes, or a task with MaxTaskGrants of them already, is
// refused and nothing is written.
func (s *Store) GrantApproval(ctx context.Context, principal, id, pattern string, events ...NewEvent) (Approval, Task, error) {
	if err := checkSize("approval pattern", len(pattern), MaxGrantPattern); err != nil {
		return Approval{}, Task{}, err
	}
	return s.resolveApproval(ctx, &resolveParams{PrincipalID: principal, ID: id, To: ApprovalApproved, Pattern: &pattern, Events: events})
}

// TaskGrants lists the allow-for-task approvals of principal's task for
// tool, oldest first (at most MaxTaskGrants).
func (s *Store) TaskGrants(ctx context.Context, principal, taskID, tool string) ([]Approval, error) {
	rows, err := s.readRows(ctx, qTaskGrants, taskID, principal, tool)
	if err != nil {
		return nil, err
	}
	return scanApprovals(rows)
}

// scanApprovals reads and closes rows of approvalCols.
func scanApprovals(rows visibleRows) ([]Approval, error) {
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// resolveParams is the resolution of principal's approval ID as To, with
// its Events; a grant for the rest of the task when Pattern is set.
type resolveParams struct {
	PrincipalID string
	ID          string
	To          ApprovalStatus
	Pattern     *string
	Events      []NewEvent
}

// resolveApproval is ResolveApproval, and GrantApproval when p.Pattern is
// set.
func (s *Store) resolveApproval(ctx context.Context, p *resolveParams) (Approval, Task, error) {
	principal, id, to, pattern, events := p.PrincipalID, p.ID, p.To, p.Pattern, p.Events
	var taskTo Status
	var reason Reason
	switch to {
	case ApprovalApproved:
		taskTo = StatusRunning
	case ApprovalRejected:
		taskTo, reason = StatusFailed, ReasonApprovalRejected
	case ApprovalExpired:
		taskTo, reason = StatusFailed, ReasonApprovalTimeout
	default:
		return Approval{}, Task{}, invalidf("an approval cannot be resolved as %q", to)
	}
	if err := s.checkEvents(events); err != nil {
		return Approval{}, Task{}, err
	}
	var a Approval
	var t Task
	err := s.write(ctx, func(tx *txn) error {
		if err := s.lockApprovalTask(ctx, tx, principal, id); err != nil {
			return err
		}
		scope, pat := ScopeOnce, ""
		if pattern != nil {
			scope, pat = ScopeTask, *pattern
			if err := s.checkGrant(ctx, tx, principal, id); err != nil {
				return err
			}
		}
		var err error
		a, err = scanApproval(tx.QueryRowContext(ctx, qResolveApproval, string(to), nanos(s.now()), string(scope), pat, id, principal))
		if errors.Is(err, sql.ErrNoRows) {
			cur, err := scanApproval(tx.QueryRowContext(ctx, qApprovalByID, id, principal))
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("approval %s: %w", id, ErrNotFound)
			}
			if err != nil {
				return err
			}
			return &ApprovalResolvedError{ID: id, Current: cur.Status}
		}
		if err != nil {
			return err
		}
		var stored int64
		t, stored, err = s.transition(ctx, tx, &transitionParams{PrincipalID: principal, TaskID: a.TaskID,
			From: []Status{StatusWaitingApproval}, To: taskTo, Reason: reason, Events: len(events)})
		if err != nil {
			return err
		}
		_, err = s.storeEvents(ctx, tx, t.ID, t.RunID, stored, events)
		return err
	})
	if err != nil {
		return Approval{}, Task{}, err
	}
	return a, t, nil
}

// checkGrant refuses to make approval id an allow-for-task one when it
// gates no tool effect, or its task has MaxTaskGrants already.
func (s *Store) checkGrant(ctx context.Context, tx *txn, principal, id string) error {
	cur, err := scanApproval(tx.QueryRowContext(ctx, qApprovalByID, id, principal))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("approval %s: %w", id, ErrNotFound)
	case err != nil:
		return err
	case cur.Fingerprint == "" || cur.Tool == "":
		return invalidf("approval %s gates no tool call: only a tool's approval can allow the rest of its task", id)
	}
	var n int
	if err := tx.QueryRowContext(ctx, qCountGrants, cur.TaskID).Scan(&n); err != nil {
		return err
	}
	if n >= MaxTaskGrants {
		return fmt.Errorf("task %s has %d allow-for-task approvals, the most it may have (%d): approve this one once: %w", cur.TaskID, n, MaxTaskGrants, ErrInvalid)
	}
	return nil
}

// GetApproval returns one of principal's approvals.
func (s *Store) GetApproval(ctx context.Context, principal, id string) (Approval, error) {
	a, err := scanApproval(s.readRow(ctx, qApprovalByID, id, principal))
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, fmt.Errorf("approval %s: %w", id, ErrNotFound)
	}
	return a, err
}

// ListApprovals lists principal's approvals, oldest first, optionally only
// those in status (bounded to 1000).
func (s *Store) ListApprovals(ctx context.Context, principal string, status ApprovalStatus) ([]Approval, error) {
	var rows visibleRows
	var err error
	if status == "" {
		rows, err = s.readRows(ctx, qListApprovals, principal)
	} else {
		rows, err = s.readRows(ctx, qListApprovalsStat, principal, string(status))
	}
	if err != nil {
		return nil, err
	}
	return scanApprovals(rows)
}

// lockApprovalTask takes, where the engine locks rows (PostgreSQL), the row
// lock of the task approval id belongs to before the approval's row: every
// transaction that changes a task and its approvals then takes the task
// first — a cancel's transition does — so a resolution racing a cancel waits
// instead of deadlocking (each deadlock cost the loser a second and a retry).
// An unknown approval locks nothing; the resolution then reports it.
func (s *Store) lockApprovalTask(ctx context.Context, tx *txn, principal, id string) error {
	q := s.d.lockTask()
	if q == "" {
		return nil
	}
	var taskID string
	switch err := tx.QueryRowContext(ctx, qApprovalTask, id, principal).Scan(&taskID); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	if _, err := tx.exec(ctx, q, taskID); err != nil {
		return err
	}
	tx.wrote(taskID)
	return nil
}
