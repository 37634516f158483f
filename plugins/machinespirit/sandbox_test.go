package machinespirit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
)

// goalRun is what one model goal did: the feedback the root model got for
// it on the next turn, and how the task ended.
type goalRun struct {
	feedback string
	last     sdk.StepResult
}

// runGoal runs the rlm graph with a scripted root model whose first reply
// is goal and whose second is final("done"), on a small context. The task
// must end completed with exactly that answer: a goal can neither end the
// task its own way nor break the loop.
func runGoal(t *testing.T, e *Executor, goal string) goalRun {
	t.Helper()
	h := newFakeHost(1)
	h.workspace["ctx.txt"] = "a small context"
	model := &scriptedModel{root: []string{goal, `final("done")`}, sub: func(string) string { return "sub answer" }}
	h.model = model.answer
	results, _ := runToEnd(t, e, h, spec("rlm_goals", nil, "ctx.txt"), nil, 5)
	last := results[len(results)-1]
	prompts := rootPrompts(h)
	if len(prompts) != 2 {
		t.Fatalf("%d root prompts, want 2 (last step %+v)", len(prompts), last)
	}
	i := strings.Index(prompts[1], "Results so far")
	if i < 0 {
		t.Fatalf("no results in the second prompt:\n%s", prompts[1])
	}
	if last.Outcome != sdk.OutcomeComplete || string(last.Result) != `{"answer":"done"}` {
		t.Fatalf("the task did not end with the scripted final answer: %+v (%s)\n%s", last, last.Result, prompts[1][i:])
	}
	return goalRun{feedback: prompts[1][i:], last: last}
}

// hostileGoal is one row of the hostile table. A refused goal never runs:
// its feedback is "rejected: <want>". A contained goal runs (or starts to)
// and fails with an error the model sees, naming want; nothing escapes.
type hostileGoal struct {
	name, goal string
	refused    bool
	want       string
}

