package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// An allow-for-task approval: recorded approved with scope task and its
// pattern, listed by TaskGrants for its tool only; a pattern at the bound
// is taken and one past refused; an approval that gates no tool effect is
// refused; a task holds at most MaxTaskGrants of them.
func TestGrantApproval(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "alice", "t")
		request := func(seq int64, tool, fp string) Approval {
			t.Helper()
			ap, _, err := s.RequestApproval(ctx, NewApproval{ID: fmt.Sprint("a_", seq), PrincipalID: "alice", TaskID: "t", RunID: task.RunID,
				Attempt: a.Number, Seq: seq, Tool: tool, Prompt: "p", ExpiresAt: time.Now().Add(time.Hour), Fingerprint: fp, Subject: "echo hi"})
			if err != nil {
				t.Fatal(err)
			}
			return ap
		}
		ap := request(1, "shell.run", "fp1")
		if ap.Scope != ScopeOnce || ap.Fingerprint != "fp1" || ap.Subject != "echo hi" {
			t.Fatalf("requested %+v", ap)
		}
		if _, _, err := s.GrantApproval(ctx, "alice", ap.ID, strings.Repeat("*", MaxGrantPattern+1)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("a pattern one past the bound: %v, want ErrTooLarge", err)
		}
		got, tk, err := s.GrantApproval(ctx, "alice", ap.ID, strings.Repeat("*", MaxGrantPattern))
		if err != nil || got.Scope != ScopeTask || got.Status != ApprovalApproved || tk.Status != StatusRunning {
			t.Fatalf("grant at the bound: %+v %s %v", got, tk.Status, err)
		}
		if gs, err := s.TaskGrants(ctx, "alice", "t", "shell.run"); err != nil || len(gs) != 1 || gs[0].ID != ap.ID {
			t.Fatalf("TaskGrants(shell.run) = %+v, %v", gs, err)
		}
		if gs, err := s.TaskGrants(ctx, "alice", "t", "workspace.write"); err != nil || len(gs) != 0 {
			t.Fatalf("TaskGrants(workspace.write) = %+v, %v: another tool's grant", gs, err)
		}
		if gs, err := s.TaskGrants(ctx, "bob", "t", "shell.run"); err != nil || len(gs) != 0 {
			t.Fatalf("another principal sees %+v, %v", gs, err)
		}
		q := request(2, "", "")
		if _, _, err := s.GrantApproval(ctx, "alice", q.ID, ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("granting an executor's question: %v, want ErrInvalid", err)
		}
		if cur, _ := s.GetApproval(ctx, "alice", q.ID); cur.Status != ApprovalPending {
			t.Fatalf("a refused grant wrote %s", cur.Status)
		}
		if _, _, err := s.ResolveApproval(ctx, "alice", q.ID, ApprovalApproved); err != nil {
			t.Fatal(err)
		}
		for i := int64(2); i <= MaxTaskGrants; i++ {
			g := request(i+1, "shell.run", fmt.Sprint("fp", i+1))
			if _, _, err := s.GrantApproval(ctx, "alice", g.ID, ""); err != nil {
				t.Fatalf("grant %d of %d: %v", i, MaxTaskGrants, err)
			}
		}
		last := request(MaxTaskGrants+2, "shell.run", "fpx")
		if _, _, err := s.GrantApproval(ctx, "alice", last.ID, ""); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprint(MaxTaskGrants)) {
			t.Fatalf("grant %d: %v, want a refusal naming the bound", MaxTaskGrants+1, err)
		}
		if gs, err := s.TaskGrants(ctx, "alice", "t", "shell.run"); err != nil || len(gs) != MaxTaskGrants {
			t.Fatalf("TaskGrants lists %d, %v; want %d", len(gs), err, MaxTaskGrants)
		}
		if fmt.Sprint(MaxTaskGrants) != maxTaskGrantsSQL {
			t.Fatalf("maxTaskGrantsSQL %s is not MaxTaskGrants %d", maxTaskGrantsSQL, MaxTaskGrants)
		}
	})
}
