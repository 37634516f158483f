package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestPrincipalIsolation creates tasks for two principals concurrently, then
// tries every per-task call across principals: each must fail exactly like a
// call on an id that does not exist, and change nothing.
func TestPrincipalIsolation(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		const perPrincipal = 8
		s := open(t)
		ctx := context.Background()
		principals := []string{"alice", "bob"}

		var wg sync.WaitGroup
		errs := make(chan error, len(principals)*perPrincipal)
		for _, p := range principals {
			for i := range perPrincipal {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprintf("%s-%d", p, i)
					if _, err := s.CreateTask(ctx, NewTask{ID: id, PrincipalID: p, Executor: "legacy",
						Spec: []byte(`{}`), Limits: defaultBudgets()}); err != nil {
						errs <- err
						return
					}
					task, err := s.StartRun(ctx, p, id, StatusPending)
					if err == nil {
						_, _, err = s.ClaimAttempt(ctx, p, id, task.RunID)
					}
					if err != nil {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}

		// Each principal sees exactly its own tasks.
		for _, p := range principals {
			got, err := s.ListTasks(ctx, p, ListQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != perPrincipal {
				t.Fatalf("%s lists %d tasks, want %d", p, len(got), perPrincipal)
			}
			for _, task := range got {
				if task.PrincipalID != p || !strings.HasPrefix(task.ID, p+"-") {
					t.Fatalf("%s lists %s's task %s", p, task.PrincipalID, task.ID)
				}
			}
		}

		// Every per-task call, as one function of (principal, id).
		calls := []struct {
			name string
			call func(p, id string) error
		}{
			{"GetTask", func(p, id string) error { _, err := s.GetTask(ctx, p, id); return err }},
			{"Cancel", func(p, id string) error { _, err := s.Cancel(ctx, p, id); return err }},
			{"StartRun", func(p, id string) error { _, err := s.StartRun(ctx, p, id, StatusInterrupted); return err }},
			{"Transition", func(p, id string) error {
				_, err := s.Transition(ctx, Transition{PrincipalID: p, TaskID: id, From: []Status{StatusRunning}, To: StatusFailed})
				return err
			}},
			{"ClaimAttempt", func(p, id string) error { _, _, err := s.ClaimAttempt(ctx, p, id, 1); return err }},
			{"FinishAttempt", func(p, id string) error {
				_, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: p, TaskID: id, RunID: 1, Number: 1,
					Status: AttemptCompleted, Outcome: "complete", TaskTo: StatusCompleted})
				return err
			}},
			{"AbandonAttempt", func(p, id string) error {
				return s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: p, TaskID: id, Number: 1, Status: AttemptCancelled, WallMillisUsed: 1})
			}},
			{"Heartbeat", func(p, id string) error { return s.Heartbeat(ctx, p, id, 1, 99) }},
			{"ListAttempts", func(p, id string) error { _, err := s.ListAttempts(ctx, p, id); return err }},
			{"RecentSummaries", func(p, id string) error { _, err := s.RecentSummaries(ctx, p, id, 5); return err }},
			{"AppendEvents", func(p, id string) error {
				_, err := s.AppendEvents(ctx, p, id, 1, NewEvent{Type: "x"})
				return err
			}},
			{"Events", func(p, id string) error { _, err := s.Events(ctx, p, id, 0, 10); return err }},
		}
		before := map[string]snapshot{}
		for _, p := range principals {
			for i := range perPrincipal {
				id := fmt.Sprintf("%s-%d", p, i)
				before[id] = snap(t, s, p, id)
			}
		}
		for _, c := range calls {
			t.Run(c.name, func(t *testing.T) {
				missing := c.call("alice", "no-such-task")
				if !errors.Is(missing, ErrNotFound) {
					t.Fatalf("missing id: %v, want ErrNotFound", missing)
				}
				for i := range perPrincipal {
					id := fmt.Sprintf("bob-%d", i)
					err := c.call("alice", id)
					if !errors.Is(err, ErrNotFound) {
						t.Fatalf("alice on %s: %v, want ErrNotFound", id, err)
					}
					// Indistinguishable: the same error but for the id itself.
					if got, want := strings.ReplaceAll(err.Error(), id, "ID"),
						strings.ReplaceAll(missing.Error(), "no-such-task", "ID"); got != want {
						t.Fatalf("foreign task error %q differs from missing task error %q", got, want)
					}
				}
			})
		}
		for _, p := range principals {
			for i := range perPrincipal {
				id := fmt.Sprintf("%s-%d", p, i)
				if after := snap(t, s, p, id); !reflect.DeepEqual(after, before[id]) {
					t.Fatalf("cross-principal calls changed %s", id)
				}
			}
		}
		// ListTasks with another principal's name as a filter reveals nothing.
		if got, err := s.ListTasks(ctx, "mallory", ListQuery{}); err != nil || len(got) != 0 {
			t.Fatalf("unknown principal lists %d tasks, %v", len(got), err)
		}
	})
}
