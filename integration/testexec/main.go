// Command testexec is a scriptable executor for taskhost's tests. It is
// built only with the SDK, as any third-party executor would be: kind
// "testexec", version "1.0.0", checkpoint schema "testexec/1".
//
// A task's spec scripts it:
//
//	{"goal": "...", "testexec": {"steps": 3, "sleep_ms": 100}}
//
// Unknown fields, at either level, fail the step with
// Fail("executor_failed", "testexec: spec: ...") naming the field. Every
// field of "testexec" is optional:
//
//	steps             int     complete after this many successful steps (default 1).
//	                          The checkpoint payload is {"done": n}; each step
//	                          reads it, increments n and returns Continue("step n")
//	                          or, at n == steps, Complete("done after n steps",
//	                          {"steps": n}).
//	sleep_ms          int     sleep this long inside each step, honouring ctx.
//	cancel_marker     string  a file path; when ctx is cancelled during a step, the
//	                          step writes "cancelled attempt=N" there before
//	                          returning.
//	pid_file          string  at the start of each step, write the process pid to
//	                          this file (atomically) and append "attempt N started"
//	                          to <pid_file>.log.
//	exit_at_attempt   int     at attempt K, os.Exit(7) at the start of the step.
//	kill_at_attempt   int     at attempt K, SIGKILL the process itself ...
//	kill_after_ms     int     ... after sleeping this long (requires kill_at_attempt).
//	kill_every_attempt bool   SIGKILL the process at every attempt (crash loops).
//	sleep_at_attempt  int     at attempt K sleep long_sleep_ms instead of sleep_ms.
//	long_sleep_ms     int     see sleep_at_attempt.
//	misbehave_at_step int     confine checkpoint_bytes and bad_schema to step n.
//	model_calls       int     call host.CallModel this many times per step; on an
//	                          error, return Continue("model error: <kind>").
//	model_chain       bool    make each model call a sub-call of the previous one
//	                          (depth 0, 1, 2, ...).
//	parent_token      string  a parent call token to claim (a lying executor).
//	parallel_model_calls int  after model_calls, make this many host.CallModel
//	                          calls at once (0..32), each its own prompt; on
//	                          an error, return Continue("model error: <kind>")
//	                          once all have returned.
//	env_file          string  write the process environment to this file.
//	wait_file         string  before a step ends, wait (honouring ctx) until this
//	                          file exists.
//	wait_first        bool    wait for wait_file at the start of the step instead.
//	call_tool_first   object  like call_tool, called before it each step.
//	kill_after_tool_at_attempt int  at attempt K, SIGKILL the process right after
//	                          call_tool returned.
//	approve_retry     bool    when the request lists unsettled effects, ask an
//	                          approval first; without it they are re-issued as
//	                          they come (a careless third-party executor).
//	indeterminate_file string each step, write the request's unsettled effects
//	                          there, one "attempt seq kind status" line each.
//	naive_call        object  {"name": ..., "args": {...}}: each step n, re-issue
//	                          every unsettled tool call the request lists (key
//	                          "call-K") and then call K = n, "{n}" in the args
//	                          replaced by K, under key "call-K"; refusals and
//	                          errors are ignored and the step moves on (a naive
//	                          executor the host must hold back).
//	naive_memory      string  a file: remember there every call the request ever
//	                          listed unsettled and re-issue it every step until
//	                          a re-issue succeeds (requires naive_call).
//	request_approval  bool    call host.RequestApproval each step.
//	call_tool         object  {"name": ..., "args": {...}}: call the tool each
//	                          step; on an error, Continue("tool error: <kind>").
//	panic_at_attempt  int     at attempt K, panic("testexec: scripted panic").
//	ignore_ctx        bool    sleep sleep_ms ignoring ctx, and ignore SIGTERM from
//	                          the start of the step on.
//	spawn_grandchild  bool    once per process, start "sleep 300" holding the
//	                          plugin's stderr and write its pid to
//	                          <pid_file>.grandchild (requires pid_file).
//	checkpoint_bytes  int     pad the checkpoint payload to this many bytes.
//	result_bytes      int     pad the result to this many bytes.
//	bad_schema        bool    return checkpoints with schema "testexec/999".
//	progress          bool    call host.Progress("step n") each step; a host
//	                          without the service (ErrUnimplemented) is fine.
//	call_model        bool    call host.CallModel once per step; on an error,
//	                          return Continue("model error: <kind>") keeping the
//	                          checkpoint, where kind is unimplemented,
//	                          permission_denied, budget_exhausted,
//	                          invalid_argument, host_unavailable or other.
//	log_warn          string  log this at WARN through sdk.Logger each step
//	                          (with a forged "task" field the host must rename).
//	stderr_lines      int     write this many plain lines to os.Stderr each step.
//	log_lines         int     log this many lines at INFO through sdk.Logger each step.
//	model_error_text  bool    with call_model, return Continue("model error:
//	                          <kind>: <sdk.ModelError kind or none>: <error>")
//	                          instead, for the exact text an executor sees.
//	hog_memory_mb     int     at the start of each step (after wait_first's
//	                          wait), allocate this many MiB,
//	                          touching every page, and hold them while the
//	                          process lives (a memory hog).
//	fork_processes    int     at the start of each step, start this many
//	                          "sleep 300" children and hold them while the process
//	                          lives (a fork loop); a refused fork is tried again
//	                          every millisecond for 2 s, then the step fails
//	                          ("testexec: fork refused after N children: ...").
//	fill_tmp_mb       int     each step, after fork_processes, write this many
//	                          MiB to a new file in $TMPDIR (a disk filler); a
//	                          failed write fails the step ("testexec:
//	                          fill_tmp_mb: ...").
//
// Attempts count from 1 across the task's life (the host's attempt index);
// steps count completed steps from the checkpoint.
//
// The -startup flag makes the plugin misbehave before the go-plugin
// handshake, for the host's registration tests:
//
//	-startup=noise         print a line to stdout before serving
//	-startup=hang          never serve
//	-startup=exit          exit with status 2 before serving
//	-startup=badhandshake  print the malformed handshake line
//	                       "1|<protocol>|tcp|nonsense|grpc" and hang ("badcookie" is
//	                       the same: the cookie itself is checked by
//	                       go-plugin, not by the plugin's code)
//
// Without it, testexec serves normally.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its inputs explicit, so tests can run it in a helper
// process. stderr is kept as it is before Serve: go-plugin replaces
// os.Stderr with a pipe of its own, and a spawned grandchild must hold the
// real one.
func run(args []string, stdout io.Writer, stderr *os.File) int {
	mode, err := parseStartup(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "testexec:", err)
		return 2
	}
	switch mode {
	case "noise":
		fmt.Fprintln(stdout, "testexec: this line breaks the go-plugin handshake")
	case "hang":
		fmt.Fprintln(stderr, "testexec: hanging before the handshake")
		hang()
	case "exit":
		fmt.Fprintln(stderr, "testexec: exiting before the handshake")
		return 2
	case "badhandshake", "badcookie":
		fmt.Fprintf(stdout, "1|%d|tcp|nonsense|grpc\n", executorpb.ProtocolVersion)
		hang()
	}
	sdk.Serve(&executor{stderr: stderr})
	return 0
}

// parseStartup reads the command line.
func parseStartup(args []string, stderr io.Writer) (string, error) {
	fs := flag.NewFlagSet("testexec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("startup", "", "misbehave before the handshake: noise, hang, exit, badhandshake (or badcookie)")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch *mode {
	case "", "noise", "hang", "exit", "badhandshake", "badcookie":
		return *mode, nil
	}
	return "", errors.New("-startup: unknown mode " + *mode)
}

// hang blocks forever without tripping the runtime's deadlock detector,
// which an empty select would in a process with nothing else running.
func hang() {
	for {
		time.Sleep(time.Hour)
	}
}
