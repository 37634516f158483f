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
}

func newWallClock(b store.Budget) *wallClock {
	return &wallClock{base: b.Used, limit: b.Limit, started: time.Now()}
}

// used is the total active time in ms, capped at the limit: time past the
// limit is the moment the task fails, not budget it consumed.
func (w *wallClock) used() int64 {
	return min(w.base+time.Since(w.started).Milliseconds(), w.limit)
}

// remaining is how much active time is left.
func (w *wallClock) remaining() time.Duration {
	return time.Duration(w.limit-w.base)*time.Millisecond - time.Since(w.started)
}
