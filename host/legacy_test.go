package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// writeScript writes a scripted-model script and returns its path.
func writeScript(t *testing.T, rules ...map[string]any) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"version": 1, "rules": rules})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(testwait.ShortTempDir(t), "script.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func legacyTask(t *testing.T, h *Host, goal string) store.Task {
	t.Helper()
	task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "legacy", Spec: spec(t, goal, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// A step that fails fails its task (executor_failed); the next task runs.
// (A model outage, 5xx, interrupts instead: TestModelOutageIsTypedAndInterrupts.)
func TestLegacyFailingStepThenNextTaskRuns(t *testing.T) {
	script := writeScript(t,
		map[string]any{"when": map[string]any{"system_contains": "break me"}, "reply": map[string]any{"error": map[string]any{"kind": "request", "status": 400, "message": "scripted refusal"}}},
		map[string]any{"when": map[string]any{}, "reply": map[string]any{"content": "TASK_COMPLETE: fine"}},
	)
	h := openHost(t, "", func(c *config.Config) { c.Model.Script = script })
	bad := legacyTask(t, h, "break me")
	wantStatus(t, waitEnd(t, h, alice, bad.ID), store.StatusFailed, store.ReasonExecutorFailed)
	good := legacyTask(t, h, "a normal goal")
	got := waitEnd(t, h, alice, good.ID)
	wantStatus(t, got, store.StatusCompleted, "")
	if !strings.Contains(string(got.Result), "fine") {
		t.Fatalf("result %s", got.Result)
	}
}

// Stop during a legacy step: interrupted (host_shutdown) with no completed
// step rows; a new host resumes the same id to completion.
func TestLegacyStopThenResumeOnNewHost(t *testing.T) {
	script := writeScript(t,
		map[string]any{"when": map[string]any{"last_role": "user"}, "reply": map[string]any{"tool_calls": []any{map[string]any{"name": "time.sleep", "arguments": map[string]any{"seconds": 2}}}}},
		map[string]any{"when": map[string]any{"tool": "time.sleep"}, "reply": map[string]any{"content": "TASK_COMPLETE: slept"}},
	)
	dir := testwait.ShortTempDir(t)
	mut := func(c *config.Config) { c.Model.Script = script }
	cfg := testConfig(t)
	mut(&cfg)
	h, err := Open(context.Background(), Options{DataDir: dir, Config: cfg, ExecutorDir: executorDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	task := legacyTask(t, h, "sleep a little")
	testwait.Until(t, 10*time.Second, "the sleep tool to start", func() bool {
		effs, _ := h.Store.ListEffects(context.Background(), alice, task.ID)
		return len(effs) == 2 && effs[1].Status == store.EffectDispatching
	})
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h2 := openHost(t, dir, mut)
	got, _ := h2.Runner.Get(context.Background(), alice, task.ID)
	wantStatus(t, got, store.StatusInterrupted, store.ReasonHostShutdown)
	atts, _ := h2.Runner.Attempts(context.Background(), alice, task.ID)
	for _, a := range atts {
		if a.Status == store.AttemptCompleted {
			t.Fatalf("attempt %d completed during the stop", a.Number)
		}
	}
	if _, err := h2.Runner.Resume(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	// The sleep was cut off mid-flight: indeterminate. The resumed step
	// asks before running anything again.
	approveAsked(t, h2, task.ID, "retry after an interrupted")
	got = waitEnd(t, h2, alice, task.ID)
	wantStatus(t, got, store.StatusCompleted, "")
	if got.RunID != 2 {
		t.Fatalf("run id %d, want 2", got.RunID)
	}
}

// Cancel while a legacy step waits for its tool's approval.
func TestLegacyCancelWhileWaitingForApproval(t *testing.T) {
	h := openHost(t, "", nil) // the embedded script: step 2 runs shell.run
	task := legacyTask(t, h, "write a report")
	a := waitApproval(t, h, alice, task.ID)
	if a.Tool != "shell.run" {
		t.Fatalf("approval for %q", a.Tool)
	}
	if _, err := h.Runner.Cancel(context.Background(), alice, task.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCancelled, store.ReasonUserCancelled)
	if _, err := h.Runner.Approve(context.Background(), alice, a.ID); err == nil {
		t.Fatal("the approval of a cancelled task was approved")
	}
}

// The openai provider's API key goes to the model endpoint and nowhere else:
// not to the plugin, not into an event, not into a log line.
func TestAPIKeyCanary(t *testing.T) {
	const key = "sk-canary-9c41d7e2"
	t.Setenv("TASKHOST_TEST_KEY", key)
	var authorized int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
			return
		}
		authorized++
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"TASK_COMPLETE: done with the key `+key+`"}}]}`)
	}))
	defer srv.Close()
	var logs syncBuffer
	cfg := testConfig(t)
	cfg.Model = config.Model{Provider: config.ProviderOpenAI, BaseURL: srv.URL + "/v1", Name: "test", APIKeyEnv: "TASKHOST_TEST_KEY", TimeoutSeconds: 10}
	dir := testwait.ShortTempDir(t)
	h, err := Open(context.Background(), Options{DataDir: dir, Config: cfg, ExecutorDir: executorDir(t),
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	task := legacyTask(t, h, "use the model")
	wantStatus(t, waitEnd(t, h, alice, task.ID), store.StatusCompleted, "")
	if authorized == 0 {
		t.Fatal("the model endpoint never saw the key: the checks below prove nothing")
	}
	evs, _ := h.Store.Events(context.Background(), alice, task.ID, 0, 1000)
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), key) {
			t.Errorf("event %s carries the key", ev.Type)
		}
	}
	if strings.Contains(logs.String(), key) {
		t.Error("a log line carries the key")
	}
}
