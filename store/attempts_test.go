package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestFinishAttempt(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "p", "t")

		// A continue with a checkpoint stores it; the next one without keeps it.
		got, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", Summary: "one", Checkpoint: []byte("ck1"), WallMillisUsed: 10,
			Events: []NewEvent{{Type: "step.completed"}}})
		if err != nil || string(got.Checkpoint) != "ck1" || got.Status != StatusRunning {
			t.Fatalf("first finish: %+v %v", got, err)
		}
		a, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		got, err = s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", Summary: "two"})
		if err != nil || string(got.Checkpoint) != "ck1" {
			t.Fatalf("finish without checkpoint must keep ck1: %q %v", got.Checkpoint, err)
		}

		// The step asks for approval: the attempt ends, the task waits.
		a, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		got, err = s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", Summary: "three", TaskTo: StatusWaitingApproval})
		if err != nil || got.Status != StatusWaitingApproval || got.RunID != task.RunID {
			t.Fatalf("finish to waiting_approval: %+v %v", got, err)
		}
		if _, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "t", From: []Status{StatusWaitingApproval}, To: StatusRunning}); err != nil {
			t.Fatal(err)
		}

		// Invalid requests are refused before anything is written.
		a, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		before := snap(t, s, "p", "t")
		base := FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "complete"}
		for _, tt := range []struct {
			name string
			mod  func(*FinishAttempt)
			want error
		}{
			{"still running", func(f *FinishAttempt) { f.Status = AttemptRunning }, ErrInvalid},
			{"unknown outcome", func(f *FinishAttempt) { f.Outcome = "done" }, ErrInvalid},
			{"unknown reason", func(f *FinishAttempt) { f.Reason = "oops" }, ErrInvalid},
			{"unknown task reason", func(f *FinishAttempt) { f.TaskReason = "oops" }, ErrInvalid},
			{"result without completion", func(f *FinishAttempt) { f.Result = []byte(`{}`) }, ErrInvalid},
			{"task to pending", func(f *FinishAttempt) { f.TaskTo = StatusPending }, ErrInvalid},
			{"task to unknown", func(f *FinishAttempt) { f.TaskTo = "paused" }, ErrInvalid},
			{"negative wall", func(f *FinishAttempt) { f.WallMillisUsed = -1 }, ErrInvalid},
			{"bad event", func(f *FinishAttempt) { f.Events = []NewEvent{{Type: "x", Payload: []byte("[]")}} }, ErrInvalid},
			{"wrong run", func(f *FinishAttempt) { f.RunID++ }, ErrConflict},
			{"wrong principal", func(f *FinishAttempt) { f.PrincipalID = "q" }, ErrNotFound},
		} {
			t.Run(tt.name, func(t *testing.T) {
				f := base
				tt.mod(&f)
				_, err := s.FinishAttempt(ctx, f)
				wantErrIs(t, err, tt.want)
				if after := snap(t, s, "p", "t"); !reflect.DeepEqual(after, before) {
					t.Fatal("refused finish wrote something")
				}
			})
		}

		// Completion stores the result with the attempt, atomically.
		f := base
		f.Summary, f.Result, f.TaskTo, f.Events = "done", []byte(`{"ok":true}`), StatusCompleted, []NewEvent{{Type: "task.completed"}}
		got, err = s.FinishAttempt(ctx, f)
		if err != nil || got.Status != StatusCompleted || string(got.Result) != `{"ok":true}` {
			t.Fatalf("completion: %+v %v", got, err)
		}
		as := listAttempts(t, s, "p", "t")
		if len(as) != 4 {
			t.Fatalf("%d attempts, want 4", len(as))
		}
		for i, at := range as {
			if at.Number != int64(i+1) || at.Status != AttemptCompleted || at.EndedAt.Before(at.StartedAt) || at.RunID != task.RunID {
				t.Fatalf("attempt %d: %+v", i+1, at)
			}
		}
		if !reflect.DeepEqual(getTask(t, s, "p", "t"), got) {
			t.Fatal("returned task differs from the stored one")
		}
	})
}

