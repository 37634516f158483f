package host

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/store"
)

// Causes a run ends with when its approval is refused. The task's failure
// was committed with the refusal.
var (
	errApprovalRejected = errors.New("approval rejected")
	errApprovalExpired  = errors.New("approval expired")
)

// waiter is a step blocked on one approval.
type waiter struct {
	taskID    string
	principal string
	decision  chan store.ApprovalStatus // buffered 1
}

// awaitApproval records a pending approval, moving the task to
// waiting_approval in the same transaction, and blocks until the approval is
// resolved — approved (nil), rejected or expired (the task has failed and the
// run is ending) — or ctx ends (a cancel, a shutdown).
func (r *Runner) awaitApproval(ctx context.Context, ts *turnState, seq int64, tool, prompt string) error {
	timeout := r.svc.ApprovalTimeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	id := "a_" + randomToken()[:26]
	w := &waiter{taskID: ts.taskID, principal: ts.principal, decision: make(chan store.ApprovalStatus, 1)}
	r.mu.Lock()
	r.waiters[id] = w
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
	}()

	t, err := r.store.GetTask(ctx, ts.principal, ts.taskID)
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	t.Status = store.StatusWaitingApproval
	// The wait is not active time: the clock pauses before the event reads
	// it, so the event, the store and every later reading agree.
	resume := r.pauseWall(ctx, ts)
	defer resume()
	_, _, err = r.store.RequestApproval(ctx, store.NewApproval{
		ID: id, PrincipalID: ts.principal, TaskID: ts.taskID, RunID: ts.runID, Attempt: ts.attempt, Seq: seq,
		Tool: tool, Prompt: prompt, ExpiresAt: time.Now().Add(timeout),
	}, newEvent(EventTaskWaitingApproval, r.liveMeters(t), EventPayload{Attempt: ts.attempt, Note: id}))
	r.notify()
	if err != nil {
		return effectError(ts, err)
	}
	expiry := time.AfterFunc(timeout, func() {
		_, _ = r.resolve(context.Background(), ts.principal, id, store.ApprovalExpired)
	})
	defer expiry.Stop()

	select {
	case d := <-w.decision:
		if d == store.ApprovalApproved {
			return nil
		}
		return status.Errorf(codes.Aborted, "approval %s %s", id, d)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// pauseWall stops charging ts's run wall time until resume is called, and
// stores the reading the wait will keep, so that status shows during the
// wait what watch does.
func (r *Runner) pauseWall(ctx context.Context, ts *turnState) (resume func()) {
	r.mu.Lock()
	ru := r.runs[ts.taskID]
	r.mu.Unlock()
	if ru == nil || ru.runID != ts.runID {
		return func() {}
	}
	resume = ru.wall.pause()
	if err := r.store.Heartbeat(ctx, ts.principal, ts.taskID, ts.runID, ru.wall.used()); err != nil {
		r.log.Warn("wall time not persisted", "task", ts.taskID, "error", err)
	}
	return resume
}

// Approvals lists principal's approvals, optionally only those in st.
func (r *Runner) Approvals(ctx context.Context, principal string, st store.ApprovalStatus) ([]store.Approval, error) {
	return r.store.ListApprovals(ctx, principal, st)
}

// Approve resolves a pending approval as approved: the task runs again and
// the gated effect proceeds. It is refused if the approval was already
// resolved or its task cancelled.
func (r *Runner) Approve(ctx context.Context, principal, id string) (store.Approval, error) {
	return r.resolve(ctx, principal, id, store.ApprovalApproved)
}

// Reject resolves a pending approval as rejected: the task fails
// (approval_rejected) and its step is stopped.
func (r *Runner) Reject(ctx context.Context, principal, id string) (store.Approval, error) {
	return r.resolve(ctx, principal, id, store.ApprovalRejected)
}

// resolve is the one path every resolution takes: a compare-and-set on the
// approval and its task in one transaction, then the waiting step is told,
// and a refused one is ended.
func (r *Runner) resolve(ctx context.Context, principal, id string, to store.ApprovalStatus) (store.Approval, error) {
	cur, err := r.store.GetApproval(ctx, principal, id)
	if err != nil {
		return store.Approval{}, err
	}
	t, err := r.store.GetTask(ctx, principal, cur.TaskID)
	if err != nil {
		return store.Approval{}, err
	}
	t = r.liveMeters(t)
	t.Status = store.StatusRunning
	var failed store.Reason
	switch to {
	case store.ApprovalRejected:
		t.Status, failed = store.StatusFailed, store.ReasonApprovalRejected
	case store.ApprovalExpired:
		t.Status, failed = store.StatusFailed, store.ReasonApprovalTimeout
	}
	evs := []store.NewEvent{newEvent(EventApprovalResolved, t, EventPayload{Attempt: cur.Attempt, Outcome: string(to), Note: id})}
	if failed != "" {
		evs = append(evs, newEvent(EventTaskFailed, t, EventPayload{Reason: string(failed)}))
	}
	a, _, err := r.store.ResolveApproval(ctx, principal, id, to, evs...)
	r.notify()
	if err != nil {
		return store.Approval{}, err
	}
	r.mu.Lock()
	w := r.waiters[id]
	ru := r.runs[a.TaskID]
	r.mu.Unlock()
	if w != nil {
		// The lease watch may have delivered the same decision already.
		select {
		case w.decision <- to:
		default:
		}
	}
	if w == nil {
		r.notifyOwner(ctx, principal, a.TaskID) // its step may wait on another host
	}
	if ru != nil && to != store.ApprovalApproved {
		cause := errApprovalRejected
		if to == store.ApprovalExpired {
			cause = errApprovalExpired
		}
		ru.cancel(cause)
	}
	return a, nil
}

// workspace is the directory of a task's workspace.
func (r *Runner) workspace(taskID string) string {
	return r.workspaceRoot + "/" + taskID
}
