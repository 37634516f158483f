/*  MACHINE-SPIRIT: the model node, a graph calling a model without the RLM.

    node(N, model(Template, Field))
    node(N, model(Template, Field, Options))

    Template is a text whose {{name}} placeholders are the graph's state
    fields (and {{goal}}, the task's goal); the filled-in prompt (at most
    6000 characters) is one model call in the node's call context (depth
    0 at the top of a task). The reply is parsed into Field by the field's
    declared type, never read as a Prolog term:

        string            the reply, trimmed (at most 8000 characters)
        integer, number   digits (and a sign, a point for number), nothing else
        boolean           yes | no | true | false
        atom              one of the atoms of one_of([...]) (required: no
                          atom is made from model text)
        json              one JSON value (library(http/json); strings stay
                          strings; object keys become atoms, bounded by the
                          reply's 16384 characters)
        list(string)      one item per non-empty line (at most 64)
        optional(T)       an empty reply or "null" is null, else as T

    Options: system(Text) a system message; retries(N) 0..2 (default 1):
    a reply that does not parse is asked again with what was wrong; after
    the last the task fails with model_reply_invalid; tools([Name, ...])
    (1..8 distinct host tool names) lets the model call those tools: the
    plugin runs each call through the host's tool service and asks again
    with the results, at most 8 model calls per answer, past which the
    task fails with model_tool_rounds; the reply without tool calls is
    the one parsed. The field's reducer applies the value (a sum field
    adds it).

    The compiler checks Field and every placeholder against the state and
    the options' shapes (code model_node).
*/
:- module(ms_model_node, []).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(http/json)).
:- use_module(protocol).
:- use_module(effects).
:- use_module(registry).
:- use_module(rlm_plan, [template_parts/2, json_text_clean/1]).

max_prompt_chars(6000).
max_reply_chars(16384).
max_text_chars(8000).
max_list_items(64).

ms_registry:handler_decl(model(_, _)).
ms_registry:handler_decl(model(_, _, _)).
ms_registry:handler(model(T, F), Env, State, Out) :-
    ms_registry:handler(model(T, F, []), Env, State, Out).
ms_registry:handler(model(Template, Field, Opts), Env, State, patch([Field=Value], Note)) :-
    get_dict(graph, Env, GId),
    ms_graph:graph(GId, G),
    ms_graph:graph_field(G, field(Field, Type, _, _)),
    template_parts(Template, Parts),
    maplist(fill(Env, G, State), Parts, Texts),
    atomic_list_concat(Texts, A), atom_string(A, Prompt),
    string_length(Prompt, L), max_prompt_chars(MaxP),
    (   L =< MaxP -> true
    ;   format(string(M), "the model node's prompt has ~D characters; at most ~D", [L, MaxP]),
        throw(graph_failure(model_prompt_too_large, M))
    ),
    (   memberchk(system(Sys), Opts) -> Msgs0 = [system(Sys)] ; Msgs0 = [] ),
    (   memberchk(retries(R), Opts) -> true ; R = 1 ),
    ask(Msgs0, Prompt, Type, Opts, R, Value),
    format(string(Note), "model reply parsed into ~w", [Field]).

fill(_, _, _, lit(S), S).
fill(Env, G, State, var(N), T) :-
    (   N == "goal" -> get_dict(goal, Env, T)
    ;   atom_string(F, N), ms_graph:graph_field(G, field(F, Type, _, _)),
        get_dict(F, State, V),
        value_text(Type, V, T)
    ).

value_text(_, V, T) :- string(V), !, T = V.
value_text(_, V, T) :- number(V), !, number_string(V, T).
value_text(_, V, T) :- atom(V), !, atom_string(V, T).
value_text(list(E), L, T) :- is_list(L), !,
    maplist(value_text(E), L, Ts),
    atomic_list_concat(Ts, '\n', A), atom_string(A, T).
value_text(_, V, T) :-
    with_output_to(string(T), json_write_dict(current_output, V, [width(0)])).

