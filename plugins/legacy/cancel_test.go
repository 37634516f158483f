package legacy

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

func TestCancelledMidTurnReturnsPromptly(t *testing.T) {
	toolEffect := []sdk.Effect{{Kind: "tool", Status: "indeterminate", Summary: "shell.run"}}
	tests := []struct {
		name  string
		host  func(started chan<- struct{}) *sdktest.Host
		setup func(*sdk.StepRequest)
	}{
		{"during a model call", func(started chan<- struct{}) *sdktest.Host {
			return legacyHost(&sdktest.Host{CallModelF: func(ctx context.Context, _ sdk.ModelRequest) (sdk.ModelResponse, error) {
				return sdk.ModelResponse{}, blockUntilDone(ctx, started)
			}})
		}, nil},
		{"during a tool call", func(started chan<- struct{}) *sdktest.Host {
			return legacyHost(&sdktest.Host{
				ToolsF:     sdktest.ListTools(sdk.ToolSpec{Name: "t"}),
				CallModelF: sdktest.Replies(callTools(sdk.ToolCall{ID: "c", Name: "t"}), text("unreachable")),
				CallToolF: func(ctx context.Context, _ sdk.ToolRequest) (sdk.ToolResponse, error) {
					return sdk.ToolResponse{}, blockUntilDone(ctx, started)
				},
			})
		}, nil},
		{"the host refuses a call of the cancelled step", func(started chan<- struct{}) *sdktest.Host {
			// What a cancelled step's stale turn token gets: a refusal, which
			// must still read as the cancellation and not fail the task.
			return legacyHost(&sdktest.Host{CallModelF: func(ctx context.Context, _ sdk.ModelRequest) (sdk.ModelResponse, error) {
				_ = blockUntilDone(ctx, started)
				return sdk.ModelResponse{}, &sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: "CallModel: the step is no longer running"}
			}})
		}, nil},
		{"while waiting for an approval", func(started chan<- struct{}) *sdktest.Host {
			return legacyHost(&sdktest.Host{RequestApprovalF: func(ctx context.Context, _ string) (sdk.Decision, error) {
				return "", blockUntilDone(ctx, started)
			}})
		}, func(r *sdk.StepRequest) { r.Indeterminate = toolEffect }},
		{"a tool that finishes as the step is cancelled", func(started chan<- struct{}) *sdktest.Host {
			return legacyHost(&sdktest.Host{
				ToolsF:     sdktest.ListTools(sdk.ToolSpec{Name: "t"}),
				CallModelF: sdktest.Replies(callTools(sdk.ToolCall{ID: "c", Name: "t"}), text("unreachable")),
				CallToolF: func(ctx context.Context, _ sdk.ToolRequest) (sdk.ToolResponse, error) {
					_ = blockUntilDone(ctx, started)
					return sdk.ToolResponse{Result: "{}"}, nil // ignores the cancel
				},
			})
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{})
			host := tc.host(started)
			req := firstStep("goal")
			if tc.setup != nil {
				tc.setup(&req)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type out struct {
				res sdk.StepResult
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := New(nil).Step(ctx, host, req)
				done <- out{res, err}
			}()
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("the blocking host call never started")
			}
			cancel()
			select {
			case o := <-done:
				if !errors.Is(o.err, context.Canceled) {
					t.Fatalf("Step = %+v, %v; want context.Canceled", o.res, o.err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("Step did not return within 2s of the cancel")
			}
			if _, models, _, _ := snapshot(host); len(models) > 1 {
				t.Errorf("%d model calls after the cancel, want no new one", len(models))
			}
		})
	}
}

func TestHostEndedCallReadsAsCancellation(t *testing.T) {
	// The host may end a call on its side a moment before the step's ctx
	// is cancelled: that is a cancellation, not a failure of the task.
	host := legacyHost(&sdktest.Host{CallModelF: func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
		return sdk.ModelResponse{}, fmt.Errorf("sdk: CallModel: task cancelled: %w", context.Canceled)
	}})
	res, err := New(nil).Step(context.Background(), host, firstStep("goal"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Step = %+v, %v; want context.Canceled", res, err)
	}
}

func TestCancelledBeforeTheStepMakesNoModelCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	host := legacyHost(&sdktest.Host{})
	_, err := New(nil).Step(ctx, host, firstStep("goal"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, models, _, _ := snapshot(host); len(models) != 0 {
		t.Errorf("%d model calls, want none", len(models))
	}
}
