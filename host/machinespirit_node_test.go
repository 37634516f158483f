package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// operatorGraphs writes graphs (id -> source) where the plugin can read
// them (under a uid of its own it reads through the "others" bits) and
// pins them in c.
func operatorGraphs(t *testing.T, c *config.Config, graphs map[string]string) {
	t.Helper()
	dir := testwait.ShortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.MachineSpirit.GraphsDir = dir
	c.MachineSpirit.GraphPins = map[string]string{}
	for id, src := range graphs {
		if err := os.WriteFile(filepath.Join(dir, id+".pl"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(src))
		c.MachineSpirit.GraphPins[id] = hex.EncodeToString(sum[:])
	}
}

// machineSpiritGraphTask creates a machinespirit task on graph.
func machineSpiritGraphTask(t *testing.T, h *Host, graph, goal string) store.Task {
	t.Helper()
	sp, err := json.Marshal(map[string]any{"goal": goal, "machinespirit": map[string]any{"graph": graph}})
	if err != nil {
		t.Fatal(err)
	}
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit", Spec: sp, Limits: Limits{Steps: 20}})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// A machinespirit parent delegates a legacy child through task.delegate,
// waits blocked, and its next node finds the child's id, status and result
// in the graph's children field: no task.status call.
func TestMachineSpiritChildrenInState(t *testing.T) {
	script := writeScript(t, map[string]any{"when": map[string]any{}, "reply": map[string]any{"content": "TASK_COMPLETE: leaf answer 42"}})
	graph := `graph(parent, [
  state([field(child, json, null, replace), field(children, json, [], replace)]),
  nodes([node(d, tool('task.delegate', json{goal: "LEAF work", executor: "legacy"}, child)), node(r, noop)]),
  edges([edge(start, d), edge(d, r), edge(r, end)]),
  output([child, children])
]).`
	h := openHost(t, "", func(c *config.Config) {
		machineSpiritOn(c)
		c.Model.Script = script
		operatorGraphs(t, c, map[string]string{"parent": graph})
	})
	parent := machineSpiritGraphTask(t, h, "parent", "delegate and read")
	task := waitFor(t, h, parent.ID, "to end", func(tk store.Task) bool { return tk.Status.Terminal() })
	wantStatus(t, task, store.StatusCompleted, "")
	var out struct {
		Child struct {
			TaskID string `json:"task_id"`
		}
		Children []struct{ ID, Status, Reason, Result string }
	}
	if err := json.Unmarshal(task.Result, &out); err != nil {
		t.Fatalf("result %s: %v", task.Result, err)
	}
	if len(out.Children) != 1 {
		t.Fatalf("result %s: want one child", task.Result)
	}
	c := out.Children[0]
	if c.ID == "" || c.ID != out.Child.TaskID || c.Status != "completed" || !strings.Contains(c.Result, "leaf answer 42") {
		t.Fatalf("child %+v (delegated %q): want the completed child and its result", c, out.Child.TaskID)
	}
}
