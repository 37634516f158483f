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

// The legacy executor with the shipped scripted model: a three-step task
// whose second step runs an approval-gated command completes with
// --approve-all, and fails approval_rejected with --reject-all.
func TestLegacyDemoApproveAndReject(t *testing.T) {
	t.Parallel()
	data := testwait.ShortTempDir(t)
	out, errOut, code := taskhost(t, "run", "--data-dir", data, "--executor", "legacy", "--goal", "write a report", "--approve-all")
	if code != 0 || !strings.Contains(out, "completed: steps 3/") || !strings.Contains(out, `{"summary":"report ready"}`) {
		t.Fatalf("approve-all: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "approved automatically (--approve-all)") {
		t.Errorf("no visible notice of the automatic approval:\n%s", errOut)
	}
	cfg := filepath.Join(testwait.ShortTempDir(t), "c.toml")
	script, _ := filepath.Abs("../examples/scripts/legacy-reject.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[model]\nscript = %q\n", script)), 0o600)
	out, errOut, code = taskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "legacy", "--goal", "clean up", "--reject-all")
	if code != 1 || !strings.Contains(out, "failed (approval_rejected)") {
		t.Fatalf("reject-all: exit %d\n%s\n%s", code, out, errOut)
	}
}

// SIGKILL the legacy plugin while its shell.run effect runs: the tool's
// process group dies with the step, the effect is indeterminate, and the
// resumed step asks before doing anything — rejected, it never re-runs it.
func TestLegacyCrashMidEffectNotRerun(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	script := map[string]any{"version": 1, "rules": []any{
		map[string]any{"when": map[string]any{"last_role": "user", "contains": " step 1/"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "shell.run", "arguments": map[string]any{
				// In the workspace: the command is confined to it.
				"command": "echo run >> runs; echo $$ > tool.pid; sleep 300"}}}}},
		map[string]any{"when": map[string]any{}, "reply": map[string]any{"content": "TASK_COMPLETE: done"}},
	}}
	data2, _ := json.Marshal(script)
	scriptFile := filepath.Join(work, "script.json")
	os.WriteFile(scriptFile, data2, 0o600)
	cfg := filepath.Join(work, "c.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[model]\nscript = %q\n[tools.\"shell.run\"]\napproval = \"never\"\ntimeout_seconds = 600\n", scriptFile)), 0o600)

	h := startTaskhost(t, "run", "--data-dir", data, "--config", cfg, "--executor", "legacy", "--goal", "run it once")
	id := strings.Fields(h.line(t, func(l string) bool { return strings.HasPrefix(l, "task ") }))[1]
	runs, toolPid := filepath.Join(data, "workspaces", id, "runs"), filepath.Join(data, "workspaces", id, "tool.pid")
	tool := readPid(t, toolPid)
	plugin := pluginOf(t, tool)
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.line(t, func(l string) bool { return strings.Contains(l, "interrupted (executor_crashed)") })
	h.cmd.Wait()
	testwait.Until(t, 10*time.Second, "the tool's process to die with its step", func() bool { return !alive(tool) })
	if got, _ := os.ReadFile(runs); strings.Count(string(got), "run") != 1 {
		t.Fatalf("before the resume the shell command ran %q, want once", got)
	}

	out, errOut, code := taskhost(t, "run", "--data-dir", data, "--config", cfg, "--resume", id, "--reject-all")
	if code != 1 || !strings.Contains(out, "approval_rejected") {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "retry after an interrupted") {
		t.Errorf("the resumed step did not ask before retrying:\n%s", errOut)
	}
	// The resume restored the workspace as of the last committed step
	// (without the killed run's file): any run since would be counted.
	got, _ := os.ReadFile(runs)
	if n := strings.Count(string(got), "run"); n != 0 {
		t.Fatalf("the shell command ran %d times after the resume, want none", n)
	}
}

// pluginOf finds the legacy plugin of the host that runs the tool: tools run
// under the host, beside the plugin, never under it.
func pluginOf(t *testing.T, toolPid int) int {
	t.Helper()
	hostPid := ppid(t, toolPid) // $$ is the sh -c the host started
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == toolPid {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "taskhost-executor-legacy") && ppidOK(pid) == hostPid {
			return pid
		}
	}
	t.Fatalf("no legacy plugin under host %d", hostPid)
	return 0
}

func ppid(t *testing.T, pid int) int {
	t.Helper()
	p := ppidOK(pid)
	if p <= 0 {
		t.Fatalf("no parent for %d", pid)
	}
	return p
}

func ppidOK(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	var state string
	var pp int
	fmt.Sscan(s[i+2:], &state, &pp)
	return pp
}