ask(Msgs0, Prompt, Type, Opts, Retries, Value) :-
    append(Msgs0, [user(Prompt)], Msgs),
    ask_model(Msgs, Opts, Reply0),
    (   parse_reply(Type, Opts, Reply0, V, Why)
    ->  true
    ;   V = none
    ),
    (   V \== none
    ->  Value = V
    ;   Retries > 0
    ->  truncate_text(Reply0, 200, Shown),
        format(string(Repair), "~s\n\nYour previous answer was ~q, which is not ~s. Reply again with that only.", [Prompt, Shown, Why]),
        truncate_text(Repair, 6500, Repair1),
        R1 is Retries - 1,
        ask(Msgs0, Repair1, Type, Opts, R1, Value)
    ;   truncate_text(Reply0, 100, Shown),
        format(string(M), "the model answered ~q, which is not ~s", [Shown, Why]),
        throw(graph_failure(model_reply_invalid, M))
    ).

ask_model(Msgs, Opts, Text) :-
    (   memberchk(tools(Ts), Opts) -> CallOpts = [tools(Ts)] ; CallOpts = [] ),
    catch(model_call(Msgs, CallOpts, Reply),
          effect_error(model, tool_rounds_exhausted, M),
          throw(graph_failure(model_tool_rounds, M))),
    get_dict(text, Reply, Text).

%   parse_reply(+Type, +Opts, +Reply, -Value, -Why): Value is none (with
%   Why saying what was wanted) when Reply does not fit.
parse_reply(Type, Opts, Reply, Value, Why) :-
    string_length(Reply, L), max_reply_chars(Max),
    (   L > Max
    ->  Value = none, format(string(Why), "a reply of at most ~d characters", [Max])
    ;   sub_string(Reply, _, _, _, "\u0000")           % split_string/4 fails on a NUL
    ->  Value = none, Why = "a text without NUL characters"
    ;   split_string(Reply, "", " \t\r\n", [T]),
        (   parse_as(Type, Opts, T, V) -> Value = V, Why = ""
        ;   Value = none, wanted(Type, Opts, Why)
        )
    ).

parse_as(optional(_), _, T, null) :- memberchk(T, ["", "null"]), !.
parse_as(optional(Ty), Opts, T, V) :- !, parse_as(Ty, Opts, T, V).
parse_as(string, _, T, V) :- max_text_chars(M), truncate_text(T, M, V).
parse_as(integer, _, T, V) :- numeric(T, false), number_string(V, T), integer(V).
parse_as(number, _, T, V) :- numeric(T, true), number_string(V, T).
parse_as(boolean, _, T, V) :-
    string_lower(T, L),
    (   memberchk(L, ["yes", "true"]) -> V = true
    ;   memberchk(L, ["no", "false"]) -> V = false
    ).
parse_as(atom, Opts, T, V) :-
    memberchk(one_of(Atoms), Opts),
    member(V, Atoms), atom_string(V, T), !.
parse_as(json, _, T, V) :-
    catch(setup_call_cleanup(open_string(T, S),
                             ( json_read(S, J, [value_string_as(string), null(null), true(true),
                                                false(false), end_of_file(error)]),
                               \+ ( peek_char(S, C), C \== end_of_file ) ),
                             close(S)),
          _, fail),
    json_text_clean(J),
    catch(json_dict(J, V), _, fail).          % a duplicate key: not one value

parse_as(list(string), _, T, V) :-
    split_string(T, "\n", " \t\r", Ls0),
    exclude(==(""), Ls0, V),
    length(V, N), max_list_items(M), N =< M.

%   The classic json(Pairs) term as the dict json_read_dict/3 would give.
json_dict(json(Pairs), D) :- !,
    maplist(json_pair, Pairs, KVs),
    dict_pairs(D, _, KVs).
json_dict(L, Out) :- is_list(L), !, maplist(json_dict, L, Out).
json_dict(V, V).

