package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

func machineSpiritOn(c *config.Config) { c.MachineSpirit.Enabled = true }

func rlmSpec(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../examples/machinespirit/rlm.json")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func rlmContext(t *testing.T) File {
	t.Helper()
	data, err := os.ReadFile("../examples/machinespirit/ctx.txt")
	if err != nil {
		t.Fatal(err)
	}
	return File{Name: "ctx.txt", Data: data}
}

// The rlm graph with the shipped scripted model completes; its sub-call ran
// at depth 1.
func TestMachineSpiritRLMCompletes(t *testing.T) {
	h := openHost(t, "", machineSpiritOn)
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit", Spec: rlmSpec(t), Files: []File{rlmContext(t)}})
	if err != nil {
		t.Fatal(err)
	}
	task = waitEnd(t, h, alice, task.ID)
	wantStatus(t, task, store.StatusCompleted, "")
	if task.Budgets.Depth.Used != 1 || task.Budgets.ModelCalls.Used < 2 {
		t.Fatalf("budgets %+v: want a root call and a sub-call at depth 1", task.Budgets)
	}
}

// Selected while disabled, or with a pinned version the machine lacks, the
// executor is refused with the reason, and nothing is recorded.
func TestMachineSpiritFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		mut        func(*config.Config)
	}{
		{"disabled", "enabled = true", nil},
		{"wrong version", "9.0.3", func(c *config.Config) { machineSpiritOn(c); c.MachineSpirit.SwiplVersion = "9.0.3" }},
		{"swipl missing", "/nonexistent/swipl", func(c *config.Config) { machineSpiritOn(c); c.MachineSpirit.SwiplPath = "/nonexistent/swipl" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := openHost(t, "", tc.mut)
			_, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit", Spec: rlmSpec(t)})
			if !errors.Is(err, plugin.ErrExecutorUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want unavailable mentioning %q", err, tc.want)
			}
			if tasks, _ := h.Runner.List(context.Background(), alice, store.ListQuery{}); len(tasks) != 0 {
				t.Fatalf("a refused create left %d rows", len(tasks))
			}
		})
	}
}

// blockingModel is an OpenAI-compatible endpoint that serves the rlm graph
// and holds its first request until released, so a test can act while a
// step is certainly in flight.
type blockingModel struct {
	mu       sync.Mutex
	requests int
	held     chan struct{} // closed when the first request arrives
	release  chan struct{}
}

func (m *blockingModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.requests++
	first := m.requests == 1
	m.mu.Unlock()
	if first {
		close(m.held)
		select {
		case <-m.release:
		case <-r.Context().Done():
			return
		}
	}
	reply := "final(\"the retry budget came in 2.3 with a default of 5\")"
	if strings.Contains(string(body), "[rlm sub]") {
		reply = "a summary"
	}
	out, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": reply}}}})
	w.Write(out)
}

// SIGKILL of the machinespirit plugin mid-run: the task is interrupted
// (executor_crashed), and resume completes the same id with what is left of
// its budgets.
func TestMachineSpiritPluginKilledThenResume(t *testing.T) {
	m := &blockingModel{held: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(m)
	defer srv.Close()
	defer close(m.release)
	h := openHost(t, "", func(c *config.Config) {
		machineSpiritOn(c)
		c.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 60}
	})
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit", Spec: rlmSpec(t), Files: []File{rlmContext(t)}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was never called")
	}
	plugin := pluginPid(t, "taskhost-executor-machinespirit")
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusInterrupted, store.ReasonExecutorCrashed)
	before := got.Budgets
	resumed, err := h.Runner.Resume(context.Background(), alice, task.ID)
	if err != nil || resumed.RunID != 2 {
		t.Fatalf("resume: run %d, %v", resumed.RunID, err)
	}
	got = waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, "")
	if got.Budgets.Steps.Used <= before.Steps.Used || got.Budgets.ModelCalls.Used < before.ModelCalls.Used || got.Budgets.Steps.Limit != before.Steps.Limit {
		t.Fatalf("budgets before %+v after %+v: a resume continues, never resets", before, got.Budgets)
	}
}

// pluginPid finds the one running plugin process of this test binary's
// executors named bin.
func pluginPid(t *testing.T, bin string) int {
	t.Helper()
	var found []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(string(cmdline), filepath.Join(executorDir(t), bin)) && alive(pid) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s processes running, want 1: %v", len(found), bin, found)
	}
	return found[0]
}

// Host stop during a graph run: the task is interrupted (host_shutdown);
// a new host resumes it from the next node, and the committed node's
// effects are not repeated.
func TestMachineSpiritHostStopThenResume(t *testing.T) {
	m := &blockingModel{held: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(m)
	defer srv.Close()
	mut := func(c *config.Config) {
		machineSpiritOn(c)
		c.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 60}
	}
	dir := testwait.ShortTempDir(t)
	cfg := testConfig(t)
	mut(&cfg)
	h, err := Open(context.Background(), Options{DataDir: dir, Config: cfg, ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit", Spec: rlmSpec(t), Files: []File{rlmContext(t)}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.held: // a later node is in its model call: the first has committed
	case <-time.After(30 * time.Second):
		t.Fatal("the model was never called")
	}
	before, err := h.Store.ListEffects(context.Background(), alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	committedTools := 0
	for _, e := range before {
		if e.Kind == store.EffectTool && e.Status == store.EffectObserved {
			committedTools++
		}
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(m.release)
	h2 := openHost(t, dir, mut)
	got, _ := h2.Runner.Get(context.Background(), alice, task.ID)
	wantStatus(t, got, store.StatusInterrupted, store.ReasonHostShutdown)
	if _, err := h2.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	got = waitEnd(t, h2, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, "")
	after, _ := h2.Store.ListEffects(context.Background(), alice, task.ID)
	tools := 0
	for _, e := range after {
		if e.Kind == store.EffectTool && e.Status == store.EffectObserved && !e.Replayed {
			tools++
		}
	}
	if committedTools == 0 || tools != committedTools {
		t.Fatalf("tool effects run: %d before the stop, %d in all; the committed node's effects must not run again", committedTools, tools)
	}
}
