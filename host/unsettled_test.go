package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/internal/testwait"
	"github.com/taskhost/taskhost/store"
)

// An effect an attempt left unsettled — dispatching when its plugin died
// (indeterminate), or observed with a result too large to keep for replay
// (observed_unreplayable) — is reported to the re-run, and the host itself
// refuses to run it again unless an approval was granted in that step: an
// executor that just re-issues it gets FailedPrecondition naming the
// effect (sdk.ErrEffectUnsettled), and the tool does not run a second time.
func TestUnsettledEffectRunsAgainOnlyWithApproval(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// large: the tool prints more than the kept bound and the plugin
		// dies right after it; otherwise the plugin is killed while the
		// tool runs.
		large, approve bool
		status         store.EffectStatus
		// runs is how often the tool ran after the resume, which restored
		// the workspace as of the last committed step (without the killed
		// run's count).
		runs int
	}{
		{name: "indeterminate, re-issued without approval", status: store.EffectIndeterminate, runs: 0},
		{name: "observed_unreplayable, re-issued without approval", large: true, status: store.EffectObservedUnreplayable, runs: 0},
		{name: "observed_unreplayable, retry approved", large: true, approve: true, status: store.EffectObservedUnreplayable, runs: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := openHost(t, "", shellNoApproval)
			ctx := context.Background()
			dir := testwait.PluginDir(t)
			indet := filepath.Join(dir, "indet")
			// In the workspace: the command is confined to it.
			cmd := "echo ran >> count; echo $$ > tool.pid; sleep 300"
			te := map[string]any{"pid_file": filepath.Join(dir, "pid"), "indeterminate_file": indet, "approve_retry": tc.approve}
			if tc.large {
				cmd = fmt.Sprintf("echo ran >> count; head -c %d /dev/zero | tr '\\0' x", store.MaxEffectResult+4096)
				te["kill_after_tool_at_attempt"] = 1
			}
			te["call_tool"] = map[string]any{"name": "shell.run", "args": map[string]any{"command": cmd}}
			task := create(t, h, alice, te, Limits{Steps: 2})
			count, toolPid := filepath.Join(h.Runner.workspace(task.ID), "count"), filepath.Join(h.Runner.workspace(task.ID), "tool.pid")
			if !tc.large {
				readPid(t, toolPid)
				if err := syscallKill(readPid(t, filepath.Join(dir, "pid"))); err != nil {
					t.Fatal(err)
				}
			}
			task = waitEnd(t, h, alice, task.ID)
			wantStatus(t, task, store.StatusInterrupted, store.ReasonExecutorCrashed)
			if data, _ := os.ReadFile(count); strings.Count(string(data), "ran") != 1 {
				t.Fatalf("before the resume the tool ran %q, want once", data)
			}
			if tc.large {
				effs, err := h.Store.ListEffects(ctx, alice, task.ID)
				if err != nil || len(effs) != 1 || effs[0].Status != store.EffectObserved || effs[0].Result != nil {
					t.Fatalf("ledger after the crash = %+v, %v; want the tool observed without a kept result", effs, err)
				}
			}

			if _, err := h.Runner.Resume(ctx, alice, task.ID); err != nil {
				t.Fatal(err)
			}
			if tc.approve {
				a := waitApproval(t, h, alice, task.ID)
				if !strings.Contains(a.Prompt, "approving lets 1 interrupted tool call(s) of this task run again") {
					t.Errorf("approval prompt %q does not say what a yes re-admits", a.Prompt)
				}
				if _, err := h.Runner.Approve(ctx, alice, a.ID); err != nil {
					t.Fatal(err)
				}
			}
			task = waitEnd(t, h, alice, task.ID)
			if got := testwait.File(t, indet); got != fmt.Sprintf("1 1 tool %s\n", tc.status) {
				t.Errorf("the re-run was told %q, want the effect as %s", got, tc.status)
			}
			data, _ := os.ReadFile(count)
			if n := strings.Count(string(data), "ran"); n != tc.runs {
				t.Fatalf("the tool ran %d times after the resume, want %d", n, tc.runs)
			}
			atts, err := h.Store.ListAttempts(ctx, alice, task.ID)
			if err != nil || len(atts) < 2 {
				t.Fatalf("attempts = %+v, %v", atts, err)
			}
			if tc.approve {
				wantStatus(t, task, store.StatusCompleted, "")
				return
			}
			if atts[1].Summary != "tool error: effect_unsettled" {
				t.Errorf("attempt 2 summary = %q, want the executor to have seen effect_unsettled", atts[1].Summary)
			}
			if task.Budgets.ToolCalls.Used != 1 {
				t.Errorf("tool calls used = %d, want 1: a refused re-run is not charged", task.Budgets.ToolCalls.Used)
			}
		})
	}
}

// Only a tool call that does the same when run twice skips the approval.
func TestRerunSafe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, args string
		want       bool
	}{
		{"workspace.read", `{"path":"a"}`, true},
		{"time.sleep", `{"seconds":0}`, true},
		{"workspace.write", `{"path":"a","content":"x"}`, true},
		{"workspace.write", `{"path":"a","content":"x","append":false}`, true},
		{"workspace.write", `{"path":"a","content":"x","append":true}`, false},
		{"workspace.write", `{"path":"a","content":"x","append":"yes"}`, false},
		{"shell.run", `{"command":"true"}`, false},
		{"no.such.tool", `{}`, false},
	}
	for _, tc := range cases {
		if got := rerunSafe(tc.name, []byte(tc.args)); got != tc.want {
			t.Errorf("rerunSafe(%s, %s) = %v, want %v", tc.name, tc.args, got, tc.want)
		}
	}
}
