package machinespirit

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

func parSpec() []byte {
	return spec("plan_act_review", map[string]any{"tasks": []string{"gather", "write"}, "pass_on_attempt": 2}, "")
}

// writes counts the workspace.write calls per path.
func writes(h *fakeHost) map[string]int {
	m := map[string]int{}
	for _, c := range h.Calls() {
		if c.Kind == "tool" && c.Name == "workspace.write" && c.Err == nil {
			m[c.Args["path"].(string)]++
		}
	}
	return m
}

// TestNoModelGraphResumesAfterCrash runs plan_act_review, which calls no
// model, across steps; after two committed nodes the worker is SIGKILLed
// and a new executor (a new plugin process, as after a resume) continues
// from the last checkpoint: the next node runs and no committed node's
// effect runs again.
func TestNoModelGraphResumesAfterCrash(t *testing.T) {
	t.Parallel()
	h := newFakeHost(1)
	sp := parSpec()
	e1 := newExecutor(t, testConfig(t, nil))
	var cp *sdk.Checkpoint
	for i, node := range []string{"plan", "act"} {
		res, err := e1.Step(context.Background(), h, stepReq(sp, cp))
		if err != nil || res.Outcome != sdk.OutcomeContinue {
			t.Fatalf("step %d: %+v, %v", i+1, res, err)
		}
		if !strings.Contains(res.Summary, "node "+node+" done") {
			t.Fatalf("step %d ran %q, want node %s", i+1, res.Summary, node)
		}
		cp = res.Checkpoint
	}
	if p := payload(t, cp); p["next"] != "review" || p["executions"] != 2.0 {
		t.Fatalf("checkpoint after act: %v", p)
	}
	pid := e1.workerPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e1.Close()

	e2 := newExecutor(t, testConfig(t, nil))
	if e2.workerPID() == pid {
		t.Fatal("the new executor reuses the killed worker")
	}
	res, err := e2.Step(context.Background(), h, stepReq(sp, cp))
	if err != nil || res.Outcome != sdk.OutcomeContinue || !strings.Contains(res.Summary, "node review done") {
		t.Fatalf("resumed step: %+v, %v", res, err)
	}
	results, _ := runToEnd(t, e2, h, sp, res.Checkpoint, 10)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeComplete {
		t.Fatalf("last step: %+v", last)
	}
	var out map[string]any
	if err := json.Unmarshal(last.Result, &out); err != nil {
		t.Fatal(err)
	}
	if out["verdict"] != "accepted" || out["attempt"] != 2.0 {
		t.Fatalf("result %v", out)
	}
	want := map[string]int{"plan.md": 1, "act-1.md": 1, "act-2.md": 1}
	if got := writes(h); !mapsEqual(got, want) {
		t.Fatalf("writes %v, want %v (a committed node's effect ran again)", got, want)
	}
	if n := h.count("model", ""); n != 0 {
		t.Fatalf("%d model calls in a graph without a model", n)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestWorkerDiesMidStep: the worker is killed while a node is in flight
// (the host is serving its effect). The step is an error wrapping
// ErrWorkerLost and OnWorkerLost is told (the binary exits there, so the
// host records an interrupted attempt), never a completion. The next
// attempt re-runs only the uncommitted node.
func TestWorkerDiesMidStep(t *testing.T) {
	t.Parallel()
	h := newFakeHost(1)
	sp := parSpec()
	cfg := testConfig(t, nil)
	var mu sync.Mutex
	var lost []error
	cfg.OnWorkerLost = func(err error) { mu.Lock(); lost = append(lost, err); mu.Unlock() }
	e1 := newExecutor(t, cfg)
	res, err := e1.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue {
		t.Fatalf("plan: %+v, %v", res, err)
	}
	committed := res.Checkpoint

	pid := e1.workerPID()
	h.onTool = func(name string, args map[string]any) {
		if args["path"] == "act-1.md" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(50 * time.Millisecond)
		}
	}
	res, err = e1.Step(context.Background(), h, stepReq(sp, committed))
	if !errors.Is(err, ErrWorkerLost) {
		t.Fatalf("step with a dying worker: %+v, %v; want ErrWorkerLost", res, err)
	}
	if res.Outcome == sdk.OutcomeComplete || res.Outcome == sdk.OutcomeContinue {
		t.Fatalf("a lost worker produced outcome %v", res.Outcome)
	}
	if !strings.Contains(err.Error(), "SIGKILL") && !strings.Contains(err.Error(), "killed") {
		t.Fatalf("error does not say how the worker died: %v", err)
	}
	mu.Lock()
	if len(lost) != 1 {
		t.Fatalf("OnWorkerLost called %d times", len(lost))
	}
	mu.Unlock()
	h.onTool = nil

	e2 := newExecutor(t, testConfig(t, nil))
	res, err = e2.Step(context.Background(), h, stepReq(sp, committed))
	if err != nil || !strings.Contains(res.Summary, "node act done") {
		t.Fatalf("re-run: %+v, %v", res, err)
	}
	if got := writes(h); got["plan.md"] != 1 {
		t.Fatalf("writes %v: the committed plan node ran again", got)
	}
	// The act node did not commit, so it ran again with the same
	// idempotency key: the host can replay the first call.
	var keys []string
	for _, c := range h.Calls() {
		if c.Args["path"] == "act-1.md" {
			keys = append(keys, c.Key)
		}
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Fatalf("idempotency keys of the re-run node: %v", keys)
	}
}

// TestWorkerExitsMidStep: a worker that exits by itself (here halt(9)
// inside a node) is lost the same way.
func TestWorkerExitsMidStep(t *testing.T) {
	t.Parallel()
	src := g("dies", okState, `nodes([node(a, die)])`, okEdges)
	e := newExecutor(t, testConfig(t, map[string]string{"dies": src}))
	_, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("dies", nil, ""), nil))
	if !errors.Is(err, ErrWorkerLost) || !strings.Contains(err.Error(), "exit status 9") {
		t.Fatalf("err = %v", err)
	}
	// The next step gets a fresh worker.
	res, err := e.Step(context.Background(), newFakeHost(1), stepReq(parSpec(), nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue {
		t.Fatalf("next step: %+v, %v", res, err)
	}
}

// TestMalformedFrameFromWorker: anything but a valid frame from the worker
// kills it and fails the step.
func TestMalformedFrameFromWorker(t *testing.T) {
	t.Parallel()
	const maxFrame = 8192
	graphs := map[string]string{}
	cases := []struct{ name, handler, want string }{
		{"not JSON", `garbage("this is not json")`, "malformed frame"},
		{"unknown type", `garbage("{\"type\":\"teleport\",\"id\":1}")`, "unknown frame type"},
		{"unknown effect kind", `garbage("{\"type\":\"effect\",\"id\":1,\"kind\":\"teleport\"}")`, "unknown effect kind"},
		{"result for another run", `garbage("{\"type\":\"result\",\"id\":999999,\"outcome\":\"fail\",\"code\":\"x\"}")`, "result for run 999999"},
		{"frame one past the bound", `garbage_bytes(8193)`, "oversized frame"},
	}
	for i, c := range cases {
		id := "m" + string(rune('a'+i))
		graphs[id] = g(id, okState, `nodes([node(a, `+c.handler+`)])`, okEdges)
	}
	cfg := testConfig(t, graphs)
	cfg.MaxFrameBytes = maxFrame
	e := newExecutor(t, cfg)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pid := e.workerPID()
			if pid == 0 {
				w, err := e.ensureWorker(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				pid = w.pid
			}
			id := "m" + string(rune('a'+i))
			res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec(id, nil, ""), nil))
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != sdk.OutcomeFail || res.Reason != "executor_failed" || !strings.Contains(res.Message, c.want) {
				t.Fatalf("result %+v; want a failure mentioning %q", res, c.want)
			}
			if processAlive(pid) {
				t.Fatal("the worker that broke the protocol is still alive")
			}
		})
	}
	t.Run("a line at the bound is read", func(t *testing.T) {
		// garbage_bytes(8192) is within the bound, so it is parsed (and is
		// malformed JSON), not refused for its size.
		src := g("atbound", okState, `nodes([node(a, garbage_bytes(8192))])`, okEdges)
		cfg := testConfig(t, map[string]string{"atbound": src})
		cfg.MaxFrameBytes = maxFrame
		e := newExecutor(t, cfg)
		res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("atbound", nil, ""), nil))
		if err != nil || !strings.Contains(res.Message, "malformed frame") {
			t.Fatalf("%+v, %v", res, err)
		}
	})
}

