package store

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rowCounts counts what each table holds about task id, read straight
// from the file.
func rowCounts(t *testing.T, s *Store, id string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, q := range []struct{ table, col string }{
		{"tasks", "id"}, {"attempts", "task_id"}, {"events", "task_id"}, {"effects", "task_id"}, {"approvals", "task_id"},
	} {
		var n int
		if err := s.readRow(context.Background(), `SELECT count(*) FROM `+q.table+` WHERE `+q.col+` = $1`, id).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", q.table, err)
		}
		out[q.table] = n
	}
	return out
}

// fullTask is a cancelled task with a row in every table: an attempt,
// events, an effect and an approval.
func fullTask(t *testing.T, s *Store, principal, id string) {
	t.Helper()
	ctx := context.Background()
	task, a := claimedTask(t, s, principal, id)
	if _, _, err := s.AdmitEffect(ctx, NewEffect{PrincipalID: principal, TaskID: id, RunID: task.RunID, Attempt: a.Number, Seq: 1, Kind: EffectTool, Fingerprint: "f1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RequestApproval(ctx, NewApproval{ID: "a_" + id, PrincipalID: principal, TaskID: id, RunID: task.RunID, Attempt: a.Number, Seq: 2,
		Tool: "shell.run", Prompt: "p", ExpiresAt: time.Now().Add(time.Hour)}, NewEvent{Type: "task.waiting_approval"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, principal, id, NewEvent{Type: "task.cancelled"}); err != nil {
		t.Fatal(err)
	}
	for table, n := range rowCounts(t, s, id) {
		if n == 0 {
			t.Fatalf("setup: no %s row for %s", table, id)
		}
	}
}

func TestDeleteTaskRemovesEveryRow(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		fullTask(t, s, "alice", "t1")
		fullTask(t, s, "alice", "t2")
		before := rowCounts(t, s, "t2")
		if err := s.DeleteTask(context.Background(), "alice", "t1"); err != nil {
			t.Fatalf("DeleteTask: %v", err)
		}
		want := map[string]int{"tasks": 0, "attempts": 0, "events": 0, "effects": 0, "approvals": 0}
		if got := rowCounts(t, s, "t1"); !reflect.DeepEqual(got, want) {
			t.Fatalf("after delete, rows of t1 = %v, want none", got)
		}
		if got := rowCounts(t, s, "t2"); !reflect.DeepEqual(got, before) {
			t.Fatalf("the other task's rows changed: %v, want %v", got, before)
		}
		wantErrIs(t, s.DeleteTask(context.Background(), "alice", "t1"), ErrNotFound)
	})
}

func TestDeleteTaskRefusals(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		for _, tc := range []struct {
			name      string
			setup     func(t *testing.T, s *Store)
			principal string
			want      error
			wantMsg   string
		}{
			{"running", func(t *testing.T, s *Store) { claimedTask(t, s, "alice", "t1") }, "alice", ErrConflict, "is running"},
			{"pending", func(t *testing.T, s *Store) { createTask(t, s, "alice", "t1") }, "alice", ErrConflict, "is pending"},
			{"waiting_approval", func(t *testing.T, s *Store) { waitingTask(t, s, "t1") }, "alice", ErrConflict, "is waiting_approval"},
			{"interrupted", func(t *testing.T, s *Store) {
				runningTask(t, s, "alice", "t1")
				if _, err := s.Transition(context.Background(), Transition{PrincipalID: "alice", TaskID: "t1", From: []Status{StatusRunning}, To: StatusInterrupted, Reason: ReasonHostShutdown}); err != nil {
					t.Fatal(err)
				}
			}, "alice", ErrConflict, "is interrupted"},
			{"another principal's", func(t *testing.T, s *Store) { fullTask(t, s, "alice", "t1") }, "bob", ErrNotFound, "not found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := open(t)
				tc.setup(t, s)
				before := rowCounts(t, s, "t1")
				err := s.DeleteTask(context.Background(), tc.principal, "t1")
				wantErrIs(t, err, tc.want)
				if !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("error %q does not say %q", err, tc.wantMsg)
				}
				if got := rowCounts(t, s, "t1"); !reflect.DeepEqual(got, before) {
					t.Fatalf("a refused delete changed rows: %v, want %v", got, before)
				}
			})
		}
	})
}

func TestDeleteFinishedBefore(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		fullTask(t, s, "alice", "old")
		fullTask(t, s, "bob", "old-skipped")
		claimedTask(t, s, "alice", "old-running")
		cutoff := s.now()
		fullTask(t, s, "alice", "new")

		skip := func(id string) bool { return id == "old-skipped" }
		got, err := s.DeleteFinishedBefore(ctx, cutoff, 0, skip)
		if err != nil {
			t.Fatal(err)
		}
		if want := []Deleted{{"old", "alice"}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("deleted %v, want %v", got, want)
		}
		for id, wantTasks := range map[string]int{"old": 0, "old-skipped": 1, "old-running": 1, "new": 1} {
			if n := rowCounts(t, s, id)["tasks"]; n != wantTasks {
				t.Errorf("task %s: %d rows, want %d", id, n, wantTasks)
			}
		}
		if n := rowCounts(t, s, "old")["events"]; n != 0 {
			t.Errorf("old task keeps %d events", n)
		}

		// A batch is bounded: limit 1 removes one of two candidates.
		got, err = s.DeleteFinishedBefore(ctx, s.now(), 1, nil)
		if err != nil || len(got) != 1 || got[0].ID != "old-skipped" {
			t.Fatalf("limit 1: deleted %v, %v; want old-skipped only", got, err)
		}
	})
}
