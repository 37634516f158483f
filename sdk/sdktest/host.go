// Package sdktest helps test executors written with the sdk package without
// a host: Host is an sdk.Host whose every call is scripted by a function
// field and recorded.
package sdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/taskhost/taskhost/sdk"
)

// Method names a Host call in the record.
type Method string

const (
	CallModel       Method = "CallModel"
	CallTool        Method = "CallTool"
	RequestApproval Method = "RequestApproval"
	RequestInput    Method = "RequestInput"
	Progress        Method = "Progress"
	Tools           Method = "Tools"
	AbandonEffect   Method = "AbandonEffect"
)

// Call is one recorded Host call.
type Call struct {
	Method Method
	Model  sdk.ModelRequest // CallModel: a copy the executor cannot change afterwards
	Tool   sdk.ToolRequest  // CallTool
	Prompt string           // RequestApproval, RequestInput
	Note   string           // Progress
	Effect sdk.Effect       // AbandonEffect
	// Err is what the call returned.
	Err error
}

// Host is an sdk.Host for executor tests, in the style of Nomad's
// MockDriver: each method calls its function field when set. Unset, a call
// that would reach the outside world (CallModel, CallTool, RequestApproval,
// RequestInput) fails with sdk.ErrUnimplemented — an approval is never granted by
// default — while Progress succeeds and Tools lists nothing.
//
// Like the SDK's own handle, a call whose ctx has ended returns the
// context's error without reaching the function field, and every call after
// End is refused with sdk.ErrPermissionDenied. Every call is recorded,
// refused ones included. A Host is safe for concurrent use; its function
// fields are called without its lock held and must not be changed once the
// Host is in use.
type Host struct {
	CallModelF       func(ctx context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error)
	CallToolF        func(ctx context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error)
	RequestApprovalF func(ctx context.Context, prompt string) (sdk.Decision, error)
	RequestInputF    func(ctx context.Context, question string) (json.RawMessage, error)
	ProgressF        func(ctx context.Context, note string) error
	ToolsF           func(ctx context.Context) ([]sdk.ToolSpec, error)
	// AbandonEffectF, unset, accepts every abandon.
	AbandonEffectF func(ctx context.Context, e sdk.Effect) error

	mu    sync.Mutex
	calls []Call
	ended bool
}

var _ sdk.Host = (*Host)(nil)

// End marks the step the Host serves as over, as the SDK does when Step
// returns: a goroutine the executor leaked gets refusals from then on.
func (h *Host) End() {
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
}

// refused is why a call must not reach its function field, if it must not.
func (h *Host) refused(ctx context.Context, m Method) error {
	h.mu.Lock()
	ended := h.ended
	h.mu.Unlock()
	if ended {
		return &sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: string(m) + ": the step this host handle belongs to has ended"}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sdktest: %s: %w", m, err)
	}
	return nil
}

func unscripted(m Method) error {
	return &sdk.HostError{Kind: sdk.ErrUnimplemented, Message: fmt.Sprintf("sdktest: %s is not scripted (set %sF)", m, m)}
}

// begin records c as it starts, so a test sees a call that is still
// blocked; done records what it returned.
func (h *Host) begin(c Call) (done func(error)) {
	h.mu.Lock()
	i := len(h.calls)
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	return func(err error) {
		h.mu.Lock()
		h.calls[i].Err = err
		h.mu.Unlock()
	}
}

func (h *Host) CallModel(ctx context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
	// Cloned before anything else: an executor that reuses its history
	// slice must not rewrite what the record says it sent.
	req = cloneModelRequest(req)
	done := h.begin(Call{Method: CallModel, Model: req})
	resp, err := sdk.ModelResponse{}, h.refused(ctx, CallModel)
	switch {
	case err != nil:
	case h.CallModelF != nil:
		resp, err = h.CallModelF(ctx, cloneModelRequest(req))
	default:
		err = unscripted(CallModel)
	}
	done(err)
	return resp, err
}

func (h *Host) CallTool(ctx context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error) {
	done := h.begin(Call{Method: CallTool, Tool: req})
	resp, err := sdk.ToolResponse{}, h.refused(ctx, CallTool)
	switch {
	case err != nil:
	case h.CallToolF != nil:
		resp, err = h.CallToolF(ctx, req)
	default:
		err = unscripted(CallTool)
	}
	done(err)
	return resp, err
}

func (h *Host) RequestApproval(ctx context.Context, prompt string) (sdk.Decision, error) {
	done := h.begin(Call{Method: RequestApproval, Prompt: prompt})
	var d sdk.Decision
	err := h.refused(ctx, RequestApproval)
	switch {
	case err != nil:
	case h.RequestApprovalF != nil:
		d, err = h.RequestApprovalF(ctx, prompt)
	default:
		err = unscripted(RequestApproval)
	}
	done(err)
	return d, err
}

