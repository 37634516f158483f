/*  MACHINE-SPIRIT worker: the JSON-lines protocol with the Go plugin.

    The worker talks to exactly one party, the plugin that started it, over
    two pipes of its own: file descriptor 3 carries frames to the plugin,
    file descriptor 4 frames from the plugin. Every frame is one JSON
    object on one line, with a "type" field.

    The standard streams carry no frames: stdout and stderr go to the
    plugin's bounded log, stdin is empty. Whatever library code prints, or
    a test handler writes to user_output, is a log line, never a frame;
    model goals cannot write at all (rlm_check.pl). The aliases
    user_output/user_input (and current_output/current_input of every
    thread created later) point at stderr and an empty stream.

    Frames are bounded (the plugin passes the bound on the command line) in
    both directions: an over-long frame from the plugin is a protocol
    violation that ends the worker; an over-long frame to the plugin is
    never written, its sender gets a frame_too_large exception instead.
*/
:- module(ms_protocol,
          [ protocol_init/0,
            read_frame/1,           % -Frame (dict) or eof
            send_frame/1,           % +Frame (dict)
            frame_text/2,           % +Frame, -Text
            utf8_bytes/2,           % +Text, -Bytes
            within_bytes/3,         % +Text, +Max, -Bytes
            truncate_text/3,        % +Text, +MaxChars, -String
            error_text/2,           % +Error, -Message
            max_frame_bytes/1,      % -Bytes
            protocol_version/1      % -Version
          ]).
:- use_module(library(http/json)).
:- use_module(library(readutil)).
:- use_module(library(lists)).

% protocol_version/1 is what the hello frame announces; the plugin refuses
% a worker speaking another version.

protocol_version(1).

%!  protocol_init is det.
%
%   Parses the command-line options the plugin passes after `--`, stores
%   them as Prolog flags (visible to every thread), opens the protocol's
%   pipes and rebinds the standard streams as described in the module
%   header.
protocol_init :-
    current_prolog_flag(argv, Argv),
    option_value(Argv, '--max-frame-bytes=', 1048576, MaxFrame),
    option_value(Argv, '--stack-limit-bytes=', 536870912, Stack),
    option_value(Argv, '--task-stack-limit-bytes=', 268435456, TaskStack),
    option_value(Argv, '--rlm-goal-mode=', 0, GoalMode),
    create_prolog_flag(ms_rlm_goal_mode, GoalMode, [type(integer), keep(false)]),
    create_prolog_flag(ms_max_frame_bytes, MaxFrame, [type(integer), keep(false)]),
    create_prolog_flag(ms_task_stack_limit, TaskStack, [type(integer), keep(false)]),
    set_prolog_flag(stack_limit, Stack),
    % bom(false): a BOM check would read from the pipe before the hello.
    open('/proc/self/fd/3', write, _, [encoding(utf8), buffer(full), alias(protocol_out)]),
    open('/proc/self/fd/4', read, _, [encoding(utf8), bom(false), alias(protocol_in)]),
    set_stream(user_error, alias(user_output)),
    open_string("", Empty),
    set_stream(Empty, alias(user_input)),
    set_output(user_error),
    set_input(Empty).

option_value(Argv, Prefix, Default, Value) :-
    (   member(Arg, Argv),
        atom_concat(Prefix, Text, Arg),
        atom_number(Text, N),
        integer(N), N > 0
    ->  Value = N
    ;   Value = Default
    ).

max_frame_bytes(N) :-
    current_prolog_flag(ms_max_frame_bytes, N).

%!  read_frame(-Frame) is det.
%
%   Reads one frame from the plugin: a dict whose `type` is an atom, or
%   the atom `eof` when the plugin closed its end of the pipe. Throws
%   protocol(Code, Message) on anything else; the caller ends the worker.
read_frame(Frame) :-
    read_line_to_string(protocol_in, Line),
    (   Line == end_of_file
    ->  Frame = eof
    ;   string_length(Line, Len),
        max_frame_bytes(Max),
        (   Len > Max
        ->  format(string(Msg), "frame of ~d characters exceeds the ~d-byte limit", [Len, Max]),
            throw(protocol(frame_too_large, Msg))
        ;   true
        ),
        parse_frame(Line, Frame)
    ).

