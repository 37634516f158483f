/*  MACHINE-SPIRIT: the allow-list checker for a root model's goals (RLM).

    A model's goal is untrusted code. It may call only the predicates
    listed below (pure built-ins, library(lists/apply/pairs/aggregate)
    predicates and the RLM API), whatever path reaches them. The checker
    walks the goal term once, before anything runs:

      - every goal position must be instantiated when the goal is checked:
        a variable in a goal position (call(G), G, findall(X, G, L),
        maplist(G, L), call(F, X) after F =.. ...) is refused. This is
        what makes the check sound: no goal is ever built at run time, so
        nothing reaches a predicate the checker did not see;
      - control constructs and meta-predicates (',', ';', '->', '*->',
        \+, call/1..8, once, ignore, forall, findall, bagof, setof,
        aggregate_all, maplist, foldl, include, exclude, partition,
        predsort) are allowed with their goal arguments checked the same
        way; closures are checked with their extra arguments added as
        fresh variables (so maplist(call, Gs) is a call(V): refused);
      - module qualification anywhere in a goal position is refused;
      - everything else must be in allowed/2; it is refused otherwise,
        whatever its name: loading code, files, streams, flags, global
        variables, threads, time, randomness, the OS, output, exceptions
        (catch/3, throw/1), the worker's own predicates.

    The goal that runs is a rewritten copy: predicates that could grow
    memory outside the Prolog stacks (atoms are not on the stacks) or
    evaluate an expression built at run time are replaced by checked
    wrappers (safe/2): arithmetic checks the expression's functions when it
    runs (`E = random(6), X is E` is refused then), concatenations check
    the result's length before building it, and every atom the goal
    creates is charged against a per-goal character budget.
*/
:- module(ms_rlm_check,
          [ check_model_goal/2,     % +Goal, -Runnable
            check_module_body/3,    % +Body, +Locals, -Runnable
            reset_text_budget/0,
            max_text_chars/1,
            max_goal_text_chars/1
          ]).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(aggregate)).

%   One atom or string a goal builds by concatenation: at most this many
%   characters. All atoms a goal creates together: at most this many.
max_text_chars(1_000_000).
max_goal_text_chars(32_000_000).

%!  check_model_goal(+Goal, -Runnable) is det.
%
%   Throws rejected(Message) unless every predicate Goal can reach is
%   allowed; Runnable is Goal with the checked wrappers in place, to be
%   called in module ms_rlm_goals.
check_model_goal(Goal, Runnable) :-
    catch(goal(Goal, Runnable), E, checker_error(E)).

%   The checker refuses what it cannot walk; it never lets an error of
%   its own end the node.
checker_error(rejected(M)) :- !,
    throw(rejected(M)).
checker_error(E) :-
    (   catch(message_to_string(E, M0), _, fail) -> true ; M0 = "an unexpected term" ),
    string_length(M0, L0), L is min(L0, 300),
    sub_string(M0, 0, L, _, M1),
    format(string(M), "the goal cannot be checked: ~s", [M1]),
    throw(rejected(M)).

%!  check_module_body(+Body, +Locals, -Runnable) is det.
%
%   The same walk for a clause body of an operator handler module
%   (opmodule.pl): Locals (Name/Arity) are the module's own predicates,
%   callable as if allowed; the effect API (tool/3, model/2, progress/1)
%   replaces the RLM API, which a handler cannot reach.
check_module_body(Body, Locals, Runnable) :-
    setup_call_cleanup(
        nb_setval(ms_check_locals, Locals),
        check_model_goal(Body, Runnable),
        nb_setval(ms_check_locals, none)).

module_mode(Locals) :-
    nb_current(ms_check_locals, Locals),
    Locals \== none.

module_effect(tool(N, A, R), ms_effects:tool(N, A, R)).
module_effect(model(P, T), ms_effects:model(P, T)).
module_effect(progress(N), ms_effects:progress(N)).

