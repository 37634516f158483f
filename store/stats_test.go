package store

import (
	"context"
	"maps"
	"testing"
	"time"
)

// TestStats counts tasks of two principals in four states, attempts that
// completed, failed and still run, and a pending approval; a closed store
// fails the read instead of reporting zeros.
func TestStats(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		s := open(t)
		empty, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(empty.Tasks) != 0 || len(empty.Attempts) != 0 || empty.PendingApprovals != 0 {
			t.Fatalf("empty store: %+v", empty)
		}

		createTask(t, s, "alice", "t_pending")
		createTask(t, s, "bob", "t_pending2")
		waitingTask(t, s, "t_waiting")
		task, a := claimedTask(t, s, "bob", "t_done")
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "bob", TaskID: task.ID, RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue", Summary: "one"}); err != nil {
			t.Fatal(err)
		}
		next, task, err := s.ClaimAttempt(ctx, "bob", task.ID, task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "bob", TaskID: task.ID, RunID: task.RunID, Number: next.Number,
			Status: AttemptFailed, Outcome: "fail", Reason: ReasonExecutorFailed, TaskTo: StatusFailed, TaskReason: ReasonExecutorFailed}); err != nil {
			t.Fatal(err)
		}

		spent, sa := claimedTask(t, s, "alice", "t_spent")
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "alice", TaskID: spent.ID, RunID: spent.RunID, Number: sa.Number,
			Status: AttemptFailed, Outcome: "fail", Reason: ReasonToolBudgetExhausted, TaskTo: StatusFailed, TaskReason: ReasonToolBudgetExhausted}); err != nil {
			t.Fatal(err)
		}

		got, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[BudgetKind]int64{BudgetToolCalls: 1}; !maps.Equal(got.BudgetExhausted, want) {
			t.Errorf("budgets: %v, want %v (executor_failed is not a budget)", got.BudgetExhausted, want)
		}
		wantTasks := map[Status]int64{StatusPending: 2, StatusWaitingApproval: 1, StatusFailed: 2}
		if !maps.Equal(got.Tasks, wantTasks) {
			t.Errorf("tasks: %v, want %v", got.Tasks, wantTasks)
		}
		wantAttempts := map[AttemptKey]int64{
			{AttemptRunning, ""}:           1, // t_waiting's, waiting on its approval
			{AttemptCompleted, "continue"}: 1,
			{AttemptFailed, "fail"}:        2,
		}
		if !maps.Equal(got.Attempts, wantAttempts) {
			t.Errorf("attempts: %v, want %v", got.Attempts, wantAttempts)
		}
		if got.PendingApprovals != 1 {
			t.Errorf("pending approvals: %d, want 1", got.PendingApprovals)
		}

		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stats(ctx); err == nil {
			t.Error("Stats on a closed store: no error")
		}
	})
}

// ObserveCommit sees every committed write and no refused one.
func TestObserveCommit(t *testing.T) {
	t.Parallel()
	var commits []time.Duration
	s := openTest(t, func(o *Options) { o.ObserveCommit = func(d time.Duration) { commits = append(commits, d) } })
	createTask(t, s, "alice", "t_one")
	if len(commits) != 1 || commits[0] <= 0 {
		t.Fatalf("after one create: %v", commits)
	}
	// A duplicate id is refused inside the transaction: rolled back, not
	// committed.
	if _, err := s.CreateTask(context.Background(), NewTask{ID: "t_one", PrincipalID: "alice", Executor: "legacy", Spec: []byte(`{}`), Limits: defaultBudgets()}); err == nil {
		t.Fatal("a duplicate id was accepted")
	}
	if len(commits) != 1 {
		t.Fatalf("a refused write was observed: %v", commits)
	}
}
