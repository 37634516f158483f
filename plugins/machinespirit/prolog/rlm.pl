/*  MACHINE-SPIRIT: the recursive-language-model (RLM) graph's handlers.

    rlm_probe    reads the context's size and first bytes through the
                 host's workspace.read tool (never the whole context);
    rlm_iterate  one root-model turn: the prompt carries only metadata of
                 the context and the last few results; the reply is one
                 Prolog goal, checked against an allow-list (rlm_check.pl)
                 and run, rewritten with its checked wrappers, under an
                 inference limit in module ms_rlm_goals; its bindings,
                 failure or error become the next turn's feedback;
                 final(Answer) ends the loop;
    rlm_router   done once there is an answer, exhausted after the
                 iteration bound, else continue.

    The goal runs in the task thread. Whatever it throws ends the goal,
    not the node: only the cancel (ms_cancelled) and the node's time limit
    pass through; an exception model code could not have thrown by itself
    ('$aborted', unwind(_), a time limit of library(time)) is reported to
    the model as an error like any other. An exhausted process resource
    (memory) ends the step as resource_exhausted: the worker is replaced.
*/
:- module(ms_rlm, [run_model_code/2, shown_term/2, root_turn/5, push_recent/3, strip_fences/2, root_facts/6]).
:- meta_predicate root_turn(+, +, +, 2, -).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(protocol).
:- use_module(effects).
:- use_module(registry).
:- use_module(rlm_api).
:- use_module(rlm_goals, []).
:- use_module(rlm_check).

max_reply_chars(8192).
goal_inference_limit(5_000_000).
goal_seconds_limit(5).
max_observation_chars(600).
recent_kept(4).
max_root_prompt_bytes(7168).
prefix_bytes(256).
default_iterations(30).

%   ---- handlers ----

ms_registry:handler_decl(rlm_probe).
ms_registry:handler(rlm_probe, Env, _State, patch([context_length=Size, prefix=Prefix], Note)) :-
    get_dict(context_file, Env, File),
    (   string(File) -> true
    ;   throw(graph_failure(input, "the rlm graph needs machinespirit.context_file"))
    ),
    prefix_bytes(N),
    ms_rlm_api:workspace_read(File, 0, N, Prefix, Size),
    format(string(Note), "context of ~D bytes", [Size]).

ms_registry:handler_decl(rlm_iterate).
ms_registry:handler(rlm_iterate, Env, State, patch(Patch, Note)) :-
    get_dict(iteration, State, I0), I is I0 + 1,
    max_iterations(Env, Max),
    root_prompt(Env, State, I, Max, System, User),
    root_turn(State, System, User, run_model_code, Result),
    observation(I, Result, Obs),
    push_recent(State, Obs, Recent),
    (   Result = goal(_, final(Answer))
    ->  Patch = [iteration=1, recent=Recent, answer=Answer],
        Note = "final answer"
    ;   Patch = [iteration=1, recent=Recent],
        format(string(Note), "iteration ~d", [I])
    ).

%   The graph's end without an answer: fails the task with
%   rlm_iterations_exhausted, saying how many iterations ran and what the
%   last one gave (docs/reasons.md).
ms_registry:handler_decl(rlm_give_up).
ms_registry:handler(rlm_give_up, _Env, State, _) :-
    get_dict(iteration, State, I),
    get_dict(recent, State, Recent),
    (   last(Recent, Last) -> true ; Last = "(none)" ),
    format(string(Msg), "the root model gave no final answer in ~d iterations; the last: ~s", [I, Last]),
    throw(graph_failure(rlm_iterations_exhausted, Msg)).

ms_registry:router_decl(rlm_router).
ms_registry:router(rlm_router, Env, State, Key) :-
    get_dict(answer, State, A),
    get_dict(iteration, State, I),
    max_iterations(Env, Max),
    (   A \== null -> Key = done
    ;   I >= Max -> Key = exhausted
    ;   Key = continue
    ).

max_iterations(Env, Max) :-
    default_iterations(Def),
    get_dict(input, Env, Input),
    (   get_dict(max_iterations, Input, M), integer(M), M >= 1
    ->  Max is min(M, Def)
    ;   Max = Def
    ).

