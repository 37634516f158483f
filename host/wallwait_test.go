package host

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/store"
)

// The wall budget is active running time: a task whose approval wait
// outlasts its whole wall budget still completes once approved, its meters
// frozen during the wait — in the store and in the events watch shows alike
// — while a task that runs as long without waiting runs out of budget.
func TestApprovalWaitIsNotChargedToWall(t *testing.T) {
	t.Parallel()
	const budget = 2 * time.Second
	const wait = 3 * time.Second
	h := openHost(t, "", nil)
	ctx := context.Background()

	task := create(t, h, alice, map[string]any{"steps": 1, "request_approval": true, "sleep_ms": 300},
		Limits{WallSeconds: int64(budget / time.Second)})
	a := waitApproval(t, h, alice, task.ID)
	atStart, err := h.Runner.Get(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if atStart.Status != store.StatusWaitingApproval {
		t.Fatalf("task is %s, want waiting_approval", atStart.Status)
	}
	// The approver is slow: this sleep is the wait under test, not a
	// synchronisation.
	time.Sleep(wait)
	beforeApprove, err := h.Runner.Get(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, was := beforeApprove.Budgets.WallMillis.Used, atStart.Budgets.WallMillis.Used; got != was {
		t.Errorf("the stored wall meter moved from %d ms to %d ms during the approval wait", was, got)
	}
	evs, err := h.Store.Events(ctx, alice, task.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var waiting *EventPayload
	for _, e := range evs {
		if e.Type == EventTaskWaitingApproval {
			var p EventPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			waiting = &p
		}
	}
	if waiting == nil {
		t.Fatal("no task.waiting_approval event")
	}
	if got, want := used(t, waiting.WallSecs), beforeApprove.Budgets.WallMillis.Used/1000; got != want {
		t.Errorf("watch shows wall %s during the wait, status %d ms: they disagree", waiting.WallSecs, beforeApprove.Budgets.WallMillis.Used)
	}
	if _, err := h.Runner.Approve(ctx, alice, a.ID); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, "")
	if u := got.Budgets.WallMillis.Used; u >= budget.Milliseconds() || u < 300 {
		t.Errorf("wall used = %d ms, want the ~300 ms of work, below the %d ms budget", u, budget.Milliseconds())
	}

	// The control: as long a step, all of it active.
	control := create(t, h, alice, map[string]any{"steps": 1, "sleep_ms": wait.Milliseconds()},
		Limits{WallSeconds: int64(budget / time.Second)})
	got = waitEnd(t, h, alice, control.ID)
	wantStatus(t, got, store.StatusFailed, store.ReasonWallClockExceeded)
	if u := got.Budgets.WallMillis.Used; u != budget.Milliseconds() {
		t.Errorf("control wall used = %d ms, want the whole %d ms budget", u, budget.Milliseconds())
	}
}

// The approval timeout, not the wall budget, bounds the wait: an approval
// left undecided past the whole wall budget expires on its own clock.
func TestApprovalTimeoutBoundsWaitBeyondWall(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", func(c *config.Config) { c.Approvals.TimeoutSeconds = 2 })
	task := create(t, h, alice, map[string]any{"steps": 1, "request_approval": true}, Limits{WallSeconds: 1})
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusFailed, store.ReasonApprovalTimeout)
	if u := got.Budgets.WallMillis.Used; u >= 1000 {
		t.Errorf("wall used = %d ms: the wait was charged", u)
	}
}

// A pause stops the clock for its length; nested pauses count once; a
// stopped clock stays frozen whatever pauses do. In a synctest bubble the
// clock is exact: every reading is the sum of the active sleeps.
func TestWallClockPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWallClock(store.Budget{Used: 1000, Limit: 10_000})
		want := func(what string, d time.Duration) {
			t.Helper()
			if got := w.elapsed(); got != d {
				t.Errorf("%s: elapsed = %v, want %v", what, got, d)
			}
		}
		time.Sleep(30 * time.Millisecond)
		want("running", 30*time.Millisecond)
		resumeA := w.pause()
		resumeB := w.pause()
		time.Sleep(50 * time.Millisecond)
		want("paused twice", 30*time.Millisecond)
		resumeA()
		resumeA() // idempotent
		time.Sleep(20 * time.Millisecond)
		want("one pause still open", 30*time.Millisecond)
		resumeB()
		time.Sleep(20 * time.Millisecond)
		want("resumed", 50*time.Millisecond)
		if u, r := w.used(), w.remaining(); u != 1050 || r != 8950*time.Millisecond {
			t.Errorf("used = %d ms, remaining %v; want 1050 ms and 8.95s", u, r)
		}
		w.stop()
		time.Sleep(10 * time.Millisecond)
		r := w.pause()
		time.Sleep(10 * time.Millisecond)
		r()
		time.Sleep(10 * time.Millisecond)
		want("stopped", 50*time.Millisecond)
	})
}

// expire fires when the active time left runs out, not a moment before,
// and a pause moves that moment on by its length.
func TestWallClockExpireWaitsOutPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWallClock(store.Budget{Used: 50, Limit: 250})
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		go w.expire(ctx, cancel, errWallExceeded)
		time.Sleep(50 * time.Millisecond)
		resume := w.pause()
		time.Sleep(400 * time.Millisecond) // twice the budget, all of it paused
		synctest.Wait()
		if ctx.Err() != nil {
			t.Fatal("the clock ran out while paused")
		}
		resume()
		time.Sleep(149 * time.Millisecond)
		synctest.Wait()
		if ctx.Err() != nil {
			t.Fatalf("the clock ran out with %v left", w.remaining())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if ctx.Err() == nil {
			t.Fatalf("the clock did not run out at its limit (%v left)", w.remaining())
		}
		if w.remaining() != 0 || w.used() != 250 {
			t.Errorf("expired with %v left, %d ms used; want 0 and 250", w.remaining(), w.used())
		}
		if context.Cause(ctx) != errWallExceeded {
			t.Errorf("cause = %v", context.Cause(ctx))
		}
	})
}
