package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

const (
	kind          = "testexec"
	version       = "1.0.0"
	schema        = "testexec/1"
	badSchema     = "testexec/999"
	scriptedPanic = "testexec: scripted panic"
)

// executor is testexec's sdk.Executor. The SDK never runs two steps at
// once, so its fields need no lock.
type executor struct {
	// stderr is the process's real stderr, for the grandchild.
	stderr *os.File
	// grandchild is the "sleep 300" started by spawn_grandchild, once per
	// process.
	grandchild *os.Process
	// hog is what hog_memory_mb allocated; children what fork_processes
	// started. Both are held while the process lives.
	hog      [][]byte
	children []*exec.Cmd
}

// forkRetry bounds how long fork_processes tries a refused fork again.
const forkRetry = 2 * time.Second

func (e *executor) Describe() sdk.Description {
	return sdk.Description{
		Kind:              kind,
		Version:           version,
		CheckpointSchemas: []string{schema},
		Capabilities:      []string{"scripted"},
	}
}

// state is the checkpoint payload; Pad only makes it bigger.
type state struct {
	Done int    `json:"done"`
	Pad  string `json:"pad,omitempty"`
}

// result is the result of a completed task; Pad only makes it bigger.
type result struct {
	Steps int    `json:"steps"`
	Pad   string `json:"pad,omitempty"`
}

func (e *executor) Step(ctx context.Context, host sdk.Host, req sdk.StepRequest) (_ sdk.StepResult, err error) {
	sp, err := parseSpec(req.Spec)
	if err != nil {
		return sdk.Fail("executor_failed", "testexec: spec: "+err.Error()), nil
	}
	o := sp.Testexec

	if o.IgnoreCtx {
		// First of all, so that a test that has seen the pid file can count
		// on SIGTERM being ignored.
		signal.Ignore(syscall.SIGTERM)
	}
	if o.CancelMarker != "" {
		// Deferred so that every way out of a cancelled step leaves the
		// marker, whichever call noticed the cancellation.
		defer func() {
			if ctx.Err() == nil {
				return
			}
			content := fmt.Sprintf("cancelled attempt=%d", req.Attempt)
			if werr := writeFileAtomic(o.CancelMarker, content); werr != nil {
				err = errors.Join(err, fmt.Errorf("testexec: cancel marker: %w", werr))
			}
		}()
	}
	if r, err := e.prepare(ctx, host, o, req); r != nil || err != nil {
		return deref(r), err
	}

	done, err := readCheckpoint(req.Checkpoint)
	if err != nil {
		return sdk.Fail("checkpoint_incompatible", "testexec: "+err.Error()), nil
	}
	n := done + 1

	if o.Progress {
		if err := host.Progress(ctx, fmt.Sprintf("step %d", n)); err != nil && !errors.Is(err, sdk.ErrUnimplemented) {
			return sdk.StepResult{}, fmt.Errorf("testexec: progress: %w", err)
		}
	}
	if r, err := modelCalls(ctx, host, sp.Goal, o, n); r != nil || err != nil {
		return deref(r), err
	}
	if r, err := toolCalls(ctx, host, o, req, n); r != nil || err != nil {
		return deref(r), err
	}
	return end(ctx, o, req, n)
}

// deref is r's result, or none.
func deref(r *sdk.StepResult) sdk.StepResult {
	if r == nil {
		return sdk.StepResult{}
	}
	return *r
}

// early is a step's own result, ending it before its later phases.
func early(r sdk.StepResult) (*sdk.StepResult, error) { return &r, nil }

