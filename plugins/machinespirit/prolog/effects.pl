/*  MACHINE-SPIRIT: effects, the only way task code reaches the world.

    Every effect is a request frame to the plugin, which performs it
    through the host (sdk.Host: CallModel, CallTool, RequestApproval,
    Progress), so the host counts, gates, records and can cancel each one.
    The task thread then waits for the matching effect_result, which the
    main thread routes to it as a message. A refusal or failure comes back
    as the exception

        effect_error(Kind, Error, Message)

    where Error is one of budget_exhausted, permission_denied,
    invalid_argument, unimplemented, host_unavailable, model_unavailable
    (a model outage: rate_limited, server, timeout), model_error (the
    model provider refused for good: auth, request, bad_response; Message
    says which), effect_unsettled, too_large, tool_error, refused or
    other. A handler may catch it.

    Time spent waiting for an effect does not count against the node's
    time limit: the node's alarm is paused while the host works (a model
    call or an approval may take long), so the limit bounds what the node
    computes, not how long the host takes.

    The call context ctx(Token, Depth) is the model call on whose behalf
    code runs: a model call made in it names Token as its parent, so the
    host computes its depth; a sub-run (spirit/3) runs one level deeper.
*/
:- module(ms_effects,
          [ model/2,                % +Prompt, -Text
            model_call/3,           % +Messages, +Options, -Reply
            tool/3,                 % +Name, +Args, -Result
            approval/2,             % +Prompt, -Decision
            progress/1,             % +Note
            effect/3,               % +Kind, +Fields, -Value
            effect_start/3,         % +Kind, +Fields, -Id
            await_effects/3,        % +Kind, +Ids, -Values
            current_call_context/1, % -ctx(Token, Depth)
            with_call_context/2,    % +ctx(Token, Depth), :Goal
            with_node_time_limit/2, % +Seconds, :Goal
            with_goal_time_limit/2  % +Seconds, :Goal
          ]).
:- use_module(library(time)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(protocol).

:- meta_predicate
    with_call_context(+, 0),
    with_node_time_limit(+, 0),
    with_goal_time_limit(+, 0).

% Bounds on what task code may send in one effect. A frame is bounded as a
% whole as well; these keep any single text readable.
max_prompt_chars(65536).

%!  model(+Prompt, -Text) is det.
%
%   One model call with Prompt as the user message, in the current call
%   context.
model(Prompt, Text) :-
    model_call(Prompt, [], Reply),
    get_dict(text, Reply, Text).

%!  model_call(+Messages, +Options, -Reply) is det.
%
%   Messages is a text (one user message) or a list of system(Text),
%   user(Text), assistant(Text). Options: parent(Token) overrides the
%   parent from the call context; tools(Names) lets the model call those
%   host tools (at most 8 names): the plugin runs each tool call it asks
%   for through the host and asks again with the results, at most 8
%   model calls, and Reply is the reply without tool calls (past the
%   bound, effect_error(model, tool_rounds_exhausted, Message)). Reply
%   is a dict text, token, depth: token and depth are the host's, for
%   calls that recurse from this one.
model_call(Messages0, Options, Reply) :-
    messages(Messages0, Messages),
    (   memberchk(parent(P), Options)
    ->  true
    ;   current_call_context(ctx(P, _))
    ),
    Fields0 = _{messages: Messages, parent: P},
    (   memberchk(tools(Ts), Options), Ts \== []
    ->  maplist(text_string, Ts, TSs),
        put_dict(tools, Fields0, TSs, Fields)
    ;   Fields = Fields0
    ),
    effect(model, Fields, Value),
    get_dict(text, Value, Text0), text_string(Text0, Text),
    get_dict(token, Value, Token0), text_string(Token0, Token),
    get_dict(depth, Value, Depth), integer(Depth),
    Reply = _{text: Text, token: Token, depth: Depth}.

messages(M, [_{role: "user", content: S}]) :-
    text(M), !,
    bounded_text(M, S).
messages(Ms, Out) :-
    is_list(Ms), Ms \== [], !,
    maplist(message, Ms, Out).
messages(M, _) :-
    type_error(model_messages, M).

message(M, _{role: Role, content: S}) :-
    (   M = system(T) -> Role = "system"
    ;   M = user(T) -> Role = "user"
    ;   M = assistant(T) -> Role = "assistant"
    ;   type_error(model_message, M)
    ),
    bounded_text(T, S).

text(T) :- ( string(T) ; atom(T) ), !.

bounded_text(T, S) :-
    (   text(T) -> text_string(T, S) ; type_error(text, T) ),
    string_length(S, L),
    max_prompt_chars(Max),
    (   L =< Max -> true
    ;   format(string(Msg), "a model message of ~d characters exceeds ~d", [L, Max]),
        throw(effect_error(model, too_large, Msg))
    ).

text_string(T, S) :- ( string(T) -> S = T ; atom_string(T, S) ).

%!  tool(+Name, +Args, -Result) is det.
%
%   Calls host tool Name (e.g. 'workspace.read') with Args, a dict that is
%   sent as a JSON object. Result is the tool's JSON result (a dict, list,
%   string, ...). A tool that reports an error raises
%   effect_error(tool, tool_error, Message).
tool(Name, Args, Result) :-
    (   text(Name) -> text_string(Name, N) ; type_error(tool_name, Name) ),
    (   is_dict(Args) -> true ; type_error(tool_arguments, Args) ),
    effect(tool, _{name: N, arguments: Args}, Value),
    get_dict(result, Value, Result0),
    (   get_dict(is_error, Value, true)
    ->  (   string(Result0) -> Msg = Result0 ; format(string(Msg), "~q", [Result0]) ),
        truncate_text(Msg, 1000, Short),
        throw(effect_error(tool, tool_error, Short))
    ;   Result = Result0
    ).

