package sdk

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

func TestStepRequestFromPB(t *testing.T) {
	tests := []struct {
		name string
		in   *executorpb.StepRequest
		want StepRequest
	}{
		{
			name: "first step carries no checkpoint",
			in:   &executorpb.StepRequest{TaskId: "t1", RunId: 1, Attempt: 1, Spec: []byte(`{"goal":"g"}`)},
			want: StepRequest{TaskID: "t1", RunID: 1, Attempt: 1, Spec: []byte(`{"goal":"g"}`)},
		},
		{
			name: "every field",
			in: &executorpb.StepRequest{
				TaskId:         "t2",
				RunId:          3,
				Attempt:        7,
				TurnToken:      "secret-token",
				Spec:           []byte(`{"goal":"x"}`),
				Recent:         []*executorpb.StepSummary{{Step: 5, Summary: "five"}, {Step: 6, Summary: "six"}},
				Checkpoint:     &executorpb.Checkpoint{Schema: "s/1", Payload: []byte("state")},
				Remaining:      &executorpb.Budgets{Steps: 1, ToolCalls: 2, ModelCalls: 3, Depth: 4, WallSeconds: 5, ModelTokens: 6, OutputBytes: 7},
				Limits:         &executorpb.Budgets{Steps: 10, ToolCalls: 20, ModelCalls: 30, Depth: 40, WallSeconds: 50, ModelTokens: 60, OutputBytes: 70},
				Indeterminate:  []*executorpb.Effect{{Attempt: 6, Seq: 2, Kind: "tool", Fingerprint: "fp", IdempotencyKey: "k", Status: "indeterminate", Summary: "rm"}},
				HostServicesId: 9,
			},
			want: StepRequest{
				TaskID:        "t2",
				RunID:         3,
				Attempt:       7,
				Spec:          []byte(`{"goal":"x"}`),
				Recent:        []Summary{{Step: 5, Text: "five"}, {Step: 6, Text: "six"}},
				Checkpoint:    &Checkpoint{Schema: "s/1", Payload: []byte("state")},
				Remaining:     Budgets{Steps: 1, ToolCalls: 2, ModelCalls: 3, Depth: 4, WallSeconds: 5, ModelTokens: 6, OutputBytes: 7},
				Limits:        Budgets{Steps: 10, ToolCalls: 20, ModelCalls: 30, Depth: 40, WallSeconds: 50, ModelTokens: 60, OutputBytes: 70},
				Indeterminate: []Effect{{Attempt: 6, Seq: 2, Kind: "tool", Fingerprint: "fp", IdempotencyKey: "k", Status: "indeterminate", Summary: "rm"}},
			},
		},
		{
			name: "an empty checkpoint is still a checkpoint",
			in:   &executorpb.StepRequest{Checkpoint: &executorpb.Checkpoint{Schema: "s/1"}},
			want: StepRequest{Checkpoint: &Checkpoint{Schema: "s/1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stepRequestFromPB(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("stepRequestFromPB:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestStepResultToPB(t *testing.T) {
	long := strings.Repeat("é", 1500) // 3000 bytes, 2 bytes a rune
	tests := []struct {
		name string
		in   StepResult
		want *executorpb.StepResponse
	}{
		{
			name: "continue with checkpoint",
			in:   Continue("did a thing", &Checkpoint{Schema: "s/1", Payload: []byte("p")}),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Continue{Continue: &executorpb.StepContinue{
				Summary: "did a thing", Checkpoint: &executorpb.Checkpoint{Schema: "s/1", Payload: []byte("p")},
			}}},
		},
		{
			name: "continue keeping the previous checkpoint",
			in:   Continue("nothing new", nil),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Continue{Continue: &executorpb.StepContinue{Summary: "nothing new"}}},
		},
		{
			name: "complete",
			in:   Complete("all done", []byte(`{"ok":true}`), &Checkpoint{Schema: "s/1", Payload: []byte("final")}),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Complete{Complete: &executorpb.StepComplete{
				Summary: "all done", Result: []byte(`{"ok":true}`), Checkpoint: &executorpb.Checkpoint{Schema: "s/1", Payload: []byte("final")},
			}}},
		},
		{
			name: "fail",
			in:   Fail("no_progress", "same summary three times"),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Fail{Fail: &executorpb.StepFail{Reason: "no_progress", Message: "same summary three times"}}},
		},
		{
			name: "fail without a reason is an executor failure",
			in:   Fail("", "oops"),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Fail{Fail: &executorpb.StepFail{Reason: "executor_failed", Message: "oops"}}},
		},
		{
			name: "fail message is bounded on a rune boundary",
			in:   Fail("executor_failed", long),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Fail{Fail: &executorpb.StepFail{Reason: "executor_failed", Message: long[:2000]}}},
		},
		{
			name: "a zero result is a failure, not a guess",
			in:   StepResult{},
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Fail{Fail: &executorpb.StepFail{
				Reason: "executor_failed", Message: "executor returned a step result without an outcome (Outcome(0))",
			}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stepResultToPB(tt.in); !proto.Equal(got, tt.want) {
				t.Errorf("stepResultToPB:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestHostMessagesToPB(t *testing.T) {
	req := ModelRequest{
		Messages: []Message{
			{Role: "system", Content: "be brief"},
			{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "ls", Arguments: `{"dir":"/"}`}}},
			{Role: "tool", Content: "a b", ToolCallID: "c1"},
		},
		Tools:           []ToolSpec{{Name: "ls", Description: "list", Parameters: `{"type":"object"}`}},
		ParentCallToken: "parent",
	}
	want := &executorpb.CallModelRequest{
		TurnToken: "tok",
		Messages: []*executorpb.ChatMessage{
			{Role: "system", Content: "be brief"},
			{Role: "assistant", ToolCalls: []*executorpb.ToolCall{{Id: "c1", Name: "ls", ArgumentsJson: `{"dir":"/"}`}}},
			{Role: "tool", Content: "a b", ToolCallId: "c1"},
		},
		Tools:           []*executorpb.ToolSpec{{Name: "ls", Description: "list", ParametersJson: `{"type":"object"}`}},
		ParentCallToken: "parent",
	}
	if got := modelRequestToPB("tok", req); !proto.Equal(got, want) {
		t.Errorf("modelRequestToPB:\n got %v\nwant %v", got, want)
	}

	resp := &executorpb.CallModelResponse{
		Message:   &executorpb.ChatMessage{Role: "assistant", Content: "hi", ToolCalls: []*executorpb.ToolCall{{Id: "c2", Name: "cat", ArgumentsJson: "{}"}}},
		CallToken: "call-1",
		Depth:     2,
		Replayed:  true,
	}
	wantResp := ModelResponse{
		Message:   Message{Role: "assistant", Content: "hi", ToolCalls: []ToolCall{{ID: "c2", Name: "cat", Arguments: "{}"}}},
		CallToken: "call-1",
		Depth:     2,
		Replayed:  true,
	}
	if got := modelResponseFromPB(resp); !reflect.DeepEqual(got, wantResp) {
		t.Errorf("modelResponseFromPB:\n got %+v\nwant %+v", got, wantResp)
	}

	tool := toolRequestToPB("tok", ToolRequest{Name: "rm", Arguments: `{"f":"x"}`, IdempotencyKey: "k1"})
	if want := (&executorpb.CallToolRequest{TurnToken: "tok", Name: "rm", ArgumentsJson: `{"f":"x"}`, IdempotencyKey: "k1"}); !proto.Equal(tool, want) {
		t.Errorf("toolRequestToPB:\n got %v\nwant %v", tool, want)
	}
	gotTool := toolResponseFromPB(&executorpb.CallToolResponse{ResultJson: `"ok"`, IsError: true, Replayed: true})
	if want := (ToolResponse{Result: `"ok"`, IsError: true, Replayed: true}); gotTool != want {
		t.Errorf("toolResponseFromPB = %+v, want %+v", gotTool, want)
	}
}

func TestValidateDescription(t *testing.T) {
	tests := []struct {
		name    string
		d       Description
		wantErr string
	}{
		{"valid", Description{Kind: "legacy_v2-x", Version: "1.0.0"}, ""},
		{"empty kind", Description{Version: "1"}, "kind is empty"},
		{"uppercase kind", Description{Kind: "Legacy", Version: "1"}, `kind "Legacy"`},
		{"kind with a slash", Description{Kind: "a/b", Version: "1"}, `kind "a/b"`},
		{"no version", Description{Kind: "x"}, "version is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateDescription(tt.d)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestToolSpecsFromPB(t *testing.T) {
	tests := []struct {
		name string
		in   *executorpb.ListToolsResponse
		want []ToolSpec
	}{
		{"nil response", nil, []ToolSpec{}},
		{"no tools", &executorpb.ListToolsResponse{}, []ToolSpec{}},
		{"two tools in order", &executorpb.ListToolsResponse{Tools: []*executorpb.ToolSpec{
			{Name: "b", Description: "second", ParametersJson: `{"type":"object"}`},
			{Name: "a"},
		}}, []ToolSpec{{Name: "b", Description: "second", Parameters: `{"type":"object"}`}, {Name: "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := toolSpecsFromPB(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("toolSpecsFromPB = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// startingExecutor is an Identifier whose Describe would block until its
// start-up work ends; here it never does.
type startingExecutor struct{ Executor }

func (startingExecutor) Describe() Description { select {} }

func (startingExecutor) Identity() (kind, version string) { return "slow", "2.0.0" }

type describedExecutor struct{ Executor }

func (describedExecutor) Describe() Description { return Description{Kind: "quick", Version: "1.0.0"} }

// TestIdentity: Serve validates an Identifier without calling its
// Describe, which may wait for start-up work; any other executor by its
// Describe.
func TestIdentity(t *testing.T) {
	tests := []struct {
		name string
		e    Executor
		want Description
	}{
		{"identifier", startingExecutor{}, Description{Kind: "slow", Version: "2.0.0"}},
		{"describe", describedExecutor{}, Description{Kind: "quick", Version: "1.0.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := identity(tt.e); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("identity = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// An abandon names an effect by a key the wire can carry: a zero, negative
// or over-32-bit attempt or seq is refused before it is sent.
func TestAbandonToPB(t *testing.T) {
	for _, c := range []struct {
		e  Effect
		ok bool
	}{
		{Effect{Attempt: 1, Seq: 1}, true},
		{Effect{Attempt: math.MaxUint32, Seq: math.MaxUint32}, true},
		{Effect{Attempt: 0, Seq: 1}, false},
		{Effect{Attempt: 1, Seq: -1}, false},
		{Effect{Attempt: math.MaxUint32 + 1, Seq: 1}, false},
	} {
		in, err := abandonToPB("tok", c.e)
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok=%v", c.e, err, c.ok)
			continue
		}
		if c.ok && (in.GetTurnToken() != "tok" || int64(in.GetAttempt()) != c.e.Attempt || int64(in.GetSeq()) != c.e.Seq) {
			t.Errorf("%+v: sent %v", c.e, in)
		}
		if !c.ok && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", c.e, err)
		}
	}
}
