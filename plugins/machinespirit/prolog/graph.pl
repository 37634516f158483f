/*  MACHINE-SPIRIT: graph specs, their compile-time validation and the
    table of compiled graphs.

    A graph spec is plain data, never code:

        graph(Id, [ description(String),                 % optional
                    state([field(Name, Type, Default, Reducer), ...]),
                    nodes([node(Name, Handler) | node(Name, Handler, Opts), ...]),
                    edges([edge(A, B) | conditional(A, Router, [route(Key, B), ...]), ...]),
                    limits([max_node_executions(N), max_visits(N),
                            node_seconds(S), node_inferences(I)]),   % optional
                    output([Field, ...])                  % optional: result fields
                    subgraphs([GraphId, ...])             % optional: what spirit/3 and subgraph nodes may start
                  ])

    `start` and `end` are reserved node names. Handlers and routers are
    names (atoms, or ground compounds whose arguments are data) that must
    be declared in the trusted registry (ms_registry); the spec only picks
    them. Node options: max_visits(N), node_seconds(S), node_inferences(I).

    compile_graph/2 throws graph_error(Code, Message) for the first rule a
    spec breaks; Code names the rule (duplicate_field, duplicate_node,
    start_edges, unreachable_node, cannot_reach_end, unknown_handler,
    unknown_router, ...), so callers and tests can match on it.
*/
:- module(ms_graph,
          [ compile_graph/2,        % +Spec, -Graph
            parse_graph_source/2,   % +Text, -Spec
            register_graph/2,       % +Spec, -Graph
            add_graph/1,            % +Graph
            graph/2,                % ?Id, -Graph
            graph_field/2,          % +Graph, -field(N,T,D,R)
            node_limit/4,           % +Graph, +Node, +Name, -Value
            identifier/1
          ]).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(sha)).
:- use_module(types).
:- use_module(registry).

:- dynamic graph_def/2.             % Id, Graph

% Default and maximal runtime bounds. A spec may ask for less or more,
% within the caps.
limit_spec(max_node_executions, 100, 1_000_000).
limit_spec(max_visits,           25, 1_000_000).
limit_spec(node_seconds,         60, 3600).
limit_spec(node_inferences,  50_000_000, 2_000_000_000).

node_option(max_visits).
node_option(node_seconds).
node_option(node_inferences).

%!  graph(?Id, -Graph) is nondet.
graph(Id, G) :- graph_def(Id, G).

%!  register_graph(+Spec, -Graph) is det.
%
%   Compiles Spec and adds it to the table. A graph id is registered once:
%   an operator graph cannot shadow a shipped one.
register_graph(Spec, G) :-
    compile_graph(Spec, G),
    add_graph(G).

%!  add_graph(+Graph) is det.
add_graph(G) :-
    get_dict(id, G, Id),
    (   graph_def(Id, _)
    ->  fail_rule(duplicate_graph, "graph ~q is already registered", [Id])
    ;   assertz(graph_def(Id, G))
    ).

%!  parse_graph_source(+Text, -Spec) is det.
%
%   Reads an operator's graph file. It is read, never consulted: the file
%   holds exactly one term, graph(Id, Options), and no directive, clause
%   or quasi-quotation in it can run.
parse_graph_source(Text, Spec) :-
    catch(setup_call_cleanup(
              open_string(Text, S),
              read_all_terms(S, Terms),
              close(S)),
          E,
          ( error_message(E, Msg),
            fail_rule(syntax, "graph file: ~s", [Msg]) )),
    (   Terms = [Spec]
    ->  true
    ;   length(Terms, N),
        fail_rule(syntax, "a graph file must hold exactly one term graph(Id, Options), found ~d terms", [N])
    ).

read_all_terms(S, Terms) :-
    read_term(S, T, [syntax_errors(error), quasi_quotations(_), module(ms_graph_data)]),
    (   T == end_of_file
    ->  Terms = []
    ;   Terms = [T|Rest],
        read_all_terms(S, Rest)
    ).

