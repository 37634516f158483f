package machinespirit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// kidsGraph keeps the step's children in its state and shows them to a
// model node's template.
const kidsGraph = `graph(kids, [
  state([field(children, json, [], replace), field(summary, string, "", replace)]),
  nodes([node(read, model("Children: {{children}}", summary))]),
  edges([edge(start, read), edge(read, end)]),
  output([children, summary])
]).`

// TestChildrenInState: the step's Children reach the graph's children
// field (and a node's template) without a task.status call, bounded as
// the host bounds them: 64 children, each result 1000 characters; past
// either, the newest 64 and the first 1000 characters.
func TestChildrenInState(t *testing.T) {
	t.Parallel()
	raw := g("kidsraw", `state([field(children, json, [], replace)])`, okNodes, okEdges, `output([children])`)
	sub := g("kidssub", `state([field(seen, json, [], replace)])`, `nodes([node(a, subgraph(kidsraw, [output([children-seen])]))])`, okEdges,
		`output([seen])`, `subgraphs([kidsraw])`)
	e := newExecutor(t, testConfig(t, map[string]string{"kids": kidsGraph, "kidsraw": raw, "kidssub": sub}))
	children := func(n, resultChars int) []sdk.ChildTask {
		var cs []sdk.ChildTask
		for i := range n {
			cs = append(cs, sdk.ChildTask{TaskID: fmt.Sprintf("t_child%02d", i), Status: "completed", Reason: "", Result: strings.Repeat("é", resultChars)})
		}
		return cs
	}
	t.Run("a subgraph has them too", func(t *testing.T) {
		req := stepReq(spec("kidssub", nil, ""), nil)
		req.Children = []sdk.ChildTask{{TaskID: "t_sub", Status: "completed", Result: "r"}}
		res, err := e.Step(context.Background(), newFakeHost(1), req)
		if err != nil || string(res.Result) != `{"seen":[{"id":"t_sub","reason":"","result":"r","status":"completed"}]}` {
			t.Fatalf("%+v, %v", res, err)
		}
	})
	for _, tc := range []struct {
		name, graph           string
		in                    []sdk.ChildTask
		wantN, wantChars      int
		wantFirst, wantStatus string
	}{
		{"none", "kids", nil, 0, 0, "", ""},
		{"one failed", "kids", []sdk.ChildTask{{TaskID: "t_a", Status: "failed", Reason: "step_limit", Result: ""}}, 1, 0, "t_a", "failed"},
		{"at the bounds", "kidsraw", children(64, 1000), 64, 1000, "t_child00", "completed"},
		{"past the bounds", "kidsraw", children(65, 1001), 64, 1000, "t_child01", "completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(1)
			var prompt string
			h.model = func(p string, _ int) (string, error) { prompt = p; return "seen", nil }
			req := stepReq(spec(tc.graph, nil, ""), nil)
			req.Children = tc.in
			res, err := e.Step(context.Background(), h, req)
			if err != nil || res.Outcome != sdk.OutcomeComplete {
				t.Fatalf("%+v, %v", res, err)
			}
			var out struct {
				Children []struct{ ID, Status, Reason, Result string }
				Summary  string
			}
			if err := json.Unmarshal(res.Result, &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Children) != tc.wantN || tc.graph == "kids" && out.Summary != "seen" {
				t.Fatalf("%d children, summary %q; want %d", len(out.Children), out.Summary, tc.wantN)
			}
			if tc.wantN == 0 {
				if !strings.Contains(prompt, "Children: []") {
					t.Fatalf("prompt %q", prompt)
				}
				return
			}
			c := out.Children[0]
			if c.ID != tc.wantFirst || c.Status != tc.wantStatus || len([]rune(c.Result)) != tc.wantChars {
				t.Fatalf("first child %+v (result %d characters)", c, len([]rune(c.Result)))
			}
			if tc.graph == "kids" && !strings.Contains(prompt, `{"id":"t_a", "reason":"step_limit", "result":"", "status":"failed"}`) {
				t.Fatalf("the model node's prompt does not show the children: %.200q", prompt)
			}
		})
	}
}