%!  root_turn(+State, +System, +User, :Run, -Result) is det.
%
%   One root-model call, then call(Run, ReplyText, Result) in its call
%   context (sub-calls name it as their parent, so the host puts them one
%   level deeper) with the context's facts published for the RLM's
%   operations. A sub-run's iterations publish their own facts: ours are
%   restored after.
root_turn(State, System, User, Run, Result) :-
    model_call([system(System), user(User)], [], Reply),
    get_dict(text, Reply, Text),
    get_dict(token, Reply, Token),
    get_dict(depth, Reply, Depth),
    get_dict(context_length, State, Len),
    get_dict(prefix, State, Prefix),
    (   nb_current(ms_rlm, SavedFacts) -> true ; SavedFacts = none ),
    setup_call_cleanup(
        nb_setval(ms_rlm, _{context_length: Len, prefix: Prefix}),
        with_call_context(ctx(Token, Depth), call(Run, Text, Result)),
        nb_setval(ms_rlm, SavedFacts)).

%!  push_recent(+State, +Observation, -Recent) is det.
%
%   The state's recent observations with Observation last, at most
%   recent_kept of them.
push_recent(State, Obs, Recent) :-
    get_dict(recent, State, Recent0),
    append(Recent0, [Obs], Recent1),
    recent_kept(K),
    last_n(Recent1, K, Recent).

last_n(L, N, Last) :-
    length(L, Len),
    (   Len =< N -> Last = L
    ;   Drop is Len - N, length(Pre, Drop), append(Pre, Last, L)
    ).

%   ---- the root prompt: metadata only, bounded ----

root_prompt(Env, State, I, Max, System, User) :-
    System = "You are the root of a recursive language model. You never see the context itself: you explore it by replying with Prolog goals that a sandbox runs for you.",
    get_dict(context_file, Env, File),
    root_facts(Env, State, Goal, Len, PrefixShown, Recent),
    build_user_prompt(I, Max, Goal, File, Len, PrefixShown, Recent, User0),
    fit_prompt(User0, I, Max, Goal, File, Len, PrefixShown, Recent, User).

%!  root_facts(+Env, +State, -Goal, -Len, -PrefixShown, -Recent) is det.
%
%   What a root prompt shows, each bounded: the task's goal (2000
%   characters), the context's size, its first bytes quoted (700
%   characters) and the recent observations.
root_facts(Env, State, Goal, Len, PrefixShown, Recent) :-
    get_dict(goal, Env, Goal0),
    get_dict(context_length, State, Len),
    get_dict(prefix, State, Prefix),
    get_dict(recent, State, Recent),
    format(string(PrefixQ), "~q", [Prefix]),
    truncate_text(PrefixQ, 700, PrefixShown),
    truncate_text(Goal0, 2000, Goal).

fit_prompt(User0, I, Max, Goal, File, Len, Prefix, Recent, User) :-
    utf8_bytes(User0, B),
    max_root_prompt_bytes(MaxB),
    (   B =< MaxB
    ->  User = User0
    ;   Recent = [_|Rest]
    ->  build_user_prompt(I, Max, Goal, File, Len, Prefix, Rest, User1),
        fit_prompt(User1, I, Max, Goal, File, Len, Prefix, Rest, User)
    ;   string_length(Goal, GL), GL > 200
    ->  truncate_text(Goal, 200, Goal1),
        truncate_text(Prefix, 100, Prefix1),
        build_user_prompt(I, Max, Goal1, File, Len, Prefix1, [], User1),
        fit_prompt(User1, I, Max, Goal1, File, Len, Prefix1, [], User)
    ;   User = User0
    ).

