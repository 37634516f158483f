package legacy

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/taskhost/taskhost/sdk"
)

// fakeHost is an sdk.Host that records every call, in order, and answers
// from a script.
type fakeHost struct {
	// model answers the n-th model call (from 0); nil replies
	// "TASK_COMPLETE".
	model func(ctx context.Context, n int, req sdk.ModelRequest) (sdk.ModelResponse, error)
	// tool answers a tool call; nil returns {"ok":true}.
	tool func(ctx context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error)
	// approve answers an approval request; nil approves.
	approve func(ctx context.Context, prompt string) (sdk.Decision, error)
	// tools is what Tools lists, unless toolsErr is set.
	tools    []sdk.ToolSpec
	toolsErr error

	mu        sync.Mutex
	calls     []string // method names in call order
	models    []sdk.ModelRequest
	toolReqs  []sdk.ToolRequest
	approvals []string
}

var _ sdk.Host = (*fakeHost)(nil)

func (h *fakeHost) record(method string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, method)
}

func (h *fakeHost) CallModel(ctx context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
	h.mu.Lock()
	h.calls = append(h.calls, "CallModel")
	// A deep enough copy that later changes to the executor's history
	// cannot rewrite what was sent.
	req.Messages = slices.Clone(req.Messages)
	for i := range req.Messages {
		req.Messages[i].ToolCalls = slices.Clone(req.Messages[i].ToolCalls)
	}
	n := len(h.models)
	h.models = append(h.models, req)
	model := h.model
	h.mu.Unlock()
	if model == nil {
		return sdk.ModelResponse{Message: sdk.Message{Role: "assistant", Content: "TASK_COMPLETE"}}, nil
	}
	return model(ctx, n, req)
}

func (h *fakeHost) CallTool(ctx context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error) {
	h.mu.Lock()
	h.calls = append(h.calls, "CallTool")
	h.toolReqs = append(h.toolReqs, req)
	tool := h.tool
	h.mu.Unlock()
	if tool == nil {
		return sdk.ToolResponse{Result: `{"ok":true}`}, nil
	}
	return tool(ctx, req)
}

func (h *fakeHost) RequestApproval(ctx context.Context, prompt string) (sdk.Decision, error) {
	h.mu.Lock()
	h.calls = append(h.calls, "RequestApproval")
	h.approvals = append(h.approvals, prompt)
	approve := h.approve
	h.mu.Unlock()
	if approve == nil {
		return sdk.Approved, nil
	}
	return approve(ctx, prompt)
}

func (h *fakeHost) Progress(context.Context, string) error {
	h.record("Progress")
	return nil
}

func (h *fakeHost) Tools(context.Context) ([]sdk.ToolSpec, error) {
	h.record("Tools")
	if h.toolsErr != nil {
		return nil, h.toolsErr
	}
	return slices.Clone(h.tools), nil
}

// snapshot returns copies of what the host recorded.
func (h *fakeHost) snapshot() (calls []string, models []sdk.ModelRequest, tools []sdk.ToolRequest, approvals []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls), slices.Clone(h.models), slices.Clone(h.toolReqs), slices.Clone(h.approvals)
}

// replies scripts the model: the n-th call gets msgs[n]; a call past the
// script is an error.
func replies(msgs ...sdk.Message) func(context.Context, int, sdk.ModelRequest) (sdk.ModelResponse, error) {
	return func(_ context.Context, n int, _ sdk.ModelRequest) (sdk.ModelResponse, error) {
		if n >= len(msgs) {
			return sdk.ModelResponse{}, &sdk.HostError{Kind: sdk.ErrHostUnavailable, Message: fmt.Sprintf("fake model: no reply scripted for call %d", n)}
		}
		m := msgs[n]
		if m.Role == "" {
			m.Role = "assistant"
		}
		return sdk.ModelResponse{Message: m}, nil
	}
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
