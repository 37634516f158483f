package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/taskhost/taskhost/internal/confine"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/host/config"
	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/shared/proto/apipb"
	"github.com/taskhost/taskhost/store"
)

// demoPlan is what the demo runs: two tasks on a fresh datadir.
type demoPlan struct {
	config    string // the daemon's TOML config
	executors []string
	tasks     []demoTask
}

// demoTask is one task of the demo.
type demoTask struct {
	title    string
	executor string
	spec     string
	// kill: SIGKILL the task's plugin once its first step has started,
	// then resume the task.
	kill bool
	// files are placed in the task's workspace before its first step: the
	// rlm graph reads its context from there.
	files map[string]string
}

// defaultDemoPlan is the README's demo: a legacy task with an approval and a
// machinespirit rlm task whose plugin is killed mid-run, on the embedded
// default scripted model.
func defaultDemoPlan() demoPlan {
	return demoPlan{
		config: `# taskhost demo: the embedded defaults, with MACHINE-SPIRIT enabled.
[tasks]
prestart = 0            # each task's plugin starts for it: the demo finds it to kill

[machine_spirit]
enabled = true

[model]
provider = "scripted"   # the embedded default script: no network, no API key
`,
		executors: []string{config.ExecutorLegacy, config.ExecutorMachineSpirit},
		tasks: []demoTask{
			{
				title:    "a legacy task: write notes, run a command (needs an approval), report",
				executor: config.ExecutorLegacy,
				spec:     `{"goal": "Write notes.md, run 'echo hello', and report when done."}`,
			},
			{
				title:    "a machinespirit rlm task; its plugin is SIGKILLed mid-run, then resumed",
				executor: config.ExecutorMachineSpirit,
				spec:     `{"goal": "Summarise the context.", "machinespirit": {"graph": "rlm", "context_file": "context.txt"}}`,
				kill:     true,
				files:    map[string]string{"context.txt": strings.Repeat("The demo works: a scripted context for the RLM graph.\n", 100)},
			},
		},
	}
}

type demoOptions struct {
	interactive bool
	keep        bool
	json        bool
	executorDir string
}

func demoCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var o demoOptions
	fs.BoolVar(&o.interactive, "interactive", false, "ask before answering each approval (default: approve automatically, with a notice)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary data dir (its path is printed)")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON (progress goes to stderr)")
	fs.Usage = usageFunc(fs, "taskhost demo [--interactive] [--keep] [--json]",
		"Runs the demo on a temporary data dir with the built-in scripted model and no\nother set-up: a daemon starts, a legacy task asks for an approval (approved\nautomatically with a notice unless --interactive), a machinespirit rlm task has\nits plugin SIGKILLed mid-run (the task is interrupted) and is resumed, and a\nsummary table is printed and checked. Exits 0 when every check passes, 1 when\none fails, 5 when an executor binary or runtime is missing.")
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	exe, err := os.Executable()
	if err != nil {
		errorf(e, "demo: %v", err)
		return exitUnavailable
	}
	o.executorDir = filepath.Dir(exe)
	return runDemo(ctx, e, o, defaultDemoPlan())
}

// demoRun is one running demo.
type demoRun struct {
	ctx     context.Context
	e       *env
	out     io.Writer // progress: stdout, or stderr with --json
	o       demoOptions
	cf      *clientFlags
	tc      apipb.TaskServiceClient
	dec     *decider // answers the approvals
	rows    []demoRow
	dataDir string
}

// demoRow is one line of the summary.
type demoRow struct {
	Task    taskView `json:"task"`
	Seconds float64  `json:"seconds"`
	// Killed: the plan killed the task's plugin; Interrupted is the
	// reason the task was interrupted with ("" if it was not).
	Killed      bool   `json:"killed"`
	Interrupted string `json:"interrupted_reason,omitempty"`
	Approvals   int    `json:"approvals"`
}

