package host

import (
	"context"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/store"
)

// An approval shows the whole command it approves: a command whose visible
// form fits tools.MaxApprovalCommandBytes is shown byte for byte, one byte
// past it is refused before it is admitted — no approval asked, no tool
// budget spent — and the executor is told why. Before, approvals showed
// 512 bytes of commands of up to 8192.
func TestApprovalShowsTheWholeCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		command string
		shown   bool
	}{
		{"at the bound", "echo " + strings.Repeat("a", tools.MaxApprovalCommandBytes-5), true},
		// Escaping counts: ESC shows as \x1b, four bytes.
		{"at the bound escaped", "echo " + strings.Repeat("\x1b", (tools.MaxApprovalCommandBytes-5)/4), true},
		{"one past", "echo " + strings.Repeat("a", tools.MaxApprovalCommandBytes-4), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := openHost(t, "", nil)
			te := map[string]any{"steps": 1, "call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": c.command}}}
			task := create(t, h, alice, te, Limits{Steps: 1})
			if !c.shown {
				// testexec carries on after a tool error, into the step
				// budget.
				got := waitEnd(t, h, alice, task.ID)
				wantStatus(t, got, store.StatusFailed, store.ReasonStepBudgetExhausted)
				if got.Budgets.ToolCalls.Used != 0 {
					t.Errorf("a refused command spent %d tool calls", got.Budgets.ToolCalls.Used)
				}
				if as, err := h.Store.ListApprovals(context.Background(), alice, ""); err != nil || len(as) != 0 {
					t.Errorf("approvals %v, %v: want none asked", as, err)
				}
				atts, _ := h.Runner.Attempts(context.Background(), alice, task.ID)
				if len(atts) != 1 || atts[0].Summary != "tool error: invalid_argument" {
					t.Errorf("attempts %+v: want the executor told of an invalid argument", atts)
				}
				return
			}
			a := waitApproval(t, h, alice, task.ID)
			if want := tools.Visible(c.command); a.Prompt != want {
				t.Fatalf("approval shows %d bytes, want the whole command's %d", len(a.Prompt), len(want))
			}
			if _, err := h.Runner.Reject(context.Background(), alice, a.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
