/*  MACHINE-SPIRIT: the module in which a root model's goals run.

    Its only imports are the RLM API and a few pure libraries; its base is
    `system`, not `user`, so nothing another source file defines in user
    is visible to model code.
*/
:- module(ms_rlm_goals, []).
:- use_module(rlm_api).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(aggregate)).

:- set_module(base(system)).
