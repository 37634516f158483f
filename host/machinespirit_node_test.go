package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// noteModel is an OpenAI-compatible endpoint for the note graph: its
// first call writes note.txt, its second reads it back, its third answers.
// It holds the first third call until the plugin is killed.
type noteModel struct {
	mu      sync.Mutex
	calls   [3]int // answered calls by place
	holding bool   // the first third call came
	held    chan struct{}
}

func (m *noteModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	place := 0
	for _, msg := range req.Messages {
		if msg.Role == "tool" {
			place++
		}
	}
	place = min(place, 2)
	call := func(id, name, args string) map[string]any {
		return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}
	}
	msg := []map[string]any{
		call("w", "workspace.write", `{"path":"note.txt","content":"hello"}`),
		call("r", "workspace.read", `{"path":"note.txt"}`),
		{"role": "assistant", "content": "NOTE-READ"},
	}[place]
	m.mu.Lock()
	hold := place == 2 && !m.holding
	m.holding = m.holding || hold
	m.mu.Unlock()
	if hold {
		m.held <- struct{}{} // buffered: the test hears of it when it listens
		<-r.Context().Done() // the plugin is killed; the host gives up the call
		return
	}
	out, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": msg}}})
	if _, err := w.Write(out); err == nil {
		m.mu.Lock()
		m.calls[place]++
		m.mu.Unlock()
	}
}

// The note graph's plugin SIGKILLed during its model's third call, after
// both tool calls ran: the resume runs the node again, the ledger replays
// the first two model calls, and only the third call reaches the model
// again. Both tool calls run again: the resume restored the workspace as
// of the last committed step, without attempt 1's note, so the write is
// made again and the read reads it as it now is (host/workspace.go).
func TestMachineSpiritModelNodeToolsKilledResumesWithoutRepeats(t *testing.T) {
	held := make(chan struct{}, 1)
	m := &noteModel{held: held}
	srv := httptest.NewServer(m)
	defer srv.Close()
	h := openHost(t, "", func(c *config.Config) {
		machineSpiritOn(c)
		c.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 60}
		operatorGraphs(t, c, map[string]string{"note": noteGraph})
	})
	task := machineSpiritGraphTask(t, h, "note", "a greeting")
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the third model call never came")
	}
	testwait.Until(t, 30*time.Second, "both tool calls observed in the ledger", func() bool {
		return len(ledgered(t, h, task.ID, store.EffectTool, false)) == 2
	})
	if err := syscall.Kill(pluginPid(t, "taskhost-executor-machinespirit"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusInterrupted, store.ReasonExecutorCrashed)
	if _, err := h.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, "")
	if string(got.Result) != `{"answer":"NOTE-READ"}` {
		t.Fatalf("result %s", got.Result)
	}
	m.mu.Lock()
	calls := m.calls
	m.mu.Unlock()
	if calls != [3]int{1, 1, 1} {
		t.Fatalf("model calls answered by place %v: want each once", calls)
	}
	ran, replayed := ledgered(t, h, task.ID, store.EffectTool, false), ledgered(t, h, task.ID, store.EffectTool, true)
	if len(ran) != 4 || len(replayed) != 0 || ran[0].Attempt != 1 || ran[1].Attempt != 1 || ran[2].Attempt != 2 || ran[3].Attempt != 2 {
		t.Fatalf("tool effects run %+v, replayed %+v: want both run in attempt 1 and again in attempt 2, none replayed", ran, replayed)
	}
}

// ledgered lists the task's observed effects of a kind, replayed or not.
func ledgered(t *testing.T, h *Host, taskID string, kind store.EffectKind, replayed bool) []store.Effect {
	t.Helper()
	effs, err := h.Store.ListEffects(context.Background(), alice, taskID)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(effs, func(e store.Effect) bool {
		return e.Kind != kind || e.Status != store.EffectObserved || e.Replayed != replayed
	})
}