build_user_prompt(I, Max, Goal, File, Len, Prefix, Recent, User) :-
    (   Recent == []
    ->  RecentText = "(none yet)"
    ;   atomic_list_concat(Recent, '\n', RA), atom_string(RA, RecentText)
    ),
    format(string(User),
"[rlm root] iteration ~d of ~d
Task: ~s
Context: ~d bytes in workspace file ~q. It is not in this prompt. It starts with: ~s
Reply with exactly ONE Prolog goal and nothing else. It runs in a sandbox (pure built-ins only, no I/O, no time, no randomness); the bindings of your variables are shown to you next turn. Available:
  context_length(-Bytes)  context_prefix(-Text)  context_slice(+From, +Len, -Text) with Len =< 4096
  llm_query(+Prompt, -Answer)  ask a sub-model about a piece of text (Prompt =< 6000 characters)
  spirit(+Graph, +Input, -Answer)  run a registered graph one level deeper
  final(+Answer)  give the final answer and stop
Results so far (latest last):
~s",
           [I, Max, Goal, Len, File, Prefix, RecentText]).

%   ---- running a model's goal ----

%!  run_model_code(+Text, -Result) is det.
%
%   Result: final(Answer) | true(Bindings) | false | rejected(Msg) |
%   error(Msg) | syntax(Msg) | inference_limit | time_limit, with GoalText echoed as
%   goal(GoalText, Result). Cancellation and the node time limit are not
%   results: they propagate and end the node.
run_model_code(Text0, goal(Echo, Result)) :-
    (   sub_string(Text0, _, _, _, "\u0000")
    ->  Text = Text0             % split_string/4 fails on a NUL
    ;   strip_fences(Text0, Text) -> true
    ;   Text = Text0
    ),
    truncate_text(Text, 160, Echo),
    string_length(Text, L),
    max_reply_chars(MaxR),
    (   L > MaxR
    ->  format(string(M), "the reply has ~d characters; at most ~d", [L, MaxR]),
        Result = syntax(M)
    ;   sub_string(Text, _, _, _, "\u0000")
    ->  Result = syntax("the reply holds a NUL character")
    ;   catch(parse_goal(Text, Goal, Bindings), E, true),
        (   nonvar(E)
        ->  syntax_text(E, M), Result = syntax(M)
        ;   catch(check_model_goal(Goal, Runnable), rejected(Why), true),
            (   nonvar(Why)
            ->  Result = rejected(Why)
            ;   run_checked(Runnable, Bindings, Result)
            )
        )
    ).

%   syntax_text(+Error, -Text): a parse error as the model is told it.
%   read_term/3 on a string names its stream by an address
%   ("Stream <stream>(0x5615…):1:4 Syntax error: …"): of no use to the
%   model, and different on every run, so the prompts would never repeat.
syntax_text(error(syntax_error(What), Ctx), Text) :-
    !,
    (   Ctx = stream(_, Line, LinePos, _)
    ->  Col is LinePos + 1,
        format(string(Text), "syntax error at line ~d, column ~d: ~w", [Line, Col, What])
    ;   Ctx = string(_, CharNo)
    ->  format(string(Text), "syntax error at character ~d: ~w", [CharNo, What])
    ;   format(string(Text), "syntax error: ~w", [What])
    ).
syntax_text(E, Text) :-
    error_text(E, Text0),
    drop_stream_refs(Text0, Text).

%   drop_stream_refs(+Text0, -Text): Text0 without "Stream <stream>(…):"
%   and "<stream>(…)" references.
drop_stream_refs(Text0, Text) :-
    (   sub_string(Text0, B, _, _, "<stream>(")
    ->  sub_string(Text0, B, _, 0, From),
        (   sub_string(From, E, 1, _, ")")
        ->  End is B + E + 1
        ;   string_length(Text0, End)
        ),
        (   B >= 7, Pre is B - 7, sub_string(Text0, Pre, 7, _, "Stream ")
        ->  Start = Pre
        ;   Start = B
        ),
        sub_string(Text0, 0, Start, _, Before),
        sub_string(Text0, End, _, 0, After0),
        (   sub_string(After0, 0, 1, _, ":")
        ->  sub_string(After0, 1, _, 0, After)
        ;   After = After0
        ),
        string_concat(Before, After, Text1),
        drop_stream_refs(Text1, Text)
    ;   Text = Text0
    ).

