package machinespirit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// plan builds a machinespirit.plan/1 reply of steps.
func plan(steps ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"plan": PlanSchema, "steps": steps})
	if err != nil {
		panic(err)
	}
	return string(b)
}

type step = map[string]any

func finalStep(answer string) step { return step{"op": "final", "answer": answer} }

// subPrompts are the prompts of the successful [rlm sub] calls.
func subPrompts(h *fakeHost) []hostCall {
	var out []hostCall
	for _, c := range h.Calls() {
		if c.Kind == "model" && c.Err == nil && strings.Contains(c.Prompt, "[rlm sub]") {
			out = append(out, c)
		}
	}
	return out
}

// TestRLMPlanValidates: over a 1 MB context the root model searches,
// slices around the hit and asks a sub-model for an integer; the first
// sub-answer does not fit and is repaired once; the answer comes back. No
// model text is run: a plan is data.
func TestRLMPlanValidates(t *testing.T) {
	t.Parallel()
	const size, at = 1 << 20, 700_000
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = bigContext(size, at, needle)
	asked := 0
	model := &scriptedModel{
		root: []string{
			plan(step{"op": "length", "as": "n"}, step{"op": "search", "pattern": "secret code", "max_results": 5, "window": 10, "as": "hits"}),
			plan(step{"op": "slice", "from": at, "bytes": 64, "as": "s"},
				step{"op": "query", "prompt": "What is the code? {{s}}", "expect": "integer", "retries": 1, "as": "code"},
				finalStep("{{code}}")),
		},
		sub: func(p string) string {
			asked++
			if asked == 1 {
				return "The code is 4217."
			}
			return "4217"
		},
	}
	h.model = model.answer
	e := newExecutor(t, testConfig(t, nil))
	results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 8)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"answer":"4217"}` {
		t.Fatalf("last step %+v, result %s", last, last.Result)
	}
	prompts := rootPrompts(h)
	if len(prompts) != 2 {
		t.Fatalf("%d root prompts", len(prompts))
	}
	if !strings.Contains(prompts[1], "n = 1048576") || !strings.Contains(prompts[1], fmt.Sprintf("1 hits: [@%d ", at+4)) {
		t.Fatalf("the second root prompt lacks the first plan's values:\n%s", prompts[1])
	}
	subs := subPrompts(h)
	if len(subs) != 2 || !strings.Contains(subs[1].Prompt, "which is not an integer (digits only)") {
		t.Fatalf("sub-calls: %+v", subs)
	}
	for _, c := range subs {
		if c.Depth != 1 {
			t.Fatalf("a sub-call at depth %d", c.Depth)
		}
	}
	for _, c := range h.Calls() {
		if c.Kind == "model" && len(c.Prompt) > 13<<10 {
			t.Fatalf("a prompt of %d bytes", len(c.Prompt))
		}
	}
}

// TestRLMPlanRepair: a plan that does not validate is fed back as a
// structured error and nothing of it runs; the repaired plan runs. After
// max_repairs invalid plans in a row the task fails with
// rlm_plan_invalid, naming the last error.
func TestRLMPlanRepair(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	t.Run("repaired", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = "a small context"
		model := &scriptedModel{root: []string{
			plan(step{"op": "slice", "from": 0, "bytes": 4097, "as": "s"}, finalStep("{{s}}")),
			plan(step{"op": "slice", "from": 0, "bytes": 4096, "as": "s"}, finalStep("{{s}}")),
		}, sub: func(string) string { return "" }}
		h.model = model.answer
		results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 6)
		last := results[len(results)-1]
		if last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"answer":"a small context"}` {
			t.Fatalf("%+v %s", last, last.Result)
		}
		p := rootPrompts(h)
		want := `plan rejected, nothing ran: {"error":"plan_invalid","schema":"machinespirit.plan/1","path":"steps[0].bytes","message":"must be an integer in 1..4096 (got 4097)"}`
		if len(p) != 2 || !strings.Contains(p[1], want) {
			t.Fatalf("feedback lacks %s:\n%q", want, p)
		}
		if n := h.count("tool", "workspace.read"); n != 2 { // the probe and the repaired plan's slice
			t.Fatalf("%d reads: the rejected plan ran", n)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = "x"
		h.model = func(string, int) (string, error) { return `final("x")`, nil }
		results, _ := runToEnd(t, e, h, spec("rlm", map[string]any{"max_repairs": 1}, "ctx.txt"), nil, 8)
		last := results[len(results)-1]
		if last.Outcome != sdk.OutcomeFail || !strings.Contains(last.Message, "rlm_plan_invalid") ||
			!strings.Contains(last.Message, "did not validate 2 times in a row") || !strings.Contains(last.Message, "is not one JSON object") {
			t.Fatalf("last step: %+v", last)
		}
		if n := len(rootPrompts(h)); n != 2 {
			t.Fatalf("%d root calls, want 2 (one repair)", n)
		}
	})
}

