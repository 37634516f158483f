/*  MACHINE-SPIRIT: operator handler modules.

    An operator's handler module is Prolog text the plugin read once,
    checked against its SHA-256 pin and sent in a load_module frame. It
    is never consulted: its terms are read (no directives, no
    quasi-quotations, no DCG rules), every clause body goes through the
    allow-list walk of rlm_check.pl (the module's own predicates and the
    effect API tool/3, model/2, progress/1 added; the RLM API, module
    qualification, side-effecting, time and random builtins refused), and
    the checked, rewritten clauses are asserted into a Prolog module of
    their own, ms_op_N. Its facts

        handler_decl(Pattern)     with clauses handler(H, Env, State, Out)
        router_decl(Pattern)      with clauses router(R, Env, State, Key)

    register Pattern in the trusted registry (registry.pl), where operator
    graphs name it like a built-in; a name/arity already there (built-in
    or from another module) is refused. Every error names the file and
    the line: "FILE:LINE: why".
*/
:- module(ms_opmodule, [load_operator_module/2]).   % +Name, +Source
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(rlm_check, [check_module_body/3]).
:- use_module(registry, []).

%   A module's clauses: at most this many. Its size is bounded by the
%   plugin (128 KiB).
max_module_clauses(4096).

%!  load_operator_module(+Name:string, +Source:string) is det.
%
%   Throws module_error(Message) when the module cannot be loaded; then
%   nothing of it is registered.
load_operator_module(Name, Source) :-
    read_clauses(Name, Source, Clauses),
    flag(ms_opmodule_count, N0, N0 + 1),
    N is N0 + 1,
    format(atom(M), "ms_op_~d", [N]),
    heads(Clauses, Locals),
    maplist(check_head(Name), Clauses),
    maplist(check_clause(Name, Locals), Clauses, Checked),
    declarations(Name, Checked, handler_decl, handler, 4, Handlers),
    declarations(Name, Checked, router_decl, router, 4, Routers),
    no_clash(Name, Handlers, ms_registry:handler_known_pattern),
    no_clash(Name, Routers, ms_registry:router_known_pattern),
    % Autoloading is off in the saved state: the libraries the allow-list
    % names are imported explicitly, as into ms_rlm_goals.
    forall(member(L, [lists, apply, pairs, aggregate]), M:use_module(library(L))),
    forall(member(c(Line, H, B), Checked), add_clause(Name, Line, M, H, B)),
    forall(member(_-P, Handlers), assertz(ms_registry:op_handler(P, M))),
    forall(member(_-P, Routers), assertz(ms_registry:op_router(P, M))).

%   A head the checks let through but Prolog will not define (an
%   imported library predicate, say) is refused with its line.
add_clause(Name, Line, M, H, B) :-
    catch(assertz(M:(H :- B)), E, true),
    (   var(E)
    ->  true
    ;   functor(H, HN, HA),
        (   catch(message_to_string(E, Why0), _, fail) -> true ; Why0 = "cannot be defined" ),
        string_length(Why0, L0), L is min(L0, 300),
        sub_string(Why0, 0, L, _, Why1),
        module_error(Name, Line, "~q/~d: ~s", [HN, HA, Why1])
    ).

module_error(Name, Line, Fmt, Args) :-
    format(string(Why), Fmt, Args),
    format(string(Msg), "~w:~d: ~s", [Name, Line, Why]),
    throw(module_error(Msg)).

%   ---- reading ----

read_clauses(Name, Source, Clauses) :-
    setup_call_cleanup(
        open_string(Source, S),
        read_all(Name, S, 0, Clauses),
        close(S)).

read_all(Name, S, Count, Clauses) :-
    catch(read_term(S, T, [syntax_errors(error), quasi_quotations(QQ),
                           term_position(P), module(ms_opmodule)]),
          E, syntax_error(Name, E)),
    (   T == end_of_file
    ->  Clauses = []
    ;   stream_position_data(line_count, P, Line),
        (   QQ \== [] -> module_error(Name, Line, "quasi-quotations are not allowed", []) ; true ),
        max_module_clauses(Max),
        (   Count >= Max -> module_error(Name, Line, "more than ~D clauses", [Max]) ; true ),
        clause_parts(Name, Line, T, H, B),
        Clauses = [c(Line, H, B)|Rest],
        Count1 is Count + 1,
        read_all(Name, S, Count1, Rest)
    ).

