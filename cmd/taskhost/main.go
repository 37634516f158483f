// Command taskhost runs persistent, resumable, bounded agent tasks: as a
// daemon (serve) driven by the same binary over its API, or in the
// foreground for one task (run: the daemon in this process, on a private
// socket, driven over the same API).
//
// Usage:
//
//	taskhost serve [--config FILE] [--log-format json|text]   run the daemon
//	taskhost task create --goal TEXT [--executor NAME] [--watch]
//	taskhost task list [--status S,...]
//	taskhost task status|cancel|resume|watch ID
//	taskhost approvals list [--status S]
//	taskhost approve ID | taskhost reject ID
//	taskhost mcp                                           an MCP server on stdio for an outside agent
//	taskhost executors
//	taskhost demo [--interactive]                          the guided demo
//	taskhost run --goal TEXT [--executor NAME] [flags]     one task in the foreground
//	taskhost run --resume ID [flags]                       resume an interrupted task
//	taskhost inspect [ID] [--json]                         read tasks from the store
//	taskhost backup DIR                                    the store and host.key, while it runs
//	taskhost restore DIR --data-dir NEW                    a backup into a new data dir
//	taskhost token hash < TOKEN-FILE                       the SHA-256 for [api.tokens]
//	taskhost completion bash|zsh|fish                      a shell completion script
//	taskhost version
//
// Every client command takes --json. Run 'taskhost COMMAND --help' for a
// command's flags; docs/cli.md documents each with its JSON shape.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/taskhost/taskhost/internal/confine"
)

// Exit codes. Scripts may rely on them.
const (
	exitOK          = 0 // the task completed / the command succeeded
	exitFailed      = 1 // the task failed or was cancelled
	exitUsage       = 2 // bad flags or arguments
	exitNotFound    = 3 // no such task
	exitConflict    = 4 // the task is not in a state that allows this
	exitUnavailable = 5 // executor or store unavailable, data dir locked
	exitInterrupted = 6 // the task was interrupted; resume it with --resume
	exitDenied      = 7 // the daemon refused the caller (unknown uid, bad token)
	exitSignal      = 130
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

// env is what a command may touch of the process.
type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader

	// jsonErrors: the command line has --json, so errorf holds its
	// messages in failures for finish to report as one JSON object;
	// jsonFailed: the command already wrote that object.
	jsonErrors bool
	jsonFailed bool
	failures   []string

	// describe, when set, makes the command fill it in instead of running:
	// its flags and usage line as its parser holds them, or a group's
	// subcommands (shell completion's source, see describeCommand).
	describe *cmdSpec
}

func commands() []command {
	return []command{
		{"serve", "run the daemon: the API on DATA-DIR/taskhost.sock", serveCmd},
		{"task", "create, list, show, cancel, resume or watch tasks (through the daemon)", taskCmd},
		{"approvals", "list approvals (through the daemon)", approvalsCmd},
		{"approve", "approve a pending approval", approveCmd},
		{"reject", "reject a pending approval", rejectCmd},
		{"mcp", "serve the Model Context Protocol on stdio for an outside agent (as you, through the daemon)", mcpCmd},
		{"executors", "list executors: version, pin, preflight", executorsCmd},
		{"status", "is the daemon up: version, store, executors, model, task counts", statusCmd},
		{"hosts", "list the hosts sharing the store: heartbeat age, tasks owned, live or lost", hostsCmd},
		{"demo", "run the demo on a temporary data dir", demoCmd},
		{"run", "run one task in the foreground (or --resume one)", runCmd},
		{"inspect", "print tasks, or one task with its attempts, from the store (read-only)", inspectCmd},
		{"backup", "back up the store and the host key into a new directory (safe while the daemon runs)", backupCmd},
		{"restore", "restore a backup into a new data dir and verify its checkpoints", restoreCmd},
		{"bench", "measure step overhead, crash and cancel latency, plugin start, recovery", benchCmd},
		{"token", "token hash: print the SHA-256 of a token read from stdin, for [api.tokens]", tokenCmd},
		{"completion", "print a shell completion script: bash, zsh or fish", completionCmd},
		{"version", "print the version", versionCmd},
	}
}

const version = "0.1.0"

func main() {
	// First: in the plugin-trampoline role this applies the confinement
	// and execs the plugin; otherwise it returns at once.
	confine.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go exitAfterSignal(ctx, os.Stderr, os.Args[1:])
	os.Exit(dispatch(ctx, &env{stdout: os.Stdout, stderr: os.Stderr, stdin: os.Stdin}, os.Args[1:]))
}

func dispatch(ctx context.Context, e *env, args []string) int {
	e.jsonErrors = wantsJSON(args)
	return e.finish(dispatchCommand(ctx, e, args))
}

func dispatchCommand(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	errorf(e, "unknown command %q", args[0])
	if !e.jsonErrors {
		fmt.Fprintln(e.stderr)
		usage(e.stderr)
	}
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "taskhost runs persistent, resumable, bounded agent tasks.")
	fmt.Fprintln(w, "\nUsage: taskhost COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'taskhost COMMAND --help' for a command's flags.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 task failed or cancelled, 2 usage, 3 not found, 4 conflict, 5 unavailable,")
	fmt.Fprintln(w, "6 interrupted, 7 refused (unknown principal or bad token), 130 stopped by Ctrl-C.")
}

func versionCmd(_ context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, `print {"version": ..., "go": ...}`)
	fs.Usage = usageFunc(fs, "taskhost version [--json]", "Prints taskhost's version and the Go release it was built with.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if *jsonOut {
		newPrinter(e, true).emit(map[string]string{"version": version, "go": runtime.Version()})
		return exitOK
	}
	fmt.Fprintln(e.stdout, "taskhost", version)
	return exitOK
}

// errorf prints a one-line error for the user; with --json it is held for
// finish, which reports the command's failure as one JSON object.
func errorf(e *env, format string, args ...any) {
	if e.jsonErrors {
		e.failures = append(e.failures, fmt.Sprintf(format, args...))
		return
	}
	fmt.Fprintf(e.stderr, "taskhost: "+format+"\n", args...)
}

var errUsage = errors.New("usage")
