/*  MACHINE-SPIRIT: the graph runtime. One host step = one node execution.

    A step receives the last checkpoint (or none), runs exactly one node,
    applies its patch through the schema's reducers, picks the next node
    and answers with a new checkpoint. The checkpoint is a ground, bounded
    JSON snapshot, schema "machinespirit.graph/1":

        { "schema":     "machinespirit.graph/1",
          "graph":      Id,
          "graph_hash": SHA-256 of the graph spec,
          "next":       the node the next step runs ("end" once complete),
          "state":      { field: value, ... }   (exactly the schema's fields),
          "visits":     { node: count, ... },
          "executions": total node executions so far,
          "interrupt":  null | { "node": N, "reason": Q [, "field": F] } }

    There is no transcript: what a node needs later must be in the state.
    A resume continues from "next", so the effects of a committed node are
    never repeated.

    An interrupt is a pause: the node that returns interrupt(Patch, Q) or
    interrupt(Patch, Q, Field) commits its patch and the next node with
    the interrupt pending. The plugin asks the host question Q and sends
    the answer (one JSON value) with the next run as resume.value: it is
    applied to Field (through its reducer, type checked) and handed to
    the next node as Env.resume; that step's checkpoint clears the
    interrupt. A run of a checkpoint with an interrupt pending and no
    answer fails (no_answer): an interrupt is never passed over. A checkpoint that does not match the compiled graph
    exactly (schema, id, hash, fields, types) is refused as
    checkpoint_incompatible, never repaired.
*/
:- module(ms_runtime,
          [ run_step/2,             % +Run, -Reply
            spirit/3,               % +GraphId, +Input, -Answer
            current_env/1           % -Env
          ]).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(protocol).
:- use_module(types).
:- use_module(graph).
:- use_module(registry).
:- use_module(effects).

checkpoint_schema("machinespirit.graph/1").

%   Messages and summaries are bounded: they end up in the host's store.
max_message_chars(1000).
max_summary_chars(500).

fail_step(Code, Fmt, Args) :-
    format(string(Msg), Fmt, Args),
    throw(graph_failure(Code, Msg)).

%!  run_step(+Run, -Reply) is det.
%
%   Run is the run frame: id, graph, input, goal, context_file,
%   checkpoint (or null), checkpoint_max_bytes. Reply is the result frame.
%   Every failure, including cancellation, becomes a typed reply; only a
%   crash of the process itself produces none.
run_step(Run, Reply) :-
    get_dict(id, Run, Id),
    catch(step(Run, Reply0), E, failure_reply(E, Reply0)),
    put_dict(_{type: result, id: Id}, Reply0, Reply).

step(Run, Reply) :-
    get_dict(graph, Run, GS),
    atom_string(GId, GS),
    (   graph(GId, G) -> true
    ;   fail_step(unknown_graph, "no graph ~q is registered", [GId])
    ),
    run_env(Run, Env),
    get_dict(checkpoint, Run, Cp),
    (   Cp == null
    ->  initial_snapshot(G, Snap0)
    ;   decode_checkpoint(G, Cp, Snap0)
    ),
    Snap0 = snap(Node, _, _, _, Intr0),
    (   Node == end, Intr0 == null
    ->  fail_step(already_complete, "the checkpoint is of a completed run", [])
    ;   true
    ),
    (   Node == end
    ->  % The last node paused: its answer is all there is left to take.
        answer_interrupt(G, Run, Snap0, Snap1, Env, _),
        Note = "answered"
    ;   check_bounds(G, Snap0),
        answer_interrupt(G, Run, Snap0, Snap0a, Env, Env1),
        children_state(G, Env1, Snap0a, Snap0b),
        exec_node(G, Env1, Snap0b, Snap1, Note)
    ),
    Snap1 = snap(Next, State, _, Execs, Interrupt),
    summary(GId, Node, Next, Execs, Interrupt, Note, Summary),
    encode_checkpoint(G, Snap1, CpOut),
    get_dict(checkpoint_max_bytes, Run, MaxCp),
    check_checkpoint_size(G, CpOut, MaxCp),
    %   An interrupt pauses even the last node: the run completes only
    %   once it is answered.
    (   Interrupt \== null
    ->  Reply = _{outcome: interrupt, summary: Summary, checkpoint: CpOut,
                  node: Node, next: Next}
    ;   Next == end
    ->  output(G, State, Result),
        Reply = _{outcome: complete, summary: Summary, checkpoint: CpOut,
                  result: Result, node: Node, next: Next}
    ;   Reply = _{outcome: continue, summary: Summary, checkpoint: CpOut,
                  node: Node, next: Next}
    ).