func runDemo(ctx context.Context, e *env, o demoOptions, plan demoPlan) int {
	out := e.stdout
	if o.json {
		out = e.stderr
	}
	for _, kind := range plan.executors {
		p := filepath.Join(o.executorDir, datadir.ExecutorPrefix+kind)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			errorf(e, "demo: the %s executor is missing: %s is not an executable file; build it with 'make build'", kind, p)
			return exitUnavailable
		}
	}
	tmp, err := os.MkdirTemp("", "thdemo")
	if err != nil {
		errorf(e, "demo: %v", err)
		return exitUnavailable
	}
	if o.keep {
		fmt.Fprintf(out, "demo data dir (kept): %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	cfg, code := demoConfig(e, out, tmp, plan)
	if code != exitOK {
		return code
	}
	logFile, err := os.OpenFile(filepath.Join(tmp, "datadir.log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		errorf(e, "demo: %v", err)
		return exitUnavailable
	}
	defer logFile.Close()
	// The daemon runs in this process: what its libraries print through the
	// standard logger goes to its log, not between the demo's lines.
	prevOut, prevFlags := stdlog.Writer(), stdlog.Flags()
	stdlog.SetOutput(logFile)
	defer func() { stdlog.SetOutput(prevOut); stdlog.SetFlags(prevFlags) }()
	dataDir := filepath.Join(tmp, "data")
	socket, stop, code := startDemoDaemon(ctx, e, logFile, daemonOptions{dataDir: dataDir, cfg: cfg, executorDir: o.executorDir})
	if code != exitOK {
		return code
	}
	defer stop()
	fmt.Fprintf(out, "taskhost demo: a daemon on %s (temporary data dir, scripted model)\n", socket)

	cf := &clientFlags{socket: socket, dataDir: dataDir}
	conn, err := cf.dial()
	if err != nil {
		errorf(e, "demo: %v", err)
		return exitUnavailable
	}
	defer conn.Close()
	d := &demoRun{ctx: ctx, e: e, out: out, o: o, cf: cf, dataDir: dataDir,
		tc: apipb.NewTaskServiceClient(conn)}
	d.dec = &decider{e: e, ac: apipb.NewApprovalServiceClient(conn), approveAll: !o.interactive, notice: func(id, what string) {
		fmt.Fprintf(out, "!! approval %s: %s\n!! approved automatically by the demo (run 'taskhost demo --interactive' to decide yourself;\n!! with a daemon you answer with 'taskhost approve %s' or 'taskhost reject %s')\n", id, what, id, id)
	}}
	if code := d.checkExecutors(apipb.NewHostServiceClient(conn), plan.executors); code != exitOK {
		return code
	}
	for i, t := range plan.tasks {
		fmt.Fprintf(out, "\n== %d. %s\n", i+1, t.title)
		if code := d.runTask(t); code != exitOK {
			return code
		}
	}
	return d.summary()
}

// demoConfig writes the plan's config into tmp and loads it; on a kernel
// without Landlock it opts out of required confinement, and says so.
func demoConfig(e *env, out io.Writer, tmp string, plan demoPlan) (config.Config, int) {
	cfgPath := filepath.Join(tmp, "taskhost.toml")
	if err := os.WriteFile(cfgPath, []byte(plan.config), 0o600); err != nil {
		errorf(e, "demo: %v", err)
		return config.Config{}, exitUnavailable
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		errorf(e, "demo: %v", err)
		return config.Config{}, exitUsage
	}
	if s := confine.Probe(); s.LandlockABI < 1 {
		// [confinement] required fails closed on such a kernel; the demo
		// opts out, and says so, rather than show nothing at all.
		cfg.Confinement.Required = false
		fmt.Fprintf(out, "note: this kernel offers no Landlock (%s): the demo runs its plugins and commands without filesystem confinement ([confinement] required = false)\n", s)
	}
	return cfg, exitOK
}

// startDemoDaemon runs the daemon in this process, served on its socket
// like any other, logging to logFile; stop ends it and waits for it.
func startDemoDaemon(ctx context.Context, e *env, logFile *os.File, do daemonOptions) (socket string, stop func(), code int) {
	dctx, stopDaemon := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan string, 1)
	exited := make(chan int, 1)
	log := hclog.New(&hclog.LoggerOptions{Name: "taskhost", Output: logFile, Level: hclog.Info})
	go func() {
		exited <- runDaemon(dctx, &env{stdout: logFile, stderr: logFile, stdin: strings.NewReader("")}, log, do, ready)
	}()
	select {
	case socket = <-ready:
	case code := <-exited:
		stopDaemon()
		errorf(e, "demo: the daemon did not start (exit %d); its log:\n%s", code, readTail(logFile.Name()))
		return "", nil, exitUnavailable
	}
	return socket, func() {
		stopDaemon()
		<-exited
	}, exitOK
}

// checkExecutors refuses to start when an executor the plan needs failed
// its preflight, and says which and why.
func (d *demoRun) checkExecutors(hc apipb.HostServiceClient, kinds []string) int {
	cctx, cancel := context.WithTimeout(d.ctx, callTimeout)
	defer cancel()
	resp, err := hc.ListExecutors(cctx, &apipb.ListExecutorsRequest{})
	if err != nil {
		return d.cf.fail(d.e, err)
	}
	for _, kind := range kinds {
		var found *apipb.Executor
		for _, x := range resp.Executors {
			if x.Kind == kind {
				found = x
			}
		}
		switch {
		case found == nil:
			errorf(d.e, "demo: the daemon has no %s executor", kind)
			return exitUnavailable
		case !preflightOf(found).OK:
			p := preflightOf(found)
			errorf(d.e, "demo: the %s executor is unavailable (%s): %s", kind, p.Check, p.Detail)
			return exitUnavailable
		}
		fmt.Fprintf(d.out, "executor %s %s ready\n", kind, found.Version)
	}
	return exitOK
}

// runTask creates t, follows it (answering approvals, killing its plugin
// if asked) and resumes it after the kill.
func (d *demoRun) runTask(t demoTask) int {
	start := time.Now()
	req := &apipb.CreateTaskRequest{Executor: t.executor, Spec: []byte(t.spec)}
	for _, name := range slices.Sorted(maps.Keys(t.files)) {
		req.Files = append(req.Files, &apipb.WorkspaceFile{Name: name, Data: []byte(t.files[name])})
	}
	// A plugin of an earlier task may still be stopping: the one to kill
	// is none of those.
	var earlier map[int]bool
	if t.kill {
		earlier = d.pluginChildren(t.executor)
	}
	cctx, cancel := context.WithTimeout(d.ctx, callTimeout)
	resp, err := d.tc.CreateTask(cctx, req)
	cancel()
	if err != nil {
		return d.cf.fail(d.e, err)
	}
	id := resp.Task.Id
	row := demoRow{Killed: t.kill}
	var hunt chan int
	onEvent := func(ev *apipb.Event) {
		switch {
		case ev.GetType() == host.EventTaskStarted && t.kill:
			// The plugin is starting now: find it while it does, so the
			// kill lands as soon as its step has started.
			hunt = d.huntPlugin(t.executor, earlier)
		case ev.GetType() == host.EventStepStarted && hunt != nil:
			d.killPlugin(t.executor, hunt)
			hunt = nil
		}
	}
	view := &env{stdout: d.out, stderr: d.e.stderr, stdin: d.e.stdin}
	watch := func(minRun int64) int {
		return watchTask(d.ctx, view, &clientFlags{socket: d.cf.socket}, d.tc, id, watchOptions{onEvent: onEvent, noProgress: true, minRun: minRun,
			approvals: func(taskID string) int { n := d.dec.decide(d.ctx, taskID); row.Approvals += n; return n }})
	}
	code := watch(0)
	if code == exitInterrupted && t.kill {
		got, err := d.get(id)
		if err != nil {
			return d.cf.fail(d.e, err)
		}
		row.Interrupted = got.Reason
		fmt.Fprintf(d.out, "-- resuming %s: same id, run %d, the remaining budgets\n", id, got.RunId+1)
		cctx, cancel := context.WithTimeout(d.ctx, callTimeout)
		resumed, err := d.tc.ResumeTask(cctx, &apipb.ResumeTaskRequest{TaskId: id})
		cancel()
		if err != nil {
			return d.cf.fail(d.e, err)
		}
		code = watch(resumed.Task.RunId)
	}
	if code == exitSignal || code == exitUnavailable || code == exitDenied {
		return code
	}
	final, err := d.get(id)
	if err != nil {
		return d.cf.fail(d.e, err)
	}
	row.Task = taskJSON(final)
	row.Seconds = time.Since(start).Seconds()
	d.rows = append(d.rows, row)
	return exitOK
}

func (d *demoRun) get(id string) (*apipb.Task, error) {
	cctx, cancel := context.WithTimeout(d.ctx, callTimeout)
	defer cancel()
	resp, err := d.tc.GetTask(cctx, &apipb.GetTaskRequest{TaskId: id})
	return resp.GetTask(), err
}

// huntPlugin looks for the plugin process of kind that is starting: a
// child of this process (the demo's daemon runs in it) running the
// executor's binary, other than those in earlier. The channel yields its
// pid, or 0 if none appeared.
func (d *demoRun) huntPlugin(kind string, earlier map[int]bool) chan int {
	found := make(chan int, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for d.ctx.Err() == nil && time.Now().Before(deadline) {
			for pid := range d.pluginChildren(kind) {
				if !earlier[pid] {
					found <- pid
					return
				}
			}
			// Polling /proc: nothing announces a process start.
			time.Sleep(2 * time.Millisecond)
		}
		found <- 0
	}()
	return found
}

// killPlugin SIGKILLs the plugin huntPlugin found.
func (d *demoRun) killPlugin(kind string, hunt chan int) {
	pid := <-hunt
	if pid == 0 {
		fmt.Fprintf(d.out, "!! no running %s plugin found to kill\n", kind)
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		errorf(d.e, "demo: kill plugin %d: %v", pid, err)
		return
	}
	fmt.Fprintf(d.out, "!! SIGKILL to the %s plugin (pid %d) in the middle of its step\n", kind, pid)
}

// pluginChildren returns the live children of this process running the
// binary of executor kind.
func (d *demoRun) pluginChildren(kind string) map[int]bool {
	bin := filepath.Join(d.o.executorDir, datadir.ExecutorPrefix+kind)
	if resolved, err := filepath.EvalSymlinks(bin); err == nil {
		bin = resolved // /proc/PID/exe names the resolved path
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := strconv.Itoa(os.Getpid())
	out := map[int]bool{}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, ...
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != self || f[0] == "Z" {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", ent.Name(), "exe")); err == nil && exe == bin {
			out[pid] = true
		}
	}
	return out
}

// summary prints the table, checks what the demo set out to show, and
// returns 0 only if every check holds.
func (d *demoRun) summary() int {
	type check struct {
		Name string `json:"name"`
		OK   bool   `json:"ok"`
	}
	var checks []check
	for _, r := range d.rows {
		t := r.Task
		checks = append(checks, check{fmt.Sprintf("%s task %s completed", t.Executor, t.ID), t.Status == string(store.StatusCompleted)})
		if r.Approvals > 0 {
			checks = append(checks, check{fmt.Sprintf("%s task %s asked for an approval and got it", t.Executor, t.ID), true})
		}
	}
	for _, r := range d.rows {
		if r.Killed {
			checks = append(checks, check{fmt.Sprintf("%s task %s was interrupted by the kill (%s) and resumed as run %d",
				r.Task.Executor, r.Task.ID, r.Interrupted, r.Task.RunID),
				r.Interrupted == string(store.ReasonExecutorCrashed) && r.Task.RunID == 2})
		}
	}
	allOK := len(d.rows) > 0
	for _, c := range checks {
		allOK = allOK && c.OK
	}
	if d.o.json {
		newPrinter(d.e, true).emit(map[string]any{"tasks": d.rows, "checks": checks, "ok": allOK})
	} else {
		fmt.Fprintln(d.e.stdout, "\n== summary")
		tw := tabwriter.NewWriter(d.e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tEXECUTOR\tSTATUS\tRUNS\tSTEPS\tTOOLS\tMODELS\tDEPTH\tWALL\tTIME")
		for _, r := range d.rows {
			t := r.Task
			m := func(k string) string { return fmt.Sprintf("%d/%d", t.Budgets[k].Used, t.Budgets[k].Limit) }
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.1fs/%ds\t%.1fs\n", t.ID, t.Executor, statusText(t), t.RunID,
				m("steps"), m("tool_calls"), m("model_calls"), m("depth"),
				float64(t.Budgets["wall_ms"].Used)/1000, t.Budgets["wall_ms"].Limit/1000, r.Seconds)
		}
		tw.Flush()
		fmt.Fprintln(d.e.stdout)
		for _, c := range checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(d.e.stdout, "%s %s\n", mark, c.Name)
		}
		if allOK {
			fmt.Fprintln(d.e.stdout, "demo: all checks passed")
		} else {
			fmt.Fprintln(d.e.stdout, "demo: some checks FAILED")
		}
	}
	if !allOK {
		return exitFailed
	}
	return exitOK
}

func statusText(t taskView) string {
	if t.Reason == "" {
		return t.Status
	}
	return t.Status + " (" + t.Reason + ")"
}

// readTail returns the last part of a file, for an error message.
func readTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}
