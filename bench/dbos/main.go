// Command dbos-bench times a durable no-op step of DBOS Transact Go next to
// taskhost's, in one run, on the same modernc SQLite with the same
// settings (WAL, busy_timeout, synchronous FULL then NORMAL):
//
//   - dbos: one RunAsStep of a function that returns at once, inside a
//     workflow — DBOS records the step's output in its system database
//     before RunAsStep returns;
//   - taskhost store: one FinishAndClaim — the outcome of an attempt and
//     the claim of the next, with their events, one commit — the store
//     part of a taskhost step;
//   - taskhost step (with -executors): one whole durable step of the test
//     executor's no-op step through a real plugin process (gRPC round
//     trip, verdict, the commit), as `taskhost bench` measures it.
//
// It prints the medians and the ratios of each taskhost row to DBOS's at
// the same synchronous mode. It is a separate module so that DBOS never
// becomes a dependency of taskhost; see README.md.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
)

func main() {
	steps := flag.Int("steps", 300, "durable steps timed per row (10..100000)")
	executors := flag.String("executors", "", "directory holding taskhost and taskhost-executor-testexec (make build's bin/); empty skips the plugin step row")
	flag.Parse()
	if *steps < 10 || *steps > 100000 {
		fmt.Fprintf(os.Stderr, "dbos-bench: -steps %d: must be 10..100000\n", *steps)
		os.Exit(2)
	}
	if *executors != "" {
		// The plugin confinement's trampoline must be named by an
		// absolute path.
		abs, err := filepath.Abs(*executors)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dbos-bench: -executors:", err)
			os.Exit(2)
		}
		*executors = abs
	}
	if err := run(context.Background(), os.Stdout, *steps, *executors); err != nil {
		fmt.Fprintln(os.Stderr, "dbos-bench:", err)
		os.Exit(1)
	}
}

// row is one measured line.
type row struct {
	sync, what  string
	median, p95 time.Duration
	n           int
	first       bool // the mode's DBOS row: the others are ratios to it
}

func run(ctx context.Context, out io.Writer, steps int, executors string) error {
	var rows []row
	for _, sync := range []string{"FULL", "NORMAL"} {
		fmt.Fprintf(os.Stderr, "dbos-bench: synchronous=%s\n", sync)
		d, err := dbosSteps(ctx, sync, steps)
		if err != nil {
			return fmt.Errorf("dbos (%s): %w", sync, err)
		}
		rows = append(rows, summarize(sync, "dbos: RunAsStep (no-op)", d, true))
		s, err := storeSteps(ctx, sync, steps)
		if err != nil {
			return fmt.Errorf("taskhost store (%s): %w", sync, err)
		}
		rows = append(rows, summarize(sync, "taskhost store: FinishAndClaim", s, false))
		if executors != "" {
			floor, h, err := hostSteps(ctx, sync, steps, executors)
			if err != nil {
				return fmt.Errorf("taskhost step (%s): %w", sync, err)
			}
			rows = append(rows, summarize(sync, "taskhost floor: plugin round trip + one-row commit", floor, false))
			rows = append(rows, summarize(sync, "taskhost step: testexec no-op via plugin", h, false))
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SYNC\tMEASUREMENT\tN\tMEDIAN\tP95\t× DBOS")
	var base time.Duration
	for _, r := range rows {
		if r.first {
			base = r.median
		}
		ratio := "-"
		if !r.first && base > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.median)/float64(base))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.sync, r.what, r.n, r.median.Round(time.Microsecond), r.p95.Round(time.Microsecond), ratio)
	}
	return tw.Flush()
}

func summarize(sync, what string, d []time.Duration, first bool) row {
	s := slices.Clone(d)
	slices.Sort(s)
	return row{sync: sync, what: what, n: len(s), median: s[len(s)/2], p95: s[min(len(s)-1, len(s)*95/100)], first: first}
}

// sqliteDSN opens path as the taskhost store does (store/open.go's dsn),
// plus IMMEDIATE transactions as DBOS opens its own pool.
func sqliteDSN(path, sync string) string {
	return "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=temp_store(MEMORY)" +
		"&_pragma=synchronous(" + sync + ")&_pragma=journal_mode(WAL)&_txlock=immediate"
}

