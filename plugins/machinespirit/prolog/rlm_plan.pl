/*  MACHINE-SPIRIT: the RLM's typed plans (schema machinespirit.plan/1).

    In the `rlm` graph the root model replies with a JSON plan in a
    closed, versioned schema (plugins/machinespirit/schema/plan-1.schema.json).
    Trusted code here parses it with library(http/json), validates it
    into a plan term, and interprets that term. No model text is ever read
    as a Prolog term or called: strings stay strings, variable names stay
    strings (no atom is made of them), and the only atoms made from the
    reply are the JSON object keys the parser creates, bounded by the
    reply's length (at most max_reply_chars).

    A plan that does not validate is fed back to the root model as a
    structured error {"error":"plan_invalid","path","message"}; after
    max_repairs consecutive invalid plans the task fails with
    rlm_plan_invalid.

    Operations (each step may bind its result to a variable with "as"):
        length     context size in bytes                      -> int
        peek       the first bytes of the context             -> text
        slice      bytes [from, from+bytes)                   -> text
        search     substring or regex over the whole context  -> hits
        partition  the context into chunks of chunk_bytes     -> chunks
        query      one sub-model call on a template           -> text | int
        map        a sub-model call per item of a list, at most
                   `parallel` at once, retries with repair    -> list
        reduce     join | count | sum | max | min | unique | query
        recurse    a sub-run of this graph, one level deeper  -> text
        final      the task's answer; ends the plan and the loop

    A whole plan runs inside one node execution (one step), under the root
    call that produced it, so every sub-call is one level deeper than the
    root and the host computes that depth. A crash during the step re-runs
    it: the root call and the sub-calls already answered are replayed by
    the host's ledger in the order the plan makes them, so they are not
    repeated (with parallel > 1 the host numbers the calls of one batch
    in the order they reach it; see the README).
*/
:- module(ms_rlm_plan,
          [ parse_plan_text/2,       % +Text, -Plan   (throws plan_invalid(Path, Msg))
            template_parts/2,        % +Text, -Parts  (lit(S) | var(Name)); fails if unclosed
            json_text_clean/1,       % +JSON (classic term): no NUL, no surrogate
            run_plan/2,              % +Plan, -Result
            plan_ops/1               % -Ops
          ]).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(http/json)).
:- use_module(library(pcre)).
:- use_module(protocol).
:- use_module(effects).
:- use_module(rlm_api, []).
:- use_module(registry).
:- use_module(rlm, [root_turn/5, push_recent/3, strip_fences/2, root_facts/6]).

plan_schema("machinespirit.plan/1").
max_reply_chars(16384).
max_steps(32).
max_vars(32).
max_template_chars(2000).
max_sub_prompt_chars(6000).
max_item_answer_chars(1000).
max_answer_chars(8000).
max_map_items(64).
max_parallel(4).
max_sub_steps(8).
max_retries(2).
max_search_results(50).
max_search_window(200).
max_pattern_chars(200).
search_piece_bytes(65536).
search_overlap_bytes(1024).
max_search_scan_bytes(8_388_608).
max_slice_bytes(4096).
max_chunk_bytes(4096).

plan_ops([length, peek, slice, search, partition, query, map, reduce, recurse, final]).

%   ---- parsing: text -> JSON term, never a Prolog term of the text ----

%!  parse_plan_text(+Text, -Plan) is det.
%
%   Plan is plan(Steps) of validated step terms. Throws
%   plan_invalid(Path, Message), Path a string such as "steps[2].bytes".
parse_plan_text(Text0, Plan) :-
    string_length(Text0, L),
    max_reply_chars(Max),
    (   L =< Max -> true
    ;   invalid("", "the reply has ~d characters; at most ~d", [L, Max])
    ),
    (   sub_string(Text0, _, _, _, "\u0000")       % split_string/4 fails on a NUL
    ->  invalid("", "the reply holds a NUL character", [])
    ;   strip_fences(Text0, Text)
    ),
    catch(read_json(Text, JSON), E, json_syntax(E)),
    validate_plan(JSON, Plan).

read_json(Text, JSON) :-
    setup_call_cleanup(
        open_string(Text, S),
        ( json_read(S, JSON, [value_string_as(string), null(null), true(true),
                              false(false), end_of_file(error)]),
          skip_ws(S),
          (   at_end_of_stream(S) -> true
          ;   throw(plan_invalid("", "the reply holds more than one JSON value"))
          )
        ),
        close(S)),
    (   json_text_clean(JSON) -> true
    ;   throw(plan_invalid("", "a string holds a NUL or a lone surrogate (\\u0000, \\ud800-\\udfff)"))
    ).

%!  json_text_clean(+JSON) is semidet.
%
%   No string or key of JSON holds a NUL or a UTF-16 surrogate: a JSON
%   escape can make both, and neither can be written back as UTF-8.
json_text_clean(json(Pairs)) :- !,
    forall(member(K=V, Pairs), ( clean_text(K), json_text_clean(V) )).
json_text_clean(L) :- is_list(L), !,
    forall(member(V, L), json_text_clean(V)).
json_text_clean(S) :- string(S), !, clean_text(S).
json_text_clean(_).

clean_text(T) :-
    \+ ( sub_atom(T, _, 1, _, C), char_code(C, X), ( X =:= 0 ; X >= 0xD800, X =< 0xDFFF ) ).

skip_ws(S) :-
    peek_code(S, C),
    (   memberchk(C, [0' , 0'\t, 0'\n, 0'\r]) -> get_code(S, _), skip_ws(S) ; true ).

json_syntax(plan_invalid(P, M)) :- !, throw(plan_invalid(P, M)).
json_syntax(error(syntax_error(What), _)) :- !,
    format(string(W), "~q", [What]),
    truncate_text(W, 100, WS),
    invalid("", "the reply is not one JSON object (~s)", [WS]).
json_syntax(_) :-
    invalid("", "the reply is not one JSON object", []).