rlm_api(context_length, 1).
rlm_api(context_prefix, 1).
rlm_api(context_slice, 3).
rlm_api(llm_query, 2).
rlm_api(spirit, 3).
rlm_api(final, 1).

refuse(Fmt, Args) :-
    format(string(M), Fmt, Args),
    throw(rejected(M)).

goal(G, _) :-
    var(G), !,
    refuse("a goal is a variable when the reply is checked; meta-calls need a goal written out (no call(G) of a term built at run time)", []).
goal(M:G, _) :- !,
    (   var(M) -> MT = '_' ; MT = M ),
    (   var(G) -> GT = '_' ; callable(G) -> name_arity(G, N, A), GT = N/A ; GT = G ),
    refuse("module qualification (~q:~q) is not allowed", [MT, GT]).
goal(G, _) :-
    (   \+ callable(G) ; compound(G), compound_name_arity(G, _, 0) ), !,
    (   is_dict(G)
    ->  refuse("a dict is not a goal", [])
    ;   refuse("~q is not a goal", [G])
    ).
goal(G, R) :-
    name_arity(G, Name, Arity),
    (   module_mode(Locals)
    ->  Mode = module
    ;   Mode = goal, Locals = []
    ),
    (   control(Name/Arity)
    ->  control(G, R)
    ;   Mode == module, module_effect(G, R0)
    ->  R = R0
    ;   Mode == module, rlm_api(Name, Arity)
    ->  refuse("~q/~d is the RLM's API, not available to a handler module", [Name, Arity])
    ;   memberchk(Name/Arity, Locals)
    ->  R = G
    ;   safe(G, R)
    ->  true
    ;   allowed(Name, Arity)
    ->  R = G
    ;   Mode == module
    ->  refuse("~q/~d is not allowed (only pure built-ins on terms, numbers, atoms, strings and lists, the module's own predicates and tool/3, model/2, progress/1)", [Name, Arity])
    ;   refuse("~q/~d is not allowed (only pure built-ins on terms, numbers, atoms, strings and lists, and the RLM API)", [Name, Arity])
    ).

name_arity(G, Name, Arity) :-
    (   compound(G) -> compound_name_arity(G, Name, Arity) ; functor(G, Name, Arity) ).

%   ---- control constructs and meta-predicates ----

control(','/2).
control((;)/2).
control((->)/2).
control((*->)/2).
control((\+)/1).
control(not/1).
control(once/1).
control(ignore/1).
control(forall/2).
control(findall/3).
control(findall/4).
control(bagof/3).
control(setof/3).
control(aggregate_all/3).
control(maplist/N) :- between(2, 5, N).
control(foldl/N) :- between(4, 6, N).
control(include/3).
control(exclude/3).
control(partition/4).
control(predsort/3).
control(map_list_to_pairs/3).
control(call/N) :- between(1, 8, N).

control((A,B), (RA,RB)) :- goal(A, RA), goal(B, RB).
control((A;B), (RA;RB)) :- goal(A, RA), goal(B, RB).
control((A->B), (RA->RB)) :- goal(A, RA), goal(B, RB).
control((A*->B), (RA*->RB)) :- goal(A, RA), goal(B, RB).
control(\+ A, \+ RA) :- goal(A, RA).
control(not(A), \+ RA) :- goal(A, RA).
control(once(A), once(RA)) :- goal(A, RA).
control(ignore(A), ignore(RA)) :- goal(A, RA).
control(forall(A,B), forall(RA,RB)) :- goal(A, RA), goal(B, RB).
control(findall(T,G,L), findall(T,RG,L)) :- goal(G, RG).
control(findall(T,G,L,T0), findall(T,RG,L,T0)) :- goal(G, RG).
control(bagof(T,G,L), bagof(T,RG,L)) :- carets(G, RG).
control(setof(T,G,L), setof(T,RG,L)) :- carets(G, RG).
control(aggregate_all(Spec,G,R), aggregate_all(Spec,RG,R)) :-
    aggregate_spec(Spec, Evaluated),
    goal(G, RG0),
    (   Evaluated == none
    ->  RG = RG0
    ;   RG = (RG0, ms_rlm_check:checked_expression(Evaluated))
    ).