%   final/1 leaves its answer in the thread's global ms_rlm_final. A goal
%   may start a sub-run whose own goals call final/1, so the value of the
%   enclosing goal is saved and restored around each goal.
run_checked(Goal, Bindings, Result) :-
    goal_inference_limit(Inf),
    (   nb_current(ms_rlm_final, Saved) -> true ; Saved = none ),
    setup_call_cleanup(
        ( nb_setval(ms_rlm_final, none), reset_text_budget ),
        ( goal_seconds_limit(Secs),
          catch(( with_goal_time_limit(Secs, call_with_inference_limit(ms_rlm_goals:Goal, Inf, R))
                -> ( R == inference_limit_exceeded -> Out = inference_limit ; Out = true )
                ;  Out = false
                ),
                E,
                goal_exception(E, Out)),
          (   nb_current(ms_rlm_final, answer(A)) -> Final = answer(A) ; Final = none )
        ),
        nb_setval(ms_rlm_final, Saved)),
    (   Final = answer(A1)
    ->  Result = final(A1)
    ;   Out == true
    ->  Result = true(Bindings)
    ;   Result = Out
    ).

%   The cancel and the node's time limit end the node; a worker out of
%   memory ends the step (resource_exhausted); anything else, whatever
%   its form, is the goal's error. The term is shrunk before it is put
%   into words: it may hold a huge atom of the goal's.
goal_exception(E, _) :-
    node_exception(E), !,
    throw(E).
goal_exception(machinespirit_goal_time_limit, time_limit) :- !.
goal_exception(E, _) :-
    E = error(resource_error(memory), _), !,
    throw(graph_failure(resource_exhausted, "the worker ran out of memory running the model's goal")).
goal_exception(E, error(M)) :-
    shown_term(E, S),
    (   S = error(_, _) -> error_text(S, M)
    ;   format(string(M0), "exception ~W", [S, [quoted(true), max_depth(20), portray(false)]]),
        truncate_text(M0, 500, M)
    ).

node_exception(ms_cancelled).
node_exception(machinespirit_time_limit).

strip_fences(Text0, Text) :-
    (   sub_string(Text0, B, _, _, "```")
    ->  sub_string(Text0, B, _, 0, FromFence),
        (   sub_string(FromFence, NL, 1, _, "\n")
        ->  Start is NL + 1,
            sub_string(FromFence, Start, _, 0, Body0),
            (   sub_string(Body0, E, _, _, "```")
            ->  sub_string(Body0, 0, E, _, Body)
            ;   Body = Body0
            )
        ;   Body = ""
        )
    ;   Body = Text0
    ),
    split_string(Body, "", " \t\r\n", [Text]).

%   One term, read in the goal module (its operators), quasi-quotations
%   returned unparsed (never handed to a parser), nothing after it.
parse_goal(Text, Goal, Bindings) :-
    (   sub_string(Text, _, 1, 0, ".") -> T = Text ; string_concat(Text, " .", T) ),
    setup_call_cleanup(
        open_string(T, S),
        ( read_term(S, Goal, [variable_names(Bindings), syntax_errors(error),
                              quasi_quotations(QQ), module(ms_rlm_goals)]),
          read_term(S, Rest, [syntax_errors(error), module(ms_rlm_goals)])
        ),
        close(S)),
    (   QQ \== []
    ->  throw(rejected("quasi-quotations are not allowed"))
    ;   Goal == end_of_file
    ->  throw(rejected("the reply holds no goal"))
    ;   Rest \== end_of_file
    ->  throw(rejected("reply with exactly one goal"))
    ;   true
    ).

%   ---- feedback for the next turn ----

observation(I, goal(Echo, Result), Obs) :-
    result_text(Result, RT),
    format(string(Obs0), "[~d] ~s => ~s", [I, Echo, RT]),
    max_observation_chars(Max),
    truncate_text(Obs0, Max, Obs).

result_text(final(_), "final answer given").
result_text(true([]), "true").
result_text(true(Bs), Text) :-
    Bs \== [],
    include(shown_binding, Bs, Shown),
    (   Shown == []
    ->  Text = "true"
    ;   maplist(binding_text, Shown, Parts),
        atomic_list_concat(Parts, ', ', A), atom_string(A, Text)
    ).
result_text(false, "false (no solution)").
result_text(inference_limit, Text) :-
    goal_inference_limit(L),
    format(string(Text), "stopped: inference limit exceeded (~D inferences)", [L]).