// TestRLMPlanRefusals: replies that are not plans, and plans that break
// the schema, are refused with the path and the bound; model text never
// becomes code, and strings stay strings.
func TestRLMPlanRefusals(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	done := plan(finalStep("done"))
	pad := func(n int) string { return done + strings.Repeat(" ", n-len(done)) }
	for _, tc := range []struct {
		name, reply, want string
	}{
		{"a Prolog goal", `shell("touch /tmp/pwned"), final("x")`, `"path":"","message":"the reply is not one JSON object`},
		{"an unknown op", plan(step{"op": "call", "goal": "halt"}), `"path":"steps[0]","message":"op \"call\" is not one of`},
		{"an unknown key", plan(step{"op": "length", "as": "n", "exec": "halt"}), `unknown key exec`},
		{"wrong schema", `{"plan":"machinespirit.plan/2","steps":[]}`, `"path":"plan","message":"must be \"machinespirit.plan/1\""`},
		{"unbound variable", plan(finalStep("{{secret}}")), `uses {{secret}}, which no earlier step binds`},
		{"variable name as atom", plan(step{"op": "length", "as": "Halt"}), `as must be a variable name`},
		{"33 steps", plan(func() []step {
			var s []step
			for range 33 {
				s = append(s, step{"op": "length"})
			}
			return s
		}()...), `has 33 steps; at most 32`},
		{"reply one past its bound", pad(16385), `the reply has 16385 characters; at most 16384`},
		{"a template past its bound", plan(finalStep(strings.Repeat("a", 2001))), `"path":"steps[0].answer","message":"must have 1..2000 characters (has 2001)"`},
		{"a bad regex", plan(step{"op": "search", "pattern": "(a", "mode": "regex"}), `not a valid regular expression`},
		{"sum of texts", plan(step{"op": "partition", "chunk_bytes": 64, "as": "c"}, step{"op": "map", "over": "c", "prompt": "{{item}}", "as": "a"}, step{"op": "reduce", "over": "a", "how": "sum"}), `how = sum needs a list of integers`},
		{"two values", plan(finalStep("a")) + " {}", `more than one JSON value`},
		{"a lone surrogate", `{"plan":"machinespirit.plan/1","steps":[{"op":"final","answer":"\ud800"}]}`, `a string holds a NUL or a lone surrogate`},
		{"a NUL", `{"plan":"machinespirit.plan/1","steps":[{"op":"final","answer":"a\u0000b"}]}`, `a string holds a NUL or a lone surrogate`},
		{"final in a sub-plan", plan(step{"op": "partition", "chunk_bytes": 64, "as": "c"}, step{"op": "map", "over": "c", "result": "x", "steps": []step{finalStep("x")}}),
			`"path":"steps[1].steps[0]","message":"a map's steps may not hold a final step"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(1)
			h.workspace["ctx.txt"] = "x"
			model := &scriptedModel{root: []string{tc.reply, plan(finalStep("done"))}, sub: func(string) string { return "" }}
			h.model = model.answer
			results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
			if last := results[len(results)-1]; string(last.Result) != `{"answer":"done"}` {
				t.Fatalf("%+v %s", last, last.Result)
			}
			p := rootPrompts(h)
			if len(p) != 2 || !strings.Contains(p[1], tc.want) {
				t.Fatalf("feedback lacks %s:\n%q", tc.want, p)
			}
		})
	}
	t.Run("reply at its bound", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = "x"
		model := &scriptedModel{root: []string{pad(16384)}, sub: func(string) string { return "" }}
		h.model = model.answer
		results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
		if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"answer":"done"}` {
			t.Fatalf("%+v", last)
		}
		model = &scriptedModel{root: []string{plan(finalStep(strings.Repeat("a", 2000)))}, sub: func(string) string { return "" }}
		h.model = model.answer
		results, _ = runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
		if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete || len(last.Result) != 2000+len(`{"answer":""}`) {
			t.Fatalf("%+v", last)
		}
	})
	t.Run("strings stay strings", func(t *testing.T) {
		h := newFakeHost(1)
		h.workspace["ctx.txt"] = "x"
		model := &scriptedModel{root: []string{plan(finalStep(`halt. :- initialization(shell("id")).`))}, sub: func(string) string { return "" }}
		h.model = model.answer
		results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
		if last := results[len(results)-1]; string(last.Result) != `{"answer":"halt. :- initialization(shell(\"id\"))."}` {
			t.Fatalf("%+v %s", last, last.Result)
		}
	})
}

