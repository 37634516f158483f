package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// waitingTask is a task whose claimed attempt waits on a pending approval.
func waitingTask(t testing.TB, s *Store, id string) (Task, Approval) {
	t.Helper()
	task, a := claimedTask(t, s, "alice", id)
	ap, task, err := s.RequestApproval(context.Background(), NewApproval{
		ID: "a_" + id, PrincipalID: "alice", TaskID: id, RunID: task.RunID, Attempt: a.Number, Seq: 1,
		Tool: "shell.run", Prompt: "run tool shell.run{command:5B}", ExpiresAt: time.Now().Add(time.Hour),
	}, NewEvent{Type: "task.waiting_approval"})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != StatusWaitingApproval || ap.Status != ApprovalPending {
		t.Fatalf("after request: task %s, approval %s", task.Status, ap.Status)
	}
	return task, ap
}

// Two resolutions race 1000 times: exactly one wins each time, and the
// task's state always matches the winner.
func TestApprovalRaces(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		type op struct {
			name string
			do   func(s *Store, id, approval string) error
		}
		approve := op{"approve", func(s *Store, id, ap string) error {
			_, _, err := s.ResolveApproval(context.Background(), "alice", ap, ApprovalApproved)
			return err
		}}
		expire := op{"expire", func(s *Store, id, ap string) error {
			_, _, err := s.ResolveApproval(context.Background(), "alice", ap, ApprovalExpired)
			return err
		}}
		reject := op{"reject", func(s *Store, id, ap string) error {
			_, _, err := s.ResolveApproval(context.Background(), "alice", ap, ApprovalRejected)
			return err
		}}
		cancel := op{"cancel", func(s *Store, id, ap string) error {
			_, err := s.Cancel(context.Background(), "alice", id)
			return err
		}}
		for _, pair := range [][2]op{{cancel, approve}, {approve, expire}, {reject, approve}} {
			t.Run(pair[0].name+"_vs_"+pair[1].name, func(t *testing.T) {
				s := open(t)
				wins := map[string]int{}
				for i := range 1000 {
					id := fmt.Sprintf("t%d", i)
					_, ap := waitingTask(t, s, id)
					var wg sync.WaitGroup
					errs := make([]error, 2)
					for k := range 2 {
						wg.Add(1)
						go func() { defer wg.Done(); errs[k] = pair[k].do(s, id, ap.ID) }()
					}
					wg.Wait()
					task := getTask(t, s, "alice", id)
					got, err := s.GetApproval(context.Background(), "alice", ap.ID)
					if err != nil {
						t.Fatal(err)
					}
					if pair[0].name == "cancel" {
						// A cancel always lands (the task is live either way);
						// what races is the approval: approved before the
						// cancel, or cancelled with it — never approved after.
						if errs[0] != nil || task.Status != StatusCancelled {
							t.Fatalf("round %d: cancel %v, task %s", i, errs[0], task.Status)
						}
						switch {
						case errs[1] == nil && got.Status == ApprovalApproved:
							wins["approve first"]++
						case errors.Is(errs[1], ErrConflict) && got.Status == ApprovalCancelled:
							wins["cancel first"]++
						default:
							t.Fatalf("round %d: approve %v, approval %s", i, errs[1], got.Status)
						}
						continue
					}
					won := -1
					for k := range 2 {
						if errs[k] == nil {
							if won >= 0 {
								t.Fatalf("round %d: both %s and %s succeeded", i, pair[0].name, pair[1].name)
							}
							won = k
						} else if !errors.Is(errs[k], ErrConflict) {
							t.Fatalf("round %d: %s lost with an untyped error: %v", i, pair[k].name, errs[k])
						}
					}
					if won < 0 {
						t.Fatalf("round %d: neither won: %v", i, errs)
					}
					wins[pair[won].name]++
					switch pair[won].name {
					case "cancel":
						if task.Status != StatusCancelled || got.Status != ApprovalCancelled {
							t.Fatalf("round %d: cancel won but task %s approval %s", i, task.Status, got.Status)
						}
					case "approve":
						if task.Status != StatusRunning || got.Status != ApprovalApproved {
							t.Fatalf("round %d: approve won but task %s approval %s", i, task.Status, got.Status)
						}
					case "expire":
						if task.Status != StatusFailed || task.Reason != ReasonApprovalTimeout || got.Status != ApprovalExpired {
							t.Fatalf("round %d: expire won but task %s (%s) approval %s", i, task.Status, task.Reason, got.Status)
						}
					case "reject":
						if task.Status != StatusFailed || task.Reason != ReasonApprovalRejected || got.Status != ApprovalRejected {
							t.Fatalf("round %d: reject won but task %s (%s) approval %s", i, task.Status, task.Reason, got.Status)
						}
					}
				}
				t.Logf("wins: %v", wins)
			})
		}
	})
}

