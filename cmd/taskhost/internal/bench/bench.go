// Package bench measures what taskhost promises about speed, each figure
// against a baseline taken in the same run: the durable step overhead
// against a floor of one go-plugin round trip plus one store commit, the
// same step writing a workspace file (stored with the step), crash
// and cancel latencies, plugin start, machinespirit plugin start with and
// without its cached saved state, a machinespirit node step, and start-up
// recovery of a large store.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
	"github.com/taskhost/taskhost/store"
	"github.com/taskhost/taskhost/store/storetest"
)

// Options configure a run.
type Options struct {
	ExecutorDir   string // where taskhost-executor-* binaries are
	Steps         int    // steps timed for the step overhead (default 200)
	Reps          int    // repetitions of the slower measurements (default 10)
	RecoverySizes []int  // store sizes for start-up recovery (default 10k, 100k)
	// Store is the [store] section the measured host opens; a zero Driver
	// is SQLite in the temporary data dir. With PostgreSQL the tasks the
	// run creates stay in the database: give it one of its own.
	Store config.Store
	// ShortTasks is how many one-step tasks each client of the short-task
	// rows runs per round (default 2 × Reps).
	ShortTasks int
	Progress   func(string)
}

// Figure is one measurement: a median and a 95th percentile of N samples.
type Figure struct {
	Name   string        `json:"name"`
	N      int           `json:"n"`
	Median time.Duration `json:"median_ns"`
	P95    time.Duration `json:"p95_ns"`
	Note   string        `json:"note,omitempty"`
}

// Report is a whole run.
type Report struct {
	Figures []Figure `json:"figures"`
	// StepRatio is the median durable step over the median floor.
	StepRatio float64 `json:"step_ratio"`
	// StepRatioNormal is the same at synchronous=NORMAL (SQLite only).
	StepRatioNormal float64 `json:"step_ratio_normal,omitempty"`
	// ConcurrentThroughput is the steps per second of 4 tasks stepping at
	// once over one task's, and ConcurrentThroughput16 of 16: medians of
	// the ratios of rounds that measure 1, 4 and 16 tasks in turn.
	ConcurrentThroughput   float64 `json:"concurrent_throughput"`
	ConcurrentThroughput16 float64 `json:"concurrent_throughput_16"`
	// FleetThroughput is, on PostgreSQL, the steps per second of 12 tasks
	// spread over 3 hosts of one store in one process over the same 12 on
	// one host: the median of the ratios of interleaved rounds.
	FleetThroughput float64 `json:"fleet_throughput,omitempty"`
	// ShortTasksPerSecond is the one-step tasks completed per second with
	// 8 clients and pre-started plugins; ShortTaskRatio is that over the
	// same without them: medians over interleaved rounds.
	ShortTasksPerSecond float64 `json:"short_tasks_per_second"`
	ShortTaskRatio      float64 `json:"short_task_ratio"`
	// HistoryRatio is the one-step tasks/s of a store holding a history
	// of finished tasks over an empty one's (SQLite only): the median of
	// interleaved rounds.
	HistoryRatio float64 `json:"history_ratio,omitempty"`
}

func ratio(num, den Figure) float64 {
	if den.Median <= 0 {
		return 0
	}
	return float64(num.Median) / float64(den.Median)
}

// stepOverhead measures, on h, the floor (a go-plugin round trip and a
// one-row commit) and then the durable step of the test executor's no-op,
// n samples each.
func stepOverhead(ctx context.Context, h *host.Host, who string, n int) (floor, steps []time.Duration, cpu stepCPU, err error) {
	exe, err := h.Registry.Launch(ctx, "testexec", plugin.NoServices{})
	if err != nil {
		return nil, nil, cpu, fmt.Errorf("the bench needs the test executor (taskhost-executor-testexec beside taskhost): %w", err)
	}
	parked, err := create(ctx, h, who, `{"goal":"park","testexec":{"sleep_ms":600000}}`, 0)
	if err != nil {
		exe.Stop()
		return nil, nil, cpu, err
	}
	for i := range n {
		start := time.Now()
		if _, err := exe.Describe(ctx); err != nil {
			exe.Stop()
			return nil, nil, cpu, err
		}
		if err := h.Store.Heartbeat(ctx, who, parked.ID, parked.RunID, int64(i)); err != nil {
			exe.Stop()
			return nil, nil, cpu, err
		}
		floor = append(floor, time.Since(start))
	}
	exe.Stop()
	if _, err := h.Runner.Cancel(ctx, who, parked.ID); err != nil {
		return nil, nil, cpu, err
	}
	// The parked task's plugin is reaped before the steps' CPU is read,
	// so that its use is not counted as theirs.
	if err := h.Runner.Wait(ctx, parked.ID); err != nil {
		return nil, nil, cpu, err
	}
	self0, children0 := cpuUse()
	steps, err = stepIntervals(ctx, h, who, fmt.Sprintf(`{"goal":"steps","testexec":{"steps":%d}}`, n+1), n+1)
	if self1, children1 := cpuUse(); err == nil && self1 > self0 && children1 > children0 {
		cpu = stepCPU{daemon: (self1 - self0) / time.Duration(n+1), plugin: (children1 - children0) / time.Duration(n+1)}
	}
	return floor, steps, cpu, err
}