control(G, R) :-
    G =.. [maplist, C|Lists],
    length(Lists, N),
    closure(C, N, RC),
    R =.. [maplist, RC|Lists].
control(G, R) :-
    G =.. [foldl, C|Rest],
    length(Rest, N0), N is N0 - 1,      % lists..., V0, V: the closure gets one per list + 2
    N1 is N + 1,
    closure(C, N1, RC),
    R =.. [foldl, RC|Rest].
control(include(C,L,I), include(RC,L,I)) :- closure(C, 1, RC).
control(exclude(C,L,I), exclude(RC,L,I)) :- closure(C, 1, RC).
control(partition(C,L,I,E), partition(RC,L,I,E)) :- closure(C, 1, RC).
control(predsort(C,L,S), predsort(RC,L,S)) :- closure(C, 3, RC).
control(map_list_to_pairs(C,L,P), map_list_to_pairs(RC,L,P)) :- closure(C, 2, RC).
control(G, R) :-
    G =.. [call, C|Args],
    length(Args, N),
    (   N == 0
    ->  goal(C, RC), R = call(RC)
    ;   closure(C, N, RC),
        R =.. [call, RC|Args]
    ).

%   V^Goal in bagof/setof: the variables are data, the goal is checked.
carets(G, _) :- var(G), !, goal(G, _).
carets(V^G, V^RG) :- !, carets(G, RG).
carets(G, RG) :- goal(G, RG).

%   The aggregate_all/3 templates that exist; those that evaluate an
%   expression have it checked where it is evaluated.
aggregate_spec(Spec, _) :-
    var(Spec), !,
    refuse("the first argument of aggregate_all/3 must be written out (count, sum(E), max(E), min(E), max(E, W), min(E, W), bag(T) or set(T))", []).
aggregate_spec(count, none) :- !.
aggregate_spec(bag(_), none) :- !.
aggregate_spec(set(_), none) :- !.
aggregate_spec(sum(E), E) :- !.
aggregate_spec(max(E), E) :- !.
aggregate_spec(min(E), E) :- !.
aggregate_spec(max(E, _), E) :- !.
aggregate_spec(min(E, _), E) :- !.
aggregate_spec(Spec, _) :-
    refuse("aggregate_all/3 with ~q is not allowed (count, sum(E), max(E), min(E), max(E, W), min(E, W), bag(T) or set(T))", [Spec]).

%!  closure(+Closure, +Extra, -Rewritten) is det.
%
%   A closure is checked as the goal it becomes with Extra more arguments
%   (fresh variables: a goal position among them is refused), and
%   rewritten the same way with those arguments taken off again.
closure(C, _, _) :-
    var(C), !,
    refuse("a closure is a variable when the reply is checked; write the predicate out", []).
closure(M:C, _, _) :- !,
    goal(M:C, _).
closure(C, Extra, RC) :-
    (   callable(C), \+ ( compound(C), compound_name_arity(C, _, 0) ) -> true
    ;   refuse("~q is not a closure", [C])
    ),
    C =.. L0,
    length(More, Extra),
    append(L0, More, L1),
    G =.. L1,
    goal(G, RG),
    strip(RG, Extra, RC).

strip(M:G, Extra, M:C) :- !, strip(G, Extra, C).
strip(G, Extra, C) :-
    G =.. L1,
    length(L1, Len),
    Keep is Len - Extra,
    length(L0, Keep),
    append(L0, _, L1),
    C =.. L0.

%   ---- checked wrappers ----

