package machinespirit

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

const examplesDir = "../../examples/machinespirit"

// TestExamples: the example specs are valid, the example operator graph
// loads under its pin and runs, and the example context answers the RLM
// example's question through a scripted model.
func TestExamples(t *testing.T) {
	t.Parallel()
	specs := map[string][]byte{}
	for _, name := range []string{"rlm.json", "plan-act-review.json", "tool-pipeline.json", "ask-human.json"} {
		b, err := os.ReadFile(filepath.Join(examplesDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseSpec(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		specs[name] = b
	}
	graphDir := filepath.Join(examplesDir, "graphs")
	src, err := os.ReadFile(filepath.Join(graphDir, "tool_pipeline.pl"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	cfg := Config{SwiplPath: testSwipl, SwiplVersion: testVersion, GraphsDir: graphDir,
		GraphPins: map[string]string{"tool_pipeline": hex.EncodeToString(sum[:])}}
	e := newExecutor(t, cfg)

	h := newFakeHost(1)
	results, _ := runToEnd(t, e, h, specs["tool-pipeline.json"], nil, 5)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeComplete || !strings.Contains(string(last.Result), "hello from a graph") {
		t.Fatalf("tool_pipeline: %+v %s", last, last.Result)
	}

	results, _ = runToEnd(t, e, newFakeHost(1), specs["plan-act-review.json"], nil, 10)
	if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete || !strings.Contains(string(last.Result), `"verdict":"accepted"`) {
		t.Fatalf("plan_act_review: %+v %s", last, last.Result)
	}

	h = newFakeHost(1)
	h.answer = []byte(`"release-2"`)
	results, _ = runToEnd(t, e, h, specs["ask-human.json"], nil, 3)
	if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"answer":"release-2"}` || h.workspace["answer.json"] != `"release-2"` {
		t.Fatalf("ask_human: %+v %s", last, last.Result)
	}

	ctxText, err := os.ReadFile(filepath.Join(examplesDir, "ctx.txt"))
	if err != nil {
		t.Fatal(err)
	}
	at := strings.Index(string(ctxText), "Introduced the retry budget")
	h = newFakeHost(1)
	h.workspace["ctx.txt"] = string(ctxText)
	model := &scriptedModel{
		root: []string{
			`{"plan":"machinespirit.plan/1","steps":[{"op":"search","pattern":"Introduced the retry budget","max_results":3,"as":"hits"}]}`,
			`{"plan":"machinespirit.plan/1","steps":[{"op":"slice","from":` + strconv.Itoa(at-200) + `,"bytes":600,"as":"s"},{"op":"query","prompt":"{{s}}","as":"a"}]}`,
			`{"plan":"machinespirit.plan/1","steps":[{"op":"final","answer":"release 10.17.0 introduced it; default 3"}]}`,
		},
		sub: func(p string) string {
			if strings.Contains(p, "retry budget") {
				return "Release 10.17.0, default 3"
			}
			return "not here"
		},
	}
	h.model = model.answer
	results, _ = runToEnd(t, e, h, specs["rlm.json"], nil, 10)
	if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete || !strings.Contains(string(last.Result), "10.17.0") {
		t.Fatalf("rlm: %+v %s", last, last.Result)
	}
	if p := rootPrompts(h); !strings.Contains(p[2], "Release 10.17.0, default 3") {
		t.Fatalf("the sub-model's answer did not reach the root: %q", p[2])
	}
}