// prepare does what a step's options ask before it reads its checkpoint:
// files naming the process and its attempt, log and stderr lines, the
// misbehaviours, waits, resource hogs, and the indeterminate effects
// told. A non-nil result or error ends the step.
func (e *executor) prepare(ctx context.Context, host sdk.Host, o options, req sdk.StepRequest) (*sdk.StepResult, error) {
	if o.EnvFile != "" {
		if err := writeFileAtomic(o.EnvFile, strings.Join(os.Environ(), "\n")); err != nil {
			return nil, fmt.Errorf("testexec: env file: %w", err)
		}
	}
	if o.PIDFile != "" {
		if err := recordAttempt(o.PIDFile, int(req.Attempt)); err != nil {
			return nil, fmt.Errorf("testexec: pid file: %w", err)
		}
	}
	if o.SpawnGrandchild {
		if err := e.spawnGrandchild(o.PIDFile + ".grandchild"); err != nil {
			return nil, fmt.Errorf("testexec: grandchild: %w", err)
		}
	}
	if o.LogWarn != "" {
		sdk.Logger().Warn(o.LogWarn, "attempt", req.Attempt, "task", "t_forged")
	}
	if o.LogLines > 0 {
		log := sdk.Logger()
		for i := range o.LogLines {
			log.Info(fmt.Sprintf("testexec: log line %d", i))
		}
	}
	for i := range o.StderrLines {
		fmt.Fprintf(os.Stderr, "testexec: stderr line %d\n", i)
	}
	misbehave(o, int(req.Attempt))
	if o.WaitFile != "" && o.WaitFirst {
		if err := waitFile(ctx, o.WaitFile); err != nil {
			return nil, fmt.Errorf("testexec: wait_file: %w", err)
		}
	}
	e.hogMemory(o.HogMemoryMB)
	if err := e.fork(ctx, o.ForkProcesses); err != nil {
		return early(sdk.Fail("executor_failed", "testexec: "+err.Error()))
	}
	if err := fillTmp(o.FillTmpMB); err != nil {
		return early(sdk.Fail("executor_failed", "testexec: fill_tmp_mb: "+err.Error()))
	}
	if o.IndeterminateFile != "" {
		var b strings.Builder
		for _, ef := range req.Indeterminate {
			fmt.Fprintf(&b, "%d %d %s %s\n", ef.Attempt, ef.Seq, ef.Kind, ef.Status)
		}
		if err := writeFileAtomic(o.IndeterminateFile, b.String()); err != nil {
			return nil, fmt.Errorf("testexec: indeterminate file: %w", err)
		}
	}
	if o.ApproveRetry && len(req.Indeterminate) > 0 {
		if _, err := host.RequestApproval(ctx, fmt.Sprintf("retry %d unsettled effect(s)?", len(req.Indeterminate))); err != nil {
			return nil, fmt.Errorf("testexec: retry approval: %w", err)
		}
	}
	return nil, nil
}

// modelCalls makes the model calls a step's options ask for. A non-nil
// result or error ends the step.
func modelCalls(ctx context.Context, host sdk.Host, goal string, o options, n int) (*sdk.StepResult, error) {
	if o.CallModel {
		_, err := host.CallModel(ctx, sdk.ModelRequest{Messages: []sdk.Message{
			{Role: "system", Content: goal},
			{Role: "user", Content: fmt.Sprintf("step %d", n)},
		}})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("testexec: model: %w", err)
			}
			if o.ModelErrorText {
				kind := "none"
				if merr, ok := errors.AsType[*sdk.ModelError](err); ok {
					kind = string(merr.Kind)
				}
				return early(sdk.Continue(fmt.Sprintf("model error: %s: %s: %v", hostErrorKind(err), kind, err), nil))
			}
			return early(sdk.Continue("model error: "+hostErrorKind(err), nil))
		}
	}
	parent := o.ParentToken
	for i := 0; i < o.ModelCalls; i++ {
		resp, err := host.CallModel(ctx, sdk.ModelRequest{ParentCallToken: parent, Messages: []sdk.Message{{Role: "user", Content: fmt.Sprintf("step %d call %d", n, i+1)}}})
		if o.ModelChain {
			parent = resp.CallToken
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("testexec: model: %w", err)
			}
			return early(sdk.Continue("model error: "+hostErrorKind(err), nil))
		}
	}
	if err := parallelModelCalls(ctx, host, o.ParallelModelCalls, n); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("testexec: parallel model calls: %w", err)
		}
		return early(sdk.Continue("model error: "+hostErrorKind(err), nil))
	}
	return nil, nil
}

