package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestTokenAndOutputBudgets: a model call is admitted while its prompt's
// estimate fits what is left of max_model_tokens and output is left;
// observing it charges its tokens and output in full, at the limit and one
// past it.
func TestTokenAndOutputBudgets(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		for _, tc := range []struct {
			name            string
			tokens, output  int64 // charged by the first call
			wantOver        BudgetKind
			secondRefusedBy BudgetKind
		}{
			{name: "under", tokens: 99, output: 9, secondRefusedBy: BudgetModelTokens},
			{name: "tokens at limit", tokens: 100, output: 9, secondRefusedBy: BudgetModelTokens},
			{name: "tokens one past", tokens: 101, output: 9, wantOver: BudgetModelTokens, secondRefusedBy: BudgetModelTokens},
			{name: "output at limit", tokens: 10, output: 10, secondRefusedBy: BudgetOutputBytes},
			{name: "output one past", tokens: 10, output: 11, wantOver: BudgetOutputBytes, secondRefusedBy: BudgetOutputBytes},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := open(t)
				ctx := context.Background()
				b := defaultBudgets()
				b.ModelTokens.Limit, b.OutputBytes.Limit = 100, 10
				if _, err := s.CreateTask(ctx, NewTask{ID: "t", PrincipalID: "p", Executor: "legacy", Spec: []byte(`{}`), Limits: b}); err != nil {
					t.Fatal(err)
				}
				task, err := s.StartRun(ctx, "p", "t", StatusPending)
				if err != nil {
					t.Fatal(err)
				}
				a, task, err := s.ClaimAttempt(ctx, "p", "t", task.RunID)
				if err != nil {
					t.Fatal(err)
				}
				e := NewEffect{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Attempt: a.Number, Seq: 1, Kind: EffectModel, Fingerprint: "f1", Tokens: 100}
				var be *BudgetError
				e.Tokens = 101
				if _, _, err := s.AdmitEffect(ctx, e); !errors.As(err, &be) || be.Budget != BudgetModelTokens || be.Need != 101 {
					t.Fatalf("a prompt one past the token budget: %v, want a model_tokens *BudgetError", err)
				}
				e.Tokens = 100 // a prompt at the limit is admitted
				if _, _, err := s.AdmitEffect(ctx, e); err != nil {
					t.Fatalf("a prompt at the token budget: %v", err)
				}
				if _, err := s.MarkEffect(ctx, MarkEffect{PrincipalID: "p", TaskID: "t", Attempt: a.Number, Seq: 1, From: EffectAdmitted, To: EffectDispatching}); err != nil {
					t.Fatal(err)
				}
				u := ModelUsage{Calls: 1, PromptTokens: tc.tokens - 1, CompletionTokens: 1}
				_, got, err := s.ObserveEffect(ctx, MarkEffect{PrincipalID: "p", TaskID: "t", Attempt: a.Number, Seq: 1,
					From: EffectDispatching, To: EffectObserved, Result: []byte(`"r"`)}, Charge{Tokens: tc.tokens, Estimated: true, OutputBytes: tc.output, Usage: u})
				if err != nil {
					t.Fatal(err)
				}
				if got.Budgets.ModelTokens.Used != tc.tokens || got.Budgets.OutputBytes.Used != tc.output || got.Budgets.TokensEstimated != 1 {
					t.Fatalf("charged budgets %+v, want tokens %d, output %d, 1 estimated", got.Budgets, tc.tokens, tc.output)
				}
				if k, over := got.Budgets.Over(); k != tc.wantOver || over != (tc.wantOver != 0) {
					t.Fatalf("Over() = %v %v, want %v", k, over, tc.wantOver)
				}
				if total, _, err := s.TaskModelUsage(ctx, "p", "t"); err != nil || total != u {
					t.Fatalf("model usage %+v %v, want %+v in the charge's transaction", total, err, u)
				}
				// The next call finds the budget spent: refused before it
				// runs, nothing written.
				before := snap(t, s, "p", "t")
				e.Seq, e.Fingerprint, e.Tokens = 2, "f2", 1
				if _, _, err := s.AdmitEffect(ctx, e); !errors.As(err, &be) || be.Budget != tc.secondRefusedBy {
					if tc.name != "under" || err != nil {
						t.Fatalf("next model call: %v, want a %v *BudgetError", err, tc.secondRefusedBy)
					}
					return // 99 tokens used of 100: one more fits
				}
				if after := snap(t, s, "p", "t"); !reflect.DeepEqual(after, before) {
					t.Fatalf("a refused call wrote something:\nbefore %+v\nafter  %+v", before, after)
				}
				if tc.secondRefusedBy == BudgetOutputBytes {
					tool := NewEffect{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Attempt: a.Number, Seq: 3, Kind: EffectTool, Fingerprint: "f3"}
					if _, _, err := s.AdmitEffect(ctx, tool); !errors.As(err, &be) || be.Budget != BudgetOutputBytes {
						t.Fatalf("a tool call with no output left: %v, want an output_bytes *BudgetError", err)
					}
				}
			})
		}
	})
}

