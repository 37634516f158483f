package machinespirit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// FuzzGoalChecker feeds model replies — the hostile table and the allowed
// goals as seeds — to the real worker through the frame codec, as the
// first root reply of an rlm task whose second reply is final("done").
// Whatever the reply, the worker stays the same process (no crash, no
// limit hit by a goal that was let through), every step answers, the
// task ends completed with an answer the goal gave through final/1 or the
// scripted one, and nothing is written outside the worker.
func FuzzGoalChecker(f *testing.F) {
	needSwipl(f)
	probe := filepath.Join(f.TempDir(), "escaped")
	for _, row := range hostileGoals() {
		f.Add(strings.ReplaceAll(row.goal, "%P", probe))
	}
	for _, g := range []string{
		"context_slice(0, 5, S)", "findall(X, member(X, [a, b]), L)", `llm_query("q", A)`,
		"atom_length(abc, N)", `final("early")`, "X = f(X)", "length(L, N)", "",
	} {
		f.Add(g)
	}
	e := newExecutor(f, testConfig(f, nil))
	f.Fuzz(func(t *testing.T, goal string) {
		pid := e.workerPID()
		last := runReplies(t, e, "rlm_goals", "a small context", goal, `final("done")`)
		var out struct{ Answer string }
		if err := json.Unmarshal(last.Result, &out); err != nil || out.Answer == "" {
			t.Fatalf("goal %q: result %s (%v)", goal, last.Result, err)
		}
		if out.Answer != "done" && !strings.Contains(goal, "final") {
			t.Fatalf("goal %q gave answer %q without final/1", goal, out.Answer)
		}
		if got := e.workerPID(); got != pid {
			t.Fatalf("goal %q: the worker changed from %d to %d", goal, pid, got)
		}
		if _, err := os.Stat(probe); err == nil {
			t.Fatalf("goal %q created the marker file", goal)
		}
	})
}

// runReplies runs a task of graph (rlm or rlm_goals) over ctxText whose
// root model replies first, then second; it must complete within 4 steps.
func runReplies(t *testing.T, e *Executor, graph, ctxText, first, second string) sdk.StepResult {
	t.Helper()
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = ctxText
	model := &scriptedModel{root: []string{first, second}, sub: func(string) string { return "sub answer" }}
	h.model = model.answer
	var cp *sdk.Checkpoint
	var last sdk.StepResult
	for i := 0; i < 4; i++ {
		res, err := e.Step(context.Background(), h, stepReq(spec(graph, nil, "ctx.txt"), cp))
		if err != nil {
			t.Fatalf("step %d of reply %q: %v", i+1, first, err)
		}
		last = res
		if res.Outcome != sdk.OutcomeContinue {
			break
		}
		cp = res.Checkpoint
	}
	if last.Outcome != sdk.OutcomeComplete {
		t.Fatalf("reply %q: the task did not complete: %+v", first, last)
	}
	return last
}
