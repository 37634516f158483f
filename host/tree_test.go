package host

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// Task trees through real plugin processes: legacy parents driven by the
// scripted model delegate through the tool task.delegate; the leaves are
// the test executor, whose plugin a test can SIGKILL.

// treeScript is a model for three-level trees: a ROOT task delegates a MID
// task (legacy), which delegates a LEAF (testexec, with leaf's options);
// a task that sees its children completes.
func treeScript(t *testing.T, leaf map[string]any) string {
	t.Helper()
	return writeScript(t,
		map[string]any{"when": map[string]any{"system_contains": "Child tasks you delegated:"}, "reply": map[string]any{"content": "TASK_COMPLETE: children seen"}},
		map[string]any{"when": map[string]any{"system_contains": "Goal: ROOT", "last_role": "user"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "task.delegate", "arguments": map[string]any{"goal": "MID work"}}}}},
		map[string]any{"when": map[string]any{"system_contains": "Goal: MID", "last_role": "user"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "task.delegate", "arguments": map[string]any{
				"goal": "LEAF work", "executor": "testexec", "options": map[string]any{"testexec": leaf}, "max_steps": 2}}}}},
		map[string]any{"when": map[string]any{"tool": "task.delegate"}, "reply": map[string]any{"content": "delegated; waiting for the child"}},
	)
}

func treeHost(t *testing.T, script string) *Host {
	t.Helper()
	return openHost(t, "", func(c *config.Config) {
		c.Model.Script = script
		c.Tasks.MaxConcurrent = 2
	})
}

func createRoot(t *testing.T, h *Host) store.Task {
	t.Helper()
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "legacy", Spec: spec(t, "ROOT work", nil), Limits: Limits{Steps: 20}})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// waitFor polls task id until ok holds for it.
func waitFor(t *testing.T, h *Host, id, what string, ok func(store.Task) bool) store.Task {
	t.Helper()
	var got store.Task
	testwait.Until(t, 30*time.Second, "task "+id+" "+what, func() bool {
		var err error
		got, err = h.Runner.Get(context.Background(), alice, id)
		return err == nil && ok(got)
	})
	return got
}

func isStatus(st store.Status) func(store.Task) bool {
	return func(t store.Task) bool { return t.Status == st }
}

// nodes returns the tree of root as root, mid, leaf, waiting until the
// leaf exists.
func nodes(t *testing.T, h *Host, root string) (store.Task, store.Task, store.Task) {
	t.Helper()
	var tree []store.Task
	testwait.Until(t, 30*time.Second, "the tree of "+root+" to have three levels", func() bool {
		var err error
		tree, err = h.Runner.store.Tree(context.Background(), alice, root)
		return err == nil && len(tree) == 3
	})
	return tree[0], tree[1], tree[2]
}