func figure(name string, samples []time.Duration, note string) Figure {
	s := slices.Clone(samples)
	slices.Sort(s)
	f := Figure{Name: name, N: len(s), Note: note}
	if len(s) > 0 {
		f.Median = s[len(s)/2]
		f.P95 = s[min(len(s)-1, len(s)*95/100)]
	}
	return f
}

// Run measures everything. A measurement whose executor is missing is
// reported with a note instead of failing the run.
func Run(ctx context.Context, o Options) (Report, error) {
	s, err := open(ctx, o.withDefaults())
	if err != nil {
		return Report{}, err
	}
	defer s.close(ctx)
	// Each group of rows in the report's order; the first error ends the
	// run.
	for _, rows := range []func(context.Context) error{
		s.stepRows, s.workspaceRow, s.normalRows, s.concurrentRows, s.fleetRows, s.shortTaskRows, s.historyRow,
		s.startRows, s.crashRows, s.cancelRows, s.machineSpiritStepRow, s.recoveryRows,
	} {
		if err := rows(ctx); err != nil {
			return s.r, err
		}
	}
	return s.r, nil
}

// machineSpiritStarts times machinespirit plugin starts to their first
// reply: cold with the saved-state cache emptied before each, warm from
// the state the previous start cached. Each start's Describe must say
// which it was, so a cache that silently stopped working fails the bench.
// A launch fills no cache (a probe, which serves no task, does): the warm
// starts follow one probe.
func machineSpiritStarts(ctx context.Context, h *host.Host, reps int) (cold, warm []time.Duration, err error) {
	cache := filepath.Join(h.DataDir, datadir.CacheDirName, "machinespirit")
	start := func(want string) (time.Duration, error) {
		t0 := time.Now()
		e, err := h.Registry.Launch(ctx, "machinespirit", plugin.NoServices{})
		if err != nil {
			return 0, err
		}
		defer e.Stop()
		d, err := e.Describe(ctx)
		took := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if got := d.Runtime["saved_state"]; got != want {
			return 0, fmt.Errorf("machinespirit start: saved_state %q, want %q (preflight: %s)", got, want, d.Runtime["preflight"])
		}
		return took, nil
	}
	for range reps {
		entries, err := os.ReadDir(cache)
		if err != nil {
			return nil, nil, err
		}
		for _, ent := range entries {
			if err := os.RemoveAll(filepath.Join(cache, ent.Name())); err != nil {
				return nil, nil, err
			}
		}
		d, err := start("built")
		if err != nil {
			return nil, nil, err
		}
		cold = append(cold, d)
	}
	if err := h.Registry.Probe(ctx, "machinespirit"); err != nil {
		return nil, nil, err
	}
	for range reps {
		d, err := start("cached")
		if err != nil {
			return nil, nil, err
		}
		warm = append(warm, d)
	}
	return cold, warm, nil
}

func create(ctx context.Context, h *host.Host, who, spec string, steps int64) (store.Task, error) {
	var kind struct {
		MS json.RawMessage `json:"machinespirit"`
	}
	_ = json.Unmarshal([]byte(spec), &kind)
	executor := "testexec"
	if kind.MS != nil {
		executor = "machinespirit"
	}
	return h.Runner.Create(ctx, who, host.CreateRequest{Executor: executor, Spec: []byte(spec), Limits: host.Limits{Steps: steps}})
}

