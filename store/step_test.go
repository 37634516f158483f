package store

import (
	"context"
	"reflect"
	"testing"
)

// stepFinish is the outcome of attempt n of task "t" in run: continue, a
// checkpoint, one step.completed event.
func stepFinish(run, n int64) FinishAttempt {
	return FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: run, Number: n,
		Status: AttemptCompleted, Outcome: "continue", Summary: "a step", Checkpoint: []byte("cp"), WallMillisUsed: 10 * n,
		Events: []NewEvent{{Type: "step.completed", Payload: []byte(`{"attempt":1}`)}}}
}

// observedResult records an observed model effect with a result kept for
// replay in attempt a.
func observedResult(t *testing.T, s *Store, run, a int64) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := s.AdmitEffect(ctx, NewEffect{PrincipalID: "p", TaskID: "t", RunID: run, Attempt: a, Seq: 1, Kind: EffectModel, Fingerprint: "f"}); err != nil {
		t.Fatal(err)
	}
	for _, to := range []EffectStatus{EffectDispatching, EffectObserved} {
		from := EffectAdmitted
		if to == EffectObserved {
			from = EffectDispatching
		}
		if _, err := s.MarkEffect(ctx, MarkEffect{PrincipalID: "p", TaskID: "t", Attempt: a, Seq: 1, From: from, To: to, Result: []byte(`"reply"`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStepStatements counts the write statements of one durable step
// (FinishAndClaim): the two attempt rows and two more — one task update,
// which also counts the events, one insert of the events — plus the effect
// results' drop only when there are results, and the events' trim (two
// statements) only when the task's count passes its limit by more than
// eventTrimSlack. Each step's effects on the store are checked too.
func TestStepStatements(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// prepare runs before the counted step of attempt a.
		prepare func(t *testing.T, s *Store, run int64, a Attempt) Attempt
		want    int64
	}{
		{"a step without effects", nil, 4},
		{"a step whose attempt kept an effect result", func(t *testing.T, s *Store, run int64, a Attempt) Attempt {
			observedResult(t, s, run, a.Number)
			return a
		}, 5},
		{"a step that brings its task to the limit plus the slack", func(t *testing.T, s *Store, run int64, a Attempt) Attempt {
			return stepTo(t, s, run, a, int64(s.lim.EventsPerTask+eventTrimSlack-2))
		}, 4},
		{"the step that trims events", func(t *testing.T, s *Store, run int64, a Attempt) Attempt {
			return stepTo(t, s, run, a, int64(s.lim.EventsPerTask+eventTrimSlack-1))
		}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t)
			task, a := claimedTask(t, s, "p", "t")
			if tc.prepare != nil {
				a = tc.prepare(t, s, task.RunID, a)
			}
			before := s.statements.Load()
			beforeEvents := allEvents(t, s, "p", "t")
			got, next, exhausted, err := s.FinishAndClaim(ctx, stepFinish(task.RunID, a.Number), NewEvent{Type: "step.started", Payload: []byte(`{"attempt":2}`)})
			if n := s.statements.Load() - before; n != tc.want {
				t.Errorf("%d write statements, want %d", n, tc.want)
			}
			if err != nil || exhausted != nil || next == nil {
				t.Fatalf("next %v exhausted %v err %v", next, exhausted, err)
			}
			if next.Number != a.Number+1 || next.Status != AttemptRunning || next.RunID != task.RunID {
				t.Fatalf("next attempt %+v after %d", next, a.Number)
			}
			stored := getTask(t, s, "p", "t")
			if !reflect.DeepEqual(got, stored) {
				t.Fatalf("returned task %+v, stored %+v", got, stored)
			}
			if stored.Budgets.Steps.Used != next.Number || stored.CheckpointAttempt != a.Number ||
				string(stored.Checkpoint) != "cp" || stored.Budgets.WallMillis.Used != 10*a.Number {
				t.Fatalf("task after the step: %+v", stored)
			}
			atts := listAttempts(t, s, "p", "t")
			if fin := atts[a.Number-1]; fin.Status != AttemptCompleted || fin.Outcome != "continue" || fin.Summary != "a step" || fin.EndedAt.IsZero() {
				t.Fatalf("finished attempt %+v", fin)
			}
			evs := allEvents(t, s, "p", "t")
			last := evs[len(evs)-2:]
			if last[0].Type != "step.completed" || last[1].Type != "step.started" || last[0].Seq >= last[1].Seq ||
				string(last[1].Payload) != `{"attempt":2}` || last[1].RunID != task.RunID {
				t.Fatalf("the step's events: %+v", last)
			}
			want := append(seqs(beforeEvents), seqs(last)...)
			if len(want) > s.lim.EventsPerTask+eventTrimSlack {
				want = want[len(want)-s.lim.EventsPerTask:]
			}
			if n := wantEventsCounted(t, s, "t"); !reflect.DeepEqual(seqs(evs), want) || n != int64(len(want)) {
				t.Fatalf("events %v (%d counted) after the step, want %v", seqs(evs), n, want)
			}
			effs, err := s.ListEffects(ctx, "p", "t")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range effs {
				if e.Result != nil {
					t.Fatalf("effect %d of attempt %d kept its result after the step committed", e.Seq, e.Attempt)
				}
			}
			if n := s.unprepared.Load(); n != 0 {
				t.Fatalf("%d write statements ran unprepared", n)
			}
		})
	}
}

// TestStepRefusalsWriteNothing: a step the store refuses leaves the task,
// its attempts and its events exactly as they were, with the error of the
// general path.
func TestStepRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		finish func(run int64, a, done Attempt) FinishAttempt
		want   error
	}{
		{"an attempt already finished", func(run int64, _, done Attempt) FinishAttempt { return stepFinish(run, done.Number) }, ErrConflict},
		{"an attempt that does not exist", func(run int64, a, _ Attempt) FinishAttempt { return stepFinish(run, a.Number+5) }, ErrNotFound},
		{"another run", func(run int64, a, _ Attempt) FinishAttempt { return stepFinish(run+1, a.Number) }, ErrConflict},
		{"another principal", func(run int64, a, _ Attempt) FinishAttempt {
			f := stepFinish(run, a.Number)
			f.PrincipalID = "mallory"
			return f
		}, ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			task, done := claimedTask(t, s, "p", "t")
			_, a, _, err := s.FinishAndClaim(ctx, stepFinish(task.RunID, done.Number), NewEvent{Type: "step.started"})
			if err != nil {
				t.Fatal(err)
			}
			before := snap(t, s, "p", "t")
			_, next, _, err := s.FinishAndClaim(ctx, tc.finish(task.RunID, *a, done), NewEvent{Type: "step.started"})
			wantErrIs(t, err, tc.want)
			if next != nil {
				t.Fatalf("a refused step claimed attempt %+v", next)
			}
			if after := snap(t, s, "p", "t"); !reflect.DeepEqual(before, after) {
				t.Fatalf("a refused step wrote:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// TestStepDropsResultsOfAnEarlierRun: results kept by an attempt that was
// interrupted in an earlier run are replayed by the next run's attempt and
// dropped when that attempt's outcome commits.
func TestStepDropsResultsOfAnEarlierRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	task, a1 := claimedTask(t, s, "p", "t")
	_, a2, _, err := s.FinishAndClaim(ctx, stepFinish(task.RunID, a1.Number), NewEvent{Type: "step.started"})
	if err != nil {
		t.Fatal(err)
	}
	observedResult(t, s, task.RunID, a2.Number)
	if _, err := s.FinishAttempt(ctx, FinishAttempt{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Number: a2.Number,
		Status: AttemptInterrupted, TaskTo: StatusInterrupted, TaskReason: ReasonExecutorCrashed}); err != nil {
		t.Fatal(err)
	}
	run2, err := s.StartRun(ctx, "p", "t", StatusInterrupted)
	if err != nil {
		t.Fatal(err)
	}
	a3, _, err := s.ClaimAttempt(ctx, "p", "t", run2.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if effs, _ := s.ListEffects(ctx, "p", "t"); len(effs) != 1 || effs[0].Result == nil {
		t.Fatalf("the interrupted attempt's result is not kept for replay: %+v", effs)
	}
	if _, _, _, err := s.FinishAndClaim(ctx, stepFinish(run2.RunID, a3.Number), NewEvent{Type: "step.started"}); err != nil {
		t.Fatal(err)
	}
	if effs, _ := s.ListEffects(ctx, "p", "t"); len(effs) != 1 || effs[0].Result != nil {
		t.Fatalf("the result outlived the outcome that committed its step: %+v", effs)
	}
}

// TestStepEventRetention: the step path lets a task's events run at most
// eventTrimSlack past EventsPerTask, then trims them to exactly the newest
// EventsPerTask; whatever it keeps is the newest of all it wrote, and the
// count is right after every step.
func TestStepEventRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const keep = 10
	const steps = 3 * (eventTrimSlack/2 + 1)
	s := openTest(t, func(o *Options) { o.Limits = Limits{EventsPerTask: keep} })
	if _, err := s.CreateTask(ctx, NewTask{ID: "t", PrincipalID: "p", Executor: "legacy", Spec: []byte(`{}`),
		Limits: Budgets{Steps: Budget{Limit: steps + 1}, WallMillis: Budget{Limit: 1 << 40}}}); err != nil {
		t.Fatal(err)
	}
	task, err := s.StartRun(ctx, "p", "t", StatusPending)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := s.ClaimAttempt(ctx, "p", "t", task.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var written []int64 // every event's seq, oldest first
	var prev int64
	trims := 0
	for range steps {
		_, next, _, err := s.FinishAndClaim(ctx, stepFinish(task.RunID, a.Number), NewEvent{Type: "step.started"})
		if err != nil {
			t.Fatal(err)
		}
		a = *next
		evs := allEvents(t, s, "p", "t")
		n := wantEventsCounted(t, s, "t")
		if n > keep+eventTrimSlack {
			t.Fatalf("attempt %d: %d events kept, bound %d + %d", a.Number, n, keep, eventTrimSlack)
		}
		written = append(written, seqs(evs[len(evs)-2:])...)
		if got, want := seqs(evs), written[len(written)-len(evs):]; !reflect.DeepEqual(got, want) {
			t.Fatalf("attempt %d: kept %v, want the newest %v", a.Number, got, want)
		}
		if n < prev+2 {
			trims++
			if n != keep || prev+2 <= keep+eventTrimSlack {
				t.Fatalf("attempt %d: %d events after a trim from %d, want the newest %d of more than %d",
					a.Number, n, prev+2, keep, keep+eventTrimSlack)
			}
		}
		prev = n
	}
	if trims < 2 {
		t.Fatalf("%d trims in %d steps", trims, steps)
	}
}
