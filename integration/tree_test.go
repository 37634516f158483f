package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/internal/testwait"
)

type treeStatus struct {
	Task struct {
		ID, Status, Reason string
	} `json:"task"`
	Tree []struct {
		ID       string `json:"id"`
		ParentID string `json:"parent_task_id"`
		Status   string `json:"status"`
		Reason   string `json:"reason"`
	} `json:"tree"`
}

func statusOf(t *testing.T, d *daemon, id string) treeStatus {
	t.Helper()
	out, errOut, code := d.cli(t, "task", "status", id, "--json")
	if code != 0 {
		t.Fatalf("task status %s: exit %d\n%s%s", id, code, out, errOut)
	}
	var s treeStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("task status %s: %v\n%s", id, err, out)
	}
	return s
}

// A daemon SIGKILLed while a three-level tree runs (root and middle
// blocked, the leaf's step in flight): the restarted daemon finds every
// node of the tree interrupted (host_restart) and resumes nothing; a
// child cannot be resumed while its parent is down (exit 4, PARENT_DOWN);
// an explicit resume of the root continues the whole tree to completion
// under the same ids. The tree is built by a legacy agent on the scripted
// model delegating through task.delegate.
func TestTreeSurvivesHostKill(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.PluginDir(t)
	pidFile := filepath.Join(work, "leaf.pid")
	leaf := map[string]any{"steps": 1, "pid_file": pidFile, "sleep_at_attempt": 1, "long_sleep_ms": 60000}
	rules := []any{
		map[string]any{"when": map[string]any{"system_contains": "Child tasks you delegated:"}, "reply": map[string]any{"content": "TASK_COMPLETE: children seen"}},
		map[string]any{"when": map[string]any{"system_contains": "Goal: ROOT", "last_role": "user"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "task.delegate", "arguments": map[string]any{"goal": "MID work"}}}}},
		map[string]any{"when": map[string]any{"system_contains": "Goal: MID", "last_role": "user"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "task.delegate", "arguments": map[string]any{
				"goal": "LEAF work", "executor": "testexec", "options": map[string]any{"testexec": leaf}}}}}},
		map[string]any{"when": map[string]any{"tool": "task.delegate"}, "reply": map[string]any{"content": "delegated; waiting"}},
	}
	script, err := json.Marshal(map[string]any{"version": 1, "rules": rules})
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(work, "script.json")
	if err := os.WriteFile(scriptPath, script, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, work, fmt.Sprintf("[tasks]\nmax_concurrent = 4\n\n[model]\nscript = %q\n\n[executors.testexec]\npath = %q\nread_write = [%q]\n",
		scriptPath, filepath.Join(binDir, "taskhost-executor-testexec"), work))
	d := startDaemon(t, data, cfg)
	specFile := writeSpec(t, work, map[string]any{"goal": "ROOT work"})
	var created oneTask
	d.cliJSON(t, &created, "task", "create", "--executor", "legacy", "--spec-file", specFile)
	root := created.Task.ID
	plugin := readPid(t, pidFile)
	testwait.Until(t, 20*time.Second, "the tree to have three levels, the upper two blocked", func() bool {
		s := statusOf(t, d, root)
		return len(s.Tree) == 3 && s.Tree[0].Status == "blocked" && s.Tree[1].Status == "blocked" && s.Tree[2].Status == "running"
	})
	d.kill(t)
	testwait.Until(t, 5*time.Second, "the leaf's plugin to die with its host", func() bool { return !alive(plugin) })

	d = startDaemon(t, data, cfg)
	s := statusOf(t, d, root)
	for _, n := range s.Tree {
		if n.Status != "interrupted" || n.Reason != "host_restart" {
			t.Fatalf("after the restart task %s is %s (%s), want interrupted (host_restart): %+v", n.ID, n.Status, n.Reason, s.Tree)
		}
	}
	leafID := s.Tree[2].ID
	if out, errOut, code := d.cli(t, "task", "resume", leafID, "--json"); code != 4 || !strings.Contains(out+errOut, "PARENT_DOWN") && !strings.Contains(out+errOut, "resume the parent") {
		t.Fatalf("resume of the leaf under an interrupted parent: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := d.cli(t, "task", "resume", root); code != 0 {
		t.Fatalf("resume of the root: exit %d\n%s%s", code, out, errOut)
	}
	testwait.Until(t, 30*time.Second, "the tree to complete", func() bool {
		s := statusOf(t, d, root)
		return s.Task.Status == "completed"
	})
	s = statusOf(t, d, root)
	for _, n := range s.Tree {
		if n.Status != "completed" {
			t.Fatalf("after the resume task %s is %s (%s)", n.ID, n.Status, n.Reason)
		}
	}
	if s.Tree[2].ID != leafID || s.Tree[2].ParentID != s.Tree[1].ID {
		t.Fatalf("tree after the resume: %+v", s.Tree)
	}
}
