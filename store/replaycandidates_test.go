package store

import (
	"context"
	"fmt"
	"testing"
)

// What a re-run may replay out of place: the earlier attempts' own observed
// runs with a kept result, by fingerprint in recorded order — not a replay
// (it repeats one of them), not an unsettled or unreplayable one, not an
// approval, not the attempt's own, and nothing once an attempt commits.
func TestReplayCandidates(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a1 := claimedTask(t, s, "alice", "t1")
		effect := func(attempt, seq int64, kind EffectKind, fp string, to EffectStatus, result []byte) {
			t.Helper()
			e := NewEffect{PrincipalID: "alice", TaskID: "t1", RunID: task.RunID, Attempt: attempt, Seq: seq, Kind: kind, Fingerprint: fp}
			if to == "replay" {
				e.Replay, e.Result = true, result
			}
			if _, _, err := s.AdmitEffect(ctx, e); err != nil {
				t.Fatal(err)
			}
			if to == "replay" {
				return
			}
			mark := MarkEffect{PrincipalID: "alice", TaskID: "t1", Attempt: attempt, Seq: seq, From: EffectAdmitted, To: EffectDispatching}
			if _, err := s.MarkEffect(ctx, mark); err != nil {
				t.Fatal(err)
			}
			if to == EffectObserved {
				mark.From, mark.To, mark.Result = EffectDispatching, EffectObserved, result
				if _, err := s.MarkEffect(ctx, mark); err != nil {
					t.Fatal(err)
				}
			}
		}
		next := func(a Attempt) Attempt {
			t.Helper()
			if err := s.AbandonAttempt(ctx, AbandonAttempt{PrincipalID: "alice", TaskID: "t1", Number: a.Number, Status: AttemptInterrupted, Reason: ReasonExecutorCrashed}); err != nil {
				t.Fatal(err)
			}
			n, _, err := s.ClaimAttempt(ctx, "alice", "t1", task.RunID)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		effect(a1.Number, 1, EffectModel, "a", EffectObserved, []byte(`"a1"`))
		effect(a1.Number, 2, EffectTool, "b", EffectObserved, []byte(`"b1"`))
		effect(a1.Number, 3, EffectTool, "b", EffectDispatching, nil) // indeterminate after the crash
		effect(a1.Number, 4, EffectTool, "c", EffectObserved, nil)    // observed, too large to keep
		effect(a1.Number, 1<<40+1, EffectApproval, "p", EffectObserved, []byte(`"approved"`))
		a2 := next(a1)
		if got, err := s.ReplayCandidates(ctx, "alice", "t1", a1.Number); err != nil || len(got) != 0 {
			t.Fatalf("the first attempt's candidates: %v %v", got, err)
		}
		effect(a2.Number, 1, EffectTool, "b", "replay", []byte(`"b1"`))
		effect(a2.Number, 2, EffectModel, "a", EffectObserved, []byte(`"a2"`))
		a3 := next(a2)
		got, err := s.ReplayCandidates(ctx, "alice", "t1", a3.Number)
		want := fmt.Sprint(map[string][]EffectRef{"a": {{a1.Number, 1}, {a2.Number, 2}}, "b": {{a1.Number, 2}}})
		if err != nil || fmt.Sprint(got) != want {
			t.Fatalf("candidates %v %v, want %s", got, err, want)
		}
		if got, err := s.ReplayCandidates(ctx, "alice", "t1", a2.Number); err != nil || len(got["a"]) != 1 {
			t.Fatalf("attempt 2's candidates %v %v: attempt 2's own run is not one", got, err)
		}
		if e, ok, err := s.ReplayableAt(ctx, "alice", "t1", EffectRef{a2.Number, 2}); err != nil || !ok || string(e.Result) != `"a2"` {
			t.Fatalf("replayable at (2, 2): %+v %v %v", e, ok, err)
		}
		for _, ref := range []EffectRef{{a1.Number, 3}, {a1.Number, 4}, {a1.Number, 9}} {
			if _, ok, err := s.ReplayableAt(ctx, "alice", "t1", ref); err != nil || ok {
				t.Fatalf("replayable at %v: %v %v", ref, ok, err)
			}
		}
		if _, err := s.ReplayCandidates(ctx, "bob", "t1", a3.Number); err == nil {
			t.Fatal("another principal read the task's candidates")
		}
		if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "alice", TaskID: "t1", RunID: task.RunID, Number: a3.Number, Status: AttemptCompleted, Outcome: "continue"}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ReplayCandidates(ctx, "alice", "t1", a3.Number+1); err != nil || len(got) != 0 {
			t.Fatalf("candidates after the step committed: %v %v", got, err)
		}
	})
}