%!  answer_interrupt(+G, +Run, +Snap0, -Snap, +Env0, -Env) is det.
%
%   Applies the answer the run carries to the pending interrupt of Snap0,
%   if there is one.
answer_interrupt(_, _, Snap, Snap, Env0, Env) :-
    Snap = snap(_, _, _, _, null), !,
    put_dict(resume, Env0, null, Env).
answer_interrupt(G, Run, snap(N, S0, Vs, X, Intr), snap(N, S, Vs, X, null), Env0, Env) :-
    (   get_dict(resume, Run, R), is_dict(R), get_dict(value, R, Value)
    ->  true
    ;   get_dict(reason, Intr, Q),
        fail_step(no_answer, "graph ~w: the run has no answer to the pending interrupt (~s)", [G.id, Q])
    ),
    (   get_dict(field, Intr, FS)
    ->  atom_string(F, FS),
        graph_field(G, field(F, Type, _, _)),
        (   from_json(Type, Value, FV) -> true
        ;   format(string(VS), "~W", [Value, [max_depth(8), quoted(true)]]),
            truncate_text(VS, 200, VShort),
            fail_step(type_error, "graph ~w: the answer ~s to the interrupt does not fit field ~q (~q)", [G.id, VShort, F, Type])
        ),
        apply_patch(G, S0, [F=FV], S)
    ;   S = S0
    ),
    put_dict(resume, Env0, Value, Env).

%!  children_state(+G, +Env, +Snap0, -Snap) is det.
%
%   A graph that declares the field children (json, replace: the
%   compiler sees to it) gets the step's child tasks in it before each
%   node, so that a node reads what its delegations returned; the host
%   bounds them (at most 64, each result cut to 1000 characters).
children_state(G, Env, snap(N, S0, Vs, X, I), snap(N, S, Vs, X, I)) :-
    (   graph_field(G, field(children, json, _, _))
    ->  get_dict(children, Env, Cs),
        put_dict(children, S0, Cs, S)
    ;   S = S0
    ).

%   The step's child tasks as the plugin sends them: each a dict of id,
%   status, reason and result, all texts; anything else is dropped.
run_children(Run, Children) :-
    (   get_dict(children, Run, Cs0), is_list(Cs0)
    ->  include(child_ok, Cs0, Cs),
        maplist(child_dict, Cs, Children)
    ;   Children = []
    ).

child_ok(C) :-
    is_dict(C),
    forall(member(K, [id, status, reason, result]), ( get_dict(K, C, V), string(V) )).

child_dict(C, _{id: Id, status: St, reason: R, result: Res}) :-
    get_dict(id, C, Id), get_dict(status, C, St),
    get_dict(reason, C, R), get_dict(result, C, Res).

run_env(Run, Env) :-
    get_dict(input, Run, Input0),
    ( is_dict(Input0) -> Input = Input0 ; Input = _{} ),
    get_dict(goal, Run, Goal0),
    ( string(Goal0) -> Goal = Goal0 ; Goal = "" ),
    get_dict(context_file, Run, CF0),
    ( string(CF0), CF0 \== "" -> CF = CF0 ; CF = null ),
    get_dict(graph, Run, GS), atom_string(GId, GS),
    run_children(Run, Children),
    Env = env{graph: GId, node: none, execution: 0, input: Input,
              goal: Goal, context_file: CF, children: Children}.