// TestOversizedSnapshot: a state that grows past the checkpoint bound
// fails the step with checkpoint_too_large naming the field; it is never
// truncated, and the previous checkpoint stays within the bound.
func TestOversizedSnapshot(t *testing.T) {
	t.Parallel()
	const bound = 16 << 10
	src := g("grows", `state([field(blobs, list(string), [], append)])`,
		`nodes([node(a, grow(3000), [max_visits(100)])])`,
		`edges([edge(start, a), conditional(a, always(again), [route(again, a), route(done, end)])])`)
	cfg := testConfig(t, map[string]string{"grows": src})
	cfg.CheckpointMaxBytes = bound
	e := newExecutor(t, cfg)
	h := newFakeHost(1)
	sp := spec("grows", nil, "")
	var cp *sdk.Checkpoint
	for i := 1; i < 20; i++ {
		res, err := e.Step(context.Background(), h, stepReq(sp, cp))
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome == sdk.OutcomeFail {
			if res.Reason != "checkpoint_too_large" || !strings.Contains(res.Message, "blobs") {
				t.Fatalf("step %d: %+v", i, res)
			}
			if cp == nil || len(cp.Payload) > bound {
				t.Fatalf("the last good checkpoint is %d bytes", len(cp.Payload))
			}
			return
		}
		if len(res.Checkpoint.Payload) > bound {
			t.Fatalf("step %d returned a %d-byte checkpoint", i, len(res.Checkpoint.Payload))
		}
		cp = res.Checkpoint
	}
	t.Fatal("the state never outgrew the bound")
}

