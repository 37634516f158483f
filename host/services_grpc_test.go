package host

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/host/model"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// recordingServices is a Services whose CallModel and CallTool record what
// the adapter handed them and answer with fixed values.
type recordingServices struct {
	NoServices
	modelCall ModelCall
	toolCall  ToolCall
	err       error
}

func (r *recordingServices) CallModel(_ context.Context, c ModelCall) (ModelAnswer, error) {
	r.modelCall = c
	return ModelAnswer{Message: model.Message{Role: "assistant", ToolCalls: []model.ToolCall{{ID: "c1", Name: "t", Arguments: `{"a":1}`}}},
		CallToken: "ct", Depth: 2, Replayed: true}, r.err
}

func (r *recordingServices) CallTool(_ context.Context, c ToolCall) (ToolAnswer, error) {
	r.toolCall = c
	return ToolAnswer{Output: `{"ok":true}`, IsError: true, Replayed: true}, r.err
}

// TestServicesServerConverts: every field an executor sends reaches the
// Services, and every field of the answer reaches the executor.
func TestServicesServerConverts(t *testing.T) {
	ctx := context.Background()
	rec := &recordingServices{}
	srv := newServicesServer(rec)
	resp, err := srv.CallModel(ctx, &pb.CallModelRequest{TurnToken: "tt", ParentCallToken: "p",
		Messages: []*pb.ChatMessage{{Role: "tool", Content: "x", ToolCallId: "c0",
			ToolCalls: []*pb.ToolCall{{Id: "c0", Name: "n", ArgumentsJson: "{}"}}}},
		Tools: []*pb.ToolSpec{{Name: "n", Description: "d", ParametersJson: "{}"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := ModelCall{TurnToken: "tt", ParentCallToken: "p",
		Messages: []model.Message{{Role: "tool", Content: "x", ToolCallID: "c0", ToolCalls: []model.ToolCall{{ID: "c0", Name: "n", Arguments: "{}"}}}},
		Tools:    []model.ToolSpec{{Name: "n", Description: "d", Parameters: "{}"}}}
	if !reflect.DeepEqual(rec.modelCall, want) {
		t.Errorf("model call = %+v, want %+v", rec.modelCall, want)
	}
	if resp.GetCallToken() != "ct" || resp.GetDepth() != 2 || !resp.GetReplayed() || resp.GetMessage().GetToolCalls()[0].GetArgumentsJson() != `{"a":1}` {
		t.Errorf("model answer = %v", resp)
	}

	tresp, err := srv.CallTool(ctx, &pb.CallToolRequest{TurnToken: "tt", Name: "workspace.write", ArgumentsJson: `{"p":1}`, IdempotencyKey: "k", Idempotent: true})
	if err != nil {
		t.Fatal(err)
	}
	wantTool := ToolCall{TurnToken: "tt", Name: "workspace.write", Arguments: []byte(`{"p":1}`), IdempotencyKey: "k", Idempotent: true}
	if !reflect.DeepEqual(rec.toolCall, wantTool) {
		t.Errorf("tool call = %+v, want %+v", rec.toolCall, wantTool)
	}
	if tresp.GetResultJson() != `{"ok":true}` || !tresp.GetIsError() || !tresp.GetReplayed() {
		t.Errorf("tool answer = %v", tresp)
	}

	// A refusal reaches the executor as its status, never as an answer.
	rec.err = &ToolError{Err: errors.New("exit 1")}
	if resp, err := srv.CallTool(ctx, &pb.CallToolRequest{TurnToken: "tt"}); resp != nil || status.Code(err) != codes.Aborted {
		t.Errorf("refused call = %v, %v; want nil, Aborted", resp, err)
	}
	if _, err := newServicesServer(NoServices{}).Progress(ctx, &pb.ProgressRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("NoServices progress: %v, want Unimplemented", err)
	}
}

// TestModelRequestBounds: the message count and size limits, at the limit
// and one past it.
func TestModelRequestBounds(t *testing.T) {
	msgs := func(n, size int) []model.Message {
		out := make([]model.Message, n)
		for i := range out {
			out[i].Role = "user"
		}
		if n > 0 {
			out[0].Content = strings.Repeat("x", size)
		}
		return out
	}
	tests := []struct {
		name    string
		call    ModelCall
		wantErr string // "" accepted
	}{
		{"no messages", ModelCall{}, "needs 1..256 messages, got 0"},
		{"messages at the limit", ModelCall{Messages: msgs(maxModelMessages, 0)}, ""},
		{"messages past the limit", ModelCall{Messages: msgs(maxModelMessages+1, 0)}, "got 257"},
		{"bytes at the limit", ModelCall{Messages: msgs(1, maxMessageBytes)}, ""},
		{"bytes past the limit", ModelCall{Messages: msgs(1, maxMessageBytes+1)}, "262145 bytes, limit 262144"},
		{"tool call arguments count", ModelCall{Messages: append(msgs(1, maxMessageBytes),
			model.Message{Role: "assistant", ToolCalls: []model.ToolCall{{Arguments: "{}"}}})}, "262146 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := modelRequest(tt.call)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "messages" || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want a messages FieldError containing %q", err, tt.wantErr)
			}
		})
	}
}
