package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/host/plugin"
)

// who is the principal every bench task belongs to.
const who = "bench"

// withDefaults fills o's zero fields.
func (o Options) withDefaults() Options {
	if o.Steps <= 0 {
		o.Steps = 200
	}
	if o.Reps <= 0 {
		o.Reps = 10
	}
	if o.RecoverySizes == nil {
		o.RecoverySizes = []int{10_000, 100_000}
	}
	if o.ShortTasks <= 0 {
		o.ShortTasks = 2 * o.Reps
	}
	return o
}

// session is one bench run: the host the rows measure on, its config, its
// temporary dirs and the report the rows fill in.
type session struct {
	o    Options
	cfg  config.Config
	dir  string // data dirs of the hosts the rows open
	pids string // where the test executor writes its pid files
	h    *host.Host
	r    Report
	step Figure // the durable step, the workspace row's baseline
}

// open makes the session's dirs and opens its host on them.
func open(ctx context.Context, o Options) (*session, error) {
	s := &session{o: o, cfg: config.Default()}
	s.cfg.Tasks.MaxConcurrent = slices.Max(concurrency)
	s.cfg.Tasks.MaxStepsCap = 100000
	// The workspace row makes a tool call a step, --steps of them.
	s.cfg.Tasks.MaxToolCallsCap = 100000
	s.cfg.Tasks.MaxToolCalls = 100000
	s.cfg.MachineSpirit.Enabled = true
	// Every row but the short tasks' times starts of the plugin itself.
	s.cfg.Tasks.Prestart = 0
	if o.Store.Driver != "" {
		s.cfg.Store = o.Store
	}
	var err error
	if s.dir, err = os.MkdirTemp("", "thbench"); err != nil {
		return nil, err
	}
	// The test executor writes its pid files here: a confined plugin may
	// write nowhere else outside its own dir, and under a uid of the
	// daemon's pool it reaches only a dir open to others.
	if s.pids, err = os.MkdirTemp("", "taskhost-bench-pids-"); err == nil {
		err = os.Chmod(s.pids, 0o777)
	}
	execDir := o.ExecutorDir
	if err == nil && execDir == "" {
		var exe string
		exe, err = os.Executable()
		execDir = filepath.Dir(exe)
	}
	if err == nil {
		// Subprocesses: one crash row has it leave a grandchild.
		s.cfg.Executors["testexec"] = config.Executor{Path: filepath.Join(execDir, datadir.ExecutorPrefix+"testexec"), ReadWrite: []string{s.pids}, Subprocesses: true}
		s.h, err = host.Open(ctx, host.Options{DataDir: filepath.Join(s.dir, "d"), Config: s.cfg, ExecutorDir: o.ExecutorDir})
	}
	if err != nil {
		s.close(ctx)
		return nil, err
	}
	return s, nil
}

// close closes the session's host and removes its dirs.
func (s *session) close(ctx context.Context) {
	if s.h != nil {
		s.h.Close(context.WithoutCancel(ctx))
	}
	if s.pids != "" {
		os.RemoveAll(s.pids)
	}
	os.RemoveAll(s.dir)
}

// say reports what the run measures next.
func (s *session) say(format string, args ...any) {
	if s.o.Progress != nil {
		s.o.Progress(fmt.Sprintf(format, args...))
	}
}

func (s *session) add(fs ...Figure) { s.r.Figures = append(s.r.Figures, fs...) }

func (s *session) postgres() bool { return s.cfg.Store.Driver == config.StorePostgres }

// stepRows: the floor and the durable step.
func (s *session) stepRows(ctx context.Context) error {
	s.say("floor: go-plugin round trip + one store commit")
	floor, steps, cpu, err := stepOverhead(ctx, s.h, who, s.o.Steps)
	if err != nil {
		return err
	}
	ff, sf := figure("floor: plugin RPC + store commit", floor, ""), figure("durable step (testexec no-op)", steps, cpu.String())
	s.add(ff, sf)
	s.r.StepRatio, s.step = ratio(sf, ff), sf
	return nil
}

