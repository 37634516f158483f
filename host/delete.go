package host

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/taskhost/taskhost/store"
)

// Delete removes principal's finished task id: its rows in one store
// transaction, then its workspace. A task that is not completed, failed or
// cancelled is a store.ErrConflict naming its status; so is one whose run
// is still winding down in this host (a cancel just committed). Another
// principal's task is store.ErrNotFound.
func (r *Runner) Delete(ctx context.Context, principal, id string) error {
	t, err := r.store.GetTask(ctx, principal, id)
	if err != nil {
		return err
	}
	// A non-terminal task is refused by the store, which names its status.
	if t.Status.Terminal() && r.live(id) {
		return fmt.Errorf("task %s is still stopping: retry in a moment: %w", id, store.ErrConflict)
	}
	if err := r.store.DeleteTask(ctx, principal, id); err != nil {
		return err
	}
	r.notify()
	// The rows are gone, so no run can start on this id again; a
	// workspace left behind by a failed removal is only disk space, and
	// the error says where.
	if err := os.RemoveAll(r.workspace(id)); err != nil {
		return fmt.Errorf("task %s deleted, but removing its workspace failed: %w", id, err)
	}
	return nil
}

// Sweep deletes every task that finished (completed, failed or cancelled)
// more than age ago, with its workspace, in batches of at most
// store.MaxSweepBatch per transaction, and returns how many it deleted. A
// task whose run is still winding down is left for the next sweep.
func (r *Runner) Sweep(ctx context.Context, age time.Duration) (int, error) {
	cutoff := time.Now().Add(-age)
	total := 0
	for {
		deleted, err := r.store.DeleteFinishedBefore(ctx, cutoff, store.MaxSweepBatch, r.live)
		if err != nil {
			return total, fmt.Errorf("retention sweep: %w", err)
		}
		for _, d := range deleted {
			if err := os.RemoveAll(r.workspace(d.ID)); err != nil {
				r.log.Warn("retention sweep: removing a deleted task's workspace failed", "task", d.ID, "error", err)
			}
		}
		total += len(deleted)
		if len(deleted) > 0 {
			r.notify()
		}
		if len(deleted) < store.MaxSweepBatch {
			return total, nil
		}
	}
}

// live reports whether task id has a run in this host.
func (r *Runner) live(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.runs[id]
	return ok
}