// toolCalls makes the approval request and tool calls a step's options
// ask for. A non-nil result or error ends the step.
func toolCalls(ctx context.Context, host sdk.Host, o options, req sdk.StepRequest, n int) (*sdk.StepResult, error) {
	if o.RequestApproval {
		if _, err := host.RequestApproval(ctx, fmt.Sprintf("may step %d proceed?", n)); err != nil {
			return nil, fmt.Errorf("testexec: approval: %w", err)
		}
	}
	if o.NaiveCall != nil {
		if err := naiveCalls(ctx, host, o.NaiveCall, o.NaiveMemory, req.Indeterminate, n); err != nil {
			return nil, err
		}
	}
	if o.StepFiles {
		if err := stepFiles(ctx, host, n, req.Attempt); err != nil {
			return nil, err
		}
	}
	if o.WriteBytes > 0 {
		if err := writeStepFile(ctx, host, n, o.WriteBytes); err != nil {
			return nil, err
		}
	}
	if o.CallToolFirst != nil {
		if _, err := host.CallTool(ctx, sdk.ToolRequest{Name: o.CallToolFirst.Name, Arguments: string(o.CallToolFirst.Args)}); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("testexec: first tool: %w", err)
			}
			return early(sdk.Continue("first tool error: "+hostErrorKind(err), nil))
		}
	}
	if o.CallTool != nil {
		args := string(o.CallTool.Args)
		if args == "" {
			args = "{}"
		}
		res, err := host.CallTool(ctx, sdk.ToolRequest{Name: o.CallTool.Name, Arguments: args, IdempotencyKey: fmt.Sprintf("%s/%d", req.TaskID, req.Attempt)})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("testexec: tool: %w", err)
			}
			return early(sdk.Continue("tool error: "+hostErrorKind(err), nil))
		}
		if int64(o.KillAfterToolAtAttempt) == req.Attempt {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			hang()
		}
		if res.IsError {
			return early(sdk.Continue("tool reported an error", nil))
		}
	}
	return nil, nil
}

// end waits and sleeps as a step's options ask, then fails the step as
// scripted or returns its result with its checkpoint.
func end(ctx context.Context, o options, req sdk.StepRequest, n int) (sdk.StepResult, error) {
	if o.WaitFile != "" && !o.WaitFirst {
		if err := waitFile(ctx, o.WaitFile); err != nil {
			return sdk.StepResult{}, fmt.Errorf("testexec: wait_file: %w", err)
		}
	}
	sleepMS := o.SleepMS
	if int64(o.SleepAtAttempt) == req.Attempt {
		sleepMS = o.LongSleepMS
	}
	if sleepMS > 0 {
		d := time.Duration(sleepMS) * time.Millisecond
		if o.IgnoreCtx {
			time.Sleep(d)
		} else if err := sleep(ctx, d); err != nil {
			return sdk.StepResult{}, err
		}
	}
	cp, err := checkpoint(n, o)
	if err != nil {
		return sdk.StepResult{}, err
	}
	if n >= o.Steps {
		r := result{Steps: n}
		res, err := padJSON(o.ResultBytes, &r, func(p string) { r.Pad = p })
		if err != nil {
			return sdk.StepResult{}, err
		}
		return sdk.Complete(fmt.Sprintf("done after %d steps", n), res, cp), nil
	}
	return sdk.Continue(fmt.Sprintf("step %d", n), cp), nil
}

