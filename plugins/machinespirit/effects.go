package machinespirit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/taskhost/taskhost/sdk"
)

// perform carries out one effect frame through the host and returns the
// answer for the worker. Host refusals become effect errors the Prolog
// code sees as effect_error(Kind, Error, Message); they do not end the
// step by themselves.
func (st *stepState) perform(ctx context.Context, f *inFrame, seq int) effectResultFrame {
	value, err := st.dispatch(ctx, f, seq)
	if err != nil {
		return effectResultFrame{Error: &effectError{Kind: errorKind(err), Message: truncate(err.Error(), 1000)}}
	}
	return effectResultFrame{OK: true, Value: value}
}

func (st *stepState) dispatch(ctx context.Context, f *inFrame, seq int) (any, error) {
	switch f.Kind {
	case "model":
		return st.model(ctx, f, seq)
	case "tool":
		return st.tool(ctx, f, seq)
	case "approval":
		d, err := st.host.RequestApproval(ctx, f.Prompt)
		if err != nil {
			return nil, err
		}
		return map[string]string{"decision": string(d)}, nil
	case "spirit":
		return st.spirit(ctx, f)
	case "progress":
		if err := st.host.Progress(ctx, truncate(f.Note, 200)); err != nil && !errors.Is(err, sdk.ErrUnimplemented) {
			return nil, err
		}
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("%w: unknown effect kind %q", sdk.ErrInvalidArgument, f.Kind)
}

func (st *stepState) model(ctx context.Context, f *inFrame, seq int) (any, error) {
	req := sdk.ModelRequest{ParentCallToken: *f.Parent}
	for _, m := range f.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return nil, fmt.Errorf("%w: message role %q", sdk.ErrInvalidArgument, truncate(m.Role, 20))
		}
		req.Messages = append(req.Messages, sdk.Message{Role: m.Role, Content: m.Content})
	}
	var resp sdk.ModelResponse
	var err error
	if len(f.Tools) > 0 {
		resp, err = st.modelWithTools(ctx, req, f.Tools, seq)
	} else {
		resp, err = st.callModel(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"text": resp.Message.Content, "token": resp.CallToken, "depth": resp.Depth}, nil
}

// callModel is one model call; it keeps the depth the host gave it, for
// sub-runs started from it.
func (st *stepState) callModel(ctx context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
	resp, err := st.host.CallModel(ctx, req)
	if err != nil {
		return resp, err
	}
	st.mu.Lock()
	st.tokenDepth[resp.CallToken] = int(resp.Depth)
	st.mu.Unlock()
	return resp, nil
}

// tool calls a host tool. The idempotency key names the task, the node
// execution and the effect's place in it: a node re-run after a crash
// makes the same calls in the same order, so the same keys.
func (st *stepState) tool(ctx context.Context, f *inFrame, seq int) (any, error) {
	var args bytes.Buffer
	if err := json.Compact(&args, f.Arguments); err != nil {
		return nil, fmt.Errorf("%w: tool arguments: %v", sdk.ErrInvalidArgument, err)
	}
	key := fmt.Sprintf("machinespirit:%s:%d:%d", st.req.TaskID, st.execution, seq)
	resp, err := st.host.CallTool(ctx, sdk.ToolRequest{Name: f.Name, Arguments: args.String(), IdempotencyKey: key})
	if err != nil {
		return nil, err
	}
	var result any = resp.Result
	if json.Valid([]byte(resp.Result)) {
		result = json.RawMessage(resp.Result)
	}
	return map[string]any{"result": result, "is_error": resp.IsError}, nil
}

// spirit admits a sub-run at the depth the host gave the model call it
// starts from, plus one (1 when it starts outside any model call): the
// host's call tokens decide, as for model calls, never a depth the worker
// names. The worker's claim must be that depth: a sub-run started inside
// a sub-run without a model call of its own in between would otherwise
// claim a deeper level on the same token and nest without bound. The
// budget's limit is the host's (StepRequest.Limits).
func (st *stepState) spirit(ctx context.Context, f *inFrame) (any, error) {
	claimed, parent := *f.Depth, *f.Parent
	depth := 1
	if parent != "" {
		st.mu.Lock()
		d, ok := st.tokenDepth[parent]
		st.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: sub-run from an unknown call", sdk.ErrInvalidArgument)
		}
		depth = d + 1
	}
	if claimed != depth {
		return nil, fmt.Errorf("%w: a sub-run from this call runs at depth %d, not %d: start it from a model call of its own run", sdk.ErrInvalidArgument, depth, claimed)
	}
	if limit := st.req.Limits.Depth; int64(depth) > limit {
		return nil, &sdk.HostError{Kind: sdk.ErrBudgetExhausted, Message: fmt.Sprintf("sub-run of %s at depth %d exceeds max_depth %d", truncate(f.Graph, 64), depth, limit)}
	}
	if err := st.host.Progress(ctx, truncate(fmt.Sprintf("sub-run of graph %s at depth %d", f.Graph, depth), 200)); err != nil && !errors.Is(err, sdk.ErrUnimplemented) {
		return nil, err
	}
	return map[string]any{}, nil
}

// errorKind names an error for Prolog.
func errorKind(err error) string {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	if _, ok := errors.AsType[*toolRoundsError](err); ok {
		return "tool_rounds_exhausted"
	}
	if k := sdk.HostErrorKind(err); k != "" {
		return k
	}
	return "other"
}
