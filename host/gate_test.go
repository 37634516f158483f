package host

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// gateCommand counts its runs in the workspace and stays running (for the
// test to kill the plugin under it) unless the workspace holds "again".
// The count is the runs since the last committed step: a resume starts
// from that step's workspace, without what the killed run wrote.
const gateCommand = "echo ran >> count; echo $$ > tool.pid; [ -e again ] || sleep 300"

// gatedTask is a task of gateCommand calls, killed while the first runs.
type gatedTask struct {
	store.Task
	ws     string // its workspace
	goFile string // each step waits for it before its calls
}

// crashDuringTool starts a task whose every step calls gateCommand, kills
// the plugin while the first run of it is in flight, and returns the task
// interrupted with its shell.run effect indeterminate, after checking the
// run was counted. The steps of a resume wait, at their start, for
// release.
func crashDuringTool(t *testing.T, h *Host, te map[string]any, limits Limits) gatedTask {
	t.Helper()
	dir := testwait.PluginDir(t)
	g := gatedTask{goFile: filepath.Join(dir, "go")}
	if err := os.WriteFile(g.goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	te["pid_file"] = filepath.Join(dir, "pid")
	te["wait_file"], te["wait_first"] = g.goFile, true
	te["call_tool"] = map[string]any{"name": "shell.run", "args": map[string]any{"command": gateCommand}}
	g.Task = create(t, h, alice, te, limits)
	g.ws = h.Runner.workspace(g.ID)
	readPid(t, filepath.Join(g.ws, "tool.pid"))
	if err := syscallKill(readPid(t, filepath.Join(dir, "pid"))); err != nil {
		t.Fatal(err)
	}
	g.Task = waitEnd(t, h, alice, g.ID)
	wantStatus(t, g.Task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	if n := runs(t, g.ws); n != 1 {
		t.Fatalf("the first run counted %d runs, want 1", n)
	}
	if err := os.Remove(g.goFile); err != nil {
		t.Fatal(err)
	}
	return g
}

// release lets the resumed run's steps go on, once its first attempt
// runs (so its workspace was restored), and its command's next run end
// at once.
func (g gatedTask) release(t *testing.T, h *Host, attempt int64) {
	t.Helper()
	testwait.Until(t, 15*time.Second, "the resumed attempt to run", func() bool {
		atts, err := h.Store.ListAttempts(context.Background(), alice, g.ID)
		return err == nil && int64(len(atts)) >= attempt && atts[attempt-1].Status == store.AttemptRunning
	})
	if err := os.WriteFile(filepath.Join(g.ws, "again"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runs is how often gateCommand ran in workspace ws since its task's last
// committed step.
func runs(t *testing.T, ws string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(ws, "count"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "ran")
}

// The issue 21 reproduction: with shell.run under approval = "never", a
// crash leaves the call indeterminate; the next attempt's re-issue is
// refused, that attempt completes, and every later attempt's re-issue must
// be refused too — the gate is the ledger's, not one attempt's.
func TestUnsettledEffectRefusedInEveryLaterAttempt(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", shellNoApproval)
	ctx := context.Background()
	g := crashDuringTool(t, h, map[string]any{}, Limits{Steps: 5})
	if _, err := h.Runner.Resume(ctx, alice, g.ID); err != nil {
		t.Fatal(err)
	}
	g.release(t, h, 2)
	task := waitEnd(t, h, alice, g.ID)
	wantStatus(t, task, store.StatusFailed, store.ReasonStepBudgetExhausted)
	if n := runs(t, g.ws); n != 0 {
		t.Errorf("the command ran %d times after the resume, want 0: a later attempt re-ran it without an approval", n)
	}
	atts, err := h.Store.ListAttempts(ctx, alice, task.ID)
	if err != nil || len(atts) < 4 {
		t.Fatalf("attempts = %+v, %v; want the crashed one and at least three more", atts, err)
	}
	for _, a := range atts[1:] {
		if a.Status == store.AttemptCompleted && a.Summary != "tool error: effect_unsettled" {
			t.Errorf("attempt %d summary = %q, want the re-issue refused (effect_unsettled)", a.Number, a.Summary)
		}
	}
	if task.Budgets.ToolCalls.Used != 1 {
		t.Errorf("tool calls used = %d, want 1: a refusal charges nothing", task.Budgets.ToolCalls.Used)
	}
	hist, err := h.Store.UnsettledHistory(ctx, alice, task.ID)
	if err != nil || len(hist) != 1 || hist[0].Attempt != 1 || hist[0].Resolution != store.ResolutionUnsettled {
		t.Fatalf("unsettled effects = %+v, %v; want attempt 1's, unresolved", hist, err)
	}
}

// Under the default policy (shell.run asks an approval), the re-issue of an
// indeterminate call asks a fresh approval that says, in the host's words,
// that the call may already have run once; granting it authorizes that
// effect's retry durably (bound to the approval's id) before the call runs.
func TestGatedRetryApprovalIsBoundToTheEffect(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", nil)
	ctx := context.Background()
	dir := testwait.PluginDir(t)
	te := map[string]any{"steps": 2, "pid_file": filepath.Join(dir, "pid"),
		"call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": gateCommand}}}
	task := create(t, h, alice, te, Limits{Steps: 4})
	first := waitApproval(t, h, alice, task.ID)
	if strings.Contains(first.Prompt, "may already have run") {
		t.Fatalf("the first approval's prompt %q speaks of a re-run", first.Prompt)
	}
	if _, err := h.Runner.Approve(ctx, alice, first.ID); err != nil {
		t.Fatal(err)
	}
	ws := h.Runner.workspace(task.ID)
	readPid(t, filepath.Join(ws, "tool.pid"))
	if err := syscallKill(readPid(t, filepath.Join(dir, "pid"))); err != nil {
		t.Fatal(err)
	}
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
	if n := runs(t, ws); n != 1 {
		t.Fatalf("the first run counted %d runs, want 1", n)
	}

	if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	retry := waitApproval(t, h, alice, task.ID)
	if !strings.Contains(retry.Prompt, "[taskhost: this call may already have run once: attempt 1, indeterminate") {
		t.Fatalf("the retry's approval prompt %q does not say the call may already have run", retry.Prompt)
	}
	// The resume restored step 0's workspace (the killed run's count is
	// gone); this run of the command is to end at once.
	if err := os.WriteFile(filepath.Join(ws, "again"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Runner.Approve(ctx, alice, retry.ID); err != nil {
		t.Fatal(err)
	}
	// The retry runs once; step 2 re-issues the call again, which is a new
	// call of an authorized (settled) effect: its own approval, no note.
	testwait.Until(t, 15*time.Second, "the retry to run", func() bool { return runs(t, ws) == 1 })
	third := waitApproval(t, h, alice, task.ID)
	if strings.Contains(third.Prompt, "may already have run") {
		t.Errorf("the approval of a call after an observed retry says %q", third.Prompt)
	}
	hist, err := h.Store.UnsettledHistory(ctx, alice, task.ID)
	if err != nil || len(hist) != 1 || hist[0].Resolution != store.ResolutionRetryAuthorized || hist[0].ResolvedBy != retry.ID {
		t.Fatalf("unsettled effects = %+v, %v; want attempt 1's retry_authorized by %s", hist, err, retry.ID)
	}
	if n := runs(t, ws); n != 1 {
		t.Errorf("the command ran %d times after the resume, want 1 (the approved retry)", n)
	}
	if !hasEvent(t, h, task.ID, EventEffectResolved, "retry_authorized") {
		t.Error("no effect.resolved event for the retry's authorization")
	}
}

func hasEvent(t *testing.T, h *Host, taskID, typ, outcome string) bool {
	t.Helper()
	evs, err := h.Store.Events(context.Background(), alice, taskID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == typ && strings.Contains(string(e.Payload), `"outcome":"`+outcome+`"`) {
			return true
		}
	}
	return false
}

// An operator authorizes the retry of an unsettled effect (task
// resolve-effect): the resolution records who, is an event, is a
// compare-and-set, and the resumed task's re-issue runs once more.
func TestOperatorAuthorizesRetry(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", shellNoApproval)
	ctx := context.Background()
	g := crashDuringTool(t, h, map[string]any{}, Limits{Steps: 3})
	task := g.Task
	hist, err := h.Runner.UnsettledEffects(ctx, alice, task.ID)
	if err != nil || len(hist) != 1 || hist[0].Resolution != store.ResolutionUnsettled {
		t.Fatalf("unsettled effects = %+v, %v", hist, err)
	}
	e := hist[0]
	got, err := h.Runner.ResolveEffect(ctx, alice, task.ID, e.Attempt, e.Seq, store.ResolutionRetryAuthorized, alice)
	if err != nil || got.Resolution != store.ResolutionRetryAuthorized || got.ResolvedBy != store.ResolvedByOperatorPrefix+alice {
		t.Fatalf("resolve: %+v, %v", got, err)
	}
	if _, err := h.Runner.ResolveEffect(ctx, alice, task.ID, e.Attempt, e.Seq, store.ResolutionAbandoned, alice); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second resolution: %v, want ErrConflict", err)
	}
	if _, err := h.Runner.ResolveEffect(ctx, "mallory", task.ID, e.Attempt, e.Seq, store.ResolutionAbandoned, "mallory"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another principal's resolution: %v, want ErrNotFound", err)
	}
	if !hasEvent(t, h, task.ID, EventEffectResolved, "retry_authorized") {
		t.Error("no effect.resolved event for the operator's authorization")
	}
	if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
		t.Fatal(err)
	}
	g.release(t, h, 2)
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusCompleted, "")
	if n := runs(t, g.ws); n != 1 {
		t.Errorf("the command ran %d times after the resume, want 1 (the authorized retry)", n)
	}
}
