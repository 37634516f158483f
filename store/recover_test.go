package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// recoverFixture has one task in every status; the live ones (and a
// cancelled one whose runner died before abandoning it) hold a running
// attempt, as after a host crash.
func recoverFixture(t *testing.T, s *Store) map[Status]Task {
	t.Helper()
	ctx := context.Background()
	tasks := map[Status]Task{}
	for _, st := range allStatuses {
		id := "rec-" + string(st)
		task := taskIn(t, s, "p-"+string(st), id, StatusPending)
		if st != StatusPending {
			var err error
			if task, err = s.StartRun(ctx, task.PrincipalID, id, StatusPending); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.ClaimAttempt(ctx, task.PrincipalID, id, task.RunID); err != nil {
				t.Fatal(err)
			}
			if st != StatusRunning {
				task = forceTo(t, s, task, st)
			}
		}
		tasks[st] = getTask(t, s, task.PrincipalID, id)
	}
	return tasks
}

// forceTo moves a running task to st with a legal path.
func forceTo(t *testing.T, s *Store, task Task, st Status) Task {
	t.Helper()
	path := map[Status][]Status{
		StatusWaitingApproval: {StatusWaitingApproval},
		StatusCompleted:       {StatusCompleted},
		StatusFailed:          {StatusFailed},
		StatusCancelled:       {StatusCancelled},
		StatusInterrupted:     {StatusInterrupted},
	}[st]
	for _, next := range path {
		var err error
		task, err = s.Transition(context.Background(), Transition{PrincipalID: task.PrincipalID, TaskID: task.ID, From: []Status{task.Status}, To: next})
		if err != nil {
			t.Fatal(err)
		}
	}
	return task
}

func TestRecover(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		for _, tc := range []struct {
			name   string
			reason Reason
			run    func(s *Store, events func(Task) []NewEvent) ([]string, int, error)
		}{
			{"Recover", ReasonHostRestart, func(s *Store, events func(Task) []NewEvent) ([]string, int, error) {
				r, err := s.Recover(context.Background(), 0, events)
				return r.Interrupted, r.AttemptsClosed, err
			}},
			{"InterruptRunning", ReasonHostShutdown, func(s *Store, events func(Task) []NewEvent) ([]string, int, error) {
				ids, err := s.InterruptRunning(context.Background(), ReasonHostShutdown, events)
				return ids, -1, err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := open(t)
				tasks := recoverFixture(t, s)
				before := map[Status]snapshot{}
				for st, task := range tasks {
					before[st] = snap(t, s, task.PrincipalID, task.ID)
				}
				var seen []Task
				ids, closed, err := tc.run(s, func(task Task) []NewEvent {
					seen = append(seen, task)
					return []NewEvent{{Type: "task.interrupted", Payload: []byte(fmt.Sprintf(`{"reason":%q}`, task.Reason))}}
				})
				if err != nil {
					t.Fatal(err)
				}
				live := []Status{StatusRunning, StatusWaitingApproval}
				if want := []string{tasks[live[0]].ID, tasks[live[1]].ID}; !reflect.DeepEqual(ids, want) {
					t.Fatalf("interrupted %v, want %v (creation order)", ids, want)
				}
				// Running attempts of every task are closed: the two live ones,
				// plus the ones a dead runner left open under the tasks it had
				// already moved on (cancelled, completed, failed, interrupted).
				if closed != -1 && closed != 6 {
					t.Fatalf("closed %d attempts, want 6", closed)
				}
				for _, st := range allStatuses {
					task := tasks[st]
					after := snap(t, s, task.PrincipalID, task.ID)
					for _, a := range after.Attempts {
						if a.Status == AttemptRunning {
							t.Fatalf("%s: attempt %d still running", st, a.Number)
						}
					}
					if st != StatusRunning && st != StatusWaitingApproval {
						if !reflect.DeepEqual(after.Task, before[st].Task) || !reflect.DeepEqual(after.Events, before[st].Events) {
							t.Fatalf("%s task was touched:\nbefore %+v\nafter  %+v", st, before[st].Task, after.Task)
						}
						continue
					}
					if after.Task.Status != StatusInterrupted || after.Task.Reason != tc.reason || after.Task.RunID != task.RunID {
						t.Fatalf("%s task after recovery: %+v", st, after.Task)
					}
					a := after.Attempts[0]
					if a.Status != AttemptInterrupted || a.Reason != tc.reason || a.EndedAt.IsZero() {
						t.Fatalf("%s attempt after recovery: %+v", st, a)
					}
					if n := len(after.Events) - len(before[st].Events); n != 1 {
						t.Fatalf("%s: %d events appended, want 1", st, n)
					}
					ev := after.Events[len(after.Events)-1]
					if ev.Type != "task.interrupted" || string(ev.Payload) != fmt.Sprintf(`{"reason":%q}`, tc.reason) || ev.RunID != task.RunID {
						t.Fatalf("%s event: %+v", st, ev)
					}
				}
				if len(seen) != 2 || seen[0].Status != StatusInterrupted {
					t.Fatalf("events callback saw %+v", seen)
				}
				// The old runner's late outcome cannot commit, and the task can
				// be resumed explicitly.
				task := tasks[StatusRunning]
				_, err = s.FinishAttempt(context.Background(), FinishAttempt{PrincipalID: task.PrincipalID, TaskID: task.ID,
					RunID: task.RunID, Number: 1, Status: AttemptCompleted, Outcome: "complete", TaskTo: StatusCompleted})
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("late finish after recovery: %v, want ErrConflict", err)
				}
				if _, err := s.StartRun(context.Background(), task.PrincipalID, task.ID, StatusInterrupted); err != nil {
					t.Fatalf("resume after recovery: %v", err)
				}
				// Recovery is idempotent: nothing is live now but the resumed task.
				ids, _, err = tc.run(s, nil)
				if err != nil || len(ids) != 1 || ids[0] != task.ID {
					t.Fatalf("second recovery: %v, %v", ids, err)
				}
			})
		}
	})
}