// A three-level tree completes: each parent blocks without a slot while
// its child runs, wakes when it completes, sees its result, and completes;
// a child's budgets came out of its parent's.
func TestTreeThreeLevelsComplete(t *testing.T) {
	t.Parallel()
	h := treeHost(t, treeScript(t, map[string]any{"steps": 1}))
	root := createRoot(t, h)
	root = waitFor(t, h, root.ID, "completed", isStatus(store.StatusCompleted))
	wantStatus(t, root, store.StatusCompleted, "")
	r, mid, leaf := nodes(t, h, root.ID)
	if mid.ParentID != r.ID || leaf.ParentID != mid.ID || leaf.RootID != r.ID || leaf.TreeDepth != 2 {
		t.Fatalf("tree links: mid %+v, leaf %+v", mid, leaf)
	}
	wantStatus(t, mid, store.StatusCompleted, "")
	wantStatus(t, leaf, store.StatusCompleted, "")
	// Root: step 1, then mid's share (half of the 19 left: 9), then step 2.
	if r.Budgets.Steps.Used != 11 || mid.Budgets.Steps.Limit != 9 || leaf.Budgets.Steps.Limit != 2 {
		t.Fatalf("steps: root used %d (want 11), mid limit %d (want 9), leaf limit %d (want 2)",
			r.Budgets.Steps.Used, mid.Budgets.Steps.Limit, leaf.Budgets.Steps.Limit)
	}
	evs, err := h.Runner.store.Events(context.Background(), alice, r.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if s := strings.Join(types, " "); !strings.Contains(s, EventTaskBlocked) || !strings.Contains(s, EventTaskQueued) {
		t.Fatalf("root events %s: want task.blocked then task.queued (woken)", s)
	}
}

// A SIGKILLed leaf plugin interrupts the leaf (executor_crashed): its
// waiting parent fails child_failed, and so does the root.
func TestTreeChildKilledFailsParents(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(testwait.PluginDir(t), "leaf.pid")
	h := treeHost(t, treeScript(t, map[string]any{"steps": 1, "sleep_ms": 60000, "pid_file": pidFile}))
	root := createRoot(t, h)
	pid := readPid(t, pidFile)
	_, mid, _ := nodes(t, h, root.ID)
	waitFor(t, h, mid.ID, "blocked", isStatus(store.StatusBlocked))
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	root = waitFor(t, h, root.ID, "failed", isStatus(store.StatusFailed))
	wantStatus(t, root, store.StatusFailed, store.ReasonChildFailed)
	_, mid, leaf := nodes(t, h, root.ID)
	wantStatus(t, mid, store.StatusFailed, store.ReasonChildFailed)
	// The crashed leaf was interrupted, then cancelled with its failed
	// parent's subtree.
	wantStatus(t, leaf, store.StatusCancelled, store.ReasonParentEnded)
	as, err := h.Runner.Attempts(context.Background(), alice, leaf.ID)
	if err != nil || len(as) != 1 || as[0].Status != store.AttemptInterrupted || as[0].Reason != store.ReasonExecutorCrashed || as[0].ExitSignal == "" {
		t.Fatalf("leaf attempts %+v, %v: want one interrupted by the crash", as, err)
	}
	if !strings.Contains(root.Message, mid.ID) || !strings.Contains(mid.Message, leaf.ID) {
		t.Fatalf("child_failed messages do not name the child: %q, %q", root.Message, mid.Message)
	}
	if _, err := h.Runner.Resume(context.Background(), alice, leaf.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("resume of a cancelled child: %v", err)
	}
}

// Cancelling the root cancels its subtree (parent_ended), and the running
// leaf's plugin is stopped.
func TestTreeCancelParentCancelsSubtree(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(testwait.PluginDir(t), "leaf.pid")
	h := treeHost(t, treeScript(t, map[string]any{"steps": 1, "sleep_ms": 60000, "pid_file": pidFile}))
	root := createRoot(t, h)
	pid := readPid(t, pidFile)
	waitFor(t, h, root.ID, "blocked", isStatus(store.StatusBlocked))
	got, err := h.Runner.Cancel(context.Background(), alice, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, store.StatusCancelled, store.ReasonUserCancelled)
	_, mid, leaf := nodes(t, h, root.ID)
	wantStatus(t, mid, store.StatusCancelled, store.ReasonParentEnded)
	wantStatus(t, leaf, store.StatusCancelled, store.ReasonParentEnded)
	waitGone(t, pid, 15*time.Second)
}

// Pausing the root pauses the tree; a child cannot be resumed while its
// parent is down; resuming the root resumes the tree, which completes.
func TestTreePauseAndResume(t *testing.T) {
	t.Parallel()
	dir := testwait.PluginDir(t)
	pidFile, gate := filepath.Join(dir, "leaf.pid"), filepath.Join(dir, "gate")
	h := treeHost(t, treeScript(t, map[string]any{"steps": 1, "wait_file": gate, "pid_file": pidFile}))
	ctx := context.Background()
	root := createRoot(t, h)
	pid := readPid(t, pidFile)
	waitFor(t, h, root.ID, "blocked", isStatus(store.StatusBlocked))
	if _, err := h.Runner.Pause(ctx, alice, root.ID); err != nil {
		t.Fatal(err)
	}
	_, mid, leaf := nodes(t, h, root.ID)
	wantStatus(t, mid, store.StatusInterrupted, store.ReasonUserPause)
	leaf = waitFor(t, h, leaf.ID, "interrupted", isStatus(store.StatusInterrupted))
	wantStatus(t, leaf, store.StatusInterrupted, store.ReasonUserPause)
	waitGone(t, pid, 15*time.Second)
	var pd *store.ParentDownError
	if _, err := h.Runner.Resume(ctx, alice, leaf.ID); !errors.As(err, &pd) || pd.ParentID != mid.ID {
		t.Fatalf("resume of a child under a paused parent: %v, want a ParentDownError naming %s", err, mid.ID)
	}
	got, err := h.Runner.Resume(ctx, alice, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, store.StatusBlocked, store.ReasonWaitingChildren)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	root = waitFor(t, h, root.ID, "completed", isStatus(store.StatusCompleted))
	_, mid, leaf = nodes(t, h, root.ID)
	wantStatus(t, mid, store.StatusCompleted, "")
	wantStatus(t, leaf, store.StatusCompleted, "")
}

// An agent (legacy on the scripted model) steers its child through the
// task tools — status, pause, resume — and is refused, typed
// (outside_subtree), on tasks outside its subtree: another tree of its own
// principal and another principal's task; then it waits for its child and
// completes.
func TestTreeAgentSteersThroughTaskTools(t *testing.T) {
	t.Parallel()
	dir := testwait.ShortTempDir(t)
	tmp := testwait.PluginDir(t)
	gate := filepath.Join(tmp, "gate")
	ctx := context.Background()
	// The tasks the agent must be refused exist before the script that
	// names them: a first host makes them.
	h0 := openHost(t, dir, nil)
	other := create(t, h0, alice, map[string]any{"steps": 1, "wait_file": gate}, Limits{})
	bobs := create(t, h0, "bob", map[string]any{"steps": 1, "wait_file": gate}, Limits{})
	closeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	h0.Close(closeCtx)

	call := func(name string, args map[string]any) map[string]any {
		return map[string]any{"tool_calls": []any{map[string]any{"name": name, "arguments": args}}}
	}
	script := writeScript(t,
		map[string]any{"when": map[string]any{"system_contains": "Child tasks you delegated:"}, "reply": map[string]any{"content": "TASK_COMPLETE: steered"}},
		map[string]any{"when": map[string]any{"system_contains": "Goal: AGENT", "last_role": "user"},
			"reply": call("task.delegate", map[string]any{"goal": "a child", "executor": "testexec", "options": map[string]any{"testexec": map[string]any{"steps": 1, "wait_file": gate}}})},
		map[string]any{"when": map[string]any{"tool": "task.delegate"}, "reply": call("task.status", map[string]any{"task_id": "$tool_result.task_id"})},
		map[string]any{"when": map[string]any{"tool": "task.status", "contains": "outside_subtree"}, "reply": call("task.list", nil)},
		map[string]any{"when": map[string]any{"tool": "task.status"}, "reply": call("task.pause", map[string]any{"task_id": "$tool_result.task_id"})},
		map[string]any{"when": map[string]any{"tool": "task.pause"}, "reply": call("task.resume", map[string]any{"task_id": "$tool_result.task_id"})},
		map[string]any{"when": map[string]any{"tool": "task.resume"}, "reply": call("task.cancel", map[string]any{"task_id": other.ID})},
		map[string]any{"when": map[string]any{"tool": "task.cancel", "contains": "outside_subtree"}, "reply": call("task.status", map[string]any{"task_id": bobs.ID})},
		map[string]any{"when": map[string]any{"tool": "task.list"}, "reply": map[string]any{"content": "steered; waiting"}},
	)
	h := openHost(t, dir, func(c *config.Config) { c.Model.Script = script })
	agent, err := h.Runner.Create(ctx, alice, CreateRequest{Executor: "legacy", Spec: []byte(`{"goal":"AGENT work","legacy":{"max_rounds":16}}`)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, h, agent.ID, "blocked", isStatus(store.StatusBlocked))
	tree, err := h.Runner.store.Tree(ctx, alice, agent.ID)
	if err != nil || len(tree) != 2 {
		t.Fatalf("agent's tree: %v, %v", tree, err)
	}
	child := tree[1]
	// The pause and resume reached the child.
	evs, err := h.Runner.store.Events(ctx, alice, child.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type+"/"+string(toolResults(t, string(e.Payload))["reason"].(string)))
	}
	if s := strings.Join(types, " "); !strings.Contains(s, "task.interrupted/user_pause") {
		t.Fatalf("child events %s: no pause", s)
	}
	// Nothing outside the subtree moved.
	for _, o := range []struct{ p, id string }{{alice, other.ID}, {"bob", bobs.ID}} {
		got, err := h.Runner.Get(ctx, o.p, o.id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Terminal() {
			t.Fatalf("task %s outside the agent's subtree is %s", o.id, got.Status)
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, h, agent.ID, "completed", isStatus(store.StatusCompleted))
	if !strings.Contains(string(got.Result), "steered") {
		t.Fatalf("agent result %s", got.Result)
	}
}

// toolResults decodes a JSON object.
func toolResults(t *testing.T, raw string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("JSON %q: %v", raw, err)
	}
	if _, ok := m["reason"].(string); !ok {
		m["reason"] = ""
	}
	return m
}

// task.create is approval-gated like any tool when its policy says so:
// the agent's task waits for the approval, and the child exists only once
// it is approved.
func TestTaskCreateApprovalGated(t *testing.T) {
	t.Parallel()
	script := writeScript(t,
		map[string]any{"when": map[string]any{"system_contains": "Child tasks you delegated:"}, "reply": map[string]any{"content": "TASK_COMPLETE: done"}},
		map[string]any{"when": map[string]any{"system_contains": "Goal: ROOT", "last_role": "user"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "task.create", "arguments": map[string]any{
				"goal": "a child", "executor": "testexec", "options": map[string]any{"testexec": map[string]any{"steps": 1}}}}}}},
		map[string]any{"when": map[string]any{"tool": "task.create"}, "reply": map[string]any{"content": "created"}},
	)
	h := openHost(t, "", func(c *config.Config) {
		c.Model.Script = script
		pol := c.Tools["task.create"]
		pol.Approval = config.ApprovalAlways
		c.Tools["task.create"] = pol
	})
	root := createRoot(t, h)
	a := waitApproval(t, h, alice, root.ID)
	if a.Tool != "task.create" {
		t.Fatalf("approval for %q, want task.create", a.Tool)
	}
	if tree, err := h.Runner.store.Tree(context.Background(), alice, root.ID); err != nil || len(tree) != 1 {
		t.Fatalf("a child exists before the approval: %v, %v", tree, err)
	}
	if _, err := h.Runner.Approve(context.Background(), alice, a.ID); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, h, root.ID, "completed", isStatus(store.StatusCompleted))
	tree, err := h.Runner.store.Tree(context.Background(), alice, got.ID)
	if err != nil || len(tree) != 2 || tree[1].Status != store.StatusCompleted {
		t.Fatalf("tree after the approval: %v, %v", tree, err)
	}
}
