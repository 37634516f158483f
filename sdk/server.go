package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/taskhost/taskhost/shared/proto/executorpb"
)

// executorServer is the plugin side of the Executor gRPC service: it turns
// protocol messages into SDK types, runs the executor, and turns its result
// back.
type executorServer struct {
	executorpb.UnimplementedExecutorServer

	exec   Executor
	gate   *stepGate
	logger hclog.Logger
}

func newExecutorServer(e Executor, gate *stepGate, logger hclog.Logger) *executorServer {
	return &executorServer{exec: e, gate: gate, logger: logger}
}

func (s *executorServer) Describe(context.Context, *executorpb.DescribeRequest) (*executorpb.DescribeResponse, error) {
	return describeToPB(s.exec.Describe()), nil
}

// RunStep runs one step on its stream: the host's first message is the
// step, the executor's host calls travel on the same stream, and the last
// message is the result. The stream's context is the step's.
//
// A panic in the executor is deliberately not recovered: it crashes the
// plugin process, the stream breaks, and the host records an interrupted
// attempt (executor_crashed) with the panic lines from stderr. Turning it
// into a Fail would let an executor in an unknown state go on to the next
// step, and would hide a crash as an ordinary failure.
func (s *executorServer) RunStep(stream executorpb.Executor_RunStepServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	in := first.GetStep()
	if in == nil {
		return status.Error(codes.InvalidArgument, "sdk: the first message of a step stream must be the step")
	}
	ctx, leave, err := s.gate.enter(stream.Context())
	switch {
	case errors.Is(err, errStepRunning):
		return status.Error(codes.FailedPrecondition, "sdk: "+err.Error())
	case err != nil:
		return status.Error(codes.Unavailable, "sdk: "+err.Error())
	}
	ctx, abort := context.WithCancel(ctx)
	defer abort()
	calls := newStreamCalls(stream)
	go calls.receive(abort)

	out, err := s.step(ctx, in, calls)
	// The step is over once the executor returned: the gate admits the
	// next one before the host can read this one's result and send it.
	leave()
	if perr := calls.protocolError(); perr != nil {
		return status.Error(codes.Internal, "sdk: "+perr.Error())
	}
	if err != nil {
		return err
	}
	return calls.send(&executorpb.PluginMessage{Msg: &executorpb.PluginMessage_Result{Result: out}})
}

// step runs one step with host calls made through client, and returns its
// response or the status that ends the stream instead.
func (s *executorServer) step(ctx context.Context, in *executorpb.StepRequest, client executorpb.HostServicesClient) (*executorpb.StepResponse, error) {
	host := &stepHost{token: in.GetTurnToken(), client: client}
	res, err := s.exec.Step(ctx, host, stepRequestFromPB(in))
	host.end()

	// The host cancelled the step (task cancelled, run stopped) or the
	// plugin is stopping: whatever the executor returned is moot, and
	// reporting the cancellation keeps a half-done step from reading as an
	// outcome.
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, status.FromContextError(ctxErr).Err()
	}
	if err != nil {
		return failResponse(reasonExecutorFailed, err.Error()), nil
	}
	out := stepResultToPB(res)
	// The result travels wrapped in a PluginMessage: a few bytes more.
	if n := proto.Size(&executorpb.PluginMessage{Msg: &executorpb.PluginMessage_Result{Result: out}}); n > maxMessageBytes {
		// Sent as is, grpc would fail the stream with ResourceExhausted and
		// the host would see a broken stream; a typed failure names the cause.
		return oversizedResponse(res, n), nil
	}
	return out, nil
}

// oversizedResponse names the field that made a step's response too large to
// send, using the host's reason codes.
func oversizedResponse(res StepResult, size int) *executorpb.StepResponse {
	var cpBytes int
	if res.Checkpoint != nil {
		cpBytes = len(res.Checkpoint.Payload)
	}
	reason := reasonExecutorFailed
	switch largest := max(cpBytes, len(res.Result), len(res.Summary)); {
	case largest == 0:
		// Something else (an absurd reason code) is at fault.
	case largest == cpBytes:
		reason = "checkpoint_too_large"
	case largest == len(res.Result):
		reason = "result_too_large"
	}
	return failResponse(reason, fmt.Sprintf(
		"step response of %d bytes exceeds the %d-byte message limit (checkpoint %d bytes, result %d bytes, summary %d bytes)",
		size, maxMessageBytes, cpBytes, len(res.Result), len(res.Summary)))
}