func (h *Host) RequestInput(ctx context.Context, question string) (json.RawMessage, error) {
	done := h.begin(Call{Method: RequestInput, Prompt: question})
	var v json.RawMessage
	err := h.refused(ctx, RequestInput)
	switch {
	case err != nil:
	case h.RequestInputF != nil:
		v, err = h.RequestInputF(ctx, question)
	default:
		err = unscripted(RequestInput)
	}
	done(err)
	return v, err
}

func (h *Host) AbandonEffect(ctx context.Context, e sdk.Effect) error {
	done := h.begin(Call{Method: AbandonEffect, Effect: e})
	err := h.refused(ctx, AbandonEffect)
	if err == nil && h.AbandonEffectF != nil {
		err = h.AbandonEffectF(ctx, e)
	}
	done(err)
	return err
}

func (h *Host) Progress(ctx context.Context, note string) error {
	done := h.begin(Call{Method: Progress, Note: note})
	err := h.refused(ctx, Progress)
	if err == nil && h.ProgressF != nil {
		err = h.ProgressF(ctx, note)
	}
	done(err)
	return err
}

func (h *Host) Tools(ctx context.Context) ([]sdk.ToolSpec, error) {
	done := h.begin(Call{Method: Tools})
	var specs []sdk.ToolSpec
	err := h.refused(ctx, Tools)
	if err == nil && h.ToolsF != nil {
		specs, err = h.ToolsF(ctx)
	}
	done(err)
	return specs, err
}

// Calls returns every call so far, in the order they were made; Err is
// nil while a call has not returned.
func (h *Host) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// Methods returns the method of every call so far, in order.
func (h *Host) Methods() []Method {
	var ms []Method
	for _, c := range h.Calls() {
		ms = append(ms, c.Method)
	}
	return ms
}

// ModelRequests returns the requests of the model calls so far, in order.
func (h *Host) ModelRequests() []sdk.ModelRequest {
	var rs []sdk.ModelRequest
	for _, c := range h.Calls() {
		if c.Method == CallModel {
			rs = append(rs, c.Model)
		}
	}
	return rs
}

// ToolRequests returns the requests of the tool calls so far, in order.
func (h *Host) ToolRequests() []sdk.ToolRequest {
	var rs []sdk.ToolRequest
	for _, c := range h.Calls() {
		if c.Method == CallTool {
			rs = append(rs, c.Tool)
		}
	}
	return rs
}

// Prompts returns the prompts of the approval requests so far, in order.
func (h *Host) Prompts() []string {
	var ps []string
	for _, c := range h.Calls() {
		if c.Method == RequestApproval {
			ps = append(ps, c.Prompt)
		}
	}
	return ps
}

// Notes returns the progress notes so far, in order.
func (h *Host) Notes() []string {
	var ns []string
	for _, c := range h.Calls() {
		if c.Method == Progress {
			ns = append(ns, c.Note)
		}
	}
	return ns
}

func cloneModelRequest(req sdk.ModelRequest) sdk.ModelRequest {
	req.Messages = slices.Clone(req.Messages)
	for i := range req.Messages {
		req.Messages[i].ToolCalls = slices.Clone(req.Messages[i].ToolCalls)
	}
	req.Tools = slices.Clone(req.Tools)
	return req
}

// Replies scripts CallModel: the n-th call (from 0) is answered with
// msgs[n], as the assistant when a message names no role; a call past the
// script fails with sdk.ErrHostUnavailable.
func Replies(msgs ...sdk.Message) func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
	var mu sync.Mutex
	n := 0
	return func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		if i >= len(msgs) {
			return sdk.ModelResponse{}, &sdk.HostError{Kind: sdk.ErrHostUnavailable, Message: fmt.Sprintf("sdktest: no model reply scripted for call %d", i)}
		}
		m := msgs[i]
		if m.Role == "" {
			m.Role = "assistant"
		}
		return sdk.ModelResponse{Message: m}, nil
	}
}

// ListTools scripts Tools to list specs.
func ListTools(specs ...sdk.ToolSpec) func(context.Context) ([]sdk.ToolSpec, error) {
	return func(context.Context) ([]sdk.ToolSpec, error) { return slices.Clone(specs), nil }
}

// Delegate calls the tool task.delegate through CallTool, as the SDK's
// host does.
func (h *Host) Delegate(ctx context.Context, req sdk.DelegateRequest) (string, error) {
	return sdk.DelegateVia(ctx, h, req)
}