%   Arithmetic: the expression may be bound at run time.
safe(X is E, ms_rlm_check:safe_is(X, E)).
safe(A < B, ms_rlm_check:safe_compare(<, A, B)).
safe(A > B, ms_rlm_check:safe_compare(>, A, B)).
safe(A =< B, ms_rlm_check:safe_compare(=<, A, B)).
safe(A >= B, ms_rlm_check:safe_compare(>=, A, B)).
safe(A =:= B, ms_rlm_check:safe_compare(=:=, A, B)).
safe(A =\= B, ms_rlm_check:safe_compare(=\=, A, B)).
safe(sum_list(L, S), ms_rlm_check:safe_numbers(sum_list, L, S)).
safe(sumlist(L, S), ms_rlm_check:safe_numbers(sum_list, L, S)).
safe(max_list(L, S), ms_rlm_check:safe_numbers(max_list, L, S)).
safe(min_list(L, S), ms_rlm_check:safe_numbers(min_list, L, S)).
%   Text: results bounded before they are built, atoms charged.
safe(atom_concat(A, B, C), ms_rlm_check:safe_atom_concat(A, B, C)).
safe(string_concat(A, B, C), ms_rlm_check:safe_string_concat(A, B, C)).
safe(atomic_list_concat(L, A), ms_rlm_check:safe_atomic_list_concat(L, A)).
safe(atomic_list_concat(L, S, A), ms_rlm_check:safe_atomic_list_concat(L, S, A)).
safe(sub_atom(A, B, L, F, S), ms_rlm_check:safe_sub_atom(A, B, L, F, S)).
safe(atom_codes(A, L), ms_rlm_check:safe_to_atom(atom_codes, A, L)).
safe(atom_chars(A, L), ms_rlm_check:safe_to_atom(atom_chars, A, L)).
safe(atom_string(A, S), ms_rlm_check:safe_to_atom(atom_string, A, S)).
safe(atom_number(A, N), ms_rlm_check:safe_to_atom(atom_number, A, N)).
safe(string_to_atom(S, A), ms_rlm_check:safe_string_to_atom(S, A)).
safe(upcase_atom(A, U), ms_rlm_check:safe_case(upcase_atom, A, U)).
safe(downcase_atom(A, U), ms_rlm_check:safe_case(downcase_atom, A, U)).

%   ---- the allow-list ----

allowed(true, 0).
allowed(fail, 0).
allowed(false, 0).
allowed(!, 0).
% unification and comparison of terms
allowed(=, 2).
allowed(\=, 2).
allowed(==, 2).
allowed(\==, 2).
allowed(@<, 2).
allowed(@>, 2).
allowed(@=<, 2).
allowed(@>=, 2).
allowed(=@=, 2).
allowed(\=@=, 2).
allowed(compare, 3).
allowed(unify_with_occurs_check, 2).
allowed(subsumes_term, 2).
% type tests
allowed(var, 1).
allowed(nonvar, 1).
allowed(atom, 1).
allowed(number, 1).
allowed(integer, 1).
allowed(float, 1).
allowed(atomic, 1).
allowed(compound, 1).
allowed(callable, 1).
allowed(is_list, 1).
allowed(string, 1).
allowed(ground, 1).
allowed(is_dict, 1).
allowed(is_dict, 2).
% term inspection and construction (on the stacks)
allowed(functor, 3).
allowed(arg, 3).
allowed(=.., 2).
allowed(copy_term, 2).
allowed(term_variables, 2).
allowed(get_dict, 3).
allowed(put_dict, 3).
allowed(put_dict, 4).
allowed(del_dict, 4).
allowed(dict_pairs, 3).
% integers
allowed(between, 3).
allowed(succ, 2).
% text that lives on the stacks (strings) or is no longer than its input
allowed(atom_length, 2).
allowed(string_length, 2).
allowed(string_chars, 2).
allowed(string_codes, 2).
allowed(string_code, 3).
allowed(number_codes, 2).
allowed(number_chars, 2).
allowed(number_string, 2).
allowed(text_to_string, 2).
allowed(char_code, 2).
allowed(sub_string, 5).
allowed(split_string, 4).
allowed(string_lower, 2).
allowed(string_upper, 2).
allowed(char_type, 2).
allowed(code_type, 2).
% lists
allowed(length, 2).
allowed(append, 2).
allowed(append, 3).
allowed(member, 2).
allowed(memberchk, 2).
allowed(reverse, 2).
allowed(nth0, 3).
allowed(nth1, 3).
allowed(nth0, 4).
allowed(nth1, 4).
allowed(last, 2).
allowed(msort, 2).
allowed(sort, 2).
allowed(sort, 4).
allowed(keysort, 2).
allowed(permutation, 2).
allowed(flatten, 2).
allowed(list_to_set, 2).
allowed(is_set, 1).
allowed(subtract, 3).
allowed(intersection, 3).
allowed(union, 3).
allowed(delete, 3).
allowed(select, 3).
allowed(selectchk, 3).
allowed(select, 4).
allowed(nextto, 3).
allowed(numlist, 3).
allowed(max_member, 2).
allowed(min_member, 2).
allowed(proper_length, 2).
allowed(pairs_keys_values, 3).
allowed(pairs_keys, 2).
allowed(pairs_values, 2).
allowed(transpose_pairs, 2).
% the RLM API
allowed(context_length, 1).
allowed(context_prefix, 1).
allowed(context_slice, 3).
allowed(llm_query, 2).
allowed(spirit, 3).
allowed(final, 1).

