package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// designTable is DESIGN §2's transition table, written out independently of
// legalFrom so that a slip in either is caught.
var designTable = map[Status][]Status{
	// A pause takes a queued task out of the queue (issue 25).
	StatusPending:         {StatusRunning, StatusCancelled, StatusInterrupted},
	StatusRunning:         {StatusWaitingApproval, StatusCompleted, StatusFailed, StatusCancelled, StatusInterrupted},
	StatusWaitingApproval: {StatusRunning, StatusFailed, StatusCancelled, StatusInterrupted},
	// A resume beyond the free slots queues the task (issue 25).
	StatusInterrupted: {StatusRunning, StatusCancelled, StatusPending},
}

func TestLegalMatchesDesign(t *testing.T) {
	t.Parallel()
	for _, from := range allStatuses {
		for _, to := range allStatuses {
			want := false
			for _, x := range designTable[from] {
				want = want || x == to
			}
			if got := Legal(from, to); got != want {
				t.Errorf("Legal(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
}

// pathTo is a legal way from pending to each status.
var pathTo = map[Status][]Status{
	StatusPending:         nil,
	StatusRunning:         {StatusRunning},
	StatusWaitingApproval: {StatusRunning, StatusWaitingApproval},
	StatusCompleted:       {StatusRunning, StatusCompleted},
	StatusFailed:          {StatusRunning, StatusFailed},
	StatusCancelled:       {StatusCancelled},
	StatusInterrupted:     {StatusRunning, StatusInterrupted},
}

// taskIn creates a task and walks it to status st with Transition.
func taskIn(t *testing.T, s *Store, principal, id string, st Status) Task {
	t.Helper()
	task := createTask(t, s, principal, id)
	for _, next := range pathTo[st] {
		var err error
		task, err = s.Transition(context.Background(), Transition{PrincipalID: principal, TaskID: id, From: []Status{task.Status}, To: next})
		if err != nil {
			t.Fatalf("walking %s to %s: %v", id, st, err)
		}
	}
	if task.Status != st {
		t.Fatalf("task %s is %s, want %s", id, task.Status, st)
	}
	return task
}

func TestTransitionEveryPair(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		for _, from := range allStatuses {
			for _, to := range allStatuses {
				t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
					id := fmt.Sprintf("pair-%s-%s", from, to)
					before := taskIn(t, s, "p", id, from)
					snapBefore := snap(t, s, "p", id)
					got, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: id, From: []Status{from}, To: to, Reason: ReasonExecutorFailed, Message: "why", Events: []NewEvent{{Type: "task.changed", Payload: []byte(`{"to":"` + string(to) + `"}`)}}})
					if !Legal(from, to) {
						wantErrIs(t, err, ErrInvalid)
						if after := snap(t, s, "p", id); !reflect.DeepEqual(after, snapBefore) {
							t.Fatalf("illegal transition changed the store:\nbefore %+v\nafter  %+v", snapBefore, after)
						}
						return
					}
					if err != nil {
						t.Fatalf("legal transition: %v", err)
					}
					if got.Status != to || got.Reason != ReasonExecutorFailed || got.Message != "why" {
						t.Fatalf("got status %s reason %q message %q", got.Status, got.Reason, got.Message)
					}
					wantRun := before.RunID
					if to == StatusRunning && (from == StatusPending || from == StatusInterrupted) {
						wantRun++ // a start or resume is a new run; leaving waiting_approval is not
					}
					if got.RunID != wantRun {
						t.Fatalf("run id %d, want %d", got.RunID, wantRun)
					}
					if stored := getTask(t, s, "p", id); !reflect.DeepEqual(stored, got) {
						t.Fatalf("stored %+v\nreturned %+v", stored, got)
					}
					evs := allEvents(t, s, "p", id)
					last := evs[len(evs)-1]
					if len(evs) != len(snapBefore.Events)+1 || last.Type != "task.changed" || last.RunID != got.RunID {
						t.Fatalf("events %+v: want one task.changed in run %d", evs, got.RunID)
					}
				})
			}
		}
	})
}

// TestTransitionCASMiss moves tasks with a legal from-set that does not
// contain their actual status: the compare-and-set must miss, report the
// current status, and change nothing.
func TestTransitionCASMiss(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		for _, actual := range allStatuses {
			for _, to := range allStatuses {
				var from []Status
				for _, f := range legalFrom[to] {
					if f != actual {
						from = append(from, f)
					}
				}
				if len(from) == 0 {
					continue
				}
				t.Run(fmt.Sprintf("%s→%s", actual, to), func(t *testing.T) {
					id := fmt.Sprintf("miss-%s-%s", actual, to)
					taskIn(t, s, "p", id, actual)
					before := snap(t, s, "p", id)
					_, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: id, From: from, To: to, Events: []NewEvent{{Type: "x"}}})
					var te *TransitionError
					if !errors.As(err, &te) || !errors.Is(err, ErrConflict) {
						t.Fatalf("error = %v, want *TransitionError", err)
					}
					if te.Current != actual || te.To != to || te.TaskID != id {
						t.Fatalf("TransitionError = %+v", te)
					}
					if after := snap(t, s, "p", id); !reflect.DeepEqual(after, before) {
						t.Fatalf("refused transition changed the store")
					}
				})
			}
		}
	})
}

