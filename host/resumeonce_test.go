package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/store"
)

// The plugin dies right after a step's two shell.run calls were observed,
// before the step committed. The resume starts from the workspace as of
// the last committed step (host/workspace.go), without the dead attempt's
// writes, so neither call is answered from the ledger: both run again, and
// the workspace holds each write once — never the dead attempt's copy and
// the re-run's. (Replaying them would claim writes whose files are gone;
// before workspaces were stored, the replay kept them from being written
// twice.)
func TestResumeWritesObservedEffectAtMostOnce(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", shellNoApproval)
	ctx := context.Background()
	te := map[string]any{
		"kill_after_tool_at_attempt": 1,
		"call_tool_first":            map[string]any{"name": "shell.run", "args": map[string]any{"command": "echo first >> writes"}},
		"call_tool":                  map[string]any{"name": "shell.run", "args": map[string]any{"command": "echo second >> writes"}},
	}
	task := create(t, h, alice, te, Limits{Steps: 3})
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	ws := h.Runner.workspace(task.ID)
	if data, err := os.ReadFile(filepath.Join(ws, "writes")); err != nil || string(data) != "first\nsecond\n" {
		t.Fatalf("the dead attempt's writes: %q, %v", data, err)
	}

	if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusCompleted, "")

	data, err := os.ReadFile(filepath.Join(ws, "writes"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "first\nsecond\n"; got != want {
		t.Fatalf("writes = %q, want %q: the dead attempt's writes rolled back, the re-run's once", got, want)
	}
	// Charged: both calls of each attempt.
	if task.Budgets.ToolCalls.Used != 4 {
		t.Errorf("tool calls charged = %d, want 4", task.Budgets.ToolCalls.Used)
	}
	effs, err := h.Store.ListEffects(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range effs {
		if e.Kind == store.EffectTool && e.Replayed {
			t.Errorf("tool effect %d of attempt %d was replayed; a workspace write runs again after a rollback", e.Seq, e.Attempt)
		}
	}
}
