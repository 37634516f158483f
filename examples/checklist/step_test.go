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
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// toolAnswers scripts CallTool to answer every call with resp and err.
func toolAnswers(resp sdk.ToolResponse, err error) func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) {
	return func(context.Context, sdk.ToolRequest) (sdk.ToolResponse, error) { return resp, err }
}

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
	h := &sdktest.Host{CallToolF: toolAnswers(sdk.ToolResponse{Result: `{"bytes":8}`}, nil)}
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
	calls := h.ToolRequests()
	if len(calls) != 3 {
		t.Fatalf("%d tool calls, want 3", len(calls))
	}
	var args struct{ Path, Content string }
	if err := json.Unmarshal([]byte(calls[1].Arguments), &args); err != nil {
		t.Fatal(err)
	}
	if calls[1].Name != "workspace.write" || args.Path != "items/2.txt" || args.Content != "water the plants" || calls[1].IdempotencyKey != "checklist/t1/item/2" {
		t.Errorf("second call = %+v", calls[1])
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
		host       *sdktest.Host
		wantReason string
		wantMsg    string
	}{
		{"no checklist", `{"goal":"g"}`, nil, &sdktest.Host{}, "executor_failed", `"checklist" is missing`},
		{"unknown option", `{"goal":"g","checklist":{"items":["a"],"pace":1}}`, nil, &sdktest.Host{}, "executor_failed", `unknown field "pace"`},
		{"empty item", `{"goal":"g","checklist":{"items":[" "]}}`, nil, &sdktest.Host{}, "executor_failed", "checklist.items[0]"},
		{"foreign schema", threeItems, &sdk.Checkpoint{Schema: "checklist/2", Payload: []byte(`{"next":1}`)}, &sdktest.Host{}, "checkpoint_incompatible", `schema "checklist/2"`},
		{"position past the end", threeItems, &sdk.Checkpoint{Schema: SchemaV1, Payload: []byte(`{"next":3}`)}, &sdktest.Host{}, "checkpoint_incompatible", "next is 3"},
		{"write refused", threeItems, nil, &sdktest.Host{CallToolF: toolAnswers(sdk.ToolResponse{}, &sdk.HostError{Kind: sdk.ErrPermissionDenied, Message: "no"})}, "executor_failed", "write items/1.txt"},
		{"write failed", threeItems, nil, &sdktest.Host{CallToolF: toolAnswers(sdk.ToolResponse{IsError: true, Result: "disk full"}, nil)}, "executor_failed", "disk full"},
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
	h := &sdktest.Host{}
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
	if n := len(h.ToolRequests()); n != 0 {
		t.Errorf("a cancelled step wrote %d items", n)
	}
}
