package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// runStep runs one step of an executor whose Step is fn against the fake
// broker and returns what Step returned to the host.
func runStep(t *testing.T, es *stepper, ctx context.Context, in *executorpb.StepRequest) *executorpb.StepResponse {
	t.Helper()
	resp, err := es.step(ctx, in)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	return resp
}

// hostStep is an executor whose Step runs fn with the step's Host.
func hostStep(fn func(ctx context.Context, h Host) error) Executor {
	return funcExecutor{step: func(ctx context.Context, h Host, _ StepRequest) (StepResult, error) {
		if err := fn(ctx, h); err != nil {
			return StepResult{}, err
		}
		return Continue("ok", nil), nil
	}}
}

// TestHostCalls makes every kind of host call and checks what crosses the
// wire in both directions, including the turn token the executor never
// sees.
func TestHostCalls(t *testing.T) {
	fh := &fakeHost{
		model:     &executorpb.CallModelResponse{Message: &executorpb.ChatMessage{Role: "assistant", Content: "4"}, CallToken: "c1", Depth: 1},
		tool:      &executorpb.CallToolResponse{ResultJson: `{"files":[]}`},
		decision:  "approved",
		toolSpecs: []*executorpb.ToolSpec{{Name: "ls", Description: "list", ParametersJson: `{"type":"object"}`}},
	}
	var (
		model    ModelResponse
		tool     ToolResponse
		decision Decision
		tools    []ToolSpec
	)
	es := newTestServer(t, hostStep(func(ctx context.Context, h Host) error {
		var err error
		if model, err = h.CallModel(ctx, ModelRequest{Messages: []Message{{Role: "user", Content: "2+2"}}}); err != nil {
			return err
		}
		if tool, err = h.CallTool(ctx, ToolRequest{Name: "ls", Arguments: "{}", IdempotencyKey: "k"}); err != nil {
			return err
		}
		if decision, err = h.RequestApproval(ctx, "delete it?"); err != nil {
			return err
		}
		if tools, err = h.Tools(ctx); err != nil {
			return err
		}
		return h.Progress(ctx, "halfway")
	}), fh)

	resp := runStep(t, es, context.Background(), &executorpb.StepRequest{Attempt: 1, TurnToken: "turn-1"})
	if resp.GetContinue() == nil {
		t.Fatalf("step failed: %v", resp)
	}
	if want := (ModelResponse{Message: Message{Role: "assistant", Content: "4"}, CallToken: "c1", Depth: 1}); !reflect.DeepEqual(model, want) {
		t.Errorf("CallModel = %+v, want %+v", model, want)
	}
	if want := (ToolResponse{Result: `{"files":[]}`}); tool != want {
		t.Errorf("CallTool = %+v, want %+v", tool, want)
	}
	if decision != Approved {
		t.Errorf("RequestApproval = %q, want approved", decision)
	}
	if want := []ToolSpec{{Name: "ls", Description: "list", Parameters: `{"type":"object"}`}}; !reflect.DeepEqual(tools, want) {
		t.Errorf("Tools = %+v, want %+v", tools, want)
	}
	if got, want := fh.seenTokens(), []string{"turn-1", "turn-1", "turn-1", "turn-1", "turn-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tokens at the host = %v, want %v", got, want)
	}
	fh.set(func(f *fakeHost) {
		wantModel := &executorpb.CallModelRequest{TurnToken: "turn-1", Messages: []*executorpb.ChatMessage{{Role: "user", Content: "2+2"}}}
		if len(f.models) != 1 || !proto.Equal(f.models[0], wantModel) {
			t.Errorf("host got model calls %v, want [%v]", f.models, wantModel)
		}
		wantTool := &executorpb.CallToolRequest{TurnToken: "turn-1", Name: "ls", ArgumentsJson: "{}", IdempotencyKey: "k"}
		if len(f.tools) != 1 || !proto.Equal(f.tools[0], wantTool) {
			t.Errorf("host got tool calls %v, want [%v]", f.tools, wantTool)
		}
		if !reflect.DeepEqual(f.prompts, []string{"delete it?"}) || !reflect.DeepEqual(f.notes, []string{"halfway"}) {
			t.Errorf("host got prompts %q and notes %q", f.prompts, f.notes)
		}
	})
}

// TestHostErrorMapping sends real gRPC statuses from the host and checks
// which SDK error the executor gets.
func TestHostErrorMapping(t *testing.T) {
	tests := []struct {
		code      codes.Code
		msg       string
		want      error
		hostError bool
	}{
		{codes.Unimplemented, "no model configured", ErrUnimplemented, true},
		{codes.PermissionDenied, "stale turn token", ErrPermissionDenied, true},
		{codes.ResourceExhausted, "model budget exhausted", ErrBudgetExhausted, true},
		{codes.InvalidArgument, "unknown tool", ErrInvalidArgument, true},
		{codes.Unavailable, "shutting down", ErrHostUnavailable, true},
		{codes.Internal, "store error", ErrHostUnavailable, true},
		{codes.Unknown, "?", ErrHostUnavailable, true},
		{codes.Canceled, "step cancelled", context.Canceled, false},
		{codes.DeadlineExceeded, "too slow", context.DeadlineExceeded, false},
		// grpc's own size refusal shares ResourceExhausted with budgets.
		{codes.ResourceExhausted, "grpc: received message larger than max (5 vs. 4)", ErrInvalidArgument, true},
	}
	fh := &fakeHost{}
	for _, tt := range tests {
		t.Run(tt.code.String()+"/"+tt.msg, func(t *testing.T) {
			fh.set(func(f *fakeHost) { f.err = status.Error(tt.code, tt.msg) })
			var got error
			es := newTestServer(t, hostStep(func(ctx context.Context, h Host) error {
				got = h.Progress(ctx, "note")
				return nil
			}), fh)
			runStep(t, es, context.Background(), &executorpb.StepRequest{Attempt: 1, TurnToken: "t"})

			if !errors.Is(got, tt.want) {
				t.Fatalf("error = %v, want one matching %v", got, tt.want)
			}
			var he *HostError
			if errors.As(got, &he) != tt.hostError {
				t.Fatalf("error %T: *HostError = %v, want %v", got, !tt.hostError, tt.hostError)
			}
			if !strings.Contains(got.Error(), "Progress") {
				t.Errorf("error %q does not name the call", got)
			}
		})
	}
}

