package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func finishContinue(t *testing.T, s *Store, task Task, a Attempt, wall int64) Task {
	t.Helper()
	got, err := s.FinishAttempt(context.Background(), FinishAttempt{
		PrincipalID: task.PrincipalID, TaskID: task.ID, RunID: a.RunID, Number: a.Number,
		Status: AttemptCompleted, Outcome: "continue", Summary: "step", WallMillisUsed: wall,
	})
	if err != nil {
		t.Fatalf("FinishAttempt %d: %v", a.Number, err)
	}
	return got
}

func TestStepBudget(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		for _, limit := range []int64{0, 1, 3} {
			t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
				s := open(t)
				ctx := context.Background()
				b := defaultBudgets()
				b.Steps.Limit = limit
				if _, err := s.CreateTask(ctx, NewTask{ID: "t", PrincipalID: "p", Executor: "legacy",
					Spec: []byte(`{}`), Limits: b}); err != nil {
					t.Fatal(err)
				}
				task, err := s.StartRun(ctx, "p", "t", StatusPending)
				if err != nil {
					t.Fatal(err)
				}
				for i := range limit {
					a, got, err := s.ClaimAttempt(ctx, "p", "t", task.RunID, NewEvent{Type: "step.started"})
					if err != nil {
						t.Fatalf("claim %d of %d: %v", i+1, limit, err)
					}
					if a.Number != i+1 || got.Budgets.Steps.Used != i+1 {
						t.Fatalf("claim %d: attempt %d, steps used %d", i+1, a.Number, got.Budgets.Steps.Used)
					}
					task = finishContinue(t, s, got, a, 10*(i+1))
				}
				before := snap(t, s, "p", "t")
				_, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID, NewEvent{Type: "step.started"})
				var be *BudgetError
				if !errors.As(err, &be) || !errors.Is(err, ErrBudgetExhausted) {
					t.Fatalf("claim past the limit: %v, want *BudgetError", err)
				}
				if be.Budget != BudgetSteps || be.Limit != limit || be.Used != limit {
					t.Fatalf("BudgetError = %+v", be)
				}
				if after := snap(t, s, "p", "t"); !reflect.DeepEqual(after, before) {
					t.Fatalf("refused claim wrote something:\nbefore %+v\nafter  %+v", before, after)
				}
				// The schema refuses an over-charge whatever the Go code does.
				if _, err := s.w.ExecContext(ctx, `UPDATE tasks SET steps_used = steps_limit + 1`); !s.d.constraint(err) {
					t.Fatalf("direct over-charge: %v, want a constraint error", err)
				}
			})
		}
	})
}

func TestClaimAttemptRefusals(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "p", "t")

		// A second claim while the first attempt runs is a runner bug.
		before := snap(t, s, "p", "t")
		if _, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID); !errors.Is(err, ErrConflict) {
			t.Fatalf("claim with an attempt running: %v, want ErrConflict", err)
		}
		if after := snap(t, s, "p", "t"); !reflect.DeepEqual(after, before) {
			t.Fatal("refused claim wrote something")
		}
		// Wrong run.
		var te *TransitionError
		if _, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID+1); !errors.As(err, &te) || te.WantRunID != task.RunID+1 {
			t.Fatalf("claim for another run: %v", err)
		}
		finishContinue(t, s, task, a, 1)
		// Not running.
		if _, err := s.Transition(ctx, Transition{PrincipalID: "p", TaskID: "t", From: []Status{StatusRunning}, To: StatusWaitingApproval}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID); !errors.As(err, &te) || te.Current != StatusWaitingApproval {
			t.Fatalf("claim while waiting for approval: %v", err)
		}
		// Finishing an attempt twice, or one that does not exist.
		_, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
			Status: AttemptCompleted, Outcome: "continue"})
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("second finish: %v, want ErrConflict", err)
		}
		_, err = s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: 7,
			Status: AttemptCompleted, Outcome: "continue"})
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("finish of a missing attempt: %v, want ErrNotFound", err)
		}
		if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t", Number: a.Number, Status: AttemptCancelled}); !errors.Is(err, ErrConflict) {
			t.Fatalf("abandon of a finished attempt: %v, want ErrConflict", err)
		}
	})
}