invalid(Path, Fmt, Args) :-
    format(string(M), Fmt, Args),
    throw(plan_invalid(Path, M)).

%   ---- validation: JSON term -> plan term ----

validate_plan(JSON, plan(Steps)) :-
    obj(JSON, "", Pairs),
    only_keys(Pairs, "", [plan, steps]),
    req(Pairs, plan, "", V),
    plan_schema(Schema),
    (   V == Schema -> true
    ;   invalid("plan", "must be \"~s\"", [Schema])
    ),
    req(Pairs, steps, "", Ss),
    (   is_list(Ss), Ss \== [] -> true ; invalid("steps", "must be a non-empty array", []) ),
    length(Ss, N), max_steps(MaxS),
    (   N =< MaxS -> true ; invalid("steps", "has ~d steps; at most ~d", [N, MaxS]) ),
    validate_steps(Ss, top, 0, [], Steps).

%   validate_steps(+JSONSteps, +Where, +Index, +Scope, -Steps): Where is top
%   or nested(Path), the steps of a map's sub-plan at Path, which may not
%   hold a map or a final step.
validate_steps([], _, _, _, []).
validate_steps([S|Ss], Where, I, Scope0, [Step|Steps]) :-
    (   Where = nested(Outer) -> format(string(P), "~s.steps[~d]", [Outer, I]) ; format(string(P), "steps[~d]", [I]) ),
    obj(S, P, Pairs),
    req(Pairs, op, P, Op0),
    op_name(Op0, P, Op),
    (   Where = nested(_), memberchk(Op, [map, final])
    ->  invalid(P, "a map's steps may not hold a ~w step", [Op])
    ;   true
    ),
    step(Op, Pairs, P, Scope0, Step0, Kind),
    bind(Pairs, P, Kind, Scope0, Scope, As),
    Step = s(As, Step0),
    (   Op == final, Ss \== []
    ->  invalid(P, "final must be the last step", [])
    ;   true
    ),
    I1 is I + 1,
    validate_steps(Ss, Where, I1, Scope, Steps).

op_name(Op0, P, Op) :-
    plan_ops(Ops),
    (   string(Op0), member(Op, Ops), atom_string(Op, Op0) -> true
    ;   atomic_list_concat(Ops, ', ', OpsA),
        shown_json(Op0, Shown),
        invalid(P, "op ~s is not one of ~w", [Shown, OpsA])
    ).

%   step(+Op, +Pairs, +Path, +Scope, -Step, -Kind): Kind is the kind of the
%   step's value (int, text, hits, chunks, list(int), list(text), none).
step(length, Ps, P, _, length, int) :-
    only_keys(Ps, P, [op, as]).
step(peek, Ps, P, _, peek(B), text) :-
    only_keys(Ps, P, [op, as, bytes]),
    max_slice_bytes(Max),
    opt_int(Ps, bytes, P, 1, Max, 256, B).
step(slice, Ps, P, _, slice(F, B), text) :-
    only_keys(Ps, P, [op, as, from, bytes]),
    max_slice_bytes(Max),
    req_int(Ps, from, P, 0, 1_000_000_000_000, F),
    req_int(Ps, bytes, P, 1, Max, B).
step(search, Ps, P, _, search(Mode, Pat, MaxR, W), hits) :-
    only_keys(Ps, P, [op, as, pattern, mode, max_results, window]),
    max_pattern_chars(MaxP),
    req_text(Ps, pattern, P, 1, MaxP, Pat),
    opt_enum(Ps, mode, P, [substring, regex], substring, Mode),
    max_search_results(MR), max_search_window(MW),
    opt_int(Ps, max_results, P, 1, MR, 10, MaxR),
    opt_int(Ps, window, P, 0, MW, 60, W),
    (   Mode == regex
    ->  catch(re_compile(Pat, _, []), E, bad_regex(E, P))
    ;   true
    ).
step(partition, Ps, P, _, partition(CB, MC), chunks) :-
    only_keys(Ps, P, [op, as, chunk_bytes, max_chunks]),
    max_chunk_bytes(MaxC), max_map_items(MaxI),
    req_int(Ps, chunk_bytes, P, 64, MaxC, CB),
    opt_int(Ps, max_chunks, P, 1, MaxI, MaxI, MC).
step(query, Ps, P, Scope, query(T, Expect, R), Kind) :-
    only_keys(Ps, P, [op, as, prompt, expect, retries]),
    req_template(Ps, prompt, P, Scope, [], T),
    expect_retries(Ps, P, Expect, R),
    expect_kind(Expect, Kind).
step(map, Ps, P, Scope, Map, list(Kind)) :-
    req_list_var(Ps, over, P, Scope, Over, _),
    (   memberchk(steps=_, Ps)
    ->  map_plan(Ps, P, Scope, Over, Map, Kind)
    ;   map_call(Ps, P, Scope, Over, Map, Kind)
    ).
step(reduce, Ps, P, Scope, reduce(How, Over, Sep, T), Kind) :-
    only_keys(Ps, P, [op, as, over, how, separator, prompt]),
    req_list_var(Ps, over, P, Scope, Over, ItemKind),
    req(Ps, how, P, How0),
    Hows = [join, count, sum, max, min, unique, query],
    enum(How0, Hows, P, how, How),
    opt_text(Ps, separator, P, 0, 16, "\n", Sep),
    (   How == query
    ->  req_template(Ps, prompt, P, Scope, ["items"], T),
        (   template_uses(T, "items") -> true ; invalid(P, "prompt must use {{items}}", []) )
    ;   (   memberchk(prompt=_, Ps) -> invalid(P, "prompt is only for how = query", []) ; true ),
        T = none
    ),
    reduce_kind(How, ItemKind, P, Kind).
step(recurse, Ps, P, Scope, recurse(T), text) :-
    only_keys(Ps, P, [op, as, goal]),
    req_template(Ps, goal, P, Scope, [], T).
step(final, Ps, P, Scope, final(T), none) :-
    only_keys(Ps, P, [op, answer]),
    req_template(Ps, answer, P, Scope, [], T).

