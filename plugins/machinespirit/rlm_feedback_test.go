package machinespirit

import (
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// A run whose every reply is a syntax error ends rlm_iterations_exhausted
// saying how many iterations ran and what the last gave; the model is told
// where its syntax broke, never the address of an internal stream (which
// differs on every run, so prompts would never repeat).
func TestRLMFailureSaysWhy(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = "x"
	h.model = func(string, int) (string, error) { return "foo bar baz", nil }
	results, _ := runToEnd(t, e, h, spec("rlm_goals", map[string]any{"max_iterations": 3}, "ctx.txt"), nil, 10)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeFail {
		t.Fatalf("last step: %+v", last)
	}
	for _, want := range []string{"rlm_iterations_exhausted", "in 3 iterations", "[3] foo bar baz => not a goal: syntax error at line 1, column 5: operator_expected"} {
		if !strings.Contains(last.Message, want) {
			t.Errorf("failure message %q lacks %q", last.Message, want)
		}
	}
	prompts := rootPrompts(h)
	if len(prompts) != 3 {
		t.Fatalf("%d root prompts, want 3", len(prompts))
	}
	for i, p := range prompts {
		if strings.Contains(p, "<stream>") || strings.Contains(p, "0x") {
			t.Errorf("root prompt %d carries an internal address:\n%s", i+1, p)
		}
	}
	if !strings.Contains(prompts[2], "syntax error at line 1, column 5") {
		t.Errorf("the third prompt does not tell the model where its syntax broke:\n%s", prompts[2])
	}
}
