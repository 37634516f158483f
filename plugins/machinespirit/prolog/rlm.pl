/*  MACHINE-SPIRIT: the recursive-language-model (RLM) graph's handlers.

    rlm_probe    reads the context's size and first bytes through the
                 host's workspace.read tool (never the whole context);
    rlm_iterate  one root-model turn: the prompt carries only metadata of
                 the context and the last few results; the reply is one
                 Prolog goal, checked (our own denials, then
                 library(sandbox) safe_goal/1) and run under an inference
                 limit in module ms_rlm_goals; its bindings, failure or
                 error become the next turn's feedback; final(Answer)
                 ends the loop;
    rlm_router   done once there is an answer, exhausted after the
                 iteration bound, else continue.

    Denied on top of library(sandbox), because a node re-run after a
    crash must compute the same thing and a cancel must reach it: time
    (get_time/1, sleep/1, statistics), randomness (random*), global or
    database state that the checkpoint would not hold (assert, retract,
    nb_setval, ...), catching exceptions (catch/3 and cleanup handlers
    could swallow cancellation), output (it has nowhere to go) and
    module-qualified goals (they would reach around the goal module).
*/
:- module(ms_rlm, [check_goal/1, run_model_code/2]).
:- use_module(library(sandbox)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(protocol).
:- use_module(effects).
:- use_module(registry).
:- use_module(rlm_api).
:- use_module(rlm_goals, []).

max_reply_chars(8192).
goal_inference_limit(5_000_000).
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
    model_call([system(System), user(User)], [], Reply),
    get_dict(text, Reply, Text),
    get_dict(token, Reply, Token),
    get_dict(depth, Reply, Depth),
    get_dict(context_length, State, Len),
    get_dict(prefix, State, Prefix),
    % A sub-run's iterations publish their own facts: restore ours after.
    (   nb_current(ms_rlm, SavedFacts) -> true ; SavedFacts = none ),
    setup_call_cleanup(
        nb_setval(ms_rlm, _{context_length: Len, prefix: Prefix}),
        with_call_context(ctx(Token, Depth), run_model_code(Text, Result)),
        nb_setval(ms_rlm, SavedFacts)),
    observation(I, Result, Obs),
    get_dict(recent, State, Recent0),
    append(Recent0, [Obs], Recent1),
    recent_kept(K),
    last_n(Recent1, K, Recent),
    (   Result = goal(_, final(Answer))
    ->  Patch = [iteration=1, recent=Recent, answer=Answer],
        Note = "final answer"
    ;   Patch = [iteration=1, recent=Recent],
        format(string(Note), "iteration ~d", [I])
    ).

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

last_n(L, N, Last) :-
    length(L, Len),
    (   Len =< N -> Last = L
    ;   Drop is Len - N, length(Pre, Drop), append(Pre, Last, L)
    ).

%   ---- the root prompt: metadata only, bounded ----

root_prompt(Env, State, I, Max, System, User) :-
    System = "You are the root of a recursive language model. You never see the context itself: you explore it by replying with Prolog goals that a sandbox runs for you.",
    get_dict(goal, Env, Goal0),
    get_dict(context_file, Env, File),
    get_dict(context_length, State, Len),
    get_dict(prefix, State, Prefix),
    get_dict(recent, State, Recent),
    format(string(PrefixQ), "~q", [Prefix]),
    truncate_text(PrefixQ, 700, PrefixShown),
    truncate_text(Goal0, 2000, Goal),
    build_user_prompt(I, Max, Goal, File, Len, PrefixShown, Recent, User0),
    fit_prompt(User0, I, Max, Goal, File, Len, PrefixShown, Recent, User).

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
%   error(Msg) | syntax(Msg) | inference_limit, with GoalText echoed as
%   goal(GoalText, Result). Cancellation and the node time limit are not
%   results: they propagate and end the node.
run_model_code(Text0, goal(Echo, Result)) :-
    strip_fences(Text0, Text),
    truncate_text(Text, 160, Echo),
    string_length(Text, L),
    max_reply_chars(MaxR),
    (   L > MaxR
    ->  format(string(M), "the reply has ~d characters; at most ~d", [L, MaxR]),
        Result = syntax(M)
    ;   catch(parse_goal(Text, Goal, Bindings), E, true),
        (   nonvar(E)
        ->  error_text(E, M), Result = syntax(M)
        ;   catch(check_goal(Goal), rejected(Why), true),
            (   nonvar(Why)
            ->  Result = rejected(Why)
            ;   run_checked(Goal, Bindings, Result)
            )
        )
    ).

%   final/1 leaves its answer in the thread's global ms_rlm_final. A goal
%   may start a sub-run whose own goals call final/1, so the value of the
%   enclosing goal is saved and restored around each goal.
run_checked(Goal, Bindings, Result) :-
    goal_inference_limit(Inf),
    (   nb_current(ms_rlm_final, Saved) -> true ; Saved = none ),
    setup_call_cleanup(
        nb_setval(ms_rlm_final, none),
        ( catch(( call_with_inference_limit(ms_rlm_goals:Goal, Inf, R)
                -> ( R == inference_limit_exceeded -> Out = inference_limit ; Out = true )
                ;  Out = false
                ),
                E,
                ( control_exception(E) -> throw(E) ; error_text(E, M), Out = error(M) )),
          (   nb_current(ms_rlm_final, answer(A)) -> Final = answer(A) ; Final = none )
        ),
        nb_setval(ms_rlm_final, Saved)),
    (   Final = answer(A1)
    ->  Result = final(A1)
    ;   Out == true
    ->  Result = true(Bindings)
    ;   Result = Out
    ).

control_exception(ms_cancelled).
control_exception(machinespirit_time_limit).
control_exception('$aborted').
control_exception(unwind(_)).
control_exception(time_limit_exceeded).

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

%!  check_goal(+Goal) is det.
%
%   Throws rejected(Message) unless Goal is acceptable.
check_goal(Goal) :-
    (   var(Goal) -> throw(rejected("the goal is a variable")) ; true ),
    (   denied_in(Goal, What)
    ->  format(string(M), "~w is not allowed here (no time, randomness, global state, exception handling or output in task code)", [What]),
        throw(rejected(M))
    ;   true
    ),
    catch(safe_goal(ms_rlm_goals:Goal), E,
          ( error_text(E, M0),
            format(string(M), "the sandbox refuses it: ~s", [M0]),
            throw(rejected(M)) )).

denied_in(T, What) :-
    (   is_dict(T)
    ->  dict_pairs(T, _, Pairs),
        member(_-V, Pairs),
        denied_in(V, What)
    ;   compound(T)
    ->  (   T = _:_
        ->  What = "module qualification (:)"
        ;   compound_name_arity(T, N, A),
            denied(N, A)
        ->  What = N/A
        ;   arg(_, T, Sub),
            denied_in(Sub, What)
        )
    ;   atom(T), denied(T, 0)
    ->  What = T
    ).

denied(N, _) :- sub_atom(N, 0, _, _, random), !.
denied(N, A) :- denied_pi(N/A), !.

denied_pi(get_time/1).
denied_pi(sleep/1).
denied_pi(statistics/0).
denied_pi(statistics/1).
denied_pi(statistics/2).
denied_pi(cputime/0).
denied_pi(realtime/0).
denied_pi(set_random/1).
denied_pi(setrand/1).
denied_pi(getrand/1).
denied_pi(garbage_collect/0).
denied_pi(abort/0).
denied_pi(halt/0).
denied_pi(halt/1).
denied_pi(assert/1).
denied_pi(asserta/1).
denied_pi(assertz/1).
denied_pi(assert/2).
denied_pi(asserta/2).
denied_pi(assertz/2).
denied_pi(retract/1).
denied_pi(retractall/1).
denied_pi(abolish/1).
denied_pi(abolish/2).
denied_pi(erase/1).
denied_pi(abolish_all_tables/0).
denied_pi(nb_setval/2).
denied_pi(b_setval/2).
denied_pi(nb_getval/2).
denied_pi(b_getval/2).
denied_pi(nb_current/2).
denied_pi(catch/3).
denied_pi(catch_with_backtrace/3).
denied_pi(call_cleanup/2).
denied_pi(setup_call_cleanup/3).
denied_pi(setup_call_catcher_cleanup/4).
denied_pi(call_with_time_limit/2).
denied_pi(call_with_time_limit/3).
denied_pi(alarm/3).
denied_pi(alarm/4).
denied_pi(with_output_to/2).
denied_pi(format/1).
denied_pi(format/2).
denied_pi(format/3).
denied_pi(print_message/2).
denied_pi(write/1).
denied_pi(writeln/1).
denied_pi(print/1).
denied_pi(writeq/1).
denied_pi(write_canonical/1).
denied_pi(write_term/2).
denied_pi(nl/0).
denied_pi(put_char/1).
denied_pi(tab/1).
denied_pi(portray_clause/1).
% Flags, operators and declarations change the goal module for every
% later goal of the worker: state the checkpoint would not hold.
denied_pi(set_prolog_flag/2).
denied_pi(create_prolog_flag/3).
denied_pi(op/3).
denied_pi(style_check/1).
denied_pi((dynamic)/1).
denied_pi((discontiguous)/1).
denied_pi((table)/1).
denied_pi(set_stream/2).

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
result_text(rejected(M), Text) :- format(string(Text), "rejected: ~s", [M]).
result_text(error(M), Text) :- format(string(Text), "error: ~s", [M]).
result_text(syntax(M), Text) :- format(string(Text), "not a goal: ~s", [M]).

shown_binding(Name=_) :- \+ sub_atom(Name, 0, _, _, '_').

binding_text(Name=Value, Text) :-
    format(string(T0), "~w = ~W", [Name, Value, [quoted(true), max_depth(20), portray(false)]]),
    truncate_text(T0, 300, Text).
