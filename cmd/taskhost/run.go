package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/taskhost/taskhost/host"
	"github.com/taskhost/taskhost/store"
)

func runCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var hf hostFlags
	hf.register(fs)
	executor := fs.String("executor", "", "executor kind (default: the config's tasks.executor)")
	goal := fs.String("goal", "", "the task's goal (sets spec.goal)")
	specFile := fs.String("spec-file", "", "JSON task spec file: goal and executor options")
	maxSteps := fs.Int64("max-steps", 0, "step budget (default: the config's tasks.max_steps)")
	var files fileFlags
	fs.Var(&files, "file", "copy a file into the task's workspace before its first step: PATH or PATH=NAME (repeatable)")
	maxWall := fs.Int64("max-wall-seconds", 0, "active wall-clock budget in seconds (default: the config's tasks.max_wall_seconds)")
	maxTokens := fs.Int64("max-model-tokens", 0, "model-token budget, prompt + completion (default: the config's tasks.max_model_tokens)")
	maxOutput := fs.Int64("max-output-bytes", 0, "budget of bytes handed back by model and tool calls (default: the config's tasks.max_output_bytes)")
	resume := fs.String("resume", "", "resume the interrupted task with this id instead of creating one")
	jsonOut := fs.Bool("json", false, "print events and the final task as JSON lines")
	approveAll := fs.Bool("approve-all", false, "approve every approval the task asks for (a notice is printed for each)")
	rejectAll := fs.Bool("reject-all", false, "reject every approval the task asks for")
	inputValues := fs.String("input-values", "", "a file holding a JSON array: answer the task's input questions with its values, in order; a question past them is rejected")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: taskhost run --goal TEXT [--executor NAME] [flags]\n       taskhost run --resume ID [flags]\n\nRuns a foreground host for one task and prints each event as it happens.\nExits 0 when the task completes, 1 when it fails or is cancelled, 6 when it is\ninterrupted (resume it with --resume ID). Ctrl-C interrupts it.\n\nFlags:")
		fs.PrintDefaults()
	}
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	if (*resume == "") == (*goal == "" && *specFile == "") {
		errorf(e, "run: give --goal or --spec-file to start a task, or --resume ID to resume one")
		return exitUsage
	}
	if *approveAll && *rejectAll {
		errorf(e, "run: --approve-all and --reject-all exclude each other")
		return exitUsage
	}
	var inputs *inputScript
	if *inputValues != "" {
		script, err := readInputScript(*inputValues)
		if err != nil {
			errorf(e, "run: %v", err)
			return exitUsage
		}
		inputs = script
	}
	cfg, err := hf.loadConfig()
	if err != nil {
		errorf(e, "%v", err)
		return exitUsage
	}
	var spec []byte
	if *resume == "" {
		if spec, err = buildSpec(*goal, *specFile); err != nil {
			errorf(e, "run: %v", err)
			return exitUsage
		}
	}

	h, err := host.Open(context.WithoutCancel(ctx), host.Options{DataDir: hf.dataDir, Config: cfg, Logger: hf.logger(e), Version: version, Solo: true})
	if err != nil {
		errorf(e, "%v", err)
		if errors.Is(err, host.ErrDataDirLocked) {
			fmt.Fprintf(e.stderr, "a daemon serving this data dir runs tasks too: taskhost task create --data-dir %s --goal ... --watch\n", hf.dataDir)
		}
		return exitUnavailable
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(sctx); err != nil {
			errorf(e, "stop: %v", err)
		}
	}()
	for _, id := range h.Recovery.Interrupted {
		fmt.Fprintf(e.stderr, "recovered: task %s was running when the host stopped; it is interrupted (resume with: taskhost run --resume %s)\n", id, id)
	}

	principal := localPrincipal()
	var t store.Task
	if *resume != "" {
		t, err = h.Runner.Resume(ctx, principal, *resume)
	} else {
		t, err = h.Runner.Create(ctx, principal, host.CreateRequest{
			Executor: *executor, Spec: spec, Limits: host.Limits{Steps: *maxSteps, WallSeconds: *maxWall, ModelTokens: *maxTokens, OutputBytes: *maxOutput},
			Files: files.files,
		})
	}
	if err != nil {
		errorf(e, "%v", err)
		return exitCodeFor(err)
	}
	p := newPrinter(e, *jsonOut)
	p.started(t)
	d := decider{e: e, approveAll: *approveAll, rejectAll: *rejectAll, inputs: inputs}
	return follow(ctx, e, h, principal, t.ID, p, d)
}

// follow prints the task's events until its run ends, then its end state.
// Ctrl-C stops the host, which interrupts the task.
func follow(ctx context.Context, e *env, h *host.Host, principal, id string, p *printer, d decider) int {
	bg := context.WithoutCancel(ctx)
	runDone := make(chan struct{})
	go func() { _ = h.Runner.Wait(bg, id); close(runDone) }()
	evCtx, stopEvents := context.WithCancel(bg)
	defer stopEvents()
	go func() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(e.stderr, "taskhost: stopping the host; the task becomes interrupted")
			sctx, cancel := context.WithTimeout(bg, 10*time.Second)
			_ = h.Runner.Shutdown(sctx)
			cancel()
		case <-runDone:
		}
		<-runDone
		stopEvents()
	}()
	var after int64
	print := func(evs []store.Event) {
		for _, ev := range evs {
			p.event(ev)
			after = ev.Seq
			if ev.Type == host.EventTaskWaitingApproval {
				d.decide(ctx, h, principal, id)
			}
		}
	}
	for evCtx.Err() == nil {
		evs, err := h.Runner.Events(evCtx, principal, id, after)
		print(evs)
		if err != nil && evCtx.Err() == nil {
			errorf(e, "events: %v", err)
			return exitUnavailable
		}
	}
	// The run has ended: what it recorded last is still to print.
	evs, err := h.Store.Events(bg, principal, id, after, 1000)
	if err == nil {
		print(evs)
	}
	t, err := h.Runner.Get(bg, principal, id)
	if err != nil {
		errorf(e, "%v", err)
		return exitUnavailable
	}
	p.finished(t)
	switch t.Status {
	case store.StatusCompleted:
		return exitOK
	case store.StatusInterrupted:
		return exitInterrupted
	default:
		return exitFailed
	}
}

// buildSpec makes the task spec from --spec-file and --goal.
func buildSpec(goal, file string) ([]byte, error) {
	spec := map[string]json.RawMessage{}
	if file != "" {
		data, err := readInputFile("--spec-file", file, maxSpecFileBytes)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &spec); err != nil {
			return nil, fmt.Errorf("--spec-file %s: must be a JSON object: %v", file, err)
		}
	}
	return specWithGoal(spec, goal)
}

// specWithGoal is spec (executor options) with its goal set, when goal is
// not empty.
func specWithGoal(spec map[string]json.RawMessage, goal string) ([]byte, error) {
	if goal != "" {
		g, _ := json.Marshal(goal)
		spec["goal"] = g
	}
	return json.Marshal(spec)
}