%   ---- wrappers (called only from rewritten goals) ----

:- public
    safe_is/2, safe_compare/3, safe_numbers/3, checked_expression/1,
    safe_atom_concat/3, safe_string_concat/3, safe_atomic_list_concat/2,
    safe_atomic_list_concat/3, safe_sub_atom/5, safe_to_atom/3,
    safe_string_to_atom/2, safe_case/3.

safe_is(X, E) :-
    checked_expression(E),
    X is E.

safe_compare(Op, A, B) :-
    checked_expression(A),
    checked_expression(B),
    G =.. [Op, A, B],
    call(G).

safe_numbers(Pred, L, R) :-
    must_be(list(number), L),
    call(Pred, L, R).

%!  checked_expression(@E) is det.
%
%   E evaluates only functions of numbers: no random/0,1, random_float,
%   cputime, realtime, no user-defined functions. Unbound parts are left
%   to is/2 (an instantiation error).
checked_expression(E) :-
    (   var(E) -> true
    ;   number(E) -> true
    ;   string(E) -> true                      % "a": a character code
    ;   E = [X] -> checked_expression(X)
    ;   atom(E)
    ->  (   arith_constant(E) -> true
        ;   expr_refused(E/0)
        )
    ;   compound(E)
    ->  compound_name_arity(E, N, A),
        (   arith_function(N, A)
        ->  forall(arg(_, E, Arg), checked_expression(Arg))
        ;   expr_refused(N/A)
        )
    ;   expr_refused(E)
    ).

expr_refused(What) :-
    format(string(M), "arithmetic function ~q is not allowed", [What]),
    throw(error(permission_error(evaluate, arithmetic_function, What), context(_, M))).

arith_constant(pi).
arith_constant(e).
arith_constant(inf).
arith_constant(infinite).
arith_constant(nan).
arith_constant(epsilon).
arith_constant(max_tagged_integer).
arith_constant(min_tagged_integer).

arith_function(N, 1) :-
    memberchk(N, [-, +, abs, sign, sqrt, sin, cos, tan, asin, acos, atan,
                  sinh, cosh, tanh, asinh, acosh, atanh, exp, log, log2,
                  integer, float, float_integer_part, float_fractional_part,
                  truncate, round, ceiling, floor, \, msb, lsb, popcount,
                  succ_or_zero, numerator, denominator, rational, rationalize,
                  cot, acot]).
