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
	"github.com/taskhost/taskhost/host/tools"
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

// noteScript is a model for the note graph: asked to note something it
// writes note.txt, then reads it back, then answers with what it read.
func noteScript(t *testing.T) string {
	t.Helper()
	call := func(name string, args map[string]any) map[string]any {
		return map[string]any{"tool_calls": []any{map[string]any{"name": name, "arguments": args}}}
	}
	return writeScript(t,
		map[string]any{"when": map[string]any{"tool": "workspace.read", "contains": "hello"}, "reply": map[string]any{"content": "  NOTE-SAYS-HELLO  "}},
		map[string]any{"when": map[string]any{"tool": "workspace.write"}, "reply": call("workspace.read", map[string]any{"path": "note.txt"})},
		map[string]any{"when": map[string]any{"last_role": "user", "contains": "Note it"}, "reply": call("workspace.write", map[string]any{"path": "note.txt", "content": "hello"})},
	)
}

const noteGraph = `graph(note, [
  state([field(answer, string, "", replace)]),
  nodes([node(a, model("Note it: {{goal}}", answer, [tools(['workspace.write', 'workspace.read'])]))]),
  edges([edge(start, a), edge(a, end)]),
  output([answer])
]).`

// A model node whose model calls tools: each call runs through the host's
// tool service (its policy and approvals, the tool-call budget, the
// ledger), its result goes back to the model, and the final reply lands
// in the field.
func TestMachineSpiritModelNodeTools(t *testing.T) {
	for _, gated := range []bool{false, true} {
		t.Run(map[bool]string{false: "ungated", true: "write approved"}[gated], func(t *testing.T) {
			h := openHost(t, "", func(c *config.Config) {
				machineSpiritOn(c)
				c.Model.Script = noteScript(t)
				operatorGraphs(t, c, map[string]string{"note": noteGraph})
				if gated {
					tl := c.Tools[tools.ToolWorkspaceWrite]
					tl.Approval = config.ApprovalAlways
					c.Tools[tools.ToolWorkspaceWrite] = tl
				}
			})
			task := machineSpiritGraphTask(t, h, "note", "a greeting")
			if gated {
				approveAsked(t, h, task.ID, "note.txt")
			}
			task = waitEnd(t, h, alice, task.ID)
			wantStatus(t, task, store.StatusCompleted, "")
			if string(task.Result) != `{"answer":"NOTE-SAYS-HELLO"}` {
				t.Fatalf("result %s", task.Result)
			}
			if got, err := os.ReadFile(filepath.Join(h.Runner.workspace(task.ID), "note.txt")); err != nil || string(got) != "hello" {
				t.Fatalf("note.txt = %q, %v", got, err)
			}
			if b := task.Budgets; b.ToolCalls.Used != 2 || b.ModelCalls.Used != 3 {
				t.Fatalf("budgets %+v: want 2 tool calls and 3 model calls", b)
			}
		})
	}
}

// approveAsked waits for the task's pending approval, checks that its
// prompt mentions want, and approves it.
func approveAsked(t *testing.T, h *Host, taskID, want string) {
	t.Helper()
	a := waitApproval(t, h, alice, taskID)
	if !strings.Contains(a.Prompt, want) {
		t.Fatalf("approval prompt %q: want %q in it", a.Prompt, want)
	}
	if _, err := h.Runner.Approve(context.Background(), alice, a.ID); err != nil {
		t.Fatal(err)
	}
}
