package machinespirit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

// TestTaskLoopSurvivesExceptions: whatever a node throws — the abort and
// unwind balls that end a Prolog thread, a time limit of library(time), a
// plain term, running out of memory — ends that step with a typed failure
// at once (never a hang until the wall clock), and the next step runs.
// Only running out of memory replaces the worker.
func TestTaskLoopSurvivesExceptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, ball, code string
		newWorker        bool
	}{
		{"aborted", `'$aborted'`, "aborted", false},
		{"unwind halt", `unwind(halt(0))`, "aborted", false},
		{"unwind abort", `unwind(abort)`, "aborted", false},
		{"time limit", `time_limit_exceeded`, "node_time_limit", false},
		{"cancel of another run", `ms_cancelled_elsewhere`, "handler_error", false},
		{"plain term", `foo(bar)`, "handler_error", false},
		{"out of memory", `error(resource_error(memory), none)`, codeResourceExhausted, true},
	}
	graphs := map[string]string{"noop": g("noop", okState, okNodes, okEdges)}
	for i, tc := range tests {
		graphs[ballGraph(i)] = g(ballGraph(i), okState, `nodes([node(a, throw_ball(`+tc.ball+`))])`, okEdges)
	}
	e := newExecutor(t, testConfig(t, graphs))
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pid := e.workerPID()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := e.Step(ctx, newFakeHost(1), stepReq(spec(ballGraph(i), nil, ""), nil))
			if err != nil {
				t.Fatalf("step: %v", err)
			}
			if res.Outcome != sdk.OutcomeFail || res.Reason != "executor_failed" || !strings.Contains(res.Message, "machinespirit: "+tc.code+":") {
				t.Fatalf("got %+v, want a failure with code %s", res, tc.code)
			}
			res, err = e.Step(ctx, newFakeHost(1), stepReq(spec("noop", nil, ""), nil))
			if err != nil || res.Outcome != sdk.OutcomeComplete {
				t.Fatalf("the next step: %+v, %v", res, err)
			}
			if changed := e.workerPID() != pid; changed != tc.newWorker {
				t.Fatalf("worker replaced = %v, want %v", changed, tc.newWorker)
			}
		})
	}
}

func ballGraph(i int) string { return "ball" + string(rune('a'+i)) }
