package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/taskhost/taskhost/cmd/taskhost/internal/bench"
	"github.com/taskhost/taskhost/host/config"
)

func benchCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	steps := fs.Int("steps", 200, "steps timed for the durable step overhead")
	reps := fs.Int("reps", 10, "repetitions of the crash, cancel and start measurements; twice as many one-step tasks per client and round of the short-task rows")
	sizes := fs.String("recovery-sizes", "10000,100000", "store sizes (tasks) for start-up recovery, comma-separated; empty skips it")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	storeDriver := fs.String("store", config.StoreSQLite, "the store to measure: sqlite (a temporary file) or postgres (the database in --dsn-env; its tasks stay there)")
	dsnEnv := fs.String("dsn-env", "TASKHOST_BENCH_POSTGRES", "with --store postgres: the environment variable holding the DSN of a database for benchmarks")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: taskhost bench [flags]\n\nMeasures, on a temporary data dir with the test executor: the durable step\noverhead against a floor measured in the same run (one go-plugin round trip\nplus one store commit), plugin SIGKILL → interrupted, cancel latency, plugin\nstart, one-step tasks with and without pre-started plugins, a machinespirit\nnode step and start-up recovery. Medians and p95s.\n\nFlags:")
		fs.PrintDefaults()
	}
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	recSizes, err := recoverySizes(*sizes)
	if err != nil {
		errorf(e, "bench: --recovery-sizes: %v", err)
		return exitUsage
	}
	if *steps < 10 || *steps > 100000 || *reps < 1 || *reps > 1000 {
		errorf(e, "bench: --steps must be 10..100000 and --reps 1..1000")
		return exitUsage
	}
	st, err := benchStore(*storeDriver, *dsnEnv)
	if err != nil {
		errorf(e, "bench: %v", err)
		return exitUsage
	}
	execDir, err := benchExecutorDir()
	if err != nil {
		errorf(e, "bench: %v", err)
		return exitUnavailable
	}
	r, err := bench.Run(ctx, bench.Options{
		ExecutorDir: execDir, Steps: *steps, Reps: *reps, RecoverySizes: recSizes, Store: st,
		Progress: func(s string) { fmt.Fprintln(e.stderr, "bench:", s) },
	})
	if err != nil {
		errorf(e, "bench: %v", err)
		return exitUnavailable
	}
	if *jsonOut {
		data, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintln(e.stdout, string(data))
		return exitOK
	}
	printBench(e.stdout, r)
	return exitOK
}

func round(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	default:
		return d.Round(10 * time.Microsecond).String()
	}
}

// recoverySizes parses --recovery-sizes: store sizes from 1 to 1,000,000,
// comma-separated; empty is none.
func recoverySizes(list string) ([]int, error) {
	sizes := []int{}
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1_000_000 {
			return nil, fmt.Errorf("%q is not a size from 1 to 1000000", f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// benchStore is the store --store names: a temporary SQLite file, or the
// PostgreSQL database whose DSN is in the variable dsnEnv.
func benchStore(driver, dsnEnv string) (config.Store, error) {
	st := config.Default().Store
	switch driver {
	case config.StoreSQLite:
	case config.StorePostgres:
		if os.Getenv(dsnEnv) == "" {
			return st, fmt.Errorf("--store postgres: the environment variable %s (--dsn-env) is unset or empty: set it to the DSN of a database for benchmarks", dsnEnv)
		}
		st.Driver, st.DSNEnv = config.StorePostgres, dsnEnv
	default:
		return st, fmt.Errorf("--store must be sqlite or postgres, not %q", driver)
	}
	return st, nil
}

// benchExecutorDir is the directory holding the test executor: beside the
// binary, or in test/ below it, where make build keeps it out of the
// daemon's executor directory.
func benchExecutorDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(exe)
	if _, err := os.Stat(filepath.Join(dir, "taskhost-executor-testexec")); err != nil {
		if _, err := os.Stat(filepath.Join(dir, "test", "taskhost-executor-testexec")); err == nil {
			dir = filepath.Join(dir, "test")
		}
	}
	return dir, nil
}

// printBench prints the report as a table and the ratios against their
// targets.
func printBench(w io.Writer, r bench.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tN\tMEDIAN\tP95\tNOTE")
	for _, f := range r.Figures {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", f.Name, f.N, round(f.Median), round(f.P95), f.Note)
	}
	tw.Flush()
	if r.StepRatioNormal > 0 {
		fmt.Fprintf(w, "\ndurable step / floor = %.2f at synchronous=FULL (target ≤ 1.5), %.2f at NORMAL (target ≤ 2)\n", r.StepRatio, r.StepRatioNormal)
	} else {
		fmt.Fprintf(w, "\ndurable step / floor = %.2f (target ≤ 1.5)\n", r.StepRatio)
	}
	if r.ConcurrentThroughput > 0 {
		fmt.Fprintf(w, "steps/s of 4 tasks at once = %.2f× one task's (target ≥ 3, on PostgreSQL ≥ 2.5), of 16 = %.2f× (target ≥ 4)\n", r.ConcurrentThroughput, r.ConcurrentThroughput16)
	}
	if r.FleetThroughput > 0 {
		fmt.Fprintf(w, "steps/s of 12 tasks over 3 hosts of one store = %.2f× on one host (target ≥ 1)\n", r.FleetThroughput)
	}
	if r.ShortTaskRatio > 0 {
		fmt.Fprintf(w, "one-step tasks with pre-started plugins = %.0f/s, %.2f× without (target ≥ 100/s and ≥ 4×)\n", r.ShortTasksPerSecond, r.ShortTaskRatio)
	}
	if r.HistoryRatio > 0 {
		fmt.Fprintf(w, "one-step tasks on a store with a history = %.2f× on an empty one (history must not slow them)\n", r.HistoryRatio)
	}
}
