package host

import (
	"context"
	"errors"
	"time"

	"github.com/taskhost/taskhost/store"
)

// The queue. A create or resume beyond max_concurrent is not refused: the
// task waits, pending, in the store's queue (store/queue.go), one queue for
// every host sharing the store, oldest first. Whenever a slot may have
// freed — a run ends, a task is created or resumed, every poll interval
// (another host's tasks), at start — the host starts the head of the queue
// it may run, one task per free slot. The start is StartRun's
// compare-and-set from pending: of two hosts that reach for the same task,
// one starts it and the other moves on to the next.
//
// Pending tasks survive a restart as pending and start in their turn: a
// pending task has no attempt in flight, so nothing of it can be
// indeterminate. (An interrupted task still needs an explicit resume.)

// queueBatch is how many queued tasks one read of the queue considers.
const queueBatch = 64

// minQueuePoll is the shortest interval of the queue loop's reads.
const minQueuePoll = 250 * time.Millisecond

// accepting refuses new work on a host that runs none.
func (r *Runner) accepting() error {
	if r.set.Disabled {
		return ErrDisabled
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return ErrShuttingDown
	}
	return nil
}

// admitted starts what the free slots allow now and returns t as it is
// then: running when it was started (by this host or, in a fleet, another),
// else pending in the queue.
func (r *Runner) admitted(ctx context.Context, t store.Task) (store.Task, error) {
	if started, ok := r.dispatch(ctx)[t.ID]; ok {
		return started, nil
	}
	return r.store.GetTask(ctx, t.PrincipalID, t.ID)
}

// createNow records nt in the queue and, when this host has a free slot
// and nothing is queued before it, starts it at once (started). A task it
// starts at once is held for this host while it is pending, so that no
// other host's dispatch takes a task its creator is about to start; so is
// one created with files (pin), which are in this host's data dir.
func (r *Runner) createNow(ctx context.Context, nt store.NewTask, pin bool, ev store.NewEvent) (t store.Task, started bool, err error) {
	r.queueMu.Lock()
	defer r.queueMu.Unlock()
	now := false
	if n, err := r.queuedAhead(ctx); err == nil && n == 0 && r.reserve() == nil {
		now = true
		defer r.unreserve()
	}
	if t, err = r.store.CreateQueued(ctx, nt, r.set.MaxQueued, pin || now, ev); err != nil || !now {
		return t, false, err
	}
	s, err := r.start(ctx, t, EventTaskStarted)
	if err != nil {
		// It stays queued, for this host: a later dispatch starts it.
		r.log.Warn("new task not started; it stays queued", "task", t.ID, "error", err)
		return t, false, nil
	}
	return s, true, nil
}

// queuedAhead counts the tasks queued before a new one: none for a solo
// host, which does not take its turn.
func (r *Runner) queuedAhead(ctx context.Context) (int64, error) {
	if r.set.Solo {
		return 0, nil
	}
	return r.store.CountQueued(ctx)
}

// startIfIdle starts interrupted task t at once when a slot is free and
// no task waits in the queue (it would go first); ok is false when it did
// not try.
func (r *Runner) startIfIdle(ctx context.Context, t store.Task) (store.Task, bool, error) {
	r.queueMu.Lock()
	defer r.queueMu.Unlock()
	n, err := r.queuedAhead(ctx)
	if err != nil {
		return store.Task{}, false, err
	}
	if n > 0 {
		return store.Task{}, false, nil
	}
	if err := r.reserve(); err != nil {
		if errors.Is(err, ErrBusy) {
			return store.Task{}, false, nil
		}
		return store.Task{}, false, err
	}
	defer r.unreserve()
	started, err := r.start(ctx, t, EventTaskResumed)
	return started, true, err
}

// dispatch starts queued tasks, head first, while this host has free
// slots, and returns those it started. One dispatch runs at a time.
func (r *Runner) dispatch(ctx context.Context) map[string]store.Task {
	r.queueMu.Lock()
	defer r.queueMu.Unlock()
	started := map[string]store.Task{}
	if r.set.Disabled || r.set.Solo {
		return started
	}
	for r.freeSlots() > 0 {
		queued, err := r.store.Queued(ctx, queueBatch)
		if err != nil {
			r.log.Warn("queue not read; it is read again when a slot frees or at the next poll", "error", err)
			return started
		}
		progress := false
		for _, t := range queued {
			if r.freeSlots() <= 0 {
				return started
			}
			if _, ok := started[t.ID]; ok || r.hasRun(t.ID) {
				// A run of it still winds down here (a pause, then a
				// resume): it starts at a later dispatch.
				continue
			}
			// A kind this host cannot run now is left for a host that can.
			if _, err := r.preflight(ctx, t.Executor); err != nil {
				continue
			}
			if err := r.reserve(); err != nil {
				return started
			}
			ev := EventTaskStarted
			if t.RunID > 0 {
				ev = EventTaskResumed
			}
			s, err := r.start(ctx, t, ev)
			r.unreserve()
			var te *store.TransitionError
			switch {
			case err == nil:
				started[t.ID] = s
				progress = true
			case errors.As(err, &te), errors.Is(err, store.ErrNotFound):
				// Another host started it, or it was cancelled.
				progress = true
			default:
				r.log.Warn("queued task not started; it stays queued", "task", t.ID, "error", err)
				return started
			}
		}
		if !progress || len(queued) < queueBatch {
			return started
		}
	}
	return started
}

// freeSlots is how many more runs this host may hold now.
func (r *Runner) freeSlots() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return 0
	}
	return r.set.MaxConcurrent - len(r.runs) - r.reserved
}

// queueLoop dispatches every poll interval, until Shutdown: for the tasks
// queued through other hosts, and slots no local event freed. Recover has run before it starts: the queue it finds
// is the one the last host process left.
func (r *Runner) queueLoop(poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		// Trees whose tasks another host (or a crash) moved settle here.
		r.settleTrees(context.Background())
		if len(r.dispatch(context.Background())) > 0 {
			r.notify()
		}
		select {
		case <-r.stopped:
			return
		case <-t.C:
		}
	}
}

// StartQueue starts the queue loop (StartFleet does too): queued tasks
// then start as slots free without a create or resume to start them.
func (r *Runner) StartQueue() {
	// Not faster than minQueuePoll: a local slot that frees starts the
	// head at once, so the poll only finds other hosts' tasks, and a short
	// poll_millis is for cancels to arrive fast, not for this.
	if r.set.Solo {
		return
	}
	r.queueOnce.Do(func() { r.goFleet(func() { r.queueLoop(max(r.set.Fleet.Poll, minQueuePoll)) }) })
}