// TestRLMPlanMapReduce: partition a context into 20 chunks, map a
// sub-call over them with parallel = 4 (retrying a reply that is not an
// integer), sum the answers. The model sees 4 sub-calls in flight at
// once and never more.
func TestRLMPlanMapReduce(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 20 {
		chunk := fmt.Sprintf("chunk %02d value=%d ", i, i+1)
		b.WriteString(chunk + strings.Repeat(".", 256-len(chunk)))
	}
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = b.String()
	var mu sync.Mutex
	inFlight, maxInFlight, seen := 0, 0, 0
	four := make(chan struct{})
	model := &scriptedModel{root: []string{plan(
		step{"op": "partition", "chunk_bytes": 256, "as": "chunks"},
		step{"op": "map", "over": "chunks", "prompt": "The value in {{item}}?", "parallel": 4, "expect": "integer", "retries": 1, "as": "values"},
		step{"op": "reduce", "over": "values", "how": "sum", "as": "total"},
		finalStep("total {{total}}"),
	)}}
	sub := func(p string) string {
		mu.Lock()
		inFlight++
		seen++
		maxInFlight = max(maxInFlight, inFlight)
		if inFlight == 4 && seen == 4 {
			close(four)
		}
		first := seen <= 4
		mu.Unlock()
		if first {
			// The first batch waits until all four are in flight: a
			// plugin that ran them one by one fails here.
			select {
			case <-four:
			case <-time.After(20 * time.Second):
			}
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		var v int
		i := strings.Index(p, "value=")
		fmt.Sscanf(p[i:], "value=%d", &v)
		if v == 7 && !strings.Contains(p, "not an integer") {
			return "seven"
		}
		return fmt.Sprint(v)
	}
	// The scripted model's lock would serialise the sub-calls: answer
	// them outside it.
	h.model = func(p string, depth int) (string, error) {
		if strings.Contains(p, "[rlm sub]") {
			return sub(p), nil
		}
		return model.answer(p, depth)
	}
	e := newExecutor(t, testConfig(t, nil))
	results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"answer":"total 210"}` {
		t.Fatalf("%+v %s", last, last.Result)
	}
	if maxInFlight != 4 {
		t.Fatalf("at most %d sub-calls in flight, want 4", maxInFlight)
	}
	if n := len(subPrompts(h)); n != 21 { // 20 and one repair
		t.Fatalf("%d sub-calls, want 21", n)
	}
}

// TestRLMPlanMapSubPlan: a map whose items each run a sub-plan (a slice
// of the chunk's own bytes and a sub-call on it); the reduce takes the
// largest value.
func TestRLMPlanMapSubPlan(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 5 {
		chunk := fmt.Sprintf("value=%d ", (i*7)%5+1)
		b.WriteString(chunk + strings.Repeat(".", 128-len(chunk)))
	}
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = b.String()
	model := &scriptedModel{root: []string{plan(
		step{"op": "partition", "chunk_bytes": 128, "as": "chunks"},
		step{"op": "map", "over": "chunks", "as": "values", "result": "v", "steps": []step{
			step{"op": "query", "prompt": "chunk {{index}}: {{item}}", "expect": "integer", "as": "v"},
		}},
		step{"op": "reduce", "over": "values", "how": "max", "as": "top"},
		finalStep("{{top}}"),
	)}, sub: func(p string) string {
		var v int
		fmt.Sscanf(p[strings.Index(p, "value="):], "value=%d", &v)
		return fmt.Sprint(v)
	}}
	h.model = model.answer
	e := newExecutor(t, testConfig(t, nil))
	results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
	if last := results[len(results)-1]; string(last.Result) != `{"answer":"5"}` {
		t.Fatalf("%+v %s", last, last.Result)
	}
	subs := subPrompts(h)
	if len(subs) != 5 || !strings.Contains(subs[4].Prompt, "chunk 4: value=") {
		t.Fatalf("sub-calls %+v", subs)
	}
}

// TestRLMPlanRecurse: a recurse step runs the rlm graph one level
// deeper, whose own sub-calls would be one past max_depth = 1 and are
// refused by the host.
func TestRLMPlanRecurse(t *testing.T) {
	t.Parallel()
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = "a small context"
	model := &scriptedModel{
		root: []string{plan(step{"op": "recurse", "goal": "inner question", "as": "r"}, finalStep("outer: {{r}}"))},
		subRoot: []string{
			plan(step{"op": "query", "prompt": "too deep", "as": "x"}),
			plan(finalStep("inner answer")),
		},
		sub: func(string) string { return "never" },
	}
	h.model = model.answer
	e := newExecutor(t, testConfig(t, nil))
	results, _ := runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
	if last := results[len(results)-1]; string(last.Result) != `{"answer":"outer: inner answer"}` {
		t.Fatalf("%+v %s", last, last.Result)
	}
	var inner []string
	for _, c := range h.Calls() {
		if c.Kind == "model" && c.Depth == 1 && strings.Contains(c.Prompt, "[rlm root]") {
			inner = append(inner, c.Prompt)
		}
	}
	if len(inner) != 2 || !strings.Contains(inner[0], "Task: inner question") || !strings.Contains(inner[1], "budget_exhausted") {
		t.Fatalf("the sub-run's root prompts: %q", inner)
	}
}

// TestParallelEffectsBounded: the plugin, not the worker, bounds what
// runs at once: a worker with more model calls in flight than
// MaxParallelModelCalls, or a tool call beside a model call, is killed
// as a protocol breaker.
func TestParallelEffectsBounded(t *testing.T) {
	t.Parallel()
	src := func(name, kinds string) string {
		return g(name, okState, "nodes([node(a, concurrent(["+kinds+"]))])", okEdges)
	}
	cfg := testConfig(t, map[string]string{
		"at":    src("at", "model, model"),
		"past":  src("past", "model, model, model"),
		"mixed": src("mixed", "model, tool"),
		"tools": src("tools", "model, model_tools"),
	})
	cfg.MaxParallelModelCalls = 2
	e := newExecutor(t, cfg)
	for _, tc := range []struct {
		graph string
		calls int
		want  string
	}{
		{"at", 2, ""},
		{"past", 3, "more than 2 model calls in flight at once"},
		{"mixed", 2, "a tool effect while a model effect is in flight"},
		{"tools", 2, "a model-with-tools effect while a model effect is in flight"},
	} {
		t.Run(tc.graph, func(t *testing.T) {
			// Each model call is held until all the graph's calls are in
			// flight (or the step ends), so the calls certainly overlap.
			var mu sync.Mutex
			arrived := 0
			two := make(chan struct{})
			h := &sdktest.Host{
				CallModelF: func(ctx context.Context, _ sdk.ModelRequest) (sdk.ModelResponse, error) {
					mu.Lock()
					if arrived++; arrived == tc.calls {
						close(two)
					}
					mu.Unlock()
					select {
					case <-two:
					case <-ctx.Done():
						return sdk.ModelResponse{}, ctx.Err()
					}
					return sdk.ModelResponse{Message: sdk.Message{Role: "assistant", Content: "ok"}, CallToken: "t"}, nil
				},
				CallToolF: func(ctx context.Context, _ sdk.ToolRequest) (sdk.ToolResponse, error) {
					<-ctx.Done()
					return sdk.ToolResponse{}, ctx.Err()
				},
			}
			res, err := e.Step(context.Background(), h, stepReq(spec(tc.graph, nil, ""), nil))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if res.Outcome != sdk.OutcomeComplete {
					t.Fatalf("%+v", res)
				}
				return
			}
			if res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, tc.want) {
				t.Fatalf("%+v", res)
			}
		})
	}
	bad := testConfig(t, nil)
	bad.MaxParallelModelCalls = MaxParallelModelCalls + 1
	ex := New(context.Background(), bad)
	defer ex.Close()
	if p := ex.Describe().Runtime["preflight"]; !strings.Contains(p, "max_parallel_model_calls 17 is outside [1, 16]") {
		t.Fatalf("preflight: %s", p)
	}
}

// TestRLMGoalModeOffByDefault: the goal-writing graph exists only where
// it was turned on.
func TestRLMGoalModeOffByDefault(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, nil)
	cfg.RLMGoalMode = false
	e := newExecutor(t, cfg)
	if g := e.Describe().Runtime["graphs"]; strings.Contains(g, "rlm_goals") {
		t.Fatalf("graphs %q", g)
	}
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = "x"
	res, err := e.Step(context.Background(), h, stepReq(spec("rlm_goals", nil, "ctx.txt"), nil))
	if err != nil || res.Outcome != sdk.OutcomeFail || h.count("model", "") != 0 {
		t.Fatalf("%+v, %v", res, err)
	}
}

// TestPlanSchemaFile: the JSON Schema a model can be given names the same
// version and the same operations as the interpreter.
func TestPlanSchemaFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("schema/plan-1.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		ID         string `json:"$id"`
		Properties struct {
			Plan struct {
				Const string `json:"const"`
			} `json:"plan"`
		} `json:"properties"`
		Defs map[string]struct {
			Properties struct {
				Op struct {
					Const string `json:"const"`
				} `json:"op"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Properties.Plan.Const != PlanSchema {
		t.Fatalf("schema version %q", s.Properties.Plan.Const)
	}
	var ops []string
	for _, d := range s.Defs {
		if d.Properties.Op.Const != "" {
			ops = append(ops, d.Properties.Op.Const)
		}
	}
	want := []string{"length", "peek", "slice", "search", "partition", "query", "map", "reduce", "recurse", "final"}
	if len(ops) != len(want) {
		t.Fatalf("schema ops %v, want %v", ops, want)
	}
	for _, op := range want {
		if !strings.Contains(string(b), `"const": "`+op+`"`) {
			t.Fatalf("schema lacks op %s", op)
		}
	}
}

