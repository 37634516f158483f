package machinespirit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// shoutModule defines a handler (with a local helper), a router and a
// tool effect: what an operator module is for.
const shoutModule = `% An operator handler module.
handler_decl(shout(_)).
handler(shout(Field), Env, _State, patch([Field=Loud])) :-
    get_dict(goal, Env, Goal),
    maplist(loud, [Goal], [Loud]),
    tool('workspace.write', _{path: "shout.txt", content: Loud}, _).

loud(Text, Loud) :-
    string_upper(Text, Up),
    string_concat(Up, "!", Loud).

router_decl(by_length(_)).
router(by_length(Field), _Env, State, Key) :-
    get_dict(Field, State, V),
    string_length(V, N),
    (   N > 5 -> Key = long ; Key = short ).
`

// shoutGraph is an operator graph naming the module's handler and router.
var shoutGraph = g("shouter",
	`state([field(loud, string, "", replace), field(size, atom, none, replace)])`,
	`nodes([node(a, shout(loud)), node(l, patch([size=long])), node(s, patch([size=short]))])`,
	`edges([edge(start, a), conditional(a, by_length(loud), [route(long, l), route(short, s)]), edge(l, end), edge(s, end)])`,
	`output([loud, size])`)

// moduleConfig is the test config with the given modules written to files
// and pinned, and the operator graphs.
func moduleConfig(t *testing.T, graphs map[string]string, modules ...string) Config {
	t.Helper()
	cfg := testConfig(t, graphs)
	dir := t.TempDir()
	for i, src := range modules {
		path := filepath.Join(dir, "mod"+string(rune('a'+i))+".pl")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(src))
		cfg.HandlerModules = append(cfg.HandlerModules, HandlerModule{Path: path, SHA256: hex.EncodeToString(sum[:])})
	}
	return cfg
}