%!  current_env(-Env) is det.
%
%   The environment of the node running in this thread: what effect
%   helpers (e.g. the RLM's context access) need to know about the task.
current_env(Env) :-
    (   nb_current(ms_env, Env0), is_dict(Env0)
    ->  Env = Env0
    ;   throw(graph_failure(no_node, "no node is running"))
    ).

%   ---- snapshots ----

initial_snapshot(G, snap(First, State, visits{}, 0, null)) :-
    get_dict(first, G, First),
    findall(F-D, graph_field(G, field(F, _, D, _)), Pairs),
    dict_pairs(State, state, Pairs).

check_bounds(G, snap(Node, _, Visits, Execs, _)) :-
    get_dict(limits, G, L),
    get_dict(max_node_executions, L, MaxE),
    (   Execs >= MaxE
    ->  fail_step(step_limit, "graph ~w: ~d node executions reached the bound max_node_executions(~d)",
                  [G.id, Execs, MaxE])
    ;   true
    ),
    node_limit(G, Node, max_visits, MaxV),
    visits(Visits, Node, V),
    (   V >= MaxV
    ->  fail_step(visit_limit, "graph ~w: node ~w was visited ~d times, the bound max_visits(~d)",
                  [G.id, Node, V, MaxV])
    ;   true
    ).

visits(Visits, Node, V) :-
    ( get_dict(Node, Visits, V0) -> V = V0 ; V = 0 ).

%!  exec_node(+G, +Env, +Snap0, -Snap, -Note) is det.
%
%   Runs the next node of Snap0 under the node's time and inference
%   limits, applies its patch and routes. The environment is published
%   for effect helpers (current_env/1) for the duration of the node.
exec_node(G, Env0, snap(Node, S0, V0, X0, _), snap(Next, S, V, X, Interrupt), Note) :-
    X is X0 + 1,
    visits(V0, Node, NV0), NV is NV0 + 1,
    put_dict(Node, V0, NV, V),
    get_dict(nodes, G, Nodes),
    get_dict(Node, Nodes, node(Handler, Limits)),
    put_dict(_{node: Node, execution: X}, Env0, Env),
    get_dict(node_seconds, Limits, Secs),
    get_dict(node_inferences, Limits, Inf),
    (   nb_current(ms_env, OldEnv) -> true ; OldEnv = none ),
    setup_call_cleanup(
        nb_setval(ms_env, Env),
        with_node_time_limit(Secs,
            limited(Inf, G, Node,
                    node_body(G, Handler, Env, Node, S0, S, Next, Interrupt, Note))),
        nb_setval(ms_env, OldEnv)).

limited(Inf, G, Node, Goal) :-
    call_with_inference_limit(Goal, Inf, R),
    (   R == inference_limit_exceeded
    ->  fail_step(inference_limit, "graph ~w: node ~w exceeded its inference limit (~D)",
                  [G.id, Node, Inf])
    ;   true
    ).

node_body(G, Handler, Env, Node, S0, S, Next, Interrupt, Note) :-
    run_handler(Handler, Env, S0, Out),
    handler_out(Out, Node, Patch, Interrupt, Note),
    apply_patch(G, S0, Patch, S),
    check_interrupt_field(G, Node, Interrupt),
    route(G, Env, Node, S, Next).

%   The field an interrupt's answer goes to is named now, when the node
%   that asks is at fault, not when the answer comes.
check_interrupt_field(G, Node, Intr) :-
    (   is_dict(Intr), get_dict(field, Intr, FS)
    ->  atom_string(F, FS),
        (   graph_field(G, field(F, _, _, _)) -> true
        ;   fail_step(undeclared_field, "graph ~w: node ~w interrupts with the answer for undeclared field ~q", [G.id, Node, F])
        )
    ;   true
    ).

handler_out(patch(P), _, P, null, "") :- !.
handler_out(patch(P, Note0), _, P, null, Note) :- !,
    truncate_text(Note0, 200, Note).
handler_out(interrupt(P, Reason0), Node, P, _{node: NodeS, reason: Reason}, Note) :- !,
    atom_string(Node, NodeS),
    interrupt_text(Node, Reason0, Reason),
    format(string(Note), "interrupt: ~s", [Reason]).
handler_out(interrupt(P, Reason0, Field), Node, P, _{node: NodeS, reason: Reason, field: FieldS}, Note) :- !,
    (   atom(Field) -> true
    ;   fail_step(bad_output, "node ~w: the field of interrupt/3 is an atom, not ~q", [Node, Field])
    ),
    atom_string(Node, NodeS),
    atom_string(Field, FieldS),
    interrupt_text(Node, Reason0, Reason),
    format(string(Note), "interrupt: ~s", [Reason]).
handler_out(Out, Node, _, _, _) :-
    fail_step(bad_output, "node ~w returned ~q, not patch(...) or interrupt(...)", [Node, Out]).

%   The question is asked of a person: it must say something.
interrupt_text(Node, Reason0, Reason) :-
    (   ( string(Reason0) ; atom(Reason0) ), Reason0 \== '', Reason0 \== ""
    ->  truncate_text(Reason0, 200, Reason)
    ;   fail_step(bad_output, "node ~w: an interrupt's question is a non-empty text, not ~q", [Node, Reason0])
    ).

%!  apply_patch(+G, +S0, +Patch, -S) is det.
%
%   Only declared fields, each through its reducer, each type checked.
apply_patch(G, S0, Patch, S) :-
    patch_pairs(Patch, Pairs),
    pairs_keys(Pairs, Keys),
    (   msort(Keys, Sorted), sort(Keys, Sorted) -> true
    ;   fail_step(patch_error, "a patch names a field twice: ~q", [Keys])
    ),
    foldl(apply_field(G), Pairs, S0, S).

patch_pairs(P, Pairs) :-
    (   is_dict(P) -> dict_pairs(P, _, Pairs)
    ;   is_list(P), maplist(patch_pair, P, Pairs) -> true
    ;   fail_step(patch_error, "a patch is a dict or a list of Field=Value, not ~q", [P])
    ).
patch_pair(K=V, K-V) :- atom(K).
patch_pair(K-V, K-V) :- atom(K).

apply_field(G, K-V, S0, S) :-
    (   graph_field(G, field(K, Type, _, Reducer)) -> true
    ;   fail_step(undeclared_field, "graph ~w: the patch names undeclared field ~q", [G.id, K])
    ),
    get_dict(K, S0, Old),
    (   reduce(Reducer, Type, Old, V, New), has_type(Type, New)
    ->  put_dict(K, S0, New, S)
    ;   format(string(VS), "~W", [V, [max_depth(8), quoted(true)]]),
        truncate_text(VS, 200, VShort),
        fail_step(type_error, "field ~q (~q, ~q): value ~s does not fit", [K, Type, Reducer, VShort])
    ).

route(G, Env, Node, S, Next) :-
    get_dict(out, G, Out),
    get_dict(Node, Out, Edge),
    (   Edge = edge(Next)
    ->  true
    ;   Edge = cond(Router, Routes),
        run_router(Router, Env, S, Key),
        (   memberchk(Key-Next, Routes) -> true
        ;   fail_step(route_error, "router ~q of node ~w chose ~q, which is no route", [Router, Node, Key])
        )
    ).

summary(GId, Node, Next, Execs, _Interrupt, Note, Summary) :-
    (   Note == ""
    ->  format(string(S0), "~w: node ~w done, next ~w (execution ~d)", [GId, Node, Next, Execs])
    ;   format(string(S0), "~w: node ~w done, next ~w (execution ~d): ~s", [GId, Node, Next, Execs, Note])
    ),
    max_summary_chars(Max),
    truncate_text(S0, Max, Summary).

output(G, State, Result) :-
    get_dict(output, G, Fields),
    findall(F-J,
            ( member(F, Fields),
              graph_field(G, field(F, Type, _, _)),
              get_dict(F, State, V),
              to_json(Type, V, J) ),
            Pairs),
    dict_pairs(Result, _, Pairs).

%   ---- checkpoint encoding ----

encode_checkpoint(G, snap(Next, State, Visits, Execs, Interrupt), Cp) :-
    checkpoint_schema(Schema),
    get_dict(id, G, Id), atom_string(Id, IdS),
    get_dict(hash, G, Hash),
    atom_string(Next, NextS),
    findall(F-J,
            ( graph_field(G, field(F, Type, _, _)),
              get_dict(F, State, V),
              to_json(Type, V, J) ),
            SPairs),
    dict_pairs(SJ, _, SPairs),
    Cp = _{schema: Schema, graph: IdS, graph_hash: Hash, next: NextS,
           state: SJ, visits: Visits, executions: Execs, interrupt: Interrupt}.

%   The plugin checks the size again on the bytes it sends; this check
%   names the fields that grew, which the plugin cannot know.
check_checkpoint_size(G, Cp, Max) :-
    frame_text(Cp, Text),
    (   within_bytes(Text, Max, _)
    ->  true
    ;   utf8_bytes(Text, Bytes),
        get_dict(state, Cp, SJ),
        dict_pairs(SJ, _, Pairs),
        findall(B-F, ( member(F-V, Pairs), frame_text(_{v: V}, T), utf8_bytes(T, B) ), BFs),
        msort(BFs, Asc), reverse(Asc, [B1-F1|_]),
        fail_step(checkpoint_too_large,
                  "graph ~w: the checkpoint would be ~D bytes, over the ~D-byte bound; largest field ~w (~D bytes)",
                  [G.id, Bytes, Max, F1, B1])
    ).

decode_checkpoint(G, Cp, snap(Next, State, Visits, Execs, Interrupt)) :-
    (   is_dict(Cp), dict_pairs(Cp, _, Pairs), pairs_keys(Pairs, Keys),
        Keys == [executions, graph, graph_hash, interrupt, next, schema, state, visits]
    ->  true
    ;   incompatible("the checkpoint does not have exactly the fields of machinespirit.graph/1", [])
    ),
    checkpoint_schema(Schema),
    (   get_dict(schema, Cp, Schema) -> true
    ;   incompatible("schema ~q, want ~q", [Cp.schema, Schema])
    ),
    get_dict(id, G, Id), atom_string(Id, IdS),
    (   get_dict(graph, Cp, IdS) -> true
    ;   incompatible("the checkpoint is of graph ~q, the task runs ~q", [Cp.graph, IdS])
    ),
    get_dict(hash, G, Hash),
    (   get_dict(graph_hash, Cp, Hash) -> true
    ;   incompatible("graph ~w has changed since the checkpoint (hash ~q, now ~q)", [Id, Cp.graph_hash, Hash])
    ),
    get_dict(nodes, G, Nodes),
    (   get_dict(next, Cp, NS), string(NS), atom_string(Next, NS),
        ( Next == end ; get_dict(Next, Nodes, _) )
    ->  true
    ;   incompatible("next node ~q is not a node of graph ~w", [Cp.next, Id])
    ),
    decode_state(G, Cp.state, State),
    (   get_dict(visits, Cp, Visits), is_dict(Visits),
        forall(get_dict(K, Visits, V), ( get_dict(K, Nodes, _), integer(V), V >= 0 ))
    ->  true
    ;   incompatible("visits must map nodes of the graph to counts", [])
    ),
    (   get_dict(executions, Cp, Execs), integer(Execs), Execs >= 0 -> true
    ;   incompatible("executions must be a count", [])
    ),
    (   get_dict(interrupt, Cp, Interrupt),
        ( Interrupt == null ; valid_interrupt(G, Interrupt) )
    ->  true
    ;   incompatible("interrupt must be null or {node, reason[, field]} naming a node and a field of the graph", [])
    ).

valid_interrupt(G, I) :-
    is_dict(I),
    dict_pairs(I, _, Pairs), pairs_keys(Pairs, Keys),
    ( Keys == [node, reason] ; Keys == [field, node, reason] ),
    get_dict(node, I, NS), string(NS), atom_string(N, NS),
    get_dict(nodes, G, Nodes), get_dict(N, Nodes, _),
    get_dict(reason, I, R), string(R), R \== "",
    (   get_dict(field, I, FS)
    ->  string(FS), atom_string(F, FS), graph_field(G, field(F, _, _, _))
    ;   true
    ).

decode_state(G, SJ, State) :-
    findall(F, graph_field(G, field(F, _, _, _)), Fields),
    (   is_dict(SJ), dict_pairs(SJ, _, Pairs), pairs_keys(Pairs, Keys),
        msort(Fields, Keys)
    ->  true
    ;   incompatible("the state's fields are not the graph's fields ~q", [Fields])
    ),
    findall(F-V,
            ( member(F-J, Pairs),
              graph_field(G, field(F, Type, _, _)),
              (   from_json(Type, J, V) -> true
              ;   incompatible("field ~q does not hold a ~q", [F, Type])
              ) ),
            VPairs),
    dict_pairs(State, state, VPairs).

incompatible(Fmt, Args) :-
    fail_step(checkpoint_incompatible, Fmt, Args).

%   ---- failures ----

failure_reply(ms_cancelled, _{outcome: cancelled}) :- !.
failure_reply(E, _{outcome: fail, code: CodeS, message: Msg}) :-
    failure(E, Code, Msg0),
    atom_string(Code, CodeS),
    max_message_chars(Max),
    truncate_text(Msg0, Max, Msg).

failure(graph_failure(Code, Msg), Code, Msg) :- atom(Code), !.
failure(machinespirit_time_limit, node_time_limit, "the node exceeded its time limit (node_seconds)") :- !.
failure(effect_error(Kind, Err, Msg0), effect_error, Msg) :- !,
    format(string(Msg), "~w effect: ~w: ~w", [Kind, Err, Msg0]).
failure(error(resource_error(memory), _), resource_exhausted, "the worker ran out of memory") :- !.
failure(error(resource_error(R), _), resource_error, Msg) :- !,
    format(string(Msg), "the node ran out of ~w", [R]).
%   Nothing a node runs may throw these on purpose (model goals cannot
%   throw at all); if one arrives anyway it ends the node, typed, and the
%   task thread lives on.
failure('$aborted', aborted, "the node was aborted ('$aborted')") :- !.
failure(unwind(U), aborted, Msg) :- !,
    format(string(Msg), "the node was unwound (~q)", [U]).
failure(time_limit_exceeded, node_time_limit, "a time limit of the node's own code expired") :- !.
failure(E, handler_error, Msg) :-
    error_text(E, Msg).

%   ---- sub-runs ----

%!  spirit(+GraphId, +Input, -Answer) is det.
%
%   Runs graph GraphId to its end inside the current node, one level
%   deeper than the current call context. Only a graph the calling graph
%   lists in subgraphs([...]) may be started. The plugin admits the
%   sub-run at the depth the host gave the model call it starts from
%   (plus one), never at a depth the worker names, and every model call of the
%   sub-run names the current context's call as its parent, so the host
%   counts its depth. The sub-run is not checkpointed: it is part of the
%   node that started it. Answer is the value of the sub-graph's output
%   field if it has one, else a dict of its output fields. A failed
%   sub-run raises effect_error(spirit, Code, Message).
spirit(GraphId, Input, Answer) :-
    (   atom(GraphId), graph(GraphId, G) -> true
    ;   format(string(M), "no graph ~q is registered", [GraphId]),
        throw(effect_error(spirit, invalid_argument, M))
    ),
    (   is_dict(Input), json_value(Input) -> true
    ;   throw(effect_error(spirit, invalid_argument, "the input of a sub-run is a JSON object (a dict)"))
    ),
    current_env(Parent),
    get_dict(graph, Parent, Caller),
    graph(Caller, CG),
    get_dict(subgraphs, CG, Allowed),
    (   memberchk(GraphId, Allowed) -> true
    ;   format(string(M), "graph ~w may not start graph ~w (its subgraphs: ~q)", [Caller, GraphId, Allowed]),
        throw(effect_error(spirit, permission_denied, M))
    ),
    current_call_context(ctx(Token, Depth)),
    Depth1 is Depth + 1,
    atom_string(GraphId, GS),
    effect(spirit, _{graph: GS, parent: Token, depth: Depth1}, _),
    sub_env(Parent, GraphId, Input, Env),
    initial_snapshot(G, Snap0),
    catch(with_call_context(ctx(Token, Depth1), sub_run(G, Env, Snap0, State)),
          graph_failure(Code, Msg),
          throw(effect_error(spirit, Code, Msg))),
    output(G, State, Result),
    get_dict(output, G, Fields),
    (   Fields = [F]
    ->  graph_field(G, field(F, _, _, _)),
        get_dict(F, State, Answer)
    ;   Answer = Result
    ).

%   ---- subgraph nodes ----

%   subgraph(GraphId) / subgraph(GraphId, Options): runs graph GraphId to
%   its end inline, inside this node, in the node's own call context (the
%   child's model calls are the node's: no depth is added, and the plugin
%   is not asked), and merges the child's output into this graph's state
%   through this graph's reducers. Options:
%       input([ChildKey-Field, ...])   the child's input object (default {})
%       output([ChildField-Field, ...]) what is merged (default: each of
%                                       the child's output fields onto the
%                                       field of the same name)
%   Nesting is bounded (max_subgraph_depth). The child is part of the
%   node: a crash re-runs the node, and the host replays the child's
%   effects; its state is merged once, when the node returns.
max_subgraph_depth(4).

