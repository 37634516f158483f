package sdk

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/taskhost/taskhost/internal/steprpc"
	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// TestStepOverGRPC sends requests through a real gRPC connection and checks
// what the executor sees and what the host gets back.
func TestStepOverGRPC(t *testing.T) {
	cp := &executorpb.Checkpoint{Schema: "sdktest/1", Payload: []byte(`{"n":1}`)}
	tests := []struct {
		name    string
		in      *executorpb.StepRequest
		wantReq StepRequest
		result  StepResult
		err     error
		want    *executorpb.StepResponse
	}{
		{
			name:    "continue",
			in:      &executorpb.StepRequest{TaskId: "t", RunId: 2, Attempt: 3, TurnToken: "tok", Spec: []byte(`{}`), Checkpoint: cp, Recent: []*executorpb.StepSummary{{Step: 2, Summary: "two"}}},
			wantReq: StepRequest{TaskID: "t", RunID: 2, Attempt: 3, Spec: []byte(`{}`), Checkpoint: &Checkpoint{Schema: "sdktest/1", Payload: []byte(`{"n":1}`)}, Recent: []Summary{{Step: 2, Text: "two"}}},
			result:  Continue("step 3", &Checkpoint{Schema: "sdktest/1", Payload: []byte(`{"n":2}`)}),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Continue{Continue: &executorpb.StepContinue{
				Summary: "step 3", Checkpoint: &executorpb.Checkpoint{Schema: "sdktest/1", Payload: []byte(`{"n":2}`)},
			}}},
		},
		{
			name:    "complete",
			in:      &executorpb.StepRequest{TaskId: "t", Attempt: 1},
			wantReq: StepRequest{TaskID: "t", Attempt: 1},
			result:  Complete("done", []byte(`{"steps":1}`), nil),
			want: &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Complete{Complete: &executorpb.StepComplete{
				Summary: "done", Result: []byte(`{"steps":1}`),
			}}},
		},
		{
			name:    "an error is an executor failure",
			in:      &executorpb.StepRequest{TaskId: "t", Attempt: 1},
			wantReq: StepRequest{TaskID: "t", Attempt: 1},
			err:     errors.New("parse checkpoint: unexpected EOF"),
			want:    &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Fail{Fail: &executorpb.StepFail{Reason: "executor_failed", Message: "parse checkpoint: unexpected EOF"}}},
		},
		{
			name:    "a long error is bounded",
			in:      &executorpb.StepRequest{TaskId: "t", Attempt: 1},
			wantReq: StepRequest{TaskID: "t", Attempt: 1},
			err:     errors.New(strings.Repeat("x", 10_000)),
			want:    &executorpb.StepResponse{Outcome: &executorpb.StepResponse_Fail{Fail: &executorpb.StepFail{Reason: "executor_failed", Message: strings.Repeat("x", maxFailMessageBytes)}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got StepRequest
			e := funcExecutor{step: func(_ context.Context, _ Host, req StepRequest) (StepResult, error) {
				got = req
				return tt.result, tt.err
			}}
			_, client := startExecutorServer(t, e)
			resp, err := driveStep(context.Background(), client, tt.in, nil)
			if err != nil {
				t.Fatalf("Step: %v", err)
			}
			if !reflect.DeepEqual(got, tt.wantReq) {
				t.Errorf("executor saw\n %+v\nwant\n %+v", got, tt.wantReq)
			}
			if !proto.Equal(resp, tt.want) {
				t.Errorf("response\n %v\nwant\n %v", resp, tt.want)
			}
		})
	}
}

func TestDescribeOverGRPC(t *testing.T) {
	_, client := startExecutorServer(t, funcExecutor{})
	got, err := client.Describe(context.Background(), &executorpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &executorpb.DescribeResponse{Kind: "sdktest", Version: "0.0.1", ProtocolVersion: executorpb.ProtocolVersion, CheckpointSchemas: []string{"sdktest/1"}}
	if !proto.Equal(got, want) {
		t.Errorf("Describe = %v, want %v", got, want)
	}
}

// TestStepCancelled checks the status the plugin returns for a step whose
// context ended, whatever the executor returned.
func TestStepCancelled(t *testing.T) {
	tests := []struct {
		name     string
		result   StepResult
		err      error
		deadline bool
		want     codes.Code
	}{
		{name: "executor returns ctx error", err: context.Canceled, want: codes.Canceled},
		{name: "executor returns another error", err: errors.New("tool failed"), want: codes.Canceled},
		{name: "executor ignores cancellation", result: Continue("finished anyway", nil), want: codes.Canceled},
		{name: "deadline", err: context.DeadlineExceeded, deadline: true, want: codes.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tt.deadline {
				ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			}
			e := funcExecutor{step: func(ctx context.Context, _ Host, _ StepRequest) (StepResult, error) {
				cancel()
				<-ctx.Done()
				return tt.result, tt.err
			}}
			es := newExecutorServer(e, newStepGate(), hclog.NewNullLogger())
			resp, err := es.step(ctx, &executorpb.StepRequest{Attempt: 1}, nil)
			cancel()
			if got := status.Code(err); got != tt.want {
				t.Fatalf("Step = (%v, %v), want code %v", resp, err, tt.want)
			}
		})
	}
}