// TestHostCallCancelled cancels the step while a host call is in flight.
func TestHostCallCancelled(t *testing.T) {
	fh := &fakeHost{block: true, called: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-fh.called
		cancel()
	}()
	got := make(chan error, 1)
	es := newTestServer(t, hostStep(func(ctx context.Context, h Host) error {
		_, err := h.CallTool(ctx, ToolRequest{Name: "sleep"})
		got <- err
		return err
	}), fh)
	_, err := es.step(ctx, &executorpb.StepRequest{Attempt: 1, TurnToken: "t"})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Step error = %v, want context.Canceled", err)
	}
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Errorf("CallTool error = %v, want context.Canceled", err)
	}
}

// TestHostHandleEndsWithStep keeps the Host past Step's return, as a leaked
// goroutine would, and checks it can no longer reach the host.
func TestHostHandleEndsWithStep(t *testing.T) {
	fh := &fakeHost{}
	var kept Host
	es := newTestServer(t, hostStep(func(_ context.Context, h Host) error {
		kept = h
		return nil
	}), fh)
	runStep(t, es, context.Background(), &executorpb.StepRequest{Attempt: 1, TurnToken: "t"})

	if err := kept.Progress(context.Background(), "late"); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("Progress after the step = %v, want ErrPermissionDenied", err)
	}
	if got := fh.seenTokens(); len(got) != 0 {
		t.Errorf("host got %d calls from an ended step", len(got))
	}
}

// TestHostMessageLimits checks the 4 MiB bound on host calls both ways; the
// fake host itself would accept and send more.
func TestHostMessageLimits(t *testing.T) {
	fh := &fakeHost{}
	huge := strings.Repeat("x", maxMessageBytes+1)
	var reqErr, respErr error
	es := newTestServer(t, hostStep(func(ctx context.Context, h Host) error {
		_, reqErr = h.CallModel(ctx, ModelRequest{Messages: []Message{{Role: "user", Content: huge}}})
		fh.set(func(f *fakeHost) { f.tool = &executorpb.CallToolResponse{ResultJson: huge} })
		_, respErr = h.CallTool(ctx, ToolRequest{Name: "cat"})
		return nil
	}), fh)
	runStep(t, es, context.Background(), &executorpb.StepRequest{Attempt: 1, TurnToken: "t"})

	if !errors.Is(reqErr, ErrInvalidArgument) {
		t.Errorf("oversized request: %v, want ErrInvalidArgument", reqErr)
	}
	if !errors.Is(respErr, ErrInvalidArgument) || errors.Is(respErr, ErrBudgetExhausted) {
		t.Errorf("oversized response: %v, want ErrInvalidArgument (not a budget)", respErr)
	}
	fh.set(func(f *fakeHost) {
		if len(f.models) != 0 {
			t.Error("the oversized request reached the host")
		}
	})
}

func TestHostUnknownDecisionIsNotApproval(t *testing.T) {
	fh := &fakeHost{decision: "maybe"}
	var d Decision
	var err error
	es := newTestServer(t, hostStep(func(ctx context.Context, h Host) error {
		d, err = h.RequestApproval(ctx, "ok?")
		return nil
	}), fh)
	runStep(t, es, context.Background(), &executorpb.StepRequest{Attempt: 1, TurnToken: "t"})
	if d == Approved || err == nil {
		t.Errorf("RequestApproval = (%q, %v), want an error", d, err)
	}
}

// RequestInput carries the question and the step's token to the host and
// hands back its JSON answer; an answer that is not JSON is no answer.
func TestHostRequestInput(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		ok           bool
	}{
		{"object", `{"x":1}`, true},
		{"null", `null`, true},
		{"not JSON", `{"x":`, false},
		{"empty", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fh := &fakeHost{answer: tc.answer}
			var v json.RawMessage
			var err error
			es := newTestServer(t, hostStep(func(ctx context.Context, h Host) error {
				v, err = h.RequestInput(ctx, "What is x?")
				return nil
			}), fh)
			runStep(t, es, context.Background(), &executorpb.StepRequest{Attempt: 1, TurnToken: "turn-1"})
			if tc.ok && (err != nil || string(v) != tc.answer) {
				t.Fatalf("RequestInput = %s, %v; want %s", v, err, tc.answer)
			}
			if !tc.ok && (err == nil || !errors.Is(err, ErrHostUnavailable)) {
				t.Fatalf("RequestInput = %s, %v; want ErrHostUnavailable", v, err)
			}
			fh.set(func(f *fakeHost) {
				if !reflect.DeepEqual(f.prompts, []string{"What is x?"}) || !reflect.DeepEqual(f.tokens, []string{"turn-1"}) {
					t.Errorf("host got questions %q, tokens %q", f.prompts, f.tokens)
				}
			})
		})
	}
}