// workspaceRowBytes is the file each step of the workspace row writes
// (one new file per step): what the store is handed per step.
const workspaceRowBytes = 4 << 10

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// concurrentSteps runs k tasks of n steps at once, created in turn on each
// of hs (each runs on the host it was created on), and returns every step's
// interval and the steps per second while all k were stepping: the
// attempts that started between the last task's first attempt and the
// first task's last, over that time, so that plugin starts and the tasks'
// ends weigh nothing. Steps that finish together share commits and fsyncs,
// so k tasks step faster in all than one.
func concurrentSteps(ctx context.Context, hs []*host.Host, who, gates string, k, n int) (round, error) {
	// Every task's first step waits at a gate until all k have started
	// theirs, so that plugin starts never leave one task stepping alone;
	// its first step (the wait) is then left out of the measurement.
	gate, err := os.CreateTemp(gates, "gate-")
	if err != nil {
		return round{}, err
	}
	gate.Close()
	if err := os.Remove(gate.Name()); err != nil {
		return round{}, err
	}
	spec := fmt.Sprintf(`{"goal":"steps","testexec":{"steps":%d,"wait_file":%q,"wait_first":true}}`, n+2, gate.Name())
	tasks := make([]store.Task, k)
	for i := range k {
		if tasks[i], err = create(ctx, hs[i%len(hs)], who, spec, int64(n+2)); err != nil {
			return round{}, err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < k; {
		atts, err := hs[i%len(hs)].Runner.Attempts(ctx, who, tasks[i].ID)
		if err != nil {
			return round{}, err
		}
		if len(atts) > 0 {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return round{}, fmt.Errorf("%d bench tasks did not all start within a minute", k)
		}
		time.Sleep(time.Millisecond)
	}
	cpu0, cpuErr := machineCPU()
	if err := os.WriteFile(gate.Name(), []byte("go"), 0o644); err != nil {
		return round{}, err
	}
	defer os.Remove(gate.Name())
	starts := make([][]time.Time, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { starts[i], errs[i] = taskStarts(ctx, hs[i%len(hs)], who, tasks[i]) })
	}
	wg.Wait()
	cpu1, cpuErr1 := machineCPU()
	if err := errors.Join(errs...); err != nil {
		return round{}, err
	}
	var from, to time.Time
	var out []time.Duration
	for i, ts := range starts {
		if len(ts) < 3 {
			return round{}, fmt.Errorf("a bench task took %d attempts", len(ts))
		}
		ts = ts[1:] // the first attempt waited at the gate
		starts[i] = ts
		if i == 0 || ts[0].After(from) {
			from = ts[0]
		}
		if i == 0 || ts[len(ts)-1].Before(to) {
			to = ts[len(ts)-1]
		}
		for j := 1; j < len(ts); j++ {
			out = append(out, ts[j].Sub(ts[j-1]))
		}
	}
	steps := 0
	for _, ts := range starts {
		for _, t := range ts {
			if t.After(from) && !t.After(to) {
				steps++
			}
		}
	}
	if !to.After(from) || steps == 0 {
		return round{intervals: out}, fmt.Errorf("%d tasks, %d tries: %w", k, overlapTries, errNoOverlap)
	}
	r := round{intervals: out, rate: float64(steps) / to.Sub(from).Seconds()}
	if all := len(out) + 2*k; cpuErr == nil && cpuErr1 == nil && cpu1 > cpu0 {
		// The CPU the machine spent from the gate to the last step over
		// every step that ended in that time: each task's gate step and
		// the ones its intervals lie between.
		r.cpuPerStep = (cpu1 - cpu0) / time.Duration(all)
	}
	return r, nil
}

// round is what one concurrentSteps measured: the intervals between
// steps, the steps/s while all tasks stepped, and the machine's CPU per
// step (0: unknown).
type round struct {
	intervals  []time.Duration
	rate       float64
	cpuPerStep time.Duration
}

// stepIntervals runs one task and returns the intervals between its
// attempts' starts: each is one whole durable step.
func stepIntervals(ctx context.Context, h *host.Host, who, spec string, steps int) ([]time.Duration, error) {
	ts, err := stepStarts(ctx, h, who, spec, steps)
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]))
	}
	return out, nil
}

// stepStarts runs one task and returns its attempts' start times.
func stepStarts(ctx context.Context, h *host.Host, who, spec string, steps int) ([]time.Time, error) {
	t, err := create(ctx, h, who, spec, int64(steps))
	if err != nil {
		return nil, err
	}
	return taskStarts(ctx, h, who, t)
}

