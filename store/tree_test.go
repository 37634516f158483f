package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// treeEngines runs a tree test on SQLite and on PostgreSQL (a real server,
// or skipped saying why by testpg).
func treeEngines(t *testing.T, test func(t *testing.T, s *Store)) {
	t.Run("sqlite", func(t *testing.T) { test(t, openTest(t)) })
	t.Run("postgres", func(t *testing.T) { test(t, openPostgres(t)) })
}

func delegate(t testing.TB, s *Store, parent Task, id string, charge int64) (Task, error) {
	t.Helper()
	return s.CreateChild(context.Background(), NewChild{
		Task:     NewTask{ID: id, PrincipalID: parent.PrincipalID, Executor: "legacy", Spec: []byte(`{"goal":"child"}`), Limits: Budgets{Steps: Budget{Limit: charge}, WallMillis: Budget{Limit: 1000}}},
		ParentID: parent.ID, ParentRunID: parent.RunID, Charge: Budgets{Steps: Budget{Used: charge}},
		MaxSubagents: 3, MaxDepth: 2, QueueLimit: 32,
	}, NewEvent{Type: "task.created", Payload: []byte(`{}`)})
}

func mustStatus(t *testing.T, s *Store, id string, st Status, r Reason) Task {
	t.Helper()
	got, err := s.GetTask(context.Background(), "p", id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != st || got.Reason != r {
		t.Fatalf("task %s is %s (%s), want %s (%s)", id, got.Status, got.Reason, st, r)
	}
	return got
}

func block(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, err := s.Transition(context.Background(), Transition{PrincipalID: "p", TaskID: id, From: []Status{StatusRunning}, To: StatusBlocked, Reason: ReasonWaitingChildren}); err != nil {
		t.Fatal(err)
	}
}

func settle(t *testing.T, s *Store) []Task {
	t.Helper()
	ch, err := s.SettleTrees(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// A delegation is charged to its running parent, bounded by depth, by the
// tree's size and by what the parent has left; each refusal writes nothing.
func TestCreateChildBounds(t *testing.T) {
	t.Parallel()
	treeEngines(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		root := runningTask(t, s, "p", "root")
		c1, err := delegate(t, s, root, "c1", 5)
		if err != nil {
			t.Fatal(err)
		}
		if c1.ParentID != "root" || c1.RootID != "root" || c1.TreeDepth != 1 || c1.Status != StatusPending {
			t.Fatalf("child %+v", c1)
		}
		got, _ := s.GetTask(ctx, "p", "root")
		if got.Budgets.Steps.Used != 5 {
			t.Fatalf("parent steps used %d, want 5 (the child's share)", got.Budgets.Steps.Used)
		}
		// More steps than the parent has left (20 - 5): refused, nothing written.
		var tl *TreeLimitError
		if _, err := delegate(t, s, root, "big", 16); !errors.As(err, &tl) || tl.Bound != "max_steps" || tl.Limit != 15 {
			t.Fatalf("over the parent's steps: %v", err)
		}
		if _, err := s.GetTask(ctx, "p", "big"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("refused child was written: %v", err)
		}
		// Exactly what is left is allowed... at depth 2 (max_depth 2).
		c1r, err := s.StartRun(ctx, "p", "c1", StatusPending)
		if err != nil {
			t.Fatal(err)
		}
		g, err := delegate(t, s, c1r, "g", 1)
		if err != nil || g.TreeDepth != 2 || g.RootID != "root" {
			t.Fatalf("grandchild %+v, %v", g, err)
		}
		// Depth 3 is one past max_depth 2.
		gr, _ := s.StartRun(ctx, "p", "g", StatusPending)
		if _, err := delegate(t, s, gr, "gg", 0); !errors.As(err, &tl) || tl.Bound != "max_depth" || tl.Value != 3 {
			t.Fatalf("past max_depth: %v", err)
		}
		// max_subagents 3 per root: c1, g, then a third is the limit, a fourth one past.
		if _, err := delegate(t, s, root, "c2", 1); err != nil {
			t.Fatalf("third delegated task: %v", err)
		}
		if _, err := delegate(t, s, root, "c3", 1); !errors.As(err, &tl) || tl.Bound != "max_subagents" || tl.Value != 3 {
			t.Fatalf("past max_subagents: %v", err)
		}
		// A parent not running in its run cannot delegate.
		stale := root
		stale.RunID++
		var te *TransitionError
		if _, err := delegate(t, s, stale, "c4", 1); !errors.As(err, &te) {
			t.Fatalf("stale parent run: %v", err)
		}
	})
}

// The tree rules: a child's failure fails its parent and cancels the
// parent's other children; a blocked parent wakes when its children have
// all completed; an interrupted parent pauses its subtree; a host-wide
// interruption takes the blocked parent down with it, and only ResumeTree
// brings the tree back, refusing a child whose parent is down.
func TestSettleTrees(t *testing.T) {
	t.Parallel()
	treeEngines(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		root := runningTask(t, s, "p", "root")
		for _, id := range []string{"a", "b"} {
			if _, err := delegate(t, s, root, id, 1); err != nil {
				t.Fatal(err)
			}
		}
		block(t, s, "root")
		if ch := settle(t, s); len(ch) != 0 {
			t.Fatalf("nothing to settle yet, changed %v", ch)
		}
		// a completes; b is still pending: root stays blocked.
		ra, _ := s.StartRun(ctx, "p", "a", StatusPending)
		if _, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "a", From: []Status{StatusRunning}, To: StatusCompleted}); err != nil {
			t.Fatal(err)
		}
		_ = ra
		settle(t, s)
		mustStatus(t, s, "root", StatusBlocked, ReasonWaitingChildren)
		// b crashes (interrupted, executor_crashed): root fails child_failed.
		if _, err := s.StartRun(ctx, "p", "b", StatusPending); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "b", From: []Status{StatusRunning}, To: StatusInterrupted, Reason: ReasonExecutorCrashed}); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		got := mustStatus(t, s, "root", StatusFailed, ReasonChildFailed)
		if got.Message == "" {
			t.Fatal("child_failed names no child")
		}
		// ... and the failed root cancels its subtree's live tasks.
		mustStatus(t, s, "b", StatusCancelled, ReasonParentEnded)
		mustStatus(t, s, "a", StatusCompleted, ReasonNone)

		// A second tree: all children complete, the blocked parent wakes.
		r2 := runningTask(t, s, "p", "r2")
		if _, err := delegate(t, s, r2, "r2a", 1); err != nil {
			t.Fatal(err)
		}
		block(t, s, "r2")
		s.StartRun(ctx, "p", "r2a", StatusPending)
		s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "r2a", From: []Status{StatusRunning}, To: StatusCompleted})
		settle(t, s)
		mustStatus(t, s, "r2", StatusPending, ReasonNone)
		if pos, _ := s.QueuePositions(ctx); pos["r2"] == 0 {
			t.Fatal("woken parent is not in the queue")
		}

		// A third tree, three levels: a host restart interrupts the running
		// grandchild; the blocked nodes above it go down too.
		r3 := runningTask(t, s, "p", "r3")
		delegate(t, s, r3, "r3a", 2)
		block(t, s, "r3")
		r3a, _ := s.StartRun(ctx, "p", "r3a", StatusPending)
		delegate(t, s, r3a, "r3g", 1)
		block(t, s, "r3a")
		s.StartRun(ctx, "p", "r3g", StatusPending)
		if _, err := s.Recover(ctx, 0, nil); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		mustStatus(t, s, "r3g", StatusInterrupted, ReasonHostRestart)
		mustStatus(t, s, "r3a", StatusInterrupted, ReasonHostRestart)
		mustStatus(t, s, "r3", StatusInterrupted, ReasonHostRestart)
		// The grandchild cannot be resumed while its parent is down.
		if _, err := s.ResumeTree(ctx, "p", "r3g", 32, nil); !errors.Is(err, ErrParentDown) {
			t.Fatalf("resume under a down parent: %v", err)
		}
		changed, err := s.ResumeTree(ctx, "p", "r3", 32, nil)
		if err != nil || len(changed) != 3 {
			t.Fatalf("resume tree: %v, %v", changed, err)
		}
		mustStatus(t, s, "r3", StatusBlocked, ReasonWaitingChildren)
		mustStatus(t, s, "r3a", StatusBlocked, ReasonWaitingChildren)
		mustStatus(t, s, "r3g", StatusPending, ReasonNone)
		settle(t, s)
		mustStatus(t, s, "r3", StatusBlocked, ReasonWaitingChildren)

		// Pausing the root pauses the subtree (a settle rule).
		if _, err := s.Pause(ctx, "p", "r3", ReasonUserPause); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		mustStatus(t, s, "r3a", StatusInterrupted, ReasonUserPause)
		mustStatus(t, s, "r3g", StatusInterrupted, ReasonUserPause)
		// Cancelling it cancels the subtree.
		if _, err := s.Cancel(ctx, "p", "r3"); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
		mustStatus(t, s, "r3a", StatusCancelled, ReasonParentEnded)
		mustStatus(t, s, "r3g", StatusCancelled, ReasonParentEnded)
	})
}

