package host

import (
	"context"
	"fmt"

	"github.com/taskhost/taskhost/store"
)

// AdminPause is an admin's pause of another principal's task.
const AdminPause = "pause"

// Bulk acts: Zara's cancel_all, pause_all and resume_all.
const (
	BulkCancel = "cancel"
	BulkPause  = "pause"
	BulkResume = "resume"
)

// MaxBulk bounds the tasks one Bulk call acts on; BulkResult.More says
// more matched.
const MaxBulk = 1000

// Pause interrupts principal's task id (user_pause): its state is
// committed first, then a step in flight is stopped through its context as
// a cancel stops it, and Pause waits (bounded by ctx) for the run to wind
// down. A queued task leaves the queue. It resumes only explicitly.
// Pausing an interrupted task is a no-op; a finished one is a conflict.
func (r *Runner) Pause(ctx context.Context, principal, id string) (store.Task, error) {
	t, done, err := r.pause(ctx, principal, id)
	if err != nil {
		return store.Task{}, err
	}
	// Its subtree is paused with it.
	r.settleTrees(ctx)
	if done == nil {
		return t, nil
	}
	waitDone(ctx, done)
	return r.store.GetTask(ctx, principal, id)
}

// pause commits the pause and signals the local run, if any, without
// waiting: done is closed when the run has wound down (nil: no run here).
func (r *Runner) pause(ctx context.Context, principal, id string) (store.Task, <-chan struct{}, error) {
	if err := r.degradedErr(principal, id); err != nil {
		return store.Task{}, nil, err
	}
	cur, err := r.store.GetTask(ctx, principal, id)
	if err != nil {
		return store.Task{}, nil, err
	}
	cur = r.liveMeters(cur)
	cur.Status = store.StatusInterrupted
	t, err := r.store.Pause(ctx, principal, id, store.ReasonUserPause,
		newEvent(EventTaskInterrupted, cur, EventPayload{Reason: string(store.ReasonUserPause)}))
	r.notify()
	if err != nil {
		return store.Task{}, nil, err
	}
	return t, r.signalRun(ctx, principal, id, errPaused), nil
}

// signalRun cancels the local run of principal's task id with cause and
// returns its done channel; with no run here it tells the host that may
// hold it and returns nil.
func (r *Runner) signalRun(ctx context.Context, principal, id string, cause error) <-chan struct{} {
	r.mu.Lock()
	ru := r.runs[id]
	r.mu.Unlock()
	if ru == nil || ru.principal != principal {
		r.notifyOwner(ctx, principal, id) // it may run on another host
		return nil
	}
	ru.cancel(cause)
	return ru.done
}

func waitDone(ctx context.Context, done <-chan struct{}) {
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// hasRun reports whether task id has a run in this host (one winding down
// included).
func (r *Runner) hasRun(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id] != nil
}

// BulkFailure is one task a Bulk call could not act on.
type BulkFailure struct {
	Task store.Task
	Err  error
}

// BulkResult is what a Bulk call did.
type BulkResult struct {
	Done   []store.Task // as each is after the act
	Failed []BulkFailure
	// More: more than MaxBulk tasks matched; call again for the rest.
	More bool
}

// bulkStatuses are the statuses each bulk act applies to.
var bulkStatuses = map[string][]store.Status{
	BulkCancel: {store.StatusPending, store.StatusRunning, store.StatusWaitingApproval, store.StatusInterrupted},
	BulkPause:  {store.StatusPending, store.StatusRunning, store.StatusWaitingApproval},
	BulkResume: {store.StatusInterrupted},
}

// Bulk applies act (BulkCancel: cancelled, user_stop_all; BulkPause:
// interrupted, user_pause; BulkResume: resumed or queued) to every task of
// caller it applies to, oldest first — or, with allPrincipals (the caller
// is an admin: the API checks), to every principal's, each act on another
// principal's task recorded first in that task's events (task.admin_act).
// A task it cannot act on (it changed meanwhile, the queue is full) is a
// BulkFailure; the others go on. Runs stopped by a cancel or pause are
// waited for together, bounded by ctx. resume, when not nil, is how each
// resume is made (the API's, within its per-principal quota); nil is
// Resume.
func (r *Runner) Bulk(ctx context.Context, caller string, allPrincipals bool, act string, resume func(ctx context.Context, owner, id string) (store.Task, error)) (BulkResult, error) {
	if resume == nil {
		resume = r.Resume
	}
	sts, ok := bulkStatuses[act]
	if !ok {
		return BulkResult{}, fmt.Errorf("%w: unknown bulk act %q: use cancel, pause or resume", ErrInvalid, act)
	}
	tasks, err := r.store.ListTasks(ctx, caller, store.ListQuery{Status: sts, AllPrincipals: allPrincipals, Limit: MaxBulk + 1})
	if err != nil {
		return BulkResult{}, err
	}
	var res BulkResult
	if len(tasks) > MaxBulk {
		tasks, res.More = tasks[:MaxBulk], true
	}
	var stopping []<-chan struct{}
	for _, t := range tasks {
		owner := t.PrincipalID
		if owner != caller {
			if _, err := r.AdminAct(ctx, caller, t.ID, act); err != nil {
				res.Failed = append(res.Failed, BulkFailure{Task: t, Err: err})
				continue
			}
		}
		var now store.Task
		var done <-chan struct{}
		switch act {
		case BulkCancel:
			now, done, err = r.cancelNoWait(ctx, owner, t.ID, store.ReasonUserStopAll)
		case BulkPause:
			now, done, err = r.pause(ctx, owner, t.ID)
		case BulkResume:
			now, err = resume(ctx, owner, t.ID)
		}
		if err != nil {
			res.Failed = append(res.Failed, BulkFailure{Task: t, Err: err})
			continue
		}
		if done != nil {
			stopping = append(stopping, done)
		}
		res.Done = append(res.Done, now)
	}
	r.settleTrees(ctx)
	for _, done := range stopping {
		waitDone(ctx, done)
	}
	// As the tasks are once their runs have wound down.
	for i, t := range res.Done {
		if now, err := r.store.GetTask(ctx, t.PrincipalID, t.ID); err == nil {
			res.Done[i] = now
		}
	}
	return res, nil
}

// QueuePositions maps each pending task's id to its place in the queue.
func (r *Runner) QueuePositions(ctx context.Context) (map[string]int64, error) {
	return r.store.QueuePositions(ctx)
}