%!  approval(+Prompt, -Decision) is det.
%
%   Asks the host for a human decision. Decision is approved or rejected.
approval(Prompt, Decision) :-
    bounded_text(Prompt, P),
    effect(approval, _{prompt: P}, Value),
    get_dict(decision, Value, D),
    atom_string(Decision, D).

%!  progress(+Note) is det.
%
%   A short note for the task's event stream.
progress(Note) :-
    (   text(Note) -> text_string(Note, S) ; format(string(S), "~q", [Note]) ),
    truncate_text(S, 200, Short),
    effect(progress, _{note: Short}, _).

%!  effect(+Kind, +Fields, -Value) is det.
%
%   Sends one effect request and waits for its result. Effect ids are
%   unique for the life of the worker (flag/3 is global), so a result can
%   never be matched to the wrong request.
effect(Kind, Fields, Value) :-
    effect_start(Kind, Fields, Id),
    await_effects(Kind, [Id], [Value]).

%!  effect_start(+Kind, +Fields, -Id) is det.
%!  await_effects(+Kind, +Ids, -Values) is det.
%
%   effect/3 in two halves, so that several model calls can be in flight
%   at once (the plugin bounds how many, and admits only model calls
%   concurrently). Results are awaited in the order of Ids; the first
%   refusal is raised once every result has arrived, so no answer is left
%   behind for a later wait.
effect_start(Kind, Fields, Id) :-
    flag(ms_effect_id, Id0, Id0 + 1),
    Id is Id0 + 1,
    put_dict(_{type: effect, id: Id, kind: Kind}, Fields, Frame),
    catch(send_frame(Frame), frame_too_large(B, Max),
          ( format(string(Msg), "~w request of ~d bytes exceeds the ~d-byte frame limit", [Kind, B, Max]),
            throw(effect_error(Kind, too_large, Msg)) )).

await_effects(Kind, Ids, Values) :-
    pause_alarm(Paused),
    findall(Id-Reply, ( member(Id, Ids), thread_get_message(ms_effect_result(Id, Reply)) ), Replies),
    resume_alarm(Paused),
    maplist(effect_value(Kind), Replies, Values).

effect_value(Kind, _-Reply, Value) :-
    (   get_dict(ok, Reply, true)
    ->  get_dict(value, Reply, Value)
    ;   get_dict(error, Reply, Err),
        get_dict(kind, Err, EK), atom_string(ErrKind, EK),
        get_dict(message, Err, EM),
        throw(effect_error(Kind, ErrKind, EM))
    ).

%   ---- call context ----

current_call_context(Ctx) :-
    (   nb_current(ms_call_ctx, Ctx0), Ctx0 = ctx(_, _)
    ->  Ctx = Ctx0
    ;   Ctx = ctx("", 0)
    ).

with_call_context(Ctx, Goal) :-
    current_call_context(Old),
    setup_call_cleanup(nb_setval(ms_call_ctx, Ctx),
                       once(Goal),
                       nb_setval(ms_call_ctx, Old)).

%   ---- the node time limit, paused during effects ----

%!  with_node_time_limit(+Seconds, :Goal) is semidet.
%
%   Runs Goal once; throws machinespirit_time_limit if it computes for
%   longer than Seconds (time waiting for effects excluded). Nested calls
%   (a sub-run inside a node) run under the outer limit.
with_node_time_limit(Secs, Goal) :-
    (   nb_current(ms_alarm, alarm(_))
    ->  once(Goal)
    ;   setup_call_cleanup(
            alarm(Secs, throw(machinespirit_time_limit), Id, [install(false)]),
            ( nb_setval(ms_alarm, alarm(Id)),
              install_alarm(Id),
              once(Goal)
            ),
            ( remove_alarm(Id),
              nb_setval(ms_alarm, none) ))
    ).

%!  with_goal_time_limit(+Seconds, :Goal) is semidet.
%
%   Runs Goal once; throws machinespirit_goal_time_limit if it computes
%   for longer than Seconds, time waiting for effects excluded like the
%   node's. It bounds the CPU one model-written goal may use (wall time
%   spent computing is at least its CPU time): an inference limit alone
%   lets a few hundred inferences of costly builtins run for many
%   seconds. A goal inside a goal (a sub-run's) runs under the outer limit.
with_goal_time_limit(Secs, Goal) :-
    (   nb_current(ms_goal_alarm, alarm(_))
    ->  once(Goal)
    ;   setup_call_cleanup(
            alarm(Secs, throw(machinespirit_goal_time_limit), Id, [install(false)]),
            ( nb_setval(ms_goal_alarm, alarm(Id)),
              install_alarm(Id),
              once(Goal)
            ),
            ( remove_alarm(Id),
              nb_setval(ms_goal_alarm, none) ))
    ).

%   Both the node's alarm and a goal's pause while an effect is waited for.
pause_alarm(paused(Node, Goal)) :-
    pause_one(ms_alarm, Node),
    pause_one(ms_goal_alarm, Goal).

pause_one(Key, Paused) :-
    (   nb_current(Key, alarm(Id)),
        current_alarm(At, _, Id, Status), Status \== done
    ->  get_time(Now),
        Left is max(0.001, At - Now),
        uninstall_alarm(Id),
        Paused = paused(Id, Left)
    ;   Paused = none
    ).

resume_alarm(paused(Node, Goal)) :-
    resume_one(Node),
    resume_one(Goal).

resume_one(none).
resume_one(paused(Id, Left)) :-
    install_alarm(Id, Left).