// taskStarts waits for t to complete and returns its attempts' starts.
func taskStarts(ctx context.Context, h *host.Host, who string, t store.Task) ([]time.Time, error) {
	var err error
	if err := h.Runner.Wait(ctx, t.ID); err != nil {
		return nil, err
	}
	if t, err = h.Runner.Get(ctx, who, t.ID); err != nil {
		return nil, err
	}
	if t.Status != store.StatusCompleted {
		return nil, fmt.Errorf("bench task %s ended %s (%s: %s)", t.ID, t.Status, t.Reason, t.Message)
	}
	atts, err := h.Runner.Attempts(ctx, who, t.ID)
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, len(atts))
	for i, a := range atts {
		out[i] = a.StartedAt
	}
	return out, nil
}

func waitFile(ctx context.Context, path string) ([]byte, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err == nil && len(data) > 0 {
			return data, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("timed out waiting for %s", path)
		}
		time.Sleep(time.Millisecond)
	}
}

// crashLatency times a plugin's SIGKILL to its task persisted interrupted;
// with grandchild the plugin first leaves a "sleep 300" holding its stderr.
func crashLatency(ctx context.Context, h *host.Host, who, dir string, reps int, grandchild bool) ([]time.Duration, error) {
	var out []time.Duration
	for i := range reps {
		pidFile := filepath.Join(dir, fmt.Sprintf("crash-%t-%d", grandchild, i))
		t, err := create(ctx, h, who, fmt.Sprintf(`{"goal":"crash","testexec":{"sleep_ms":600000,"pid_file":%q,"spawn_grandchild":%t}}`, pidFile, grandchild), 0)
		if err != nil {
			return nil, err
		}
		data, err := waitFile(ctx, pidFile)
		if err != nil {
			return nil, err
		}
		if grandchild {
			// Started after the pid file is written: kill only once it
			// holds the pipe.
			if _, err := waitFile(ctx, pidFile+".grandchild"); err != nil {
				return nil, err
			}
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		start := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return nil, err
		}
		for {
			got, err := h.Runner.Get(ctx, who, t.ID)
			if err != nil {
				return nil, err
			}
			if got.Status == store.StatusInterrupted {
				out = append(out, time.Since(start))
				break
			}
			if time.Since(start) > 30*time.Second {
				return nil, fmt.Errorf("task %s not interrupted 30 s after its plugin's SIGKILL", t.ID)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if err := h.Runner.Wait(ctx, t.ID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func cancelLatency(ctx context.Context, h *host.Host, who, dir string, reps int) (toCtx, toTerminal []time.Duration, err error) {
	for i := range reps {
		pidFile := filepath.Join(dir, "cancel"+strconv.Itoa(i))
		marker := pidFile + ".cancelled"
		t, err := create(ctx, h, who, fmt.Sprintf(`{"goal":"cancel","testexec":{"sleep_ms":600000,"pid_file":%q,"cancel_marker":%q}}`, pidFile, marker), 0)
		if err != nil {
			return nil, nil, err
		}
		if _, err := waitFile(ctx, pidFile); err != nil {
			return nil, nil, err
		}
		start := time.Now()
		done := make(chan time.Duration, 1)
		go func() {
			for {
				if _, err := os.Stat(marker); err == nil {
					done <- time.Since(start)
					return
				}
				if time.Since(start) > 30*time.Second {
					done <- -1
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
		if _, err := h.Store.Cancel(ctx, who, t.ID); err != nil { // the commit alone
			return nil, nil, err
		}
		toTerminal = append(toTerminal, time.Since(start))
		if _, err := h.Runner.Cancel(ctx, who, t.ID); err != nil { // reaches the run
			return nil, nil, err
		}
		d := <-done
		if d < 0 {
			return nil, nil, fmt.Errorf("task %s: the plugin never saw its cancel", t.ID)
		}
		toCtx = append(toCtx, d)
	}
	return toCtx, toTerminal, nil
}

// recovery fills a store with n tasks, 1% of them left running as a killed
// host leaves them, and times opening a host on it (3 times).
func recovery(ctx context.Context, dir, executorDir string, n int) ([]time.Duration, error) {
	data := filepath.Join(dir, "rec"+strconv.Itoa(n))
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	lim := store.Budgets{Steps: store.Budget{Limit: 20}, WallMillis: store.Budget{Limit: 1800_000}}
	fill := storetest.Fill{Principal: "bench", Tasks: n, Live: n / 100, Limits: lim}
	if err := storetest.FillSQLite(ctx, filepath.Join(data, datadir.StoreFile), fill); err != nil {
		return nil, err
	}
	var out []time.Duration
	for range 3 {
		start := time.Now()
		h, err := host.Open(ctx, host.Options{DataDir: data, Config: config.Default(), ExecutorDir: executorDir})
		if err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
		h.Close(ctx)
	}
	return out, nil
}