% parse_frame/2 insists on exactly one JSON object per line: trailing
% garbage after the object is as malformed as a broken object.
parse_frame(Line, Frame) :-
    catch(setup_call_cleanup(
              open_string(Line, S),
              ( json_read_dict(S, Dict, [value_string_as(string), end_of_file(eof)]),
                skip_blanks(S),
                peek_char(S, C)
              ),
              close(S)),
          E,
          ( error_text(E, Msg), throw(protocol(malformed, Msg)) )),
    (   C \== end_of_file
    ->  throw(protocol(malformed, "trailing data after the JSON object"))
    ;   is_dict(Dict), get_dict(type, Dict, TypeS), string(TypeS)
    ->  atom_string(Type, TypeS),
        put_dict(type, Dict, Type, Frame)
    ;   throw(protocol(malformed, "a frame must be a JSON object with a string \"type\""))
    ).

skip_blanks(S) :-
    peek_char(S, C),
    (   C \== end_of_file, char_type(C, space)
    ->  get_char(S, _), skip_blanks(S)
    ;   true
    ).

%!  error_text(+Error, -Message) is det.
%
%   A bounded, human-readable rendering of an exception term.
error_text(E, Msg) :-
    (   catch(message_to_string(E, Msg0), _, fail)
    ->  true
    ;   format(string(Msg0), "~q", [E])
    ),
    truncate_text(Msg0, 500, Msg).

%!  send_frame(+Frame) is det.
%
%   Writes Frame as one line, atomically with respect to other threads
%   (the task thread sends effects and results while the main thread
%   answers pings). Throws frame_too_large(Bytes, Max) instead of writing
%   an over-long frame.
send_frame(Frame) :-
    frame_text(Frame, Text),
    max_frame_bytes(Max),
    (   within_bytes(Text, Max, _)
    ->  with_mutex(ms_protocol_out,
                   ( write(protocol_out, Text),
                     nl(protocol_out),
                     flush_output(protocol_out)
                   ))
    ;   utf8_bytes(Text, Bytes),
        throw(frame_too_large(Bytes, Max))
    ).

%!  frame_text(+Frame, -Text) is det.
%
%   width(0) keeps the JSON on one line: newlines inside strings are
%   escaped by the writer, so a frame never spans two lines.
frame_text(Frame, Text) :-
    atom_json_dict(Text, Frame, [width(0), as(string)]).

%!  within_bytes(+Text, +Max, -Bytes) is semidet.
%
%   True when Text's UTF-8 form has at most Max bytes; Bytes is its size
%   when it had to be counted. A character takes 1 to 4 bytes, so most
%   texts are decided by their length alone, without encoding them.
within_bytes(Text, Max, Bytes) :-
    string_length(Text, Chars),
    (   Chars * 4 =< Max
    ->  Bytes = Chars
    ;   Chars > Max
    ->  Bytes = Chars, fail
    ;   utf8_bytes(Text, Bytes),
        Bytes =< Max
    ).

%!  utf8_bytes(+Text, -Bytes) is det.
%
%   The UTF-8 length of Text: the plugin bounds frames in bytes.
utf8_bytes(Text, Bytes) :-
    setup_call_cleanup(
        open_null_stream(S),
        ( set_stream(S, encoding(utf8)),
          write(S, Text),
          byte_count(S, Bytes)
        ),
        close(S)).

%!  truncate_text(+Text, +Max, -String) is det.
%
%   Text (any atomic or string) cut to at most Max characters, with a note
%   of how much was cut so a reader (or a model) knows it saw a part.
truncate_text(Text, Max, String) :-
    (   string(Text) -> S0 = Text, string_length(S0, Len)
    ;   atomic(Text) -> S0 = Text, atom_length(S0, Len)   % no copy of a long atom
    ;   format(string(S0), "~q", [Text]), string_length(S0, Len)
    ),
    (   Len =< Max
    ->  atom_string(S0, String)
    ;   Max < 60
    ->  sub_string(S0, 0, Max, _, String)
    ;   Keep is Max - 40,
        sub_string(S0, 0, Keep, _, Head),
        format(string(String), "~s... [~d more chars]", [Head, Len - Keep])
    ).
