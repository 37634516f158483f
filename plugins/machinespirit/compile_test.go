package machinespirit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// loadGraph sends a graph source to the executor's worker as the
// preflight does for operator graphs, and returns the answer.
func loadGraph(t *testing.T, e *Executor, name, src string) *inFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := e.ensureWorker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.send(loadGraphFrame{Type: "load_graph", ID: 1, Name: name, Source: src}); err != nil {
		t.Fatal(err)
	}
	f, err := w.recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != "graph_loaded" {
		t.Fatalf("answer %+v", f)
	}
	return f
}

// g builds a graph source from its options.
func g(id string, options ...string) string {
	return fmt.Sprintf("graph(%s, [\n  %s\n]).\n", id, strings.Join(options, ",\n  "))
}

const (
	okState = `state([field(count, integer, 0, sum)])`
	okNodes = `nodes([node(a, noop)])`
	okEdges = `edges([edge(start, a), edge(a, end)])`
)

// TestCompileRejects: one case per compile-time rule, each against a
// graph that is valid but for that rule.
func TestCompileRejects(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	tests := []struct {
		name, src, code string
	}{
		{"duplicate field", g("x", `state([field(a, integer, 0, sum), field(a, string, "", replace)])`, okNodes, okEdges), "duplicate_field"},
		{"duplicate node", g("x", okState, `nodes([node(a, noop), node(a, noop)])`, okEdges), "duplicate_node"},
		{"model node into an undeclared field", g("x", okState, `nodes([node(a, model("q", nope))])`, okEdges), "handler_args"},
		{"model node with an unknown placeholder", g("x", okState, `nodes([node(a, model("q {{nope}}", count))])`, okEdges), "handler_args"},
		{"model node into an atom without one_of", g("x", `state([field(m, atom, none, replace)])`, `nodes([node(a, model("q", m))])`, okEdges), "handler_args"},
		{"model node with a bad option", g("x", okState, `nodes([node(a, model("q", count, [retries(9)]))])`, okEdges), "handler_args"},
		{"model node with no tools", g("x", okState, `nodes([node(a, model("q", count, [tools([])]))])`, okEdges), "handler_args"},
		{"model node with nine tools", g("x", okState, `nodes([node(a, model("q", count, [tools([a1, a2, a3, a4, a5, a6, a7, a8, a9])]))])`, okEdges), "handler_args"},
		{"model node with a tool twice", g("x", okState, `nodes([node(a, model("q", count, [tools(['workspace.read', "workspace.read"])]))])`, okEdges), "handler_args"},
		{"model node with a bad tool name", g("x", okState, `nodes([node(a, model("q", count, [tools(['Shell Run'])]))])`, okEdges), "handler_args"},
		{"model node with a tool name past 64", g("x", okState, `nodes([node(a, model("q", count, [tools([`+strings.Repeat("a", 65)+`])]))])`, okEdges), "handler_args"},
		{"subgraph not listed", g("x", okState, `nodes([node(a, subgraph(other))])`, okEdges), "subgraph"},
		{"subgraph into an undeclared field", g("x", okState, `nodes([node(a, subgraph(other, [output([count-nope])]))])`, okEdges, `subgraphs([other])`), "subgraph"},
		{"subgraph with a bad option", g("x", okState, `nodes([node(a, subgraph(other, [merge(all)]))])`, okEdges, `subgraphs([other])`), "subgraph"},
		{"no edge from start", g("x", okState, okNodes, `edges([edge(a, end)])`), "start_edges"},
		{"two edges from start", g("x", okState, `nodes([node(a, noop), node(b, noop)])`, `edges([edge(start, a), edge(start, b), edge(a, end), edge(b, end)])`), "start_edges"},
		{"conditional from start", g("x", okState, okNodes, `edges([conditional(start, always(k), [route(k, a)]), edge(a, end)])`), "start_edges"},
		{"start straight to end", g("x", okState, okNodes, `edges([edge(start, end), edge(a, end)])`), "start_edges"},
		{"unreachable node", g("x", okState, `nodes([node(a, noop), node(b, noop)])`, `edges([edge(start, a), edge(a, end), edge(b, end)])`), "unreachable_node"},
		{"node that cannot reach end", g("x", okState, `nodes([node(a, noop), node(b, noop)])`,
			`edges([edge(start, a), conditional(a, always(k), [route(k, b), route(done, end)]), edge(b, b)])`), "cannot_reach_end"},
		{"node without an edge out", g("x", okState, `nodes([node(a, noop), node(b, noop)])`, `edges([edge(start, a), conditional(a, always(k), [route(k, b), route(done, end)])])`), "cannot_reach_end"},
		{"unknown handler", g("x", okState, `nodes([node(a, no_such_handler)])`, okEdges), "unknown_handler"},
		{"handler with the wrong arity", g("x", okState, `nodes([node(a, noop(1))])`, okEdges), "unknown_handler"},
		{"unknown router", g("x", okState, okNodes, `edges([edge(start, a), conditional(a, no_such_router, [route(k, end)])])`), "unknown_router"},
		{"reserved node name start", g("x", okState, `nodes([node(start, noop)])`, okEdges), "reserved_node"},
		{"reserved node name end", g("x", okState, `nodes([node(end, noop)])`, okEdges), "reserved_node"},
		{"edge to an undeclared node", g("x", okState, okNodes, `edges([edge(start, a), edge(a, zzz)])`), "unknown_node"},
		{"edge from end", g("x", okState, okNodes, `edges([edge(start, a), edge(a, end), edge(end, a)])`), "edge_from_end"},
		{"edge into start", g("x", okState, okNodes, `edges([edge(start, a), edge(a, start)])`), "edge_to_start"},
		{"two edges out of a node", g("x", okState, `nodes([node(a, noop), node(b, noop)])`, `edges([edge(start, a), edge(a, b), edge(a, end), edge(b, end)])`), "ambiguous_edges"},
		{"route key twice", g("x", okState, okNodes, `edges([edge(start, a), conditional(a, always(k), [route(k, end), route(k, a)])])`), "duplicate_route"},
		{"unknown type", g("x", `state([field(a, float, 0, replace)])`, okNodes, okEdges), "bad_type"},
		{"unknown reducer", g("x", `state([field(a, integer, 0, max)])`, okNodes, okEdges), "bad_reducer"},
		{"append on a non-list", g("x", `state([field(a, integer, 0, append)])`, okNodes, okEdges), "reducer_type"},
		{"sum on a string", g("x", `state([field(a, string, "", sum)])`, okNodes, okEdges), "reducer_type"},
		{"default of the wrong type", g("x", `state([field(a, integer, "zero", replace)])`, okNodes, okEdges), "default_type"},
		{"children not json", g("x", `state([field(children, string, "", replace)])`, okNodes, okEdges), "children_field"},
		{"children appended", g("x", `state([field(children, list(json), [], append)])`, okNodes, okEdges), "children_field"},
		{"limit out of range", g("x", okState, okNodes, okEdges, `limits([max_visits(0)])`), "bad_limit"},
		{"limit past its cap", g("x", okState, okNodes, okEdges, `limits([node_seconds(3601)])`), "bad_limit"},
		{"unknown limit", g("x", okState, okNodes, okEdges, `limits([forever(1)])`), "bad_limit"},
		{"unknown output field", g("x", okState, okNodes, okEdges, `output([nope])`), "unknown_output_field"},
		{"variables in the spec", g("x", okState, `nodes([node(a, patch([count=_]))])`, okEdges), "not_ground"},
		{"missing edges", g("x", okState, okNodes), "syntax"},
		{"unknown option", g("x", okState, okNodes, okEdges, `run(shell(ls))`), "syntax"},
		{"bad graph id", g("'X y'", okState, okNodes, okEdges), "bad_id"},
		{"two terms", g("x", okState, okNodes, okEdges) + "foo.\n", "syntax"},
		{"a directive is data, and not a graph", ":- initialization(shell('touch /tmp/machinespirit-pwned')).\n", "syntax"},
		{"a clause is data, and not a graph", "graph(x, []) :- shell('touch /tmp/machinespirit-pwned').\n", "syntax"},
		{"syntax error", "graph(x, [\n", "syntax"},
		{"name differs from the pin", g("y", okState, okNodes, okEdges), "name_mismatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := loadGraph(t, e, "x", tc.src)
			if *f.OK || f.Code != tc.code {
				t.Fatalf("load: ok=%v code=%q message=%q; want code %q", *f.OK, f.Code, f.Message, tc.code)
			}
			if f.Message == "" {
				t.Fatal("no message")
			}
		})
	}
	t.Run("shadowing a shipped graph", func(t *testing.T) {
		f := loadGraph(t, e, "rlm", g("rlm", okState, okNodes, okEdges))
		if *f.OK || f.Code != "duplicate_graph" {
			t.Fatalf("load: %+v", f)
		}
	})
	t.Run("valid graph", func(t *testing.T) {
		src := g("valid", `state([field(count, integer, 0, sum), field(log, list(string), [], append)])`,
			`nodes([node(a, patch([count=1])), node(b, noop, [max_visits(3)])])`,
			`edges([edge(start, a), conditional(a, by_count(2), [route(again, b), route(done, end)]), edge(b, a)])`,
			`limits([max_node_executions(10)])`, `output([count])`)
		f := loadGraph(t, e, "valid", src)
		if !*f.OK || len(f.Hash) != 64 {
			t.Fatalf("load: %+v", f)
		}
	})
}
