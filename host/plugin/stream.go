package plugin

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskhost/taskhost/internal/steprpc"
	pb "github.com/taskhost/taskhost/shared/proto/executorpb"
)

// The errors of a step that did not come back with a result. Step returns
// one of them, or its context's error when that ended first; the Runner
// branches on them with errors.Is and never sees a gRPC status.
var (
	// ErrConnectionLost: the step's stream to its plugin broke, as it does
	// when the process dies mid-step. The Runner records a crash.
	ErrConnectionLost = errors.New("executor connection lost")
	// ErrProtocol matches a plugin that broke the step's message sequence
	// (a call id repeated or never sent, too many calls in flight, a
	// message beyond the limit, a stream ended without a result). The
	// Runner records it as a crash of the plugin.
	ErrProtocol = steprpc.ErrProtocol
)

// StepCallError is a step the plugin refused or failed without a result:
// a second step while one runs, a plugin stopping, a panic turned into a
// status by a foreign SDK. Code is the gRPC code's name.
type StepCallError struct {
	Code    string
	Message string
}

func (e *StepCallError) Error() string { return e.Code + ": " + e.Message }

// runStep runs req as one RunStep stream: the plugin's service calls are
// answered by c.services on the same stream, and cancelling ctx cancels the
// stream and with it the plugin's step.
func (c *executorClient) runStep(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.RunStep(ctx)
	if err != nil {
		return nil, stepError(ctx, err)
	}
	res, err := steprpc.Drive(ctx, stream, req, c.services, c.limits)
	if err != nil {
		return nil, stepError(ctx, err)
	}
	return res, nil
}

// stepError types a failed step stream for the Runner: the context's error
// when it ended, a protocol error as is, a broken transport as
// ErrConnectionLost, any other status as a *StepCallError.
func stepError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("step: %w", ctxErr)
	}
	if errors.Is(err, ErrProtocol) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", ErrConnectionLost, st.Message())
	case codes.Unimplemented:
		return &StepCallError{Code: st.Code().String(), Message: st.Message() + " (a plugin of executor protocol 1? rebuild it against this taskhost's sdk)"}
	}
	return &StepCallError{Code: st.Code().String(), Message: st.Message()}
}

// pluginVersion finds the version a plugin's handshake named in
// go-plugin's refusal of it.
var pluginVersion = regexp.MustCompile(`incompatible API version with plugin\. Plugin version: (\d+)`)

// protocolMismatch is the refusal of a plugin whose handshake named another
// protocol version, in words that say what to do; nil for any other error.
func protocolMismatch(err error) error {
	m := pluginVersion.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	return fmt.Errorf("the plugin speaks executor protocol %s and this host speaks protocol %d: rebuild the executor against this taskhost's sdk (github.com/taskhost/taskhost/sdk); an executor not written in Go implements protocol %d as docs/executor-sdk.md (Wire protocol) describes",
		m[1], pb.ProtocolVersion, pb.ProtocolVersion)
}
