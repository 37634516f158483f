package machinespirit

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

// TestReducers runs two nodes whose patches exercise every reducer and
// every type, and checks the state in each checkpoint and the result.
func TestReducers(t *testing.T) {
	src := g("reducers",
		`state([field(n, integer, 0, sum), field(x, number, 0.5, sum), field(l, list(string), ["a"], append),
		        field(s, string, "", replace), field(a, atom, none, replace), field(o, optional(integer), null, replace),
		        field(j, json, null, replace), field(b, boolean, false, replace)])`,
		`nodes([node(one, patch([n=2, x=1.5, l=["b"], s="one", a=yes, o=3, j=json{k: [1, "v", true, null]}, b=true])),
		        node(two, patch([n=3, x=2, l=["c", "d"], s="two", o=null]))])`,
		`edges([edge(start, one), edge(one, two), edge(two, end)])`)
	e := newExecutor(t, testConfig(t, map[string]string{"reducers": src}))
	h := newFakeHost(1)
	sp := spec("reducers", nil, "")

	res, err := e.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue {
		t.Fatalf("step 1: %+v, %v", res, err)
	}
	p := payload(t, res.Checkpoint)
	wantState := map[string]any{
		"n": 2.0, "x": 2.0, "l": []any{"a", "b"}, "s": "one", "a": "yes", "o": 3.0,
		"j": map[string]any{"k": []any{1.0, "v", true, nil}}, "b": true,
	}
	if !reflect.DeepEqual(p["state"], wantState) {
		t.Fatalf("state after one:\n got %v\nwant %v", p["state"], wantState)
	}
	if p["next"] != "two" || p["executions"] != 1.0 || p["graph"] != "reducers" || len(p["graph_hash"].(string)) != 64 {
		t.Fatalf("checkpoint header: %v", p)
	}

	res, err = e.Step(context.Background(), h, stepReq(sp, res.Checkpoint))
	if err != nil || res.Outcome != sdk.OutcomeComplete {
		t.Fatalf("step 2: %+v, %v", res, err)
	}
	var result map[string]any
	if err := json.Unmarshal(res.Result, &result); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"n": 5.0, "x": 4.0, "l": []any{"a", "b", "c", "d"}, "s": "two", "a": "yes", "o": nil,
		"j": map[string]any{"k": []any{1.0, "v", true, nil}}, "b": true,
	}
	if !reflect.DeepEqual(result, want) {
		t.Fatalf("result:\n got %v\nwant %v", result, want)
	}
	if p := payload(t, res.Checkpoint); p["next"] != "end" {
		t.Fatalf("final checkpoint next = %v", p["next"])
	}
}

// TestPatchTypeChecks: a patch must name declared fields, once each, with
// values of their types; anything else is a typed failure, not a coercion.
func TestPatchTypeChecks(t *testing.T) {
	state := `state([field(n, integer, 0, sum), field(x, number, 0, sum), field(l, list(string), [], append),
	                 field(s, string, "", replace), field(a, atom, none, replace), field(o, optional(integer), null, replace)])`
	tests := []struct{ name, patch, code string }{
		{"string into an integer", `[n="1"]`, "type_error"},
		{"float into an integer", `[n=1.5]`, "type_error"},
		{"append a non-list", `[l="x"]`, "type_error"},
		{"append a list of the wrong type", `[l=[1]]`, "type_error"},
		{"a string is not an atom", `[a="yes"]`, "type_error"},
		{"an atom is not a string", `[s=yes]`, "type_error"},
		{"sum a string", `[x="1"]`, "type_error"},
		{"optional of the wrong type", `[o="3"]`, "type_error"},
		{"undeclared field", `[nope=1]`, "undeclared_field"},
		{"a field twice", `[n=1, n=2]`, "patch_error"},
		{"not a patch", `oops`, "patch_error"},
	}
	graphs := map[string]string{}
	for i, tc := range tests {
		id := "p" + string(rune('a'+i))
		graphs[id] = g(id, state, `nodes([node(a, patch(`+tc.patch+`))])`, okEdges)
	}
	e := newExecutor(t, testConfig(t, graphs))
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := "p" + string(rune('a'+i))
			res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec(id, nil, ""), nil))
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != sdk.OutcomeFail || res.Reason != "executor_failed" || !strings.Contains(res.Message, tc.code+":") {
				t.Fatalf("result %+v; want a failure with code %s", res, tc.code)
			}
		})
	}
}