func TestRecentSummaries(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, _ := claimedTask(t, s, "p", "t")
		if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t", Number: 1, Status: AttemptInterrupted, Reason: ReasonExecutorCrashed}); err != nil {
			t.Fatal(err)
		}
		outcomes := []struct {
			status  AttemptStatus
			outcome string
		}{
			{AttemptCompleted, "continue"}, {AttemptFailed, "fail"}, {AttemptCompleted, "continue"},
			{AttemptCompleted, "continue"}, {AttemptInterrupted, ""}, {AttemptCompleted, "continue"},
		}
		for i, o := range outcomes {
			a, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
				Status: o.status, Outcome: o.outcome, Summary: fmt.Sprintf("s%d", i+2)}); err != nil {
				t.Fatal(err)
			}
		}
		summaries := func(n int) []string {
			as, err := s.RecentSummaries(ctx, "p", "t", n)
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, a := range as {
				out = append(out, a.Summary)
			}
			return out
		}
		for _, tt := range []struct {
			n    int
			want []string
		}{
			{0, []string{}}, {1, []string{"s7"}}, {3, []string{"s4", "s5", "s7"}}, {10, []string{"s2", "s4", "s5", "s7"}},
		} {
			if got := summaries(tt.n); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("RecentSummaries(%d) = %v, want %v", tt.n, got, tt.want)
			}
		}
		// A task without attempts has none; a missing one is not found.
		createTask(t, s, "p", "empty")
		if as, err := s.ListAttempts(ctx, "p", "empty"); err != nil || len(as) != 0 {
			t.Fatalf("ListAttempts of a new task: %v %v", as, err)
		}
		if _, err := s.RecentSummaries(ctx, "p", "missing", 5); !errors.Is(err, ErrNotFound) {
			t.Fatalf("RecentSummaries of a missing task: %v", err)
		}
	})
}

func TestCreateTaskValidation(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		good := NewTask{ID: "t", PrincipalID: "p", Executor: "legacy", Spec: []byte(`{"goal":"x"}`), Limits: defaultBudgets()}
		for _, tt := range []struct {
			name string
			mod  func(*NewTask)
			want error
		}{
			{"no id", func(n *NewTask) { n.ID = "" }, ErrInvalid},
			{"no principal", func(n *NewTask) { n.PrincipalID = "" }, ErrInvalid},
			{"no executor", func(n *NewTask) { n.Executor = "" }, ErrInvalid},
			{"spec not JSON", func(n *NewTask) { n.Spec = []byte("goal: x") }, ErrInvalid},
			{"no spec", func(n *NewTask) { n.Spec = nil }, ErrInvalid},
			{"negative limit", func(n *NewTask) { n.Limits.ToolCalls.Limit = -1 }, ErrInvalid},
		} {
			t.Run(tt.name, func(t *testing.T) {
				nt := good
				tt.mod(&nt)
				_, err := s.CreateTask(ctx, nt)
				wantErrIs(t, err, tt.want)
			})
		}
		good.Limits.Steps.Used = 5 // ignored: a new task has used nothing
		task, err := s.CreateTask(ctx, good, NewEvent{Type: "task.created"})
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != StatusPending || task.RunID != 0 || task.Budgets.Steps != (Budget{Limit: 20}) ||
			task.CreatedAt.IsZero() || !task.CreatedAt.Equal(task.UpdatedAt) {
			t.Fatalf("new task: %+v", task)
		}
		if _, err := s.CreateTask(ctx, good); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate id: %v, want ErrConflict", err)
		}
		if n := len(allEvents(t, s, "p", "t")); n != 1 {
			t.Fatalf("%d events after a refused duplicate, want 1", n)
		}
	})
}

// TestWritesArePrepared runs every write path and checks that none of its
// statements ran unprepared (a query missing from writeQueries).
func TestWritesArePrepared(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "p", "t")
		steps := []error{
			s.Heartbeat(ctx, "p", "t", task.RunID, 5),
			s.Heartbeat(ctx, "p", "t", task.RunID+1, 5),
		}
		_, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID)
		steps = append(steps, err)
		_, err = s.AppendEvents(ctx, "p", "t", task.RunID, NewEvent{Type: "x"})
		steps = append(steps, err)
		_, err = s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", TaskTo: StatusWaitingApproval})
		steps = append(steps, err)
		_, err = s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue"})
		steps = append(steps, err)
		_, err = s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "t", From: []Status{StatusRunning, StatusWaitingApproval}, To: StatusInterrupted})
		steps = append(steps, err)
		_, err = s.StartRun(ctx, "p", "t", StatusInterrupted)
		steps = append(steps, err)
		a2, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID+1)
		steps = append(steps, err)
		_, err = s.Cancel(ctx, "p", "t")
		steps = append(steps, err)
		_, err = s.Cancel(ctx, "p", "t")
		steps = append(steps, err)
		steps = append(steps, s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t", Number: a2.Number, Status: AttemptCancelled, Reason: ReasonUserCancelled, WallMillisUsed: 9}))
		steps = append(steps, s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t", Number: a2.Number, Status: AttemptCancelled, Reason: ReasonUserCancelled, WallMillisUsed: 9}))
		_, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID+1)
		steps = append(steps, err)
		_, err = s.Recover(ctx, 0, nil)
		steps = append(steps, err)
		for i, err := range steps {
			t.Logf("step %d: %v", i, err)
		}
		if n := s.unprepared.Load(); n != 0 {
			t.Fatalf("%d write statements ran unprepared", n)
		}
	})
}

