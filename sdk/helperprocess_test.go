package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// helperEnv selects what TestHelperProcess does when the test binary
// re-executes itself; unset, TestHelperProcess is a no-op test.
const helperEnv = "TASKHOST_SDK_TEST_HELPER"

// helperLifetime bounds how long a helper process lives if the test that
// started it fails to end it.
const helperLifetime = time.Minute

// helperCommand re-executes the test binary as a helper in mode.
func helperCommand(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	return cmd
}

// TestHelperProcess is not a test: it is the body of the helper processes
// other tests start (the pattern go-plugin's own tests use).
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "plugin":
		Serve(helperExecutor{})
		os.Exit(0)
	case "middle":
		runMiddle()
	case "watcher":
		runWatcher()
	default:
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// runMiddle plays a host: it starts a watcher as its child, sharing its
// stdout so the watcher's "ready" line reaches the test, and waits to be
// killed.
func runMiddle() {
	cmd := helperCommand("watcher")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start watcher:", err)
		os.Exit(2)
	}
	time.Sleep(helperLifetime)
	os.Exit(5)
}

// runWatcher plays a plugin: it runs the same parent watch as Serve and
// reports its pid once the parent is recorded.
func runWatcher() {
	stopOnSignalOrOrphan(newLogger(), newStepGate())
	fmt.Printf("ready %d\n", os.Getpid())
	time.Sleep(helperLifetime)
	os.Exit(4)
}

// helperSpec scripts helperExecutor through the task spec.
type helperSpec struct {
	Mode   string `json:"mode"`
	Marker string `json:"marker"`
	Bytes  int    `json:"bytes"`
}

// helperExecutor is the executor of the "plugin" helper process.
type helperExecutor struct{}

func (helperExecutor) Describe() Description {
	return Description{Kind: "sdkhelper", Version: "1.2.3", CheckpointSchemas: []string{"sdkhelper/1"}, Runtime: map[string]string{"pid": fmt.Sprint(os.Getpid())}}
}

func (helperExecutor) Step(ctx context.Context, host Host, req StepRequest) (StepResult, error) {
	var spec helperSpec
	if err := json.Unmarshal(req.Spec, &spec); err != nil {
		return StepResult{}, fmt.Errorf("helper spec: %w", err)
	}
	switch spec.Mode {
	case "echo":
		return Complete(fmt.Sprintf("%s attempt %d", req.TaskID, req.Attempt), req.Spec, req.Checkpoint), nil
	case "model":
		resp, err := host.CallModel(ctx, ModelRequest{Messages: []Message{{Role: "user", Content: "hello"}}})
		if err != nil {
			return Continue("model error: "+err.Error(), nil), nil
		}
		return Continue("model said "+resp.Message.Content, nil), nil
	case "wait-cancel":
		// Tell the host the step is running, then wait to be cancelled.
		// The cancellation may already end the Progress call itself.
		_ = host.Progress(ctx, "waiting")
		<-ctx.Done()
		if err := os.WriteFile(spec.Marker, []byte("cancelled"), 0o600); err != nil {
			return StepResult{}, errors.Join(ctx.Err(), err)
		}
		return StepResult{}, ctx.Err()
	case "big-result":
		return Complete("big", []byte(strings.Repeat("r", spec.Bytes)), nil), nil
	case "panic":
		panic("sdk test: scripted panic")
	}
	return Fail("executor_failed", "unknown helper mode "+spec.Mode), nil
}
