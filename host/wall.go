package host

import (
	"sync/atomic"
	"time"

	"github.com/taskhost/taskhost/store"
)

// wallClock measures a task's active running time for one run on the
// monotonic clock, on top of what earlier runs consumed. It never goes
// backwards: a resume starts from the persisted total. It is safe for
// concurrent use: events of other goroutines (approvals, progress) read it.
type wallClock struct {
	base    int64 // ms consumed before this run
	limit   int64 // ms
	started time.Time
	// stoppedAt, when positive, is the run's active time in ns when it
	// stopped being active (its store failed): the time it then waits for
	// the store is not charged.
	stoppedAt atomic.Int64
}

func newWallClock(b store.Budget) *wallClock {
	return &wallClock{base: b.Used, limit: b.Limit, started: time.Now()}
}

// used is the total active time in ms, capped at the limit: time past the
// limit is the moment the task fails, not budget it consumed.
func (w *wallClock) used() int64 {
	return min(w.base+w.elapsed().Milliseconds(), w.limit)
}

// remaining is how much active time is left.
func (w *wallClock) remaining() time.Duration {
	return time.Duration(w.limit-w.base)*time.Millisecond - w.elapsed()
}

// stop freezes the clock.
func (w *wallClock) stop() {
	w.stoppedAt.CompareAndSwap(0, max(int64(time.Since(w.started)), 1))
}

func (w *wallClock) elapsed() time.Duration {
	if s := w.stoppedAt.Load(); s > 0 {
		return time.Duration(s)
	}
	return time.Since(w.started)
}
