package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

// The host SIGKILLed in the middle of a step: its plugin dies with it (no
// orphan), the restarted host marks the task interrupted (host_restart), and
// an explicit resume completes the same task with the remaining budgets.
func TestHostKilledMidStep(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	pidFile := filepath.Join(work, "pid")
	specFile := writeSpec(t, work, map[string]any{"goal": "survive a host crash", "testexec": map[string]any{
		"steps": 2, "pid_file": pidFile, "sleep_at_attempt": 2, "long_sleep_ms": 60000,
	}})
	cfg := testexecConfig(t, work)
	h := startTaskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "testexec", "--spec-file", specFile, "--max-steps", "5", "--json")
	var first struct {
		Task struct{ ID string } `json:"task"`
	}
	if err := json.Unmarshal([]byte(h.line(t, func(l string) bool { return strings.Contains(l, `"kind":"task"`) })), &first); err != nil {
		t.Fatal(err)
	}
	id := first.Task.ID
	// Wait until attempt 2 is running, then kill the host.
	h.line(t, func(l string) bool {
		return strings.Contains(l, `"step.started"`) && strings.Contains(l, `"attempt":2`)
	})
	plugin := readPid(t, pidFile)
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.cmd.Wait()
	testwait.Until(t, 5*time.Second, "the plugin to die with its host", func() bool { return !alive(plugin) })

	before := inspect(t, data, id)
	if before.Task.Status != "running" {
		t.Fatalf("after the host's SIGKILL the store says %s, want running (no host has recovered it yet)", before.Task.Status)
	}
	// A restarted host recovers it as interrupted; resume completes it.
	out, errOut, code := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--resume", id)
	if code != 0 {
		t.Fatalf("resume exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "recovered: task "+id) {
		t.Errorf("the restarted host did not report the recovery:\n%s", errOut)
	}
	after := inspect(t, data, id)
	if after.Task.ID != id || after.Task.Status != "completed" || after.Task.RunID != 2 {
		t.Fatalf("after resume: %+v", after.Task)
	}
	if len(after.Attempts) != 3 || after.Attempts[1].Status != "interrupted" || after.Attempts[1].Reason != "host_restart" {
		t.Fatalf("attempts = %+v, want attempt 2 interrupted (host_restart)", after.Attempts)
	}
	steps := after.Task.Budgets["steps"]
	if steps.Used != 3 || steps.Limit != 5 {
		t.Errorf("steps = %d/%d, want 3/5: the killed attempt costs a step and the limit stays", steps.Used, steps.Limit)
	}
	wall := after.Task.Budgets["wall_ms"]
	if wall.Used < before.Task.Budgets["wall_ms"].Used {
		t.Errorf("wall time went backwards: %d → %d", before.Task.Budgets["wall_ms"].Used, wall.Used)
	}
}

// The plugin SIGKILLed mid-step under 'taskhost run': the command reports
// the task interrupted (exit 6), and 'run --resume' completes the same id.
func TestRunShowsPluginKillThenResume(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	pidFile := filepath.Join(work, "pid")
	specFile := writeSpec(t, work, map[string]any{"goal": "demo", "testexec": map[string]any{
		"steps": 3, "pid_file": pidFile, "sleep_at_attempt": 2, "long_sleep_ms": 60000,
	}})
	cfg := testexecConfig(t, work)
	h := startTaskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "testexec", "--spec-file", specFile)
	first := h.line(t, func(l string) bool { return strings.HasPrefix(l, "task ") })
	id := strings.Fields(first)[1]
	h.line(t, func(l string) bool { return strings.Contains(l, "step.started") && strings.Contains(l, "attempt=2") })
	plugin := readPid(t, pidFile)
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.line(t, func(l string) bool {
		return strings.Contains(l, "executor.crashed") && strings.Contains(l, "signal: killed")
	})
	h.line(t, func(l string) bool { return strings.Contains(l, "interrupted (executor_crashed)") })
	h.cmd.Wait()
	if code := h.cmd.ProcessState.ExitCode(); code != 6 {
		t.Fatalf("run exit code %d, want 6 (interrupted)", code)
	}
	out, errOut, code := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--resume", id)
	if code != 0 || !strings.Contains(out, "task "+id+" completed") {
		t.Fatalf("resume exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	cases := [][]string{
		{"run"},
		{"run", "--goal", "x", "--resume", "t_x"},
		{"run", "--bogus"},
		{"nosuchcommand"},
		{"inspect", "a", "b"},
	}
	for _, args := range cases {
		_, errOut, code := taskhost(t, args...)
		if code != 2 || errOut == "" {
			t.Errorf("taskhost %v: exit %d, stderr %q; want exit 2 with a message", args, code, errOut)
		}
	}
	_, errOut, code := taskhost(t, "inspect", "--data-dir", testwait.ShortTempDir(t), "t_missing")
	if code == 0 {
		t.Errorf("inspect of a missing store succeeded: %s", errOut)
	}
}
