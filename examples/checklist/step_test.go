package checklist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
)

// fakeHost is an sdk.Host that records tool calls and answers them with
// toolResult.
type fakeHost struct {
	calls      []sdk.ToolRequest
	toolResult sdk.ToolResponse
	toolErr    error
}

func (h *fakeHost) CallModel(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
	return sdk.ModelResponse{}, &sdk.HostError{Kind: sdk.ErrUnimplemented}
}

func (h *fakeHost) CallTool(_ context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error) {
	h.calls = append(h.calls, req)
	return h.toolResult, h.toolErr
}

func (h *fakeHost) RequestApproval(context.Context, string) (sdk.Decision, error) {
	return "", &sdk.HostError{Kind: sdk.ErrUnimplemented}
}

func (h *fakeHost) Progress(context.Context, string) error { return nil }

func (h *fakeHost) Tools(context.Context) ([]sdk.ToolSpec, error) { return nil, nil }

const threeItems = `{"goal":"g","checklist":{"items":["buy milk","water the plants","call the bank"]}}`

func step(t *testing.T, ctx context.Context, h sdk.Host, spec string, cp *sdk.Checkpoint) sdk.StepResult {
	t.Helper()
	res, err := Executor{}.Step(ctx, h, sdk.StepRequest{TaskID: "t1", Spec: []byte(spec), Checkpoint: cp})
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	return res
}

func TestStepsWorkThroughTheList(t *testing.T) {
	h := &fakeHost{toolResult: sdk.ToolResponse{Result: `{"bytes":8}`}}
	var cp *sdk.Checkpoint
	for n := 1; n <= 3; n++ {
		res := step(t, context.Background(), h, threeItems, cp)
		want := sdk.OutcomeContinue
		if n == 3 {
			want = sdk.OutcomeComplete
		}
		if res.Outcome != want {
			t.Fatalf("step %d: %v %q %q, want %v", n, res.Outcome, res.Reason, res.Message, want)
		}
		if res.Checkpoint == nil || res.Checkpoint.Schema != SchemaV1 || string(res.Checkpoint.Payload) != fmt.Sprintf(`{"next":%d}`, n) {
			t.Fatalf("step %d: checkpoint %+v", n, res.Checkpoint)
		}
		cp = res.Checkpoint
	}
	if len(h.calls) != 3 {
		t.Fatalf("%d tool calls, want 3", len(h.calls))
	}
	var args struct{ Path, Content string }
	if err := json.Unmarshal([]byte(h.calls[1].Arguments), &args); err != nil {
		t.Fatal(err)
	}
	if h.calls[1].Name != "workspace.write" || args.Path != "items/2.txt" || args.Content != "water the plants" || h.calls[1].IdempotencyKey != "checklist/t1/item/2" {
		t.Errorf("second call = %+v", h.calls[1])
	}
	res := step(t, context.Background(), h, threeItems, &sdk.Checkpoint{Schema: SchemaV1, Payload: []byte(`{"next":2}`)})
	if string(res.Result) != `{"items":3,"files":["items/1.txt","items/2.txt","items/3.txt"]}` {
		t.Errorf("result = %s", res.Result)
	}
}

func TestStepFailsClosed(t *testing.T) {
	tests := []struct {
		name, spec string
		cp         *sdk.Checkpoint
		host       *fakeHost
		wantReason string
		wantMsg    string
	}{
		{"no checklist", `{"goal":"g"}`, nil, &fakeHost{}, "executor_failed", `"checklist" is missing`},
		{"unknown option", `{"goal":"g","checklist":{"items":["a"],"pace":1}}`, nil, &fakeHost{}, "executor_failed", `unknown field "pace"`},
		{"empty item", `{"goal":"g","checklist":{"items":[" "]}}`, nil, &fakeHost{}, "executor_failed", "checklist.items[0]"},
		{"foreign schema", threeItems, &sdk.Checkpoint{Schema: "checklist/2", Payload: []byte(`{"next":1}`)}, &fakeHost{}, "checkpoint_incompatible", `schema "checklist/2"`},
		{"position past the end", threeItems, &sdk.Checkpoint{Schema: SchemaV1, Payload: []byte(`{"next":3}`)}, &fakeHost{}, "checkpoint_incompatible", "next is 3"},
		{"write refused", threeItems, nil, &fakeHost{toolErr: &sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: "no"}}, "executor_failed", "write items/1.txt"},
		{"write failed", threeItems, nil, &fakeHost{toolResult: sdk.ToolResponse{IsError: true, Result: "disk full"}}, "executor_failed", "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := step(t, context.Background(), tt.host, tt.spec, tt.cp)
			if res.Outcome != sdk.OutcomeFail || res.Reason != tt.wantReason || !strings.Contains(res.Message, tt.wantMsg) {
				t.Errorf("Step = %v %q %q, want fail %q with %q", res.Outcome, res.Reason, res.Message, tt.wantReason, tt.wantMsg)
			}
		})
	}
}

func TestStepReturnsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &fakeHost{}
	done := make(chan error, 1)
	go func() {
		_, err := Executor{}.Step(ctx, h, sdk.StepRequest{Spec: []byte(`{"goal":"g","checklist":{"items":["a"],"pace_ms":60000}}`)})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Step = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Step did not return after its context was cancelled")
	}
	if len(h.calls) != 0 {
		t.Errorf("a cancelled step wrote %d items", len(h.calls))
	}
}