// TestStepCancelReachesExecutor cancels a call on the host side of a real
// connection and checks that the executor's context ends.
func TestStepCancelReachesExecutor(t *testing.T) {
	started := make(chan struct{})
	sawCancel := make(chan error, 1)
	e := funcExecutor{step: func(ctx context.Context, _ Host, _ StepRequest) (StepResult, error) {
		close(started)
		select {
		case <-ctx.Done():
			sawCancel <- ctx.Err()
			return StepResult{}, ctx.Err()
		case <-time.After(10 * time.Second):
			sawCancel <- errors.New("context never ended")
			return Continue("not cancelled", nil), nil
		}
	}}
	_, client := startExecutorServer(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := driveStep(ctx, client, &executorpb.StepRequest{Attempt: 1}, nil)
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Step error = %v, want context.Canceled", err)
	}
	if err := <-sawCancel; !errors.Is(err, context.Canceled) {
		t.Errorf("executor saw %v, want context.Canceled", err)
	}
}

func TestStepConcurrentRefused(t *testing.T) {
	started := make(chan struct{}, 3) // room for every call, should all run
	release := make(chan struct{})
	e := funcExecutor{step: func(context.Context, Host, StepRequest) (StepResult, error) {
		started <- struct{}{}
		<-release
		return Continue("ok", nil), nil
	}}
	_, client := startExecutorServer(t, e)
	ctx := context.Background()

	first := make(chan error, 1)
	go func() {
		_, err := driveStep(ctx, client, &executorpb.StepRequest{Attempt: 1}, nil)
		first <- err
	}()
	<-started
	// Bounded: a server that queued the call instead would block here.
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := driveStep(ctx2, client, &executorpb.StepRequest{Attempt: 2}, nil)
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("concurrent Step error = %v, want FailedPrecondition", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first Step: %v", err)
	}
	// The refusal must not leave the server stuck as busy.
	if _, err := driveStep(ctx, client, &executorpb.StepRequest{Attempt: 3}, nil); err != nil {
		t.Fatalf("Step after the first finished: %v", err)
	}
}

// TestStepMessageLimits checks both directions of the 4 MiB bound on a
// server built like Serve's: an oversized response becomes a typed failure
// naming the culprit, an oversized request is refused by the server.
func TestStepMessageLimits(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxMessageBytes+1)
	fits := bytes.Repeat([]byte("x"), maxMessageBytes-1024)
	tests := []struct {
		name       string
		result     StepResult
		wantReason string // "" means the result arrives as sent
	}{
		{"checkpoint over the limit", Continue("s", &Checkpoint{Schema: "sdktest/1", Payload: big}), "checkpoint_too_large"},
		{"result over the limit", Complete("s", big, &Checkpoint{Schema: "sdktest/1", Payload: []byte("{}")}), "result_too_large"},
		{"summary over the limit", Continue(string(big), nil), "executor_failed"},
		{"result just under the limit", Complete("s", fits, nil), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := funcExecutor{step: func(context.Context, Host, StepRequest) (StepResult, error) { return tt.result, nil }}
			_, client := startExecutorServer(t, e)
			resp, err := driveStep(context.Background(), client, &executorpb.StepRequest{Attempt: 1}, nil)
			if err != nil {
				t.Fatalf("Step: %v", err)
			}
			if tt.wantReason == "" {
				if !proto.Equal(resp, stepResultToPB(tt.result)) {
					t.Fatalf("result did not arrive intact (got %d bytes)", proto.Size(resp))
				}
				return
			}
			fail := resp.GetFail()
			if fail.GetReason() != tt.wantReason || !strings.Contains(fail.GetMessage(), "exceeds the 4194304-byte message limit") {
				t.Fatalf("got %v, want a %s failure", resp, tt.wantReason)
			}
		})
	}

	t.Run("request over the limit", func(t *testing.T) {
		var called atomic.Bool
		e := funcExecutor{step: func(context.Context, Host, StepRequest) (StepResult, error) {
			called.Store(true)
			return Continue("s", nil), nil
		}}
		_, client := startExecutorServer(t, e)
		_, err := driveStep(context.Background(), client, &executorpb.StepRequest{Spec: big}, nil)
		if !errors.Is(err, steprpc.ErrProtocol) || !strings.Contains(err.Error(), "larger than max") {
			t.Fatalf("Step error = %v, want the plugin's refusal of a message larger than max", err)
		}
		if called.Load() {
			t.Fatal("executor ran on an oversized request")
		}
	})
}

func TestStepRefusedWhileStopping(t *testing.T) {
	es, client := startExecutorServer(t, funcExecutor{step: func(context.Context, Host, StepRequest) (StepResult, error) {
		t.Error("executor ran in a stopping plugin")
		return Continue("", nil), nil
	}})
	es.gate.stop(0)
	if _, err := driveStep(context.Background(), client, &executorpb.StepRequest{Attempt: 1}, nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("Step while stopping = %v, want Unavailable", err)
	}
}
