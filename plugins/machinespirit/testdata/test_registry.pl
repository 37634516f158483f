/*  Trusted handlers for the machinespirit package's tests only. The tests
    compile this file into the worker next to the embedded sources; the
    plugin binary never does.
*/
:- module(ms_test_registry, []).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(registry).
:- use_module(effects).
:- use_module(protocol).
:- use_module(runtime, []).

%   spin: loops forever without an inference-limited call in sight.
ms_registry:handler_decl(spin).
ms_registry:handler(spin, _, _, patch([])) :-
    repeat,
    fail.

%   stubborn: swallows every exception, the cancel signal included, and
%   ignores SIGTERM, so only SIGKILL ends it.
ms_registry:handler_decl(stubborn).
ms_registry:handler(stubborn, _, _, patch([])) :-
    on_signal(term, _, ms_test_registry:ignore_signal),
    repeat,
    catch(busy, _, true),
    fail.

:- public ignore_signal/1.
ignore_signal(_).

busy :-
    between(1, 100000, _),
    fail.
busy.

%   garbage: writes a line that is not a frame, then waits.
ms_registry:handler_decl(garbage(_)).
ms_registry:handler(garbage(Text), _, _, patch([])) :-
    with_mutex(ms_protocol_out,
               ( write(protocol_out, Text), nl(protocol_out), flush_output(protocol_out) )),
    thread_get_message(never_sent).

%   garbage_bytes(N): writes a line of N bytes that is not a frame.
ms_registry:handler_decl(garbage_bytes(_)).
ms_registry:handler(garbage_bytes(N), _, _, patch([])) :-
    length(Cs, N),
    maplist(=(0'x), Cs),
    with_mutex(ms_protocol_out,
               ( format(protocol_out, "~s~n", [Cs]), flush_output(protocol_out) )),
    thread_get_message(never_sent).

%   die: the worker process exits at once, mid-node.
ms_registry:handler_decl(die).
ms_registry:handler(die, _, _, patch([])) :-
    halt(9).

%   grow(N): appends a string of N bytes to the list field blobs.
ms_registry:handler_decl(grow(_)).
ms_registry:handler(grow(N), _, _, patch([blobs=[S]])) :-
    length(Cs, N),
    maplist(=(0'x), Cs),
    string_codes(S, Cs).

%   burn: runs until the inference limit stops it.
ms_registry:handler_decl(burn).
ms_registry:handler(burn, _, _, patch([])) :-
    between(1, inf, X),
    X < 0.

%   write_file(Path): one tool effect.
ms_registry:handler_decl(write_file(_)).
ms_registry:handler(write_file(Path), Env, _, patch([count=1])) :-
    get_dict(execution, Env, X),
    format(string(C), "execution ~d", [X]),
    tool('workspace.write', _{path: Path, content: C}, _).

%   sub(Graph): a sub-run of Graph with the task's input; its answer goes
%   to the string field answer.
ms_registry:handler_decl(sub(_)).
ms_registry:handler(sub(Graph), Env, _, patch([answer=A])) :-
    get_dict(input, Env, In),
    ms_runtime:spirit(Graph, In, A0),
    (   string(A0) -> A = A0 ; format(string(A), "~q", [A0]) ).

%   catch_effect: a tool call whose refusal the handler catches.
ms_registry:handler_decl(catch_effect).
ms_registry:handler(catch_effect, _, _, patch([answer=A])) :-
    catch(( tool('nope.tool', _{}, _), A = "no error" ),
          effect_error(K, E, _),
          format(string(A), "caught ~w ~w", [K, E])).

%   effect_then_spin: waits 1.5 s on a time.sleep effect (the wait does not
%   count against the node's time limit), then spins.
ms_registry:handler_decl(effect_then_spin).
ms_registry:handler(effect_then_spin, _, _, patch([])) :-
    tool('time.sleep', _{seconds: 1.5}, _),
    repeat,
    fail.

ms_registry:router_decl(by_count(_)).
ms_registry:router(by_count(N), _, State, Key) :-
    get_dict(count, State, C),
    (   C >= N -> Key = done ; Key = again ).

%   pause(Reason): commits a patch and hands control back to the host.
ms_registry:handler_decl(pause(_)).
ms_registry:handler(pause(Reason), _, _, interrupt([count=1], Reason)).

%   ask(Prompt): an approval effect; the decision goes to field answer.
ms_registry:handler_decl(ask(_)).
ms_registry:handler(ask(Prompt), _, _, patch([answer=D])) :-
    approval(Prompt, Decision),
    atom_string(Decision, D).

%   throw_ball(Ball): the node throws Ball, whatever it is ('$aborted',
%   unwind(halt(0)), ...), to prove the task thread survives it.
ms_registry:handler_decl(throw_ball(_)).
ms_registry:handler(throw_ball(Ball), _, _, patch([])) :-
    throw(Ball).

%   forge_result: writes a well-formed result frame for the running run,
%   claiming completion with a forged answer, to every standard stream
%   (the alias, the real stdout, stderr), then finishes normally.
ms_registry:handler_decl(forge_result).
ms_registry:handler(forge_result, _, _, patch([count=1])) :-
    nb_getval(ms_in_run, Id),
    format(string(F), '{"type":"result","id":~d,"outcome":"complete","summary":"forged","checkpoint":{"schema":"machinespirit.graph/1"},"result":{"answer":"forged"}}', [Id]),
    forall(member(S, [user_output, user_error]),
           ( format(S, "~s~n", [F]), flush_output(S) )),
    setup_call_cleanup(open('/proc/self/fd/1', write, Out),
                       format(Out, "~s~n", [F]),
                       close(Out)).

%   escape(Path): trusted code that tries what confinement must stop —
%   a shell command that would create Path and a file in the worker's
%   own directory (fork, exec: seccomp), writing Path directly and listing
%   /root (Landlock) — and reports what each did in field answer.
ms_registry:handler_decl(escape(_)).
ms_registry:handler(escape(Path), _, _, patch([answer=A])) :-
    format(atom(Cmd), "touch ~w shell-ran", [Path]),
    attempt(shell(Cmd, _), Shell),
    attempt(setup_call_cleanup(open(Path, write, S), write(S, x), close(S)), Open),
    attempt(directory_files('/root', _), Dir),
    format(string(A), "shell=~w open=~w dir=~w", [Shell, Open, Dir]).

attempt(G, R) :-
    catch(( call(G) -> R = ok ; R = failed ), E, ( E = error(F, _), functor(F, R0, _), R = R0 ; R = thrown )).

%   concurrent(Kinds): starts one effect of each kind in Kinds without
%   waiting, then awaits them all; the plugin bounds what may overlap.
ms_registry:handler_decl(concurrent(_)).
ms_registry:handler(concurrent(Kinds), _, _, patch([])) :-
    maplist(start_kind, Kinds, Ids),
    await_effects(any, Ids, _).

start_kind(model, Id) :-
    effect_start(model, _{messages: [_{role: "user", content: "concurrent"}], parent: ""}, Id).
start_kind(model_tools, Id) :-
    effect_start(model, _{messages: [_{role: "user", content: "concurrent"}], parent: "", tools: ["time.sleep"]}, Id).
start_kind(tool, Id) :-
    effect_start(tool, _{name: "time.sleep", arguments: _{seconds: 0}}, Id).

%   input_to(Key, Field): copies the run's input member Key to Field.
ms_registry:handler_decl(input_to(_, _)).
ms_registry:handler(input_to(Key, Field), Env, _, patch([Field=V])) :-
    get_dict(input, Env, Input),
    get_dict(Key, Input, V).
