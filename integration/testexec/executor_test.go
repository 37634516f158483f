package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/taskhost/taskhost/sdk"
	"github.com/taskhost/taskhost/sdk/sdktest"
)

// modelAnswers scripts CallModel to answer "ok", or to fail with err.
func modelAnswers(err error) func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
	return func(context.Context, sdk.ModelRequest) (sdk.ModelResponse, error) {
		return sdk.ModelResponse{Message: sdk.Message{Role: "assistant", Content: "ok"}}, err
	}
}

func progressFails(err error) func(context.Context, string) error {
	return func(context.Context, string) error { return err }
}

func stepReq(spec string, attempt int, cp *sdk.Checkpoint) sdk.StepRequest {
	return sdk.StepRequest{TaskID: "t", Attempt: int64(attempt), Spec: []byte(spec), Checkpoint: cp}
}

func runStep(t *testing.T, ctx context.Context, host sdk.Host, req sdk.StepRequest) sdk.StepResult {
	t.Helper()
	res, err := (&executor{stderr: os.Stderr}).Step(ctx, host, req)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	return res
}

func TestStepsCountThroughCheckpoints(t *testing.T) {
	spec := `{"goal":"count","testexec":{"steps":3}}`
	var cp *sdk.Checkpoint
	for n := 1; n <= 3; n++ {
		res := runStep(t, context.Background(), &sdktest.Host{}, stepReq(spec, n, cp))
		want := `{"done":` + strconv.Itoa(n) + `}`
		if res.Checkpoint == nil || res.Checkpoint.Schema != "testexec/1" || string(res.Checkpoint.Payload) != want {
			t.Fatalf("step %d checkpoint = %+v, want %s", n, res.Checkpoint, want)
		}
		if n < 3 {
			if res.Outcome != sdk.OutcomeContinue || res.Summary != "step "+strconv.Itoa(n) {
				t.Fatalf("step %d = %v %q, want continue", n, res.Outcome, res.Summary)
			}
		} else if res.Outcome != sdk.OutcomeComplete || res.Summary != "done after 3 steps" || string(res.Result) != `{"steps":3}` {
			t.Fatalf("step 3 = %v %q %s, want complete", res.Outcome, res.Summary, res.Result)
		}
		cp = res.Checkpoint
	}
}

func TestStepRetryDoesNotCountTwice(t *testing.T) {
	// A re-run attempt gets the same checkpoint and makes the same step.
	spec := `{"testexec":{"steps":5}}`
	cp := &sdk.Checkpoint{Schema: "testexec/1", Payload: []byte(`{"done":2}`)}
	for attempt := 3; attempt <= 4; attempt++ {
		res := runStep(t, context.Background(), &sdktest.Host{}, stepReq(spec, attempt, cp))
		if res.Summary != "step 3" || string(res.Checkpoint.Payload) != `{"done":3}` {
			t.Fatalf("attempt %d = %q %s", attempt, res.Summary, res.Checkpoint.Payload)
		}
	}
}

func TestStepScriptedOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		spec        string
		cp          *sdk.Checkpoint
		wantOutcome sdk.Outcome
		wantReason  string
		wantText    string // in the message (fail) or summary
	}{
		{"invalid spec", `{"testexec":{"sleep":1}}`, nil, sdk.OutcomeFail, "executor_failed", `testexec: spec: json: unknown field "sleep"`},
		{"foreign checkpoint schema", `{"testexec":{"steps":5}}`, &sdk.Checkpoint{Schema: "other/1", Payload: []byte(`{}`)}, sdk.OutcomeFail, "checkpoint_incompatible", `schema "other/1"`},
		{"corrupt checkpoint", `{"testexec":{"steps":5}}`, &sdk.Checkpoint{Schema: "testexec/1", Payload: []byte(`{`)}, sdk.OutcomeFail, "checkpoint_incompatible", "checkpoint payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runStep(t, context.Background(), &sdktest.Host{}, stepReq(tt.spec, 1, tt.cp))
			if res.Outcome != tt.wantOutcome || res.Reason != tt.wantReason {
				t.Fatalf("Step = %+v, want %v %q", res, tt.wantOutcome, tt.wantReason)
			}
			if !strings.Contains(res.Message+res.Summary, tt.wantText) {
				t.Fatalf("Step = %+v, want text %q", res, tt.wantText)
			}
		})
	}
}

