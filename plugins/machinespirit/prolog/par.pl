/*  MACHINE-SPIRIT: handlers of the plan_act_review graph (no model).

    Input (the task's machinespirit.input):
        tasks            list of strings, 1..20 items of at most 200 chars
        pass_on_attempt  the attempt at which review accepts (default 1)
        max_attempts     review rejects after this many attempts (default 3, at most 4)

    plan    writes plan.md through the host's workspace.write tool;
    act     writes act-N.md for attempt N;
    review  accepts, asks for a retry, or rejects; it is a pure function of
            the state and the input, so the retry loop is deterministic.
*/
:- module(ms_par, []).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(registry).
:- use_module(effects).

ms_registry:handler_decl(par_plan).
ms_registry:handler(par_plan, Env, _State, patch([plan=Plan, log=[Line]], Note)) :-
    get_dict(input, Env, Input),
    (   get_dict(tasks, Input, Tasks), is_list(Tasks), Tasks \== [],
        length(Tasks, N), N =< 20,
        forall(member(T, Tasks), ( string(T), string_length(T, L), L =< 200 ))
    ->  true
    ;   throw(graph_failure(input, "plan_act_review needs input.tasks: 1..20 strings of at most 200 characters"))
    ),
    numbered(Tasks, 1, Plan),
    atomic_list_concat(Plan, '\n', Text0), atom_string(Text0, Text),
    tool('workspace.write', _{path: "plan.md", content: Text}, _),
    format(string(Line), "planned ~d steps", [N]),
    Note = Line.

numbered([], _, []).
numbered([T|Ts], I, [S|Ss]) :-
    format(string(S), "~d. ~s", [I, T]),
    I1 is I + 1,
    numbered(Ts, I1, Ss).

ms_registry:handler_decl(par_act).
ms_registry:handler(par_act, _Env, State, patch([attempt=1, log=[Line]], Line)) :-
    get_dict(attempt, State, A0), A is A0 + 1,
    get_dict(plan, State, Plan),
    atomic_list_concat(Plan, '\n', P0),
    format(string(Content), "attempt ~d\n~w\n", [A, P0]),
    format(string(Path), "act-~d.md", [A]),
    tool('workspace.write', _{path: Path, content: Content}, _),
    format(string(Line), "acted (attempt ~d)", [A]).

ms_registry:handler_decl(par_review).
ms_registry:handler(par_review, Env, State, patch([verdict=V, log=[Line]], Line)) :-
    get_dict(input, Env, Input),
    int_input(Input, pass_on_attempt, 1, 1, 1000, Pass),
    int_input(Input, max_attempts, 3, 1, 4, MaxA),
    get_dict(attempt, State, A),
    (   A >= Pass -> V = accepted
    ;   A >= MaxA -> V = rejected
    ;   V = retry
    ),
    format(string(Line), "review of attempt ~d: ~w", [A, V]).

int_input(Input, Key, Def, Min, Max, V) :-
    (   get_dict(Key, Input, V0)
    ->  (   integer(V0), V0 >= Min, V0 =< Max -> V = V0
        ;   format(string(M), "input.~w must be an integer in ~d..~d", [Key, Min, Max]),
            throw(graph_failure(input, M))
        )
    ;   V = Def
    ).
