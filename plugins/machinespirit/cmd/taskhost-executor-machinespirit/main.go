// Command taskhost-executor-machinespirit is the MACHINE-SPIRIT executor
// plugin: a Prolog graph/effect runtime on a pinned SWI-Prolog. The host
// starts it with the pinned runtime from its configuration:
//
//	taskhost-executor-machinespirit --swipl /usr/bin/swipl --swipl-version 9.0.4 \
//	    [--graphs-dir DIR --graph-pin NAME=SHA256 ...] [--handler-module PATH=SHA256 ...] [--checkpoint-max-bytes N] \
//	    [--start state|source] [--state-cache-dir DIR] [--worker-memory-mb N] [--worker-cpu-seconds N] \
//	    [--trampoline PATH] [--rlm-goal-mode] [--max-parallel-model-calls N]
//
// A failed preflight does not stop the plugin: Describe reports
// Runtime["preflight"] = "failed: ..." and every step is refused, so the
// host can say why it refuses the executor.
//
// Exit statuses: 0 when the host stops the plugin, 2 on bad flags, 4 when
// the Prolog worker died during a step (the host records the attempt as
// interrupted, executor_crashed), 3 when the host died (from the SDK).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/internal/confine"
	"github.com/taskhost/taskhost/plugins/machinespirit"
	"github.com/taskhost/taskhost/sdk"
)

// exitWorkerLost is the exit status after the worker died mid-step.
const exitWorkerLost = 4

func main() {
	// First: it is the trampoline of its own confined Prolog worker.
	confine.Main()
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "taskhost-executor-machinespirit:", err)
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "machinespirit", Level: hclog.Info, Output: stderr, JSONFormat: true})
	cfg.Logger = logger

	// The executor is created before OnWorkerLost can refer to it; the
	// callback only runs during a step, long after.
	var ex *machinespirit.Executor
	cfg.OnWorkerLost = func(err error) {
		// Exiting while the Step call is in flight is what makes the host
		// classify the attempt as crashed (interrupted) rather than failed:
		// a dead worker says nothing about the task, only about this run.
		logger.Error("the Prolog worker died during a step; exiting so the host records an interrupted attempt", "error", err)
		ex.Close()
		os.Exit(exitWorkerLost)
	}
	// The preflight (swipl's version, the saved state, the worker's
	// hello) runs while sdk.Serve does the handshake with the host; the
	// host's first Describe waits for it.
	ex = machinespirit.Start(context.Background(), cfg)

	// On SIGTERM the SDK cancels the running step (the worker is signalled,
	// then killed) and ends the process; the worker dies with it
	// (Pdeathsig), and the runtime's temp dir is swept by the next plugin
	// that starts.
	sdk.Serve(ex)
	ex.Close()
	return 0
}

// pinFlag collects repeated --graph-pin NAME=SHA256 flags.
type pinFlag map[string]string

func (p pinFlag) String() string { return fmt.Sprint(map[string]string(p)) }

func (p pinFlag) Set(v string) error {
	name, sum, ok := strings.Cut(v, "=")
	if !ok || name == "" || sum == "" {
		return errors.New("want NAME=SHA256")
	}
	if _, dup := p[name]; dup {
		return fmt.Errorf("graph %q pinned twice", name)
	}
	p[name] = sum
	return nil
}

// moduleFlag collects repeated --handler-module PATH=SHA256 flags; the
// preflight checks the path, the pin and the bounds.
type moduleFlag []machinespirit.HandlerModule

func (m *moduleFlag) String() string { return fmt.Sprint([]machinespirit.HandlerModule(*m)) }

func (m *moduleFlag) Set(v string) error {
	// The last '=': a path may hold one, a SHA-256 never does.
	i := strings.LastIndexByte(v, '=')
	if i <= 0 || i == len(v)-1 {
		return errors.New("want PATH=SHA256")
	}
	path, sum := v[:i], v[i+1:]
	*m = append(*m, machinespirit.HandlerModule{Path: path, SHA256: sum})
	return nil
}

func parseFlags(args []string, stderr io.Writer) (machinespirit.Config, error) {
	fs := flag.NewFlagSet("taskhost-executor-machinespirit", flag.ContinueOnError)
	fs.SetOutput(stderr) // stdout belongs to go-plugin's handshake
	var cfg machinespirit.Config
	pins := pinFlag{}
	fs.StringVar(&cfg.SwiplPath, "swipl", "", "absolute path of the pinned swipl binary")
	fs.StringVar(&cfg.SwiplVersion, "swipl-version", "", "the exact pinned SWI-Prolog version, X.Y.Z")
	fs.StringVar(&cfg.GraphsDir, "graphs-dir", "", "directory of operator graphs NAME.pl")
	fs.Var(pins, "graph-pin", "NAME=SHA256 of an operator graph file (repeatable)")
	fs.IntVar(&cfg.CheckpointMaxBytes, "checkpoint-max-bytes", machinespirit.DefaultCheckpointMaxBytes, "bound of a checkpoint payload")
	mode := fs.String("start", string(machinespirit.StartFromState), "worker start: state (saved state) or source")
	fs.StringVar(&cfg.StateCacheDir, "state-cache-dir", "", "absolute directory that keeps the built saved state across starts (empty: build it at every start)")
	memMB := fs.Int64("worker-memory-mb", machinespirit.DefaultWorkerMemoryBytes>>20, "the Prolog worker's address space (RLIMIT_AS), MiB")
	fs.StringVar(&cfg.Trampoline, "trampoline", "", "absolute path of the binary that confines the worker (the host's taskhost-confine; empty: this binary)")
	fs.Int64Var(&cfg.WorkerCPUSeconds, "worker-cpu-seconds", machinespirit.DefaultWorkerCPUSeconds, "the Prolog worker's CPU time (RLIMIT_CPU), seconds")
	fs.BoolVar(&cfg.RLMGoalMode, "rlm-goal-mode", false, "also register the rlm_goals graph, whose root model writes Prolog goals run behind an allow-list (off: the rlm graph reads typed JSON plans only)")
	fs.Var((*moduleFlag)(&cfg.HandlerModules), "handler-module", "PATH=SHA256 of an operator handler module (repeatable, at most 16)")
	fs.IntVar(&cfg.MaxParallelModelCalls, "max-parallel-model-calls", machinespirit.DefaultMaxParallelModelCalls, "model calls of one step in flight at once (1..16)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Trampoline != "" && !filepath.IsAbs(cfg.Trampoline) {
		return cfg, fmt.Errorf("--trampoline %q: must be an absolute path", cfg.Trampoline)
	}
	cfg.GraphPins = pins
	cfg.StartMode = machinespirit.StartMode(*mode)
	// The preflight checks the bounds and names the limit and the value.
	if *memMB < 0 || *memMB > machinespirit.MaxWorkerMemoryBytes>>20 {
		return cfg, fmt.Errorf("--worker-memory-mb %d: must be between %d and %d", *memMB, machinespirit.MinWorkerMemoryBytes>>20, machinespirit.MaxWorkerMemoryBytes>>20)
	}
	cfg.WorkerMemoryBytes = *memMB << 20
	return cfg, nil
}