// parallelModelCalls makes k model calls of step n at once and returns
// the first error once every call has returned.
func parallelModelCalls(ctx context.Context, host sdk.Host, k, n int) error {
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			_, errs[i] = host.CallModel(ctx, sdk.ModelRequest{Messages: []sdk.Message{{Role: "user", Content: fmt.Sprintf("step %d parallel call %d", n, i+1)}}})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// misbehave carries out the scripted crashes of this attempt, if any.
// Attempts count from 1, so a zero option never fires.
func misbehave(o options, attempt int) {
	if attempt <= 0 {
		return
	}
	if o.ExitAtAttempt == attempt {
		os.Exit(7)
	}
	if o.KillAtAttempt == attempt || o.KillEveryAttempt {
		time.Sleep(time.Duration(o.KillAfterMS) * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		// SIGKILL cannot be caught; wait here for it to land rather than
		// go on with the step.
		hang()
	}
	if o.PanicAtAttempt == attempt {
		panic(scriptedPanic)
	}
}

// readCheckpoint returns the number of completed steps.
func readCheckpoint(cp *sdk.Checkpoint) (int, error) {
	if cp == nil {
		return 0, nil
	}
	if cp.Schema != schema {
		return 0, fmt.Errorf("checkpoint schema %q, want %q", cp.Schema, schema)
	}
	var s state
	if err := json.Unmarshal(cp.Payload, &s); err != nil {
		return 0, fmt.Errorf("checkpoint payload: %w", err)
	}
	if s.Done < 0 {
		return 0, fmt.Errorf("checkpoint payload: done = %d", s.Done)
	}
	return s.Done, nil
}

func checkpoint(n int, o options) (*sdk.Checkpoint, error) {
	// misbehave_at_step confines checkpoint_bytes and bad_schema to one step,
	// so that the step before it leaves a good checkpoint to keep.
	now := o.MisbehaveAtStep == 0 || o.MisbehaveAtStep == n
	st := state{Done: n}
	size := 0
	if now {
		size = o.CheckpointBytes
	}
	payload, err := padJSON(size, &st, func(p string) { st.Pad = p })
	if err != nil {
		return nil, err
	}
	s := schema
	if o.BadSchema && now {
		s = badSchema
	}
	return &sdk.Checkpoint{Schema: s, Payload: payload}, nil
}

// padJSON encodes v and, when size exceeds that length, pads it through
// setPad so that the encoding is exactly size bytes.
func padJSON(size int, v any, setPad func(string)) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	const overhead = len(`,"pad":""`)
	if size <= len(b)+overhead {
		return b, nil
	}
	setPad(strings.Repeat("x", size-len(b)-overhead))
	return json.Marshal(v)
}

// hostErrorKind names the sdk error an error matches.
func hostErrorKind(err error) string {
	if k := sdk.HostErrorKind(err); k != "" {
		return k
	}
	return "other"
}

// waitFile polls for path until it exists or ctx ends.
func waitFile(ctx context.Context, path string) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sleep waits for d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// recordAttempt writes the pid and logs the attempt, so a test can find the
// plugin to kill it and count the attempts it saw.
func recordAttempt(pidFile string, attempt int) error {
	if err := writeFileAtomic(pidFile, strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	f, err := os.OpenFile(pidFile+".log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		return err
	}
	// A later attempt's plugin may run under another uid of the daemon's
	// pool: whoever created the log lets the others append (a non-owner's
	// chmod fails, and changes nothing).
	_ = f.Chmod(0o666)
	if _, err := fmt.Fprintf(f, "attempt %d started\n", attempt); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// spawnGrandchild starts "sleep 300" holding the plugin's real stderr, which
// makes go-plugin's Exited() wait for it after the plugin dies.
func (e *executor) spawnGrandchild(pidFile string) error {
	if e.grandchild != nil {
		return nil
	}
	cmd := exec.Command("sleep", "300")
	cmd.Stderr = e.stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	e.grandchild = cmd.Process
	go func() { _ = cmd.Wait() }() // reap it if it dies while we live
	return writeFileAtomic(pidFile, strconv.Itoa(cmd.Process.Pid))
}

// hogMemory allocates mb MiB and touches every page of it, so that it is
// charged, not only reserved.
func (e *executor) hogMemory(mb int) {
	page := os.Getpagesize()
	for range mb {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += page {
			b[i] = 1
		}
		e.hog = append(e.hog, b)
	}
}

// fillTmp writes mb MiB to a new file in $TMPDIR.
func fillTmp(mb int) error {
	if mb == 0 {
		return nil
	}
	f, err := os.CreateTemp("", "fill-")
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for range mb {
		if _, err := f.Write(chunk); err != nil {
			return err
		}
	}
	return f.Sync()
}

// fork starts n "sleep 300" children, trying a refused fork again until
// forkRetry has passed.
func (e *executor) fork(ctx context.Context, n int) error {
	started := 0
	var deadline time.Time
	for started < n {
		cmd := exec.Command("sleep", "300")
		err := cmd.Start()
		if err == nil {
			e.children = append(e.children, cmd)
			go func() { _ = cmd.Wait() }()
			started, deadline = started+1, time.Time{}
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(forkRetry)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fork refused after %d children: %w", started, err)
		}
		if err := sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes content by renaming a temporary file into place, so
// that a test polling for the file never reads half of it.
func writeFileAtomic(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	// Readable by a later attempt's plugin, which may run under another
	// uid of the daemon's pool (its naive memory, say).
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// naiveCalls re-issues every unsettled tool call it made (by key "call-K")
// that effs list or memory remembers, then makes logical call n, each once,
// ignoring what the host answers: only the context's end stops it. A call
// that succeeds is forgotten; memory ("" none) keeps the rest.
func naiveCalls(ctx context.Context, host sdk.Host, c *toolCall, memory string, effs []sdk.Effect, n int) error {
	pending := map[int]bool{}
	if memory != "" {
		data, err := os.ReadFile(memory)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("testexec: naive memory: %w", err)
		}
		for _, f := range strings.Fields(string(data)) {
			if k, err := strconv.Atoi(f); err == nil {
				pending[k] = true
			}
		}
	}
	for _, ef := range effs {
		var k int
		if _, err := fmt.Sscanf(ef.IdempotencyKey, "call-%d", &k); err == nil && ef.Kind == "tool" {
			pending[k] = true
		}
	}
	calls := slices.Sorted(maps.Keys(pending))
	if !pending[n] {
		calls = append(calls, n)
	}
	for _, k := range calls {
		args := strings.ReplaceAll(string(c.Args), "{n}", strconv.Itoa(k))
		_, err := host.CallTool(ctx, sdk.ToolRequest{Name: c.Name, Arguments: args, IdempotencyKey: fmt.Sprintf("call-%d", k)})
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("testexec: naive call %d: %w", k, err)
		case err == nil:
			delete(pending, k)
		}
	}
	if memory == "" {
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(pending)) {
		fmt.Fprintln(&b, k)
	}
	if err := writeFileAtomic(memory, b.String()); err != nil {
		return fmt.Errorf("testexec: naive memory: %w", err)
	}
	return nil
}

// writeStepFile writes write_bytes' file of step n.
func writeStepFile(ctx context.Context, host sdk.Host, n, size int) error {
	args, _ := json.Marshal(map[string]string{"path": fmt.Sprintf("w-%d.txt", n), "content": strings.Repeat("x", size)})
	return callChecked(ctx, host, sdk.ToolRequest{Name: "workspace.write", Arguments: string(args)})
}

// callChecked makes tool call c; a tool error or a refusal is an error.
func callChecked(ctx context.Context, host sdk.Host, c sdk.ToolRequest) error {
	res, err := host.CallTool(ctx, c)
	if err != nil {
		return fmt.Errorf("testexec: %s: %w", c.Name, err)
	}
	if res.IsError {
		return fmt.Errorf("testexec: %s reported an error: %s", c.Name, res.Result)
	}
	return nil
}

// stepFiles writes step_files' two files of step n, attempt a; a tool
// error or a refusal fails the step.
func stepFiles(ctx context.Context, host sdk.Host, n int, a int64) error {
	write, _ := json.Marshal(map[string]string{"path": fmt.Sprintf("w-%d.txt", n), "content": fmt.Sprintf("step %d attempt %d", n, a)})
	shell, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("echo step %d > s-%d.txt", n, a)})
	for _, c := range []sdk.ToolRequest{{Name: "workspace.write", Arguments: string(write)}, {Name: "shell.run", Arguments: string(shell)}} {
		if err := callChecked(ctx, host, c); err != nil {
			return fmt.Errorf("step_files: %w", err)
		}
	}
	return nil
}