func TestMakeCheckpointBound(t *testing.T) {
	t.Parallel()
	obj := func(n int) json.RawMessage {
		const frame = `{"p":""}`
		return json.RawMessage(`{"p":"` + strings.Repeat("x", n-len(frame)) + `"}`)
	}
	if cp, err := makeCheckpoint(obj(1000), 1000); err != nil || len(cp.Payload) != 1000 {
		t.Fatalf("at the bound: %v", err)
	}
	var tooLarge *checkpointTooLarge
	if _, err := makeCheckpoint(obj(1001), 1000); !errors.As(err, &tooLarge) {
		t.Fatalf("one past the bound: %v", err)
	}
	// Whitespace the worker writes does not count: the payload is compact.
	if cp, err := makeCheckpoint(json.RawMessage(`{ "a" : 1 }`), 7); err != nil || string(cp.Payload) != `{"a":1}` {
		t.Fatalf("compact: %v", err)
	}
}

// TestCheckpointIncompatible: a checkpoint that does not match the graph
// exactly fails closed, never restarts from zero.
func TestCheckpointIncompatible(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	h := newFakeHost(1)
	sp := parSpec()
	res, err := e.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil {
		t.Fatal(err)
	}
	good := res.Checkpoint
	edit := func(f func(m map[string]any)) *sdk.Checkpoint {
		var m map[string]any
		if err := json.Unmarshal(good.Payload, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return &sdk.Checkpoint{Schema: CheckpointSchema, Payload: b}
	}
	tests := []struct {
		name string
		cp   *sdk.Checkpoint
		want string
	}{
		{"other schema", &sdk.Checkpoint{Schema: "machinespirit.graph/0", Payload: good.Payload}, "checkpoint schema"},
		{"not an object", &sdk.Checkpoint{Schema: CheckpointSchema, Payload: []byte(`[1]`)}, "not a JSON object"},
		{"other graph", edit(func(m map[string]any) { m["graph"] = "rlm" }), "the task runs graph"},
		{"graph changed", edit(func(m map[string]any) { m["graph_hash"] = strings.Repeat("0", 64) }), "has changed"},
		{"payload schema", edit(func(m map[string]any) { m["schema"] = "x" }), "payload schema"},
		{"unknown next node", edit(func(m map[string]any) { m["next"] = "nowhere" }), "not a node"},
		{"wrong field type", edit(func(m map[string]any) { m["state"].(map[string]any)["attempt"] = "one" }), "attempt"},
		{"extra field", edit(func(m map[string]any) { m["state"].(map[string]any)["extra"] = 1 }), "fields"},
		{"missing field", edit(func(m map[string]any) { delete(m["state"].(map[string]any), "plan") }), "fields"},
		{"unknown member", edit(func(m map[string]any) { m["transcript"] = []any{} }), "exactly the fields"},
		{"completed run", edit(func(m map[string]any) { m["next"] = "end" }), "already_complete"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.Step(context.Background(), h, stepReq(sp, tc.cp))
			if err != nil {
				t.Fatal(err)
			}
			wantReason := "checkpoint_incompatible"
			if tc.name == "completed run" {
				wantReason = "executor_failed"
			}
			if res.Outcome != sdk.OutcomeFail || res.Reason != wantReason || !strings.Contains(res.Message, tc.want) {
				t.Fatalf("result %+v; want %s mentioning %q", res, wantReason, tc.want)
			}
		})
	}
	if n := writes(h)["act-1.md"]; n != 0 {
		t.Fatalf("a refused checkpoint ran a node (%d writes)", n)
	}
}