arith_function(N, 2) :-
    memberchk(N, [+, -, *, /, //, mod, rem, div, min, max, gcd, atan, atan2,
                  **, ^, >>, <<, /\, \/, xor, log, copysign, nexttoward,
                  truncate, cmpflags, trig]).

%   ---- text ----

text_chars(T, N) :-
    (   atom(T) -> atom_length(T, N)
    ;   string(T) -> string_length(T, N)
    ;   atomic(T) -> atom_length(T, N)       % numbers: their printed length
    ;   N = 0
    ).

check_length(Pred, N) :-
    max_text_chars(Max),
    (   N =< Max -> true
    ;   format(string(M), "~w would build a text of ~D characters; at most ~D", [Pred, N, Max]),
        throw(error(resource_error(text_length), context(Pred, M)))
    ).

%   Every atom a goal creates, and every text concatenation, is charged
%   here. The budget is reset for each goal (reset_text_budget/0); it is
%   not given back on backtracking, so a loop that makes atoms and fails
%   is bounded too.
charge(Pred, N) :-
    nb_getval(ms_rlm_text, Used0),
    Used is Used0 + N,
    max_goal_text_chars(Max),
    (   Used =< Max
    ->  nb_setval(ms_rlm_text, Used)
    ;   format(string(M), "~w: the goal's texts would exceed ~D characters in all", [Pred, Max]),
        throw(error(resource_error(text_budget), context(Pred, M)))
    ).

reset_text_budget :-
    nb_setval(ms_rlm_text, 0).

charge_text(Pred, T) :-
    (   atom(T) -> atom_length(T, N), charge(Pred, N)
    ;   string(T) -> string_length(T, N), charge(Pred, N)
    ;   true
    ).

safe_atom_concat(A, B, C) :-
    (   nonvar(A), nonvar(B)
    ->  text_chars(A, NA), text_chars(B, NB), N is NA + NB,
        check_length(atom_concat/3, N),
        charge(atom_concat/3, N),
        atom_concat(A, B, C)
    ;   atom_concat(A, B, C),
        charge_text(atom_concat/3, A),
        charge_text(atom_concat/3, B)
    ).

safe_string_concat(A, B, C) :-
    (   nonvar(A), nonvar(B)
    ->  text_chars(A, NA), text_chars(B, NB), N is NA + NB,
        check_length(string_concat/3, N),
        string_concat(A, B, C)
    ;   string_concat(A, B, C)
    ).

safe_atomic_list_concat(L, A) :-
    list_chars(atomic_list_concat/2, L, '', N),
    charge(atomic_list_concat/2, N),
    atomic_list_concat(L, A).

safe_atomic_list_concat(L, Sep, A) :-
    (   is_list(L), \+ ( member(X, L), var(X) )
    ->  list_chars(atomic_list_concat/3, L, Sep, N),
        charge(atomic_list_concat/3, N),
        atomic_list_concat(L, Sep, A)
    ;   atomic_list_concat(L, Sep, A),            % splitting A: parts are no longer than A
        forall(member(P, L), charge_text(atomic_list_concat/3, P))
    ).

list_chars(Pred, L, Sep, N) :-
    must_be(list, L),
    length(L, Len),
    (   atomic(Sep) -> text_chars(Sep, NS) ; NS = 0 ),
    foldl(add_chars, L, 0, N0),
    N is N0 + NS * max(0, Len - 1),
    check_length(Pred, N).

add_chars(T, N0, N) :-
    text_chars(T, NT),
    N is N0 + NT.

safe_sub_atom(A, B, L, F, S) :-
    sub_atom(A, B, L, F, S),
    charge_text(sub_atom/5, S).

safe_to_atom(Pred, A, X) :-
    call(Pred, A, X),
    charge_text(Pred, A).

safe_string_to_atom(S, A) :-
    string_to_atom(S, A),
    charge_text(string_to_atom/2, A).

safe_case(Pred, A, U) :-
    call(Pred, A, U),
    charge_text(Pred, U).
