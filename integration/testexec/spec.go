package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// spec is a task spec as testexec reads it. The fields are documented in
// the package comment.
type spec struct {
	Goal     string  `json:"goal"`
	Testexec options `json:"testexec"`
	// Model and Tools are the host's fields of a spec (a task's model
	// options and tool list): the host reads them, testexec lets them be.
	Model json.RawMessage `json:"model"`
	Tools json.RawMessage `json:"tools"`
}

type options struct {
	Steps           int    `json:"steps"`
	SleepMS         int    `json:"sleep_ms"`
	CancelMarker    string `json:"cancel_marker"`
	PIDFile         string `json:"pid_file"`
	ExitAtAttempt   int    `json:"exit_at_attempt"`
	KillAtAttempt   int    `json:"kill_at_attempt"`
	KillAfterMS     int    `json:"kill_after_ms"`
	PanicAtAttempt  int    `json:"panic_at_attempt"`
	IgnoreCtx       bool   `json:"ignore_ctx"`
	SpawnGrandchild bool   `json:"spawn_grandchild"`
	CheckpointBytes int    `json:"checkpoint_bytes"`
	ResultBytes     int    `json:"result_bytes"`
	BadSchema       bool   `json:"bad_schema"`
	Progress        bool   `json:"progress"`
	CallModel       bool   `json:"call_model"`
	ModelErrorText  bool   `json:"model_error_text"`

	KillEveryAttempt bool `json:"kill_every_attempt"`
	SleepAtAttempt   int  `json:"sleep_at_attempt"`
	LongSleepMS      int  `json:"long_sleep_ms"`
	MisbehaveAtStep  int  `json:"misbehave_at_step"`

	// StepFiles makes each step n of attempt a write two files before
	// its other tool calls: w-n.txt ("step n attempt a") with
	// workspace.write and s-a.txt with shell.run — a test of the stored
	// workspace tells from them which steps and attempts its files are
	// of.
	StepFiles bool `json:"step_files"`
	// WriteBytes makes each step n write w-n.txt of that many bytes with
	// workspace.write, and nothing else: the bench's workspace row.
	WriteBytes int `json:"write_bytes"`

	CallTool *toolCall `json:"call_tool"`
	// CallToolFirst is a tool call made before call_tool, each step.
	CallToolFirst   *toolCall `json:"call_tool_first"`
	RequestApproval bool      `json:"request_approval"`
	ModelCalls      int       `json:"model_calls"`
	ModelChain      bool      `json:"model_chain"`
	// ParallelModelCalls model calls are made at once each step, after
	// model_calls: an executor that asks the host for more than it
	// serves together.
	ParallelModelCalls int    `json:"parallel_model_calls"`
	ParentToken        string `json:"parent_token"`
	EnvFile            string `json:"env_file"`
	// WaitFile makes every step wait, before it ends, until this file
	// exists: a test does something at a known moment of the step, then
	// creates it.
	WaitFile string `json:"wait_file"`
	// WaitFirst moves that wait to the start of the step, before its
	// host calls.
	WaitFirst bool `json:"wait_first"`
	// KillAfterToolAtAttempt SIGKILLs the process at attempt K right after
	// call_tool returned: the effect is observed, the step never ends.
	KillAfterToolAtAttempt int `json:"kill_after_tool_at_attempt"`
	// ApproveRetry asks an approval before anything else when the request
	// lists unsettled effects, as a well-behaved executor does. Without
	// it testexec just re-issues them: a third-party executor the host
	// must hold back.
	ApproveRetry bool `json:"approve_retry"`
	// NaiveCall is the naive executor of the unsettled-effect gate's
	// tests: each step re-issues every unsettled tool call the request
	// lists (by its key "call-K"), then makes its own logical call K = n,
	// "{n}" in the arguments replaced by K, and moves on whatever the
	// answers were.
	NaiveCall *toolCall `json:"naive_call"`
	// NaiveMemory is a file where the naive executor keeps, across runs,
	// every call it was told was unsettled until a re-issue of it
	// succeeds: it re-issues them every step.
	NaiveMemory string `json:"naive_memory"`
	// IndeterminateFile receives, each step, the request's unsettled
	// effects as JSON lines "attempt seq kind status".
	IndeterminateFile string `json:"indeterminate_file"`
	// LogWarn is logged at WARN through sdk.Logger each step.
	LogWarn string `json:"log_warn"`
	// StderrLines plain lines "testexec: stderr line i" are written to
	// os.Stderr each step (after Serve, go-plugin's relay).
	StderrLines int `json:"stderr_lines"`
	// LogLines lines "testexec: log line i" are logged at INFO through
	// sdk.Logger each step.
	LogLines int `json:"log_lines"`
	// HogMemoryMB MiB are allocated, every page touched, and held for the
	// process's life, at the start of each step (a memory hog).
	HogMemoryMB int `json:"hog_memory_mb"`
	// ForkProcesses "sleep 300" children are started and held for the
	// process's life at the start of each step (a fork loop); a refused
	// fork is tried again until forkRetry has passed, then the step fails.
	ForkProcesses int `json:"fork_processes"`
	// FillTmpMB MiB are written, each step, to a new file in $TMPDIR (a
	// disk filler); a write that fails fails the step, naming the error.
	FillTmpMB int `json:"fill_tmp_mb"`
}