// TestTwoExecutorsShareNothing: two tasks, two executors, run at once:
// separate workers, separate graphs, separate state.
func TestTwoExecutorsShareNothing(t *testing.T) {
	t.Parallel()
	only1 := g("only_one", okState, `nodes([node(a, patch([count=41]))])`, okEdges)
	e1 := newExecutor(t, testConfig(t, map[string]string{"only_one": only1}))
	e2 := newExecutor(t, testConfig(t, nil))
	if e1.workerPID() == e2.workerPID() || e1.env.dir == e2.env.dir {
		t.Fatal("two executors share a worker or a runtime dir")
	}
	var wg sync.WaitGroup
	results := make([][]sdk.StepResult, 2)
	hosts := []*fakeHost{newFakeHost(1), newFakeHost(1)}
	for i, e := range []*Executor{e1, e2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sp := spec("plan_act_review", map[string]any{"tasks": []string{"task of executor", string(rune('A' + i))}, "pass_on_attempt": i + 1}, "")
			var cp *sdk.Checkpoint
			for range 10 {
				res, err := e.Step(context.Background(), hosts[i], stepReq(sp, cp))
				if err != nil {
					t.Error(err)
					return
				}
				results[i] = append(results[i], res)
				cp = res.Checkpoint
				if res.Outcome != sdk.OutcomeContinue {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(results[0]) != 3 || len(results[1]) != 5 {
		t.Fatalf("steps: %d and %d, want 3 and 5", len(results[0]), len(results[1]))
	}
	if h := hosts[0]; writes(h)["act-2.md"] != 0 || writes(hosts[1])["act-2.md"] != 1 {
		t.Fatal("one task's effects reached the other's host")
	}
	res, err := e1.Step(context.Background(), newFakeHost(1), stepReq(spec("only_one", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeComplete {
		t.Fatalf("e1 only_one: %+v, %v", res, err)
	}
	res, err = e2.Step(context.Background(), newFakeHost(1), stepReq(spec("only_one", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, "unknown_graph") {
		t.Fatalf("e2 knows e1's graph: %+v, %v", res, err)
	}
}

// TestIndeterminateToolEffects: a tool call in flight when an attempt died
// is not re-run without a human's approval.
func TestIndeterminateToolEffects(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	req := stepReq(parSpec(), nil)
	req.Attempt = 2
	req.Indeterminate = []sdk.Effect{{Attempt: 1, Seq: 1, Kind: "tool", Summary: "workspace.write plan.md"}}

	h := newFakeHost(1)
	h.decision = sdk.Rejected
	res, err := e.Step(context.Background(), h, req)
	if err != nil || res.Outcome != sdk.OutcomeFail || res.Reason != "effect_indeterminate" {
		t.Fatalf("rejected: %+v, %v", res, err)
	}
	if h.count("tool", "") != 0 {
		t.Fatal("the node ran without approval")
	}

	h = newFakeHost(1)
	res, err = e.Step(context.Background(), h, req)
	if err != nil || res.Outcome != sdk.OutcomeContinue || h.count("approval", "") != 1 || writes(h)["plan.md"] != 1 {
		t.Fatalf("approved: %+v, %v, calls %+v", res, err, h.Calls())
	}

	// Model calls change nothing outside: no approval needed.
	req.Indeterminate = []sdk.Effect{{Attempt: 1, Seq: 1, Kind: "model"}}
	h = newFakeHost(1)
	res, err = e.Step(context.Background(), h, req)
	if err != nil || res.Outcome != sdk.OutcomeContinue || h.count("approval", "") != 0 {
		t.Fatalf("model: %+v, %v", res, err)
	}
}
