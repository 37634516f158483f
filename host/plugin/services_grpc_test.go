package plugin

import (
	"context"
	"errors"
	"reflect"
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
	t.Parallel()
	ctx := context.Background()
	rec := &recordingServices{}
	srv := NewServicesServer(rec)
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
	if _, err := NewServicesServer(NoServices{}).Progress(ctx, &pb.ProgressRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("NoServices progress: %v, want Unimplemented", err)
	}
}
