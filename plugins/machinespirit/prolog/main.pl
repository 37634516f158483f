/*  MACHINE-SPIRIT worker: entry point and command loop.

    The plugin starts one worker per running task (from a saved state
    built from these sources, or from the sources themselves) and talks to
    it over two pipes of its own (fd 3 out, fd 4 in), one JSON object per
    line (protocol.pl).

    Worker -> plugin:
        hello         {protocol, prolog_version, libraries, missing, graphs, errors}
        pong          {id}
        graph_loaded  {id, ok, graph, hash} | {id, ok:false, code, message}
        module_loaded {id, ok} | {id, ok:false, code, message}
        effect        {id, kind: model|tool|approval|spirit|progress, ...}
        result        {id, outcome: continue|interrupt|complete|fail|cancelled, ...}
        error         {code, message}   (then the worker exits)
    Plugin -> worker:
        ping          {id, ...}
        load_graph    {id, name, source}
        load_module   {id, name, source}   an operator handler module
                                           (opmodule.pl), before any graph
        run           {id, graph, input, goal, context_file, checkpoint, checkpoint_max_bytes, children}
        effect_result {id, ok, value} | {id, ok:false, error:{kind, message}}
        cancel        {id}
        shutdown      {}

    The main thread only reads frames and dispatches them; runs execute in
    the task thread, so a cancel can reach one with thread_signal/2 while
    it computes or waits for an effect (signals do not reach goals inside
    engines, and a thread is also what makes a stack limit for task code
    possible).

    `:- initialization(main, main)` rather than a plain initialization/1:
    the latter runs while the file loads, with timer signals blocked, and
    the node time limit (alarms) would never fire.
*/
:- module(ms_main, []).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(aggregate)).
:- use_module(library(readutil)).
:- use_module(library(http/json)).
:- use_module(library(time)).
:- use_module(library(sha)).
:- use_module(protocol).
:- use_module(types).
:- use_module(registry).
:- use_module(graph).
:- use_module(effects).
:- use_module(runtime).
:- use_module(rlm_api, []).
:- use_module(rlm_goals, []).
:- use_module(rlm).
:- use_module(rlm_plan).
:- use_module(model_node).
:- use_module(par).
:- use_module(graphs).
:- use_module(opmodule).

:- initialization(main, main).

% Libraries the worker cannot do without, as library path - module. The
% hello frame reports those that are not loaded; the plugin's preflight
% refuses such a worker.
required_library('http/json', json).
required_library('time', time).
required_library('sha', crypto_hash).
required_library('lists', lists).
required_library('apply', apply).
required_library('pairs', pairs).
required_library('aggregate', aggregate).
required_library('readutil', read_util).
required_library('pcre', pcre).

main :-
    protocol_init,
    % Autoloading would let model code reach libraries nobody chose for it
    % and would make a worker run from source behave unlike one run from
    % the saved state (where autoloading is off).
    (   current_prolog_flag(autoload, true)
    ->  autoload_all, set_prolog_flag(autoload, false)
    ;   true
    ),
    register_shipped_graphs(Errors),
    flag(ms_done_run, _, 0),
    nb_setval(ms_task, none),
    start_task_thread,
    hello(Errors),
    serve.

register_shipped_graphs(Errors) :-
    findall(Spec, ( ms_registry:graph_spec(Spec), enabled_graph(Spec) ), Specs),
    foldl(register_one, Specs, [], Errors0),
    reverse(Errors0, Errors).

%   The goal-writing RLM runs model text as Prolog behind an allow-list;
%   it exists only where the operator turned it on explicitly.
enabled_graph(graph(rlm_goals, _)) :- !,
    current_prolog_flag(ms_rlm_goal_mode, 1).
enabled_graph(_).

register_one(Spec, Es, Es1) :-
    catch(( register_graph(Spec, _), Es1 = Es ),
          graph_error(Code, Msg),
          ( ( Spec = graph(Id, _) -> true ; Id = '?' ),
            format(string(E), "graph ~q: ~w: ~s", [Id, Code, Msg]),
            Es1 = [E|Es] )).

