package host

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// A plugin SIGKILLed in the middle of a step is an interrupted attempt and an
// interrupted task, never a completion; resume continues the same task from
// its last checkpoint.
func TestPluginKilledMidStepThenResume(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	dir := testwait.PluginDir(t)
	pidFile := filepath.Join(dir, "pid")
	// Step 2 sleeps long enough to be killed in the middle of it.
	task := create(t, h, alice, map[string]any{"steps": 3, "pid_file": pidFile, "kill_at_attempt": 2, "kill_after_ms": 50}, Limits{})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	atts, err := h.Runner.Attempts(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 2 {
		t.Fatalf("%d attempts, want 2: %+v", len(atts), atts)
	}
	crashed := atts[1]
	if crashed.Status != store.AttemptInterrupted || crashed.Reason != store.ReasonExecutorCrashed {
		t.Errorf("attempt 2 = %s (%s), want interrupted (executor_crashed)", crashed.Status, crashed.Reason)
	}
	if crashed.ExitSignal != syscall.SIGKILL.String() {
		t.Errorf("exit signal = %q, want %q", crashed.ExitSignal, syscall.SIGKILL.String())
	}
	if task.Result != nil {
		t.Errorf("an interrupted task has a result: %s", task.Result)
	}
	waitGone(t, readPid(t, pidFile), 5*time.Second)

	// Resume: same id, next run, continues after step 1's checkpoint.
	resumed, err := h.Runner.Resume(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.ID != task.ID || resumed.RunID != task.RunID+1 {
		t.Fatalf("resumed id %s run %d, want %s run %d", resumed.ID, resumed.RunID, task.ID, task.RunID+1)
	}
	final := waitEnd(t, h, alice, task.ID)
	wantStatus(t, final, store.StatusCompleted, "")
	// Steps: 1 ok + 1 crashed + 2 more (the checkpoint says 1 done).
	if final.Budgets.Steps.Used != 4 {
		t.Errorf("steps used = %d, want 4 (a crashed attempt still costs a step)", final.Budgets.Steps.Used)
	}
	if !strings.Contains(string(final.Result), `"steps":3`) {
		t.Errorf("result %s: the resumed run did not continue from the checkpoint", final.Result)
	}
}

// A plugin that exits on its own during a step is a crash too.
func TestPluginExitsMidStep(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	task := create(t, h, alice, map[string]any{"steps": 2, "exit_at_attempt": 1}, Limits{})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	atts, _ := h.Runner.Attempts(context.Background(), alice, task.ID)
	if len(atts) != 1 || atts[0].ExitCode != 7 {
		t.Fatalf("attempts = %+v, want one with exit code 7", atts)
	}
}

// A panic's lines reach the crash record.
func TestPluginPanicRecorded(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	task := create(t, h, alice, map[string]any{"panic_at_attempt": 1}, Limits{})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	atts, _ := h.Runner.Attempts(context.Background(), alice, task.ID)
	if len(atts) != 1 || !strings.Contains(atts[0].StderrTail, "scripted panic") {
		t.Fatalf("attempt stderr tail = %q, want the panic message", atts[0].StderrTail)
	}
}

// A grandchild holding the plugin's stderr must not delay crash detection.
func TestCrashDetectedDespiteGrandchild(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	dir := testwait.PluginDir(t)
	pidFile := filepath.Join(dir, "pid")
	task := create(t, h, alice, map[string]any{"pid_file": pidFile, "spawn_grandchild": true, "kill_at_attempt": 1, "kill_after_ms": 100}, Limits{})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	// The whole process group is gone, grandchild included.
	waitGone(t, readPid(t, pidFile+".grandchild"), 5*time.Second)
}

// 50 crash → resume cycles: consumed steps and wall time never pass their
// limits and never go backwards.
func TestCrashResumeCyclesKeepBudgets(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("50 plugin launches")
	}
	h := openHost(t, "", nil)
	const limit = 60
	// Every attempt crashes (kill_at_attempt 0 means: every attempt).
	task := create(t, h, alice, map[string]any{"steps": 1000, "kill_every_attempt": true}, Limits{Steps: limit, WallSeconds: 600})
	var lastSteps, lastWall int64
	for i := range 50 {
		task = waitEnd(t, h, alice, task.ID)
		wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
		b := task.Budgets
		if b.Steps.Used > b.Steps.Limit || b.WallMillis.Used > b.WallMillis.Limit {
			t.Fatalf("cycle %d: budgets past their limits: %+v", i, b)
		}
		if b.Steps.Used < lastSteps || b.WallMillis.Used < lastWall {
			t.Fatalf("cycle %d: budgets went backwards: steps %d→%d wall %d→%d", i, lastSteps, b.Steps.Used, lastWall, b.WallMillis.Used)
		}
		if b.Steps.Used != int64(i+1) {
			t.Fatalf("cycle %d: steps used %d, want %d", i, b.Steps.Used, i+1)
		}
		if b.Steps.Limit != limit {
			t.Fatalf("cycle %d: step limit changed to %d", i, b.Steps.Limit)
		}
		lastSteps, lastWall = b.Steps.Used, b.WallMillis.Used
		if task, err := h.Runner.Resume(context.Background(), alice, task.ID); err != nil || task.RunID != int64(i+2) {
			t.Fatalf("cycle %d: resume: run %d, %v", i, task.RunID, err)
		}
	}
}
