package host

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/store"
)

// An allow-for-task approval without a pattern covers the same call only
// (its fingerprint, not the subject a long argument is cut to); with one,
// only a subject shown whole.
func TestCovers(t *testing.T) {
	t.Parallel()
	long := `{"content":"` + strings.Repeat("a", tools.MaxDescribeBytes) + `","path":"x"}`
	cut := tools.Describe(tools.ToolWorkspaceWrite, []byte(long))
	exact := store.Approval{Fingerprint: "fp1", Subject: cut}
	for _, c := range []struct {
		name      string
		grant     store.Approval
		tool, sub string
		fp        string
		want      bool
	}{
		{"same call", exact, tools.ToolWorkspaceWrite, cut, "fp1", true},
		{"same cut subject, other arguments", exact, tools.ToolWorkspaceWrite, cut, "fp2", false},
		{"pattern, whole subject", store.Approval{Pattern: `{"content":"*","path":"x"}`}, tools.ToolWorkspaceWrite, `{"content":"hi","path":"x"}`, "f", true},
		{"pattern, cut subject", store.Approval{Pattern: "*"}, tools.ToolWorkspaceWrite, cut, "f", false},
		{"pattern, a command", store.Approval{Pattern: "echo *"}, tools.ToolShellRun, "echo " + strings.Repeat("a", 1000), "f", true},
	} {
		if got := covers(c.grant, c.tool, c.sub, c.fp); got != c.want {
			t.Errorf("%s: covers = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"echo * >> log", "echo two >> log", true},
		{"echo * >> log", "echo two >> log; rm -rf /", false},
		{"echo * >> log", "rm -f log", false},
		{"*", "", true},
		{"*", "anything / at all", true},
		{"", "", true},
		{"", "x", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "aéc", true},
		{"*.txt", "a/b.txt", true},
		{"**x*", "yyxyy", true},
		{"ls", "ls -la", false},
		{strings.Repeat("*a", 100), strings.Repeat("a", 99), false},
	} {
		if got := globMatch(c.pattern, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// An allow-for-task approval with no pattern covers the task's later calls
// with the same command: each cover is an approval effect in the ledger
// bound to the grant, and an approval.covered event; only one approval is
// asked. A pattern over its bound, with a control character, or for an
// executor's question, is refused naming the field, and nothing is
// resolved.
func TestApproveForTaskCoversAndRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := openHost(t, "", nil)
	te := map[string]any{"steps": 3, "call_tool": map[string]any{"name": "shell.run", "args": map[string]any{"command": "true"}}}
	task := create(t, h, alice, te, Limits{Steps: 5})
	a := waitApproval(t, h, alice, task.ID)
	for _, c := range []struct{ pattern, field string }{
		{strings.Repeat("*", store.MaxGrantPattern+1), "pattern"},
		{"echo \x1b[2J", "pattern"},
	} {
		if _, err := h.Runner.ApproveForTask(ctx, alice, a.ID, c.pattern); err == nil {
			t.Fatalf("pattern %q approved", c.pattern)
		} else {
			wantField(t, err, c.field)
		}
	}
	if cur, _ := h.Store.GetApproval(ctx, alice, a.ID); cur.Status != store.ApprovalPending || cur.Fingerprint == "" || cur.Subject != "true" {
		t.Fatalf("after the refusals: %+v, want pending, bound to its effect", cur)
	}
	got, err := h.Runner.ApproveForTask(ctx, alice, a.ID, "")
	if err != nil || got.Scope != store.ScopeTask {
		t.Fatalf("ApproveForTask: %+v, %v", got, err)
	}
	end := waitEnd(t, h, alice, task.ID)
	wantStatus(t, end, store.StatusCompleted, store.ReasonNone)
	if as, _ := h.Store.ListApprovals(ctx, alice, ""); len(as) != 1 {
		t.Fatalf("%d approvals asked, want 1: %+v", len(as), as)
	}
	effs, err := h.Store.ListEffects(ctx, alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	covers := 0
	for _, e := range effs {
		if e.Kind == store.EffectApproval && e.Summary == "covered by "+a.ID && e.Status == store.EffectObserved {
			covers++
		}
	}
	if covers != 2 {
		t.Fatalf("%d cover effects in the ledger, want 2 (steps 2 and 3): %+v", covers, effs)
	}
	evs, _ := h.Store.Events(ctx, alice, task.ID, 0, 1000)
	n := 0
	for _, ev := range evs {
		var p EventPayload
		if ev.Type == EventApprovalCovered && json.Unmarshal(ev.Payload, &p) == nil && p.Note == a.ID {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d approval.covered events, want 2", n)
	}

	q := create(t, h, alice, map[string]any{"steps": 1, "request_approval": true}, Limits{Steps: 1})
	qa := waitApproval(t, h, alice, q.ID)
	_, err = h.Runner.ApproveForTask(ctx, alice, qa.ID, "")
	wantField(t, err, "for_task")
	if _, err := h.Runner.Approve(ctx, alice, qa.ID); err != nil {
		t.Fatalf("the question, approved once after the refusal: %v", err)
	}
}
