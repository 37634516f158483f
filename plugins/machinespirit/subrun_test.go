package machinespirit

import (
	"context"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// TestSubRunAdmission: a graph starts only the sub-runs its spec lists in
// subgraphs([...]), and a sub-run's depth is the host's depth of the call
// it starts from plus one — a sub-run that starts another without a model
// call in between is refused, however large the depth budget.
func TestSubRunAdmission(t *testing.T) {
	t.Parallel()
	answer := `state([field(answer, string, "", replace)])`
	graphs := map[string]string{
		"nolist": g("nolist", answer, `nodes([node(a, sub(plan_act_review))])`, okEdges),
		"other":  g("other", answer, `nodes([node(a, sub(plan_act_review))])`, okEdges, `subgraphs([rlm])`),
		"nest":   g("nest", answer, `nodes([node(a, sub(nest))])`, okEdges, `subgraphs([nest])`),
	}
	e := newExecutor(t, testConfig(t, graphs))
	for _, tc := range []struct{ graph, want string }{
		{"nolist", "graph nolist may not start graph plan_act_review (its subgraphs: [])"},
		{"other", "graph other may not start graph plan_act_review (its subgraphs: [rlm])"},
		{"nest", "a sub-run from this call runs at depth 1, not 2: start it from a model call of its own run"},
	} {
		t.Run(tc.graph, func(t *testing.T) {
			h := newFakeHost(8)
			req := stepReq(spec(tc.graph, map[string]any{"tasks": []string{"x"}}, ""), nil)
			req.Limits.Depth = 8
			res, err := e.Step(context.Background(), h, req)
			if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, tc.want) {
				t.Fatalf("got %+v, %v; want a failure naming %q", res, err, tc.want)
			}
			if h.count("tool", "") != 0 {
				t.Fatal("a refused sub-run ran")
			}
		})
	}
	t.Run("rlm may not start another graph", func(t *testing.T) {
		r := runGoal(t, e, `spirit(plan_act_review, _{tasks: ["x"]}, A)`)
		if !strings.Contains(r.feedback, "graph rlm_goals may not start graph plan_act_review") {
			t.Fatalf("feedback: %s", r.feedback)
		}
	})
}
