package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// TestPauseRunning: a pause commits interrupted (user_pause) first, then
// stops the step inside the plugin; the attempt is interrupted for the
// pause, and a resume goes on from there.
func TestPauseRunning(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	ctx := context.Background()
	dir := testwait.PluginDir(t)
	marker, pidFile := dir+"/cancelled", dir+"/pid"
	task := create(t, h, alice, map[string]any{"sleep_at_attempt": 1, "long_sleep_ms": 60000, "sleep_ms": 1, "cancel_marker": marker, "pid_file": pidFile}, Limits{})
	// The plugin has begun the step (it writes its pid first): a pause
	// before that would stop a step the plugin never saw, and leave no
	// marker.
	testwait.File(t, pidFile)
	paused, err := h.Runner.Pause(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, paused, store.StatusInterrupted, store.ReasonUserPause)
	if got := testwait.File(t, marker); got != "cancelled attempt=1" {
		t.Fatalf("cancel marker %q: the step was not stopped in the plugin", got)
	}
	as, err := h.Runner.Attempts(ctx, alice, task.ID)
	if err != nil || len(as) != 1 || as[0].Status != store.AttemptInterrupted || as[0].Reason != store.ReasonUserPause {
		t.Fatalf("attempts after the pause: %+v, %v; want one interrupted for user_pause", as, err)
	}
	if again, err := h.Runner.Pause(ctx, alice, task.ID); err != nil || again.Reason != store.ReasonUserPause {
		t.Fatalf("second pause: %v, %v; want a no-op", again.Reason, err)
	}
	if _, err := h.Runner.Pause(ctx, bob, task.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("bob's pause of alice's task: %v, want not found", err)
	}
	if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	done := waitEnd(t, h, alice, task.ID)
	wantStatus(t, done, store.StatusCompleted, "")
	if done.RunID != 2 {
		t.Fatalf("run id %d, want 2", done.RunID)
	}
	var te *store.TransitionError
	if _, err := h.Runner.Pause(ctx, alice, task.ID); !errors.As(err, &te) {
		t.Fatalf("pause of a completed task: %v, want a conflict", err)
	}
}

// TestPauseQueued: a paused queued task leaves the queue.
func TestPauseQueued(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	h.Runner.setLimits(1, 0)
	ctx := context.Background()
	busy := create(t, h, alice, map[string]any{"sleep_ms": 60000}, Limits{})
	queued := create(t, h, alice, nil, Limits{})
	wantStatus(t, queued, store.StatusPending, "")
	paused, err := h.Runner.Pause(ctx, alice, queued.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, paused, store.StatusInterrupted, store.ReasonUserPause)
	if n, err := h.Store.CountQueued(ctx); err != nil || n != 0 {
		t.Fatalf("queue holds %d (%v) after the pause, want 0", n, err)
	}
	if _, err := h.Runner.Cancel(ctx, alice, busy.ID); err != nil {
		t.Fatal(err)
	}
	// The freed slot starts nothing: the paused task waits for a resume.
	if err := h.Runner.Wait(ctx, busy.ID); err != nil {
		t.Fatal(err)
	}
	got, err := h.Runner.Get(ctx, alice, queued.ID)
	if err != nil || got.Status != store.StatusInterrupted {
		t.Fatalf("paused task after a slot freed: %v, %v; want interrupted", got.Status, err)
	}
}

// TestBulk: cancel, pause and resume --all act on the caller's tasks
// only, with Zara's reasons; an admin's --all-principals acts on every
// principal's and records itself in each other task's events first.
func TestBulk(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	h.Runner.setLimits(3, 0)
	ctx := context.Background()
	sleeper := map[string]any{"sleep_ms": 60000}
	var mine []store.Task
	for range 2 {
		mine = append(mine, create(t, h, alice, sleeper, Limits{}))
	}
	bobs := create(t, h, bob, sleeper, Limits{})
	mine = append(mine, create(t, h, alice, sleeper, Limits{})) // queued
	wantStatus(t, mine[2], store.StatusPending, "")
	check := func(p string, ts []store.Task, st store.Status, reason store.Reason) {
		t.Helper()
		for _, x := range ts {
			got, err := h.Runner.Get(ctx, p, x.ID)
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, got, st, reason)
		}
	}

	res, err := h.Runner.Bulk(ctx, alice, false, BulkPause, nil)
	if err != nil || len(res.Done) != 3 || len(res.Failed) != 0 || res.More {
		t.Fatalf("pause --all: %+v, %v; want 3 done", res, err)
	}
	check(alice, mine, store.StatusInterrupted, store.ReasonUserPause)
	check(bob, []store.Task{bobs}, store.StatusRunning, "")

	res, err = h.Runner.Bulk(ctx, alice, false, BulkResume, nil)
	if err != nil || len(res.Done) != 3 || len(res.Failed) != 0 {
		t.Fatalf("resume --all: %+v, %v; want 3 done", res, err)
	}
	// Two slots were free: the oldest two run, the third waits in the queue.
	for i, want := range []store.Status{store.StatusRunning, store.StatusRunning, store.StatusPending} {
		if res.Done[i].ID != mine[i].ID || res.Done[i].Status != want {
			t.Errorf("resume --all [%d]: %s %s, want %s %s", i, res.Done[i].ID, res.Done[i].Status, mine[i].ID, want)
		}
	}

	testwait.Until(t, 10*time.Second, "the resumed task's attempt runs", func() bool {
		as, err := h.Runner.Attempts(ctx, alice, mine[0].ID)
		return err == nil && len(as) > 0 && as[len(as)-1].Status == store.AttemptRunning
	})
	res, err = h.Runner.Bulk(ctx, alice, false, BulkCancel, nil)
	if err != nil || len(res.Done) != 3 {
		t.Fatalf("cancel --all: %+v, %v; want 3 done", res, err)
	}
	check(alice, mine, store.StatusCancelled, store.ReasonUserStopAll)
	check(bob, []store.Task{bobs}, store.StatusRunning, "")
	as, err := h.Runner.Attempts(ctx, alice, mine[0].ID)
	if err != nil || as[len(as)-1].Status != store.AttemptCancelled || as[len(as)-1].Reason != store.ReasonUserStopAll {
		t.Fatalf("attempt of a task cancelled by cancel --all: %+v, %v", as, err)
	}

	const admin = "root"
	res, err = h.Runner.Bulk(ctx, admin, true, BulkCancel, nil)
	if err != nil || len(res.Done) != 1 || res.Done[0].ID != bobs.ID {
		t.Fatalf("admin cancel --all-principals: %+v, %v; want bob's task", res, err)
	}
	check(bob, []store.Task{bobs}, store.StatusCancelled, store.ReasonUserStopAll)
	evs, err := h.Store.Events(ctx, bob, bobs.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range evs {
		if e.Type == EventAdminAct || e.Type == EventTaskCancelled {
			var p EventPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, fmt.Sprintf("%s by=%s reason=%s", e.Type, p.By, p.Reason))
		}
	}
	want := []string{EventAdminAct + " by=root reason=", EventTaskCancelled + " by= reason=user_stop_all"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("bob's events %q, want %q", seen, want)
	}
	if _, err := h.Runner.Bulk(ctx, alice, false, "explode", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown act: %v, want ErrInvalid", err)
	}
}
