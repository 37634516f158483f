package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// zaraRow is a row of plugins/legacy/testdata/zara_compat.json (the
// legacy package's table test reads the same file in-process).
type zaraRow struct {
	Name        string          `json:"name"`
	Note        string          `json:"note"`
	Goal        string          `json:"goal"`
	MaxSteps    int64           `json:"max_steps"`
	Legacy      json.RawMessage `json:"legacy"`
	Replies     []string        `json:"replies"`
	CrashInStep int             `json:"crash_in_step"`
	Want        struct {
		Status      string   `json:"status"`
		Reason      string   `json:"reason"`
		StepsUsed   int64    `json:"steps_used"`
		Summaries   []string `json:"summaries"`
		PromptSteps []int    `json:"prompt_steps"`
		Requests    []struct {
			Request int    `json:"request"`
			Context string `json:"context"`
			Prompt  string `json:"prompt"`
		} `json:"requests"`
	} `json:"want"`
}

var zaraPromptStep = regexp.MustCompile(`^\[long-horizon task (\S+) step (\d+)/\d+\] `)

// zaraModel is an OpenAI-compatible endpoint that answers a row's script
// by the step number in the prompt and records every request's system and
// user text. In the row's crash step it holds the first request until the
// test has killed the plugin.
type zaraModel struct {
	t   *testing.T
	row zaraRow

	mu       sync.Mutex
	contexts []string
	prompts  []string
	crashed  bool
	inCrash  chan struct{} // closed when the crash step's request arrives
	release  chan struct{} // closed by the test after the kill
}

func (m *zaraModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 ||
		req.Messages[0].Role != "system" || req.Messages[1].Role != "user" ||
		req.Messages[0].Content == nil || req.Messages[1].Content == nil {
		http.Error(w, `{"error":{"message":"want one system and one user message"}}`, http.StatusBadRequest)
		return
	}
	sys, user := *req.Messages[0].Content, *req.Messages[1].Content
	n := 0
	if mm := zaraPromptStep.FindStringSubmatch(user); mm != nil {
		n, _ = strconv.Atoi(mm[2])
	}
	m.mu.Lock()
	m.contexts = append(m.contexts, sys)
	m.prompts = append(m.prompts, user)
	crash := n == m.row.CrashInStep && !m.crashed
	if crash {
		m.crashed = true
	}
	m.mu.Unlock()
	if crash {
		close(m.inCrash)
		select {
		case <-m.release:
		case <-r.Context().Done():
		}
		http.Error(w, `{"error":{"message":"the step was killed"}}`, http.StatusServiceUnavailable)
		return
	}
	if n < 1 || n > len(m.row.Replies) {
		http.Error(w, fmt.Sprintf(`{"error":{"message":"no reply scripted for step %d"}}`, n), http.StatusBadRequest)
		return
	}
	out, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{
		"message": map[string]any{"role": "assistant", "content": m.row.Replies[n-1]}}}})
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// TestZaraCompatTableThroughTheBinaries runs every row of the legacy
// executor's Zara table through taskhost run, the real legacy plugin and
// the openai provider against a scripted endpoint: the same rows prove the
// plugin as it ships. The crash row SIGKILLs the plugin mid-step-2 and
// resumes the task with a second taskhost run.
func TestZaraCompatTableThroughTheBinaries(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../plugins/legacy/testdata/zara_compat.json")
	if err != nil {
		t.Fatal(err)
	}
	var tab struct {
		Description string    `json:"description"`
		Rows        []zaraRow `json:"rows"`
	}
	if err := json.Unmarshal(data, &tab); err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) < 15 {
		t.Fatalf("%d rows, want at least 15", len(tab.Rows))
	}
	for _, row := range tab.Rows {
		t.Run(row.Name, func(t *testing.T) {
			runZaraRowBinaries(t, row)
		})
	}
}