syntax_error(Name, error(syntax_error(What), stream(_, Line, LinePos, _))) :- !,
    Col is LinePos + 1,
    format(string(Msg), "~w:~d:~d: syntax error: ~w", [Name, Line, Col, What]),
    throw(module_error(Msg)).
syntax_error(Name, error(syntax_error(What), _)) :- !,
    format(string(Msg), "~w: syntax error: ~w", [Name, What]),
    throw(module_error(Msg)).
syntax_error(Name, E) :-
    (   catch(message_to_string(E, Why), _, fail) -> true ; Why = "unreadable" ),
    format(string(Msg), "~w: ~s", [Name, Why]),
    throw(module_error(Msg)).

clause_parts(Name, Line, T, _, _) :-
    var(T), !,
    module_error(Name, Line, "a clause is a variable", []).
clause_parts(Name, Line, (:- _), _, _) :- !,
    module_error(Name, Line, "directives are not allowed in a handler module", []).
clause_parts(Name, Line, (_ --> _), _, _) :- !,
    module_error(Name, Line, "DCG rules are not supported in a handler module", []).
clause_parts(_, _, (H :- B), H, B) :- !.
clause_parts(_, _, H, H, true).

%   ---- checking ----

heads(Clauses, Locals) :-
    findall(N/A, ( member(c(_, H, _), Clauses), callable(H), \+ H = _:_, functor(H, N, A) ), L0),
    sort(L0, Locals).

check_head(Name, c(Line, H, _)) :-
    (   var(H) -> module_error(Name, Line, "a clause head is a variable", [])
    ;   H = _:_ -> module_error(Name, Line, "module-qualified clause heads are not allowed", [])
    ;   \+ callable(H) -> module_error(Name, Line, "~q is not a clause head", [H])
    ;   is_dict(H) -> module_error(Name, Line, "a dict is not a clause head", [])
    ;   true
    ),
    functor(H, N, A),
    (   reserved_head(N, A)
    ->  module_error(Name, Line, "~q/~d is reserved (a built-in or the effect API) and cannot be defined", [N, A])
    ;   true
    ).

reserved_head(N, A) :-
    functor(H, N, A),
    predicate_property(system:H, defined), !.
reserved_head(N, A) :-
    ms_rlm_check:allowed(N, A), !.
reserved_head(tool, 3).
reserved_head(model, 2).
reserved_head(progress, 1).

check_clause(Name, Locals, c(Line, H, B), c(Line, H, R)) :-
    functor(H, HN, HA),
    (   catch(check_module_body(B, Locals, R),
              rejected(Why),
              module_error(Name, Line, "in ~q/~d: ~s", [HN, HA, Why]))
    ->  true
    ;   module_error(Name, Line, "the clause of ~q/~d cannot be checked", [HN, HA])
    ).

%   declarations: Decl(Pattern) facts, each with Impl/Arity clauses whose
%   first argument can match it.
declarations(Name, Checked, Decl, Impl, Arity, Pairs) :-
    findall(Line-P, ( member(c(Line, D, _), Checked), D =.. [Decl, P] ), Pairs),
    maplist(check_decl(Name, Checked, Decl, Impl, Arity), Pairs).

check_decl(Name, Checked, Decl, Impl, Arity, Line-P) :-
    (   \+ callable(P)
    ->  module_error(Name, Line, "~w(~q): a pattern is an atom or a compound", [Decl, P])
    ;   \+ ( member(c(_, H, _), Checked), functor(H, Impl, Arity), arg(1, H, A1),
             \+ \+ A1 = P )
    ->  functor(P, PN, PA),
        module_error(Name, Line, "~w(~q) has no ~w/~d clause for ~q/~d", [Decl, P, Impl, Arity, PN, PA])
    ;   true
    ).

no_clash(Name, Pairs, Known) :-
    forall(member(Line-P, Pairs),
           (   functor(P, N, A), functor(G, N, A),
               call(Known, G)
           ->  module_error(Name, Line, "~q/~d is already in the registry", [N, A])
           ;   true
           )),
    forall(( select(L1-P1, Pairs, Others), member(_-P2, Others),
             functor(P1, N, A), functor(P2, N, A) ),
           module_error(Name, L1, "~q/~d is declared twice", [N, A])).