// TestRecoverRefusesBadEvents checks that recovery is all-or-nothing: an
// event that breaks a limit rolls back every change.
func TestRecoverRefusesBadEvents(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		tasks := recoverFixture(t, s)
		before := snap(t, s, tasks[StatusRunning].PrincipalID, tasks[StatusRunning].ID)
		_, err := s.Recover(context.Background(), 0, func(task Task) []NewEvent {
			return []NewEvent{{Type: "task.interrupted", Payload: jsonOfSize(2000)}}
		})
		wantErrIs(t, err, ErrTooLarge)
		if after := snap(t, s, tasks[StatusRunning].PrincipalID, tasks[StatusRunning].ID); !reflect.DeepEqual(after, before) {
			t.Fatal("failed recovery left changes behind")
		}
		if _, err := s.InterruptRunning(context.Background(), "power_cut", nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("unknown reason: %v", err)
		}
	})
}

// TestRecoverAfterKillSQLite copies a live store's files mid-run — what a
// SIGKILLed host leaves — opens the copy like a restarted host and recovers
// it: every committed change is there, and the live task is interrupted.
// SQLite-only: it copies the store's files (PostgreSQL's equivalent is the
// host-level restart test).
func TestRecoverAfterKillSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	task, a := claimedTask(t, s, "p", "t")
	finishContinue(t, s, task, a, 42)
	if _, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(t.TempDir(), "taskhost.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(s.Path() + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(image+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(ctx, image, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	r, err := s2.Recover(ctx, 0, nil)
	if err != nil || !reflect.DeepEqual(r, Recovery{Interrupted: []string{"t"}, AttemptsClosed: 1}) {
		t.Fatalf("Recover = %+v, %v", r, err)
	}
	got := getTask(t, s2, "p", "t")
	if got.Status != StatusInterrupted || got.Budgets.Steps.Used != 2 || got.Budgets.WallMillis.Used != 42 {
		t.Fatalf("recovered task: %+v", got)
	}
	as := listAttempts(t, s2, "p", "t")
	if len(as) != 2 || as[0].Status != AttemptCompleted || as[1].Status != AttemptInterrupted || as[1].Reason != ReasonHostRestart {
		t.Fatalf("recovered attempts: %+v", as)
	}
}
