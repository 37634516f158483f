package machinespirit

import (
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// A model-written goal of few inferences can still burn CPU through costly
// builtins (here ~5 inferences per 200,000-element sort): the goal's compute
// time is bounded, the goal stopped and the model told, and the run goes
// on to its next reply.
func TestRLMGoalComputeTimeBounded(t *testing.T) {
	e := newExecutor(t, testConfig(t, nil))
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = "x"
	burn := "forall(between(1, 1000000, _), (length(L, 200000), msort(L, _)))"
	model := &scriptedModel{root: []string{burn, `final("done")`}, sub: func(string) string { return "" }}
	h.model = model.answer
	results, _ := runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 5)
	p := rootPrompts(h)
	if len(p) != 2 || !strings.Contains(p[1], "stopped: the goal computed for more than 5 s") {
		t.Fatalf("feedback lacks the compute-time stop: %q", p)
	}
	if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete || !strings.Contains(last.Summary+string(last.Result), "done") {
		t.Fatalf("the run did not go on to its final answer: %+v", last)
	}
}