%   A sub-call per item: prompt is a template over {{item}} (and {{index}}).
map_call(Ps, P, Scope, Over, map(Over, T, Par, Expect, R), Kind) :-
    only_keys(Ps, P, [op, as, over, prompt, parallel, expect, retries]),
    req_template(Ps, prompt, P, Scope, ["item", "index"], T),
    (   template_uses(T, "item") -> true
    ;   invalid(P, "prompt must use {{item}}", [])
    ),
    max_parallel(MaxPar),
    opt_int(Ps, parallel, P, 1, MaxPar, 1, Par),
    expect_retries(Ps, P, Expect, R),
    expect_kind(Expect, Kind).

%   A sub-plan per item: steps run with item (text) and index (int) bound,
%   and the item's value is the variable result names.
map_plan(Ps, P, Scope, Over, map_plan(Over, Steps, Result), Kind) :-
    only_keys(Ps, P, [op, as, over, steps, result]),
    req(Ps, steps, P, Ss),
    max_sub_steps(MaxS),
    path(P, steps, PS),
    (   is_list(Ss), Ss \== [] -> true ; invalid(PS, "must be a non-empty array", []) ),
    length(Ss, N),
    (   N =< MaxS -> true ; invalid(PS, "has ~d steps; at most ~d", [N, MaxS]) ),
    validate_steps(Ss, nested(P), 0, ["item"-text, "index"-int|Scope], Steps),
    req(Ps, result, P, Result),
    var_name(Result, P, result),
    (   member(s(Result, Step), Steps), step_kind(Step, Scope, Kind0) -> Kind = Kind0
    ;   invalid(P, "result names ~s, which none of its steps binds", [Result])
    ).

%   The kind of a validated step's value (for a map's result).
step_kind(length, _, int).
step_kind(peek(_), _, text).
step_kind(slice(_, _), _, text).
step_kind(search(_, _, _, _), _, hits).
step_kind(partition(_, _), _, chunks).
step_kind(query(_, E, _), _, K) :- expect_kind(E, K).
step_kind(reduce(How, _, _, _), _, K) :- memberchk(How-K, [join-text, count-int, sum-int, max-int, min-int, query-text, unique-list(text)]).
step_kind(recurse(_), _, text).

bad_regex(E, P) :-
    (   E = error(syntax_error(W), _) -> format(string(M), "~q", [W]) ; M = "cannot be compiled" ),
    truncate_text(M, 120, MS),
    invalid(P, "pattern is not a valid regular expression: ~s", [MS]).

expect_retries(Ps, P, Expect, R) :-
    opt_enum(Ps, expect, P, [any, nonempty, integer, yes_no], any, Expect),
    max_retries(MaxR),
    opt_int(Ps, retries, P, 0, MaxR, 0, R).

expect_kind(integer, int) :- !.
expect_kind(_, text).

reduce_kind(join, _, _, text).
reduce_kind(count, _, _, int).
reduce_kind(query, _, _, text).
reduce_kind(unique, K, _, list(K1)) :- item_kind(K, K1).
reduce_kind(How, K, P, int) :-
    memberchk(How, [sum, max, min]),
    (   K == list(int) -> true
    ;   invalid(P, "how = ~w needs a list of integers (a map with expect = integer)", [How])
    ).

item_kind(list(K), K) :- !.
item_kind(hits, text) :- !.
item_kind(_, text).

bind(Ps, P, Kind, Scope0, Scope, As) :-
    (   memberchk(as=Name, Ps)
    ->  (   Kind == none -> invalid(P, "this step has no value to bind with as", []) ; true ),
        var_name(Name, P, "as"),
        (   memberchk(Name-_, Scope0) -> invalid(P, "variable ~s is already bound", [Name]) ; true ),
        length(Scope0, NV), max_vars(MaxV),
        (   NV < MaxV -> true ; invalid(P, "at most ~d variables", [MaxV]) ),
        Scope = [Name-Kind|Scope0],
        As = Name
    ;   Scope = Scope0,
        As = none
    ).

var_name(Name, P, Key) :-
    (   string(Name), string_length(Name, L), L >= 1, L =< 32,
        string_codes(Name, [C|Cs]), C >= 0'a, C =< 0'z,
        forall(member(X, Cs), name_code(X)),
        \+ memberchk(Name, ["item", "index", "items"])
    ->  true
    ;   shown_json(Name, S),
        invalid(P, "~w must be a variable name [a-z][a-z0-9_]{0,31}, not item, index or items (got ~s)", [Key, S])
    ).

