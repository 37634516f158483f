package host

import (
	"time"

	"github.com/taskhost/taskhost/store"
)

// wallClock measures a task's active running time for one run on the
// monotonic clock, on top of what earlier runs consumed. It never goes
// backwards: a resume starts from the persisted total.
type wallClock struct {
	base    int64 // ms consumed before this run
	limit   int64 // ms
	started time.Time
	// stopped, when set, is the moment the run stopped being active (its
	// store failed): the time it waits for the store is not charged.
	stopped time.Time
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

// stop freezes the clock. The run goroutine calls it; the heartbeat, which
// reads the clock, is stopped first.
func (w *wallClock) stop() {
	if w.stopped.IsZero() {
		w.stopped = time.Now()
	}
}

func (w *wallClock) elapsed() time.Duration {
	if !w.stopped.IsZero() {
		return w.stopped.Sub(w.started)
	}
	return time.Since(w.started)
}
