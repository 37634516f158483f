package machinespirit

import (
	"context"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// TestInterrupt: an interrupting node commits its patch and the next node;
// the next step continues there.
func TestInterrupt(t *testing.T) {
	src := g("pauses", okState, `nodes([node(a, pause("waiting for a human")), node(b, patch([count=10]))])`,
		`edges([edge(start, a), edge(a, b), edge(b, end)])`)
	e := newExecutor(t, testConfig(t, map[string]string{"pauses": src}))
	h := newFakeHost(1)
	sp := spec("pauses", nil, "")
	res, err := e.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue || !strings.Contains(res.Summary, "interrupt: waiting for a human") {
		t.Fatalf("step 1: %+v, %v", res, err)
	}
	p := payload(t, res.Checkpoint)
	intr, _ := p["interrupt"].(map[string]any)
	if p["next"] != "b" || intr["node"] != "a" || intr["reason"] != "waiting for a human" {
		t.Fatalf("checkpoint: %v", p)
	}
	res, err = e.Step(context.Background(), h, stepReq(sp, res.Checkpoint))
	if err != nil || res.Outcome != sdk.OutcomeComplete || string(res.Result) != `{"count":11}` {
		t.Fatalf("step 2: %+v %s, %v", res, res.Result, err)
	}
	if p := payload(t, res.Checkpoint); p["interrupt"] != nil {
		t.Fatalf("the interrupt outlived its step: %v", p)
	}
}

// TestApprovalEffect: approval(Prompt, Decision) goes to the host.
func TestApprovalEffect(t *testing.T) {
	src := g("asks", `state([field(answer, string, "", replace)])`, `nodes([node(a, ask("May I?"))])`, okEdges)
	e := newExecutor(t, testConfig(t, map[string]string{"asks": src}))
	for _, d := range []sdk.Decision{sdk.Approved, sdk.Rejected} {
		h := newFakeHost(1)
		h.decision = d
		res, err := e.Step(context.Background(), h, stepReq(spec("asks", nil, ""), nil))
		if err != nil || string(res.Result) != `{"answer":"`+string(d)+`"}` {
			t.Fatalf("%s: %+v, %v", d, res, err)
		}
		if calls := h.Calls(); len(calls) != 1 || calls[0].Kind != "approval" || calls[0].Prompt != "May I?" {
			t.Fatalf("calls %+v", calls)
		}
	}
}

// TestSubRunDepth: a sub-run (spirit/3) runs a registered graph inside the
// node, one level deeper; it is refused when that would exceed max_depth.
func TestSubRunDepth(t *testing.T) {
	src := g("parent", `state([field(answer, string, "", replace)])`, `nodes([node(a, sub(plan_act_review))])`, okEdges, `subgraphs([plan_act_review])`)
	e := newExecutor(t, testConfig(t, map[string]string{"parent": src}))
	sp := spec("parent", map[string]any{"tasks": []string{"nested"}}, "")

	h := newFakeHost(1)
	res, err := e.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeComplete || !strings.Contains(string(res.Result), "verdict") {
		t.Fatalf("depth 1 of 1: %+v %s, %v", res, res.Result, err)
	}
	if writes(h)["act-1.md"] != 1 {
		t.Fatalf("the sub-run's effects did not reach the host: %+v", h.Calls())
	}
	progress := false
	for _, c := range h.Calls() {
		if c.Kind == "progress" && strings.Contains(c.Prompt, "sub-run of graph plan_act_review at depth 1") {
			progress = true
		}
	}
	if !progress {
		t.Fatal("the sub-run was not reported to the host")
	}

	h = newFakeHost(0)
	req := stepReq(sp, nil)
	req.Limits.Depth = 0
	res, err = e.Step(context.Background(), h, req)
	if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, "budget_exhausted") {
		t.Fatalf("depth 1 of 0: %+v, %v", res, err)
	}
	if h.count("tool", "") != 0 {
		t.Fatal("a refused sub-run ran")
	}
}

// TestOversizedEffectResult: a host answer too large for a frame reaches
// Prolog as effect_error(_, too_large, _), never as a cut answer.
func TestOversizedEffectResult(t *testing.T) {
	src := g("reads", `state([field(got, json, null, replace)])`,
		`nodes([node(a, tool('workspace.read', json{path: "big.txt"}, got))])`, okEdges)
	cfg := testConfig(t, map[string]string{"reads": src})
	cfg.MaxFrameBytes = 64 << 10
	e := newExecutor(t, cfg)
	for _, tc := range []struct {
		size int
		ok   bool
	}{{1000, true}, {64 << 10, false}} {
		h := newFakeHost(1)
		h.workspace["big.txt"] = strings.Repeat("z", tc.size)
		res, err := e.Step(context.Background(), h, stepReq(spec("reads", nil, ""), nil))
		if err != nil {
			t.Fatal(err)
		}
		if tc.ok != (res.Outcome == sdk.OutcomeComplete) {
			t.Fatalf("%d bytes: %+v", tc.size, res)
		}
		if !tc.ok && !strings.Contains(res.Message, "tool effect: too_large") {
			t.Fatalf("%d bytes: %+v", tc.size, res)
		}
	}
	// The worker survived the refused answer.
	if pid := e.workerPID(); pid == 0 || !processAlive(pid) {
		t.Fatal("the worker is gone")
	}
}
