package machinespirit

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

// subgraphGraphs: parent runs child inline in its node b; child reads
// its input (the parent's count), adds to count and log and writes a
// file; its output merges back through the parent's reducers (sum,
// append).
func subgraphGraphs() map[string]string {
	return map[string]string{
		"child": g("child",
			`state([field(count, integer, 0, sum), field(log, list(string), [], append), field(seed, integer, 0, replace)])`,
			`nodes([node(c0, input_to(seed, seed)), node(c1, patch([count=2, log=["child one"]])), node(c2, tool('workspace.write', json{path: "child.txt", content: "from the child"}))])`,
			`edges([edge(start, c0), edge(c0, c1), edge(c1, c2), edge(c2, end)])`,
			`output([count, log, seed])`),
		"parent": g("parent",
			`state([field(count, integer, 0, sum), field(log, list(string), [], append), field(seen, integer, 0, replace)])`,
			`nodes([node(a, patch([count=1, log=["parent"]])), node(b, subgraph(child, [input([seed-count]), output([count-count, log-log, seed-seen])]))])`,
			`edges([edge(start, a), edge(a, b), edge(b, end)])`,
			`output([count, log, seen])`, `subgraphs([child])`),
		"nest": g("nest", okState, `nodes([node(a, subgraph(nest))])`, okEdges, `subgraphs([nest])`),
	}
}

// TestSubgraphMergesState: the child's output is merged through the
// parent's reducers: count 1 (parent) + 2 (child) = 3, the logs are
// appended, and seen is the child's seed: the parent's count handed in as
// its input.
func TestSubgraphMergesState(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, subgraphGraphs()))
	h := newFakeHost(1)
	results, cp := runToEnd(t, e, h, spec("parent", nil, ""), nil, 4)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"count":3,"log":["parent","child one"],"seen":1}` {
		t.Fatalf("%+v %s", last, last.Result)
	}
	if len(results) != 2 || !strings.Contains(last.Summary, "subgraph child merged 3 fields") {
		t.Fatalf("steps %+v", results)
	}
	if m := payload(t, cp); m["executions"].(float64) != 2 {
		t.Fatalf("the child's nodes counted in the parent's executions: %v", m["executions"])
	}
	if h.workspace["child.txt"] != "from the child" {
		t.Fatalf("workspace %v", h.workspace)
	}
}

// TestSubgraphDepthBounded: a graph that runs itself stops at the bound.
func TestSubgraphDepthBounded(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, subgraphGraphs()))
	res, err := e.Step(context.Background(), newFakeHost(1), stepReq(spec("nest", nil, ""), nil))
	if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, "subgraph_depth") ||
		!strings.Contains(res.Message, "would nest 5 deep; at most 4") {
		t.Fatalf("%+v, %v", res, err)
	}
}

// TestSubgraphWorkerKilledResume: the worker is SIGKILLed during the
// child's tool call; the re-run of node b from the committed checkpoint
// runs the child again (same idempotency key for its write, so the host
// replays it) and merges its state once.
func TestSubgraphWorkerKilledResume(t *testing.T) {
	t.Parallel()
	graphs := subgraphGraphs()
	cfg := testConfig(t, graphs)
	cfg.OnWorkerLost = func(error) {}
	e1 := newExecutor(t, cfg)
	h := newFakeHost(1)
	sp := spec("parent", nil, "")
	res, err := e1.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue {
		t.Fatalf("node a: %+v, %v", res, err)
	}
	committed := res.Checkpoint
	pid := e1.workerPID()
	h.onTool = func(_ string, args map[string]any) {
		if args["path"] == "child.txt" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline := time.Now().Add(10 * time.Second)
			for processAlive(pid) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	if _, err := e1.Step(context.Background(), h, stepReq(sp, committed)); !errors.Is(err, ErrWorkerLost) {
		t.Fatalf("step with a dying worker: %v", err)
	}
	h.onTool = nil
	e2 := newExecutor(t, testConfig(t, graphs))
	res, err = e2.Step(context.Background(), h, stepReq(sp, committed))
	if err != nil || res.Outcome != sdk.OutcomeComplete || string(res.Result) != `{"count":3,"log":["parent","child one"],"seen":1}` {
		t.Fatalf("re-run: %+v %s, %v", res, res.Result, err)
	}
	var keys []string
	for _, c := range h.Calls() {
		if c.Args["path"] == "child.txt" {
			keys = append(keys, c.Key)
		}
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Fatalf("idempotency keys of the child's write across the re-run: %v", keys)
	}
}
