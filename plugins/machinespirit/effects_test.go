package machinespirit

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// TestInterrupt: an interrupting node commits its patch and the next node
// and pauses; the next step asks its question first and runs the next node
// with the answer, which the graph sees (in Env.resume and, with
// interrupt/3, in the named field).
func TestInterrupt(t *testing.T) {
	t.Parallel()
	graphs := map[string]string{
		// pause/1 (test registry): interrupt([count=1], Reason).
		"pauses": g("pauses", okState, `nodes([node(a, pause("waiting for a human")), node(b, patch([count=10]))])`,
			`edges([edge(start, a), edge(a, b), edge(b, end)])`),
		// input/2 (shipped registry) as the last node: the run completes
		// only once it is answered.
		"asks": g("asks", `state([field(answer, json, null, replace)])`, `nodes([node(a, input("What is x?", answer))])`, okEdges),
		// input/2 into an integer field that sums.
		"counts": g("counts", okState, `nodes([node(a, input("How many?", count)), node(b, patch([count=1]))])`,
			`edges([edge(start, a), edge(a, b), edge(b, end)])`),
	}
	e := newExecutor(t, testConfig(t, graphs))
	tests := []struct {
		graph, question, answer string
		result                  string // "" when the answer is refused
		failure                 string
	}{
		{"pauses", "waiting for a human", `{"x":1}`, `{"count":11}`, ""},
		{"asks", "What is x?", `{"x":1}`, `{"answer":{"x":1}}`, ""},
		{"asks", "What is x?", `null`, `{"answer":null}`, ""},
		{"counts", "How many?", `41`, `{"count":42}`, ""},
		{"counts", "How many?", `"many"`, "", "type_error"},
	}
	for _, tc := range tests {
		t.Run(tc.graph+"/"+tc.answer, func(t *testing.T) {
			h := newFakeHost(1)
			h.answer = json.RawMessage(tc.answer)
			sp := spec(tc.graph, nil, "")
			res, err := e.Step(context.Background(), h, stepReq(sp, nil))
			if err != nil || res.Outcome != sdk.OutcomeContinue || !strings.Contains(res.Summary, "interrupt: "+tc.question) {
				t.Fatalf("step 1: %+v, %v", res, err)
			}
			if n := h.count("input", ""); n != 0 {
				t.Fatalf("the interrupting step asked %d question(s) itself", n)
			}
			intr, _ := payload(t, res.Checkpoint)["interrupt"].(map[string]any)
			if intr["node"] != "a" || intr["reason"] != tc.question {
				t.Fatalf("checkpoint: %s", res.Checkpoint.Payload)
			}
			res, err = e.Step(context.Background(), h, stepReq(sp, res.Checkpoint))
			if err != nil {
				t.Fatal(err)
			}
			calls := h.Calls()
			if len(calls) != 1 || calls[0].Kind != "input" || calls[0].Prompt != tc.question {
				t.Fatalf("step 2 host calls: %+v", calls)
			}
			if tc.failure != "" {
				if res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, tc.failure) {
					t.Fatalf("step 2: %+v, want a failure %s", res, tc.failure)
				}
				return
			}
			if res.Outcome != sdk.OutcomeComplete || string(res.Result) != tc.result {
				t.Fatalf("step 2: %+v %s, want the result %s", res, res.Result, tc.result)
			}
			if p := payload(t, res.Checkpoint); p["interrupt"] != nil {
				t.Fatalf("the interrupt outlived its answer: %v", p)
			}
		})
	}
}

// TestAskHuman: the shipped ask_human graph asks the task's goal, and the
// node after the pause uses the answer in an effect.
func TestAskHuman(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	h := newFakeHost(1)
	h.answer = json.RawMessage(`{"x":1}`)
	sp := spec("ask_human", nil, "")
	res, err := e.Step(context.Background(), h, stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue || len(h.Calls()) != 0 {
		t.Fatalf("step 1: %+v, %v, calls %+v", res, err, h.Calls())
	}
	res, err = e.Step(context.Background(), h, stepReq(sp, res.Checkpoint))
	if err != nil || res.Outcome != sdk.OutcomeComplete || string(res.Result) != `{"answer":{"x":1}}` {
		t.Fatalf("step 2: %+v %s, %v", res, res.Result, err)
	}
	if calls := h.Calls(); len(calls) != 2 || calls[0].Kind != "input" || calls[0].Prompt != "test goal" {
		t.Fatalf("calls %+v", calls)
	}
	if got := h.workspace["answer.json"]; got != `{"x":1}` {
		t.Fatalf("answer.json = %q", got)
	}
}

// TestInterruptNeedsAnAnswer: a pending interrupt is never passed over —
// not by a host that cannot ask, and not by a run frame without an answer.
func TestInterruptNeedsAnAnswer(t *testing.T) {
	t.Parallel()
	src := g("pauses", okState, `nodes([node(a, pause("waiting for a human")), node(b, patch([count=10]))])`,
		`edges([edge(start, a), edge(a, b), edge(b, end)])`)
	e := newExecutor(t, testConfig(t, map[string]string{"pauses": src}))
	sp := spec("pauses", nil, "")
	res, err := e.Step(context.Background(), newFakeHost(1), stepReq(sp, nil))
	if err != nil || res.Outcome != sdk.OutcomeContinue {
		t.Fatalf("step 1: %+v, %v", res, err)
	}
	h := newFakeHost(1)
	h.Host.RequestInputF = nil // an older host: Unimplemented
	res2, err := e.Step(context.Background(), h, stepReq(sp, res.Checkpoint))
	if err != nil || res2.Outcome != sdk.OutcomeFail || !strings.Contains(res2.Message, "got no answer") {
		t.Fatalf("no answer from the host: %+v, %v", res2, err)
	}
	if n := h.count("tool", ""); n != 0 {
		t.Fatal("the next node ran without its answer")
	}

	// The worker itself refuses a run that does not carry the answer.
	cp, hdr, err := readCheckpoint(res.Checkpoint, "pauses", DefaultCheckpointMaxBytes)
	if err != nil || hdr.Interrupt == nil {
		t.Fatalf("readCheckpoint: %+v, %v", hdr, err)
	}
	w, err := e.ensureWorker(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.send(runFrame{Type: "run", ID: 99, Graph: "pauses", Input: json.RawMessage("{}"), Checkpoint: cp, CheckpointMaxBytes: DefaultCheckpointMaxBytes}); err != nil {
		t.Fatal(err)
	}
	m := <-w.frames
	if m.err != nil || m.f.Type != "result" || m.f.Outcome != "fail" || m.f.Code != "no_answer" {
		t.Fatalf("a run without the answer: %+v %v", m.f, m.err)
	}
}

// TestApprovalEffect: approval(Prompt, Decision) goes to the host.
func TestApprovalEffect(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