// TestRLMPlanBounds: each bound of the plan language at its limit
// (validates) and one past it (refused, naming the field and the bound).
func TestRLMPlanBounds(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	steps := func(n int) []step {
		var s []step
		for range n {
			s = append(s, step{"op": "length"})
		}
		return s
	}
	part := func(k string, v any) step { return step{"op": "partition", "chunk_bytes": 64, k: v, "as": "c"} }
	mapStep := func(k string, v any) step {
		return step{"op": "map", "over": "c", "prompt": "{{item}}", k: v, "as": "a"}
	}
	vars := func(n int) []step {
		var s []step
		for i := range n {
			s = append(s, step{"op": "length", "as": fmt.Sprintf("v%d", i)})
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		at     string
		past   string
		reason string
	}{
		{"steps", plan(steps(32)...), plan(steps(33)...), "has 33 steps; at most 32"},
		{"variables", plan(vars(32)...), plan(append(vars(30), part("max_chunks", 1),
			step{"op": "map", "over": "c", "result": "w", "steps": []step{{"op": "length", "as": "w"}}})...), `at most 32 variables`},
		{"max_chunks", plan(part("max_chunks", 64)), plan(part("max_chunks", 65)), `"path":"steps[0].max_chunks","message":"must be an integer in 1..64 (got 65)"`},
		{"parallel", plan(part("max_chunks", 1), mapStep("parallel", 4)), plan(part("max_chunks", 1), mapStep("parallel", 5)), `"path":"steps[1].parallel","message":"must be an integer in 1..4 (got 5)"`},
		{"retries", plan(part("max_chunks", 1), mapStep("retries", 2)), plan(part("max_chunks", 1), mapStep("retries", 3)), `"path":"steps[1].retries","message":"must be an integer in 0..2 (got 3)"`},
		{"max_results", plan(step{"op": "search", "pattern": "a", "max_results": 50}), plan(step{"op": "search", "pattern": "a", "max_results": 51}), `must be an integer in 1..50 (got 51)`},
		{"pattern", plan(step{"op": "search", "pattern": strings.Repeat("a", 200)}), plan(step{"op": "search", "pattern": strings.Repeat("a", 201)}), `must have 1..200 characters (has 201)`},
		{"variable name", plan(step{"op": "length", "as": "a" + strings.Repeat("b", 31)}), plan(step{"op": "length", "as": "a" + strings.Repeat("b", 32)}), `as must be a variable name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				reply, want string
				refused     bool
			}{{tc.at, "plan ran", false}, {tc.past, tc.reason, true}} {
				h := newFakeHost(1)
				h.workspace["ctx.txt"] = "x"
				model := &scriptedModel{root: []string{c.reply, plan(finalStep("done"))}, sub: func(string) string { return "1" }}
				h.model = model.answer
				runToEnd(t, e, h, spec("rlm", nil, "ctx.txt"), nil, 5)
				p := rootPrompts(h)
				if len(p) != 2 || !strings.Contains(p[1], c.want) || strings.Contains(p[1], "plan rejected") != c.refused {
					t.Fatalf("reply %.80s: feedback lacks %q:\n%s", c.reply, c.want, p[len(p)-1])
				}
			}
		})
	}
}