result_text(time_limit, Text) :-
    goal_seconds_limit(L),
    format(string(Text), "stopped: the goal computed for more than ~d s", [L]).
result_text(rejected(M), Text) :- format(string(Text), "rejected: ~s", [M]).
result_text(error(M), Text) :- format(string(Text), "error: ~s", [M]).
result_text(syntax(M), Text) :- format(string(Text), "not a goal: ~s", [M]).

shown_binding(Name=_) :- \+ sub_atom(Name, 0, _, _, '_').

binding_text(Name=Value, Text) :-
    shown_term(Value, Shown),
    format(string(T0), "~w = ~W", [Name, Shown, [quoted(true), max_depth(20), portray(false)]]),
    truncate_text(T0, 300, Text).

%!  shown_term(@Term, -Shown) is det.
%
%   A copy of Term that is cheap to print whatever Term is: texts longer
%   than 200 characters and integers of more than 4096 bits are replaced by
%   a note of their size, at most 64 arguments or list elements per level,
%   20 levels and 400 subterms in all are kept (a cyclic term ends at the
%   bounds). Sizes are asked for before anything is copied or printed, so
%   a binding of a 400,000,000-character atom costs a few hundred bytes.
shown_term(T, S) :-
    shown(T, 0, S, 400, _).

shown(_, _, '...', B, B) :- B =< 0, !.
shown(T, _, T, B0, B) :- var(T), !, B is B0 - 1.
shown(T, _, S, B0, B) :- atom(T), !, B is B0 - 1, shown_text(atom, T, S).
shown(T, _, S, B0, B) :- string(T), !, B is B0 - 1, shown_text(string, T, S).
shown(T, _, S, B0, B) :- integer(T), !,
    B is B0 - 1,
    (   T \== 0, msb(abs(T)) > 4096
    ->  Bits is msb(abs(T)) + 1,
        format(atom(S), "<integer of ~d bits>", [Bits])
    ;   S = T
    ).
shown(T, _, T, B0, B) :- \+ compound(T), !, B is B0 - 1.
shown(_, D, '...', B0, B) :- D >= 20, !, B is B0 - 1.
shown(T, D, S, B0, B) :- is_dict(T), !,
    dict_pairs(T, Tag, Pairs),
    shown(Pairs, D, SP, B0, B1),
    shown(Tag, D, ST, B1, B),
    S = dict(ST, SP).
shown(T, D, S, B0, B) :- T = [_|_], !,
    D1 is D + 1,
    shown_list(T, 0, D1, S, B0, B).
shown(T, D, S, B0, B) :-
    compound_name_arity(T, N, A),
    shown_text(atom, N, SN),
    D1 is D + 1,
    Keep is min(A, 64),
    numlist_(1, Keep, Is),
    B1 is B0 - 1,
    foldl(shown_arg(T, D1), Is, Args, B1, B),
    (   A > Keep -> append(Args, ['...'], Args1) ; Args1 = Args ),
    (   atom(SN) -> compound_name_arguments(S, SN, Args1) ; S = SN ).

shown_arg(T, D, I, S, B0, B) :-
    arg(I, T, A),
    shown(A, D, S, B0, B).

shown_list(L, _, _, L, B, B) :- L == [], !.
shown_list(_, _, _, '...', B, B) :- B =< 0, !.
shown_list(L, N, D, S, B0, B) :-
    (   var(L) -> S = L, B = B0
    ;   L = [H|T]
    ->  (   N >= 64
        ->  S = ['...'], B = B0
        ;   shown(H, D, SH, B0, B1),
            N1 is N + 1,
            shown_list(T, N1, D, ST, B1, B),
            S = [SH|ST]
        )
    ;   shown(L, D, S, B0, B)
    ).

shown_text(Kind, T, S) :-
    (   Kind == atom -> atom_length(T, L) ; string_length(T, L) ),
    (   L =< 200
    ->  S = T
    ;   sub_string(T, 0, 100, _, Head),
        format(atom(S), "<~w of ~D characters starting ~q>", [Kind, L, Head])
    ).

numlist_(L, H, []) :- L > H, !.
numlist_(L, H, [L|T]) :- L1 is L + 1, numlist_(L1, H, T).
