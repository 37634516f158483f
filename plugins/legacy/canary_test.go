package legacy

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// TestCanaryGoalNeverLogged runs steps of every kind with a secret in the
// goal, echoed by the model, the tools and the host's error messages, and
// checks that it reaches neither the executor's log nor the process's
// stderr. It swaps os.Stderr, so it must not run in parallel.
func TestCanaryGoalNeverLogged(t *testing.T) {
	const canary = "CANARY-7d1e9b-secret"
	goal := "deploy with token " + canary

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	captured := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		captured <- b
	}()
	restore := func() []byte {
		os.Stderr = stderr
		w.Close()
		return <-captured
	}
	defer func() {
		if os.Stderr == w {
			restore()
		}
	}()

	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "legacy", Level: hclog.Trace, Output: &logs, JSONFormat: true})
	e := New(logger)

	echo := "I looked at " + canary
	tool := sdk.ToolCall{ID: "c", Name: "shell.run", Arguments: `{"command":"echo ` + canary + `"}`}
	hostErr := &sdk.HostError{Kind: sdk.ErrHostUnavailable, Message: "model said " + canary}
	hosts := map[string]*sdktest.Host{
		"complete": legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text("TASK_COMPLETE: " + echo))}),
		"tool round trip": legacyHost(&sdktest.Host{ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "shell.run"}), CallModelF: sdktest.Replies(callTools(tool), text(echo)),
			CallToolF: func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
				return sdk.ToolResponse{Result: canary, IsError: true}, nil
			}}),
		"model error": legacyHost(&sdktest.Host{CallModelF: func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
			return sdk.ModelResponse{}, hostErr
		}}),
		"tool error": legacyHost(&sdktest.Host{ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "shell.run"}), CallModelF: sdktest.Replies(callTools(tool)),
			CallToolF: func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) { return sdk.ToolResponse{}, hostErr }}),
		"rounds exhausted": legacyHost(&sdktest.Host{ToolsF: sdktest.ListTools(sdk.ToolSpec{Name: "shell.run"}), CallModelF: sdktest.Replies(slices.Repeat([]sdk.Message{callTools(tool)}, maxMaxRounds)...)}),
		"approval error":   legacyHost(&sdktest.Host{RequestApprovalF: func(context.Context, string) (sdk.Decision, error) { return "", hostErr }}),
	}
	for name, host := range hosts {
		req := firstStep(goal)
		if name == "approval error" {
			req.Indeterminate = []sdk.Effect{{Kind: "tool", Summary: canary}}
		}
		if _, err := e.Step(context.Background(), host, req); err != nil && !strings.Contains(name, "error") {
			t.Errorf("%s: Step: %v", name, err)
		}
	}
	// A bad spec and a bad checkpoint, both carrying the canary.
	bad := firstStep(goal)
	bad.Spec = goalSpec(goal, `{"`+canary+`": 1}`)
	_, _ = e.Step(context.Background(), legacyHost(&sdktest.Host{}), bad)
	bad = firstStep(goal)
	bad.Checkpoint = &sdk.Checkpoint{Schema: CheckpointSchema, Payload: []byte(`{"` + canary + `": 1}`)}
	_, _ = e.Step(context.Background(), legacyHost(&sdktest.Host{}), bad)
	// Three steps that make no progress, the last one failing.
	host := legacyHost(&sdktest.Host{CallModelF: sdktest.Replies(text(echo), text(echo), text(echo))})
	req := firstStep(goal)
	for range 3 {
		res, _ := e.Step(context.Background(), host, req)
		req = nextStep(req, res)
	}

	out := restore()
	if logs.Len() == 0 {
		t.Fatal("the executor logged nothing: the test would prove nothing")
	}
	if strings.Contains(logs.String(), canary) {
		t.Errorf("the canary reached the executor's log:\n%s", logs.String())
	}
	if bytes.Contains(out, []byte(canary)) {
		t.Errorf("the canary reached stderr:\n%s", out)
	}
}