func TestStepPaddingAndBadSchema(t *testing.T) {
	res := runStep(t, context.Background(), &sdktest.Host{},
		stepReq(`{"testexec":{"checkpoint_bytes":1000,"result_bytes":5000,"bad_schema":true}}`, 1, nil))
	if got := len(res.Checkpoint.Payload); got != 1000 {
		t.Errorf("checkpoint payload is %d bytes, want 1000", got)
	}
	if got := len(res.Result); got != 5000 {
		t.Errorf("result is %d bytes, want 5000", got)
	}
	if res.Checkpoint.Schema != "testexec/999" {
		t.Errorf("schema = %q, want testexec/999", res.Checkpoint.Schema)
	}
	var r result
	if err := json.Unmarshal(res.Result, &r); err != nil || r.Steps != 1 {
		t.Errorf("padded result %q does not decode to steps 1: %v", res.Result[:20], err)
	}
	// A padded checkpoint reads back as the same state.
	res.Checkpoint.Schema = "testexec/1"
	if done, err := readCheckpoint(res.Checkpoint); err != nil || done != 1 {
		t.Errorf("readCheckpoint(padded) = (%d, %v), want 1", done, err)
	}
}

func TestStepHostCalls(t *testing.T) {
	unimpl := &sdk.HostError{Kind: sdk.ErrUnimplemented, Message: "CallModel: no model"}
	tests := []struct {
		name        string
		host        *sdktest.Host
		wantSummary string
		wantErr     bool
	}{
		{"all served", &sdktest.Host{CallModelF: modelAnswers(nil)}, "step 1", false},
		{"no progress service is fine", &sdktest.Host{CallModelF: modelAnswers(nil), ProgressF: progressFails(unimpl)}, "step 1", false},
		{"progress refused fails the step", &sdktest.Host{CallModelF: modelAnswers(nil), ProgressF: progressFails(&sdk.HostError{Kind: sdk.ErrPermissionDenied})}, "", true},
		{"model unimplemented", &sdktest.Host{CallModelF: modelAnswers(unimpl)}, "model error: unimplemented", false},
		{"model budget", &sdktest.Host{CallModelF: modelAnswers(&sdk.HostError{Kind: sdk.ErrBudgetExhausted})}, "model error: budget_exhausted", false},
		{"model other", &sdktest.Host{CallModelF: modelAnswers(errors.New("boom"))}, "model error: other", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := (&executor{}).Step(context.Background(), tt.host,
				stepReq(`{"goal":"the goal","testexec":{"steps":2,"progress":true,"call_model":true}}`, 1, nil))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Step = %+v, want an error", res)
				}
				return
			}
			if err != nil || res.Summary != tt.wantSummary {
				t.Fatalf("Step = (%+v, %v), want summary %q", res, err, tt.wantSummary)
			}
			if strings.HasPrefix(tt.wantSummary, "model error") && res.Checkpoint != nil {
				t.Errorf("a model error must keep the previous checkpoint, got %+v", res.Checkpoint)
			}
			if notes := tt.host.Notes(); len(notes) != 1 || notes[0] != "step 1" {
				t.Errorf("progress notes = %q", notes)
			}
			if models := tt.host.ModelRequests(); len(models) != 1 || models[0].Messages[0].Content != "the goal" {
				t.Errorf("model calls = %+v", models)
			}
		})
	}
}

func TestStepCancelWritesMarker(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "cancelled")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The step calls Progress before it sleeps: cancel from there.
	host := &sdktest.Host{ProgressF: func(context.Context, string) error { cancel(); return nil }}
	spec := `{"testexec":{"sleep_ms":60000,"progress":true,"cancel_marker":"` + marker + `"}}`
	_, err := (&executor{}).Step(ctx, host, stepReq(spec, 2, nil))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Step error = %v, want context.Canceled", err)
	}
	got, err := os.ReadFile(marker)
	if err != nil || string(got) != "cancelled attempt=2" {
		t.Fatalf("marker = (%q, %v), want %q", got, err, "cancelled attempt=2")
	}
}

func TestStepNoMarkerWithoutCancel(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "cancelled")
	runStep(t, context.Background(), &sdktest.Host{}, stepReq(`{"testexec":{"sleep_ms":1,"cancel_marker":"`+marker+`"}}`, 1, nil))
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marker written for a step that was not cancelled: %v", err)
	}
}

func TestStepPIDFile(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "plugin.pid")
	spec := `{"testexec":{"steps":3,"pid_file":"` + pidFile + `"}}`
	res := runStep(t, context.Background(), &sdktest.Host{}, stepReq(spec, 1, nil))
	runStep(t, context.Background(), &sdktest.Host{}, stepReq(spec, 2, res.Checkpoint))

	pid, err := os.ReadFile(pidFile)
	if err != nil || string(pid) != strconv.Itoa(os.Getpid()) {
		t.Errorf("pid file = (%q, %v), want %d", pid, err, os.Getpid())
	}
	log, err := os.ReadFile(pidFile + ".log")
	if want := "attempt 1 started\nattempt 2 started\n"; err != nil || string(log) != want {
		t.Errorf("pid log = (%q, %v), want %q", log, err, want)
	}
}
