package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/tools"
	"github.com/taskhost/taskhost/store"
)

func TestUnifiedDiff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ old, next, want string }{
		{"a\nb\nc\n", "a\nB\nc\n", "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"", "x\n", "@@ -1,0 +1,1 @@\n+x\n"},
		{"1\n2\n3\n4\n5\n6\n", "1\n2\n3\n4\n5\n6\n7\n", "@@ -5,2 +5,3 @@\n 5\n 6\n+7\n"},
		{"a", "b", "@@ -1,1 +1,1 @@\n-a\\ no newline at end of file\n+b\\ no newline at end of file\n"},
		{"same\n", "same\n", "(no change)"},
	} {
		if got := unifiedDiff(c.old, c.next); got != c.want {
			t.Errorf("unifiedDiff(%q, %q) =\n%q\nwant\n%q", c.old, c.next, got, c.want)
		}
	}
}

// Approve a diff: a gated workspace.write shows its approver the change to
// the file as a diff, bounded (a large one is cut with a marker, and the
// record stays within its 2000 bytes); the approved write runs; one whose
// file changed after the diff was shown is refused and writes nothing.
func TestApproveADiff(t *testing.T) {
	t.Parallel()
	gated := func(c *config.Config) {
		tl := c.Tools[tools.ToolWorkspaceWrite]
		tl.Approval = config.ApprovalAlways
		c.Tools[tools.ToolWorkspaceWrite] = tl
	}
	ctx := context.Background()
	for _, c := range []struct {
		name, content, want string
		changeBase, cut     bool
	}{
		{name: "small", content: "a\nB\nc\n", want: `workspace.write notes.md: @@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n`},
		{name: "large, cut", content: strings.Repeat("a long new line of the file\n", 200), cut: true},
		{name: "base changed", content: "a\nB\nc\n", changeBase: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			h := openHost(t, dir, gated)
			te := map[string]any{"steps": 1, "call_tool": map[string]any{"name": "workspace.write", "args": map[string]any{"path": "notes.md", "content": c.content}}}
			task, err := h.Runner.Create(ctx, alice, CreateRequest{Executor: "testexec", Spec: spec(t, "g", te), Limits: Limits{Steps: 1},
				Files: []File{{Name: "notes.md", Data: []byte("a\nb\nc\n")}}})
			if err != nil {
				t.Fatal(err)
			}
			a := waitApproval(t, h, alice, task.ID)
			switch {
			case c.cut:
				if !strings.HasPrefix(a.Prompt, "workspace.write notes.md: @@ -1,3 +1,200 @@") || !strings.Contains(a.Prompt, "…(+") || len(a.Prompt) > 2000 {
					t.Fatalf("a large diff shows %d bytes: %q", len(a.Prompt), a.Prompt[:min(len(a.Prompt), 200)])
				}
			case c.want != "" && a.Prompt != c.want:
				t.Fatalf("approval shows %q, want %q", a.Prompt, c.want)
			}
			file := filepath.Join(h.Runner.workspace(task.ID), "notes.md")
			if c.changeBase {
				if err := os.WriteFile(file, []byte("someone else's\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := h.Runner.Approve(ctx, alice, a.ID); err != nil {
				t.Fatal(err)
			}
			end := waitEnd(t, h, alice, task.ID)
			got, _ := os.ReadFile(file)
			if c.changeBase {
				if string(got) != "someone else's\n" {
					t.Fatalf("the write ran over a changed file: %q", got)
				}
				atts, _ := h.Runner.Attempts(ctx, alice, task.ID)
				if len(atts) != 1 || !strings.HasPrefix(atts[0].Summary, "tool error") {
					t.Fatalf("attempts %+v: want the executor told of the refused write", atts)
				}
				return
			}
			wantStatus(t, end, store.StatusCompleted, store.ReasonNone)
			if string(got) != c.content {
				t.Fatalf("file %q after the approved write", got)
			}
		})
	}
}