// workspaceRow: a durable step that writes a workspace file.
func (s *session) workspaceRow(ctx context.Context) error {
	s.say("durable step that writes a %d-byte workspace file", workspaceRowBytes)
	wsteps, err := stepIntervals(ctx, s.h, who, fmt.Sprintf(`{"goal":"workspace","testexec":{"steps":%d,"write_bytes":%d}}`, s.o.Steps+1, workspaceRowBytes), s.o.Steps+1)
	if err != nil {
		return err
	}
	wf := figure(fmt.Sprintf("durable step + %d KiB workspace.write", workspaceRowBytes>>10), wsteps, "")
	wf.Note = fmt.Sprintf("%.2f× the durable step: the tool call (its ledger's commits), the write, the workspace's stat walk (up to %d files) and the changed file stored with the step",
		ratio(wf, s.step), s.o.Steps)
	s.add(wf)
	return nil
}

// normalRows: on SQLite, the floor and the durable step again on a store
// at synchronous=NORMAL (a commit is not fsynced, so the step's own work
// weighs more against the floor), on a host of its own.
func (s *session) normalRows(ctx context.Context) error {
	if s.postgres() {
		return nil
	}
	s.say("floor and durable step at synchronous=NORMAL")
	hn, err := host.Open(ctx, host.Options{DataDir: filepath.Join(s.dir, "normal"), Config: s.cfg, ExecutorDir: s.o.ExecutorDir, Synchronous: "NORMAL"})
	if err != nil {
		return err
	}
	floor, steps, cpu, err := stepOverhead(ctx, hn, who, s.o.Steps)
	hn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	ff, sf := figure("floor at synchronous=NORMAL", floor, ""), figure("durable step at synchronous=NORMAL", steps, "")
	s.r.StepRatioNormal = ratio(sf, ff)
	sf.Note = fmt.Sprintf("step/floor = %.2f (target ≤ 2)", s.r.StepRatioNormal)
	if c := cpu.String(); c != "" {
		sf.Note += "; " + c
	}
	s.add(ff, sf)
	return nil
}

// concurrentRows: 1, 4 and 16 tasks stepping at once.
func (s *session) concurrentRows(ctx context.Context) error {
	s.say("durable steps, %v tasks at once, %d rounds", concurrency, concurrencyRounds)
	target4 := 3.0 // SQLite: steps that finish together share one commit
	if s.postgres() {
		target4 = 2.5
	}
	cfs, ratios, err := concurrentRows(ctx, s.h, who, s.pids, s.o.Steps, target4)
	if err != nil {
		return err
	}
	s.add(cfs...)
	s.r.ConcurrentThroughput, s.r.ConcurrentThroughput16 = ratios[4], ratios[16]
	return nil
}

// fleetRows: on PostgreSQL, tasks on one host and over several.
func (s *session) fleetRows(ctx context.Context) error {
	if !s.postgres() {
		s.add(Figure{Name: "durable step, tasks over several hosts", Note: "skipped: a fleet shares a PostgreSQL store (--store postgres)"})
		return nil
	}
	s.say("durable steps, %d tasks on 1 host and over %d hosts of one store, %d rounds", fleetTasks, fleetHosts, concurrencyRounds)
	ffs, fr, err := fleetRows(ctx, s.cfg, s.dir, s.o.ExecutorDir, s.h, who, s.pids, s.o.Steps)
	if err != nil {
		return err
	}
	s.add(ffs...)
	s.r.FleetThroughput = fr
	return nil
}

// shortTaskRows: one-step tasks from create to completed.
func (s *session) shortTaskRows(ctx context.Context) error {
	s.say("one-step tasks, %d clients, prestart off and %d, %d rounds", shortClients, shortPrestart, shortRounds)
	sfs, rate, sratio, err := shortTaskRows(ctx, s.cfg, s.dir, s.o.ExecutorDir, s.o.ShortTasks)
	if err != nil {
		return err
	}
	s.add(sfs...)
	s.r.ShortTasksPerSecond, s.r.ShortTaskRatio = rate, sratio
	return nil
}

// historyRow: the short tasks again, on a store that already holds a
// history of finished tasks.
func (s *session) historyRow(ctx context.Context) error {
	if s.postgres() {
		s.add(Figure{Name: "one-step tasks on a store with a history", Note: "skipped: measured on SQLite only"})
		return nil
	}
	s.say("one-step tasks, %d clients, on a store of %d finished tasks and on an empty one, %d rounds", shortClients, historyTasks, shortRounds)
	f, r, err := historyRow(ctx, s.cfg, s.dir, s.o.ExecutorDir, s.o.ShortTasks)
	if err != nil {
		return err
	}
	s.add(f)
	s.r.HistoryRatio = r
	return nil
}

