package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"sync"

	"github.com/taskhost/taskhost/host/datadir"
	"github.com/taskhost/taskhost/shared/proto/apipb"
)

func runCmd(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var hf hostFlags
	hf.register(fs)
	var rf runFlags
	rf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: taskhost run --goal TEXT [--executor NAME] [flags]\n       taskhost run --resume ID [flags]\n\nRuns a foreground host for one task and prints each event as it happens.\nExits 0 when the task completes, 1 when it fails or is cancelled, 6 when it is\ninterrupted (resume it with --resume ID). Ctrl-C interrupts it.\n\nFlags:")
		fs.PrintDefaults()
	}
	if _, code, ok := parseArgs(e, fs, args, 0, 0); !ok {
		return code
	}
	inputs, spec, err := rf.check()
	if err != nil {
		errorf(e, "run: %v", err)
		return exitUsage
	}
	cfg, err := hf.loadConfig()
	if err != nil {
		errorf(e, "%v", err)
		return exitUsage
	}
	d, err := startForegroundDaemon(ctx, hf.logger(e), hf.dataDir, cfg)
	if err != nil {
		errorf(e, "%v", err)
		if errors.Is(err, datadir.ErrDataDirLocked) {
			fmt.Fprintf(e.stderr, "a daemon serving this data dir runs tasks too: taskhost task create --data-dir %s --goal ... --watch\n", hf.dataDir)
		}
		return exitUnavailable
	}
	defer func() {
		if err := d.stop(ctx); err != nil {
			errorf(e, "stop: %v", err)
		}
	}()
	for _, id := range d.h.Recovery.Interrupted {
		fmt.Fprintf(e.stderr, "recovered: task %s was running when the host stopped; it is interrupted (resume with: taskhost run --resume %s)\n", id, id)
	}
	cf := &clientFlags{socket: d.socket, dataDir: hf.dataDir, json: rf.json}
	conn, err := cf.dial()
	if err != nil {
		return cf.fail(e, err)
	}
	defer conn.Close()
	tc := apipb.NewTaskServiceClient(conn)
	t, err := rf.startTask(ctx, tc, spec)
	if err != nil {
		return cf.fail(e, err)
	}
	dec := &decider{e: e, ac: apipb.NewApprovalServiceClient(conn), approveAll: rf.approveAll, rejectAll: rf.rejectAll, inputs: inputs}
	return followForeground(ctx, e, d, cf, tc, t.Id, dec)
}

// runFlags are taskhost run's own flags, beside the host's.
type runFlags struct {
	executor, goal, specFile, resume, inputValues string
	maxSteps, maxWall, maxTokens, maxOutput       int64
	files                                         fileFlags
	json, approveAll, rejectAll                   bool
}

func (rf *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&rf.executor, "executor", "", "executor kind (default: the config's tasks.executor)")
	fs.StringVar(&rf.goal, "goal", "", "the task's goal (sets spec.goal)")
	fs.StringVar(&rf.specFile, "spec-file", "", "JSON task spec file: goal and executor options")
	fs.Int64Var(&rf.maxSteps, "max-steps", 0, "step budget (default: the config's tasks.max_steps)")
	fs.Var(&rf.files, "file", "copy a file into the task's workspace before its first step: PATH or PATH=NAME (repeatable)")
	fs.Int64Var(&rf.maxWall, "max-wall-seconds", 0, "active wall-clock budget in seconds (default: the config's tasks.max_wall_seconds)")
	fs.Int64Var(&rf.maxTokens, "max-model-tokens", 0, "model-token budget, prompt + completion (default: the config's tasks.max_model_tokens)")
	fs.Int64Var(&rf.maxOutput, "max-output-bytes", 0, "budget of bytes handed back by model and tool calls (default: the config's tasks.max_output_bytes)")
	fs.StringVar(&rf.resume, "resume", "", "resume the interrupted task with this id instead of creating one")
	fs.BoolVar(&rf.json, "json", false, "print events and the final task as JSON lines")
	fs.BoolVar(&rf.approveAll, "approve-all", false, "approve every approval the task asks for (a notice is printed for each)")
	fs.BoolVar(&rf.rejectAll, "reject-all", false, "reject every approval the task asks for")
	fs.StringVar(&rf.inputValues, "input-values", "", "a file holding a JSON array: answer the task's input questions with its values, in order; a question past them is rejected")
}

// check refuses flags that do not go together and reads the input script
// and the spec the flags name (no spec for a resume).
func (rf *runFlags) check() (*inputScript, []byte, error) {
	if (rf.resume == "") == (rf.goal == "" && rf.specFile == "") {
		return nil, nil, errors.New("give --goal or --spec-file to start a task, or --resume ID to resume one")
	}
	if rf.approveAll && rf.rejectAll {
		return nil, nil, errors.New("--approve-all and --reject-all exclude each other")
	}
	var inputs *inputScript
	if rf.inputValues != "" {
		script, err := readInputScript(rf.inputValues)
		if err != nil {
			return nil, nil, err
		}
		inputs = script
	}
	if rf.resume != "" {
		return inputs, nil, nil
	}
	spec, err := buildSpec(rf.goal, rf.specFile)
	return inputs, spec, err
}

// startTask resumes the task --resume names, or creates one of spec.
func (rf *runFlags) startTask(ctx context.Context, tc apipb.TaskServiceClient, spec []byte) (*apipb.Task, error) {
	if rf.resume != "" {
		return callTask(ctx, func(cctx context.Context) (*apipb.Task, error) { return resumeTask(cctx, tc, rf.resume) })
	}
	req := &apipb.CreateTaskRequest{Executor: rf.executor, Spec: spec,
		Limits: &apipb.Limits{MaxSteps: rf.maxSteps, MaxWallSeconds: rf.maxWall, MaxModelTokens: rf.maxTokens, MaxOutputBytes: rf.maxOutput}}
	for _, f := range rf.files.files {
		req.Files = append(req.Files, &apipb.WorkspaceFile{Name: f.Name, Data: f.Data})
	}
	return callTask(ctx, func(cctx context.Context) (*apipb.Task, error) {
		resp, err := tc.CreateTask(cctx, req)
		return resp.GetTask(), err
	})
}

// callTask makes one unary call under callTimeout.
func callTask(ctx context.Context, call func(ctx context.Context) (*apipb.Task, error)) (*apipb.Task, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return call(cctx)
}

// followForeground watches task id as 'task create --watch' does, its
// approvals answered by dec. Ctrl-C (ctx ending) does not stop the watch:
// it stops the host's tasks, and the watch prints the task interrupted.
func followForeground(ctx context.Context, e *env, d *foregroundDaemon, cf *clientFlags, tc apipb.TaskServiceClient, id string, dec *decider) int {
	watched := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(watched)
	wg.Go(func() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(e.stderr, "taskhost: stopping the host; the task becomes interrupted")
			if err := d.interrupt(ctx); err != nil {
				errorf(e, "stop: %v", err)
			}
		case <-watched:
		}
	})
	return watchTask(context.WithoutCancel(ctx), e, cf, tc, id, watchOptions{
		noProgress: true, resumeWith: "taskhost run --resume",
		approvals: func(taskID string) int { return dec.decide(ctx, taskID) },
	})
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