// dbosSteps times each RunAsStep of one workflow of n no-op steps.
func dbosSteps(ctx context.Context, sync string, n int) ([]time.Duration, error) {
	dir, err := os.MkdirTemp("", "dbosbench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "dbos.db"), sync))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&mode); err != nil {
		return nil, err
	}
	if want := map[string]string{"FULL": "2", "NORMAL": "1"}[sync]; mode != want {
		return nil, fmt.Errorf("PRAGMA synchronous is %s, want %s (%s)", mode, want, sync)
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "taskhost-bench", SQLiteSystemDB: db,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer dbos.Shutdown(dctx, 5*time.Second)
	times := make([]time.Duration, 0, n)
	workflow := func(c dbos.Context, n int) (int, error) {
		for i := range n {
			start := time.Now()
			if _, err := dbos.RunAsStep(c, func(context.Context) (int, error) { return i, nil }); err != nil {
				return i, err
			}
			times = append(times, time.Since(start))
		}
		return n, nil
	}
	dbos.RegisterWorkflow(dctx, workflow)
	if err := dbos.Launch(dctx); err != nil {
		return nil, err
	}
	h, err := dbos.RunWorkflow(dctx, workflow, n)
	if err != nil {
		return nil, err
	}
	if got, err := h.GetResult(); err != nil || got != n {
		return nil, fmt.Errorf("workflow ran %d of %d steps: %v", got, n, err)
	}
	return times, nil
}

// storeSteps times n FinishAndClaim calls of one task, each with a
// step.completed and a step.started event, as the runner records a step.
func storeSteps(ctx context.Context, sync string, n int) ([]time.Duration, error) {
	dir, err := os.MkdirTemp("", "thstore")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(ctx, filepath.Join(dir, "taskhost.db"), store.Options{Synchronous: sync})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	lim := store.Budgets{Steps: store.Budget{Limit: int64(n) + 1}, WallMillis: store.Budget{Limit: 1 << 40}}
	if _, err := s.CreateTask(ctx, store.NewTask{ID: "t_bench", PrincipalID: "bench", Executor: "testexec",
		Spec: []byte(`{"goal":"bench"}`), Limits: lim}); err != nil {
		return nil, err
	}
	t, err := s.StartRun(ctx, "bench", "t_bench", store.StatusPending)
	if err != nil {
		return nil, err
	}
	a, _, err := s.ClaimAttempt(ctx, "bench", t.ID, t.RunID)
	if err != nil {
		return nil, err
	}
	times := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		_, next, _, err := s.FinishAndClaim(ctx, store.FinishAttempt{
			PrincipalID: "bench", TaskID: t.ID, RunID: t.RunID, Number: a.Number,
			Status: store.AttemptCompleted, Outcome: "continue", Summary: "no-op", WallMillisUsed: int64(i),
			Events: []store.NewEvent{{Type: "step.completed", Payload: []byte(`{"attempt":1,"outcome":"continue"}`)}},
		}, store.NewEvent{Type: "step.started", Payload: []byte(`{"attempt":2}`)})
		if err != nil {
			return nil, err
		}
		if next == nil {
			return nil, errors.New("no next attempt")
		}
		times = append(times, time.Since(start))
		a = *next
	}
	return times, nil
}

// hostSteps opens a host at sync and measures, n samples each, the floor
// any out-of-process step pays (a Describe round trip to the test
// executor's plugin and a one-row commit, a heartbeat of a parked task),
// then a task of n+1 no-op steps, returning the intervals between its
// attempts' starts: each is one whole durable step.
func hostSteps(ctx context.Context, sync string, n int, executors string) (floor, steps []time.Duration, err error) {
	dir, err := os.MkdirTemp("", "thdb") // short: plugin socket paths are capped
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	cfg := config.Default()
	cfg.Tasks.MaxStepsCap = 100000
	cfg.Executors["testexec"] = config.Executor{Path: filepath.Join(executors, datadir.ExecutorPrefix+"testexec")}
	// This binary cannot serve as the trampoline (its main does not call
	// confine.Main): the installed one, or taskhost itself.
	trampoline := filepath.Join(executors, datadir.TrampolineName)
	if _, err := os.Stat(trampoline); err != nil {
		trampoline = filepath.Join(executors, "taskhost")
	}
	h, err := host.Open(ctx, host.Options{DataDir: filepath.Join(dir, "d"), Config: cfg, Synchronous: sync,
		ExecutorDir: executors, Trampoline: trampoline})
	if err != nil {
		return nil, nil, err
	}
	defer h.Close(context.WithoutCancel(ctx))
	if floor, err = floorSamples(ctx, h, n); err != nil {
		return nil, nil, fmt.Errorf("floor: %w", err)
	}
	t, err := h.Runner.Create(ctx, "bench", host.CreateRequest{Executor: "testexec",
		Spec:   []byte(fmt.Sprintf(`{"goal":"steps","testexec":{"steps":%d}}`, n+1)),
		Limits: host.Limits{Steps: int64(n + 1)}})
	if err != nil {
		return nil, nil, err
	}
	if err := h.Runner.Wait(ctx, t.ID); err != nil {
		return nil, nil, err
	}
	if t, err = h.Runner.Get(ctx, "bench", t.ID); err != nil {
		return nil, nil, err
	}
	if t.Status != store.StatusCompleted {
		return nil, nil, fmt.Errorf("task %s ended %s (%s: %s)", t.ID, t.Status, t.Reason, strings.TrimSpace(t.Message))
	}
	atts, err := h.Runner.Attempts(ctx, "bench", t.ID)
	if err != nil {
		return nil, nil, err
	}
	for i := 1; i < len(atts); i++ {
		steps = append(steps, atts[i].StartedAt.Sub(atts[i-1].StartedAt))
	}
	return floor, steps, nil
}

// floorSamples times n rounds of a Describe round trip to a test executor
// plugin plus a heartbeat (one UPDATE, one commit) of a task parked in a
// long step, as `taskhost bench`'s floor row does.
func floorSamples(ctx context.Context, h *host.Host, n int) ([]time.Duration, error) {
	exe, err := h.Registry.Launch(ctx, "testexec", plugin.NoServices{})
	if err != nil {
		return nil, err
	}
	defer exe.Stop()
	parked, err := h.Runner.Create(ctx, "bench", host.CreateRequest{Executor: "testexec",
		Spec: []byte(`{"goal":"park","testexec":{"sleep_ms":600000}}`)})
	if err != nil {
		return nil, err
	}
	defer h.Runner.Cancel(context.WithoutCancel(ctx), "bench", parked.ID)
	out := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		if _, err := exe.Describe(ctx); err != nil {
			return nil, err
		}
		if err := h.Store.Heartbeat(ctx, "bench", parked.ID, parked.RunID, int64(i)); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