func TestFinishAndClaim(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		_, err := s.CreateTask(ctx, NewTask{ID: "t_fc", PrincipalID: "alice", Executor: "legacy",
			Spec: []byte(`{"goal":"x"}`), Limits: Budgets{Steps: Budget{Limit: 2}, WallMillis: Budget{Limit: 1000}}})
		if err != nil {
			t.Fatal(err)
		}
		task, err := s.StartRun(ctx, "alice", "t_fc", StatusPending)
		if err != nil {
			t.Fatal(err)
		}
		a1, _, err := s.ClaimAttempt(ctx, "alice", task.ID, task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		finish := func(n int64) FinishAttempt {
			return FinishAttempt{PrincipalID: "alice", TaskID: task.ID, RunID: task.RunID, Number: n,
				Status: AttemptCompleted, Outcome: "continue", Summary: "ok", Checkpoint: []byte("cp"), WallMillisUsed: 5}
		}
		got, next, exhausted, err := s.FinishAndClaim(ctx, finish(a1.Number), NewEvent{Type: "step.started", Payload: []byte(`{}`)})
		if err != nil || next == nil || exhausted != nil || next.Number != 2 || got.Budgets.Steps.Used != 2 {
			t.Fatalf("first: next %+v exhausted %v err %v steps %d", next, exhausted, err, got.Budgets.Steps.Used)
		}
		// The step budget (2) is spent: the finish commits, nothing is claimed.
		got, next, exhausted, err = s.FinishAndClaim(ctx, finish(next.Number))
		if err != nil || next != nil || exhausted == nil || exhausted.Budget != BudgetSteps {
			t.Fatalf("second: next %+v exhausted %v err %v", next, exhausted, err)
		}
		atts, _ := s.ListAttempts(ctx, "alice", task.ID)
		if len(atts) != 2 || atts[1].Status != AttemptCompleted || got.Budgets.Steps.Used != 2 {
			t.Fatalf("attempts %+v, steps %d", atts, got.Budgets.Steps.Used)
		}
		// A finish that would change the status is refused outright.
		f := finish(2)
		f.TaskTo = StatusCompleted
		if _, _, _, err := s.FinishAndClaim(ctx, f); !errors.Is(err, ErrInvalid) {
			t.Fatalf("TaskTo with FinishAndClaim: %v", err)
		}
	})
}

// TestClaimedAttemptIsStored: the attempt a claim returns, built without
// reading the row back, is exactly what the store holds, on both paths
// (ClaimAttempt and FinishAndClaim's fast path) and both engines.
func TestClaimedAttemptIsStored(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		task, first := claimedTask(t, s, "p", "t1")
		_, next, _, err := s.FinishAndClaim(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t1", RunID: task.RunID, Number: first.Number,
			Status: AttemptCompleted, Outcome: "continue", Summary: "one", ExitCode: -1})
		if err != nil || next == nil {
			t.Fatalf("FinishAndClaim: %v, %v", next, err)
		}
		stored := listAttempts(t, s, "p", "t1")
		if len(stored) != 2 {
			t.Fatalf("%d attempts stored, want 2", len(stored))
		}
		for i, got := range []Attempt{first, *next} {
			want := stored[i]
			if !got.StartedAt.Equal(want.StartedAt) || !got.EndedAt.IsZero() {
				t.Errorf("attempt %d: started %v ended %v, stored started %v", got.Number, got.StartedAt, got.EndedAt, want.StartedAt)
			}
			got.StartedAt, want.StartedAt, want.EndedAt = time.Time{}, time.Time{}, time.Time{}
			if i == 0 {
				// Stored after it finished; compare it as it was claimed.
				want.Status, want.Outcome, want.Summary = AttemptRunning, "", ""
			}
			if got != want {
				t.Errorf("attempt %d returned %+v, stored %+v", got.Number, got, want)
			}
		}
	})
}