hello(Errors) :-
    protocol_version(P),
    current_prolog_flag(version, V),
    Major is V // 10000, Minor is (V // 100) mod 100, Patch is V mod 100,
    format(string(Version), "~d.~d.~d", [Major, Minor, Patch]),
    findall(L, ( required_library(L, M), current_module(M) ), Libs),
    findall(L, ( required_library(L, M), \+ current_module(M) ), Missing),
    findall(_{id: IdS, hash: H},
            ( graph(Id, G), atom_string(Id, IdS), get_dict(hash, G, H) ),
            Graphs),
    send_frame(_{type: hello, protocol: P, prolog_version: Version,
                 libraries: Libs, missing: Missing, graphs: Graphs,
                 errors: Errors}).

%   The loop never returns: eof, shutdown and protocol errors halt. A
%   halt requested elsewhere (it reaches this thread as '$aborted' or
%   unwind(_)) is let through, so the process ends with its status.
serve :-
    repeat,
    catch(( read_frame(F), dispatch(F) ),
          E,
          (   halting(E) -> throw(E) ; fatal(E) )),
    fail.

halting('$aborted').
halting(unwind(_)).

fatal(protocol(Code, Msg)) :- !,
    catch(send_frame(_{type: error, code: Code, message: Msg}), _, true),
    halt(2).
fatal(E) :-
    error_text(E, Msg),
    catch(send_frame(_{type: error, code: internal, message: Msg}), _, true),
    halt(2).

dispatch(eof) :- !,
    halt(0).
dispatch(F) :-
    get_dict(type, F, Type),
    (   dispatch(Type, F) -> true
    ;   format(string(M), "cannot handle a ~w frame", [Type]),
        throw(protocol(malformed, M))
    ).

dispatch(ping, F) :-
    frame_id(F, Id),
    send_frame(_{type: pong, id: Id}).
dispatch(shutdown, _) :-
    halt(0).
dispatch(load_graph, F) :-
    frame_id(F, Id),
    get_dict(name, F, NameS), string(NameS),
    get_dict(source, F, Source), string(Source),
    atom_string(Name, NameS),
    catch(( parse_graph_source(Source, Spec),
            compile_graph(Spec, G),
            (   get_dict(id, G, Name) -> true
            ;   throw(graph_error(name_mismatch, "the graph file must define graph(Name, ...) with the name it is pinned under"))
            ),
            add_graph(G),
            get_dict(hash, G, Hash),
            Reply = _{type: graph_loaded, id: Id, ok: true, graph: NameS, hash: Hash} ),
          graph_error(Code, Msg),
          Reply = _{type: graph_loaded, id: Id, ok: false, graph: NameS, code: Code, message: Msg}),
    send_frame(Reply).
dispatch(load_module, F) :-
    frame_id(F, Id),
    get_dict(name, F, Name), string(Name),
    get_dict(source, F, Source), string(Source),
    catch(( load_operator_module(Name, Source),
            Reply = _{type: module_loaded, id: Id, ok: true} ),
          module_error(Msg),
          Reply = _{type: module_loaded, id: Id, ok: false, code: module_error, message: Msg}),
    send_frame(Reply).
dispatch(run, F) :-
    frame_id(F, Id),
    forall(member(K, [graph, input, goal, context_file, checkpoint, checkpoint_max_bytes]),
           (   get_dict(K, F, _) -> true
           ;   format(string(M), "run frame without ~w", [K]),
               throw(protocol(malformed, M))
           )),
    previous_run_done,
    ensure_task_thread,
    nb_setval(ms_task, task(Id)),
    thread_send_message(ms_task, ms_run(F)).
dispatch(effect_result, F) :-
    frame_id(F, EffectId),
    thread_send_message(ms_task, ms_effect_result(EffectId, F)).
dispatch(cancel, F) :-
    frame_id(F, Id),
    (   nb_getval(ms_task, task(Id)),
        \+ flag(ms_done_run, Id, Id)
    ->  thread_signal(ms_task, ms_main:cancel_signal(Id))
    ;   true                            % already answered: the result is on its way
    ).

frame_id(F, Id) :-
    (   get_dict(id, F, Id), integer(Id) -> true
    ;   throw(protocol(malformed, "the frame has no integer id"))
    ).

%   A run may only start once the previous one has answered (it marks
%   itself done just before it sends its result), so two runs never
%   overlap and a stray frame cannot start one early.
previous_run_done :-
    (   nb_getval(ms_task, task(Prev)),
        \+ flag(ms_done_run, Prev, Prev)
    ->  throw(protocol(busy, "a run frame arrived while a run is in progress"))
    ;   true
    ).

