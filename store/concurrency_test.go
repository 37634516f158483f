package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// TestTwoStoresOneFile writes through two Stores on one file — as two
// processes would — concurrently. Write transactions begin IMMEDIATE, so a
// read-then-write transaction waits for the other writer (busy_timeout)
// instead of failing with SQLITE_BUSY on lock upgrade.
func TestTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "taskhost.db")
	var stores []*Store
	for range 2 {
		s, err := Open(ctx, path, Options{Synchronous: "NORMAL"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	const perStore = 100
	var wg sync.WaitGroup
	errs := make(chan error, 2*perStore)
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perStore {
				id := fmt.Sprintf("s%d-%d", i, j)
				if _, err := s.CreateTask(ctx, NewTask{ID: id, PrincipalID: "p", Executor: "legacy",
					Spec: []byte(`{}`), Limits: defaultBudgets()}); err != nil {
					errs <- err
					return
				}
				// FinishAttempt and AppendEvents read before they write: the
				// transactions that would fail on lock upgrade if deferred.
				task, err := s.StartRun(ctx, "p", id, StatusPending)
				var a Attempt
				if err == nil {
					a, _, err = s.ClaimAttempt(ctx, "p", id, task.RunID, NewEvent{Type: "step.started"})
				}
				if err == nil {
					_, err = s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: id, RunID: task.RunID,
						Number: a.Number, Status: AttemptCompleted, Outcome: "continue"})
				}
				if err == nil {
					_, err = s.AppendEvents(ctx, "p", id, task.RunID, NewEvent{Type: "note"})
				}
				if err == nil {
					_, err = s.Cancel(ctx, "p", id)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Each store sees the other's writes.
	for _, s := range stores {
		list, err := s.ListTasks(ctx, "p", ListQuery{Limit: 1000})
		if err != nil || len(list) != 2*perStore {
			t.Fatalf("%d tasks listed, %v", len(list), err)
		}
	}
}

// TestConcurrentReadersAndWriter reads through the reader pool while the
// writer commits: every read sees a committed state (steps used equals the
// number of attempts), never a half-written one.
func TestConcurrentReadersAndWriter(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task := runningTask(t, s, "p", "t")
		const steps = 20 // the task's step budget
		done := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					default:
					}
					// One read transaction, so both counts come from one snapshot.
					tx, err := s.r.BeginTx(ctx, s.d.readTx())
					if err != nil {
						errs <- err
						return
					}
					var used, attempts int64
					err = tx.QueryRow(`SELECT steps_used, (SELECT count(*) FROM attempts WHERE task_id = 't') FROM tasks WHERE id = 't'`).Scan(&used, &attempts)
					tx.Rollback()
					if err != nil {
						errs <- err
						return
					}
					if used != attempts {
						errs <- fmt.Errorf("read a half-written claim: steps used %d, attempts %d", used, attempts)
						return
					}
				}
			}()
		}
		for range steps {
			a, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID)
			if err != nil {
				t.Fatal(err)
			}
			finishContinue(t, s, task, a, 1)
		}
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}
