/*  MACHINE-SPIRIT: the trusted registry of node handlers and routers.

    A graph spec can only name handlers and routers declared here (or in
    another trusted source file compiled into the worker). Spec data is
    passed to them as arguments, never called.

    A handler is declared with handler_decl(Pattern) and implemented as

        handler(+Handler, +Env, +State, -Out)

    Env is a dict: graph, node, input (the task's input object), goal,
    context_file (string or null), execution (the 1-based node execution
    number), resume (the answer to the interrupt the previous node paused
    on, or null). State is a dict of the graph's fields. Out is one of

        patch(Patch)             Patch: a dict or a list of Field=Value
        patch(Patch, Note)       Note: a short text for the step summary
        interrupt(Patch, Question)
                                 commit Patch and pause: the host asks its
                                 principal Question (a non-empty text, cut
                                 to 200 characters) and the next step runs
                                 the next node with the answer, a JSON
                                 value, as Env.resume; the effects of this
                                 node are never repeated
        interrupt(Patch, Question, Field)
                                 the same, and the answer is applied to
                                 Field first (reducer and type checked; an
                                 answer that does not fit fails the task
                                 with type_error)

    A handler may throw graph_failure(Code, Message) to fail the task with
    a typed code. A router is declared with router_decl(Pattern) and
    implemented as router(+Router, +Env, +State, -Key).

    Handlers must be deterministic functions of (Env, State) and of the
    results of their effects: time and randomness are not available to
    them except as effects. A node re-run after a crash then computes the
    same thing, and the host replays the effects it already observed.
*/
:- module(ms_registry,
          [ handler_known/1,
            router_known/1,
            run_handler/4,          % +Handler, +Env, +State, -Out
            run_router/4            % +Router, +Env, +State, -Key
          ]).

:- use_module(effects, []).
:- use_module(library(http/json), [json_write_dict/3]).

:- multifile
    handler_decl/1,
    handler/4,
    handler_check/3,                % +Handler, +FieldTypes, -Error: a compile-time check

    router_decl/1,
    router/4,
    graph_spec/1.                   % trusted graph specs shipped with the worker

%   Handlers and routers of operator handler modules (opmodule.pl):
%   Pattern, and the module ms_op_N whose handler/4 or router/4 runs it.
:- dynamic
    op_handler/2,                   % ?Pattern, ?Module
    op_router/2.

handler_known(H) :- ground(H), ( handler_decl(P) ; op_handler(P, _) ), subsumes_term(P, H), !.
router_known(R) :- ground(R), ( router_decl(P) ; op_router(P, _) ), subsumes_term(P, R), !.

%   A pattern of this name and arity is registered (G: most general).
:- public handler_known_pattern/1, router_known_pattern/1.
handler_known_pattern(G) :- ( handler_decl(P) ; op_handler(P, _) ), \+ \+ P = G, !.
router_known_pattern(G) :- ( router_decl(P) ; op_router(P, _) ), \+ \+ P = G, !.

%   An operator module's clauses were rewritten by the allow-list walk;
%   their text wrappers charge a budget that is reset for each call.
run_handler(H, Env, State, Out) :-
    (   op_handler(P, M), subsumes_term(P, H)
    ->  ms_rlm_check:reset_text_budget,
        G = M:handler(H, Env, State, Out0)
    ;   G = handler(H, Env, State, Out0)
    ),
    (   call(G)
    ->  Out = Out0
    ;   format(string(Msg), "handler ~q failed", [H]),
        throw(graph_failure(handler_failed, Msg))
    ).

run_router(R, Env, State, Key) :-
    (   op_router(P, M), subsumes_term(P, R)
    ->  ms_rlm_check:reset_text_budget,
        G = M:router(R, Env, State, Key0)
    ;   G = router(R, Env, State, Key0)
    ),
    (   call(G), atom(Key0)
    ->  Key = Key0
    ;   format(string(Msg), "router ~q gave no route key", [R]),
        throw(graph_failure(router_failed, Msg))
    ).

%   ---- generic handlers: data in, patch out ----

%   noop: changes nothing.
handler_decl(noop).
handler(noop, _Env, _State, patch([])).

%   patch(Pairs): applies a constant patch given in the spec.
handler_decl(patch(_)).
handler(patch(Pairs), _Env, _State, patch(Pairs)).

%   tool(Name, Args): calls the host's tool Name with Args, a dict written
%   in the spec (e.g. tool('time.sleep', json{seconds: 1})).
handler_decl(tool(_, _)).
handler(tool(Name, Args), _Env, _State, patch([])) :-
    ms_effects:tool(Name, Args, _).

%   tool(Name, Args, Field): the same, keeping the tool's result in Field
%   (a field of type json).
handler_decl(tool(_, _, _)).
handler(tool(Name, Args, Field), _Env, _State, patch([Field=Result])) :-
    ms_effects:tool(Name, Args, Result).

%   input(Question, Field): pauses the task until its principal answers
%   Question (`taskhost approve ID --value JSON`); the answer goes to Field.
handler_decl(input(_, _)).
handler(input(Question, Field), _Env, _State, interrupt([], Question, Field)).

%   input_goal(Field): input/2 with the task's goal as the question.
handler_decl(input_goal(_)).
handler(input_goal(Field), Env, _State, interrupt([], Goal, Field)) :-
    get_dict(goal, Env, Goal0),
    (   Goal0 == "" -> Goal = "(the task has no goal text)" ; Goal = Goal0 ).

%   write_json(Field, Path): writes the JSON of Field to workspace file
%   Path (a tool effect).
handler_decl(write_json(_, _)).
handler(write_json(Field, Path), _Env, State, patch([])) :-
    get_dict(Field, State, V),
    with_output_to(string(Text), json_write_dict(current_output, V, [width(0)])),
    ms_effects:tool('workspace.write', _{path: Path, content: Text}, _).

%   fail_graph(Code): fails the task with Code (an atom).
handler_decl(fail_graph(_)).
handler(fail_graph(Code), Env, _State, _) :-
    get_dict(node, Env, Node),
    format(string(Msg), "node ~q failed the graph with ~q", [Node, Code]),
    throw(graph_failure(Code, Msg)).

%   ---- generic routers ----

%   always(Key): always takes the route Key.
router_decl(always(_)).
router(always(Key), _Env, _State, Key).

%   by_field(Field): takes the route named by an atom-typed field.
router_decl(by_field(_)).
router(by_field(Field), _Env, State, Key) :-
    get_dict(Field, State, Key),
    atom(Key).
