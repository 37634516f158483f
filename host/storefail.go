package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/taskhost/taskhost/internal/text"
	"github.com/taskhost/taskhost/store"
)

// How a run write that the store refused is retried. The bounded retries
// ride out a short hiccup (a checkpoint, a log rotation freeing space);
// past them the run stops and its end is retried until it lands.
const (
	storeRetries     = 5
	storeRetryFirst  = 25 * time.Millisecond
	storeRecordFirst = 100 * time.Millisecond
	storeRecordMax   = 2 * time.Second
)

// retryWrite runs write, retrying with a doubling backoff while the store
// is unavailable (a full disk, an I/O error), at most storeRetries times.
// Any other error is returned at once.
func (ru *run) retryWrite(write func() error) error {
	delay := storeRetryFirst
	for i := 0; ; i++ {
		err := write()
		if err == nil || !errors.Is(err, store.ErrUnavailable) || i == storeRetries {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ru.r.stopped:
			t.Stop()
			return err
		}
		delay *= 2
	}
}

// storeClass names the cause of a store failure for clients and logs.
func storeClass(err error) string {
	var ue *store.UnavailableError
	if errors.As(err, &ue) {
		return ue.Class
	}
	return "store error"
}

// storeVerdict is the verdict on an attempt some of whose writes failed.
func storeVerdict(err error) verdict {
	return verdict{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonStoreError,
		message: text.Truncate("store unavailable ("+storeClass(err)+"): a write of the step failed: "+err.Error(), 2000)}
}

// storeFailed ends a run whose write the store kept refusing. The decision
// is made here and kept in memory: the task is interrupted (store_error).
// The plugin is stopped, readers of the task see the decision at once (Get,
// List, watchers), and the decision is written — the attempt att, if any,
// closed interrupted with the task — as soon as the store takes a write,
// retried until it does or the host stops. A host that stops first leaves
// the task running in the store, and start-up recovery interrupts it.
func (ru *run) storeFailed(att *store.Attempt, cause error) {
	r := ru.r
	class := storeClass(cause)
	number := int64(0)
	if att != nil {
		number = att.Number
	}
	r.log.Error("store write failed: the task is interrupted (store_error) and is recorded so when the store accepts writes again",
		"task", ru.id, "run", ru.runID, "attempt", number, "cause", class, "error", cause)
	ru.stopBeat()
	ru.wall.stop()
	msg := text.Truncate(fmt.Sprintf("the outcome of the run could not be recorded (%s): %v", class, cause), 2000)

	decided := ru.task
	decided.Status, decided.Reason = store.StatusInterrupted, store.ReasonStoreError
	decided.Message = text.Truncate("store_degraded: not recorded yet, retrying; "+msg, 2000)
	decided.Budgets.WallMillis.Used = ru.wall.used()
	r.setDegraded(decided, cause)
	r.notify()
	defer func() {
		r.clearDegraded(ru.id)
		r.notify()
	}()
	if ru.exe != nil {
		ru.exe.Stop()
	}

	v := verdict{attempt: store.AttemptInterrupted, taskTo: store.StatusInterrupted, reason: store.ReasonStoreError, message: msg}
	delay := storeRecordFirst
	for tries := 1; ; tries++ {
		err := ru.recordStoreError(att, v)
		switch {
		case err == nil:
			r.log.Error("store accepts writes again: the task is recorded interrupted (store_error)",
				"task", ru.id, "run", ru.runID, "tries", tries)
			ru.settleEffects()
			return
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// The task left running first (a cancel once the store came
			// back): that end stands.
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ru.ctx.Done():
			// A cancel commits in the store first; a shutdown leaves the
			// task to start-up recovery.
			t.Stop()
			if c := context.Cause(ru.ctx); (errors.Is(c, errUserCancelled) || errors.Is(c, errPaused)) && att != nil {
				ru.abandon(*att, v)
			}
			return
		case <-r.stopped:
			t.Stop()
			return
		}
		delay = min(2*delay, storeRecordMax)
	}
}

