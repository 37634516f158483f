/*  MACHINE-SPIRIT: what a root model's Prolog goals may call (RLM).

    In the recursive-language-model graph the root model never sees the
    task's context; it replies with one Prolog goal that the worker runs
    checked: it may call the pure built-ins of the allow-list in
    rlm_check.pl and these predicates:

        context_length(-Bytes)          size of the context
        context_prefix(-Text)           its first bytes (what the prompt shows)
        context_slice(+From, +Len, -Text)
                                        Len (1..4096) bytes from byte offset From,
                                        read through the host's workspace.read tool
        llm_query(+Prompt, -Answer)     a sub-model call one level deeper
                                        (Prompt at most 6000 characters)
        spirit(+Graph, +Input, -Answer) a sub-run of a registered graph
        final(+Answer)                  the task's answer; ends the loop

    Each is an effect through the host (except context_length/prefix,
    which read the state) and can fail with effect_error/3.
*/
:- module(ms_rlm_api,
          [ context_length/1,
            context_prefix/1,
            context_slice/3,
            llm_query/2,
            spirit/3,
            final/1
          ]).
:- use_module(library(base64)).
:- use_module(library(utf8)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(protocol).
:- use_module(effects).
:- use_module(runtime, [current_env/1]).

max_slice_bytes(4096).
max_sub_prompt_chars(6000).
max_sub_answer_chars(8000).
max_final_chars(8000).

%   The RLM loop publishes the state of the running iteration here
%   (a thread-local global variable): rlm_state(ContextLength, Prefix).
rlm_fact(Key, Value) :-
    (   nb_current(ms_rlm, Facts), get_dict(Key, Facts, V)
    ->  Value = V
    ;   throw(effect_error(rlm, refused, "the RLM API is only available inside the rlm graph"))
    ).

context_length(N) :-
    rlm_fact(context_length, N).

context_prefix(P) :-
    rlm_fact(prefix, P).

context_slice(From, Len, Text) :-
    must_be(nonneg, From),
    must_be(positive_integer, Len),
    max_slice_bytes(Max),
    (   Len =< Max -> true
    ;   domain_error(slice_length_at_most(Max), Len)
    ),
    current_env(Env),
    get_dict(context_file, Env, File),
    (   string(File) -> true
    ;   throw(effect_error(rlm, refused, "the task has no context_file"))
    ),
    workspace_read(File, From, Len, Text, _Size).

%!  workspace_read(+File, +Offset, +Limit, -Content, -Size) is det.
%
%   The one place that knows the host's workspace.read tool: arguments
%   {"path", "offset", "limit"} (bytes), result {"content", "size"[,
%   "encoding"]} where size is the file's total size in bytes. A piece that
%   is not valid UTF-8 (a slice that cuts a character in two) comes back
%   base64-encoded; it is decoded here, dropping the partial characters at
%   its edges, so the model always gets text.
:- public workspace_read/5.
workspace_read(File, Offset, Limit, Content, Size) :-
    tool('workspace.read', _{path: File, offset: Offset, limit: Limit}, R),
    (   is_dict(R), get_dict(content, R, C0), string(C0),
        get_dict(size, R, Size), integer(Size)
    ->  (   get_dict(encoding, R, "base64")
        ->  base64_text(C0, Content)
        ;   Content = C0
        )
    ;   throw(effect_error(tool, other, "workspace.read answered without content and size"))
    ).

base64_text(B64, Text) :-
    base64(Raw, B64),
    atom_codes(Raw, Bytes0),
    drop_continuations(Bytes0, Bytes1),
    reverse(Bytes1, Rev0),
    drop_partial_tail(Rev0, Rev),
    reverse(Rev, Bytes),
    (   phrase(utf8_codes(Codes), Bytes)
    ->  true
    ;   maplist(byte_or_replacement, Bytes, Codes)
    ),
    string_codes(Text, Codes).

drop_continuations([B|Bs], Out) :- B >= 0x80, B < 0xC0, !, drop_continuations(Bs, Out).
drop_continuations(Bs, Bs).

%   Rev is the bytes in reverse: drop trailing continuation bytes and the
%   lead byte of a sequence they do not complete.
drop_partial_tail(Rev, Out) :-
    take_continuations(Rev, 0, N, Rest),
    (   Rest = [Lead|Rest1], Lead >= 0xC0
    ->  (   Lead >= 0xF0 -> Need = 3 ; Lead >= 0xE0 -> Need = 2 ; Need = 1 ),
        (   N >= Need -> Out = Rev ; Out = Rest1 )
    ;   Out = Rev
    ).

take_continuations([B|Bs], N0, N, Rest) :-
    B >= 0x80, B < 0xC0, !,
    N1 is N0 + 1,
    take_continuations(Bs, N1, N, Rest).
take_continuations(Rest, N, N, Rest).

byte_or_replacement(B, C) :- ( B < 0x80 -> C = B ; C = 0xFFFD ).

llm_query(Prompt, Answer) :-
    (   ( string(Prompt) ; atom(Prompt) ) -> true ; type_error(text, Prompt) ),
    atom_length(Prompt, L),
    max_sub_prompt_chars(Max),
    (   L =< Max -> true
    ;   domain_error(prompt_of_at_most_chars(Max), L)
    ),
    format(string(User), "[rlm sub] ~w", [Prompt]),
    model_call([ system("You answer one focused question about a piece of text. Reply with the answer only."),
                 user(User)
               ], [], Reply),
    get_dict(text, Reply, Text),
    max_sub_answer_chars(MaxA),
    truncate_text(Text, MaxA, Answer).

spirit(Graph, Input, Answer) :-
    ms_runtime:spirit(Graph, Input, Answer).

final(Answer) :-
    (   atomic(Answer) -> S = Answer          % truncate_text/3 cuts it without a copy
    ;   ms_rlm:shown_term(Answer, Shown),
        format(string(S), "~W", [Shown, [quoted(true), max_depth(50), portray(false)]])
    ),
    max_final_chars(Max),
    truncate_text(S, Max, Short),
    nb_setval(ms_rlm_final, answer(Short)).
