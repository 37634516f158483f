package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// stepHost is the Host handed to one Step. It stamps every call with the
// step's turn token, which the executor never sees, so an executor cannot
// act on behalf of another step or task.
type stepHost struct {
	client executorpb.HostServicesClient
	token  string
	ended  atomic.Bool
}

var _ Host = (*stepHost)(nil)

// end marks the step as over. A goroutine the executor leaked past Step then
// gets a refusal at once instead of a round trip to a host that would refuse
// the stale token anyway.
func (h *stepHost) end() { h.ended.Store(true) }

// ready reports why a call must not be sent, if it must not.
func (h *stepHost) ready(method string, req proto.Message) error {
	if h.ended.Load() {
		return &HostError{Kind: ErrPermissionDenied, Message: method + ": the step this host handle belongs to has ended"}
	}
	// Checked here so that an oversized request is the executor's
	// InvalidArgument and not grpc's ResourceExhausted, which would read as
	// an exhausted budget.
	if n := proto.Size(req); n > maxMessageBytes {
		return &HostError{Kind: ErrInvalidArgument, Message: fmt.Sprintf("%s: request of %d bytes exceeds the %d-byte limit", method, n, maxMessageBytes)}
	}
	return nil
}

func (h *stepHost) CallModel(ctx context.Context, req ModelRequest) (ModelResponse, error) {
	in := modelRequestToPB(h.token, req)
	if err := h.ready("CallModel", in); err != nil {
		return ModelResponse{}, err
	}
	out, err := h.client.CallModel(ctx, in)
	if err != nil {
		return ModelResponse{}, hostCallError(ctx, "CallModel", err)
	}
	return modelResponseFromPB(out), nil
}

func (h *stepHost) CallTool(ctx context.Context, req ToolRequest) (ToolResponse, error) {
	in := toolRequestToPB(h.token, req)
	if err := h.ready("CallTool", in); err != nil {
		return ToolResponse{}, err
	}
	out, err := h.client.CallTool(ctx, in)
	if err != nil {
		return ToolResponse{}, hostCallError(ctx, "CallTool", err)
	}
	return toolResponseFromPB(out), nil
}

func (h *stepHost) RequestApproval(ctx context.Context, prompt string) (Decision, error) {
	in := approvalRequestToPB(h.token, prompt)
	if err := h.ready("RequestApproval", in); err != nil {
		return "", err
	}
	out, err := h.client.RequestApproval(ctx, in)
	if err != nil {
		return "", hostCallError(ctx, "RequestApproval", err)
	}
	switch d := Decision(out.GetDecision()); d {
	case Approved, Rejected:
		return d, nil
	}
	// Fail closed: anything but an explicit approval must not read as one.
	return "", &HostError{Kind: ErrHostUnavailable, Message: fmt.Sprintf("RequestApproval: host answered with unknown decision %q", out.GetDecision())}
}

func (h *stepHost) RequestInput(ctx context.Context, question string) (json.RawMessage, error) {
	in := inputRequestToPB(h.token, question)
	if err := h.ready("RequestInput", in); err != nil {
		return nil, err
	}
	out, err := h.client.RequestInput(ctx, in)
	if err != nil {
		return nil, hostCallError(ctx, "RequestInput", err)
	}
	v := json.RawMessage(out.GetValueJson())
	if !json.Valid(v) {
		// Fail closed: an answer that is not JSON is no answer.
		return nil, &HostError{Kind: ErrHostUnavailable, Message: fmt.Sprintf("RequestInput: host answered with %d bytes that are not JSON", len(v))}
	}
	return v, nil
}

func (h *stepHost) AbandonEffect(ctx context.Context, e Effect) error {
	in, err := abandonToPB(h.token, e)
	if err != nil {
		return err
	}
	if err := h.ready("AbandonEffect", in); err != nil {
		return err
	}
	if _, err := h.client.AbandonEffect(ctx, in); err != nil {
		return hostCallError(ctx, "AbandonEffect", err)
	}
	return nil
}

func (h *stepHost) Progress(ctx context.Context, note string) error {
	in := progressToPB(h.token, note)
	if err := h.ready("Progress", in); err != nil {
		return err
	}
	if _, err := h.client.Progress(ctx, in); err != nil {
		return hostCallError(ctx, "Progress", err)
	}
	return nil
}

func (h *stepHost) Tools(ctx context.Context) ([]ToolSpec, error) {
	in := listToolsToPB(h.token)
	if err := h.ready("ListTools", in); err != nil {
		return nil, err
	}
	out, err := h.client.ListTools(ctx, in)
	if err != nil {
		return nil, hostCallError(ctx, "ListTools", err)
	}
	return toolSpecsFromPB(out), nil
}

func (h *stepHost) Delegate(ctx context.Context, req DelegateRequest) (string, error) {
	return DelegateVia(ctx, h, req)
}
