package host

import (
	"context"
	"sync"
	"time"

	"github.com/taskhost/taskhost/store"
)

// wallClock measures a task's active running time for one run on the
// monotonic clock, on top of what earlier runs consumed. It never goes
// backwards: a resume starts from the persisted total. Time the run spends
// waiting for an approval is not active: the approval timeout bounds that
// wait, the wall budget bounds the work. It is safe for concurrent use:
// events of other goroutines (approvals, progress) read it.
type wallClock struct {
	base  int64 // ms consumed before this run
	limit int64 // ms

	mu      sync.Mutex
	started time.Time
	// paused is the length of the run's finished pauses; open counts the
	// pauses in progress (a step may wait for several approvals at once),
	// the oldest of which began at pausedAt.
	paused   time.Duration
	open     int
	pausedAt time.Time
	// stoppedAt, when set, is when the run stopped being active (its
	// store failed): the time it then waits for the store is not charged.
	stoppedAt time.Time
	// resumed is closed, and replaced, when the last open pause ends, so
	// that expire re-arms its timer.
	resumed chan struct{}
}

func newWallClock(b store.Budget) *wallClock {
	return &wallClock{base: b.Used, limit: b.Limit, started: time.Now(), resumed: make(chan struct{})}
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
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stoppedAt.IsZero() {
		w.stoppedAt = time.Now()
	}
}

// pause stops charging until the returned resume is called (once or more).
func (w *wallClock) pause() (resume func()) {
	w.mu.Lock()
	if w.open == 0 {
		w.pausedAt = time.Now()
	}
	w.open++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.open--
			if w.open > 0 {
				return
			}
			if end := w.endLocked(); end.After(w.pausedAt) {
				// A pause that began after the clock stopped hid nothing.
				w.paused += end.Sub(w.pausedAt)
			}
			close(w.resumed)
			w.resumed = make(chan struct{})
		})
	}
}

func (w *wallClock) elapsed() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.endLocked()
	d := end.Sub(w.started) - w.paused
	if w.open > 0 && end.After(w.pausedAt) {
		d -= end.Sub(w.pausedAt)
	}
	return d
}

// endLocked is the moment the clock reads up to: now, or when it stopped.
func (w *wallClock) endLocked() time.Time {
	if !w.stoppedAt.IsZero() {
		return w.stoppedAt
	}
	return time.Now()
}

// expire cancels ctx with cause once the active time left runs out, and
// returns when it has or ctx ended. A pause moves the moment on by its
// length: a deadline fixed when the step began would charge the wait.
func (w *wallClock) expire(ctx context.Context, cancel context.CancelCauseFunc, cause error) {
	for {
		w.mu.Lock()
		resumed, paused, stopped := w.resumed, w.open > 0, !w.stoppedAt.IsZero()
		w.mu.Unlock()
		if stopped {
			// A frozen clock never runs out; the run is ending.
			<-ctx.Done()
			return
		}
		if paused {
			select {
			case <-resumed:
				continue
			case <-ctx.Done():
				return
			}
		}
		left := w.remaining()
		if left <= 0 {
			cancel(cause)
			return
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}