// startRows: a plugin's start to its first reply, and machinespirit's
// with its saved state cold and warm.
func (s *session) startRows(ctx context.Context) error {
	s.say("plugin start, %d times", s.o.Reps)
	var starts []time.Duration
	for range s.o.Reps {
		start := time.Now()
		e, err := s.h.Registry.Launch(ctx, "testexec", plugin.NoServices{})
		if err != nil {
			return err
		}
		if _, err := e.Describe(ctx); err != nil {
			return err
		}
		starts = append(starts, time.Since(start))
		e.Stop()
	}
	s.add(figure("plugin start to first reply", starts, ""))

	s.say("machinespirit plugin start, cold and warm saved state, %d times each", s.o.Reps)
	if _, err := s.h.Registry.Describe("machinespirit"); err != nil {
		s.add(Figure{Name: "machinespirit plugin start", Note: "skipped: " + err.Error()})
		return nil
	}
	cold, warm, err := machineSpiritStarts(ctx, s.h, s.o.Reps)
	if err != nil {
		return err
	}
	cf, wf := figure("machinespirit plugin start, cold (saved state built)", cold, ""),
		figure("machinespirit plugin start, warm (saved state cached)", warm, "")
	if wf.Median > 0 {
		wf.Note = fmt.Sprintf("cold/warm = %.1f×", float64(cf.Median)/float64(wf.Median))
	}
	s.add(cf, wf)
	return nil
}

// crashRows: a plugin SIGKILLed to its task interrupted, alone and with a
// grandchild holding its stderr.
func (s *session) crashRows(ctx context.Context) error {
	s.say("plugin SIGKILL → interrupted, %d times", s.o.Reps)
	crash, err := crashLatency(ctx, s.h, who, s.pids, s.o.Reps, false)
	if err != nil {
		return err
	}
	s.add(figure("plugin SIGKILL → interrupted persisted", crash, ""))
	s.say("plugin SIGKILL with a grandchild holding its stderr → interrupted, %d times", s.o.Reps)
	crashGC, err := crashLatency(ctx, s.h, who, s.pids, s.o.Reps, true)
	if err != nil {
		return err
	}
	s.add(figure("plugin SIGKILL → interrupted persisted, grandchild holding stderr", crashGC, "the baseline is the row above"))
	return nil
}

// cancelRows: a cancel to the task terminal and to the executor's context.
func (s *session) cancelRows(ctx context.Context) error {
	s.say("cancel latency, %d times", s.o.Reps)
	toCtx, toTerminal, err := cancelLatency(ctx, s.h, who, s.pids, s.o.Reps)
	if err != nil {
		return err
	}
	s.add(figure("cancel → task terminal (committed)", toTerminal, ""),
		figure("cancel → executor ctx cancelled", toCtx, "seen by the plugin: its cancel marker appears"))
	return nil
}

// machineSpiritStepRow: a machinespirit graph's node step.
func (s *session) machineSpiritStepRow(ctx context.Context) error {
	s.say("machinespirit node step")
	if _, err := s.h.Registry.Describe("machinespirit"); err != nil {
		s.add(Figure{Name: "machinespirit node step", Note: "skipped: " + err.Error()})
		return nil
	}
	ms, err := stepIntervals(ctx, s.h, who, `{"goal":"plan","machinespirit":{"graph":"plan_act_review","input":{"tasks":["a","b","c","d","e","f"],"pass_on_attempt":1,"max_attempts":1}}}`, 0)
	if err != nil {
		return err
	}
	s.add(figure("machinespirit node step (plan_act_review)", ms, ""))
	return nil
}

// recoveryRows: on SQLite, start-up recovery at each store size (it
// fills a fresh SQLite file per size).
func (s *session) recoveryRows(ctx context.Context) error {
	if s.postgres() && len(s.o.RecoverySizes) > 0 {
		s.add(Figure{Name: "start-up recovery", Note: "skipped: measured on SQLite only"})
		return nil
	}
	for _, n := range s.o.RecoverySizes {
		s.say("start-up recovery with %d tasks in the store", n)
		d, err := recovery(ctx, s.dir, s.o.ExecutorDir, n)
		if err != nil {
			return err
		}
		s.add(figure(fmt.Sprintf("start-up recovery, %d tasks (1%% live)", n), d, "host open: integrity check, migrations, recovery, executor registration"))
	}
	return nil
}