func TestApprovalPrincipalAndBounds(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		_, ap := waitingTask(t, s, "t1")
		if _, _, err := s.ResolveApproval(context.Background(), "bob", ap.ID, ApprovalApproved); !errors.Is(err, ErrNotFound) {
			t.Fatalf("bob resolves alice's approval: %v", err)
		}
		if list, _ := s.ListApprovals(context.Background(), "bob", ""); len(list) != 0 {
			t.Fatalf("bob lists %d of alice's approvals", len(list))
		}
		task, a := claimedTask(t, s, "alice", "t2")
		for _, n := range []int{maxApprovalPrompt, maxApprovalPrompt + 1} {
			_, _, err := s.RequestApproval(context.Background(), NewApproval{ID: fmt.Sprintf("a%d", n), PrincipalID: "alice", TaskID: "t2",
				RunID: task.RunID, Attempt: a.Number, Seq: 1, Prompt: string(make([]byte, n)), ExpiresAt: time.Now()})
			if n > maxApprovalPrompt {
				var le *LimitError
				if !errors.As(err, &le) || le.Field != "approval prompt" {
					t.Fatalf("prompt of %d bytes: %v", n, err)
				}
				if got := getTask(t, s, "alice", "t2"); got.Status != StatusWaitingApproval {
					t.Fatalf("a refused request changed the task to %s", got.Status)
				}
			} else if err != nil {
				t.Fatalf("prompt at the limit: %v", err)
			}
		}
	})
}

func TestRecoverSettlesEffectsAndApprovals(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "alice", "t1")
		admit := func(seq int64, kind EffectKind) {
			if _, _, err := s.AdmitEffect(ctx, NewEffect{PrincipalID: "alice", TaskID: "t1", RunID: task.RunID, Attempt: a.Number, Seq: seq, Kind: kind, Fingerprint: fmt.Sprint("f", seq)}); err != nil {
				t.Fatal(err)
			}
		}
		admit(1, EffectTool)
		admit(2, EffectTool)
		if _, err := s.MarkEffect(ctx, MarkEffect{PrincipalID: "alice", TaskID: "t1", Attempt: a.Number, Seq: 1, From: EffectAdmitted, To: EffectDispatching}); err != nil {
			t.Fatal(err)
		}
		_, ap := waitingTask(t, s, "t2")
		if _, err := s.Recover(ctx, 0, nil); err != nil {
			t.Fatal(err)
		}
		effs, _ := s.ListEffects(ctx, "alice", "t1")
		if len(effs) != 2 || effs[0].Status != EffectIndeterminate || effs[1].Status != EffectFailed {
			t.Fatalf("effects after recovery: %+v", effs)
		}
		if got, _ := s.GetApproval(ctx, "alice", ap.ID); got.Status != ApprovalCancelled {
			t.Fatalf("approval after recovery: %s", got.Status)
		}
		ind, _ := s.IndeterminateEffects(ctx, "alice", "t1")
		if len(ind) != 1 || ind[0].Seq != 1 {
			t.Fatalf("indeterminate: %+v", ind)
		}
	})
}

func TestEffectBudgetsAndReplay(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "alice", "t1") // tool limit 50, model limit 50, depth 1
		e := NewEffect{PrincipalID: "alice", TaskID: "t1", RunID: task.RunID, Attempt: a.Number, Kind: EffectModel, Fingerprint: "f"}
		e.Seq, e.Depth = 1, 2
		var be *BudgetError
		if _, _, err := s.AdmitEffect(ctx, e); !errors.As(err, &be) || be.Budget != BudgetDepth {
			t.Fatalf("depth 2 with limit 1: %v", err)
		}
		e.Depth = 1
		if _, got, err := s.AdmitEffect(ctx, e); err != nil || got.Budgets.Depth.Used != 1 || got.Budgets.ModelCalls.Used != 1 {
			t.Fatalf("depth 1: %+v %v", got.Budgets, err)
		}
		if _, err := s.MarkEffect(ctx, MarkEffect{PrincipalID: "alice", TaskID: "t1", Attempt: a.Number, Seq: 1, From: EffectAdmitted, To: EffectDispatching}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkEffect(ctx, MarkEffect{PrincipalID: "alice", TaskID: "t1", Attempt: a.Number, Seq: 1, From: EffectDispatching, To: EffectObserved, Result: []byte(`"r"`)}); err != nil {
			t.Fatal(err)
		}
		// The attempt dies; the next attempt of the same step finds the result.
		if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "alice", TaskID: "t1", Number: a.Number, Status: AttemptInterrupted, Reason: ReasonExecutorCrashed}); err != nil {
			t.Fatal(err)
		}
		a2, _, err := s.ClaimAttempt(ctx, "alice", "t1", task.RunID)
		if err != nil {
			t.Fatal(err)
		}
		prev, ok, err := s.Replayable(ctx, "alice", "t1", a2.Number, 1, "f")
		if err != nil || !ok || string(prev.Result) != `"r"` {
			t.Fatalf("replayable: %+v %v %v", prev, ok, err)
		}
		if _, _, ok, _ := replayableOther(s, a2.Number); ok {
			t.Fatal("a different fingerprint replayed")
		}
		// Once an attempt's outcome commits, nothing is kept for replay.
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "alice", TaskID: "t1", RunID: task.RunID, Number: a2.Number, Status: AttemptCompleted, Outcome: "continue"}); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.Replayable(ctx, "alice", "t1", a2.Number+1, 1, "f"); ok {
			t.Fatal("a result survived its attempt's commit")
		}
		if err := checkSize("x", MaxEffectResult+1, MaxEffectResult); err == nil {
			t.Fatal("checkSize passed past the limit")
		}
		if _, err := s.MarkEffect(ctx, MarkEffect{PrincipalID: "alice", TaskID: "t1", Attempt: a.Number, Seq: 1, From: EffectObserved, To: EffectFailed}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("observed → failed: %v", err)
		}
	})
}

func replayableOther(s *Store, attempt int64) (Effect, int, bool, error) {
	e, ok, err := s.Replayable(context.Background(), "alice", "t1", attempt, 1, "other")
	return e, 0, ok, err
}