ms_registry:handler_decl(subgraph(_)).
ms_registry:handler_decl(subgraph(_, _)).
ms_registry:handler(subgraph(Id), Env, State, Out) :-
    ms_registry:handler(subgraph(Id, []), Env, State, Out).
ms_registry:handler(subgraph(Id, Opts), Env, State, patch(Patch, Note)) :-
    (   graph(Id, CG) -> true
    ;   fail_step(subgraph, "subgraph ~q is not registered", [Id])
    ),
    (   nb_current(ms_subgraph_depth, D0), integer(D0) -> true ; D0 = 0 ),
    D is D0 + 1,
    max_subgraph_depth(Max),
    (   D =< Max -> true
    ;   fail_step(subgraph_depth, "subgraph ~w would nest ~d deep; at most ~d", [Id, D, Max])
    ),
    (   memberchk(input(InMap), Opts) -> true ; InMap = [] ),
    findall(K-V, ( member(K-F, InMap), get_dict(F, State, V) ), InPairs),
    dict_pairs(Input, _, InPairs),
    sub_env(Env, Id, Input, ChildEnv),
    initial_snapshot(CG, Snap0),
    setup_call_cleanup(
        nb_setval(ms_subgraph_depth, D),
        catch(sub_run(CG, ChildEnv, Snap0, ChildState),
              graph_failure(Code, Msg),
              ( format(string(M), "subgraph ~w: ~s", [Id, Msg]),
                throw(graph_failure(Code, M)) )),
        nb_setval(ms_subgraph_depth, D0)),
    (   memberchk(output(OutMap), Opts) -> true
    ;   get_dict(output, CG, OutFields),
        findall(F-F, member(F, OutFields), OutMap)
    ),
    findall(PF=V, ( member(CF-PF, OutMap), get_dict(CF, ChildState, V) ), Patch),
    length(Patch, NP),
    format(string(Note), "subgraph ~w merged ~d fields", [Id, NP]).

sub_env(Parent, GraphId, Input, Env) :-
    (   get_dict(goal, Input, Goal), string(Goal) -> true ; get_dict(goal, Parent, Goal) ),
    (   get_dict(context_file, Input, CF), string(CF) -> true ; get_dict(context_file, Parent, CF) ),
    (   get_dict(children, Parent, Cs) -> true ; Cs = [] ),
    Env = env{graph: GraphId, node: none, execution: 0, input: Input,
              goal: Goal, context_file: CF, resume: null, children: Cs}.

%   A sub-run is part of one node and is not checkpointed: it cannot
%   pause, so an interrupt in it fails it rather than be passed over.
sub_run(G, Env, Snap, State) :-
    Snap = snap(Next, S, _, _, _),
    (   Next == end
    ->  State = S
    ;   check_bounds(G, Snap),
        children_state(G, Env, Snap, SnapC),
        exec_node(G, Env, SnapC, Snap1, _),
        Snap1 = snap(_, _, _, _, Intr),
        (   Intr == null -> true
        ;   fail_step(interrupt_in_subrun, "graph ~w: node ~w interrupted, but a sub-run cannot pause", [G.id, Intr.node])
        ),
        sub_run(G, Env, Snap1, State)
    ).