error_message(E, Msg) :-
    (   catch(message_to_string(E, Msg), _, fail) -> true
    ;   format(string(Msg), "~q", [E])
    ).

fail_rule(Code, Fmt, Args) :-
    format(string(Msg), Fmt, Args),
    throw(graph_error(Code, Msg)).

%!  compile_graph(+Spec, -Graph) is det.
%
%   Graph is a dict: id, hash, description, fields (list of field/4),
%   nodes (dict Name-> node(Handler, Limits)), first (the node after
%   start), out (dict Name -> edge(B) | cond(Router, Routes)), limits
%   (dict), output (list of field names).
compile_graph(Spec, G) :-
    (   ground(Spec) -> true
    ;   fail_rule(not_ground, "a graph spec must be ground (no variables)", [])
    ),
    (   Spec = graph(Id, Options), is_list(Options) -> true
    ;   fail_rule(syntax, "a graph spec is graph(Id, [Option, ...])", [])
    ),
    (   identifier(Id) -> true
    ;   fail_rule(bad_id, "graph id ~q: use lowercase letters, digits and '_' (at most 64, starting with a letter)", [Id])
    ),
    check_options(Options),
    option_value(state, Options, Fields0),
    option_value(nodes, Options, Nodes0),
    option_value(edges, Options, Edges0),
    option_value(limits, Options, [], Limits0),
    option_value(description, Options, "", Description),
    compile_fields(Fields0, Fields),
    compile_limits(Limits0, Limits),
    compile_nodes(Nodes0, Limits, Nodes),
    dict_keys(Nodes, NodeNames),
    compile_edges(Edges0, NodeNames, First, Out),
    check_reachability(NodeNames, First, Out),
    findall(F, member(field(F,_,_,_), Fields), FieldNames),
    option_value(output, Options, FieldNames, Output),
    compile_output(Output, FieldNames),
    option_value(subgraphs, Options, [], Subgraphs),
    compile_subgraphs(Subgraphs),
    forall(get_dict(Name, Nodes, node(H, _)), compile_subgraph_node(Name, H, Subgraphs, FieldNames)),
    findall(F-T, member(field(F, T, _, _), Fields), FieldTypes),
    forall(get_dict(Name, Nodes, node(H, _)),
           (   ms_registry:handler_check(H, FieldTypes, Error)
           ->  fail_rule(handler_args, "node ~q: ~s", [Name, Error])
           ;   true
           )),
    graph_hash(Spec, Hash),
    G = graph{id: Id, hash: Hash, description: Description, fields: Fields,
              nodes: Nodes, first: First, out: Out, limits: Limits,
              output: Output, subgraphs: Subgraphs}.

%   subgraphs([Id, ...]): the graphs a node of this graph may start as a
%   sub-run (spirit/3); none unless listed. Ids are checked when the
%   sub-run starts, so a graph may name one registered later (or itself).
compile_subgraphs(Ids) :-
    (   is_list(Ids), length(Ids, N), N =< 16,
        forall(member(Id, Ids), identifier(Id))
    ->  true
    ;   fail_rule(syntax, "subgraphs(...) takes a list of at most 16 graph ids, not ~q", [Ids])
    ).

%   A subgraph node names a graph the graph lists in subgraphs([...]) and
%   maps only declared fields: input(ChildKey-Field, ...) reads them,
%   output(ChildField-Field, ...) merges into them.
compile_subgraph_node(Name, H, Subgraphs, Fields) :-
    (   H = subgraph(Id) -> Opts = []
    ;   H = subgraph(Id, Opts) -> true
    ;   true
    ),
    (   var(Id) -> true
    ;   (   memberchk(Id, Subgraphs) -> true
        ;   fail_rule(subgraph, "node ~q runs graph ~q, which the graph does not list in subgraphs([...])", [Name, Id])
        ),
        (   is_list(Opts), forall(member(O, Opts), subgraph_option(O, Fields)) -> true
        ;   fail_rule(subgraph, "node ~q: subgraph options are input([ChildKey-Field, ...]) and output([ChildField-Field, ...]) over declared fields, not ~q", [Name, Opts])
        )
    ).

