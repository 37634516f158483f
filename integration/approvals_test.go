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

// An allow-for-task approval covers the second matching call and not a
// different one: the legacy executor, the scripted model, shell.run gated.
// Step 1's `echo one >> log` is approved --for-task with the pattern
// `echo * >> log`; step 2's `echo two >> log` runs without asking (the
// cover is in the ledger and the events); step 3's `rm -f log` asks, and
// is rejected: the log keeps both lines.
func TestLegacyAllowForTaskApproval(t *testing.T) {
	t.Parallel()
	data, work := testwait.ShortTempDir(t), testwait.ShortTempDir(t)
	call := func(step, command string) any {
		return map[string]any{"when": map[string]any{"last_role": "user", "contains": " step " + step + "/"},
			"reply": map[string]any{"tool_calls": []any{map[string]any{"name": "shell.run", "arguments": map[string]any{"command": command}}}}}
	}
	script := map[string]any{"version": 1, "rules": []any{
		call("1", "echo one >> log"), call("2", "echo two >> log"), call("3", "rm -f log"),
		map[string]any{"when": map[string]any{"last_role": "tool"}, "reply": map[string]any{"content": "ran it"}},
	}}
	raw, _ := json.Marshal(script)
	scriptFile := filepath.Join(work, "script.json")
	os.WriteFile(scriptFile, raw, 0o600)
	cfg := writeConfig(t, work, fmt.Sprintf("[model]\nscript = %q\n[tools.\"shell.run\"]\napproval = \"always\"\n", scriptFile))
	d := startDaemon(t, data, cfg)
	var v oneTask
	d.cliJSON(t, &v, "task", "create", "--executor", "legacy", "--goal", "log twice, then clean up", "--max-steps", "5")
	id := v.Task.ID

	pending := func() approvalJSON {
		t.Helper()
		var got approvalJSON
		testwait.Until(t, 30*time.Second, "a pending approval of the task", func() bool {
			var list approvalsJSON
			d.cliJSON(t, &list, "approvals", "list")
			for _, a := range list.Approvals {
				if a.TaskID == id {
					got = a
					return true
				}
			}
			return false
		})
		return got
	}
	first := pending()
	if !strings.Contains(first.Prompt, "echo one >> log") {
		t.Fatalf("first approval %+v, want step 1's command", first)
	}
	var res struct {
		Approval approvalJSON `json:"approval"`
	}
	d.cliJSON(t, &res, "approve", first.ID, "--for-task", "--pattern", "echo * >> log")
	if res.Approval.Scope != "task" || res.Approval.Pattern != "echo * >> log" {
		t.Fatalf("approved %+v, want scope task with the pattern", res.Approval)
	}
	second := pending()
	if !strings.Contains(second.Prompt, "rm -f log") {
		t.Fatalf("the next approval asked is %q, want step 3's rm: step 2's echo was covered", second.Prompt)
	}
	var all approvalsJSON
	d.cliJSON(t, &all, "approvals", "list", "--status", "all")
	if n := len(all.Approvals); n != 2 {
		t.Fatalf("%d approvals asked, want 2 (step 1's and step 3's): %+v", n, all.Approvals)
	}
	if out, errOut, code := d.cli(t, "reject", second.ID); code != 0 {
		t.Fatalf("reject: exit %d\n%s%s", code, out, errOut)
	}
	var st statusJSON
	testwait.Until(t, 30*time.Second, "the task to fail", func() bool {
		d.cliJSON(t, &st, "task", "status", id)
		return st.Task.Status == "failed"
	})
	if st.Task.Reason != "approval_rejected" {
		t.Fatalf("task %+v, want approval_rejected", st.Task)
	}
	log, err := os.ReadFile(filepath.Join(data, "workspaces", id, "log"))
	if err != nil || string(log) != "one\ntwo\n" {
		t.Fatalf("workspace log %q (%v), want both echoes and no rm", log, err)
	}
	out, errOut, code := d.cli(t, "task", "watch", id, "--json")
	if code != 1 || !strings.Contains(out, `"type":"approval.covered"`) || !strings.Contains(out, `"note":"`+first.ID+`"`) {
		t.Errorf("watch: exit %d, want an approval.covered event naming %s:\n%s%s", code, first.ID, out, errOut)
	}
}