%   The task thread, one for the worker's life (creating a thread per
%   run costs ~0.3 ms, more than running a node). It runs one run at a
%   time. Its current output is a null stream (task code that prints has
%   nowhere to print to), its input is empty, and its stack is bounded.
start_task_thread :-
    current_prolog_flag(ms_task_stack_limit, Stack),
    flag(ms_task_dying, _, 0),
    thread_create(task_loop, _, [alias(ms_task), stack_limit(Stack)]).

%   '$aborted' cannot be caught for good: catch/3 runs its recovery and
%   throws it again, and the thread ends. A task thread that got one
%   answers its run first (loop_error/2) and raises ms_task_dying; the
%   next run waits for it to be gone and starts a new one, so no run is
%   ever queued to a thread that is about to end.
ensure_task_thread :-
    (   flag(ms_task_dying, 1, 1)
    ->  thread_join(ms_task, _),
        start_task_thread
    ;   thread_property(ms_task, status(running))
    ->  true
    ;   catch(thread_join(ms_task, _), _, true),
        start_task_thread
    ).

task_loop :-
    open_null_stream(Null),
    set_output(Null),
    open_string("", In),
    set_input(In),
    repeat,
    thread_get_message(ms_run(Run)),
    catch(run_one(Run), E, loop_error(Run, E)),
    fail.

%   run_one/1 answers every run itself; an exception that escapes it
%   anyway (a cancel signal landing between two of its goals, a result
%   frame that cannot be written) must not end the task thread: the run
%   gets a typed failure if it has not been answered, and the loop goes on.
loop_error(Run, E) :-
    get_dict(id, Run, Id),
    nb_setval(ms_in_run, none),
    (   E == '$aborted' -> flag(ms_task_dying, _, 1) ; true ),
    (   flag(ms_done_run, Id, Id)
    ->  true
    ;   catch(ms_runtime:failure_reply(E, Reply0), _,
              Reply0 = _{outcome: fail, code: task_loop, message: "the run ended with an exception"}),
        put_dict(_{type: result, id: Id}, Reply0, Reply),
        catch(finish(Id, Reply), _, true)
    ).

%   Cancellation. The main thread runs cancel_signal(Id) in this thread
%   (thread_signal/2). It throws only while run Id is inside its handler
%   (ms_in_run = Id): a throw anywhere else, e.g. in the loop above, would
%   kill the thread. A cancel that comes before the run got there is kept
%   as pending and honoured as the run starts; one that comes after the
%   run answered is dropped. Every run thus gets exactly one answer.
:- public cancel_signal/1.
cancel_signal(Id) :-
    (   nb_current(ms_in_run, Id)
    ->  throw(ms_cancelled)
    ;   nb_setval(ms_cancel_pending, Id)
    ).

run_one(Run) :-
    drop_stale_effect_results,
    forall(member(Key-Value, [ms_alarm-none, ms_call_ctx-ctx("", 0), ms_env-none,
                              ms_rlm-none, ms_rlm_final-none, ms_subgraph_depth-0]),
           nb_setval(Key, Value)),
    get_dict(id, Run, Id),
    catch(( nb_setval(ms_in_run, Id),
            (   nb_current(ms_cancel_pending, Id) -> throw(ms_cancelled) ; true ),
            run_step(Run, Reply),
            nb_setval(ms_in_run, none)
          ),
          ms_cancelled,
          ( nb_setval(ms_in_run, none),
            Reply = _{type: result, id: Id, outcome: cancelled} )),
    finish(Id, Reply).

%   Answers to effects of a cancelled run may arrive after it ended.
drop_stale_effect_results :-
    (   thread_get_message(ms_task, ms_effect_result(_, _), [timeout(0)])
    ->  drop_stale_effect_results
    ;   true
    ).

finish(Id, Reply) :-
    flag(ms_done_run, _, Id),
    catch(send_frame(Reply), frame_too_large(B, Max),
          ( format(string(M), "the result frame of ~D bytes exceeds the ~D-byte frame limit", [B, Max]),
            send_frame(_{type: result, id: Id, outcome: fail, code: frame_too_large, message: M}) )).