// maxParallelModelCalls bounds parallel_model_calls: the calls of one step
// the protocol lets be in flight (docs/executor-sdk.md, Limits); the SDK
// would hold more back itself, and the test would not be the host's.
const maxParallelModelCalls = 32

// toolCall is a scripted tool call.
type toolCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// parseSpec decodes and checks a spec strictly: a misspelt option must fail
// the test that used it, not silently script nothing.
func parseSpec(raw []byte) (spec, error) {
	var s spec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return spec{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return spec{}, errors.New("trailing data after the spec object")
	}
	if err := s.Testexec.validate(); err != nil {
		return spec{}, err
	}
	if s.Testexec.Steps == 0 {
		s.Testexec.Steps = 1
	}
	return s, nil
}

func (o options) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"steps", o.Steps},
		{"sleep_ms", o.SleepMS},
		{"exit_at_attempt", o.ExitAtAttempt},
		{"kill_at_attempt", o.KillAtAttempt},
		{"kill_after_ms", o.KillAfterMS},
		{"panic_at_attempt", o.PanicAtAttempt},
		{"checkpoint_bytes", o.CheckpointBytes},
		{"result_bytes", o.ResultBytes},
		{"sleep_at_attempt", o.SleepAtAttempt},
		{"long_sleep_ms", o.LongSleepMS},
		{"misbehave_at_step", o.MisbehaveAtStep},
		{"model_calls", o.ModelCalls},
		{"parallel_model_calls", o.ParallelModelCalls},
		{"kill_after_tool_at_attempt", o.KillAfterToolAtAttempt},
		{"hog_memory_mb", o.HogMemoryMB},
		{"fork_processes", o.ForkProcesses},
		{"fill_tmp_mb", o.FillTmpMB},
	} {
		if f.v < 0 {
			return fmt.Errorf("testexec.%s: must not be negative, got %d", f.name, f.v)
		}
	}
	if o.ParallelModelCalls > maxParallelModelCalls {
		return fmt.Errorf("testexec.parallel_model_calls: at most %d (the protocol's calls in flight per step), got %d", maxParallelModelCalls, o.ParallelModelCalls)
	}
	if o.KillAfterMS > 0 && o.KillAtAttempt == 0 {
		return errors.New("testexec.kill_after_ms: needs kill_at_attempt")
	}
	if o.SpawnGrandchild && o.PIDFile == "" {
		return errors.New("testexec.spawn_grandchild: needs pid_file, or nobody could find the grandchild to kill it")
	}
	return nil
}
