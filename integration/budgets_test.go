package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// A token budget exhausted across a resume: the legacy executor, the
// scripted model reporting 10,000 tokens a call, max_model_tokens 35,000.
// Step 1 costs 10,000; step 2's first call 10,000 more, then its shell.run is
// SIGKILLed with the plugin. The resumed step replays its first call (not
// charged again), runs the command again (approved; past the moment it blocks), and its next call
// reports 26,000 tokens: 46,000/35,000, failed, token_budget_exhausted.
// Had the resume reset the budget, that call would have left 9,000 and
// step 3 (15 tokens) would have completed the task. (The figures are large
// enough that the host's estimate of each prompt — messages and the tools'
// specs, 4 bytes a token — fits what is left, so no call is refused before
// it runs.)
func TestLegacyTokenBudgetAcrossResume(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	usage := func(p, c int) map[string]any { return map[string]any{"prompt_tokens": p, "completion_tokens": c} }
	script := map[string]any{"version": 1, "rules": []any{
		map[string]any{"when": map[string]any{"last_role": "user", "contains": " step 1/"},
			"reply": map[string]any{"content": "read the goal", "usage": usage(9000, 1000)}},
		map[string]any{"when": map[string]any{"last_role": "user", "contains": " step 2/"},
			"reply": map[string]any{"usage": usage(9000, 1000), "tool_calls": []any{map[string]any{"name": "shell.run", "arguments": map[string]any{
				// Blocks until the plugin is killed, and returns once
				// the resumed step runs it again: the test writes "go"
				// only after the kill, and keeps writing it while the
				// resume runs, since the resume starts from the last
				// committed workspace, which has none.
				"command": "[ -e go ] && exit 0; echo $$ > tool.pid; while [ ! -e go ]; do sleep 0.05; done"}}}}},
		map[string]any{"when": map[string]any{"last_role": "tool"}, "reply": map[string]any{"content": "ran it", "usage": usage(9000, 17000)}},
		map[string]any{"when": map[string]any{}, "reply": map[string]any{"content": "TASK_COMPLETE: done", "usage": usage(10, 5)}},
	}}
	raw, _ := json.Marshal(script)
	scriptFile := filepath.Join(work, "script.json")
	os.WriteFile(scriptFile, raw, 0o600)
	cfg := filepath.Join(work, "c.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[model]\nscript = %q\n[tools.\"shell.run\"]\napproval = \"never\"\ntimeout_seconds = 600\n", scriptFile)), 0o600)

	h := startTaskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "legacy", "--goal", "count my tokens", "--max-model-tokens", "35000")
	id := strings.Fields(h.line(t, func(l string) bool { return strings.HasPrefix(l, "task ") }))[1]
	tool := readPid(t, filepath.Join(data, "workspaces", id, "tool.pid"))
	if err := syscall.Kill(pluginOf(t, tool), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.line(t, func(l string) bool { return strings.Contains(l, "interrupted (executor_crashed)") })
	h.cmd.Wait()
	testwait.Until(t, 10*time.Second, "the tool's process to die with its step", func() bool { return !alive(tool) })
	before := inspect(t, data, id)
	if b := before.Task.Budgets["model_tokens"]; b.Used != 20000 || b.Limit != 35000 {
		t.Fatalf("after the crash: model_tokens %+v, want 20000/35000 (both answered calls charged)", b)
	}

	ws := filepath.Join(data, "workspaces", id)
	stop := keepReleased(func() { _ = testwait.WriteLive(filepath.Join(ws, "go"), nil, 0o644) })
	out, errOut, code := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--resume", id, "--approve-all")
	stop()
	if code != 1 || !strings.Contains(out, "failed (token_budget_exhausted)") {
		t.Fatalf("resume: exit %d, want 1 and token_budget_exhausted\n%s\n%s", code, out, errOut)
	}
	after := inspect(t, data, id)
	if b := after.Task.Budgets["model_tokens"]; after.Task.Status != "failed" || after.Task.Reason != "token_budget_exhausted" || b.Used != 46000 || b.Limit != 35000 {
		t.Fatalf("after the resume: %s (%s), model_tokens %+v; want failed token_budget_exhausted at 46000/35000", after.Task.Status, after.Task.Reason, b)
	}
	if !strings.Contains(out, "tokens=46000/35000") {
		t.Errorf("the run's events do not show the token budget:\n%s", out)
	}
}
