/*  MACHINE-SPIRIT: the closed type system of graph state.

    A graph's state schema declares field(Name, Type, Default, Reducer).
    Types are closed and JSON-shaped, because the state travels in the
    checkpoint as JSON and must come back as the same Prolog term:

        string | atom | integer | number | boolean | json
        | list(Type) | optional(Type)

    `atom` values travel as JSON strings and are restored as atoms through
    the schema; `json` holds exactly what library(http/json) reads (strings,
    numbers, true/false/null, lists, dicts), so it round-trips unchanged.
    `optional(T)` is T or the atom null.

    Reducers say how a node's patch combines with the current value:
    replace (any type), append (list types: the patch value is a list
    appended at the end), sum (integer, number).
*/
:- module(ms_types,
          [ valid_type/1,           % @Type
            has_type/2,             % +Type, @Value
            reducer/1,              % ?Reducer
            reducer_fits/2,         % +Reducer, +Type
            reduce/5,               % +Reducer, +Type, +Old, +Patch, -New
            to_json/3,              % +Type, +Value, -Json
            from_json/3,            % +Type, +Json, -Value
            json_value/1            % @Term
          ]).
:- use_module(library(lists)).
:- use_module(library(apply)).

valid_type(T) :- var(T), !, fail.
valid_type(string).
valid_type(atom).
valid_type(integer).
valid_type(number).
valid_type(boolean).
valid_type(json).
valid_type(list(T)) :- valid_type(T).
valid_type(optional(T)) :- valid_type(T).

%!  has_type(+Type, @Value) is semidet.
has_type(_, V) :- var(V), !, fail.
has_type(string, V) :- string(V).
has_type(atom, V) :- atom(V).
has_type(integer, V) :- integer(V).
has_type(number, V) :- finite_number(V).
has_type(boolean, V) :- ( V == true ; V == false ), !.
has_type(json, V) :- json_value(V).
has_type(list(T), V) :- is_list(V), maplist(has_type(T), V).
has_type(optional(T), V) :- ( V == null -> true ; has_type(T, V) ).

finite_number(V) :- integer(V), !.
finite_number(V) :- float(V), V =:= V, abs(V) =\= inf.

%!  json_value(@Term) is semidet.
%
%   Term is a JSON value as library(http/json) reads it.
json_value(V) :- var(V), !, fail.
json_value(V) :- string(V), !.
json_value(V) :- number(V), !, finite_number(V).
json_value(true) :- !.
json_value(false) :- !.
json_value(null) :- !.
json_value(V) :- is_list(V), !, maplist(json_value, V).
json_value(V) :- is_dict(V), !, dict_pairs(V, _, Pairs), maplist(json_pair, Pairs).
json_pair(K-V) :- atom(K), json_value(V).

reducer(replace).
reducer(append).
reducer(sum).

reducer_fits(replace, _).
reducer_fits(append, list(_)).
reducer_fits(sum, integer).
reducer_fits(sum, number).

%!  reduce(+Reducer, +Type, +Old, +Patch, -New) is semidet.
%
%   Fails when Patch does not have the type the reducer needs; the caller
%   reports the field.
reduce(replace, Type, _Old, Patch, Patch) :-
    has_type(Type, Patch).
reduce(append, list(T), Old, Patch, New) :-
    has_type(list(T), Patch),
    append(Old, Patch, New).
reduce(sum, Type, Old, Patch, New) :-
    has_type(Type, Patch),
    New is Old + Patch.

%!  to_json(+Type, +Value, -Json) is det.
to_json(string, V, V).
to_json(atom, V, S) :- atom_string(V, S).
to_json(integer, V, V).
to_json(number, V, V).
to_json(boolean, V, V).
to_json(json, V, V).
to_json(list(T), Vs, Js) :- maplist(to_json(T), Vs, Js).
to_json(optional(T), V, J) :- ( V == null -> J = null ; to_json(T, V, J) ).

%!  from_json(+Type, +Json, -Value) is semidet.
%
%   Fails on a value of the wrong shape: a checkpoint that does not match
%   its schema is incompatible, never coerced.
from_json(string, J, J) :- string(J).
from_json(atom, J, V) :- string(J), atom_string(V, J).
from_json(integer, J, J) :- integer(J).
from_json(number, J, J) :- finite_number(J).
from_json(boolean, J, J) :- ( J == true ; J == false ), !.
from_json(json, J, J) :- json_value(J).
from_json(list(T), Js, Vs) :- is_list(Js), maplist(from_json(T), Js, Vs).
from_json(optional(T), J, V) :- ( J == null -> V = null ; from_json(T, J, V) ).