name_code(C) :- ( C >= 0'a, C =< 0'z -> true ; C >= 0'0, C =< 0'9 -> true ; C =:= 0'_ ).

req_list_var(Ps, Key, P, Scope, Name, Kind) :-
    req(Ps, Key, P, Name),
    var_name(Name, P, Key),
    (   memberchk(Name-Kind, Scope) -> true
    ;   invalid(P, "~w names ~s, which no earlier step binds", [Key, Name])
    ),
    (   list_kind(Kind) -> true
    ;   invalid(P, "~w names ~s, which is not a list (it is ~w)", [Key, Name, Kind])
    ).

list_kind(hits).
list_kind(chunks).
list_kind(list(_)).

%   A template is text with {{name}} placeholders; each name must be bound
%   by an earlier step (or be one of Extra).
req_template(Ps, Key, P, Scope, Extra, Parts) :-
    max_template_chars(Max),
    req_text(Ps, Key, P, 1, Max, Text),
    string_codes(Text, Codes),
    (   phrase(template(Parts0), Codes) -> true
    ;   invalid(P, "~w has an unclosed {{", [Key])
    ),
    maplist(check_placeholder(P, Key, Scope, Extra), Parts0),
    Parts = Parts0.

check_placeholder(_, _, _, _, lit(_)).
check_placeholder(P, Key, Scope, Extra, var(N)) :-
    (   memberchk(N, Extra) -> true
    ;   memberchk(N-_, Scope) -> true
    ;   invalid(P, "~w uses {{~s}}, which no earlier step binds", [Key, N])
    ).

template_parts(Text, Parts) :-
    string_codes(Text, Codes),
    phrase(template(Parts), Codes).

template([var(N)|Ps]) --> "{{", !, name_codes(Cs), "}}", { Cs \== [], string_codes(N, Cs) }, template(Ps).
template([lit(S)|Ps]) --> lit_codes(Cs), { Cs \== [] }, !, { string_codes(S, Cs) }, template(Ps).
template([]) --> [].

name_codes([C|Cs]) --> [C], { name_code(C) }, !, name_codes(Cs).
name_codes([]) --> [].

lit_codes([C|Cs]) --> [C], { C \== 0'{ }, !, lit_codes(Cs).
lit_codes([0'{|Cs]) --> "{", \+ "{", !, lit_codes(Cs).
lit_codes([]) --> [].

template_uses(Parts, N) :- memberchk(var(N), Parts).

%   ---- JSON accessors ----

obj(json(Pairs), _, Pairs) :- is_list(Pairs), !,
    (   msort_keys(Pairs) -> true ; true ).
obj(_, P, _) :-
    (   P == "" -> invalid("", "the reply must be one JSON object", []) ; invalid(P, "must be a JSON object", []) ).

msort_keys(Pairs) :-
    findall(K, member(K=_, Pairs), Ks),
    msort(Ks, Sorted),
    (   append(_, [K, K|_], Sorted)
    ->  invalid("", "duplicate key ~q", [K])
    ;   true
    ).

only_keys(Pairs, P, Allowed) :-
    (   member(K=_, Pairs), \+ memberchk(K, Allowed)
    ->  atom_length(K, KL),
        (   KL =< 40 -> KS = K ; sub_atom(K, 0, 40, _, K0), atom_concat(K0, '...', KS) ),
        atomic_list_concat(Allowed, ', ', AA),
        invalid(P, "unknown key ~q (allowed: ~w)", [KS, AA])
    ;   true
    ).

req(Pairs, K, P, V) :-
    (   memberchk(K=V0, Pairs) -> V = V0
    ;   path(P, K, PK), invalid(PK, "is required", [])
    ).

path("", K, PK) :- !, atom_string(K, PK).
path(P, K, PK) :- format(string(PK), "~s.~w", [P, K]).

%   req/opt_int, req/opt_text: a required or optional member of a type
%   and range (Check: int(Min, Max) or text(MinChars, MaxChars)).
req_int(Ps, K, P, Min, Max, V) :- req_checked(int(Min, Max), Ps, K, P, V).
opt_int(Ps, K, P, Min, Max, Def, V) :- opt_checked(int(Min, Max), Ps, K, P, Def, V).
req_text(Ps, K, P, Min, Max, V) :- req_checked(text(Min, Max), Ps, K, P, V).
opt_text(Ps, K, P, Min, Max, Def, V) :- opt_checked(text(Min, Max), Ps, K, P, Def, V).

req_checked(Check, Ps, K, P, V) :-
    req(Ps, K, P, V0),
    path(P, K, PK),
    checked(Check, V0, PK, V).
opt_checked(Check, Ps, K, P, Def, V) :-
    (   memberchk(K=V0, Ps) -> path(P, K, PK), checked(Check, V0, PK, V) ; V = Def ).

checked(int(Min, Max), V0, PK, V) :-
    (   integer(V0), V0 >= Min, V0 =< Max -> V = V0
    ;   shown_json(V0, S),
        invalid(PK, "must be an integer in ~d..~d (got ~s)", [Min, Max, S])
    ).
checked(text(Min, Max), V0, PK, V) :-
    (   string(V0) -> true ; shown_json(V0, S), invalid(PK, "must be a string (got ~s)", [S]) ),
    string_length(V0, L),
    (   L >= Min, L =< Max -> V = V0
    ;   invalid(PK, "must have ~d..~d characters (has ~d)", [Min, Max, L])
    ).

opt_enum(Ps, K, P, Allowed, Def, V) :-
    (   memberchk(K=V0, Ps) -> enum(V0, Allowed, P, K, V) ; V = Def ).

enum(V0, Allowed, P, K, V) :-
    (   string(V0), member(V, Allowed), atom_string(V, V0) -> true
    ;   path(P, K, PK), shown_json(V0, S),
        atomic_list_concat(Allowed, ', ', AA),
        invalid(PK, "must be one of ~w (got ~s)", [AA, S])
    ).

shown_json(V, S) :-
    (   string(V) -> format(string(S0), "~q", [V])
    ;   number(V) -> format(string(S0), "~w", [V])
    ;   V = json(_) -> S0 = "an object"
    ;   is_list(V) -> S0 = "an array"
    ;   format(string(S0), "~w", [V])
    ),
    truncate_text(S0, 60, S).

%   ---- running a plan ----

%!  run_plan(+Plan, -Result) is det.
%
%   Result: final(Answer) | ran(N, Vars) | failed(Index, Op, Message, Vars).
%   Vars are Name-Value pairs, latest first. Cancellation and the node's
%   time limit propagate.
run_plan(plan(Steps), Result) :-
    run_steps(Steps, 0, [], Result).

run_steps([], N, Vars, ran(N, Vars)).
run_steps([s(As, Step)|Steps], I, Vars, Result) :-
    functor(Step, Op, _),
    catch(( exec(Step, Vars, Value), Out = ok(Value) ), E, step_error(E, Out)),
    (   Out = error(M)
    ->  Result = failed(I, Op, M, Vars)
    ;   Out = ok(final(A)), Step = final(_)
    ->  Result = final(A)
    ;   Out = ok(Value1),
        (   As == none -> Vars1 = Vars ; Vars1 = [As-Value1|Vars] ),
        I1 is I + 1,
        run_steps(Steps, I1, Vars1, Result)
    ).

step_error(E, _) :- node_exception(E), !, throw(E).
step_error(E, _) :-
    E = error(resource_error(memory), _), !,
    throw(graph_failure(resource_exhausted, "the worker ran out of memory running the plan")).
step_error(effect_error(Kind, Err, Msg), error(M)) :- !,
    format(string(M0), "~w refused (~w): ~w", [Kind, Err, Msg]),
    truncate_text(M0, 400, M).
step_error(step_failed(M), error(M)) :- !.
step_error(E, error(M)) :-
    error_text(E, M0),
    truncate_text(M0, 400, M).

node_exception(ms_cancelled).
node_exception(machinespirit_time_limit).

fail_step(Fmt, Args) :-
    format(string(M), Fmt, Args),
    throw(step_failed(M)).

rlm_fact(Key, Value) :-
    nb_getval(ms_rlm, Facts),
    get_dict(Key, Facts, Value).

context_file(File) :-
    current_env(Env),
    get_dict(context_file, Env, File),
    (   string(File) -> true ; fail_step("the task has no context_file", []) ).

current_env(Env) :- ms_runtime:current_env(Env).

read_bytes(From, Len, Text) :-
    context_file(File),
    ms_rlm_api:workspace_read(File, From, Len, Text, _).

exec(length, _, N) :-
    rlm_fact(context_length, N).
exec(peek(B), _, T) :-
    read_bytes(0, B, T).
exec(slice(F, B), _, T) :-
    read_bytes(F, B, T).
exec(search(Mode, Pat, Max, W), _, hits(Hits)) :-
    rlm_fact(context_length, Size),
    max_search_scan_bytes(MaxScan),
    (   Size =< MaxScan -> true
    ;   fail_step("search scans at most ~D bytes; the context has ~D", [MaxScan, Size])
    ),
    search_pieces(0, Size, Mode, Pat, Max, W, [], Rev),
    reverse(Rev, Hits).
exec(partition(CB, MC), _, chunks(Chunks)) :-
    rlm_fact(context_length, Size),
    N is max(1, (Size + CB - 1) // CB),
    (   N =< MC -> true
    ;   fail_step("~D bytes in chunks of ~D make ~D chunks; at most ~D (raise chunk_bytes or max_chunks)", [Size, CB, N, MC])
    ),
    findall(chunk(F, L), ( between(1, N, K), F is (K-1)*CB, L is min(CB, Size - F), L > 0 ), Chunks).
exec(query(T, Expect, R), Vars, V) :-
    render(T, Vars, [], Prompt),
    sub_calls([Prompt], 1, Expect, R, [V0]),
    max_answer_chars(MaxA),
    cut_value(V0, MaxA, V).
exec(map(Over, T, Par, Expect, R), Vars, list(Answers)) :-
    var_value(Over, Vars, L),
    items(L, Items),
    length(Items, NI), max_map_items(MaxI),
    (   NI =< MaxI -> true ; fail_step("map over ~d items; at most ~d", [NI, MaxI]) ),
    map_batches(Items, 0, T, Vars, Par, Expect, R, Answers).
exec(map_plan(Over, Steps, Result), Vars, list(Values)) :-
    var_value(Over, Vars, L),
    items(L, Items),
    length(Items, NI), max_map_items(MaxI),
    (   NI =< MaxI -> true ; fail_step("map over ~d items; at most ~d", [NI, MaxI]) ),
    max_item_answer_chars(MaxA),
    findall(I-It, nth0(I, Items, It), Indexed),
    maplist(sub_plan(Steps, Result, Vars, MaxA), Indexed, Values).
exec(reduce(How, Over, Sep, T), Vars, V) :-
    var_value(Over, Vars, L),
    items(L, Items0),
    maplist(item_value, Items0, Items),
    reduce(How, Items, Sep, T, Vars, V).
exec(recurse(T), Vars, A) :-
    render(T, Vars, [], Goal),
    ms_runtime:spirit(rlm, _{goal: Goal}, A0),
    (   string(A0) -> A = A0 ; A0 == null -> A = "" ; format(string(A), "~w", [A0]) ).
exec(final(T), Vars, final(A)) :-
    render(T, Vars, [], A0),
    max_answer_chars(Max),
    truncate_text(A0, Max, A).

var_value(Name, Vars, V) :-
    (   memberchk(Name-V, Vars) -> true
    ;   fail_step("variable ~s is not bound", [Name])      % a step before it failed
    ).

items(hits(L), L) :- !.
items(chunks(L), L) :- !.
items(list(L), L) :- !.
items(V, [V]).

item_value(hit(_, T), T) :- !.
item_value(V, V).

%   The text an item stands for in a map's prompt: a chunk is read.
item_text(chunk(F, L), T) :- !, read_bytes(F, L, T).
item_text(hit(_, T), T) :- !.
item_text(V, T) :- value_text(V, T).

map_batches([], _, _, _, _, _, _, []) :- !.
map_batches(Items, K, T, Vars, Par, Expect, R, Answers) :-
    take(Par, Items, Batch, Rest),
    length(Batch, NB),
    % The chunks are read one after another, before the batch's model
    % calls: the ledger then numbers them the same way at every re-run.
    findall(I-It, nth0(I, Batch, It), Indexed),
    maplist(batch_prompt(K, T, Vars), Indexed, Prompts),
    sub_calls(Prompts, NB, Expect, R, As0),
    max_item_answer_chars(MaxA),
    maplist(cut_item(MaxA), As0, As),
    K1 is K + NB,
    map_batches(Rest, K1, T, Vars, Par, Expect, R, More),
    append(As, More, Answers).

batch_prompt(K, T, Vars, I-Item, Prompt) :-
    item_text(Item, Text),
    Index is K + I,
    number_string(Index, IS),
    render(T, Vars, ["item"-Text, "index"-IS], Prompt).

sub_plan(Steps, Result, Vars, MaxA, I-Item, Value) :-
    item_text(Item, Text),
    run_steps(Steps, 0, ["item"-Text, "index"-I|Vars], R),
    (   R = ran(_, Vars1)
    ->  memberchk(Result-V0, Vars1),
        cut_value(V0, MaxA, Value)
    ;   R = failed(K, Op, M, _)
    ->  fail_step("item ~d: steps[~d] (~w): ~s", [I, K, Op, M])
    ).

take(0, L, [], L) :- !.
take(_, [], [], []) :- !.
take(N, [X|Xs], [X|Ys], Rest) :- N1 is N - 1, take(N1, Xs, Ys, Rest).

reduce(join, Items, Sep, _, _, T) :-
    maplist(value_text, Items, Ts),
    atomic_list_concat(Ts, Sep, A), atom_string(A, T0),
    max_answer_chars(Max), truncate_text(T0, Max, T).
reduce(count, Items, _, _, _, N) :- length(Items, N).
reduce(sum, Items, _, _, _, N) :- sum_list(Items, N).
reduce(max, Items, _, _, _, N) :- ( Items == [] -> fail_step("max of no items", []) ; max_list(Items, N) ).
reduce(min, Items, _, _, _, N) :- ( Items == [] -> fail_step("min of no items", []) ; min_list(Items, N) ).
reduce(unique, Items, _, _, _, list(U)) :- list_to_set(Items, U).
reduce(query, Items, Sep, T, Vars, A) :-
    maplist(value_text, Items, Ts),
    atomic_list_concat(Ts, Sep, J0), atom_string(J0, J),
    render(T, Vars, ["items"-J], Prompt),
    sub_calls([Prompt], 1, any, 0, [A0]),
    max_answer_chars(Max), truncate_text(A0, Max, A).

%   ---- templates ----

render(Parts, Vars, Extra, Text) :-
    maplist(render_part(Vars, Extra), Parts, Texts),
    atomic_list_concat(Texts, A),
    atom_string(A, Text),
    string_length(Text, L),
    max_sub_prompt_chars(Max),
    (   L =< Max -> true
    ;   fail_step("the filled-in text has ~D characters; at most ~D", [L, Max])
    ).

render_part(_, _, lit(S), S).
render_part(Vars, Extra, var(N), T) :-
    (   memberchk(N-T0, Extra) -> T = T0
    ;   var_value(N, Vars, V), value_text(V, T)
    ).

value_text(V, T) :- string(V), !, T = V.
value_text(V, T) :- integer(V), !, number_string(V, T).
value_text(hits(L), T) :- !,
    maplist(hit_text, L, Ss),
    atomic_list_concat(Ss, '\n', A), atom_string(A, T).
value_text(chunks(L), T) :- !, length(L, N), format(string(T), "~d chunks", [N]).
value_text(list(L), T) :- !,
    maplist(value_text, L, Ss),
    atomic_list_concat(Ss, '\n', A), atom_string(A, T).
value_text(V, T) :- format(string(T), "~w", [V]).

hit_text(hit(O, X), S) :- format(string(S), "@~d: ~s", [O, X]).

cut_item(Max, V, V1) :- cut_value(V, Max, V1).

cut_value(V, Max, V1) :- ( string(V) -> truncate_text(V, Max, V1) ; V1 = V ).

%   ---- sub-model calls: bounded parallelism, retry with repair ----

%!  sub_calls(+Prompts, +Parallel, +Expect, +Retries, -Answers) is det.
%
%   One sub-model call per prompt, all started before the first is
%   awaited (the plugin admits at most its bound of concurrent model
%   calls and kills a worker that starts more). A reply that does not
%   meet Expect is asked again, with what was wrong, up to Retries times.
sub_calls(Prompts, _, Expect, Retries, Answers) :-
    maplist(sub_messages, Prompts, Msgs),
    parallel_model_calls(Msgs, Replies),
    maplist(checked_reply(Expect, Retries), Prompts, Replies, Answers).

sub_messages(Prompt, [system("You answer one focused question about a piece of text. Reply with the answer only."),
                      user(User)]) :-
    format(string(User), "[rlm sub] ~s", [Prompt]).

checked_reply(Expect, Retries, Prompt, Reply, Answer) :-
    (   expect(Expect, Reply, Answer0)
    ->  Answer = Answer0
    ;   Retries > 0
    ->  expect_text(Expect, Want),
        truncate_text(Reply, 200, Shown),
        format(string(Repair), "~s\n\nYour previous answer was ~q, which is not ~s. Reply again with ~s only.", [Prompt, Shown, Want, Want]),
        truncate_text(Repair, 6500, Repair1),
        sub_messages(Repair1, Msgs),
        parallel_model_calls([Msgs], [Reply1]),
        R1 is Retries - 1,
        checked_reply(Expect, R1, Prompt, Reply1, Answer)
    ;   expect_text(Expect, Want),
        truncate_text(Reply, 100, Shown),
        fail_step("a sub-call answered ~q, which is not ~s", [Shown, Want])
    ).

expect(any, R, R).
expect(nonempty, R, R) :- split_string(R, "", " \t\r\n", [T]), T \== "".
expect(integer, R, N) :-
    split_string(R, "", " \t\r\n.", [T]),
    string_codes(T, Cs),
    (   Cs = [0'-|Ds] -> true ; Ds = Cs ),
    Ds \== [], length(Ds, L), L =< 18,
    forall(member(D, Ds), ( D >= 0'0, D =< 0'9 )),
    number_codes(N, Cs).
expect(yes_no, R, A) :-
    split_string(R, "", " \t\r\n.!", [T]),
    string_lower(T, L),
    memberchk(L, ["yes", "no"]),
    A = L.

expect_text(any, "any text").
expect_text(nonempty, "a non-empty text").
expect_text(integer, "an integer (digits only)").
expect_text(yes_no, "yes or no").

parallel_model_calls(MsgLists, Texts) :-
    current_call_context(ctx(Parent, _)),
    start_all(MsgLists, Parent, [], Ids),
    await_effects(model, Ids, Values),
    maplist(reply_text, Values, Texts).

reply_text(V, T) :-
    get_dict(text, V, T0),
    (   string(T0) -> T = T0 ; atom_string(T0, T) ).

%   A start that fails (a prompt too large for a frame) waits for the calls
%   already started before it raises: no answer is left in flight.
start_all([], _, Rev, Ids) :- reverse(Rev, Ids).
start_all([Msgs|More], Parent, Rev, Ids) :-
    catch(( ms_effects:messages(Msgs, Ms),
            effect_start(model, _{messages: Ms, parent: Parent}, Id) ),
          E,
          ( reverse(Rev, Started),
            catch(await_effects(model, Started, _), _, true),
            throw(E) )),
    start_all(More, Parent, [Id|Rev], Ids).

%   ---- search ----

%   The context is read in pieces of search_piece_bytes that overlap by
%   search_overlap_bytes, so a match shorter than the overlap is found even
%   where two pieces meet; a match is reported once, by its byte offset.
search_pieces(From, Size, _, _, Max, _, Acc, Acc) :-
    (   From >= Size -> true ; length(Acc, N), N >= Max ), !.
search_pieces(From, Size, Mode, Pat, Max, W, Acc0, Acc) :-
    search_piece_bytes(PB), search_overlap_bytes(OV),
    Len is min(PB, Size - From),
    read_bytes(From, Len, Text),
    matches(Mode, Pat, Text, Ms),
    foldl(add_hit(From, Text, W, Max), Ms, Acc0, Acc1),
    (   From + Len >= Size -> Next = Size ; Next is From + Len - OV ),
    search_pieces(Next, Size, Mode, Pat, Max, W, Acc1, Acc).

matches(substring, Pat, Text, Ms) :-
    string_length(Pat, PL),
    findall(C-PL, sub_string(Text, C, PL, _, Pat), Ms).
matches(regex, Pat, Text, Ms) :-
    re_foldl(collect_range, Pat, Text, [], Rev, [capture_type(range)]),
    reverse(Rev, Ms).

collect_range(M, Acc, [R|Acc]) :- get_dict(0, M, R).

add_hit(From, Text, W, Max, C-ML, Acc0, Acc) :-
    length(Acc0, N),
    sub_string(Text, 0, C, _, Before),
    utf8_bytes(Before, BB),
    Off is From + BB,
    (   N >= Max -> Acc = Acc0
    ;   memberchk(hit(Off, _), Acc0) -> Acc = Acc0
    ;   string_length(Text, TL),
        S is max(0, C - W),
        E is min(TL, C + ML + W),
        L is E - S,
        sub_string(Text, S, L, _, Win),
        Acc = [hit(Off, Win)|Acc0]
    ).

%   ---- the rlm graph's handlers ----

max_observation_chars(1500).
max_root_prompt_bytes(12288).
default_iterations(30).
default_repairs(2).

ms_registry:handler_decl(rlm_plan_iterate).
ms_registry:handler(rlm_plan_iterate, Env, State, patch(Patch, Note)) :-
    get_dict(iteration, State, I0), I is I0 + 1,
    input_int(Env, max_iterations, 1, 30, 30, Max),
    root_prompt(Env, State, I, Max, System, User),
    root_turn(State, System, User, plan_turn, Result),
    observation(I, Result, Obs),
    push_recent(State, Obs, Recent),
    get_dict(repairs, State, R0),
    (   Result = final(Answer)
    ->  Patch = [iteration=1, recent=Recent, repairs=0, answer=Answer],
        Note = "final answer"
    ;   Result = invalid(_, _)
    ->  R is R0 + 1,
        Patch = [iteration=1, recent=Recent, repairs=R],
        format(string(Note), "iteration ~d: plan rejected", [I])
    ;   Patch = [iteration=1, recent=Recent, repairs=0],
        format(string(Note), "iteration ~d", [I])
    ).

ms_registry:router_decl(rlm_plan_router).
ms_registry:router(rlm_plan_router, Env, State, Key) :-
    get_dict(answer, State, A),
    get_dict(iteration, State, I),
    get_dict(repairs, State, R),
    input_int(Env, max_iterations, 1, 30, 30, Max),
    input_int(Env, max_repairs, 0, 5, 2, MaxR),
    (   A \== null -> Key = done
    ;   R > MaxR -> Key = invalid
    ;   I >= Max -> Key = exhausted
    ;   Key = continue
    ).

ms_registry:handler_decl(rlm_plan_give_up).
ms_registry:handler(rlm_plan_give_up, _Env, State, _) :-
    get_dict(repairs, State, R),
    get_dict(recent, State, Recent),
    (   last(Recent, Last) -> true ; Last = "" ),
    format(string(M0), "the root model's plan did not validate ~d times in a row; the last: ~s", [R, Last]),
    truncate_text(M0, 1200, M),
    throw(graph_failure(rlm_plan_invalid, M)).

input_int(Env, Key, Min, Max, Def, V) :-
    get_dict(input, Env, Input),
    (   get_dict(Key, Input, V0), integer(V0), V0 >= Min
    ->  V is min(V0, Max)
    ;   V = Def
    ).

%   plan_turn(+Text, -Result): invalid(Path, Msg) | final(A) | ran(N, Vars) |
%   failed(I, Op, Msg, Vars).
plan_turn(Text, Result) :-
    catch(parse_plan_text(Text, Plan), plan_invalid(Path, Msg), true),
    (   nonvar(Msg)
    ->  Result = invalid(Path, Msg)
    ;   run_plan(Plan, Result)
    ).

observation(I, invalid(Path, Msg), Obs) :- !,
    plan_schema(Schema),
    maplist(json_text, [Schema, Path, Msg], [JS, JP, JM]),
    format(string(Obs0), "[~d] plan rejected, nothing ran: {\"error\":\"plan_invalid\",\"schema\":~s,\"path\":~s,\"message\":~s}",
           [I, JS, JP, JM]),
    cut_obs(Obs0, Obs).
observation(I, final(_), Obs) :- !,
    format(string(Obs), "[~d] final answer given", [I]).
observation(I, ran(N, Vars), Obs) :- !,
    vars_text(Vars, VT),
    format(string(Obs0), "[~d] plan ran ~d steps. ~s", [I, N, VT]),
    cut_obs(Obs0, Obs).
observation(I, failed(K, Op, Msg, Vars), Obs) :-
    vars_text(Vars, VT),
    format(string(Obs0), "[~d] plan stopped at steps[~d] (~w): ~s. ~s", [I, K, Op, Msg, VT]),
    cut_obs(Obs0, Obs).

cut_obs(O0, O) :- max_observation_chars(M), truncate_text(O0, M, O).

vars_text([], "No variables bound.") :- !.
vars_text(Vars0, T) :-
    reverse(Vars0, Vars),
    maplist(var_text, Vars, Ts),
    atomic_list_concat(Ts, '; ', A),
    atom_string(A, T).

var_text(N-V, T) :-
    shown_value(V, S),
    format(string(T), "~s = ~s", [N, S]).

shown_value(V, S) :- integer(V), !, number_string(V, S).
shown_value(V, S) :- string(V), !, truncate_text(V, 300, S0), format(string(S), "~q", [S0]).
shown_value(hits(L), S) :- !,
    shown_few(L, 5, hit_shown, N, Few),
    format(string(S), "~d hits: [~s]", [N, Few]).
shown_value(chunks(L), S) :- !,
    length(L, N),
    (   L = [chunk(_, B)|_] -> true ; B = 0 ),
    format(string(S), "~d chunks of up to ~d bytes", [N, B]).
shown_value(list(L), S) :- !,
    shown_few(L, 8, shown_value, N, Few),
    format(string(S0), "list of ~d: [~s]", [N, Few]),
    truncate_text(S0, 400, S).
shown_value(V, S) :- format(string(S), "~w", [V]).

%   shown_few(+List, +K, :Show, -Length, -Text): the first K items shown
%   with Show, and ", ..." when there are more.
:- meta_predicate shown_few(+, +, 2, -, -).
shown_few(L, K, Show, N, Text) :-
    length(L, N),
    take(K, L, Few, _),
    maplist(Show, Few, Ss),
    atomic_list_concat(Ss, ', ', A),
    (   N > K -> format(string(Text), "~w, ...", [A]) ; atom_string(A, Text) ).

hit_shown(hit(O, T), S) :-
    truncate_text(T, 80, T1),
    format(string(S), "@~d ~q", [O, T1]).

%   ---- the root prompt: metadata and the schema, bounded ----

root_prompt(Env, State, I, Max, System, User) :-
    System = "You are the root of a recursive language model. You never see the context itself: you explore it by replying with a JSON plan that a trusted interpreter runs for you.",
    root_facts(Env, State, Goal, Len, PrefixShown, Recent),
    fit_prompt(I, Max, Goal, Len, PrefixShown, Recent, User).

fit_prompt(I, Max, Goal, Len, Prefix, Recent, User) :-
    build_user_prompt(I, Max, Goal, Len, Prefix, Recent, User0),
    utf8_bytes(User0, B),
    max_root_prompt_bytes(MaxB),
    (   B =< MaxB
    ->  User = User0
    ;   Recent = [_|Rest]
    ->  fit_prompt(I, Max, Goal, Len, Prefix, Rest, User)
    ;   truncate_text(Goal, 200, Goal1),
        build_user_prompt(I, Max, Goal1, Len, "", [], User)
    ).

build_user_prompt(I, Max, Goal, Len, Prefix, Recent, User) :-
    (   Recent == []
    ->  RecentText = "(none yet)"
    ;   atomic_list_concat(Recent, '\n', RA), atom_string(RA, RecentText)
    ),
    plan_schema(Schema),
    format(string(User),
"[rlm root] iteration ~d of ~d
Task: ~s
Context: ~d bytes. It is not in this prompt. It starts with: ~s
Reply with ONE JSON object and nothing else: {\"plan\": \"~s\", \"steps\": [step, ...]} (1..32 steps). A step is an object with \"op\" and, to keep its value, \"as\": a name [a-z][a-z0-9_]*. Text fields are templates: {{name}} inserts an earlier value.
  {\"op\":\"length\"}  context size in bytes
  {\"op\":\"peek\",\"bytes\":N}  the first N (<= 4096) bytes
  {\"op\":\"slice\",\"from\":N,\"bytes\":M}  M (<= 4096) bytes from byte N
  {\"op\":\"search\",\"pattern\":P,\"mode\":\"substring\"|\"regex\",\"max_results\":1..50,\"window\":0..200}  hits with their byte offsets
  {\"op\":\"partition\",\"chunk_bytes\":64..4096,\"max_chunks\":1..64}  the context as chunks
  {\"op\":\"query\",\"prompt\":T,\"expect\":\"any\"|\"nonempty\"|\"integer\"|\"yes_no\",\"retries\":0..2}  one sub-model call
  {\"op\":\"map\",\"over\":name,\"prompt\":T with {{item}} (and {{index}}),\"parallel\":1..4,\"expect\":...,\"retries\":0..2}  a sub-call per item (a chunk's text, a hit, a value)
  {\"op\":\"map\",\"over\":name,\"steps\":[step, ...],\"result\":name}  a sub-plan per item ({{item}}, {{index}}; no map or final in it, at most 8 steps)
  {\"op\":\"reduce\",\"over\":name,\"how\":\"join\"|\"count\"|\"sum\"|\"max\"|\"min\"|\"unique\"|\"query\",\"separator\":S,\"prompt\":T with {{items}} (query only)}
  {\"op\":\"recurse\",\"goal\":T}  a recursive sub-run on the same context, one level deeper
  {\"op\":\"final\",\"answer\":T}  the final answer (last step)
The values you bound are shown to you next turn.
Results so far (latest last):
~s",
           [I, Max, Goal, Len, Prefix, Schema, RecentText]).

json_text(S, J) :-
    with_output_to(string(J), json_write(current_output, S, [width(0)])).
