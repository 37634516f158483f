package host

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// Cancel reaches the step running inside the plugin through its gRPC
// context; the task is cancelled and the plugin process is gone.
func TestCancelReachesRunningStep(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	dir := testwait.PluginDir(t)
	marker, pidFile := filepath.Join(dir, "cancelled"), filepath.Join(dir, "pid")
	task := create(t, h, alice, map[string]any{"sleep_ms": 60000, "cancel_marker": marker, "pid_file": pidFile}, Limits{})
	pid := readPid(t, pidFile) // the step is running

	cancelled, err := h.Runner.Cancel(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, cancelled, store.StatusCancelled, store.ReasonUserCancelled)
	if got := testwait.File(t, marker); !strings.Contains(got, "cancelled attempt=1") {
		t.Errorf("cancel marker = %q", got)
	}
	waitGone(t, pid, 5*time.Second)
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusCancelled, store.ReasonUserCancelled)
	atts, _ := h.Runner.Attempts(context.Background(), alice, task.ID)
	if len(atts) != 1 || atts[0].Status != store.AttemptCancelled {
		t.Fatalf("attempts = %+v, want one cancelled", atts)
	}

	// Cancelling again is a no-op.
	again, err := h.Runner.Cancel(context.Background(), alice, task.ID)
	if err != nil || again.Status != store.StatusCancelled || !again.UpdatedAt.Equal(task.UpdatedAt) {
		t.Fatalf("second cancel: %v, status %s, updated %v→%v", err, again.Status, task.UpdatedAt, again.UpdatedAt)
	}
	// Resuming a terminal task is an error.
	if _, err := h.Runner.Resume(context.Background(), alice, task.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("resume of a cancelled task: err = %v, want a conflict", err)
	}
}

func TestResumeCompletedTaskRefused(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	task := create(t, h, alice, nil, Limits{})
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	_, err := h.Runner.Resume(context.Background(), alice, task.ID)
	var te *store.TransitionError
	if !errors.As(err, &te) || te.Current != store.StatusCompleted {
		t.Fatalf("err = %v, want a TransitionError from completed", err)
	}
	if _, err := h.Runner.Cancel(context.Background(), alice, task.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("cancel of a completed task: err = %v, want a conflict", err)
	}
}

// An executor that ignores its context (and SIGTERM) is still stopped
// within the grace: its process group is killed.
func TestExecutorIgnoringContextIsKilled(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	dir := testwait.PluginDir(t)
	pidFile := filepath.Join(dir, "pid")
	task := create(t, h, alice, map[string]any{"sleep_ms": 120000, "ignore_ctx": true, "pid_file": pidFile, "spawn_grandchild": true}, Limits{})
	pid := readPid(t, pidFile)
	grandchild := readPid(t, pidFile+".grandchild")
	start := time.Now()
	if _, err := h.Runner.Cancel(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, 10*time.Second)
	waitGone(t, grandchild, 10*time.Second)
	t.Logf("plugin ignoring ctx stopped %v after cancel", time.Since(start).Round(time.Millisecond))
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCancelled, store.ReasonUserCancelled)
}

// Cancel racing the completion of a step: exactly one wins each time.
func TestCancelRacesCompletion(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	const rounds = 20
	for i := range rounds {
		task := create(t, h, alice, map[string]any{"sleep_ms": i % 5}, Limits{})
		_, cerr := h.Runner.Cancel(context.Background(), alice, task.ID)
		final := waitEnd(t, h, alice, task.ID)
		switch final.Status {
		case store.StatusCompleted:
			if !errors.Is(cerr, ErrConflict) {
				t.Fatalf("round %d: completed, but cancel said %v", i, cerr)
			}
		case store.StatusCancelled:
			if cerr != nil {
				t.Fatalf("round %d: cancelled, but cancel said %v", i, cerr)
			}
			if final.Result != nil {
				t.Fatalf("round %d: cancelled task has a result", i)
			}
		default:
			t.Fatalf("round %d: task ended %s", i, final.Status)
		}
	}
}