json_pair(K=V0, K-V) :- json_dict(V0, V).

%   Digits with an optional sign (and one point if Float), at most 30.
numeric(T, Float) :-
    string_codes(T, Cs0),
    (   Cs0 = [0'-|Cs] -> true ; Cs = Cs0 ),
    Cs \== [], length(Cs, N), N =< 30,
    (   Float == true, append(A, [0'.|B], Cs) -> digits(A), digits(B), A \== [], B \== []
    ;   digits(Cs)
    ).

digits(Cs) :- forall(member(C, Cs), ( C >= 0'0, C =< 0'9 )).

wanted(optional(T), O, W) :- !, wanted(T, O, W0), format(string(W), "~s, or empty", [W0]).
wanted(integer, _, "an integer (digits only)").
wanted(number, _, "a number (digits, at most one point)").
wanted(boolean, _, "yes or no").
wanted(atom, O, W) :- ( memberchk(one_of(As), O) -> atomic_list_concat(As, ', ', A), format(string(W), "one of ~w", [A]) ; W = "one of the allowed words" ).
wanted(json, _, "one JSON value").
wanted(list(string), _, "one item per line (at most 64)").
wanted(string, _, "a text").

%   The compile-time check (registry's handler_check/3): Error is a message
%   when model(Template, Field[, Options]) does not fit the graph
%   (FieldTypes: Name-Type pairs); it fails when it does.
ms_registry:handler_check(H, FTs, Error) :-
    (   H = model(T, F) -> Opts = [] ; H = model(T, F, Opts) ), !,
    (   string(T), template_parts(T, Parts0) -> Parts = Parts0 ; Parts = bad ),
    (   \+ string(T)
    ->  Error = "the template must be a string"
    ;   Parts == bad
    ->  Error = "the template has an unclosed {{"
    ;   member(var(N), Parts), N \== "goal", \+ ( member(F1-_, FTs), atom_string(F1, N) )
    ->  format(string(Error), "the template uses {{~s}}, which is not a field", [N])
    ;   \+ memberchk(F-_, FTs)
    ->  format(string(Error), "~q is not a field", [F])
    ;   memberchk(F-Type, FTs), \+ supported(Type, Opts)
    ->  format(string(Error), "field ~q of type ~q cannot take a model reply (an atom field needs one_of([...]))", [F, Type])
    ;   \+ ( is_list(Opts), forall(member(O, Opts), option_ok(O)) )
    ->  format(string(Error), "options are system(Text), retries(0..2), one_of([atom, ...]), tools([ToolName, ...]) (1..8 distinct names), not ~q", [Opts])
    ).

supported(optional(T), O) :- !, supported(T, O).
supported(atom, O) :- !, memberchk(one_of(As), O), is_list(As), As \== [], forall(member(A, As), atom(A)).
supported(T, _) :- memberchk(T, [string, integer, number, boolean, json, list(string)]).

option_ok(system(S)) :- string(S), string_length(S, L), L =< 4000.
option_ok(retries(N)) :- integer(N), between(0, 2, N).
option_ok(one_of(As)) :- is_list(As), length(As, N), N =< 64.
option_ok(tools(Ts)) :-
    is_list(Ts), length(Ts, N), between(1, 8, N),
    maplist(tool_name, Ts),
    maplist(name_text, Ts, Ss),
    sort(Ss, Sorted), length(Sorted, N).

name_text(T, S) :- atom_string(T, S).

%   A host tool's name: lowercase letters, digits, '_' and '.', at most 64.
tool_name(T) :-
    ( atom(T) ; string(T) ), !,
    atom_codes(T, Cs), Cs = [C0|_], C0 >= 0'a, C0 =< 0'z,
    length(Cs, L), L =< 64,
    forall(member(C, Cs), ( C >= 0'a, C =< 0'z ; C >= 0'0, C =< 0'9 ; C == 0'_ ; C == 0'. )).

