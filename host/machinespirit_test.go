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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/internal/cgroups"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// machineSpiritOn enables machinespirit with none of its processes
// started ahead (the tests that kill "the" plugin process find the task's
// alone); TestPooledMachineSpirit runs it pooled.
func machineSpiritOn(c *config.Config) {
	c.MachineSpirit.Enabled = true
	none := 0
	c.MachineSpirit.Prestart = &none
}

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
	reply := `{"plan":"machinespirit.plan/1","steps":[{"op":"final","answer":"the retry budget came in 2.3 with a default of 5"}]}`
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
	var dirs []string
	if set := cgroups.Find(true); set.V1 != nil || set.V2 != nil {
		// Its Prolog worker runs in the plugin's own cgroups, bound by
		// the same limits.
		dirs = pluginCgroupDirs(t, set, plugin)
		if worker := childNamed(t, plugin, "swipl"); !slices.Equal(pluginCgroupDirs(t, set, worker), dirs) {
			t.Errorf("the swipl worker %d is not in the plugin's cgroups %v", worker, dirs)
		}
	}
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusInterrupted, store.ReasonExecutorCrashed)
	waitCgroupsGone(t, dirs)
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

// childNamed finds the live child of parent whose command line names
// name.
func childNamed(t *testing.T, parent int, name string) int {
	t.Helper()
	var found int
	testwait.Until(t, 10*time.Second, fmt.Sprintf("a %s child of %d", name, parent), func() bool {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			i := strings.LastIndexByte(string(stat), ')')
			if i < 0 || !strings.Contains(string(cmdline), name) || !alive(pid) {
				continue
			}
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(parent) {
				found = pid
				return true
			}
		}
		return false
	})
	return found
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

// mapModel serves an rlm plan that maps a sub-call over 20 chunks, counts
// the requests it answered per chunk, and holds the first request for
// chunk hold until the test lets go (or the caller gives up).
type mapModel struct {
	mu       sync.Mutex
	root     int
	answered map[int]int
	hold     int
	held     chan struct{}
	plan     string // the root call's reply
}

const mapPlan = `{"plan":"machinespirit.plan/1","steps":[` +
	`{"op":"partition","chunk_bytes":256,"as":"chunks"},` +
	`{"op":"map","over":"chunks","prompt":"chunk {{index}}: {{item}}","as":"answers"},` +
	`{"op":"reduce","over":"answers","how":"join","separator":",","as":"all"},` +
	`{"op":"final","answer":"{{all}}"}]}`

func (m *mapModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	prompt := ""
	for _, msg := range req.Messages {
		prompt += msg.Content + "\n"
	}
	reply, chunk := m.plan, -1
	if i := strings.Index(prompt, "[rlm sub] chunk "); i >= 0 {
		fmt.Sscanf(prompt[i:], "[rlm sub] chunk %d:", &chunk)
		reply = fmt.Sprintf("a%d", chunk)
	}
	m.mu.Lock()
	first := chunk == m.hold && m.answered[chunk] == 0 && m.held != nil
	held := m.held
	if first {
		m.held = nil
	}
	m.mu.Unlock()
	if first {
		close(held)
		<-r.Context().Done() // the plugin is killed; the host gives up the call
		return
	}
	out, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": reply}}}})
	if _, err := w.Write(out); err != nil {
		return
	}
	m.mu.Lock()
	if chunk < 0 {
		m.root++
	} else {
		m.answered[chunk]++
	}
	m.mu.Unlock()
}

// A plan that maps a sub-call over 20 chunks, its plugin SIGKILLed while
// chunk 10's call is in flight: the resume runs the step again from the
// checkpoint, the ledger replays the root call and the ten sub-calls that
// were answered, and only chunk 10 onwards reach the model.
func TestMachineSpiritPlanMapKilledResumesWithoutRepeats(t *testing.T) {
	killMapMidway(t, mapPlan, 10)
}

// The same map with parallel 4: the plugin starts each batch's four calls
// together and the host numbers them in the order they reach it, which
// differs between the killed attempt and the re-run. The ledger replays
// each answered sub-call by its fingerprint when its place differs, so no
// chunk reaches the model twice (it used to match by place only, and a
// completed call of a batch whose order changed was asked again).
func TestMachineSpiritParallelPlanMapKilledResumesWithoutRepeats(t *testing.T) {
	plan := strings.Replace(mapPlan, `"as":"answers"`, `"parallel":4,"as":"answers"`, 1)
	// Chunk 10 is held in the batch 8..11; the other three are answered.
	killMapMidway(t, plan, 11)
}

// killMapMidway runs plan over 20 chunks with chunk 10's call held, waits
// until answered chunks (and the root call) are observed in the ledger,
// SIGKILLs the plugin, resumes, and checks that the model answered the
// root call once and every chunk exactly once.
func killMapMidway(t *testing.T, plan string, answered int) {
	t.Helper()
	held := make(chan struct{}) // m.held is the server's to clear
	m := &mapModel{answered: map[int]int{}, hold: 10, held: held, plan: plan}
	srv := httptest.NewServer(m)
	defer srv.Close()
	h := openHost(t, "", func(c *config.Config) {
		machineSpiritOn(c)
		c.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", TimeoutSeconds: 60}
	})
	ctxData := []byte(strings.Repeat("x", 20*256))
	spec := []byte(`{"goal": "join the chunk answers", "machinespirit": {"graph": "rlm", "context_file": "ctx.txt"}}`)
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "machinespirit", Spec: spec, Files: []File{{Name: "ctx.txt", Data: ctxData}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("chunk 10 was never asked")
	}
	// The kill comes once every other call asked has its answer in the
	// ledger: a call cut off with its answer sent would rightly run again.
	testwait.Until(t, 60*time.Second, "the answered calls observed in the ledger", func() bool {
		effs, err := h.Store.ListEffects(context.Background(), alice, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		observed := 0
		for _, e := range effs {
			if e.Kind == store.EffectModel && e.Status == store.EffectObserved {
				observed++
			}
		}
		return observed == answered+1
	})
	if err := syscall.Kill(pluginPid(t, "taskhost-executor-machinespirit"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusInterrupted, store.ReasonExecutorCrashed)
	m.mu.Lock()
	before := len(m.answered)
	m.mu.Unlock()
	if before != answered {
		t.Fatalf("%d chunks answered before the kill, want %d", before, answered)
	}
	if _, err := h.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	got = waitEnd(t, h, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, "")
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("a%d", i))
	}
	if res := string(got.Result); res != `{"answer":"`+strings.Join(want, ",")+`"}` {
		t.Fatalf("result %s", res)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.root != 1 {
		t.Fatalf("the root model was asked %d times", m.root)
	}
	for i := range 20 {
		if m.answered[i] != 1 {
			t.Fatalf("chunk %d answered %d times: %v", i, m.answered[i], m.answered)
		}
	}
}