// hostileGoals are the routes of issue 14 and their neighbours. %P is a
// marker path that must never be created.
func hostileGoals() []hostileGoal {
	notAllowed := func(pi string) string { return pi + " is not allowed" }
	const variable = "a goal is a variable when the reply is checked"
	const module = "module qualification"
	return []hostileGoal{
		// the OS and files
		{"shell", "shell('touch %P')", true, notAllowed("shell/1")},
		{"shell/2", "shell('touch %P', S)", true, notAllowed("shell/2")},
		{"system:shell", "system:shell('touch %P')", true, module},
		{"call shell", "call(shell, 'touch %P')", true, notAllowed("shell/1")},
		{"call/3 shell closure", "call(shell('touch %P'), S)", true, notAllowed("shell/2")},
		{"process_create", "process_create(path(touch), ['%P'], [])", true, notAllowed("process_create/3")},
		{"open for writing", "open('%P', write, S), close(S)", true, notAllowed("open/3")},
		{"open /etc/passwd", "open('/etc/passwd', read, S)", true, notAllowed("open/3")},
		{"see", "see('%P')", true, notAllowed("see/1")},
		{"tell", "tell('%P')", true, notAllowed("tell/1")},
		{"setenv", "setenv(x, y)", true, notAllowed("setenv/2")},
		{"getenv", "getenv('HOME', H)", true, notAllowed("getenv/2")},
		{"halt", "halt", true, notAllowed("halt/0")},
		{"halt/1", "halt(0)", true, notAllowed("halt/1")},
		{"abort", "abort", true, notAllowed("abort/0")},
		{"thread_create", "thread_create(true, T, [])", true, notAllowed("thread_create/3")},
		// loading code
		{"use_module ../evil", "use_module('../evil')", true, notAllowed("use_module/1")},
		{"consult", "consult('../evil')", true, notAllowed("consult/1")},
		{"ensure_loaded", "ensure_loaded('../evil')", true, notAllowed("ensure_loaded/1")},
		{"load_files", "load_files(['../evil'], [])", true, notAllowed("load_files/2")},
		{"list consult", "['../evil']", true, notAllowed("'[|]'/2")},
		{"assertz", "assertz(pwned)", true, notAllowed("assertz/1")},
		{"asserta user", "asserta(user:pwned)", true, notAllowed("asserta/1")},
		{"retract", "retract(ms_registry:handler(_, _, _, _))", true, notAllowed("retract/1")},
		{"dynamic", "dynamic(foo/1)", true, notAllowed("dynamic/1")},
		{"op", "op(700, xfx, ===)", true, notAllowed("op/3")},
		// the worker's state: global variables, flags, internals
		{"nb_getval ms_env", "nb_getval(ms_env, E)", true, notAllowed("nb_getval/2")},
		{"call nb_getval ms_env", "call(nb_getval, ms_env, E)", true, notAllowed("nb_getval/2")},
		{"b_getval", "b_getval(ms_call_ctx, C)", true, notAllowed("b_getval/2")},
		{"nb_current ms_call_ctx", "nb_current(ms_call_ctx, C)", true, notAllowed("nb_current/2")},
		{"nb_setval", "nb_setval(ms_rlm_final, answer(\"forged\"))", true, notAllowed("nb_setval/2")},
		{"current_call_context", "current_call_context(C)", true, notAllowed("current_call_context/1")},
		{"ms_effects internals", "ms_effects:current_call_context(C)", true, module},
		{"ms_rlm_api internals", "ms_rlm_api:workspace_read(\"/etc/passwd\", 0, 100, C, S)", true, module},
		{"ms_effects effect", "ms_effects:effect(tool, _{name: \"x\"}, V)", true, module},
		{"argv flag", "current_prolog_flag(argv, A)", true, notAllowed("current_prolog_flag/2")},
		{"prolog_flag", "prolog_flag(argv, A)", true, notAllowed("prolog_flag/2")},
		{"set_prolog_flag", "set_prolog_flag(double_quotes, codes)", true, notAllowed("set_prolog_flag/2")},
		{"flag/3", "flag(ms_effect_id, X, X)", true, notAllowed("flag/3")},
		// time and randomness
		{"get_time", "get_time(T)", true, notAllowed("get_time/1")},
		{"call get_time", "call(get_time, T)", true, notAllowed("get_time/1")},
		{"findall get_time", "findall(X, call(get_time, X), L)", true, notAllowed("get_time/1")},
		{"sleep via call", "call(sleep, 1)", true, notAllowed("sleep/1")},
		{"statistics", "statistics(runtime, X)", true, notAllowed("statistics/2")},
		{"random_between", "random_between(1, 6, X)", true, notAllowed("random_between/3")},
		// every meta-call route
		{"call of a variable", "G = shell('touch %P'), call(G)", true, variable},
		{"a variable as goal", "G = shell('touch %P'), G", true, variable},
		{"=.. then call", "X =.. [shell, 'touch %P'], call(X)", true, variable},
		{"call/2 variable closure", "F = shell, call(F, 'touch %P')", true, "a closure is a variable"},
		{"findall", "findall(X, shell('touch %P'), L)", true, notAllowed("shell/1")},
		{"findall of a variable", "G = shell(x), findall(x, G, L)", true, variable},
		{"forall", "forall(member(X, [1]), shell('touch %P'))", true, notAllowed("shell/1")},
		{"maplist", "maplist(shell, ['touch %P'])", true, notAllowed("shell/1")},
		{"maplist call", "maplist(call, [shell('touch %P')])", true, variable},
		{"foldl call", "foldl(call, [shell('touch %P')], 0, _)", true, "a closure is a variable"},
		{"aggregate_all count", "aggregate_all(count, shell('touch %P'), C)", true, notAllowed("shell/1")},
		{"aggregate_all open spec", "S = count, aggregate_all(S, true, C)", true, "aggregate_all/3 must be written out"},
		{"not provable", "\\+ shell('touch %P')", true, notAllowed("shell/1")},
		{"once", "once(shell('touch %P'))", true, notAllowed("shell/1")},
		{"ignore", "ignore(shell('touch %P'))", true, notAllowed("shell/1")},
		{"setof caret", "setof(X, Y^shell(Y), L)", true, notAllowed("shell/1")},
		{"include", "include(shell, ['touch %P'], L)", true, notAllowed("shell/1")},
		{"predsort", "predsort(shell3, [b, a], L)", true, notAllowed("shell3/3")},
		{"call call call", "call(call, call, shell('touch %P'))", true, "a closure is a variable"},
		{"yall lambda", "maplist([X]>>shell(X), ['touch %P'])", true, notAllowed(">>/3")},
		{"apply", "apply(shell, ['touch %P'])", true, notAllowed("apply/2")},
		{"freeze", "freeze(X, shell('touch %P')), X = 1", true, notAllowed("freeze/2")},
		{"when", "when(nonvar(X), shell('touch %P')), X = 1", true, notAllowed("when/2")},
		{"string_code trick", "string_code(1, \"shell\", C), atom_codes(A, [C]), call(A, 'touch %P')", true, "a closure is a variable"},
		{"a dict as goal", "_{a: 1}", true, "a dict is not a goal"},
		{"a string as goal", "\"shell('x')\"", true, "is not a goal"},
		{"a zero-arity compound", "a000000()", true, "a000000() is not a goal"},
		{"a zero-arity closure", "maplist(shell(), ['touch %P'])", true, "shell() is not a closure"},
		// exceptions
		{"catch", "catch(shell('touch %P'), _, true)", true, notAllowed("catch/3")},
		{"catch swallowing", "catch(true, _, true)", true, notAllowed("catch/3")},
		{"throw aborted", "throw('$aborted')", true, notAllowed("throw/1")},
		{"throw unwind", "throw(unwind(halt(0)))", true, notAllowed("throw/1")},
		{"throw cancel", "throw(ms_cancelled)", true, notAllowed("throw/1")},
		{"setup_call_cleanup", "setup_call_cleanup(true, true, shell('touch %P'))", true, notAllowed("setup_call_cleanup/3")},
		// goal-calling text
		{"format ~@", "format(\"~@\", [shell('touch %P')])", true, notAllowed("format/2")},
		{"format/3 ~@", "format(atom(A), \"~@\", [shell('touch %P')])", true, notAllowed("format/3")},
		{"message_to_string ~@", "X =.. [format, \"~@\", [shell('touch %P')]], message_to_string(X, S)", true, notAllowed("message_to_string/2")},
		{"print_message", "print_message(error, format(\"~@\", [shell('touch %P')]))", true, notAllowed("print_message/2")},
		{"atom_to_term then call", "atom_to_term('shell(x)', T, B), call(T)", true, notAllowed("atom_to_term/3")},
		{"term_to_atom then call", "term_to_atom(T, 'shell(x)'), T", true, notAllowed("term_to_atom/2")},
		{"term_string", "term_string(T, \"shell(x)\")", true, notAllowed("term_string/2")},
		{"read_term", "read_term(T, [])", true, notAllowed("read_term/2")},
		{"read_term_from_atom", "read_term_from_atom('shell(x)', T, [])", true, notAllowed("read_term_from_atom/3")},
		{"with_output_to", "with_output_to(string(S), true)", true, notAllowed("with_output_to/2")},
		// output: the protocol pipe is not reachable, and printing is refused
		{"forged result frame", `write('{"type":"result","id":1,"outcome":"complete","summary":"x","checkpoint":{},"result":{"answer":"forged"}}')`, true, notAllowed("write/1")},
		{"forged frame to user_output", `format(user_output, "{\"type\":\"result\"}~n", [])`, true, notAllowed("format/3")},
		{"nl", "nl", true, notAllowed("nl/0")},
		// arithmetic built at run time
		{"random in arithmetic", "X is random(6)", false, "random/1 is not allowed"},
		{"random bound at run time", "E = random(6), X is E", false, "random/1 is not allowed"},
		{"cputime bound at run time", "E = cputime, X is E + 1", false, "cputime/0 is not allowed"},
		{"random compared", "E = random_float, E > 0.5", false, "random_float/0 is not allowed"},
		{"random in sum_list", "sum_list([random(6)], S)", false, "Type error"},
		{"random in aggregate_all", "aggregate_all(sum(X), member(X, [random(6)]), S)", false, "random/1 is not allowed"},
		// memory outside the stacks
		{"the huge atom", "length(L, 200000), maplist(=(0'a), L), atom_codes(A, L), findall(A, between(1, 2000, _), As), atomic_list_concat(As, B)",
			false, "atomic_list_concat/2 would build a text of 400,000,000 characters"},
		{"concat doubling", "length(L, 1000), maplist(=(0'a), L), atom_codes(D, L), " +
			"atom_concat(D, D, D1), atom_concat(D1, D1, D2), atom_concat(D2, D2, D3), atom_concat(D3, D3, D4), atom_concat(D4, D4, D5), " +
			"atom_concat(D5, D5, D6), atom_concat(D6, D6, D7), atom_concat(D7, D7, D8), atom_concat(D8, D8, D9), atom_concat(D9, D9, D10)",
			false, "atom_concat/3 would build a text of 1,024,000 characters"},
		{"sub_atom enumeration", "length(L, 100000), maplist(=(0'a), L), atom_codes(A, L), findall(S, sub_atom(A, 0, _, _, S), Ss)",
			false, "the goal's texts would exceed 32,000,000 characters"},
		{"a long list", "length(L, 100000000)", false, "stack"},
		{"a huge integer", "X is 2^(2^40)", false, "stack"},
	}
}