// recordStoreError writes the store_error end of the run, with the attempt
// att when one is open.
func (ru *run) recordStoreError(att *store.Attempt, v verdict) error {
	if att == nil {
		return ru.recordEnd(store.StatusInterrupted, store.ReasonStoreError, v.message)
	}
	nt, err := ru.r.store.FinishAttempt(context.Background(), ru.attemptEnd(v, *att, nil, ru.wall.used()))
	ru.r.notify()
	if err == nil {
		ru.task = nt
	}
	return err
}

// settleEffects turns the effects the run left admitted or dispatching into
// failed or indeterminate, so the next attempt is told of them; when this
// fails too, start-up recovery does it.
func (ru *run) settleEffects() {
	if _, err := ru.r.store.SettleEffects(context.Background(), ru.principal, ru.id); err != nil {
		ru.r.log.Warn("effects not settled; start-up recovery settles them", "task", ru.id, "error", err)
	}
}

// degradedTask is a run's decision that the store has not taken yet.
type degradedTask struct {
	task  store.Task
	cause error
}

func (r *Runner) setDegraded(t store.Task, cause error) {
	r.mu.Lock()
	r.degraded[t.ID] = degradedTask{task: t, cause: cause}
	r.mu.Unlock()
}

func (r *Runner) clearDegraded(id string) {
	r.mu.Lock()
	delete(r.degraded, id)
	r.mu.Unlock()
}

// overlay shows t as its run decided when the store has not recorded that
// decision yet.
func (r *Runner) overlay(t store.Task) store.Task {
	r.mu.Lock()
	d, ok := r.degraded[t.ID]
	r.mu.Unlock()
	if !ok || d.task.PrincipalID != t.PrincipalID || d.task.RunID != t.RunID ||
		(t.Status != store.StatusRunning && t.Status != store.StatusWaitingApproval) {
		return t
	}
	t.Status, t.Reason, t.Message = d.task.Status, d.task.Reason, d.task.Message
	t.Budgets.WallMillis.Used = max(t.Budgets.WallMillis.Used, d.task.Budgets.WallMillis.Used)
	return t
}

// degradedErr refuses a change to a task whose end is not recorded yet.
func (r *Runner) degradedErr(principal, id string) error {
	r.mu.Lock()
	d, ok := r.degraded[id]
	r.mu.Unlock()
	if !ok || d.task.PrincipalID != principal {
		return nil
	}
	return fmt.Errorf("task %s: its interruption (store_error) is not recorded yet: %w", id, d.cause)
}

// StoreDegraded reports the store refusing this host's writes: while a
// run's end waits for the store to take it (store_error, retried in the
// background), it returns an error naming how many and the first cause,
// so that health checks say degraded although reads still work.
func (r *Runner) StoreDegraded() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.degraded) == 0 {
		return nil
	}
	var first degradedTask
	for _, d := range r.degraded {
		if first.task.ID == "" || d.task.ID < first.task.ID {
			first = d
		}
	}
	return fmt.Errorf("store degraded: %d task end(s) not recorded yet (first %s): %w", len(r.degraded), first.task.ID, first.cause)
}

// degradedCountDelta corrects a count of the store's tasks for the runs
// whose end the store has not taken yet, so that counts by status agree
// with List and Get (which show the decision): each such task moves from
// its stored status to its decided one.
func (r *Runner) degradedCountDelta(ctx context.Context, principal string, q store.ListQuery) int64 {
	r.mu.Lock()
	ds := make([]degradedTask, 0, len(r.degraded))
	for _, d := range r.degraded {
		ds = append(ds, d)
	}
	r.mu.Unlock()
	in := func(s store.Status) bool { return len(q.Status) == 0 || slices.Contains(q.Status, s) }
	var delta int64
	for _, d := range ds {
		t := d.task
		if (!q.AllPrincipals && t.PrincipalID != principal) || (q.Executor != "" && t.Executor != q.Executor) ||
			(!q.Since.IsZero() && t.CreatedAt.Before(q.Since)) {
			continue
		}
		stored, err := r.store.GetTask(ctx, t.PrincipalID, t.ID)
		if err != nil {
			continue
		}
		shown := r.overlay(stored).Status
		switch {
		case shown == stored.Status:
		case in(stored.Status) && !in(shown):
			delta--
		case !in(stored.Status) && in(shown):
			delta++
		}
	}
	return delta
}