func TestTransitionInvalidArguments(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		createTask(t, s, "p", "t")
		before := snap(t, s, "p", "t")
		tests := []struct {
			name    string
			from    []Status
			to      Status
			reason  Reason
			message string
			events  []NewEvent
			want    error
		}{
			{"no from", nil, StatusRunning, ReasonNone, "", nil, ErrInvalid},
			{"unknown to", []Status{StatusPending}, "paused", ReasonNone, "", nil, ErrInvalid},
			{"one illegal pair among legal", []Status{StatusPending, StatusCompleted}, StatusRunning, ReasonNone, "", nil, ErrInvalid},
			{"unknown reason", []Status{StatusPending}, StatusCancelled, "because", "", nil, ErrInvalid},
			{"message too long", []Status{StatusPending}, StatusCancelled, ReasonNone, string(make([]byte, 2001)), nil, ErrTooLarge},
			{"event without type", []Status{StatusPending}, StatusCancelled, ReasonNone, "", []NewEvent{{}}, ErrInvalid},
			{"event payload not an object", []Status{StatusPending}, StatusCancelled, ReasonNone, "", []NewEvent{{Type: "x", Payload: []byte(`[1]`)}}, ErrInvalid},
			{"event payload not JSON", []Status{StatusPending}, StatusCancelled, ReasonNone, "", []NewEvent{{Type: "x", Payload: []byte(`{oops`)}}, ErrInvalid},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "t", From: tt.from, To: tt.to, Reason: tt.reason, Message: tt.message, Events: tt.events})
				wantErrIs(t, err, tt.want)
				if after := snap(t, s, "p", "t"); !reflect.DeepEqual(after, before) {
					t.Fatalf("refused call changed the store")
				}
			})
		}
	})
}

func TestStartRunAndResume(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "p", "t")
		if task.RunID != 1 || a.RunID != 1 || a.Number != 1 {
			t.Fatalf("first run: task run %d, attempt %+v", task.RunID, a)
		}
		if _, err := s.StartRun(ctx, "p", "t", StatusRunning); !errors.Is(err, ErrInvalid) {
			t.Fatalf("StartRun from running: %v, want ErrInvalid", err)
		}
		if _, err := s.StartRun(ctx, "p", "t", StatusPending); !errors.Is(err, ErrConflict) {
			t.Fatalf("StartRun of a running task: %v, want ErrConflict", err)
		}
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: 1, Number: 1,
			Status: AttemptInterrupted, Reason: ReasonExecutorCrashed, ExitCode: -1, ExitSignal: "killed",
			TaskTo: StatusInterrupted, TaskReason: ReasonExecutorCrashed, TaskMessage: "plugin died"}); err != nil {
			t.Fatal(err)
		}
		resumed, err := s.StartRun(ctx, "p", "t", StatusInterrupted, NewEvent{Type: "task.resumed"})
		if err != nil {
			t.Fatal(err)
		}
		if resumed.RunID != 2 || resumed.Reason != ReasonNone || resumed.Message != "" {
			t.Fatalf("resumed: run %d reason %q message %q", resumed.RunID, resumed.Reason, resumed.Message)
		}
		if resumed.Budgets.Steps.Used != 1 {
			t.Fatalf("resume reset the step budget: %+v", resumed.Budgets.Steps)
		}
		// The old run is over: nothing may be claimed or recorded for it.
		if _, _, err := s.ClaimAttempt(ctx, "p", "t", 1); !errors.Is(err, ErrConflict) {
			t.Fatalf("claim for run 1 after resume: %v", err)
		}
		a2, _, err := s.ClaimAttempt(ctx, "p", "t", 2)
		if err != nil || a2.Number != 2 || a2.RunID != 2 {
			t.Fatalf("claim in run 2: %+v %v", a2, err)
		}
		if evs := allEvents(t, s, "p", "t"); evs[len(evs)-1].Type != "task.resumed" || evs[len(evs)-1].RunID != 2 {
			t.Fatalf("task.resumed must carry the new run: %+v", evs[len(evs)-1])
		}
		// Resuming a terminal task is an error.
		if _, err := s.Cancel(ctx, "p", "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartRun(ctx, "p", "t", StatusInterrupted); !errors.Is(err, ErrConflict) {
			t.Fatalf("resume of a cancelled task: %v", err)
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		for _, st := range allStatuses {
			t.Run(string(st), func(t *testing.T) {
				id := "cancel-" + string(st)
				taskIn(t, s, "p", id, st)
				before := snap(t, s, "p", id)
				got, err := s.Cancel(ctx, "p", id, NewEvent{Type: "task.cancelled"})
				switch st {
				case StatusCompleted, StatusFailed:
					var te *TransitionError
					if !errors.As(err, &te) || te.Current != st || te.To != StatusCancelled {
						t.Fatalf("Cancel of %s: %v, want *TransitionError", st, err)
					}
					if after := snap(t, s, "p", id); !reflect.DeepEqual(after, before) {
						t.Fatal("refused cancel changed the store")
					}
				case StatusCancelled:
					// Idempotent: the task back, no error, nothing written.
					if err != nil || !reflect.DeepEqual(got, before.Task) {
						t.Fatalf("Cancel of cancelled: %+v, %v", got, err)
					}
					if after := snap(t, s, "p", id); !reflect.DeepEqual(after, before) {
						t.Fatal("idempotent cancel wrote something")
					}
				default:
					if err != nil || got.Status != StatusCancelled || got.Reason != ReasonUserCancelled {
						t.Fatalf("Cancel of %s: %+v, %v", st, got, err)
					}
					evs := allEvents(t, s, "p", id)
					if len(evs) != len(before.Events)+1 || evs[len(evs)-1].Type != "task.cancelled" {
						t.Fatalf("events after cancel: %+v", evs)
					}
					// A second cancel is a no-op.
					again, err := s.Cancel(ctx, "p", id, NewEvent{Type: "task.cancelled"})
					if err != nil || !reflect.DeepEqual(again, got) || len(allEvents(t, s, "p", id)) != len(evs) {
						t.Fatalf("second cancel: %+v, %v", again, err)
					}
				}
			})
		}
	})
}
