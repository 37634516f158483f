package legacy

import (
	"context"
	"fmt"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// legacyHost fills what h leaves unscripted the way these tests expect of a
// cooperative host: the model answers "TASK_COMPLETE", a tool succeeds with
// {"ok":true} and an approval is granted.
func legacyHost(h *sdktest.Host) *sdktest.Host {
	if h.CallModelF == nil {
		h.CallModelF = func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
			return sdk.ModelResponse{Message: text("TASK_COMPLETE")}, nil
		}
	}
	if h.CallToolF == nil {
		h.CallToolF = func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
			return sdk.ToolResponse{Result: `{"ok":true}`}, nil
		}
	}
	if h.RequestApprovalF == nil {
		h.RequestApprovalF = func(context.Context, string) (sdk.Decision, error) { return sdk.Approved, nil }
	}
	return h
}

// toolsFail scripts Tools to fail with err.
func toolsFail(err error) func(context.Context) ([]sdk.ToolSpec, error) {
	return func(context.Context) ([]sdk.ToolSpec, error) { return nil, err }
}

// snapshot returns what h recorded: the method names in call order, and
// the model, tool and approval requests.
func snapshot(h *sdktest.Host) (calls []string, models []sdk.ModelRequest, tools []sdk.ToolRequest, approvals []string) {
	for _, m := range h.Methods() {
		calls = append(calls, string(m))
	}
	return calls, h.ModelRequests(), h.ToolRequests(), h.Prompts()
}

// text is a final model reply.
func text(s string) sdk.Message { return sdk.Message{Role: "assistant", Content: s} }

// callTools is a model reply asking for tool calls.
func callTools(calls ...sdk.ToolCall) sdk.Message {
	return sdk.Message{Role: "assistant", ToolCalls: calls}
}

// blockUntilDone is a host call that waits for the step's cancellation and
// returns what the SDK returns then. started is closed when it begins.
func blockUntilDone(ctx context.Context, started chan<- struct{}) error {
	close(started)
	<-ctx.Done()
	return fmt.Errorf("sdk: call: %w", ctx.Err())
}
