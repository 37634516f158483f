package sdktest_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

func TestUnscriptedCalls(t *testing.T) {
	h := &sdktest.Host{}
	ctx := context.Background()
	_, errModel := h.CallModel(ctx, sdk.ModelRequest{})
	_, errTool := h.CallTool(ctx, sdk.ToolRequest{Name: "shell.run"})
	d, errApproval := h.RequestApproval(ctx, "may I?")
	v, errInput := h.RequestInput(ctx, "what?")
	errProgress := h.Progress(ctx, "half way")
	specs, errTools := h.Tools(ctx)
	for name, err := range map[string]error{"CallModel": errModel, "CallTool": errTool, "RequestApproval": errApproval, "RequestInput": errInput} {
		if !errors.Is(err, sdk.ErrUnimplemented) {
			t.Errorf("unscripted %s = %v, want sdk.ErrUnimplemented", name, err)
		}
	}
	if d == sdk.Approved || v != nil {
		t.Errorf("an unscripted approval was granted (%q) or a question answered (%s)", d, v)
	}
	if errProgress != nil || errTools != nil || specs != nil {
		t.Errorf("Progress = %v, Tools = %v %v; want success with no tools", errProgress, specs, errTools)
	}
	want := []sdktest.Method{sdktest.CallModel, sdktest.CallTool, sdktest.RequestApproval, sdktest.RequestInput, sdktest.Progress, sdktest.Tools}
	if got := h.Methods(); !reflect.DeepEqual(got, want) {
		t.Errorf("methods = %v, want %v", got, want)
	}
	if calls := h.Calls(); !errors.Is(calls[0].Err, sdk.ErrUnimplemented) || calls[4].Err != nil || calls[3].Prompt != "what?" {
		t.Errorf("recorded %+v", calls)
	}
	if n, p := h.Notes(), h.Prompts(); !reflect.DeepEqual(n, []string{"half way"}) || !reflect.DeepEqual(p, []string{"may I?"}) {
		t.Errorf("notes %q prompts %q", n, p)
	}
}

func TestScriptedCallsAreRecorded(t *testing.T) {
	boom := &sdk.HostError{Kind: sdk.ErrBudgetExhausted, Message: "tool_calls"}
	h := &sdktest.Host{
		CallModelF: sdktest.Replies(sdk.Message{Content: "first"}),
		CallToolF: func(_ context.Context, req sdk.ToolRequest) (sdk.ToolResponse, error) {
			if req.Name == "denied" {
				return sdk.ToolResponse{}, boom
			}
			return sdk.ToolResponse{Result: `{"ok":true}`}, nil
		},
		RequestApprovalF: func(context.Context, string) (sdk.Decision, error) { return sdk.Rejected, nil },
		ToolsF:           sdktest.ListTools(sdk.ToolSpec{Name: "workspace.read"}),
	}
	ctx := context.Background()
	resp, err := h.CallModel(ctx, sdk.ModelRequest{Messages: []sdk.Message{{Role: "user", Content: "hi"}}})
	if err != nil || resp.Message.Role != "assistant" || resp.Message.Content != "first" {
		t.Fatalf("first reply %+v %v", resp, err)
	}
	if _, err := h.CallModel(ctx, sdk.ModelRequest{}); !errors.Is(err, sdk.ErrHostUnavailable) {
		t.Errorf("a reply past the script = %v, want sdk.ErrHostUnavailable", err)
	}
	if _, err := h.CallTool(ctx, sdk.ToolRequest{Name: "denied"}); !errors.Is(err, sdk.ErrBudgetExhausted) {
		t.Errorf("scripted tool error = %v", err)
	}
	if d, err := h.RequestApproval(ctx, "p"); d != sdk.Rejected || err != nil {
		t.Errorf("approval = %q %v", d, err)
	}
	specs, err := h.Tools(ctx)
	if err != nil || len(specs) != 1 || specs[0].Name != "workspace.read" {
		t.Errorf("tools = %+v %v", specs, err)
	}
	if tr := h.ToolRequests(); len(tr) != 1 || tr[0].Name != "denied" {
		t.Errorf("tool requests = %+v", tr)
	}
	if calls := h.Calls(); calls[2].Err != boom {
		t.Errorf("recorded tool error = %v, want the scripted one", calls[2].Err)
	}
}

// An executor reusing its history slice must not rewrite what was sent.
func TestModelRequestRecordedAsSent(t *testing.T) {
	h := &sdktest.Host{CallModelF: func(_ context.Context, req sdk.ModelRequest) (sdk.ModelResponse, error) {
		req.Messages[0].Content = "changed by the script"
		return sdk.ModelResponse{}, nil
	}}
	msgs := []sdk.Message{{Role: "user", Content: "original", ToolCalls: []sdk.ToolCall{{ID: "a"}}}}
	if _, err := h.CallModel(context.Background(), sdk.ModelRequest{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	msgs[0].Content, msgs[0].ToolCalls[0].ID = "rewritten", "b"
	got := h.ModelRequests()[0].Messages[0]
	if got.Content != "original" || got.ToolCalls[0].ID != "a" {
		t.Errorf("recorded %+v, want the message as sent", got)
	}
}

func TestEndedContextAndEndedStep(t *testing.T) {
	called := false
	h := &sdktest.Host{ProgressF: func(context.Context, string) error { called = true; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Progress(ctx, "late"); !errors.Is(err, context.Canceled) {
		t.Errorf("call on an ended context = %v, want context.Canceled", err)
	}
	h.End()
	if err := h.Progress(context.Background(), "leaked"); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("call after End = %v, want sdk.ErrPermissionDenied", err)
	}
	if called {
		t.Error("ProgressF ran for a refused call")
	}
	if n := len(h.Calls()); n != 2 {
		t.Errorf("%d calls recorded, want the 2 refused ones", n)
	}
}

// A call blocked in its function is already in the record.
func TestBlockedCallIsRecorded(t *testing.T) {
	release := make(chan struct{})
	h := &sdktest.Host{CallToolF: func(ctx context.Context, _ sdk.ToolRequest) (sdk.ToolResponse, error) {
		<-release
		return sdk.ToolResponse{}, nil
	}}
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = h.CallTool(context.Background(), sdk.ToolRequest{Name: "slow"}) })
	deadline := time.Now().Add(10 * time.Second)
	for len(h.Calls()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("call never recorded while blocked")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if c := h.Calls(); len(c) != 1 || c[0].Tool.Name != "slow" || c[0].Err != nil {
		t.Errorf("calls = %+v", c)
	}
}

func TestConcurrentCalls(t *testing.T) {
	h := &sdktest.Host{CallModelF: sdktest.Replies(make([]sdk.Message, 50)...)}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := h.CallModel(context.Background(), sdk.ModelRequest{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(h.ModelRequests()); n != 50 {
		t.Errorf("%d model calls recorded, want 50", n)
	}
}
