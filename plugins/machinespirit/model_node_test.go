package machinespirit

import (
	"context"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

const askerGraph = `graph(asker, [
  state([field(count, integer, 0, sum), field(title, string, "", replace), field(ok, boolean, false, replace),
         field(mood, atom, none, replace), field(data, json, null, replace), field(items, list(string), [], replace),
         field(maybe, optional(integer), 5, replace)]),
  nodes([node(n1, model("How many for {{goal}}?", count)),
         node(n2, model("A title for {{count}} things", title, [system("Be brief.")])),
         node(n3, model("ok?", ok)),
         node(n4, model("mood?", mood, [one_of([happy, sad])])),
         node(n5, model("data?", data)),
         node(n6, model("items?", items)),
         node(n7, model("maybe?", maybe))]),
  edges([edge(start, n1), edge(n1, n2), edge(n2, n3), edge(n3, n4), edge(n4, n5), edge(n5, n6), edge(n6, n7), edge(n7, end)])
]).`

// TestModelNode: an operator graph calls a model without the RLM; each
// reply is parsed into its field by the field's type (a reply that does
// not parse is repaired once), and merged through the field's reducer.
func TestModelNode(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, map[string]string{
		"asker":  askerGraph,
		"strict": g("strict", okState, `nodes([node(a, model("count?", count, [retries(0)]))])`, okEdges),
		"moody":  g("moody", `state([field(m, atom, none, replace)])`, `nodes([node(a, model("mood?", m, [one_of([happy, sad])]))])`, okEdges),
		"jsony":  g("jsony", `state([field(j, json, null, replace)])`, `nodes([node(a, model("json?", j, [retries(0)]))])`, okEdges),
	}))
	answers := map[string][]string{
		"How many for test goal?": {"seven", "7"},
		"A title for 7 things":    {"  Seven things  "},
		"ok?":                     {"Yes"},
		"mood?":                   {"sad"},
		"data?":                   {`{"a": [1, "two", null]}`},
		"items?":                  {"first\n\n second \nthird"},
		"maybe?":                  {"null"},
	}
	h := newFakeHost(1)
	h.model = func(p string, _ int) (string, error) {
		for q, as := range answers {
			if strings.Contains(p, q) && !strings.Contains(p, "Your previous answer") {
				return as[0], nil
			}
			if strings.Contains(p, q) {
				return as[len(as)-1], nil
			}
		}
		return "", nil
	}
	results, _ := runToEnd(t, e, h, spec("asker", nil, ""), nil, 10)
	last := results[len(results)-1]
	want := `{"count":7,"data":{"a":[1,"two",null]},"items":["first","second","third"],"maybe":null,"mood":"sad","ok":true,"title":"Seven things"}`
	if last.Outcome != sdk.OutcomeComplete || string(last.Result) != want {
		t.Fatalf("%+v\n%s\nwant %s", last, last.Result, want)
	}
	var repaired, system bool
	for _, c := range h.Calls() {
		repaired = repaired || strings.Contains(c.Prompt, `Your previous answer was "seven", which is not an integer (digits only)`)
		system = system || strings.HasPrefix(c.Prompt, "Be brief.\nA title for 7 things")
		if c.Kind == "model" && c.Depth != 0 {
			t.Fatalf("a model node's call at depth %d", c.Depth)
		}
	}
	if !repaired || !system {
		t.Fatalf("repaired %v, system message %v: %+v", repaired, system, h.Calls())
	}

	for _, tc := range []struct{ graph, reply, want string }{
		{"strict", "nope", `model_reply_invalid: the model answered "nope", which is not an integer (digits only)`},
		{"moody", "evil_atom_never_made", "which is not one of happy, sad"},
		{"jsony", `{"a": 1, "a": 2}`, "which is not one JSON value"},
		{"jsony", "1\x002", "which is not a text without NUL characters"},
		{"jsony", `"\ud800"`, "which is not one JSON value"},
	} {
		h := newFakeHost(1)
		h.model = func(string, int) (string, error) { return tc.reply, nil }
		res, err := e.Step(context.Background(), h, stepReq(spec(tc.graph, nil, ""), nil))
		if err != nil || res.Outcome != sdk.OutcomeFail || !strings.Contains(res.Message, tc.want) {
			t.Fatalf("%s: %+v, %v", tc.graph, res, err)
		}
	}
}
