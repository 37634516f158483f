package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// The plugin dies while the second of a step's two tool calls runs. On
// resume the executor first asks an approval to retry (as legacy and
// machinespirit do), then makes the same calls again: the first, observed
// by the dead attempt, is replayed — never written a second time — and only
// the in-flight one, approved, runs again. (The approval used to take the
// step's first sequence number, so every call after it missed its replay
// and ran again: more real writes than a person or a budget allowed.)
func TestResumeWritesObservedEffectAtMostOnce(t *testing.T) {
	h := openHost(t, "", shellNoApproval)
	ctx := context.Background()
	dir := testwait.PluginDir(t)
	pidFile := filepath.Join(dir, "pid")
	te := map[string]any{
		"pid_file": pidFile, "approve_retry": true,
		"call_tool_first": map[string]any{"name": "shell.run", "args": map[string]any{"command": "echo first >> writes"}},
		// In flight at the kill the first time; done at once when retried.
		"call_tool": map[string]any{"name": "shell.run", "args": map[string]any{
			"command": "echo second >> writes; [ -e retried ] && exit 0; touch retried; echo $$ > tool.pid; sleep 300"}},
	}
	task := create(t, h, alice, te, Limits{Steps: 3})
	ws := h.Runner.workspace(task.ID)
	readPid(t, filepath.Join(ws, "tool.pid"))
	if err := syscallKill(readPid(t, pidFile)); err != nil {
		t.Fatal(err)
	}
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)

	if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	a := waitApproval(t, h, alice, task.ID)
	if _, err := h.Runner.Approve(ctx, alice, a.ID); err != nil {
		t.Fatal(err)
	}
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusCompleted, "")

	data, err := os.ReadFile(filepath.Join(ws, "writes"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "first\nsecond\nsecond\n"; got != want {
		t.Fatalf("real writes = %q, want %q: the observed call once, the in-flight one again after its approval", got, want)
	}
	// Charged: first, second, and its approved retry.
	if task.Budgets.ToolCalls.Used != 3 {
		t.Errorf("tool calls charged = %d, want 3", task.Budgets.ToolCalls.Used)
	}
	effs, err := h.Store.ListEffects(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	var replayed int
	for _, e := range effs {
		if e.Kind == store.EffectTool && e.Replayed {
			replayed++
		}
	}
	if replayed != 1 || !strings.Contains(string(data), "first") {
		t.Errorf("%d tool effects replayed, want the first call's one", replayed)
	}
}