// TestWallNeverGoesBackwards sends wall-time reports out of order through
// every path that records wall time: the stored value only ever grows.
func TestWallNeverGoesBackwards(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "p", "t")
		wall := func() int64 { t.Helper(); return getTask(t, s, "p", "t").Budgets.WallMillis.Used }

		steps := []struct {
			name string
			do   func() error
			want int64
		}{
			{"heartbeat 500", func() error { return s.Heartbeat(ctx, "p", "t", task.RunID, 500) }, 500},
			{"heartbeat 100 (late)", func() error { return s.Heartbeat(ctx, "p", "t", task.RunID, 100) }, 500},
			{"finish with 200", func() error {
				_, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a.Number,
					Status: AttemptCompleted, Outcome: "continue", WallMillisUsed: 200})
				return err
			}, 500},
			{"claim", func() error { var err error; a, _, err = s.ClaimAttempt(ctx, "p", "t", task.RunID); return err }, 500},
			{"heartbeat 700", func() error { return s.Heartbeat(ctx, "p", "t", task.RunID, 700) }, 700},
			{"cancel", func() error { _, err := s.Cancel(ctx, "p", "t"); return err }, 700},
			{"abandon with 300", func() error {
				return s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t", Number: a.Number, Status: AttemptCancelled, Reason: ReasonUserCancelled, WallMillisUsed: 300})
			}, 700},
		}
		for _, st := range steps {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if got := wall(); got != st.want {
				t.Fatalf("after %s: wall %d, want %d", st.name, got, st.want)
			}
		}
		// A crashed-then-abandoned attempt still charges the time it spent.
		task2, a2 := claimedTask(t, s, "p", "t2")
		if _, err := s.Cancel(ctx, "p", "t2"); err != nil {
			t.Fatal(err)
		}
		if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "p", TaskID: "t2", Number: a2.Number, Status: AttemptCancelled, Reason: ReasonUserCancelled, WallMillisUsed: 1234}); err != nil {
			t.Fatal(err)
		}
		if got := getTask(t, s, "p", "t2").Budgets.WallMillis.Used; got != 1234 {
			t.Fatalf("abandoned attempt's wall time: %d, want 1234", got)
		}
		// Heartbeats after the run is over are refused and change nothing.
		if err := s.Heartbeat(ctx, "p", "t2", task2.RunID, 9999); !errors.Is(err, ErrConflict) {
			t.Fatalf("heartbeat of a cancelled task: %v, want ErrConflict", err)
		}
		if got := getTask(t, s, "p", "t2").Budgets.WallMillis.Used; got != 1234 {
			t.Fatalf("refused heartbeat changed wall to %d", got)
		}
		if err := s.Heartbeat(ctx, "p", "t", task.RunID, -1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("negative heartbeat: %v", err)
		}
	})
}

func TestBudgetKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind   BudgetKind
		label  string
		reason Reason
	}{
		{BudgetSteps, "steps", ReasonStepBudgetExhausted},
		{BudgetToolCalls, "tool_calls", ReasonToolBudgetExhausted},
		{BudgetModelCalls, "model_calls", ReasonModelBudgetExhausted},
		{BudgetDepth, "depth", ReasonDepthBudgetExhausted},
		{BudgetWall, "wall", ReasonWallClockExceeded},
		{BudgetModelTokens, "model_tokens", ReasonTokenBudgetExhausted},
		{BudgetOutputBytes, "output_bytes", ReasonOutputBudgetExhausted},
		{0, "BudgetKind(0)", ReasonNone},
		{BudgetOutputBytes + 1, "BudgetKind(8)", ReasonNone},
		{-1, "BudgetKind(-1)", ReasonNone},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			if got := tt.kind.String(); got != tt.label {
				t.Errorf("String() = %q, want %q", got, tt.label)
			}
			if got := tt.kind.Reason(); got != tt.reason {
				t.Errorf("Reason() = %q, want %q", got, tt.reason)
			}
			got, ok := BudgetOf(tt.reason)
			if want := tt.reason != ReasonNone; ok != want || (ok && got != tt.kind) {
				t.Errorf("BudgetOf(%q) = %v, %v; want %v, %v", tt.reason, got, ok, tt.kind, want)
			}
		})
	}
	if len(BudgetKinds()) != 7 {
		t.Errorf("BudgetKinds() = %v, want the seven budgets", BudgetKinds())
	}
	for _, r := range []Reason{ReasonExecutorFailed, ReasonUserCancelled, "steps"} {
		if k, ok := BudgetOf(r); ok {
			t.Errorf("BudgetOf(%q) = %v, true; want no budget", r, k)
		}
	}
}