subgraph_option(O, Fields) :-
    (   O = input(Ps) ; O = output(Ps) ), !,
    is_list(Ps), length(Ps, N), N =< 64,
    forall(member(P, Ps), ( P = C-F, identifier(C), memberchk(F, Fields) )).

identifier(Id) :-
    atom(Id),
    atom_length(Id, L), L >= 1, L =< 64,
    atom_codes(Id, [C|Cs]),
    code_type(C, lower),
    forall(member(X, Cs), ident_code(X)).
ident_code(C) :- code_type(C, lower), !.
ident_code(C) :- code_type(C, digit), !.
ident_code(0'_).

check_options(Options) :-
    forall(member(O, Options),
           (   compound(O), compound_name_arity(O, N, 1),
               memberchk(N, [description, state, nodes, edges, limits, output, subgraphs])
           ->  true
           ;   fail_rule(syntax, "unknown graph option ~q", [O])
           )),
    forall(member(N, [description, state, nodes, edges, limits, output, subgraphs]),
           (   findall(x, (member(O, Options), compound_name_arity(O, N, 1)), Xs),
               length(Xs, C), C > 1
           ->  fail_rule(syntax, "graph option ~w given ~d times", [N, C])
           ;   true
           )).

option_value(Name, Options, Value) :-
    (   option_value(Name, Options, '$none', Value), Value \== '$none'
    ->  true
    ;   fail_rule(syntax, "graph option ~w(...) is required", [Name])
    ).
option_value(Name, Options, Default, Value) :-
    Opt =.. [Name, V],
    (   memberchk(Opt, Options) -> Value = V ; Value = Default ).

dict_keys(Dict, Keys) :- dict_pairs(Dict, _, Pairs), pairs_keys(Pairs, Keys).

%   ---- state schema ----

compile_fields(Fields, Fields) :-
    (   is_list(Fields), Fields \== [] -> true
    ;   fail_rule(syntax, "state([...]) must list at least one field", [])
    ),
    foldl(compile_field, Fields, [], _).

compile_field(F, Seen, [Name|Seen]) :-
    (   F = field(Name, Type, Default, Reducer) -> true
    ;   fail_rule(bad_field, "~q is not field(Name, Type, Default, Reducer)", [F])
    ),
    (   identifier(Name) -> true
    ;   fail_rule(bad_field, "field name ~q: use lowercase letters, digits and '_'", [Name])
    ),
    (   memberchk(Name, Seen)
    ->  fail_rule(duplicate_field, "field ~q is declared twice", [Name])
    ;   true
    ),
    (   valid_type(Type) -> true
    ;   fail_rule(bad_type, "field ~q: unknown type ~q", [Name, Type])
    ),
    (   reducer(Reducer) -> true
    ;   fail_rule(bad_reducer, "field ~q: unknown reducer ~q (replace, append, sum)", [Name, Reducer])
    ),
    (   reducer_fits(Reducer, Type) -> true
    ;   fail_rule(reducer_type, "field ~q: reducer ~q does not apply to type ~q", [Name, Reducer, Type])
    ),
    (   has_type(Type, Default) -> true
    ;   fail_rule(default_type, "field ~q: default ~q is not of type ~q", [Name, Default, Type])
    ),
    (   Name == children, Type-Reducer \== json-replace
    ->  fail_rule(children_field, "field children holds the task's child tasks, set by the runtime at each step: declare it field(children, json, [], replace)", [])
    ;   true
    ).

%   ---- limits ----

compile_limits(Limits0, Limits) :-
    (   is_list(Limits0) -> true
    ;   fail_rule(bad_limit, "limits(...) takes a list", [])
    ),
    forall(member(L, Limits0),
           (   compound(L), compound_name_arity(L, N, 1), limit_spec(N, _, _) -> true
           ;   fail_rule(bad_limit, "unknown limit ~q", [L])
           )),
    findall(N-V,
            ( limit_spec(N, Def, Cap),
              Opt =.. [N, V0],
              ( memberchk(Opt, Limits0) -> V = V0 ; V = Def ),
              check_limit(N, V, Cap)
            ),
            Pairs),
    dict_pairs(Limits, limits, Pairs).

check_limit(N, V, Cap) :-
    (   integer(V), V >= 1, V =< Cap -> true
    ;   fail_rule(bad_limit, "limit ~w(~q): must be an integer in 1..~d", [N, V, Cap])
    ).

%   ---- nodes ----

compile_nodes(Nodes0, GraphLimits, Nodes) :-
    (   is_list(Nodes0), Nodes0 \== [] -> true
    ;   fail_rule(syntax, "nodes([...]) must list at least one node", [])
    ),
    foldl(compile_node(GraphLimits), Nodes0, [], Pairs),
    dict_pairs(Nodes, nodes, Pairs).

compile_node(GraphLimits, N, Seen, [Name-node(Handler, Limits)|Seen]) :-
    (   N = node(Name, Handler) -> Opts = []
    ;   N = node(Name, Handler, Opts), is_list(Opts) -> true
    ;   fail_rule(syntax, "~q is not node(Name, Handler) or node(Name, Handler, Options)", [N])
    ),
    (   memberchk(Name, [start, end])
    ->  fail_rule(reserved_node, "node name ~q is reserved", [Name])
    ;   identifier(Name) -> true
    ;   fail_rule(syntax, "node name ~q: use lowercase letters, digits and '_'", [Name])
    ),
    (   memberchk(Name-_, Seen)
    ->  fail_rule(duplicate_node, "node ~q is declared twice", [Name])
    ;   true
    ),
    (   callable(Handler), handler_known(Handler) -> true
    ;   fail_rule(unknown_handler, "node ~q: handler ~q is not in the registry", [Name, Handler])
    ),
    forall(member(O, Opts),
           (   compound(O), compound_name_arity(O, ON, 1), node_option(ON) -> true
           ;   fail_rule(bad_limit, "node ~q: unknown option ~q", [Name, O])
           )),
    dict_pairs(GraphLimits, _, GPairs),
    findall(K-V,
            ( member(K-GV, GPairs),
              node_option(K),
              Opt =.. [K, V0],
              ( memberchk(Opt, Opts) -> V = V0 ; V = GV ),
              limit_spec(K, _, Cap),
              check_limit(K, V, Cap)
            ),
            LPairs),
    dict_pairs(Limits, limits, LPairs).

%   ---- edges ----

compile_edges(Edges, Nodes, First, Out) :-
    (   is_list(Edges) -> true
    ;   fail_rule(syntax, "edges(...) takes a list", [])
    ),
    maplist(check_edge(Nodes), Edges),
    findall(B, member(edge(start, B), Edges), Firsts),
    findall(x, member(conditional(start, _, _), Edges), CondStarts),
    length(Firsts, NF), length(CondStarts, NC), N is NF + NC,
    (   NC == 0, Firsts = [First]
    ->  true
    ;   fail_rule(start_edges, "exactly one edge(start, Node) is required, found ~d edges from start", [N])
    ),
    (   First == end
    ->  fail_rule(start_edges, "edge(start, end) leaves nothing to run", [])
    ;   true
    ),
    findall(A-E,
            ( member(Edge, Edges),
              edge_out(Edge, A, E),
              A \== start
            ),
            Pairs),
    forall(member(A-_, Pairs),
           (   count_from(A, Pairs, C), C > 1
           ->  fail_rule(ambiguous_edges, "node ~q has ~d outgoing edges; give it one edge or one conditional", [A, C])
           ;   true
           )),
    dict_pairs(Out, out, Pairs).

count_from(A, Pairs, C) :-
    findall(x, member(A-_, Pairs), Xs),
    length(Xs, C).

edge_out(edge(A, B), A, edge(B)).
edge_out(conditional(A, R, Routes), A, cond(R, Pairs)) :-
    findall(K-B, member(route(K, B), Routes), Pairs).

check_edge(Nodes, E) :-
    (   E = edge(A, B)
    ->  check_from(Nodes, A),
        check_to(Nodes, A, B)
    ;   E = conditional(A, R, Routes)
    ->  check_from(Nodes, A),
        (   callable(R), router_known(R) -> true
        ;   fail_rule(unknown_router, "conditional from ~q: router ~q is not in the registry", [A, R])
        ),
        (   is_list(Routes), Routes \== [] -> true
        ;   fail_rule(syntax, "conditional from ~q needs a non-empty list of route(Key, Node)", [A])
        ),
        foldl(check_route(Nodes, A), Routes, [], _)
    ;   fail_rule(syntax, "~q is not edge(A, B) or conditional(A, Router, Routes)", [E])
    ).

check_route(Nodes, A, R, Seen, [K|Seen]) :-
    (   R = route(K, B), atom(K) -> true
    ;   fail_rule(syntax, "conditional from ~q: ~q is not route(Key, Node) with an atom key", [A, R])
    ),
    (   memberchk(K, Seen)
    ->  fail_rule(duplicate_route, "conditional from ~q: route key ~q is given twice", [A, K])
    ;   true
    ),
    check_to(Nodes, A, B).

check_from(Nodes, A) :-
    (   A == end
    ->  fail_rule(edge_from_end, "no edge may leave end", [])
    ;   A == start -> true
    ;   memberchk(A, Nodes) -> true
    ;   fail_rule(unknown_node, "edge from undeclared node ~q", [A])
    ).

check_to(Nodes, A, B) :-
    (   B == start
    ->  fail_rule(edge_to_start, "edge from ~q into start", [A])
    ;   B == end -> true
    ;   memberchk(B, Nodes) -> true
    ;   fail_rule(unknown_node, "edge from ~q to undeclared node ~q", [A, B])
    ).

%   ---- reachability ----

successors(Out, A, Bs) :-
    (   get_dict(A, Out, E)
    ->  (   E = edge(B) -> Bs = [B]
        ;   E = cond(_, Pairs), pairs_values(Pairs, Bs)
        )
    ;   Bs = []
    ).

check_reachability(Nodes, First, Out) :-
    reach([First], Out, [], Reached),
    forall(member(N, Nodes),
           (   memberchk(N, Reached) -> true
           ;   fail_rule(unreachable_node, "node ~q cannot be reached from start", [N])
           )),
    forall(member(N, Nodes),
           (   reach([N], Out, [], R), memberchk(end, R) -> true
           ;   fail_rule(cannot_reach_end, "node ~q has no path to end", [N])
           )).

reach([], _, Seen, Seen).
reach([N|Ns], Out, Seen, Reached) :-
    (   memberchk(N, Seen)
    ->  reach(Ns, Out, Seen, Reached)
    ;   successors(Out, N, Bs),
        append(Ns, Bs, Next),
        reach(Next, Out, [N|Seen], Reached)
    ).

compile_output(Output, FieldNames) :-
    (   is_list(Output), Output \== [] -> true
    ;   fail_rule(syntax, "output([...]) must list at least one field", [])
    ),
    forall(member(F, Output),
           (   memberchk(F, FieldNames) -> true
           ;   fail_rule(unknown_output_field, "output field ~q is not declared", [F])
           )).

%!  graph_hash(+Spec, -Hex) is det.
%
%   SHA-256 of the canonical text of the spec (write_canonical form), so
%   the same spec hashes the same in every worker and every version.
graph_hash(Spec, Hex) :-
    format(string(Text), "~k", [Spec]),
    sha_hash(Text, Hash, [algorithm(sha256), encoding(utf8)]),
    hash_atom(Hash, Atom),
    atom_string(Atom, Hex).

%!  graph_field(+Graph, -Field) is nondet.
graph_field(G, F) :-
    get_dict(fields, G, Fs),
    member(F, Fs).

%!  node_limit(+Graph, +Node, +Name, -Value) is det.
node_limit(G, Node, Name, Value) :-
    get_dict(nodes, G, Nodes),
    get_dict(Node, Nodes, node(_, Limits)),
    get_dict(Name, Limits, Value).