// TestObserveEffectRefusals: a charge out of range, or of an effect that is
// not dispatching, writes nothing.
func TestObserveEffectRefusals(t *testing.T) {
	t.Parallel()
	forDrivers(t, func(t *testing.T, open opener) {
		s := open(t)
		ctx := context.Background()
		task, a := claimedTask(t, s, "p", "t")
		if _, _, err := s.AdmitEffect(ctx, NewEffect{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Attempt: a.Number, Seq: 1, Kind: EffectTool, Fingerprint: "f"}); err != nil {
			t.Fatal(err)
		}
		m := MarkEffect{PrincipalID: "p", TaskID: "t", Attempt: a.Number, Seq: 1, From: EffectDispatching, To: EffectObserved}
		before := snap(t, s, "p", "t")
		for _, c := range []Charge{{Tokens: -1}, {OutputBytes: -1}, {OutputBytes: maxUsageAdd + 1}, {Usage: ModelUsage{Calls: 1, PromptTokens: -1}}} {
			if _, _, err := s.ObserveEffect(ctx, m, c); !errors.Is(err, ErrInvalid) {
				t.Fatalf("charge %+v: %v, want ErrInvalid", c, err)
			}
		}
		// Still admitted, not dispatching: a conflict, and no charge.
		if _, _, err := s.ObserveEffect(ctx, m, Charge{OutputBytes: 5}); !errors.Is(err, ErrConflict) {
			t.Fatalf("observing an admitted effect: %v, want ErrConflict", err)
		}
		if after := snap(t, s, "p", "t"); !reflect.DeepEqual(after, before) {
			t.Fatalf("a refused charge wrote something:\nbefore %+v\nafter  %+v", before, after)
		}
		if _, _, err := s.ObserveEffect(ctx, MarkEffect{From: EffectAdmitted, To: EffectDispatching}, Charge{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("ObserveEffect of another change: %v", err)
		}
	})
}

// TestCreateTaskNegativeBudget names the budget a negative limit is for.
func TestCreateTaskNegativeBudget(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	b := defaultBudgets()
	b.OutputBytes.Limit = -1
	_, err := s.CreateTask(context.Background(), NewTask{ID: "t", PrincipalID: "p", Executor: "legacy", Spec: []byte(`{}`), Limits: b})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(fmt.Sprint(err), "output_bytes limit is -1") {
		t.Fatalf("negative output budget: %v", err)
	}
}

// BenchmarkObserveCharged compares recording an answered model call as the
// host does now — ObserveEffect: the mark, the budgets' charge and the
// model usage in one transaction — against the path before the token
// budget, measured alternately in the same run: MarkEffect, then
// AddModelUsage, two transactions. "ratio" is the first's time over the
// second's.
func BenchmarkObserveCharged(b *testing.B) {
	for _, st := range benchStores()[:2] {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			s := st.open(b)
			budgets := defaultBudgets()
			budgets.ModelCalls.Limit = int64(b.N) + 1
			budgets.ModelTokens.Limit = 1 << 50
			budgets.OutputBytes.Limit = 1 << 50
			if _, err := s.CreateTask(ctx, NewTask{ID: "t", PrincipalID: "p", Executor: "legacy", Spec: []byte(`{}`), Limits: budgets}); err != nil {
				b.Fatal(err)
			}
			task, err := s.StartRun(ctx, "p", "t", StatusPending)
			if err != nil {
				b.Fatal(err)
			}
			a, task, err := s.ClaimAttempt(ctx, "p", "t", task.RunID)
			if err != nil {
				b.Fatal(err)
			}
			u := ModelUsage{Calls: 1, PromptTokens: 900, CompletionTokens: 100, Millis: 5}
			var charged, baseline time.Duration
			b.ResetTimer()
			for i := range b.N {
				seq := int64(i + 1)
				if _, _, err := s.AdmitEffect(ctx, NewEffect{PrincipalID: "p", TaskID: "t", RunID: task.RunID, Attempt: a.Number, Seq: seq,
					Kind: EffectModel, Fingerprint: fmt.Sprint("f", seq), Tokens: 1}); err != nil {
					b.Fatal(err)
				}
				m := MarkEffect{PrincipalID: "p", TaskID: "t", Attempt: a.Number, Seq: seq, From: EffectAdmitted, To: EffectDispatching}
				if _, err := s.MarkEffect(ctx, m); err != nil {
					b.Fatal(err)
				}
				m.From, m.To, m.Result = EffectDispatching, EffectObserved, []byte(`{"content":"ok"}`)
				began := time.Now()
				if i%2 == 0 {
					_, _, err = s.ObserveEffect(ctx, m, Charge{Tokens: 1000, OutputBytes: 2, Usage: u})
					charged += time.Since(began)
				} else {
					if _, err = s.MarkEffect(ctx, m); err == nil {
						err = s.AddModelUsage(ctx, "p", "t", a.Number, u)
					}
					baseline += time.Since(began)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if baseline > 0 {
				b.ReportMetric(float64(charged)/float64(baseline), "ratio")
			}
		})
	}
}
