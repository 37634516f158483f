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
	conns  *hostConns
	gate   *stepGate
	logger hclog.Logger
}

func newExecutorServer(e Executor, dial dialFunc, gate *stepGate, logger hclog.Logger) *executorServer {
	return &executorServer{exec: e, conns: newHostConns(dial), gate: gate, logger: logger}
}

func (s *executorServer) Describe(context.Context, *executorpb.DescribeRequest) (*executorpb.DescribeResponse, error) {
	return describeToPB(s.exec.Describe()), nil
}

// Step runs one step.
//
// A panic in the executor is deliberately not recovered: it crashes the
// plugin process, the in-flight call fails with Unavailable, and the host
// records an interrupted attempt (executor_crashed) with the panic lines
// from stderr. Turning it into a Fail would let an executor in an unknown
// state go on to the next step, and would hide a crash as an ordinary
// failure.
func (s *executorServer) Step(ctx context.Context, in *executorpb.StepRequest) (*executorpb.StepResponse, error) {
	ctx, leave, err := s.gate.enter(ctx)
	switch {
	case errors.Is(err, errStepRunning):
		return nil, status.Error(codes.FailedPrecondition, "sdk: "+err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, "sdk: "+err.Error())
	}
	defer leave()

	host := s.stepHost(in)
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
	if n := proto.Size(out); n > maxMessageBytes {
		// Sent as is, grpc would fail the call with ResourceExhausted and the
		// host would see a transport error; a typed failure names the cause.
		return oversizedResponse(res, n), nil
	}
	return out, nil
}

// stepHost builds the Host of one step. A host that announced no endpoint
// (id 0) offers no services; one whose endpoint cannot be dialled is
// unavailable. Either way the step runs: an executor that needs no host
// call can still make progress, and one that does gets a typed error.
func (s *executorServer) stepHost(in *executorpb.StepRequest) *stepHost {
	h := &stepHost{token: in.GetTurnToken()}
	id := in.GetHostServicesId()
	if id == 0 {
		h.unavailable = &HostError{Kind: ErrUnimplemented, Message: "the host offers no host services to this step"}
		return h
	}
	client, err := s.conns.client(id)
	if err != nil {
		s.logger.Error("host services unavailable", "broker_id", id, "error", err)
		h.unavailable = &HostError{Kind: ErrHostUnavailable, Message: err.Error()}
		return h
	}
	h.client = client
	return h
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