// TestBounds: visits per node, total node executions, the per-node time
// and inference limits, each a typed failure at the step that would break
// it.
func TestBounds(t *testing.T) {
	graphs := map[string]string{
		"visits": g("visits", okState,
			`nodes([node(a, patch([count=1]), [max_visits(3)])])`,
			`edges([edge(start, a), conditional(a, by_count(100), [route(again, a), route(done, end)])])`),
		"execs": g("execs", okState,
			`nodes([node(a, patch([count=1])), node(b, noop)])`,
			`edges([edge(start, a), conditional(a, by_count(100), [route(again, b), route(done, end)]), edge(b, a)])`,
			`limits([max_node_executions(5)])`),
		// repeat/fail makes ~50M inferences a second: lift the inference
		// limit so that the time limit is what stops it.
		"spins": g("spins", okState, `nodes([node(a, spin, [node_seconds(1), node_inferences(2000000000)])])`, okEdges),
		"burns": g("burns", okState, `nodes([node(a, burn)])`, okEdges, `limits([node_inferences(200000)])`),
		// The node waits 1.5 s on an effect, then spins: with a 1 s limit it
		// must fail after the wait, not during it.
		"waits": g("waits", okState, `nodes([node(a, effect_then_spin, [node_seconds(1), node_inferences(2000000000)])])`, okEdges),
	}
	e := newExecutor(t, testConfig(t, graphs))
	tests := []struct {
		graph     string
		okSteps   int
		code      string
		minTime   time.Duration
		maxTime   time.Duration
		toolCalls int
	}{
		{graph: "visits", okSteps: 3, code: "visit_limit", maxTime: 5 * time.Second},
		{graph: "execs", okSteps: 5, code: "step_limit", maxTime: 5 * time.Second},
		{graph: "spins", code: "node_time_limit", minTime: 900 * time.Millisecond, maxTime: 3 * time.Second},
		{graph: "burns", code: "inference_limit", maxTime: 3 * time.Second},
		{graph: "waits", code: "node_time_limit", minTime: 2400 * time.Millisecond, maxTime: 5 * time.Second, toolCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.graph, func(t *testing.T) {
			h := newFakeHost(1)
			sp := spec(tc.graph, nil, "")
			var cp *sdk.Checkpoint
			for i := 0; i < tc.okSteps; i++ {
				res, err := e.Step(context.Background(), h, stepReq(sp, cp))
				if err != nil || res.Outcome != sdk.OutcomeContinue {
					t.Fatalf("step %d: %+v, %v", i+1, res, err)
				}
				cp = res.Checkpoint
			}
			start := time.Now()
			res, err := e.Step(context.Background(), h, stepReq(sp, cp))
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, tc.code+":") {
				t.Fatalf("step %d: %+v; want failure %s", tc.okSteps+1, res, tc.code)
			}
			if took < tc.minTime || took > tc.maxTime {
				t.Fatalf("the failing step took %v, want %v..%v", took, tc.minTime, tc.maxTime)
			}
			if n := h.count("tool", ""); n != tc.toolCalls {
				t.Fatalf("%d tool calls, want %d", n, tc.toolCalls)
			}
			// The worker is still usable: bounds end the node, not the worker.
			if pid := e.workerPID(); pid == 0 || !processAlive(pid) {
				t.Fatal("the worker is gone")
			}
		})
	}
}

// TestEffectErrorsReachProlog: a refused effect is an exception the
// handler may catch.
func TestEffectErrorsReachProlog(t *testing.T) {
	src := g("catcher", `state([field(answer, string, "", replace)])`, `nodes([node(a, catch_effect)])`, okEdges)
	e := newExecutor(t, testConfig(t, map[string]string{"catcher": src}))
	res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("catcher", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeComplete {
		t.Fatalf("%+v, %v", res, err)
	}
	if string(res.Result) != `{"answer":"caught tool permission_denied"}` {
		t.Fatalf("result %s", res.Result)
	}
}