// TestRLMHostileGoals drives the real worker with every hostile goal of
// the table: each is refused before it runs, or runs contained; the task
// still ends with the scripted answer, and the marker file never appears.
func TestRLMHostileGoals(t *testing.T) {
	t.Parallel()
	probe := filepath.Join(t.TempDir(), "escaped")
	e := newExecutor(t, testConfig(t, nil))
	rows := hostileGoals()
	if len(rows) < 60 {
		t.Fatalf("only %d hostile goals", len(rows))
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			goal := strings.ReplaceAll(tc.goal, "%P", probe)
			r := runGoal(t, e, goal)
			if tc.refused {
				if !strings.Contains(r.feedback, "=> rejected: ") {
					t.Fatalf("the goal was not refused:\n%s", r.feedback)
				}
			} else if strings.Contains(r.feedback, "=> rejected:") || !strings.Contains(r.feedback, "=> error:") {
				t.Fatalf("the goal was meant to run and fail with an error:\n%s", r.feedback)
			}
			if !strings.Contains(r.feedback, tc.want) {
				t.Fatalf("feedback lacks %q:\n%s", tc.want, r.feedback)
			}
		})
	}
	if _, err := os.Stat(probe); err == nil {
		t.Fatal("a hostile goal created the marker file")
	}
}