// TestHandlerModule: a pinned module's handler and router run in an
// operator graph with the real worker, and their effect on the state (and
// the workspace, through a tool effect) is seen.
func TestHandlerModule(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, moduleConfig(t, map[string]string{"shouter": shoutGraph}, shoutModule))
	if got, want := e.Describe().Runtime["handler_modules"], "moda.pl="+pinOf(shoutModule); got != want {
		t.Fatalf("handler_modules = %q, want %q", got, want)
	}
	h := newFakeHost(1)
	results, _ := runToEnd(t, e, h, spec("shouter", nil, ""), nil, 5)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"loud":"TEST GOAL!","size":"long"}` {
		t.Fatalf("result: %+v %s", last, last.Result)
	}
	if got := h.workspace["shout.txt"]; got != "TEST GOAL!" {
		t.Fatalf("shout.txt = %q", got)
	}
}

// TestHandlerModuleRefused: each module that must not load fails the
// preflight naming the file (and the line, the hash or the bound).
func TestHandlerModuleRefused(t *testing.T) {
	t.Parallel()
	needSwipl(t)
	pad := func(n int) string {
		body := "handler_decl(pad).\nhandler(pad, _, _, patch([])).\n"
		return body + "%" + strings.Repeat("x", n-len(body)-2) + "\n"
	}
	tests := []struct {
		name string
		cfg  func(t *testing.T) Config
		want []string
	}{
		{"tampered after the pin", func(t *testing.T) Config {
			c := moduleConfig(t, nil, shoutModule)
			if err := os.WriteFile(c.HandlerModules[0].Path, []byte(strings.Replace(shoutModule, "!", "?", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			return c
		}, []string{"failed: handler_module: ", "moda.pl has SHA-256 ", ", pinned " + pinOf(shoutModule)}},
		{"syntax error", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])).\nbroken(( :- .\n")
		}, []string{"failed: handler_module: ", "moda.pl:3:", "syntax error"}},
		{"shell/1", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])) :-\n    helper.\nhelper :-\n    shell('touch /tmp/pwned').\n")
		}, []string{"moda.pl:4: in helper/0: shell/1 is not allowed"}},
		{"open/3", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])) :- open('/etc/passwd', read, _).\n")
		}, []string{"moda.pl:2: in handler/4: open/3 is not allowed"}},
		{"time", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([t=T])) :- get_time(T).\n")
		}, []string{"moda.pl:2: in handler/4: get_time/1 is not allowed"}},
		{"meta-call of a built goal", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])) :- G =.. [halt], call(G).\n")
		}, []string{"moda.pl:2: in handler/4: a goal is a variable"}},
		{"module qualification", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])) :- system:halt.\n")
		}, []string{"moda.pl:2: in handler/4: module qualification"}},
		{"a head in another module", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])).\nms_registry:handler(noop, _, _, patch([])).\n")
		}, []string{"moda.pl:3: module-qualified clause heads are not allowed"}},
		{"a control construct as a head", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])).\n(a, b).\n")
		}, []string{"moda.pl:3: ','/2 is reserved"}},
		{"a library predicate as a head", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])).\nappend(_, _, _).\n")
		}, []string{"moda.pl:3: append/3 is reserved"}},
		{"an imported predicate as a head", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])).\n\nsubset(_, _).\n")
		}, []string{"moda.pl:4: subset/2: "}},
		{"assert", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])) :- assertz(seen).\n")
		}, []string{"moda.pl:2: in handler/4: assertz/1 is not allowed"}},
		{"an effect outside the API", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])) :- approval(\"ok?\", _).\n")
		}, []string{"moda.pl:2: in handler/4: approval/2 is not allowed"}},
		{"the RLM API", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(x, _, _, patch([])) :- llm_query(\"hi\", _).\n")
		}, []string{"moda.pl:2: in handler/4: llm_query/2 is the RLM's API"}},
		{"a declaration without clauses", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\nhandler(y, _, _, patch([])).\n")
		}, []string{"moda.pl:1: handler_decl(x) has no handler/4 clause"}},
		{"directive", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(x).\n:- initialization(halt).\nhandler(x, _, _, patch([])).\n")
		}, []string{"moda.pl:2: directives are not allowed"}},
		{"redefining a built-in handler", func(t *testing.T) Config {
			return moduleConfig(t, nil, "handler_decl(noop).\nhandler(noop, _, _, patch([])).\n")
		}, []string{"moda.pl:1: noop/0 is already in the registry"}},
		{"the same handler in two modules", func(t *testing.T) Config {
			return moduleConfig(t, nil, shoutModule, shoutModule)
		}, []string{"modb.pl:2: shout/1 is already in the registry"}},
		{"one byte over the size bound", func(t *testing.T) Config {
			return moduleConfig(t, nil, pad(MaxHandlerModuleBytes+1))
		}, []string{"moda.pl exceeds 131072 bytes"}},
		{"one module over the count bound", func(t *testing.T) Config {
			c := moduleConfig(t, nil, shoutModule)
			for len(c.HandlerModules) <= MaxHandlerModules {
				c.HandlerModules = append(c.HandlerModules, c.HandlerModules[0])
			}
			return c
		}, []string{"17 handler modules, at most 16"}},
		{"relative path", func(t *testing.T) Config {
			c := testConfig(t, nil)
			c.HandlerModules = []HandlerModule{{Path: "mod.pl", SHA256: pinOf("")}}
			return c
		}, []string{`handler_modules[0].path "mod.pl": must be a clean absolute path`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(context.Background(), tc.cfg(t))
			defer e.Close()
			p := e.Describe().Runtime["preflight"]
			t.Log(p)
			for _, w := range tc.want {
				if !strings.Contains(p, w) {
					t.Fatalf("preflight = %q, want %q in it", p, w)
				}
			}
			res, err := e.Step(context.Background(), newFakeHost(1), stepReq(parSpec(), nil))
			if err != nil || res.Outcome != sdk.OutcomeFail || res.Reason != "executor_failed" {
				t.Fatalf("step after a refused module: %+v, %v", res, err)
			}
		})
	}
}

// TestHandlerModuleBounds: at the bounds (16 modules, one of 128 KiB)
// every module loads.
func TestHandlerModuleBounds(t *testing.T) {
	t.Parallel()
	var mods []string
	for i := 0; i < MaxHandlerModules; i++ {
		name := "h" + string(rune('a'+i))
		mods = append(mods, "handler_decl("+name+").\nhandler("+name+", _, _, patch([])).\n")
	}
	big := mods[0] + "%" + strings.Repeat("<", MaxHandlerModuleBytes-len(mods[0])-2) + "\n"
	if len(big) != MaxHandlerModuleBytes {
		t.Fatalf("module of %d bytes", len(big))
	}
	mods[0] = big
	newExecutor(t, moduleConfig(t, nil, mods...))
}

func pinOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestHandlerModuleRunaway: a module's handler that never ends is stopped
// by its node's inference limit like a built-in, and the same worker then
// runs the next task.
func TestHandlerModuleRunaway(t *testing.T) {
	t.Parallel()
	mod := "handler_decl(runaway).\nhandler(runaway, _, _, patch([])) :- go(0).\ngo(N) :- N1 is N + 1, go(N1).\n"
	graph := g("spinner", okState, `nodes([node(a, runaway)])`, okEdges, `limits([node_inferences(100000)])`)
	e := newExecutor(t, moduleConfig(t, map[string]string{"spinner": graph, "shouter": shoutGraph}, mod, shoutModule))
	results, _ := runToEnd(t, e, newFakeHost(1), spec("spinner", nil, ""), nil, 3)
	last := results[len(results)-1]
	if last.Outcome != sdk.OutcomeFail || !strings.Contains(last.Message, "inference_limit") || !strings.Contains(last.Message, "node a exceeded its inference limit") {
		t.Fatalf("runaway handler: %+v", last)
	}
	pid := e.workerPID()
	results, _ = runToEnd(t, e, newFakeHost(1), spec("shouter", nil, ""), nil, 5)
	if last := results[len(results)-1]; last.Outcome != sdk.OutcomeComplete || e.workerPID() != pid {
		t.Fatalf("after the runaway: %+v (worker %d, was %d)", last, e.workerPID(), pid)
	}
}