// The migration to trees rebuilds the SQLite tasks table in one
// transaction: the rows, their order and the sequence survive, and the new
// status is accepted.
func TestTreeMigrationKeepsTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := sqliteAtVersion(t, 9)
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("old%d", i)
		ids = append(ids, id)
		if _, err := db.ExecContext(ctx, `INSERT INTO tasks (id, principal_id, executor, spec, status, steps_limit, tool_calls_limit, model_calls_limit, depth_limit, wall_ms_limit, created_ns, updated_ns)
			VALUES ($1, 'p', 'legacy', X'7B7D', 'running', 5, 5, 5, 1, 1000, 1, 1)`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO attempts (task_id, number, run_id, status, started_ns) VALUES ($1, 1, 1, 'running', 1)`, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE tasks SET status = 'blocked' WHERE id = 'old0'`); err == nil {
		t.Fatal("v9 accepted status blocked: the test proves nothing")
	}
	db.Close()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts, err := s.ListTasks(ctx, "p", ListQuery{})
	if err != nil || len(ts) != 3 {
		t.Fatalf("tasks after migration: %v, %v", ts, err)
	}
	for i, task := range ts {
		if task.ID != ids[i] || task.Seq != int64(i+1) || task.ParentID != "" || task.TreeDepth != 0 {
			t.Fatalf("task %d after migration: %+v", i, task)
		}
	}
	if as, err := s.ListAttempts(ctx, "p", "old1"); err != nil || len(as) != 1 {
		t.Fatalf("attempts after migration: %v, %v", as, err)
	}
	n := createTask(t, s, "p", "new")
	if n.Seq != 4 {
		t.Fatalf("new task's seq %d, want 4: the sequence did not survive the rebuild", n.Seq)
	}
	if _, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "old0", From: []Status{StatusRunning}, To: StatusBlocked, Reason: ReasonWaitingChildren}); err != nil {
		t.Fatalf("blocked after migration: %v", err)
	}
}

// A child that ended before its parent blocked (the parent's own step
// cancelled it, say) does not fail the parent: the parent waits for its
// other children and wakes when they have ended. One that ends while the
// parent waits does.
func TestSettleTreesChildEndedBeforeBlock(t *testing.T) {
	t.Parallel()
	treeEngines(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		root := runningTask(t, s, "p", "root")
		for _, id := range []string{"a", "b"} {
			if _, err := delegate(t, s, root, id, 1); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Cancel(ctx, "p", "a"); err != nil {
			t.Fatal(err)
		}
		block(t, s, "root")
		settle(t, s)
		mustStatus(t, s, "root", StatusBlocked, ReasonWaitingChildren)
		s.StartRun(ctx, "p", "b", StatusPending)
		s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "b", From: []Status{StatusRunning}, To: StatusCompleted})
		settle(t, s)
		mustStatus(t, s, "root", StatusPending, ReasonNone)
	})
}
