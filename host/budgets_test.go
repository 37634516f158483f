package host

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

// The token and output budgets hold for an executor's model calls, at the
// limit and one past it: a call whose prompt does not fit what is left is
// refused before it runs (nothing charged, the provider not called); the
// call that crosses a limit is charged in full and fails the task; a
// provider that reports no usage is estimated at 4 bytes a token, and the
// estimate is marked.
func TestTokenAndOutputBudgetsEnforced(t *testing.T) {
	t.Parallel()
	reported := `{"content": "ok", "usage": {"prompt_tokens": 30, "completion_tokens": 10}}`
	// testexec's prompt is "test goal" and "step N": 15 bytes, 4 tokens;
	// the reply "ok" 1 token.
	unreported := `{"content": "ok"}`
	for _, tc := range []struct {
		name                 string
		reply                string
		steps                int
		tokens, output       int64
		wantStatus           store.Status
		wantReason           store.Reason
		wantTokens, wantCall int64 // used at the end
		wantEstimated        int64
		wantOutput           int64
	}{
		{name: "tokens at the limit", reply: reported, steps: 2, tokens: 80, wantStatus: store.StatusCompleted, wantTokens: 80, wantCall: 2, wantOutput: 4},
		{name: "tokens one past", reply: reported, steps: 2, tokens: 79, wantStatus: store.StatusFailed, wantReason: store.ReasonTokenBudgetExhausted, wantTokens: 80, wantCall: 2, wantOutput: 4},
		{name: "spent: the next call refused", reply: reported, steps: 3, tokens: 80, wantStatus: store.StatusFailed, wantReason: store.ReasonTokenBudgetExhausted, wantTokens: 80, wantCall: 2, wantOutput: 4},
		{name: "prompt larger than the budget", reply: reported, steps: 1, tokens: 3, wantStatus: store.StatusFailed, wantReason: store.ReasonTokenBudgetExhausted},
		{name: "estimated at the limit", reply: unreported, steps: 2, tokens: 10, wantStatus: store.StatusCompleted, wantTokens: 10, wantCall: 2, wantEstimated: 2, wantOutput: 4},
		{name: "estimated one past", reply: unreported, steps: 2, tokens: 9, wantStatus: store.StatusFailed, wantReason: store.ReasonTokenBudgetExhausted, wantTokens: 10, wantCall: 2, wantEstimated: 2, wantOutput: 4},
		{name: "output at the limit", reply: reported, steps: 2, output: 4, wantStatus: store.StatusCompleted, wantTokens: 80, wantCall: 2, wantOutput: 4},
		{name: "output one past", reply: reported, steps: 2, output: 3, wantStatus: store.StatusFailed, wantReason: store.ReasonOutputBudgetExhausted, wantTokens: 80, wantCall: 2, wantOutput: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "s.json")
			if err := os.WriteFile(script, []byte(`{"version": 1, "rules": [{"when": {}, "reply": `+tc.reply+`}]}`), 0o600); err != nil {
				t.Fatal(err)
			}
			h := openHost(t, "", func(c *config.Config) { c.Model = config.Model{Provider: config.ProviderScripted, Script: script} })
			task := create(t, h, alice, map[string]any{"steps": tc.steps, "call_model": true}, Limits{Steps: 5, ModelTokens: tc.tokens, OutputBytes: tc.output})
			got := waitEnd(t, h, alice, task.ID)
			b := got.Budgets
			if got.Status != tc.wantStatus || got.Reason != tc.wantReason {
				t.Fatalf("task %s (%s: %s), want %s (%s)", got.Status, got.Reason, got.Message, tc.wantStatus, tc.wantReason)
			}
			if b.ModelTokens.Used != tc.wantTokens || b.ModelCalls.Used != tc.wantCall || b.TokensEstimated != tc.wantEstimated || b.OutputBytes.Used != tc.wantOutput {
				t.Fatalf("budgets %+v: want tokens %d, calls %d, %d estimated, output %d", b, tc.wantTokens, tc.wantCall, tc.wantEstimated, tc.wantOutput)
			}
			usage, _, err := h.Runner.TaskModelUsage(context.Background(), alice, task.ID)
			if err != nil || usage.Calls != tc.wantCall {
				t.Fatalf("the provider answered %d calls (%v), want %d: a refused call is never sent", usage.Calls, err, tc.wantCall)
			}
			evs, err := h.Store.Events(context.Background(), alice, task.ID, 0, 1000)
			if err != nil || len(evs) == 0 {
				t.Fatal(err)
			}
			var last EventPayload
			if err := json.Unmarshal(evs[len(evs)-1].Payload, &last); err != nil {
				t.Fatal(err)
			}
			if last.Tokens != meter(b.ModelTokens) || last.Output != meter(b.OutputBytes) || last.TokensEstimated != tc.wantEstimated {
				t.Errorf("last event %s: want tokens %s, output %s, %d estimated", evs[len(evs)-1].Payload, meter(b.ModelTokens), meter(b.OutputBytes), tc.wantEstimated)
			}
		})
	}
}

// A budget above its cap, or negative, is refused at creation naming the
// field; 0 takes the configured default.
func TestTokenAndOutputLimitsChecked(t *testing.T) {
	t.Parallel()
	h := openHost(t, "", func(c *config.Config) {
		c.Tasks.MaxModelTokens, c.Tasks.MaxModelTokensCap = 1000, 5000
		c.Tasks.MaxOutputBytes, c.Tasks.MaxOutputBytesCap = 100, 500
	})
	for _, tc := range []struct {
		name        string
		lim         Limits
		field       string
		wantTokens  int64
		wantOutputs int64
	}{
		{name: "defaults", wantTokens: 1000, wantOutputs: 100},
		{name: "at the caps", lim: Limits{ModelTokens: 5000, OutputBytes: 500}, wantTokens: 5000, wantOutputs: 500},
		{name: "tokens one past the cap", lim: Limits{ModelTokens: 5001}, field: "max_model_tokens"},
		{name: "output one past the cap", lim: Limits{OutputBytes: 501}, field: "max_output_bytes"},
		{name: "negative tokens", lim: Limits{ModelTokens: -1}, field: "max_model_tokens"},
		{name: "negative output", lim: Limits{OutputBytes: -1}, field: "max_output_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim
			lim.Steps = 1
			task, err := h.Runner.Create(context.Background(), alice, CreateRequest{Executor: "testexec", Spec: spec(t, "g", map[string]any{"steps": 1}), Limits: lim})
			if tc.field != "" {
				wantField(t, err, tc.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if task.Budgets.ModelTokens.Limit != tc.wantTokens || task.Budgets.OutputBytes.Limit != tc.wantOutputs {
				t.Fatalf("limits %+v / %+v, want %d / %d", task.Budgets.ModelTokens, task.Budgets.OutputBytes, tc.wantTokens, tc.wantOutputs)
			}
		})
	}
}

// wantField fails unless err is a *plugin.FieldError of field.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	fe, ok := errors.AsType[*plugin.FieldError](err)
	if !ok || fe.Field != field {
		t.Fatalf("err = %v, want a refusal of the field %s", err, field)
	}
}