func runZaraRowBinaries(t *testing.T, row zaraRow) {
	model := &zaraModel{t: t, row: row, inCrash: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-model.release:
		default:
			close(model.release)
		}
	})

	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	cfg := filepath.Join(work, "c.toml")
	zaraWriteFile(t, cfg, fmt.Sprintf("[model]\nprovider = \"openai\"\nbase_url = %q\nmodel = \"zara\"\nmax_retries = 0\ntimeout_seconds = 30\n", srv.URL+"/v1"))
	spec := map[string]any{"goal": row.Goal}
	if len(row.Legacy) > 0 {
		spec["legacy"] = row.Legacy
	}
	specJSON, _ := json.Marshal(spec)
	specFile := filepath.Join(work, "spec.json")
	zaraWriteFile(t, specFile, string(specJSON))
	args := []string{"run", "--data-dir", data, "--config", cfg, "--executor", "legacy", "--spec-file", specFile,
		"--max-steps", strconv.FormatInt(row.MaxSteps, 10), "--json", "--approve-all"}

	var end zaraTaskEnd
	if row.CrashInStep == 0 {
		out, errOut, _ := taskhost(t, args...)
		end = zaraEnd(t, out, errOut)
	} else {
		h := startTaskhost(t, args...)
		select {
		case <-model.inCrash:
		case <-time.After(30 * time.Second):
			t.Fatalf("step %d never reached the model; stderr:\n%s", row.CrashInStep, h.stderr)
		}
		plugin := legacyPluginOf(t, h.cmd.Process.Pid)
		if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		line := h.line(t, func(l string) bool { return strings.Contains(l, `"kind":"result"`) })
		h.cmd.Wait()
		close(model.release)
		if first := zaraEnd(t, line, h.stderr.String()); first.Status != "interrupted" || first.Reason != "executor_crashed" {
			t.Fatalf("after the kill: %s (%s), want interrupted (executor_crashed)", first.Status, first.Reason)
		} else {
			out, errOut, _ := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--resume", first.ID, "--json", "--approve-all")
			end = zaraEnd(t, out, errOut)
		}
	}

	w := row.Want
	if end.Status != w.Status || end.Reason != w.Reason || end.Budgets.Steps.Used != w.StepsUsed {
		t.Errorf("ended %s (%s) after %d steps, want %s (%s) after %d; message %q",
			end.Status, end.Reason, end.Budgets.Steps.Used, w.Status, w.Reason, w.StepsUsed, end.Message)
	}
	if got := zaraSummaries(t, data, end.ID); !reflect.DeepEqual(got, w.Summaries) && len(got)+len(w.Summaries) != 0 {
		t.Errorf("summaries\n got %q\nwant %q", got, w.Summaries)
	}
	model.mu.Lock()
	contexts, prompts := model.contexts, model.prompts
	model.mu.Unlock()
	var steps []int
	for _, p := range prompts {
		mm := zaraPromptStep.FindStringSubmatch(p)
		if mm == nil || mm[1] != end.ID {
			t.Fatalf("prompt %q does not name task %s", p, end.ID)
		}
		n, _ := strconv.Atoi(mm[2])
		steps = append(steps, n)
	}
	if !reflect.DeepEqual(steps, w.PromptSteps) {
		t.Errorf("prompts asked for steps %v, want %v", steps, w.PromptSteps)
	}
	for _, r := range w.Requests {
		if r.Request < 1 || r.Request > len(prompts) {
			t.Errorf("request %d was never sent (%d were)", r.Request, len(prompts))
			continue
		}
		if want := strings.ReplaceAll(r.Context, "{task}", end.ID); contexts[r.Request-1] != want {
			t.Errorf("request %d: context\n got %q\nwant %q", r.Request, contexts[r.Request-1], want)
		}
		if want := strings.ReplaceAll(r.Prompt, "{task}", end.ID); prompts[r.Request-1] != want {
			t.Errorf("request %d: prompt\n got %q\nwant %q", r.Request, prompts[r.Request-1], want)
		}
	}
}

type zaraTaskEnd struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Budgets struct {
		Steps struct {
			Used int64 `json:"used"`
		} `json:"steps"`
	} `json:"budgets"`
}

// zaraEnd reads the task of the "result" line of taskhost run --json.
func zaraEnd(t *testing.T, out, errOut string) zaraTaskEnd {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Kind string      `json:"kind"`
			Task zaraTaskEnd `json:"task"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Kind == "result" {
			return l.Task
		}
	}
	t.Fatalf("no result line from taskhost run:\n%s\nstderr:\n%s", out, errOut)
	return zaraTaskEnd{}
}

// zaraSummaries are the summaries of the task's completed attempts, in
// order, as the store holds them.
func zaraSummaries(t *testing.T, data, id string) []string {
	t.Helper()
	out, errOut, code := taskhost(t, "inspect", "--data-dir", data, "--json", id)
	if code != 0 {
		t.Fatalf("inspect: exit %d\n%s", code, errOut)
	}
	var v struct {
		Attempts []struct {
			Status  string `json:"status"`
			Outcome string `json:"outcome"`
			Summary string `json:"summary"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("inspect output: %v\n%s", err, out)
	}
	var got []string
	for _, a := range v.Attempts {
		if a.Status == "completed" && (a.Outcome == "continue" || a.Outcome == "complete") {
			got = append(got, a.Summary)
		}
	}
	return got
}

// legacyPluginOf finds the legacy plugin process of the host with pid
// hostPid, polling until it is there.
func legacyPluginOf(t *testing.T, hostPid int) int {
	t.Helper()
	var found int
	testwait.Until(t, 10*time.Second, "the legacy plugin under the host", func() bool {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmdline), "taskhost-executor-legacy") && ppidOK(pid) == hostPid {
				found = pid
				return true
			}
		}
		return false
	})
	return found
}

func zaraWriteFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