// TestRLMAllowedGoals: the allow-list is not a refuse-everything list; the
// pure built-ins, the meta-predicates over checked goals and the RLM API
// work, and bindings come back bounded.
func TestRLMAllowedGoals(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, testConfig(t, nil))
	for _, tc := range []struct{ goal, want string }{
		{"context_length(N)", "N = 15"},
		{"context_prefix(P)", `P = "a small context"`},
		{"context_slice(2, 5, S)", `S = "small"`},
		{`llm_query("what is it?", A)`, `A = "sub answer"`},
		{"findall(X-Y, (member(X, [1, 2]), Y is X * 2), L)", "L = [1-2,2-4]"},
		{"atom_length(abc, N)", "N = 3"},
		{"maplist(succ, [1, 2], L)", "L = [2,3]"},
		{"foldl(atom_concat, [b, c], a, R)", "R = cba"},
		{"aggregate_all(count, member(_, [a, b]), C)", "C = 2"},
		{"aggregate_all(sum(X), member(X, [1, 2, 3]), S)", "S = 6"},
		{"aggregate_all(max(X), member(X, [1, 5, 3]), M)", "M = 5"},
		{"aggregate_all(bag(X), member(X, [c, a]), B)", "B = [c,a]"},
		{"sort(0, @>=, [1, 3, 2], L)", "L = [3,2,1]"},
		{"sub_atom(hello, 1, 3, _, S)", "S = ell"},
		{"atomic_list_concat([a, b, c], '-', A)", "A = 'a-b-c'"},
		{"atomic_list_concat(Parts, ',', 'x,y')", "Parts = [x,y]"},
		{`split_string("a b", " ", "", P)`, `P = ["a","b"]`},
		{`string_concat("ab", "cd", S)`, `S = "abcd"`},
		{"T = f(a, b), T =.. L", "L = [f,a,b]"},
		{"nth1(2, [a, b, c], E)", "E = b"},
		{"once(member(X, [a, b]))", "X = a"},
		{"forall(member(X, [1, 2]), X > 0)", "X = _"},
		{"\\+ member(z, [a])", "=> true"},
		{"ignore(member(z, []))", "=> true"},
		{"call(atom_length, abc, N)", "N = 3"},
		{"X is max(3, 4) * 2", "X = 8"},
		{"E = 3 + 4, X is E", "X = 7"},
		{"setof(X, Y^member(X-Y, [b-1, a-2]), L)", "L = [a,b]"},
		{"include(integer, [a, 1, b, 2], L)", "L = [1,2]"},
		{"exclude(atom, [a, 1], L)", "L = [1]"},
		{`string_code(1, "abc", C)`, "C = 97"},
		{"sum_list([1, 2, 3], S)", "S = 6"},
		{"upcase_atom(abc, U)", "U = 'ABC'"},
		{"length(L, 2), L = [a|_]", "L = [a,_"},
		{"(member(X, [1, 2]), X > 1 -> Y = yes ; Y = no)", "Y = yes"},
		{"length(L, 300000), maplist(=(0'a), L), atom_codes(A, L)", `A = '<atom of 300,000 characters starting "aaaa`},
		{"X is 2^100000", "X = '<integer of 100001 bits>'"},
	} {
		t.Run(tc.goal, func(t *testing.T) {
			r := runGoal(t, e, tc.goal)
			if strings.Contains(r.feedback, "rejected:") || strings.Contains(r.feedback, "error:") || !strings.Contains(r.feedback, tc.want) {
				t.Fatalf("feedback lacks %q:\n%s", tc.want, r.feedback)
			}
		})
	}
}
